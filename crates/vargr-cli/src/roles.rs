//! The processes vargr starts on its own behalf: commnodes and built-in back-ends.

use anyhow::{Context, Result};
use vargr_net::launch::Launcher;
use vargr_tbon::spawn::Spawner;
use vargr_tbon::{Backend, Bootstrap, TbonError, Value};

/// Tags the built-in back-ends understand.
pub const TAG_ECHO: i32 = 1;
pub const TAG_RANK: i32 = 2;
pub const TAG_GROUP: i32 = 3;
pub const TAG_P2P_START: i32 = 4;
pub const TAG_P2P: i32 = 5;
pub const TAG_P2P_REPORT: i32 = 6;
pub const TAG_BURN: i32 = 7;
/// Answers `v` with `v 1 2^rank` (`%ld %ld %ld`): summed, a wave tells how many
/// back-ends contributed, which ones, and whether any was counted twice or mixed with
/// another wave (the fault-recovery tests).
pub const TAG_WAVE: i32 = 8;

pub fn commnode() -> Result<()> {
    let boot = Bootstrap::from_env().context("starting commnode")?;
    vargr_tbon::commnode::run(boot, Spawner::Processes(Launcher::Local)).context("commnode")
}

pub fn backend(role: &str) -> Result<()> {
    let be = Backend::from_env().context("joining the network")?;
    let fail_after: Option<u64> = role
        .strip_prefix("fail-after:")
        .and_then(|n| n.parse().ok());
    // `slow:R:US`: back-end R sleeps US µs before each answer (load-balance tests).
    let delay = role.strip_prefix("slow:").and_then(|r| {
        let (rank, us) = r.split_once(':')?;
        let rank: u32 = rank.parse().ok()?;
        (rank == be.rank()).then(|| std::time::Duration::from_micros(us.parse().unwrap_or(0)))
    });
    serve(&be, fail_after, delay)
}

