//! `vargr bench video`: the seed's video distribution (001 §3, §4.4) on one machine.
//! One producer at the front-end publishes ~20 KB frames of random bytes (JPEG-like:
//! incompressible) at 12.5 Hz into an observed element; viewers at the back-ends, some
//! slower than the feed, take the newest frame each time they are ready (PATHS'
//! last-observe). The viewers sit in sites joined to the producer's by an emulated WAN.
//!
//! Two shapes, same viewers, same WAN profile per link:
//!
//! - `cached`: one commnode per site, on the site's side of the WAN; its cache answers
//!   every viewer of the site, so each frame crosses the WAN link at most once.
//! - `direct`: no commnodes; every viewer fetches from the front-end over its own WAN
//!   link (a flat tree).
//!
//! Measured: frames delivered per viewer (and its rate over the feed's duration), and
//! observed-value frames and bytes per link, from the nodes' trace files (the
//! `tbon/link/in/observe` records). The emulation shapes each link on its own: the
//! direct shape's WAN links share no bottleneck, so its frame rates are what an
//! uncongested WAN would give; the bytes that cross the WAN are the comparison.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use vargr_tbon::{BackendSpec, LinkStages, Network, NetworkOptions, StreamOptions, Value};
use vargr_topo::Topology;

use crate::tree::write_records;
use crate::{Programs, TAG_VIEW};

const ELEMENT: u32 = 1;
/// The producer's host and site.
const SOURCE: (&str, &str) = ("src", "S");

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// A commnode per site caches frames for the site's viewers.
    Cached,
    /// Every viewer fetches from the front-end over its own WAN link.
    Direct,
}

