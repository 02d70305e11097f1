//! Property tests: every message type survives encode → decode, every prefix of a
//! message is "incomplete" (never an error, nothing consumed), and random, truncated
//! or mutated bytes never make a decoder or state machine panic.

use bytes::BytesMut;
use proptest::prelude::*;
use vargr_rfb::encoding::{COPY_RECT, DESKTOP_SIZE, HEXTILE, RAW, RRE, TIGHT, ZRLE};
use vargr_rfb::{
    ClientConfig, ClientInit, ClientMsg, ClientSide, Decoder, Encoder, Framebuffer, Limits,
    PixelFormat, ProtocolVersion, Rect, SecurityOffer, SecurityResult, ServerConfig, ServerInit,
    ServerMsg, ServerSide, UpdateContext, VncChallenge,
};

fn pixel_format() -> impl Strategy<Value = PixelFormat> {
    (any::<[u8; 16]>()).prop_map(|b| {
        let mut buf = BytesMut::new();
        ClientMsg::SetPixelFormat(PixelFormat::RGB888).encode(&mut buf);
        buf[4..20].copy_from_slice(&b);
        match ClientMsg::decode(&mut buf, &Limits::default()) {
            Ok(Some(ClientMsg::SetPixelFormat(pf))) => pf,
            other => panic!("{other:?}"),
        }
    })
}

fn usable_format() -> impl Strategy<Value = PixelFormat> {
    let mut be = PixelFormat::RGB888;
    be.big_endian = true;
    prop::sample::select(vec![
        PixelFormat::RGB888,
        be,
        PixelFormat::RGB565,
        PixelFormat::BGR233,
    ])
}

fn client_msg() -> impl Strategy<Value = ClientMsg> {
    prop_oneof![
        pixel_format().prop_map(ClientMsg::SetPixelFormat),
        prop::collection::vec(any::<i32>(), 0..20).prop_map(ClientMsg::SetEncodings),
        (any::<bool>(), any::<[u16; 4]>()).prop_map(|(incremental, [x, y, width, height])| {
            ClientMsg::FramebufferUpdateRequest {
                incremental,
                x,
                y,
                width,
                height,
            }
        }),
        (any::<bool>(), any::<u32>()).prop_map(|(down, key)| ClientMsg::KeyEvent { down, key }),
        (any::<u8>(), any::<u16>(), any::<u16>())
            .prop_map(|(buttons, x, y)| ClientMsg::PointerEvent { buttons, x, y }),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(ClientMsg::ClientCutText),
    ]
}

/// A small screen of few colours (so every encoding has something to compress).
fn screen() -> impl Strategy<Value = Framebuffer> {
    (1u16..40, 1u16..40, prop::collection::vec(0u32..4, 1..64)).prop_map(|(w, h, seeds)| {
        let mut fb = Framebuffer::new(w, h);
        let px: Vec<u32> = (0..w as usize * h as usize)
            .map(|i| [0x000000, 0xffffff, 0x3366cc, 0x12ab34][seeds[i / 7 % seeds.len()] as usize])
            .collect();
        fb.put_rect(0, 0, w, h, &px).unwrap();
        fb
    })
}

/// An update of every rectangle kind, encoded from `fb` in `pf`.
fn update(fb: &Framebuffer, pf: &PixelFormat, encodings: &[i32]) -> Vec<Rect> {
    let mut enc = Encoder::new();
    let (w, h) = (fb.width(), fb.height());
    encodings
        .iter()
        .map(|&e| match e {
            COPY_RECT => Rect::copy_rect(0, 0, w / 2, h / 2, w - w / 2, h - h / 2),
            DESKTOP_SIZE => Rect::desktop_size(w, h),
            e => enc
                .encode(fb, e, w / 3, h / 4, w - w / 3, h - h / 4, pf)
                .unwrap(),
        })
        .collect()
}

