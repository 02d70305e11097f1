//! One single-producer, single-consumer byte ring, and the message framing over it.
//!
//! A ring carries messages of any size from one process to another: each message goes
//! as one or more chunks, each a 32-byte record header and its payload padded to 8
//! bytes, so a message larger than the ring streams through it while the consumer
//! drains. Positions are byte counters that only grow (`tail` written by the producer,
//! `head` by the consumer); the offset in the ring is the position modulo its size. A
//! record never wraps: where fewer than 32 bytes remain before the end both sides skip to
//! the start, and where a record header fits but no payload does the producer writes a
//! pad record.
//!
//! The other side is another process that may be broken or hostile, so each side keeps
//! its own position privately and only publishes it; what it reads from the other
//! (their position, record headers) is checked before use, and a violation is a
//! [`RingError`], never an out-of-bounds access. Payloads are copied out before they are
//! looked at, so a peer rewriting them meanwhile changes only what it sent.
//!
//! The producer side ([`Outgoing`]) keeps what does not fit in a queue: a send never
//! waits for the receiver (the collective algorithms send before they receive, so a
//! blocking send would deadlock two processes sending to each other).
//!
//! Single copy: where the kernel lets the receiver read the sender's memory
//! (`process_vm_readv`), a message of [`SINGLE_COPY_MIN`] bytes or more goes as one
//! record naming the sender's buffer; the receiver copies it straight from there and
//! counts the reads it finished, and the sender keeps each buffer until that count
//! passes it. A peer naming memory it does not have gets a failed read, an error.

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};

use crate::segment::Segment;

/// Bytes of a record header.
pub const RECORD_HEADER: usize = 32;
const FIRST: u32 = 1;
const MORE: u32 = 2;
const PAD: u32 = 3;
const SINGLE: u32 = 4;
/// Bytes of a single-copy record's payload: pid, pad, address, length, sequence.
const SINGLE_BODY: usize = 32;
/// Messages this large go by single copy where it works. Below it, single copy made the
/// 16-process 1 MiB ring allreduce slower (`vargr bench coll`; the figures are in
/// docs/benchmarks.md): the system call pins the sender's pages each time, and the
/// sender's buffer lives on until read.
pub const SINGLE_COPY_MIN: usize = 512 << 10;

/// Copies `dst.len()` bytes at `addr` in process `pid` into `dst`.
pub(crate) fn read_remote(pid: u32, addr: u64, dst: &mut [u8]) -> std::io::Result<()> {
    // SAFETY: a slice is valid for writes of its length.
    unsafe { read_remote_raw(pid, addr, dst.as_mut_ptr(), dst.len()) }
}

/// # Safety
/// `dst` must be valid for writes of `len` bytes (it need not be initialised).
unsafe fn read_remote_raw(pid: u32, addr: u64, dst: *mut u8, len: usize) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        let local = libc::iovec {
            // SAFETY: within the caller's buffer.
            iov_base: unsafe { dst.add(done) }.cast(),
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `local` is writable memory of the stated length (the caller's
        // promise); the kernel checks `remote` against the other process's mappings
        // (EFAULT if it lies).
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => return Err(std::io::Error::last_os_error()),
        }
    }
    Ok(())
}

/// Who a message is for and from, and its tag (the mesh's addressing; opaque here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgHead {
    pub dest: u32,
    pub src: u32,
    pub tag: u64,
}

/// What a peer did wrong in a ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RingError(pub String);

fn corrupt(why: impl Into<String>) -> RingError {
    RingError(why.into())
}

/// One ring in a mapped segment.
pub struct Ring<'a> {
    base: *mut u8,
    cap: usize,
    _seg: &'a Segment,
}

impl<'a> Ring<'a> {
    /// # Safety
    /// `base` must point at a ring header followed by `cap` data bytes, all inside the
    /// mapping of `seg`.
    pub(crate) unsafe fn new(base: *mut u8, cap: usize, seg: &'a Segment) -> Ring<'a> {
        Ring {
            base,
            cap,
            _seg: seg,
        }
    }

    /// Data bytes of the ring.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: an aligned word in this ring's header (see `new`).
        unsafe { &*(self.base as *const AtomicU64) }
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: as `tail`.
        unsafe { &*(self.base.add(64) as *const AtomicU64) }
    }

    /// Set by a producer with queued data that did not fit; the consumer that frees
    /// space clears it and wakes the producer.
    pub fn producer_waiting(&self) -> &AtomicU32 {
        // SAFETY: as `tail`.
        unsafe { &*(self.base.add(128) as *const AtomicU32) }
    }

    /// Single-copy reads the consumer finished (the producer frees buffers below it).
    fn single_done(&self) -> &AtomicU64 {
        // SAFETY: as `tail`.
        unsafe { &*(self.base.add(136) as *const AtomicU64) }
    }

