//! ClientSide and ServerSide talking to each other through every version and
//! security type, with bytes delivered whole or one at a time, and the ways a
//! handshake ends early.

use vargr_rfb::encoding::RAW;
use vargr_rfb::{
    security, vnc_auth_response, ClientConfig, ClientEvent, ClientMsg, ClientSide, Encoder,
    Framebuffer, PixelFormat, ProtocolVersion, Rect, RfbError, ServerConfig, ServerEvent,
    ServerInit, ServerMsg, ServerSide, VncResponse,
};

const CHALLENGE: [u8; 16] = *b"0123456789abcdef";

fn server_config(
    version: ProtocolVersion,
    types: Vec<u8>,
    password: Option<&[u8]>,
) -> ServerConfig {
    ServerConfig {
        max_version: version,
        security_types: types,
        password: password.map(<[u8]>::to_vec),
        challenge: CHALLENGE,
        limits: Default::default(),
    }
}

fn init() -> ServerInit {
    ServerInit {
        width: 32,
        height: 16,
        pixel_format: PixelFormat::RGB888,
        name: b"desk".to_vec(),
    }
}

/// Moves bytes both ways until neither side has anything to say; `trickle` delivers
/// them one byte at a time. Returns every event of each side.
fn pump(
    c: &mut ClientSide,
    s: &mut ServerSide,
    trickle: bool,
) -> Result<(Vec<ClientEvent>, Vec<ServerEvent>), RfbError> {
    let (mut ce, mut se) = (Vec::new(), Vec::new());
    loop {
        let (to_c, to_s) = (s.take_output(), c.take_output());
        if to_c.is_empty() && to_s.is_empty() {
            return Ok((ce, se));
        }
        for (bytes, side) in [(&to_c, 0), (&to_s, 1)] {
            let chunks: Vec<&[u8]> = if trickle {
                bytes.chunks(1).collect()
            } else {
                vec![&bytes[..]]
            };
            for chunk in chunks {
                if side == 0 {
                    c.receive(chunk);
                    while let Some(ev) = c.poll_event()? {
                        ce.push(ev);
                    }
                } else {
                    s.receive(chunk);
                    while let Some(ev) = s.poll_event()? {
                        if let ServerEvent::ClientInit(_) = ev {
                            s.send_server_init(&init())?;
                        }
                        se.push(ev);
                    }
                }
            }
        }
    }
}

#[test]
fn every_version_and_security_type_reaches_server_init() {
    for version in [
        ProtocolVersion::V3_3,
        ProtocolVersion::V3_7,
        ProtocolVersion::V3_8,
    ] {
        for sec in [security::NONE, security::VNC_AUTH] {
            for trickle in [false, true] {
                let mut c = ClientSide::new(ClientConfig {
                    password: Some(b"secret".to_vec()),
                    ..ClientConfig::default()
                });
                let mut s = ServerSide::new(server_config(version, vec![sec], Some(b"secret")));
                let (ce, se) = pump(&mut c, &mut s, trickle).unwrap();
                assert_eq!(ce.first(), Some(&ClientEvent::Version(version)));
                assert!(
                    ce.contains(&ClientEvent::Security(sec)),
                    "{version:?} {sec}"
                );
                assert_eq!(ce.last(), Some(&ClientEvent::ServerInit(init())));
                assert!(matches!(se.last(), Some(ServerEvent::ClientInit(i)) if i.shared));
                assert!(c.is_ready() && s.is_ready());
                assert_eq!(c.version(), version);
            }
        }
    }
}

