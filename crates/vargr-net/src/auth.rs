//! Mutual HMAC-SHA256 challenge-response on every new connection, and the session keys
//! that protect every frame after it.
//!
//! Each network has a random 32-byte secret. The acceptor sends a nonce nA; the connector
//! answers with its identity, its own nonce nC, the protection it wants (see
//! [`crate::seal`]) and `HMAC(secret, "vargr-c2" | nA | nC | id | wish)`; the acceptor
//! checks it, settles on the stronger of both wishes and answers with that choice and
//! `HMAC(secret, "vargr-a2" | nC | nA | id | wish | choice)`, so the connector knows it
//! reached the right network and that nobody lowered the protection on the way. Both then
//! derive one key per direction with HKDF-SHA256 (salt nA | nC, the secret as input key,
//! the id and the choice as info): a relay that forwards the handshake learns nothing it
//! can use to speak afterwards. Nothing else is accepted on a link before this completes.
//!
//! [`Acceptor`] and [`Connector`] are the sans-IO halves; [`accept`] and [`connect`] drive
//! them over a blocking [`Conn`] with one deadline for the whole exchange, so a peer that
//! trickles bytes cannot hold a listener longer than that.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use vargr_wire::{decode_frame, encode_frame, Frame, FrameKind};

use crate::seal::{LinkSecurity, Protection, Session};
use crate::secure::{read_frame_by, SecureConn};
use crate::{Conn, NetError};

pub const SECRET_LEN: usize = 32;
const NONCE_LEN: usize = 32;
const MAC_LEN: usize = 32;
/// Handshake frames are tiny; anything bigger is not a vargr peer.
const MAX_HANDSHAKE: usize = 1024;
const PROOF_LEN: usize = 4 + NONCE_LEN + 1 + MAC_LEN;
const WELCOME_LEN: usize = 1 + MAC_LEN;

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
    /// The keys of one connection: (connector → acceptor, acceptor → connector).
    fn session_keys(
        &self,
        nonce_a: &[u8],
        nonce_c: &[u8],
        id: &[u8],
        choice: Protection,
    ) -> ([u8; 32], [u8; 32]) {
        let mut salt = [0u8; 2 * NONCE_LEN];
        salt[..NONCE_LEN].copy_from_slice(nonce_a);
        salt[NONCE_LEN..].copy_from_slice(nonce_c);
        let kdf = hkdf::Hkdf::<Sha256>::new(Some(&salt), &self.0);
        let mut okm = [0u8; 64];
        kdf.expand_multi_info(&[b"vargr-session-v2", id, &[choice as u8]], &mut okm)
            .expect("64 bytes is within HKDF-SHA256's output limit");
        let mut c2a = [0u8; 32];
        let mut a2c = [0u8; 32];
        c2a.copy_from_slice(&okm[..32]);
        a2c.copy_from_slice(&okm[32..]);
        (c2a, a2c)
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
    wish: Protection,
}

/// A handshake that succeeded, as the acceptor sees it.
#[derive(Debug)]
pub struct Accepted {
    /// The node id (or rank) the connector proved.
    pub node: u32,
    pub session: Session,
    /// The Welcome frame to send.
    pub welcome: Frame,
}

impl Acceptor {
    /// `wish` is the protection this end asks for; the connector may ask for more.
    pub fn new(secret: Secret, wish: Protection) -> (Acceptor, Frame) {
        let n = nonce();
        (
            Acceptor {
                secret,
                nonce: n,
                wish,
            },
            Frame::new(FrameKind::Challenge, 0, 0, Bytes::copy_from_slice(&n)),
        )
    }

