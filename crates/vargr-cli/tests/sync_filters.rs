//! User sync filters and heterogeneous filters on trees of real processes (`vargr
//! commnode` inside, `vargr backend` at the leaves): a C plugin that waits for k of n,
//! a sync filter that never releases (the stream's wave deadline lets its waves go and
//! the fault names it, its node and its stream), and per-node filters whose result
//! shows which node ran which filter. Needs a C compiler (`cc`) on the PATH.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use vargr_tbon::{NetworkOptions, StreamOptions, TbonError, Value};

const GUARD: Duration = Duration::from_secs(20);

/// Compiles C source (a file of the repository or text) into `dir/NAME.so`.
fn plugin(dir: &Path, name: &str, source: Result<&str, &str>) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let src = match source {
        Ok(file) => root.join(file),
        Err(text) => {
            let p = dir.join(format!("{name}.c"));
            std::fs::write(&p, text).unwrap();
            p
        }
    };
    let so = dir.join(format!("{name}.so"));
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wall", "-Werror", "-I"])
        .arg(root.join("crates/vargr-filter/include"))
        .arg(&src)
        .arg("-o")
        .arg(&so)
        .output()
        .expect("running cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    so
}

fn with_plugins(so: &[&Path]) -> NetworkOptions {
    NetworkOptions {
        plugins: so.iter().map(|p| p.display().to_string()).collect(),
        ..opts()
    }
}

fn ints(v: &[Value]) -> Vec<i32> {
    match v {
        [Value::IntArray(a)] => a.clone(),
        other => panic!("expected one %ad, got {other:?}"),
    }
}

#[test]
fn a_c_sync_filter_releases_waves_of_k_children() {
    let dir = tempfile::tempdir().unwrap();
    let so = plugin(
        dir.path(),
        "libsync_filters",
        Ok("examples/filter-plugin/sync_filters.c"),
    );
    let net = start("flat:4", "echo", with_plugins(&[&so]));
    let s = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("concat").sync("k_of_n:2"),
        )
        .unwrap();
    // Two multicasts: eight answers, which k_of_n:2 cuts into four waves of two
    // different back-ends each (wait-for-all would make two waves of four).
    for round in 0..2 {
        s.send(TAG_RANK, "%d", vec![Value::Int(100 * round)])
            .unwrap();
    }
    let mut all = Vec::new();
    for _ in 0..4 {
        let wave = ints(&recv_ok(&s, GUARD).values);
        assert_eq!(wave.len(), 2, "{wave:?}");
        assert_ne!(
            wave[0] % 100,
            wave[1] % 100,
            "two different back-ends: {wave:?}"
        );
        all.extend(wave);
    }
    all.sort_unstable();
    assert_eq!(all, vec![0, 1, 2, 3, 100, 101, 102, 103]);
    assert!(s
        .recv_timeout(Duration::from_millis(200))
        .unwrap()
        .is_none());
    // An unknown sync filter fails at creation, naming what is known.
    let e = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("concat").sync("k_of_m:2"),
        )
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("unknown sync filter \"k_of_m\"") && e.contains("k_of_n"),
        "{e}"
    );
    net.shutdown().unwrap();
}

const NEVER: &str = r#"
#include "vargr_filter.h"
static int create(const char *p, void **s, char *e, size_t n) { (void)p; (void)e; (void)n; *s = 0; return 0; }
static int never(void *s, const vargr_sync_view *v, vargr_sync_decision *o) { (void)s; (void)v; o->action = VARGR_SYNC_WAIT; return 0; }
static void destroy(void *s) { (void)s; }
static const vargr_sync_desc L[] = {{"never", "holds everything", create, never, destroy, 0}};
uint32_t vargr_sync_abi_version(void) { return VARGR_SYNC_ABI_VERSION; }
const vargr_sync_desc *vargr_sync_list(size_t *n) { *n = 1; return L; }
"#;

#[test]
fn a_sync_filter_that_never_releases_meets_the_wave_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let so = plugin(dir.path(), "libnever", Err(NEVER));
    // Root 0 waits for all; the commnodes (depth 1) run `never`.
    let net = start("1x2x4", "echo", with_plugins(&[&so]));
    let s = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("sum")
                .at_depth(1, None, Some("never"))
                .wave_deadline(Some(Duration::from_millis(300))),
        )
        .unwrap();
    s.send(TAG_RANK, "%d", vec![Value::Int(10)]).unwrap();
    // Each commnode reports once, then its overdue wave leaves and the root sums.
    let mut nodes = Vec::new();
    for _ in 0..2 {
        match recv_within(&s, GUARD) {
            Err(TbonError::Filter {
                stream,
                node,
                filter,
                reason,
            }) => {
                assert_eq!((stream, filter.as_str()), (s.id(), "never"));
                assert!(
                    reason.contains(
                        "sync filter never held a packet for the stream's wave deadline of 300ms"
                    ),
                    "{reason}"
                );
                nodes.push(node);
            }
            other => panic!("expected the deadline fault, got {other:?}"),
        }
    }
    nodes.sort_unstable();
    assert_eq!(nodes, vec![1, 2], "the fault names each commnode");
    let p = recv_ok(&s, GUARD);
    assert_eq!(p.values, vec![Value::Int(4 * 10 + 6)]);
    net.shutdown().unwrap();
}

#[test]
fn each_node_runs_the_filter_it_was_given() {
    // Nodes: front-end 0, commnodes 1 (back-ends 0, 1) and 2 (back-ends 2, 3).
    let net = start("1x2x4", "echo", opts());
    let s = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("sum")
                .at_depth(0, Some("concat"), None)
                .at_depth(1, Some("max"), None)
                .at_node(2, Some("min"), None),
        )
        .unwrap();
    // Back-ends answer 100 + rank. Commnode 1 takes the max (101), commnode 2 the min
    // (102), the front-end concatenates: sum anywhere, or max at node 2, would differ.
    s.send(TAG_RANK, "%d", vec![Value::Int(100)]).unwrap();
    assert_eq!(ints(&recv_ok(&s, GUARD).values), vec![101, 102]);
    // A bad spec for any node fails the creation at the front-end, naming its rule.
    let e = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("sum").at_node(2, Some("maxx"), None),
        )
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("the filters for Node(2)") && e.contains("unknown filter \"maxx\""),
        "{e}"
    );
    net.shutdown().unwrap();
}
