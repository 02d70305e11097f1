//! Shared validation of "parent => children" statements, with locations.
//!
//! Both text formats (MRNet files and TOML) reduce to the same thing: an
//! ordered list of statements, each naming a parent `host:rank` and its
//! children. This module checks such a list once, with the same rules and
//! messages for both formats, and hands the adjacency to [`crate::numbering`]:
//!
//! * the first statement's parent is the root;
//! * any later statement's parent must already have been listed as a child
//!   (otherwise: [`TopoError::DefinedBeforeAttached`] if it is listed later,
//!   [`TopoError::Unreachable`] if never);
//! * a node is defined (left of `=>`) at most once and listed as a child at
//!   most once ([`TopoError::DuplicateNode`], pointing at the first sighting);
//! * listing a node under itself or one of its descendants (the root
//!   included) is a [`TopoError::Cycle`].
//!
//! Positions are byte offsets into the original text and only turned into
//! line and column when an error is reported.

use crate::error::{Location, TopoError};
use crate::numbering::build;
use crate::tree::{valid_host, Topology, MAX_NODES};
use rustc_hash::FxHashMap;

/// A text being parsed: its name for messages and its contents.
#[derive(Clone, Copy)]
pub(crate) struct Src<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl Src<'_> {
    /// The location of byte offset `pos`.
    pub fn loc(&self, pos: usize) -> Location {
        Location::at(self.file, self.text, pos)
    }
}

/// A `host:rank` occurrence at byte offset `pos`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item<'a> {
    pub host: &'a str,
    pub rank: u32,
    pub pos: usize,
    /// The word as written.
    pub word: &'a str,
}

impl Item<'_> {
    fn key(&self) -> (&str, u32) {
        (self.host, self.rank)
    }
    fn name(&self) -> String {
        format!("{}:{}", self.host, self.rank)
    }
}

/// One statement: `left => children ;`.
pub(crate) struct Stmt<'a> {
    pub left: Item<'a>,
    pub children: Vec<Item<'a>>,
}

/// Splits `word` (found at byte `pos` of `src`) into host and rank.
pub(crate) fn split_name<'a>(word: &'a str, pos: usize, src: &Src) -> Result<Item<'a>, TopoError> {
    let Some((host, rank)) = word.rsplit_once(':') else {
        return Err(TopoError::Syntax {
            at: src.loc(pos),
            expected: "host:rank".into(),
            found: format!("`{word}`"),
        });
    };
    if !valid_host(host) {
        return Err(TopoError::Syntax {
            at: src.loc(pos),
            expected: "host:rank with a host name of letters, digits, '.', '-' and '_'".into(),
            found: format!("`{word}`"),
        });
    }
    let rank_ok = !rank.is_empty() && rank.bytes().all(|b| b.is_ascii_digit());
    match rank.parse::<u32>() {
        Ok(r) if rank_ok => Ok(Item {
            host,
            rank: r,
            pos,
            word,
        }),
        _ => Err(TopoError::BadRank {
            at: src.loc(pos + host.len() + 1),
            name: word.to_string(),
            rank: rank.to_string(),
        }),
    }
}

struct Info<'a> {
    item: Item<'a>,
    parent: Option<u32>,
    /// Where the node was defined (left of `=>`), if it was.
    defined: Option<usize>,
}

/// `host:rank` -> node index. Two-level, so that per-node lookups hash only
/// a small host table; ranks (usually small and dense per host) index a
/// vector, with a map for the sparse rest. Much faster than one big table
/// keyed by the pair for million-node files.
#[derive(Default)]
struct NameIndex<'a> {
    hosts: FxHashMap<&'a str, HostRanks>,
}

#[derive(Default)]
struct HostRanks {
    /// `dense[rank]` = node index + 1; 0 when absent.
    dense: Vec<u32>,
    sparse: FxHashMap<u32, u32>,
    count: usize,
}

