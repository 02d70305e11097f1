//! Chrome / Perfetto trace-event JSON, so a job's records can be browsed in
//! <https://ui.perfetto.dev> or `chrome://tracing` without a vargr-specific viewer.
//!
//! The output is the "JSON Object Format" of the trace-event specification: an object
//! whose `traceEvents` array holds `ph: "M"` metadata events (one `process_name` per trace
//! file naming its host and ranks, one `thread_name` per track) and `ph: "X"` complete
//! events with `ts` and `dur` in microseconds from the job's first record. Every rank
//! thread is one track; a collective call is an event named after the collective (e.g.
//! `allreduce`), and its sends and receives are events nested inside it on the same track.
//! Records that would overlap without nesting (which well-formed collectors never write)
//! go to an extra track of the same thread, so the output stays valid whatever the input.
//!
//! [`validate`] checks a document against the format's rules (required fields per phase,
//! numeric non-negative times, complete events on one track properly nested). It is the
//! check the tests rely on: Perfetto's own trace processor cannot be installed here (its
//! Python package downloads a native binary at run time).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use serde::Serialize;
use serde_json::{json, Value};

use crate::analysis::{collective_of, context_of, Event, Timeline};
use crate::EventOp;

/// What [`write_chrome`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exported {
    /// Complete (`X`) events.
    pub events: usize,
    /// Tracks (pid, tid) named by metadata.
    pub tracks: usize,
    /// Tracks added because records of one thread overlapped without nesting.
    pub overflow_tracks: usize,
    pub processes: usize,
}

#[derive(Serialize)]
struct TraceEvent<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'a str>,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u64,
    tid: u64,
    args: Value,
}

/// Writes the timeline as trace-event JSON.
pub fn write_chrome(tl: &Timeline, out: &mut dyn Write) -> io::Result<Exported> {
    let origin = tl.origin();
    let us = |ns: i64| (ns.saturating_sub(origin)) as f64 / 1000.0;
    // Events per track, in start order (the timeline is sorted).
    let mut per_track: Vec<Vec<usize>> = vec![Vec::new(); tl.tracks.len()];
    for (i, e) in tl.events.iter().enumerate() {
        if let Some(v) = per_track.get_mut(e.track) {
            v.push(i);
        }
    }
    let mut done = Exported {
        processes: tl.processes.len(),
        ..Default::default()
    };
    out.write_all(b"{\"traceEvents\":[\n")?;
    let mut first = true;
    let mut emit = |out: &mut dyn Write, ev: &TraceEvent<'_>| -> io::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, ev).map_err(io::Error::other)
    };
    for (pi, p) in tl.processes.iter().enumerate() {
        let pid = pi as u64 + 1;
        let mut ranks: Vec<u32> = tl
            .tracks
            .iter()
            .filter(|t| t.process == pi)
            .filter_map(|t| t.rank)
            .collect();
        ranks.sort_unstable();
        let name = format!("{}: {} (pid {})", p.host, rank_list(&ranks), p.pid);
        emit(out, &meta("process_name", pid, 0, json!({ "name": name })))?;
        emit(
            out,
            &meta("process_sort_index", pid, 0, json!({ "sort_index": pi })),
        )?;
        let mut next_tid = 1u64;
        let mut overflow: Vec<(u64, String, i64)> = Vec::new();
        for (ti, t) in tl.tracks.iter().enumerate() {
            if t.process != pi || (t.rank.is_none() && per_track[ti].is_empty()) {
                continue;
            }
            let label = match t.rank {
                Some(r) => format!("rank {r}"),
                None => t.label.clone(),
            };
            let sort = t.rank.map_or(1 << 40, i64::from);
            let lanes = lanes(tl, &per_track[ti]);
            let tids: Vec<u64> = (0..lanes.count)
                .map(|_| {
                    next_tid += 1;
                    next_tid - 1
                })
                .collect();
            emit(
                out,
                &meta("thread_name", pid, tids[0], json!({ "name": label })),
            )?;
            emit(
                out,
                &meta(
                    "thread_sort_index",
                    pid,
                    tids[0],
                    json!({ "sort_index": sort }),
                ),
            )?;
            done.tracks += 1;
            for (k, &tid) in tids.iter().enumerate().skip(1) {
                overflow.push((tid, format!("{label} (overlapping {})", k + 1), sort));
            }
            for (&i, &lane) in per_track[ti].iter().zip(&lanes.of) {
                let e = &tl.events[i];
                let name = event_name(tl, e);
                emit(
                    out,
                    &TraceEvent {
                        name: &name,
                        cat: Some(e.op.name()),
                        ph: "X",
                        ts: Some(us(e.start)),
                        dur: Some(e.end.saturating_sub(e.start) as f64 / 1000.0),
                        pid,
                        tid: tids[lane],
                        args: event_args(tl, e),
                    },
                )?;
                done.events += 1;
            }
        }
        for (tid, name, sort) in overflow {
            emit(out, &meta("thread_name", pid, tid, json!({ "name": name })))?;
            emit(
                out,
                &meta("thread_sort_index", pid, tid, json!({ "sort_index": sort })),
            )?;
            done.tracks += 1;
            done.overflow_tracks += 1;
        }
    }
    let hosts: Vec<Value> = tl
        .hosts
        .iter()
        .map(|h| json!({ "host": h.host, "offset_ns": h.offset_ns, "alignment": format!("{:?}", h.alignment) }))
        .collect();
    let tail = json!({ "origin_ns": origin, "hosts": hosts, "source": "vargr trace export" });
    write!(
        out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{tail}}}\n"
    )?;
    Ok(done)
}

