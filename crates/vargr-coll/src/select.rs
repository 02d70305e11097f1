//! Algorithm selection as data.
//!
//! The seed's trace analysis found no single tree best: the winner depends on message
//! size, rank count, and how ranks sit on hosts and sites. So the choice is a
//! [`SelectionTable`] of rules, loaded from TOML or JSON, that a monitor can rewrite at run
//! time; the code only evaluates it. Order of precedence for one call:
//! the per-call `Algorithm` argument, then a forced algorithm from the configuration or a
//! `VARGR_COLL_<COLL>` environment variable, then the first matching rule of the table,
//! then the built-in fallback of the collective.
//!
//! Algorithms are written as short names with optional parameters, like flux-core's
//! topology URIs: `binomial`, `kary:4`, `ring`, `hierarchical:magpie`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{CollError, Result};

/// The collectives that have a choice of algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollKind {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Scatter,
    Allgather,
    Alltoall,
}

impl CollKind {
    pub const ALL: [CollKind; 8] = [
        CollKind::Barrier,
        CollKind::Bcast,
        CollKind::Reduce,
        CollKind::Allreduce,
        CollKind::Gather,
        CollKind::Scatter,
        CollKind::Allgather,
        CollKind::Alltoall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CollKind::Barrier => "barrier",
            CollKind::Bcast => "bcast",
            CollKind::Reduce => "reduce",
            CollKind::Allreduce => "allreduce",
            CollKind::Gather => "gather",
            CollKind::Scatter => "scatter",
            CollKind::Allgather => "allgather",
            CollKind::Alltoall => "alltoall",
        }
    }

    /// The algorithm used when nothing else applies; it runs any size and any operator.
    pub fn fallback(self) -> Algorithm {
        match self {
            CollKind::Barrier => Algorithm::Dissemination,
            CollKind::Bcast | CollKind::Gather | CollKind::Scatter => Algorithm::Binomial,
            CollKind::Reduce => Algorithm::Flat,
            CollKind::Allreduce => Algorithm::RecursiveDoubling,
            CollKind::Allgather => Algorithm::Ring,
            CollKind::Alltoall => Algorithm::Pairwise,
        }
    }
}

impl fmt::Display for CollKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CollKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        CollKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown collective {s:?}"))
    }
}

/// How hierarchical algorithms combine across site roots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Across {
    /// Binomial reduce to the first site root, binomial bcast back: 2·log(sites) WAN hops.
    Tree,
    /// MagPIe: every site root sends its partial result to every other site root and
    /// combines all of them in site order: one WAN latency, sites² messages.
    Magpie,
}

/// A collective algorithm, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Root talks to everyone directly.
    Flat,
    /// Binomial tree (MPICH/Open MPI shape, relative to the root).
    Binomial,
    /// Tree where each node has up to `k` children (heap numbering relative to the root).
    Kary(u32),
    /// Barrier: log2(p) rounds of pairwise signals.
    Dissemination,
    /// Allreduce: butterfly exchange of whole buffers; allgather: doubling blocks (Bruck's
    /// variant when the size is not a power of two).
    RecursiveDoubling,
    /// Bucket algorithm: p-1 neighbour steps per phase, bandwidth-optimal.
    Ring,
    /// Reduce-scatter by recursive halving then allgather (allreduce) or gather (reduce).
    Rabenseifner,
    /// Allreduce as binomial reduce to rank 0 followed by binomial bcast.
    ReduceBcast,
    /// Bcast as binomial scatter then ring allgather (van de Geijn), for large messages.
    ScatterAllgather,
    /// Allgather by Bruck's log-step concatenation, any size.
    Bruck,
    /// Alltoall: p-1 rounds, each rank sends to `r+i` and receives from `r-i`.
    Pairwise,
    /// Reduce within host, within site, across site roots, then bcast back down.
    Hierarchical(Across),
    /// Shared memory (allreduce, barrier): every rank deposits its value, the last to
    /// arrive combines in rank order and wakes all. Only when all ranks share a process.
    Shm,
}

