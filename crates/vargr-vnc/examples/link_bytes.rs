//! Where the link's bytes go: replays a recording (`vargr vnc --record`, or
//! `vargr bench vnc`'s) through a far side and its link in memory, every update sent
//! at once, and prints per update what ZRLE from the server cost and what the link
//! sent, so the pair's overheads can be found without the timing of a real replay.
//!
//! `cargo run --release -p vargr-vnc --example link_bytes -- FILE.vncrec [-v]`

use std::fs::File;
use std::io::BufReader;

use vargr_dedup::cache::MemCache;
use vargr_dedup::segment::VargParams;
use vargr_dedup::FpBits;
use vargr_vnc::{
    FarConfig, FarLink, FarSide, LinkConfig, NearConfig, NearLink, NearSide, Outgoing, ProxyLimits,
    ProxyMsg, RecordReader, RegionCut,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().ok_or("usage: link_bytes FILE.vncrec [-v]")?;
    let verbose = args.iter().any(|a| a == "-v");
    let mut reader = RecordReader::new(BufReader::new(File::open(path)?), ProxyLimits::default())?;

    // The replay server: a NearSide fed the recording, with the far side its viewer.
    let mut server = NearSide::new(NearConfig::default());
    let mut steps: Vec<Vec<ProxyMsg>> = Vec::new();
    let mut step = Vec::new();
    while let Some((_, m)) = reader.next_record()? {
        if let ProxyMsg::Init { .. } = m {
            server.receive_far_msg(m);
            continue;
        }
        let ends = matches!(m, ProxyMsg::Update(_));
        step.push(m);
        if ends {
            steps.push(std::mem::take(&mut step));
        }
    }
    let sid = server.add_viewer();
    let mut far = FarSide::new(FarConfig {
        regions: RegionCut::Varg(VargParams::default()),
        ..FarConfig::default()
    })?;
    let config = LinkConfig {
        lessons: Some(VargParams::default()),
        ..LinkConfig::default()
    };
    let cache = || MemCache::new(FpBits::DEFAULT, 256 << 20);
    let mut fl = FarLink::new(&config, cache())?;
    let mut nl = NearLink::new(&config, cache())?;
    let mut near = NearSide::new(NearConfig::default());

    // Moves bytes until nothing moves; returns the server's bytes to the far side.
    let exchange =
        |server: &mut NearSide, far: &mut FarSide| -> Result<u64, Box<dyn std::error::Error>> {
            let mut zrle = 0;
            loop {
                server.process()?;
                let to_far = server.take_viewer_output(sid)?;
                zrle += to_far.len() as u64;
                far.receive_server(&to_far);
                far.process()?;
                let to_server = far.take_server_output();
                if to_far.is_empty() && to_server.is_empty() {
                    return Ok(zrle);
                }
                server.receive_viewer(sid, &to_server)?;
            }
        };
    let setup = exchange(&mut server, &mut far)?;
    println!("set-up and first screen from the server: {setup} B");
    let (mut total_zrle, mut total_link, mut total_frames) = (0u64, 0u64, 0u64);
    let mut plains_before = 0;
    for (k, msgs) in steps.iter().enumerate() {
        for m in msgs {
            server.receive_far_msg(m.clone());
        }
        let zrle = exchange(&mut server, &mut far)?;
        let before = fl.data_sent();
        let mut what = String::new();
        far.send_update();
        while let Some(out) = far.poll_near() {
            match &out {
                Outgoing::Msg(m) => what.push_str(&format!("{} ", m.name())),
                Outgoing::Choice {
                    regions, changed, ..
                } => what.push_str(&format!(
                    "{}r/{}px {}t/{}px ",
                    regions.len(),
                    regions.iter().map(|r| r.pixels.len()).sum::<usize>(),
                    changed.len(),
                    changed.iter().map(|r| r.pixels.len()).sum::<usize>()
                )),
            }
            if let (Outgoing::Choice { changed, .. }, Ok(dump)) = (&out, std::env::var("DUMP_STEP"))
            {
                if dump == k.to_string() {
                    let mut b = bytes::BytesMut::new();
                    for r in changed {
                        vargr_rfb::encoding::packed_tiles(&r.pixels, r.width, r.height, &mut b);
                    }
                    std::fs::write("/tmp/packed.bin", &b)?;
                    let mut raw = Vec::new();
                    for r in changed {
                        for p in &r.pixels {
                            raw.extend_from_slice(&p.to_be_bytes()[1..]);
                        }
                    }
                    std::fs::write("/tmp/raw.bin", &raw)?;
                }
            }
            if let Outgoing::Choice {
                regions, changed, ..
            } = &out
            {
                let z = |b: &[u8]| zstd::bulk::compress(b, 3).map(|c| c.len()).unwrap_or(0);
                let (mut pr, mut rr, mut pc) =
                    (bytes::BytesMut::new(), Vec::new(), bytes::BytesMut::new());
                for r in regions {
                    vargr_rfb::encoding::packed_tiles(&r.pixels, r.width, r.height, &mut pr);
                    for p in &r.pixels {
                        rr.extend_from_slice(&p.to_be_bytes()[1..]);
                    }
                }
                for r in changed {
                    vargr_rfb::encoding::packed_tiles(&r.pixels, r.width, r.height, &mut pc);
                }
                what.push_str(&format!(
                    "[regions rgb {} packed {}; tiles {}] ",
                    z(&rr),
                    z(&pr),
                    z(&pc)
                ));
            }
            fl.send_outgoing(&out)?;
        }
        fl.flush()?;
        if fl.plain_updates() > plains_before {
            what.push_str("plain");
            plains_before = fl.plain_updates();
        }
        let out = fl.take_output();
        let frames = count_frames(&out);
        let data = fl.data_sent() - before;
        nl.receive(&out)?;
        while let Some(m) = nl.poll_msg() {
            near.receive_far_msg(m);
            if nl.lesson_pending() {
                near.apply_far()?;
                nl.learn(near.mirror())?;
            }
        }
        near.process()?;
        let back = nl.take_output();
        fl.receive(&back)?;
        let answer = fl.take_output();
        nl.receive(&answer)?;
        total_zrle += zrle;
        total_link += data;
        total_frames += frames;
        if verbose {
            println!(
                "{k:3}: zrle {zrle:6} B   link {data:6} B in {frames} frames (+{} back, +{} answers)  {what}",
                back.len(),
                answer.len()
            );
        }
    }
    let st = fl.stats();
    println!(
        "{} updates: zrle {total_zrle} B; link DATA {total_link} B in {total_frames} frames; \
         {} plain; {} regions, {} fingerprinted, {} predicted",
        steps.len(),
        fl.plain_updates(),
        st.segments,
        st.fingerprinted,
        st.predicted
    );
    Ok(())
}

fn count_frames(mut out: &[u8]) -> u64 {
    let mut n = 0;
    while out.len() >= 5 {
        let len = u32::from_le_bytes(out[1..5].try_into().expect("4")) as usize;
        out = &out[(5 + len).min(out.len())..];
        n += 1;
    }
    n
}
