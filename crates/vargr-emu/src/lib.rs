//! Longcut: WAN emulation for vargr, so a multi-site run fits on one machine.
//!
//! Experiments across clusters joined by a shared WAN are hard to repeat: the WAN's
//! traffic cannot be controlled and several clusters are rarely free at once. Longcut
//! (seed 000, ch. 8.1) instead splits one cluster (or one laptop) into sites and delays
//! every message between them as a WAN would, from a constant latency and bandwidth or
//! from a trace recorded on a real link. This crate is that emulator:
//!
//! - [`WanProfile`], [`Trace`] and [`LinkSpec`] (module [`profile`], [`trace`]): what a
//!   link looks like, with parsing of human units (`36ms`, `100mbit`, `10MB/s`) and trace
//!   files, with errors that quote the bad text or name `file:line`.
//! - [`Shaper`] (module [`shaper`]): the delay model, sans-IO. Bytes arriving at `t` are
//!   delivered at `max(t, bottleneck free) + size/bandwidth + latency ± jitter`, never
//!   reordered within a stream. Latency is **one-way**; a round trip costs twice.
//! - [`LinkEmulator`]: the model in front of a bounded delay line, for links inside a vargr
//!   process (push frames, poll them out when due).
//! - [`EmuLinkStage`] and [`WanMap`]: the stage on a vargr link between two sites, and
//!   which WAN joins which pair of sites.
//! - [`Gateways`] (module [`gateway`]): the seed's gateways, one bottleneck per pair of
//!   sites shared by the links of every process on a host, so that flows between two
//!   sites compete for one WAN.
//! - [`Relay`] / [`run_relay`] (module [`relay`]): a TCP relay that puts the emulated WAN
//!   in front of any TCP program (`vargr emu --listen .. --connect ..`).
//! - [`record`]: `vargr emu record`, which measures a real path into a trace, and the
//!   echo server at its far end.
//! - [`measure`]: the accuracy check, comparing ping-pong latency and bulk throughput
//!   through a relay with what the profile promises.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use vargr_emu::{Shaper, WanProfile};
//!
//! // 18 ms one way (a 36 ms round trip, like benedict-psgw in the seed), 8 Mbit/s.
//! let profile: WanProfile = "rtt=36ms,bandwidth=8mbit".parse()?;
//! let mut link = Shaper::new(profile, 0);
//! let t0 = Instant::now();
//! // 1000 bytes take 1 ms on the bottleneck, then 18 ms on the wire.
//! assert_eq!(link.schedule(t0, 1000), t0 + Duration::from_millis(19));
//! # Ok::<(), vargr_emu::ParseError>(())
//! ```

mod emulator;
mod error;
pub mod gateway;
mod link;
pub mod measure;
pub mod profile;
pub mod record;
pub mod relay;
pub mod shaper;
pub mod trace;
mod units;

pub use emulator::{EmulatorFull, LinkEmulator};
pub use error::{EmuError, ParseError};
pub use gateway::{Gateways, SharedBottleneck};
pub use link::{EmuLinkStage, WanMap};
pub use profile::{LinkSpec, WanProfile};
pub use relay::{
    run_relay, EventSink, Relay, RelayConfig, RelayEvent, RelayStats, Sharing, StopHandle,
};
pub use shaper::{Shaper, StreamOrder};
pub use trace::{Trace, TraceEnd, TraceRow};
pub use units::{fmt_bandwidth, fmt_duration, parse_bandwidth, parse_duration, parse_size};
