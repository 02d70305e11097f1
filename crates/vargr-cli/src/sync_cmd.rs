//! `vargr sync`: copy a file or a tree, sending only what the receiver's segment cache
//! lacks.
//!
//! Destinations, as rsync spells them:
//! - `PATH`: a local copy, through a `vargr sync --server PATH` child over pipes (the
//!   same protocol and caches as a remote one);
//! - `HOST:PATH`: over ssh, which runs `vargr sync --server PATH` on HOST (`$VARGR_SSH`
//!   replaces `ssh`, `--remote-vargr` the remote program);
//! - `vargr://HOST:PORT/PATH`: a `vargr sync --serve ROOT --listen tcp:HOST:PORT` daemon,
//!   authenticated by a shared secret (`--secret-file`, or `$VARGR_SYNC_SECRET` in hex).
//!
//! A daemon's clients are strangers to its machine, so it trusts them less than a
//! local or ssh sync trusts its user: it strips setuid, setgid and sticky bits unless
//! started with `--keep-special-bits`, may be `--read-only` or `--write-only`
//! ([`vargr_sync::Access`]), and refuses a secret file that group or others can read,
//! as ssh refuses such keys (`vargr sync --gen-key FILE` makes one right). Whatever
//! the mode, the receiver never follows a link under its destination. Links arrive
//! as sent, absolute or pointing out of the root included: harmless to the receiver,
//! but a program that serves the root to others (a web server) should not follow them.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use vargr_net::auth::Secret;
use vargr_net::gate::{Gate, GateConfig};
use vargr_net::{Addr, Listener};
use vargr_sync::{receive, send, Access, Progress, RecvOptions, SendOptions, Transport};

/// What `vargr sync` and `vargr proxy` share: the protocol's parameters and the caches.
#[derive(Debug, Clone, Args)]
pub struct DedupArgs {
    /// Optimistic fingerprint width in bits (both ends must agree).
    #[arg(long, default_value_t = 40)]
    fp_bits: u8,
    /// Segments per conservative hash.
    #[arg(long, default_value_t = 20)]
    group: u32,
    /// zstd level of the stream that carries new segments (-7..=22; default 3, and 9
    /// for `vargr vnc`, whose updates are small and links slow).
    #[arg(long)]
    zstd_level: Option<i32>,
    /// Segment caches live here (default $VARGR_CACHE_DIR or ~/.cache/vargr/dedup).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Disk budget of each peer's cache (e.g. 4g).
    #[arg(long, default_value = "4g")]
    cache_size: String,
}

/// [`DedupArgs`], checked.
pub struct DedupSettings {
    pub bits: vargr_dedup::FpBits,
    pub group: u32,
    pub zstd_level: i32,
    pub cache_root: PathBuf,
    pub cache: vargr_dedup::cache::DiskConfig,
}

