//! Protection of every frame after the handshake.
//!
//! The handshake ([`crate::auth`]) proves that both ends hold the network secret, but on
//! its own it would let a relay forward it and then speak for either side. So each
//! connection derives keys of its own from the handshake, one per direction, and every
//! frame after it carries a 16-byte trailer:
//! - [`Protection::Mac`]: the frame crosses in clear text; the trailer is GMAC
//!   (AES-256-GCM with nothing to encrypt and the whole frame as associated data), and
//!   frame and tag go out as one buffer (a copy costs less than more write segments);
//! - [`Protection::Encrypt`]: the payload encrypted with AES-256-GCM, the header as
//!   associated data (it stays readable: the reader needs its length).
//!
//! GCM's nonce is the frame's sequence number. The two modes have different keys (the
//! choice is part of the key derivation). AES-GCM: with AES-NI and carry-less
//! multiplication, which the machines vargr runs on have, it costs about half a BLAKE3
//! MAC and a tenth of ChaCha20-Poly1305 per small frame (docs/benchmarks.md). One MAC for
//! every frame: a BLAKE3 MAC over large frames passed through in pieces hashed faster,
//! but the adaptive codec then missed a slow real path more often (docs/benchmarks.md).
//!
//! Sequence numbers are implicit (a counter per direction), so a frame that is dropped,
//! reordered, replayed, injected or altered fails its check and ends the connection.
//!
//! [`Sealer`] works on the byte stream a link writes, which is not cut at frame
//! boundaries (a header and its payload may be queued as separate buffers, or several
//! frames as one): it follows the headers to find where each frame ends.

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use vargr_wire::{decode_frame, frame_len, Frame, WireError, HEADER_LEN};

/// Bytes of the trailer after each protected frame.
pub const TAG_LEN: usize = 16;
const KEY_LEN: usize = 32;

/// How the frames of one connection are protected after its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protection {
    /// No trailer: only for Unix-domain sockets, which live in a private directory.
    None = 0,
    /// Authenticated, in clear text.
    Mac = 1,
    /// Authenticated and encrypted.
    Encrypt = 2,
}

impl Protection {
    pub fn name(self) -> &'static str {
        match self {
            Protection::None => "none",
            Protection::Mac => "mac",
            Protection::Encrypt => "encrypt",
        }
    }

    pub(crate) fn from_u8(v: u8) -> Option<Protection> {
        match v {
            0 => Some(Protection::None),
            1 => Some(Protection::Mac),
            2 => Some(Protection::Encrypt),
            _ => None,
        }
    }
}

/// Where a connection's other end is, as far as protection cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// A Unix-domain socket: same host, guarded by the file system.
    UnixSocket,
    /// TCP over a loopback address: same host, but any local user can connect.
    Loopback,
    /// TCP to another address: the bytes may cross networks nobody here controls.
    Remote,
}

/// What a process asks of its links; the stronger wish of the two ends wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkSecurity {
    /// Unix sockets: none; TCP on loopback: MACs; TCP to anywhere else: encryption.
    #[default]
    Auto,
    /// MACs on every link, Unix sockets included.
    Mac,
    /// Encryption on every link.
    Encrypt,
}

impl LinkSecurity {
    /// The protection this end asks for on a connection that reaches `reach`.
    pub fn wish(self, reach: Reach) -> Protection {
        match (self, reach) {
            (LinkSecurity::Encrypt, _) => Protection::Encrypt,
            (LinkSecurity::Mac, _) => Protection::Mac,
            (LinkSecurity::Auto, Reach::UnixSocket) => Protection::None,
            (LinkSecurity::Auto, Reach::Loopback) => Protection::Mac,
            (LinkSecurity::Auto, Reach::Remote) => Protection::Encrypt,
        }
    }
}

impl LinkSecurity {
    pub fn name(self) -> &'static str {
        match self {
            LinkSecurity::Auto => "auto",
            LinkSecurity::Mac => "mac",
            LinkSecurity::Encrypt => "encrypt",
        }
    }
}

impl std::fmt::Display for LinkSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for LinkSecurity {
    type Err = String;
    fn from_str(s: &str) -> Result<LinkSecurity, String> {
        match s {
            "auto" => Ok(LinkSecurity::Auto),
            "mac" => Ok(LinkSecurity::Mac),
            "encrypt" => Ok(LinkSecurity::Encrypt),
            other => Err(format!(
                "link security {other:?}: expected auto, mac or encrypt"
            )),
        }
    }
}

/// The keys of one authenticated connection, as one end sees them.
#[derive(Clone)]
pub struct Session {
    protection: Protection,
    send_key: [u8; KEY_LEN],
    recv_key: [u8; KEY_LEN],
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session({})", self.protection.name())
    }
}

