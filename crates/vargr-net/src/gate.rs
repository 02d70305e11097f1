//! Listeners that authenticate many connections at once.
//!
//! A handshake run inside the accept loop lets one peer that sends a byte every few
//! seconds hold the listener, and every peer behind it, for as long as it likes. A
//! [`Gate`] accepts on a thread of its own and runs each handshake on a thread of its own,
//! all of it within one deadline. It holds at most `max_pending` connections that have
//! not proved the secret yet: beyond that it stops accepting until one finishes, so the
//! rest wait in the kernel's backlog (a thousand back-ends starting at once are slowed,
//! not refused). From one remote address it holds at most `max_pending_per_host` and
//! closes any beyond that at once, so one host cannot take every slot; peers on this
//! host (loopback, Unix sockets) count only towards the total. Authenticated
//! connections wait in a queue for [`Gate::accept_timeout`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::auth::{self, Secret};
use crate::seal::LinkSecurity;
use crate::{Addr, Conn, Listener, NetError, SecureConn};

/// How a [`Gate`] treats connections that have not authenticated yet.
#[derive(Debug, Clone)]
pub struct GateConfig {
    /// The whole handshake must finish within this.
    pub deadline: Duration,
    /// Unauthenticated connections held at once, in total.
    pub max_pending: usize,
    /// Unauthenticated connections held at once from one remote IP address (loopback
    /// and Unix-socket peers count only towards the total).
    pub max_pending_per_host: usize,
    pub security: LinkSecurity,
}

impl Default for GateConfig {
    fn default() -> GateConfig {
        GateConfig {
            deadline: Duration::from_secs(10),
            max_pending: 64,
            max_pending_per_host: 8,
            security: LinkSecurity::Auto,
        }
    }
}

/// A connection that passed the handshake.
pub struct Admitted {
    /// The node id (or rank) the peer proved.
    pub node: u32,
    pub conn: SecureConn,
}

/// Why a connection was turned away; handed to the gate's reporter.
pub type Reporter = Box<dyn Fn(&NetError) + Send + Sync>;

/// A listener whose connections are authenticated concurrently; see the module docs.
pub struct Gate {
    admitted: mpsc::Receiver<Admitted>,
    local: Addr,
    stop: Arc<AtomicBool>,
}

struct Pending {
    total: usize,
    per_host: HashMap<IpAddr, usize>,
}

type Shared = Arc<(Mutex<Pending>, Condvar)>;

/// Releases a pending slot when a handshake ends, however it ends.
struct Slot {
    pending: Shared,
    host: Option<IpAddr>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (lock, freed) = &*self.pending;
        freed.notify_one();
        let mut p = lock.lock().unwrap_or_else(|e| e.into_inner());
        p.total -= 1;
        if let Some(h) = self.host {
            if let Some(n) = p.per_host.get_mut(&h) {
                *n -= 1;
                if *n == 0 {
                    p.per_host.remove(&h);
                }
            }
        }
    }
}

/// The remote address a connection counts against, if it comes from another host.
fn host_of(conn: &Conn) -> Option<IpAddr> {
    match conn {
        Conn::Tcp(s) => s
            .peer_addr()
            .ok()
            .map(|a| a.ip())
            .filter(|ip| !ip.is_loopback()),
        Conn::Unix(_) => None,
    }
}

