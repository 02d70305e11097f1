//! Ranks that check a job from the inside: what it learned at start-up, and that its
//! mesh carries messages between every pair (tests of `vargr run`, of ranks as
//! threads, and of mpirun).

use anyhow::{Context, Result};

/// Joins the job (rank and size from `vargr run`, `mpirun` or `srun`) and prints one line
/// per local rank: `rank R of N host H site S peers P`, where P counts the table entries.
pub fn rank_info() -> Result<()> {
    let env = vargr_net::wireup::JobEnv::from_env()?;
    let listener = vargr_net::Listener::bind(&vargr_net::Addr::Tcp("127.0.0.1:0".into()))?;
    let addr = listener.local_addr()?;
    let settings = vargr_net::wireup::JobSettings::default();
    let joined = vargr_net::wireup::join_job(&env, &addr, &settings)?;
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
/// `vargr run`, ranks as threads, and mpirun). With `shm_stats`, each process then prints
/// `process R shm sent S received M single-copy K` (R its first rank; S and M messages,
/// K of the sent ones read by the receiver from our memory; `shm off` when its mesh does
/// not use shared memory).
pub fn mesh_check(shm_stats: bool) -> Result<()> {
    use std::sync::Arc;
    // Shared memory on or off as the configuration says (VARGR_SHM).
    let settings = vargr_net::wireup::JobSettings {
        shm: vargr_config::from_process()?.shm,
        ..vargr_net::wireup::JobSettings::default()
    };
    let mesh = vargr_net::mesh::join(Box::new(|_| vargr_net::StageChain::default()), &settings)?;
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
    if shm_stats {
        match mesh.shm_stats() {
            Some(s) => println!(
                "process {} shm sent {} received {} single-copy {}",
                env.rank, s.sent, s.received, s.single_copy
            ),
            None => println!("process {} shm off", env.rank),
        }
    }
    Ok(())
}

/// Point-to-point semantics across processes and threads: every rank sends three
/// messages to every other with falling tags and takes them with wildcard receives
/// (posted and blocking), checking each sender's order; then a probed ring. Each rank
/// prints `rank R p2p ok` (tests of `vargr run`).
pub fn p2p_check() -> Result<()> {
    let job = vargr_config::join_job()?;
    let outs = job.run(|c| {
        p2p(&c).map_err(|e| vargr_coll::CollError::Job {
            reason: format!("{e:#}"),
        })
    })?;
    for o in outs {
        println!("{o}");
    }
    job.finish();
    Ok(())
}

fn p2p(c: &vargr_coll::Comm) -> Result<String> {
    use bytes::Bytes;
    let (me, p) = (c.rank(), c.size());
    for dest in (0..p).filter(|&d| d != me) {
        for i in 0..3u64 {
            c.send_bytes(dest, 10 - i, Bytes::from(format!("{me}:{i}")))?;
        }
    }
    let mut got = Vec::new();
    let mut posted = (1..p)
        .map(|_| c.irecv(None, None))
        .collect::<Result<Vec<_>, _>>()?;
    while !posted.is_empty() {
        let (i, m) = c.wait_any(&posted)?;
        let _spent = posted.remove(i);
        got.push(m.context("a receive completes with a message")?);
    }
    for _ in 0..2 * (p - 1) {
        got.push(c.recv_any(None, None)?);
    }
    let mut next = vec![0u64; p];
    for m in got {
        let i = next[m.source];
        let want = format!("{}:{i}", m.source);
        anyhow::ensure!(
            m.tag == 10 - i && m.data == want.as_bytes(),
            "rank {me}: from rank {} got tag {} {:?}, expected tag {} {want:?}",
            m.source,
            m.tag,
            String::from_utf8_lossy(&m.data),
            10 - i
        );
        next[m.source] += 1;
    }
    // Otherwise a fast neighbour's ring message could meet a wildcard above.
    c.barrier()?;
    let (left, right) = ((me + p - 1) % p, (me + 1) % p);
    c.send_bytes(right, 20, Bytes::from(vec![me as u8; 100 + me]))?;
    let st = c.probe(None, Some(20))?;
    anyhow::ensure!(
        st.source == left && st.len == 100 + left,
        "rank {me}: probe saw {st:?}, expected {} bytes from rank {left}",
        100 + left
    );
    let data = c.recv_bytes(st.source, 20)?;
    anyhow::ensure!(
        data.len() == st.len,
        "rank {me}: probe and receive disagree"
    );
    c.barrier()?;
    Ok(format!("rank {me} p2p ok"))
}

/// Flows between two sites at once (tests of the emulated WAN's shared gateways): the
/// first half of the ranks is one site, the second the other; the first `pairs` ranks
/// each send `bytes` in `chunk`-byte messages of random (incompressible) data to their
/// partner half a job away, all starting together after a barrier. Rank 0 prints
/// `RESULT pairs P bytes B seconds S bits_per_s R`: all the bytes over the time from the
/// first rank leaving the barrier to the last receiver done. Times are the wall clock,
/// which ranks of one host share: a rank's own exit from the barrier is no start, since
/// the message releasing it may queue at the gateway behind a flow that already began.
pub fn stream_check(pairs: usize, bytes: usize, chunk: usize) -> Result<()> {
    use rand::{RngExt, SeedableRng};
    let job = vargr_config::join_job()?;
    let outs = job.run(|c| {
        let (me, n) = (c.rank(), c.size());
        let fail = |reason: String| vargr_coll::CollError::Job { reason };
        if n % 2 != 0 || pairs > n / 2 || chunk == 0 {
            return Err(fail(format!(
                "{pairs} pairs of {n} ranks in chunks of {chunk}"
            )));
        }
        let half = n / 2;
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(me as u64);
        let data: Vec<u8> = (0..chunk).map(|_| rng.random()).collect();
        let data = bytes::Bytes::from(data);
        let wall = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        c.barrier()?;
        let mut start = [wall()];
        let mut end = [0.0f64];
        let mut moved = [0u64];
        if me < pairs {
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk);
                c.send_bytes(me + half, 30, data.slice(..n))?;
                left -= n;
            }
        } else if me >= half && me - half < pairs {
            let mut got = 0;
            while got < bytes {
                got += c.recv_bytes(me - half, 30)?.len();
            }
            end[0] = wall();
            moved[0] = got as u64;
        }
        c.allreduce(&mut start, &vargr_coll::Op::Min)?;
        c.allreduce(&mut end, &vargr_coll::Op::Max)?;
        c.allreduce(&mut moved, &vargr_coll::Op::Sum)?;
        let secs = end[0] - start[0];
        Ok((me == 0).then(|| {
            format!(
                "RESULT pairs {pairs} bytes {} seconds {secs:.6} bits_per_s {:.0}",
                moved[0],
                moved[0] as f64 * 8.0 / secs.max(1e-9)
            )
        }))
    })?;
    for line in outs.into_iter().flatten() {
        println!("{line}");
    }
    job.finish();
    Ok(())
}