    /// Checks the connector's proof. On success returns its node id, the session and the
    /// Welcome frame; on failure the reason and the Refused frame to send before closing.
    pub fn on_proof(&self, f: &Frame) -> Result<Accepted, (AuthFailure, Frame)> {
        let refuse = |fail: AuthFailure, why: &str| {
            (
                fail,
                Frame::new(FrameKind::Refused, 0, 0, Bytes::from(why.to_string())),
            )
        };
        if f.kind != FrameKind::Proof || f.payload.len() != PROOF_LEN {
            let why = format!(
                "expected a {PROOF_LEN}-byte Proof frame, got {} ({} bytes)",
                f.kind.name(),
                f.payload.len()
            );
            return Err(refuse(AuthFailure::Protocol(why.clone()), &why));
        }
        let p = &f.payload;
        let id = &p[..4];
        let theirs = &p[4..4 + NONCE_LEN];
        let wish = &p[4 + NONCE_LEN..4 + NONCE_LEN + 1];
        let tag = &p[4 + NONCE_LEN + 1..];
        if !self
            .secret
            .verify(b"vargr-c2", &[&self.nonce, theirs, id, wish], tag)
        {
            return Err(refuse(AuthFailure::WrongSecret, "wrong secret"));
        }
        let Some(their_wish) = Protection::from_u8(wish[0]) else {
            let why = format!("unknown protection {} asked for", wish[0]);
            return Err(refuse(AuthFailure::Protocol(why.clone()), &why));
        };
        let choice = their_wish.max(self.wish);
        let node = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
        let c = [choice as u8];
        let mac = self
            .secret
            .mac(b"vargr-a2", &[theirs, &self.nonce, id, wish, &c]);
        let (c2a, a2c) = self.secret.session_keys(&self.nonce, theirs, id, choice);
        let mut w = BytesMut::with_capacity(WELCOME_LEN);
        w.put_u8(choice as u8);
        w.put_slice(&mac);
        Ok(Accepted {
            node,
            session: Session::new(choice, a2c, c2a),
            welcome: Frame::new(FrameKind::Welcome, 0, 0, w.freeze()),
        })
    }
}

/// The connecting side's state.
pub struct Connector {
    secret: Secret,
    node: u32,
    nonce: [u8; NONCE_LEN],
    wish: Protection,
    their_nonce: Option<Vec<u8>>,
}

impl Connector {
    pub fn new(secret: Secret, node: u32, wish: Protection) -> Connector {
        Connector {
            secret,
            node,
            nonce: nonce(),
            wish,
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
        let wish = [self.wish as u8];
        let mac = self
            .secret
            .mac(b"vargr-c2", &[&f.payload, &self.nonce, &id, &wish]);
        self.their_nonce = Some(f.payload.to_vec());
        let mut p = BytesMut::with_capacity(PROOF_LEN);
        p.put_slice(&id);
        p.put_slice(&self.nonce);
        p.put_slice(&wish);
        p.put_slice(&mac);
        Ok(Frame::new(FrameKind::Proof, 0, 0, p.freeze()))
    }

    /// Checks the acceptor's answer and returns this end's session.
    pub fn on_welcome(&self, f: &Frame) -> Result<Session, AuthFailure> {
        match f.kind {
            FrameKind::Refused => Err(AuthFailure::Refused(
                String::from_utf8_lossy(&f.payload).into_owned(),
            )),
            FrameKind::Welcome if f.payload.len() == WELCOME_LEN => {
                let theirs = self
                    .their_nonce
                    .as_deref()
                    .ok_or_else(|| AuthFailure::Protocol("Welcome before Challenge".into()))?;
                let id = self.node.to_le_bytes();
                let wish = [self.wish as u8];
                let c = &f.payload[..1];
                if !self.secret.verify(
                    b"vargr-a2",
                    &[&self.nonce, theirs, &id, &wish, c],
                    &f.payload[1..],
                ) {
                    return Err(AuthFailure::WrongSecret);
                }
                let choice = Protection::from_u8(c[0])
                    .filter(|&p| p >= self.wish)
                    .ok_or_else(|| {
                        AuthFailure::Protocol(format!(
                            "the acceptor chose protection {} below the {} asked for",
                            c[0],
                            self.wish.name()
                        ))
                    })?;
                let (c2a, a2c) = self.secret.session_keys(theirs, &self.nonce, &id, choice);
                Ok(Session::new(choice, c2a, a2c))
            }
            k => Err(AuthFailure::Protocol(format!(
                "expected Welcome, got {} ({} bytes)",
                k.name(),
                f.payload.len()
            ))),
        }
    }
}

/// The handshake's reads: plain frames, every one within the one deadline.
struct HandshakeReads<'a> {
    peer: &'a str,
    started: Instant,
    deadline: Instant,
    plain: crate::seal::Opener,
}

