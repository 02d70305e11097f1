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
        let msg = self.nodes[n as usize].adopt_request().expect("an orphan");
        let reply = self.nodes[0].adoption_answer().expect("the root adopts");
        self.wire(0, root_link, n, own_link);
        let now = self.now;
        // As the engine does: a child still claiming the orphan's back-ends is dead to us.
        for l in self.nodes[0].children_claiming(&msg.backends) {
            self.run(0, |r, out| r.on_closed(l, "unreachable".into(), now, out));
        }
        self.run(0, |r, out| r.adopt(LinkId(root_link), msg, now, out));
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
            moved(3, 0),
            gone(0),
            moved(4, 1),
            gone(1),
        ]
    );
}
