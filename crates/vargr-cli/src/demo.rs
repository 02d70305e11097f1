//! `vargr demo`: the tour. Starts a local tree and shows each capability with timings.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use vargr_tbon::{BackendSpec, Network, NetworkOptions, StreamOptions, SyncMode, Value};
use vargr_topo::Topology;

use crate::roles::{TAG_ECHO, TAG_GROUP, TAG_P2P_REPORT, TAG_P2P_START, TAG_RANK};

#[derive(Args)]
pub struct DemoArgs {
    /// Topology spec or file.
    #[arg(long, default_value = "kary:4@16")]
    topology: String,
    /// Round trips timed in the latency step.
    #[arg(long, default_value_t = 1000)]
    iters: usize,
}

/// `config_file`: the global `--config`.
pub fn run(a: DemoArgs, config_file: Option<&std::path::Path>) -> Result<()> {
    let mut opts = NetworkOptions::default();
    crate::config_cmd::load(config_file)?
        .0
        .tree_defaults(&mut opts);
    let topo = Topology::load(std::path::Path::new(&a.topology))?;
    let n = topo.num_backends();
    println!(
        "vargr demo: a tree of {} processes ({} back-ends, {} commnodes, depth {})\n",
        topo.len(),
        n,
        topo.internal().len(),
        topo.depth()
    );
    print!("{}", topo.draw());
    let exe = std::env::current_exe().context("locating the vargr binary")?;
    let started = Instant::now();
    let net = Network::new(
        topo,
        BackendSpec::command(exe.display().to_string(), &["backend", "demo"]),
        opts,
    )?;
    let mut rows: Vec<(String, String, Duration)> = Vec::new();
    rows.push((
        "start-up".into(),
        format!(
            "{} processes started, authenticated and ready",
            net.topology().len()
        ),
        net.startup_time(),
    ));
    let all = net.broadcast_communicator();

    // 1. Multicast down, sum up.
    let sum = net.open_stream(&all, StreamOptions::new("sum"))?;
    let t = Instant::now();
    sum.send(TAG_RANK, "%d", vec![Value::Int(1000)])?;
    let p = sum.recv()?;
    let expect = (1000 * n + n * (n - 1) / 2) as i32;
    let got = match p.values.first() {
        Some(Value::Int(v)) => *v,
        other => bail!("sum stream returned {other:?}"),
    };
    if got != expect {
        bail!("sum of (1000 + rank) over {n} back-ends was {got}, expected {expect}");
    }
    rows.push((
        "multicast + sum".into(),
        format!("Σ(1000 + rank) over {n} back-ends = {got} (correct)"),
        t.elapsed(),
    ));

    // 2. Round-trip latency.
    let mut rtts = Vec::with_capacity(a.iters);
    for i in 0..a.iters {
        let t = Instant::now();
        sum.send(TAG_ECHO, "%d", vec![Value::Int(i as i32)])?;
        sum.recv()?;
        rtts.push(t.elapsed());
    }
    rtts.sort();
    let med = rtts.get(rtts.len() / 2).copied().unwrap_or_default();
    let p99 = rtts.get(rtts.len() * 99 / 100).copied().unwrap_or_default();
    rows.push((
        "round trips".into(),
        format!(
            "{} multicast+sum waves: median {:.0} µs, p99 {:.0} µs",
            a.iters,
            med.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6
        ),
        rtts.iter().sum(),
    ));

    // 3. Equivalence classes: which back-ends loaded the same library?
    let eq = net.open_stream(&all, StreamOptions::new("equivalence"))?;
    let t = Instant::now();
    eq.send(TAG_GROUP, "", vec![])?;
    // The root emits one packet per class: index, number of classes, members, value.
    let first = eq.recv()?;
    let count = first.values.get(1).and_then(Value::as_u64).unwrap_or(1) as usize;
    let mut classes = vec![first];
    while classes.len() < count {
        classes.push(eq.recv()?);
    }
    rows.push((
        "equivalence classes".into(),
        describe_classes(&classes),
        t.elapsed(),
    ));

    // 4. Back-end to back-end, routed through the tree.
    let last = (n - 1) as u32;
    let p2p = net.open_stream(
        &net.communicator(&[0, last])?,
        StreamOptions::new("null").sync(SyncMode::DontWait),
    )?;
    let t = Instant::now();
    // Only back-end 0 starts the exchange; the other member ignores a message to itself.
    p2p.send(TAG_P2P_START, "%ud", vec![Value::UInt(last)])?;
    let p = loop {
        let p = p2p
            .recv_timeout(Duration::from_secs(5))?
            .context("no report of the BE→BE message within 5 s")?;
        if p.tag == TAG_P2P_REPORT {
            break p;
        }
    };
    let msg = match (&p.values.first(), &p.values.get(1)) {
        (Some(Value::Str(m)), Some(Value::UInt(src))) => {
            format!("back-end {last} got {m:?} (source {src})")
        }
        _ => format!("{:?}", p.values),
    };
    rows.push(("BE→BE message".into(), msg, t.elapsed()));

    // 5. The monitor plane: every node's event counts, reduced where they were
    // recorded and gathered through the tree on the links' low-priority lane.
    let t = Instant::now();
    let pulled = net.pull(
        &vargr_tbon::monitor::NetworkStatus::scope(),
        Duration::from_secs(5),
    );
    let events: u64 = pulled
        .replies()
        .map(|(_, r)| match r {
            vargr_trace::scope::Reply::Counts(c) => c.body.iter().map(|x| x.events).sum(),
            _ => 0,
        })
        .sum();
    rows.push((
        "monitor pull".into(),
        format!(
            "{} nodes answered through the tree, {} events counted{}",
            pulled.replies().count(),
            events,
            if pulled.missing().is_empty() {
                String::new()
            } else {
                format!(", missing {:?}", pulled.missing())
            }
        ),
        t.elapsed(),
    ));
    let mut view = vargr_tbon::monitor::NetworkStatus::of(
        &pulled,
        started.elapsed().as_secs_f64(),
        &net.clock_alignment(),
    );
    view.uptime_s = started.elapsed().as_secs_f64();
    view.last_pull_ms = t.elapsed().as_secs_f64() * 1e3;

    let t = Instant::now();
    net.shutdown()?;
    rows.push((
        "shutdown".into(),
        "every node confirmed and exited".into(),
        t.elapsed(),
    ));

    println!("\n{:<20} {:>10}  result", "step", "time");
    println!("{}", "-".repeat(78));
    for (step, what, d) in rows {
        println!("{:<20} {:>10}  {}", step, fmt_dur(d), what);
    }
    println!("\nWhat the monitor saw (rates over the whole demo; live: `vargr top`):\n");
    print!(
        "{}",
        crate::top_cmd::render_network(std::path::Path::new("demo"), &view, Duration::ZERO)
    );
    Ok(())
}

fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn describe_classes(classes: &[vargr_tbon::Packet]) -> String {
    let mut parts: Vec<String> = classes
        .iter()
        .map(|c| {
            let members = match c.values.get(2) {
                Some(Value::UIntArray(m)) => vargr_tbon::fmt_ranks(m),
                _ => "?".into(),
            };
            let value = c.values.get(3).and_then(Value::as_str).unwrap_or("?");
            format!("{value} on [{members}]")
        })
        .collect();
    parts.sort();
    format!("{} classes: {}", classes.len(), parts.join("; "))
}