impl Algorithm {
    /// Whether the algorithm implements `coll`.
    pub fn supports(self, coll: CollKind) -> bool {
        use Algorithm as A;
        use CollKind as C;
        match coll {
            C::Barrier => matches!(self, A::Dissemination | A::Flat | A::Shm),
            C::Bcast => matches!(
                self,
                A::Flat | A::Binomial | A::Kary(_) | A::ScatterAllgather
            ),
            C::Reduce => matches!(self, A::Flat | A::Binomial | A::Kary(_) | A::Rabenseifner),
            C::Allreduce => matches!(
                self,
                A::RecursiveDoubling
                    | A::Ring
                    | A::Rabenseifner
                    | A::ReduceBcast
                    | A::Hierarchical(_)
                    | A::Shm
            ),
            C::Gather | C::Scatter => matches!(self, A::Flat | A::Binomial),
            C::Allgather => matches!(self, A::Ring | A::RecursiveDoubling | A::Bruck),
            C::Alltoall => matches!(self, A::Pairwise),
        }
    }

    /// Whether the algorithm combines partial results strictly in rank order, so that a
    /// non-commutative operator gives `x0 ∘ x1 ∘ … ∘ x(p-1)`.
    pub fn preserves_order(self, coll: CollKind, root: usize) -> bool {
        match (coll, self) {
            (CollKind::Reduce, Algorithm::Flat) => true,
            (CollKind::Reduce, Algorithm::Binomial) => root == 0,
            (
                CollKind::Allreduce,
                Algorithm::RecursiveDoubling | Algorithm::ReduceBcast | Algorithm::Shm,
            ) => true,
            (CollKind::Reduce | CollKind::Allreduce, _) => false,
            _ => true,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::Flat => f.write_str("flat"),
            Algorithm::Binomial => f.write_str("binomial"),
            Algorithm::Kary(k) => write!(f, "kary:{k}"),
            Algorithm::Dissemination => f.write_str("dissemination"),
            Algorithm::RecursiveDoubling => f.write_str("recursive_doubling"),
            Algorithm::Ring => f.write_str("ring"),
            Algorithm::Rabenseifner => f.write_str("rabenseifner"),
            Algorithm::ReduceBcast => f.write_str("reduce_bcast"),
            Algorithm::ScatterAllgather => f.write_str("scatter_allgather"),
            Algorithm::Bruck => f.write_str("bruck"),
            Algorithm::Pairwise => f.write_str("pairwise"),
            Algorithm::Hierarchical(Across::Tree) => f.write_str("hierarchical:tree"),
            Algorithm::Hierarchical(Across::Magpie) => f.write_str("hierarchical:magpie"),
            Algorithm::Shm => f.write_str("shm"),
        }
    }
}

impl FromStr for Algorithm {
    type Err = CollError;
    fn from_str(input: &str) -> Result<Algorithm> {
        let bad = |reason: &str| CollError::BadAlgorithm {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let s = input.trim().to_ascii_lowercase().replace('-', "_");
        let (name, param) = match s.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (s.as_str(), None),
        };
        let no_param = |a: Algorithm| match param {
            None => Ok(a),
            Some(_) => Err(bad("this algorithm takes no parameter")),
        };
        match name {
            "flat" | "linear" => no_param(Algorithm::Flat),
            "binomial" => no_param(Algorithm::Binomial),
            "kary" => {
                let k: u32 = param
                    .ok_or_else(|| bad("kary needs a fan-out, e.g. kary:4"))?
                    .parse()
                    .map_err(|_| bad("the fan-out must be a whole number"))?;
                if k == 0 {
                    return Err(bad("the fan-out must be at least 1"));
                }
                Ok(Algorithm::Kary(k))
            }
            "dissemination" => no_param(Algorithm::Dissemination),
            "recursive_doubling" | "rd" => no_param(Algorithm::RecursiveDoubling),
            "ring" => no_param(Algorithm::Ring),
            "rabenseifner" | "reduce_scatter_allgather" => no_param(Algorithm::Rabenseifner),
            "reduce_bcast" => no_param(Algorithm::ReduceBcast),
            "scatter_allgather" => no_param(Algorithm::ScatterAllgather),
            "bruck" => no_param(Algorithm::Bruck),
            "pairwise" => no_param(Algorithm::Pairwise),
            "shm" => no_param(Algorithm::Shm),
            "hierarchical" | "hier" => match param {
                None | Some("tree") => Ok(Algorithm::Hierarchical(Across::Tree)),
                Some("magpie") | Some("alltoall") => Ok(Algorithm::Hierarchical(Across::Magpie)),
                Some(_) => Err(bad("across-site mode must be tree or magpie")),
            },
            _ => Err(bad("unknown algorithm")),
        }
    }
}

