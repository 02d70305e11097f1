//! Disk cache behaviour: persistence, limits, damage, collisions, the Bloom filter,
//! sharing. Every check compares bytes exactly.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use super::*;

/// splitmix64: reproducible test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// A segment of 32..=256 bytes, the protocol's range.
    fn segment(&mut self) -> Vec<u8> {
        let n = 32 + (self.next() % 225) as usize;
        self.bytes(n)
    }
}

fn small() -> DiskConfig {
    DiskConfig {
        container_bytes: 64 << 10,
        disk_bytes: 1 << 30,
        memory_bytes: 64 << 10,
        chunk_bytes: 4096,
        write_buffer_bytes: 8192,
        bloom_entries: Some(100_000),
        max_segment_bytes: 32 << 10,
        ..DiskConfig::default()
    }
}

fn with_bits(bits: u8, cfg: DiskConfig) -> DiskConfig {
    DiskConfig {
        bits: FpBits::new(bits).unwrap(),
        ..cfg
    }
}

/// Inserts `n` random segments; returns them with their full fingerprints.
fn fill(c: &mut impl SegmentCache, rng: &mut Rng, n: usize) -> Vec<(Fingerprint, Vec<u8>)> {
    (0..n)
        .map(|_| {
            let s = rng.segment();
            let f = Fingerprint::full(&s);
            c.insert(f, &s).unwrap();
            (f, s)
        })
        .collect()
}

fn get(c: &mut impl SegmentCache, f: Fingerprint) -> Option<Vec<u8>> {
    let bits = c.bits();
    c.get(f.truncate(bits)).unwrap().map(|b| b.to_vec())
}

fn containers(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "vgc"))
        .collect();
    v.sort();
    v
}

#[test]
fn round_trip_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(1);
    let mut c = DiskCache::open(dir.path(), with_bits(64, small())).unwrap();
    let segs = fill(&mut c, &mut rng, 20_000);
    // Read back while some records are still buffered, some only on disk.
    for (f, s) in segs.iter().rev() {
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
    let st = c.stats();
    assert_eq!(st.segments, 20_000);
    assert!(st.containers > 20, "{st:?}");
    assert!(st.memory_evictions > 0, "{st:?}");
    assert!(st.chunk_bytes <= 64 << 10);
    drop(c);

    let mut c = DiskCache::open(dir.path(), with_bits(64, small())).unwrap();
    assert_eq!(c.stats().segments, 20_000);
    assert_eq!(c.stats().damaged_records, 0);
    for (f, s) in &segs {
        assert!(c.may_contain(f.truncate(c.bits())));
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
    let st = c.stats();
    assert_eq!(st.hits, 20_000);
    assert_eq!(st.hit_ages.iter().map(|b| b.hits).sum::<u64>(), st.hits);
}

#[test]
fn repeated_inserts_are_not_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(15);
    let mut c = DiskCache::open(dir.path(), small()).unwrap();
    let segs = fill(&mut c, &mut rng, 1000);
    let disk = c.stats().disk_bytes;
    for (f, s) in &segs {
        c.insert(*f, s).unwrap();
    }
    let st = c.stats();
    assert_eq!(
        (st.duplicates, st.disk_bytes, st.inserts),
        (1000, disk, 2000)
    );
    for (f, s) in &segs {
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
}

#[test]
fn reopen_resumes_the_newest_container() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(14);
    let mut c = DiskCache::open(dir.path(), small()).unwrap();
    let a = fill(&mut c, &mut rng, 10);
    drop(c);
    let mut c = DiskCache::open(dir.path(), small()).unwrap();
    let b = fill(&mut c, &mut rng, 10);
    drop(c);
    assert_eq!(containers(dir.path()).len(), 1);
    let mut c = DiskCache::open(dir.path(), small()).unwrap();
    for (f, s) in a.iter().chain(&b) {
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
}

#[test]
fn disk_limit_evicts_least_recently_used_containers() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DiskConfig {
        disk_bytes: 256 << 10,
        ..with_bits(64, small())
    };
    let mut c = DiskCache::open(dir.path(), cfg.clone()).unwrap();
    let mut rng = Rng(2);
    let first = fill(&mut c, &mut rng, 100);
    let rest = fill(&mut c, &mut rng, 10_000);
    let st = c.stats();
    assert!(st.disk_bytes <= 256 << 10, "{st:?}");
    assert!(st.disk_evictions > 0);
    c.flush().unwrap();
    let on_disk: u64 = containers(dir.path())
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(on_disk, c.stats().disk_bytes);
    for (f, _) in &first {
        assert_eq!(get(&mut c, *f), None);
        assert!(!c.may_contain(f.truncate(c.bits())) || c.stats().bloom.is_some());
    }
    for (f, s) in &rest[rest.len() - 500..] {
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
    drop(c);
    let mut c = DiskCache::open(dir.path(), cfg).unwrap();
    assert_eq!(get(&mut c, first[0].0), None);
    let (f, s) = rest.last().unwrap();
    assert_eq!(get(&mut c, *f).as_ref(), Some(s));
}

#[test]
fn use_order_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(43);
    let cfg = || with_bits(40, small());
    let mut c = DiskCache::open(dir.path(), cfg()).unwrap();
    let segs = fill(&mut c, &mut rng, 1500); // several containers
                                             // The oldest container's segments are read: it becomes the most recently used.
    get(&mut c, segs[0].0).unwrap();
    drop(c);
    let conts = containers(dir.path());
    assert!(conts.len() >= 3, "{conts:?}");
    // Reopen with room for fewer containers: the least recently used go first, and
    // that is no longer the oldest one.
    let total: u64 = conts.iter().map(|p| fs::metadata(p).unwrap().len()).sum();
    let tight = DiskConfig {
        disk_bytes: total - 1,
        ..cfg()
    };
    let mut c = DiskCache::open(dir.path(), tight).unwrap();
    assert_eq!(get(&mut c, segs[0].0).as_ref(), Some(&segs[0].1));
    assert!(
        !conts[1].exists(),
        "the least recently used container is evicted"
    );
}