impl Session {
    pub(crate) fn new(
        protection: Protection,
        send_key: [u8; KEY_LEN],
        recv_key: [u8; KEY_LEN],
    ) -> Session {
        Session {
            protection,
            send_key,
            recv_key,
        }
    }

    /// A session without protection (tests, and Unix sockets under [`LinkSecurity::Auto`]).
    pub fn unprotected() -> Session {
        Session::new(Protection::None, [0; KEY_LEN], [0; KEY_LEN])
    }

    pub fn protection(&self) -> Protection {
        self.protection
    }

    /// The writing and the reading half.
    pub fn split(&self) -> (Sealer, Opener) {
        (
            Sealer::new(self.protection, &self.send_key),
            Opener::new(self.protection, &self.recv_key),
        )
    }
}

fn nonce(seq: u64) -> Nonce<U12> {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&seq.to_le_bytes());
    Nonce::from(n)
}

/// The writing half: adds a trailer after every frame of the stream it is handed.
pub struct Sealer {
    protection: Protection,
    cipher: Option<Aes256Gcm>,
    seq: u64,
    head: [u8; HEADER_LEN],
    head_len: usize,
    /// Payload bytes of the current frame still to come (once its header is complete).
    left: usize,
    /// The current frame, header and payload, as GCM needs it in one piece: in Mac mode
    /// a copy (the pieces go on as they came), in Encrypt mode encrypted in place.
    frame: BytesMut,
}

impl Sealer {
    fn new(protection: Protection, key: &[u8; KEY_LEN]) -> Sealer {
        Sealer {
            protection,
            cipher: (protection != Protection::None).then(|| Aes256Gcm::new(key.into())),
            seq: 0,
            head: [0; HEADER_LEN],
            head_len: 0,
            left: 0,
            frame: BytesMut::new(),
        }
    }

    pub fn protection(&self) -> Protection {
        self.protection
    }

    /// Frames sealed so far.
    pub fn sealed(&self) -> u64 {
        self.seq
    }

    /// Passes `bytes` (any cut of a stream of encoded frames) to `out`, each finished
    /// frame and its trailer going out as one buffer.
    pub fn seal(&mut self, mut bytes: Bytes, out: &mut impl FnMut(Bytes)) {
        if self.protection == Protection::None {
            return out(bytes);
        }
        while !bytes.is_empty() {
            if self.head_len < HEADER_LEN {
                let n = (HEADER_LEN - self.head_len).min(bytes.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
                self.head_len += n;
                bytes.advance(n);
                if self.head_len == HEADER_LEN {
                    let h = &self.head;
                    self.left = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
                    self.frame.clear();
                    self.frame.reserve(HEADER_LEN + self.left + TAG_LEN);
                    self.frame.extend_from_slice(&self.head);
                    if self.left == 0 {
                        self.finish(out);
                    }
                }
                continue;
            }
            let n = self.left.min(bytes.len());
            self.frame.extend_from_slice(&bytes[..n]);
            bytes.advance(n);
            self.left -= n;
            if self.left == 0 {
                self.finish(out);
            }
        }
    }

    fn finish(&mut self, out: &mut impl FnMut(Bytes)) {
        let cipher = self
            .cipher
            .as_ref()
            .expect("a protected session has a cipher");
        let n = nonce(self.seq);
        const TOO_LONG: &str = "AES-GCM takes any frame a vargr link carries";
        if self.protection == Protection::Mac {
            let tag = cipher
                .encrypt_in_place_detached(&n, &self.frame, &mut [])
                .expect(TOO_LONG);
            self.frame.put_slice(&tag);
            out(self.frame.split().freeze());
        } else {
            let (head, payload) = self.frame.split_at_mut(HEADER_LEN);
            let tag = cipher
                .encrypt_in_place_detached(&n, head, payload)
                .expect(TOO_LONG);
            self.frame.put_slice(&tag);
            out(self.frame.split().freeze());
        }
        self.seq += 1;
        self.head_len = 0;
    }

    /// Seals one whole frame into `out`.
    pub fn seal_frame(&mut self, f: &Frame, out: &mut BytesMut) {
        self.seal(f.to_wire(), &mut |b| out.extend_from_slice(&b));
    }
}

/// Why a protected frame was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The trailer does not match: the frame was altered, dropped, reordered, replayed
    /// or injected by someone without the session's keys.
    #[error("frame {seq} after the handshake failed its {protection} check (altered, dropped, reordered, replayed or injected)")]
    Forged { seq: u64, protection: &'static str },
}

/// The reading half: checks (and decrypts) each frame before it is decoded.
pub struct Opener {
    protection: Protection,
    cipher: Option<Aes256Gcm>,
    seq: u64,
}

impl Opener {
    fn new(protection: Protection, key: &[u8; KEY_LEN]) -> Opener {
        Opener {
            protection,
            cipher: (protection != Protection::None).then(|| Aes256Gcm::new(key.into())),
            seq: 0,
        }
    }

