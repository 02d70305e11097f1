//! Seed inputs for every target, made with the crates' own encoders so that mutation
//! starts from bytes that pass the first checks and reaches the decoders' depths.
//!
//! `fuzz-run --make-corpus` writes them to `corpus/NAME/seed-*`; the files are kept in
//! the repository so that a change of an encoder does not silently change what CI
//! fuzzes. Where a crate keeps its encoder private (vargr-sync's frames, vargr-tbon's
//! answer entries) the few framing bytes are written here, following its layout.

use bytes::BytesMut;

type Seeds = Vec<(String, Vec<u8>)>;

/// A small deterministic byte pattern with runs and noise, compressible but not trivial.
fn pattern(n: usize, salt: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| {
            if (i / 16) % 3 == 0 {
                (salt % 7) as u8
            } else {
                (i.wrapping_mul(2_654_435_761).wrapping_add(salt) >> 13) as u8
            }
        })
        .collect()
}

pub fn codec_decode() -> Seeds {
    use vargr_codec::{encode_to_vec, Codec, ElemKind};
    let data = pattern(256, 1);
    let mut out = Vec::new();
    for (i, codec) in Codec::CATALOG.into_iter().enumerate() {
        let elem = ElemKind::ALL[i % ElemKind::ALL.len()];
        out.push((
            format!("{codec}-{elem:?}"),
            encode_to_vec(codec, elem, &data),
        ));
    }
    // Smooth doubles behind 12 raw bytes: the span layout, and the numeric codecs
    // (FPC, Rice, shuffles) on data they compress well.
    let mut doubles: Vec<u8> = b"twelve bytes".to_vec();
    for i in 0..128 {
        doubles.extend_from_slice(&(1000.0 + f64::from(i) * 0.125).to_le_bytes());
    }
    for codec in Codec::CATALOG {
        let mut f = Vec::new();
        vargr_codec::encode_span(codec, ElemKind::F64, &doubles, 12..doubles.len(), &mut f);
        out.push((format!("{codec}-F64-span"), f));
    }
    out
}

pub fn codec_report() -> Seeds {
    use vargr_codec::report::{encode_reports, DecodeReport};
    use vargr_codec::{CodecId, ElemKind};
    let records: Vec<DecodeReport> = CodecId::ALL
        .iter()
        .zip(ElemKind::ALL.iter().cycle())
        .enumerate()
        .map(|(i, (&codec, &elem))| DecodeReport {
            codec,
            elem,
            bytes: 1000 * i as u64,
            nanos: 77 * i as u64,
        })
        .collect();
    let mut all = Vec::new();
    encode_reports(&records, &mut all);
    let mut one = Vec::new();
    encode_reports(&records[..1], &mut one);
    vec![("all".into(), all), ("one".into(), one)]
}

pub fn codec_trace() -> Seeds {
    use vargr_codec::guided::{encode_sample, trace_header, MessageKey, Sample};
    use vargr_codec::ElemKind;
    let mut t = trace_header().to_vec();
    for (i, elem) in [ElemKind::U8, ElemKind::F32, ElemKind::I64]
        .into_iter()
        .enumerate()
    {
        let payload = pattern(40 * (i + 1), i as u32);
        let key = MessageKey {
            kind: i as u8,
            elem,
            stream: 3,
            tag: -(i as i32),
            len: payload.len() as u32,
        };
        encode_sample(&Sample { key, payload }, &mut t);
    }
    vec![("three-samples".into(), t)]
}

pub fn decode_frame() -> Seeds {
    use vargr_wire::{Packet, Value};
    let packets = [
        Packet::new(1, 7, "%d %s", vec![Value::Int(-3), Value::Str("hi".into())]),
        Packet::new(
            2,
            -1,
            "%alf %aud",
            vec![
                Value::DoubleArray(vec![1.5, -0.0, f64::NAN]),
                Value::UIntArray(vec![1, 2, 3]),
            ],
        ),
        Packet::new(
            3,
            0,
            "%as %b",
            vec![
                Value::StrArray(vec!["a".into(), String::new()]),
                Value::Raw(bytes::Bytes::from_static(b"raw")),
            ],
        ),
        Packet::new(4, 9, "%af", vec![Value::FloatArray(vec![0.25; 16])]),
    ];
    let mut out = Vec::new();
    let mut stream = BytesMut::new();
    for (i, p) in packets.into_iter().enumerate() {
        let p = p.expect("a valid seed packet");
        let mut one = BytesMut::new();
        p.encode_frame(&mut one);
        stream.extend_from_slice(&one);
        out.push((format!("packet-{i}"), one.to_vec()));
    }
    out.push(("stream".into(), stream.to_vec()));
    out
}