impl Serialize for Algorithm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What a selection rule sees of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallShape {
    pub coll: CollKind,
    /// Bytes of the per-rank message: the buffer of bcast/reduce/allreduce, one rank's
    /// block for gather/scatter/allgather/alltoall.
    pub bytes: usize,
    pub ranks: usize,
    /// The communicator spans more than one host or site.
    pub hierarchical: bool,
    /// Number of sites (1 when there is no hierarchy).
    pub sites: usize,
    /// All ranks are threads of this process (the transport offers an arena for them).
    pub local: bool,
    /// All ranks meet in a shared-memory arena: threads of this process, or processes of
    /// one host through the job's collective area (the `shm` algorithm can run).
    pub shm: bool,
    /// Ranks per core on the most crowded host of the job (1 when not known). When
    /// ranks outnumber cores, total messages cost more than rounds on the critical path.
    pub ranks_per_core: usize,
}

/// One rule: if every given bound holds, use `algorithm`. Bounds are inclusive; missing
/// bounds always hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub coll: CollKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ranks: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ranks: Option<usize>,
    /// `Some(true)`: only when the communicator spans several hosts or sites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hierarchy: Option<bool>,
    /// Only when all ranks are (`true`) or are not (`false`) threads of one process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<bool>,
    /// Only when all ranks do (`true`) or do not (`false`) meet in a shared-memory arena.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm: Option<bool>,
    /// Only when the communicator spans at most this many sites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sites: Option<usize>,
    /// Only when the most crowded host runs at least this many ranks per core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ranks_per_core: Option<usize>,
    /// Only when the rank count is (or, with `false`, is not) a power of two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_of_two: Option<bool>,
    pub algorithm: Algorithm,
}

impl Rule {
    pub fn matches(&self, c: &CallShape) -> bool {
        self.coll == c.coll
            && self.min_bytes.is_none_or(|b| c.bytes >= b)
            && self.max_bytes.is_none_or(|b| c.bytes <= b)
            && self.min_ranks.is_none_or(|r| c.ranks >= r)
            && self.max_ranks.is_none_or(|r| c.ranks <= r)
            && self.hierarchy.is_none_or(|h| h == c.hierarchical)
            && self.local.is_none_or(|l| l == c.local)
            && self.shm.is_none_or(|s| s == c.shm)
            && self
                .min_ranks_per_core
                .is_none_or(|k| c.ranks_per_core >= k)
            && self.max_sites.is_none_or(|k| c.sites <= k)
            && self
                .power_of_two
                .is_none_or(|p| p == c.ranks.is_power_of_two())
    }
}

/// An ordered list of rules; the first match wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SelectionTable {
    #[serde(default, rename = "rule")]
    pub rules: Vec<Rule>,
}

/// The built-in table. Thresholds come from `examples/inproc_allreduce.rs` on the
/// in-process transport and from the usual MPICH cut-offs for networks; retune with data.
const DEFAULT_TABLE: &str = r#"
[[rule]]
coll = "barrier"
shm = true
algorithm = "shm"

[[rule]]
coll = "barrier"
algorithm = "dissemination"

# Threads share memory bandwidth, not links: splitting the buffer pays from 4 ranks on
# (1 MiB at 4 threads: 0.25 ms against the binomial tree's 0.73 ms).
[[rule]]
coll = "bcast"
local = true
min_bytes = 131072
min_ranks = 3
algorithm = "scatter_allgather"

[[rule]]
coll = "bcast"
min_bytes = 131072
min_ranks = 8
algorithm = "scatter_allgather"

[[rule]]
coll = "bcast"
algorithm = "binomial"

[[rule]]
coll = "reduce"
min_bytes = 65536
min_ranks = 4
algorithm = "rabenseifner"

