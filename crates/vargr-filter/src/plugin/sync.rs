//! Sync filters (synchronization policies) loaded from shared objects: the C side of
//! [`SyncPolicy`], declared in `include/vargr_filter.h` beside the transformation
//! filters'. A plugin sees the queues as counts and waiting times, never the packets, and
//! answers with a decision that the host checks before it acts on it.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

use libloading::Library;

use super::{create_state, failed, CreateFn, LastErrorFn, OK};
use crate::{FilterError, SyncDecision, SyncEvent, SyncPolicy, SyncView};

/// The sync ABI version this host speaks (`VARGR_SYNC_ABI_VERSION`).
pub const SYNC_ABI_VERSION: u32 = 1;

const EVENT_PACKET: i32 = 1;
const EVENT_HOLE: i32 = 2;
const EVENT_CHILD_LOST: i32 = 3;
const EVENT_TIMER: i32 = 4;
const EVENT_RELEASED: i32 = 5;

const WAIT: i32 = 0;
const RELEASE_HEADS: i32 = 1;
const RELEASE_CHILD: i32 = 2;

#[repr(C)]
pub(super) struct ViewC {
    node_id: u32,
    stream: u32,
    num_children: u32,
    live_children: u32,
    ready_live: u32,
    ready: u32,
    event: i32,
    event_child: i32,
    released: u64,
    oldest_wait_ns: u64,
    queued: *const u32,
    live: *const u8,
    waited_ns: *const u64,
}

#[repr(C)]
pub(super) struct DecisionC {
    action: i32,
    child: i32,
    wake_after_ns: u64,
}

pub(super) type DecideFn = unsafe extern "C" fn(*mut c_void, *const ViewC, *mut DecisionC) -> c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct SyncDescC {
    pub(super) name: *const c_char,
    description: *const c_char,
    pub(super) create: Option<CreateFn>,
    pub(super) decide: Option<DecideFn>,
    pub(super) destroy: Option<unsafe extern "C" fn(*mut c_void)>,
    pub(super) last_error: Option<LastErrorFn>,
}

/// One sync filter listed by a loaded plugin: a factory for [`PluginSync`]s.
#[derive(Clone)]
pub(crate) struct SyncEntry {
    pub(crate) name: String,
    pub(super) create: CreateFn,
    pub(super) decide: DecideFn,
    pub(super) destroy: unsafe extern "C" fn(*mut c_void),
    pub(super) last_error: Option<LastErrorFn>,
    /// Keeps the library loaded while the entry or an instance lives.
    pub(super) _lib: Arc<Library>,
}

// SAFETY: function pointers into a library kept loaded by the Arc; the ABI requires
// create() to be callable from any thread.
unsafe impl Send for SyncEntry {}
unsafe impl Sync for SyncEntry {}

impl SyncEntry {
    pub(crate) fn instantiate(&self, params: &str) -> Result<Box<dyn SyncPolicy>, FilterError> {
        let state = create_state(&self.name, self.create, params)?;
        Ok(Box::new(PluginSync {
            entry: self.clone(),
            state,
            queued: Vec::new(),
            live: Vec::new(),
            waited: Vec::new(),
        }))
    }
}

/// A plugin sync filter instance: owns the plugin's state and destroys it on drop. The
/// per-child arrays handed to decide() are kept between calls to save allocations.
struct PluginSync {
    entry: SyncEntry,
    state: *mut c_void,
    queued: Vec<u32>,
    live: Vec<u8>,
    waited: Vec<u64>,
}

// SAFETY: the ABI requires instances to be usable from any thread, one at a time.
unsafe impl Send for PluginSync {}

impl Drop for PluginSync {
    fn drop(&mut self) {
        // SAFETY: the state came from this entry's create() and is destroyed once.
        unsafe { (self.entry.destroy)(self.state) }
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn u32_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl SyncPolicy for PluginSync {
    fn decide(&mut self, v: &SyncView<'_>) -> Result<SyncDecision, FilterError> {
        let now = v.now();
        let n = v.children();
        self.queued.clear();
        self.live.clear();
        self.waited.clear();
        for c in 0..n {
            self.queued.push(u32_of(v.queued(c)));
            self.live.push(u8::from(v.is_live(c)));
            self.waited.push(
                v.head_since(c)
                    .map_or(0, |t| ns(now.saturating_duration_since(t))),
            );
        }
        let (event, child) = match v.event() {
            SyncEvent::Packet(c) => (EVENT_PACKET, c as i64),
            SyncEvent::Hole(c) => (EVENT_HOLE, c as i64),
            SyncEvent::ChildLost(c) => (EVENT_CHILD_LOST, c as i64),
            SyncEvent::Timer => (EVENT_TIMER, -1),
            SyncEvent::Released => (EVENT_RELEASED, -1),
        };
        let view = ViewC {
            node_id: v.node_id(),
            stream: v.stream(),
            num_children: u32_of(n),
            live_children: u32_of(v.live_children()),
            ready_live: u32_of(v.ready_live()),
            ready: u32_of(v.ready()),
            event,
            event_child: i32::try_from(child).unwrap_or(-1),
            released: v.released(),
            oldest_wait_ns: v
                .oldest_head()
                .map_or(0, |t| ns(now.saturating_duration_since(t))),
            queued: self.queued.as_ptr(),
            live: self.live.as_ptr(),
            waited_ns: self.waited.as_ptr(),
        };
        let mut out = DecisionC {
            action: WAIT,
            child: -1,
            wake_after_ns: 0,
        };
        // SAFETY: the view and its arrays live for the call; `out` is ours.
        let status = unsafe { (self.entry.decide)(self.state, &view, &mut out) };
        if status != OK {
            return Err(failed(
                &self.entry.name,
                status,
                self.entry.last_error,
                self.state,
            ));
        }
        let bad = |reason: String| FilterError::BadDecision {
            filter: self.entry.name.clone(),
            reason,
        };
        match out.action {
            WAIT if out.wake_after_ns == 0 => Ok(SyncDecision::Wait),
            WAIT => Ok(SyncDecision::WaitUntil(
                now + Duration::from_nanos(out.wake_after_ns),
            )),
            RELEASE_HEADS => Ok(SyncDecision::ReleaseHeads),
            RELEASE_CHILD => usize::try_from(out.child)
                .ok()
                .filter(|&c| c < n)
                .map(SyncDecision::ReleaseChild)
                .ok_or_else(|| {
                    bad(format!(
                        "VARGR_SYNC_RELEASE_CHILD names child {}, out of 0..{n}",
                        out.child
                    ))
                }),
            a => Err(bad(format!("unknown action {a}"))),
        }
    }

    fn name(&self) -> &str {
        &self.entry.name
    }
}
