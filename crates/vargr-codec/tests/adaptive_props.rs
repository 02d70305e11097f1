//! Properties of the adaptive engine under arbitrary observations: it never compresses
//! where its own model predicts no gain, never compresses on a same-host link, never
//! panics whatever the caller reports (NaN times, zero sizes, absurd ratios), and on a
//! link where no codec can pay it never compresses at all.

use proptest::prelude::*;
use vargr_codec::{
    testdata, Codec, CodecRun, ElemKind, Engine, EngineConfig, LinkKey, LinkModel, LinkOptions,
};

#[derive(Debug, Clone)]
enum Op {
    Transfer {
        link: u64,
        bytes: usize,
        seconds: f64,
    },
    Codec {
        codec: Codec,
        elem: ElemKind,
        in_bytes: usize,
        out_bytes: usize,
        compress_s: f64,
        decompress_s: Option<f64>,
    },
    Send {
        link: u64,
        elem: ElemKind,
        data: u8,
        len: usize,
        seed: u64,
        /// How the compression that follows a "compress" decision went: its output
        /// as a fraction of the input, and its time per byte.
        out_frac: f64,
        s_per_byte: f64,
    },
}

fn seconds() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0..0.5f64,
        1 => Just(0.0),
        1 => Just(f64::NAN),
        1 => Just(-1.0),
        1 => Just(f64::INFINITY),
        1 => 1e-9..1e-6f64,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let codec = prop::sample::select(Codec::CATALOG.to_vec());
    let elem = prop::sample::select(ElemKind::ALL.to_vec());
    prop_oneof![
        1 => (0..3u64, 0..(4usize << 20), seconds()).prop_map(|(link, bytes, seconds)| {
            Op::Transfer {
                link,
                bytes,
                seconds,
            }
        }),
        1 => (
            codec,
            elem.clone(),
            0..(1usize << 20),
            0..(2usize << 20),
            seconds(),
            prop::option::of(seconds())
        )
            .prop_map(|(codec, elem, in_bytes, out_bytes, compress_s, decompress_s)| {
                Op::Codec {
                    codec,
                    elem,
                    in_bytes,
                    out_bytes,
                    compress_s,
                    decompress_s,
                }
            }),
        4 => (0..3u64, elem, 0..4u8, 0..20_000usize, any::<u64>(), 0.0..1.5f64, 0.0..1e-7f64)
            .prop_map(|(link, elem, data, len, seed, out_frac, s_per_byte)| Op::Send {
                link,
                elem,
                data,
                len,
                seed,
                out_frac,
                s_per_byte,
            }),
    ]
}

