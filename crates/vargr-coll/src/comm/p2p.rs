//! Point-to-point messages on a communicator: blocking and non-blocking, from a named
//! source or any, with a named tag or any, and probes.
//!
//! MPI matches a message against the receives posted on a communicator in the order
//! they were posted, and keeps messages of one sender in order. Non-blocking receives
//! and wildcards need that order to be kept somewhere: here. Every receive of a
//! communicator is a pattern in its posted list; completing them asks the transport for
//! the oldest message that the earliest pattern able to take one accepts
//! ([`Transport::recv_match`]). A probed message is taken from the transport and kept
//! aside until a receive takes it, ahead of anything newer from its sender.
//!
//! Sends are eager (the transport owns the data once `send` returns), so a non-blocking
//! send is complete at once. A blocking receive with nothing posted and nothing probed
//! goes straight to the transport, as it always did.

use std::collections::{HashMap, VecDeque};

use bytemuck::Pod;
use bytes::Bytes;

use super::{bytes_of, bytes_of_mut, Comm};
use crate::elem::ElemKind;
use crate::error::{CollError, Result};
use crate::transport::{Match, Matched, Tag};

/// What a completed receive or a probe reports (MPI's `Status`): the sender's rank in
/// the communicator, the user tag and the message's length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub source: usize,
    pub tag: u64,
    pub len: usize,
}

/// A message a receive took.
#[derive(Debug, Clone)]
pub struct Received {
    pub source: usize,
    pub tag: u64,
    pub data: Bytes,
}

impl Received {
    pub fn status(&self) -> Status {
        Status {
            source: self.source,
            tag: self.tag,
            len: self.data.len(),
        }
    }
}

/// A non-blocking operation of one communicator, completed by [`Comm::wait`] or
/// [`Comm::test`] on that communicator.
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a posted receive holds its message until it is waited for"]
pub struct Request {
    ctx: u32,
    /// 0: a send (complete when made).
    id: u64,
}

impl Request {
    /// Whether this is a send (complete when made).
    pub fn is_send(&self) -> bool {
        self.id == 0
    }
}

#[derive(Default)]
pub(super) struct P2p {
    next: u64,
    /// Receives not yet matched, in the order they were posted.
    posted: Vec<(u64, Match)>,
    /// Probed messages no receive has taken yet, oldest first.
    probed: VecDeque<Matched>,
    /// Receives matched but not yet waited for.
    done: HashMap<u64, Matched>,
}

impl Comm {
    fn p2p_check(&self, what: &'static str, peer: usize, tag: u64) -> Result<u64> {
        self.check_peer(what, peer)?;
        self.check_tag(tag)?;
        Ok(Tag::user(self.ctx, tag))
    }

    fn check_peer(&self, what: &'static str, peer: usize) -> Result<()> {
        if peer >= self.size() {
            return Err(CollError::BadRank {
                what,
                rank: peer,
                size: self.size(),
                ctx: self.ctx,
            });
        }
        Ok(())
    }

    fn check_tag(&self, tag: u64) -> Result<()> {
        if tag > Tag::USER_MAX {
            return Err(CollError::BadTag {
                tag,
                max: Tag::USER_MAX,
            });
        }
        Ok(())
    }

    /// The transport pattern of a receive from `src` (any if `None`) with `tag` (any if
    /// `None`).
    fn pattern(&self, src: Option<usize>, tag: Option<u64>) -> Result<Match> {
        if let Some(s) = src {
            self.check_peer("source", s)?;
        }
        if let Some(t) = tag {
            self.check_tag(t)?;
        }
        Ok(Tag::user_match(self.ctx, src.map(|s| self.ranks[s]), tag))
    }

