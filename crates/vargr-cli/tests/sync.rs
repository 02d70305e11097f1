//! `vargr sync` as users run it: real processes over pipes, ssh (a stand-in that runs
//! the command locally, and a real sshd where one can run), a daemon over TCP, and the
//! WAN emulator; every copy compared byte for byte.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{vargr, wait_guarded, SyncDaemon as Daemon};

/// Runs `vargr ARGS` with `envs`, with a hang guard; returns (success, stdout, stderr).
fn vargr_env(args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    vargr_in(None, args, envs)
}

/// [`vargr_env`] in the working directory `cwd`.
fn vargr_in(cwd: Option<&Path>, args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new(vargr());
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("spawn vargr");
    let out = std::thread::spawn({
        let mut o = child.stdout.take().unwrap();
        move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut o, &mut s).unwrap();
            s
        }
    });
    let mut e = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut e, &mut s).unwrap();
        s
    });
    let status = wait_guarded(&mut child, Duration::from_secs(120))
        .unwrap_or_else(|| panic!("vargr {args:?} hung"));
    (status.success(), out.join().unwrap(), err.join().unwrap())
}

fn write_random(path: &Path, n: usize, seed: u64) {
    std::fs::write(path, common::random_bytes(n, seed)).unwrap();
}

fn assert_same(a: &Path, b: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(a).unwrap().map(|e| e.unwrap()).collect();
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let (pa, pb) = (e.path(), b.join(e.file_name()));
        if pa.is_dir() {
            assert_same(&pa, &pb);
        } else {
            assert_eq!(
                std::fs::read(&pa).unwrap(),
                std::fs::read(&pb).unwrap_or_else(|err| panic!("{}: {err}", pb.display())),
                "{}",
                pa.display()
            );
        }
    }
}

fn setup() -> (tempfile::TempDir, String) {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    write_random(&src.join("a.bin"), 1 << 20, 3);
    std::fs::write(src.join("sub/notes.txt"), "notes\n".repeat(1000)).unwrap();
    let secret = "ab".repeat(32);
    std::fs::write(d.path().join("secret"), &secret).unwrap();
    std::fs::set_permissions(
        d.path().join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    (d, secret)
}

#[test]
fn a_tree_syncs_locally_over_ssh_and_to_a_daemon() {
    let (d, _) = setup();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    let cache = p("cache");

    // Local: a child `vargr sync --server` over pipes.
    let (ok, out, err) = vargr_env(
        &[
            "sync",
            &p("src"),
            &p("local"),
            "--cache-dir",
            &cache,
            "--json",
        ],
        &[],
    );
    assert!(ok, "{err}");
    assert_same(&d.path().join("src"), &d.path().join("local"));
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["files_sent"], 2);

    // Both sides' caches hold what crossed; `vargr dedup stats` shows them.
    let (ok, out, err) = vargr_env(&["dedup", "stats", "--cache-dir", &cache, "--json"], &[]);
    assert!(ok, "{err}");
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    let peers: Vec<&str> = stats
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["peer"].as_str().unwrap())
        .collect();
    assert!(peers.iter().any(|p| p.starts_with("to-")), "{peers:?}");
    assert!(peers.iter().any(|p| p.starts_with("from-")), "{peers:?}");
    // 1 MiB at the default 32 KiB segments on average: about 32 segments.
    for p in stats.as_array().unwrap() {
        assert!(p["holds"]["segments"].as_u64().unwrap() > 20, "{p}");
        assert!(p["last_session"]["inserts"].as_u64().unwrap() > 20, "{p}");
    }

    // ssh: a stand-in that checks `--` comes before the host, drops both and runs the
    // command here.
    let fake = d.path().join("fake-ssh");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = -- ] || exit 97\nshift 2\nexec \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let dest = format!("somehost:{}", p("viassh"));
    let (ok, _, err) = vargr_env(
        &["sync", &p("src"), &dest, "--remote-vargr", vargr(), "-q"],
        &[
            ("VARGR_SSH", fake.to_str().unwrap()),
            ("VARGR_CACHE_DIR", &cache),
        ],
    );
    assert!(ok, "{err}");
    assert_same(&d.path().join("src"), &d.path().join("viassh"));

    // A daemon: the right secret copies, a wrong one and an escaping path are refused.
    let daemon = Daemon::start(
        &d.path().join("served"),
        &d.path().join("secret"),
        &d.path().join("dcache"),
    );
    let url = |path: &str| format!("vargr://127.0.0.1:{}/{path}", daemon.port);
    let secret_file = p("secret");
    let (ok, _, err) = vargr_env(
        &[
            "sync",
            &p("src"),
            &url("copy"),
            "--secret-file",
            &secret_file,
            "--cache-dir",
            &cache,
        ],
        &[],
    );
    assert!(ok, "{err}");
    assert_same(&d.path().join("src"), &d.path().join("served/copy"));
    let wrong = "cd".repeat(32);
    let (ok, _, err) = vargr_env(
        &["sync", &p("src"), &url("copy2"), "--cache-dir", &cache],
        &[("VARGR_SYNC_SECRET", &wrong)],
    );
    assert!(!ok);
    assert!(err.contains("127.0.0.1"), "{err}");
    assert!(!d.path().join("served/copy2").exists());
    let (ok, _, err) = vargr_env(
        &[
            "sync",
            &p("src"),
            &url("../escape"),
            "--secret-file",
            &secret_file,
            "--cache-dir",
            &cache,
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("not a plain relative path"), "{err}");
    assert!(!d.path().join("escape").exists());
}

