//! Two traces compared collector by collector (`vargr trace diff A B`): the seed's last
//! step of tuning a collective's tree (000, §3: "compare the performance of the new and
//! old configuration"), for two runs or two configurations of one program.
//!
//! A collector's profile counts its `Call` records when it has any (a collective's
//! collector: time per call is the rank's time inside the call), and all its records
//! otherwise (links, stages, filters: time per record is the record's span).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::{format_ns, Dist, Timeline};
use crate::EventOp;

/// One collector's records in one trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    /// Records counted: calls for a collective's collector, else every record.
    pub calls: u64,
    /// Whether `calls` counts `Call` records only.
    pub call_records: bool,
    /// Time per call, ns.
    pub time: Dist,
    pub bytes: u64,
}

/// Every collector of a trace with its profile, by name.
pub fn profiles(tl: &Timeline) -> BTreeMap<String, Profile> {
    let mut has_calls = vec![false; tl.collectors.len()];
    for e in &tl.events {
        if e.op == EventOp::Call {
            has_calls[e.collector] = true;
        }
    }
    let mut per: BTreeMap<usize, (Vec<i64>, u64)> = BTreeMap::new();
    for e in &tl.events {
        if has_calls[e.collector] && e.op != EventOp::Call {
            continue;
        }
        let p = per.entry(e.collector).or_default();
        p.0.push(e.end.saturating_sub(e.start));
        p.1 += u64::from(e.bytes);
    }
    let mut out = BTreeMap::new();
    for (c, (times, bytes)) in per {
        let Some(time) = Dist::of(times) else {
            continue;
        };
        // The timeline interns collectors by name: one id per name.
        out.insert(
            tl.collectors[c].clone(),
            Profile {
                calls: time.count,
                call_records: has_calls[c],
                time,
                bytes,
            },
        );
    }
    out
}

/// A relative change in percent (`b` against `a`); None when `a` is zero.
pub fn percent(a: f64, b: f64) -> Option<f64> {
    (a != 0.0 && a.is_finite() && b.is_finite()).then(|| (b - a) / a * 100.0)
}

/// Changes of a collector present in both traces, in percent of A's value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Change {
    pub calls: i64,
    pub mean: Option<f64>,
    pub median: Option<f64>,
    pub p90: Option<f64>,
    pub total: Option<f64>,
    pub bytes: Option<f64>,
}

/// One collector in A, B or both.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffRow {
    pub collector: String,
    pub a: Option<Profile>,
    pub b: Option<Profile>,
    /// Present when the collector is in both.
    pub change: Option<Change>,
}

/// Two traces compared.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Diff {
    /// Collectors of both traces, largest change of total time first, then those of A
    /// only, then those of B only (each by name).
    pub rows: Vec<DiffRow>,
    pub only_a: Vec<String>,
    pub only_b: Vec<String>,
}

impl Diff {
    /// The comparison as `vargr trace diff --json` prints it, `a` and `b` naming the
    /// two traces; the Python and C front ends return the same document.
    pub fn json(&self, a: &str, b: &str) -> serde_json::Value {
        serde_json::json!({
            "a": a,
            "b": b,
            "rows": self.rows,
            "only_a": self.only_a,
            "only_b": self.only_b,
        })
    }

    /// Collectors in both whose mean time per call grew by more than `pct` percent.
    pub fn slower_than(&self, pct: f64) -> Vec<&DiffRow> {
        self.rows
            .iter()
            .filter(|r| r.change.and_then(|c| c.mean).is_some_and(|m| m > pct))
            .collect()
    }
}