/// The whole document as a string.
pub fn chrome_json(tl: &Timeline) -> String {
    let mut v = Vec::new();
    write_chrome(tl, &mut v).expect("writing to a Vec cannot fail");
    String::from_utf8(v).expect("serde_json writes UTF-8")
}

fn meta<'a>(name: &'a str, pid: u64, tid: u64, args: Value) -> TraceEvent<'a> {
    TraceEvent {
        name,
        cat: None,
        ph: "M",
        ts: None,
        dur: None,
        pid,
        tid,
        args,
    }
}

/// `ranks 0-1`, `ranks 0, 2, 4`, `rank 3`, `no ranks`.
fn rank_list(r: &[u32]) -> String {
    match r {
        [] => "no ranks".into(),
        [one] => format!("rank {one}"),
        _ if r.windows(2).all(|w| w[1] == w[0] + 1) => {
            format!("ranks {}-{}", r[0], r[r.len() - 1])
        }
        _ => {
            let s: Vec<String> = r.iter().map(u32::to_string).collect();
            format!("ranks {}", s.join(", "))
        }
    }
}

fn event_name(tl: &Timeline, e: &Event) -> String {
    let coll = tl.collector(e);
    match (e.op, e.peer) {
        (EventOp::Call, _) => collective_of(coll).to_string(),
        (EventOp::Send, Some(p)) => format!("send to {p}"),
        (EventOp::Recv, Some(p)) => format!("recv from {p}"),
        (op, _) => format!("{} {}", coll, op.name()),
    }
}

/// Arguments Perfetto shows for a slice; kept short (traces hold millions of records):
/// the collective of a send or receive is its enclosing call's name.
fn event_args(tl: &Timeline, e: &Event) -> Value {
    let coll = tl.collector(e);
    let mut a = json!({ "ctx": context_of(coll), "seq": e.seq, "bytes": e.bytes });
    if e.op != EventOp::Call {
        a["collective"] = json!(collective_of(coll));
    }
    if let Some(p) = e.peer {
        a["peer"] = json!(p);
    }
    if e.status != 0 {
        a["status"] = json!(e.status);
    }
    a
}

struct Lanes {
    /// Lane of each event, in the order given.
    of: Vec<usize>,
    /// Lanes used (at least 1).
    count: usize,
}

