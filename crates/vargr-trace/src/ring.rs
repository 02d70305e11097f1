//! A bounded ring of records with one writer and any number of readers.
//!
//! The writer (the thread that owns the ring) never waits and never allocates: it stores
//! a record's four words and bumps the head. When the ring is full the oldest records are
//! overwritten; a reader that was too slow learns how many it lost. Words are atomics with
//! relaxed stores (plain moves on x86), so a reader racing the writer reads stale or torn
//! records, never undefined behaviour; it detects and drops them by re-reading the head.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::record::Record;

pub struct Ring {
    slots: Box<[[AtomicU64; 4]]>,
    /// Records ever written.
    head: AtomicU64,
    mask: u64,
}

/// A ring as a writer in another language sees it ([`crate::foreign_writer`]): `slots`
/// points at `mask + 1` slots of four words each, `head` at the count of records ever
/// written.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ForeignRing {
    pub slots: *const AtomicU64,
    pub mask: u64,
    pub head: *const AtomicU64,
}

/// What a read returned.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Batch {
    pub records: Vec<Record>,
    /// Records written after the reader's cursor that were overwritten before it read them.
    pub lost: u64,
    /// Where the next read should start.
    pub next: u64,
}

impl Ring {
    /// A ring of at least `capacity` records (rounded up to a power of two).
    pub fn new(capacity: usize) -> Ring {
        let cap = capacity.max(2).next_power_of_two();
        Ring {
            slots: (0..cap)
                .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
                .collect(),
            head: AtomicU64::new(0),
            mask: cap as u64 - 1,
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Records ever written.
    pub fn written(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Appends a record. Only the owning thread may call this.
    #[inline(always)]
    pub fn push(&self, r: &Record) {
        let h = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[(h & self.mask) as usize];
        for (s, w) in slot.iter().zip(r.to_words()) {
            s.store(w, Ordering::Relaxed);
        }
        self.head.store(h + 1, Ordering::Release);
    }

    /// The ring's words for a writer in another language (see [`crate::foreign_writer`]).
    pub fn foreign(&self) -> ForeignRing {
        ForeignRing {
            slots: self.slots.as_ptr().cast(),
            mask: self.mask,
            head: &self.head,
        }
    }

    /// Reads the records written since `cursor` (at most a ring's worth).
    pub fn read_from(&self, cursor: u64) -> Batch {
        let cap = self.slots.len() as u64;
        let h1 = self.head.load(Ordering::Acquire);
        let from = cursor.max(h1.saturating_sub(cap));
        let mut records = Vec::with_capacity((h1 - from.min(h1)) as usize);
        for i in from..h1 {
            let s = &self.slots[(i & self.mask) as usize];
            records.push(Record::from_words(std::array::from_fn(|k| {
                s[k].load(Ordering::Relaxed)
            })));
        }
        std::sync::atomic::fence(Ordering::Acquire);
        // Whatever the writer may have overwritten while we copied is dropped, including
        // the slot it may be writing right now (index h2 reuses slot h2 - cap).
        let h2 = self.head.load(Ordering::Acquire);
        let safe_from = (h2 + 1).saturating_sub(cap);
        let skip = safe_from.saturating_sub(from).min(records.len() as u64);
        records.drain(..skip as usize);
        let first_kept = from + skip;
        Batch {
            records,
            lost: first_kept.saturating_sub(cursor),
            next: h1.max(first_kept),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u64) -> Record {
        Record {
            start: i,
            end: i + 1,
            seq: i as u32,
            bytes: 0,
            collector: 0,
            op: 1,
            status: 0,
            peer: 0,
        }
    }

    #[test]
    fn oldest_records_go_and_are_counted() {
        let r = Ring::new(8);
        for i in 0..5 {
            r.push(&rec(i));
        }
        let b = r.read_from(0);
        assert_eq!(b.records.len(), 5);
        assert_eq!((b.lost, b.next), (0, 5));
        for i in 5..20 {
            r.push(&rec(i));
        }
        let b = r.read_from(5);
        // Indices 5..12 were overwritten; 12 is dropped too, as the slot a writer could
        // be filling right now.
        assert_eq!(b.lost, 8);
        assert_eq!(b.records.first().unwrap().seq, 13);
        assert_eq!(b.records.len(), 7);
        assert_eq!(b.next, 20);
        assert!(r.read_from(20).records.is_empty());
    }

    #[test]
    fn a_foreign_writer_storing_words_as_push_does_is_read_alike() {
        let r = Ring::new(8);
        let f = r.foreign();
        for i in 0..12 {
            // SAFETY: `f` is this ring's, which outlives the loop; one writer, as
            // foreign_writer prescribes.
            unsafe {
                let h = (*f.head).load(Ordering::Relaxed);
                let slot = f.slots.add(((h & f.mask) * 4) as usize);
                for (k, w) in rec(i).to_words().into_iter().enumerate() {
                    (*slot.add(k)).store(w, Ordering::Relaxed);
                }
                (*f.head).store(h + 1, Ordering::Release);
            }
        }
        let b = r.read_from(0);
        // As after pushes: 0..4 overwritten, 4 dropped as the slot a writer could be
        // filling.
        assert_eq!(b.records, (5..12).map(rec).collect::<Vec<_>>());
        assert_eq!((b.lost, b.next), (5, 12));
    }

    #[test]
    fn a_reader_racing_the_writer_sees_only_whole_records_in_order() {
        let r = std::sync::Arc::new(Ring::new(64));
        let w = r.clone();
        let writer = std::thread::spawn(move || {
            for i in 0..200_000u64 {
                w.push(&rec(i));
            }
        });
        let mut cursor = 0;
        let mut seen = 0u64;
        let mut lost = 0u64;
        while cursor < 200_000 {
            let b = r.read_from(cursor);
            for (k, x) in b.records.iter().enumerate() {
                // Every kept record is the one written at its index, whole.
                let i = cursor + b.lost + k as u64;
                assert_eq!(
                    (x.start, x.end, u64::from(x.seq)),
                    (i, i + 1, i & 0xffff_ffff)
                );
            }
            seen += b.records.len() as u64;
            lost += b.lost;
            cursor = b.next;
        }
        writer.join().unwrap();
        assert_eq!(seen + lost, 200_000);
    }
}