fn server_msg(fb: &Framebuffer, pf: &PixelFormat) -> impl Strategy<Value = ServerMsg> {
    let rects = update(
        fb,
        pf,
        &[RAW, COPY_RECT, RRE, HEXTILE, ZRLE, TIGHT, DESKTOP_SIZE],
    );
    prop_oneof![
        prop::sample::subsequence(rects.clone(), 0..=rects.len())
            .prop_map(ServerMsg::FramebufferUpdate),
        (
            any::<u16>(),
            prop::collection::vec(any::<[u16; 3]>(), 0..10)
        )
            .prop_map(|(first_colour, colours)| ServerMsg::SetColourMapEntries {
                first_colour,
                colours
            }),
        Just(ServerMsg::Bell),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(ServerMsg::ServerCutText),
    ]
}

/// Checks that `decode` on every strict prefix of `wire` is incomplete and consumes
/// nothing, and on all of it returns `want` and consumes everything.
fn check_prefixes<T: PartialEq + std::fmt::Debug>(
    wire: &[u8],
    want: &T,
    mut decode: impl FnMut(&mut BytesMut) -> Result<Option<T>, vargr_rfb::RfbError>,
) -> Result<(), TestCaseError> {
    for n in 0..wire.len() {
        let mut b = BytesMut::from(&wire[..n]);
        prop_assert_eq!(decode(&mut b).unwrap(), None, "prefix of {} bytes", n);
        prop_assert_eq!(b.len(), n);
    }
    let mut b = BytesMut::from(wire);
    let got = decode(&mut b).unwrap();
    prop_assert_eq!(got.as_ref(), Some(want));
    prop_assert!(b.is_empty());
    Ok(())
}

