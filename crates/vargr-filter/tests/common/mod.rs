//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use vargr_filter::{apply_guarded, FilterContext, Registry, TransformFilter};
use vargr_wire::{Packet, Value};

pub const STREAM: u32 = 3;
pub const TAG: i32 = 42;

/// A packet from back-end `source`.
pub fn pkt_from(source: u32, format: &str, values: Vec<Value>) -> Packet {
    let mut p = Packet::new(STREAM, TAG, format, values).expect("valid test packet");
    p.source = source;
    p
}

pub fn pkt(format: &str, values: Vec<Value>) -> Packet {
    pkt_from(0, format, values)
}

pub fn ctx(is_root: bool, num_inputs: usize) -> FilterContext {
    FilterContext {
        node_id: 1000,
        stream: STREAM,
        is_root,
        num_inputs,
    }
}

pub fn filter(spec: &str) -> Box<dyn TransformFilter> {
    Registry::with_builtins()
        .create(spec)
        .expect("builtin filter")
}

/// Applies `spec` once, as the root, to `wave`.
pub fn run(spec: &str, wave: Vec<Packet>) -> Vec<Packet> {
    let n = wave.len();
    apply_guarded(filter(spec).as_mut(), &ctx(true, n), wave).expect("filter succeeds")
}

/// Applies `spec` once and returns the single output's values.
pub fn run1(spec: &str, wave: Vec<Packet>) -> (String, Vec<Value>) {
    let mut out = run(spec, wave);
    assert_eq!(out.len(), 1, "one output packet");
    let p = out.pop().unwrap();
    (p.format.as_str().to_string(), p.values)
}

/// A tree for multi-level tests: leaves are back-end packets.
pub enum Tree {
    Leaf(Packet),
    Node(Vec<Tree>),
}

/// Runs a fresh instance of `spec` at every inner node, bottom-up; `is_root` only at the top.
pub fn run_tree(spec: &str, tree: &Tree) -> Vec<Packet> {
    fn go(spec: &str, t: &Tree, root: bool, next_id: &mut u32) -> Vec<Packet> {
        match t {
            Tree::Leaf(p) => vec![p.clone()],
            Tree::Node(children) => {
                let wave: Vec<Packet> = children
                    .iter()
                    .flat_map(|c| go(spec, c, false, next_id))
                    .collect();
                *next_id += 1;
                let c = FilterContext {
                    node_id: 10_000 + *next_id,
                    stream: STREAM,
                    is_root: root,
                    num_inputs: children.len(),
                };
                apply_guarded(filter(spec).as_mut(), &c, wave).expect("filter succeeds")
            }
        }
    }
    let mut id = 0;
    go(spec, tree, true, &mut id)
}

pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// Compiles `src` (a path or C source text) into `dir/name`.
pub fn compile(dir: &Path, name: &str, source: Source) -> PathBuf {
    let src = match source {
        Source::File(p) => p,
        Source::Text(t) => {
            let p = dir.join(format!("{name}.c"));
            std::fs::write(&p, t).unwrap();
            p
        }
    };
    let out = dir.join(name);
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wall", "-Werror", "-I"])
        .arg(include_dir())
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed for {}", src.display());
    out
}

pub enum Source {
    File(PathBuf),
    Text(&'static str),
}