    /// Sends `data` to communicator rank `dest` with a user tag (eager: returns at once).
    pub fn send<T: Pod>(&self, dest: usize, tag: u64, data: &[T]) -> Result<()> {
        let bytes = Bytes::copy_from_slice(bytes_of(data));
        match crate::elem::kind_of::<T>() {
            Some(kind) => {
                let t = self.p2p_check("destination", dest, tag)?;
                self.transport.send_typed(self.ranks[dest], t, bytes, kind)
            }
            None => self.send_bytes(dest, tag, bytes),
        }
    }

    /// Like [`Comm::send`], but a link that compresses sends `data` as it is: for data
    /// known not to shrink, or whose latency matters more than its size.
    pub fn send_uncompressed<T: Pod>(&self, dest: usize, tag: u64, data: &[T]) -> Result<()> {
        let t = self.p2p_check("destination", dest, tag)?;
        let bytes = Bytes::copy_from_slice(bytes_of(data));
        self.transport.send_uncompressed(self.ranks[dest], t, bytes)
    }

    /// Sends an owned buffer without copying it.
    pub fn send_bytes(&self, dest: usize, tag: u64, data: Bytes) -> Result<()> {
        let t = self.p2p_check("destination", dest, tag)?;
        self.transport.send(self.ranks[dest], t, data)
    }

    /// Sends an owned buffer of `kind` elements without copying it: a link that
    /// compresses chooses its codec for that element type.
    pub fn send_bytes_typed(
        &self,
        dest: usize,
        tag: u64,
        data: Bytes,
        kind: ElemKind,
    ) -> Result<()> {
        let t = self.p2p_check("destination", dest, tag)?;
        self.transport.send_typed(self.ranks[dest], t, data, kind)
    }

    /// Like [`Comm::send_bytes`], but a link that compresses sends `data` as it is.
    pub fn send_bytes_uncompressed(&self, dest: usize, tag: u64, data: Bytes) -> Result<()> {
        let t = self.p2p_check("destination", dest, tag)?;
        self.transport.send_uncompressed(self.ranks[dest], t, data)
    }

    /// Like [`Comm::send_bytes`], as a request (complete at once: sends are eager).
    pub fn isend_bytes(&self, dest: usize, tag: u64, data: Bytes) -> Result<Request> {
        self.send_bytes(dest, tag, data)?;
        Ok(Request {
            ctx: self.ctx,
            id: 0,
        })
    }

    /// Receives the next message from `src` with `tag`.
    pub fn recv_bytes(&self, src: usize, tag: u64) -> Result<Bytes> {
        let t = self.p2p_check("source", src, tag)?;
        {
            let p = self.p2p.borrow();
            if p.posted.is_empty() && p.probed.is_empty() {
                drop(p);
                return self.transport.recv(self.ranks[src], t);
            }
        }
        Ok(self.recv_any(Some(src), Some(tag))?.data)
    }

    /// Receives the next message from `src` (any source if `None`) with `tag` (any tag if
    /// `None`), as MPI's `MPI_ANY_SOURCE` and `MPI_ANY_TAG` do.
    pub fn recv_any(&self, src: Option<usize>, tag: Option<u64>) -> Result<Received> {
        let req = self.irecv(src, tag)?;
        Ok(self.wait(req)?.expect("a receive request yields a message"))
    }

    /// Posts a receive from `src` (any if `None`) with `tag` (any if `None`); the message
    /// it matches is the one the next blocking receive with the same pattern would have
    /// got.
    pub fn irecv(&self, src: Option<usize>, tag: Option<u64>) -> Result<Request> {
        let pat = self.pattern(src, tag)?;
        let mut p = self.p2p.borrow_mut();
        p.next += 1;
        let id = p.next;
        p.posted.push((id, pat));
        Ok(Request { ctx: self.ctx, id })
    }

