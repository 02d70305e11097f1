//! Fault recovery on simulated links: routers wired together in memory, frames pumped
//! in order, no sockets, no clock but a fixed instant. A commnode dies with a wave half
//! reduced in it; its back-ends are adopted by the front-end; every wave's result and
//! every report is checked exactly.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use vargr_net::LinkId;
use vargr_wire::{decode_exact, Packet, Value};

use crate::proto::{Ancestor, StreamOpenMsg};
use crate::recovery::{Recovery, TreeEvent};
use crate::router::{ChildInfo, Outbox, Router};
use crate::TbonError;

const STREAM: u32 = 16;

/// Routers indexed by node id, and the wires between their links.
struct Sim {
    nodes: Vec<Router>,
    wires: FxHashMap<(u32, usize), (u32, LinkId)>,
    queue: VecDeque<(u32, LinkId, Bytes)>,
    now: Instant,
}

impl Sim {
    fn wire(&mut self, a: u32, la: usize, b: u32, lb: usize) {
        self.wires.insert((a, la), (b, LinkId(lb)));
        self.wires.insert((b, lb), (a, LinkId(la)));
    }

    /// Node `n` dies: every wire to it is cut, frames on the way are lost.
    fn kill(&mut self, n: u32) {
        self.wires.retain(|&(a, _), &mut (b, _)| a != n && b != n);
    }

    fn run<R>(&mut self, n: u32, f: impl FnOnce(&mut Router, &mut Outbox) -> R) -> R {
        let mut out = Outbox::default();
        let r = f(&mut self.nodes[n as usize], &mut out);
        for (link, _, bytes) in out.0 {
            self.queue.push_back((n, link, bytes));
        }
        r
    }

    fn pump(&mut self) {
        while let Some((from, link, bytes)) = self.queue.pop_front() {
            let Some(&(to, at)) = self.wires.get(&(from, link.0)) else {
                continue;
            };
            let f = decode_exact(&bytes, 1 << 20).expect("routers send whole frames");
            let now = self.now;
            self.run(to, |r, out| r.on_frame(at, f, now, out));
        }
    }

    /// Back-end `n` answers up to `max` of the multicasts it has heard: `v 2^rank`.
    fn answer(&mut self, n: u32, max: usize) {
        for _ in 0..max {
            let Some(p) = self.nodes[n as usize].deliveries.inbox.pop_front() else {
                break;
            };
            let rank = self.nodes[n as usize].backend_rank.expect("a back-end");
            let mut a = Packet::new(
                STREAM,
                0,
                "%ld %ld",
                vec![p.values[0].clone(), Value::Long(1 << rank)],
            )
            .unwrap();
            a.source = rank;
            self.run(n, |r, out| r.send_up(&a, out)).unwrap();
        }
        self.pump();
    }

    fn multicast(&mut self, v: i64) {
        let p = Packet::new(STREAM, 0, "%ld", vec![Value::Long(v)]).unwrap();
        self.run(0, |r, out| r.send_down(p, out)).unwrap();
        self.pump();
    }

    /// The front-end's stream results so far: (sum, contributors) or the error.
    fn results(&mut self) -> Vec<Result<(i64, i64), TbonError>> {
        let q = self.nodes[0].deliveries.streams.entry(STREAM).or_default();
        q.drain(..)
            .map(|r| {
                r.map(|p| match p.values[..] {
                    [Value::Long(s), Value::Long(m)] => (s, m),
                    _ => panic!("{p:?}"),
                })
            })
            .collect()
    }

    /// Orphan `n` asks the front-end (node 0) for adoption over a new wire.
    fn adopt_by_root(&mut self, n: u32, root_link: usize, own_link: usize) {
        self.adopt_by(0, n, root_link, own_link)
    }

    /// Orphan `n` asks node `by` for adoption over a new wire.
    fn adopt_by(&mut self, by: u32, n: u32, by_link: usize, own_link: usize) {
        let msg = self.nodes[n as usize].adopt_request().expect("an orphan");
        let reply = self.nodes[by as usize]
            .adoption_answer()
            .expect("the node adopts");
        self.wire(by, by_link, n, own_link);
        let now = self.now;
        // As the engine does: a child still claiming the orphan's back-ends is dead to us.
        for l in self.nodes[by as usize]
            .children_claiming(&msg.backends)
            .unwrap()
        {
            self.run(by, |r, out| r.on_closed(l, "unreachable".into(), now, out));
        }
        self.run(by, |r, out| r.adopt(LinkId(by_link), msg, now, out));
        self.run(n, |r, out| r.adopted(LinkId(own_link), reply, out));
        self.pump();
    }
}

