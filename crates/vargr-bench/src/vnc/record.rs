//! The sessions `vargr bench vnc` replays: recorded once from a real Xvnc, then read
//! back as steps with the hash of the screen after each.
//!
//! A recording is what `vargr vnc --record` writes (vargr-vnc's `record` module): the
//! far side's recorded messages with their arrival times. Here an in-process recorder
//! (a `FarSide` over a socket to Xvnc) makes one while `bench/vnc/session.sh NAME`
//! draws, so the benchmark needs no proxy to record and users can hand it their own.

use std::collections::HashMap;
use std::io::{BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use vargr_rfb::{security, ClientConfig, Framebuffer};
use vargr_vnc::{FarConfig, FarSide, ProxyLimits, ProxyMsg, RecordReader, RecordWriter};

/// The server's updates that make one state of the screen: messages applied together,
/// at the time the last of them arrived.
pub struct Step {
    pub at: Duration,
    pub msgs: Vec<ProxyMsg>,
}

/// A recording read back, with what the replay and the viewer compare.
pub struct Recording {
    pub width: u16,
    pub height: u16,
    pub name: Vec<u8>,
    pub steps: Vec<Step>,
    /// The screen's hash after each step.
    pub hashes: Vec<u64>,
    /// Steps by the hash of the screen after them, in order.
    pub by_hash: HashMap<u64, Vec<usize>>,
}

impl Recording {
    /// Seconds from the start to the last step.
    pub fn seconds(&self) -> f64 {
        self.steps.last().map_or(0.0, |s| s.at.as_secs_f64())
    }

    /// Every update's rectangles as uncompressed pixels, 3 bytes each (a CopyRect as
    /// its area, the first screen included).
    pub fn uncompressed_bytes(&self) -> u64 {
        let area = |w: u16, h: u16| 3 * w as u64 * h as u64;
        self.steps
            .iter()
            .flat_map(|s| &s.msgs)
            .map(|m| match m {
                ProxyMsg::Update(regions) => regions.iter().map(|r| area(r.width, r.height)).sum(),
                ProxyMsg::Copy { width, height, .. } => area(*width, *height),
                _ => 0,
            })
            .sum()
    }

    /// The newest step before `applied` (steps applied so far) whose screen hashes to
    /// `hash`: a viewer showing that picture is current up to it.
    pub fn newest_match(&self, hash: u64, applied: usize) -> Option<usize> {
        let list = self.by_hash.get(&hash)?;
        let n = list.partition_point(|&i| i < applied);
        n.checked_sub(1).map(|k| list[k])
    }
}

/// The hash a screen is compared by (size included, so a resize is a new state).
pub fn screen_hash(fb: &Framebuffer) -> u64 {
    let seed = (fb.width() as u64) << 16 | fb.height() as u64;
    xxhash_rust::xxh3::xxh3_64_with_seed(bytemuck::cast_slice(fb.pixels()), seed)
}

/// Reads a recording and cuts it into steps. Every server update ends with an Update
/// (vargr-vnc's `FarSide::poll_recorded`); an Update followed at the same instant by
/// a Copy or Resize is the first part of one update, not its end.
pub fn load(path: &Path) -> Result<Recording> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut r = RecordReader::new(f, ProxyLimits::default())
        .with_context(|| format!("reading {}", path.display()))?;
    let mut records = Vec::new();
    while let Some(rec) = r
        .next_record()
        .with_context(|| format!("reading {}", path.display()))?
    {
        records.push(rec);
    }
    let mut it = records.into_iter().peekable();
    let Some((
        _,
        ProxyMsg::Init {
            width,
            height,
            name,
        },
    )) = it.next()
    else {
        bail!("{}: a recording starts with Init", path.display());
    };
    let mut screen = Some(Framebuffer::new(width, height));
    let (mut steps, mut hashes) = (Vec::new(), Vec::new());
    let mut msgs = Vec::new();
    while let Some((at, msg)) = it.next() {
        ensure!(
            matches!(
                msg,
                ProxyMsg::Update(_) | ProxyMsg::Copy { .. } | ProxyMsg::Resize { .. }
            ),
            "{}: {} among a recording's updates",
            path.display(),
            msg.name()
        );
        msg.paint_on(&mut screen)
            .with_context(|| format!("{}", path.display()))?;
        let fb = screen.as_ref().expect("set above");
        let ends = matches!(msg, ProxyMsg::Update(_))
            && !matches!(it.peek(), Some((t, ProxyMsg::Copy { .. } | ProxyMsg::Resize { .. })) if *t == at);
        msgs.push(msg);
        if ends || it.peek().is_none() {
            steps.push(Step {
                at,
                msgs: std::mem::take(&mut msgs),
            });
            hashes.push(screen_hash(fb));
        }
    }
    ensure!(!steps.is_empty(), "{}: no updates recorded", path.display());
    let mut by_hash: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, &h) in hashes.iter().enumerate() {
        by_hash.entry(h).or_default().push(i);
    }
    Ok(Recording {
        width,
        height,
        name,
        steps,
        hashes,
        by_hash,
    })
}