#[test]
fn recently_read_container_outlives_newer_ones() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DiskConfig {
        disk_bytes: 256 << 10,
        ..with_bits(64, small())
    };
    let mut c = DiskCache::open(dir.path(), cfg).unwrap();
    let mut rng = Rng(3);
    let first = fill(&mut c, &mut rng, 100);
    fill(&mut c, &mut rng, 500);
    for _ in 0..20 {
        // Keep reading the first container while writing several containers' worth.
        assert_eq!(get(&mut c, first[0].0).as_ref(), Some(&first[0].1));
        fill(&mut c, &mut rng, 200);
    }
    assert!(c.stats().disk_evictions > 0);
    assert_eq!(get(&mut c, first[1].0).as_ref(), Some(&first[1].1));
}

/// Offset of the record holding `seg` in the container file at `path`.
fn find(path: &Path, seg: &[u8]) -> usize {
    let data = fs::read(path).unwrap();
    data.windows(seg.len())
        .position(|w| w == seg)
        .expect("segment in file")
}

fn flip(path: &Path, at: usize) {
    let mut data = fs::read(path).unwrap();
    data[at] ^= 0x40;
    fs::write(path, data).unwrap();
}

#[test]
fn flipped_byte_drops_only_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(4);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let segs = fill(&mut c, &mut rng, 200);
    drop(c);
    let path = &containers(dir.path())[0];
    let victim = 57;
    flip(path, find(path, &segs[victim].1) + 10);

    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let st = c.stats();
    assert_eq!(st.damaged_records, 1, "{st:?}");
    assert_eq!(st.damaged_containers, 0);
    assert!(st.warnings[0].contains("fails its checksum"), "{st:?}");
    for (i, (f, s)) in segs.iter().enumerate() {
        let want = (i != victim).then(|| s.clone());
        assert_eq!(get(&mut c, *f), want, "segment {i}");
    }
}