fn make_data(kind: u8, len: usize, seed: u64) -> Vec<u8> {
    match kind {
        0 => testdata::random_bytes(len, seed),
        1 => vec![0; len],
        2 => {
            let mut v = testdata::f64_bytes(&testdata::smooth_field_f64(len / 8 + 1, 0.0, seed));
            v.truncate(len);
            v
        }
        _ => testdata::runs_u8(len, seed),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn never_compresses_where_the_model_says_it_does_not_pay(
        ops in prop::collection::vec(op(), 1..60)
    ) {
        let mut engine = Engine::new(EngineConfig::default()).unwrap();
        // Sizes already compressed go on down to keep_speedup; nothing goes below it.
        let keep_speedup = engine.config().keep_speedup;
        engine.set_link_options(LinkKey(2), LinkOptions { same_host: true, compress_same_host: false });
        for op in ops {
            match op {
                Op::Transfer { link, bytes, seconds } => {
                    engine.observe_transfer(LinkKey(link), bytes, seconds);
                }
                Op::Codec { codec, elem, in_bytes, out_bytes, compress_s, decompress_s } => {
                    engine.observe_codec(&CodecRun {
                        codec, elem, in_bytes, out_bytes, compress_s, decompress_s,
                    });
                }
                Op::Send { link, elem, data, len, seed, out_frac, s_per_byte } => {
                    let bytes = make_data(data, len, seed);
                    let d = engine.decide(LinkKey(link), elem, &bytes);
                    if !d.compress() {
                        continue;
                    }
                    prop_assert!(link != 2, "compressed on a same-host link");
                    prop_assert!(d.codec.supports(elem));
                    let p = engine
                        .predict(LinkKey(link), elem, d.codec, bytes.len())
                        .expect("a chosen codec has a ratio estimate");
                    prop_assert!(
                        p.pays(keep_speedup),
                        "{} chosen for {} bytes of {elem} but predicted {p:?}",
                        d.codec, bytes.len()
                    );
                    engine.observe_sent(LinkKey(link), &CodecRun {
                        codec: d.codec,
                        elem,
                        in_bytes: bytes.len(),
                        out_bytes: (bytes.len() as f64 * out_frac) as usize,
                        compress_s: bytes.len() as f64 * s_per_byte,
                        decompress_s: None,
                    });
                }
            }
        }
    }

    #[test]
    fn never_compresses_on_a_link_faster_than_every_codec(
        sends in prop::collection::vec((0..4u8, 2048..40_000usize, any::<u64>(),
                                        prop::sample::select(ElemKind::ALL.to_vec())), 1..40)
    ) {
        let mut engine = Engine::new(EngineConfig::default()).unwrap();
        let link = LinkKey(0);
        // 10 GB/s with 2 µs latency: memory speed, faster than any codec's round trip
        // even at the best ratio (every codec's prior is at most 500 MB/s).
        engine.set_link_model(link, LinkModel::new(2e-6, 10e9));
        for (kind, len, seed, elem) in sends {
            let data = make_data(kind, len, seed);
            let d = engine.decide(link, elem, &data);
            prop_assert!(!d.compress(), "{} on {len} bytes of {elem}", d.codec);
        }
    }
}

#[test]
fn same_host_links_compress_only_when_asked() {
    let mut engine = Engine::new(EngineConfig::default()).unwrap();
    let field = testdata::f64_bytes(&testdata::smooth_field_f64(16_384, 0.0, 1));
    let slow = LinkModel::new(1e-3, 1e6);
    for (link, compress_same_host) in [(LinkKey(1), false), (LinkKey(2), true)] {
        engine.set_link_model(link, slow.clone());
        engine.set_link_options(
            link,
            LinkOptions {
                same_host: true,
                compress_same_host,
            },
        );
        let d = engine.decide(link, ElemKind::F64, &field);
        assert_eq!(d.compress(), compress_same_host, "{link:?}");
    }
}

#[test]
fn small_messages_go_raw() {
    let mut engine = Engine::new(EngineConfig::default()).unwrap();
    engine.set_link_model(LinkKey(0), LinkModel::new(1e-3, 1e6));
    let zeros = vec![0u8; 2047];
    let d = engine.decide(LinkKey(0), ElemKind::BYTES, &zeros);
    assert_eq!(d.reason, vargr_codec::Reason::TooSmall);
    let d = engine.decide(LinkKey(0), ElemKind::BYTES, &[0u8; 2048]);
    assert!(d.compress());
}

#[test]
fn gives_up_when_studies_come_too_often() {
    // Every other compression pays handsomely and every other one not at all (the data
    // flips under the engine): mistakes keep coming, each group of them forces a study,
    // and the engine must stop trying (the seed's Figure 4.14(c)).
    let mut engine = Engine::new(EngineConfig::default()).unwrap();
    let link = LinkKey(0);
    engine.set_link_model(link, LinkModel::new(1e-3, 1e6));
    let data = vec![0u8; 8192];
    let mut compressed_after = 0;
    let mut sent = 0;
    for i in 0..2000 {
        let d = engine.decide(link, ElemKind::BYTES, &data);
        if d.compress() {
            if i >= 200 {
                compressed_after += 1;
            }
            sent += 1;
            engine.observe_sent(
                link,
                &CodecRun {
                    codec: d.codec,
                    elem: ElemKind::BYTES,
                    in_bytes: data.len(),
                    out_bytes: if sent % 2 == 1 { 40 } else { data.len() },
                    compress_s: 1e-5,
                    decompress_s: Some(1e-5),
                },
            );
        }
    }
    let s = engine.summary(link, ElemKind::BYTES).unwrap();
    assert!(s.forced_studies >= 5, "{s:?}");
    assert!(s.disabled, "{s:?}");
    assert_eq!(compressed_after, 0);
}