fn ancestor(node: u32) -> Ancestor {
    Ancestor {
        node,
        host: format!("h{node}"),
        addr: format!("unix:/n{node}.sock"),
    }
}

/// Front-end 0 with children commnode 1 (back-ends 3 and 4: ranks 0 and 1) and back-end
/// 2 (rank 2); every link is `LinkId(0)` towards the parent.
fn tree() -> Sim {
    let reg = Arc::new(vargr_filter::Registry::with_builtins());
    let mut nodes = Vec::new();
    for (id, rank) in [
        (0, None),
        (1, None),
        (2, Some(2)),
        (3, Some(0)),
        (4, Some(1)),
    ] {
        let mut r = Router::new(id, format!("h{id}"), rank, reg.clone());
        r.recovery = Recovery::Ancestor;
        nodes.push(r);
    }
    nodes[0].listen = Some(ancestor(0));
    nodes[0].children = vec![
        ChildInfo::new(LinkId(0), 1, "h1".into(), vec![0, 1]),
        ChildInfo::new(LinkId(1), 2, "h2".into(), vec![2]),
    ];
    nodes[1].children = vec![
        ChildInfo::new(LinkId(1), 3, "h3".into(), vec![0]),
        ChildInfo::new(LinkId(2), 4, "h4".into(), vec![1]),
    ];
    for (id, parent, ancestors) in [
        (1, 0, vec![ancestor(0)]),
        (2, 0, vec![ancestor(0)]),
        (3, 1, vec![ancestor(1), ancestor(0)]),
        (4, 1, vec![ancestor(1), ancestor(0)]),
    ] {
        let r = &mut nodes[id];
        r.parent = Some(LinkId(0));
        r.parent_node = parent;
        r.ancestors = ancestors;
    }
    let mut sim = Sim {
        nodes,
        wires: FxHashMap::default(),
        queue: VecDeque::new(),
        now: Instant::now(),
    };
    sim.wire(0, 0, 1, 0);
    sim.wire(0, 1, 2, 0);
    sim.wire(1, 1, 3, 0);
    sim.wire(1, 2, 4, 0);
    let open = StreamOpenMsg {
        id: STREAM,
        members: vec![0, 1, 2],
        up: "sum".into(),
        sync: "all".into(),
        down: None,
        latest: false,
    };
    sim.run(0, |r, out| r.open_stream(open, out)).unwrap();
    sim.pump();
    sim
}

#[test]
fn orphans_adopted_mid_stream_line_up_and_every_loss_is_reported() {
    let mut sim = tree();
    let now = sim.now;
    // Wave 0: everyone.
    sim.multicast(1);
    for n in [2, 3, 4] {
        sim.answer(n, 1);
    }
    assert!(matches!(sim.results()[..], [Ok((3, 0b111))]));

    // Wave 1: rank 0 answers into node 1, which then dies with the wave half reduced.
    sim.multicast(2);
    sim.answer(3, 1);
    sim.kill(1);
    sim.run(0, |r, out| {
        r.on_closed(LinkId(0), "killed".into(), now, out)
    });
    for n in [3, 4] {
        sim.run(n, |r, out| {
            r.on_closed(LinkId(0), "killed".into(), now, out)
        });
        assert!(sim.nodes[n as usize].orphan.is_some(), "node {n} orphaned");
        assert!(sim.nodes[n as usize].deliveries.closed.is_none());
    }
    // Wave 2 is multicast while the orphans are unreachable; rank 2 answers wave 1 only.
    sim.multicast(3);
    sim.answer(2, 1);
    // Rank 1 answers wave 1 while orphaned: held, and dropped by the adopter as late.
    sim.answer(4, 1);

    sim.adopt_by_root(3, 2, 1);
    sim.adopt_by_root(4, 3, 1);
    // Wave 2 waits for no orphan (they never heard it); wave 3 has everyone again.
    sim.answer(2, 1);
    sim.multicast(4);
    for n in [2, 3, 4] {
        sim.answer(n, 1);
    }
    let results = sim.results();
    let lost = |b: u32| TbonError::WavesLost {
        stream: STREAM,
        first: 1,
        end: 3,
        backends: vec![b],
        lost: 1,
    };
    let oks: Vec<(i64, i64)> = results.iter().filter_map(|r| r.clone().ok()).collect();
    assert_eq!(
        oks,
        vec![(2, 0b100), (3, 0b100), (4 * 3, 0b111)],
        "waves 1 and 2 hold rank 2 alone, wave 3 everyone: {results:?}"
    );
    let errs: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert!(errs[0].contains("node 1 on h1 was lost"), "{errs:?}");
    assert_eq!(errs[1..], [lost(0).to_string(), lost(1).to_string()]);
    let events = &sim.nodes[0].deliveries.events;
    let moved = |node: u32, b: u32| TreeEvent::Reparented {
        node,
        lost_parent: 1,
        new_parent: 0,
        backends: vec![b],
    };
    let gone = |b: u32| TreeEvent::WavesLost {
        stream: STREAM,
        first: 1,
        end: 3,
        backends: vec![b],
        lost: 1,
    };
    assert_eq!(
        events,
        &vec![
            TreeEvent::NodeLost {
                node: 1,
                host: "h1".into(),
                backends: vec![0, 1]
            },
            gone(0),
            moved(3, 0),
            gone(1),
            moved(4, 1),
        ]
    ); // Node 1 back from the dead, still claiming both: refused, not handed them back.
    let stale = sim.nodes[0].children_claiming(&[0, 1]);
    assert!(stale.is_err(), "{stale:?}");
}

