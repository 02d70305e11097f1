//! Starting the processes of a tree: locally, or through an ssh-like command template.
//!
//! A child learns where its parent listens, its node id and the network secret from
//! environment variables (`VARGR_PARENT`, `VARGR_NODE`, `VARGR_SECRET`). Through a remote
//! shell the secret would show on the remote command line, so there it is written to
//! the child's standard input instead and `VARGR_SECRET=-` says so.

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
    /// A command template with `{host}` and `{cmd}`, e.g. `ssh -o BatchMode=yes {host} {cmd}`.
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
        if template
            .split_whitespace()
            .next()
            .is_none_or(|w| w.contains('{'))
        {
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
            let wrap: Vec<String> = std::env::var("VARGR_WRAP")
                .map(|w| w.split_whitespace().map(String::from).collect())
                .unwrap_or_default();
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
                .stdin(Stdio::null());
            die_with_parent(&mut cmd);
            spawn_from_lasting_thread(cmd).map_err(spawn_err)
        }
        Launcher::Remote { template } => {
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
            let words: Vec<String> = template
                .split_whitespace()
                .map(|w| w.replace("{host}", &spec.host).replace("{cmd}", &remote))
                .collect();
            let mut cmd = Command::new(&words[0]);
            cmd.args(&words[1..]).stdin(Stdio::piped());
            die_with_parent(&mut cmd);
            let mut child = spawn_from_lasting_thread(cmd).map_err(spawn_err)?;
            if let (Some(s), Some(mut stdin)) = (secret, child.stdin.take()) {
                stdin
                    .write_all(format!("{s}\n").as_bytes())
                    .map_err(spawn_err)?;
            }
            Ok(child)
        }
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
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| NetError::io("reading the secret from", "stdin", e))?;
        crate::auth::Secret::from_hex(&line)
    } else {
        crate::auth::Secret::from_hex(&v)
    }
}

/// This machine's host name (`localhost` if it cannot be read).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for its length; gethostname NUL-terminates on success.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        let mut c = spawn(&l, &spec).unwrap();
        assert!(c.wait().unwrap().success());
    }
}
