//! Collective file I/O for vargr's communicators (seed 002: ROMIO's two-phase I/O,
//! LA-Two-Phase and Dynamic-CoMPI).
//!
//! Why a crate of its own: parallel programs write one shared file from many ranks, each
//! rank holding scattered pieces of it. Writing the pieces one by one costs a seek and a
//! small write each; two-phase I/O first moves the pieces over the network to a few
//! aggregators that then write large contiguous ranges. Which rank aggregates which
//! range decides how many bytes cross between hosts: LA-Two-Phase picks them by where the
//! data already is. This crate holds the views (which bytes of the file a rank's data
//! goes to), the plan, and the exchange; communicators and compression come from
//! `vargr-coll` and its links.

pub mod assign;
mod error;
mod file;
mod plan;
pub mod view;
pub mod workload;

pub use assign::Solver;
pub use error::{ErrorClass, IoError, Result};
pub use file::{File, Hints, IoStats, Mode};
pub use plan::{Aggregation, Count, Plan};
pub use view::{Order, Run, View, ViewError};
