//! The processes of a tree this process started, read from `/proc`: how much memory
//! each kind holds, and whether any outlives the tree's shutdown.

use std::time::{Duration, Instant};

/// One process of the tree: pid, kind (`commnode`, `backend` or `other`), and its
/// resident and proportional set sizes in KiB.
struct Proc {
    pid: u32,
    kind: &'static str,
    rss_kib: u64,
    pss_kib: u64,
}

/// Memory of the tree's processes at one moment.
#[derive(serde::Serialize, Debug, Clone, Default)]
pub struct Memory {
    pub processes: usize,
    pub backend_rss_kib_mean: f64,
    pub backend_pss_kib_mean: f64,
    pub commnode_rss_kib_mean: f64,
    pub commnode_pss_kib_mean: f64,
    pub total_pss_mib: f64,
}

fn children(pid_or_self: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid_or_self}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|w| w.parse::<u32>().ok()));
        }
    }
    out
}

fn kib(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Every live descendant of this process.
fn descendants() -> Vec<Proc> {
    let mut out = Vec::new();
    let mut todo = children("self");
    while let Some(pid) = todo.pop() {
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let words: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let kind = match words.get(1).copied() {
            Some(b"commnode") => "commnode",
            Some(b"backend") => "backend",
            _ => "other",
        };
        let smaps =
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        out.push(Proc {
            pid,
            kind,
            rss_kib: kib(&smaps, "Rss:"),
            pss_kib: kib(&smaps, "Pss:"),
        });
        todo.extend(children(&pid.to_string()));
    }
    out
}

/// The memory of every process of the tree (all descendants of this process), and
/// their pids for [`survivors`].
pub fn sample() -> (Memory, Vec<u32>) {
    let procs = descendants();
    let mean = |kind: &str, f: fn(&Proc) -> u64| {
        let v: Vec<u64> = procs.iter().filter(|p| p.kind == kind).map(f).collect();
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<u64>() as f64 / v.len() as f64
        }
    };
    let m = Memory {
        processes: procs.len(),
        backend_rss_kib_mean: mean("backend", |p| p.rss_kib),
        backend_pss_kib_mean: mean("backend", |p| p.pss_kib),
        commnode_rss_kib_mean: mean("commnode", |p| p.rss_kib),
        commnode_pss_kib_mean: mean("commnode", |p| p.pss_kib),
        total_pss_mib: procs.iter().map(|p| p.pss_kib).sum::<u64>() as f64 / 1024.0,
    };
    (m, procs.iter().map(|p| p.pid).collect())
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses; a zombie has exited.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The pids of `pids` still alive after waiting up to `grace` for them to go.
pub fn survivors(pids: &[u32], grace: Duration) -> Vec<u32> {
    let deadline = Instant::now() + grace;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
