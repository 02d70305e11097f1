//! Observed elements for the application (PATHS' last-observe): publishing versioned
//! values and blocking until a newer one than the reader holds arrives. The protocol,
//! with its per-node caches, is the router's (see `router::observe`); this module only
//! blocks the calling thread on the engine, with a deadline, for the front-end's and
//! the back-ends' handles.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::engine::Engine;
use crate::{Result, TbonError};

/// Publishes version `version` of `element` from this node. Readers' requests reach a
/// publisher between its calls too, so the first publish starts the engine's progress
/// thread: it answers them from the cache while the program does other things.
pub(crate) fn publish(engine: &Engine, element: u32, version: u64, value: &[u8]) -> Result<()> {
    if let Some(e) = engine.lock().router.deliveries().closed.clone() {
        return Err(e);
    }
    engine
        .start_progress()
        .map_err(|e| TbonError::Net(format!("starting the progress thread: {e}")))?;
    engine.with_router(|r, out| r.publish(element, version, value, out))
}

/// Blocks until a value of `element` newer than `have` is here, or `timeout` passes
/// ([`TbonError::ObserveTimeout`]), or the network closes.
pub(crate) fn observe_newer(
    engine: &Engine,
    element: u32,
    have: Option<u64>,
    timeout: Duration,
) -> Result<(u64, Bytes)> {
    let deadline = Instant::now() + timeout;
    let req = engine.with_router(|r, out| r.observe(element, have, deadline, out));
    let got = engine.wait_for(Some(deadline), |st| {
        if let Some(o) = st.router.take_observed_req(req) {
            return Some(o.result);
        }
        st.router.deliveries().closed.clone().map(Err)
    });
    match got {
        Some(r) => r,
        // The engine's deadline may pass just before the router's timer runs.
        None => match engine.with_router(|r, _| r.cancel_observe(req)) {
            Some(o) => o.result,
            None => Err(TbonError::ObserveTimeout { element, have }),
        },
    }
}