/// Puts each event of one thread on the first lane where it nests: it starts after the
/// events that ended and ends no later than the one still open. Collectors record a
/// call's sends and receives inside the call, so everything lands on lane 0 unless the
/// records are inconsistent.
fn lanes(tl: &Timeline, events: &[usize]) -> Lanes {
    let mut order: Vec<usize> = (0..events.len()).collect();
    // Parents first: earlier start, then longer, then the call before its steps.
    order.sort_by_key(|&k| {
        let e = &tl.events[events[k]];
        (e.start, std::cmp::Reverse(e.end), e.op != EventOp::Call)
    });
    let mut stacks: Vec<Vec<i64>> = Vec::new();
    let mut of = vec![0; events.len()];
    for k in order {
        let e = &tl.events[events[k]];
        let lane = (0..stacks.len())
            .find(|&l| {
                let s = &mut stacks[l];
                while s.last().is_some_and(|&end| end <= e.start) {
                    s.pop();
                }
                s.last().is_none_or(|&end| e.end <= end)
            })
            .unwrap_or_else(|| {
                stacks.push(Vec::new());
                stacks.len() - 1
            });
        stacks[lane].push(e.end);
        of[k] = lane;
    }
    Lanes {
        of,
        count: stacks.len().max(1),
    }
}

/// What [`validate`] found in a valid document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validation {
    pub events: usize,
    /// `ph: "X"` events.
    pub complete: usize,
    /// Distinct (pid, tid) with complete events.
    pub tracks: usize,
    pub processes: usize,
    /// `thread_name` metadata by (pid, tid).
    pub thread_names: BTreeMap<(i64, i64), String>,
    /// `process_name` metadata by pid.
    pub process_names: BTreeMap<i64, String>,
}

/// Tolerance of time comparisons, in µs: `ts + dur` is a float sum, so allow a
/// nanosecond plus a few rounding errors of the magnitude compared.
fn eps(v: f64) -> f64 {
    1e-3 + v.abs() * 1e-14
}