pub fn dedup_delta() -> Seeds {
    // The target reads a head byte h: base = the next 4h bytes, output length 37h % 3001.
    let mut out = Vec::new();
    for head in [20u8, 60, 200] {
        let len = usize::from(head) * 37 % 3001;
        let base = pattern(usize::from(head) * 4, u32::from(head));
        let mut target = base.clone();
        target.resize(len, 9);
        target.rotate_left(len / 5);
        let mut d = Vec::new();
        vargr_dedup::delta::encode(&base, &target, &mut d);
        let mut input = vec![head];
        input.extend_from_slice(&base);
        input.extend_from_slice(&d);
        out.push((format!("head-{head}"), input));
    }
    out
}

pub fn dedup_layout() -> Seeds {
    use vargr_dedup::segment::Shape;
    // The target cuts its input after a pick byte: a third layout, then segments of 7
    // bytes. Real cuts rarely have that shape, so the segments are padded or cut to it.
    let data = pattern(1024, 5);
    let shapes = [
        Shape::Bytes,
        Shape::Bytes,
        Shape::Bytes,
        Shape::Grid {
            dims: vec![16, 16],
            elem_size: 4,
        },
        Shape::Bytes,
        Shape::Grid {
            dims: vec![4, 8, 8],
            elem_size: 4,
        },
    ];
    let mut out = Vec::new();
    for (pick, (spec, shape)) in crate::dedup_layout::SPECS.iter().zip(shapes).enumerate() {
        let seg = vargr_dedup::by_name(spec).expect("a valid segmenter spec");
        let Ok(cut) = seg.cut(&data, &shape) else {
            continue;
        };
        let mut body: Vec<u8> = cut.segments.concat();
        body.resize(2 * cut.layout.len(), 0);
        let mut input = vec![pick as u8];
        input.extend_from_slice(&cut.layout);
        input.extend_from_slice(&body);
        out.push((spec.to_string(), input));
    }
    out
}

pub fn dedup_protocol() -> Seeds {
    use crate::dedup_protocol::{seed_segment, seeded_sender};
    // What a sender says after its hello: messages that repeat the seed segments (sent
    // as fingerprints), change them slightly (sent as deltas), and new ones (raw).
    let (mut tx, _) = seeded_sender();
    let seed = seed_segment();
    let mut near = seed.clone();
    near[100] ^= 1;
    tx.send_message(1, b"l", &[b"seed segment", &seed]).unwrap();
    tx.send_message(2, b"m", &[&near, b"fresh bytes"]).unwrap();
    tx.flush();
    let mut body = Vec::new();
    tx.take_output(&mut body);
    let mut cut_early = vec![7u8];
    cut_early.extend_from_slice(&body);
    vec![("messages".into(), body), ("cut-at-7".into(), cut_early)]
}

pub fn link_seal() -> Seeds {
    use vargr_net::auth::{Acceptor, Connector, Secret};
    use vargr_net::seal::Session;
    use vargr_net::Protection;
    use vargr_wire::{encode_frame, Frame, FrameKind};
    // The target's handshake uses the secret of 32 bytes 0x03.
    let secret = Secret::from_hex(&"03".repeat(32)).expect("a valid secret");
    let (acc, challenge) = Acceptor::new(secret.clone(), Protection::Mac);
    let mut con = Connector::new(secret, 1, Protection::Mac);
    let proof = con.on_challenge(&challenge).expect("own challenge");
    let welcome = acc
        .on_proof(&proof)
        .map_err(|e| e.0)
        .expect("own proof")
        .welcome;
    let frame = |f: &Frame| {
        let mut b = BytesMut::new();
        encode_frame(f, &mut b);
        b.to_vec()
    };
    let data = [
        Frame::new(FrameKind::Data, 1, 2, pattern(50, 2)),
        Frame::new(FrameKind::Data, 0, -1, Vec::new()),
    ];
    let (mut sealer, _) = Session::unprotected().split();
    let mut sealed = BytesMut::new();
    for f in &data {
        sealer.seal_frame(f, &mut sealed);
    }
    vec![
        ("challenge".into(), frame(&challenge)),
        ("proof".into(), frame(&proof)),
        ("welcome".into(), frame(&welcome)),
        (
            "plain-frames".into(),
            [frame(&data[0]), frame(&data[1])].concat(),
        ),
        ("sealed-none".into(), sealed.to_vec()),
    ]
}

