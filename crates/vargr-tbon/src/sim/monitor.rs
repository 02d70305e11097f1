//! The monitor plane in the simulated tree: a pull reaches every node and the answers
//! come back up; a lost node is named missing at once, a silent one when its sub-tree's
//! time is up, and neither holds the pull past its budget (fake time: the budget is
//! checked against the simulated clock, never the machine's).

use std::time::Duration;

use vargr_trace::scope::{Reduce, Scope};

use super::{Sim, SimConfig};
use crate::monitor::Pulled;

const BUDGET: Duration = Duration::from_secs(2);

fn counts() -> Scope {
    Scope {
        by_seq: true,
        ..Scope::new(&["tbon/*"], Reduce::Counts)
    }
}

/// Pulls through the tree and settles; returns the result and the fake time it took.
fn pull(sim: &mut Sim) -> (Pulled, Duration) {
    let (start, now) = (sim.now(), sim.now());
    let id = sim.on(0, |r, out| r.start_pull(counts(), BUDGET, now, out));
    sim.settle();
    let pulled = sim
        .on(0, |r, _| r.take_pull(id))
        .expect("the pull finished");
    (pulled, sim.now() - start)
}

#[test]
fn a_pull_reaches_every_node() {
    let mut sim = Sim::topology("1x2x4", SimConfig::default());
    let (pulled, took) = pull(&mut sim);
    assert!(pulled.missing().is_empty(), "{pulled:?}");
    assert_eq!(pulled.answers.len(), 7, "{:?}", pulled.answers.keys());
    assert_eq!(pulled.root, Some(0));
    // Nobody waited for a time-out.
    assert!(took < Duration::from_millis(1), "{took:?}");
}

/// The logic of vargr-cli's `a_lost_back_end_is_missing_and_does_not_hold_the_pull`:
/// lost back-ends are named missing, and the pull ends without waiting for them.
#[test]
fn lost_nodes_are_missing_and_do_not_hold_the_pull() {
    let mut sim = Sim::topology("1x2x4", SimConfig::default());
    for b in sim.backends() {
        sim.crash(b);
    }
    let (pulled, took) = pull(&mut sim);
    let mut missing = pulled.missing();
    missing.sort_unstable();
    assert_eq!(missing, sim.backends(), "{pulled:?}");
    assert!(took < Duration::from_millis(1), "{took:?}");
}

/// A back-end that stops answering is named missing when its commnode's share of the
/// budget is up; the rest of the tree answers, and the pull ends within its budget.
#[test]
fn a_silent_node_is_missing_once_its_time_is_up() {
    let mut sim = Sim::topology("1x2x4", SimConfig::default());
    let silent = sim.backends()[3];
    sim.stop(silent);
    let (pulled, took) = pull(&mut sim);
    assert_eq!(pulled.missing(), vec![silent], "{pulled:?}");
    assert_eq!(pulled.replies().count(), 6);
    assert!(took >= BUDGET.mul_f64(0.75), "{took:?}");
    assert!(took < BUDGET, "{took:?}");
}
