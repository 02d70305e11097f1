//! Starting the processes of a tree: locally, or through an ssh-like command template.
//!
//! A child learns where its parent listens, its node id and the network secret from
//! environment variables (`VARGR_PARENT`, `VARGR_NODE`, `VARGR_SECRET`). Through a remote
//! shell the secret would show on the remote command line, so there it is written to
//! the child's standard input instead and `VARGR_SECRET=-` says so.
//!
//! Templates (and `$VARGR_WRAP`, and `vargr sync`'s `$VARGR_SSH`) are split into words
//! with shell rules ([`split_words`]), so a quoted argument stays one word. A host is
//! substituted inside one word and never re-split, and a host starting with `-` is
//! refused ([`check_host`]): ssh would read `-oProxyCommand=...` as an option and run
//! it. The default templates also put `--` before `{host}`.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};

use crate::NetError;

/// How child processes are started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// `std::process` on this host (the default).
    Local,
    /// A command template with `{host}` and `{cmd}`, e.g.
    /// `ssh -o BatchMode=yes -- {host} {cmd}`.
    Remote { template: String },
}

impl Launcher {
    pub fn remote(template: &str) -> Result<Launcher, NetError> {
        let bad = |reason: &str| NetError::BadTemplate {
            template: template.into(),
            reason: reason.into(),
        };
        if !template.contains("{cmd}") {
            return Err(bad("it must contain {cmd}"));
        }
        let words = shlex::split(template).ok_or_else(|| bad("unbalanced quotes"))?;
        if words.first().is_none_or(|w| w.contains('{')) {
            return Err(bad("it must start with a program name"));
        }
        Ok(Launcher::Remote {
            template: template.into(),
        })
    }
}

/// One process to start.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    pub node: u32,
    pub host: String,
    pub program: String,
    pub args: Vec<String>,
    /// Variables for the child, `VARGR_SECRET` included (handled specially when remote).
    pub env: Vec<(String, String)>,
    /// Give the child this process's standard input (local launches only: a remote
    /// child's stdin carries the secret); otherwise it reads nothing.
    pub stdin: bool,
    /// Pipe the child's stdout and stderr to the caller, which forwards them; otherwise
    /// the child writes to this process's own.
    pub capture_output: bool,
}

/// Splits a command line (a template, `$VARGR_SSH`) into words with POSIX shell rules:
/// quotes group, backslashes escape; nothing is expanded.
pub fn split_words(line: &str) -> Result<Vec<String>, NetError> {
    let words = shlex::split(line).ok_or_else(|| NetError::BadTemplate {
        template: line.into(),
        reason: "unbalanced quotes or a trailing backslash".into(),
    })?;
    if words.is_empty() {
        return Err(NetError::BadTemplate {
            template: line.into(),
            reason: "no program".into(),
        });
    }
    Ok(words)
}

/// Refuses a host name a remote shell could take for an option or that is no name.
pub fn check_host(host: &str) -> Result<(), NetError> {
    let bad = |reason: &str| NetError::BadHost {
        host: host.into(),
        reason: reason.into(),
    };
    if host.is_empty() {
        return Err(bad("empty"));
    }
    if host.starts_with('-') {
        return Err(bad("it starts with '-' and ssh would read it as an option"));
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it contains white space or control characters"));
    }
    Ok(())
}

