use crate::elem::ElemKind;
use crate::select::CollKind;

/// Everything a transport, a collective call or a selection table can get wrong.
///
/// Variants name where the problem was seen: the rank (in the communicator unless said
/// otherwise), the peer, the tag and the communicator's context id, so a hung or failed
/// collective on one rank of many can be traced to the call that broke.
#[derive(Debug, thiserror::Error)]
pub enum CollError {
    /// A rank number outside `0..size`.
    #[error(
        "{what} rank {rank} is out of range for a communicator of {size} ranks (context {ctx})"
    )]
    BadRank {
        what: &'static str,
        rank: usize,
        size: usize,
        ctx: u32,
    },
    /// A buffer whose length does not fit the call (e.g. `gather` receive buffer smaller
    /// than `size * count`).
    #[error("rank {rank}, context {ctx}: {coll} {what}: expected {expected} elements, got {got}")]
    BufferLength {
        coll: CollKind,
        what: &'static str,
        expected: usize,
        got: usize,
        rank: usize,
        ctx: u32,
    },
    /// Counts and displacements of a `*v` call that overlap or do not fit the buffer.
    #[error("rank {rank}, context {ctx}: {coll}: {reason}")]
    BadLayout {
        coll: CollKind,
        reason: String,
        rank: usize,
        ctx: u32,
    },
    /// A message arrived with a length the schedule did not expect: the peers disagree
    /// about counts or types (an application bug, or ranks calling different collectives).
    #[error("transport rank {rank}: message from rank {src} with tag {tag:#018x} has {got} bytes, expected {expected}")]
    MessageLength {
        rank: usize,
        src: usize,
        tag: u64,
        expected: usize,
        got: usize,
    },
    /// A receive waited longer than the transport's configured limit.
    #[error("transport rank {rank}: no message from {} with tag {tag:#018x} after {waited_ms} ms",
        .src.map_or_else(|| "any rank".to_string(), |s| format!("rank {s}")))]
    Timeout {
        rank: usize,
        /// `None` for a receive from any source.
        src: Option<usize>,
        tag: u64,
        waited_ms: u64,
    },
    /// The peer cannot be reached any more (its endpoint is gone, its socket closed).
    #[error("transport rank {rank}: peer {peer} is unreachable: {reason}")]
    PeerLost {
        rank: usize,
        peer: usize,
        reason: String,
    },
    /// A receive stopped because the process asked (`vargr_net::mesh::set_interrupt_check`:
    /// Ctrl-C in a language binding). The collective it was part of did not complete.
    #[error("transport rank {rank}: interrupted while waiting for a message")]
    Interrupted { rank: usize },
    /// A reduction operator that is not defined for the element type (MPI allows bitwise
    /// and logical operators only on integers).
    #[error("operator {op} is not defined for {kind} elements")]
    OpType { op: String, kind: ElemKind },
    /// A request used on a communicator it does not belong to, or after it completed.
    #[error("rank {rank}, context {ctx}: bad request: {reason}")]
    BadRequest {
        rank: usize,
        ctx: u32,
        reason: String,
    },
    /// A user tag outside the range that fits the tag layout.
    #[error("user tag {tag} is too large (maximum {max})")]
    BadTag { tag: u64, max: u64 },
    /// An algorithm that does not implement the collective, or cannot run with this
    /// operator (e.g. ring allreduce with a non-commutative user operator).
    #[error("algorithm {algorithm} cannot run {coll}: {reason}")]
    Unsupported {
        coll: CollKind,
        algorithm: String,
        reason: String,
    },
    /// A malformed algorithm name, e.g. `kary:x`.
    #[error("bad algorithm {input:?}: {reason}; expected e.g. flat, binomial, kary:4, recursive_doubling, ring, rabenseifner, reduce_bcast, scatter_allgather, bruck, pairwise, dissemination, shm, hierarchical:tree or hierarchical:magpie")]
    BadAlgorithm { input: String, reason: String },
    /// A selection table that does not parse or names an algorithm a collective lacks.
    #[error("selection table {source_name}: {reason}")]
    BadTable { source_name: String, reason: String },
    /// A hierarchy whose length differs from the communicator's size.
    #[error("hierarchy lists {got} ranks, the communicator has {expected}")]
    BadHierarchy { expected: usize, got: usize },
    /// A conditional allreduce whose inputs or setup break its preconditions.
    #[error("cond_allreduce on rank {rank}: {reason}")]
    CondPrecondition { rank: usize, reason: String },
    /// Joining the job failed (no rank variables, rendezvous unreachable, wrong secret).
    #[error("joining the job: {reason}")]
    Job { reason: String },
    /// A user operator that changed the length of its output or panicked.
    #[error("user operator failed on rank {rank}: {reason}")]
    UserOp { rank: usize, reason: String },
}

pub type Result<T, E = CollError> = std::result::Result<T, E>;
