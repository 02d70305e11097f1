//! sum, min, max, avg, concat and identity across the numeric types.

mod common;

use common::*;
use vargr_filter::{apply_guarded, FilterError};
use vargr_wire::Value;

#[test]
fn sum_min_max_every_scalar_type() {
    // (format, three inputs, sum, min, max)
    let cases: Vec<(&str, [Value; 3], Value, Value, Value)> = vec![
        (
            "%c",
            [Value::Char(-3), Value::Char(5), Value::Char(1)],
            Value::Char(3),
            Value::Char(-3),
            Value::Char(5),
        ),
        (
            "%uc",
            [Value::UChar(3), Value::UChar(5), Value::UChar(1)],
            Value::UChar(9),
            Value::UChar(1),
            Value::UChar(5),
        ),
        (
            "%hd",
            [Value::Short(-300), Value::Short(500), Value::Short(1)],
            Value::Short(201),
            Value::Short(-300),
            Value::Short(500),
        ),
        (
            "%uhd",
            [Value::UShort(300), Value::UShort(500), Value::UShort(1)],
            Value::UShort(801),
            Value::UShort(1),
            Value::UShort(500),
        ),
        (
            "%d",
            [Value::Int(-7), Value::Int(70000), Value::Int(1)],
            Value::Int(69994),
            Value::Int(-7),
            Value::Int(70000),
        ),
        (
            "%ud",
            [Value::UInt(7), Value::UInt(70000), Value::UInt(1)],
            Value::UInt(70008),
            Value::UInt(1),
            Value::UInt(70000),
        ),
        (
            "%ld",
            [Value::Long(-1 << 40), Value::Long(5), Value::Long(1)],
            Value::Long((-1 << 40) + 6),
            Value::Long(-1 << 40),
            Value::Long(5),
        ),
        (
            "%uld",
            [Value::ULong(1 << 40), Value::ULong(5), Value::ULong(1)],
            Value::ULong((1 << 40) + 6),
            Value::ULong(1),
            Value::ULong(1 << 40),
        ),
        (
            "%f",
            [Value::Float(1.5), Value::Float(-2.0), Value::Float(0.25)],
            Value::Float(-0.25),
            Value::Float(-2.0),
            Value::Float(1.5),
        ),
        (
            "%lf",
            [Value::Double(1.5), Value::Double(-2.0), Value::Double(0.25)],
            Value::Double(-0.25),
            Value::Double(-2.0),
            Value::Double(1.5),
        ),
    ];
    for (fmt, inputs, sum, min, max) in cases {
        let wave = || {
            inputs
                .iter()
                .map(|v| pkt(fmt, vec![v.clone()]))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            run1("sum", wave()),
            (fmt.to_string(), vec![sum]),
            "sum {fmt}"
        );
        assert_eq!(
            run1("min", wave()),
            (fmt.to_string(), vec![min]),
            "min {fmt}"
        );
        assert_eq!(
            run1("max", wave()),
            (fmt.to_string(), vec![max]),
            "max {fmt}"
        );
    }
}

#[test]
fn arrays_combine_element_wise_with_mixed_fields() {
    let wave = vec![
        pkt(
            "%ad %lf %auhd",
            vec![
                Value::IntArray(vec![1, 2, 3]),
                Value::Double(1.0),
                Value::UShortArray(vec![9]),
            ],
        ),
        pkt(
            "%ad %lf %auhd",
            vec![
                Value::IntArray(vec![10, -20, 30]),
                Value::Double(2.5),
                Value::UShortArray(vec![1]),
            ],
        ),
    ];
    let (f, v) = run1("sum", wave.clone());
    assert_eq!(f, "%ad %lf %auhd");
    assert_eq!(
        v,
        vec![
            Value::IntArray(vec![11, -18, 33]),
            Value::Double(3.5),
            Value::UShortArray(vec![10])
        ]
    );
    let (_, v) = run1("max", wave.clone());
    assert_eq!(
        v,
        vec![
            Value::IntArray(vec![10, 2, 30]),
            Value::Double(2.5),
            Value::UShortArray(vec![9])
        ]
    );
    let (_, v) = run1("min", wave);
    assert_eq!(v[0], Value::IntArray(vec![1, -20, 3]));
    let (_, v) = run1(
        "sum",
        vec![
            pkt("%af", vec![Value::FloatArray(vec![0.5, 1.0])]),
            pkt("%af", vec![Value::FloatArray(vec![0.25, 2.0])]),
        ],
    );
    assert_eq!(v, vec![Value::FloatArray(vec![0.75, 3.0])]);
}

#[test]
fn integer_sums_wrap() {
    let (_, v) = run1(
        "sum",
        vec![
            pkt("%uc", vec![Value::UChar(200)]),
            pkt("%uc", vec![Value::UChar(100)]),
        ],
    );
    assert_eq!(v, vec![Value::UChar(44)]);
    let (_, v) = run1(
        "sum",
        vec![
            pkt("%d", vec![Value::Int(i32::MAX)]),
            pkt("%d", vec![Value::Int(1)]),
        ],
    );
    assert_eq!(v, vec![Value::Int(i32::MIN)]);
}