/// Quotes a word for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Starts `spec`. The child gets SIGKILL if the thread that started it exits, so no
/// local child outlives its parent even when the parent is killed.
pub fn spawn(launcher: &Launcher, spec: &ChildSpec) -> Result<Child, NetError> {
    let spawn_err = |e| NetError::Spawn {
        program: spec.program.clone(),
        node: spec.node,
        source: e,
    };
    match launcher {
        Launcher::Local => {
            // `VARGR_WRAP="valgrind --tool=callgrind"` (or gdb, strace, perf) runs every
            // process of the tree under a tool, the way MRNet users debug commnodes.
            let wrap = match std::env::var("VARGR_WRAP") {
                Ok(w) if !w.trim().is_empty() => split_words(&w)?,
                _ => Vec::new(),
            };
            let mut cmd = match wrap.split_first() {
                Some((tool, tool_args)) => {
                    let mut c = Command::new(tool);
                    c.args(tool_args).arg(&spec.program);
                    c
                }
                None => Command::new(&spec.program),
            };
            cmd.args(&spec.args)
                .envs(spec.env.iter().map(|(k, v)| (k, v)))
                .stdin(if spec.stdin {
                    Stdio::inherit()
                } else {
                    Stdio::null()
                });
            capture(&mut cmd, spec.capture_output);
            die_with_parent(&mut cmd);
            spawn_from_lasting_thread(cmd).map_err(spawn_err)
        }
        Launcher::Remote { template } => {
            check_host(&spec.host)?;
            let mut remote = vec!["env".to_string()];
            let mut secret = None;
            for (k, v) in &spec.env {
                if k == "VARGR_SECRET" {
                    secret = Some(v.clone());
                    remote.push(shell_quote("VARGR_SECRET=-"));
                } else {
                    remote.push(shell_quote(&format!("{k}={v}")));
                }
            }
            remote.push(shell_quote(&spec.program));
            remote.extend(spec.args.iter().map(|a| shell_quote(a)));
            let remote = remote.join(" ");
            // Substituted after splitting: a host or command stays inside its word.
            let words: Vec<String> = split_words(template)?
                .into_iter()
                .map(|w| w.replace("{host}", &spec.host).replace("{cmd}", &remote))
                .collect();
            let mut cmd = Command::new(&words[0]);
            cmd.args(&words[1..]).stdin(Stdio::piped());
            capture(&mut cmd, spec.capture_output);
            die_with_parent(&mut cmd);
            let mut child = spawn_from_lasting_thread(cmd).map_err(spawn_err)?;
            if let (Some(s), Some(mut stdin)) = (secret, child.stdin.take()) {
                match stdin.write_all(format!("{s}\n").as_bytes()) {
                    // A program that ends without reading its input (it does not join,
                    // or failed at once) closed the pipe: its exit status tells the rest.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        tracing::debug!("node {}: its input closed before the secret", spec.node);
                        return Ok(child);
                    }
                    r => r.map_err(spawn_err)?,
                }
                if spec.stdin {
                    // After the secret, what is typed goes to the program (mpirun gives
                    // it to rank 0 wherever that runs).
                    forward_stdin(stdin);
                }
            }
            Ok(child)
        }
    }
}

/// Copies this process's standard input to `to` on a thread of its own, until either
/// end closes.
fn forward_stdin(mut to: std::process::ChildStdin) {
    let _ = std::thread::Builder::new()
        .name("vargr-stdin".into())
        .spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to);
        });
}

/// Pipes `cmd`'s stdout and stderr when `on`.
fn capture(cmd: &mut Command, on: bool) {
    if on {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
}

/// Spawns `cmd` from a thread that lives as long as the process.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, so children
/// spawned from a short-lived thread (a `Network` built in a worker thread and moved
/// elsewhere) would be killed with it. One lasting spawner thread ties them to the
/// process instead.
fn spawn_from_lasting_thread(cmd: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("vargr-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("starting the spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let sent = tx
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, reply_tx));
    if sent.is_err() {
        return Err(std::io::Error::other("the spawner thread is gone"));
    }
    reply_rx
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("the spawner thread is gone")))
}

fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Reads the network secret as a child: from `VARGR_SECRET`, or from the first line of
/// standard input when it is `-`.
pub fn secret_from_env() -> Result<crate::auth::Secret, NetError> {
    let v = std::env::var("VARGR_SECRET").map_err(|_| NetError::Auth {
        peer: "environment".into(),
        reason: "VARGR_SECRET is not set: was this process started by a vargr parent?".into(),
    })?;
    if v == "-" {
        let line = read_line_unbuffered(0)
            .map_err(|e| NetError::io("reading the secret from", "stdin", e))?;
        crate::auth::Secret::from_hex(&line)
    } else {
        crate::auth::Secret::from_hex(&v)
    }
}