    /// Copies `src` to ring offset `off` (which the caller keeps inside the data area).
    fn write(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.cap);
        // SAFETY: in bounds by the assertion; the consumer does not read these bytes
        // until the tail published after this write covers them.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.base.add(crate::segment::RING_HEADER + off),
                src.len(),
            )
        }
    }

    /// Copies ring offset `off` into `dst`.
    fn read(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.cap);
        // SAFETY: in bounds by the assertion. The producer may (if it misbehaves) write
        // these bytes meanwhile; the copy then holds some mix of its writes, which is
        // only ever validated as data, never trusted.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.add(crate::segment::RING_HEADER + off),
                dst.as_mut_ptr(),
                dst.len(),
            )
        }
    }
}

fn pad8(n: usize) -> usize {
    (n + 7) & !7
}

/// A message on its way into a ring: the producer's side of one ring.
#[derive(Default)]
pub struct Outgoing {
    queue: VecDeque<(MsgHead, Bytes)>,
    /// Bytes of the front message already in the ring.
    sent: usize,
    /// The producer's position (authoritative; the ring's copy is for the consumer).
    tail: u64,
    /// Whether the consumer can read our memory (large messages go by single copy).
    single_copy: bool,
    /// Buffers the consumer reads by single copy, by sequence number, kept until read.
    pinned: VecDeque<(u64, Bytes)>,
    single_sent: u64,
}

/// What a push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pushed {
    /// Records written (the consumer has something new).
    pub records: usize,
    /// Whole messages that left the queue.
    pub messages: usize,
    /// Of those, messages sent by single copy.
    pub single: usize,
}

impl Outgoing {
    /// Queues a message behind those already queued.
    pub fn enqueue(&mut self, head: MsgHead, data: Bytes) {
        self.queue.push_back((head, data));
    }

    /// Whether everything queued is in the ring.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Sends large messages by single copy from now on (the consumer can read our
    /// memory: see `Segment::single_copy_works`).
    pub fn enable_single_copy(&mut self) {
        self.single_copy = true;
    }

    /// Buffers still waiting for the consumer to read them by single copy.
    pub fn pinned(&self) -> usize {
        self.pinned.len()
    }

    /// Bytes still queued.
    pub fn backlog(&self) -> usize {
        self.queue.iter().map(|(_, b)| b.len()).sum::<usize>() - self.sent
    }

    /// Writes as much of the queue into `ring` as fits, and publishes it.
    pub fn push(&mut self, ring: &Ring<'_>) -> Result<Pushed, RingError> {
        let cap = ring.cap as u64;
        let head = ring.head().load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > cap {
            return Err(corrupt(format!(
                "its consumer position {head} is not within {cap} bytes behind our {}",
                self.tail
            )));
        }
        let mut free = (cap - used) as usize;
        let mut done = Pushed::default();
        let mut tail = self.tail;
        // Buffers the consumer has read may go.
        let read = ring.single_done().load(Ordering::Acquire);
        while self.pinned.front().is_some_and(|(seq, _)| *seq < read) {
            self.pinned.pop_front();
        }
        while let Some((h, data)) = self.queue.front() {
            let off = (tail % cap) as usize;
            let contiguous = ring.cap - off;
            if contiguous < RECORD_HEADER {
                // Both sides skip a tail too short for a header.
                if free < contiguous {
                    break;
                }
                tail += contiguous as u64;
                free -= contiguous;
                continue;
            }
            let room = contiguous.min(free);
            if room < RECORD_HEADER {
                break;
            }
            if self.single_copy && self.sent == 0 && data.len() >= SINGLE_COPY_MIN {
                if room < RECORD_HEADER + SINGLE_BODY {
                    if room == contiguous {
                        self.write_header(ring, off, PAD, contiguous - RECORD_HEADER, h, 0);
                        tail += contiguous as u64;
                        free -= contiguous;
                        done.records += 1;
                        continue;
                    }
                    break;
                }
                let seq = self.single_sent;
                let mut body = [0u8; SINGLE_BODY];
                body[0..4].copy_from_slice(&std::process::id().to_le_bytes());
                body[8..16].copy_from_slice(&(data.as_ptr() as u64).to_le_bytes());
                body[16..24].copy_from_slice(&(data.len() as u64).to_le_bytes());
                body[24..32].copy_from_slice(&seq.to_le_bytes());
                self.write_header(ring, off, SINGLE, SINGLE_BODY, h, data.len());
                ring.write(off + RECORD_HEADER, &body);
                tail += (RECORD_HEADER + SINGLE_BODY) as u64;
                free -= RECORD_HEADER + SINGLE_BODY;
                done.records += 1;
                done.messages += 1;
                done.single += 1;
                self.single_sent += 1;
                let (_, data) = self.queue.pop_front().expect("front");
                self.pinned.push_back((seq, data));
                continue;
            }
            let left = data.len() - self.sent;
            let fits = (room - RECORD_HEADER) & !7;
            let len = left.min(fits);
            let first = self.sent == 0;
            if len == 0 && left > 0 {
                if room == contiguous {
                    // Only a header fits before the end: pad to the end.
                    self.write_header(ring, off, PAD, 0, h, 0);
                    tail += contiguous as u64;
                    free -= contiguous;
                    done.records += 1;
                    continue;
                }
                break;
            }
            let kind = if first { FIRST } else { MORE };
            self.write_header(ring, off, kind, len, h, data.len());
            ring.write(off + RECORD_HEADER, &data[self.sent..self.sent + len]);
            let step = RECORD_HEADER + pad8(len);
            tail += step as u64;
            free -= step;
            done.records += 1;
            self.sent += len;
            if self.sent == data.len() {
                self.queue.pop_front();
                self.sent = 0;
                done.messages += 1;
            }
        }
        if done.records > 0 {
            self.tail = tail;
            ring.tail().store(tail, Ordering::Release);
        }
        Ok(done)
    }