[[rule]]
coll = "reduce"
algorithm = "binomial"

# Threads of one process, or processes of one host through the job's collective area
# (vargr bench coll, 8 bytes on 2 cores: see docs/benchmarks.md).
[[rule]]
coll = "allreduce"
shm = true
max_bytes = 16384
algorithm = "shm"

[[rule]]
coll = "allreduce"
shm = true
min_ranks = 16
max_bytes = 262144
algorithm = "shm"

# Large buffers in shared memory: every rank combines its block of all buffers at once
# (threads straight from each other's buffers, processes through the area's slots).
[[rule]]
coll = "allreduce"
shm = true
min_bytes = 65536
algorithm = "shm"

# Across a few sites, MagPIe's all-to-all between site roots costs one WAN latency
# where the tree costs two (vargr bench wan: 18.5 ms against 36.8 ms at 36 ms RTT).
[[rule]]
coll = "allreduce"
hierarchy = true
min_ranks = 4
max_bytes = 65536
max_sites = 8
algorithm = "hierarchical:magpie"

[[rule]]
coll = "allreduce"
hierarchy = true
min_ranks = 4
max_bytes = 65536
algorithm = "hierarchical:tree"

# Processes crowded onto few cores: every message costs a wake-up, so reduce+bcast's
# 2(p-1) messages beat recursive doubling's p·log p (measured with vargr bench coll:
# 16 processes on 2 cores 370 µs against 626 µs, 64 processes 1.5 ms against 5.1 ms).
[[rule]]
coll = "allreduce"
local = false
min_ranks = 8
min_ranks_per_core = 4
max_bytes = 8192
algorithm = "reduce_bcast"

[[rule]]
coll = "allreduce"
max_bytes = 2048
algorithm = "recursive_doubling"

[[rule]]
coll = "allreduce"
max_ranks = 2
algorithm = "recursive_doubling"

# Processes of one host exchange through shared memory, large buffers by single copy:
# reduce+bcast moves each buffer fewer times than the ring (vargr bench coll, 1 MiB on
# 2 cores: 16 processes 3.3-4.0 ms against the ring's 3.8-7.5 ms, 64 processes 24 ms
# against 38-40 ms; at 4 the ring still wins, 0.4-0.7 ms against 0.8 ms).
[[rule]]
coll = "allreduce"
local = false
hierarchy = false
min_ranks = 8
min_bytes = 524288
algorithm = "reduce_bcast"

# Between processes the ring's even, neighbour-only traffic wins for large buffers at
# any size (vargr bench coll, 1 MiB: 4 processes 1.95 ms against Rabenseifner's 3.36 ms,
# 8 processes 5.4 ms against 10.2 ms).
[[rule]]
coll = "allreduce"
local = false
min_bytes = 524288
algorithm = "ring"

# Threads of one process: a binomial reduce then bcast moves each large buffer fewer
# times than the ring's 2(p-1) steps (1 MiB at 16 threads: 3.8 ms against 5.5 ms).
[[rule]]
coll = "allreduce"
local = true
min_bytes = 524288
max_ranks = 16
algorithm = "reduce_bcast"

[[rule]]
coll = "allreduce"
min_ranks = 16
min_bytes = 524288
algorithm = "ring"

[[rule]]
coll = "allreduce"
algorithm = "rabenseifner"

[[rule]]
coll = "gather"
max_bytes = 4096
algorithm = "binomial"

[[rule]]
coll = "gather"
algorithm = "flat"

[[rule]]
coll = "scatter"
max_bytes = 4096
algorithm = "binomial"

[[rule]]
coll = "scatter"
algorithm = "flat"

[[rule]]
coll = "allgather"
max_bytes = 8192
power_of_two = true
algorithm = "recursive_doubling"

[[rule]]
coll = "allgather"
max_bytes = 1024
algorithm = "bruck"

[[rule]]
coll = "allgather"
algorithm = "ring"

[[rule]]
coll = "alltoall"
algorithm = "pairwise"
"#;

impl SelectionTable {
    /// The built-in table.
    pub fn builtin() -> SelectionTable {
        SelectionTable::from_toml(DEFAULT_TABLE, "built-in table")
            .expect("the built-in selection table parses")
    }

