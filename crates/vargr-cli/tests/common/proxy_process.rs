//! A proxy process (`vargr proxy`, `vargr vnc`) as the tests run it: started with a
//! cache directory, its stderr collected line by line, its ports read from what it
//! prints, stopped with SIGTERM or killed on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::vargr;

/// A `vargr proxy` or `vargr vnc` process whose stderr lines are collected; killed on
/// drop.
pub struct Proxy {
    pub child: Child,
    log: Arc<Mutex<Vec<String>>>,
    /// The ports it printed (listening or serving on).
    pub ports: Vec<u16>,
}

impl Proxy {
    pub fn start(
        command: &str,
        args: &[&str],
        envs: &[(&str, &str)],
        cache: &Path,
        ports: usize,
    ) -> Proxy {
        let mut c = Command::new(vargr());
        c.arg(command)
            .args(args)
            .arg("--cache-dir")
            .arg(cache)
            .args(["--cache-size", "256m"])
            .env_remove("VARGR_PROXY_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("spawn vargr proxy");
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = log.clone();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(l);
            }
        });
        let mut p = Proxy {
            child,
            log,
            ports: Vec::new(),
        };
        let found = p.wait_for(Duration::from_secs(30), |lines| {
            lines
                .iter()
                .filter(|l| l.contains("listening on") || l.contains("serving on"))
                .count()
                >= ports
        });
        assert!(
            found,
            "vargr {command} {args:?} did not start:\n{}",
            p.text()
        );
        p.ports = p
            .lines()
            .iter()
            .filter(|l| l.contains("listening on") || l.contains("serving on"))
            .map(|l| {
                let addr = l
                    .split(" on tcp:")
                    .nth(1)
                    .unwrap()
                    .split([' ', ','])
                    .next()
                    .unwrap();
                addr.rsplit(':').next().unwrap().parse().unwrap()
            })
            .collect();
        p
    }

    pub fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn text(&self) -> String {
        self.lines().join("\n")
    }

    /// Polls the log until `pred` holds or `guard` passes.
    pub fn wait_for(&self, guard: Duration, pred: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + guard;
        loop {
            if pred(&self.lines()) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Proxy {
    /// Stops the proxy as a service manager would (SIGTERM), so it saves what it keeps
    /// between runs; killed if it has not exited after a few seconds.
    pub fn stop(mut self) {
        // SAFETY: kill(2) on the pid of a child not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