#[test]
fn sealed_containers_open_from_their_sidecars() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(41);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let segs = fill(&mut c, &mut rng, 2000); // about 290 KB: four sealed containers
    drop(c);
    let conts = containers(dir.path());
    assert!(conts.len() >= 4, "{conts:?}");
    let sidecars = |d: &Path| -> usize {
        fs::read_dir(d)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .to_string_lossy()
                    .ends_with(".vgc.idx")
            })
            .count()
    };
    assert_eq!(sidecars(dir.path()), conts.len() - 1, "all but the newest");
    // A byte flipped in a sealed container's payload: the open does not read it (its
    // sidecar is good), the read catches it, everything else is served.
    let victim = 10;
    flip(&conts[0], find(&conts[0], &segs[victim].1) + 3);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    assert_eq!(c.stats().damaged_records, 0);
    for (i, (f, s)) in segs.iter().enumerate() {
        let want = (i != victim).then(|| s.clone());
        assert_eq!(get(&mut c, *f), want, "segment {i}");
    }
    assert_eq!(c.stats().damaged_records, 1);
    drop(c);
    // A damaged sidecar is ignored (and removed): the container is read through.
    let side = super::disk::sidecar::path_for(&conts[1]);
    let mut b = fs::read(&side).unwrap();
    b[40] ^= 1;
    fs::write(&side, b).unwrap();
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    assert!(
        c.stats()
            .warnings
            .iter()
            .any(|w| w.contains("damaged or stale")),
        "{:?}",
        c.stats().warnings
    );
    for (f, s) in segs.iter().skip(victim + 1) {
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
    drop(c);
    // A container cut shorter than its sidecar says: stale, read through, cut cleanly.
    let len = fs::metadata(&conts[2]).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&conts[2])
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let st = c.stats();
    assert_eq!(st.damaged_containers, 1, "{st:?}");
    let served = segs
        .iter()
        .filter(|(f, s)| get(&mut c, *f).as_ref() == Some(s))
        .count();
    assert_eq!(
        served,
        segs.len() - 2,
        "all but the flipped and the torn record"
    );
}

#[test]
fn damage_after_open_is_caught_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(5);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let segs = fill(&mut c, &mut rng, 200);
    c.flush().unwrap();
    let path = &containers(dir.path())[0];
    flip(path, find(path, &segs[3].1) + 1);
    assert_eq!(get(&mut c, segs[3].0), None);
    assert_eq!(c.stats().damaged_records, 1);
    assert_eq!(get(&mut c, segs[3].0), None);
    assert_eq!(get(&mut c, segs[4].0).as_ref(), Some(&segs[4].1));
    // A resend repairs it.
    c.insert(segs[3].0, &segs[3].1).unwrap();
    assert_eq!(get(&mut c, segs[3].0).as_ref(), Some(&segs[3].1));
}

#[test]
fn damaged_length_drops_the_rest_of_the_container() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(6);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let segs = fill(&mut c, &mut rng, 100);
    drop(c);
    let path = &containers(dir.path())[0];
    let len_at = find(path, &segs[40].1) - 12;
    flip(path, len_at + 1); // +16384 bytes: runs into the following records
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let st = c.stats();
    assert_eq!(st.damaged_containers, 1, "{st:?}");
    assert_eq!(fs::metadata(path).unwrap().len(), len_at as u64);
    for (i, (f, s)) in segs.iter().enumerate() {
        let want = (i < 40).then(|| s.clone());
        assert_eq!(get(&mut c, *f), want, "segment {i}");
    }
    // Appends continue cleanly after the cut.
    let more = fill(&mut c, &mut rng, 5);
    drop(c);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    assert_eq!(c.stats().damaged_records, 0);
    for (f, s) in more.iter().chain(&segs[..40]) {
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
}

#[test]
fn torn_tail_is_cut_and_earlier_records_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(7);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let segs = fill(&mut c, &mut rng, 50);
    drop(c);
    let path = &containers(dir.path())[0];
    let cut = find(path, &segs[49].1) + 5; // mid-payload of the last record
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(cut as u64)
        .unwrap();
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let st = c.stats();
    assert_eq!(
        (st.damaged_records, st.damaged_containers),
        (1, 1),
        "{st:?}"
    );
    assert!(st.warnings[0].contains("torn"), "{st:?}");
    for (f, s) in &segs[..49] {
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
    assert_eq!(get(&mut c, segs[49].0), None);
    c.insert(segs[49].0, &segs[49].1).unwrap();
    drop(c);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    assert_eq!(c.stats().damaged_records, 0);
    assert_eq!(get(&mut c, segs[49].0).as_ref(), Some(&segs[49].1));
}

