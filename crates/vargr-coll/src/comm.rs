//! Communicators: a group of ranks over a transport, with typed collectives.
//!
//! A [`Comm`] turns typed buffers into byte buffers, checks them (lengths, roots,
//! layouts) before any message leaves, picks an algorithm, builds its schedule and runs it.
//! Every collective gets a fresh tag (context id + sequence number), so collectives on
//! different communicators, or back to back on one, never match each other's messages.
//!
//! Context ids are allocated like MPICH does: each rank keeps the lowest id it has not
//! used; a new communicator takes the maximum of that over the parent's ranks. Groups
//! created by one `split` share the id, which is safe because they are disjoint.

use std::cell::{Cell, OnceCell};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytemuck::Pod;

use crate::algo::gather::{self as g, Blocks};
use crate::algo::{allreduce as ar, tree};
use crate::arena::Group;
use crate::elem::{Elem, ElemKind};
use crate::error::{CollError, Result};
use crate::hierarchy::{Hierarchy, Levels};
use crate::op::Op;
use crate::schedule::{execute, ExecCtx, Schedule};
use crate::select::{Algorithm, CallShape, CollKind, Selector};
use crate::transport::{Tag, Transport};

mod p2p;
use p2p::P2p;
pub use p2p::{Received, Request, Status};

/// State shared by all communicators of one rank.
struct RankShared {
    next_ctx: AtomicU32,
    /// See [`CallShape::ranks_per_core`]; the same for every communicator of the job.
    ranks_per_core: usize,
}

/// Builds the world communicator of one rank. Create exactly one per transport endpoint:
/// context ids are tracked per world.
pub struct World {
    transport: Arc<dyn Transport>,
    selector: Selector,
    hierarchy: Option<Hierarchy>,
    ranks_per_core: usize,
}

impl World {
    /// A world with the built-in selection table and no hierarchy.
    pub fn new(transport: Arc<dyn Transport>) -> World {
        World {
            transport,
            selector: Selector::default(),
            hierarchy: None,
            ranks_per_core: 1,
        }
    }

    /// Ranks per core on the job's most crowded host (the same value on every rank), for
    /// algorithm selection.
    pub fn with_ranks_per_core(mut self, ranks_per_core: usize) -> World {
        self.ranks_per_core = ranks_per_core.max(1);
        self
    }

    pub fn with_selector(mut self, selector: Selector) -> World {
        self.selector = selector;
        self
    }

    /// Host and site of every world rank; enables hierarchical algorithms.
    pub fn with_hierarchy(mut self, hierarchy: Hierarchy) -> World {
        self.hierarchy = Some(hierarchy);
        self
    }

    pub fn comm(self) -> Result<Comm> {
        let n = self.transport.size();
        let me = self.transport.rank();
        if me >= n {
            return Err(CollError::BadRank {
                what: "transport",
                rank: me,
                size: n,
                ctx: 0,
            });
        }
        if let Some(h) = &self.hierarchy {
            if h.len() != n {
                return Err(CollError::BadHierarchy {
                    expected: n,
                    got: h.len(),
                });
            }
        }
        Ok(Comm::build(
            self.transport,
            (0..n).collect(),
            me,
            0,
            Arc::new(RankShared {
                next_ctx: AtomicU32::new(1),
                ranks_per_core: self.ranks_per_core,
            }),
            Arc::new(self.selector),
            self.hierarchy,
        ))
    }
}

/// A communicator: this rank's handle on a group of ranks. Not `Sync`: like an MPI
/// communicator, one thread calls its collectives, in the same order on every rank.
pub struct Comm {
    transport: Arc<dyn Transport>,
    /// Communicator rank → transport rank.
    ranks: Arc<[usize]>,
    me: usize,
    ctx: u32,
    seq: Cell<u32>,
    shared: Arc<RankShared>,
    selector: Arc<Selector>,
    hierarchy: Option<Arc<Hierarchy>>,
    /// My host/site groups, computed once.
    levels: Option<Levels>,
    /// All ranks are threads of this process.
    local: bool,
    /// All ranks meet in the transport's arena (the `shm` algorithm can run).
    shm: bool,
    /// The shared-memory group, looked up on first use.
    group: OnceCell<Arc<Group>>,
    /// Trace collector ids per collective, registered on first use.
    collectors: [Cell<Option<u16>>; CollKind::ALL.len()],
    /// Posted receives and probed messages of point-to-point traffic.
    p2p: std::cell::RefCell<P2p>,
}

