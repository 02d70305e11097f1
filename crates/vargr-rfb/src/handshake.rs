//! The messages of the RFB handshake (RFC 6143 §7.1-7.3), each decoded on its own
//! because what comes next depends on the version and the security type chosen: the
//! state machines in [`crate::client`] and [`crate::server`] know which one to expect.

use bytes::{BufMut, BytesMut};

use crate::wire::{decode_front, Parse, Reader, Step};
use crate::{Limits, PixelFormat, RfbError};

/// The protocol versions spoken (3.3, 3.7 and 3.8; RFC 6143 §7.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    V3_3,
    V3_7,
    V3_8,
}

impl ProtocolVersion {
    pub const LEN: usize = 12;

    pub fn minor(self) -> u16 {
        match self {
            ProtocolVersion::V3_3 => 3,
            ProtocolVersion::V3_7 => 7,
            ProtocolVersion::V3_8 => 8,
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        out.put_slice(format!("RFB 003.{:03}\n", self.minor()).as_bytes());
    }

    /// Decodes a version this crate speaks; any other is a typed error.
    pub fn decode(buf: &mut BytesMut) -> Result<Option<ProtocolVersion>, RfbError> {
        decode_front(buf, |r| {
            let (major, minor) = read_version_numbers(r)?;
            Ok(ProtocolVersion::from_numbers(major, minor)?)
        })
    }

    pub fn from_numbers(major: u16, minor: u16) -> Result<ProtocolVersion, RfbError> {
        match (major, minor) {
            (3, 3) => Ok(ProtocolVersion::V3_3),
            (3, 7) => Ok(ProtocolVersion::V3_7),
            (3, 8) => Ok(ProtocolVersion::V3_8),
            _ => Err(RfbError::UnsupportedVersion { major, minor }),
        }
    }
}

/// Reads `RFB xxx.yyy\n` into its two numbers.
pub(crate) fn read_version_numbers(r: &mut Reader) -> Parse<(u16, u16)> {
    let b = r.bytes(ProtocolVersion::LEN)?;
    let digits = |s: &[u8]| -> Option<u16> {
        s.iter().try_fold(0u16, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + (c - b'0') as u16)
        })
    };
    let bad = || Step::Bad(RfbError::BadVersionString(b.to_vec()));
    if &b[..4] != b"RFB " || b[7] != b'.' || b[11] != b'\n' {
        return Err(bad());
    }
    match (digits(&b[4..7]), digits(&b[8..11])) {
        (Some(major), Some(minor)) => Ok((major, minor)),
        _ => Err(bad()),
    }
}

/// Security type numbers (RFC 6143 §7.1.2, §8.1.2).
pub mod security {
    pub const INVALID: u8 = 0;
    pub const NONE: u8 = 1;
    pub const VNC_AUTH: u8 = 2;
}

/// The server's security offer: the types it accepts, or why it refuses the client.
/// In 3.3 the server decides alone and sends one type as a u32 (§A.1); in 3.7 and
/// 3.8 it sends a list the client chooses from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityOffer {
    Types(Vec<u8>),
    Refused(Vec<u8>),
}