#[test]
fn short_fingerprints_collide_and_the_latest_wins() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(8);
    let mut c = DiskCache::open(dir.path(), with_bits(12, small())).unwrap();
    let segs = fill(&mut c, &mut rng, 20_000);
    let st = c.stats();
    assert!(st.replaced > 10_000, "{st:?}");
    assert!(st.segments <= 4096);
    let mut latest = std::collections::HashMap::new();
    for (f, s) in &segs {
        latest.insert(f.truncate(c.bits()), s.clone());
    }
    for (k, s) in &latest {
        assert_eq!(c.get(*k).unwrap().as_deref(), Some(&s[..]));
    }
    drop(c);
    // Reopened, the scan replays inserts in order: still the latest.
    let mut c = DiskCache::open(dir.path(), with_bits(12, small())).unwrap();
    for (k, s) in &latest {
        assert_eq!(c.get(*k).unwrap().as_deref(), Some(&s[..]));
    }
}

#[test]
fn reopen_at_another_fingerprint_width() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(9);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let segs = fill(&mut c, &mut rng, 1000);
    drop(c);
    for bits in [64, 24, 40] {
        let mut c = DiskCache::open(dir.path(), with_bits(bits, small())).unwrap();
        assert_eq!(c.bits().get(), bits);
        for (f, s) in &segs {
            assert_eq!(get(&mut c, *f).as_ref(), Some(s), "at {bits} bits");
        }
    }
}

#[test]
fn bloom_false_positive_rate_is_near_the_model() {
    for (bits, hashes) in [(8, 6), (10, 7)] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = DiskConfig {
            bloom_bits_per_entry: bits,
            bloom_hashes: hashes,
            bloom_entries: Some(100_000),
            container_bytes: 4 << 20,
            memory_bytes: 4 << 20,
            ..with_bits(64, small())
        };
        let mut c = DiskCache::open(dir.path(), cfg).unwrap();
        let mut rng = Rng(10);
        for _ in 0..100_000 {
            let s = rng.bytes(32);
            c.insert(Fingerprint::full(&s), &s).unwrap();
        }
        for _ in 0..100_000 {
            c.may_contain(Fingerprint(rng.next()));
        }
        let b = c.stats().bloom.unwrap();
        let model = bloom_model(f64::from(bits), hashes);
        assert!(
            b.measured_rate > model / 1.5 && b.measured_rate < model * 1.5,
            "{bits} bits, {hashes} hashes: measured {} model {model}",
            b.measured_rate
        );
        assert!((b.model_rate - model).abs() < model * 0.1, "{b:?}");
    }
}

#[test]
fn shared_between_threads() {
    let dir = tempfile::tempdir().unwrap();
    let shared = SharedCache::new(DiskCache::open(dir.path(), with_bits(40, small())).unwrap());
    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            let mut c = shared.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(100 + t);
                let segs = fill(&mut c, &mut rng, 3000);
                for (f, s) in &segs {
                    assert_eq!(get(&mut c, *f).as_ref(), Some(s));
                }
                segs
            })
        })
        .collect();
    let all: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let mut c = shared.clone();
    for (f, s) in &all {
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
    assert_eq!(c.stats().inserts, 6000);
    assert_eq!(shared.lock().stats().segments, 6000);
}

#[test]
fn garbage_container_files_do_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(11);
    fs::write(dir.path().join("0000000000000000.vgc"), rng.bytes(100_000)).unwrap();
    fs::write(dir.path().join("0000000000000001.vgc"), b"").unwrap();
    // A good header followed by garbage.
    let header = record::Header {
        bits: 40,
        seq: 2,
        start: 0,
    };
    let mut f = header.encode().to_vec();
    f.extend(rng.bytes(50_000));
    fs::write(dir.path().join("0000000000000002.vgc"), f).unwrap();
    fs::write(dir.path().join("unrelated.txt"), b"left alone").unwrap();

    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    let st = c.stats();
    assert_eq!(st.segments, 0);
    assert_eq!(st.damaged_containers, 3, "{st:?}");
    assert!(dir.path().join("unrelated.txt").exists());
    for _ in 0..1000 {
        assert_eq!(
            c.get(Fingerprint(rng.next() & c.bits().mask())).unwrap(),
            None
        );
    }
    let segs = fill(&mut c, &mut rng, 100);
    drop(c);
    let mut c = DiskCache::open(dir.path(), with_bits(40, small())).unwrap();
    for (f, s) in &segs {
        assert_eq!(get(&mut c, *f).as_ref(), Some(s));
    }
}

#[test]
fn newer_format_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = record::Header {
        bits: 40,
        seq: 0,
        start: 0,
    }
    .encode();
    h[8] = 9;
    let path = dir.path().join("0000000000000000.vgc");
    fs::write(&path, h).unwrap();
    let e = DiskCache::open(dir.path(), small()).unwrap_err();
    assert!(matches!(e, CacheError::Version { found: 9, .. }), "{e}");
    assert!(path.exists());
}