/// TigerVNC's Xvnc on a free display, killed when dropped.
struct Xvnc {
    child: Child,
    display: u32,
    port: u16,
    log: PathBuf,
}

impl Drop for Xvnc {
    fn drop(&mut self) {
        // SIGTERM lets Xvnc remove its lock file and socket; SIGKILL if it lingers.
        // SAFETY: kill(2) on the pid of a child not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Makes `cmd`'s process get SIGTERM when this thread ends, so that an interrupted
/// benchmark leaves no Xvnc, session or proxy behind (Drop does not run on a signal).
pub fn end_with_us(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(2) is async-signal-safe and touches only the child's own state.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        })
    }
}

/// `program` on the PATH.
pub fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

impl Xvnc {
    /// Starts Xvnc on 127.0.0.1 with security None. Two runs may pick the same display
    /// at once; X's lock file lets only one start, and the other tries the next.
    fn start(width: u16, height: u16) -> Result<Xvnc> {
        let xvnc = find("Xvnc").ok_or_else(|| {
            anyhow!(
                "Xvnc not found: recording a session needs TigerVNC's server \
                 (tigervnc-standalone-server), or pass --recordings DIR holding NAME.vncrec"
            )
        })?;
        let mut display = 60 + std::process::id() % 100;
        for _ in 0..10 {
            while Path::new(&format!("/tmp/.X11-unix/X{display}")).exists()
                || Path::new(&format!("/tmp/.X{display}-lock")).exists()
            {
                display += 1;
            }
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let log = std::env::temp_dir().join(format!(
                "vargr-bench-vnc-{}-{display}.log",
                std::process::id()
            ));
            let child = end_with_us(&mut Command::new(&xvnc))
                .arg(format!(":{display}"))
                .args(["-geometry", &format!("{width}x{height}"), "-depth", "24"])
                .args(["-rfbport", &port.to_string(), "-interface", "127.0.0.1"])
                .args(["-nolisten", "tcp", "-SecurityTypes", "None"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .spawn()
                .with_context(|| format!("starting {}", xvnc.display()))?;
            let mut x = Xvnc {
                child,
                display,
                port,
                log,
            };
            if x.wait_listening()? {
                return Ok(x);
            }
            display += 1;
        }
        bail!("Xvnc did not start on any of 10 displays")
    }

    /// Whether Xvnc listens, for the recorder and for X clients; false if it exited
    /// first (its display was taken). Its RFB port opens before its X socket.
    fn wait_listening(&mut self) -> Result<bool> {
        let deadline = Instant::now() + Duration::from_secs(15);
        let x_socket = format!("/tmp/.X11-unix/X{}", self.display);
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && std::os::unix::net::UnixStream::connect(&x_socket).is_ok()
            {
                return Ok(true);
            }
            if self.child.try_wait()?.is_some() {
                return Ok(false);
            }
            ensure!(
                Instant::now() < deadline,
                "Xvnc :{} did not listen on port {} within 15 s: {}",
                self.display,
                self.port,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Where a session is recorded, and how.
pub struct RecordPlan<'a> {
    pub session: &'a str,
    pub path: &'a Path,
    pub seconds: u64,
    pub width: u16,
    pub height: u16,
    pub script: &'a Path,
}

/// Records `plan.session` into `plan.path` unless it exists; returns whether it
/// recorded. An existing recording of another size is refused (its numbers would not
/// be this run's geometry).
pub fn ensure(plan: &RecordPlan) -> Result<bool> {
    if plan.path.exists() {
        let r = load(plan.path)?;
        ensure!(
            (r.width, r.height) == (plan.width, plan.height),
            "{} is {}x{}, not --geometry {}x{}: delete it or use another --recordings",
            plan.path.display(),
            r.width,
            r.height,
            plan.width,
            plan.height
        );
        return Ok(false);
    }
    ensure!(
        plan.script.is_file(),
        "{} not found: it draws the sessions (run from the repository's root, or pass \
         --session-script)",
        plan.script.display()
    );
    if let Some(dir) = plan.path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let server = Xvnc::start(plan.width, plan.height)?;
    let tmp = plan.path.with_extension("vncrec.part");
    let stop = Arc::new(AtomicBool::new(false));
    let recorded = Arc::new(AtomicU64::new(0));
    let recorder = {
        let (stop, recorded, tmp) = (stop.clone(), recorded.clone(), tmp.clone());
        let sock = TcpStream::connect(("127.0.0.1", server.port)).context("connecting to Xvnc")?;
        std::thread::spawn(move || record(sock, &tmp, &stop, &recorded))
    };
    // Init and the first full screen first, so the session starts on a known picture.
    let deadline = Instant::now() + Duration::from_secs(10);
    while recorded.load(Ordering::Relaxed) < 2 && Instant::now() < deadline {
        if recorder.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let drawn = draw(plan, server.display);
    // The last changes reach the recorder within a few frames.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let records = recorder
        .join()
        .map_err(|_| anyhow!("the recorder panicked"))?
        .with_context(|| format!("recording {}", plan.session))?;
    drawn?;
    std::fs::rename(&tmp, plan.path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), plan.path.display()))?;
    eprintln!(
        "vnc: recorded {} ({} records, {} s) to {}",
        plan.session,
        records,
        plan.seconds,
        plan.path.display()
    );
    Ok(true)
}

/// Runs the session script on the display and waits for it, bounded.
fn draw(plan: &RecordPlan, display: u32) -> Result<()> {
    let log = plan.path.with_extension("session.log");
    let out = std::fs::File::create(&log)?;
    let mut child = end_with_us(&mut Command::new("bash"))
        .arg(plan.script)
        .arg(plan.session)
        .env("DISPLAY", format!(":{display}"))
        .env("SECONDS", plan.seconds.to_string())
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", plan.script.display()))?;
    let deadline = Instant::now() + Duration::from_secs(plan.seconds + 60);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} {} ran 60 s past its {} s",
                plan.script.display(),
                plan.session,
                plan.seconds
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    ensure!(
        status.success(),
        "{} {}: {status}; its output: {}",
        plan.script.display(),
        plan.session,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let _ = std::fs::remove_file(&log);
    Ok(())
}

/// The recorder: a far side that records, over `sock` to Xvnc, until `stop`. Returns
/// the records written.
fn record(
    mut sock: TcpStream,
    path: &Path,
    stop: &AtomicBool,
    recorded: &AtomicU64,
) -> Result<u64> {
    sock.set_read_timeout(Some(Duration::from_millis(20)))?;
    let mut far = FarSide::new(FarConfig {
        client: ClientConfig {
            security_types: vec![security::NONE],
            ..ClientConfig::default()
        },
        record: true,
        ..FarConfig::default()
    })?;
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = RecordWriter::new(BufWriter::new(file))?;
    let start = Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        match sock.read(&mut buf) {
            Ok(0) => bail!("Xvnc closed the connection"),
            Ok(k) => far.receive_server(&buf[..k]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("reading from Xvnc"),
        }
        let at = start.elapsed();
        far.process()?;
        sock.write_all(&far.take_server_output())?;
        while let Some(m) = far.poll_recorded() {
            w.write(at, &m)?;
            n += 1;
        }
        recorded.store(n, Ordering::Relaxed);
        // Nothing reads the far side's link messages here.
        while far.poll_near_msg().is_some() {}
    }
    w.finish()?.flush()?;
    Ok(n)
}