/// A real sshd on a free local port with throwaway keys, for the user running the
/// tests. `None` where it cannot run (no sshd, or not allowed its privilege-separation
/// directory); `scripts/test.sh` installs it and sets `VARGR_REQUIRE_SSHD`, so there the
/// test cannot skip.
struct Sshd {
    child: Child,
    port: u16,
    key: std::path::PathBuf,
}

impl Sshd {
    fn start(dir: &Path) -> Option<Sshd> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() || std::fs::create_dir_all("/run/sshd").is_err() {
            return None;
        }
        let keygen = |name: &str| {
            let ok = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(name))
                .status()
                .is_ok_and(|s| s.success());
            ok.then(|| dir.join(name))
        };
        let (host, key) = (keygen("host")?, keygen("user")?);
        std::fs::copy(dir.join("user.pub"), dir.join("authorized_keys")).ok()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PidFile {}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 PermitRootLogin prohibit-password\n",
                host.display(),
                dir.join("authorized_keys").display(),
                dir.join("sshd.pid").display()
            ),
        )
        .ok()?;
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut d = Sshd { child, port, key };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline || d.child.try_wait().ok().flatten().is_some() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(d)
    }

    fn ssh_command(&self) -> String {
        format!(
            "ssh -p {} -i {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
             -o BatchMode=yes -o LogLevel=ERROR",
            self.port,
            self.key.display()
        )
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_tree_syncs_over_real_ssh() {
    let (d, _) = setup();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    std::fs::create_dir_all(p("sshd")).unwrap();
    let Some(sshd) = Sshd::start(&d.path().join("sshd")) else {
        assert!(
            std::env::var_os("VARGR_REQUIRE_SSHD").is_none(),
            "VARGR_REQUIRE_SSHD is set but sshd could not start"
        );
        eprintln!("skipped: no sshd can run here");
        return;
    };
    // ssh hands the remote shell one command line: the remote side's cache goes to
    // this test's directory, not the user's.
    let remote = format!("env VARGR_CACHE_DIR={} {}", p("remote-cache"), vargr());
    // A space in the path: ssh joins arguments into one line for the remote shell.
    let dest = format!("127.0.0.1:{}", p("via ssh"));
    let run = || {
        let (ok, out, err) = vargr_env(
            &[
                "sync",
                &p("src"),
                &dest,
                "--remote-vargr",
                &remote,
                "--cache-dir",
                &p("cache"),
                "--json",
            ],
            &[("VARGR_SSH", &sshd.ssh_command())],
        );
        assert!(ok, "{err}");
        assert_same(&d.path().join("src"), &d.path().join("via ssh"));
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    assert_eq!(run()["files_sent"], 2);
    // Unchanged files are skipped on the second run.
    let again = run();
    assert_eq!(again["files_sent"], 0, "{again}");
    assert!(d.path().join("remote-cache").exists());
}

/// `vargr sync DIR/src DIR/dest` with the cache in DIR/cache: checks the copy and
/// returns the report.
fn sync_src_to_dest(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let p = |s: &str| dir.join(s).to_str().unwrap().to_string();
    let (src, dest, cache) = (p("src"), p("dest"), p("cache"));
    let mut args = vec!["sync", &src, &dest, "--cache-dir", &cache, "--json"];
    args.extend_from_slice(extra);
    let (ok, out, err) = vargr_env(&args, &[]);
    assert!(ok, "{err}");
    assert_same(&dir.join("src"), &dir.join("dest"));
    serde_json::from_str(&out).unwrap()
}

#[test]
fn an_edited_file_crosses_as_deltas_in_the_next_session() {
    let d = tempfile::tempdir().unwrap();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    std::fs::create_dir_all(p("src")).unwrap();
    let file = d.path().join("src/data.bin");
    write_random(&file, 2 << 20, 21);
    let sync = || sync_src_to_dest(d.path(), &["--delta-level", "9"]);
    let first = sync();
    assert_eq!(first["files_sent"], 1);
    // One byte in every 5,000 changes: every segment differs from the first session's,
    // so only deltas against the cache (their bases found through the index the first
    // session saved) keep the second transfer small.
    let mut v = std::fs::read(&file).unwrap();
    for i in (2_500..v.len()).step_by(5_000) {
        v[i] ^= 0x5a;
    }
    std::fs::write(&file, &v).unwrap();
    let second = sync();
    assert_eq!(second["files_sent"], 1);
    // 2 MiB at the default 32 KiB segments on average: about 64 segments.
    let deltas = second["dedup"]["deltas"].as_u64().unwrap();
    assert!(deltas > 40, "{second}");
    // Their bases came from the first session, so their bytes went in the batches
    // asked for.
    assert_eq!(
        second["dedup"]["batched"].as_u64(),
        Some(deltas),
        "{second}"
    );
    let wire = second["bytes_on_wire"].as_u64().unwrap();
    assert!(
        wire < (2 << 20) / 10,
        "{wire} bytes for a 2 MiB file with 420 changed bytes"
    );

    // Both sides kept the order of what crossed (a stream model beside each cache), so
    // a third version with one change names the unchanged segments that follow it by
    // one byte each instead of a fingerprint.
    let models: Vec<_> = walk(&d.path().join("cache"))
        .into_iter()
        .filter(|f| f.file_name().is_some_and(|n| n == "stream.model"))
        .collect();
    assert_eq!(models.len(), 2, "{models:?}");
    v[100] ^= 1;
    std::fs::write(&file, &v).unwrap();
    let third = sync();
    let (named, predicted) = (
        third["dedup"]["fingerprinted"].as_u64().unwrap(),
        third["dedup"]["predicted"].as_u64().unwrap(),
    );
    assert!(named > 40 && predicted + 2 >= named, "{third}");

    // By default the deltas of another edit go inline, none in a batch.
    for i in (1_000..v.len()).step_by(5_000) {
        v[i] ^= 0x33;
    }
    std::fs::write(&file, &v).unwrap();
    let inline = sync_src_to_dest(d.path(), &[]);
    assert!(inline["dedup"]["deltas"].as_u64().unwrap() > 40, "{inline}");
    assert_eq!(inline["dedup"]["batched"].as_u64(), Some(0), "{inline}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn an_interrupted_sync_resumes_sending_fingerprints_for_what_crossed() {
    let (d, _) = setup();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    let big = 24usize << 20;
    write_random(&d.path().join("src/big.bin"), big, 11);
    let daemon = Daemon::start(
        &d.path().join("served"),
        &d.path().join("secret"),
        &d.path().join("dcache"),
    );
    // A 40 Mbit/s path in front of the daemon, so the copy takes seconds.
    let emu_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut emu = Command::new(vargr())
        .args(["emu", "--listen", &format!("127.0.0.1:{emu_port}")])
        .args(["--connect", &format!("127.0.0.1:{}", daemon.port)])
        .args(["--bandwidth", "40mbit", "--latency", "1ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let cache = p("cache");
    let secret_file = p("secret");
    let mut sender = Command::new(vargr())
        .args([
            "sync",
            &p("src"),
            &format!("vargr://127.0.0.1:{emu_port}/copy"),
        ])
        .args(["--secret-file", &secret_file, "--cache-dir", &cache, "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Interrupt once a third of the big file has landed.
    let partial = d.path().join("served/copy/.big.bin.vargr-partial");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&partial).map_or(0, |m| m.len()) < (big / 3) as u64 {
        assert!(
            Instant::now() < deadline,
            "the copy never got a third of the way"
        );
        assert!(
            sender.try_wait().unwrap().is_none(),
            "the copy finished before the interruption"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sender.kill().unwrap();
    sender.wait().unwrap();

    let _ = emu.kill();
    let _ = emu.wait();

    // Again, straight to the daemon this time: the sender's cache is per receiver,
    // whatever address reaches it (the daemon's session for the killed sender may take
    // a moment to let go of its cache).
    let url = format!("vargr://127.0.0.1:{}/copy", daemon.port);
    let args = [
        "sync",
        &p("src"),
        &url,
        "--secret-file",
        &secret_file,
        "--cache-dir",
        &cache,
        "--json",
    ];
    let mut tries = 0;
    let report = loop {
        let (ok, out, err) = vargr_env(&args, &[]);
        if ok {
            break serde_json::from_str::<serde_json::Value>(&out).unwrap();
        }
        tries += 1;
        assert!(tries < 6, "{err}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_same(&d.path().join("src"), &d.path().join("served/copy"));
    let wire = report["bytes_on_wire"].as_u64().unwrap();
    assert!(
        wire < (big as u64) * 4 / 5,
        "the rerun sent {wire} bytes for a {big}-byte file a third of which had crossed"
    );
}

#[test]
fn the_model_reproduces_the_seeds_two_level_advantage() {
    let (ok, out, err) = vargr_env(&["dedup", "model", "--json"], &[]);
    assert!(ok, "{err}");
    let m: serde_json::Value = serde_json::from_str(&out).unwrap();
    let two = m["two_level"]["ratio"].as_f64().unwrap();
    let one = m["one_level"]["ratio"].as_f64().unwrap();
    // The seed: about 2.3 against 1.1 at 75 % redundancy and 32-byte segments.
    assert!(
        (two - 2.3).abs() < 0.05 && (one - 1.1).abs() < 0.05,
        "{two} {one}"
    );
    let (ok, _, err) = vargr_env(&["dedup", "model", "--redundancy", "1.5"], &[]);
    assert!(!ok);
    assert!(err.contains("redundancy"), "{err}");
}

#[test]
fn an_unchanged_small_file_resent_costs_a_few_bytes() {
    let d = tempfile::tempdir().unwrap();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    let files = 300u64;
    std::fs::create_dir_all(p("src")).unwrap();
    for i in 0..files {
        write_random(&d.path().join(format!("src/f{i:03}.bin")), 1000, 100 + i);
    }
    let sync = || sync_src_to_dest(d.path(), &[]);
    assert_eq!(sync()["files_sent"], files);
    // New mtimes, same bytes (a tree unpacked again): every file is sent, as names.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    for i in 0..files {
        let f = std::fs::File::options()
            .write(true)
            .open(d.path().join(format!("src/f{i:03}.bin")))
            .unwrap();
        f.set_modified(later).unwrap();
    }
    let again = sync();
    assert_eq!(again["files_sent"], files, "{again}");
    // A file's start and end cross raw and a group closes every 20 segments, not at
    // every file: a group hash per file alone was 17 bytes.
    let wire = again["bytes_on_wire"].as_u64().unwrap();
    assert!(
        wire < files * 15,
        "{wire} bytes for {files} unchanged files"
    );
}

/// `vargr sync src -- '-oProxyCommand=touch pwned:x'` handed ssh an option that ran a
/// command on this machine; the host is refused now, and nothing runs.
#[test]
fn a_host_that_is_an_ssh_option_is_refused_and_runs_nothing() {
    let (d, _) = setup();
    let src = d.path().join("src");
    let has_ssh = Command::new("ssh")
        .arg("-V")
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    // The real ssh where there is one (it runs ProxyCommand before connecting), else
    // a stand-in that runs it the same way.
    let fake = d.path().join("proxy-ssh");
    std::fs::write(
        &fake,
        "#!/bin/sh\nfor a; do case $a in --) exit 1;; -oProxyCommand=*) exec sh -c \"${a#-oProxyCommand=}\";; esac; done\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let ssh = if has_ssh {
        "ssh -oBatchMode=yes".to_string()
    } else {
        fake.display().to_string()
    };
    let (ok, _, err) = vargr_in(
        Some(d.path()),
        &[
            "sync",
            src.to_str().unwrap(),
            "--",
            "-oProxyCommand=touch pwned:x",
        ],
        &[("VARGR_SSH", &ssh)],
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!d.path().join("pwned").exists(), "the ProxyCommand ran");
    assert!(!ok);
    assert!(
        err.contains("refusing host \"-oProxyCommand=touch pwned\""),
        "{err}"
    );
}

/// `$VARGR_SSH` is split with shell rules: a quoted program path with a space and a
/// quoted option value each stay one word (white-space splitting broke both).
#[test]
fn vargr_ssh_is_split_with_shell_quoting() {
    let (d, _) = setup();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    std::fs::create_dir_all(d.path().join("fake dir")).unwrap();
    let fake = d.path().join("fake dir/ssh");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = -o ] && [ \"$2\" = 'Opt=a b' ] || exit 98\nshift 2\n\
         [ \"$1\" = -- ] || exit 97\nshift 2\nexec \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let ssh = format!("'{}' -o \"Opt=a b\"", fake.display());
    let dest = format!("somehost:{}", p("viassh"));
    let (ok, _, err) = vargr_env(
        &["sync", &p("src"), &dest, "--remote-vargr", vargr(), "-q"],
        &[("VARGR_SSH", &ssh), ("VARGR_CACHE_DIR", &p("cache"))],
    );
    assert!(ok, "{err}");
    assert_same(&d.path().join("src"), &d.path().join("viassh"));
}

/// A link named like the receiver's temporary file, planted in a local destination:
/// the old receiver wrote the sent file into the link's target.
#[test]
fn a_local_sync_does_not_write_through_a_planted_partial_link() {
    let (d, _) = setup();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    std::fs::write(p("victim"), "precious").unwrap();
    std::fs::create_dir_all(p("dest/sub")).unwrap();
    std::os::unix::fs::symlink(p("victim"), p("dest/sub/.notes.txt.vargr-partial")).unwrap();
    let (ok, _, err) = vargr_env(
        &[
            "sync",
            &p("src"),
            &p("dest"),
            "--cache-dir",
            &p("cache"),
            "-q",
        ],
        &[],
    );
    assert!(ok, "{err}");
    assert_same(&d.path().join("src"), &d.path().join("dest"));
    assert_eq!(std::fs::read_to_string(p("victim")).unwrap(), "precious");
}

fn mode_of(p: &Path) -> u32 {
    std::os::unix::fs::MetadataExt::mode(&std::fs::symlink_metadata(p).unwrap()) & 0o7777
}

/// Through the daemon: setuid stripped by default and kept with --keep-special-bits,
/// and `d -> outside` in one session followed by `d/` in the next stays inside.
#[test]
fn a_daemon_strips_special_bits_and_follows_no_link() {
    let (d, _) = setup();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    let sync_to = |daemon: &Daemon, path: &str| {
        let url = format!("vargr://127.0.0.1:{}/{path}", daemon.port);
        let (ok, _, err) = vargr_env(
            &[
                "sync",
                &p("src"),
                &url,
                "--secret-file",
                &p("secret"),
                "--cache-dir",
                &p("cache"),
                "-q",
            ],
            &[],
        );
        assert!(ok, "{err}");
    };
    let set_mode = |f: &str, m: u32| {
        std::fs::set_permissions(p(f), std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
    };
    set_mode("src/a.bin", 0o4755);
    let daemon = Daemon::start(
        &d.path().join("served"),
        &d.path().join("secret"),
        &d.path().join("dcache"),
    );
    sync_to(&daemon, "copy");
    assert_eq!(mode_of(&d.path().join("served/copy/a.bin")), 0o755);
    let keeping = Daemon::start_with(
        &d.path().join("kept"),
        &d.path().join("secret"),
        &d.path().join("kcache"),
        &["--keep-special-bits"],
    );
    sync_to(&keeping, "copy");
    assert_eq!(mode_of(&d.path().join("kept/copy/a.bin")), 0o4755);

    // The link, then a directory of the same name with a file in it.
    std::fs::create_dir_all(p("outside")).unwrap();
    set_mode("outside", 0o755);
    std::os::unix::fs::symlink(p("outside"), p("src/d")).unwrap();
    sync_to(&daemon, "copy");
    assert_eq!(
        std::fs::read_link(p("served/copy/d")).unwrap(),
        d.path().join("outside")
    );
    std::fs::remove_file(p("src/d")).unwrap();
    std::fs::create_dir(p("src/d")).unwrap();
    std::fs::write(p("src/d/x"), "planted").unwrap();
    set_mode("src/d", 0o700);
    sync_to(&daemon, "copy");
    assert_eq!(
        std::fs::read_dir(p("outside")).unwrap().count(),
        0,
        "written through the link"
    );
    assert_eq!(
        mode_of(&d.path().join("outside")),
        0o755,
        "chmod through the link"
    );
    assert_same(&d.path().join("src"), &d.path().join("served/copy"));
}

#[test]
fn a_read_only_daemon_refuses_uploads() {
    let (d, _) = setup();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    let daemon = Daemon::start_with(
        &d.path().join("served"),
        &d.path().join("secret"),
        &d.path().join("dcache"),
        &["--read-only"],
    );
    let url = format!("vargr://127.0.0.1:{}/copy", daemon.port);
    let (ok, _, err) = vargr_env(
        &[
            "sync",
            &p("src"),
            &url,
            "--secret-file",
            &p("secret"),
            "--cache-dir",
            &p("cache"),
            "-q",
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("read-only"), "{err}");
    assert!(!d.path().join("served/copy").exists());
    // Write-only: files go in, and an unchanged second sync still sends them.
    let drop_box = Daemon::start_with(
        &d.path().join("box"),
        &d.path().join("secret"),
        &d.path().join("bcache"),
        &["--write-only"],
    );
    let url = format!("vargr://127.0.0.1:{}/copy", drop_box.port);
    for _ in 0..2 {
        let (ok, out, err) = vargr_env(
            &[
                "sync",
                &p("src"),
                &url,
                "--secret-file",
                &p("secret"),
                "--cache-dir",
                &p("cache"),
                "--json",
            ],
            &[],
        );
        assert!(ok, "{err}");
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(r["files_skipped"], 0, "{r}");
    }
    assert_same(&d.path().join("src"), &d.path().join("box/copy"));
}

/// A key readable by others is refused by the daemon and its clients, naming the file
/// and its mode; `--gen-key` makes one with mode 0600 that works, and never overwrites.
#[test]
fn secret_files_are_made_private_and_loose_ones_refused() {
    let (d, _) = setup();
    let p = |s: &str| d.path().join(s).to_str().unwrap().to_string();
    std::fs::copy(p("secret"), p("loose")).unwrap();
    std::fs::set_permissions(
        p("loose"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    let (ok, _, err) = vargr_env(
        &[
            "sync",
            "--serve",
            &p("served"),
            "--listen",
            "tcp:127.0.0.1:0",
            "--secret-file",
            &p("loose"),
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains(&p("loose")) && err.contains("0640") && err.contains("chmod 600"),
        "{err}"
    );
    let (ok, _, err) = vargr_env(
        &[
            "sync",
            &p("src"),
            "vargr://127.0.0.1:9/x",
            "--secret-file",
            &p("loose"),
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("chmod 600"), "{err}");

    let (ok, _, err) = vargr_env(&["sync", "--gen-key", &p("key")], &[]);
    assert!(ok, "{err}");
    assert_eq!(mode_of(&d.path().join("key")), 0o600);
    let hex = std::fs::read_to_string(p("key")).unwrap();
    assert!(
        hex.trim().len() >= 32 && hex.trim().bytes().all(|b| b.is_ascii_hexdigit()),
        "{hex}"
    );
    let (ok, _, err) = vargr_env(&["sync", "--gen-key", &p("key")], &[]);
    assert!(!ok, "overwrote an existing key");
    assert!(err.contains(&p("key")), "{err}");
    assert_eq!(std::fs::read_to_string(p("key")).unwrap(), hex);

    let daemon = Daemon::start(
        &d.path().join("served"),
        &d.path().join("key"),
        &d.path().join("dcache"),
    );
    let url = format!("vargr://127.0.0.1:{}/copy", daemon.port);
    let (ok, _, err) = vargr_env(
        &[
            "sync",
            &p("src"),
            &url,
            "--secret-file",
            &p("key"),
            "--cache-dir",
            &p("cache"),
            "-q",
        ],
        &[],
    );
    assert!(ok, "{err}");
    assert_same(&d.path().join("src"), &d.path().join("served/copy"));
}
