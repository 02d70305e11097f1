//! User sync filters on a fake clock: the example C plugin (k of n, all within a time),
//! a Rust policy, the stream's wave deadline against a filter that never releases, and
//! how failures are named. Needs a C compiler (`cc`) on the PATH.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use vargr_filter::{
    FilterError, Registry, SyncDecision, SyncFilter, SyncPolicy, SyncView, SYNC_PLUGIN_ABI_VERSION,
};
use vargr_wire::{Packet, Value};

fn p(child: u32) -> Packet {
    pkt_from(child, "%d", vec![Value::Int(child as i32)])
}

/// The sources of each wave.
fn sources(waves: Vec<Vec<Packet>>) -> Vec<Vec<u32>> {
    waves
        .into_iter()
        .map(|w| w.into_iter().map(|p| p.source).collect())
        .collect()
}

fn example(dir: &Path) -> PathBuf {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/filter-plugin/sync_filters.c");
    compile(dir, "libsync_filters.so", Source::File(src))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn k_of_n_releases_a_wave_once_k_children_sent() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Registry::with_builtins();
    assert_eq!(
        r.load_plugin(&example(dir.path())).unwrap(),
        vec!["k_of_n", "all_within"]
    );
    assert_eq!(SYNC_PLUGIN_ABI_VERSION, 1);
    assert!(r.sync_names().contains(&"k_of_n".to_string()));
    assert!(
        r.names().iter().all(|n| n != "k_of_n"),
        "sync filters have a name space of their own"
    );
    let t = Instant::now();
    let mut s = SyncFilter::with_policy(r.create_sync("k_of_n:2").unwrap(), 4).at(7, 3);
    assert_eq!(s.policy_name(), "k_of_n");
    assert!(s.push(0, p(0), t).is_empty());
    assert_eq!(sources(s.push(2, p(2), t)), vec![vec![0, 2]]);
    assert!(s.push(3, p(3), t).is_empty());
    // Child 3's packet waited; child 1's completes the next wave with it.
    assert_eq!(sources(s.push(1, p(1), t)), vec![vec![1, 3]]);
    // Two queued from child 0 still make one wave at a time (heads only).
    assert!(s.push(0, p(0), t).is_empty());
    assert!(s.push(0, p(0), t).is_empty());
    assert_eq!(sources(s.push(1, p(1), t)), vec![vec![0, 1]]);
    // With one live child left, k is capped at it: child 0's queued packet leaves.
    assert!(s.remove_child(1, t).is_empty());
    assert!(s.remove_child(2, t).is_empty());
    assert_eq!(sources(s.remove_child(3, t)), vec![vec![0]]);
    assert_eq!(s.live_children(), 1);
    assert_eq!(sources(s.push(0, p(0), t)), vec![vec![0]]);
    assert_eq!(s.released(), 5);
    assert!(s.take_fault().is_none());

    match r.create_sync("k_of_n:zero").err().unwrap() {
        FilterError::PluginFailed {
            filter, message, ..
        } => {
            assert_eq!(filter, "k_of_n");
            assert_eq!(
                message,
                "k_of_n: parameter \"zero\" is not a positive integer"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn all_within_waits_for_all_and_asks_for_a_timer() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Registry::with_builtins();
    r.load_plugin(&example(dir.path())).unwrap();
    let t = Instant::now();
    let mut s = SyncFilter::with_policy(r.create_sync("all_within:100").unwrap(), 3);
    assert!(s.push(0, p(0), t).is_empty());
    assert_eq!(s.poll_timeout(), Some(t + ms(100)));
    assert!(s.push(1, p(1), t + ms(40)).is_empty());
    assert!(s.on_timeout(t + ms(99)).is_empty());
    assert_eq!(sources(s.on_timeout(t + ms(100))), vec![vec![0, 1]]);
    // All three: at once, no timer left.
    assert!(s.push(2, p(2), t + ms(200)).is_empty());
    assert!(s.push(0, p(0), t + ms(200)).is_empty());
    assert_eq!(sources(s.push(1, p(1), t + ms(201))), vec![vec![0, 1, 2]]);
    assert_eq!(s.poll_timeout(), None);
}

/// Releases a wave when two live children sent, and cannot stand three: a user policy
/// in Rust.
struct Pairs;

impl SyncPolicy for Pairs {
    fn decide(&mut self, v: &SyncView<'_>) -> Result<SyncDecision, FilterError> {
        match (v.ready_live(), v.queued(0)) {
            (3, _) => Err(FilterError::Format {
                filter: "pairs".into(),
                reason: "three is not a pair".into(),
            }),
            // Child 0 is held back while it has two queued, to get to three.
            (2, q) if q < 2 => Ok(SyncDecision::ReleaseHeads),
            _ => Ok(SyncDecision::Wait),
        }
    }
    fn name(&self) -> &str {
        "pairs"
    }
}

#[test]
fn a_rust_policy_that_fails_is_named_and_replaced_by_wait_for_all() {
    let mut r = Registry::with_builtins();
    r.register_sync("pairs", Box::new(|_: &str| Ok(Box::new(Pairs) as _)));
    let t = Instant::now();
    let mut s = SyncFilter::with_policy(r.create_sync("pairs").unwrap(), 4);
    assert!(s.push(3, p(3), t).is_empty());
    assert_eq!(sources(s.push(1, p(1), t)), vec![vec![1, 3]]);
    assert!(s.push(0, p(0), t).is_empty());
    assert!(s.push(0, p(0), t).is_empty());
    assert!(s.push(1, p(1), t).is_empty());
    // Three ready: the policy fails; wait-for-all takes over, and the fourth completes.
    assert!(s.push(2, p(2), t).is_empty());
    let fault = s.take_fault().expect("the failure is reported");
    assert!(matches!(&fault, FilterError::SyncFailed { filter, .. } if filter == "pairs"));
    assert_eq!(
        fault.to_string(),
        "sync filter pairs failed: pairs: three is not a pair; this node waits for all on the stream from now on"
    );
    assert_eq!(s.policy_name(), "all");
    assert!(s.take_fault().is_none(), "reported once");
    assert_eq!(sources(s.push(3, p(3), t)), vec![vec![0, 1, 2, 3]]);
}

const NEVER: &str = r#"
#include <stdlib.h>
#include "vargr_filter.h"
static int create(const char *p, void **s, char *e, size_t n) { (void)p; (void)e; (void)n; *s = NULL; return 0; }
static int never(void *s, const vargr_sync_view *v, vargr_sync_decision *o) { (void)s; (void)v; o->action = VARGR_SYNC_WAIT; return 0; }
static int fails(void *s, const vargr_sync_view *v, vargr_sync_decision *o) { (void)s; (void)o; return v->ready_live > 1 ? 9 : 0; }
static const char *msg(void *s) { (void)s; return "two is too many"; }
static int bad_child(void *s, const vargr_sync_view *v, vargr_sync_decision *o) { (void)s; o->action = VARGR_SYNC_RELEASE_CHILD; o->child = (int32_t)v->num_children; return 0; }
static void destroy(void *s) { (void)s; }
static const vargr_sync_desc L[] = {
    {"never", 0, create, never, destroy, 0},
    {"fails", 0, create, fails, destroy, msg},
    {"bad_child", 0, create, bad_child, destroy, 0},
};
uint32_t vargr_sync_abi_version(void) { return VARGR_SYNC_ABI_VERSION; }
const vargr_sync_desc *vargr_sync_list(size_t *n) { *n = 3; return L; }
"#;

#[test]
fn the_deadline_releases_what_a_filter_holds_and_failures_name_the_filter() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Registry::with_builtins();
    let so = compile(dir.path(), "libnever.so", Source::Text(NEVER));
    assert_eq!(
        r.load_plugin(&so).unwrap(),
        vec!["never", "fails", "bad_child"]
    );
    let t = Instant::now();

    let mut s =
        SyncFilter::with_policy(r.create_sync("never").unwrap(), 2).with_deadline(Some(ms(500)));
    assert!(s.push(0, p(0), t).is_empty());
    assert!(s.push(1, p(1), t + ms(100)).is_empty());
    assert_eq!(s.poll_timeout(), Some(t + ms(500)));
    assert!(s.on_timeout(t + ms(499)).is_empty());
    assert_eq!(sources(s.on_timeout(t + ms(500))), vec![vec![0, 1]]);
    let fault = s.take_fault().expect("the deadline is reported");
    assert!(
        matches!(&fault, FilterError::WaveDeadline { filter, deadline } if filter == "never" && *deadline == ms(500)),
        "{fault:?}"
    );
    // Later overdue waves leave too, without another report.
    assert!(s.push(1, p(1), t + ms(600)).is_empty());
    assert_eq!(sources(s.on_timeout(t + ms(1100))), vec![vec![1]]);
    assert!(s.take_fault().is_none());
    assert_eq!(s.overdue(), 2);
    assert_eq!(s.policy_name(), "never", "a slow filter is not replaced");

    let mut s = SyncFilter::with_policy(r.create_sync("fails").unwrap(), 2);
    assert!(s.push(0, p(0), t).is_empty());
    assert_eq!(sources(s.push(1, p(1), t)), vec![vec![0, 1]]);
    let e = s.take_fault().unwrap().to_string();
    assert!(
        e.contains("sync filter fails failed: fails: plugin returned status 9: two is too many"),
        "{e}"
    );

    let mut s = SyncFilter::with_policy(r.create_sync("bad_child").unwrap(), 2);
    assert!(s.push(0, p(0), t).is_empty());
    let e = s.take_fault().unwrap().to_string();
    assert!(
        e.contains("bad_child: VARGR_SYNC_RELEASE_CHILD names child 2, out of 0..2"),
        "{e}"
    );
}

#[test]
fn sync_plugin_load_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Registry::with_builtins();
    let err = |r: &mut Registry, p: &Path| r.load_plugin(p).unwrap_err().to_string();
    let v2 = compile(
        dir.path(),
        "libsyncv2.so",
        Source::Text("#include <stdint.h>\nuint32_t vargr_sync_abi_version(void) { return 2; }\n"),
    );
    let e = err(&mut r, &v2);
    assert!(
        e.contains("plugin speaks sync filter ABI version 2, this vargr speaks 1"),
        "{e}"
    );
    let nolist = compile(
        dir.path(),
        "libsyncnolist.so",
        Source::Text("#include <stdint.h>\nuint32_t vargr_sync_abi_version(void) { return 1; }\n"),
    );
    assert!(err(&mut r, &nolist).contains("missing symbol vargr_sync_list"));
    let nofns = compile(
        dir.path(),
        "libsyncnofns.so",
        Source::Text(
            "#include \"vargr_filter.h\"\nstatic const vargr_sync_desc L[] = {{\"ok\", 0, 0, 0, 0, 0}};\n\
             uint32_t vargr_sync_abi_version(void) { return VARGR_SYNC_ABI_VERSION; }\n\
             const vargr_sync_desc *vargr_sync_list(size_t *n) { *n = 1; return L; }\n",
        ),
    );
    assert!(err(&mut r, &nofns).contains("sync filter \"ok\" lacks create, decide or destroy"));
    let clash = compile(
        dir.path(),
        "libsyncclash.so",
        Source::Text(
            "#include \"vargr_filter.h\"\nstatic int c(const char *p, void **s, char *e, size_t n) { (void)p; (void)e; (void)n; *s = 0; return 0; }\n\
             static int d(void *s, const vargr_sync_view *v, vargr_sync_decision *o) { (void)s; (void)v; (void)o; return 0; }\n\
             static void x(void *s) { (void)s; }\n\
             static const vargr_sync_desc L[] = {{\"All\", 0, c, d, x, 0}};\n\
             uint32_t vargr_sync_abi_version(void) { return VARGR_SYNC_ABI_VERSION; }\n\
             const vargr_sync_desc *vargr_sync_list(size_t *n) { *n = 1; return L; }\n",
        ),
    );
    assert!(err(&mut r, &clash).contains("filter name \"All\" is already registered"));
    match r.create_sync("kofn:2").err().unwrap() {
        FilterError::UnknownSyncFilter { name, known } => {
            assert_eq!(name, "kofn");
            assert!(
                known.contains("all") && known.contains("timeout"),
                "{known}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.create_sync("TimeOut:5s").unwrap().name(), "timeout");
    assert!(matches!(
        r.create_sync("timeout:soon").err().unwrap(),
        FilterError::BadSyncMode { .. }
    ));
}