    /// Parses a table from TOML (`[[rule]]` entries); `source_name` names it in errors.
    pub fn from_toml(text: &str, source_name: &str) -> Result<SelectionTable> {
        let t: SelectionTable = toml::from_str(text).map_err(|e| CollError::BadTable {
            source_name: source_name.to_string(),
            reason: e.to_string(),
        })?;
        t.validate(source_name)?;
        Ok(t)
    }

    /// Parses a table from JSON (`{"rule": [...]}`).
    pub fn from_json(text: &str, source_name: &str) -> Result<SelectionTable> {
        let t: SelectionTable = serde_json::from_str(text).map_err(|e| CollError::BadTable {
            source_name: source_name.to_string(),
            reason: e.to_string(),
        })?;
        t.validate(source_name)?;
        Ok(t)
    }

    /// Reads a table from a file, TOML unless the name ends in `.json`.
    pub fn from_file(path: &std::path::Path) -> Result<SelectionTable> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| CollError::BadTable {
            source_name: name.clone(),
            reason: e.to_string(),
        })?;
        if name.ends_with(".json") {
            SelectionTable::from_json(&text, &name)
        } else {
            SelectionTable::from_toml(&text, &name)
        }
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a selection table always serializes")
    }

    fn validate(&self, source_name: &str) -> Result<()> {
        for (i, r) in self.rules.iter().enumerate() {
            if !r.algorithm.supports(r.coll) {
                return Err(CollError::BadTable {
                    source_name: source_name.to_string(),
                    reason: format!(
                        "rule {} ({}): {} does not implement {}",
                        i + 1,
                        r.coll,
                        r.algorithm,
                        r.coll
                    ),
                });
            }
        }
        Ok(())
    }

    /// The first matching rule's algorithm, if any.
    pub fn lookup(&self, call: &CallShape) -> Option<Algorithm> {
        self.rules
            .iter()
            .find(|r| r.matches(call))
            .map(|r| r.algorithm)
    }
}

/// Selection configuration of a communicator: the table plus forced choices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub table: SelectionTable,
    /// Algorithms forced per collective (from configuration or environment); these win
    /// over the table but not over a per-call choice.
    pub forced: BTreeMap<CollKind, Algorithm>,
}

impl Default for Selector {
    fn default() -> Self {
        Selector {
            table: SelectionTable::builtin(),
            forced: BTreeMap::new(),
        }
    }
}

