//! Mutual HMAC-SHA256 challenge-response on every new connection.
//!
//! Each network has a random 32-byte secret. The acceptor sends a nonce; the connector
//! answers with its identity, its own nonce and `HMAC(secret, "vargr-c" | nA | nC | id)`;
//! the acceptor checks it and answers `HMAC(secret, "vargr-a" | nC | nA)` so the connector
//! knows it reached the right network too. Nothing else is accepted on a link before this
//! completes. [`Acceptor`] and [`Connector`] are the sans-IO halves; [`accept`] and
//! [`connect`] drive them over a blocking [`Conn`] with a timeout.

use std::io::{Read, Write};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use vargr_wire::{decode_frame, encode_frame, Frame, FrameKind, HEADER_LEN};

use crate::{Conn, NetError};

pub const SECRET_LEN: usize = 32;
const NONCE_LEN: usize = 32;
const MAC_LEN: usize = 32;
/// Handshake frames are tiny; anything bigger is not a vargr peer.
const MAX_HANDSHAKE: usize = 1024;

/// The network secret shared by every process of one network.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_LEN]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    pub fn random() -> Secret {
        let mut s = [0u8; SECRET_LEN];
        getrandom::getrandom(&mut s).expect("the OS random number generator failed");
        Secret(s)
    }
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
    pub fn from_hex(s: &str) -> Result<Secret, NetError> {
        let s = s.trim();
        let bad = || NetError::Auth {
            peer: "local configuration".into(),
            reason: format!("the secret must be {} hex digits", SECRET_LEN * 2),
        };
        if s.len() != SECRET_LEN * 2 || !s.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; SECRET_LEN];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Secret(out))
    }
    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(label);
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }
    fn verify(&self, label: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(label);
        for p in parts {
            m.update(p);
        }
        m.verify_slice(tag).is_ok()
    }
}

fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut n).expect("the OS random number generator failed");
    n
}

/// Why a handshake failed, before the driver adds the peer's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// The peer does not know the secret (or is not part of this network).
    WrongSecret,
    /// The peer sent something that is not the expected handshake frame.
    Protocol(String),
    /// The peer refused us, with its reason.
    Refused(String),
}

impl AuthFailure {
    fn into_net(self, peer: &str) -> NetError {
        match self {
            AuthFailure::WrongSecret => NetError::Auth {
                peer: peer.into(),
                reason: "wrong secret: the peer could not prove it belongs to this network".into(),
            },
            AuthFailure::Protocol(r) => NetError::Auth {
                peer: peer.into(),
                reason: r,
            },
            AuthFailure::Refused(r) => NetError::Refused {
                peer: peer.into(),
                reason: r,
            },
        }
    }
}

/// The accepting side's state.
pub struct Acceptor {
    secret: Secret,
    nonce: [u8; NONCE_LEN],
}

impl Acceptor {
    pub fn new(secret: Secret) -> (Acceptor, Frame) {
        let n = nonce();
        (
            Acceptor { secret, nonce: n },
            Frame::new(FrameKind::Challenge, 0, 0, Bytes::copy_from_slice(&n)),
        )
    }

    /// Checks the connector's proof. On success returns its node id and the Welcome frame;
    /// on failure returns the reason and the Refused frame to send before closing.
    pub fn on_proof(&self, f: &Frame) -> Result<(u32, Frame), (AuthFailure, Frame)> {
        let refuse = |fail: AuthFailure, why: &str| {
            (
                fail,
                Frame::new(FrameKind::Refused, 0, 0, Bytes::from(why.to_string())),
            )
        };
        if f.kind != FrameKind::Proof || f.payload.len() != 4 + NONCE_LEN + MAC_LEN {
            let why = format!(
                "expected a {}-byte Proof frame, got {} ({} bytes)",
                4 + NONCE_LEN + MAC_LEN,
                f.kind.name(),
                f.payload.len()
            );
            return Err(refuse(AuthFailure::Protocol(why.clone()), &why));
        }
        let p = &f.payload;
        let id = &p[..4];
        let theirs = &p[4..4 + NONCE_LEN];
        let tag = &p[4 + NONCE_LEN..];
        if !self
            .secret
            .verify(b"vargr-c", &[&self.nonce, theirs, id], tag)
        {
            return Err(refuse(AuthFailure::WrongSecret, "wrong secret"));
        }
        let node = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
        let mac = self.secret.mac(b"vargr-a", &[theirs, &self.nonce]);
        Ok((
            node,
            Frame::new(FrameKind::Welcome, 0, 0, Bytes::copy_from_slice(&mac)),
        ))
    }
}