impl HandshakeReads<'_> {
    fn new(peer: &str, timeout: Duration) -> HandshakeReads<'_> {
        let started = Instant::now();
        HandshakeReads {
            peer,
            started,
            deadline: started + timeout,
            plain: Session::unprotected().split().1,
        }
    }

    fn next(&mut self, conn: &mut Conn) -> Result<Frame, NetError> {
        let (peer, started, deadline) = (self.peer, self.started, self.deadline);
        let what = "the handshake";
        read_frame_by(
            conn,
            &mut self.plain,
            MAX_HANDSHAKE,
            peer,
            what,
            started,
            deadline,
        )
    }
}

/// Fills `buf`, giving each read only the time left before `deadline`: a peer sending
/// one byte at a time cannot stretch the wait.
pub(crate) fn read_exact_by(
    conn: &mut Conn,
    mut buf: &mut [u8],
    peer: &str,
    what: &'static str,
    started: Instant,
    deadline: Instant,
) -> Result<(), NetError> {
    let timeout = || NetError::Timeout {
        what,
        peer: peer.into(),
        after_ms: started.elapsed().as_millis() as u64,
    };
    while !buf.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timeout());
        }
        // A zero timeout would mean "block for ever" to the socket.
        conn.set_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(|e| NetError::io("configuring", peer, e))?;
        match conn.read(buf) {
            Ok(0) => {
                return Err(NetError::io(
                    "reading from",
                    peer,
                    std::io::ErrorKind::UnexpectedEof.into(),
                ))
            }
            Ok(n) => buf = &mut buf[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timeout())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(NetError::io("reading from", peer, e)),
        }
    }
    Ok(())
}

/// Writes one frame to a blocking connection (handshake frames only: every later frame
/// goes through a [`SecureConn`]).
fn write_frame(conn: &mut Conn, f: &Frame, peer: &str) -> Result<(), NetError> {
    let mut out = BytesMut::new();
    encode_frame(f, &mut out);
    conn.write_all(&out)
        .map_err(|e| NetError::io("writing to", peer, e))
}

/// Runs the accepting side of the handshake, all of it within `timeout`; returns the
/// connector's node id and the protected connection.
pub fn accept(
    mut conn: Conn,
    secret: &Secret,
    security: LinkSecurity,
    timeout: Duration,
) -> Result<(u32, SecureConn), NetError> {
    let peer = conn.peer_name();
    let mut reads = HandshakeReads::new(&peer, timeout);
    conn.set_timeout(Some(timeout))
        .map_err(|e| NetError::io("configuring", &peer, e))?;
    let (acc, challenge) = Acceptor::new(secret.clone(), security.wish(conn.reach()));
    write_frame(&mut conn, &challenge, &peer)?;
    let proof = reads.next(&mut conn)?;
    match acc.on_proof(&proof) {
        Ok(a) => {
            write_frame(&mut conn, &a.welcome, &peer)?;
            Ok((a.node, SecureConn::new(conn, &a.session, peer)))
        }
        Err((fail, refused)) => {
            let _ = write_frame(&mut conn, &refused, &peer);
            Err(fail.into_net(&peer))
        }
    }
}

/// Runs the connecting side of the handshake as node `node`, all of it within `timeout`.
pub fn connect(
    mut conn: Conn,
    secret: &Secret,
    node: u32,
    security: LinkSecurity,
    timeout: Duration,
    peer: &str,
) -> Result<SecureConn, NetError> {
    let mut reads = HandshakeReads::new(peer, timeout);
    conn.set_timeout(Some(timeout))
        .map_err(|e| NetError::io("configuring", peer, e))?;
    let mut c = Connector::new(secret.clone(), node, security.wish(conn.reach()));
    let challenge = reads.next(&mut conn)?;
    let proof = c.on_challenge(&challenge).map_err(|f| f.into_net(peer))?;
    write_frame(&mut conn, &proof, peer)?;
    let welcome = reads.next(&mut conn)?;
    let session = c.on_welcome(&welcome).map_err(|f| f.into_net(peer))?;
    Ok(SecureConn::new(conn, &session, peer.to_string()))
}

