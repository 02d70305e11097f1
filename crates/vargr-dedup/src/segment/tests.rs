//! Properties every segmenter keeps: `cut` then `reassemble` gives the message back,
//! streaming cuts equal whole cuts, and no layout from the network makes `reassemble`
//! panic.

use std::collections::HashSet;

use proptest::prelude::*;

use super::*;
use crate::testdata::random;

fn round_trip(s: &dyn Segmenter, data: &[u8], shape: &Shape) -> Cut<'static> {
    let cut = s.cut(data, shape).unwrap();
    let segs: Vec<&[u8]> = cut.segments.iter().map(|c| &**c).collect();
    assert!(
        segs.iter().all(|s| !s.is_empty()),
        "{}: empty segment",
        s.name()
    );
    let mut out = vec![0xAA];
    s.reassemble(&cut.layout, &segs, &mut out).unwrap();
    assert_eq!(out[0], 0xAA, "{}: reassemble must append", s.name());
    assert!(out[1..] == *data, "{}: round trip differs", s.name());
    Cut {
        segments: cut
            .segments
            .into_iter()
            .map(|c| Cow::Owned(c.into_owned()))
            .collect(),
        layout: cut.layout,
    }
}

fn one_d() -> Vec<Box<dyn Segmenter>> {
    [
        "cdc",
        "cdc:16:64:256",
        "cdc:1:16:16",
        "static:1",
        "static:7",
        "sw",
        "sw:16:4:4",
        "sw:8:8:1",
        "ndarray:5",
    ]
    .iter()
    .map(|s| by_name(s).unwrap())
    .collect()
}

/// Inputs that have broken segmenters: empty, tiny, flat, periodic, random.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        any::<u8>().prop_map(|b| vec![b]),
        (0usize..5000).prop_map(|n| vec![0; n]),
        (1usize..9, 0usize..5000).prop_map(|(p, n)| (0..n).map(|i| (i % p) as u8).collect()),
        (0usize..5000, any::<u64>()).prop_map(|(n, s)| random(n, s)),
        prop::collection::vec(0u8..2, 0..3000),
    ]
}

/// An image (height, width, element size, bytes), random or flat or striped.
fn image() -> impl Strategy<Value = (usize, usize, usize, Vec<u8>)> {
    (0usize..24, 0usize..24, 1usize..5, 0u8..4, any::<u64>()).prop_map(|(h, w, e, kind, seed)| {
        let n = h * w * e;
        let data = match kind {
            0 => random(n, seed),
            1 => vec![0; n],
            // Repeated rows: flat runs of row fingerprints.
            2 => {
                let row = random(w * e, seed);
                (0..n).map(|i| row[i % (w * e).max(1)]).collect()
            }
            _ => random(n, seed).into_iter().map(|b| b & 1).collect(),
        };
        (h, w, e, data)
    })
}

fn grid(h: usize, w: usize, e: usize) -> Shape {
    Shape::Grid {
        dims: vec![h, w],
        elem_size: e,
    }
}

