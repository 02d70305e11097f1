//! Every codec gives back exactly what it was given, for random inputs of every element
//! kind and for the inputs that break codecs: empty, one byte, all zero, all the same,
//! alternating, incompressible, lengths that are not a whole number of elements, and
//! floats full of NaNs, infinities, signed zeros and denormals.

use proptest::prelude::*;
use vargr_codec::testdata;
use vargr_codec::{decode, decompress, encode, Codec, CodecError, CodecId, ElemKind, HEADER_MAX};

/// The catalog plus the edges of each parameter range.
fn codecs() -> Vec<Codec> {
    let mut v = Codec::CATALOG.to_vec();
    v.extend([
        Codec::Zstd { level: -7 },
        Codec::Zstd { level: 12 },
        Codec::Fpc { table_bits: 4 },
        Codec::Fpc { table_bits: 20 },
        Codec::ShuffleZstd { level: -3 },
    ]);
    v
}

fn any_elem() -> impl Strategy<Value = ElemKind> {
    prop::sample::select(ElemKind::ALL.to_vec())
}

/// Checks one input with every codec that supports `elem`, both the bare codec and the
/// framed path.
fn check_all(data: &[u8], elem: ElemKind) -> Result<(), TestCaseError> {
    for codec in codecs() {
        // High zstd levels are slow in unoptimised test builds and add no coverage of
        // this crate's code over level 3, so they only see small inputs.
        let slow = matches!(codec, Codec::Zstd { level } if level >= 9);
        if slow && data.len() > 4096 {
            continue;
        }
        if !codec.supports(elem) {
            let unsupported = matches!(
                codec.compress(data, elem, &mut Vec::new()),
                Err(CodecError::Unsupported { .. })
            );
            prop_assert!(unsupported, "{} on {}", codec, elem);
            continue;
        }
        let mut payload = vec![0xEE]; // compress appends: existing bytes stay
        codec.compress(data, elem, &mut payload).unwrap();
        prop_assert_eq!(payload[0], 0xEE);
        let mut out = vec![0xDD];
        decompress(codec.id(), &payload[1..], elem, data.len(), &mut out)
            .map_err(|e| TestCaseError::fail(format!("{codec} on {elem}: {e}")))?;
        prop_assert_eq!(&out[1..], data, "{} on {}", codec, elem);

        let mut frame = Vec::new();
        let header = encode(codec, elem, data, &mut frame);
        prop_assert!(
            frame.len() <= data.len() + HEADER_MAX,
            "{} grew the frame",
            codec
        );
        prop_assert!(header.codec == codec.id() || header.codec == CodecId::None);
        let mut header_bytes = Vec::new();
        header.write(&mut header_bytes);
        prop_assert_eq!(&frame[..header_bytes.len()], &header_bytes[..]);
        let body = &frame[header_bytes.len()..];
        if header.codec == CodecId::None {
            prop_assert_eq!(body, data);
        } else {
            prop_assert!(
                body.len() < data.len(),
                "{} sent a payload no smaller than the input",
                codec
            );
        }
        let mut back = Vec::new();
        let got = decode(&frame, data.len(), &mut back).unwrap();
        prop_assert_eq!(got, header);
        prop_assert_eq!(&back, data);
        if !data.is_empty() {
            let too_large = matches!(
                decode(&frame, data.len() - 1, &mut back),
                Err(CodecError::TooLarge { .. })
            );
            prop_assert!(too_large, "{} accepted a frame over the limit", codec);
        }
    }
    Ok(())
}

fn special_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(-f64::NAN),
        Just(f64::from_bits(0x7ff0_0000_0000_0001)), // signalling NaN
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        Just(f64::MIN_POSITIVE),
        Just(f64::MAX),
        (1u64..1 << 52).prop_map(f64::from_bits), // denormals
        any::<f64>(),
        -1e3f64..1e3,
    ]
}

