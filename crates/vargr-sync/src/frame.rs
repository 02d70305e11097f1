//! The preamble and the receiver's reply frames.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

/// Bumped when either side's bytes change meaning (2: control bodies in the layout,
/// 128-bit file hashes).
pub const PROTOCOL_VERSION: u32 = 2;

const MAGIC: &[u8; 8] = b"VARGRSYN";
const MAX_PREAMBLE: usize = 64 << 10;
/// Largest reply frame a sender accepts.
pub(crate) const MAX_REPLY: usize = 16 << 20;

/// Sender → receiver, before the dedup stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Preamble {
    pub version: u32,
    /// Names the sender; the receiver keeps one cache per sender.
    pub sender: String,
    /// Where the tree goes, for a daemon serving a root (relative to it); empty when
    /// the receiver was started with its destination.
    pub dest: String,
    pub fp_bits: u8,
    pub group: u32,
}

/// Control messages inside the dedup stream (channel 0), as JSON: the message's layout
/// followed by its segments. Those that repeat from sync to sync (a manifest, the end of
/// an unchanged file) go as segments and cross by fingerprint or prediction the next
/// time; the others go whole in the layout, which crosses raw and takes no place in the
/// segment cache or the stream model.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub(crate) enum Control {
    Manifest {
        manifest: crate::Manifest,
    },
    FileStart {
        index: u32,
    },
    /// The end of the file started last (no index: the same bytes for an unchanged
    /// file wherever it stands in the manifest).
    FileEnd {
        size: u64,
        /// [`file_hash`] of the file's bytes.
        blake3: String,
    },
    Done,
}

/// How a file's bytes are checked end to end: the first 128 bits of their BLAKE3, in hex.
/// The dedup protocol has checked every group of segments already; this catches what
/// happens around it (a file assembled from the wrong segments, a write that failed
/// silently), where 128 bits are as good as 256 and cost half the bytes of every file.
pub(crate) fn file_hash(h: &blake3::Hasher) -> String {
    let full = h.finalize();
    full.as_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Receiver → sender.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub(crate) enum Reply {
    /// First reply: who the receiver is (the sender keeps one cache per receiver).
    Hello {
        receiver: String,
    },
    /// Manifest indices the receiver already holds, same size and mtime.
    Have {
        indices: Vec<u32>,
    },
    /// A file failed to verify (it is not put in place).
    Failed {
        index: u32,
        error: String,
    },
    Result {
        files_written: u64,
        bytes_written: u64,
        failed: u64,
    },
    Error {
        message: String,
    },
}

pub(crate) const F_DEDUP: u8 = 1;
pub(crate) const F_CONTROL: u8 = 2;

pub(crate) fn write_preamble(w: &mut dyn Write, p: &Preamble) -> std::io::Result<()> {
    let body = serde_json::to_vec(p).expect("serializable");
    w.write_all(MAGIC)?;
    w.write_all(&(body.len() as u32).to_le_bytes())?;
    w.write_all(&body)?;
    w.flush()
}

pub(crate) fn read_preamble(r: &mut dyn Read) -> Result<Preamble, String> {
    let mut head = [0u8; 12];
    r.read_exact(&mut head)
        .map_err(|e| format!("reading the sync preamble: {e}"))?;
    if &head[..8] != MAGIC {
        return Err("the peer is not a vargr sync sender (bad magic)".into());
    }
    let n = u32::from_le_bytes(head[8..].try_into().expect("4 bytes")) as usize;
    if n > MAX_PREAMBLE {
        return Err(format!("preamble of {n} bytes exceeds {MAX_PREAMBLE}"));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)
        .map_err(|e| format!("reading the sync preamble: {e}"))?;
    serde_json::from_slice(&body).map_err(|e| format!("malformed sync preamble: {e}"))
}

/// Bytes before a frame's body: its type and its u32 little-endian length.
pub const FRAME_HEAD_LEN: usize = 5;

fn frame_head(kind: u8, body: &[u8]) -> [u8; FRAME_HEAD_LEN] {
    let mut head = [0u8; FRAME_HEAD_LEN];
    head[0] = kind;
    head[1..].copy_from_slice(&(body.len() as u32).to_le_bytes());
    head
}

pub(crate) fn write_frame(w: &mut dyn Write, kind: u8, body: &[u8]) -> std::io::Result<()> {
    w.write_all(&frame_head(kind, body))?;
    w.write_all(body)
}

/// Appends a frame (a type byte, a u32 little-endian length, the body) to `out`: the
/// shape [`split_frame`] reads, for protocols that queue bytes rather than write them.
pub fn put_frame(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.reserve(FRAME_HEAD_LEN + body.len());
    out.extend_from_slice(&frame_head(kind, body));
    out.extend_from_slice(body);
}

/// The frame at the front of `buf` (a type byte, a u32 little-endian length, the body),
/// the shape of `vargr sync`'s replies and `vargr proxy`'s link: `Ok(None)` while it is
/// incomplete, `Err(length)` if its length exceeds `max` (before anything is read).
pub fn split_frame(buf: &[u8], max: usize) -> Result<Option<(u8, &[u8])>, usize> {
    let Some(head) = buf.get(..FRAME_HEAD_LEN) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(head[1..].try_into().expect("4 bytes")) as usize;
    if len > max {
        return Err(len);
    }
    Ok(buf
        .get(FRAME_HEAD_LEN..FRAME_HEAD_LEN + len)
        .map(|body| (head[0], body)))
}

/// Reads one reply frame; `Ok(None)` at a clean end of stream.
pub(crate) fn read_frame(r: &mut dyn Read) -> Result<Option<(u8, Vec<u8>)>, String> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head[..1]) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(format!("reading a reply: {e}")),
    }
    r.read_exact(&mut head[1..])
        .map_err(|e| format!("reading a reply header: {e}"))?;
    let n = u32::from_le_bytes(head[1..].try_into().expect("4 bytes")) as usize;
    if n > MAX_REPLY {
        return Err(format!("reply of {n} bytes exceeds {MAX_REPLY}"));
    }
    if head[0] != F_DEDUP && head[0] != F_CONTROL {
        return Err(format!("unknown reply frame type {:#04x}", head[0]));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)
        .map_err(|e| format!("reading a reply body: {e}"))?;
    Ok(Some((head[0], body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_only_when_whole_and_within_the_limit() {
        let mut b = Vec::new();
        write_frame(&mut b, 7, b"body").unwrap();
        for cut in 0..b.len() {
            assert_eq!(split_frame(&b[..cut], 10), Ok(None));
        }
        assert_eq!(split_frame(&b, 10), Ok(Some((7, &b"body"[..]))));
        assert_eq!(split_frame(&b, 3), Err(4));
        assert_eq!(
            split_frame(&[1, 0xff, 0xff, 0xff, 0xff], 1 << 20),
            Err(u32::MAX as usize)
        );
    }

    #[test]
    fn put_frame_writes_what_write_frame_writes() {
        let (mut written, mut put) = (Vec::new(), vec![9]);
        write_frame(&mut written, 3, b"abc").unwrap();
        put_frame(&mut put, 3, b"abc");
        assert_eq!(put[1..], written[..]);
        assert_eq!(split_frame(&put[1..], 3), Ok(Some((3, &b"abc"[..]))));
    }
}