#[test]
fn messages_flow_both_ways_after_the_handshake() {
    let mut c = ClientSide::new(ClientConfig::default());
    let mut s = ServerSide::new(server_config(
        ProtocolVersion::V3_8,
        vec![security::NONE],
        None,
    ));
    pump(&mut c, &mut s, false).unwrap();
    let msgs = [
        ClientMsg::SetPixelFormat(PixelFormat::RGB565),
        ClientMsg::SetEncodings(vec![5, 16, 0]),
        ClientMsg::FramebufferUpdateRequest {
            incremental: false,
            x: 0,
            y: 0,
            width: 32,
            height: 16,
        },
        ClientMsg::KeyEvent {
            down: true,
            key: 0xff0d,
        },
        ClientMsg::PointerEvent {
            buttons: 1,
            x: 3,
            y: 4,
        },
        ClientMsg::ClientCutText(b"copied".to_vec()),
    ];
    for m in &msgs {
        c.send(m).unwrap();
    }
    let (_, se) = pump(&mut c, &mut s, true).unwrap();
    let got: Vec<ClientMsg> = se
        .into_iter()
        .map(|e| match e {
            ServerEvent::Message(m) => m,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, msgs);
    assert_eq!(s.pixel_format(), Some(PixelFormat::RGB565));
    assert_eq!(s.encodings(), &[5, 16, 0]);

    // The server answers in the viewer's format; the client decodes with it.
    let mut fb = Framebuffer::new(32, 16);
    fb.fill_rect(4, 4, 8, 8, 0xff0000).unwrap();
    let rect = Encoder::new()
        .encode(&fb, RAW, 0, 0, 32, 16, &PixelFormat::RGB565)
        .unwrap();
    let replies = [
        ServerMsg::FramebufferUpdate(vec![
            rect,
            Rect::copy_rect(0, 0, 4, 4, 4, 4),
            Rect::desktop_size(64, 64),
        ]),
        ServerMsg::Bell,
        ServerMsg::ServerCutText(b"pasted".to_vec()),
        ServerMsg::SetColourMapEntries {
            first_colour: 3,
            colours: vec![[1, 2, 3]],
        },
    ];
    for m in &replies {
        s.send(m).unwrap();
    }
    let (ce, _) = pump(&mut c, &mut s, true).unwrap();
    let got: Vec<ServerMsg> = ce
        .into_iter()
        .map(|e| match e {
            ClientEvent::Message(m) => m,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, replies);
    assert_eq!(c.context().map(|x| (x.width, x.height)), Some((64, 64)));
}

#[test]
fn a_wrong_password_ends_with_the_servers_reason() {
    let mut c = ClientSide::new(ClientConfig {
        password: Some(b"wrong".to_vec()),
        ..ClientConfig::default()
    });
    let mut s = ServerSide::new(server_config(
        ProtocolVersion::V3_8,
        vec![security::VNC_AUTH],
        Some(b"secret"),
    ));
    let e = pump(&mut c, &mut s, false).unwrap_err();
    assert_eq!(
        e,
        RfbError::Refused {
            stage: "authentication",
            reason: "authentication failed".into()
        }
    );
    // The server queued its 3.8 SecurityResult with the reason before it stopped.
    c.receive(&s.take_output());
    assert_eq!(c.poll_event().unwrap_err(), e);
    assert!(s.poll_event().is_err());
}

#[test]
fn the_challenge_can_be_relayed() {
    // A proxy pair: the near side's ServerSide has no password and hands the
    // response on; the far side's ClientSide has none and hands the challenge out.
    let mut c = ClientSide::new(ClientConfig::default());
    let mut s = ServerSide::new(server_config(
        ProtocolVersion::V3_7,
        vec![security::VNC_AUTH],
        None,
    ));
    let (ce, _) = pump(&mut c, &mut s, false).unwrap();
    let Some(ClientEvent::Challenge(ch)) = ce.last() else {
        panic!("{ce:?}")
    };
    assert_eq!(ch.0, CHALLENGE);
    assert!(
        c.send(&ClientMsg::ClientCutText(vec![])).is_err(),
        "not ready yet"
    );
    c.answer_challenge(VncResponse(vnc_auth_response(b"pw", &ch.0)))
        .unwrap();
    let (_, se) = pump(&mut c, &mut s, false).unwrap();
    let Some(ServerEvent::AuthResponse {
        challenge,
        response,
    }) = se.last()
    else {
        panic!("{se:?}")
    };
    assert_eq!(response.0, vnc_auth_response(b"pw", &challenge.0));
    s.finish_auth(true, "").unwrap();
    let (ce, _) = pump(&mut c, &mut s, false).unwrap();
    assert_eq!(ce.last(), Some(&ClientEvent::ServerInit(init())));
}

#[test]
fn handshakes_that_cannot_succeed() {
    // A client limited to 3.3 talking to a 3.8 server speaks 3.3.
    let mut c = ClientSide::new(ClientConfig {
        max_version: ProtocolVersion::V3_3,
        ..ClientConfig::default()
    });
    let mut s = ServerSide::new(server_config(
        ProtocolVersion::V3_8,
        vec![security::NONE],
        None,
    ));
    pump(&mut c, &mut s, false).unwrap();
    assert_eq!(s.version(), ProtocolVersion::V3_3);

    // No common security type: the client names what it was offered.
    let mut c = ClientSide::new(ClientConfig {
        security_types: vec![security::VNC_AUTH],
        ..ClientConfig::default()
    });
    let mut s = ServerSide::new(server_config(
        ProtocolVersion::V3_8,
        vec![security::NONE],
        None,
    ));
    assert_eq!(
        pump(&mut c, &mut s, false).unwrap_err(),
        RfbError::NoCommonSecurity { offered: vec![1] }
    );
    // Later calls keep failing the same way.
    assert!(c.poll_event().is_err());

    // A server refusing a 3.8 client at once, with a reason.
    let mut c = ClientSide::new(ClientConfig::default());
    c.receive(b"RFB 003.008\n\0\0\0\0\x04busy");
    assert!(matches!(c.poll_event(), Ok(Some(ClientEvent::Version(_)))));
    assert_eq!(
        c.poll_event().unwrap_err(),
        RfbError::Refused {
            stage: "connection",
            reason: "busy".into()
        }
    );

    // Versions outside 3.3/3.7/3.8 from a client; a newer server is spoken to in 3.8.
    let mut s = ServerSide::new(server_config(
        ProtocolVersion::V3_8,
        vec![security::NONE],
        None,
    ));
    s.receive(b"RFB 003.005\n");
    assert_eq!(
        s.poll_event().unwrap_err(),
        RfbError::UnsupportedVersion { major: 3, minor: 5 }
    );
    let mut c = ClientSide::new(ClientConfig::default());
    c.receive(b"RFB 004.001\n");
    assert_eq!(
        c.poll_event().unwrap(),
        Some(ClientEvent::Version(ProtocolVersion::V3_8))
    );
    assert_eq!(&c.take_output()[..], b"RFB 003.008\n");

    // A viewer asking for a colour map is refused with a typed error.
    let mut c = ClientSide::new(ClientConfig::default());
    let mut s = ServerSide::new(server_config(
        ProtocolVersion::V3_8,
        vec![security::NONE],
        None,
    ));
    pump(&mut c, &mut s, false).unwrap();
    let mut map = PixelFormat::BGR233;
    map.true_colour = false;
    assert!(matches!(
        c.send(&ClientMsg::SetPixelFormat(map)),
        Err(RfbError::BadPixelFormat(_))
    ));
    let mut raw = bytes::BytesMut::new();
    ClientMsg::SetPixelFormat(map).encode(&mut raw);
    s.receive(&raw);
    assert!(matches!(s.poll_event(), Err(RfbError::BadPixelFormat(_))));
}
