//! Time per path stage: how long frames spent in each stage of a link's chain (dedup,
//! codec, emulation, ...), per process or tree node and over the whole job. The seed's
//! time maps break a path's cost into its stages (000, §3 of the Euro-Par paper); every
//! stage boundary records `link/stage/NAME/out` (sending) or `link/stage/NAME/in`
//! (receiving), so each record's span is the time one frame spent in that stage.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::{Dist, Timeline};

/// Which way frames went through a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Outgoing frames (`link/stage/NAME/out`).
    Out,
    /// Incoming frames (`link/stage/NAME/in`).
    In,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Out => "out",
            Direction::In => "in",
        }
    }
}

/// The time one stage took, in one place or everywhere.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageTime {
    /// `node 3` for a tree node, the process name for a job's process (`ranks 0..2`),
    /// `all` for the sum over every place.
    pub place: String,
    pub node: Option<u32>,
    pub stage: String,
    pub direction: Direction,
    /// Frames that left the stage (bytes as they left it).
    pub frames: u64,
    pub bytes: u64,
    /// Time per frame in the stage, ns.
    pub time: Dist,
}

/// Stage times per place and over all places.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StageTimes {
    /// One row per (stage, direction), summed over places; sorted by total time, most
    /// first.
    pub stages: Vec<StageTime>,
    /// One row per (place, stage, direction), sorted by place then stage.
    pub places: Vec<StageTime>,
}

/// `dedup` and the direction of `link/stage/dedup/out`.
pub fn stage_of(collector: &str) -> Option<(&str, Direction)> {
    let rest = collector.strip_prefix("link/stage/")?;
    let (name, dir) = rest.rsplit_once('/')?;
    let dir = match dir {
        "out" => Direction::Out,
        "in" => Direction::In,
        _ => return None,
    };
    (!name.is_empty()).then_some((name, dir))
}

/// The tree node a label such as `node 3 (commnode)` names.
pub fn node_of_label(label: &str) -> Option<u32> {
    let rest = label.strip_prefix("node ")?;
    let id = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    id.parse().ok()
}

/// The tree node a track belongs to: its thread's label (nodes started as threads of the
/// front-end's process share its file), else its process's name.
pub fn node_of_track(tl: &Timeline, track: usize) -> Option<u32> {
    let t = tl.tracks.get(track)?;
    node_of_label(&t.label).or_else(|| {
        tl.processes
            .get(t.process)
            .and_then(|p| node_of_label(&p.process))
    })
}

/// Where a track's records happened, for tables: its tree node or its process.
pub fn place_of_track(tl: &Timeline, track: usize) -> (String, Option<u32>) {
    match node_of_track(tl, track) {
        Some(n) => (format!("node {n}"), Some(n)),
        None => (
            tl.tracks
                .get(track)
                .and_then(|t| tl.processes.get(t.process))
                .map_or_else(|| "?".to_string(), |p| p.process.clone()),
            None,
        ),
    }
}

