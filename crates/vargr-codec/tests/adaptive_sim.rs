//! The adaptive engine driven over simulated links, the way a codec stage would drive
//! it: decide, compress for real when told to, report the codec run and the transfer.
//!
//! Time is simulated, not measured: each codec has a fixed speed on the "machine" (so
//! that unoptimised test builds and a busy CI host give the same decisions), the link is
//! an exact Hockney model, and compressed sizes are real. The checks are the issue's:
//! on random data the engine stops compressing after warm-up, on compressible data at
//! 100 Mbit/s it compresses, and after the data changes it notices within a bounded
//! number of messages. Every run is repeated to show the decisions are deterministic.

use vargr_codec::{
    encode, testdata, Codec, CodecRun, ElemKind, Engine, EngineConfig, LinkKey, LinkModel, Reason,
};

const MSG_DOUBLES: usize = 8192; // 64 KiB messages
const PHASE: usize = 300;

/// Compression and decompression speed on the simulated machine, MB/s: roughly what
/// `examples/codec_table.rs` measures in release builds on compressible data.
fn machine_speed(codec: Codec) -> (f64, f64) {
    match codec {
        Codec::None => (f64::INFINITY, f64::INFINITY),
        Codec::Lz4 => (600.0, 2300.0),
        Codec::ShuffleLz4 => (1000.0, 2000.0),
        Codec::Zstd { .. } => (300.0, 800.0),
        Codec::ShuffleZstd { .. } => (800.0, 2000.0),
        Codec::Rle => (600.0, 30000.0),
        Codec::Rice => (600.0, 900.0),
        Codec::Huffman => (700.0, 320.0),
        Codec::Fpc { .. } => (400.0, 600.0),
    }
}

struct SimLink {
    latency_s: f64,
    bytes_per_s: f64,
}

impl SimLink {
    fn mbit(mbit_s: f64) -> SimLink {
        SimLink {
            latency_s: 100e-6,
            bytes_per_s: mbit_s * 1e6 / 8.0,
        }
    }

