//! The server's side of a connection, as a sans-IO state machine: what a server (or
//! the near proxy) speaks to a viewer.
//!
//! The server's version goes out at creation; bytes from the viewer go in through
//! [`ServerSide::receive`], [`ServerSide::poll_event`] decodes them and answers the
//! handshake, and [`ServerSide::take_output`] gives the bytes for the viewer. The
//! caller supplies VNC authentication's random challenge (this crate draws no random
//! numbers) and, once the viewer's ClientInit came, the ServerInit.

use bytes::BytesMut;

use crate::handshake::{
    read_version_numbers, security, ClientInit, SecurityChoice, SecurityOffer, SecurityResult,
    ServerInit, VncChallenge, VncResponse,
};
use crate::msg::{ClientMsg, ServerMsg};
use crate::wire::decode_front;
use crate::{vnc_auth_response, Limits, PixelFormat, ProtocolVersion, RfbError};

/// How the server negotiates.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The version announced: the highest spoken.
    pub max_version: ProtocolVersion,
    /// Security types offered, preferred first (None and VNC authentication). A 3.3
    /// client gets the first.
    pub security_types: Vec<u8>,
    /// Checks VNC authentication's response; without it the response comes out as
    /// [`ServerEvent::AuthResponse`] and the caller decides ([`ServerSide::finish_auth`]).
    pub password: Option<Vec<u8>>,
    /// VNC authentication's challenge: 16 random bytes, new for every connection.
    pub challenge: [u8; 16],
    pub limits: Limits,
}

/// What the viewer's bytes meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    Version(ProtocolVersion),
    Security(u8),
    /// VNC authentication's response, when no password is configured.
    AuthResponse {
        challenge: VncChallenge,
        response: VncResponse,
    },
    /// Send the ServerInit now ([`ServerSide::send_server_init`]).
    ClientInit(ClientInit),
    Message(ClientMsg),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Version,
    SecurityChoice,
    Response,
    AwaitVerdict,
    ClientInit,
    AwaitServerInit,
    Normal,
    Failed,
}

/// A server's connection state.
pub struct ServerSide {
    config: ServerConfig,
    state: State,
    version: ProtocolVersion,
    input: BytesMut,
    output: BytesMut,
    pixel_format: Option<PixelFormat>,
    encodings: Vec<i32>,
    error: Option<RfbError>,
}

impl ServerSide {
    /// Queues the server's version, the first bytes of a connection.
    pub fn new(config: ServerConfig) -> ServerSide {
        let mut output = BytesMut::new();
        config.max_version.encode(&mut output);
        ServerSide {
            version: config.max_version,
            config,
            state: State::Version,
            input: BytesMut::new(),
            output,
            pixel_format: None,
            encodings: Vec::new(),
            error: None,
        }
    }

    pub fn receive(&mut self, bytes: &[u8]) {
        self.input.extend_from_slice(bytes);
    }

    pub fn take_output(&mut self) -> BytesMut {
        self.output.split()
    }

    /// Bytes received and not yet handled: after [`ServerSide::poll_event`] has
    /// returned `None`, the start of a message still incomplete.
    pub fn pending_input(&self) -> usize {
        self.input.len()
    }

    pub fn version(&self) -> ProtocolVersion {
        self.version
    }

    pub fn is_ready(&self) -> bool {
        self.state == State::Normal
    }

    /// The pixel format the viewer wants updates in (ServerInit's until it sets one).
    pub fn pixel_format(&self) -> Option<PixelFormat> {
        self.pixel_format
    }

    /// The encodings the viewer accepts, preferred first (Raw is always accepted).
    pub fn encodings(&self) -> &[i32] {
        &self.encodings
    }

    /// The verdict on a [`ServerEvent::AuthResponse`].
    pub fn finish_auth(&mut self, ok: bool, reason: &str) -> Result<(), RfbError> {
        if self.state != State::AwaitVerdict {
            return Err(RfbError::WrongState("finish_auth"));
        }
        self.verdict(ok, reason)
    }

    fn verdict(&mut self, ok: bool, reason: &str) -> Result<(), RfbError> {
        if ok {
            SecurityResult::Ok.encode(self.version, &mut self.output);
            self.state = State::ClientInit;
            Ok(())
        } else {
            SecurityResult::Failed(reason.as_bytes().to_vec())
                .encode(self.version, &mut self.output);
            self.fail(RfbError::Refused {
                stage: "authentication",
                reason: reason.into(),
            })
        }
    }

    fn fail(&mut self, e: RfbError) -> Result<(), RfbError> {
        self.state = State::Failed;
        self.error = Some(e.clone());
        Err(e)
    }