fn special_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        Just(f32::NAN),
        Just(f32::from_bits(0x7f80_0001)),
        Just(f32::INFINITY),
        Just(f32::NEG_INFINITY),
        Just(-0.0f32),
        (1u32..1 << 23).prop_map(f32::from_bits),
        any::<f32>(),
        -1e3f32..1e3,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_bytes_any_elem(data in prop::collection::vec(any::<u8>(), 0..3000), elem in any_elem()) {
        check_all(&data, elem)?;
    }

    #[test]
    fn tiny_inputs(data in prop::collection::vec(any::<u8>(), 0..=17), elem in any_elem()) {
        check_all(&data, elem)?;
    }

    #[test]
    fn constant_runs(b in any::<u8>(), len in 0usize..10_000, elem in any_elem()) {
        check_all(&vec![b; len], elem)?;
    }

    #[test]
    fn alternating(a in any::<u8>(), b in any::<u8>(), period in 1usize..9, len in 0usize..5000, elem in any_elem()) {
        let data: Vec<u8> = (0..len).map(|i| if (i / period) % 2 == 0 { a } else { b }).collect();
        check_all(&data, elem)?;
    }

    #[test]
    fn runs_of_random_lengths(runs in prop::collection::vec((any::<u8>(), 1usize..300), 0..60), elem in any_elem()) {
        let data: Vec<u8> = runs.iter().flat_map(|&(b, n)| std::iter::repeat_n(b, n)).collect();
        check_all(&data, elem)?;
    }

    #[test]
    fn floats_with_specials(vals in prop::collection::vec(special_f64(), 0..300), extra in prop::collection::vec(any::<u8>(), 0..8)) {
        let mut data = testdata::f64_bytes(&vals);
        data.extend(&extra);
        check_all(&data, ElemKind::F64)?;
        check_all(&data, ElemKind::F32)?;
    }

    #[test]
    fn f32_with_specials(vals in prop::collection::vec(special_f32(), 0..400), extra in prop::collection::vec(any::<u8>(), 0..4)) {
        let mut data = testdata::f32_bytes(&vals);
        data.extend(&extra);
        check_all(&data, ElemKind::F32)?;
    }

    #[test]
    fn integer_extremes(vals in prop::collection::vec(prop_oneof![Just(0u64), Just(u64::MAX), Just(1u64 << 63), any::<u64>(), 0u64..10], 0..400), elem in any_elem()) {
        check_all(&testdata::u64_bytes(&vals), elem)?;
    }

    #[test]
    fn realistic_sets(seed in any::<u64>(), n in 0usize..700, noise in prop_oneof![Just(0.0), 1e-9f64..1e-2]) {
        check_all(&testdata::f64_bytes(&testdata::smooth_field_f64(n, noise, seed)), ElemKind::F64)?;
        check_all(&testdata::f32_bytes(&testdata::smooth_field_f32(n, noise, seed)), ElemKind::F32)?;
        check_all(&testdata::i32_bytes(&testdata::small_deltas_i32(n, 5, seed)), ElemKind::I32)?;
        check_all(&testdata::u64_bytes(&testdata::timestamps_u64(n, 997, seed)), ElemKind::U64)?;
        check_all(&testdata::text_like(n, seed), ElemKind::BYTES)?;
    }
}

#[test]
fn large_inputs_cross_every_block_boundary() {
    // Several Rice blocks, FPC tables of 2^14 entries, multi-block LZ4 and zstd.
    let n = 120_000;
    let sets = [
        (
            testdata::f64_bytes(&testdata::smooth_field_f64(n / 8, 1e-7, 3)),
            ElemKind::F64,
        ),
        (
            testdata::i32_bytes(&testdata::small_deltas_i32(n / 4, 1000, 4)),
            ElemKind::I32,
        ),
        (testdata::random_bytes(n + 3, 5), ElemKind::U16),
        (vec![0u8; 1 << 18], ElemKind::F64),
    ];
    for (data, elem) in &sets {
        check_all(data, *elem).unwrap();
    }
}

#[test]
fn typed_codecs_compress_their_data() {
    // Not speed, only that each codec does the job it is here for.
    let field = testdata::f64_bytes(&testdata::smooth_field_f64(50_000, 0.0, 1));
    let ints = testdata::i32_bytes(&testdata::small_deltas_i32(50_000, 3, 2));
    let text = testdata::text_like(50_000, 3);
    let sparse = testdata::f64_bytes(&testdata::sparse_dense_f64(200, 200, 5, 4));
    let size = |c: Codec, d: &[u8], e| {
        let mut v = Vec::new();
        c.compress(d, e, &mut v).unwrap();
        v.len()
    };
    // Full-precision smooth doubles keep noisy low mantissa bits: about 1.4 is typical.
    assert!(size(Codec::Fpc { table_bits: 16 }, &field, ElemKind::F64) < field.len() * 4 / 5);
    assert!(
        size(Codec::ShuffleZstd { level: 3 }, &field, ElemKind::F64)
            < size(Codec::Zstd { level: 3 }, &field, ElemKind::F64)
    );
    assert!(size(Codec::Rice, &ints, ElemKind::I32) < ints.len() / 6);
    assert!(size(Codec::Huffman, &text, ElemKind::BYTES) < text.len() * 7 / 10);
    assert!(size(Codec::Rle, &sparse, ElemKind::F64) < sparse.len() / 10);
}