    fn time(&self, bytes: usize) -> f64 {
        self.latency_s + bytes as f64 / self.bytes_per_s
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Data {
    Floats,
    Random,
}

struct Buffers {
    floats: Vec<Vec<u8>>,
    random: Vec<Vec<u8>>,
}

impl Buffers {
    fn new() -> Buffers {
        Buffers {
            floats: (0..4)
                .map(|s| testdata::f64_bytes(&testdata::smooth_field_f64(MSG_DOUBLES, 0.0, s)))
                .collect(),
            random: (0..4)
                .map(|s| testdata::random_bytes(MSG_DOUBLES * 8, 100 + s))
                .collect(),
        }
    }

    fn get(&self, kind: Data, i: usize) -> &[u8] {
        match kind {
            Data::Floats => &self.floats[i % 4],
            Data::Random => &self.random[i % 4],
        }
    }
}

#[derive(Debug, PartialEq)]
struct Step {
    codec: Codec,
    reason: Reason,
    time_s: f64,
    raw_time_s: f64,
}

/// Sends one message per entry of `schedule` over `link`, returning what happened.
/// With `calibrate`, the link is first measured by a short ping-pong, as a stage does
/// when it opens a link; without, the engine starts from its prior (1 Gbit/s).
fn run(link: &SimLink, schedule: &[Data], bufs: &Buffers, calibrate: bool) -> Vec<Step> {
    let mut engine = Engine::new(EngineConfig::default()).unwrap();
    let key = LinkKey(1);
    if calibrate {
        let samples: Vec<(usize, f64)> = [8, 64, 4096, 65536, 1 << 20]
            .iter()
            .map(|&n| (n, link.time(n)))
            .collect();
        engine.set_link_model(key, LinkModel::from_calibration(&samples).unwrap());
    }
    let mut frame = Vec::new();
    let mut steps = Vec::with_capacity(schedule.len());
    for (i, &kind) in schedule.iter().enumerate() {
        let data = bufs.get(kind, i);
        let d = engine.decide(key, ElemKind::F64, data);
        let raw_time_s = link.time(data.len());
        let time_s = if d.compress() {
            frame.clear();
            encode(d.codec, ElemKind::F64, data, &mut frame);
            let (c, dc) = machine_speed(d.codec);
            let mb = data.len() as f64 / 1e6;
            let (tc, td) = (mb / c, mb / dc);
            engine.observe_sent(
                key,
                &CodecRun {
                    codec: d.codec,
                    elem: ElemKind::F64,
                    in_bytes: data.len(),
                    out_bytes: frame.len(),
                    compress_s: tc,
                    // The receiver reports its decompression time back.
                    decompress_s: Some(td),
                },
            );
            let wire = link.time(frame.len());
            engine.observe_transfer(key, frame.len(), wire);
            tc + wire + td
        } else {
            engine.observe_transfer(key, data.len(), raw_time_s);
            raw_time_s
        };
        steps.push(Step {
            codec: d.codec,
            reason: d.reason,
            time_s,
            raw_time_s,
        });
    }
    steps
}

fn compressed(steps: &[Step]) -> usize {
    steps.iter().filter(|s| s.codec != Codec::None).count()
}

fn first_compressed(steps: &[Step]) -> Option<usize> {
    steps.iter().position(|s| s.codec != Codec::None)
}

fn last_compressed(steps: &[Step]) -> Option<usize> {
    steps.iter().rposition(|s| s.codec != Codec::None)
}

/// How many messages after a change of data the engine may take to follow it: one
/// sample per candidate in turn (6 default candidates for f64) to start compressing,
/// and a few mistakes (3 by default) to stop.
const NOTICE_BOUND: usize = 32 * 6 + 1;
const STOP_BOUND: usize = 8;

#[test]
fn random_data_goes_raw_on_both_links() {
    let bufs = Buffers::new();
    for mbit in [100.0, 1000.0] {
        let steps = run(&SimLink::mbit(mbit), &[Data::Random; PHASE], &bufs, true);
        // Random data never compresses, not even while warming up: the study's samples
        // already show no gain.
        assert_eq!(compressed(&steps), 0, "{mbit} Mbit/s");
        assert_eq!(steps[0].reason, Reason::Studied);
        // Once the threshold is learned, messages of the same size skip the model.
        let fast = steps
            .iter()
            .filter(|s| s.reason == Reason::BelowRawThreshold)
            .count();
        assert!(
            fast > PHASE * 9 / 10,
            "{mbit} Mbit/s: {fast} fast decisions"
        );
    }
}

#[test]
fn compressible_floats_compress_at_100_mbit() {
    let bufs = Buffers::new();
    let link = SimLink::mbit(100.0);
    let schedule = [Data::Floats; PHASE];
    let steps = run(&link, &schedule, &bufs, true);
    assert_eq!(first_compressed(&steps), Some(0));
    assert_eq!(compressed(&steps), PHASE);
    let adaptive: f64 = steps.iter().map(|s| s.time_s).sum();
    let raw: f64 = steps.iter().map(|s| s.raw_time_s).sum();
    // Smooth doubles shrink only to about 0.77-0.82 (the low mantissa bits are noise to
    // every codec), so at best about 1.25 faster.
    assert!(raw / adaptive > 1.15, "speedup {}", raw / adaptive);
    // Within 5 % of the best fixed codec chosen in hindsight (the target).
    let (best, best_time) = EngineConfig::default()
        .candidates
        .f64
        .iter()
        .map(|&c| (c, fixed_time(&link, &schedule, &bufs, c)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    assert!(
        adaptive <= best_time * 1.05,
        "adaptive {adaptive} s, best fixed {best} {best_time} s"
    );
}

/// Total time of `schedule` with every message compressed by `codec`.
fn fixed_time(link: &SimLink, schedule: &[Data], bufs: &Buffers, codec: Codec) -> f64 {
    let mut frame = Vec::new();
    let mut total = 0.0;
    for (i, &kind) in schedule.iter().enumerate() {
        let data = bufs.get(kind, i);
        frame.clear();
        encode(codec, ElemKind::F64, data, &mut frame);
        let (c, dc) = machine_speed(codec);
        let mb = data.len() as f64 / 1e6;
        total += mb / c + link.time(frame.len()) + mb / dc;
    }
    total
}

#[test]
fn learns_an_uncalibrated_link_from_its_transfers() {
    // The prior says 1 Gbit/s, where the first message does not pay; the transfers
    // teach the model 100 Mbit/s, and the next sample lifts the raw threshold.
    let bufs = Buffers::new();
    let steps = run(&SimLink::mbit(100.0), &[Data::Floats; PHASE], &bufs, false);
    let first = first_compressed(&steps).expect("never compressed");
    assert!(first <= 32, "first compression at {first}");
    assert_eq!(compressed(&steps[first..]), PHASE - first);
}

#[test]
fn notices_when_the_data_changes() {
    let bufs = Buffers::new();
    let link = SimLink::mbit(100.0);
    let schedule: Vec<Data> = [Data::Floats, Data::Random, Data::Floats, Data::Random]
        .iter()
        .flat_map(|&k| std::iter::repeat_n(k, PHASE))
        .collect();
    let steps = run(&link, &schedule, &bufs, true);
    for (p, phase) in steps.chunks(PHASE).enumerate() {
        match schedule[p * PHASE] {
            Data::Floats => {
                // Compressible again: compressing within the bound, and from then on.
                let first = first_compressed(phase).expect("never compressed");
                assert!(
                    first <= NOTICE_BOUND,
                    "phase {p}: first compression at {first}"
                );
                assert_eq!(compressed(&phase[first..]), PHASE - first, "phase {p}");
            }
            Data::Random => {
                let stop = last_compressed(phase).map_or(0, |l| l + 1);
                assert!(stop <= STOP_BOUND, "phase {p}: compressed until {stop}");
            }
        }
    }
    // Never worse than sending everything raw, warm-up and mistakes included.
    let adaptive: f64 = steps.iter().map(|s| s.time_s).sum();
    let raw: f64 = steps.iter().map(|s| s.raw_time_s).sum();
    assert!(adaptive < raw, "adaptive {adaptive} s, raw {raw} s");
    // Two changes to random data are mistakes to learn from, not a reason to give up.
    assert!(steps.iter().all(|s| s.reason != Reason::Disabled));
}

#[test]
fn gigabit_is_never_worse_than_raw() {
    let bufs = Buffers::new();
    let link = SimLink::mbit(1000.0);
    let schedule: Vec<Data> = [Data::Floats, Data::Random, Data::Floats]
        .iter()
        .flat_map(|&k| std::iter::repeat_n(k, PHASE))
        .collect();
    let steps = run(&link, &schedule, &bufs, true);
    for (p, phase) in steps.chunks(PHASE).enumerate() {
        let adaptive: f64 = phase.iter().map(|s| s.time_s).sum();
        let raw: f64 = phase.iter().map(|s| s.raw_time_s).sum();
        assert!(adaptive <= raw * 1.03, "phase {p}: {adaptive} vs raw {raw}");
    }
    let random = &steps[PHASE..2 * PHASE];
    let stop = last_compressed(random).map_or(0, |l| l + 1);
    assert!(stop <= STOP_BOUND, "compressed random data until {stop}");
}

#[test]
fn decisions_are_deterministic() {
    let bufs = Buffers::new();
    let link = SimLink::mbit(100.0);
    let schedule: Vec<Data> = (0..400)
        .map(|i| {
            if (i / 70) % 2 == 0 {
                Data::Floats
            } else {
                Data::Random
            }
        })
        .collect();
    assert_eq!(
        run(&link, &schedule, &bufs, true),
        run(&link, &schedule, &bufs, true)
    );
    assert_eq!(
        run(&link, &schedule, &bufs, false),
        run(&link, &schedule, &bufs, false)
    );
}