/// The first line of standard input, read a byte at a time: what follows it is the
/// program's input (rank 0 of a remote job gets the user's), and a buffered read would
/// keep some of it where the program (a Python rank reading `sys.stdin`) cannot see it.
fn read_line_unbuffered(fd: std::os::fd::RawFd) -> std::io::Result<String> {
    let mut line = Vec::new();
    loop {
        let mut b = 0u8;
        // SAFETY: reads at most one byte into `b`, which lives across the call.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        match n {
            1 if b == b'\n' => break,
            1 if line.len() < 4096 => line.push(b),
            1 => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the first line is longer than 4096 bytes",
                ))
            }
            0 => break,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    String::from_utf8(line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// This machine's host name, as ranks and tree nodes advertise it.
pub fn hostname() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_line_is_read_without_taking_what_follows_and_is_bounded() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let (mut r, mut w) = std::io::pipe().unwrap();
        w.write_all(b"c0ffee\nthe program's input").unwrap();
        drop(w);
        assert_eq!(read_line_unbuffered(r.as_raw_fd()).unwrap(), "c0ffee");
        let mut rest = String::new();
        r.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "the program's input");
        // A peer that never ends the line cannot make the reader grow without bound.
        let (r, mut w) = std::io::pipe().unwrap();
        w.write_all(&[b'a'; 5000]).unwrap();
        drop(w);
        let e = read_line_unbuffered(r.as_raw_fd()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("abc/d-e"), "abc/d-e");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn template_checked() {
        assert!(Launcher::remote("ssh {host}").is_err());
        assert!(Launcher::remote("{cmd}").is_err());
        assert!(Launcher::remote("ssh -o BatchMode=yes {host} {cmd}").is_ok());
        assert!(Launcher::remote("ssh 'unclosed {host} {cmd}").is_err());
    }

    #[test]
    fn templates_split_with_shell_quoting() {
        assert_eq!(
            split_words(r#"ssh -o 'ProxyJump=a b' -i "/k e y" -- {host}"#).unwrap(),
            ["ssh", "-o", "ProxyJump=a b", "-i", "/k e y", "--", "{host}"]
        );
        assert!(split_words("ssh \"unclosed").is_err());
        assert!(split_words("  ").is_err());
    }

    /// A quoted word of a template reaches the program as one argument: split on white
    /// space, `sh -c 'test ...'` would have run `sh -c "'test"`.
    #[test]
    fn a_quoted_template_word_is_one_argument() {
        let l =
            Launcher::remote("sh -c 'test \"$0\" = {host} && eval \"$1\"' {host} {cmd}").unwrap();
        let spec = ChildSpec {
            node: 1,
            host: "h1".into(),
            program: "true".into(),
            args: vec![],
            env: vec![],
            stdin: false,
            capture_output: false,
        };
        assert!(spawn(&l, &spec).unwrap().wait().unwrap().success());
    }

    #[test]
    fn a_host_that_looks_like_an_option_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let flag = d.path().join("ran");
        // The shape of the attack: `sh {host}` with host `-c touch ...` would run it.
        let l = Launcher::remote("sh {host} {cmd}").unwrap();
        let spec = ChildSpec {
            node: 1,
            host: format!("-ctouch {}", flag.display()),
            program: "true".into(),
            args: vec![],
            env: vec![],
            stdin: false,
            capture_output: false,
        };
        let e = spawn(&l, &spec).unwrap_err();
        assert!(matches!(e, NetError::BadHost { .. }), "{e}");
        assert!(e.to_string().contains("-ctouch"), "{e}");
        assert!(!flag.exists());
        assert!(check_host("node-1.example").is_ok());
        assert!(check_host("a b").is_err());
        assert!(check_host("").is_err());
    }

    #[test]
    fn remote_template_runs_through_a_shell_and_passes_secret_on_stdin() {
        let l = Launcher::remote("sh -c {cmd}").unwrap();
        let spec = ChildSpec {
            node: 3,
            host: "h".into(),
            program: "sh".into(),
            args: vec![
                "-c".into(),
                "read s; test \"$s\" = abc && test \"$VARGR_SECRET\" = - && test \"$X\" = 'a b'"
                    .into(),
            ],
            env: vec![
                ("VARGR_SECRET".into(), "abc".into()),
                ("X".into(), "a b".into()),
            ],
            stdin: false,
            capture_output: false,
        };
        let mut c = spawn(&l, &spec).unwrap();
        assert!(c.wait().unwrap().success());
    }
}