/// Checks a trace-event document (object with `traceEvents`, or a bare array) against the
/// format's rules; returns every problem found (at most 50), each naming the event index.
pub fn validate(doc: &Value) -> Result<Validation, Vec<String>> {
    let mut errs: Vec<String> = Vec::new();
    let events = match doc {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("traceEvents") {
            Some(Value::Array(a)) => a,
            Some(_) => return Err(vec!["`traceEvents` is not an array".into()]),
            None => return Err(vec!["the object has no `traceEvents` array".into()]),
        },
        _ => return Err(vec!["a trace is an object or an array".into()]),
    };
    let mut v = Validation {
        events: events.len(),
        ..Default::default()
    };
    // (start, end, event index) of the complete events of each (pid, tid).
    type Spans = Vec<(f64, f64, usize)>;
    let mut x_per_track: BTreeMap<(i64, i64), Spans> = BTreeMap::new();
    let mut open_b: BTreeMap<(i64, i64), Vec<f64>> = BTreeMap::new();
    let mut pids: BTreeSet<i64> = BTreeSet::new();
    for (i, ev) in events.iter().enumerate() {
        if errs.len() >= 50 {
            break;
        }
        let mut bad = |what: String| errs.push(format!("event {i}: {what}"));
        let Some(o) = ev.as_object() else {
            bad("not an object".into());
            continue;
        };
        let Some(ph) = o.get("ph").and_then(Value::as_str) else {
            bad("no `ph` string".into());
            continue;
        };
        let int = |k: &str| o.get(k).and_then(Value::as_i64);
        let num = |k: &str| o.get(k).and_then(Value::as_f64);
        let name = o.get("name").and_then(Value::as_str);
        let (pid, tid) = (int("pid"), int("tid"));
        if let Some(a) = o.get("args") {
            if !a.is_object() {
                bad("`args` is not an object".into());
            }
        }
        let ts = num("ts");
        let need_ts = |bad: &mut dyn FnMut(String)| match ts {
            Some(t) if t >= 0.0 && t.is_finite() => Some(t),
            Some(t) => {
                bad(format!("`ts` {t} is negative or not finite"));
                None
            }
            None => {
                bad(format!("`{ph}` event without a numeric `ts`"));
                None
            }
        };
        let (Some(pid), Some(tid)) = (pid, tid) else {
            if ph != "M" || pid.is_none() {
                bad(format!("`{ph}` event without integer `pid` and `tid`"));
                continue;
            }
            // Process metadata may leave out the thread.
            if let (Some(n), Some(p)) = (name, pid) {
                check_meta(n, o, p, 0, &mut v, &mut bad);
            }
            continue;
        };
        pids.insert(pid);
        match ph {
            "X" => {
                if name.is_none() {
                    bad("`X` event without a `name`".into());
                }
                let t = need_ts(&mut bad);
                let d = match num("dur") {
                    Some(d) if d >= 0.0 && d.is_finite() => Some(d),
                    Some(d) => {
                        bad(format!("`dur` {d} is negative or not finite"));
                        None
                    }
                    None => {
                        bad("`X` event without a numeric `dur`".into());
                        None
                    }
                };
                if let (Some(t), Some(d)) = (t, d) {
                    x_per_track
                        .entry((pid, tid))
                        .or_default()
                        .push((t, t + d, i));
                    v.complete += 1;
                }
            }
            "B" => {
                if name.is_none() {
                    bad("`B` event without a `name`".into());
                }
                if let Some(t) = need_ts(&mut bad) {
                    open_b.entry((pid, tid)).or_default().push(t);
                }
            }
            "E" => {
                if let Some(t) = need_ts(&mut bad) {
                    match open_b.get_mut(&(pid, tid)).and_then(Vec::pop) {
                        Some(b) if b <= t + eps(t) => {}
                        Some(b) => bad(format!("`E` at {t} before its `B` at {b}")),
                        None => bad("`E` without an open `B` on its track".into()),
                    }
                }
            }
            "i" | "I" => {
                need_ts(&mut bad);
                if let Some(s) = o.get("s") {
                    if !matches!(s.as_str(), Some("g" | "p" | "t")) {
                        bad("instant scope `s` is not g, p or t".into());
                    }
                }
            }
            "C" => {
                need_ts(&mut bad);
                if name.is_none() {
                    bad("`C` event without a `name`".into());
                }
                let numeric = o
                    .get("args")
                    .and_then(Value::as_object)
                    .is_some_and(|a| a.values().all(Value::is_number));
                if !numeric {
                    bad("`C` event whose `args` are not all numbers".into());
                }
            }
            "M" => match name {
                Some(n) => check_meta(n, o, pid, tid, &mut v, &mut bad),
                None => bad("`M` event without a `name`".into()),
            },
            other => bad(format!("unsupported phase `{other}`")),
        }
    }
    for ((pid, tid), mut xs) in x_per_track {
        // Parents before children: by start, then longest first.
        xs.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut stack: Vec<(f64, usize)> = Vec::new();
        for (s, e, i) in xs {
            while stack.last().is_some_and(|&(end, _)| end <= s + eps(s)) {
                stack.pop();
            }
            if let Some(&(end, parent)) = stack.last() {
                if e > end + eps(end) {
                    errs.push(format!(
                        "event {i}: overlaps event {parent} on pid {pid} tid {tid} without nesting \
                         (ends at {e} µs, its parent at {end} µs)"
                    ));
                    continue;
                }
            }
            stack.push((e, i));
        }
        v.tracks += 1;
    }
    for ((pid, tid), open) in open_b {
        if !open.is_empty() {
            errs.push(format!(
                "pid {pid} tid {tid}: {} `B` events never end",
                open.len()
            ));
        }
    }
    v.processes = pids.len();
    errs.truncate(50);
    if errs.is_empty() {
        Ok(v)
    } else {
        Err(errs)
    }
}