impl DedupArgs {
    /// `config`: where caches live unless `--cache-dir` says; `zstd_level`: the
    /// command's default level.
    pub fn settings(
        &self,
        config: &vargr_config::Config,
        zstd_level: i32,
    ) -> Result<DedupSettings> {
        let zstd_level = self.zstd_level.unwrap_or(zstd_level);
        let bits = vargr_dedup::FpBits::new(self.fp_bits)
            .ok_or_else(|| anyhow!("--fp-bits {}: must be 8 to 64", self.fp_bits))?;
        if self.group == 0 {
            bail!("--group 0: a group holds at least one segment");
        }
        if !vargr_codec::ZSTD_LEVELS.contains(&zstd_level) {
            bail!("--zstd-level {zstd_level}: expected -7..=22");
        }
        let cache = vargr_dedup::cache::DiskConfig {
            bits,
            disk_bytes: parse_size(&self.cache_size).context("--cache-size")?,
            ..Default::default()
        };
        cache.validate().context("--cache-size")?;
        Ok(DedupSettings {
            bits,
            group: self.group,
            zstd_level,
            cache_root: cache_root(self.cache_dir.as_ref(), config),
            cache,
        })
    }
}

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// What to copy: a file or a directory (its contents go into DEST).
    #[arg(required_unless_present_any = ["serve", "server", "gen_key"])]
    src: Option<PathBuf>,
    /// Where: PATH, HOST:PATH (ssh) or vargr://HOST:PORT/PATH (a daemon).
    #[arg(required_unless_present_any = ["serve", "server", "gen_key"])]
    dest: Option<String>,
    /// Run a daemon receiving into this root (with --listen and --secret-file).
    #[arg(long, value_name = "ROOT", conflicts_with = "server")]
    serve: Option<PathBuf>,
    /// Write a fresh random secret (hex) to FILE, created with mode 0600 (never over an
    /// existing file), for --secret-file on the daemon and its clients.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["serve", "server", "src"])]
    gen_key: Option<PathBuf>,
    /// The daemon keeps setuid, setgid and sticky bits of what it receives (stripped by
    /// default: a client's 4755 file would run as the daemon's user).
    #[arg(long, requires = "serve")]
    keep_special_bits: bool,
    /// The daemon refuses every upload (sync only uploads: every session is refused,
    /// with this reason shown to the client).
    #[arg(long, requires = "serve", conflicts_with = "write_only")]
    read_only: bool,
    /// The daemon accepts files but never tells a client which are already in place
    /// (a drop box: clients cannot probe each other's files).
    #[arg(long, requires = "serve")]
    write_only: bool,
    /// Where the daemon listens.
    #[arg(long, default_value = "tcp:0.0.0.0:7878")]
    listen: String,
    /// Receive one sync on stdin/stdout into this path (what ssh and local syncs run).
    #[arg(long, value_name = "DEST", hide = true)]
    server: Option<PathBuf>,
    /// File holding the daemon's shared secret (hex; make one with --gen-key); default
    /// `$VARGR_SYNC_SECRET`. Refused if group or others may read it (chmod 600).
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// Protection of a daemon connection after its handshake: auto (MACs on loopback,
    /// encryption to other hosts), mac (authenticated, clear text) or encrypt.
    #[arg(long, default_value = "auto", value_name = "auto|mac|encrypt")]
    link_security: vargr_net::LinkSecurity,
    /// Segmenter of the files (cdc:MIN:AVG:MAX, static:SIZE, sw).
    #[arg(long, default_value = vargr_sync::DEFAULT_SEGMENTER)]
    segmenter: String,
    #[command(flatten)]
    dedup: DedupArgs,
    /// The vargr program on the remote host (ssh destinations).
    #[arg(long, default_value = "vargr")]
    remote_vargr: String,
    /// Send changed segments in delta batches compressed at this zstd level (-7..=22)
    /// instead of inline in the stream: at 9, 8-26 % fewer bytes for 5-7 times the
    /// CPU; worth it on links slower than about 0.5 Mbit/s, or where bytes are billed.
    #[arg(long, value_name = "LEVEL")]
    delta_level: Option<i32>,
    /// Print the report as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

/// The segment caches' root: `flag`, else the configured `cache.dir`, else the user's
/// cache directory.
pub fn cache_root(flag: Option<&PathBuf>, config: &vargr_config::Config) -> PathBuf {
    flag.or(config.cache_dir.as_ref())
        .cloned()
        .unwrap_or_else(|| vargr_sync::default_cache_root(|k| std::env::var_os(k)))
}

