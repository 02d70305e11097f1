//! Everything in vargr that owns a socket or a process.
//!
//! - [`Addr`], [`Listener`], [`connect`]: TCP and Unix-domain transports behind one type.
//! - [`auth`]: the HMAC challenge-response every connection passes before any frame is
//!   accepted (a sans-IO state machine plus a blocking driver used at start-up), which
//!   also derives the connection's session keys.
//! - [`seal`]: the MAC or encryption every frame after the handshake carries;
//!   [`SecureConn`] reads and writes such frames on a blocking socket.
//! - [`gate`]: listeners that run handshakes concurrently, each within one deadline, with
//!   limits on connections not yet authenticated.
//! - [`Link`]: one authenticated connection: a read buffer feeding the frame decoder and
//!   a bounded, batched write queue.
//! - [`Reactor`]: one `mio` poll loop over many links, with a waker so other threads can
//!   hand it work.
//! - stages: links run the per-link stages of `vargr-stage` (WAN emulation, compression, …).
//! - [`wireup`]: how the ranks of a parallel job find each other under `vargr run`, `mpirun` or
//!   `srun`; [`job_launch`]: what `vargr run` does to start and supervise them.
//! - [`mesh`]: tagged messages between the ranks of a job (what collectives run on).
//! - [`launch`]: starting child processes locally or through an ssh-like command template.
//! - [`runtime_dir`]: the per-user private directory for rendezvous files and sockets.
//!
//! Protocol logic (streams, filters, routing) lives in `vargr-tbon`; this crate moves
//! frames and reports what happened to them.

mod addr;
pub mod auth;
mod error;
pub mod gate;
pub mod job_launch;
pub mod launch;
mod link;
pub mod mesh;
pub mod path;
mod reactor;
pub mod runtime_dir;
pub mod seal;
mod secure;
mod shm_link;
pub mod wireup;

pub use addr::{connect, connect_once, Addr, Conn, Listener, MioConn};
pub use error::NetError;
pub use link::{Link, LinkStats, ReadOutcome};
pub use mio::Waker;
pub use path::PathInfo;
pub use reactor::{LinkId, Reactor, ReactorEvent};
pub use seal::{LinkSecurity, Protection};
pub use secure::{RecordOpener, RecordReader, RecordSealer, RecordWriter, SecureConn};
// Links run stages; the stage layer itself is I/O-free, below this crate.
pub use vargr_stage::{Stage, StageChain};