/// A small trace file of two threads.
pub fn sample_trace() -> vargr_trace::TraceFile {
    use vargr_trace::{Alignment, Calibration, ClockPoint, Record, ThreadTrace, TraceFile};
    let rec = |i: u64| Record {
        start: 100 * i,
        end: 100 * i + 40,
        seq: i as u32,
        bytes: 8,
        collector: (i % 2) as u16,
        op: 1,
        status: 0,
        peer: 1,
    };
    TraceFile {
        process: "ranks 0..2".into(),
        host: "h".into(),
        pid: 7,
        clock: Calibration {
            first: ClockPoint { tick: 0, ns: 100 },
            last: ClockPoint {
                tick: 1000,
                ns: 600,
            },
        },
        align: Alignment::default(),
        usage: None,
        collectors: vec!["coll/allreduce".into(), "net/send".into()],
        threads: vec![
            ThreadTrace {
                label: "rank 0".into(),
                rank: Some(0),
                lost: 3,
                records: (0..3).map(rec).collect(),
            },
            ThreadTrace {
                label: "rank 1".into(),
                rank: Some(1),
                lost: 0,
                records: (3..5).map(rec).collect(),
            },
        ],
    }
}

fn replies() -> Vec<(&'static str, vargr_trace::scope::Reply)> {
    use vargr_trace::scope::{CallSummary, Count, Reduced, Reply};
    let counts = Reduced {
        process: "ranks 0..2".into(),
        host: "h".into(),
        records: 5,
        lost: 0,
        collectors: vec!["coll/allreduce".into()],
        clock_error_ns: 10,
        sample: 0,
        body: vec![Count {
            collector: "coll/allreduce".into(),
            peer: Some(1),
            seq: None,
            events: 4,
            bytes: 32,
            busy_ns: 900,
            max_ns: 400,
        }],
    };
    // Call summaries travel in binary after a JSON head.
    let calls = Reduced {
        process: "rank 1 of 2".into(),
        host: "h".into(),
        records: 3,
        lost: 0,
        collectors: vec!["ctx0/allreduce".into()],
        clock_error_ns: 10,
        sample: 4,
        body: (0..3)
            .map(|i| CallSummary {
                collector: 0,
                seq: i * 4,
                ranks: 1,
                first_arrival_ns: 100,
                last_arrival_ns: 100,
                last_rank: 1,
                last_departure_ns: 150,
            })
            .collect(),
    };
    vec![
        ("records", Reply::Records(sample_trace())),
        ("counts", Reply::Counts(counts)),
        ("calls", Reply::Calls(calls)),
    ]
}

/// A trace file's bytes without their checksum, which the targets add back (see
/// [`crate::trace_decode::with_checksum`]).
fn unsealed(mut file: Vec<u8>) -> Vec<u8> {
    file.truncate(file.len() - 32);
    file
}

pub fn monitor_reply() -> Seeds {
    let mut out: Seeds = replies()
        .into_iter()
        .map(|(n, r)| (n.to_string(), r.encode()))
        .collect();
    out.push(("records-unsealed".into(), unsealed(out[0].1.clone())));
    out
}

pub fn monitor_gather() -> Seeds {
    // Answers as interior agents send them: one process's reply, and two processes'
    // merged with a missing agent; and a plain reply, which a leaf sends.
    let mut merged = vargr_coll::gather::Gathered::default();
    for (_, r) in replies() {
        merged.merge(vargr_coll::gather::Gathered::of(r));
    }
    merged.missing.push("agent of rank 5".into());
    let (_, first) = replies().swap_remove(0);
    vec![
        ("merged".into(), merged.encode()),
        (
            "one".into(),
            vargr_coll::gather::Gathered::of(first.clone()).encode(),
        ),
        ("plain".into(), first.encode()),
    ]
}