    fn write_header(
        &self,
        ring: &Ring<'_>,
        off: usize,
        kind: u32,
        len: usize,
        h: &MsgHead,
        total: usize,
    ) {
        let mut r = [0u8; RECORD_HEADER];
        r[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        r[4..8].copy_from_slice(&kind.to_le_bytes());
        r[8..12].copy_from_slice(&h.dest.to_le_bytes());
        r[12..16].copy_from_slice(&h.src.to_le_bytes());
        r[16..24].copy_from_slice(&h.tag.to_le_bytes());
        r[24..32].copy_from_slice(&(total as u64).to_le_bytes());
        ring.write(off, &r);
    }

    /// Before blocking with a backlog: asks the consumer to wake us when it frees space,
    /// then pushes again (space freed before the flag was seen is not missed). Returns
    /// what that push did.
    pub fn ask_for_space(&mut self, ring: &Ring<'_>) -> Result<Pushed, RingError> {
        ring.producer_waiting().store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.push(ring)
    }
}

/// The consumer's side of one ring: its position and the message being reassembled.
#[derive(Default)]
pub struct Incoming {
    head: u64,
    partial: Option<Partial>,
    /// Single-copy reads done (published for the producer to free its buffers).
    single_read: u64,
}

struct Partial {
    head: MsgHead,
    total: usize,
    buf: BytesMut,
}

/// What a drain did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Drained {
    /// Records consumed (space freed).
    pub records: usize,
    /// Whole messages delivered.
    pub messages: usize,
    /// The producer had asked to be woken when space frees (the flag is now clear).
    pub wake_producer: bool,
}

