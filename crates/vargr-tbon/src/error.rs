use thiserror::Error;

/// Errors seen by users of the tree: front-ends, back-ends and commnodes.
#[derive(Debug, Error, Clone)]
pub enum TbonError {
    #[error("network start-up failed: {0}")]
    Startup(String),
    #[error("{0}")]
    Net(String),
    #[error("node {node} on {host} was lost ({reason}); back-ends lost: {}", fmt_ranks(.backends))]
    NodeLost {
        node: u32,
        host: String,
        reason: String,
        backends: Vec<u32>,
    },
    #[error("the parent of this node was lost: {0}")]
    ParentLost(String),
    #[error("node {node} lost its parent node {lost_parent} and no ancestor adopted it: {}", fmt_tried(.tried))]
    NotAdopted {
        node: u32,
        lost_parent: u32,
        /// Each ancestor asked, nearest first, and why it did not adopt.
        tried: Vec<(u32, String)>,
    },
    #[error("waves {first}..{end} of stream {stream} went without back-ends {} (their path up died with node {lost})", fmt_ranks(.backends))]
    WavesLost {
        stream: u32,
        first: u64,
        end: u64,
        backends: Vec<u32>,
        lost: u32,
    },
    #[error("wave {wave} of stream {stream} is empty: every contribution to it was lost")]
    WaveEmpty { stream: u32, wave: u64 },
    #[error("filter {filter:?} failed on stream {stream} at node {node}: {reason}")]
    Filter {
        stream: u32,
        node: u32,
        filter: String,
        reason: String,
    },
    #[error("bad packet: {0}")]
    Wire(#[from] vargr_wire::WireError),
    #[error("no such stream {0}")]
    NoStream(u32),
    #[error("bad communicator: {0}")]
    BadCommunicator(String),
    #[error("bad stream options: {0}")]
    BadStream(String),
    #[error("flow control: {0}")]
    Backpressure(String),
    #[error("the network was shut down")]
    Shutdown,
    #[error("timed out after {0} ms")]
    Timeout(u64),
    #[error("no value of element {element} newer than {} arrived before the deadline", fmt_have(.have))]
    ObserveTimeout { element: u32, have: Option<u64> },
    #[error("version {version} of element {element} is not newer than its newest, {newest}")]
    ObserveStale {
        element: u32,
        version: u64,
        newest: u64,
    },
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("clock alignment: {0}")]
    Clock(#[from] crate::clock::ClockMsgError),
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceDumpError),
}

/// The version an observer holds, for messages.
fn fmt_have(have: &Option<u64>) -> String {
    have.map_or("none".into(), |h| format!("version {h}"))
}

/// Back-end ranks as `0-2,5,7-8`: runs collapsed, for messages and summaries.
pub fn fmt_ranks(r: &[u32]) -> String {
    if r.is_empty() {
        return "none".into();
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < r.len() {
        let mut j = i;
        while j + 1 < r.len() && r[j + 1] == r[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            r[i].to_string()
        } else {
            format!("{}-{}", r[i], r[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn fmt_tried(t: &[(u32, String)]) -> String {
    if t.is_empty() {
        return "it knows no ancestor".into();
    }
    t.iter()
        .map(|(n, why)| format!("node {n}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl From<vargr_net::NetError> for TbonError {
    fn from(e: vargr_net::NetError) -> Self {
        TbonError::Net(e.to_string())
    }
}

pub type Result<T, E = TbonError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    #[test]
    fn rank_ranges() {
        assert_eq!(super::fmt_ranks(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    }
}