pub fn tbon_monitor() -> Seeds {
    // Entries as vargr-tbon's `push_entry` lays them out: node, length (u32::MAX for a
    // node that did not answer), the reply's bytes.
    let mut all = Vec::new();
    for (node, (_, r)) in replies().into_iter().take(2).enumerate() {
        let b = r.encode();
        all.extend_from_slice(&(node as u32).to_le_bytes());
        all.extend_from_slice(&(b.len() as u32).to_le_bytes());
        all.extend_from_slice(&b);
    }
    all.extend_from_slice(&9u32.to_le_bytes());
    all.extend_from_slice(&u32::MAX.to_le_bytes());
    vec![("two-replies-one-missing".into(), all)]
}

pub fn trace_decode() -> Seeds {
    let mut empty = sample_trace();
    empty.threads.clear();
    vec![
        ("two-threads".into(), sample_trace().encode()),
        (
            "two-threads-unsealed".into(),
            unsealed(sample_trace().encode()),
        ),
        ("no-threads".into(), empty.encode()),
    ]
}

pub fn tbon_clock() -> Seeds {
    use vargr_tbon::clock::{Pong, ReportMsg, SetMsg};
    use vargr_trace::Alignment;
    let align = Alignment {
        offset_ns: -1234,
        error_ns: 56,
        hops: 2,
        aligned: true,
    };
    vec![
        (
            "pong".into(),
            Pong {
                child_ns: 123_456_789,
                pid: 42,
            }
            .encode(),
        ),
        (
            "set".into(),
            SetMsg {
                align,
                same_process: false,
            }
            .encode(),
        ),
        ("report".into(), ReportMsg { node: 3, align }.encode()),
    ]
}

pub fn sync_frames() -> Seeds {
    use vargr_sync::zpieces::PieceEncoder;
    // vargr-sync writes its preamble and frames with crate-private functions; the layout
    // (frame.rs) is the magic VARGRSYN, a u32 length and JSON; frames are a kind byte,
    // a u32 length and the body.
    let frame = |kind: u8, body: &[u8]| {
        let mut f = vec![kind];
        f.extend_from_slice(&(body.len() as u32).to_le_bytes());
        f.extend_from_slice(body);
        f
    };
    let json = format!(
        r#"{{"version":{},"sender":"host-a","dest":"sub/dir","fp_bits":40,"group":20}}"#,
        vargr_sync::PROTOCOL_VERSION
    );
    let mut preamble = b"VARGRSYN".to_vec();
    preamble.extend_from_slice(&(json.len() as u32).to_le_bytes());
    preamble.extend_from_slice(json.as_bytes());
    let replies = [
        r#"{"type":"hello","receiver":"host-b"}"#,
        r#"{"type":"have","indices":[0,2]}"#,
        r#"{"type":"failed","index":1,"error":"hash mismatch"}"#,
        r#"{"type":"result","files_written":2,"bytes_written":300,"failed":1}"#,
    ];
    let mut replies: Vec<u8> = replies
        .iter()
        .flat_map(|r| frame(2, r.as_bytes()))
        .collect();
    // A control message with a manifest, whose paths the target checks.
    let entry = |path: &str, kind| vargr_sync::Entry {
        path: path.into(),
        kind,
        size: 3,
        mode: 0o644,
        mtime_ns: 1,
    };
    let manifest = vargr_sync::Manifest {
        name: "tree".into(),
        single_file: false,
        entries: vec![
            entry("d", vargr_sync::Kind::Dir),
            entry("d/f", vargr_sync::Kind::File),
            entry(
                "l",
                vargr_sync::Kind::Symlink {
                    target: "d/f".into(),
                },
            ),
        ],
    };
    let control = serde_json::json!({ "type": "manifest", "manifest": manifest });
    replies.extend(frame(
        2,
        &serde_json::to_vec(&control).expect("serializable"),
    ));
    let mut z = PieceEncoder::new(1).expect("a zstd encoder");
    let mut pieces = Vec::new();
    for i in 0..3 {
        let piece = z.piece(&pattern(300, i)).expect("compresses");
        pieces.extend(frame(1, &piece));
    }
    vec![
        ("preamble".into(), preamble),
        ("replies".into(), replies),
        ("zstd-pieces".into(), pieces),
    ]
}