    pub fn protection(&self) -> Protection {
        self.protection
    }

    /// Takes the next frame off the front of `buf` once it and its trailer are complete
    /// and the trailer checks out; `Ok(None)` while more bytes are needed.
    pub fn open(
        &mut self,
        buf: &mut BytesMut,
        max_payload: usize,
    ) -> Result<Option<Frame>, OpenError> {
        if self.protection == Protection::None {
            return Ok(decode_frame(buf, max_payload)?);
        }
        let Some(total) = frame_len(buf, max_payload)? else {
            return Ok(None);
        };
        if buf.len() < total + TAG_LEN {
            buf.reserve(total + TAG_LEN - buf.len());
            return Ok(None);
        }
        let forged = || OpenError::Forged {
            seq: self.seq,
            protection: self.protection.name(),
        };
        let cipher = self
            .cipher
            .as_ref()
            .expect("a protected session has a cipher");
        let tag = Tag::clone_from_slice(&buf[total..total + TAG_LEN]);
        let n = nonce(self.seq);
        let checked = if self.protection == Protection::Mac {
            cipher.decrypt_in_place_detached(&n, &buf[..total], &mut [], &tag)
        } else {
            let (head, rest) = buf.split_at_mut(HEADER_LEN);
            cipher.decrypt_in_place_detached(&n, head, &mut rest[..total - HEADER_LEN], &tag)
        };
        checked.map_err(|_| forged())?;
        let mut frame = buf.split_to(total);
        buf.advance(TAG_LEN);
        self.seq += 1;
        Ok(decode_frame(&mut frame, max_payload)?)
    }
}

/// A sealer and an opener sharing one key, for `vargr bench link`.
#[doc(hidden)]
pub fn bench_pair(p: Protection) -> (Sealer, Opener) {
    Session::new(p, [1; KEY_LEN], [1; KEY_LEN]).split()
}

/// Every decoder of a peer's bytes here, for the fuzz target (`link_seal`).
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Opens `data` as a sealed stream in every mode, and checks that the frames it holds
    /// (read as plain frames) come back unchanged through a sealer and an opener.
    /// Errors are fine; panics, and allocations beyond the frame limit, are not.
    pub fn open_all(data: &[u8]) {
        const MAX: usize = 1 << 16;
        for p in [Protection::None, Protection::Mac, Protection::Encrypt] {
            let s = Session::new(p, [1; KEY_LEN], [1; KEY_LEN]);
            let (mut sealer, mut opener) = s.split();
            let mut buf = BytesMut::from(data);
            while let Ok(Some(f)) = opener.open(&mut buf, MAX) {
                assert!(f.payload.len() <= MAX);
            }
            let (_, mut opener) = s.split();
            let mut plain = BytesMut::from(data);
            let mut sealed = BytesMut::new();
            let mut frames = Vec::new();
            while let Ok(Some(f)) = decode_frame(&mut plain, MAX) {
                sealer.seal_frame(&f, &mut sealed);
                frames.push(f);
            }
            for f in frames {
                assert_eq!(opener.open(&mut sealed, MAX).ok().flatten(), Some(f));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vargr_wire::{encode_frame, FrameKind};

    fn pair(p: Protection) -> (Sealer, Opener) {
        let k = [7u8; KEY_LEN];
        (Sealer::new(p, &k), Opener::new(p, &k))
    }

    /// Small frames and one large one.
    fn frames() -> Vec<Frame> {
        let mut fs: Vec<Frame> = (0..5)
            .map(|i| {
                Frame::new(
                    FrameKind::Data,
                    i,
                    -(i as i32),
                    vec![i as u8; i as usize * 37],
                )
            })
            .collect();
        fs.push(Frame::new(FrameKind::Data, 9, 9, vec![5u8; 5000]));
        fs
    }

    #[test]
    fn a_large_frame_altered_fails_its_check() {
        for p in [Protection::Mac, Protection::Encrypt] {
            let (mut s, _) = pair(p);
            let mut wire = sealed(&mut s, &frames(), 1000);
            let last = wire.len() - TAG_LEN - 100;
            wire[last] ^= 0x40;
            assert_eq!(forged(open_all(&mut pair(p).1, wire)), 5, "{p:?}");
        }
    }

    /// The sealed stream, cut into pieces of `cut` bytes before it is sealed.
    fn sealed(s: &mut Sealer, fs: &[Frame], cut: usize) -> BytesMut {
        let mut plain = BytesMut::new();
        for f in fs {
            encode_frame(f, &mut plain);
        }
        let mut out = BytesMut::new();
        let plain = plain.freeze();
        let mut i = 0;
        while i < plain.len() {
            let j = (i + cut).min(plain.len());
            s.seal(plain.slice(i..j), &mut |b| out.extend_from_slice(&b));
            i = j;
        }
        out
    }

    fn open_all(o: &mut Opener, mut buf: BytesMut) -> Result<Vec<Frame>, OpenError> {
        let mut got = Vec::new();
        while let Some(f) = o.open(&mut buf, 1 << 20)? {
            got.push(f);
        }
        assert!(buf.is_empty(), "{} bytes left over", buf.len());
        Ok(got)
    }

    #[test]
    fn frames_survive_any_cut_in_every_mode() {
        for p in [Protection::None, Protection::Mac, Protection::Encrypt] {
            for cut in [1, 3, 16, 17, 100, 10_000] {
                let (mut s, mut o) = pair(p);
                let wire = sealed(&mut s, &frames(), cut);
                let trailer = if p == Protection::None { 0 } else { TAG_LEN };
                let plain: usize = frames().iter().map(|f| f.wire_len() + trailer).sum();
                assert_eq!(wire.len(), plain, "{p:?} cut {cut}");
                assert_eq!(open_all(&mut o, wire).unwrap(), frames(), "{p:?} cut {cut}");
            }
        }
    }

    #[test]
    fn encryption_hides_the_payload() {
        let (mut s, _) = pair(Protection::Encrypt);
        let f = Frame::new(FrameKind::Data, 1, 2, b"attack at dawn".to_vec());
        let wire = sealed(&mut s, &[f], 1000);
        assert!(!wire.windows(6).any(|w| w == b"attack"));
    }

    fn forged(r: Result<Vec<Frame>, OpenError>) -> u64 {
        match r {
            Err(OpenError::Forged { seq, .. }) => seq,
            other => panic!("expected a forged frame, got {other:?}"),
        }
    }

    #[test]
    fn altered_dropped_reordered_replayed_and_injected_frames_fail() {
        for p in [Protection::Mac, Protection::Encrypt] {
            let one = |i: usize| {
                let (mut s, _) = pair(p);
                let wire = sealed(&mut s, &frames(), 7);
                let mut at = 0;
                let mut pieces = Vec::new();
                for f in frames() {
                    let n = f.wire_len() + TAG_LEN;
                    pieces.push(wire[at..at + n].to_vec());
                    at += n;
                }
                pieces[i].clone()
            };
            let (mut s, _) = pair(p);
            let all = sealed(&mut s, &frames(), 7);
            // A flipped payload bit.
            let mut bad = all.clone();
            bad[HEADER_LEN + 1] ^= 1;
            assert_eq!(forged(open_all(&mut pair(p).1, bad)), 0, "{p:?}");
            // A flipped header bit (the stream id).
            let mut bad = all.clone();
            bad[8] ^= 1;
            assert_eq!(forged(open_all(&mut pair(p).1, bad)), 0, "{p:?}");
            // Frame 1 dropped, frames 1 and 2 swapped, frame 0 replayed.
            for (seq, order) in [(1, vec![0, 2]), (1, vec![0, 2, 1]), (1, vec![0, 0])] {
                let mut buf = BytesMut::new();
                for i in order {
                    buf.extend_from_slice(&one(i));
                }
                assert_eq!(forged(open_all(&mut pair(p).1, buf)), seq, "{p:?}");
            }
            // A frame built by someone without the keys.
            let mut buf = BytesMut::from(&one(0)[..]);
            encode_frame(
                &Frame::new(FrameKind::Data, 9, 9, b"evil".to_vec()),
                &mut buf,
            );
            buf.extend_from_slice(&[0u8; TAG_LEN]);
            assert_eq!(forged(open_all(&mut pair(p).1, buf)), 1, "{p:?}");
            // Keys of another session.
            let (mut s2, _) = (
                Sealer::new(p, &[8u8; KEY_LEN]),
                Opener::new(p, &[8u8; KEY_LEN]),
            );
            let other = sealed(&mut s2, &frames(), 50);
            assert_eq!(forged(open_all(&mut pair(p).1, other)), 0, "{p:?}");
        }
    }

    #[test]
    fn a_header_claiming_too_much_is_refused_before_its_payload() {
        let (_, mut o) = pair(Protection::Mac);
        let mut buf = BytesMut::new();
        encode_frame(&Frame::new(FrameKind::Data, 0, 0, vec![0u8; 100]), &mut buf);
        buf.truncate(HEADER_LEN);
        assert!(matches!(o.open(&mut buf, 50), Err(OpenError::Wire(_))));
    }
}