/// The built-in back-end loop: answers the demo's and the benchmarks' requests.
pub fn serve(
    be: &Backend,
    fail_after: Option<u64>,
    delay: Option<std::time::Duration>,
) -> Result<()> {
    match serve_until_error(be, fail_after, delay) {
        // A shutdown that arrives while answering is a normal end too.
        Ok(()) | Err(TbonError::Shutdown) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn serve_until_error(
    be: &Backend,
    fail_after: Option<u64>,
    delay: Option<std::time::Duration>,
) -> Result<(), TbonError> {
    let mut seen = 0u64;
    loop {
        let p = be.recv()?;
        seen += 1;
        if fail_after.is_some_and(|n| seen > n) {
            std::process::exit(3);
        }
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        match p.tag {
            TAG_ECHO => be.send(p.stream, p.tag, p.format.as_str(), p.values)?,
            TAG_RANK => {
                let base = match p.values.first() {
                    Some(Value::Int(v)) => *v,
                    _ => 0,
                };
                be.send(
                    p.stream,
                    p.tag,
                    "%d",
                    vec![Value::Int(base + be.rank() as i32)],
                )?
            }
            TAG_GROUP => {
                let group = format!("libtool-{}.so", be.rank() % 3);
                be.send(p.stream, p.tag, "%s", vec![Value::Str(group)])?
            }
            TAG_P2P_START => {
                let dest = match p.values.first() {
                    Some(Value::UInt(d)) => *d,
                    _ => 0,
                };
                if dest != be.rank() {
                    be.send_to(
                        dest,
                        TAG_P2P,
                        "%s %ud",
                        vec![
                            Value::Str(format!("hello from back-end {}", be.rank())),
                            Value::UInt(p.stream),
                        ],
                    )?;
                }
            }
            TAG_P2P => {
                let (msg, stream) = match (p.values.first(), p.values.get(1)) {
                    (Some(Value::Str(m)), Some(Value::UInt(s))) => (m.clone(), *s),
                    _ => continue,
                };
                be.send(
                    stream,
                    TAG_P2P_REPORT,
                    "%s %ud",
                    vec![Value::Str(msg), Value::UInt(p.source)],
                )?;
            }
            TAG_BURN => {
                // Offered load for the figure-9 experiment: M samples of one value.
                let n = match p.values.first() {
                    Some(Value::UInt(n)) => *n,
                    _ => 1,
                };
                for i in 0..n {
                    be.send(
                        p.stream,
                        TAG_BURN,
                        "%lf",
                        vec![Value::Double(be.rank() as f64 + i as f64)],
                    )?;
                }
            }
            TAG_WAVE => {
                let v = match p.values.first() {
                    Some(Value::Long(v)) => *v,
                    _ => 0,
                };
                let bit = 1i64.checked_shl(be.rank()).unwrap_or(0);
                be.send(
                    p.stream,
                    TAG_WAVE,
                    "%ld %ld %ld",
                    vec![Value::Long(v), Value::Long(1), Value::Long(bit)],
                )?
            }
            _ => {}
        }
    }
}

/// Joins the job (rank and size from `vargr run`, `mpirun` or `srun`) and prints one line
/// per local rank: `rank R of N host H site S peers P`, where P counts the table entries.
pub fn rank_info() -> Result<()> {
    let env = vargr_net::job::JobEnv::from_env()?;
    let listener = vargr_net::Listener::bind(&vargr_net::Addr::Tcp("127.0.0.1:0".into()))?;
    let addr = listener.local_addr()?;
    let settings = vargr_net::job::JobSettings::default();
    let joined = vargr_net::job::join_job(&env, &addr, &settings)?;
    let table = joined.table;
    for r in env.rank..env.rank + env.local {
        let me = &table[r as usize];
        anyhow::ensure!(
            me.addr == addr,
            "rank {r}: the table has another address for me"
        );
        println!(
            "rank {r} of {} host {} site {} peers {}",
            env.size,
            me.host,
            me.site.as_deref().unwrap_or("-"),
            table.len()
        );
    }
    Ok(())
}

/// Joins the job's mesh and checks it: every rank sends its rank to every other rank, a
/// 1 MiB buffer goes once round the ring, and each rank prints `rank R ok` (tests of
/// `vargr run`, ranks as threads, and mpirun).
pub fn mesh_check() -> Result<()> {
    use std::sync::Arc;
    let mesh = vargr_net::mesh::join(
        Box::new(|_| vargr_net::StageChain::default()),
        &vargr_net::job::JobSettings::default(),
    )?;
    let env = mesh.env().clone();
    let threads: Vec<_> = (env.rank..env.rank + env.local)
        .map(|me| {
            let mesh = Arc::clone(&mesh);
            std::thread::spawn(move || -> Result<()> {
                let n = mesh.size();
                for peer in (0..n).filter(|&p| p != me) {
                    mesh.send(
                        me,
                        peer,
                        7,
                        bytes::Bytes::copy_from_slice(&me.to_le_bytes()),
                    )?;
                }
                let mut sum = 0u64;
                for peer in (0..n).filter(|&p| p != me) {
                    let b = mesh.recv(me, peer, 7)?;
                    anyhow::ensure!(b.len() == 4, "rank {me}: {} bytes from {peer}", b.len());
                    sum += u64::from(u32::from_le_bytes(b[..4].try_into()?));
                }
                let want = u64::from(n) * u64::from(n - 1) / 2 - u64::from(me);
                anyhow::ensure!(sum == want, "rank {me}: sum {sum}, expected {want}");
                // A large message once round the ring, each rank adding its rank to byte 0.
                let big: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
                let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
                let mut msg = if me == 0 {
                    big.clone()
                } else {
                    mesh.recv(me, prev, 8)?.to_vec()
                };
                msg[0] = msg[0].wrapping_add(me as u8);
                mesh.send(me, next, 8, msg.into())?;
                if me == 0 {
                    let back = mesh.recv(me, prev, 8)?;
                    let added = (0..n).fold(0u8, |a, r| a.wrapping_add(r as u8));
                    anyhow::ensure!(back[0] == big[0].wrapping_add(added), "ring byte 0");
                    anyhow::ensure!(back[1..] == big[1..], "ring payload changed");
                }
                println!("rank {me} ok");
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("a rank thread panicked"))??;
    }
    mesh.flush(std::time::Duration::from_secs(10));
    Ok(())
}
