//! Generator tests: counts of leaves, depth, fan-out, and spec errors.

use super::*;
use crate::tree::Node;

fn gen(spec: &str) -> Topology {
    let t = Topology::generate(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    t.validate().unwrap_or_else(|e| panic!("{spec}: {e}"));
    t
}

/// Depth of every node, by id.
fn depths(t: &Topology) -> Vec<usize> {
    let mut d = vec![0usize; t.len()];
    for n in t.nodes() {
        if let Some(p) = n.parent {
            d[n.id as usize] = d[p as usize] + 1;
        }
    }
    d
}

fn leaf_depths(t: &Topology) -> Vec<usize> {
    let d = depths(t);
    t.backends().iter().map(|n| d[n.id as usize]).collect()
}

fn spec_err(spec: &str) -> String {
    match Topology::generate(spec) {
        Ok(_) => panic!("{spec} should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn flat() {
    for n in [1u32, 2, 7, 100] {
        let t = gen(&format!("flat:{n}"));
        assert_eq!(t.len(), n as usize + 1);
        assert_eq!(t.num_backends(), n as usize);
        assert_eq!(t.depth(), 1);
        assert_eq!(t.max_fanout(), n as usize);
        assert!(t.internal().is_empty());
        let ranks: Vec<u32> = t
            .backends()
            .iter()
            .map(|b| b.backend_rank.unwrap())
            .collect();
        assert_eq!(ranks, (0..n).collect::<Vec<_>>());
    }
    let t = gen("flat:3");
    assert_eq!(
        t.node(2),
        Some(&Node {
            id: 2,
            host: "localhost".into(),
            rank: 2,
            parent: Some(0),
            children: vec![],
            backend_rank: Some(1),
        })
    );
}

#[test]
fn kary_depth() {
    for (k, d) in [(2u32, 1u32), (2, 3), (3, 2), (4, 3), (8, 2), (16, 1)] {
        let t = gen(&format!("kary:{k}^{d}"));
        let leaves = k.pow(d) as usize;
        let total: usize = (0..=d).map(|i| k.pow(i) as usize).sum();
        assert_eq!((t.len(), t.num_backends()), (total, leaves), "kary:{k}^{d}");
        assert_eq!(t.depth(), d as usize);
        assert_eq!(t.max_fanout(), k as usize);
        assert_eq!(t.internal().len(), total - leaves - 1);
        assert!(leaf_depths(&t).iter().all(|&x| x == d as usize));
        assert!(t
            .nodes()
            .all(|n| n.children.is_empty() || n.children.len() == k as usize));
    }
}

#[test]
fn kary_backends_is_minimal_depth_and_even() {
    for k in 2u32..=5 {
        for n in 1u32..=70 {
            let spec = format!("kary:{k}@{n}");
            let t = gen(&spec);
            assert_eq!(t.num_backends(), n as usize, "{spec}");
            let mut min_depth = 1;
            while (k as u64).pow(min_depth) < n as u64 {
                min_depth += 1;
            }
            assert_eq!(t.depth(), min_depth as usize, "{spec}");
            assert!(t.max_fanout() <= k as usize, "{spec}");
            assert!(
                leaf_depths(&t).iter().all(|&x| x == t.depth()),
                "{spec}: leaves at one depth"
            );
            // siblings' fan-outs on one level differ by at most one
            let d = depths(&t);
            for level in 0..t.depth() {
                let f: Vec<usize> = t
                    .nodes()
                    .filter(|x| d[x.id as usize] == level)
                    .map(|x| x.children.len())
                    .collect();
                let (lo, hi) = (f.iter().min().unwrap(), f.iter().max().unwrap());
                assert!(hi - lo <= 1, "{spec}: level {level} fan-outs {f:?}");
            }
        }
    }
}

#[test]
fn kary_backends_example_shape() {
    // 17 back-ends, K=4: 5 commnodes above them (4,4,3,3,3), 2 above those (3,2), root.
    let t = gen("kary:4@17");
    assert_eq!((t.len(), t.depth(), t.internal().len()), (25, 3, 7));
    assert_eq!(t.root().children, vec![1, 2]);
    assert_eq!(t.node(1).unwrap().children, vec![3, 4, 5]);
    assert_eq!(t.node(2).unwrap().children, vec![6, 7]);
    let fan: Vec<usize> = (3..=7).map(|i| t.node(i).unwrap().children.len()).collect();
    assert_eq!(fan, vec![4, 4, 3, 3, 3]);
    // small N: flat under the root
    let t = gen("kary:8@5");
    assert_eq!((t.len(), t.depth()), (6, 1));
    let t = gen("kary:2@1");
    assert_eq!((t.len(), t.depth(), t.num_backends()), (2, 1, 1));
}

#[test]
fn level_lists() {
    let t = gen("1x4x16");
    assert_eq!(
        (t.len(), t.num_backends(), t.depth(), t.max_fanout()),
        (21, 16, 2, 4)
    );
    assert_eq!(t.internal().len(), 4);
    let t = gen("1x2x6x12");
    assert_eq!((t.len(), t.num_backends(), t.depth()), (21, 12, 3));
    assert_eq!(t.root().children.len(), 2);
    assert!(t
        .internal()
        .iter()
        .all(|n| n.children.len() == if n.id <= 2 { 3 } else { 2 }));
    let t = gen("1x1x3"); // a chain is allowed
    assert_eq!((t.len(), t.depth(), t.max_fanout()), (5, 2, 3));
    let t = gen("1x5");
    assert_eq!(t, gen("flat:5"));
    assert_eq!(gen("1x2x4x8"), gen("kary:2^3"));
}

#[test]
fn level_list_errors() {
    assert!(spec_err("2x4").contains("must be 1, found 2"));
    assert!(spec_err("1x3x4")
        .contains("level 3 has 4 nodes, which is not a positive multiple of level 2's 3"));
    assert!(spec_err("1x0").contains("not a positive multiple"));
    assert!(spec_err("1").contains("unknown form"));
    assert!(spec_err("1x").contains("a level count must be"));
}

fn log_ceil(k: u64, x: u64) -> usize {
    let (mut p, mut l) = (1u64, 0usize);
    while p < x {
        p *= k;
        l += 1;
    }
    l
}

#[test]
fn knomial_properties() {
    for k in 2u32..=5 {
        for n in 1u32..=130 {
            let spec = format!("knomial:{k}@{n}");
            let t = gen(&spec);
            assert_eq!(t.num_backends(), n as usize, "{spec}");
            let l = log_ceil(k as u64, n as u64 + 1);
            assert!(
                t.depth() <= l + 1,
                "{spec}: depth {} > {}",
                t.depth(),
                l + 1
            );
            assert!(t.depth() >= l.min(1), "{spec}");
            assert!(t.root().children.len() <= (k as usize - 1) * l, "{spec}");
            for c in t.internal() {
                assert!(c.children.len() <= (k as usize - 1) * l + 1, "{spec}");
                // a commnode's first child is its own back-end
                let first = t.node(c.children[0]).unwrap();
                assert!(first.is_backend(), "{spec}: node {} first child", c.id);
            }
            assert_eq!(Spec::parse(&spec).unwrap().node_count(), t.len() as u64);
        }
    }
}

#[test]
fn binomial_example_shape() {
    // Positions 0..=7: 0 -> 1 2 4; 2 -> 3; 4 -> 5 6; 6 -> 7. Positions 2, 4, 6
    // become commnodes with their own back-end as first child.
    let t = gen("binomial@7");
    assert_eq!(t, gen("knomial:2@7"));
    assert_eq!((t.len(), t.num_backends(), t.depth()), (11, 7, 3));
    let kids: Vec<_> = t
        .root()
        .children
        .iter()
        .map(|&c| t.node(c).unwrap())
        .collect();
    assert_eq!(kids.len(), 3);
    assert!(kids[0].is_backend());
    assert_eq!(t.backends_under(kids[0].id), vec![0]);
    assert_eq!(t.backends_under(kids[1].id), vec![1, 2]);
    assert_eq!(t.backends_under(kids[2].id), vec![3, 4, 5, 6]);
    assert_eq!(kids[2].children.len(), 3); // own BE, position 5, position 6
    assert_eq!(gen("binomial@1").len(), 2);
}

#[test]
fn knomial_example_shape() {
    // K=3, N=8: positions 0..=8; 0 -> 1 2 3 6; 3 -> 4 5; 6 -> 7 8.
    let t = gen("knomial:3@8");
    assert_eq!((t.len(), t.num_backends(), t.depth()), (11, 8, 2));
    let fan: Vec<usize> = t
        .root()
        .children
        .iter()
        .map(|&c| t.node(c).unwrap().children.len())
        .collect();
    assert_eq!(fan, vec![0, 0, 3, 3]);
}

#[test]
fn knomial_depth_grows_like_log() {
    let t = gen("binomial@1023");
    assert_eq!(t.depth(), 10); // position 1023 has ten 1-bits
    let t = gen("knomial:4@1023");
    assert!(t.depth() <= 6);
}

#[test]
fn case_and_whitespace_insensitive() {
    assert_eq!(gen(" FLAT:3 "), gen("flat:3"));
    assert_eq!(gen("Kary:2^2"), gen("kary:2^2"));
    assert_eq!(gen("KARY:3@7"), gen("kary:3@7"));
    assert_eq!(gen("BINOMIAL@4"), gen("binomial@4"));
    assert_eq!(gen("KNomial:3@4"), gen("knomial:3@4"));
    assert_eq!(gen("1X2X4"), gen("1x2x4"));
}

#[test]
fn limits() {
    assert!(spec_err("flat:0").contains("N must be at least 1"));
    assert!(spec_err("kary:1@5").contains("K must be at least 2, found 1"));
    assert!(spec_err("kary:0^2").contains("K must be at least 2"));
    assert!(spec_err("kary:2^0").contains("D must be at least 1"));
    assert!(spec_err("knomial:1@3").contains("K must be at least 2"));
    assert!(spec_err("binomial@0").contains("N must be at least 1"));
    let e = spec_err("flat:1000000");
    assert!(e.contains("1000001 nodes, the limit is 1000000"), "{e}");
    assert!(matches!(
        Topology::generate("kary:2^20"),
        Err(TopoError::TooLarge { .. })
    ));
    assert!(matches!(
        Topology::generate("kary:1000^1000"),
        Err(TopoError::TooLarge { .. })
    ));
    assert!(matches!(
        Topology::generate("1x1000x1000000"),
        Err(TopoError::TooLarge { .. })
    ));
    assert!(matches!(
        Topology::generate("knomial:2@999999"),
        Err(TopoError::TooLarge { .. })
    ));
    assert!(spec_err("flat:4294967296").contains("N is too large"));
    assert_eq!(Spec::parse("flat:999999").unwrap().node_count(), 1_000_000);
}

#[test]
fn bad_forms_quote_input_and_list_forms() {
    let e = spec_err("tree:3");
    assert_eq!(
        e,
        "invalid topology spec \"tree:3\": unknown form; accepted forms: flat:N, kary:K@N, \
         kary:K^D, knomial:K@N, binomial@N, or a level list such as 1x4x16"
    );
    assert!(spec_err("kary:3").contains("kary:K@N (N back-ends) or kary:K^D"));
    assert!(spec_err("knomial:3").contains("knomial:K@N"));
    assert!(spec_err("binomial:4").contains("binomial@N"));
    assert!(spec_err("flat:-1").contains("N must be a non-negative integer, found \"-1\""));
    assert!(spec_err("flat:").contains("found \"\""));
    assert!(spec_err("flat:+3").contains("found \"+3\""));
    assert!(spec_err("kary:a@3").contains("K must be"));
    assert!(spec_err("").contains("unknown form"));
}

#[test]
fn spec_display_round_trips() {
    for s in [
        "flat:3",
        "kary:2@9",
        "kary:3^2",
        "1x2x8",
        "knomial:3@10",
        "binomial@5",
    ] {
        let spec = Spec::parse(s).unwrap();
        assert_eq!(spec.to_string(), s);
        assert_eq!(s.parse::<Spec>().unwrap(), spec);
        assert_eq!(spec.num_backends(), gen(s).num_backends() as u64);
        assert_eq!(spec.node_count(), gen(s).len() as u64);
    }
    assert_eq!(
        Spec::parse("knomial:2@5").unwrap().to_string(),
        "binomial@5"
    );
}

#[test]
fn looks_like_spec() {
    for s in [
        "flat:3",
        "KARY:2@4",
        "knomial:x",
        "binomial@",
        "1x4",
        " 1x4x16 ",
    ] {
        assert!(Spec::looks_like_spec(s), "{s}");
    }
    for s in [
        "topo.txt",
        "x1",
        "1",
        "./flat:3",
        "fixtures/a.toml",
        "binomial",
    ] {
        assert!(!Spec::looks_like_spec(s), "{s}");
    }
}

#[test]
fn generated_names_are_localhost_and_id() {
    let t = gen("knomial:3@20");
    assert!(t.nodes().all(|n| n.host == "localhost" && n.rank == n.id));
}
