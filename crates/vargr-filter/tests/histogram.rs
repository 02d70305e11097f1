//! histogram:lo,hi,bins at one and several levels.

mod common;

use common::*;
use vargr_filter::{apply_guarded, FilterError, Registry};
use vargr_wire::Value;

#[test]
fn counts_every_numeric_type_with_under_and_overflow() {
    let wave = vec![
        pkt(
            "%d %af",
            vec![
                Value::Int(-1),
                Value::FloatArray(vec![0.0, 9.99, 10.0, f32::NAN]),
            ],
        ),
        pkt("%d %af", vec![Value::Int(5), Value::FloatArray(vec![4.0])]),
    ];
    let (f, v) = run1("histogram:0,10,2", wave);
    assert_eq!(f, "%auld");
    // [under, [0,5), [5,10), over]
    assert_eq!(v, vec![Value::ULongArray(vec![1, 2, 2, 2])]);
    let (_, v) = run1(
        "histogram:0,256,4",
        vec![
            pkt("%auc", vec![Value::UCharArray(vec![0, 63, 64, 255])]),
            pkt("%auc", vec![Value::UCharArray(vec![128])]),
        ],
    );
    assert_eq!(v, vec![Value::ULongArray(vec![0, 2, 1, 1, 1, 0])]);
    let (_, v) = run1(
        "histogram:-1,1,2",
        vec![pkt(
            "%ld %uhd %lf",
            vec![Value::Long(-1), Value::UShort(1), Value::Double(0.5)],
        )],
    );
    assert_eq!(v, vec![Value::ULongArray(vec![0, 1, 1, 1])]);
}

#[test]
fn upper_levels_add_counts() {
    let leaf = |x: i32| Tree::Leaf(pkt("%d", vec![Value::Int(x)]));
    let tree = Tree::Node(vec![
        Tree::Node(vec![leaf(1), leaf(15), leaf(99)]),
        Tree::Node(vec![Tree::Node(vec![leaf(12), leaf(-4)]), leaf(100)]),
    ]);
    let out = run_tree("histogram:0,100,10", &tree);
    assert_eq!(out[0].format.as_str(), "%auld");
    assert_eq!(
        out[0].values,
        vec![Value::ULongArray(vec![1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 1, 1])]
    );
}

#[test]
fn params_and_mismatched_children_are_reported() {
    let r = Registry::with_builtins();
    for bad in [
        "histogram",
        "histogram:1,0,3",
        "histogram:0,1,0",
        "histogram:0,x,3",
        "histogram:0,1",
    ] {
        let e = r
            .create(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(matches!(e, FilterError::BadParams { .. }), "{e}");
        assert!(e.to_string().contains("expected lo,hi,bins"), "{e}");
    }
    let mut below = r.create("histogram:0,10,2").unwrap();
    let part = apply_guarded(
        below.as_mut(),
        &ctx(false, 1),
        vec![pkt("%d", vec![Value::Int(3)])],
    )
    .unwrap();
    assert_eq!(part[0].format.as_str(), "%s %auld");
    let e = apply_guarded(
        r.create("histogram:0,10,5").unwrap().as_mut(),
        &ctx(true, 1),
        part,
    )
    .unwrap_err();
    assert!(e.to_string().contains("vargr.histogram:0,10,2"), "{e}");
    let e = apply_guarded(
        r.create("histogram:0,10,5").unwrap().as_mut(),
        &ctx(true, 1),
        vec![pkt("%s", vec![Value::Str("7".into())])],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "histogram: field 0 is %s, histogram needs numbers"
    );
}
