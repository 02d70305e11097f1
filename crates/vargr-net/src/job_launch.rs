//! Starting the ranks of a parallel job and watching them until it ends (what
//! `vargr run` does; the command line only parses and checks its arguments).
//!
//! Like `mpirun`, but only what vargr needs: N ranks (K per process as threads if
//! asked) placed on process slots in order (a hostfile's, or all on this machine),
//! started through a [`Launcher`], each told its rank, the job size, its site and where
//! the job's rendezvous is. The first rank to fail ends the job, and the error says
//! which ([`JobFailed`]: that rank, and its exit status to end with). A rank that stops
//! answering the rendezvous's heartbeats (stopped, or hung so hard its heartbeat thread
//! cannot run) ends the job too, within the [`Liveness`] timeout, named with its pid and
//! host.
//!
//! It lives here, beside [`JobRendezvous`] and [`launch::spawn`], because it needs
//! nothing else: ranks join the job with [`crate::wireup::join_job`] whatever started them.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::auth::Secret;
use crate::launch::{self, ChildSpec, Launcher};
use crate::runtime_dir::{self, RuntimeDir};
use crate::wireup::{JobRendezvous, Liveness};
use crate::{Addr, Listener, NetError};

/// A process slot: the host a process starts on, and its site label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub host: String,
    pub site: Option<String>,
}

/// The slots of a hostfile, in order, and its name for errors.
#[derive(Debug, Clone)]
pub struct Slots {
    pub name: String,
    pub slots: Vec<Slot>,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub ranks: u32,
    /// Ranks per process, run as its threads.
    pub ranks_per_process: u32,
    /// Where processes go; `None`: all on this machine, the rendezvous on loopback.
    pub hosts: Option<Slots>,
    pub launcher: Launcher,
    /// Consecutive ranks per site (`--sites`), which must not split a process.
    pub sites: Option<Vec<(String, u32)>>,
    /// The site of every process when `sites` is not given (sets `VARGR_SITE`).
    pub site: Option<String>,
    /// Variables every process gets besides its rank's (`VARGR_WAN`, `VARGR_CODEC`, …).
    pub env: Vec<(String, String)>,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// How long the ranks have to reach the rendezvous.
    pub startup_timeout: Duration,
    /// Heartbeats after wire-up; `None`: off.
    pub liveness: Option<Liveness>,
    /// Prefix every line of the ranks' output with its rank, as Open MPI's
    /// `--tag-output` does: `[1,RANK]<stdout>:` (`[1,FIRST-LAST]` for a process of
    /// several ranks).
    pub tag_output: bool,
}