/// Every handshake decoder, for the fuzz target (`link_seal`).
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Hands every frame in `data` to both sides of a handshake in every state.
    pub fn handshake(data: &[u8]) {
        let s = Secret([3; SECRET_LEN]);
        let mut buf = BytesMut::from(data);
        while let Ok(Some(f)) = decode_frame(&mut buf, MAX_HANDSHAKE) {
            let (acc, ch) = Acceptor::new(s.clone(), Protection::Mac);
            let _ = acc.on_proof(&f);
            let mut con = Connector::new(s.clone(), 1, Protection::Mac);
            let _ = con.on_challenge(&f);
            let _ = con.on_welcome(&f);
            let _ = con.on_challenge(&ch);
            let _ = con.on_welcome(&f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_secrets_agree_and_name_the_node() {
        let s = Secret::random();
        for (a, c) in [
            (Protection::None, Protection::None),
            (Protection::Mac, Protection::None),
            (Protection::None, Protection::Encrypt),
        ] {
            let (acc, ch) = Acceptor::new(s.clone(), a);
            let mut con = Connector::new(s.clone(), 42, c);
            let proof = con.on_challenge(&ch).unwrap();
            let got = acc.on_proof(&proof).map_err(|e| e.0).unwrap();
            assert_eq!(got.node, 42);
            let mine = con.on_welcome(&got.welcome).unwrap();
            assert_eq!(mine.protection(), a.max(c));
            assert_eq!(got.session.protection(), a.max(c));
            // Each end opens what the other seals.
            let (mut seal_c, mut open_c) = mine.split();
            let (mut seal_a, mut open_a) = got.session.split();
            let f = Frame::new(FrameKind::Data, 1, 2, b"x".to_vec());
            for (s, o) in [(&mut seal_c, &mut open_a), (&mut seal_a, &mut open_c)] {
                let mut wire = BytesMut::new();
                s.seal_frame(&f, &mut wire);
                assert_eq!(o.open(&mut wire, 100).unwrap(), Some(f.clone()));
            }
        }
    }

    #[test]
    fn a_lowered_choice_is_detected() {
        let s = Secret::random();
        let (acc, ch) = Acceptor::new(s.clone(), Protection::None);
        let mut con = Connector::new(s, 1, Protection::Encrypt);
        let proof = con.on_challenge(&ch).unwrap();
        let got = acc.on_proof(&proof).map_err(|e| e.0).unwrap();
        let mut w = got.welcome.payload.to_vec();
        w[0] = Protection::None as u8;
        let bad = Frame::new(FrameKind::Welcome, 0, 0, w);
        assert_eq!(con.on_welcome(&bad).unwrap_err(), AuthFailure::WrongSecret);
    }

    #[test]
    fn a_wish_lowered_in_the_proof_is_detected() {
        let s = Secret::random();
        let (acc, ch) = Acceptor::new(s.clone(), Protection::None);
        let mut con = Connector::new(s, 1, Protection::Encrypt);
        let proof = con.on_challenge(&ch).unwrap();
        let mut p = proof.payload.to_vec();
        p[4 + NONCE_LEN] = Protection::None as u8;
        let bad = Frame::new(FrameKind::Proof, 0, 0, p);
        assert_eq!(acc.on_proof(&bad).unwrap_err().0, AuthFailure::WrongSecret);
    }

    #[test]
    fn wrong_secret_is_refused_on_both_sides() {
        let (acc, ch) = Acceptor::new(Secret::random(), Protection::Mac);
        let mut con = Connector::new(Secret::random(), 1, Protection::Mac);
        let proof = con.on_challenge(&ch).unwrap();
        let (fail, refused) = acc.on_proof(&proof).unwrap_err();
        assert_eq!(fail, AuthFailure::WrongSecret);
        assert_eq!(
            con.on_welcome(&refused).unwrap_err(),
            AuthFailure::Refused("wrong secret".into())
        );
    }

    #[test]
    fn impostor_acceptor_is_detected() {
        let s = Secret::random();
        let (_, ch) = Acceptor::new(s.clone(), Protection::Mac);
        let mut con = Connector::new(s, 1, Protection::Mac);
        con.on_challenge(&ch).unwrap();
        let forged = Frame::new(FrameKind::Welcome, 0, 0, vec![1u8; WELCOME_LEN]);
        assert_eq!(
            con.on_welcome(&forged).unwrap_err(),
            AuthFailure::WrongSecret
        );
    }

    #[test]
    fn tampered_node_id_fails() {
        let s = Secret::random();
        let (acc, ch) = Acceptor::new(s.clone(), Protection::Mac);
        let mut con = Connector::new(s, 7, Protection::Mac);
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
