//! Property tests: random formats with matching values survive encode/decode bit for bit,
//! and no input, random or cut short, makes the decoder panic.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;
use vargr_wire::{decode_frame, Elem, Field, Packet, Value, WireError};

fn field() -> impl Strategy<Value = Field> {
    let elem = proptest::sample::select(Elem::ALL.to_vec());
    prop_oneof![
        elem.clone().prop_map(Field::Scalar),
        elem.prop_map(Field::Array),
        Just(Field::Raw),
    ]
}

fn string() -> impl Strategy<Value = String> {
    ".{0,12}"
}

/// A value for `field`. Floats come from raw bits so NaNs with payloads are covered.
fn value(field: Field) -> BoxedStrategy<Value> {
    const N: usize = 24;
    let f32s = || any::<u32>().prop_map(f32::from_bits);
    let f64s = || any::<u64>().prop_map(f64::from_bits);
    match field {
        Field::Raw => vec(any::<u8>(), 0..N)
            .prop_map(|b| Value::Raw(Bytes::from(b)))
            .boxed(),
        Field::Scalar(e) => match e {
            Elem::Char => any::<i8>().prop_map(Value::Char).boxed(),
            Elem::UChar => any::<u8>().prop_map(Value::UChar).boxed(),
            Elem::Short => any::<i16>().prop_map(Value::Short).boxed(),
            Elem::UShort => any::<u16>().prop_map(Value::UShort).boxed(),
            Elem::Int => any::<i32>().prop_map(Value::Int).boxed(),
            Elem::UInt => any::<u32>().prop_map(Value::UInt).boxed(),
            Elem::Long => any::<i64>().prop_map(Value::Long).boxed(),
            Elem::ULong => any::<u64>().prop_map(Value::ULong).boxed(),
            Elem::Float => f32s().prop_map(Value::Float).boxed(),
            Elem::Double => f64s().prop_map(Value::Double).boxed(),
            Elem::Str => string().prop_map(Value::Str).boxed(),
        },
        Field::Array(e) => match e {
            Elem::Char => vec(any::<i8>(), 0..N).prop_map(Value::CharArray).boxed(),
            Elem::UChar => vec(any::<u8>(), 0..N).prop_map(Value::UCharArray).boxed(),
            Elem::Short => vec(any::<i16>(), 0..N).prop_map(Value::ShortArray).boxed(),
            Elem::UShort => vec(any::<u16>(), 0..N).prop_map(Value::UShortArray).boxed(),
            Elem::Int => vec(any::<i32>(), 0..N).prop_map(Value::IntArray).boxed(),
            Elem::UInt => vec(any::<u32>(), 0..N).prop_map(Value::UIntArray).boxed(),
            Elem::Long => vec(any::<i64>(), 0..N).prop_map(Value::LongArray).boxed(),
            Elem::ULong => vec(any::<u64>(), 0..N).prop_map(Value::ULongArray).boxed(),
            Elem::Float => vec(f32s(), 0..N).prop_map(Value::FloatArray).boxed(),
            Elem::Double => vec(f64s(), 0..N).prop_map(Value::DoubleArray).boxed(),
            Elem::Str => vec(string(), 0..6).prop_map(Value::StrArray).boxed(),
        },
    }
}

/// Format text with arbitrary whitespace around the tokens, plus matching values.
fn format_and_values() -> impl Strategy<Value = (String, Vec<Value>)> {
    vec(field(), 0..10).prop_flat_map(|fields| {
        let values: Vec<_> = fields.iter().map(|&f| value(f)).collect();
        let seps = vec(
            proptest::sample::select(vec![" ", "  ", "\t", "\n", " \r\n "]),
            fields.len() + 1,
        );
        (Just(fields), seps, values).prop_map(|(fields, seps, values)| {
            let mut text = String::from(seps[0]);
            for (f, sep) in fields.iter().zip(&seps[1..]) {
                text.push_str(f.token());
                text.push_str(sep);
            }
            (text, values)
        })
    })
}