impl Gate {
    /// Starts accepting on `listener`; `report` hears of every connection refused.
    pub fn open(listener: Listener, secret: Secret, config: GateConfig, report: Reporter) -> Gate {
        let local = listener
            .local_addr()
            .unwrap_or_else(|_| Addr::Unix("listener".into()));
        let (tx, admitted) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let report: Arc<Reporter> = Arc::new(report);
        let name = local.to_string();
        let pending = Arc::new((
            Mutex::new(Pending {
                total: 0,
                per_host: HashMap::new(),
            }),
            Condvar::new(),
        ));
        std::thread::Builder::new()
            .name("vargr-gate".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    if !room(&pending, config.max_pending) {
                        continue;
                    }
                    let conn = match listener.accept_timeout(Duration::from_millis(100)) {
                        Ok(c) => c,
                        Err(NetError::Timeout { .. }) => continue,
                        Err(e) => {
                            report(&e);
                            // Out of descriptors, say: do not spin on it.
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        }
                    };
                    let Some(slot) = admit(&pending, &conn, &config) else {
                        report(&NetError::Refused {
                            peer: conn.peer_name(),
                            reason: format!(
                                "too many connections not yet authenticated from one host (at most {})",
                                config.max_pending_per_host
                            ),
                        });
                        continue;
                    };
                    let (secret, tx, told) = (secret.clone(), tx.clone(), report.clone());
                    let (security, deadline) = (config.security, config.deadline);
                    let spawned = std::thread::Builder::new()
                        .name("vargr-handshake".into())
                        .spawn(move || {
                            let _slot = slot;
                            match auth::accept(conn, &secret, security, deadline) {
                                Ok((node, conn)) => {
                                    let _ = tx.send(Admitted { node, conn });
                                }
                                Err(e) => told(&e),
                            }
                        });
                    if let Err(e) = spawned {
                        report(&NetError::io("starting a handshake for", &name, e));
                    }
                }
            })
            .expect("the OS refused to start the listener's thread");
        Gate {
            admitted,
            local,
            stop,
        }
    }

    /// The address peers connect to.
    pub fn local_addr(&self) -> &Addr {
        &self.local
    }

    /// The next authenticated connection, waiting at most `timeout`.
    pub fn accept_timeout(&self, timeout: Duration) -> Result<Admitted, NetError> {
        self.admitted.recv_timeout(timeout).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => NetError::Timeout {
                what: "an authenticated connection",
                peer: self.local.to_string(),
                after_ms: timeout.as_millis() as u64,
            },
            mpsc::RecvTimeoutError::Disconnected => NetError::io(
                "accepting on",
                &self.local,
                std::io::ErrorKind::BrokenPipe.into(),
            ),
        })
    }
}

/// Waits (a little) for a free slot; false if there is none yet.
fn room(pending: &Shared, max: usize) -> bool {
    let (lock, freed) = &**pending;
    let p = lock.lock().unwrap_or_else(|e| e.into_inner());
    if p.total < max {
        return true;
    }
    let (p, _) = freed
        .wait_timeout(p, Duration::from_millis(100))
        .unwrap_or_else(|e| e.into_inner());
    p.total < max
}

fn admit(pending: &Shared, conn: &Conn, config: &GateConfig) -> Option<Slot> {
    let host = host_of(conn);
    let mut p = pending.0.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = host {
        let n = p.per_host.entry(h).or_insert(0);
        if *n >= config.max_pending_per_host {
            return None;
        }
        *n += 1;
    }
    p.total += 1;
    Some(Slot {
        pending: pending.clone(),
        host,
    })
}

impl Drop for Gate {
    /// Stops accepting. The thread notices within its poll interval and closes the
    /// listener then; nobody waits for it (start-up paths drop gates on the way).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;
    use vargr_wire::{Frame, FrameKind};

    fn tcp_gate(config: GateConfig) -> (Gate, Secret, Arc<Mutex<Vec<String>>>) {
        let secret = Secret::random();
        let l = Listener::bind(&"tcp:127.0.0.1:0".parse().unwrap()).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        let g = Gate::open(
            l,
            secret.clone(),
            config,
            Box::new(move |e| seen.lock().unwrap().push(e.to_string())),
        );
        (g, secret, log)
    }

    fn dial(g: &Gate, s: &Secret, node: u32) -> Result<SecureConn, NetError> {
        let c = crate::connect(g.local_addr(), Duration::from_secs(2))?;
        auth::connect(
            c,
            s,
            node,
            LinkSecurity::Auto,
            Duration::from_secs(2),
            "gate",
        )
    }