/// Two files of a real job (`vargr run -n 4 --ranks-per-process 2 --trace DIR --
/// vargr coll-check`, kept in `seeds/`), and the small sample, without checksums.
pub fn trace_report() -> Seeds {
    let job: [&[u8]; 2] = [
        include_bytes!("../seeds/coll-check-0.vtr"),
        include_bytes!("../seeds/coll-check-2.vtr"),
    ];
    let job: Vec<u8> = job.iter().flat_map(|f| unsealed(f.to_vec())).collect();
    vec![
        ("coll-check-job".into(), job),
        ("sample".into(), unsealed(sample_trace().encode())),
    ]
}

pub fn rfb_decode() -> Seeds {
    use vargr_rfb::encoding::{HEXTILE, RAW, RRE, ZRLE};
    use vargr_rfb::{
        ClientMsg, Encoder, Framebuffer, PixelFormat, ProtocolVersion, Rect, SecurityResult,
        ServerInit, ServerMsg,
    };
    let mut out: Seeds = Vec::new();
    let with = |pick: u8, build: &dyn Fn(&mut BytesMut)| {
        let mut b = BytesMut::new();
        b.extend_from_slice(&[pick]);
        build(&mut b);
        b.to_vec()
    };
    // Viewer messages.
    let msgs = [
        ClientMsg::SetPixelFormat(PixelFormat::RGB565),
        ClientMsg::SetEncodings(vec![ZRLE, HEXTILE, RAW, -223]),
        ClientMsg::FramebufferUpdateRequest {
            incremental: true,
            x: 0,
            y: 0,
            width: 64,
            height: 48,
        },
        ClientMsg::KeyEvent {
            down: true,
            key: 0x61,
        },
        ClientMsg::PointerEvent {
            buttons: 1,
            x: 10,
            y: 20,
        },
        ClientMsg::ClientCutText(b"copied".to_vec()),
    ];
    out.push((
        "client-messages".into(),
        with(0, &|b| msgs.iter().for_each(|m| m.encode(b))),
    ));
    // Server updates in each encoding and pixel format of the target.
    let mut fb = Framebuffer::new(64, 48);
    for y in 0..48u16 {
        for x in 0..64u16 {
            let c = if (x / 8 + y / 8) % 2 == 0 {
                0x00ff_2040
            } else {
                u32::from(x) * 0x0401
            };
            fb.fill_rect(x, y, 1, 1, c).expect("inside");
        }
    }
    for (i, pf) in crate::rfb_decode::FORMATS.iter().enumerate() {
        for (name, enc) in [
            ("raw", RAW),
            ("rre", RRE),
            ("hextile", HEXTILE),
            ("zrle", ZRLE),
        ] {
            let mut e = Encoder::new();
            let rects = vec![
                e.encode(&fb, enc, 0, 0, 64, 24, pf).expect("encodes"),
                e.encode(&fb, enc, 8, 24, 40, 24, pf).expect("encodes"),
                Rect::copy_rect(0, 0, 16, 16, 32, 8),
            ];
            let msg = ServerMsg::FramebufferUpdate(rects);
            out.push((
                format!("update-{name}-{i}"),
                with(1 + 4 * i as u8, &|b| msg.encode(b)),
            ));
        }
    }
    // A server's handshake as a viewer sees it: version, VNC authentication offered,
    // a challenge, success, ServerInit.
    out.push((
        "server-handshake".into(),
        with(2, &|b| {
            ProtocolVersion::V3_8.encode(b);
            b.extend_from_slice(&[1, 2]);
            b.extend_from_slice(&[9; 16]);
            SecurityResult::Ok.encode(ProtocolVersion::V3_8, b);
            ServerInit {
                width: 64,
                height: 48,
                pixel_format: PixelFormat::RGB888,
                name: b"desk".to_vec(),
            }
            .encode(b);
        }),
    ));
    // A viewer's side: version, the security choice, a response, ClientInit, messages.
    out.push((
        "client-handshake".into(),
        with(3, &|b| {
            ProtocolVersion::V3_8.encode(b);
            b.extend_from_slice(&[2]);
            b.extend_from_slice(&vargr_rfb::vnc_auth_response(b"secret", &[7; 16]));
            b.extend_from_slice(&[1]);
            msgs.iter().for_each(|m| m.encode(b));
        }),
    ));
    out
}