/// The job failed: what to tell the user, and the exit status to end with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct JobFailed {
    pub message: String,
    pub code: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum JobLaunchError {
    #[error("{hostfile} needs {need} process slots for {ranks} ranks at {per_process} per process, the hostfile has {have}")]
    TooFewSlots {
        hostfile: String,
        need: usize,
        ranks: u32,
        per_process: u32,
        have: usize,
    },
    #[error("ranks {first}..={last} share a process but --sites puts them in {site} and {last_site}; choose --ranks-per-process to divide each site's rank count")]
    SplitProcess {
        first: u32,
        last: u32,
        site: String,
        last_site: String,
    },
    /// Binding the rendezvous's listener.
    #[error(transparent)]
    Net(#[from] NetError),
    #[error("starting ranks {first}..{end} on {host}")]
    Spawn {
        first: u32,
        end: u32,
        host: String,
        #[source]
        source: NetError,
    },
    #[error(transparent)]
    Failed(#[from] JobFailed),
}

/// One process: where it goes and which ranks it hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Placement {
    first: u32,
    count: u32,
    host: String,
    site: Option<String>,
}

/// One started process and the ranks it hosts.
struct Proc {
    first: u32,
    count: u32,
    host: String,
    child: Child,
}

/// Starts the job and waits for it: `Ok` when every rank exited 0. `stop` (set on
/// Ctrl-C) ends the job early.
pub fn run_job(spec: &JobSpec, stop: &AtomicBool) -> Result<(), JobLaunchError> {
    let k = spec.ranks_per_process.max(1);
    let mut placement = place(spec.ranks, k, spec.hosts.as_ref())?;
    if let Some(sites) = &spec.sites {
        assign_sites(&mut placement, sites)?;
    }
    let secret = Secret::random();
    let bind = match &spec.hosts {
        Some(_) => Addr::Tcp("0.0.0.0:0".into()),
        None => Addr::Tcp("127.0.0.1:0".into()),
    };
    let listener = Listener::bind(&bind)?;
    let addr = match (listener.local_addr()?, &spec.hosts) {
        (a, Some(_)) => a.advertised(),
        (a, None) => a,
    };
    let rv = JobRendezvous::start(
        listener,
        addr.clone(),
        spec.ranks,
        secret.clone(),
        spec.startup_timeout,
        spec.liveness,
    );
    let mut procs = Vec::new();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let mut forwarders = 0;
    for p in placement {
        let mut env = vec![
            ("VARGR_RANK".to_string(), p.first.to_string()),
            ("VARGR_SIZE".to_string(), spec.ranks.to_string()),
            ("VARGR_RANKS_PER_PROCESS".to_string(), p.count.to_string()),
            ("VARGR_JOB".to_string(), addr.to_string()),
            ("VARGR_SECRET".to_string(), secret.to_hex()),
        ];
        if let Some(s) = p.site.or_else(|| spec.site.clone()) {
            env.push(("VARGR_SITE".into(), s));
        }
        env.extend(spec.env.iter().cloned());
        let child = ChildSpec {
            node: p.first,
            host: p.host.clone(),
            program: spec.command[0].clone(),
            args: spec.command[1..].to_vec(),
            env,
            // As mpirun does: what is typed goes to rank 0.
            stdin: p.first == 0,
            // Forwarded a whole line at a time, so ranks' lines never mix mid-line.
            capture_output: true,
        };
        let child =
            launch::spawn(&spec.launcher, &child).map_err(|source| JobLaunchError::Spawn {
                first: p.first,
                end: p.first + p.count,
                host: p.host.clone(),
                source,
            })?;
        let mut child = child;
        let tag = |stream: &str| {
            spec.tag_output.then(|| match p.count {
                1 => format!("[1,{}]<{stream}>:", p.first),
                n => format!("[1,{}-{}]<{stream}>:", p.first, p.first + n - 1),
            })
        };
        if let Some(out) = child.stdout.take() {
            forward_lines(out, Sink::Stdout, tag("stdout"), done_tx.clone());
            forwarders += 1;
        }
        if let Some(err) = child.stderr.take() {
            forward_lines(err, Sink::Stderr, tag("stderr"), done_tx.clone());
            forwarders += 1;
        }
        procs.push(Proc {
            first: p.first,
            count: p.count,
            host: p.host,
            child,
        });
    }
    let status = supervise(&mut procs, stop, &rv).map_err(JobLaunchError::from);
    // The ranks' last lines, once their pipes close; a pipe a rank's own child still
    // holds open is not waited for long.
    let deadline = Instant::now() + OUTPUT_GRACE;
    for _ in 0..forwarders {
        let left = deadline.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    // The rendezvous has served everyone, or the job ended before it could.
    drop(rv);
    if matches!(spec.launcher, Launcher::Local) {
        // What a killed rank could not remove; the others removed theirs on exit.
        if let Ok(dir) = RuntimeDir::open_default() {
            for p in &procs {
                runtime_dir::remove_mesh_sockets(&dir, p.child.id());
            }
        }
    }
    status
}

/// How long `vargr run` waits, after its ranks exited, for the rest of their output.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// Writes and flushes, so that a last line without a newline is not left in a buffer.
fn write_whole(to: &mut impl std::io::Write, bytes: &[u8]) -> std::io::Result<()> {
    to.write_all(bytes)?;
    to.flush()
}

/// Where forwarded output goes.
#[derive(Clone, Copy)]
enum Sink {
    Stdout,
    Stderr,
}

/// Copies `from` to our stdout or stderr a whole line at a time (one write under the
/// stream's lock), with `tag` in front of each line; signals `done` at the end.
fn forward_lines(
    from: impl std::io::Read + Send + 'static,
    sink: Sink,
    tag: Option<String>,
    done: std::sync::mpsc::Sender<()>,
) {
    let body = move || {
        let mut from = std::io::BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match std::io::BufRead::read_until(&mut from, b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let mut whole = Vec::with_capacity(line.len() + 16);
            if let Some(t) = &tag {
                whole.extend_from_slice(t.as_bytes());
            }
            whole.extend_from_slice(&line);
            // A last line without a newline gets one: it must not run into another
            // rank's next line.
            if !whole.ends_with(b"\n") {
                whole.push(b'\n');
            }
            // A reader that went away (`vargr run … | head`) is no reason to stop the
            // ranks: keep draining their pipe.
            let _ = match sink {
                Sink::Stdout => write_whole(&mut std::io::stdout().lock(), &whole),
                Sink::Stderr => write_whole(&mut std::io::stderr().lock(), &whole),
            };
        }
        let _ = done.send(());
    };
    if std::thread::Builder::new()
        .name("vargr-run-output".into())
        .spawn(body)
        .is_err()
    {
        tracing::warn!("could not start a thread to forward a rank's output");
    }
}

/// Consecutive ranks per process, processes on the slots in order (all on this
/// machine without slots).
fn place(ranks: u32, k: u32, hosts: Option<&Slots>) -> Result<Vec<Placement>, JobLaunchError> {
    let slots: &[Slot] = hosts.map_or(&[], |h| &h.slots);
    if let Some(h) = hosts {
        let need = ranks.div_ceil(k) as usize;
        if slots.len() < need {
            return Err(JobLaunchError::TooFewSlots {
                hostfile: h.name.clone(),
                need,
                ranks,
                per_process: k,
                have: slots.len(),
            });
        }
    }
    let mut out = Vec::new();
    let mut first = 0;
    let mut i = 0;
    while first < ranks {
        let count = k.min(ranks - first);
        let (host, site) = slots
            .get(i)
            .map(|s| (s.host.clone(), s.site.clone()))
            .unwrap_or_else(|| ("localhost".into(), None));
        out.push(Placement {
            first,
            count,
            host,
            site,
        });
        first += count;
        i += 1;
    }
    Ok(out)
}

/// Labels each process with the site of its ranks (`sites` cover every rank).
fn assign_sites(
    placement: &mut [Placement],
    sites: &[(String, u32)],
) -> Result<(), JobLaunchError> {
    let mut bounds = Vec::new();
    let mut at = 0;
    for (name, count) in sites {
        bounds.push((at, at + count, name));
        at += count;
    }
    let site_of = |rank: u32| {
        bounds
            .iter()
            .find(|(lo, hi, _)| (*lo..*hi).contains(&rank))
            .map(|b| b.2)
            .expect("the sites cover every rank")
    };
    for p in placement {
        let last = p.first + p.count - 1;
        let (name, last_site) = (site_of(p.first), site_of(last));
        if name != last_site {
            return Err(JobLaunchError::SplitProcess {
                first: p.first,
                last,
                site: name.clone(),
                last_site: last_site.clone(),
            });
        }
        p.site = Some(name.clone());
    }
    Ok(())
}

/// The exit status a job ends with for a rank that ended with `st`: its own exit code,
/// or 128 plus the signal that killed it. What Open MPI's mpirun does (4.1.4 here: a
/// rank killed with SIGKILL makes it exit 137, one that exits 3 makes it exit 3) and
/// what a POSIX shell reports for a killed command, so scripts read all three alike.
fn exit_code(st: ExitStatus) -> i32 {
    match (st.code(), st.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

/// Waits for every process; the first failure (or `stop`, or a process that stopped
/// answering heartbeats) stops the rest.
fn supervise(procs: &mut [Proc], stop: &AtomicBool, rv: &JobRendezvous) -> Result<(), JobFailed> {
    let mut failure: Option<JobFailed> = None;
    let mut done = vec![false; procs.len()];
    let mut kill_at: Option<Instant> = None;
    loop {
        let mut running = 0;
        let mut failed = Vec::new();
        for (i, p) in procs.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            match p.child.try_wait() {
                Ok(Some(st)) => {
                    done[i] = true;
                    if !st.success() {
                        failed.push((i, st));
                    }
                }
                Ok(None) => running += 1,
                Err(e) => {
                    done[i] = true;
                    failure.get_or_insert(JobFailed {
                        message: format!("waiting for ranks of {}: {e}", p.host),
                        code: 1,
                    });
                }
            }
        }
        if failure.is_none() {
            if let Some(s) = rv.silent() {
                // Stopped or hung: it will not exit on its own, nor will the ranks
                // waiting for it. Checked before the exits of this sweep: the others
                // are told to fail once it is found silent, and must not be blamed.
                failure = Some(JobFailed {
                    message: format!("{s}; the job was stopped"),
                    code: 1,
                });
                kill_at = Some(Instant::now());
            }
        }
        if failure.is_none() {
            // Several failures found in one sweep: the others may have failed because
            // of the first, so blame the process whose connection to the rendezvous
            // closed first, then one killed by a signal, then the lowest rank (in rank
            // order alone, rank 0 failing over a lost rank 2 was blamed instead).
            failed.sort_by_key(|&(i, st)| {
                let closed = rv.closed_at(procs[i].first);
                (
                    closed.is_none(),
                    closed,
                    st.signal().is_none(),
                    procs[i].first,
                )
            });
            if let Some(&(i, st)) = failed.first() {
                failure = Some(JobFailed {
                    message: describe(&procs[i], st),
                    code: exit_code(st),
                });
                // Give the others a moment to notice and exit on their own.
                kill_at = Some(Instant::now() + Duration::from_secs(1));
            }
        }
        if running == 0 {
            break;
        }
        if stop.load(Ordering::SeqCst) && failure.is_none() {
            failure = Some(JobFailed {
                message: "interrupted".into(),
                code: 1,
            });
            kill_at = Some(Instant::now());
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            for (i, p) in procs.iter_mut().enumerate() {
                if !done[i] {
                    let _ = p.child.kill();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

fn describe(p: &Proc, st: ExitStatus) -> String {
    let ranks = if p.count == 1 {
        format!("rank {}", p.first)
    } else {
        format!("ranks {}..{}", p.first, p.first + p.count)
    };
    format!(
        "{ranks} (pid {} on {}) failed first ({st}); the job was stopped",
        p.child.id(),
        p.host
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_is_the_rank_s_code_or_128_plus_its_signal() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGSEGV)), 139);
    }

    fn slots(hosts: &[(&str, Option<&str>)]) -> Slots {
        Slots {
            name: "hosts.txt".into(),
            slots: hosts
                .iter()
                .map(|(h, s)| Slot {
                    host: h.to_string(),
                    site: s.map(String::from),
                })
                .collect(),
        }
    }

    #[test]
    fn processes_fill_the_slots_in_order_with_consecutive_ranks() {
        let h = slots(&[("a", Some("east")), ("a", Some("east")), ("b", None)]);
        let p = place(5, 2, Some(&h)).unwrap();
        let got: Vec<_> = p
            .iter()
            .map(|p| (p.first, p.count, p.host.as_str(), p.site.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (0, 2, "a", Some("east")),
                (2, 2, "a", Some("east")),
                (4, 1, "b", None)
            ]
        );
        let local = place(3, 1, None).unwrap();
        assert!(local.iter().all(|p| p.host == "localhost"));
        assert_eq!(local.len(), 3);
    }

    #[test]
    fn too_few_slots_name_the_hostfile_and_what_is_missing() {
        let e = place(5, 1, Some(&slots(&[("a", None), ("b", None)]))).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("hosts.txt needs 5 process slots"), "{msg}");
        assert!(msg.ends_with("the hostfile has 2"), "{msg}");
    }

    #[test]
    fn sites_label_processes_and_may_not_split_one() {
        let sites = [("east".to_string(), 4), ("west".to_string(), 2)];
        let mut p = place(6, 2, None).unwrap();
        assert_sites(&mut p, &sites, &["east", "east", "west"]);
        let mut p = place(6, 3, None).unwrap();
        match assign_sites(&mut p, &sites) {
            Err(JobLaunchError::SplitProcess {
                first,
                last,
                site,
                last_site,
            }) => assert_eq!(
                (first, last, site.as_str(), last_site.as_str()),
                (3, 5, "east", "west")
            ),
            other => panic!("{other:?}"),
        }
    }

    fn assert_sites(p: &mut [Placement], sites: &[(String, u32)], want: &[&str]) {
        assign_sites(p, sites).unwrap();
        let got: Vec<_> = p.iter().map(|p| p.site.as_deref().unwrap()).collect();
        assert_eq!(got, want);
    }
}
