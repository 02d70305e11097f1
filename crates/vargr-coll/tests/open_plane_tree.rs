//! The open monitor plane's gather tree on real sockets: six agents (threads here, each
//! with its own connections) join `OpenMonitor` with a fan-out of 2, so ranks 0 and 1
//! gather ranks 2..6. Rank 0 finishes first; its children, whose records keep coming
//! after it left, join the monitor directly, and every record of every rank arrives.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vargr_coll::monitor::MonitorConfig;
use vargr_coll::open_plane::{AgentSpec, JoinedAgent, OpenMonitor};
use vargr_trace::{EventOp, Record, ThreadTrace, Tracer, NO_PEER};

const SIZE: u32 = 6;
/// Call records each rank makes, one per drain of its agent.
const CALLS: u32 = 20;

/// An agent of rank `rank` whose drains record one allreduce call each (up to
/// [`CALLS`]) once `go` is set; `made` counts them.
fn agent(
    monitor: &OpenMonitor,
    rank: u32,
    go: Arc<AtomicBool>,
    made: Arc<AtomicU32>,
) -> JoinedAgent {
    let collector = vargr_trace::collector("ctx0/allreduce");
    let process = format!("rank {rank}");
    let spec = AgentSpec {
        address: monitor.address().clone(),
        rank,
        size: SIZE,
        process: process.clone(),
    };
    JoinedAgent::spawn(
        spec,
        Box::new(move |red| {
            let seq = made.load(Ordering::SeqCst);
            if go.load(Ordering::SeqCst) && seq < CALLS {
                let t = vargr_trace::now();
                red.add(&Tracer::file_of(
                    &process,
                    vec![ThreadTrace {
                        label: process.clone(),
                        rank: Some(rank),
                        lost: 0,
                        records: vec![Record {
                            start: t,
                            end: t + 1,
                            seq,
                            bytes: 8,
                            collector,
                            op: EventOp::Call as u8,
                            status: 0,
                            peer: NO_PEER,
                        }],
                    }],
                ));
                made.store(seq + 1, Ordering::SeqCst);
            }
            Duration::from_millis(10)
        }),
    )
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    // A hang guard, not a measurement.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn children_of_an_agent_that_finished_first_join_the_monitor_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    // A runtime directory is private to its user.
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let monitor = OpenMonitor::start(
        &runtime,
        MonitorConfig {
            period: Duration::from_millis(50),
            stats: false,
            distributed: false,
            coschedule: false,
            collectors: vec!["ctx0/*".into()],
            status_file: None,
            fanout: 2,
            pull_budget: Duration::from_secs(2),
        },
    )
    .unwrap();
    let made: Vec<Arc<AtomicU32>> = (0..SIZE).map(|_| Arc::new(AtomicU32::new(0))).collect();
    // Rank 0's children (2 and 3) record only once rank 0 has gone.
    let now = Arc::new(AtomicBool::new(true));
    let later = Arc::new(AtomicBool::new(false));
    let mut agents: Vec<Option<JoinedAgent>> = (0..SIZE)
        .map(|r| {
            let go = if r == 2 || r == 3 { &later } else { &now };
            Some(agent(&monitor, r, go.clone(), made[r as usize].clone()))
        })
        .collect();
    wait_for("rank 0's calls", || made[0].load(Ordering::SeqCst) == CALLS);
    agents[0].take().unwrap().finish(Duration::from_secs(10));
    later.store(true, Ordering::SeqCst);
    wait_for("every rank's calls", || {
        made.iter().all(|m| m.load(Ordering::SeqCst) == CALLS)
    });
    for a in agents.iter_mut().filter_map(Option::take) {
        a.finish(Duration::from_secs(10));
    }
    let lb = monitor.stop().expect("the monitor's view");
    for r in 0..SIZE {
        let n = &lb.nodes[&format!("rank {r}")];
        assert_eq!(n.records, u64::from(CALLS), "rank {r}: {:?}", lb.nodes);
    }
    // Every call of every rank merged into complete calls.
    let c = &lb.by_collector["ctx0/allreduce"];
    assert_eq!(c.calls, u64::from(CALLS), "{c:?}");
    assert!(lb.missing.is_empty(), "{:?}", lb.missing);
}
