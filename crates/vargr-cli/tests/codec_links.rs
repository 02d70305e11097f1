//! Compression on links between sites, with real processes over an emulated WAN: the
//! collectives give exactly the same results with the codec stage off, fixed and
//! adaptive, and the trace shows what crossed the WAN.

mod common;

use std::collections::BTreeMap;
use std::sync::{RwLock, RwLockReadGuard};
use std::time::Duration;

use common::*;

/// The TCP_INFO test holds this alone: what the engine learns of a path depends on the
/// sender keeping bytes waiting in its socket, which the other tests' jobs, sharing two
/// cores, kept it from once (every message went raw). The others share it.
static PATH_TEST_ALONE: RwLock<()> = RwLock::new(());

fn beside_others() -> RwLockReadGuard<'static, ()> {
    PATH_TEST_ALONE.read().unwrap_or_else(|e| e.into_inner())
}

/// `codec-check` on 4 ranks in two sites joined by an emulated 100 Mbit/s WAN, with
/// `extra` options (codec mode, trace directories).
fn two_sites(extra: &[&str]) -> CliRun {
    two_sites_with(extra, &[])
}

/// [`two_sites`] with `check` passed on to codec-check.
fn two_sites_with(extra: &[&str], check: &[&str]) -> CliRun {
    let mut args = vec![
        "run",
        "-n",
        "4",
        "--sites",
        "2",
        "--wan",
        "rtt=2ms,bandwidth=100mbit",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", vargr_bench(), "codec-check"]);
    args.extend_from_slice(check);
    let r = run_cli(&args, Duration::from_secs(120));
    assert!(r.status.success(), "{extra:?}: {r:?}");
    r
}

#[test]
fn compressing_links_between_sites_change_nothing_but_the_bytes() {
    let _shared = beside_others();
    let mut checksums = Vec::new();
    // FPC only takes floats: its row shows that typed collectives tell the link what
    // their elements are.
    for mode in [
        "off",
        "fixed:lz4",
        "fixed:shuffle-lz4",
        "fixed:fpc:16",
        "adaptive",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().to_str().unwrap();
        let r = two_sites(&["--codec", mode, "--trace", d]);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 4, "{mode}: {}", r.stdout);
        assert!(
            lines.iter().all(|l| l.contains("bcast ok allreduce ok")),
            "{mode}: {}",
            r.stdout
        );
        checksums.push(lines[0].rsplit(' ').next().unwrap().to_string());

        // What arrived over the WAN (emu) and what the codec stage handed on.
        let b = stage_bytes(tmp.path());
        let (wire, delivered) = (b["link/stage/emu/in"], b["link/stage/codec/in"]);
        assert!(delivered >= 2 << 20, "{mode}: {b:?}");
        match mode {
            // Off passes frames as they are.
            "off" => assert_eq!(wire, delivered, "{mode}: {b:?}"),
            // What adaptive does depends on how fast the codecs run here (a debug build
            // is many times slower), so only "never more bytes" is asserted.
            "adaptive" => assert!(wire <= delivered, "{mode}: {b:?}"),
            "fixed:fpc:16" => assert!(delivered > 2 * wire, "{mode}: {b:?}"),
            _ => assert!(delivered > 10 * wire, "{mode}: {b:?}"),
        }
    }
    assert!(checksums.windows(2).all(|w| w[0] == w[1]), "{checksums:?}");

    let bad = run_cli(
        &[
            "run",
            "-n",
            "2",
            "--codec",
            "fixed:nope",
            "--",
            vargr_bench(),
            "rank-info",
        ],
        Duration::from_secs(30),
    );
    assert!(!bad.status.success());
    assert!(bad.stderr.contains("--codec"), "{}", bad.stderr);
}

#[test]
fn messages_sent_uncompressed_cross_as_they_are() {
    let _shared = beside_others();
    // Twelve messages of 256 KiB of zeros through fixed:lz4, every other one sent with
    // Comm::send_uncompressed (codec-bench-rank --pair-raw): six cross whole, six as a
    // few hundred bytes each, and rank 1 checks what it got.
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    let r = run_cli(
        &[
            "run",
            "-n",
            "2",
            "--sites",
            "2",
            "--wan",
            "rtt=2ms,bandwidth=1gbit",
            "--codec",
            "fixed:lz4",
            "--trace",
            trace.to_str().unwrap(),
            "--",
            vargr_bench(),
            "codec-bench-rank",
            "--set",
            "i32-r100-1m",
            "--limit",
            "1048576",
            "--message",
            "262144",
            "--warmup",
            "0",
            "--reps",
            "6",
            "--pair-raw",
        ],
        Duration::from_secs(60),
    );
    assert!(r.status.success(), "{r:?}");
    let b = stage_bytes(&trace);
    let (wire, delivered) = (b["link/stage/emu/in"], b["link/stage/codec/in"]);
    let raw = 6u64 << 18;
    assert!(delivered >= 2 * raw, "{b:?}");
    assert!(wire >= raw && wire < raw + raw / 20, "{b:?}");
}