/// Builds a tree from `(node, parent, rank)` rows (node ids 0..n in order, 0 the root):
/// a node's link to its parent is `LinkId(0)`; its children's links follow (from 0 at
/// the root, from 1 elsewhere) in row order. Opens the stream over every rank.
fn build(rows: &[(u32, u32, Option<u32>)]) -> Sim {
    let reg = Arc::new(vargr_filter::Registry::with_builtins());
    let mut nodes: Vec<Router> = rows
        .iter()
        .map(|&(id, _, rank)| {
            let mut r = Router::new(id, format!("h{id}"), rank, reg.clone());
            r.recovery = Recovery::Ancestor;
            r
        })
        .collect();
    nodes[0].listen = Some(ancestor(0));
    let below = |n: u32| -> Vec<u32> {
        let mut v: Vec<u32> = rows
            .iter()
            .filter(|&&(id, _, r)| {
                let mut a = id;
                while a != 0 && a != n {
                    a = rows[a as usize].1;
                }
                a == n && r.is_some()
            })
            .map(|&(_, _, r)| r.unwrap())
            .collect();
        v.sort_unstable();
        v
    };
    let mut sim = Sim {
        nodes: Vec::new(),
        wires: FxHashMap::default(),
        queue: VecDeque::new(),
        now: Instant::now(),
    };
    for &(id, parent, _) in &rows[1..] {
        let p = parent as usize;
        let link = nodes[p].children.len() + usize::from(p != 0);
        nodes[p].children.push(ChildInfo::new(
            LinkId(link),
            id,
            format!("h{id}"),
            below(id),
        ));
        sim.wire(parent, link, id, 0);
        let r = &mut nodes[id as usize];
        r.parent = Some(LinkId(0));
        r.parent_node = parent;
        let mut a = parent;
        loop {
            r.ancestors.push(ancestor(a));
            if a == 0 {
                break;
            }
            a = rows[a as usize].1;
        }
    }
    sim.nodes = nodes;
    let open = StreamOpenMsg {
        id: STREAM,
        members: below(0),
        up: "sum".into(),
        sync: "all".into(),
        down: None,
        latest: false,
    };
    sim.run(0, |r, out| r.open_stream(open, out)).unwrap();
    sim.pump();
    sim
}