    #[test]
    fn a_trickling_peer_neither_blocks_others_nor_outlives_the_deadline() {
        let (g, s, log) = tcp_gate(GateConfig {
            deadline: Duration::from_millis(800),
            ..GateConfig::default()
        });
        // A peer that sends one byte of its proof every 100 ms and never finishes.
        let addr = g.local_addr().clone();
        let slow = std::thread::spawn(move || {
            let mut c = crate::connect(&addr, Duration::from_secs(2)).unwrap();
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(3) {
                if c.write_all(&[0xA5]).is_err() {
                    return started.elapsed();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            started.elapsed()
        });
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        let mut good = dial(&g, &s, 5).unwrap();
        let a = g.accept_timeout(Duration::from_secs(2)).unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(700),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(a.node, 5);
        // And the admitted connection carries protected frames both ways.
        let mut theirs = a.conn;
        good.write_frame(&Frame::new(FrameKind::Data, 1, 2, b"hi".to_vec()))
            .unwrap();
        assert_eq!(&theirs.read_frame(100).unwrap().payload[..], b"hi");
        // The trickler was cut off near the deadline, and the message says how long.
        let lasted = slow.join().unwrap();
        assert!(lasted < Duration::from_millis(2500), "{lasted:?}");
        let log = log.lock().unwrap();
        assert!(
            log.iter()
                .any(|m| m.contains("timed out after") && !m.contains("after 0 ms")),
            "{log:?}"
        );
    }

    #[test]
    fn a_full_gate_makes_peers_wait_instead_of_refusing_them() {
        let (g, s, log) = tcp_gate(GateConfig {
            max_pending: 2,
            ..GateConfig::default()
        });
        // Two silent connections take every slot...
        let idle: Vec<Conn> = (0..2)
            .map(|_| crate::connect(g.local_addr(), Duration::from_secs(2)).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        // ...so a third, with the secret, waits in the backlog rather than being refused...
        let addr = g.local_addr().clone();
        let third = std::thread::spawn(move || {
            let c = crate::connect(&addr, Duration::from_secs(5))?;
            auth::connect(
                c,
                &s,
                3,
                LinkSecurity::Auto,
                Duration::from_secs(10),
                "gate",
            )
        });
        assert!(g.accept_timeout(Duration::from_millis(500)).is_err());
        // ...and is admitted once a slot frees.
        drop(idle);
        assert_eq!(g.accept_timeout(Duration::from_secs(5)).unwrap().node, 3);
        third.join().unwrap().unwrap();
        assert!(
            !log.lock().unwrap().iter().any(|m| m.contains("too many")),
            "{:?}",
            log.lock().unwrap()
        );
    }

    /// This machine's address on its default route, if it has one.
    fn remote_looking_ip() -> Option<std::net::IpAddr> {
        let u = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        u.connect("192.0.2.1:9").ok()?;
        Some(u.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback())
    }

    #[test]
    fn one_remote_host_cannot_take_every_slot() {
        let Some(ip) = remote_looking_ip() else {
            eprintln!("no address besides loopback here: nothing to test");
            return;
        };
        let secret = Secret::random();
        let l = Listener::bind(&Addr::Tcp(format!("{ip}:0"))).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        let g = Gate::open(
            l,
            secret.clone(),
            GateConfig {
                max_pending_per_host: 2,
                ..GateConfig::default()
            },
            Box::new(move |e| seen.lock().unwrap().push(e.to_string())),
        );
        let idle: Vec<Conn> = (0..2)
            .map(|_| crate::connect(g.local_addr(), Duration::from_secs(2)).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            dial(&g, &secret, 1).is_err(),
            "a third from the same host got in"
        );
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            log.lock().unwrap().iter().any(|m| m.contains("too many")),
            "{:?}",
            log.lock().unwrap()
        );
        drop(idle);
        std::thread::sleep(Duration::from_millis(300));
        dial(&g, &secret, 2).unwrap();
        assert_eq!(g.accept_timeout(Duration::from_secs(2)).unwrap().node, 2);
    }
}