fn ctx_for(fb: &Framebuffer, pf: &PixelFormat) -> UpdateContext {
    UpdateContext {
        pixel_format: *pf,
        width: fb.width(),
        height: fb.height(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn client_messages_round_trip(msg in client_msg()) {
        let mut wire = BytesMut::new();
        msg.encode(&mut wire);
        check_prefixes(&wire, &msg, |b| ClientMsg::decode(b, &Limits::default()))?;
    }

    #[test]
    fn server_messages_round_trip((fb, pf, msg) in (screen(), usable_format()).prop_flat_map(|(fb, pf)| {
        let m = server_msg(&fb, &pf);
        (Just(fb), Just(pf), m)
    })) {
        let mut wire = BytesMut::new();
        msg.encode(&mut wire);
        check_prefixes(&wire, &msg, |b| ServerMsg::decode(b, &mut ctx_for(&fb, &pf), &Limits::default()))?;
    }

    #[test]
    fn handshake_messages_round_trip(
        types in prop::collection::vec(1u8..=2, 1..4),
        reason in prop::collection::vec(any::<u8>(), 0..40),
        name in prop::collection::vec(any::<u8>(), 0..40),
        pf in pixel_format(),
        size in (0u16..=16384, 0u16..=16384),
        challenge in any::<[u8; 16]>(),
        shared in any::<bool>(),
    ) {
        let l = Limits::default();
        for v in [ProtocolVersion::V3_3, ProtocolVersion::V3_7, ProtocolVersion::V3_8] {
            let mut w = BytesMut::new();
            v.encode(&mut w);
            check_prefixes(&w, &v, ProtocolVersion::decode)?;
            let offers = if v == ProtocolVersion::V3_3 { vec![types[..1].to_vec()] } else { vec![types.clone()] };
            for o in offers.into_iter().map(SecurityOffer::Types).chain([SecurityOffer::Refused(reason.clone())]) {
                let mut w = BytesMut::new();
                o.encode(v, &mut w).unwrap();
                check_prefixes(&w, &o, |b| SecurityOffer::decode(b, v, &l))?;
            }
            let failed = if v == ProtocolVersion::V3_8 { reason.clone() } else { Vec::new() };
            for r in [SecurityResult::Ok, SecurityResult::Failed(failed)] {
                let mut w = BytesMut::new();
                r.encode(v, &mut w);
                check_prefixes(&w, &r, |b| SecurityResult::decode(b, v, &l))?;
            }
        }
        let init = ServerInit { width: size.0, height: size.1, pixel_format: pf, name };
        let mut w = BytesMut::new();
        init.encode(&mut w);
        check_prefixes(&w, &init, |b| ServerInit::decode(b, &l))?;
        let mut w = BytesMut::new();
        VncChallenge(challenge).encode(&mut w);
        check_prefixes(&w, &VncChallenge(challenge), VncChallenge::decode)?;
        let mut w = BytesMut::new();
        ClientInit { shared }.encode(&mut w);
        check_prefixes(&w, &ClientInit { shared }, ClientInit::decode)?;
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300), pf in pixel_format(), wh in (0u16..50, 0u16..50)) {
        let l = Limits::default();
        let _ = ClientMsg::decode(&mut BytesMut::from(&bytes[..]), &l);
        let mut ctx = UpdateContext { pixel_format: pf, width: wh.0, height: wh.1 };
        let _ = ServerMsg::decode(&mut BytesMut::from(&bytes[..]), &mut ctx, &l);
        for v in [ProtocolVersion::V3_3, ProtocolVersion::V3_7, ProtocolVersion::V3_8] {
            let _ = SecurityOffer::decode(&mut BytesMut::from(&bytes[..]), v, &l);
            let _ = SecurityResult::decode(&mut BytesMut::from(&bytes[..]), v, &l);
        }
        let _ = ServerInit::decode(&mut BytesMut::from(&bytes[..]), &l);
        // Conversion through any format, even one that validate() refuses.
        let _ = vargr_rfb::convert_pixels(&pf, &PixelFormat::RGB565, &bytes);
        let _ = vargr_rfb::convert_pixels(&PixelFormat::RGB888, &pf, &bytes);
        // Rectangle data of every encoding, straight into the painter.
        for enc in [RAW, COPY_RECT, RRE, HEXTILE, TIGHT, ZRLE, DESKTOP_SIZE, 6] {
            let mut fb = Framebuffer::new(wh.0, wh.1);
            let r = Rect { x: 1, y: 1, width: wh.0 / 2, height: wh.1 / 2, encoding: enc, data: bytes.clone().into() };
            let _ = Decoder::new(l.clone()).apply(&r, &pf, &mut fb);
        }
        // Both state machines, after a valid start.
        let mut c = ClientSide::new(ClientConfig::default());
        c.receive(b"RFB 003.008\n");
        c.receive(&bytes);
        while let Ok(Some(_)) = c.poll_event() {}
        let mut s = ServerSide::new(ServerConfig {
            max_version: ProtocolVersion::V3_8,
            security_types: vec![1, 2],
            password: Some(b"x".to_vec()),
            challenge: [0; 16],
            limits: l,
        });
        s.receive(b"RFB 003.008\n\x01\x01");
        s.receive(&bytes);
        while let Ok(Some(_)) = s.poll_event() {}
    }

    #[test]
    fn mutated_updates_never_panic(
        fb in screen(),
        pf in usable_format(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let rects = update(&fb, &pf, &[RRE, HEXTILE, ZRLE, TIGHT, COPY_RECT, RAW]);
        let mut wire = BytesMut::new();
        ServerMsg::FramebufferUpdate(rects).encode(&mut wire);
        for (i, b) in &flips {
            let at = i.index(wire.len());
            wire[at] ^= b | 1;
        }
        let cut = cut.index(wire.len() + 1);
        for mut w in [wire.clone(), BytesMut::from(&wire[..cut])] {
            let mut ctx = ctx_for(&fb, &pf);
            if let Ok(Some(ServerMsg::FramebufferUpdate(rects))) = ServerMsg::decode(&mut w, &mut ctx, &Limits::default()) {
                let mut dec = Decoder::new(Limits::default());
                let mut out = Framebuffer::new(fb.width(), fb.height());
                for r in &rects {
                    let _ = dec.apply(r, &ctx.pixel_format, &mut out);
                }
            }
        }
    }
}
