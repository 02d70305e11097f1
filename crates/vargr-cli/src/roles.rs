//! The processes vargr starts on its own behalf: commnodes, and the built-in back-ends
//! that the demo, the benchmarks (`vargr-bench`) and the tests start as `vargr backend`.

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
/// A viewer of an observed element (PATHS' video client): `%ud %aud %uld %ud` = element,
/// per-rank µs spent on each value, the last version, and how long (ms) to wait for a
/// newer one before giving up. It observes newest values until the last version and
/// answers `%ud %uld %uld %d %uld`: values seen, first and last version, 1 if versions
/// only grew and each value named its version (first 8 bytes LE), and value bytes.
pub const TAG_VIEW: i32 = 9;

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
            TAG_VIEW => view(be, &p)?,
            _ => {}
        }
    }
}

/// One viewer run (see [`TAG_VIEW`]).
fn view(be: &Backend, p: &vargr_tbon::Packet) -> Result<(), TbonError> {
    let (element, per_rank, last, wait_ms) = match p.values.as_slice() {
        [Value::UInt(e), Value::UIntArray(us), Value::ULong(last), Value::UInt(ms)] => {
            (*e, us, *last, *ms)
        }
        _ => return Ok(()),
    };
    let consume = std::time::Duration::from_micros(u64::from(
        per_rank.get(be.rank() as usize).copied().unwrap_or(0),
    ));
    let wait = std::time::Duration::from_millis(u64::from(wait_ms));
    let (mut have, mut first, mut frames, mut bytes, mut ok) = (None, 0u64, 0u32, 0u64, true);
    while have.is_none_or(|h| h < last) {
        let (version, value) = match be.observe_newer(element, have, wait) {
            Ok(v) => v,
            Err(TbonError::ObserveTimeout { .. }) => break,
            Err(e) => return Err(e),
        };
        let named = value
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        ok &= have.is_none_or(|h| version > h) && named == Some(version);
        if have.is_none() {
            first = version;
        }
        have = Some(version);
        frames += 1;
        bytes += value.len() as u64;
        std::thread::sleep(consume);
    }
    be.send(
        p.stream,
        TAG_VIEW,
        "%ud %uld %uld %d %uld",
        vec![
            Value::UInt(frames),
            Value::ULong(first),
            Value::ULong(have.unwrap_or(0)),
            Value::Int(i32::from(ok)),
            Value::ULong(bytes),
        ],
    )
}
