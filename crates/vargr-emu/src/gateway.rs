//! Gateways: one shared bottleneck per ordered pair of sites, for all the processes of
//! a host.
//!
//! Longcut routes every message between two sub-clusters through their gateway nodes
//! (seed 000, ch. 8.1, after the Panda emulator), so all flows between two sites queue
//! at one bottleneck, as they do on a real WAN. A vargr link's emulation stage runs in
//! the sending process, one per link: on its own, each link would get the whole
//! bandwidth, and two pairs of ranks streaming between two sites would together get
//! twice the WAN. This table is what the stages of every process on the host share
//! instead: for each direction between two sites, the one value of the bottleneck
//! model that is not per link, *when the bottleneck is next free*.
//!
//! **Layout.** A sealed memfd of [`vargr_shm::Words`] (no process can shrink it under
//! the others' mappings; it is gone when the last process holding it ends), found
//! through a pointer file in the user's private runtime directory: `vargr run` makes
//! both when the WAN is emulated and gives the pointer to the ranks it starts on this
//! host (`VARGR_GATEWAYS`), and removes the pointer when the job ends. Words, 64-byte
//! lines:
//!
//! ```text
//! line 0      magic, version and slot count, epoch (CLOCK_MONOTONIC ns when made)
//! line 1+i    slot i: key (a 64-bit hash of "FROM\0TO", 0 = free), next free (ns)
//! ```
//!
//! A slot is claimed by compare-and-swap of its key from 0 (linear probing from
//! `key % slots`); a chunk is scheduled by a compare-and-swap loop on its next-free
//! time: `start = max(now, next_free)`, `done = start + bits / bandwidth`. Times are
//! `CLOCK_MONOTONIC` nanoseconds, converted to and from `Instant` (the same clock on
//! Linux) through one pair of readings taken when the table is opened. The epoch
//! makes every process replay a trace from the same moment.
//!
//! Every word may have been written by any process of the user, so values are only
//! ever times and keys: a next-free time more than [`MAX_BACKLOG`] ahead is taken as
//! corrupt and the bottleneck as idle; a key that is not ours makes us probe on; a full
//! table leaves a link its own bottleneck. Nothing read from the table can make a
//! process fail.
//!
//! Links to other hosts keep one bottleneck per link: the table is shared by the
//! processes of one host only.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vargr_shm::{ShmError, Words};

use crate::error::EmuError;

const MAGIC: u64 = u64::from_le_bytes(*b"VARGRGW1");
const VERSION: u64 = 1;
/// Words per line: each slot has a cache line of its own.
const LINE: usize = 8;
/// Directed pairs of sites the table holds: 16 sites, all joined to each other.
const SLOTS: usize = 255;
const WORDS: usize = LINE * (SLOTS + 1);

/// The longest backlog a bottleneck may have; a next-free time further ahead is a
/// corrupt value, and the bottleneck is taken as idle.
pub const MAX_BACKLOG: Duration = Duration::from_secs(24 * 3600);

/// One reading of both clocks, to convert between them.
#[derive(Debug, Clone, Copy)]
struct Clock {
    at: Instant,
    ns: u64,
}

