//! Ranks, communicators and collective algorithms (MPI-like), plus the in-process
//! transport that runs many ranks as threads of one process.
//!
//! - [`Transport`]: what algorithms need from a network (eager send, blocking receive
//!   matched by source and tag). [`InProcess`] endpoints of a [`Fabric`] implement it for
//!   threads; the socket transport in `vargr-net` implements it across processes.
//! - [`Schedule`]: one rank's part of a collective as data (sends, receives, copies,
//!   combines), built by the pure functions in [`algo`] and run by [`execute`]. Keeping
//!   algorithms sans-IO lets monitors and cost models inspect and simulate them.
//! - [`Comm`] (from a [`World`]): typed barrier, bcast, reduce, allreduce, gather(v),
//!   scatter(v), allgather(v), alltoall(v), point-to-point `send`/`recv`, `split`, `dup`.
//! - [`CondAllreduce`] (from [`Comm::conditional`]): the seed's conditional allreduce,
//!   which settles a convergence test without waiting for remote sites when it can.
//! - [`Op`] and [`Elem`]: reduction operators over `i8`…`u64`, `f32`, `f64`, with MPI's
//!   semantics, and user operators.
//! - [`SelectionTable`] and [`Selector`]: which algorithm a call uses, as data (TOML or
//!   JSON), overridable by environment and per call.
//! - [`Job`]: this process's ranks in a job started by `vargr run`, `mpirun` or `srun`,
//!   over sockets between processes ([`MeshTransport`]).
//! - [`Hierarchy`]: host and site of each rank, for hierarchical (MagPIe-style) algorithms.
//! - [`bench_allreduce`]: the in-process latency micro-benchmark.
//!
//! ```
//! use std::sync::Arc;
//! use vargr_coll::{Fabric, Op, World};
//!
//! let fabric = Fabric::new(4);
//! let threads: Vec<_> = fabric.endpoints().into_iter().map(|ep| {
//!     std::thread::spawn(move || {
//!         let comm = World::new(Arc::new(ep)).comm().unwrap();
//!         let mut x = [comm.rank() as u64 + 1];
//!         comm.allreduce(&mut x, &Op::Sum).unwrap();
//!         x[0]
//!     })
//! }).collect();
//! for t in threads {
//!     assert_eq!(t.join().unwrap(), 10);
//! }
//! ```

pub mod algo;
mod arena;
mod bench;
mod clocksync;
mod comm;
mod cond;
mod elem;
mod error;
pub mod gather;
mod hierarchy;
mod inproc;
mod job;
pub mod monitor;
mod op;
pub mod open_plane;
mod rank_scheduler;
mod schedule;
mod select;
mod transport;
pub mod usage;

pub use arena::{Arena, Group};
pub use bench::{bench_allreduce, bench_allreduce_with};
pub use comm::{packed_displs, Comm, Received, Request, Status, World};
pub use cond::{CondAllreduce, CondOp, CondOutcome, Predicate};
pub use elem::{Elem, ElemKind};
pub use error::{CollError, Result};
pub use hierarchy::{Hierarchy, Levels};
pub use inproc::{Fabric, InProcess, WaitPolicy};
pub use job::{Job, JoinOptions, MeshTransport};
pub use op::{Op, UserFn, UserOp};
pub use rank_scheduler::{SchedPolicy, Scheduler};
pub use schedule::{execute, Buf, ExecCtx, Mode, Schedule, Step};
pub use select::{Across, Algorithm, CallShape, CollKind, Rule, SelectionTable, Selector};
pub use transport::{Match, Matched, Tag, Transport};
