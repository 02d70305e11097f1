//! Observed elements (PATHS' last-observe wrapper): a producer publishes versioned
//! values into an element, readers ask for "a value newer than the one I have".
//!
//! Why a pull through caches rather than a multicast: readers of different speeds each
//! take the newest value when they are ready, and no value crosses a link for nobody.
//! Every node keeps the newest value it has seen of each element. A request (from a
//! child or the local application) is answered from that cache when the cache is newer
//! than what the asker holds; otherwise the asker waits and the node keeps ONE request
//! of its own open towards its parent per element, however many children wait. When
//! the value comes down, every waiter it is newer for gets it; older values are
//! replaced, never queued. So N readers below one node cost one transfer per version on
//! that node's up link, and a fast reader's request pre-fetches for the slow ones.
//!
//! Waiting children have no deadline here: a reader that gave up has its value
//! delivered to its node's cache anyway, where its next request finds it. Only the
//! local application's requests carry a deadline (a typed timeout when it passes).

use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use rustc_hash::FxHashMap;
use vargr_wire::{encode_header, Frame, FrameKind, HEADER_LEN};

use super::Router;
use crate::out::{frame_bytes, Out};
use crate::TbonError;

/// Version bytes at the front of an ObserveVal / ObservePublish payload.
const VERSION_LEN: usize = 8;

/// The answer to one local [`Router::observe`] request.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The id [`Router::observe`] returned.
    pub req: u64,
    pub element: u32,
    /// The version and the value, or why there is none.
    pub result: Result<(u64, Bytes), TbonError>,
}

/// One local request still waiting.
struct Local {
    req: u64,
    have: Option<u64>,
    deadline: Instant,
}

/// One element at one node.
#[derive(Default)]
struct Element {
    /// The newest version seen here and its whole ObserveVal frame, sent as it is to
    /// every child it is newer for.
    cache: Option<(u64, Bytes)>,
    /// Children waiting (index into `children`) and the version each holds.
    children: Vec<(usize, Option<u64>)>,
    local: Vec<Local>,
    /// Set while this node's own request to its parent is open.
    asked: bool,
}

impl Element {
    fn version(&self) -> Option<u64> {
        self.cache.as_ref().map(|(v, _)| *v)
    }
}

#[derive(Default)]
pub(super) struct ObserveState {
    elements: FxHashMap<u32, Element>,
    next_req: u64,
}

/// `version` is newer than `have` (anything is newer than nothing).
fn newer(version: u64, have: Option<u64>) -> bool {
    have.is_none_or(|h| version > h)
}

/// An ObserveVal (or ObservePublish) frame in one buffer.
fn value_frame(kind: FrameKind, element: u32, version: u64, value: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN + VERSION_LEN + value.len());
    encode_header(kind, 0, element, 0, VERSION_LEN + value.len(), &mut b);
    b.put_u64_le(version);
    b.extend_from_slice(value);
    b.freeze()
}

fn request_frame(element: u32, have: Option<u64>) -> Bytes {
    match have {
        Some(h) => frame_bytes(FrameKind::ObserveReq, element, 1, &h.to_le_bytes()),
        None => frame_bytes(FrameKind::ObserveReq, element, 0, &[]),
    }
}