impl Clock {
    fn now() -> Clock {
        let at = Instant::now();
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let ns = u64::try_from(ts.tv_sec)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0));
        Clock { at, ns }
    }

    fn to_ns(self, t: Instant) -> u64 {
        match t.checked_duration_since(self.at) {
            Some(d) => self.ns.saturating_add(nanos(d)),
            None => self.ns.saturating_sub(nanos(self.at - t)),
        }
    }

    fn to_instant(self, ns: u64) -> Instant {
        let t = if ns >= self.ns {
            self.at.checked_add(Duration::from_nanos(ns - self.ns))
        } else {
            self.at.checked_sub(Duration::from_nanos(self.ns - ns))
        };
        t.unwrap_or(self.at)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The shared bottlenecks of a host's emulated WAN (see the [module docs](self)).
#[derive(Debug)]
pub struct Gateways {
    words: Words,
    clock: Clock,
    epoch: Instant,
}

impl Gateways {
    /// A new, empty table, its epoch now.
    pub fn create() -> Result<Gateways, EmuError> {
        let words = Words::create("vargr-gateways", WORDS).map_err(EmuError::Gateways)?;
        let clock = Clock::now();
        let w = words.words();
        w[1].store(VERSION << 32 | SLOTS as u64, Ordering::Relaxed);
        w[2].store(clock.ns, Ordering::Relaxed);
        w[0].store(MAGIC, Ordering::Release);
        Ok(Gateways {
            words,
            clock,
            epoch: clock.at,
        })
    }

    /// Opens the table a pointer file names (see [`Gateways::write_pointer`]).
    pub fn open_pointer(path: &Path) -> Result<Gateways, EmuError> {
        let words = Words::open_pointer(path).map_err(EmuError::Gateways)?;
        let w = words.words();
        if w.len() != WORDS
            || w[0].load(Ordering::Acquire) != MAGIC
            || w[1].load(Ordering::Relaxed) != VERSION << 32 | SLOTS as u64
        {
            return Err(EmuError::Gateways(ShmError::Refused {
                who: path.display().to_string(),
                why: "not a vargr gateways table of this version".into(),
            }));
        }
        let clock = Clock::now();
        // A time, however written: one in the future is taken as now.
        let epoch = clock.to_instant(w[2].load(Ordering::Relaxed).min(clock.ns));
        Ok(Gateways {
            words,
            clock,
            epoch,
        })
    }

    /// Writes a pointer file naming this table (new, 0600, never through a link), for
    /// processes that [`open_pointer`](Gateways::open_pointer) it. It names this
    /// process's descriptor: the table is found while this process lives.
    pub fn write_pointer(&self, path: &Path) -> Result<(), EmuError> {
        vargr_shm::write_pointer(path, self.words.fd()).map_err(EmuError::Gateways)
    }

    /// When the table was made, in this process's clock: trace replays start here, so
    /// that every process sees the same row at the same moment.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// The bottleneck of the direction from site `from` to site `to`, claimed if no
    /// process has yet; `None` if the table is full (the link keeps its own).
    pub fn bottleneck(self: &Arc<Self>, from: &str, to: &str) -> Option<SharedBottleneck> {
        let key = pair_key(from, to);
        let w = self.words.words();
        let first = (key % SLOTS as u64) as usize;
        for i in 0..SLOTS {
            let slot = (first + i) % SLOTS;
            let k = &w[LINE * (slot + 1)];
            let found = match k.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => true,
                Err(held) => held == key,
            };
            if found {
                return Some(SharedBottleneck {
                    table: self.clone(),
                    slot,
                });
            }
        }
        None
    }

    fn next_free_word(&self, slot: usize) -> &AtomicU64 {
        &self.words.words()[LINE * (slot + 1) + 1]
    }
}

/// The key of the ordered pair (never 0, which marks a free slot).
fn pair_key(from: &str, to: &str) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(from.as_bytes());
    h.update(&[0]);
    h.update(to.as_bytes());
    let k = u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().expect("8 bytes"));
    k.max(1)
}

/// One direction's bottleneck in a [`Gateways`] table, shared with every process of
/// the host that sends between the same two sites.
#[derive(Debug, Clone)]
pub struct SharedBottleneck {
    table: Arc<Gateways>,
    slot: usize,
}

impl SharedBottleneck {
    /// The table's epoch (see [`Gateways::epoch`]).
    pub fn epoch(&self) -> Instant {
        self.table.epoch
    }

    /// Occupies the bottleneck for a chunk arriving at `now` and returns when it starts
    /// and when it is done. `serialize(start, idle)` says how long the chunk occupies
    /// it if it starts at `start` (`idle`: nothing was queued); it may be called more
    /// than once when other processes schedule at the same time, and the last call's
    /// answer is the one used.
    pub fn reserve(
        &self,
        now: Instant,
        mut serialize: impl FnMut(Instant, bool) -> Duration,
    ) -> (Instant, Instant) {
        let clock = self.table.clock;
        let word = self.table.next_free_word(self.slot);
        let now_ns = clock.to_ns(now);
        let mut seen = word.load(Ordering::Acquire);
        loop {
            let free = sane(seen, now_ns);
            let idle = free <= now_ns;
            let start_ns = free.max(now_ns);
            let start = clock.to_instant(start_ns);
            let done_ns = start_ns.saturating_add(nanos(serialize(start, idle)));
            match word.compare_exchange_weak(seen, done_ns, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return (start, clock.to_instant(done_ns)),
                Err(now_seen) => seen = now_seen,
            }
        }
    }

