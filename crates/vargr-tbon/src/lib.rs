//! vargr's tree-based overlay network (MRNet's model, rebuilt).
//!
//! A front-end creates a [`Network`] from a topology and a back-end program. Every node
//! starts its own children in parallel and hands each its sub-tree; each sub-tree
//! reports the back-ends it reaches. The front-end then opens [`Stream`]s on
//! [`Communicator`]s: packets multicast down, and waves of packets from the back-ends
//! are synchronised ([`vargr_filter::SyncMode`]) and reduced by transformation filters at
//! every node on their way up. Back-ends ([`Backend`]) can also message each other,
//! routed through their lowest common ancestor.
//!
//! The rest of MRNet's API is here too: receiving from any stream
//! ([`Network::recv_any`]) and, on back-ends, from one ([`Backend::recv_stream`], a
//! thread per stream); notification descriptors for programs that wait in `select`
//! ([`Network::notification_fd`]); changing a running stream's filters
//! ([`Stream::set_filter`], MRNet's `set_FilterParameters`) and giving back-ends and
//! the front-end filters of their own ([`StreamOptions::per_role`]); the tree's changes
//! one at a time for callbacks ([`TreeEvents`]); and back-ends started by another
//! launcher ([`AttachSpec`]).
//!
//! Internals: [`router`] is the per-node protocol logic, a sans-IO state machine with
//! private state (frames, timers and commands in; frames out through [`out`], and
//! deliveries to the local application), split by concern into streams and waves,
//! faults, adoption, and flow control. It owns two sub-states that know nothing of it:
//! [`clock`], the tree-based clock-skew estimation that aligns trace files, and
//! [`monitor`], the monitor plane that pulls reduced records through the tree while it
//! runs; both are handed the node's place in the tree ([`node`]) with each event.
//! `engine` drives routers over a reactor shared among a process's threads without an
//! I/O thread on the latency path, [`spawn`] instantiates the tree and [`commnode`] is
//! the internal node's main loop. [`trace`] holds the tree's event collectors and trace
//! files, and [`recovery`] has orphans of a dead commnode adopted by the nearest live
//! ancestor.
//!
//! Whole-tree behaviour is tested in `sim` (tests only): many routers wired together in
//! memory on a fake clock, with no process or socket.

mod backend;
pub mod clock;
pub mod commnode;
mod engine;
mod error;
pub mod monitor;
mod network;
pub mod node;
mod observe;
pub mod out;
pub mod proto;
pub mod recovery;
pub mod rendezvous;
pub mod router;
pub mod spawn;
pub mod stages;
pub mod trace;

pub use backend::{Backend, StartupTie};
pub use error::{fmt_ranks, Result, TbonError};
pub use network::{
    sockdir_prefix, AnyStream, AttachSpec, BackendSpec, Communicator, FilterRole, Network,
    NetworkOptions, Stream, StreamOptions, TreeEvents, FIRST_USER_STREAM,
};
pub use proto::{NodeFilters, NodeSel};
pub use recovery::{Recovery, TreeEvent};
pub use spawn::Bootstrap;
pub use stages::LinkStages;
pub use trace::{TraceDump, TraceDumpError};
pub use vargr_filter::SyncMode;
pub use vargr_trace::Alignment;
pub use vargr_wire::{Packet, Value};

#[cfg(test)]
mod sim;