impl Incoming {
    /// Reads every record available in `ring`, handing each complete message to
    /// `deliver`; messages claiming more than `max_message` bytes are refused.
    pub fn drain(
        &mut self,
        ring: &Ring<'_>,
        max_message: usize,
        mut deliver: impl FnMut(MsgHead, Bytes),
    ) -> Result<Drained, RingError> {
        let cap = ring.cap as u64;
        let tail = ring.tail().load(Ordering::Acquire);
        let avail = tail.wrapping_sub(self.head);
        if avail > cap {
            return Err(corrupt(format!(
                "its producer position {tail} is not within {cap} bytes ahead of our {}",
                self.head
            )));
        }
        let mut done = Drained::default();
        let mut head = self.head;
        let mut rec = [0u8; RECORD_HEADER];
        while head != tail {
            let left = tail.wrapping_sub(head) as usize;
            let off = (head % cap) as usize;
            let contiguous = ring.cap - off;
            if contiguous < RECORD_HEADER {
                if left < contiguous {
                    return Err(corrupt("its last record stops inside the ring's end"));
                }
                head += contiguous as u64;
                continue;
            }
            if left < RECORD_HEADER {
                return Err(corrupt(format!(
                    "{left} bytes published, less than a record"
                )));
            }
            ring.read(off, &mut rec);
            let word = |o: usize| u32::from_le_bytes(rec[o..o + 4].try_into().expect("4"));
            let len = word(0) as usize;
            let kind = word(4);
            let h = MsgHead {
                dest: word(8),
                src: word(12),
                tag: u64::from_le_bytes(rec[16..24].try_into().expect("8")),
            };
            let total = u64::from_le_bytes(rec[24..32].try_into().expect("8"));
            let step = RECORD_HEADER
                .checked_add(pad8(len))
                .filter(|&s| s <= contiguous && s <= left)
                .ok_or_else(|| {
                    corrupt(format!(
                        "a record of {len} bytes overruns what was published or the ring's end"
                    ))
                })?;
            match kind {
                PAD => {
                    if step != contiguous {
                        return Err(corrupt("a pad record that does not reach the ring's end"));
                    }
                }
                SINGLE => {
                    if self.partial.is_some() || len != SINGLE_BODY {
                        return Err(corrupt("a misplaced or malformed single-copy record"));
                    }
                    let mut body = [0u8; SINGLE_BODY];
                    ring.read(off + RECORD_HEADER, &mut body);
                    let word = |o: usize| u64::from_le_bytes(body[o..o + 8].try_into().expect("8"));
                    let pid = u32::from_le_bytes(body[0..4].try_into().expect("4"));
                    let (addr, n, seq) = (word(8), word(16), word(24));
                    if n != total || seq != self.single_read {
                        return Err(corrupt(format!(
                            "single-copy record {seq} of {n} bytes (expected record {} of {total})",
                            self.single_read
                        )));
                    }
                    let n = usize::try_from(n)
                        .ok()
                        .filter(|&t| t <= max_message)
                        .ok_or_else(|| {
                            corrupt(format!(
                                "a message of {total} bytes (more than the {max_message}-byte limit)"
                            ))
                        })?;
                    let mut buf = BytesMut::with_capacity(n);
                    // SAFETY: the buffer has capacity for `n` bytes; they are exposed by
                    // `set_len` only once the read filled all of them.
                    unsafe { read_remote_raw(pid, addr, buf.as_mut_ptr(), n) }.map_err(|e| {
                        corrupt(format!(
                            "a single-copy read of {n} bytes from process {pid}: {e}"
                        ))
                    })?;
                    // SAFETY: just filled.
                    unsafe { buf.set_len(n) };
                    self.single_read += 1;
                    ring.single_done()
                        .store(self.single_read, Ordering::Release);
                    self.partial = Some(Partial {
                        head: h,
                        total: n,
                        buf,
                    });
                }
                FIRST => {
                    if self.partial.is_some() {
                        return Err(corrupt("a message began inside another"));
                    }
                    let total = usize::try_from(total)
                        .ok()
                        .filter(|&t| t <= max_message)
                        .ok_or_else(|| {
                            corrupt(format!(
                                "a message of {total} bytes (more than the {max_message}-byte limit)"
                            ))
                        })?;
                    if len > total {
                        return Err(corrupt(format!(
                            "a chunk of {len} bytes in a message of {total}"
                        )));
                    }
                    // Grow as chunks come rather than trust the claimed total at once.
                    let mut buf = BytesMut::with_capacity(total.min(1 << 24));
                    copy_out(ring, off + RECORD_HEADER, len, &mut buf);
                    self.partial = Some(Partial {
                        head: h,
                        total,
                        buf,
                    });
                }
                MORE => {
                    let p = self
                        .partial
                        .as_mut()
                        .ok_or_else(|| corrupt("a continuation without a message"))?;
                    if p.head != h || p.total as u64 != total {
                        return Err(corrupt("a continuation of another message"));
                    }
                    if len > p.total - p.buf.len() {
                        return Err(corrupt(format!(
                            "{} bytes in a message of {}",
                            p.buf.len() + len,
                            p.total
                        )));
                    }
                    copy_out(ring, off + RECORD_HEADER, len, &mut p.buf);
                }
                k => return Err(corrupt(format!("a record of unknown kind {k}"))),
            }
            head += step as u64;
            done.records += 1;
            if self
                .partial
                .as_ref()
                .is_some_and(|p| p.buf.len() == p.total)
            {
                let p = self.partial.take().expect("checked");
                deliver(p.head, p.buf.freeze());
                done.messages += 1;
            }
        }
        if done.records > 0 {
            self.head = head;
            ring.head().store(head, Ordering::Release);
            fence(Ordering::SeqCst);
            let w = ring.producer_waiting();
            done.wake_producer = w.load(Ordering::SeqCst) != 0 && w.swap(0, Ordering::SeqCst) != 0;
        }
        Ok(done)
    }

    /// Whether a message is half received (its producer owes the rest).
    pub fn in_message(&self) -> bool {
        self.partial.is_some()
    }
}

fn copy_out(ring: &Ring<'_>, off: usize, len: usize, buf: &mut BytesMut) {
    assert!(off + len <= ring.cap);
    buf.reserve(len);
    let at = buf.len();
    // SAFETY: `reserve` made room for `len` more bytes after `at`; the copy fills them
    // from the ring (in bounds by the assertion) before `set_len` exposes them. Copying
    // straight into the spare capacity skips zeroing a megabyte per large message.
    unsafe {
        std::ptr::copy_nonoverlapping(
            ring.base.add(crate::segment::RING_HEADER + off),
            buf.as_mut_ptr().add(at),
            len,
        );
        buf.set_len(at + len);
    }
}
