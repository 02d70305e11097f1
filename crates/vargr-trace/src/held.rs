//! Records a process keeps between draining its rings and writing them out (a trace file
//! at the end of an MPI program, a monitor's next pull), bounded per thread.
//!
//! Held as the chunks the rings gave, so that keeping millions of records never copies
//! them again: a growing `Vec` moves everything on each doubling, and dropping its
//! oldest records when full moves everything that stays, on every drain; here the oldest
//! go by whole chunks, or by advancing past them in the first one.

use std::collections::VecDeque;

use crate::file::ThreadTrace;
use crate::record::Record;

/// Held records of every thread, at most `cap` per thread (the newest).
#[derive(Debug)]
pub struct Held {
    threads: Vec<HeldThread>,
    cap: usize,
}

#[derive(Debug, Default)]
struct HeldThread {
    label: String,
    rank: Option<u32>,
    lost: u64,
    chunks: VecDeque<Vec<Record>>,
    /// Records of the first chunk already dropped.
    skip: usize,
    len: usize,
}

impl HeldThread {
    fn trim(&mut self, cap: usize) {
        while self.len > cap {
            let over = self.len - cap;
            let first = self.chunks.front().map_or(0, |c| c.len() - self.skip);
            if first <= over {
                self.chunks.pop_front();
                self.skip = 0;
                self.len -= first;
                self.lost += first as u64;
            } else {
                self.skip += over;
                self.len -= over;
                self.lost += over as u64;
            }
        }
    }
}

impl Held {
    pub fn new(cap: usize) -> Held {
        Held {
            threads: Vec::new(),
            cap,
        }
    }

    /// Adds what [`crate::Tracer::read`] returned (one entry per thread, in registration
    /// order); beyond the cap the oldest records go and count as lost.
    pub fn add(&mut self, threads: Vec<ThreadTrace>) {
        for (i, t) in threads.into_iter().enumerate() {
            if self.threads.len() <= i {
                self.threads.push(HeldThread::default());
            }
            let h = &mut self.threads[i];
            h.label = t.label;
            h.rank = t.rank;
            h.lost += t.lost;
            if !t.records.is_empty() {
                h.len += t.records.len();
                h.chunks.push_back(t.records);
            }
            h.trim(self.cap);
        }
    }

    /// Records held, over all threads.
    pub fn len(&self) -> usize {
        self.threads.iter().map(|t| t.len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Everything held, as threads of a trace file; leaves nothing held.
    pub fn take(&mut self) -> Vec<ThreadTrace> {
        self.threads
            .iter_mut()
            .map(|h| {
                let mut records = Vec::with_capacity(h.len);
                let skip = std::mem::take(&mut h.skip);
                for (k, c) in h.chunks.drain(..).enumerate() {
                    records.extend_from_slice(if k == 0 { &c[skip..] } else { &c[..] });
                }
                h.len = 0;
                ThreadTrace {
                    label: h.label.clone(),
                    rank: h.rank,
                    lost: std::mem::take(&mut h.lost),
                    records,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u32) -> Record {
        Record {
            start: u64::from(i),
            end: u64::from(i) + 1,
            seq: i,
            bytes: 0,
            collector: 0,
            op: 1,
            status: 0,
            peer: 0,
        }
    }

    fn batch(from: u32, n: u32, lost: u64) -> Vec<ThreadTrace> {
        vec![ThreadTrace {
            label: "rank 0".into(),
            rank: Some(0),
            lost,
            records: (from..from + n).map(rec).collect(),
        }]
    }

    #[test]
    fn the_newest_records_stay_and_the_dropped_ones_count_as_lost() {
        let mut h = Held::new(10);
        h.add(batch(0, 4, 0));
        h.add(batch(4, 4, 2));
        assert_eq!(h.len(), 8);
        // 15 records: the first 5 go, part of a chunk included.
        h.add(batch(8, 7, 0));
        assert_eq!(h.len(), 10);
        h.add(Vec::new());
        let t = h.take();
        assert_eq!(t.len(), 1);
        let seqs: Vec<u32> = t[0].records.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (5..15).collect::<Vec<_>>());
        assert_eq!(t[0].lost, 2 + 5);
        assert_eq!(t[0].label, "rank 0");
        // Taken: empty, and counting starts again.
        assert!(h.is_empty());
        h.add(batch(15, 30, 0));
        let t = h.take();
        assert_eq!(t[0].records.len(), 10);
        assert_eq!(t[0].records[0].seq, 35);
        assert_eq!(t[0].lost, 20);
    }

    #[test]
    fn threads_keep_their_places() {
        let mut h = Held::new(100);
        let two = |a: u32, b: u32| {
            vec![
                ThreadTrace {
                    label: "a".into(),
                    rank: None,
                    lost: 0,
                    records: (0..a).map(rec).collect(),
                },
                ThreadTrace {
                    label: "b".into(),
                    rank: Some(3),
                    lost: 0,
                    records: (0..b).map(rec).collect(),
                },
            ]
        };
        h.add(batch(0, 1, 0));
        h.add(two(2, 3));
        let t = h.take();
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].records.len(), t[1].records.len()), (3, 3));
        assert_eq!((t[1].label.as_str(), t[1].rank), ("b", Some(3)));
    }
}