fn check_meta(
    name: &str,
    o: &serde_json::Map<String, Value>,
    pid: i64,
    tid: i64,
    v: &mut Validation,
    bad: &mut dyn FnMut(String),
) {
    let args = o.get("args").and_then(Value::as_object);
    match name {
        "process_name" | "thread_name" | "process_labels" => {
            let key = if name == "process_labels" {
                "labels"
            } else {
                "name"
            };
            match args.and_then(|a| a.get(key)).and_then(Value::as_str) {
                Some(s) if name == "thread_name" => {
                    v.thread_names.insert((pid, tid), s.to_string());
                }
                Some(s) if name == "process_name" => {
                    v.process_names.insert(pid, s.to_string());
                }
                Some(_) => {}
                None => bad(format!("`{name}` metadata without a string `args.{key}`")),
            }
        }
        "process_sort_index" | "thread_sort_index" => {
            if args
                .and_then(|a| a.get("sort_index"))
                .and_then(Value::as_i64)
                .is_none()
            {
                bad(format!(
                    "`{name}` metadata without an integer `args.sort_index`"
                ));
            }
        }
        other => bad(format!("unknown metadata `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{file, rec, slow_rank_job};
    use crate::analysis::timeline;
    use crate::NO_PEER;
    use proptest::prelude::*;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).expect("the export is JSON")
    }

    #[test]
    fn a_job_exports_one_valid_track_per_rank() {
        let tl = timeline(&slow_rank_job(3, 2, 1_000));
        let s = chrome_json(&tl);
        let v = validate(&parse(&s)).unwrap_or_else(|e| panic!("{e:#?}\n{s}"));
        let names: Vec<&str> = v.thread_names.values().map(String::as_str).collect();
        assert_eq!(names, vec!["rank 0", "rank 1", "rank 2", "rank 3"]);
        assert_eq!((v.tracks, v.processes), (4, 2));
        // 12 calls, 3 sends, 3 receives.
        assert_eq!(v.complete, 18);
        assert_eq!(v.process_names[&1], "h: ranks 0-1 (pid 1)");
        let doc = parse(&s);
        let ev = doc["traceEvents"].as_array().unwrap();
        let (&(pid, tid), _) = v.thread_names.iter().find(|(_, n)| *n == "rank 3").unwrap();
        let call = ev
            .iter()
            .find(|e| e["pid"] == pid && e["tid"] == tid && e["cat"] == "call")
            .unwrap();
        assert_eq!(call["name"], "allreduce");
        assert_eq!(call["args"]["seq"], 0);
        assert_eq!(call["args"]["ctx"], "ctx0");
        // Rank 3's first call: t0 + 30 ns after the first record, 1073 ns long.
        assert_eq!(call["ts"].as_f64(), Some(0.03));
        assert_eq!(call["dur"].as_f64(), Some(1.073));
        let recv = ev.iter().find(|e| e["cat"] == "recv").unwrap();
        assert_eq!(recv["name"], "recv from 1");
        assert_eq!(recv["args"]["collective"], "allreduce");
        assert_eq!(recv["args"]["peer"], 1);
        assert_eq!(recv["tid"], call["tid"]);
    }

    #[test]
    fn overlapping_records_get_an_extra_track_and_stay_valid() {
        let tl = timeline(&[file(
            "h",
            0,
            vec![(
                0,
                vec![
                    rec(EventOp::Call, 0, 0, 100, 200, NO_PEER),
                    // Starts inside the call, ends after it.
                    rec(EventOp::Send, 0, 0, 150, 250, 1),
                    rec(EventOp::Recv, 0, 0, 120, 130, 1),
                ],
            )],
        )]);
        let mut out = Vec::new();
        let done = write_chrome(&tl, &mut out).unwrap();
        assert_eq!((done.events, done.tracks, done.overflow_tracks), (3, 2, 1));
        let v = validate(&parse(std::str::from_utf8(&out).unwrap())).unwrap();
        assert_eq!(v.tracks, 2);
        assert!(v
            .thread_names
            .values()
            .any(|n| n == "rank 0 (overlapping 2)"));
    }

    #[test]
    fn the_validator_refuses_what_the_format_forbids() {
        let bad = |doc: Value, want: &str| {
            let e = validate(&doc).expect_err("invalid");
            assert!(e.iter().any(|m| m.contains(want)), "{want} not in {e:?}");
        };
        bad(json!({ "events": [] }), "no `traceEvents`");
        bad(json!(3), "object or an array");
        bad(
            json!([{ "ph": "X", "name": "a", "ts": 1, "pid": 1, "tid": 1 }]),
            "`dur`",
        );
        bad(
            json!([{ "ph": "X", "name": "a", "ts": -1, "dur": 1, "pid": 1, "tid": 1 }]),
            "negative",
        );
        bad(
            json!([{ "ph": "X", "name": "a", "ts": "1", "dur": 1, "pid": 1, "tid": 1 }]),
            "numeric `ts`",
        );
        bad(
            json!([{ "ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1 }]),
            "without a `name`",
        );
        bad(
            json!([{ "ph": "X", "name": "a", "ts": 1, "dur": 1 }]),
            "`pid` and `tid`",
        );
        bad(
            json!([{ "ph": "Q", "pid": 1, "tid": 1 }]),
            "unsupported phase",
        );
        bad(json!([{ "name": "a" }]), "no `ph`");
        bad(
            json!([{ "ph": "E", "ts": 1, "pid": 1, "tid": 1 }]),
            "without an open `B`",
        );
        bad(
            json!([{ "ph": "B", "name": "a", "ts": 1, "pid": 1, "tid": 1 }]),
            "never end",
        );
        bad(
            json!([{ "ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {} }]),
            "args.name",
        );
        bad(
            json!([{ "ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": 3 }]),
            "`args`",
        );
        bad(
            json!([
                { "ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1 },
                { "ph": "X", "name": "b", "ts": 5, "dur": 10, "pid": 1, "tid": 1 }
            ]),
            "without nesting",
        );
        // Nested, adjacent and on other tracks is fine.
        let ok = validate(&json!({ "traceEvents": [
            { "ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1 },
            { "ph": "X", "name": "b", "ts": 2, "dur": 8, "pid": 1, "tid": 1 },
            { "ph": "X", "name": "c", "ts": 10, "dur": 1, "pid": 1, "tid": 1 },
            { "ph": "X", "name": "d", "ts": 5, "dur": 10, "pid": 1, "tid": 2 },
            { "ph": "B", "name": "e", "ts": 1, "pid": 2, "tid": 1 },
            { "ph": "E", "ts": 2, "pid": 2, "tid": 1 },
            { "ph": "M", "name": "process_name", "pid": 2, "args": { "name": "p" } }
        ]}))
        .unwrap();
        assert_eq!((ok.complete, ok.tracks, ok.processes), (4, 2, 2));
        assert_eq!(ok.process_names[&2], "p");
    }

    #[test]
    fn an_empty_timeline_is_a_valid_empty_trace() {
        let v = validate(&parse(&chrome_json(&Timeline::default()))).unwrap();
        assert_eq!((v.events, v.tracks), (0, 0));
    }

    fn arb_record() -> impl Strategy<Value = crate::Record> {
        let tick = prop_oneof![0..5_000u64, any::<u64>()];
        (
            tick.clone(),
            tick,
            0..4u32,
            0..3u16,
            0..9u8,
            0..3u8,
            0..5u32,
        )
            .prop_map(
                |(start, end, seq, collector, op, status, peer)| crate::Record {
                    start,
                    end,
                    seq,
                    bytes: 8,
                    collector,
                    op,
                    status,
                    peer: if peer == 4 { NO_PEER } else { peer },
                },
            )
    }

    proptest! {
        /// Whatever the records, analysis does not panic, the export is valid and the
        /// report renders.
        #[test]
        fn any_records_export_validly(
            files in proptest::collection::vec(
                (0..2u8, proptest::collection::vec(
                    (proptest::option::of(0..4u32), proptest::collection::vec(arb_record(), 0..12)),
                    0..3,
                )),
                0..3,
            )
        ) {
            let files: Vec<crate::TraceFile> = files
                .into_iter()
                .map(|(host, threads)| {
                    let mut f = file(
                        &format!("h{host}"),
                        u64::from(host) * 1_000_000,
                        threads.iter().map(|t| (t.0.unwrap_or(9), t.1.clone())).collect(),
                    );
                    for (t, (rank, _)) in f.threads.iter_mut().zip(&threads) {
                        t.rank = *rank;
                    }
                    f
                })
                .collect();
            let a = crate::analysis::analyze(&files);
            let doc = parse(&chrome_json(&a.timeline));
            if let Err(e) = validate(&doc) {
                prop_assert!(false, "{e:?}");
            }
            let html = crate::report::render(&a, "p");
            prop_assert!(html.ends_with("</html>\n"));
        }
    }

    #[test]
    fn rank_lists_read_well() {
        assert_eq!(rank_list(&[]), "no ranks");
        assert_eq!(rank_list(&[3]), "rank 3");
        assert_eq!(rank_list(&[4, 5, 6]), "ranks 4-6");
        assert_eq!(rank_list(&[0, 2]), "ranks 0, 2");
    }
}