/// Compares the collectors of `a` and `b`.
pub fn diff(a: &Timeline, b: &Timeline) -> Diff {
    let (pa, mut pb) = (profiles(a), profiles(b));
    let mut both = Vec::new();
    let mut only_a = Vec::new();
    for (name, x) in pa {
        match pb.remove(&name) {
            Some(y) => {
                let change = Change {
                    calls: y.calls as i64 - x.calls as i64,
                    mean: percent(x.time.mean, y.time.mean),
                    median: percent(x.time.median, y.time.median),
                    p90: percent(x.time.p90, y.time.p90),
                    total: percent(x.time.total as f64, y.time.total as f64),
                    bytes: percent(x.bytes as f64, y.bytes as f64),
                };
                both.push(DiffRow {
                    collector: name,
                    a: Some(x),
                    b: Some(y),
                    change: Some(change),
                });
            }
            None => only_a.push(DiffRow {
                collector: name,
                a: Some(x),
                b: None,
                change: None,
            }),
        }
    }
    let only_b: Vec<DiffRow> = pb
        .into_iter()
        .map(|(name, y)| DiffRow {
            collector: name,
            a: None,
            b: Some(y),
            change: None,
        })
        .collect();
    let moved = |r: &DiffRow| {
        let t = |p: &Option<Profile>| p.as_ref().map_or(0, |p| p.time.total);
        t(&r.b).saturating_sub(t(&r.a)).unsigned_abs()
    };
    both.sort_by(|x, y| moved(y).cmp(&moved(x)).then(x.collector.cmp(&y.collector)));
    Diff {
        only_a: only_a.iter().map(|r| r.collector.clone()).collect(),
        only_b: only_b.iter().map(|r| r.collector.clone()).collect(),
        rows: both.into_iter().chain(only_a).chain(only_b).collect(),
    }
}

/// `+12.5%`, `−3.0%`, or `–`.
fn pct(p: Option<f64>) -> String {
    match p {
        Some(p) if p >= 0.0 => format!("+{p:.1}%"),
        Some(p) => format!("−{:.1}%", -p),
        None => "–".into(),
    }
}

