//! Observed elements (PATHS' last-observe) with real processes: the front-end publishes
//! versioned values, back-end viewers of different speeds take the newest one each
//! time, and the trace files show what each link carried.

mod common;

use std::time::Duration;

use common::*;
use vargr_tbon::{StreamOptions, SyncMode, Value};

/// `vargr backend` viewer tag (crates/vargr-cli/src/roles.rs).
const TAG_VIEW: i32 = 9;
const ELEMENT: u32 = 3;
const VERSIONS: u64 = 40;
const VALUE_LEN: usize = 2048;

fn value(version: u64) -> Vec<u8> {
    let mut v = random_bytes(VALUE_LEN, version);
    v[..8].copy_from_slice(&version.to_le_bytes());
    v
}

/// One viewer's answer: values seen, first and last version, intact, value bytes.
fn report(p: &vargr_tbon::Packet) -> (u64, u64, u64, bool, u64) {
    match p.values.as_slice() {
        [Value::UInt(n), Value::ULong(first), Value::ULong(last), Value::Int(ok), Value::ULong(bytes)] => {
            (u64::from(*n), *first, *last, *ok == 1, *bytes)
        }
        other => panic!("not a viewer report: {other:?}"),
    }
}

#[test]
fn viewers_see_growing_versions_and_each_commnode_link_carries_a_version_once() {
    let tmp = tempfile::tempdir().unwrap();
    // Root 0; commnode 1 over back-ends 3, 4 (ranks 0, 1); commnode 2 over 5, 6.
    let net = start("1x2x4", "viewer", opts().trace_dir(tmp.path()));
    let s = net
        .open_stream(
            &net.broadcast_communicator(),
            StreamOptions::new("null").sync(SyncMode::DontWait),
        )
        .unwrap();
    // Rank 3 spends 30 ms on each value: slower than the feed, so it skips.
    let consume_us = vec![0, 0, 0, 30_000];
    s.send(
        TAG_VIEW,
        "%ud %aud %uld %ud",
        vec![
            Value::UInt(ELEMENT),
            Value::UIntArray(consume_us),
            Value::ULong(VERSIONS),
            Value::UInt(10_000),
        ],
    )
    .unwrap();
    for version in 1..=VERSIONS {
        net.publish(ELEMENT, version, &value(version)).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut frames = std::collections::BTreeMap::new();
    for _ in 0..net.num_backends() {
        let p = recv_ok(&s, Duration::from_secs(30));
        let (n, first, last, ok, bytes) = report(&p);
        eprintln!(
            "viewer {}: {n} values, versions {first}..={last}, {bytes} bytes",
            p.source
        );
        assert!(
            ok,
            "viewer {}: versions went back or a value was wrong",
            p.source
        );
        assert_eq!(last, VERSIONS, "viewer {} ends on the newest", p.source);
        assert!(
            (1..=VERSIONS).contains(&n),
            "viewer {}: {n} values",
            p.source
        );
        assert_eq!(bytes, n * VALUE_LEN as u64, "viewer {}", p.source);
        frames.insert(p.source, n);
    }
    net.shutdown().unwrap();

    let links = vargr_tbon::trace::observed_per_link(tmp.path()).unwrap();
    eprintln!("observed values per link (from, to) → (frames, bytes): {links:?}");
    let carried = |from: u32, to: u32| links.get(&(from, to)).copied().unwrap_or_default();
    for (commnode, leaves) in [(1, [(3, 0), (4, 1)]), (2, [(5, 2), (6, 3)])] {
        let (up, up_bytes) = carried(0, commnode);
        let mut below = 0;
        for (leaf, rank) in leaves {
            let (n, bytes) = carried(commnode, leaf);
            // Every value a viewer took crossed its own link once, and nothing else did.
            assert_eq!(n, frames[&rank], "link {commnode}→{leaf}");
            assert!(bytes >= n * VALUE_LEN as u64, "link {commnode}→{leaf}");
            below += n;
        }
        // The cache: each version at most once on the commnode's link, however many
        // viewers below took it.
        assert!(
            (1..=VERSIONS).contains(&up),
            "link 0→{commnode}: {up} values for {VERSIONS} versions"
        );
        assert!(up <= below, "link 0→{commnode}: {up} values, {below} below");
        assert!(up_bytes >= up * VALUE_LEN as u64);
    }
}