/// Cuts `data` fed in pieces of the given sizes through `boundaries`, keeping tails.
fn streamed(s: &dyn Segmenter, data: &[u8], pieces: &[usize]) -> Vec<usize> {
    let mut ends = Vec::new();
    let (mut base, mut fed) = (0, 0);
    let mut pieces = pieces.iter().cycle();
    loop {
        fed = (fed + pieces.next().unwrap()).min(data.len());
        let last = fed == data.len();
        for e in s.boundaries(&data[base..fed], last).unwrap() {
            ends.push(base + e);
        }
        base = ends.last().copied().unwrap_or(0);
        if last {
            return ends;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn one_d_round_trips(data in bytes()) {
        for s in one_d() {
            round_trip(&*s, &data, &Shape::Bytes);
        }
    }

    #[test]
    fn streaming_cuts_equal_whole_cuts(data in bytes(), pieces in prop::collection::vec(1usize..700, 1..5)) {
        for s in one_d() {
            let Some(whole) = s.boundaries(&data, true) else { continue };
            prop_assert_eq!(&streamed(&*s, &data, &pieces), &whole, "{}", s.name());
            let cut = s.cut(&data, &Shape::Bytes).unwrap();
            prop_assert_eq!(cut.segments.len(), whole.len());
        }
    }

    #[test]
    fn tiles_round_trip((h, w, e, data) in image(), tw in 1usize..8, th in 1usize..8) {
        round_trip(&Tiles::new(tw, th).unwrap(), &data, &grid(h, w, e));
    }

    #[test]
    fn varg_round_trips(
        frames in prop::collection::vec(image(), 1..4),
        width in 1usize..7, every in 1u64..9, min in 0usize..6,
        similar in 0usize..5, max in 0usize..7, motion in any::<bool>(),
    ) {
        let v = Varg::new(VargParams { width, every, min, similar, max, motion }).unwrap();
        for (h, w, e, data) in frames {
            // Same size twice, so movement estimation compares frames.
            round_trip(&v, &data, &grid(h, w, e));
            let mut flipped = data.clone();
            flipped.reverse();
            round_trip(&v, &flipped, &grid(h, w, e));
        }
    }

    #[test]
    fn ndarray_round_trips(
        dims in prop::collection::vec(0usize..7, 1..5), e in 1usize..4,
        target in 1usize..80, seed in any::<u64>(),
    ) {
        let n = dims.iter().product::<usize>() * e;
        let shape = Shape::Grid { dims, elem_size: e };
        round_trip(&NdArray::new(target).unwrap(), &random(n, seed), &shape);
    }

    #[test]
    fn garbage_layouts_never_panic(
        head in prop::collection::vec(any::<u8>(), 0..3),
        tail in prop::collection::vec(prop_oneof![any::<u8>(), 0u8..8], 0..40),
        lens in prop::collection::vec(0usize..40, 0..12),
    ) {
        let segs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![7; n]).collect();
        let segs: Vec<&[u8]> = segs.iter().map(|s| &s[..]).collect();
        for s in all() {
            for tag in [b'T', b'V', b'N'] {
                let mut layout = vec![tag];
                layout.extend(&head);
                layout.extend(&tail);
                let mut out = vec![1, 2, 3];
                if s.reassemble(&layout, &segs, &mut out).is_err() {
                    prop_assert_eq!(&out, &[1, 2, 3]);
                }
            }
        }
    }

    #[test]
    fn damaged_layouts_are_caught_or_harmless(
        (h, w, e, data) in image(), at in any::<prop::sample::Index>(), x in 1u8..=255,
        drop_one in any::<bool>(),
    ) {
        for s in all_2d() {
            let cut = s.cut(&data, &grid(h, w, e)).unwrap();
            let mut segs: Vec<&[u8]> = cut.segments.iter().map(|c| &**c).collect();
            let mut layout = cut.layout.clone();
            if drop_one && !segs.is_empty() {
                segs.pop();
            } else if !layout.is_empty() {
                let i = at.index(layout.len());
                layout[i] ^= x;
            }
            let mut out = Vec::new();
            // Any answer but a panic; a success must use every byte it was given.
            if s.reassemble(&layout, &segs, &mut out).is_ok() {
                prop_assert_eq!(out.len(), segs.iter().map(|s| s.len()).sum::<usize>());
            }
        }
    }
}

fn all_2d() -> Vec<Box<dyn Segmenter>> {
    [
        "tiles:3x2",
        "varg:width=3,every=2,min=1,similar=2",
        "ndarray:6",
    ]
    .iter()
    .map(|s| by_name(s).unwrap())
    .collect()
}

fn all() -> Vec<Box<dyn Segmenter>> {
    let mut v = one_d();
    v.extend(all_2d());
    v.push(Box::new(Tiles::default()));
    v.push(Box::new(Varg::default()));
    v
}

#[test]
fn layouts_are_small() {
    let (h, w) = (1024, 1280);
    let img = random(h * w * 3, 1);
    let cut = Varg::default().cut(&img, &grid(h, w, 3)).unwrap();
    let per = cut.layout.len() as f64 / cut.segments.len() as f64;
    assert!(per <= 1.1, "varg layout {per:.2} bytes a segment");
    let cut = Tiles::default().cut(&img, &grid(h, w, 3)).unwrap();
    assert!(cut.layout.len() <= 12);
}

#[test]
fn one_d_layouts_must_be_empty_and_shapes_must_fit() {
    for s in one_d().iter().filter(|s| s.name() != "ndarray") {
        assert!(matches!(
            s.reassemble(&[0], &[b"x"], &mut Vec::new()),
            Err(SegmentError::Layout { .. })
        ));
    }
    // Another segmenter's layout is refused by its tag.
    let e = Tiles::default()
        .reassemble(b"Vxyz", &[b"x"], &mut Vec::new())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("not a tiles layout (tag is not 'T')"),
        "{e}"
    );
    for s in all_2d() {
        assert!(s.cut(&[0; 5], &grid(2, 3, 1)).is_err(), "{}", s.name());
        assert!(s.cut(&[0; 5], &grid(5, 1, 0)).is_err(), "{}", s.name());
    }
    assert!(Tiles::default().cut(b"abc", &Shape::Bytes).is_err());
    let rank3 = Shape::Grid {
        dims: vec![1, 1, 3],
        elem_size: 1,
    };
    assert!(Varg::default().cut(b"abc", &rank3).is_err());
    // 1 x N and N x 1 images.
    for s in all_2d() {
        round_trip(&*s, b"abcdefg", &grid(1, 7, 1));
        round_trip(&*s, b"abcdefg", &grid(7, 1, 1));
        round_trip(
            &*s,
            b"abcdefg",
            &Shape::Grid {
                dims: vec![7],
                elem_size: 1,
            },
        );
    }
}

/// Segments of `b` not among those of `a`.
fn new_segments(a: &Cut<'_>, b: &Cut<'_>) -> usize {
    let seen: HashSet<&[u8]> = a.segments.iter().map(|s| &**s).collect();
    b.segments.iter().filter(|s| !seen.contains(&***s)).count()
}

#[test]
fn an_insert_near_the_start_changes_few_segments() {
    let data = random(1 << 20, 42);
    let mut edited = data[..1000].to_vec();
    edited.extend_from_slice(b"inserted!");
    edited.extend_from_slice(&data[1000..]);
    for spec in ["cdc", "cdc:16:64:256", "sw", "sw:64:16:32"] {
        let s = by_name(spec).unwrap();
        let a = s.cut(&data, &Shape::Bytes).unwrap();
        let b = s.cut(&edited, &Shape::Bytes).unwrap();
        let changed = new_segments(&a, &b);
        eprintln!("{spec}: {changed} of {} segments changed", b.segments.len());
        assert!(
            changed <= 4,
            "{spec}: {changed} of {} segments changed",
            b.segments.len()
        );
    }
    // Static segmentation is the contrast: everything after the insert moves.
    let s = by_name("static:256").unwrap();
    let a = s.cut(&data, &Shape::Bytes).unwrap();
    let b = s.cut(&edited, &Shape::Bytes).unwrap();
    assert!(new_segments(&a, &b) > b.segments.len() / 2);
}
