//! Equivalence classes over a three-level tree.

mod common;

use common::*;
use vargr_filter::equivalence::{read_class, MARKER, PARTIAL_FORMAT};
use vargr_filter::{apply_guarded, FilterError};
use vargr_wire::Value;

fn be(rank: u32, sum: u32, host: &str) -> Tree {
    Tree::Leaf(pkt_from(
        rank,
        "%ud %s",
        vec![Value::UInt(sum), Value::Str(host.into())],
    ))
}

#[test]
fn three_levels_merge_classes() {
    // FE -> 2 commnodes -> (2 + 1) commnodes -> 9 back-ends, three checksum classes.
    let tree = Tree::Node(vec![
        Tree::Node(vec![
            Tree::Node(vec![be(0, 0xAA, "x"), be(1, 0xAA, "x"), be(2, 0xBB, "x")]),
            Tree::Node(vec![be(3, 0xAA, "x"), be(4, 0xCC, "y")]),
        ]),
        Tree::Node(vec![Tree::Node(vec![
            be(8, 0xBB, "x"),
            be(7, 0xAA, "x"),
            be(6, 0xAA, "x"),
            be(5, 0xCC, "y"),
        ])]),
    ]);
    let out = run_tree("equivalence", &tree);
    let classes: Vec<_> = out.iter().map(|p| read_class(p).unwrap()).collect();
    assert_eq!(classes.len(), 3);
    assert_eq!(out[0].format.as_str(), "%ud %ud %aud %ud %s");
    let expect = [
        (vec![0, 1, 3, 6, 7], 0xAA),
        (vec![2, 8], 0xBB),
        (vec![4, 5], 0xCC),
    ];
    for (i, (c, (members, sum))) in classes.iter().zip(expect).enumerate() {
        assert_eq!(c.index, i as u32);
        assert_eq!(c.total, 3);
        assert_eq!(c.members, members);
        assert_eq!(c.value.format.as_str(), "%ud %s");
        assert_eq!(c.value.values[0], Value::UInt(sum));
        assert_eq!(c.value.source, members[0]);
    }
}

#[test]
fn partial_form_and_formats_distinguish_classes() {
    let mut f = filter("equivalence");
    let wave = vec![
        pkt_from(1, "%d", vec![Value::Int(5)]),
        pkt_from(2, "%ud", vec![Value::UInt(5)]), // same bytes, other format: other class
        pkt_from(3, "%d", vec![Value::Int(5)]),
    ];
    let out = apply_guarded(f.as_mut(), &ctx(false, 3), wave).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].format.as_str(), PARTIAL_FORMAT);
    assert_eq!(out[0].values[0], Value::Str(MARKER.into()));
    let Value::UIntArray(counts) = &out[0].values[3] else {
        panic!("counts")
    };
    let mut counts = counts.clone();
    counts.sort();
    assert_eq!(counts, vec![1, 2]);
    let root = apply_guarded(f.as_mut(), &ctx(true, 1), out).unwrap();
    let members: Vec<Vec<u32>> = root
        .iter()
        .map(|p| read_class(p).unwrap().members)
        .collect();
    assert_eq!(members, vec![vec![1, 3], vec![2]]);
}

#[test]
fn single_level_and_malformed_partials() {
    let out = run(
        "equivalence",
        vec![
            pkt_from(4, "%lf", vec![Value::Double(1.0)]),
            pkt_from(9, "%lf", vec![Value::Double(1.0)]),
        ],
    );
    assert_eq!(read_class(&out[0]).unwrap().members, vec![4, 9]);
    let bad = pkt(
        PARTIAL_FORMAT,
        vec![
            Value::Str(MARKER.into()),
            Value::Raw(bytes::Bytes::from_static(b"abc")),
            Value::UIntArray(vec![5]),
            Value::UIntArray(vec![1]),
            Value::UIntArray(vec![0]),
        ],
    );
    let e = apply_guarded(filter("equivalence").as_mut(), &ctx(true, 1), vec![bad]).unwrap_err();
    assert!(matches!(e, FilterError::Format { .. }), "{e}");
    // Lengths add up but the value bytes are not a valid payload: the bounded decoder says so.
    let garbage = pkt(
        PARTIAL_FORMAT,
        vec![
            Value::Str(MARKER.into()),
            Value::Raw(bytes::Bytes::from_static(b"\xff\xffabc")),
            Value::UIntArray(vec![5]),
            Value::UIntArray(vec![1]),
            Value::UIntArray(vec![0]),
        ],
    );
    let e =
        apply_guarded(filter("equivalence").as_mut(), &ctx(true, 1), vec![garbage]).unwrap_err();
    assert!(matches!(e, FilterError::Wire { .. }), "{e}");
    let newer = pkt(
        PARTIAL_FORMAT,
        vec![
            Value::Str("vargr.equivalence/9".into()),
            Value::Raw(Default::default()),
            Value::UIntArray(vec![]),
            Value::UIntArray(vec![]),
            Value::UIntArray(vec![]),
        ],
    );
    let e = apply_guarded(filter("equivalence").as_mut(), &ctx(true, 1), vec![newer]).unwrap_err();
    assert!(e.to_string().contains("version"), "{e}");
}
