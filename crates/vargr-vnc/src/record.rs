//! Recorded screen sessions: what a VNC server sent, as it came, so that a benchmark
//! replays the same session to every method it compares.
//!
//! A recording is the far side's [`FarSide::poll_recorded`](crate::FarSide::poll_recorded)
//! messages with the time each arrived: a zstd stream of a magic line and then
//! records `[microseconds since the start: u64 LE][ProxyMsg in its framing]`. Pixels
//! are canonical, so a replay can serve them in any encoding and pixel format.
//!
//! A recording is a file someone may hand us: the reader bounds every message by
//! [`ProxyLimits`] and names the record and byte where it went wrong.

use std::io::{self, Read, Write};
use std::time::Duration;

use bytes::BytesMut;

use crate::{ProxyLimits, ProxyMsg, VncError};

const MAGIC: &[u8; 14] = b"VARGR-VNC-REC1";
const HEAD: usize = 8 + 5;

/// Why a recording could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("not a vargr VNC recording (no magic line)")]
    NotARecording,
    #[error("reading the recording: {0}")]
    Io(#[from] io::Error),
    #[error("record {index} at byte {offset}: {source}")]
    Bad {
        index: u64,
        offset: u64,
        #[source]
        source: VncError,
    },
    #[error("record {index} at byte {offset}: the recording ends inside it")]
    Truncated { index: u64, offset: u64 },
    #[error("record {index} at byte {offset}: time goes back ({at:?} after {before:?})")]
    TimeBack {
        index: u64,
        offset: u64,
        at: Duration,
        before: Duration,
    },
}

/// Writes a recording.
pub struct RecordWriter<W: Write> {
    z: zstd::stream::write::Encoder<'static, W>,
    buf: BytesMut,
}

impl<W: Write> RecordWriter<W> {
    pub fn new(w: W) -> io::Result<RecordWriter<W>> {
        let mut z = zstd::stream::write::Encoder::new(w, 3)?;
        z.write_all(MAGIC)?;
        Ok(RecordWriter {
            z,
            buf: BytesMut::new(),
        })
    }

    /// Appends `msg`, which arrived `at` after the start.
    pub fn write(&mut self, at: Duration, msg: &ProxyMsg) -> io::Result<()> {
        self.buf.clear();
        msg.encode(&mut self.buf);
        self.z.write_all(&(at.as_micros() as u64).to_le_bytes())?;
        self.z.write_all(&self.buf)
    }

    /// Ends the zstd stream; returns the writer.
    pub fn finish(self) -> io::Result<W> {
        self.z.finish()
    }
}

/// Reads a recording, a record at a time.
pub struct RecordReader<R: Read> {
    z: zstd::stream::read::Decoder<'static, io::BufReader<R>>,
    limits: ProxyLimits,
    index: u64,
    offset: u64,
    last: Duration,
}

impl<R: Read> RecordReader<R> {
    pub fn new(r: R, limits: ProxyLimits) -> Result<RecordReader<R>, RecordError> {
        let mut z = zstd::stream::read::Decoder::new(r)?;
        let mut magic = [0u8; MAGIC.len()];
        if read_full(&mut z, &mut magic)? != magic.len() || &magic != MAGIC {
            return Err(RecordError::NotARecording);
        }
        Ok(RecordReader {
            z,
            limits,
            index: 0,
            offset: MAGIC.len() as u64,
            last: Duration::ZERO,
        })
    }

    /// The next record, or `None` at a clean end.
    pub fn next_record(&mut self) -> Result<Option<(Duration, ProxyMsg)>, RecordError> {
        let (index, offset) = (self.index, self.offset);
        let mut head = [0u8; HEAD];
        match read_full(&mut self.z, &mut head)? {
            0 => return Ok(None),
            HEAD => {}
            _ => return Err(RecordError::Truncated { index, offset }),
        }
        let at = Duration::from_micros(u64::from_le_bytes(head[..8].try_into().expect("8")));
        if at < self.last {
            return Err(RecordError::TimeBack {
                index,
                offset,
                at,
                before: self.last,
            });
        }
        let len = u32::from_be_bytes(head[9..].try_into().expect("4"));
        let bad = |source| RecordError::Bad {
            index,
            offset,
            source,
        };
        if len > self.limits.max_message {
            return Err(bad(VncError::TooLong {
                message: "recorded message",
                field: "length",
                len: len as u64,
                max: self.limits.max_message as u64,
            }));
        }
        let mut buf = BytesMut::zeroed(5 + len as usize);
        buf[..5].copy_from_slice(&head[8..]);
        if read_full(&mut self.z, &mut buf[5..])? != len as usize {
            return Err(RecordError::Truncated { index, offset });
        }
        let msg = ProxyMsg::decode(&mut buf, &self.limits)
            .map_err(bad)?
            .expect("a whole message");
        self.index += 1;
        self.offset += (HEAD + len as usize) as u64;
        self.last = at;
        Ok(Some((at, msg)))
    }
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Region;

    fn sample() -> Vec<(Duration, ProxyMsg)> {
        vec![
            (
                Duration::ZERO,
                ProxyMsg::Init {
                    width: 4,
                    height: 2,
                    name: b"desk".to_vec(),
                },
            ),
            (
                Duration::from_millis(15),
                ProxyMsg::Update(vec![Region {
                    x: 1,
                    y: 0,
                    width: 2,
                    height: 1,
                    pixels: vec![0xff0000, 0x00ff00],
                }]),
            ),
            (
                Duration::from_millis(40),
                ProxyMsg::Copy {
                    src_x: 0,
                    src_y: 0,
                    x: 2,
                    y: 1,
                    width: 2,
                    height: 1,
                },
            ),
        ]
    }

    fn recorded(records: &[(Duration, ProxyMsg)]) -> Vec<u8> {
        let mut w = RecordWriter::new(Vec::new()).unwrap();
        for (t, m) in records {
            w.write(*t, m).unwrap();
        }
        w.finish().unwrap()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<(Duration, ProxyMsg)>, RecordError> {
        let mut r = RecordReader::new(bytes, ProxyLimits::default())?;
        let mut out = Vec::new();
        while let Some(rec) = r.next_record()? {
            out.push(rec);
        }
        Ok(out)
    }

    #[test]
    fn records_round_trip() {
        assert_eq!(read_all(&recorded(&sample())).unwrap(), sample());
    }

    #[test]
    fn bad_recordings_are_refused_with_where() {
        assert!(matches!(
            read_all(&zstd::encode_all(&b"hello"[..], 1).unwrap()),
            Err(RecordError::NotARecording)
        ));
        // Cut inside the last record: the plain stream re-compressed shorter.
        let plain = zstd::decode_all(&recorded(&sample())[..]).unwrap();
        let cut = zstd::encode_all(&plain[..plain.len() - 3], 1).unwrap();
        assert!(matches!(
            read_all(&cut),
            Err(RecordError::Truncated { index: 2, .. })
        ));
        let mut back = sample();
        back[2].0 = Duration::from_millis(1);
        assert!(matches!(
            read_all(&recorded(&back)),
            Err(RecordError::TimeBack { index: 2, .. })
        ));
        // A message longer than the limits allow, refused before it is read.
        let bytes = recorded(&sample());
        let mut small = RecordReader::new(
            &bytes[..],
            ProxyLimits {
                max_message: 8,
                ..ProxyLimits::default()
            },
        )
        .unwrap();
        assert!(matches!(
            small.next_record(),
            Err(RecordError::Bad {
                index: 0,
                source: VncError::TooLong { len: 12, .. },
                ..
            })
        ));
    }
}
