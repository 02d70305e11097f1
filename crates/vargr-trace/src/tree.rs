//! Latencies per tree node, from the node files a traced tree writes (`node-<id>.vtr`):
//! the seed's analysis of a collective's spanning tree (000, §3 of the Euro-Par paper)
//! applied to vargr-tbon's waves.
//!
//! The seed's paths run from a thread *down* to the root's PastSet element and back *up*,
//! so its "down" is a tree's reduction towards the front-end and its "up" the multicast
//! back towards the back-ends. Its definitions, for a node with children i:
//!
//! - *down latency* `t2 − t1,l`: from the last child's contribution arriving (`t1,l`) to
//!   the reduced packet leaving for the parent (`t2`; at the root, to the end of its
//!   routing, when the application has the result);
//! - *up latency* `t4,f − t3`: from the packet arriving from the parent (`t3`) to its first
//!   forward to a child (`t4,f`);
//! - *arrival wait* of child i `t1,l − t1,i` and *departure wait* `t4,i − t4,f`, with the
//!   arrival and departure order histograms of the children;
//! - the *subtree* time: from the first forward down to the last reply up, the time a
//!   wave takes below the node (the seed's per-subtree cost).
//!
//! Times come from the `tbon/link/in` and `tbon/link/out` records (start of each): a
//! node's k-th data frame of a stream from a child is that child's part in the k-th wave,
//! which is what wait-for-all streams send; a node whose children sent different numbers
//! is counted in [`TreeTimes::uneven`] and only the common waves are used. The tree's
//! shape comes from who exchanged frames with whom, oriented from the front-end (the node
//! labelled `front-end`, else the lowest id). Transit times between nodes use the aligned
//! clocks the node files carry.
//!
//! [`path_timemaps`] gives, per back-end, the seed's time map: the mean of every stage on
//! the path from the back-end to the root (transit, arrival wait, down latency) and back
//! (up latency, departure wait, transit).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde::Serialize;

use crate::analysis::{Dist, Timeline};
use crate::stages::node_of_track;
use crate::EventOp;

/// What one child did at one node, over all waves.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChildTimes {
    pub child: u32,
    /// `arrival_hist[k]`: waves in which it arrived (k+1)-th; `departure_hist` the same
    /// for the multicast's forwards.
    pub arrival_hist: Vec<u64>,
    pub departure_hist: Vec<u64>,
    /// Waves it completed (arrived last in).
    pub last: u64,
    pub arrival_wait: Option<Dist>,
    pub departure_wait: Option<Dist>,
}

/// One node's latencies.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeTimes {
    pub node: u32,
    /// `front-end`, `commnode`, `back-end 3`: from its track's label.
    pub role: String,
    pub parent: Option<u32>,
    pub children: Vec<u32>,
    /// Reduction waves (all children's packets in) and multicast waves seen.
    pub reduce_waves: u64,
    pub multicast_waves: u64,
    /// The seed's down latency, `t2 − t1,l`, ns.
    pub down_latency: Option<Dist>,
    /// The seed's up latency, `t4,f − t3`, ns.
    pub up_latency: Option<Dist>,
    /// First forward down to last reply up, for waves that went down and came back.
    pub subtree: Option<Dist>,
    pub children_times: Vec<ChildTimes>,
}

impl NodeTimes {
    pub fn child(&self, c: u32) -> Option<&ChildTimes> {
        self.children_times.iter().find(|x| x.child == c)
    }
}

/// Transit over one tree edge, from the sender's hand-off to the receiver's arrival.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeTimes {
    pub parent: u32,
    pub child: u32,
    /// Child to parent (the seed's down direction), ns.
    pub toward_root: Option<Dist>,
    /// Parent to child, ns.
    pub toward_leaves: Option<Dist>,
}

/// Which half of a path a stage is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Half {
    /// From the back-end to the root (the seed's down path, drawn at x < 0).
    TowardRoot,
    /// From the root back to the back-end (x > 0).
    TowardLeaves,
}

/// One stage of a path: where and what, and its mean time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathStage {
    pub half: Half,
    /// The node the stage is at (for a transit: the receiving node).
    pub node: u32,
    /// `transit 4→1`, `arrival wait`, `down latency`, `up latency`, `departure wait`.
    pub stage: String,
    /// Mean ns; None when no wave measured it (drawn as 0).
    pub mean: Option<f64>,
}

