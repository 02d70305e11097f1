//! What the threads of an overdecomposed process did with the CPU (seed 000 §7.4): how
//! many ranks could compute at once (thread-level parallelism, TLP), how much of their
//! time went to the kernel, how often they were switched out, and the hardware counters
//! where the kernel lets a process read them.
//!
//! These are the types only: `vargr-coll` measures them, `vargr bench sor` prints them,
//! and a trace file may carry one per process so that `vargr trace report` shows them.
//! They live here, below both, because trace files are read without `vargr-coll`.

use serde::{Deserialize, Serialize};

/// One process's thread usage over a window (usually its ranks' lifetime).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct ProcessUsage {
    /// Length of the window the histograms cover, seconds.
    pub seconds: f64,
    /// Rank threads the process hosted.
    pub ranks: u32,
    /// `tlp[i]`: share of the window with exactly `i` ranks not blocked in
    /// communication (the seed's TLP: computing, or ready to compute once the user-level
    /// scheduler lets them).
    pub tlp: Vec<f64>,
    /// `computing[i]`: share of the window with exactly `i` ranks in application code
    /// (neither in communication nor waiting for a scheduler slot).
    pub computing: Vec<f64>,
    /// `os_runnable[i]`: share of `/proc` samples with exactly `i` rank threads in
    /// state `R` (running or waiting for a CPU); empty when no sample was taken.
    #[serde(default)]
    pub os_runnable: Vec<f64>,
    /// How many `/proc` samples `os_runnable` comes from.
    #[serde(default)]
    pub os_samples: u64,
    /// Mean share of a rank's time in each state.
    pub share: StateShare,
    /// State changes of all ranks (entering and leaving communication or a slot wait).
    pub transitions: u64,
    /// Each rank's CPU accounting.
    pub per_rank: Vec<RankUsage>,
}

/// Share of time in each rank state; the three add up to one.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
pub struct StateShare {
    pub computing: f64,
    /// Blocked in a receive or wait of the communication layer.
    pub communication: f64,
    /// Blocked elsewhere: waiting for a user-level scheduler slot.
    pub other: f64,
}

/// One rank thread's CPU accounting over its window.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct RankUsage {
    pub rank: u32,
    /// User and system CPU time, seconds (from `/proc/self/task/<tid>/stat`).
    pub user_s: f64,
    pub system_s: f64,
    /// Context switches (from `/proc/self/task/<tid>/status`).
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// Time runnable but waiting for a CPU, seconds (`/proc/self/task/<tid>/schedstat`;
    /// absent where the kernel keeps no scheduler statistics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runqueue_wait_s: Option<f64>,
    pub counters: Counters,
}

/// Hardware counters of one thread, user level only, or why there are none.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Counters {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l1d_misses: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llc_misses: Option<u64>,
    /// Why a counter is missing (e.g. `perf_event_open: Permission denied`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl ProcessUsage {
    /// The seed's TLP_N: share of the window with at least `n` ranks not blocked in
    /// communication.
    pub fn tlp_at_least(&self, n: usize) -> f64 {
        self.tlp.iter().skip(n).sum()
    }

    /// Share of the window with at least `n` ranks in application code.
    pub fn computing_at_least(&self, n: usize) -> f64 {
        self.computing.iter().skip(n).sum()
    }

    /// Share of `/proc` samples with at least `n` rank threads runnable.
    pub fn os_runnable_at_least(&self, n: usize) -> f64 {
        self.os_runnable.iter().skip(n).sum()
    }

    /// Sum of every rank's system time, seconds.
    pub fn system_s(&self) -> f64 {
        self.per_rank.iter().map(|r| r.system_s).sum()
    }

    /// Sum of every rank's user time, seconds.
    pub fn user_s(&self) -> f64 {
        self.per_rank.iter().map(|r| r.user_s).sum()
    }

    /// Time the ranks spent runnable without a CPU, seconds, if every rank has it.
    pub fn runqueue_wait_s(&self) -> Option<f64> {
        if self.per_rank.is_empty() {
            return None;
        }
        self.per_rank.iter().map(|r| r.runqueue_wait_s).sum()
    }

    /// Context switches of all ranks: (voluntary, involuntary).
    pub fn switches(&self) -> (u64, u64) {
        self.per_rank.iter().fold((0, 0), |(v, i), r| {
            (v + r.voluntary_switches, i + r.involuntary_switches)
        })
    }

    /// A hardware counter summed over the ranks, if every rank has it.
    pub fn counter(&self, pick: impl Fn(&Counters) -> Option<u64>) -> Option<u64> {
        if self.per_rank.is_empty() {
            return None;
        }
        self.per_rank.iter().map(|r| pick(&r.counters)).sum()
    }

    /// Why counters are missing, from the first rank that says.
    pub fn counters_unavailable(&self) -> Option<&str> {
        self.per_rank
            .iter()
            .find_map(|r| r.counters.unavailable.as_deref())
    }

    /// One line for tables: TLP_1, TLP_2, share computing, system time, switches.
    pub fn summary_line(&self) -> String {
        let (v, i) = self.switches();
        let hw = match (self.counter(|c| c.instructions), self.counter(|c| c.cycles)) {
            (Some(ins), Some(cyc)) if cyc > 0 => format!("IPC {:.2}", ins as f64 / cyc as f64),
            _ => format!(
                "counters unavailable: {}",
                self.counters_unavailable().unwrap_or("not measured")
            ),
        };
        let rq = self
            .runqueue_wait_s()
            .map_or("-".into(), |w| format!("{w:.2} s"));
        format!(
            "TLP_1 {:.0}% TLP_2 {:.0}%, computing {:.0}% of rank time, R>=2 {:.0}%, user {:.2} s, system {:.2} s, waiting for a CPU {rq}, switches {v}/{i}, {hw}",
            100.0 * self.tlp_at_least(1),
            100.0 * self.tlp_at_least(2),
            100.0 * self.share.computing,
            100.0 * self.os_runnable_at_least(2),
            self.user_s(),
            self.system_s(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tlp_n_sums_the_tail_and_counters_need_every_rank() {
        let mut u = ProcessUsage {
            tlp: vec![0.1, 0.5, 0.3, 0.1],
            ..Default::default()
        };
        assert!((u.tlp_at_least(2) - 0.4).abs() < 1e-12);
        assert_eq!(u.tlp_at_least(9), 0.0);
        u.per_rank = vec![
            RankUsage {
                counters: Counters {
                    instructions: Some(5),
                    ..Default::default()
                },
                ..Default::default()
            },
            RankUsage {
                counters: Counters {
                    unavailable: Some("perf_event_open: EACCES".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        ];
        assert_eq!(u.counter(|c| c.instructions), None);
        assert_eq!(u.counters_unavailable(), Some("perf_event_open: EACCES"));
        u.per_rank.pop();
        assert_eq!(u.counter(|c| c.instructions), Some(5));
    }
}