/// The connecting side's state.
pub struct Connector {
    secret: Secret,
    node: u32,
    nonce: [u8; NONCE_LEN],
    their_nonce: Option<Vec<u8>>,
}

impl Connector {
    pub fn new(secret: Secret, node: u32) -> Connector {
        Connector {
            secret,
            node,
            nonce: nonce(),
            their_nonce: None,
        }
    }

    pub fn on_challenge(&mut self, f: &Frame) -> Result<Frame, AuthFailure> {
        if f.kind != FrameKind::Challenge || f.payload.len() != NONCE_LEN {
            return Err(AuthFailure::Protocol(format!(
                "expected a Challenge frame, got {} ({} bytes)",
                f.kind.name(),
                f.payload.len()
            )));
        }
        let id = self.node.to_le_bytes();
        let mac = self.secret.mac(b"vargr-c", &[&f.payload, &self.nonce, &id]);
        self.their_nonce = Some(f.payload.to_vec());
        let mut p = BytesMut::with_capacity(4 + NONCE_LEN + MAC_LEN);
        p.put_slice(&id);
        p.put_slice(&self.nonce);
        p.put_slice(&mac);
        Ok(Frame::new(FrameKind::Proof, 0, 0, p.freeze()))
    }

    pub fn on_welcome(&self, f: &Frame) -> Result<(), AuthFailure> {
        match f.kind {
            FrameKind::Refused => Err(AuthFailure::Refused(
                String::from_utf8_lossy(&f.payload).into_owned(),
            )),
            FrameKind::Welcome if f.payload.len() == MAC_LEN => {
                let theirs = self
                    .their_nonce
                    .as_deref()
                    .ok_or_else(|| AuthFailure::Protocol("Welcome before Challenge".into()))?;
                if self
                    .secret
                    .verify(b"vargr-a", &[&self.nonce, theirs], &f.payload)
                {
                    Ok(())
                } else {
                    Err(AuthFailure::WrongSecret)
                }
            }
            k => Err(AuthFailure::Protocol(format!(
                "expected Welcome, got {} ({} bytes)",
                k.name(),
                f.payload.len()
            ))),
        }
    }
}

/// Reads exactly one frame from a blocking connection.
pub fn read_frame(conn: &mut Conn, max: usize, peer: &str) -> Result<Frame, NetError> {
    let mut head = [0u8; HEADER_LEN];
    read_exact(conn, &mut head, peer)?;
    let mut buf = BytesMut::from(&head[..]);
    // Validate the header before reading a payload of its claimed size.
    if let Err(e) = decode_frame(&mut buf, max) {
        return Err(NetError::Wire {
            peer: peer.into(),
            source: e,
        });
    }
    let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    let mut payload = vec![0u8; len];
    read_exact(conn, &mut payload, peer)?;
    buf.extend_from_slice(&payload);
    match decode_frame(&mut buf, max) {
        Ok(Some(f)) => Ok(f),
        Ok(None) => unreachable!("a complete frame was assembled"),
        Err(e) => Err(NetError::Wire {
            peer: peer.into(),
            source: e,
        }),
    }
}

fn read_exact(conn: &mut Conn, buf: &mut [u8], peer: &str) -> Result<(), NetError> {
    conn.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => NetError::Timeout {
            what: "handshake",
            peer: peer.into(),
            after_ms: 0,
        },
        _ => NetError::io("reading handshake from", peer, e),
    })
}