#[derive(Args, Clone)]
pub struct VideoArgs {
    /// How long the feed runs.
    #[arg(long, default_value = "10s", value_parser = vargr_emu::parse_duration)]
    duration: Duration,
    /// Frames per second of the feed (the seed: 12.5).
    #[arg(long, default_value_t = 12.5)]
    hz: f64,
    /// Bytes per frame (the seed's 320x240 JPEGs: about 20 KB).
    #[arg(long, default_value_t = 20_000)]
    frame_bytes: usize,
    /// Sites of viewers, each across the WAN from the producer.
    #[arg(long, default_value_t = 2)]
    sites: u32,
    /// Viewers per site.
    #[arg(long, default_value_t = 4)]
    per_site: u32,
    /// Time each viewer spends on a frame, in ms, by its place in its site (cycled):
    /// the feed's period is 80 ms, so 120 and 250 are slower than the feed.
    #[arg(long, value_delimiter = ',', default_values_t = [0u32, 40, 120, 250])]
    consume_ms: Vec<u32>,
    /// The WAN between the producer's site and each viewer site (a vargr-emu profile).
    #[arg(long, default_value = "rtt=20ms,bandwidth=20mbit")]
    wan: String,
    /// Shapes to run.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Shape::Cached, Shape::Direct])]
    shapes: Vec<Shape>,
    /// Write the records here (default bench/results/video.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
struct Viewer {
    rank: u32,
    site: String,
    consume_ms: u32,
    frames: u64,
    /// Frames per second of the feed's duration.
    fps: f64,
    first_version: u64,
    last_version: u64,
}

#[derive(Serialize, Debug)]
struct LinkUse {
    from: u32,
    to: u32,
    /// The link crosses the WAN.
    wan: bool,
    frames: u64,
    bytes: u64,
}

#[derive(Serialize, Debug)]
struct Record {
    benchmark: &'static str,
    shape: Shape,
    topology: String,
    wan: String,
    hz: f64,
    frame_bytes: usize,
    duration_s: f64,
    published: u64,
    viewers: Vec<Viewer>,
    links: Vec<LinkUse>,
    wan_frames: u64,
    wan_bytes: u64,
    /// Shared machine, emulated sites: say so with the figures.
    note: &'static str,
}

fn site_host(s: u32) -> String {
    format!("v{s}")
}

/// The MRNet topology of `shape`: the producer on `src`, viewers on `v<site>`.
fn topology(shape: Shape, a: &VideoArgs) -> String {
    let viewers = |s: u32| {
        (1..=a.per_site)
            .map(|i| format!("{}:{i}", site_host(s)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (src, _) = SOURCE;
    match shape {
        Shape::Cached => {
            let heads: Vec<String> = (0..a.sites)
                .map(|s| format!("{}:0", site_host(s)))
                .collect();
            let mut t = format!("{src}:0 => {} ;\n", heads.join(" "));
            for s in 0..a.sites {
                t += &format!("{}:0 => {} ;\n", site_host(s), viewers(s));
            }
            t
        }
        Shape::Direct => {
            let all: Vec<String> = (0..a.sites).map(viewers).collect();
            format!("{src}:0 => {} ;\n", all.join(" "))
        }
    }
}

fn stages(a: &VideoArgs) -> LinkStages {
    let mut st = LinkStages::default();
    st.sites.insert(SOURCE.0.into(), SOURCE.1.into());
    for s in 0..a.sites {
        let site = format!("V{s}");
        st.sites.insert(site_host(s), site.clone());
        st.wan.insert(format!("{}-{site}", SOURCE.1), a.wan.clone());
    }
    // Frames are incompressible: a codec stage would only cost time.
    st.codec = Some("off".into());
    st
}

pub fn run(a: VideoArgs, programs: &Programs) -> Result<()> {
    ensure!(a.hz > 0.0, "--hz must be positive");
    ensure!(!a.consume_ms.is_empty(), "--consume-ms needs a value");
    ensure!(
        a.frame_bytes >= 8,
        "--frame-bytes must hold the version (8 bytes)"
    );
    let mut records = Vec::new();
    for &shape in &a.shapes {
        let rec = run_one(shape, &a, programs)?;
        println!(
            "{:?}: {} frames published; WAN carried {} frames, {} bytes",
            shape, rec.published, rec.wan_frames, rec.wan_bytes
        );
        for v in &rec.viewers {
            println!(
                "  viewer {:>2} ({}, {:>3} ms/frame): {:>4} frames, {:>5.2} fps",
                v.rank, v.site, v.consume_ms, v.frames, v.fps
            );
        }
        records.push(rec);
    }
    write_records(a.json.as_deref(), "video.json", &records)
}

fn run_one(shape: Shape, a: &VideoArgs, programs: &Programs) -> Result<Record> {
    let spec = topology(shape, a);
    let topo = Topology::parse_mrnet(&spec, "video")?;
    let vargr = programs.vargr()?.display().to_string();
    let traces = tempfile::tempdir().context("making a trace directory")?;
    let mut opts = NetworkOptions {
        link_stages: stages(a),
        ..NetworkOptions::default()
    };
    vargr_config::from_process()?.tree_defaults(&mut opts);
    opts.commnode_program.get_or_insert_with(|| vargr.clone());
    opts.trace_dir = Some(traces.path().to_path_buf());
    let net = Network::new(
        topo.clone(),
        BackendSpec::command(vargr, &["backend", "viewer"]),
        opts,
    )?;
    // Each back-end's site and its place among the site's viewers.
    let mut place: BTreeMap<u32, (String, u32)> = BTreeMap::new();
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for n in topo.nodes() {
        if let Some(rank) = n.backend_rank {
            let i = seen.entry(n.host.clone()).or_default();
            place.insert(rank, (n.host.clone(), *i));
            *i += 1;
        }
    }
    let consume: Vec<u32> = (0..net.num_backends() as u32)
        .map(|r| a.consume_ms[place[&r].1 as usize % a.consume_ms.len()])
        .collect();
    let period = Duration::from_secs_f64(1.0 / a.hz);
    let frames = (a.duration.as_secs_f64() * a.hz).round().max(1.0) as u64;
    let s = net.open_stream(
        &net.broadcast_communicator(),
        StreamOptions::new("null").sync(vargr_tbon::SyncMode::DontWait),
    )?;
    s.send(
        TAG_VIEW,
        "%ud %aud %uld %ud",
        vec![
            Value::UInt(ELEMENT),
            Value::UIntArray(consume.iter().map(|ms| ms * 1000).collect()),
            Value::ULong(frames),
            Value::UInt(10_000),
        ],
    )?;
    let mut rng = vargr_codec::testdata::Rng::new(7);
    let start = Instant::now();
    for version in 1..=frames {
        let mut frame: Vec<u8> = (0..a.frame_bytes.div_ceil(8))
            .flat_map(|_| rng.next_u64().to_le_bytes())
            .take(a.frame_bytes)
            .collect();
        frame[..8].copy_from_slice(&version.to_le_bytes());
        let due = start + period.mul_f64((version - 1) as f64);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        net.publish(ELEMENT, version, &frame)?;
    }
    let fed = start.elapsed().as_secs_f64() + period.as_secs_f64();
    let mut viewers = Vec::new();
    for _ in 0..net.num_backends() {
        let p = s
            .recv_timeout(Duration::from_secs(60))?
            .context("a viewer did not report within 60 s")?;
        let [Value::UInt(n), Value::ULong(first), Value::ULong(last), Value::Int(ok), Value::ULong(_)] =
            p.values.as_slice()
        else {
            bail!("viewer {}: not a viewer report: {:?}", p.source, p.values);
        };
        ensure!(
            *ok == 1,
            "viewer {}: versions went back or a frame was wrong",
            p.source
        );
        let (host, _) = &place[&p.source];
        viewers.push(Viewer {
            rank: p.source,
            site: host.clone(),
            consume_ms: consume[p.source as usize],
            frames: u64::from(*n),
            fps: f64::from(*n) / fed,
            first_version: *first,
            last_version: *last,
        });
    }
    viewers.sort_by_key(|v| v.rank);
    net.shutdown()?;
    let per_link = vargr_tbon::trace::observed_per_link(traces.path())?;
    let host = |id: u32| topo.node(id).map(|n| n.host.as_str()).unwrap_or("");
    let links: Vec<LinkUse> = per_link
        .iter()
        .map(|(&(from, to), &(frames, bytes))| LinkUse {
            from,
            to,
            wan: (host(from) == SOURCE.0) != (host(to) == SOURCE.0),
            frames,
            bytes,
        })
        .collect();
    let wan = links.iter().filter(|l| l.wan);
    Ok(Record {
        benchmark: "video",
        shape,
        topology: spec.replace('\n', " "),
        wan: a.wan.clone(),
        hz: a.hz,
        frame_bytes: a.frame_bytes,
        duration_s: fed,
        published: frames,
        wan_frames: wan.clone().map(|l| l.frames).sum(),
        wan_bytes: wan.map(|l| l.bytes).sum(),
        viewers,
        links,
        note: "sites emulated on one machine: each pair of sites shares one emulated WAN (the tree's gateways)",
    })
}