    /// When the bottleneck is next free, as far as `now` can tell (`now` if idle).
    pub fn next_free(&self, now: Instant) -> Instant {
        let clock = self.table.clock;
        let now_ns = clock.to_ns(now);
        let seen = self.table.next_free_word(self.slot).load(Ordering::Acquire);
        clock.to_instant(sane(seen, now_ns).max(now_ns))
    }
}

/// A next-free time read from the table, or `now` if it is impossibly far ahead.
fn sane(free: u64, now: u64) -> u64 {
    if free > now.saturating_add(nanos(MAX_BACKLOG)) {
        now
    } else {
        free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn one_pair_one_slot_each_direction_its_own() {
        let g = Arc::new(Gateways::create().unwrap());
        let ab = g.bottleneck("a", "b").unwrap();
        let ab2 = g.bottleneck("a", "b").unwrap();
        let ba = g.bottleneck("b", "a").unwrap();
        assert_eq!(ab.slot, ab2.slot);
        assert_ne!(ab.slot, ba.slot);
        let t0 = Instant::now();
        let (s, d) = ab.reserve(t0, |_, idle| {
            assert!(idle);
            ms(10)
        });
        assert_eq!((s, d), (t0, t0 + ms(10)));
        // The other handle of the same direction queues behind it; the reverse does not.
        let (s, _) = ab2.reserve(t0, |_, idle| {
            assert!(!idle);
            ms(1)
        });
        assert_eq!(s, t0 + ms(10));
        assert_eq!(ba.reserve(t0, |_, _| ms(1)).0, t0);
        assert_eq!(ab.next_free(t0), t0 + ms(11));
    }

    #[test]
    fn two_mappings_of_the_table_see_one_clock() {
        let dir = std::env::temp_dir().join(format!("vargr-gw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ptr = dir.join("gw.ptr");
        let _ = std::fs::remove_file(&ptr);
        let a = Arc::new(Gateways::create().unwrap());
        a.write_pointer(&ptr).unwrap();
        let b = Arc::new(Gateways::open_pointer(&ptr).unwrap());
        // Epochs agree to within the two clock readings.
        let skew = a.epoch().max(b.epoch()) - a.epoch().min(b.epoch());
        assert!(skew < ms(50), "{skew:?}");
        let t0 = Instant::now();
        let (_, done) = a.bottleneck("x", "y").unwrap().reserve(t0, |_, _| ms(100));
        let (start, _) = b.bottleneck("x", "y").unwrap().reserve(t0, |_, _| ms(1));
        let off = start.max(done) - start.min(done);
        assert!(off < ms(50), "{off:?}");
        assert!(start > t0 + ms(50));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_reservations_never_overlap() {
        let g = Arc::new(Gateways::create().unwrap());
        let t0 = Instant::now();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = g.bottleneck("a", "b").unwrap();
                std::thread::spawn(move || {
                    (0..1000)
                        .map(|_| b.reserve(t0, |_, _| Duration::from_micros(10)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(Instant, Instant)> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.sort();
        // 4000 chunks of 10 µs, back to back from t0: no two share the bottleneck.
        assert_eq!(all.len(), 4000);
        assert_eq!(all[0].0, t0);
        assert!(all.windows(2).all(|w| w[0].1 == w[1].0));
        assert_eq!(all[3999].1, t0 + ms(40));
    }

    #[test]
    fn a_corrupt_table_is_survived() {
        let g = Arc::new(Gateways::create().unwrap());
        let b = g.bottleneck("a", "b").unwrap();
        let t0 = Instant::now();
        // An absurd next-free time: taken as idle, not waited for.
        g.next_free_word(b.slot).store(u64::MAX, Ordering::Release);
        assert_eq!(
            b.reserve(t0, |_, idle| if idle { ms(1) } else { ms(99) }),
            (t0, t0 + ms(1))
        );
        // Every key taken by someone else: the table is full, the link keeps its own.
        let w = g.words.words();
        for slot in 0..SLOTS {
            w[LINE * (slot + 1)].store(u64::MAX - slot as u64, Ordering::Release);
        }
        assert!(g.bottleneck("c", "d").is_none());
        // Our own slot's key overwritten: we probe on and find none free, no panic.
        assert!(g.bottleneck("a", "b").is_none());
        // A past time is an idle bottleneck.
        let c = g.clone();
        c.next_free_word(b.slot).store(0, Ordering::Release);
        assert_eq!(b.reserve(t0, |_, _| ms(2)).0, t0);
    }
}