/// Writes one frame to a blocking connection.
pub fn write_frame(conn: &mut Conn, f: &Frame, peer: &str) -> Result<(), NetError> {
    let mut out = BytesMut::new();
    encode_frame(f, &mut out);
    conn.write_all(&out)
        .map_err(|e| NetError::io("writing to", peer, e))
}

/// Runs the accepting side of the handshake; returns the connector's node id.
pub fn accept(conn: &mut Conn, secret: &Secret, timeout: Duration) -> Result<u32, NetError> {
    let peer = conn.peer_name();
    conn.set_timeout(Some(timeout))
        .map_err(|e| NetError::io("configuring", &peer, e))?;
    let (acc, challenge) = Acceptor::new(secret.clone());
    write_frame(conn, &challenge, &peer)?;
    let proof = read_frame(conn, MAX_HANDSHAKE, &peer)?;
    match acc.on_proof(&proof) {
        Ok((node, welcome)) => {
            write_frame(conn, &welcome, &peer)?;
            Ok(node)
        }
        Err((fail, refused)) => {
            let _ = write_frame(conn, &refused, &peer);
            Err(fail.into_net(&peer))
        }
    }
}

/// Runs the connecting side of the handshake as node `node`.
pub fn connect(
    conn: &mut Conn,
    secret: &Secret,
    node: u32,
    timeout: Duration,
    peer: &str,
) -> Result<(), NetError> {
    conn.set_timeout(Some(timeout))
        .map_err(|e| NetError::io("configuring", peer, e))?;
    let mut c = Connector::new(secret.clone(), node);
    let challenge = read_frame(conn, MAX_HANDSHAKE, peer)?;
    let proof = c.on_challenge(&challenge).map_err(|f| f.into_net(peer))?;
    write_frame(conn, &proof, peer)?;
    let welcome = read_frame(conn, MAX_HANDSHAKE, peer)?;
    c.on_welcome(&welcome).map_err(|f| f.into_net(peer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_secrets_agree_and_name_the_node() {
        let s = Secret::random();
        let (acc, ch) = Acceptor::new(s.clone());
        let mut con = Connector::new(s, 42);
        let proof = con.on_challenge(&ch).unwrap();
        let (node, welcome) = acc.on_proof(&proof).map_err(|e| e.0).unwrap();
        assert_eq!(node, 42);
        con.on_welcome(&welcome).unwrap();
    }

    #[test]
    fn wrong_secret_is_refused_on_both_sides() {
        let (acc, ch) = Acceptor::new(Secret::random());
        let mut con = Connector::new(Secret::random(), 1);
        let proof = con.on_challenge(&ch).unwrap();
        let (fail, refused) = acc.on_proof(&proof).unwrap_err();
        assert_eq!(fail, AuthFailure::WrongSecret);
        assert_eq!(
            con.on_welcome(&refused),
            Err(AuthFailure::Refused("wrong secret".into()))
        );
    }

    #[test]
    fn impostor_acceptor_is_detected() {
        let s = Secret::random();
        let (_, ch) = Acceptor::new(s.clone());
        let mut con = Connector::new(s, 1);
        con.on_challenge(&ch).unwrap();
        let forged = Frame::new(FrameKind::Welcome, 0, 0, vec![0u8; MAC_LEN]);
        assert_eq!(con.on_welcome(&forged), Err(AuthFailure::WrongSecret));
    }

    #[test]
    fn tampered_node_id_fails() {
        let s = Secret::random();
        let (acc, ch) = Acceptor::new(s.clone());
        let mut con = Connector::new(s, 7);
        let proof = con.on_challenge(&ch).unwrap();
        let mut p = proof.payload.to_vec();
        p[0] ^= 1;
        let bad = Frame::new(FrameKind::Proof, 0, 0, p);
        assert_eq!(acc.on_proof(&bad).unwrap_err().0, AuthFailure::WrongSecret);
    }

    #[test]
    fn secret_hex_round_trip_and_errors() {
        let s = Secret::random();
        assert_eq!(Secret::from_hex(&s.to_hex()).unwrap(), s);
        assert!(Secret::from_hex("abc").is_err());
        assert!(Secret::from_hex(&"zz".repeat(32)).is_err());
    }
}
