//! The client's side of a connection, as a sans-IO state machine: what a viewer (or
//! the far proxy) speaks to a server.
//!
//! Bytes from the server go in through [`ClientSide::receive`]; [`ClientSide::poll_event`]
//! decodes what they complete, answering the handshake on its own; bytes for the
//! server come out of [`ClientSide::take_output`]. No sockets, no clock: a proxy, a
//! test or a fuzz target drives it the same way.

use bytes::BytesMut;

use crate::handshake::{
    read_version_numbers, security, ClientInit, SecurityChoice, SecurityOffer, SecurityResult,
    ServerInit, VncChallenge, VncResponse,
};
use crate::msg::{ClientMsg, ServerMsg, UpdateContext};
use crate::wire::decode_front;
use crate::{vnc_auth_response, Limits, PixelFormat, ProtocolVersion, RfbError};

/// How the client negotiates.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The highest version to speak.
    pub max_version: ProtocolVersion,
    /// Security types accepted, preferred first.
    pub security_types: Vec<u8>,
    /// Answers VNC authentication's challenge; without it the challenge comes out as
    /// [`ClientEvent::Challenge`] (a proxy relays it to its viewer).
    pub password: Option<Vec<u8>>,
    /// ClientInit's shared flag.
    pub shared: bool,
    pub limits: Limits,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            max_version: ProtocolVersion::V3_8,
            security_types: vec![security::VNC_AUTH, security::NONE],
            password: None,
            shared: true,
            limits: Limits::default(),
        }
    }
}

/// What the server's bytes meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// The version both sides now speak.
    Version(ProtocolVersion),
    /// The security type in use.
    Security(u8),
    /// VNC authentication's challenge, when no password is configured: answer with
    /// [`ClientSide::answer_challenge`].
    Challenge(VncChallenge),
    /// The handshake is over.
    ServerInit(ServerInit),
    Message(ServerMsg),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Version,
    Security,
    Challenge,
    AwaitAnswer,
    SecurityResult,
    ServerInit,
    Normal,
    Failed,
}

/// A client's connection state.
pub struct ClientSide {
    config: ClientConfig,
    state: State,
    version: ProtocolVersion,
    input: BytesMut,
    output: BytesMut,
    /// Bytes the next message needs at least: no parsing below that.
    want: usize,
    ctx: Option<UpdateContext>,
    error: Option<RfbError>,
}

impl ClientSide {
    pub fn new(config: ClientConfig) -> ClientSide {
        ClientSide {
            version: config.max_version,
            config,
            state: State::Version,
            input: BytesMut::new(),
            output: BytesMut::new(),
            want: 0,
            ctx: None,
            error: None,
        }
    }

    /// Bytes from the server.
    pub fn receive(&mut self, bytes: &[u8]) {
        self.input.extend_from_slice(bytes);
    }

    /// Bytes received and not yet handled: after [`ClientSide::poll_event`] has
    /// returned `None`, the start of a message still incomplete.
    pub fn pending_input(&self) -> usize {
        self.input.len()
    }

    /// Bytes to send to the server (empties the queue).
    pub fn take_output(&mut self) -> BytesMut {
        self.output.split()
    }

    /// The negotiated version (the configured maximum until the server's is known).
    pub fn version(&self) -> ProtocolVersion {
        self.version
    }

    /// The pixel format and size updates are decoded with, once ServerInit came.
    pub fn context(&self) -> Option<&UpdateContext> {
        self.ctx.as_ref()
    }

    /// Whether the handshake is over and messages flow.
    pub fn is_ready(&self) -> bool {
        self.state == State::Normal
    }

    /// The response to a [`ClientEvent::Challenge`].
    pub fn answer_challenge(&mut self, response: VncResponse) -> Result<(), RfbError> {
        if self.state != State::AwaitAnswer {
            return Err(RfbError::WrongState("answer_challenge"));
        }
        response.encode(&mut self.output);
        self.state = State::SecurityResult;
        Ok(())
    }

    /// Queues a message to the server. SetPixelFormat must be a usable format, and
    /// changes how every later update is decoded: send it while no update request is
    /// outstanding, since an update already on its way is in the old format.
    pub fn send(&mut self, msg: &ClientMsg) -> Result<(), RfbError> {
        let Some(ctx) = self.ctx.as_mut().filter(|_| self.state == State::Normal) else {
            return Err(RfbError::WrongState("send before ServerInit"));
        };
        if let ClientMsg::SetPixelFormat(pf) = msg {
            pf.validate()?;
            ctx.pixel_format = *pf;
        }
        msg.encode(&mut self.output);
        Ok(())
    }

