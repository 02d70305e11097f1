//! How both proxy pairs (`vargr proxy`, `vargr vnc`) open their links: the near end
//! connects, proves the secret and says hello, then waits for the far end's welcome
//! (the far end reaches its server first) or its refusal; the far end accepts links
//! through a gate and runs each on a thread of its own. The frame kinds and the hello's
//! contents are each protocol's.

use std::sync::Arc;
use std::time::Duration;

use vargr_net::auth::Secret;
use vargr_net::gate::{Gate, GateConfig};
use vargr_net::{Addr, LinkSecurity, Listener, NetError};

use crate::driver::{connect_now, LinkConn};
use crate::error::ProxyError;

/// How long handshakes and connects may take.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest hello or welcome.
pub(crate) const MAX_HELLO: usize = 64 << 10;

/// A protocol's set-up frames.
pub(crate) struct SetupKinds {
    pub hello: u8,
    pub welcome: u8,
    pub abort: u8,
}

/// Connects to the far proxy at `peer`, authenticates, sends `hello` and returns the
/// link with the welcome's body. A refusal, or any other answer, is an error that says
/// what the far proxy said.
pub(crate) fn open_link(
    peer: &Addr,
    secret: &Secret,
    security: LinkSecurity,
    kinds: &SetupKinds,
    hello: &[u8],
) -> Result<(LinkConn, Vec<u8>), ProxyError> {
    let what = peer.to_string();
    let conn = connect_now(peer, SETUP_TIMEOUT).map_err(ProxyError::io(format!(
        "connecting to the far proxy {what}"
    )))?;
    let conn = vargr_net::auth::connect(conn, secret, 0, security, SETUP_TIMEOUT, &what).map_err(
        |source| ProxyError::Auth {
            peer: what.clone(),
            source,
        },
    )?;
    let mut link = LinkConn::new(conn);
    link.write_frame(kinds.hello, hello)
        .map_err(ProxyError::io(format!("sending the hello to {what}")))?;
    // The far proxy connects to its server before it answers.
    link.conn
        .set_timeout(Some(SETUP_TIMEOUT * 3))
        .map_err(ProxyError::io(format!(
            "setting a timeout on the link to {what}"
        )))?;
    let (kind, body) = link
        .read_frame(MAX_HELLO)
        .map_err(|source| ProxyError::Setup {
            what: format!("waiting for the far proxy {what} to connect the server"),
            source,
        })?;
    if kind == kinds.welcome {
        Ok((link, body))
    } else if kind == kinds.abort {
        Err(ProxyError::Refused(format!(
            "the far proxy {what} refused: {}",
            String::from_utf8_lossy(&body)
        )))
    } else {
        Err(ProxyError::Refused(format!(
            "the far proxy {what} answered with frame type {kind}, not a welcome"
        )))
    }
}

/// Accepts links on `listener` until it fails: each one that proves the secret is
/// handed to `each` on a new thread named `name`; a refused one to `refused`.
pub(crate) fn serve_links(
    listener: Listener,
    secret: &Secret,
    security: LinkSecurity,
    name: &str,
    refused: Box<dyn Fn(&NetError) + Send + Sync>,
    each: Arc<dyn Fn(LinkConn) + Send + Sync>,
) -> Result<(), ProxyError> {
    let gate = Gate::open(
        listener,
        secret.clone(),
        GateConfig {
            deadline: SETUP_TIMEOUT,
            security,
            ..GateConfig::default()
        },
        refused,
    );
    loop {
        let link = match gate.accept_timeout(Duration::from_secs(3600)) {
            Ok(a) => LinkConn::new(a.conn),
            Err(NetError::Timeout { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let each = each.clone();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || each(link))
            .map_err(ProxyError::io("starting a connection thread"))?;
    }
}