/// Commnode 2 dies with a wave half reduced in it; its parent, commnode 1, reports the
/// loss from that wave on and dies too before adopting anyone. The front-end adopts
/// every orphan and still reports the loss of ranks 0 and 1 from wave 1, where it
/// began, not from wave 2, where the front-end itself first missed them.
#[test]
fn a_loss_seen_by_a_node_that_died_too_is_reported_from_its_first_wave() {
    // 0 -> {1, 5 (rank 2)}; 1 -> {2, 6 (rank 3)}; 2 -> {3 (rank 0), 4 (rank 1)}.
    let mut sim = build(&[
        (0, 0, None),
        (1, 0, None),
        (2, 1, None),
        (3, 2, Some(0)),
        (4, 2, Some(1)),
        (5, 0, Some(2)),
        (6, 1, Some(3)),
    ]);
    let now = sim.now;
    let backends = [3, 4, 5, 6];
    sim.multicast(1);
    for n in backends {
        sim.answer(n, 1);
    }
    // Wave 1: rank 0 answers into node 2, which dies; node 1 goes on with rank 3.
    sim.multicast(2);
    sim.answer(3, 1);
    sim.kill(2);
    sim.run(1, |r, out| {
        r.on_closed(LinkId(1), "killed".into(), now, out)
    });
    sim.pump();
    sim.answer(6, 1);
    sim.answer(5, 1);
    // Node 1 dies; wave 2 reaches rank 2 alone.
    sim.kill(1);
    sim.run(0, |r, out| {
        r.on_closed(LinkId(0), "killed".into(), now, out)
    });
    for n in [3, 4, 6] {
        sim.run(n, |r, out| {
            r.on_closed(LinkId(0), "killed".into(), now, out)
        });
    }
    sim.multicast(3);
    sim.answer(5, 1);
    sim.adopt_by_root(3, 2, 1);
    sim.adopt_by_root(4, 3, 1);
    sim.adopt_by_root(6, 4, 1);
    // Rank 1's answer to wave 1 comes late, and is dropped; wave 3 has everyone.
    sim.answer(4, 1);
    sim.multicast(4);
    for n in backends {
        sim.answer(n, 1);
    }
    let oks: Vec<(i64, i64)> = sim.results().into_iter().filter_map(Result::ok).collect();
    assert_eq!(
        oks,
        vec![(4, 0b1111), (2 * 2, 0b1100), (3, 0b100), (4 * 4, 0b1111)]
    );
    let lost: Vec<(u64, u64, Vec<u32>)> = sim.nodes[0]
        .deliveries
        .events
        .iter()
        .filter_map(|e| match e {
            TreeEvent::WavesLost {
                first,
                end,
                backends,
                ..
            } => Some((*first, *end, backends.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        lost,
        vec![(1, 3, vec![0]), (1, 3, vec![1]), (2, 3, vec![3])],
        "{:#?}",
        sim.nodes[0].deliveries.events
    );
}

fn waves_lost(sim: &Sim) -> Vec<(u64, u64, Vec<u32>)> {
    sim.nodes[0]
        .deliveries
        .events
        .iter()
        .filter_map(|e| match e {
            TreeEvent::WavesLost {
                first,
                end,
                backends,
                ..
            } => Some((*first, *end, backends.clone())),
            _ => None,
        })
        .collect()
}

/// Adopted with nothing in flight, ranks 0 and 1 lose no wave; lost again later, the
/// report starts at the later loss, not at the first one.
#[test]
fn a_loss_that_cost_no_wave_is_forgotten_at_the_adoption() {
    // 0 -> {1, 5 (rank 2)}; 1 -> 2; 2 -> {3 (rank 0), 4 (rank 1)}.
    let mut sim = build(&[
        (0, 0, None),
        (1, 0, None),
        (2, 1, None),
        (3, 2, Some(0)),
        (4, 2, Some(1)),
        (5, 0, Some(2)),
    ]);
    sim.nodes[1].listen = Some(ancestor(1));
    let now = sim.now;
    let backends = [3, 4, 5];
    sim.multicast(1);
    for n in backends {
        sim.answer(n, 1);
    }
    sim.kill(2);
    sim.run(1, |r, out| {
        r.on_closed(LinkId(1), "killed".into(), now, out)
    });
    for n in [3, 4] {
        sim.run(n, |r, out| {
            r.on_closed(LinkId(0), "killed".into(), now, out)
        });
    }
    sim.pump();
    sim.adopt_by(1, 3, 2, 1);
    sim.adopt_by(1, 4, 3, 1);
    for v in [2, 3] {
        sim.multicast(v);
        for n in backends {
            sim.answer(n, 1);
        }
    }
    // Wave 3: rank 0 answers into node 1, which dies.
    sim.multicast(4);
    sim.answer(3, 1);
    sim.kill(1);
    sim.run(0, |r, out| {
        r.on_closed(LinkId(0), "killed".into(), now, out)
    });
    for n in [3, 4] {
        sim.run(n, |r, out| {
            r.on_closed(LinkId(1), "killed".into(), now, out)
        });
    }
    sim.answer(5, 1);
    sim.adopt_by_root(3, 2, 2);
    sim.adopt_by_root(4, 3, 2);
    sim.answer(4, 1);
    sim.multicast(5);
    for n in backends {
        sim.answer(n, 1);
    }
    let oks: Vec<(i64, i64)> = sim.results().into_iter().filter_map(Result::ok).collect();
    assert_eq!(
        oks,
        vec![(3, 0b111), (6, 0b111), (9, 0b111), (4, 0b100), (15, 0b111)]
    );
    assert_eq!(
        waves_lost(&sim),
        vec![(3, 4, vec![0]), (3, 4, vec![1])],
        "{:#?}",
        sim.nodes[0].deliveries.events
    );
}