#[test]
fn a_codec_config_file_sets_the_engine_and_a_bad_one_names_the_setting() {
    let _shared = beside_others();
    let tmp = tempfile::tempdir().unwrap();
    // Nothing is large enough to be worth compressing: adaptive sends every frame raw.
    let config = tmp.path().join("engine.toml");
    std::fs::write(&config, "min_size = 1073741824\n").unwrap();
    let trace = tmp.path().join("trace");
    let r = two_sites(&[
        "--codec",
        "adaptive",
        "--codec-config",
        config.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert!(r.stdout.contains("bcast ok allreduce ok"), "{}", r.stdout);
    let b = stage_bytes(&trace);
    let (wire, delivered) = (b["link/stage/emu/in"], b["link/stage/codec/in"]);
    assert!(delivered >= 2 << 20, "{b:?}");
    assert_eq!(wire, delivered, "{b:?}");

    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "min_sise = 1\n").unwrap();
    let missing = tmp.path().join("missing.toml");
    for (file, says) in [(&bad, "min_sise"), (&missing, "missing.toml")] {
        let r = run_cli(
            &[
                "run",
                "-n",
                "2",
                "--codec-config",
                file.to_str().unwrap(),
                "--",
                vargr_bench(),
                "rank-info",
            ],
            Duration::from_secs(30),
        );
        assert!(!r.status.success(), "{file:?}");
        assert!(r.stderr.contains("--codec-config"), "{}", r.stderr);
        assert!(r.stderr.contains(says), "{}", r.stderr);
    }
}

#[test]
fn the_guided_strategy_records_plans_and_applies_rules() {
    let _shared = beside_others();
    let tmp = tempfile::tempdir().unwrap();
    let samples = tmp.path().join("samples");
    let traced = tmp.path().join("traced");
    let (s, t) = (samples.to_str().unwrap(), traced.to_str().unwrap());
    // 1. A first run records what crossed between the sites.
    two_sites(&["--codec", "off", "--codec-samples", s]);
    // 2. Offline: a rule per kind of message.
    let plan = run_cli(
        &[
            "codec",
            "plan",
            s,
            "--bandwidth",
            "100mbit",
            "--latency",
            "1ms",
        ],
        Duration::from_secs(120),
    );
    assert!(plan.status.success(), "{plan:?}");
    assert!(plan.stdout.contains("kinds of message"), "{}", plan.stdout);
    let plan_file = samples.join("plan.json");
    let rules: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&plan_file).unwrap()).unwrap();
    assert!(!rules["rules"].as_object().unwrap().is_empty(), "{rules}");
    // 3. A second run applies the rules: same results, far fewer bytes between sites.
    let guided = format!("guided:{}", plan_file.display());
    let r = two_sites(&["--codec", &guided, "--trace", t]);
    assert!(r
        .stdout
        .lines()
        .all(|l| l.contains("bcast ok allreduce ok")));
    let b = stage_bytes(&traced);
    assert!(
        b["link/stage/codec/in"] > 10 * b["link/stage/emu/in"],
        "{b:?}"
    );

    // A plan that is not there is named.
    let bad = run_cli(
        &[
            "run",
            "-n",
            "2",
            "--codec",
            "guided:/nonexistent/plan.json",
            "--",
            vargr_bench(),
            "rank-info",
        ],
        Duration::from_secs(30),
    );
    assert!(!bad.status.success());
    assert!(
        bad.stderr.contains("/nonexistent/plan.json"),
        "{}",
        bad.stderr
    );
    let empty = run_cli(&["codec", "plan", t], Duration::from_secs(30));
    assert!(!empty.status.success());
    assert!(
        empty.stderr.contains("no codec samples"),
        "{}",
        empty.stderr
    );
}

/// A network namespace whose loopback is shaped with `tc tbf`, removed on drop.
struct ShapedNamespace(String);

impl ShapedNamespace {
    /// An error saying why where namespaces or tbf are not available here.
    fn new(rate: &str) -> Result<ShapedNamespace, String> {
        let name = format!("vargr-test-{}", std::process::id());
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("ip {args:?}: {e}"))
                .and_then(|o| {
                    if o.status.success() {
                        Ok(())
                    } else {
                        Err(format!(
                            "ip {args:?}: {}",
                            String::from_utf8_lossy(&o.stderr).trim()
                        ))
                    }
                })
        };
        ip(&["netns", "add", &name])?;
        let ns = ShapedNamespace(name.clone());
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"])?;
        // The ranks advertise this machine's host name: its addresses must be here too.
        let host = vargr_net::launch::hostname();
        let addrs = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), 0))
            .map_err(|e| format!("resolving {host}: {e}"))?;
        for a in addrs.filter(|a| a.is_ipv4() && !a.ip().is_loopback()) {
            let cidr = format!("{}/32", a.ip());
            ip(&[
                "netns", "exec", &name, "ip", "addr", "add", &cidr, "dev", "lo",
            ])?;
        }
        ip(&[
            "netns", "exec", &name, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate,
            "burst", "256kb", "limit", "8mb",
        ])?;
        Ok(ns)
    }
}

