//! The messages between Varg's proxies cross the network: decoding arbitrary bytes (the
//! proxy framing, a near side fed by a far side, a far side fed by a near side, the
//! dedup link's frames either way) must return an error, never panic or allocate
//! without bound; so must reading a recording someone handed us. The first byte picks:
//! 0 the decoder alone, 1 a near side with one viewer, 2 a far side, 3 the near end of
//! the link, 4 its far end, 5 a recording.

use bytes::BytesMut;
use vargr_dedup::cache::MemCache;
use vargr_vnc::{
    FarConfig, FarLink, FarSide, LinkConfig, NearConfig, NearLink, NearSide, ProxyLimits, ProxyMsg,
    RecordReader,
};

/// Small bounds, so that a fuzzer's input cannot ask for much memory.
pub fn limits() -> ProxyLimits {
    ProxyLimits {
        max_message: 1 << 20,
        rfb: crate::rfb_decode::limits(),
    }
}

/// The link's settings, with small bounds.
pub fn link_config() -> LinkConfig {
    let mut c = LinkConfig {
        max_frame: 1 << 20,
        limits: limits(),
        lessons: Some(vargr_dedup::segment::VargParams::default()),
        ..LinkConfig::default()
    };
    c.dedup.max_pending = 4 << 20;
    c.dedup.max_segment = 256 << 10;
    c
}

pub fn cache() -> MemCache {
    MemCache::new(vargr_dedup::FpBits::DEFAULT, 8 << 20)
}

pub fn run(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let limits = limits();
    match pick % 6 {
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
        3 => {
            let Ok(mut link) = NearLink::new(&link_config(), cache()) else {
                return;
            };
            let mut near = NearSide::new(NearConfig {
                limits,
                password: None,
            });
            let _viewer = near.add_viewer();
            let _ = link.receive(rest);
            while let Some(m) = link.poll_msg() {
                near.receive_far_msg(m);
                if link.lesson_pending() {
                    let _ = near.apply_far();
                    let _ = link.learn(near.mirror());
                }
            }
            let _ = near.process();
            let _ = link.take_output();
        }
        4 => {
            let Ok(mut link) = FarLink::new(&link_config(), cache()) else {
                return;
            };
            let _ = link.receive(rest);
            let _ = link.take_control();
            let _ = link.take_output();
        }
        5 => {
            if let Ok(mut r) = RecordReader::new(rest, limits) {
                while let Ok(Some(_)) = r.next_record() {}
            }
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
