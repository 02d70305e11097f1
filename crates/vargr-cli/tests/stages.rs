//! Link stages chosen by labels, with real processes: hosts in two sites joined by an
//! emulated WAN, all on this machine.

mod common;

use std::time::{Duration, Instant};

use common::*;
use vargr_tbon::{BackendSpec, LinkStages, Network, NetworkOptions, StreamOptions, Value};
use vargr_topo::Topology;

const TWO_SITES: &str = "fe:0 => a:0 b:0 ;\na:0 => a:1 a:2 ;\nb:0 => b:1 b:2 ;\n";

fn two_site_options(wan: &str) -> NetworkOptions {
    let mut stages = LinkStages::default();
    for (host, site) in [("fe", "A"), ("a", "A"), ("b", "B")] {
        stages.sites.insert(host.into(), site.into());
    }
    stages.wan.insert("A-B".into(), wan.into());
    NetworkOptions {
        link_stages: stages,
        ..opts()
    }
}

#[test]
fn cross_site_links_are_delayed_and_results_unchanged() {
    let topo = Topology::parse_mrnet(TWO_SITES, "two-sites").unwrap();
    let net = Network::new(
        topo,
        BackendSpec::command(vargr(), &["backend", "echo"]),
        two_site_options("latency=15ms"),
    )
    .unwrap();
    let n = net.num_backends() as i64;
    let s = net
        .open_stream(&net.broadcast_communicator(), StreamOptions::new("sum"))
        .unwrap();
    for i in 0..5 {
        let t = Instant::now();
        let p = round_trip(&s, TAG_RANK, "%d", vec![Value::Int(i)]);
        let rtt = t.elapsed();
        assert_eq!(first_int(&p), i as i64 * n + n * (n - 1) / 2);
        // The path to site B crosses the WAN down and up: it cannot be faster than that.
        assert!(
            rtt >= Duration::from_millis(30),
            "round trip {rtt:?} skipped the emulated WAN"
        );
    }
    net.shutdown().unwrap();
}

#[test]
fn a_bad_wan_profile_is_refused_before_anything_starts() {
    let topo = Topology::parse_mrnet(TWO_SITES, "two-sites").unwrap();
    let err = Network::new(
        topo,
        BackendSpec::command(vargr(), &["backend", "echo"]),
        two_site_options("latency=fast"),
    )
    .err()
    .expect("a bad profile must be refused");
    let msg = err.to_string();
    assert!(msg.contains("A-B") && msg.contains("fast"), "{msg}");
}

#[test]
fn tree_links_between_sites_compress_and_deliver_the_same_packets() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = Topology::parse_mrnet(TWO_SITES, "two-sites").unwrap();
    let mut o = two_site_options("latency=1ms,bandwidth=100mbit").trace_dir(tmp.path());
    o.link_stages.codec = Some("fixed:lz4".into());
    let net = Network::new(topo, BackendSpec::command(vargr(), &["backend", "echo"]), o).unwrap();
    let n = net.num_backends();
    let s = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("null").sync(vargr_tbon::SyncMode::DontWait),
        )
        .unwrap();
    // A piecewise-constant field: compressible, and checked exactly on the way back.
    let field: Vec<f64> = (0..32_768).map(|i| f64::from(i / 64) * 0.25).collect();
    s.send(TAG_ECHO, "%alf", vec![Value::DoubleArray(field.clone())])
        .unwrap();
    for _ in 0..n {
        let p = recv_ok(&s, Duration::from_secs(30));
        assert_eq!(p.values, vec![Value::DoubleArray(field.clone())]);
    }
    net.shutdown().unwrap();
    // Between the sites the frames crossed the emulated WAN compressed.
    let bytes = stage_bytes(tmp.path());
    let at = |c: &str| bytes.get(c).copied().unwrap_or(0);
    let (wire, delivered) = (at("link/stage/emu/in"), at("link/stage/codec/in"));
    assert!(delivered >= 2 * 262_144, "{delivered} bytes delivered");
    assert!(
        delivered > 10 * wire,
        "{delivered} delivered from {wire} on the wire"
    );
}

#[test]
fn tree_links_between_sites_send_repeated_packets_as_fingerprints() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = Topology::parse_mrnet(TWO_SITES, "two-sites").unwrap();
    let mut o = two_site_options("latency=1ms,bandwidth=100mbit").trace_dir(tmp.path());
    o.link_stages.codec = Some("off".into());
    o.link_stages.dedup = Some("cdc:256:1k:8k".into());
    let net = Network::new(topo, BackendSpec::command(vargr(), &["backend", "echo"]), o).unwrap();
    let n = net.num_backends();
    let s = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("null").sync(vargr_tbon::SyncMode::DontWait),
        )
        .unwrap();
    // Incompressible but repeated: only redundancy elimination can shrink it.
    let mut x = 99u64;
    let field: Vec<i64> = (0..32_768)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as i64
        })
        .collect();
    for _ in 0..4 {
        s.send(TAG_ECHO, "%ald", vec![Value::LongArray(field.clone())])
            .unwrap();
        for _ in 0..n {
            let p = recv_ok(&s, Duration::from_secs(30));
            assert_eq!(p.values, vec![Value::LongArray(field.clone())]);
        }
    }
    net.shutdown().unwrap();
    let bytes = stage_bytes(tmp.path());
    let at = |c: &str| bytes.get(c).copied().unwrap_or(0);
    let (wire, delivered) = (at("link/stage/emu/in"), at("link/stage/dedup/in"));
    // Four rounds each way: after the first, the 256 KiB packets cross as fingerprints.
    assert!(delivered >= 8 * 262_144, "{delivered} bytes delivered");
    assert!(
        delivered > 3 * wire,
        "{delivered} delivered from {wire} on the wire"
    );
}