    fn check_request(&self, req: &Request) -> Result<()> {
        if req.ctx != self.ctx {
            return Err(CollError::BadRequest {
                rank: self.me,
                ctx: self.ctx,
                reason: format!("the request belongs to communicator context {}", req.ctx),
            });
        }
        let p = self.p2p.borrow();
        if req.id != 0 && !p.done.contains_key(&req.id) && !p.posted.iter().any(|x| x.0 == req.id) {
            return Err(CollError::BadRequest {
                rank: self.me,
                ctx: self.ctx,
                reason: "the request was already completed or cancelled".into(),
            });
        }
        Ok(())
    }

    /// Matches one posted receive, if a message for one is here (or, with `wait`, once
    /// one arrives). Returns whether one was matched.
    fn progress(&self, wait: bool) -> Result<bool> {
        let mut p = self.p2p.borrow_mut();
        let p = &mut *p;
        if p.posted.is_empty() {
            return Ok(false);
        }
        // A probed message is older than anything its sender has in the transport.
        for k in 0..p.posted.len() {
            let pat = p.posted[k].1;
            if let Some(i) = p.probed.iter().position(|m| pat.accepts(m.src, m.tag)) {
                let m = p.probed.remove(i).expect("position is in range");
                let (id, _) = p.posted.remove(k);
                p.done.insert(id, m);
                return Ok(true);
            }
        }
        let pats: Vec<Match> = p.posted.iter().map(|x| x.1).collect();
        match self.transport.recv_match(&pats, wait)? {
            Some(m) => {
                let (id, _) = p.posted.remove(m.pattern);
                p.done.insert(id, m);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn received(&self, m: Matched) -> Received {
        let source = if self.ranks.get(m.src) == Some(&m.src) {
            m.src
        } else {
            self.ranks
                .iter()
                .position(|&r| r == m.src)
                .expect("only members send with this communicator's context")
        };
        Received {
            source,
            tag: m.tag & Tag::USER_MAX,
            data: m.data,
        }
    }

    fn take_done(&self, req: &Request) -> Option<Received> {
        let m = self.p2p.borrow_mut().done.remove(&req.id)?;
        Some(self.received(m))
    }

    /// Waits for `req` to complete: the message for a receive, `None` for a send.
    pub fn wait(&self, req: Request) -> Result<Option<Received>> {
        self.check_request(&req)?;
        if req.is_send() {
            return Ok(None);
        }
        loop {
            if let Some(r) = self.take_done(&req) {
                return Ok(Some(r));
            }
            self.progress(true)?;
        }
    }

    /// Completes `req` if it can without waiting: `Ok(None)` if it cannot yet (the request
    /// stays valid), the message for a receive, an empty one for a send.
    pub fn test(&self, req: &Request) -> Result<Option<Received>> {
        self.check_request(req)?;
        if req.is_send() {
            return Ok(Some(Received {
                source: self.me,
                tag: 0,
                data: Bytes::new(),
            }));
        }
        while !self.is_done(req) && self.progress(false)? {}
        Ok(self.take_done(req))
    }

    fn is_done(&self, req: &Request) -> bool {
        self.p2p.borrow().done.contains_key(&req.id)
    }

    /// Waits until one of `reqs` completes; returns its index and its message (`None` for
    /// a send). The request at that index is spent; the others stay valid.
    pub fn wait_any(&self, reqs: &[Request]) -> Result<(usize, Option<Received>)> {
        if reqs.is_empty() {
            return Err(CollError::BadRequest {
                rank: self.me,
                ctx: self.ctx,
                reason: "wait_any of no requests".into(),
            });
        }
        for r in reqs {
            self.check_request(r)?;
        }
        if let Some(i) = reqs.iter().position(Request::is_send) {
            return Ok((i, None));
        }
        loop {
            for (i, r) in reqs.iter().enumerate() {
                if let Some(m) = self.take_done(r) {
                    return Ok((i, Some(m)));
                }
            }
            self.progress(true)?;
        }
    }

    /// Waits for every request, in order.
    pub fn wait_all(&self, reqs: Vec<Request>) -> Result<Vec<Option<Received>>> {
        reqs.into_iter().map(|r| self.wait(r)).collect()
    }

    /// Withdraws a posted receive that has not matched a message; returns whether it was
    /// withdrawn (false: it had matched, and its message is dropped with it).
    pub fn cancel(&self, req: Request) -> Result<bool> {
        self.check_request(&req)?;
        let mut p = self.p2p.borrow_mut();
        if let Some(k) = p.posted.iter().position(|x| x.0 == req.id) {
            p.posted.remove(k);
            return Ok(true);
        }
        p.done.remove(&req.id);
        Ok(false)
    }

    /// Whether a message from `src` with `tag` (either any if `None`) is here that a
    /// receive posted now would get; its status if so. The message stays for a receive.
    pub fn iprobe(&self, src: Option<usize>, tag: Option<u64>) -> Result<Option<Status>> {
        self.probe_with(src, tag, false)
    }

    /// Waits for a message that a receive from `src` with `tag` would get and returns its
    /// status; the message stays for a receive.
    pub fn probe(&self, src: Option<usize>, tag: Option<u64>) -> Result<Status> {
        Ok(self
            .probe_with(src, tag, true)?
            .expect("a blocking probe returns a status"))
    }

    fn probe_with(
        &self,
        src: Option<usize>,
        tag: Option<u64>,
        wait: bool,
    ) -> Result<Option<Status>> {
        let pat = self.pattern(src, tag)?;
        // Messages that posted receives take are not there to be probed.
        while self.progress(false)? {}
        loop {
            let status = {
                let p = self.p2p.borrow();
                p.probed.iter().find(|m| pat.accepts(m.src, m.tag)).cloned()
            };
            if let Some(m) = status {
                return Ok(Some(self.received(m).status()));
            }
            let mut pats: Vec<Match> = self.p2p.borrow().posted.iter().map(|x| x.1).collect();
            let mine = pats.len();
            pats.push(pat);
            let Some(m) = self.transport.recv_match(&pats, wait)? else {
                return Ok(None);
            };
            let mut p = self.p2p.borrow_mut();
            if m.pattern == mine {
                p.probed.push_back(m);
            } else {
                let (id, _) = p.posted.remove(m.pattern);
                p.done.insert(id, m);
            }
        }
    }

    /// Receives into `buf`; returns the number of elements received, which may be fewer
    /// than `buf.len()` (a longer message is an error, like `MPI_ERR_TRUNCATE`).
    pub fn recv<T: Pod>(&self, src: usize, tag: u64, buf: &mut [T]) -> Result<usize> {
        let data = self.recv_bytes(src, tag)?;
        self.unpack_into(src, tag, &data, buf)
    }

    /// Copies a received message into `buf`; the number of elements, or a length error
    /// naming the message.
    pub fn unpack_into<T: Pod>(
        &self,
        src: usize,
        tag: u64,
        data: &[u8],
        buf: &mut [T],
    ) -> Result<usize> {
        let dst = bytes_of_mut(buf);
        let sz = std::mem::size_of::<T>().max(1);
        if data.len() > dst.len() || data.len() % sz != 0 {
            return Err(CollError::MessageLength {
                rank: self.me,
                src,
                tag,
                expected: dst.len(),
                got: data.len(),
            });
        }
        dst[..data.len()].copy_from_slice(data);
        Ok(data.len() / sz)
    }

    /// Receives a whole message as a vector.
    pub fn recv_vec<T: Pod>(&self, src: usize, tag: u64) -> Result<Vec<T>> {
        let data = self.recv_bytes(src, tag)?;
        let sz = std::mem::size_of::<T>().max(1);
        if data.len() % sz != 0 {
            return Err(CollError::MessageLength {
                rank: self.me,
                src,
                tag,
                expected: data.len() - data.len() % sz,
                got: data.len(),
            });
        }
        let mut v = vec![T::zeroed(); data.len() / sz];
        bytes_of_mut(&mut v).copy_from_slice(&data);
        Ok(v)
    }
}