/// The comparison as a table for the terminal: per collector the calls, mean, median
/// and p90 time per call and the total time of A and B with their changes, then the
/// collectors only one side has.
pub fn table(d: &Diff) -> String {
    let ns = |p: &Option<Profile>, f: fn(&Profile) -> f64| {
        p.as_ref().map_or("–".into(), |p| format_ns(f(p)))
    };
    let mut rows = vec![[
        "collector",
        "calls A",
        "calls B",
        "mean A",
        "mean B",
        "Δ mean",
        "Δ median",
        "Δ p90",
        "total A",
        "total B",
        "Δ total",
        "Δ bytes",
    ]
    .map(String::from)
    .to_vec()];
    for r in d.rows.iter().filter(|r| r.change.is_some()) {
        let c = r.change.expect("in both");
        let calls = |p: &Option<Profile>| p.as_ref().map_or(0, |p| p.calls).to_string();
        rows.push(vec![
            r.collector.clone(),
            calls(&r.a),
            calls(&r.b),
            ns(&r.a, |p| p.time.mean),
            ns(&r.b, |p| p.time.mean),
            pct(c.mean),
            pct(c.median),
            pct(c.p90),
            ns(&r.a, |p| p.time.total as f64),
            ns(&r.b, |p| p.time.total as f64),
            pct(c.total),
            pct(c.bytes),
        ]);
    }
    let mut out = crate::report::columns(&rows);
    for (side, names) in [("A", &d.only_a), ("B", &d.only_b)] {
        if !names.is_empty() {
            out += &format!("only in {side}: {}\n", names.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{file, rec, slow_rank_job};
    use crate::analysis::timeline;
    use crate::NO_PEER;

    #[test]
    fn collectives_count_calls_and_others_count_records() {
        let tl = timeline(&slow_rank_job(10, 2, 1_000));
        let p = profiles(&tl);
        let ar = &p["ctx0/allreduce"];
        // 4 ranks × 10 calls; sends and receives of the collector are not calls.
        assert_eq!((ar.calls, ar.call_records, ar.bytes), (40, true, 320));
        // Rank r leaves at last + 100 + r; rank 2 (slow) arrives at last, the others
        // at t0 + 10 r: in-call times 1 100, 1 091, 100, 1 073.
        assert_eq!(ar.time.total, 10 * (1_100 + 1_091 + 102 + 1_073));
        assert_eq!((ar.time.min, ar.time.max), (102, 1_100));
        assert_eq!(ar.time.median, (1_073.0 + 1_091.0) / 2.0);
        let links = timeline(&[file(
            "h",
            0,
            vec![(
                0,
                vec![
                    rec(EventOp::Send, 1, 0, 0, 40, 1),
                    rec(EventOp::Send, 1, 1, 50, 70, 1),
                ],
            )],
        )]);
        let p = profiles(&links);
        let b = &p["ctx0/bcast"];
        assert_eq!(
            (b.calls, b.call_records, b.time.total, b.time.mean),
            (2, false, 60, 30.0)
        );
    }

    #[test]
    fn two_runs_compare_collector_by_collector() {
        let mut fb = slow_rank_job(20, 2, 3_000);
        // B has a collector A lacks; A's bcast id is unused, so A lacks it too.
        for f in &mut fb {
            f.collectors.push("ctx9/barrier".into());
            f.threads[0]
                .records
                .push(rec(EventOp::Call, 2, 0, 1_000_000, 1_000_500, NO_PEER));
        }
        let mut fa = slow_rank_job(10, 2, 1_000);
        fa[0].collectors = vec!["ctx0/allreduce".into(), "ctx7/gather".into()];
        fa[0].threads[0]
            .records
            .push(rec(EventOp::Call, 1, 0, 2_000_000, 2_000_100, NO_PEER));
        let d = diff(&timeline(&fa), &timeline(&fb));
        assert_eq!(d.only_a, vec!["ctx7/gather".to_string()]);
        assert_eq!(d.only_b, vec!["ctx9/barrier".to_string()]);
        let names: Vec<&str> = d.rows.iter().map(|r| r.collector.as_str()).collect();
        assert_eq!(names, vec!["ctx0/allreduce", "ctx7/gather", "ctx9/barrier"]);
        let r = &d.rows[0];
        let c = r.change.unwrap();
        assert_eq!(c.calls, 40);
        // Waits grow from 1 000 to 3 000 ns: A's in-call times sum to 3 366 per call
        // round, B's to 3 366 + 3 × 2 000.
        let (ta, tb) = (10 * 3_366, 20 * (3_366 + 6_000));
        assert_eq!(r.a.as_ref().unwrap().time.total, ta);
        assert_eq!(r.b.as_ref().unwrap().time.total, tb);
        assert_eq!(c.total, percent(ta as f64, tb as f64));
        assert_eq!(c.bytes, Some(100.0));
        let mean = c.mean.unwrap();
        assert!(
            (mean - (9_366.0 / 3_366.0 - 1.0) * 100.0).abs() < 1e-9,
            "{mean}"
        );
        assert_eq!(d.slower_than(100.0).len(), 1);
        assert_eq!(d.slower_than(200.0).len(), 0);
        assert!(d.rows[1].change.is_none() && d.rows[1].b.is_none());
        assert!(d.rows[2].a.is_none());
        let t = table(&d);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("collector       calls A  calls B"),
            "{t}"
        );
        // 841.5 ns to 2 341.5 ns per call; totals 33 660 ns and 187 320 ns.
        assert!(
            lines[1].starts_with("ctx0/allreduce       40       80  842 ns  2.341 µs  +178.3%"),
            "{t}"
        );
        assert!(lines[1].ends_with("+456.5%  +100.0%"), "{t}");
        assert_eq!(lines[2], "only in A: ctx7/gather");
        assert_eq!(lines[3], "only in B: ctx9/barrier");
    }

    #[test]
    fn percent_of_nothing_is_none() {
        assert_eq!(percent(0.0, 5.0), None);
        assert_eq!(percent(4.0, 5.0), Some(25.0));
        assert_eq!(percent(4.0, 2.0), Some(-50.0));
    }
}