impl SecurityOffer {
    /// In 3.3 a `Types` offer must hold exactly one type other than 0.
    pub fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) -> Result<(), RfbError> {
        match (self, version) {
            (SecurityOffer::Types(t), ProtocolVersion::V3_3) => match t.as_slice() {
                [one] if *one != security::INVALID => out.put_u32(*one as u32),
                _ => {
                    return Err(RfbError::BadValue {
                        message: "security (3.3)",
                        field: "security-type count",
                        value: t.len() as i64,
                    })
                }
            },
            (SecurityOffer::Types(t), _) => {
                if t.is_empty() || t.len() > 255 || t.contains(&security::INVALID) {
                    return Err(RfbError::BadValue {
                        message: "security",
                        field: "number-of-security-types",
                        value: t.len() as i64,
                    });
                }
                out.put_u8(t.len() as u8);
                out.put_slice(t);
            }
            (SecurityOffer::Refused(reason), v) => {
                if v == ProtocolVersion::V3_3 {
                    out.put_u32(0);
                } else {
                    out.put_u8(0);
                }
                out.put_u32(reason.len() as u32);
                out.put_slice(reason);
            }
        }
        Ok(())
    }

    pub fn decode(
        buf: &mut BytesMut,
        version: ProtocolVersion,
        limits: &Limits,
    ) -> Result<Option<SecurityOffer>, RfbError> {
        decode_front(buf, |r| {
            let count = if version == ProtocolVersion::V3_3 {
                let t = r.u32()?;
                if t > security::VNC_AUTH as u32 {
                    // 3.3 defines only 0, 1 and 2.
                    return Err(Step::Bad(RfbError::BadValue {
                        message: "security (3.3)",
                        field: "security-type",
                        value: t as i64,
                    }));
                }
                if t != 0 {
                    return Ok(SecurityOffer::Types(vec![t as u8]));
                }
                0
            } else {
                r.u8()?
            };
            if count == 0 {
                return Ok(SecurityOffer::Refused(r.string(
                    "security",
                    "reason-string",
                    limits.max_reason,
                )?));
            }
            let types = r.bytes(count as usize)?.to_vec();
            if types.contains(&security::INVALID) {
                return Err(Step::Bad(RfbError::BadValue {
                    message: "security",
                    field: "security-types",
                    value: 0,
                }));
            }
            Ok(SecurityOffer::Types(types))
        })
    }
}

/// The client's chosen security type (3.7 and 3.8 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecurityChoice(pub u8);

impl SecurityChoice {
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8(self.0);
    }

    pub fn decode(buf: &mut BytesMut) -> Result<Option<SecurityChoice>, RfbError> {
        decode_front(buf, |r| Ok(SecurityChoice(r.u8()?)))
    }
}

/// VNC authentication's 16 random bytes from the server (§7.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VncChallenge(pub [u8; 16]);

/// The challenge encrypted with the password, from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VncResponse(pub [u8; 16]);

macro_rules! sixteen {
    ($t:ident) => {
        impl $t {
            pub fn encode(&self, out: &mut BytesMut) {
                out.put_slice(&self.0);
            }

            pub fn decode(buf: &mut BytesMut) -> Result<Option<$t>, RfbError> {
                decode_front(buf, |r| {
                    let b = r.bytes(16)?;
                    let mut a = [0; 16];
                    a.copy_from_slice(b);
                    Ok($t(a))
                })
            }
        }
    };
}
sixteen!(VncChallenge);
sixteen!(VncResponse);

/// The outcome of the security handshake (§7.1.3). Only 3.8 sends a reason with a
/// failure, and only 3.8 sends the result after security type None.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityResult {
    Ok,
    /// The reason string (always empty before 3.8).
    Failed(Vec<u8>),
}

impl SecurityResult {
    pub fn encode(&self, version: ProtocolVersion, out: &mut BytesMut) {
        match self {
            SecurityResult::Ok => out.put_u32(0),
            SecurityResult::Failed(reason) => {
                out.put_u32(1);
                if version == ProtocolVersion::V3_8 {
                    out.put_u32(reason.len() as u32);
                    out.put_slice(reason);
                }
            }
        }
    }

    pub fn decode(
        buf: &mut BytesMut,
        version: ProtocolVersion,
        limits: &Limits,
    ) -> Result<Option<SecurityResult>, RfbError> {
        decode_front(buf, |r| match r.u32()? {
            0 => Ok(SecurityResult::Ok),
            1 if version == ProtocolVersion::V3_8 => Ok(SecurityResult::Failed(r.string(
                "SecurityResult",
                "reason-string",
                limits.max_reason,
            )?)),
            1 => Ok(SecurityResult::Failed(Vec::new())),
            v => Err(Step::Bad(RfbError::BadValue {
                message: "SecurityResult",
                field: "status",
                value: v as i64,
            })),
        })
    }
}

/// ClientInit (§7.3.1): whether the client lets other clients share the desktop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientInit {
    pub shared: bool,
}

impl ClientInit {
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8(self.shared as u8);
    }

    pub fn decode(buf: &mut BytesMut) -> Result<Option<ClientInit>, RfbError> {
        decode_front(buf, |r| {
            Ok(ClientInit {
                shared: r.u8()? != 0,
            })
        })
    }
}

/// ServerInit (§7.3.2): the framebuffer's size, the server's pixel format and the
/// desktop's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInit {
    pub width: u16,
    pub height: u16,
    pub pixel_format: PixelFormat,
    pub name: Vec<u8>,
}