/// The version at the front of a value payload.
fn payload_version(payload: &[u8]) -> Option<u64> {
    let b: [u8; VERSION_LEN] = payload.get(..VERSION_LEN)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// The version a request says its sender holds, or why the frame is malformed.
fn request_have(f: &Frame) -> Result<Option<u64>, TbonError> {
    match f.tag {
        0 => Ok(None),
        _ => payload_version(&f.payload).map(Some).ok_or_else(|| {
            TbonError::Net(format!(
                "malformed ObserveReq for element {}: {} payload bytes",
                f.stream,
                f.payload.len()
            ))
        }),
    }
}

/// The application's side: publish and observe.
impl Router {
    /// Publishes `value` as version `version` of `element`. At the front-end it becomes
    /// the element's newest value (versions only grow: an older or equal one is refused);
    /// elsewhere it travels up to the front-end, which drops it if it is not newer.
    pub fn publish(
        &mut self,
        element: u32,
        version: u64,
        value: &[u8],
        out: &mut dyn Out,
    ) -> Result<(), TbonError> {
        if !self.is_root() {
            let parent = self.parent.ok_or(TbonError::ParentLost(format!(
                "node {} cannot publish element {element}: no parent",
                self.node
            )))?;
            out.send(
                parent,
                value_frame(FrameKind::ObservePublish, element, version, value),
            );
            return Ok(());
        }
        let el = self.observe.elements.entry(element).or_default();
        if let Some(newest) = el.version().filter(|&v| v >= version) {
            return Err(TbonError::ObserveStale {
                element,
                version,
                newest,
            });
        }
        let frame = value_frame(FrameKind::ObserveVal, element, version, value);
        self.observe_store(element, version, frame, out);
        Ok(())
    }

    /// Asks for a value of `element` newer than `have`; the answer (or a timeout once
    /// `deadline` passes) arrives in [`Router::take_observed`] under the returned id.
    pub fn observe(
        &mut self,
        element: u32,
        have: Option<u64>,
        deadline: Instant,
        out: &mut dyn Out,
    ) -> u64 {
        let req = self.observe.next_req;
        self.observe.next_req += 1;
        let el = self.observe.elements.entry(element).or_default();
        el.local.push(Local {
            req,
            have,
            deadline,
        });
        self.observe_serve(element, out);
        req
    }

    /// The answers to local requests, oldest first, taken once.
    pub fn take_observed(&mut self) -> Vec<Observed> {
        std::mem::take(&mut self.deliveries.observed)
    }

    /// The answer to request `req`, taken, if it arrived.
    pub fn take_observed_req(&mut self, req: u64) -> Option<Observed> {
        let d = &mut self.deliveries.observed;
        d.iter().position(|o| o.req == req).map(|i| d.remove(i))
    }

    /// Withdraws request `req` (its reader stopped waiting); its answer if it had one.
    pub fn cancel_observe(&mut self, req: u64) -> Option<Observed> {
        for el in self.observe.elements.values_mut() {
            el.local.retain(|l| l.req != req);
        }
        self.take_observed_req(req)
    }

    /// The newest version of `element` cached here, if any.
    pub fn observed_version(&self, element: u32) -> Option<u64> {
        self.observe
            .elements
            .get(&element)
            .and_then(Element::version)
    }
}

/// The protocol's side: frames, timers, losses.
impl Router {
    pub(super) fn on_observe_req(&mut self, ci: usize, f: &Frame, out: &mut dyn Out) {
        let have = match request_have(f) {
            Ok(h) => h,
            Err(e) => return self.deliveries.faults.push(e),
        };
        let el = self.observe.elements.entry(f.stream).or_default();
        // A child's newer request replaces its older one.
        match el.children.iter_mut().find(|(c, _)| *c == ci) {
            Some(w) => w.1 = have,
            None => el.children.push((ci, have)),
        }
        self.observe_serve(f.stream, out);
    }

    pub(super) fn on_observe_val(&mut self, f: Frame, out: &mut dyn Out) {
        let Some(version) = payload_version(&f.payload) else {
            return self.deliveries.faults.push(TbonError::Net(format!(
                "malformed ObserveVal for element {}",
                f.stream
            )));
        };
        let el = self.observe.elements.entry(f.stream).or_default();
        el.asked = false;
        let frame = f.to_wire();
        self.observe_store(f.stream, version, frame, out);
    }

    pub(super) fn on_observe_publish(&mut self, f: Frame, out: &mut dyn Out) {
        let Some(version) = payload_version(&f.payload) else {
            return;
        };
        let value = &f.payload[VERSION_LEN..];
        if let Err(e) = self.publish(f.stream, version, value, out) {
            // A back-end raced another producer: its value is not the newest.
            tracing::debug!(node = self.node, "publish from below dropped: {e}");
        }
    }

    /// Local requests whose deadline passed get their timeout.
    pub(super) fn observe_timer(&mut self, now: Instant) {
        for (&element, el) in self.observe.elements.iter_mut() {
            el.local.retain(|l| {
                if l.deadline > now {
                    return true;
                }
                self.deliveries.observed.push(Observed {
                    req: l.req,
                    element,
                    result: Err(TbonError::ObserveTimeout {
                        element,
                        have: l.have,
                    }),
                });
                false
            });
        }
    }

    pub(super) fn observe_deadline(&self) -> Option<Instant> {
        self.observe
            .elements
            .values()
            .flat_map(|el| el.local.iter().map(|l| l.deadline))
            .min()
    }

    /// A new parent (adoption): open requests were lost with the old one, so they are
    /// asked again.
    pub(super) fn observe_reparented(&mut self, out: &mut dyn Out) {
        let ids: Vec<u32> = self.observe.elements.keys().copied().collect();
        for id in ids {
            if let Some(el) = self.observe.elements.get_mut(&id) {
                el.asked = false;
            }
            self.observe_serve(id, out);
        }
    }

    /// Keeps `frame` (version `version`) if it is newer than the cache, then serves.
    fn observe_store(&mut self, element: u32, version: u64, frame: Bytes, out: &mut dyn Out) {
        let el = self.observe.elements.entry(element).or_default();
        if newer(version, el.version()) {
            el.cache = Some((version, frame));
        }
        self.observe_serve(element, out);
    }

    /// Answers every waiter the cache is newer for; if some still wait, makes sure one
    /// request of this node's own is open upwards.
    fn observe_serve(&mut self, element: u32, out: &mut dyn Out) {
        let root = self.is_root();
        let Some(el) = self.observe.elements.get_mut(&element) else {
            return;
        };
        let children = &self.children;
        el.children.retain(|&(ci, _)| children[ci].alive);
        if let Some((version, frame)) = &el.cache {
            let (version, frame) = (*version, frame.clone());
            el.children.retain(|&(ci, have)| {
                if !newer(version, have) {
                    return true;
                }
                out.send(children[ci].link, frame.clone());
                false
            });
            let value = frame.slice(HEADER_LEN + VERSION_LEN..);
            el.local.retain(|l| {
                if !newer(version, l.have) {
                    return true;
                }
                self.deliveries.observed.push(Observed {
                    req: l.req,
                    element,
                    result: Ok((version, value.clone())),
                });
                false
            });
        }
        let waiting = !el.children.is_empty() || !el.local.is_empty();
        if waiting && !el.asked && !root {
            if let Some(parent) = self.parent {
                out.send(parent, request_frame(element, el.version()));
                el.asked = true;
            }
        }
    }
}