/// `quiet`: no progress bar (the global `-q`).
pub fn run(a: SyncArgs, quiet: bool, config: &vargr_config::Config) -> Result<()> {
    if let Some(file) = &a.gen_key {
        return gen_key(file);
    }
    let DedupSettings {
        group,
        zstd_level,
        cache_root,
        cache,
        ..
    } = a.dedup.settings(config, 3)?;
    if let Some(dest) = &a.server {
        let t = Transport {
            reader: Box::new(std::io::stdin()),
            writer: Box::new(std::io::stdout()),
            peer: "the sender (stdin)".into(),
        };
        let opts = RecvOptions {
            dest: dest.clone(),
            serve: false,
            cache_root,
            cache,
            receiver_name: vargr_sync::host_name(),
            // The user's own copy, as the user: modes as they were.
            keep_special_bits: true,
            access: Access::ReadWrite,
        };
        receive(t, &opts).map_err(|e| anyhow!("vargr sync --server: {e}"))?;
        return Ok(());
    }
    if let Some(root) = &a.serve {
        let access = match (a.read_only, a.write_only) {
            (true, _) => Access::ReadOnly,
            (_, true) => Access::WriteOnly,
            _ => Access::ReadWrite,
        };
        let opts = RecvOptions {
            dest: root.clone(),
            serve: true,
            cache_root,
            cache,
            receiver_name: vargr_sync::host_name(),
            keep_special_bits: a.keep_special_bits,
            access,
        };
        let secret = secret(&a.secret_file)?;
        return serve(&a.listen, &secret, a.link_security, opts);
    }
    if let Some(level) = a
        .delta_level
        .filter(|l| !vargr_codec::ZSTD_LEVELS.contains(l))
    {
        bail!("--delta-level {level}: expected -7..=22");
    }
    let src = a.src.clone().expect("clap requires SRC");
    let dest = a.dest.clone().expect("clap requires DEST");
    let mut opts = SendOptions {
        segmenter: a.segmenter.clone(),
        cache_root,
        cache,
        group,
        zstd_level,
        delta_level: a.delta_level,
        ..SendOptions::default()
    };
    let (t, mut child) = connect(&dest, &a, &mut opts, config)?;
    let bar = progress_bar(quiet);
    let r = send(&src, t, &opts, &mut |p: &Progress| draw(&bar, p));
    bar.finish_and_clear();
    let child_status = child.as_mut().map(|c| c.wait());
    let report = r.map_err(|e| anyhow!("vargr sync {} → {dest}: {e}", src.display()))?;
    if let Some(Ok(s)) = child_status {
        if !s.success() {
            bail!("the receiving vargr exited with {s}");
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let ratio = report.bytes_in as f64 / report.bytes_on_wire.max(1) as f64;
        // Segments: repeats crossed as fingerprints, new ones whole or as deltas.
        eprintln!(
            "{:<8} {:>8} {:>14} {:>14} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "files",
            "skipped",
            "bytes",
            "on the wire",
            "ratio",
            "repeats",
            "deltas",
            "new",
            "seconds"
        );
        eprintln!(
            "{:<8} {:>8} {:>14} {:>14} {:>7.1}x {:>9} {:>9} {:>9} {:>9.2}",
            report.files_sent,
            report.files_skipped,
            report.bytes_in,
            report.bytes_on_wire,
            ratio,
            report.dedup.fingerprinted,
            report.dedup.deltas,
            report.dedup.pushed,
            report.seconds
        );
    }
    if report.files_failed > 0 {
        bail!(
            "{} file(s) failed to verify and were not put in place:\n  {}",
            report.files_failed,
            report.failures.join("\n  ")
        );
    }
    Ok(())
}

fn progress_bar(quiet: bool) -> indicatif::ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar
}

fn draw(bar: &indicatif::ProgressBar, p: &Progress) {
    bar.set_length(p.bytes_total);
    bar.set_position(p.bytes_done);
    let ratio = p.bytes_done as f64 / p.wire_bytes.max(1) as f64;
    bar.set_message(format!(
        "{}/{} files, {} on the wire ({ratio:.1}x less) {}",
        p.files_done,
        p.files_total,
        indicatif::HumanBytes(p.wire_bytes),
        p.current
    ));
}

