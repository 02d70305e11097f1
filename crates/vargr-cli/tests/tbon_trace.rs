//! The tree's collectors, trace files and clock alignment with real processes: every
//! node of a traced network writes `node-<id>.vtr`, with link and filter records, and
//! nodes whose clocks are skewed (`VARGR_CLOCK_SKEW_NS`) are aligned to the front-end.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use vargr_tbon::{NetworkOptions, StreamOptions, Value};
use vargr_trace::{EventOp, TraceFile};

const WAVES: usize = 10;

/// Records of `f` whose collector is `name` and whose op is `op`.
fn records<'a>(
    f: &'a TraceFile,
    name: &'a str,
    op: EventOp,
) -> impl Iterator<Item = &'a vargr_trace::Record> + 'a {
    f.threads
        .iter()
        .flat_map(|t| t.records.iter())
        .filter(move |r| r.op == op as u8 && f.collector_name(r.collector) == name)
}

fn node_of(f: &TraceFile) -> u32 {
    // Process names are "node <id> (<role>)".
    f.process
        .strip_prefix("node ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected process name {:?}", f.process))
}

/// Runs `WAVES` sum reductions over every back-end of a traced `kary:2^2` network.
fn traced_network(dir: &Path) -> vargr_topo::Topology {
    let net = start("kary:2^2", "echo", opts().trace_dir(dir));
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    let n = net.num_backends() as i64;
    for i in 0..WAVES as i32 {
        let p = round_trip(&s, TAG_RANK, "%d", vec![Value::Int(i)]);
        // Each back-end answers i + its rank: the sum is n*i + 0+1+…+(n-1).
        assert_eq!(first_int(&p), n * i64::from(i) + n * (n - 1) / 2);
    }
    let topo = net.topology().clone();
    net.shutdown().unwrap();
    topo
}