/// Every stage record of `tl`, timed per place and in all.
pub fn stage_times(tl: &Timeline) -> StageTimes {
    type Key = (String, Direction);
    /// Durations and bytes of one (stage, direction).
    type Times = BTreeMap<Key, (Vec<i64>, u64)>;
    let mut per_place: BTreeMap<(String, Option<u32>), Times> = BTreeMap::new();
    let mut all: Times = BTreeMap::new();
    for e in &tl.events {
        let Some((stage, dir)) = stage_of(tl.collector(e)) else {
            continue;
        };
        let d = e.end.saturating_sub(e.start);
        let key = (stage.to_string(), dir);
        for slot in [
            per_place
                .entry(place_of_track(tl, e.track))
                .or_default()
                .entry(key.clone())
                .or_default(),
            all.entry(key).or_default(),
        ] {
            slot.0.push(d);
            slot.1 += u64::from(e.bytes);
        }
    }
    let row =
        |place: String, node: Option<u32>, (stage, direction): Key, (v, bytes): (Vec<i64>, u64)| {
            Dist::of(v).map(|time| StageTime {
                place,
                node,
                stage,
                direction,
                frames: time.count,
                bytes,
                time,
            })
        };
    let mut stages: Vec<StageTime> = all
        .into_iter()
        .filter_map(|(k, v)| row("all".into(), None, k, v))
        .collect();
    stages.sort_by(|a, b| {
        b.time
            .total
            .cmp(&a.time.total)
            .then_with(|| (&a.stage, a.direction).cmp(&(&b.stage, b.direction)))
    });
    let mut places: Vec<((Option<u32>, String), StageTime)> = Vec::new();
    for ((place, node), m) in per_place {
        for (k, v) in m {
            if let Some(r) = row(place.clone(), node, k, v) {
                // Nodes in id order, then processes by name.
                places.push(((node.or(Some(u32::MAX)), place.clone()), r));
            }
        }
    }
    places.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| (&a.1.stage, a.1.direction).cmp(&(&b.1.stage, b.1.direction)))
    });
    StageTimes {
        stages,
        places: places.into_iter().map(|x| x.1).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{clock, rec};
    use crate::analysis::timeline;
    use crate::{EventOp, ThreadTrace, TraceFile, NO_PEER};

    fn node_file(id: u32, records: Vec<crate::Record>) -> TraceFile {
        TraceFile {
            process: format!("node {id} (commnode)"),
            host: "h".into(),
            pid: id,
            clock: clock(0),
            align: Default::default(),
            collectors: vec![
                "link/stage/codec/out".into(),
                "link/stage/codec/in".into(),
                "link/stage/emu/out".into(),
                "tbon/link/out".into(),
            ],
            threads: vec![ThreadTrace {
                label: format!("node {id} (commnode)"),
                rank: None,
                lost: 0,
                records,
            }],
            usage: None,
        }
    }

    #[test]
    fn names_parse() {
        assert_eq!(
            stage_of("link/stage/dedup/out"),
            Some(("dedup", Direction::Out))
        );
        assert_eq!(stage_of("link/stage/emu/in"), Some(("emu", Direction::In)));
        assert_eq!(stage_of("link/stage//in"), None);
        assert_eq!(stage_of("link/stage/emu/sideways"), None);
        assert_eq!(stage_of("tbon/link/out"), None);
        assert_eq!(node_of_label("node 12 (back-end 3)"), Some(12));
        assert_eq!(node_of_label("node 7"), Some(7));
        assert_eq!(node_of_label("rank 7"), None);
        assert_eq!(node_of_label("node x"), None);
    }

    #[test]
    fn stages_are_timed_per_node_and_in_all() {
        let out = |s: u64, e: u64| rec(EventOp::LinkOut, 0, 1, s, e, NO_PEER);
        let a = node_file(
            1,
            vec![
                out(0, 100),
                out(200, 500),
                out(600, 700),
                rec(EventOp::LinkIn, 1, 1, 800, 850, NO_PEER),
                rec(EventOp::LinkOut, 2, 1, 900, 2_900, NO_PEER),
                // Not a stage.
                rec(EventOp::LinkOut, 3, 1, 0, 99_999, NO_PEER),
            ],
        );
        let b = node_file(2, vec![out(0, 1_000)]);
        let st = stage_times(&timeline(&[a, b]));
        let got: Vec<(&str, &str, &str, u64, i64, f64, f64)> = st
            .places
            .iter()
            .map(|r| {
                (
                    r.place.as_str(),
                    r.stage.as_str(),
                    r.direction.name(),
                    r.frames,
                    r.time.total,
                    r.time.median,
                    r.time.p90,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("node 1", "codec", "out", 3, 500, 100.0, 300.0),
                ("node 1", "codec", "in", 1, 50, 50.0, 50.0),
                ("node 1", "emu", "out", 1, 2_000, 2_000.0, 2_000.0),
                ("node 2", "codec", "out", 1, 1_000, 1_000.0, 1_000.0),
            ]
        );
        assert_eq!(st.places[0].node, Some(1));
        assert_eq!(st.places[0].bytes, 24);
        let all: Vec<(&str, &str, u64, i64)> = st
            .stages
            .iter()
            .map(|r| (r.stage.as_str(), r.direction.name(), r.frames, r.time.total))
            .collect();
        assert_eq!(
            all,
            vec![
                ("emu", "out", 1, 2_000),
                ("codec", "out", 4, 1_500),
                ("codec", "in", 1, 50)
            ]
        );
        assert_eq!(st.stages[1].time.mean, 375.0);
    }

    #[test]
    fn dist_percentiles() {
        let d = Dist::of((1..=10).collect()).unwrap();
        assert_eq!((d.count, d.min, d.max, d.total), (10, 1, 10, 55));
        assert_eq!((d.mean, d.median, d.p90), (5.5, 5.5, 9.0));
        let d = Dist::of(vec![7]).unwrap();
        assert_eq!((d.median, d.p90), (7.0, 7.0));
        let d = Dist::of((1..=11).rev().collect()).unwrap();
        assert_eq!((d.median, d.p90), (6.0, 10.0));
        assert_eq!(Dist::of(vec![]), None);
    }
}
