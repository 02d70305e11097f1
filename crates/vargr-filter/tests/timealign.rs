//! Time-aligned aggregation (Paradyn's performance data filter).

mod common;

use common::*;
use vargr_filter::{FilterContext, FilterError, TransformFilter};
use vargr_wire::{Packet, Value};

fn sample(src: u32, start: f64, end: f64, v: f64) -> Packet {
    pkt_from(
        src,
        "%lf %lf %lf",
        vec![Value::Double(start), Value::Double(end), Value::Double(v)],
    )
}

fn triple(p: &Packet) -> (f64, f64, f64) {
    match p.values.as_slice() {
        [Value::Double(a), Value::Double(b), Value::Double(c)] => (*a, *b, *c),
        other => panic!("not a sample: {other:?}"),
    }
}

fn feed(f: &mut dyn TransformFilter, c: &FilterContext, pkts: Vec<Packet>) -> Vec<(f64, f64, f64)> {
    let mut out = Vec::new();
    for p in pkts {
        out.extend(f.apply(c, vec![p]).unwrap().iter().map(triple));
    }
    out
}

#[test]
fn splits_straddling_samples_pro_rata() {
    let mut f = filter("timealign:1");
    let c = ctx(false, 2);
    assert!(
        feed(f.as_mut(), &c, vec![sample(1, 0.0, 1.0, 10.0)]).is_empty(),
        "child 2 not heard yet"
    );
    // Child 2's sample covers [0.5, 1.5): half of it belongs to [0, 1).
    let out = feed(f.as_mut(), &c, vec![sample(2, 0.5, 1.5, 4.0)]);
    assert_eq!(out, vec![(0.0, 1.0, 12.0)]);
    assert!(
        feed(f.as_mut(), &c, vec![sample(1, 1.0, 2.0, 20.0)]).is_empty(),
        "child 2 only reached 1.5"
    );
    let out = feed(f.as_mut(), &c, vec![sample(2, 1.5, 2.25, 6.0)]);
    assert_eq!(out, vec![(1.0, 2.0, 20.0 + 2.0 + 6.0 * (0.5 / 0.75))]);
    let rest = f.flush(&c).unwrap();
    assert_eq!(
        rest.iter().map(triple).collect::<Vec<_>>(),
        vec![(2.0, 3.0, 6.0 * (0.25 / 0.75))]
    );
    assert_eq!(
        rest[0].source, c.node_id,
        "outputs name their node so the parent can tell inputs apart"
    );
}

#[test]
fn gaps_are_skipped_and_late_data_kept() {
    let mut f = filter("timealign:0.5");
    let c = ctx(false, 1);
    let out = feed(
        f.as_mut(),
        &c,
        vec![
            sample(1, 0.0, 0.5, 1.0),
            sample(1, 10.0, 10.5, 2.0),
            sample(1, 0.1, 0.2, 3.0),
            sample(1, 10.5, 11.0, 4.0),
        ],
    );
    // Late data for [0, 0.5) (already sent) goes into the current interval.
    assert_eq!(
        out,
        vec![(0.0, 0.5, 1.0), (10.0, 10.5, 2.0), (10.5, 11.0, 7.0)]
    );
}

/// A tiny deterministic generator (no dependency on the proptest RNG here).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn three_levels_conserve_the_total() {
    let mut rng = Lcg(7);
    let interval = 0.3;
    // Two mid nodes with 3 and 2 back-ends; each back-end sends unaligned samples with gaps.
    let groups: Vec<Vec<u32>> = vec![vec![0, 1, 2], vec![3, 4]];
    let mut total_in = 0.0;
    let mut mid_outputs = Vec::new();
    for (g, ranks) in groups.iter().enumerate() {
        let mut per_be: Vec<Vec<Packet>> = Vec::new();
        for &r in ranks {
            let (mut t, mut v) = (rng.next(), Vec::new());
            for _ in 0..40 {
                let len = 0.01 + rng.next() * 0.8;
                let val = rng.next() * 1000.0;
                total_in += val;
                v.push(sample(r, t, t + len, val));
                t += len + if rng.next() < 0.2 { rng.next() } else { 0.0 };
            }
            per_be.push(v);
        }
        let c = FilterContext {
            node_id: 100 + g as u32,
            stream: STREAM,
            is_root: false,
            num_inputs: ranks.len(),
        };
        let mut f = filter(&format!("timealign:{interval}"));
        // Interleave the back-ends' streams.
        let mut outs = Vec::new();
        for i in 0..40 {
            for be in &per_be {
                outs.extend(f.apply(&c, vec![be[i].clone()]).unwrap());
            }
        }
        outs.extend(f.flush(&c).unwrap());
        mid_outputs.push(outs);
    }
    let c = FilterContext {
        node_id: 1,
        stream: STREAM,
        is_root: true,
        num_inputs: 2,
    };
    let mut root = filter(&format!("timealign:{interval}"));
    let mut out = Vec::new();
    let longest = mid_outputs.iter().map(Vec::len).max().unwrap();
    for i in 0..longest {
        for m in &mid_outputs {
            if let Some(p) = m.get(i) {
                out.extend(root.apply(&c, vec![p.clone()]).unwrap().iter().map(triple));
            }
        }
    }
    out.extend(root.flush(&c).unwrap().iter().map(triple));
    let total_out: f64 = out.iter().map(|s| s.2).sum();
    assert!(
        ((total_out - total_in) / total_in).abs() < 1e-9,
        "in {total_in} out {total_out}"
    );
    for w in out.windows(2) {
        assert!(w[0].1 <= w[1].0 + 1e-12, "intervals in order: {w:?}");
    }
    for (a, b, _) in &out {
        let k = (a / interval).round();
        assert!(
            (a - k * interval).abs() < 1e-9 && (b - a - interval).abs() < 1e-9,
            "on the grid: {a} {b}"
        );
    }
}

#[test]
fn rejects_bad_samples_and_params() {
    let mut f = filter("timealign:1");
    let e = f
        .apply(&ctx(false, 1), vec![pkt("%d", vec![Value::Int(1)])])
        .unwrap_err();
    assert!(
        e.to_string().contains("timealign needs \"%lf %lf %lf\""),
        "{e}"
    );
    let e = f
        .apply(&ctx(false, 1), vec![sample(1, 2.0, 1.0, 1.0)])
        .unwrap_err();
    assert!(matches!(e, FilterError::Format { .. }));
    for bad in ["timealign", "timealign:0", "timealign:-1", "timealign:abc"] {
        assert!(
            matches!(
                vargr_filter::Registry::with_builtins().create(bad).err(),
                Some(FilterError::BadParams { .. })
            ),
            "{bad}"
        );
    }
}