#[test]
fn one_opener_per_directory_and_per_peer_layout() {
    let root = tempfile::tempdir().unwrap();
    let a = DiskCache::open_for_peer(root.path(), "node-7.example:5000", small()).unwrap();
    assert_eq!(a.dir(), root.path().join("node-7.example:5000"));
    let e = DiskCache::open_for_peer(root.path(), "node-7.example:5000", small()).unwrap_err();
    assert!(matches!(e, CacheError::Locked { .. }), "{e}");
    assert!(
        e.to_string().contains(&std::process::id().to_string()),
        "{e}"
    );
    let _b = DiskCache::open_for_peer(root.path(), "other", small()).unwrap();
    drop(a);
    DiskCache::open_for_peer(root.path(), "node-7.example:5000", small()).unwrap();
    for bad in ["", "..", "a/b", "x y"] {
        let e = DiskCache::open_for_peer(root.path(), bad, small()).unwrap_err();
        assert!(matches!(e, CacheError::BadPeer { .. }), "{bad:?}: {e}");
    }
}

#[test]
fn segments_larger_than_a_chunk_and_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DiskConfig {
        max_segment_bytes: 20_000,
        ..with_bits(40, small())
    };
    let mut c = DiskCache::open(dir.path(), cfg).unwrap();
    let mut rng = Rng(12);
    let big: Vec<_> = (0..20).map(|_| rng.bytes(10_000)).collect();
    for s in &big {
        c.insert(Fingerprint::full(s), s).unwrap();
    }
    c.flush().unwrap();
    for s in &big {
        assert_eq!(get(&mut c, Fingerprint::full(s)).as_ref(), Some(s));
    }
    let e = c.insert(Fingerprint(1), &[0; 20_001]).unwrap_err();
    assert!(e.to_string().contains("20001"), "{e}");
}

#[test]
fn stats_serialise() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = DiskCache::open(dir.path(), small()).unwrap();
    let mut rng = Rng(13);
    let segs = fill(&mut c, &mut rng, 10);
    get(&mut c, segs[0].0);
    let json = serde_json::to_string(&c.stats()).unwrap();
    assert!(json.contains("\"hits\":1"), "{json}");
    assert!(json.contains("\"hit_ages\""), "{json}");
    assert!(json.contains("\"measured_rate\""), "{json}");
}

#[test]
fn random_damage_never_serves_wrong_bytes() {
    let mut rng = Rng(16);
    for round in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let mut c = DiskCache::open(dir.path(), with_bits(16, small())).unwrap();
        let segs = fill(&mut c, &mut rng, 150);
        c.flush().unwrap();
        let path = &containers(dir.path())[0];
        let len = fs::metadata(path).unwrap().len();
        let flips = 1 + rng.next() % 4;
        let at: Vec<_> = (0..flips).map(|_| (rng.next() % len) as usize).collect();
        // Half the rounds damage a closed cache, half one that is open and reading.
        let mut c = if round % 2 == 0 {
            drop(c);
            at.iter().for_each(|&a| flip(path, a));
            DiskCache::open(dir.path(), with_bits(16, small())).unwrap()
        } else {
            at.iter().for_each(|&a| flip(path, a));
            c
        };
        let mut served = 0;
        for (f, s) in &segs {
            if let Some(got) = get(&mut c, *f) {
                // A 16-bit collision may serve another segment (when the later one
                // is damaged, the earlier one): whole and undamaged, never damaged bytes.
                let k = f.truncate(c.bits());
                assert!(
                    segs.iter()
                        .any(|(g, t)| g.truncate(c.bits()) == k && *t == got),
                    "round {round}, flips {at:?}"
                );
                served += usize::from(&got == s);
            }
        }
        if round % 2 == 1 {
            // Open, records are read one by one: a flip costs at most one of them.
            let bits = c.bits();
            let latest = segs
                .iter()
                .enumerate()
                .filter(|(i, (f, _))| {
                    !segs[i + 1..]
                        .iter()
                        .any(|(g, _)| g.truncate(bits) == f.truncate(bits))
                })
                .count();
            assert!(served + at.len() >= latest, "round {round}: {at:?}");
        }
    }
}