#[test]
fn mismatches_are_clear_errors() {
    let err =
        |spec: &str, wave| apply_guarded(filter(spec).as_mut(), &ctx(true, 2), wave).unwrap_err();
    let e = err(
        "sum",
        vec![
            pkt("%d %s", vec![Value::Int(1), Value::Str("a".into())]),
            pkt("%d %s", vec![Value::Int(1), Value::Str("b".into())]),
        ],
    );
    assert!(matches!(e, FilterError::Format { .. }));
    assert_eq!(e.to_string(), "sum: field 1 is %s, sum needs numbers");
    let e = err(
        "max",
        vec![
            pkt("%d", vec![Value::Int(1)]),
            pkt("%f", vec![Value::Float(1.0)]),
        ],
    );
    assert!(
        e.to_string()
            .contains("packet 1 has format \"%f\" but packet 0 has \"%d\""),
        "{e}"
    );
    let e = err(
        "min",
        vec![
            pkt("%ad", vec![Value::IntArray(vec![1, 2])]),
            pkt("%ad", vec![Value::IntArray(vec![1])]),
        ],
    );
    assert!(e.to_string().contains("arrays of length 2 and 1"), "{e}");
    let e = err(
        "avg",
        vec![pkt("%b", vec![Value::Raw(bytes::Bytes::from_static(b"x"))])],
    );
    assert_eq!(e.to_string(), "avg: field 0 is %b, avg needs numbers");
    let e = err(
        "concat",
        vec![
            pkt("%d", vec![Value::Int(1)]),
            pkt("%ud", vec![Value::UInt(1)]),
        ],
    );
    assert!(
        e.to_string()
            .starts_with("concat: packet 1 has format \"%ud\""),
        "{e}"
    );
}

#[test]
fn empty_wave_gives_nothing() {
    for spec in [
        "sum",
        "min",
        "max",
        "avg",
        "concat",
        "identity",
        "equivalence",
        "histogram:0,1,2",
    ] {
        assert!(run(spec, vec![]).is_empty(), "{spec}");
    }
}

#[test]
fn identity_and_null_pass_everything() {
    let wave = vec![
        pkt("%d", vec![Value::Int(1)]),
        pkt("%s", vec![Value::Str("x".into())]),
    ];
    assert_eq!(run("identity", wave.clone()), wave);
    assert_eq!(run("null", wave.clone()), wave);
}

#[test]
fn concat_scalars_then_arrays() {
    let (f, v) = run1(
        "concat",
        (1..=3)
            .map(|i| pkt("%hd %s", vec![Value::Short(i), Value::Str(format!("n{i}"))]))
            .collect(),
    );
    assert_eq!(f, "%ahd %as");
    assert_eq!(
        v,
        vec![
            Value::ShortArray(vec![1, 2, 3]),
            Value::StrArray(vec!["n1".into(), "n2".into(), "n3".into()])
        ]
    );
    // Upper level: arrays from children and a scalar from a back-end child mix.
    let (f, v) = run1(
        "concat",
        vec![
            pkt("%alf", vec![Value::DoubleArray(vec![1.0, 2.0])]),
            pkt("%lf", vec![Value::Double(3.0)]),
            pkt("%alf", vec![Value::DoubleArray(vec![])]),
        ],
    );
    assert_eq!(f, "%alf");
    assert_eq!(v, vec![Value::DoubleArray(vec![1.0, 2.0, 3.0])]);
}

#[test]
fn avg_single_level_per_type() {
    let (f, v) = run1(
        "avg",
        vec![
            pkt(
                "%d %af",
                vec![Value::Int(1), Value::FloatArray(vec![1.0, 0.0])],
            ),
            pkt(
                "%d %af",
                vec![Value::Int(4), Value::FloatArray(vec![2.0, 1.0])],
            ),
        ],
    );
    assert_eq!(f, "%d %af");
    assert_eq!(
        v,
        vec![Value::Int(2), Value::FloatArray(vec![1.5, 0.5])],
        "ints truncate toward zero"
    );
    let (_, v) = run1(
        "avg",
        vec![
            pkt("%c", vec![Value::Char(-100)]),
            pkt("%c", vec![Value::Char(-101)]),
        ],
    );
    assert_eq!(v, vec![Value::Char(-100)], "no overflow in narrow types");
    let (_, v) = run1(
        "avg",
        (0..4)
            .map(|i| pkt("%uc", vec![Value::UChar(250 + i)]))
            .collect(),
    );
    assert_eq!(v, vec![Value::UChar(251)]);
}

#[test]
fn avg_is_exact_across_unequal_subtrees() {
    let leaf = |x: f64| {
        Tree::Leaf(pkt(
            "%lf %ald",
            vec![Value::Double(x), Value::LongArray(vec![x as i64 * 3])],
        ))
    };
    // One child holds one back-end, the other five: a naive average of averages gives 3.75.
    let tree = Tree::Node(vec![
        Tree::Node(vec![leaf(0.0)]),
        Tree::Node(vec![
            Tree::Node(vec![leaf(2.0), leaf(4.0)]),
            Tree::Node(vec![leaf(6.0), leaf(8.0), leaf(10.0)]),
        ]),
    ]);
    let out = run_tree("avg", &tree);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].format.as_str(), "%lf %ald");
    assert_eq!(
        out[0].values,
        vec![Value::Double(5.0), Value::LongArray(vec![15])]
    );
}

#[test]
fn avg_partial_form_below_root() {
    let mut f = filter("avg");
    let out = apply_guarded(
        f.as_mut(),
        &ctx(false, 2),
        vec![
            pkt("%hd", vec![Value::Short(3)]),
            pkt("%hd", vec![Value::Short(4)]),
        ],
    )
    .unwrap();
    assert_eq!(out[0].format.as_str(), "%s %uld %lf");
    assert_eq!(
        out[0].values,
        vec![
            Value::Str("vargr.avg:%hd".into()),
            Value::ULong(2),
            Value::Double(7.0)
        ]
    );
}