    /// Sends ServerInit after [`ServerEvent::ClientInit`]; its pixel format is the
    /// viewer's until it sends SetPixelFormat.
    pub fn send_server_init(&mut self, init: &ServerInit) -> Result<(), RfbError> {
        if self.state != State::AwaitServerInit {
            return Err(RfbError::WrongState("send_server_init"));
        }
        init.encode(&mut self.output);
        self.pixel_format = Some(init.pixel_format);
        self.state = State::Normal;
        Ok(())
    }

    /// Queues a message to the viewer.
    pub fn send(&mut self, msg: &ServerMsg) -> Result<(), RfbError> {
        if self.state != State::Normal {
            return Err(RfbError::WrongState("send before ServerInit"));
        }
        msg.encode(&mut self.output);
        Ok(())
    }

    /// Decodes the next event, or `None` until more bytes arrive. An error ends the
    /// connection (a failed authentication leaves its SecurityResult in the output).
    pub fn poll_event(&mut self) -> Result<Option<ServerEvent>, RfbError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let r = self.step();
        if let Err(e) = &r {
            self.state = State::Failed;
            self.error = Some(e.clone());
        }
        r
    }

    fn step(&mut self) -> Result<Option<ServerEvent>, RfbError> {
        let limits = &self.config.limits;
        match self.state {
            State::Version => {
                let Some((major, minor)) = decode_front(&mut self.input, read_version_numbers)?
                else {
                    return Ok(None);
                };
                let theirs = ProtocolVersion::from_numbers(major, minor)?;
                if theirs > self.config.max_version {
                    return Err(RfbError::UnsupportedVersion { major, minor });
                }
                self.version = theirs;
                let types: Vec<u8> = self
                    .config
                    .security_types
                    .iter()
                    .copied()
                    .filter(|t| matches!(*t, security::NONE | security::VNC_AUTH))
                    .collect();
                if types.is_empty() {
                    return Err(RfbError::NoCommonSecurity { offered: types });
                }
                if theirs == ProtocolVersion::V3_3 {
                    // The server alone decides in 3.3.
                    SecurityOffer::Types(vec![types[0]]).encode(theirs, &mut self.output)?;
                    self.security(types[0]);
                } else {
                    SecurityOffer::Types(types).encode(theirs, &mut self.output)?;
                    self.state = State::SecurityChoice;
                }
                Ok(Some(ServerEvent::Version(theirs)))
            }
            State::SecurityChoice => {
                let Some(SecurityChoice(t)) = SecurityChoice::decode(&mut self.input)? else {
                    return Ok(None);
                };
                if !self.config.security_types.contains(&t)
                    || !matches!(t, security::NONE | security::VNC_AUTH)
                {
                    let reason = format!("security type {t} was not offered");
                    SecurityResult::Failed(reason.clone().into_bytes())
                        .encode(self.version, &mut self.output);
                    return Err(RfbError::Refused {
                        stage: "security",
                        reason,
                    });
                }
                self.security(t);
                if t == security::NONE && self.version == ProtocolVersion::V3_8 {
                    SecurityResult::Ok.encode(self.version, &mut self.output);
                }
                Ok(Some(ServerEvent::Security(t)))
            }
            State::Response => {
                let Some(response) = VncResponse::decode(&mut self.input)? else {
                    return Ok(None);
                };
                let challenge = VncChallenge(self.config.challenge);
                match &self.config.password {
                    Some(pw) => {
                        let ok = vnc_auth_response(pw, &challenge.0) == response.0;
                        self.verdict(ok, "authentication failed")?;
                        self.step()
                    }
                    None => {
                        self.state = State::AwaitVerdict;
                        Ok(Some(ServerEvent::AuthResponse {
                            challenge,
                            response,
                        }))
                    }
                }
            }
            State::AwaitVerdict | State::AwaitServerInit => Ok(None),
            State::ClientInit => {
                let Some(init) = ClientInit::decode(&mut self.input)? else {
                    return Ok(None);
                };
                self.state = State::AwaitServerInit;
                Ok(Some(ServerEvent::ClientInit(init)))
            }
            State::Normal => {
                let Some(msg) = ClientMsg::decode(&mut self.input, limits)? else {
                    return Ok(None);
                };
                match &msg {
                    ClientMsg::SetPixelFormat(pf) => {
                        pf.validate()?;
                        self.pixel_format = Some(*pf);
                    }
                    ClientMsg::SetEncodings(list) => self.encodings = list.clone(),
                    _ => {}
                }
                Ok(Some(ServerEvent::Message(msg)))
            }
            State::Failed => Err(RfbError::WrongState("poll_event after a failure")),
        }
    }

    /// Moves past the security type's choice: a challenge for VNC authentication.
    fn security(&mut self, t: u8) {
        if t == security::VNC_AUTH {
            VncChallenge(self.config.challenge).encode(&mut self.output);
            self.state = State::Response;
        } else {
            self.state = State::ClientInit;
        }
    }
}
