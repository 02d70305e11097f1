//! RFB bytes come from VNC servers and viewers, which Varg's proxies trust no more than
//! any peer: decoding arbitrary bytes (either direction's messages, every encoding
//! painted into a framebuffer, both handshake state machines) must return an error,
//! never panic or allocate without bound.
//!
//! The first byte picks what the rest is fed to: 0 viewer messages, 1 server messages
//! painted in one of three pixel formats (by the byte's high bits), 2 a viewer's state
//! machine (server bytes), 3 a server's state machine (viewer bytes).

use bytes::BytesMut;
use vargr_rfb::{
    ClientConfig, ClientMsg, ClientSide, Decoder, Framebuffer, Limits, PixelFormat, ServerConfig,
    ServerMsg, ServerSide, UpdateContext,
};

/// Small bounds, so that a fuzzer's input cannot ask for much memory.
pub fn limits() -> Limits {
    Limits {
        max_width: 256,
        max_height: 256,
        max_rect_bytes: 1 << 20,
        max_update_bytes: 4 << 20,
        ..Limits::default()
    }
}

pub const FORMATS: [PixelFormat; 3] = [
    PixelFormat::RGB888,
    PixelFormat::RGB565,
    PixelFormat::BGR233,
];

pub fn run(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let limits = limits();
    match pick % 4 {
        0 => {
            let mut buf = BytesMut::from(rest);
            while let Ok(Some(_)) = ClientMsg::decode(&mut buf, &limits) {}
        }
        1 => {
            let pf = FORMATS[usize::from(pick / 4) % FORMATS.len()];
            let mut ctx = UpdateContext {
                pixel_format: pf,
                width: 64,
                height: 48,
            };
            let mut fb = Framebuffer::new(64, 48);
            let mut decoder = Decoder::new(limits.clone());
            let mut buf = BytesMut::from(rest);
            while let Ok(Some(msg)) = ServerMsg::decode(&mut buf, &mut ctx, &limits) {
                if let ServerMsg::FramebufferUpdate(rects) = msg {
                    for r in &rects {
                        if decoder.apply(r, &ctx.pixel_format, &mut fb).is_err() {
                            return;
                        }
                    }
                }
            }
        }
        2 => {
            let mut c = ClientSide::new(ClientConfig {
                password: Some(b"secret".to_vec()),
                limits,
                ..ClientConfig::default()
            });
            c.receive(rest);
            while let Ok(Some(_)) = c.poll_event() {}
            let _ = c.take_output();
        }
        _ => {
            let mut s = ServerSide::new(ServerConfig {
                max_version: vargr_rfb::ProtocolVersion::V3_8,
                security_types: vec![1, 2],
                password: Some(b"secret".to_vec()),
                challenge: [7; 16],
                limits,
            });
            s.receive(rest);
            while let Ok(Some(_)) = s.poll_event() {}
            let _ = s.take_output();
        }
    }
}