fn bytes_of<T: Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

fn bytes_of_mut<T: Pod>(v: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

impl Comm {
    fn build(
        transport: Arc<dyn Transport>,
        ranks: Vec<usize>,
        me: usize,
        ctx: u32,
        shared: Arc<RankShared>,
        selector: Arc<Selector>,
        hierarchy: Option<Hierarchy>,
    ) -> Comm {
        let levels = hierarchy.as_ref().map(|h| h.levels(me));
        let local = transport.arena().is_some_and(|a| a.covers(&ranks));
        let shm = transport.arena().is_some_and(|a| a.shares(&ranks));
        Comm {
            transport,
            ranks: ranks.into(),
            me,
            ctx,
            seq: Cell::new(0),
            shared,
            selector,
            hierarchy: hierarchy.map(Arc::new),
            levels,
            local,
            shm,
            group: OnceCell::new(),
            collectors: Default::default(),
            p2p: Default::default(),
        }
    }

    pub fn rank(&self) -> usize {
        self.me
    }

    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// The context id that separates this communicator's traffic.
    pub fn context(&self) -> u32 {
        self.ctx
    }

    /// Transport rank of communicator rank `r`.
    pub fn transport_rank(&self, r: usize) -> Option<usize> {
        self.ranks.get(r).copied()
    }

    /// The transport, for helpers (such as conditional allreduce's prefetch threads)
    /// that talk on this communicator's context from other threads.
    pub(crate) fn transport_handle(&self) -> Arc<dyn Transport> {
        self.transport.clone()
    }

    /// The transport tag of user tag `tag` on this communicator.
    pub(crate) fn user_tag(&self, tag: u64) -> u64 {
        Tag::user(self.ctx, tag)
    }

    pub fn hierarchy(&self) -> Option<&Hierarchy> {
        self.hierarchy.as_deref()
    }

    pub fn selector(&self) -> &Selector {
        &self.selector
    }

    /// Replaces the selection configuration of this communicator (communicators split
    /// from it inherit it). Must be done identically on every rank.
    pub fn set_selector(&mut self, selector: Selector) {
        self.selector = Arc::new(selector);
    }

    fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(CollError::BadRank {
                what: "root",
                rank: root,
                size: self.size(),
                ctx: self.ctx,
            });
        }
        Ok(())
    }

    fn check_len(
        &self,
        coll: CollKind,
        what: &'static str,
        expected: usize,
        got: usize,
    ) -> Result<()> {
        if expected != got {
            return Err(CollError::BufferLength {
                coll,
                what,
                expected,
                got,
                rank: self.me,
                ctx: self.ctx,
            });
        }
        Ok(())
    }

    fn shape(&self, coll: CollKind, bytes: usize) -> CallShape {
        let hier = self.hierarchy.as_deref();
        CallShape {
            coll,
            bytes,
            ranks: self.size(),
            hierarchical: hier.is_some_and(Hierarchy::is_nontrivial),
            sites: hier.map_or(1, Hierarchy::sites),
            local: self.local,
            shm: self.shm,
            ranks_per_core: self.shared.ranks_per_core,
        }
    }

    /// The algorithm a call of `coll` with `bytes` per rank (see [`CallShape::bytes`])
    /// would use without a per-call choice. For benchmarks and monitors.
    pub fn algorithm_for(&self, coll: CollKind, bytes: usize) -> Algorithm {
        self.selector.choose(&self.shape(coll, bytes), false, 0)
    }

    fn pick(
        &self,
        coll: CollKind,
        bytes: usize,
        forced: Option<Algorithm>,
        op: Option<&Op>,
        root: usize,
    ) -> Result<Algorithm> {
        let ordered = op.is_some_and(|o| !o.is_commutative());
        let shape = self.shape(coll, bytes);
        let Some(a) = forced else {
            return Ok(self.selector.choose(&shape, ordered, root));
        };
        let unsupported = |reason: &str| CollError::Unsupported {
            coll,
            algorithm: a.to_string(),
            reason: reason.to_string(),
        };
        if !a.supports(coll) {
            return Err(unsupported("not implemented for this collective"));
        }
        if matches!(a, Algorithm::Hierarchical(_)) && self.levels.is_none() {
            return Err(unsupported("the communicator has no hierarchy"));
        }
        if a == Algorithm::Shm && !self.shm {
            return Err(unsupported("not all ranks share a shared-memory arena"));
        }
        if ordered && !a.preserves_order(coll, root) {
            return Err(unsupported(
                "it reorders operands and the operator is not commutative",
            ));
        }
        Ok(a)
    }

    fn next_tag(&self) -> u64 {
        let seq = self.seq.get();
        self.seq.set(seq.wrapping_add(1));
        Tag::collective(self.ctx, seq)
    }

    /// The trace collector of `coll` on this communicator (`ctx<id>/<coll>`), registered
    /// on first use.
    fn collector(&self, coll: CollKind) -> u16 {
        let slot = &self.collectors[coll as usize];
        if let Some(id) = slot.get() {
            return id;
        }
        // Groups made by one split share a context id; their lowest rank tells them apart.
        let name = match self.ctx {
            0 => format!("ctx0/{}", coll.name()),
            c => format!(
                "ctx{c}.{}/{}",
                self.ranks.iter().min().unwrap_or(&0),
                coll.name()
            ),
        };
        let id = vargr_trace::collector(&name);
        slot.set(Some(id));
        id
    }

    /// Labels the calling thread with this rank's world rank for traces and monitors.
    fn label_thread(&self) {
        vargr_trace::ensure_rank_label(self.ranks[self.me] as u32);
    }

    /// Records one whole call (arrival to departure) of this rank.
    fn trace_call(&self, coll: CollKind, seq: u32, start: u64, bytes: usize, ok: bool) {
        vargr_trace::record(&vargr_trace::Record {
            start,
            end: vargr_trace::now(),
            seq,
            bytes: bytes.min(u32::MAX as usize) as u32,
            collector: self.collector(coll),
            op: vargr_trace::EventOp::Call as u8,
            status: u8::from(!ok),
            peer: vargr_trace::NO_PEER,
        });
    }

    /// Shared-memory allreduce (or barrier with `op = None`) through the arena group.
    fn run_shm(
        &self,
        coll: CollKind,
        work: &mut [u8],
        kind: ElemKind,
        op: Option<&Op>,
    ) -> Result<()> {
        self.label_thread();
        let start = vargr_trace::now();
        let seq = self.seq.get();
        let group = match self.group.get() {
            Some(g) => g,
            None => {
                let arena = self
                    .transport
                    .arena()
                    .ok_or_else(|| CollError::Unsupported {
                        coll: CollKind::Allreduce,
                        algorithm: "shm".into(),
                        reason: "the transport has no arena".into(),
                    })?;
                let g = arena.group(self.ctx, &self.ranks);
                self.group.get_or_init(|| g)
            }
        };
        // Keep sequence numbers in step with ranks that use message schedules.
        self.next_tag();
        // Waits in the arena bypass the transport: count the call as communication.
        let r = {
            let _in_comm = crate::usage::enter(crate::usage::RankState::Communication);
            group.allreduce(self.me, work, kind, op)
        };
        self.trace_call(coll, seq, start, work.len(), r.is_ok());
        r
    }

    fn run(
        &self,
        coll: CollKind,
        sched: &Schedule,
        input: &[u8],
        work: &mut [u8],
        kind: ElemKind,
        op: Option<&Op>,
    ) -> Result<()> {
        self.label_thread();
        let start = vargr_trace::now();
        let seq = self.seq.get();
        let ctx = ExecCtx {
            transport: &*self.transport,
            ranks: &self.ranks,
            tag_base: self.next_tag(),
            kind,
            op,
            collector: self.collector(coll),
            seq,
        };
        let r = {
            let _steps = crate::rank_scheduler::collective_scope();
            execute(&ctx, sched, input, work)
        };
        self.trace_call(coll, seq, start, work.len().max(input.len()), r.is_ok());
        r
    }

    // ---- barrier, bcast, reduce, allreduce -------------------------------------------

    pub fn barrier(&self) -> Result<()> {
        self.barrier_with(None)
    }

    pub fn barrier_with(&self, algorithm: Option<Algorithm>) -> Result<()> {
        let alg = self.pick(CollKind::Barrier, 0, algorithm, None, 0)?;
        let (me, p) = (self.me, self.size());
        let s = match alg {
            Algorithm::Shm => return self.run_shm(CollKind::Barrier, &mut [], ElemKind::U8, None),
            Algorithm::Flat => tree::barrier_flat(me, p),
            _ => tree::barrier_dissemination(me, p),
        };
        self.run(CollKind::Barrier, &s, &[], &mut [], ElemKind::U8, None)
    }

    /// Broadcasts the root's `buf` into every rank's `buf` (all the same length).
    pub fn bcast<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        self.bcast_with(buf, root, None)
    }

    pub fn bcast_with<T: Pod>(
        &self,
        buf: &mut [T],
        root: usize,
        algorithm: Option<Algorithm>,
    ) -> Result<()> {
        self.check_root(root)?;
        let n = std::mem::size_of_val(buf);
        let alg = self.pick(CollKind::Bcast, n, algorithm, None, root)?;
        let (me, p) = (self.me, self.size());
        let esize = std::mem::size_of::<T>().max(1);
        let s = match alg {
            Algorithm::Flat => tree::bcast_flat(me, p, root, n),
            Algorithm::Kary(k) => tree::bcast_kary(me, p, root, n, k as usize),
            Algorithm::ScatterAllgather => {
                tree::bcast_scatter_allgather(me, p, root, n / esize, esize)
            }
            _ => tree::bcast_binomial(me, p, root, n),
        };
        self.run(
            CollKind::Bcast,
            &s,
            &[],
            bytes_of_mut(buf),
            ElemKind::U8,
            None,
        )
    }

    /// Reduces every rank's `send` into the root's `recv` (ignored elsewhere, may be empty).
    pub fn reduce<T: Elem>(&self, send: &[T], recv: &mut [T], op: &Op, root: usize) -> Result<()> {
        self.reduce_with(send, recv, op, root, None)
    }

    pub fn reduce_with<T: Elem>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: &Op,
        root: usize,
        algorithm: Option<Algorithm>,
    ) -> Result<()> {
        self.check_root(root)?;
        op.check(T::KIND)?;
        if self.me == root {
            self.check_len(CollKind::Reduce, "receive buffer", send.len(), recv.len())?;
        }
        let n = std::mem::size_of_val(send);
        let alg = self.pick(CollKind::Reduce, n, algorithm, Some(op), root)?;
        let (me, p, esize) = (self.me, self.size(), T::KIND.size());
        let s = match alg {
            Algorithm::Flat => tree::reduce_flat(me, p, root, n),
            Algorithm::Kary(k) => tree::reduce_kary(me, p, root, n, k as usize),
            Algorithm::Rabenseifner => ar::reduce_rabenseifner(me, p, root, send.len(), esize),
            _ => tree::reduce_binomial(me, p, root, n),
        };
        if me == root {
            recv.copy_from_slice(send);
            self.run(
                CollKind::Reduce,
                &s,
                &[],
                bytes_of_mut(recv),
                T::KIND,
                Some(op),
            )
        } else {
            let mut work = send.to_vec();
            self.run(
                CollKind::Reduce,
                &s,
                &[],
                bytes_of_mut(&mut work),
                T::KIND,
                Some(op),
            )
        }
    }

    /// In-place allreduce: every rank's `buf` becomes the reduction of all of them.
    pub fn allreduce<T: Elem>(&self, buf: &mut [T], op: &Op) -> Result<()> {
        self.allreduce_with(buf, op, None)
    }

    pub fn allreduce_with<T: Elem>(
        &self,
        buf: &mut [T],
        op: &Op,
        algorithm: Option<Algorithm>,
    ) -> Result<()> {
        op.check(T::KIND)?;
        let n = std::mem::size_of_val(buf);
        let alg = self.pick(CollKind::Allreduce, n, algorithm, Some(op), 0)?;
        if alg == Algorithm::Shm {
            return self.run_shm(CollKind::Allreduce, bytes_of_mut(buf), T::KIND, Some(op));
        }
        let s = self.allreduce_schedule(alg, buf.len(), T::KIND.size());
        self.run(
            CollKind::Allreduce,
            &s,
            &[],
            bytes_of_mut(buf),
            T::KIND,
            Some(op),
        )
    }

    /// Allreduce from `send` into `recv` (same lengths).
    pub fn allreduce_into<T: Elem>(&self, send: &[T], recv: &mut [T], op: &Op) -> Result<()> {
        self.check_len(
            CollKind::Allreduce,
            "receive buffer",
            send.len(),
            recv.len(),
        )?;
        recv.copy_from_slice(send);
        self.allreduce(recv, op)
    }

    /// The schedule this rank would run for an allreduce of `count` elements of `esize`
    /// bytes with `alg` (for inspection and cost models). `shm` is not message passing
    /// and has no schedule; it is reported as recursive doubling.
    pub fn allreduce_schedule(&self, alg: Algorithm, count: usize, esize: usize) -> Schedule {
        let (me, p, n) = (self.me, self.size(), count * esize);
        match alg {
            Algorithm::Ring => ar::ring(me, p, count, esize),
            Algorithm::Rabenseifner => ar::rabenseifner(me, p, count, esize),
            Algorithm::ReduceBcast => ar::reduce_bcast(me, p, n),
            Algorithm::Hierarchical(across) => match &self.levels {
                Some(l) => ar::hierarchical(me, l, n, across),
                None => ar::recursive_doubling(me, p, n),
            },
            _ => ar::recursive_doubling(me, p, n),
        }
    }

    // ---- gather / scatter -------------------------------------------------------------

    /// Gathers every rank's `send` (equal lengths) into the root's `recv`
    /// (`size * send.len()`, ignored elsewhere).
    pub fn gather<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        self.gather_with(send, recv, root, None)
    }

    pub fn gather_with<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: usize,
        algorithm: Option<Algorithm>,
    ) -> Result<()> {
        self.check_root(root)?;
        let p = self.size();
        if self.me == root {
            self.check_len(
                CollKind::Gather,
                "receive buffer",
                p * send.len(),
                recv.len(),
            )?;
        }
        let b = std::mem::size_of_val(send);
        let alg = self.pick(CollKind::Gather, b, algorithm, None, root)?;
        let s = match alg {
            Algorithm::Flat => g::gather_flat(self.me, p, root, b, &Blocks::regular(p, b)),
            _ => g::gather_binomial(self.me, p, root, b),
        };
        let work: &mut [u8] = if self.me == root {
            bytes_of_mut(recv)
        } else {
            &mut []
        };
        self.run(
            CollKind::Gather,
            &s,
            bytes_of(send),
            work,
            ElemKind::U8,
            None,
        )
    }

    /// Gathers `send` of varying lengths; at the root, rank `r`'s data lands at
    /// `recv[displs[r]..][..counts[r]]` (counts and displacements in elements, only read at
    /// the root).
    pub fn gatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        let p = self.size();
        let sz = std::mem::size_of::<T>();
        let blocks = if self.me == root {
            let b = self.layout(CollKind::Gather, counts, displs, recv.len(), sz)?;
            self.check_len(CollKind::Gather, "send buffer", counts[root], send.len())?;
            b
        } else {
            Blocks::regular(p, 0)
        };
        let s = g::gather_flat(self.me, p, root, std::mem::size_of_val(send), &blocks);
        let work: &mut [u8] = if self.me == root {
            bytes_of_mut(recv)
        } else {
            &mut []
        };
        self.run(
            CollKind::Gather,
            &s,
            bytes_of(send),
            work,
            ElemKind::U8,
            None,
        )
    }

    /// Scatters consecutive blocks of the root's `send` (`size * recv.len()`) to every
    /// rank's `recv`.
    pub fn scatter<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        self.scatter_with(send, recv, root, None)
    }

    pub fn scatter_with<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: usize,
        algorithm: Option<Algorithm>,
    ) -> Result<()> {
        self.check_root(root)?;
        let p = self.size();
        if self.me == root {
            self.check_len(CollKind::Scatter, "send buffer", p * recv.len(), send.len())?;
        }
        let b = std::mem::size_of_val(recv);
        let alg = self.pick(CollKind::Scatter, b, algorithm, None, root)?;
        let s = match alg {
            Algorithm::Flat => g::scatter_flat(self.me, p, root, &Blocks::regular(p, b), b),
            _ => g::scatter_binomial(self.me, p, root, b),
        };
        let input: &[u8] = if self.me == root { bytes_of(send) } else { &[] };
        self.run(
            CollKind::Scatter,
            &s,
            input,
            bytes_of_mut(recv),
            ElemKind::U8,
            None,
        )
    }

    /// Scatters `send[displs[r]..][..counts[r]]` of the root to rank `r`'s `recv`
    /// (counts and displacements in elements, only read at the root).
    pub fn scatterv<T: Pod>(
        &self,
        send: &[T],
        counts: &[usize],
        displs: &[usize],
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        let p = self.size();
        let sz = std::mem::size_of::<T>();
        let blocks = if self.me == root {
            let b = self.layout(CollKind::Scatter, counts, displs, send.len(), sz)?;
            self.check_len(
                CollKind::Scatter,
                "receive buffer",
                counts[root],
                recv.len(),
            )?;
            b
        } else {
            Blocks::regular(p, 0)
        };
        let s = g::scatter_flat(self.me, p, root, &blocks, std::mem::size_of_val(recv));
        let input: &[u8] = if self.me == root { bytes_of(send) } else { &[] };
        self.run(
            CollKind::Scatter,
            &s,
            input,
            bytes_of_mut(recv),
            ElemKind::U8,
            None,
        )
    }

    // ---- allgather / alltoall ----------------------------------------------------------

    /// Every rank's `send` (equal lengths) lands in every rank's `recv` in rank order.
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.allgather_with(send, recv, None)
    }

    pub fn allgather_with<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        algorithm: Option<Algorithm>,
    ) -> Result<()> {
        let p = self.size();
        self.check_len(
            CollKind::Allgather,
            "receive buffer",
            p * send.len(),
            recv.len(),
        )?;
        let b = std::mem::size_of_val(send);
        let alg = self.pick(CollKind::Allgather, b, algorithm, None, 0)?;
        let s = match alg {
            Algorithm::RecursiveDoubling => g::allgather_recursive_doubling(self.me, p, b),
            Algorithm::Bruck => g::allgather_bruck(self.me, p, b),
            _ => g::allgather_ring(self.me, p, &Blocks::regular(p, b)),
        };
        self.run(
            CollKind::Allgather,
            &s,
            bytes_of(send),
            bytes_of_mut(recv),
            ElemKind::U8,
            None,
        )
    }

    /// Rank `r`'s `send` (of `counts[r]` elements) lands at `recv[displs[r]..]` everywhere.
    pub fn allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        let sz = std::mem::size_of::<T>();
        let blocks = self.layout(CollKind::Allgather, counts, displs, recv.len(), sz)?;
        self.check_len(
            CollKind::Allgather,
            "send buffer",
            counts[self.me],
            send.len(),
        )?;
        let s = g::allgather_ring(self.me, self.size(), &blocks);
        self.run(
            CollKind::Allgather,
            &s,
            bytes_of(send),
            bytes_of_mut(recv),
            ElemKind::U8,
            None,
        )
    }

    /// Block `j` of rank `i`'s `send` lands as block `i` of rank `j`'s `recv`; both buffers
    /// hold `size` equal blocks.
    pub fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let p = self.size();
        self.check_len(CollKind::Alltoall, "receive buffer", send.len(), recv.len())?;
        if send.len() % p != 0 {
            return Err(CollError::BadLayout {
                coll: CollKind::Alltoall,
                reason: format!("{} elements do not split into {p} equal blocks", send.len()),
                rank: self.me,
                ctx: self.ctx,
            });
        }
        let blocks = Blocks::regular(p, std::mem::size_of_val(send) / p);
        let s = g::alltoall_pairwise(self.me, p, &blocks, &blocks);
        self.run(
            CollKind::Alltoall,
            &s,
            bytes_of(send),
            bytes_of_mut(recv),
            ElemKind::U8,
            None,
        )
    }

    /// Alltoall with per-rank counts and displacements (in elements) on both sides.
    pub fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let sz = std::mem::size_of::<T>();
        let sb = self.layout(CollKind::Alltoall, send_counts, send_displs, send.len(), sz)?;
        let rb = self.layout(CollKind::Alltoall, recv_counts, recv_displs, recv.len(), sz)?;
        let s = g::alltoall_pairwise(self.me, self.size(), &sb, &rb);
        self.run(
            CollKind::Alltoall,
            &s,
            bytes_of(send),
            bytes_of_mut(recv),
            ElemKind::U8,
            None,
        )
    }

    /// Checks a `*v` layout against a buffer of `len` elements and converts it to bytes.
    fn layout(
        &self,
        coll: CollKind,
        counts: &[usize],
        displs: &[usize],
        len: usize,
        sz: usize,
    ) -> Result<Blocks> {
        let p = self.size();
        let bad = |reason: String| CollError::BadLayout {
            coll,
            reason,
            rank: self.me,
            ctx: self.ctx,
        };
        if counts.len() != p || displs.len() != p {
            return Err(bad(format!(
                "{} counts and {} displacements for {p} ranks",
                counts.len(),
                displs.len()
            )));
        }
        for r in 0..p {
            let end = displs[r].checked_add(counts[r]);
            if end.is_none_or(|e| e > len) {
                return Err(bad(format!(
                    "block of rank {r} ({} elements at {}) does not fit a buffer of {len}",
                    counts[r], displs[r]
                )));
            }
        }
        Ok(Blocks {
            displs: displs.iter().map(|d| d * sz).collect(),
            counts: counts.iter().map(|c| c * sz).collect(),
        })
    }

    // ---- communicator management -------------------------------------------------------

    fn derive(&self, ranks: Vec<usize>, me: usize, ctx: u32, members: &[usize]) -> Comm {
        Comm::build(
            self.transport.clone(),
            ranks,
            me,
            ctx,
            self.shared.clone(),
            self.selector.clone(),
            self.hierarchy.as_ref().map(|h| h.subset(members)),
        )
    }

    /// Collective, like `MPI_Comm_split`: ranks with the same `color` form a new
    /// communicator, ordered by `(key, old rank)`. `None` (`MPI_UNDEFINED`) takes part but
    /// gets no communicator.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm>> {
        let p = self.size();
        let mine = [
            u32::from(color.is_some()),
            color.unwrap_or(0),
            key as u32,
            self.shared.next_ctx.load(Ordering::Relaxed),
        ];
        let mut all = vec![0u32; 4 * p];
        self.allgather(&mine, &mut all)?;
        let ctx = all.chunks_exact(4).map(|c| c[3]).max().unwrap_or(1);
        self.shared.next_ctx.fetch_max(ctx + 1, Ordering::Relaxed);
        let Some(color) = color else {
            return Ok(None);
        };
        let mut members: Vec<usize> = (0..p)
            .filter(|&r| all[4 * r] == 1 && all[4 * r + 1] == color)
            .collect();
        members.sort_by_key(|&r| (all[4 * r + 2] as i32, r));
        let me = members
            .iter()
            .position(|&r| r == self.me)
            .expect("a rank with a color is in its own group");
        let ranks = members.iter().map(|&r| self.ranks[r]).collect();
        Ok(Some(self.derive(ranks, me, ctx, &members)))
    }

    /// Collective: a copy of this communicator with a new context id.
    pub fn dup(&self) -> Result<Comm> {
        let mut next = [self.shared.next_ctx.load(Ordering::Relaxed)];
        self.allreduce_with(&mut next, &Op::Max, Some(Algorithm::RecursiveDoubling))?;
        self.shared
            .next_ctx
            .fetch_max(next[0] + 1, Ordering::Relaxed);
        let members: Vec<usize> = (0..self.size()).collect();
        Ok(self.derive(self.ranks.to_vec(), self.me, next[0], &members))
    }
}

/// Displacements of blocks of `counts` elements laid end to end, from 0: what the `*v`
/// collectives take when the blocks are packed.
pub fn packed_displs(counts: &[usize]) -> Vec<usize> {
    let mut at = 0;
    counts
        .iter()
        .map(|&n| {
            let d = at;
            at += n;
            d
        })
        .collect()
}