pub fn mpi_frame() -> Seeds {
    use vargr_codec::{Codec, ElemKind};
    use vargr_mpi::compress::write_frame;
    let doubles: Vec<u8> = (0..512)
        .flat_map(|i| (f64::from(i % 50) * 0.5).to_le_bytes())
        .collect();
    let mut out = Vec::new();
    for (name, codec, elem) in [
        ("lz4", Codec::Lz4, ElemKind::F64),
        ("fpc", Codec::Fpc { table_bits: 16 }, ElemKind::F64),
        ("stored", Codec::None, ElemKind::BYTES),
    ] {
        let mut f = Vec::new();
        write_frame(codec, elem, &doubles, &mut f);
        // Padded, as frames below the threshold are.
        f.resize(f.len() + 64, 0);
        out.push((name.to_string(), f));
    }
    out
}

pub fn vnc_proxy() -> Seeds {
    use vargr_rfb::ClientMsg;
    use vargr_vnc::{ProxyMsg, Region};
    let msgs = [
        ProxyMsg::Init {
            width: 64,
            height: 48,
            name: b"desk".to_vec(),
        },
        ProxyMsg::Update(vec![Region {
            x: 4,
            y: 4,
            width: 8,
            height: 2,
            pixels: (0..16).map(|i| i * 0x0001_0203).collect(),
        }]),
        ProxyMsg::Resize {
            width: 32,
            height: 32,
        },
        ProxyMsg::Bell,
        ProxyMsg::CutText(b"copied".to_vec()),
    ];
    let to_near = |pick: u8| {
        let mut b = BytesMut::new();
        b.extend_from_slice(&[pick]);
        msgs.iter().for_each(|m| m.encode(&mut b));
        b.to_vec()
    };
    let mut to_far = BytesMut::new();
    to_far.extend_from_slice(&[2]);
    for m in [
        ProxyMsg::Request {
            x: 0,
            y: 0,
            width: 64,
            height: 48,
        },
        ProxyMsg::Input(ClientMsg::KeyEvent {
            down: true,
            key: 0x61,
        }),
        ProxyMsg::Input(ClientMsg::PointerEvent {
            buttons: 1,
            x: 3,
            y: 4,
        }),
    ] {
        m.encode(&mut to_far);
    }
    // The same messages through the dedup link, and what the near end answers.
    let config = crate::vnc_proxy::link_config();
    let mut far_link = vargr_vnc::FarLink::new(&config, crate::vnc_proxy::cache()).unwrap();
    for m in &msgs {
        far_link.send(m).unwrap();
    }
    far_link.flush().unwrap();
    // An update of one changed tile in a flat screen goes plain and teaches.
    let region = |x: u16, w: u16, h: u16, px: u32| Region {
        x,
        y: 0,
        width: w,
        height: h,
        pixels: vec![px; w as usize * h as usize],
    };
    let mut changed = region(0, 4, 4, 0x203040);
    changed.pixels[5] = 0xffffff;
    far_link
        .send_outgoing(&vargr_vnc::Outgoing::Choice {
            regions: vec![region(0, 16, 32, 0x203040), region(16, 16, 32, 0x203040)],
            changed: vec![changed],
            horizontal: false,
        })
        .unwrap();
    far_link.flush().unwrap();
    let frames = far_link.take_output();
    let mut near_link = vargr_vnc::NearLink::new(&config, crate::vnc_proxy::cache()).unwrap();
    near_link.receive(&frames).unwrap();
    near_link.send_control(&to_far[1..]);
    let mut link_to_near = vec![3];
    link_to_near.extend_from_slice(&frames);
    let mut link_to_far = vec![4];
    link_to_far.extend_from_slice(&near_link.take_output());
    let mut rec = vargr_vnc::RecordWriter::new(vec![5]).unwrap();
    for (k, m) in msgs.iter().enumerate() {
        rec.write(std::time::Duration::from_millis(10 * k as u64), m)
            .unwrap();
    }
    vec![
        ("messages".into(), to_near(0)),
        ("to-near".into(), to_near(1)),
        ("to-far".into(), to_far.to_vec()),
        ("link-to-near".into(), link_to_near),
        ("link-to-far".into(), link_to_far),
        ("recording".into(), rec.finish().unwrap()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Seeds that the decoders refuse would only fuzz the first check.
    #[test]
    fn seeds_decode() {
        for (n, b) in trace_decode() {
            let b = if n.ends_with("unsealed") {
                crate::trace_decode::with_checksum(&b)
            } else {
                b
            };
            vargr_trace::TraceFile::decode(&b, Path::new(&n)).unwrap();
        }
        for (n, b) in monitor_reply() {
            let b = if n.ends_with("unsealed") {
                [&b"R"[..], &crate::trace_decode::with_checksum(&b[1..])].concat()
            } else {
                b
            };
            vargr_trace::scope::Reply::decode(&b, &n).unwrap();
        }
        // The job's files in seeds/ are of the current format (else write them again
        // with the command on `trace_report`).
        for (n, b) in trace_report() {
            for p in crate::trace_report::pieces(&b) {
                let p = crate::trace_decode::with_checksum(p);
                vargr_trace::TraceFile::decode(&p, Path::new(&n)).unwrap();
            }
        }
        let (_, answers) = &tbon_monitor()[0];
        assert_eq!(
            vargr_tbon::monitor::decode_answers(answers, "t")
                .unwrap()
                .len(),
            3
        );
        for (n, b) in codec_decode() {
            let mut out = Vec::new();
            vargr_codec::decode(&b, 1 << 16, &mut out).unwrap_or_else(|e| panic!("{n}: {e}"));
            if n.ends_with("span") {
                assert!(
                    out.len() == 12 + 128 * 8 && out.starts_with(b"twelve"),
                    "{n}"
                );
            } else {
                assert_eq!(out, pattern(256, 1), "{n}");
            }
        }
        assert_eq!(
            vargr_codec::report::decode_reports(&codec_report()[0].1)
                .unwrap()
                .len(),
            9
        );
        let samples = vargr_codec::guided::decode_trace(&codec_trace()[0].1, "t").unwrap();
        assert_eq!(samples.len(), 3);
        for (n, b) in decode_frame() {
            let mut buf = BytesMut::from(&b[..]);
            let f = vargr_wire::decode_frame(&mut buf, 1 << 20)
                .unwrap()
                .unwrap();
            vargr_wire::Packet::decode_payload(f.stream, f.tag, &f.payload)
                .unwrap_or_else(|e| panic!("{n}: {e}"));
        }
        for (n, b) in dedup_delta() {
            let head = usize::from(b[0]);
            let (base, d) = b[1..].split_at(head * 4);
            vargr_dedup::delta::decode(base, d, head * 37 % 3001)
                .unwrap_or_else(|e| panic!("{n}: {e}"));
        }
        for (n, b) in tbon_clock() {
            use vargr_tbon::clock::{Pong, ReportMsg, SetMsg};
            let ok = Pong::decode(&b).is_ok()
                || SetMsg::decode(&b).is_ok()
                || ReportMsg::decode(&b).is_ok();
            assert!(ok, "{n}");
        }
    }

    /// The corpus in the repository is what the generators make: after an encoder
    /// changes (a format version bump), stale seeds would fuzz only the refusal of old
    /// bytes. `fuzz-run --make-corpus` rewrites them.
    #[test]
    fn the_kept_corpus_holds_the_current_seeds() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        for t in crate::TARGETS {
            // Handshake seeds hold fresh random nonces: only their presence is checked.
            let again = (t.seeds)();
            for (name, bytes) in (t.seeds)() {
                let path = root
                    .join(t.name)
                    .join(format!("seed-{}", crate::file_name(&name)));
                let kept = std::fs::read(&path).unwrap_or_else(|e| {
                    panic!("{}: {e} (run fuzz-run --make-corpus)", path.display())
                });
                let random = !again.contains(&(name, bytes.clone()));
                assert!(
                    random || kept == bytes,
                    "{} is stale: run fuzz-run --make-corpus",
                    path.display()
                );
            }
        }
    }
}
