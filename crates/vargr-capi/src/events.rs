//! Topology-change callbacks (MRNet's `register_EventCallback`): C functions called
//! when the tree changes (a node lost, an orphan adopted, waves that went without some
//! back-ends).
//!
//! Callbacks run on a thread of the network's own, never inside another vargr call:
//! a callback may then call vargr itself (receive, open streams, even shut the network
//! down) without deadlocking on the locks the caller holds. Waiting for events also
//! makes progress, so a fault is noticed while the program is busy elsewhere. The
//! thread stops when the network is shut down, and `vargr_network_shutdown` and
//! `vargr_network_free` wait for it: after they return, no callback runs, so the
//! callbacks' `user_data` may be freed.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use vargr_tbon::{TreeEvent, TreeEvents};

use crate::status::{Error, Result};

/// Kinds of tree events (`vargr_event.kind`), and what a callback asks for.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vargr_event_kind {
    /// Register for every kind (never an event's kind).
    VARGR_EVENT_ANY = 0,
    /// A node died (MRNet's `TOPOL_REMOVE_NODE`): `node`, `host`, and the back-ends
    /// that were below it (some may be adopted later).
    VARGR_EVENT_NODE_LOST = 1,
    /// Node `node` lost its parent `lost_parent` and was adopted by `new_parent`
    /// (MRNet's `TOPOL_CHANGE_PARENT`); `backends` are reachable again through it.
    VARGR_EVENT_REPARENTED = 2,
    /// Waves `first_wave .. end_wave` of `stream` went without `backends`, whose path up
    /// died with node `node`.
    VARGR_EVENT_WAVES_LOST = 3,
}

/// A change of the tree, as passed to a `vargr_event_callback`. Fields that do not
/// apply to the kind are 0 (`host`: NULL).
///
/// Ownership: the event and everything it points to belong to vargr and are valid
/// during the callback only; copy what you keep.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vargr_event {
    /// A `vargr_event_kind`.
    pub kind: c_int,
    /// The lost node, the adopted node, or (waves lost) the node that died.
    pub node: u32,
    /// `VARGR_EVENT_NODE_LOST`: the lost node's host.
    pub host: *const c_char,
    /// `VARGR_EVENT_REPARENTED`: the dead parent and the adopter.
    pub lost_parent: u32,
    pub new_parent: u32,
    /// `VARGR_EVENT_WAVES_LOST`: the stream and its waves `first_wave .. end_wave`.
    pub stream: u32,
    pub first_wave: u64,
    pub end_wave: u64,
    /// The back-ends concerned, `num_backends` of them.
    pub backends: *const u32,
    pub num_backends: usize,
}

/// Called with each tree event of a registered kind, on the network's event thread.
#[allow(non_camel_case_types)]
pub type vargr_event_callback =
    Option<unsafe extern "C" fn(event: *const vargr_event, user_data: *mut c_void)>;

/// The caller's pointer, handed back to its callback on the event thread.
#[derive(Clone, Copy)]
struct UserData(*mut c_void);
// SAFETY: vargr only passes the pointer back to the caller's callback; registering it
// is the caller's promise that the callback may use it on another thread.
unsafe impl Send for UserData {}

#[derive(Clone, Copy)]
struct Callback {
    kind: c_int,
    f: unsafe extern "C" fn(*const vargr_event, *mut c_void),
    data: UserData,
}

/// A network's callbacks and the thread that calls them.
#[derive(Default)]
pub struct Dispatcher {
    callbacks: Arc<Mutex<Vec<Callback>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long the event thread waits before looking again (it ends as soon as the
/// network is shut down; this only bounds a wait on a network that is never shut down).
const SLICE: Duration = Duration::from_millis(500);

impl Dispatcher {
    /// Registers `f` for events of `kind`; the first registration starts the thread,
    /// which reports events from then on (`events` is called only then).
    pub fn add(
        &self,
        kind: c_int,
        f: vargr_event_callback,
        data: *mut c_void,
        events: impl FnOnce() -> Result<TreeEvents>,
    ) -> Result<()> {
        let f = f.ok_or_else(|| Error::invalid("callback is NULL"))?;
        if !(0..=3).contains(&kind) {
            return Err(Error::invalid(format!(
                "kind {kind} is not a vargr_event_kind (0 any, 1 node lost, 2 reparented, \
                 3 waves lost)"
            )));
        }
        let mut thread = lock(&self.thread);
        lock(&self.callbacks).push(Callback {
            kind,
            f,
            data: UserData(data),
        });
        if thread.is_none() {
            let mut events = match events() {
                Ok(e) => e,
                Err(e) => {
                    lock(&self.callbacks).pop();
                    return Err(e);
                }
            };
            let callbacks = self.callbacks.clone();
            let spawned = std::thread::Builder::new()
                .name("vargr-events".into())
                .spawn(move || {
                    while let Ok(got) = events.next_timeout(SLICE) {
                        if let Some(e) = got {
                            let cbs = lock(&callbacks).clone();
                            dispatch(&e, &cbs);
                        }
                    }
                });
            match spawned {
                Ok(h) => *thread = Some(h),
                Err(e) => {
                    lock(&self.callbacks).pop();
                    return Err(Error::new(
                        crate::status::vargr_status::VARGR_ERR_IO,
                        format!("starting the event thread: {e}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Waits for the event thread to end (call after the network was shut down). From
    /// a callback, where waiting would be for itself, it returns at once.
    pub fn join(&self) {
        let mut slot = lock(&self.thread);
        let mine = slot
            .as_ref()
            .is_some_and(|h| h.thread().id() == std::thread::current().id());
        if mine {
            return;
        }
        if let Some(h) = slot.take() {
            let _ = h.join();
        }
    }
}

/// Calls every callback registered for the event's kind.
fn dispatch(e: &TreeEvent, cbs: &[Callback]) {
    let mut ev = vargr_event {
        kind: 0,
        node: 0,
        host: std::ptr::null(),
        lost_parent: 0,
        new_parent: 0,
        stream: 0,
        first_wave: 0,
        end_wave: 0,
        backends: std::ptr::null(),
        num_backends: 0,
    };
    // Kept alive until every callback has returned.
    let host;
    let backends: &[u32] = match e {
        TreeEvent::NodeLost {
            node,
            host: h,
            backends,
        } => {
            ev.kind = vargr_event_kind::VARGR_EVENT_NODE_LOST as c_int;
            ev.node = *node;
            host = CString::new(h.replace('\0', "")).unwrap_or_default();
            ev.host = host.as_ptr();
            backends
        }
        TreeEvent::Reparented {
            node,
            lost_parent,
            new_parent,
            backends,
        } => {
            ev.kind = vargr_event_kind::VARGR_EVENT_REPARENTED as c_int;
            ev.node = *node;
            ev.lost_parent = *lost_parent;
            ev.new_parent = *new_parent;
            backends
        }
        TreeEvent::WavesLost {
            stream,
            first,
            end,
            backends,
            lost,
        } => {
            ev.kind = vargr_event_kind::VARGR_EVENT_WAVES_LOST as c_int;
            ev.node = *lost;
            ev.stream = *stream;
            ev.first_wave = *first;
            ev.end_wave = *end;
            backends
        }
    };
    ev.backends = backends.as_ptr();
    ev.num_backends = backends.len();
    for c in cbs.iter().filter(|c| c.kind == 0 || c.kind == ev.kind) {
        // SAFETY: a callback the caller registered with this user data; the event and
        // what it points to live until after the call.
        unsafe { (c.f)(&ev, c.data.0) };
    }
}
