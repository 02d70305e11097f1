//! Path specifications on trees of real processes: a C user stage put on some paths'
//! links by name changes the data that crosses them and no other; a failing one closes
//! its link with an error naming the stage and the link while the rest of the tree goes
//! on; `vargr paths show` draws the merged tree. Needs a C compiler (`cc`) on the PATH.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use vargr_paths::{Built, PathSpec};
use vargr_tbon::{BackendSpec, Network, Stream, SyncMode, TbonError, Value};

const GUARD: Duration = Duration::from_secs(20);

/// The example stage plugin, compiled once per test process: a process registers a
/// stage name once, so every tree here uses the same file.
fn stage_plugin() -> &'static Path {
    static SO: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    &SO.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let so = dir.path().join("libstages.so");
        let o = Command::new("cc")
            .args(["-shared", "-fPIC", "-Wall", "-Werror", "-I"])
            .arg(root.join("crates/vargr-stage/include"))
            .arg(root.join("examples/stage-plugin/stages.c"))
            .arg("-o")
            .arg(&so)
            .output()
            .expect("running cc");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (dir, so)
    })
    .1
}

/// Writes a specification that loads the example plugin.
fn spec(dir: &Path, paths: &str) -> PathBuf {
    let f = dir.join("paths.toml");
    std::fs::write(
        &f,
        format!(
            "plugins = [{:?}]\n[element]\nname = \"E\"\nhost = \"fe\"\n{paths}",
            stage_plugin()
        ),
    )
    .unwrap();
    f
}

/// The tree a specification file makes.
fn build(file: &Path) -> Built {
    PathSpec::load(file)
        .unwrap()
        .merge()
        .unwrap()
        .build()
        .unwrap()
}

/// Starts `built` with echo back-ends and its stream (don't-wait, so each answer comes
/// as it arrives).
fn start(built: &Built) -> (Network, Stream) {
    built
        .start(
            BackendSpec::command(vargr(), &["backend", "echo"]),
            opts(),
            |o| o.sync(SyncMode::DontWait),
        )
        .unwrap()
}

fn text(p: &vargr_tbon::Packet) -> String {
    match p.values.as_slice() {
        [Value::Str(s)] => s.clone(),
        other => panic!("expected one %s, got {other:?}"),
    }
}

#[test]
fn a_c_stage_on_some_paths_changes_what_crosses_their_links_only() {
    let dir = tempfile::tempdir().unwrap();
    // a's back-ends send through `upper` to m; b's reach m plainly, and m's link to the
    // front-end XORs both ways (the wire differs, the data does not).
    let file = spec(
        dir.path(),
        "[[path]]\nfrom = \"a:0-1\"\nstages = [\"upper\", \"remote:m\", \"remote:fe\"]\n\
         [[path]]\nfrom = \"b:0-1\"\nstages = [\"remote:m\", \"xor:7\", \"remote:fe\"]\n",
    );
    let (net, s) = start(&build(&file));
    assert_eq!(net.num_backends(), 4);
    s.send(TAG_ECHO, "%s", vec![Value::Str("hello paths".into())])
        .unwrap();
    let mut got: Vec<(String, String)> = (0..4)
        .map(|_| {
            let p = recv_ok(&s, GUARD);
            let host = net.topology().backend(p.source).unwrap().host.clone();
            (host, text(&p))
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("a".into(), "HELLO PATHS".into()),
            ("a".into(), "HELLO PATHS".into()),
            ("b".into(), "hello paths".into()),
            ("b".into(), "hello paths".into()),
        ]
    );
    assert!(net.faults().is_empty(), "{:?}", net.faults());
    net.shutdown().unwrap();
}

#[test]
fn a_failing_c_stage_closes_its_link_naming_the_stage_and_the_link() {
    let dir = tempfile::tempdir().unwrap();
    // faulty:0 fails on the first data frame: the front-end's, sent down to a:0.
    let file = spec(
        dir.path(),
        "[[path]]\nfrom = \"a:0\"\nstages = [\"faulty:0\", \"remote:fe\"]\n\
         [[path]]\nfrom = \"b:0\"\nstages = [\"remote:fe\"]\n",
    );
    let built = build(&file);
    let a = built
        .topology
        .nodes()
        .find(|n| n.host == "a")
        .unwrap()
        .clone();
    let (net, s) = start(&built);
    for round in 0..2 {
        s.send(TAG_ECHO, "%s", vec![Value::Str(format!("round {round}"))])
            .unwrap();
        // b answers every round; the stream also reports a's loss, once.
        let mut answered = false;
        while !answered {
            match recv_within(&s, GUARD) {
                Ok(p) => {
                    assert_eq!(text(&p), format!("round {round}"));
                    assert_eq!(net.topology().backend(p.source).unwrap().host, "b");
                    answered = true;
                }
                Err(TbonError::NodeLost { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
    let link = format!("node {} on a", a.id);
    let deadline = std::time::Instant::now() + GUARD;
    loop {
        let faults: Vec<String> = net.faults().iter().map(|e| e.to_string()).collect();
        if faults.iter().any(|f| {
            f.contains("stage faulty") && f.contains(&link) && f.contains("bad output length")
        }) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{faults:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    net.shutdown().unwrap();
}

#[test]
fn paths_show_draws_the_merged_tree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let gsum = root.join("examples/paths/gsum.toml");
    let r = run_cli(&["paths", "show", gsum.to_str().unwrap()], GUARD);
    assert!(r.status.success(), "{}", r.stderr);
    // The drawing itself is checked in crates/vargr-paths/tests/spec.rs; the CLI prints it.
    let text = std::fs::read_to_string(&gsum).unwrap();
    let tree = PathSpec::parse(&text, "gsum.toml")
        .unwrap()
        .merge()
        .unwrap();
    assert_eq!(r.stdout, tree.draw());
    assert!(
        r.stdout.starts_with("PI-SUM1 @ p0:0 (element)"),
        "{}",
        r.stdout
    );
    let r = run_cli(&["paths", "show", "--json", gsum.to_str().unwrap()], GUARD);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["element"]["name"], "PI-SUM1");
    // A stage the file's plugins do not list is named, not refused: a Rust program may
    // register it; a bad built-in stage is refused with its path and line.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p.toml");
    std::fs::write(
        &f,
        "[element]\nname = \"E\"\nhost = \"fe\"\n[[path]]\nfrom = \"a:0\"\nstages = [\"mine\", \"remote:fe\"]\n",
    )
    .unwrap();
    let r = run_cli(&["paths", "show", f.to_str().unwrap()], GUARD);
    assert!(
        r.status.success() && r.stderr.contains("mine"),
        "{}",
        r.stderr
    );
    std::fs::write(
        &f,
        "[element]\nname = \"E\"\nhost = \"fe\"\n[[path]]\nfrom = \"a:0\"\nstages = [\"emu:rtt=slow\", \"remote:fe\"]\n",
    )
    .unwrap();
    let r = run_cli(&["paths", "show", f.to_str().unwrap()], GUARD);
    assert!(!r.status.success());
    assert!(
        r.stderr
            .contains("p.toml:6: path 1 (from \"a:0\"), stage \"emu:rtt=slow\""),
        "{}",
        r.stderr
    );
}