    /// Asks for the whole framebuffer, at its size as the server last gave it (what a
    /// viewer and the far proxy ask for after every update).
    pub fn request_screen(&mut self, incremental: bool) -> Result<(), RfbError> {
        let Some(ctx) = &self.ctx else {
            return Err(RfbError::WrongState("send before ServerInit"));
        };
        let (width, height) = (ctx.width, ctx.height);
        self.send(&ClientMsg::FramebufferUpdateRequest {
            incremental,
            x: 0,
            y: 0,
            width,
            height,
        })
    }

    /// Decodes the next event from the bytes received, or `None` until more arrive.
    /// An error ends the connection: every later call returns it again.
    pub fn poll_event(&mut self) -> Result<Option<ClientEvent>, RfbError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.input.len() < self.want {
            return Ok(None);
        }
        self.want = 0;
        let r = self.step();
        if let Err(e) = &r {
            self.state = State::Failed;
            self.error = Some(e.clone());
        }
        r
    }

    fn step(&mut self) -> Result<Option<ClientEvent>, RfbError> {
        let limits = &self.config.limits;
        match self.state {
            State::Version => {
                let Some((major, minor)) = decode_front(&mut self.input, read_version_numbers)?
                else {
                    return Ok(None);
                };
                // A newer server speaks the older versions too (§7.1.1).
                let theirs = if (major, minor) > (3, 8) {
                    ProtocolVersion::V3_8
                } else {
                    ProtocolVersion::from_numbers(major, minor)?
                };
                self.version = theirs.min(self.config.max_version);
                self.version.encode(&mut self.output);
                self.state = State::Security;
                Ok(Some(ClientEvent::Version(self.version)))
            }
            State::Security => {
                let Some(offer) = SecurityOffer::decode(&mut self.input, self.version, limits)?
                else {
                    return Ok(None);
                };
                let types = match offer {
                    SecurityOffer::Types(t) => t,
                    SecurityOffer::Refused(reason) => {
                        return Err(RfbError::Refused {
                            stage: "connection",
                            reason: String::from_utf8_lossy(&reason).into_owned(),
                        })
                    }
                };
                let chosen = self
                    .config
                    .security_types
                    .iter()
                    .copied()
                    .find(|t| {
                        types.contains(t) && matches!(*t, security::NONE | security::VNC_AUTH)
                    })
                    .ok_or(RfbError::NoCommonSecurity { offered: types })?;
                if self.version != ProtocolVersion::V3_3 {
                    SecurityChoice(chosen).encode(&mut self.output);
                }
                self.state = match (chosen, self.version) {
                    (security::VNC_AUTH, _) => State::Challenge,
                    (_, ProtocolVersion::V3_8) => State::SecurityResult,
                    _ => self.client_init(),
                };
                Ok(Some(ClientEvent::Security(chosen)))
            }
            State::Challenge => {
                let Some(challenge) = VncChallenge::decode(&mut self.input)? else {
                    return Ok(None);
                };
                match &self.config.password {
                    Some(pw) => {
                        VncResponse(vnc_auth_response(pw, &challenge.0)).encode(&mut self.output);
                        self.state = State::SecurityResult;
                        self.step()
                    }
                    None => {
                        self.state = State::AwaitAnswer;
                        Ok(Some(ClientEvent::Challenge(challenge)))
                    }
                }
            }
            State::AwaitAnswer => Ok(None),
            State::SecurityResult => {
                match SecurityResult::decode(&mut self.input, self.version, limits)? {
                    None => Ok(None),
                    Some(SecurityResult::Ok) => {
                        self.state = self.client_init();
                        self.step()
                    }
                    Some(SecurityResult::Failed(reason)) => Err(RfbError::Refused {
                        stage: "authentication",
                        reason: String::from_utf8_lossy(&reason).into_owned(),
                    }),
                }
            }
            State::ServerInit => {
                let Some(init) = ServerInit::decode(&mut self.input, limits)? else {
                    return Ok(None);
                };
                self.ctx = Some(UpdateContext {
                    pixel_format: init.pixel_format,
                    width: init.width,
                    height: init.height,
                });
                self.state = State::Normal;
                Ok(Some(ClientEvent::ServerInit(init)))
            }
            State::Normal => {
                let ctx = self.ctx.as_mut().expect("set with ServerInit");
                match ServerMsg::decode_want(&mut self.input, ctx, limits)? {
                    Ok(m) => Ok(Some(ClientEvent::Message(m))),
                    Err(want) => {
                        self.want = want;
                        Ok(None)
                    }
                }
            }
            State::Failed => Err(RfbError::WrongState("poll_event after a failure")),
        }
    }

    fn client_init(&mut self) -> State {
        ClientInit {
            shared: self.config.shared,
        }
        .encode(&mut self.output);
        State::ServerInit
    }

    /// The server's pixel format must be usable before updates in it are decoded; a
    /// client whose server uses a colour map sends SetPixelFormat first.
    pub fn pixel_format(&self) -> Option<PixelFormat> {
        self.ctx.as_ref().map(|c| c.pixel_format)
    }
}