#[test]
fn every_node_writes_a_trace_with_link_and_filter_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let topo = traced_network(dir);

    let files = TraceFile::read_dir(dir).unwrap();
    let by_node: BTreeMap<u32, &TraceFile> = files.iter().map(|f| (node_of(f), f)).collect();
    assert_eq!(files.len(), topo.len(), "one file per node: {by_node:?}");
    for n in topo.nodes() {
        let f = by_node
            .get(&n.id)
            .unwrap_or_else(|| panic!("no trace file of node {}", n.id));
        assert!(dir.join(format!("node-{}.vtr", n.id)).is_file());
        let leaf = n.children.is_empty();

        // Data frames in and out, each at least a frame header, from and to tree
        // neighbours.
        let neighbours: Vec<u32> = n.children.iter().copied().chain(n.parent).collect();
        for (name, op) in [
            ("tbon/link/in", EventOp::LinkIn),
            ("tbon/link/out", EventOp::LinkOut),
        ] {
            let rs: Vec<_> = records(f, name, op).collect();
            assert!(
                rs.len() >= WAVES,
                "node {}: {} {name} records",
                n.id,
                rs.len()
            );
            for r in &rs {
                assert!(r.bytes >= 16 && r.bytes < 1 << 20, "node {}: {r:?}", n.id);
                assert!(neighbours.contains(&r.peer), "node {}: {r:?}", n.id);
                assert!(r.end >= r.start, "node {}: {r:?}", n.id);
            }
        }
        // Control traffic (stream open, clock exchange, shutdown) has its own collectors.
        assert!(records(f, "tbon/link/in/control", EventOp::LinkIn)
            .next()
            .is_some());

        // The sum filter runs once per wave on every node above the back-ends.
        let sums = records(f, "tbon/filter/up/sum", EventOp::Filter).count();
        let syncs = records(f, "tbon/sync/all", EventOp::Filter).count();
        if leaf {
            assert_eq!(sums, 0, "node {}", n.id);
        } else if n.parent.is_some() {
            assert_eq!(sums, WAVES, "node {}: sum filter calls", n.id);
            assert_eq!(syncs, WAVES * n.children.len(), "node {}", n.id);
        } else {
            // The front-end's file holds everything this test process recorded, other
            // tests' networks included.
            assert!(sums >= WAVES, "front-end: {sums} sum filter calls");
            assert!(syncs >= WAVES * n.children.len(), "front-end: {syncs}");
        }
        assert!(
            f.threads
                .iter()
                .any(|t| t.label.starts_with(&format!("node {} (", n.id))),
            "node {}: no labelled thread in {:?}",
            n.id,
            f.threads.iter().map(|t| &t.label).collect::<Vec<_>>()
        );
        // Same host, no skew: every alignment is small and was measured.
        assert!(f.align.aligned, "node {}: {:?}", n.id, f.align);
    }

    // The trace tools read the directory.
    let d = dir.to_str().unwrap();
    let r = run_cli(&["trace", "export", d], Duration::from_secs(60));
    assert!(r.status.success(), "{r:?}");
    let json = dir.join("trace.json");
    let r = run_cli(
        &["trace", "validate", json.to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
}

#[test]
fn a_trace_directory_that_cannot_be_created_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let topo = vargr_topo::Topology::generate("flat:1").unwrap();
    let err = match vargr_tbon::Network::new(
        topo,
        vargr_tbon::BackendSpec::command(vargr(), &["backend", "echo"]),
        opts().trace_dir(file.join("sub")),
    ) {
        Ok(_) => panic!("a trace directory under a file was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("trace directory") && err.contains("a-file"),
        "{err}"
    );
}

/// Commnodes run 30 ms ahead of the front-end, back-ends 50 ms: every alignment, in the
/// front-end's map and in the trace files, must contain the true offset.
#[test]
fn skewed_clocks_are_aligned_down_the_tree() {
    const COMMNODE_SKEW: i64 = 30_000_000;
    const BACKEND_SKEW: i64 = 50_000_000;
    // Error bounds are exact for constant skew; the slack only absorbs rounding.
    const SLACK: u64 = 100_000;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traces");
    let wrapper = tmp.path().join("skewed-commnode");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nVARGR_CLOCK_SKEW_NS={COMMNODE_SKEW} exec '{}' \"$@\"\n",
            vargr()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();

    let topo = vargr_topo::Topology::generate("kary:2^2").unwrap();
    let skew = format!("VARGR_CLOCK_SKEW_NS={BACKEND_SKEW}");
    let net = vargr_tbon::Network::new(
        topo.clone(),
        vargr_tbon::BackendSpec::command("env", &[&skew, vargr(), "backend", "echo"]),
        NetworkOptions {
            commnode_program: Some(wrapper.display().to_string()),
            ..Default::default()
        }
        .trace_dir(&dir),
    )
    .unwrap();
    let truth = |id: u32| {
        let n = topo.node(id).unwrap();
        match (n.parent, n.children.is_empty()) {
            (None, _) => 0,
            (Some(_), true) => BACKEND_SKEW,
            (Some(_), false) => COMMNODE_SKEW,
        }
    };
    let check = |what: &str, id: u32, a: vargr_tbon::Alignment| {
        let off = (a.offset_ns - truth(id)).unsigned_abs();
        assert!(
            off <= a.error_ns + SLACK,
            "{what}: node {id} aligned {a:?}, true offset {} ns",
            truth(id)
        );
        assert!(a.error_ns < 5_000_000, "{what}: node {id}: {a:?}");
    };
    let map = net.wait_clock_alignment(Duration::from_secs(20));
    eprintln!("alignments: {map:?}");
    assert_eq!(map.len(), topo.len(), "{map:?}");
    for (&id, &a) in &map {
        check("front-end map", id, a);
    }
    net.shutdown().unwrap();

    let files = TraceFile::read_dir(&dir).unwrap();
    assert_eq!(files.len(), topo.len());
    for f in &files {
        let id = node_of(f);
        check("trace file", id, f.align);
        assert_eq!(f.align, map[&id], "node {id}: file and map disagree");
    }
}

/// `vargr trace report --json` on a real tree's node files: the tree's shape as the
/// topology has it, and for every commnode the seed's down and up latency, arrival and
/// departure orders of its children over exactly the test's waves.
#[test]
fn the_report_gives_every_nodes_latencies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let topo = traced_network(dir);
    let d = dir.to_str().unwrap();
    let r = run_cli(&["trace", "report", d, "--json"], Duration::from_secs(60));
    assert!(r.status.success(), "{r:?}");
    assert!(
        !dir.join("report.html").exists(),
        "--json alone writes no HTML"
    );
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    let tree = &doc["tree"];
    assert_eq!(tree["root"], 0, "{tree}");
    let nodes = tree["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), topo.len(), "{tree}");
    for n in topo.nodes() {
        let j = nodes
            .iter()
            .find(|x| x["node"] == n.id)
            .unwrap_or_else(|| panic!("node {} missing", n.id));
        assert_eq!(j["parent"], serde_json::json!(n.parent), "node {}", n.id);
        let kids: Vec<u64> = j["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        let want: Vec<u64> = n.children.iter().map(|&c| u64::from(c)).collect();
        assert_eq!(kids, want, "node {}", n.id);
        // Commnodes are processes of their own: their files hold this test's waves
        // only (the front-end's holds every network of this test process).
        if n.parent.is_none() || n.children.is_empty() {
            continue;
        }
        assert_eq!(j["role"], "commnode");
        assert_eq!(j["reduce_waves"], WAVES, "node {}: {j}", n.id);
        assert_eq!(j["multicast_waves"], WAVES, "node {}: {j}", n.id);
        for what in ["down_latency", "up_latency", "subtree"] {
            assert_eq!(j[what]["count"], WAVES, "node {} {what}: {j}", n.id);
            assert!(j[what]["min"].as_i64().unwrap() >= 0, "node {}: {j}", n.id);
        }
        let mut lasts = 0;
        for c in j["children_times"].as_array().unwrap() {
            for hist in ["arrival_hist", "departure_hist"] {
                let h: Vec<u64> = c[hist]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect();
                assert_eq!(h.len(), n.children.len(), "node {} {hist}: {c}", n.id);
                assert_eq!(h.iter().sum::<u64>(), WAVES as u64, "node {} {hist}", n.id);
            }
            lasts += c["last"].as_u64().unwrap();
        }
        assert_eq!(
            lasts, WAVES as u64,
            "node {}: one child completes each wave",
            n.id
        );
    }
    // One path time map per back-end, from it to the root.
    let paths = tree["paths"].as_array().unwrap();
    let leaves = topo.nodes().filter(|n| n.children.is_empty()).count();
    assert_eq!(paths.len(), leaves);
    for p in paths {
        let path = p["path"].as_array().unwrap();
        assert_eq!(path.last().unwrap(), 0, "{p}");
        assert_eq!(path.len(), 3, "kary:2^2 has two hops to the root: {p}");
        assert_eq!(p["stages"].as_array().unwrap().len(), 12, "{p}");
    }

    // The HTML report and the tables show the tree.
    let r = run_cli(&["trace", "report", d], Duration::from_secs(60));
    assert!(r.status.success(), "{r:?}");
    assert!(
        r.stdout.contains("tree nodes (the seed's down latency"),
        "{r:?}"
    );
    assert!(r.stdout.contains("slowest back-end path: node "), "{r:?}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for part in [
        "id=\"tree\"",
        "Transit per edge",
        "aria-label=\"path time map\"",
        "aria-label=\"departure order\"",
    ] {
        assert!(html.contains(part), "{part} missing from the report");
    }
}