/// The seed's time map of one back-end's path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathTimemap {
    pub leaf: u32,
    /// Back-end first, root last.
    pub path: Vec<u32>,
    pub stages: Vec<PathStage>,
    /// Sums of the means of each half, ns.
    pub toward_root: f64,
    pub toward_leaves: f64,
}

/// The tree's shape and every node's latencies.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TreeTimes {
    pub root: Option<u32>,
    /// Sorted by node id.
    pub nodes: Vec<NodeTimes>,
    pub edges: Vec<EdgeTimes>,
    pub paths: Vec<PathTimemap>,
    /// (node, stream) pairs whose children sent different numbers of packets.
    pub uneven: u64,
}

impl TreeTimes {
    pub fn node(&self, id: u32) -> Option<&NodeTimes> {
        self.nodes.iter().find(|n| n.node == id)
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// Start times of data frames at one node, per (stream, peer), in order.
#[derive(Default)]
struct Frames {
    /// (stream, peer) → (start, end) of frames that came in from the peer: a LinkIn
    /// spans the frame's routing, filters included.
    ins: HashMap<(u32, u32), Vec<(i64, i64)>>,
    outs: HashMap<(u32, u32), Vec<i64>>,
    streams: BTreeSet<u32>,
}

fn role_of(label: &str) -> Option<&str> {
    let (_, rest) = label.split_once('(')?;
    rest.strip_suffix(')')
}

fn push_dist(v: &mut Vec<i64>, x: i64) {
    v.push(x.max(0));
}

/// Latencies per node of every tree whose node files are in `tl`; empty when `tl` has
/// no tree records.
pub fn tree_times(tl: &Timeline) -> TreeTimes {
    let coll = |name: &str| tl.collectors.iter().position(|c| c == name);
    let (data_in, data_out) = (coll("tbon/link/in"), coll("tbon/link/out"));
    let (ctl_in, ctl_out) = (coll("tbon/link/in/control"), coll("tbon/link/out/control"));
    let mut frames: BTreeMap<u32, Frames> = BTreeMap::new();
    let mut roles: BTreeMap<u32, String> = BTreeMap::new();
    let mut adj: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    let mut node_of: Vec<Option<u32>> = Vec::with_capacity(tl.tracks.len());
    for (i, t) in tl.tracks.iter().enumerate() {
        let n = node_of_track(tl, i);
        if let Some(n) = n {
            let role = role_of(&t.label).or_else(|| {
                tl.processes
                    .get(t.process)
                    .and_then(|p| role_of(&p.process))
            });
            if let Some(r) = role.filter(|r| *r != "keeper") {
                roles.entry(n).or_insert_with(|| r.to_string());
            }
        }
        node_of.push(n);
    }
    for e in &tl.events {
        let (Some(Some(n)), Some(peer)) = (node_of.get(e.track), e.peer) else {
            continue;
        };
        let c = Some(e.collector);
        let data = match e.op {
            EventOp::LinkIn if c == data_in => Some(true),
            EventOp::LinkOut if c == data_out => Some(false),
            EventOp::LinkIn if c == ctl_in => None,
            EventOp::LinkOut if c == ctl_out => None,
            _ => continue,
        };
        adj.entry(*n).or_default().insert(peer);
        adj.entry(peer).or_default().insert(*n);
        if let Some(incoming) = data {
            let f = frames.entry(*n).or_default();
            f.streams.insert(e.seq);
            if incoming {
                f.ins
                    .entry((e.seq, peer))
                    .or_default()
                    .push((e.start, e.end));
            } else {
                f.outs.entry((e.seq, peer)).or_default().push(e.start);
            }
        }
    }
    if frames.is_empty() {
        return TreeTimes::default();
    }
    for f in frames.values_mut() {
        f.ins.values_mut().for_each(|v| v.sort_unstable());
        f.outs.values_mut().for_each(|v| v.sort_unstable());
    }
    let root = roles
        .iter()
        .find(|(_, r)| r.as_str() == "front-end")
        .map(|(&n, _)| n)
        .or_else(|| frames.keys().next().copied());
    // Orient the tree from the root, breadth first.
    let mut parent: BTreeMap<u32, Option<u32>> = BTreeMap::new();
    if let Some(r) = root {
        parent.insert(r, None);
        let mut todo = VecDeque::from([r]);
        while let Some(a) = todo.pop_front() {
            for &b in adj.get(&a).into_iter().flatten() {
                if let std::collections::btree_map::Entry::Vacant(v) = parent.entry(b) {
                    v.insert(Some(a));
                    todo.push_back(b);
                }
            }
        }
    }
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (&n, &p) in &parent {
        if let Some(p) = p {
            children.entry(p).or_default().push(n);
        }
    }
    let empty = Frames::default();
    let mut out = TreeTimes {
        root,
        ..Default::default()
    };
    let mut edges: BTreeMap<(u32, u32), (Vec<i64>, Vec<i64>)> = BTreeMap::new();
    for (&n, f) in &frames {
        let p = parent.get(&n).copied().flatten();
        let kids = children.get(&n).cloned().unwrap_or_default();
        let mut nt = NodeTimes {
            node: n,
            role: roles.get(&n).cloned().unwrap_or_default(),
            parent: p,
            children: kids.clone(),
            ..Default::default()
        };
        let (mut down, mut up, mut subtree) = (Vec::new(), Vec::new(), Vec::new());
        let mut per_child: BTreeMap<u32, (ChildTimes, Vec<i64>, Vec<i64>)> = kids
            .iter()
            .map(|&c| {
                (
                    c,
                    (
                        ChildTimes {
                            child: c,
                            ..Default::default()
                        },
                        Vec::new(),
                        Vec::new(),
                    ),
                )
            })
            .collect();
        for &s in &f.streams {
            let (no_in, no_out) = (Vec::new(), Vec::new());
            let ins = |peer: u32| f.ins.get(&(s, peer)).unwrap_or(&no_in);
            let outs = |peer: u32| f.outs.get(&(s, peer)).unwrap_or(&no_out);
            // Children taking part in this stream.
            let part: Vec<u32> = kids
                .iter()
                .copied()
                .filter(|&c| !ins(c).is_empty() || !outs(c).is_empty())
                .collect();
            let up_counts: Vec<usize> = part.iter().map(|&c| ins(c).len()).collect();
            let down_counts: Vec<usize> = part.iter().map(|&c| outs(c).len()).collect();
            let uneven = |v: &[usize]| v.iter().any(|&x| x != v[0]);
            if !part.is_empty() && (uneven(&up_counts) || uneven(&down_counts)) {
                out.uneven += 1;
            }
            let reduce_waves = up_counts.iter().copied().min().unwrap_or(0);
            let from_parent = p.map(ins);
            let mut multicast_waves = down_counts.iter().copied().min().unwrap_or(0);
            if let Some(fp) = from_parent {
                multicast_waves = multicast_waves.min(fp.len());
            }
            let width = part.len();
            let mut first_down: Vec<i64> = Vec::with_capacity(multicast_waves);
            for k in 0..multicast_waves {
                let mut order: Vec<(i64, u32)> = part.iter().map(|&c| (outs(c)[k], c)).collect();
                order.sort_unstable();
                let first = order[0].0;
                first_down.push(first);
                if let Some(fp) = from_parent {
                    push_dist(&mut up, first - fp[k].0);
                }
                for (pos, &(t, c)) in order.iter().enumerate() {
                    let x = per_child.get_mut(&c).expect("a child");
                    bump(&mut x.0.departure_hist, pos, width);
                    push_dist(&mut x.2, t - first);
                }
            }
            let to_parent = p.map(outs);
            for k in 0..reduce_waves {
                let mut order: Vec<(i64, u32)> = part.iter().map(|&c| (ins(c)[k].0, c)).collect();
                order.sort_unstable();
                let (last, last_child) = order[width - 1];
                // The root sends nothing up: the wave is done when its routing of the
                // last packet ends and the application has the result.
                let leave = match to_parent {
                    Some(tp) => tp.get(k).copied(),
                    None => ins(last_child).get(k).map(|x| x.1),
                };
                if let Some(t2) = leave {
                    push_dist(&mut down, t2 - last);
                }
                if let Some(&fd) = first_down.get(k) {
                    if last >= fd {
                        subtree.push(last - fd);
                    }
                }
                for (pos, &(t, c)) in order.iter().enumerate() {
                    let x = per_child.get_mut(&c).expect("a child");
                    bump(&mut x.0.arrival_hist, pos, width);
                    push_dist(&mut x.1, last - t);
                }
                if let Some(x) = per_child.get_mut(&last_child) {
                    x.0.last += 1;
                }
            }
            nt.reduce_waves += reduce_waves as u64;
            nt.multicast_waves += multicast_waves as u64;
            // Transit over the edges to the children: this node's sends against the
            // child's arrivals, and the child's sends against this node's arrivals.
            for &c in &part {
                let cf = frames.get(&c).unwrap_or(&empty);
                let e = edges.entry((n, c)).or_default();
                if let Some(arr) = cf.ins.get(&(s, n)) {
                    for (a, d) in outs(c).iter().zip(arr) {
                        push_dist(&mut e.1, d.0 - a);
                    }
                }
                if let Some(sent) = cf.outs.get(&(s, n)) {
                    for (a, d) in sent.iter().zip(ins(c)) {
                        push_dist(&mut e.0, d.0 - a);
                    }
                }
            }
        }
        nt.down_latency = Dist::of(down);
        nt.up_latency = Dist::of(up);
        nt.subtree = Dist::of(subtree);
        nt.children_times = per_child
            .into_values()
            .map(|(mut c, aw, dw)| {
                c.arrival_wait = Dist::of(aw);
                c.departure_wait = Dist::of(dw);
                c
            })
            .collect();
        out.nodes.push(nt);
    }
    out.edges = edges
        .into_iter()
        .map(|((parent, child), (up, down))| EdgeTimes {
            parent,
            child,
            toward_root: Dist::of(up),
            toward_leaves: Dist::of(down),
        })
        .filter(|e| e.toward_root.is_some() || e.toward_leaves.is_some())
        .collect();
    out.paths = path_timemaps(&out);
    out
}

fn bump(hist: &mut Vec<u64>, pos: usize, len: usize) {
    if hist.len() < len {
        hist.resize(len, 0);
    }
    hist[pos] += 1;
}

/// The seed's time map of every back-end's path: the mean time of each stage from the
/// back-end to the root and back.
pub fn path_timemaps(t: &TreeTimes) -> Vec<PathTimemap> {
    let edge = |p: u32, c: u32| t.edges.iter().find(|e| e.parent == p && e.child == c);
    let mean = |d: Option<&Dist>| d.map(|d| d.mean);
    let mut out = Vec::new();
    for leaf in t
        .nodes
        .iter()
        .filter(|n| n.children.is_empty() && n.parent.is_some())
    {
        let mut path = vec![leaf.node];
        let mut at = leaf.parent;
        while let Some(a) = at {
            if path.contains(&a) || path.len() > t.nodes.len() + 1 {
                break;
            }
            path.push(a);
            at = t.node(a).and_then(|n| n.parent);
        }
        let mut stages = Vec::new();
        let mut push = |half, node, stage: String, d: Option<&Dist>| {
            stages.push(PathStage {
                half,
                node,
                stage,
                mean: mean(d),
            })
        };
        for w in path.windows(2) {
            let (x, a) = (w[0], w[1]);
            let na = t.node(a);
            let child = na.and_then(|n| n.child(x));
            let to = Half::TowardRoot;
            push(
                to,
                a,
                format!("transit {x}→{a}"),
                edge(a, x).and_then(|e| e.toward_root.as_ref()),
            );
            push(
                to,
                a,
                "arrival wait".into(),
                child.and_then(|c| c.arrival_wait.as_ref()),
            );
            push(
                to,
                a,
                "down latency".into(),
                na.and_then(|n| n.down_latency.as_ref()),
            );
        }
        for w in path.windows(2).rev() {
            let (y, a) = (w[0], w[1]);
            let na = t.node(a);
            let child = na.and_then(|n| n.child(y));
            let to = Half::TowardLeaves;
            push(
                to,
                a,
                "up latency".into(),
                na.and_then(|n| n.up_latency.as_ref()),
            );
            push(
                to,
                a,
                "departure wait".into(),
                child.and_then(|c| c.departure_wait.as_ref()),
            );
            push(
                to,
                y,
                format!("transit {a}→{y}"),
                edge(a, y).and_then(|e| e.toward_leaves.as_ref()),
            );
        }
        let sum = |h: Half| {
            stages
                .iter()
                .filter(|s| s.half == h)
                .filter_map(|s| s.mean)
                .sum::<f64>()
        };
        out.push(PathTimemap {
            leaf: leaf.node,
            toward_root: sum(Half::TowardRoot),
            toward_leaves: sum(Half::TowardLeaves),
            path,
            stages,
        });
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::tests::{clock, rec};
    use crate::analysis::timeline;
    use crate::{Record, ThreadTrace, TraceFile};

    const IN: u16 = 0;
    const OUT: u16 = 1;
    const STREAM: u32 = 5;

    fn node(id: u32, role: &str, records: Vec<Record>) -> TraceFile {
        TraceFile {
            process: format!("node {id} ({role})"),
            host: "h".into(),
            pid: id,
            clock: clock(0),
            align: Default::default(),
            collectors: vec!["tbon/link/in".into(), "tbon/link/out".into()],
            threads: vec![ThreadTrace {
                label: format!("node {id} ({role})"),
                rank: None,
                lost: 0,
                records,
            }],
            usage: None,
        }
    }

    /// Front-end 0 with children 1 (a commnode over back-ends 2 and 3) and back-end 4;
    /// two waves of one stream, each multicast down and reduced back up. Times are ns
    /// after 100 µs × wave; see the expected values in the test below.
    pub(crate) fn two_level_tree() -> Vec<TraceFile> {
        let (mut n0, mut n1, mut n2, mut n3, mut n4) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for k in 0..2u64 {
            let t = 100_000 * k;
            let inn =
                |s: u64, e: u64, peer: u32| rec(EventOp::LinkIn, IN, STREAM, t + s, t + e, peer);
            let out =
                |s: u64, peer: u32| rec(EventOp::LinkOut, OUT, STREAM, t + s, t + s + 5, peer);
            // Multicast: the front-end forwards to 1 then 4 in wave 0, to 4 then 1 in
            // wave 1.
            let (to1, to4) = if k == 0 { (0, 10) } else { (20, 0) };
            n0.extend([out(to1, 1), out(to4, 4)]);
            n1.extend([inn(100, 150, 0), out(120, 2), out(130, 3)]);
            n4.push(inn(110, 115, 0));
            n2.push(inn(200, 210, 1));
            n3.push(inn(210, 220, 1));
            // Reduction: 4 answers early, 3 late.
            n2.push(out(1_000, 1));
            n3.push(out(2_000, 1));
            n1.extend([inn(1_050, 1_060, 2), inn(2_050, 2_100, 3), out(2_080, 0)]);
            n4.push(out(500, 0));
            n0.extend([inn(600, 610, 4), inn(2_200, 2_300, 1)]);
        }
        vec![
            node(0, "front-end", n0),
            node(1, "commnode", n1),
            node(2, "back-end 0", n2),
            node(3, "back-end 1", n3),
            node(4, "back-end 2", n4),
        ]
    }

    fn means(d: &Option<Dist>) -> Option<(u64, f64)> {
        d.map(|d| (d.count, d.mean))
    }

    #[test]
    fn node_latencies_follow_the_seeds_definitions() {
        let t = tree_times(&timeline(&two_level_tree()));
        assert_eq!(t.root, Some(0));
        assert_eq!(t.uneven, 0);
        let shape: Vec<(u32, &str, Option<u32>, Vec<u32>)> = t
            .nodes
            .iter()
            .map(|n| (n.node, n.role.as_str(), n.parent, n.children.clone()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (0, "front-end", None, vec![1, 4]),
                (1, "commnode", Some(0), vec![2, 3]),
                (2, "back-end 0", Some(1), vec![]),
                (3, "back-end 1", Some(1), vec![]),
                (4, "back-end 2", Some(0), vec![]),
            ]
        );
        let n1 = t.node(1).unwrap();
        assert_eq!((n1.reduce_waves, n1.multicast_waves), (2, 2));
        // Down: last child (3) in at 2 050, out to the parent at 2 080.
        assert_eq!(means(&n1.down_latency), Some((2, 30.0)));
        // Up: in from the parent at 100, first forward (to 2) at 120.
        assert_eq!(means(&n1.up_latency), Some((2, 20.0)));
        assert_eq!(means(&n1.subtree), Some((2, 1_930.0)));
        let (c2, c3) = (n1.child(2).unwrap(), n1.child(3).unwrap());
        assert_eq!(
            (c2.arrival_hist.clone(), c3.arrival_hist.clone()),
            (vec![2, 0], vec![0, 2])
        );
        assert_eq!((c2.last, c3.last), (0, 2));
        assert_eq!(means(&c2.arrival_wait), Some((2, 1_000.0)));
        assert_eq!(means(&c3.arrival_wait), Some((2, 0.0)));
        assert_eq!(c2.departure_hist, vec![2, 0]);
        assert_eq!(means(&c3.departure_wait), Some((2, 10.0)));

        let n0 = t.node(0).unwrap();
        // The root: the last packet's routing, 2 200 to 2 300; nothing from a parent.
        assert_eq!(means(&n0.down_latency), Some((2, 100.0)));
        assert_eq!(n0.up_latency, None);
        assert_eq!(means(&n0.subtree), Some((2, 2_200.0)));
        let (c1, c4) = (n0.child(1).unwrap(), n0.child(4).unwrap());
        assert_eq!(
            (c1.departure_hist.clone(), c4.departure_hist.clone()),
            (vec![1, 1], vec![1, 1])
        );
        assert_eq!(means(&c1.departure_wait), Some((2, 10.0)));
        assert_eq!(means(&c4.departure_wait), Some((2, 5.0)));
        assert_eq!(means(&c4.arrival_wait), Some((2, 1_600.0)));
        assert_eq!((c1.last, c4.last), (2, 0));
        // Leaves have no waves of their own.
        assert_eq!(t.node(2).unwrap().down_latency, None);

        type Row = (u32, u32, Option<(u64, f64)>, Option<(u64, f64)>);
        let edges: Vec<Row> = t
            .edges
            .iter()
            .map(|e| {
                (
                    e.parent,
                    e.child,
                    means(&e.toward_root),
                    means(&e.toward_leaves),
                )
            })
            .collect();
        assert_eq!(
            edges,
            vec![
                (0, 1, Some((2, 120.0)), Some((2, 90.0))),
                (0, 4, Some((2, 100.0)), Some((2, 105.0))),
                (1, 2, Some((2, 50.0)), Some((2, 80.0))),
                (1, 3, Some((2, 50.0)), Some((2, 80.0))),
            ]
        );
    }

    #[test]
    fn a_back_ends_time_map_walks_to_the_root_and_back() {
        let t = tree_times(&timeline(&two_level_tree()));
        let leaves: Vec<u32> = t.paths.iter().map(|p| p.leaf).collect();
        assert_eq!(leaves, vec![2, 3, 4]);
        let p = &t.paths[1];
        assert_eq!(p.path, vec![3, 1, 0]);
        let got: Vec<(Half, u32, &str, Option<f64>)> = p
            .stages
            .iter()
            .map(|s| (s.half, s.node, s.stage.as_str(), s.mean))
            .collect();
        use Half::*;
        assert_eq!(
            got,
            vec![
                (TowardRoot, 1, "transit 3→1", Some(50.0)),
                (TowardRoot, 1, "arrival wait", Some(0.0)),
                (TowardRoot, 1, "down latency", Some(30.0)),
                (TowardRoot, 0, "transit 1→0", Some(120.0)),
                (TowardRoot, 0, "arrival wait", Some(0.0)),
                (TowardRoot, 0, "down latency", Some(100.0)),
                (TowardLeaves, 0, "up latency", None),
                (TowardLeaves, 0, "departure wait", Some(10.0)),
                (TowardLeaves, 1, "transit 0→1", Some(90.0)),
                (TowardLeaves, 1, "up latency", Some(20.0)),
                (TowardLeaves, 1, "departure wait", Some(10.0)),
                (TowardLeaves, 3, "transit 1→3", Some(80.0)),
            ]
        );
        assert_eq!((p.toward_root, p.toward_leaves), (300.0, 210.0));
        // Back-end 4 hangs off the root: one hop each way.
        let p4 = &t.paths[2];
        assert_eq!(p4.path, vec![4, 0]);
        assert_eq!(p4.toward_root, 100.0 + 1_600.0 + 100.0);
    }

    #[test]
    fn uneven_children_are_counted_and_paired_by_the_common_waves() {
        let mut files = two_level_tree();
        // Node 1 lost its record of back-end 2's second packet.
        files[1].threads[0]
            .records
            .retain(|r| !(r.op == EventOp::LinkIn as u8 && r.peer == 2 && r.start > 100_000));
        let t = tree_times(&timeline(&files));
        assert_eq!(t.uneven, 1);
        let n1 = t.node(1).unwrap();
        assert_eq!((n1.reduce_waves, n1.multicast_waves), (1, 2));
        assert_eq!(means(&n1.down_latency), Some((1, 30.0)));
    }

    #[test]
    fn a_job_without_tree_records_has_no_tree() {
        let t = tree_times(&timeline(&crate::analysis::tests::slow_rank_job(3, 1, 100)));
        assert!(t.is_empty());
        assert!(t.paths.is_empty());
    }
}
