//! The messages between Varg's proxies cross the network: decoding arbitrary bytes (the
//! proxy framing, a near side fed by a far side, a far side fed by a near side) must
//! return an error, never panic or allocate without bound. The first byte picks: 0 the
//! decoder alone, 1 a near side with one viewer, 2 a far side.

use bytes::BytesMut;
use vargr_vnc::{FarConfig, FarSide, NearConfig, NearSide, ProxyLimits, ProxyMsg};

/// Small bounds, so that a fuzzer's input cannot ask for much memory.
pub fn limits() -> ProxyLimits {
    ProxyLimits {
        max_message: 1 << 20,
        rfb: crate::rfb_decode::limits(),
    }
}

pub fn run(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let limits = limits();
    match pick % 3 {
        0 => {
            let mut buf = BytesMut::from(rest);
            while let Ok(Some(_)) = ProxyMsg::decode(&mut buf, &limits) {}
        }
        1 => {
            let mut near = NearSide::new(NearConfig {
                limits,
                password: None,
            });
            let _viewer = near.add_viewer();
            near.receive_far(rest);
            let _ = near.process();
            let _ = near.take_far_output();
        }
        _ => {
            let Ok(mut far) = FarSide::new(FarConfig {
                client: vargr_rfb::ClientConfig {
                    limits: limits.rfb.clone(),
                    ..Default::default()
                },
                limits,
                regions: Default::default(),
                record: true,
            }) else {
                return;
            };
            far.receive_near(rest);
            let _ = far.process();
            far.send_update();
            let _ = far.take_server_output();
            let _ = far.take_near_output();
            while far.poll_recorded().is_some() {}
        }
    }
}
