//! What a link knows of its connection's path, for stages that model the link (the
//! codec stage's cost model): the kernel's readings, taken by the link that owns the
//! socket (vargr-net reads Linux `TCP_INFO`) and handed to the stages.

use std::time::Duration;

/// A reading of a connection's path.
///
/// The kernel's own delivery-rate estimate is not used: some stacks (gVisor's) leave it
/// stale, and token-bucket bursts inflate it. What the path carried is measured instead
/// from `bytes_acked` between readings taken while bytes waited in the socket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathInfo {
    /// The smallest round trip seen on the connection (from the handshake on).
    pub min_rtt: Duration,
    /// Data was unacknowledged or not yet sent: the path is carrying this connection's
    /// bytes, and a reading a little later would see more of it.
    pub busy: bool,
    /// Bytes written but not yet sent were waiting in the socket: the path, not the
    /// application, set the pace at this moment.
    pub backlogged: bool,
    /// Bytes the peer has acknowledged since the connection opened.
    pub bytes_acked: u64,
    /// When the reading was taken.
    pub at: std::time::Instant,
}