impl<'a> NameIndex<'a> {
    fn get(&self, key: (&str, u32)) -> Option<u32> {
        let h = self.hosts.get(key.0)?;
        match h.dense.get(key.1 as usize) {
            Some(&v) if v != 0 => Some(v - 1),
            _ => h.sparse.get(&key.1).copied(),
        }
    }

    /// Inserts a name known to be absent.
    fn insert(&mut self, key: (&'a str, u32), value: u32) {
        let h = self.hosts.entry(key.0).or_default();
        h.count += 1;
        let r = key.1 as usize;
        if r >= h.dense.len() && r < 4 * h.count + 1024 {
            h.dense.resize(r + 1, 0);
        }
        match h.dense.get_mut(r) {
            Some(slot) => *slot = value + 1,
            None => {
                h.sparse.insert(key.1, value);
            }
        }
    }
}

/// Checks the statements (see module docs) and builds the topology.
pub(crate) fn assemble(stmts: &[Stmt], src: &Src) -> Result<Topology, TopoError> {
    let Some(first) = stmts.first() else {
        return Err(TopoError::Empty {
            file: src.file.to_string(),
        });
    };
    let mut index = NameIndex::default();
    let mut info: Vec<Info> = Vec::new();
    let mut children: Vec<Vec<u32>> = Vec::new();
    index.insert(first.left.key(), 0);
    info.push(Info {
        item: first.left,
        parent: None,
        defined: None,
    });
    children.push(Vec::new());
    for (si, st) in stmts.iter().enumerate() {
        let l = match index.get(st.left.key()) {
            Some(l) => l,
            None => return Err(unattached(stmts, si, src)),
        };
        if let Some(d) = info[l as usize].defined {
            return Err(TopoError::DuplicateNode {
                at: src.loc(st.left.pos),
                node: st.left.name(),
                first: src.loc(d).line_col(),
            });
        }
        info[l as usize].defined = Some(st.left.pos);
        for c in &st.children {
            if let Some(ci) = index.get(c.key()) {
                return Err(if is_ancestor_or_self(&info, ci, l) {
                    TopoError::Cycle {
                        at: src.loc(c.pos),
                        node: c.name(),
                        parent: st.left.name(),
                    }
                } else {
                    TopoError::DuplicateNode {
                        at: src.loc(c.pos),
                        node: c.name(),
                        first: src.loc(info[ci as usize].item.pos).line_col(),
                    }
                });
            }
            if info.len() >= MAX_NODES {
                return Err(TopoError::TooLarge {
                    what: src.file.to_string(),
                    nodes: info.len() as u64 + 1,
                    limit: MAX_NODES,
                });
            }
            let ci = info.len() as u32;
            index.insert(c.key(), ci);
            info.push(Info {
                item: *c,
                parent: Some(l),
                defined: None,
            });
            children.push(Vec::new());
            children[l as usize].push(ci);
        }
    }
    let names = info
        .iter()
        .map(|i| (i.item.host.to_string(), i.item.rank))
        .collect();
    Ok(build(children, 0, Some(names)))
}

/// True if `a` is `b` or one of `b`'s ancestors.
fn is_ancestor_or_self(info: &[Info], a: u32, b: u32) -> bool {
    let mut cur = Some(b);
    while let Some(x) = cur {
        if x == a {
            return true;
        }
        cur = info[x as usize].parent;
    }
    false
}

/// The error for statement `si`, whose parent is not (yet) in the tree.
fn unattached(stmts: &[Stmt], si: usize, src: &Src) -> TopoError {
    let left = &stmts[si].left;
    let later = stmts[si + 1..]
        .iter()
        .flat_map(|s| s.children.iter())
        .find(|c| c.key() == left.key());
    match later {
        Some(c) => TopoError::DefinedBeforeAttached {
            at: src.loc(left.pos),
            node: left.name(),
            attached: src.loc(c.pos).line_col(),
        },
        None => TopoError::Unreachable {
            at: src.loc(left.pos),
            node: left.name(),
            root: stmts[0].left.name(),
        },
    }
}