/// Opens the transport to `dest`; a child process when one carries it.
fn connect(
    dest: &str,
    a: &SyncArgs,
    opts: &mut SendOptions,
    config: &vargr_config::Config,
) -> Result<(Transport, Option<std::process::Child>)> {
    if let Some(rest) = dest.strip_prefix("vargr://") {
        let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
        opts.dest = path.to_string();
        let addr: Addr = format!("tcp:{hostport}")
            .parse()
            .with_context(|| format!("destination {dest}"))?;
        // The key is checked before anything goes out.
        let s = secret(&a.secret_file)?;
        let conn = vargr_net::connect(&addr, Duration::from_secs(10))?;
        let conn = vargr_net::auth::connect(
            conn,
            &s,
            0,
            a.link_security,
            Duration::from_secs(10),
            hostport,
        )?;
        let (r, w) = conn.into_streams()?;
        return Ok((
            Transport {
                reader: Box::new(r),
                writer: Box::new(w),
                peer: hostport.to_string(),
            },
            None,
        ));
    }
    let remote = match dest.split_once(':') {
        Some((host, path)) if !host.contains('/') && !host.is_empty() => {
            Some((host.to_string(), path.to_string()))
        }
        _ => None,
    };
    let (mut cmd, peer) = match &remote {
        Some((host, path)) => {
            // `-oProxyCommand=...` as a host would be an ssh option that runs a command.
            vargr_net::launch::check_host(host).with_context(|| format!("destination {dest}"))?;
            let words =
                vargr_net::launch::split_words(&config.ssh).context("sync.ssh ($VARGR_SSH)")?;
            let mut cmd = Command::new(&words[0]);
            // ssh joins its arguments into one line for the remote shell: quote the path
            // (the remote program may be a command line, as rsync's --rsync-path), and
            // glue it to its option so a path starting with `-` is no option either.
            cmd.args(&words[1..])
                .arg("--")
                .arg(host)
                .arg(&a.remote_vargr)
                .args([
                    "sync",
                    &vargr_net::launch::shell_quote(&format!("--server={path}")),
                ]);
            (cmd, host.clone())
        }
        None => {
            let mut cmd = Command::new(std::env::current_exe().context("finding vargr")?);
            let mut server = std::ffi::OsString::from("--server=");
            server.push(dest);
            cmd.arg("sync").arg(server);
            (cmd, "local".to_string())
        }
    };
    cmd.args(["--fp-bits", &a.dedup.fp_bits.to_string()]);
    if let (None, Some(dir)) = (&remote, &a.dedup.cache_dir) {
        cmd.arg("--cache-dir").arg(dir);
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let w = child.stdin.take().expect("piped");
    let r = child.stdout.take().expect("piped");
    Ok((
        Transport {
            reader: Box::new(r),
            writer: Box::new(w),
            peer,
        },
        Some(child),
    ))
}

fn secret(file: &Option<PathBuf>) -> Result<Secret> {
    let hex = match file {
        Some(f) => {
            use std::io::Read;
            use std::os::unix::fs::PermissionsExt;
            let reading = || format!("reading the secret from {}", f.display());
            // The mode of the file read, not of whatever the name meant a moment before.
            let mut file = std::fs::File::open(f).with_context(reading)?;
            let mode = file.metadata().with_context(reading)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                bail!(
                    "the secret file {} has mode {mode:04o}: group or others may read it; \
                     run `chmod 600 {}` (or make a new one with `vargr sync --gen-key FILE`)",
                    f.display(),
                    f.display()
                );
            }
            let mut hex = String::new();
            file.read_to_string(&mut hex).with_context(reading)?;
            hex
        }
        None => std::env::var("VARGR_SYNC_SECRET").map_err(|_| {
            anyhow!(
                "a daemon needs a shared secret: --secret-file FILE (make one with \
                 `vargr sync --gen-key FILE`) or $VARGR_SYNC_SECRET (hex)"
            )
        })?,
    };
    Ok(Secret::from_hex(hex.trim())?)
}

/// `--gen-key FILE`: a fresh secret, in a file no one else can read from its creation
/// (O_EXCL with mode 0600: no window with looser bits, no following a planted link).
fn gen_key(file: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .with_context(|| format!("creating the secret file {}", file.display()))?;
    writeln!(f, "{}", Secret::random().to_hex())
        .and_then(|_| f.sync_all())
        .with_context(|| format!("writing the secret file {}", file.display()))?;
    eprintln!(
        "vargr sync: wrote a new secret to {}; give the daemon and its clients \
         --secret-file {}",
        file.display(),
        file.display()
    );
    Ok(())
}

/// Accepts syncs forever, one thread each; a failed one is logged, not fatal.
fn serve(
    listen: &str,
    secret: &Secret,
    security: vargr_net::LinkSecurity,
    opts: RecvOptions,
) -> Result<()> {
    let root = &opts.dest;
    let addr: Addr = listen
        .parse()
        .with_context(|| format!("--listen {listen}"))?;
    let l = Listener::bind(&addr)?;
    eprintln!(
        "vargr sync: serving {} on {}",
        root.display(),
        l.local_addr()?
    );
    let _ = std::io::stderr().flush();
    let gate = Gate::open(
        l,
        secret.clone(),
        GateConfig {
            security,
            ..GateConfig::default()
        },
        Box::new(|e| eprintln!("vargr sync: refused a connection: {e}")),
    );
    loop {
        let conn = match gate.accept_timeout(Duration::from_secs(3600)) {
            Ok(a) => a.conn,
            Err(vargr_net::NetError::Timeout { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let peer = conn.peer().to_string();
        let opts = opts.clone();
        std::thread::spawn(move || {
            let result = conn
                .into_streams()
                .map_err(|e| e.to_string())
                .and_then(|(r, w)| {
                    let t = Transport {
                        reader: Box::new(r),
                        writer: Box::new(w),
                        peer: peer.clone(),
                    };
                    receive(t, &opts).map_err(|e| e.to_string())
                });
            match result {
                Ok(r) => eprintln!(
                    "vargr sync: {} files, {} bytes from {} ({peer}) in {:.2} s",
                    r.files_written, r.bytes_written, r.sender, r.seconds
                ),
                Err(e) => eprintln!("vargr sync: {peer}: {e}"),
            }
        });
    }
}

/// `4g`, `512m`, `100k`, or bytes.
pub fn parse_size(s: &str) -> Result<u64> {
    Ok(vargr_emu::parse_size(s)?)
}