fn packet() -> impl Strategy<Value = Packet> {
    (
        any::<u32>(),
        any::<i32>(),
        any::<u32>(),
        format_and_values(),
    )
        .prop_map(|(stream, tag, source, (text, values))| {
            let mut p = Packet::new(stream, tag, &text, values).expect("values match their format");
            p.source = source;
            p
        })
}

fn encode(p: &Packet) -> Bytes {
    let mut out = BytesMut::new();
    p.encode_payload(&mut out);
    out.freeze()
}

proptest! {
    #[test]
    fn encode_then_decode_is_identity(p in packet()) {
        let wire = encode(&p);
        prop_assert_eq!(wire.len(), p.encoded_len());
        let back = Packet::decode_payload(p.stream, p.tag, &wire).expect("valid encoding decodes");
        prop_assert!(back.bitwise_eq(&p), "{:?} != {:?}", back, p);
        // Canonical form: re-encoding gives the same bytes.
        prop_assert_eq!(encode(&back), wire);
    }

    #[test]
    fn framed_packets_round_trip(ps in vec(packet(), 1..4)) {
        let mut out = BytesMut::new();
        for p in &ps {
            p.encode_frame(&mut out);
        }
        for p in &ps {
            let f = decode_frame(&mut out, 1 << 20).unwrap().expect("whole frame");
            let back = Packet::decode_payload(f.stream, f.tag, &f.payload).unwrap();
            prop_assert!(back.bitwise_eq(p));
        }
        prop_assert!(out.is_empty());
    }

    #[test]
    fn every_truncation_is_an_error(p in packet()) {
        let wire = encode(&p);
        for cut in 0..wire.len() {
            let r = Packet::decode_payload(0, 0, &wire.slice(..cut));
            prop_assert!(r.is_err(), "prefix of {} of {} bytes decoded", cut, wire.len());
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        let _ = Packet::decode_payload(0, 0, &Bytes::from(bytes.clone()));
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = decode_frame(&mut buf, 1 << 16) {}
    }

    /// Random value bytes behind a valid header and format reach the value decoders.
    #[test]
    fn random_values_never_panic(fields in vec(field(), 0..8), tail in vec(any::<u8>(), 0..256)) {
        let text: Vec<&str> = fields.iter().map(|f| f.token()).collect();
        let text = text.join(" ");
        let mut b = BytesMut::new();
        b.put_u32_le(1);
        b.put_u16_le(text.len() as u16);
        b.put_slice(text.as_bytes());
        b.put_slice(&tail);
        if let Ok(p) = Packet::decode_payload(0, 0, &b.freeze()) {
            let back = Packet::decode_payload(0, 0, &encode(&p)).unwrap();
            prop_assert!(back.bitwise_eq(&p));
        }
    }

    /// Corrupting one byte of a valid encoding: an error or a packet that re-encodes stably.
    #[test]
    fn corrupted_encodings_never_panic(p in packet(), at in any::<usize>(), byte in any::<u8>()) {
        let mut wire = encode(&p).to_vec();
        let i = at % wire.len();
        wire[i] = byte;
        match Packet::decode_payload(0, 0, &Bytes::from(wire)) {
            Ok(q) => {
                let back = Packet::decode_payload(0, 0, &encode(&q)).unwrap();
                prop_assert!(back.bitwise_eq(&q));
            }
            Err(e) => {
                // Errors always render (no panicking Display).
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }

    #[test]
    fn random_format_text_never_panics(text in "[%a-z \t\u{a0}é]{0,40}") {
        match vargr_wire::Format::parse(&text) {
            Ok(f) => prop_assert_eq!(vargr_wire::Format::parse(f.as_str()).unwrap(), f),
            Err(WireError::BadFormat { offset, .. }) => prop_assert!(offset <= text.len()),
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
        }
    }
}
