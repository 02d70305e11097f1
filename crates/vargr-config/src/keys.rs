//! Every setting vargr has, in one table: its key in the configuration file, the
//! environment variable that sets it, and what it does. `vargr config show` and the
//! CLI's help list them from here, so a setting cannot exist without being listed.

/// One setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// `section.name` in the TOML file (`[section]` then `name = ...`).
    pub name: &'static str,
    /// The environment variable, which `vargr run` also uses to hand the setting to
    /// every rank it starts.
    pub env: &'static str,
    /// The value when nothing sets it, as text (`None`: unset).
    pub default: Option<&'static str>,
    pub help: &'static str,
}

macro_rules! keys {
    ($( $name:literal, $env:literal, $default:expr, $help:literal; )*) => {
        /// Every setting, in the order `vargr config show` prints them.
        pub const KEYS: &[Key] = &[ $( Key { name: $name, env: $env, default: $default, help: $help }, )* ];
    };
}

keys! {
    "links.codec", "VARGR_CODEC", Some("adaptive"),
        "compression on links between sites: off, fixed:CODEC, adaptive or guided:PLAN";
    "links.codec_engine", "VARGR_CODEC_CONFIG", None,
        "a TOML file of the adaptive engine's settings (fields of vargr_codec::EngineConfig)";
    "links.codec_samples", "VARGR_CODEC_SAMPLES", None,
        "directory where links record samples of what they carry, for `vargr codec plan`";
    "links.dedup", "VARGR_DEDUP", None,
        "redundancy elimination on links between sites: a segmenter such as cdc:256:1k:8k";
    "links.wan", "VARGR_WAN", None,
        "WAN emulated between sites: rtt=36ms,bandwidth=100mbit, or per pair a-b:...;*:...";
    "paths.spec", "VARGR_PATHS", None,
        "a TOML file of path specifications: paths from back-ends through named stages to an element (`vargr paths show`)";
    "links.gateways", "VARGR_GATEWAYS", None,
        "the emulated WAN's shared bottlenecks on this host: a pointer file vargr run makes and sets";
    "job.site", "VARGR_SITE", None,
        "this process's site label (a cluster, a data centre)";
    "job.shm", "VARGR_SHM", Some("true"),
        "processes of a job that is all on one host exchange messages through shared memory (false: over their sockets)";
    "job.sched", "VARGR_SCHED", Some("none"),
        "how ranks sharing a process share its cores: none, serialize, priority or coschedule";
    "coll.table", "VARGR_COLL_TABLE", None,
        "a TOML or JSON file of collective algorithm selection rules";
    "coll.barrier", "VARGR_COLL_BARRIER", None, "the barrier's algorithm, whatever the table says";
    "coll.bcast", "VARGR_COLL_BCAST", None, "bcast's algorithm, whatever the table says";
    "coll.reduce", "VARGR_COLL_REDUCE", None, "reduce's algorithm, whatever the table says";
    "coll.allreduce", "VARGR_COLL_ALLREDUCE", None, "allreduce's algorithm, whatever the table says";
    "coll.gather", "VARGR_COLL_GATHER", None, "gather's algorithm, whatever the table says";
    "coll.scatter", "VARGR_COLL_SCATTER", None, "scatter's algorithm, whatever the table says";
    "coll.allgather", "VARGR_COLL_ALLGATHER", None, "allgather's algorithm, whatever the table says";
    "coll.alltoall", "VARGR_COLL_ALLTOALL", None, "alltoall's algorithm, whatever the table says";
    "trace.dir", "VARGR_TRACE_DIR", None,
        "directory for every process's trace file at the end of a run";
    "trace.enabled", "VARGR_TRACE", Some("true"),
        "whether collectors record at all (off: nothing is traced or monitored)";
    "trace.ring", "VARGR_TRACE_RING", Some("16384"),
        "records kept per thread between pulls";
    "trace.clock_sync", "VARGR_CLOCK_SYNC", Some("false"),
        "align the processes' clocks at start-up even when neither traced nor monitored";
    "monitor.kinds", "VARGR_MONITOR", None,
        "monitors to run: load-balance, stats, distributed (comma-separated)";
    "monitor.period_ms", "VARGR_MONITOR_PERIOD_MS", Some("200"),
        "milliseconds between the monitor's pulls";
    "monitor.scope", "VARGR_MONITOR_SCOPE", Some("ctx0/*"),
        "collector name patterns the monitor watches (comma-separated)";
    "monitor.status", "VARGR_MONITOR_STATUS", None,
        "file the monitor keeps the status `vargr top` shows in";
    "monitor.coschedule", "VARGR_MONITOR_COSCHEDULE", Some("false"),
        "monitors analyse only while a rank of their process waits in a receive";
    "monitor.fanout", "VARGR_MONITOR_FANOUT", Some("32"),
        "children of each agent in the monitor's gather tree (at least the processes: a flat gather)";
    "monitor.budget_ms", "VARGR_MONITOR_BUDGET_MS", Some("2000"),
        "milliseconds a pull's gather tree has to answer; later agents are named missing";
    "tree.commnode", "VARGR_COMMNODE", None,
        "program started as a tree's internal nodes (default: this vargr)";
    "sync.ssh", "VARGR_SSH", Some("ssh"),
        "the ssh command `vargr sync HOST:PATH` runs, split into words as a shell would";
    "cache.dir", "VARGR_CACHE_DIR", None,
        "root of the segment caches of sync and proxy (default ~/.cache/vargr/dedup)";
    "log.filter", "VARGR_LOG", None,
        "what vargr reports on stderr: 1 for everything, or tracing filters such as vargr_tbon=debug";
}

/// The setting with this file key.
pub fn by_name(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_variables_are_unique_and_named_alike() {
        let mut names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
        let mut envs: Vec<_> = KEYS.iter().map(|k| k.env).collect();
        names.sort_unstable();
        envs.sort_unstable();
        names.dedup();
        envs.dedup();
        assert_eq!((names.len(), envs.len()), (KEYS.len(), KEYS.len()));
        for k in KEYS {
            assert!(k.env.starts_with("VARGR_"), "{k:?}");
            assert_eq!(k.name.matches('.').count(), 1, "{k:?}");
        }
    }
}