impl Selector {
    /// The built-in table, overridden by `VARGR_COLL_TABLE` (a TOML or JSON file) and by
    /// `VARGR_COLL_<COLL>=<algorithm>` (e.g. `VARGR_COLL_ALLREDUCE=ring`), as `get`
    /// finds them (`vargr_config` gives it the configuration's values).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Selector> {
        let mut sel = Selector::default();
        if let Some(path) = get("VARGR_COLL_TABLE") {
            sel.table = SelectionTable::from_file(std::path::Path::new(&path))?;
        }
        for coll in CollKind::ALL {
            let key = format!("VARGR_COLL_{}", coll.name().to_ascii_uppercase());
            if let Some(v) = get(&key) {
                let alg: Algorithm = v.parse()?;
                if !alg.supports(coll) {
                    return Err(CollError::BadTable {
                        source_name: key,
                        reason: format!("{alg} does not implement {coll}"),
                    });
                }
                sel.forced.insert(coll, alg);
            }
        }
        Ok(sel)
    }

    /// The algorithm a call of this shape uses when the caller does not choose one.
    /// Hierarchical algorithms are skipped when the call has no hierarchy, and
    /// `ordered` (a non-commutative operator) limits the choice to order-preserving ones.
    pub fn choose(&self, call: &CallShape, ordered: bool, root: usize) -> Algorithm {
        let ok = |a: Algorithm| {
            a.supports(call.coll)
                && (!matches!(a, Algorithm::Hierarchical(_)) || call.hierarchical)
                && (a != Algorithm::Shm || call.shm)
                && (!ordered || a.preserves_order(call.coll, root))
        };
        if let Some(&a) = self.forced.get(&call.coll) {
            if ok(a) {
                return a;
            }
        }
        self.table
            .rules
            .iter()
            .filter(|r| r.matches(call))
            .map(|r| r.algorithm)
            .find(|&a| ok(a))
            .unwrap_or_else(|| call.coll.fallback())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_round_trip() {
        for s in [
            "flat",
            "binomial",
            "kary:3",
            "dissemination",
            "recursive_doubling",
            "ring",
            "rabenseifner",
            "reduce_bcast",
            "scatter_allgather",
            "bruck",
            "pairwise",
            "shm",
            "hierarchical:tree",
            "hierarchical:magpie",
        ] {
            let a: Algorithm = s.parse().unwrap();
            assert_eq!(a.to_string(), s);
        }
        assert!("kary".parse::<Algorithm>().is_err());
        assert!("kary:0".parse::<Algorithm>().is_err());
        assert!("ring:2".parse::<Algorithm>().is_err());
        assert!("warp".parse::<Algorithm>().is_err());
    }

    #[test]
    fn builtin_table_has_an_answer_for_every_collective() {
        let sel = Selector::default();
        for coll in CollKind::ALL {
            for ranks in [1, 2, 3, 16, 64] {
                for bytes in [0, 8, 65536, 1 << 20] {
                    let shape = CallShape {
                        coll,
                        bytes,
                        ranks,
                        hierarchical: false,
                        sites: 1,
                        local: false,
                        shm: false,
                        ranks_per_core: ranks,
                    };
                    let a = sel.choose(&shape, false, 0);
                    assert!(a.supports(coll), "{coll} {a}");
                    assert!(!matches!(a, Algorithm::Hierarchical(_)));
                }
            }
        }
    }

    #[test]
    fn crowded_cores_favour_fewer_messages() {
        let sel = Selector::default();
        let mut shape = CallShape {
            coll: CollKind::Allreduce,
            bytes: 8,
            ranks: 16,
            hierarchical: false,
            sites: 1,
            local: false,
            shm: false,
            ranks_per_core: 8,
        };
        assert_eq!(sel.choose(&shape, false, 0), Algorithm::ReduceBcast);
        shape.ranks_per_core = 1;
        assert_eq!(sel.choose(&shape, false, 0), Algorithm::RecursiveDoubling);
    }

    #[test]
    fn tables_load_from_toml_and_json_and_reject_mismatches() {
        let t = SelectionTable::from_toml(
            "[[rule]]\ncoll = \"allreduce\"\nmax_bytes = 64\nalgorithm = \"ring\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(t.rules[0].algorithm, Algorithm::Ring);
        let j = SelectionTable::from_json(
            r#"{"rule":[{"coll":"bcast","algorithm":"kary:4"}]}"#,
            "t.json",
        )
        .unwrap();
        assert_eq!(j.rules[0].algorithm, Algorithm::Kary(4));
        let back = SelectionTable::from_toml(&SelectionTable::builtin().to_toml(), "x").unwrap();
        assert_eq!(back, SelectionTable::builtin());
        let err =
            SelectionTable::from_toml("[[rule]]\ncoll = \"barrier\"\nalgorithm = \"ring\"\n", "b")
                .unwrap_err();
        assert!(err.to_string().contains("rule 1"), "{err}");
    }

    #[test]
    fn forced_and_ordered_choices() {
        let sel =
            Selector::from_vars(|k| (k == "VARGR_COLL_ALLREDUCE").then(|| "ring".to_string()))
                .unwrap();
        let shape = CallShape {
            coll: CollKind::Allreduce,
            bytes: 8,
            ranks: 4,
            hierarchical: false,
            sites: 1,
            local: false,
            shm: false,
            ranks_per_core: 1,
        };
        assert_eq!(sel.choose(&shape, false, 0), Algorithm::Ring);
        // Ring reorders operands, so a non-commutative operator falls back.
        assert!(sel
            .choose(&shape, true, 0)
            .preserves_order(CollKind::Allreduce, 0));
        assert!(
            Selector::from_vars(|k| (k == "VARGR_COLL_BARRIER").then(|| "ring".into())).is_err()
        );
    }
}