impl Drop for ShapedNamespace {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", &self.0])
            .output();
    }
}

#[test]
fn a_real_slow_path_is_learned_from_tcp_info_and_compressed() {
    let _alone = PATH_TEST_ALONE.write().unwrap_or_else(|e| e.into_inner());
    // Two "hosts" of two sites over TCP, with no --wan: the only way the adaptive engine
    // can know the path is slow is the kernel's TCP_INFO readings.
    let ns = match ShapedNamespace::new("20mbit") {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("skipped: no shaped network namespace here ({why})");
            return;
        }
    };
    // 24 messages of 256 KiB leave rank 0. With the codec off all of them cross the
    // path; adaptive sends the first raw while it learns, then about a sixth: about 22 %
    // of the bytes in all, also with both cores busy. Half is the bound: a stage that
    // learns the path but keeps the codec it picked for a fast link sends 60 % or more.
    let sent = 24u64 << 18;
    let off = job_in_namespace(&ns, "off");
    assert!(off["link/stage/codec/out"] > sent, "{off:?}");
    let adaptive = job_in_namespace(&ns, "adaptive");
    assert!(
        (adaptive["link/stage/codec/out"] as f64) < 0.5 * sent as f64,
        "{adaptive:?}"
    );
}

/// Stage bytes of a two-host job over TCP inside `ns`, with `codec` on its links.
fn job_in_namespace(ns: &ShapedNamespace, codec: &str) -> BTreeMap<String, u64> {
    let tmp = tempfile::tempdir().unwrap();
    let hosts = tmp.path().join("hosts");
    let host = vargr_net::launch::hostname();
    std::fs::write(
        &hosts,
        format!("{host} slots=1 site=a\nlocalhost slots=1 site=b\n"),
    )
    .unwrap();
    let trace = tmp.path().join("trace");
    let mut child = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.0, vargr(), "run", "-n", "2", "--hosts"])
        .arg(&hosts)
        .args(["--launcher", "sh -c {cmd}", "--codec", codec, "--trace"])
        .arg(&trace)
        .args(["--", vargr_bench(), "codec-bench-rank"])
        .args(["--set", "f64-pattern-r50-1m", "--limit", "1048576"])
        .args(["--message", "262144", "--warmup", "2", "--reps", "22"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_guarded(&mut child, Duration::from_secs(120)).expect("the job hung");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{codec}: {status}: {err}");
    stage_bytes(&trace)
}

#[test]
fn a_dedup_stage_sends_repeated_segments_as_fingerprints() {
    let _shared = beside_others();
    // The codec off, so what shrinks is the dedup stage's doing: the same field is
    // broadcast four times, and the repeats cross as fingerprints.
    let mut sums = Vec::new();
    for dedup in [None, Some("cdc:256:1k:8k")] {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().to_str().unwrap();
        let mut extra = vec!["--codec", "off", "--trace", d];
        if let Some(spec) = dedup {
            extra.extend_from_slice(&["--dedup", spec]);
        }
        let r = two_sites_with(&extra, &["--rounds", "4"]);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert!(
            lines.iter().all(|l| l.contains("bcast ok allreduce ok")),
            "{dedup:?}: {}",
            r.stdout
        );
        sums.push(lines[0].rsplit(' ').next().unwrap().to_string());
        if dedup.is_some() {
            let b = stage_bytes(tmp.path());
            let (wire, delivered) = (b["link/stage/emu/in"], b["link/stage/dedup/in"]);
            // The WAN carries each of the four 512 KiB broadcasts once, and the
            // allreduce: the three repeats (1.5 MiB) cross as fingerprints, ~6 bytes
            // per 1 KiB segment.
            assert!(delivered >= 3 << 20, "{b:?}");
            assert!(delivered - wire > 1_400_000, "{b:?}");
        }
    }
    assert_eq!(sums[0], sums[1]);
    let bad = run_cli(
        &[
            "run",
            "-n",
            "2",
            "--sites",
            "2",
            "--dedup",
            "tiles",
            "--",
            vargr_bench(),
            "rank-info",
        ],
        Duration::from_secs(30),
    );
    assert!(!bad.status.success());
    // The one configuration names the flag, its value and what is wrong with it.
    assert!(
        bad.stderr.contains("--dedup")
            && bad.stderr.contains("\"tiles\"")
            && bad.stderr.contains("byte streams"),
        "{}",
        bad.stderr
    );
}
