//! `vargr proxy` and `vargr vnc` (module `vnc`: Varg, the VNC proxy pair): `vargr proxy` is a pair of WAN accelerators for any TCP stream (the seed's Canidae as a
//! proxy), as a library: a sans-IO core ([`pump`]: framing, credit flow
//! control, the dedup streams) and its driver over real sockets, plus the two ends of
//! a pair ([`Proxy`]). The command line lives in vargr-cli.
//!
//! ```text
//!  client ──tcp──▶ near proxy ══════ link (dedup + zstd) ══════▶ far proxy ──tcp──▶ server
//!                  --listen ADDR[=SEG]  --peer FAR              --serve ADDR  --forward [PORT=]HOST:PORT
//! ```
//!
//! The near proxy accepts application connections and carries each over a TCP
//! connection of its own to the far proxy, which connects it to the real server. Both
//! directions cross as the two-level fingerprint protocol of `vargr-dedup`: on each side
//! a [`Sender`](vargr_dedup::Sender) for the bytes going out and a
//! [`Receiver`](vargr_dedup::Receiver) for the bytes coming in, so a
//! segment either proxy has seen before, in either direction and on any connection to
//! or from the same peer, costs a fingerprint. The segment caches persist across runs
//! (`--cache-dir`, like `vargr sync`), one per peer proxy and role
//! (`proxy-to-NAME` at the near side, `proxy-from-NAME` at the far side), opened once per
//! process and shared by every connection through
//! [`SharedCache`](vargr_dedup::cache::SharedCache).
//!
//! ```text
//! # both ends share a secret (or --secret-file FILE)
//! export VARGR_PROXY_SECRET=$(openssl rand -hex 32)
//! # near the server: connections from near proxies go to the server
//! vargr proxy --serve 0.0.0.0:7100 --forward app.example:80
//! # near the clients: one port per service, each with its segmenter
//! vargr proxy --peer far.example:7100 --listen 127.0.0.1:8080 \
//!     --listen 127.0.0.1:5901=cdc:32:128:1k
//! ```
//!
//! With several services, the far proxy picks the server by the near proxy's port:
//! `--forward 8080=app.example:80 --forward 5901=desk.example:5901`.
//!
//! A link connection runs, in order: the HMAC handshake of [`vargr_net::auth`] (a wrong
//! secret is refused and the connection closed; after it every byte travels in records
//! sealed with the connection's session keys, MACs on loopback and encryption to other
//! hosts by default, `--link-security`), a hello from the near proxy (its name,
//! the port the application connected to, the segmenter chosen for that port,
//! fingerprint width, group size), the far proxy's welcome (its name) or an abort with
//! the reason, then frames `[kind u8][len u32 LE][body]` in both directions:
//!
//! | kind | body |
//! |---|---|
//! | `DATA` | this side's sender output: the next piece of this direction's zstd stream, flushed ([`vargr_sync::zpieces`]) |
//! | `REPLY` | this side's receiver output: requests and acknowledgements |
//! | `CREDIT` | u64: application bytes this side has written to its application so far |
//! | `ABORT` | why this side gave up; the other closes its application connection with a reset |
//!
//! Inside the dedup stream, channel 0 carries application bytes and an empty message on
//! channel 1 is the end of the stream (the application shut its write side): the other
//! side shuts the write side of its application socket once everything before it is
//! written, and the other direction keeps running until it ends too.
//!
//! Design choices, and why:
//! - *Streaming cuts.* Bytes are cut with
//!   [`Segmenter::boundaries`](vargr_dedup::Segmenter::boundaries) as they arrive; when
//!   the application pauses (a read would block) the tail goes out as a last segment and
//!   the sender's group is closed ([`Sender::flush`](vargr_dedup::Sender::flush)), so an
//!   interactive protocol never waits for more bytes that are not coming. A forced cut costs about a segment of
//!   redundancy (content-defined boundaries resynchronise right after it), which adds
//!   up when the source is slower than the proxy and pauses between packets: a
//!   repeated 4 MiB download from a 40 Mbit/s server crossed in 358 KB instead of the
//!   92 KB of a fast one. `--hold 3ms` waits that long for more bytes before cutting a
//!   tail (202 KB there), at that cost in latency; the default holds nothing.
//! - *One thread per connection, poll(2) over two non-blocking sockets.* A blocking
//!   write on either socket could otherwise stall the acknowledgements of the other
//!   direction and deadlock two proxies writing to each other.
//! - *Credit flow control per direction.* A side sends application bytes only while
//!   fewer than [`WINDOW`] of them are not yet written to the far application, so the
//!   link is always read (acknowledgements keep flowing) and neither side buffers more
//!   than about a window for a slow application: as with plain TCP, one direction may
//!   stall while the other runs.
//! - *One zstd stream per direction, cut into pieces.* Each DATA frame is flushed so it
//!   decodes on arrival, yet compresses against everything before it: small interactive
//!   writes (a request line, a keystroke) cost little once their like has crossed.
//! - *Errors are not clean ends.* A failure (the other proxy died, a reset from an
//!   application, bad bytes from the peer) closes the application connection with a
//!   TCP reset, so a client never mistakes a broken transfer for a complete one. TCP
//!   keep-alives and `TCP_USER_TIMEOUT` on the link turn a vanished peer into an error.
//!
//! Every connection prints one line on stderr when it ends: application and link bytes
//! in each direction and what the protocol did, e.g.
//! `vargr proxy: connection 3 closed: from app 4194304 B → link 101234 B, from link 812 B → app 0 B; ...`.

pub mod pump;

mod caches;
mod driver;
mod error;
mod service;
mod setup;
mod vnc;
mod watch;
mod wire;

pub use error::{error_chain, ProxyError, SetupFrameError};
pub use pump::{Pump, PumpError, PumpSettings, StreamSegmenterError};
pub use service::{ConnectionReport, Event, Forwards, Listen, Proxy, ProxySettings, Report};
pub use vnc::{SessionReport, VncEvent, VncProxy, VncReport, VncSettings, VNC_LINK_VERSION};
pub use wire::{MAX_FRAME, PROXY_VERSION, WINDOW};