impl ServerInit {
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u16(self.width);
        out.put_u16(self.height);
        self.pixel_format.encode(out);
        out.put_u32(self.name.len() as u32);
        out.put_slice(&self.name);
    }

    /// Refuses a name above `limits.max_name` and a size above the limits' maximum;
    /// the pixel format is checked by whoever uses it.
    pub fn decode(buf: &mut BytesMut, limits: &Limits) -> Result<Option<ServerInit>, RfbError> {
        decode_front(buf, |r| {
            let width = r.u16()?;
            let height = r.u16()?;
            limits.check_size("ServerInit", width, height)?;
            let pixel_format = PixelFormat::read(&mut r.bytes(PixelFormat::LEN)?);
            let name = r.string("ServerInit", "name-string", limits.max_name)?;
            Ok(ServerInit {
                width,
                height,
                pixel_format,
                name,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_parsed_strictly() {
        let mut b = BytesMut::from(&b"RFB 003.008\nRFB 003.007\n"[..]);
        assert_eq!(
            ProtocolVersion::decode(&mut b).unwrap(),
            Some(ProtocolVersion::V3_8)
        );
        assert_eq!(
            ProtocolVersion::decode(&mut b).unwrap(),
            Some(ProtocolVersion::V3_7)
        );
        let mut b = BytesMut::from(&b"RFB 003.00"[..]);
        assert_eq!(ProtocolVersion::decode(&mut b).unwrap(), None);
        assert_eq!(b.len(), 10, "nothing consumed");
        let mut b = BytesMut::from(&b"RFB 003.005\n"[..]);
        assert_eq!(
            ProtocolVersion::decode(&mut b),
            Err(RfbError::UnsupportedVersion { major: 3, minor: 5 })
        );
        let mut b = BytesMut::from(&b"RFB 00x.008\n"[..]);
        assert!(matches!(
            ProtocolVersion::decode(&mut b),
            Err(RfbError::BadVersionString(_))
        ));
        let mut out = BytesMut::new();
        ProtocolVersion::V3_3.encode(&mut out);
        assert_eq!(&out[..], b"RFB 003.003\n");
    }

    #[test]
    fn security_offers_differ_by_version() {
        let limits = Limits::default();
        // 3.3: a u32 type.
        let mut b = BytesMut::from(&[0, 0, 0, 2][..]);
        assert_eq!(
            SecurityOffer::decode(&mut b, ProtocolVersion::V3_3, &limits).unwrap(),
            Some(SecurityOffer::Types(vec![2]))
        );
        // 3.8: a count, the types; a count of 0 is followed by a reason.
        let mut b = BytesMut::from(&[2, 1, 2, 0, 0, 0, 0, 2, b'n', b'o'][..]);
        assert_eq!(
            SecurityOffer::decode(&mut b, ProtocolVersion::V3_8, &limits).unwrap(),
            Some(SecurityOffer::Types(vec![1, 2]))
        );
        assert_eq!(
            SecurityOffer::decode(&mut b, ProtocolVersion::V3_8, &limits).unwrap(),
            Some(SecurityOffer::Refused(b"no".to_vec()))
        );
        let mut b = BytesMut::from(&[0, 0xff, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            SecurityOffer::decode(&mut b, ProtocolVersion::V3_7, &limits),
            Err(RfbError::TooLong {
                field: "reason-string",
                ..
            })
        ));
    }

    #[test]
    fn security_result_has_a_reason_only_in_3_8() {
        let limits = Limits::default();
        let mut b = BytesMut::from(&[0, 0, 0, 1, 0, 0, 0, 1, b'x'][..]);
        assert_eq!(
            SecurityResult::decode(&mut b, ProtocolVersion::V3_8, &limits).unwrap(),
            Some(SecurityResult::Failed(b"x".to_vec()))
        );
        let mut b = BytesMut::from(&[0, 0, 0, 1, 0, 0, 0, 1, b'x'][..]);
        assert_eq!(
            SecurityResult::decode(&mut b, ProtocolVersion::V3_7, &limits).unwrap(),
            Some(SecurityResult::Failed(Vec::new()))
        );
        assert_eq!(b.len(), 5);
    }
}
