//! The near side: an RFB server to each viewer, fed from a mirror of the far side's
//! shadow.
//!
//! Viewers are independent: each has its own pixel format, encodings, zlib stream
//! and set of areas not yet sent, so a slow viewer does not hold back a fast one and
//! one that breaks the protocol ends alone. A viewer gets bytes only in answer to
//! its own update request, so what waits for a viewer that stops reading is one
//! update, not a growing queue.

use std::collections::{BTreeMap, VecDeque};

use bytes::BytesMut;
use vargr_rfb::encoding::{COPY_RECT, DESKTOP_SIZE, HEXTILE, RAW, RRE, TIGHT, ZRLE};
use vargr_rfb::{
    security, ClientMsg, Encoder, Framebuffer, PixelFormat, ProtocolVersion, Rect, ServerConfig,
    ServerEvent, ServerInit, ServerMsg, ServerSide,
};

use crate::dirty::Dirty;
use crate::{ProxyLimits, ProxyMsg, VncError};

/// Above this many rectangles an update is sent as their bounding box: RFB counts
/// rectangles in a u16, and each costs a header and an encoder restart.
const MAX_RECTS: usize = 1024;

#[derive(Debug, Clone, Default)]
pub struct NearConfig {
    /// Bounds on what the far side sends (`rfb` also bounds the viewers).
    pub limits: ProxyLimits,
    /// Viewers must answer VNC authentication with this password (else security
    /// None: listen only where the viewers are trusted).
    pub password: Option<Vec<u8>>,
}

/// A viewer, as numbered by [`NearSide::add_viewer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViewerId(pub u64);

struct Viewer {
    rfb: ServerSide,
    encoder: Encoder,
    /// Areas not yet sent; set once the viewer has its ServerInit.
    dirty: Option<Dirty>,
    /// The outstanding FramebufferUpdateRequest (a newer one replaces it).
    request: Option<(bool, u16, u16, u16, u16)>,
    /// ClientInit came before the far side's Init.
    awaits_init: bool,
    /// A DesktopSize is owed with the next update.
    resized: bool,
    /// A CopyRect owed with the next update, before its other rectangles:
    /// (src x, src y, x, y, width, height).
    copy: Option<(u16, u16, u16, u16, u16, u16)>,
    failed: bool,
    /// The caller's connection to this viewer still has bytes to write: keep its
    /// request for later, so a viewer that stops reading holds one update, no more.
    held: bool,
}

pub struct NearSide {
    limits: ProxyLimits,
    password: Option<Vec<u8>>,
    mirror: Option<Framebuffer>,
    name: Vec<u8>,
    far_in: BytesMut,
    /// Messages from the far side not handled yet.
    far_msgs: VecDeque<ProxyMsg>,
    far_out: BytesMut,
    viewers: BTreeMap<ViewerId, Viewer>,
    next_id: u64,
    /// Viewers that failed in [`NearSide::apply_far`], for the next `process`.
    failed: Vec<(ViewerId, VncError)>,
    error: Option<VncError>,
}

impl NearSide {
    pub fn new(config: NearConfig) -> NearSide {
        NearSide {
            limits: config.limits,
            password: config.password,
            mirror: None,
            name: Vec::new(),
            far_in: BytesMut::new(),
            far_msgs: VecDeque::new(),
            far_out: BytesMut::new(),
            viewers: BTreeMap::new(),
            next_id: 0,
            failed: Vec::new(),
            error: None,
        }
    }

    /// A new viewer connection; its first bytes (the version) are already queued.
    /// Without a password only: VNC authentication needs a fresh challenge
    /// ([`NearSide::add_viewer_with_challenge`]).
    pub fn add_viewer(&mut self) -> ViewerId {
        assert!(
            self.password.is_none(),
            "a viewer of a password-protected near side needs a challenge"
        );
        self.add_viewer_with_challenge([0; 16])
    }

    /// A new viewer connection, challenged with 16 random bytes if a password is set.
    pub fn add_viewer_with_challenge(&mut self, challenge: [u8; 16]) -> ViewerId {
        let id = ViewerId(self.next_id);
        self.next_id += 1;
        let security = match self.password {
            Some(_) => security::VNC_AUTH,
            None => security::NONE,
        };
        let rfb = ServerSide::new(ServerConfig {
            max_version: ProtocolVersion::V3_8,
            security_types: vec![security],
            password: self.password.clone(),
            challenge,
            limits: self.limits.rfb.clone(),
        });
        self.viewers.insert(
            id,
            Viewer {
                rfb,
                encoder: Encoder::new(),
                dirty: None,
                request: None,
                awaits_init: false,
                resized: false,
                copy: None,
                failed: false,
                held: false,
            },
        );
        id
    }

    /// Whether to hold back updates for a viewer (its socket has not taken the last
    /// one yet). Its request waits; what changes meanwhile joins the next update.
    pub fn hold_viewer(&mut self, id: ViewerId, held: bool) -> Result<(), VncError> {
        self.viewer(id)?.held = held;
        Ok(())
    }

    /// Forgets a viewer (its connection closed, or it failed).
    pub fn remove_viewer(&mut self, id: ViewerId) {
        self.viewers.remove(&id);
    }

    pub fn viewers(&self) -> impl Iterator<Item = ViewerId> + '_ {
        self.viewers.keys().copied()
    }

    pub fn receive_viewer(&mut self, id: ViewerId, bytes: &[u8]) -> Result<(), VncError> {
        self.viewer(id)?.rfb.receive(bytes);
        Ok(())
    }

    /// Whether a viewer's handshake is done, and how many of its bytes are the start
    /// of a message not complete yet (after [`NearSide::process`]): what a caller
    /// needs to give a viewer that stops half-way a deadline.
    pub fn viewer_progress(&self, id: ViewerId) -> Result<(bool, usize), VncError> {
        let v = self.viewers.get(&id).ok_or(VncError::NoViewer(id.0))?;
        Ok((v.rfb.is_ready(), v.rfb.pending_input()))
    }

    /// Bytes for a viewer, including a failed one's last words (a refusal).
    pub fn take_viewer_output(&mut self, id: ViewerId) -> Result<BytesMut, VncError> {
        Ok(self.viewer(id)?.rfb.take_output())
    }

    /// Bytes from the far side: [`ProxyMsg`]s in their framing.
    pub fn receive_far(&mut self, bytes: &[u8]) {
        self.far_in.extend_from_slice(bytes);
    }

    /// A message from the far side, already decoded (by the dedup link).
    pub fn receive_far_msg(&mut self, msg: ProxyMsg) {
        self.far_msgs.push_back(msg);
    }

    pub fn take_far_output(&mut self) -> BytesMut {
        self.far_out.split()
    }

    /// The far side's screen as far as its updates have come.
    pub fn mirror(&self) -> Option<&Framebuffer> {
        self.mirror.as_ref()
    }

    fn viewer(&mut self, id: ViewerId) -> Result<&mut Viewer, VncError> {
        self.viewers.get_mut(&id).ok_or(VncError::NoViewer(id.0))
    }

    /// Handles everything received from the far side and the viewers, and answers
    /// the viewers' requests that can be answered. A far side's error ends the whole
    /// session (every later call returns it); the viewers that failed in this call
    /// are returned with their errors, stay silent from then on, and are for the
    /// caller to close and remove.
    pub fn process(&mut self) -> Result<Vec<(ViewerId, VncError)>, VncError> {
        self.apply_far()?;
        let mut failed = std::mem::take(&mut self.failed);
        let ids: Vec<ViewerId> = self.viewers.keys().copied().collect();
        for id in ids {
            if let Err(e) = self.serve(id) {
                self.viewers.get_mut(&id).expect("listed").failed = true;
                failed.push((id, e));
            }
        }
        Ok(failed)
    }

    /// Applies what the far side sent to the mirror without serving the viewers yet
    /// (they are served, and any that failed returned, by the next
    /// [`NearSide::process`]): for a caller that needs the mirror as of one message.
    pub fn apply_far(&mut self) -> Result<(), VncError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let mut failed = std::mem::take(&mut self.failed);
        let r = self.handle_far(&mut failed);
        self.failed = failed;
        if let Err(e) = &r {
            self.error = Some(e.clone());
        }
        r
    }

    fn handle_far(&mut self, failed: &mut Vec<(ViewerId, VncError)>) -> Result<(), VncError> {
        while let Some(msg) = ProxyMsg::decode(&mut self.far_in, &self.limits)? {
            self.far_msgs.push_back(msg);
        }
        while let Some(msg) = self.far_msgs.pop_front() {
            let started = self.mirror.is_some();
            match msg {
                ProxyMsg::Init {
                    width,
                    height,
                    name,
                } if !started => {
                    self.mirror = Some(Framebuffer::new(width, height));
                    self.name = name;
                    // A far side that started before us knows more than it will send.
                    ProxyMsg::Request {
                        x: 0,
                        y: 0,
                        width,
                        height,
                    }
                    .encode(&mut self.far_out);
                }
                ProxyMsg::Update(regions) if started => {
                    let mirror = self.mirror.as_mut().expect("started");
                    for r in &regions {
                        mirror.put_rect(r.x, r.y, r.width, r.height, &r.pixels)?;
                    }
                    for v in self.viewers.values_mut() {
                        if let Some(d) = &mut v.dirty {
                            regions
                                .iter()
                                .for_each(|r| d.mark(r.x, r.y, r.width, r.height));
                        }
                    }
                }
                ProxyMsg::Copy {
                    src_x,
                    src_y,
                    x,
                    y,
                    width,
                    height,
                } if started => {
                    let mirror = self.mirror.as_mut().expect("started");
                    mirror.copy_rect(src_x, src_y, x, y, width, height)?;
                    for v in self.viewers.values_mut() {
                        let Some(d) = &mut v.dirty else { continue };
                        // A viewer that takes CopyRect gets the copy (first in its
                        // next update) and the pixels where its source was stale;
                        // one with a copy pending, the area's pixels.
                        if v.copy.is_none() && !v.resized && v.rfb.encodings().contains(&COPY_RECT)
                        {
                            v.copy = Some((src_x, src_y, x, y, width, height));
                            d.mark_copied(src_x, src_y, x, y, width, height);
                        } else {
                            d.mark(x, y, width, height);
                        }
                    }
                }
                ProxyMsg::Resize { width, height } if started => {
                    self.mirror.as_mut().expect("started").resize(width, height);
                    for (&id, v) in &mut self.viewers {
                        v.copy = None;
                        if v.failed || v.dirty.is_none() {
                            continue;
                        }
                        if v.rfb.encodings().contains(&DESKTOP_SIZE) {
                            v.dirty = Some(Dirty::all(width, height));
                            v.resized = true;
                        } else {
                            v.failed = true;
                            failed.push((id, VncError::ResizeUnsupported { width, height }));
                        }
                    }
                }
                ProxyMsg::Bell if started => self.broadcast(&ServerMsg::Bell)?,
                ProxyMsg::CutText(t) if started => self.broadcast(&ServerMsg::ServerCutText(t))?,
                other => {
                    return Err(VncError::Unexpected {
                        message: other.name(),
                        when: if started {
                            "from the far side"
                        } else {
                            "before Init"
                        },
                    })
                }
            }
        }
        Ok(())
    }

    fn broadcast(&mut self, msg: &ServerMsg) -> Result<(), VncError> {
        for v in self.viewers.values_mut() {
            if !v.failed && v.dirty.is_some() {
                v.rfb.send(msg)?;
            }
        }
        Ok(())
    }

    fn serve(&mut self, id: ViewerId) -> Result<(), VncError> {
        let v = self.viewers.get_mut(&id).expect("listed");
        if v.failed {
            return Ok(());
        }
        while let Some(ev) = v.rfb.poll_event()? {
            match ev {
                ServerEvent::ClientInit(_) => v.awaits_init = true,
                ServerEvent::Message(ClientMsg::FramebufferUpdateRequest {
                    incremental,
                    x,
                    y,
                    width,
                    height,
                }) => v.request = Some((incremental, x, y, width, height)),
                ServerEvent::Message(
                    m @ (ClientMsg::KeyEvent { .. }
                    | ClientMsg::PointerEvent { .. }
                    | ClientMsg::ClientCutText(_)),
                ) => ProxyMsg::Input(m).encode(&mut self.far_out),
                // ServerSide keeps the pixel format and encodings itself.
                ServerEvent::Message(_) | ServerEvent::Version(_) | ServerEvent::Security(_) => {}
                // With a password ServerSide checks the response itself.
                ServerEvent::AuthResponse { .. } => {
                    return Err(VncError::Unexpected {
                        message: "AuthResponse",
                        when: "without a password",
                    })
                }
            }
        }
        let Some(mirror) = &self.mirror else {
            return Ok(());
        };
        if v.awaits_init {
            v.rfb.send_server_init(&ServerInit {
                width: mirror.width(),
                height: mirror.height(),
                pixel_format: PixelFormat::RGB888,
                name: self.name.clone(),
            })?;
            v.awaits_init = false;
            v.dirty = Some(Dirty::all(mirror.width(), mirror.height()));
        }
        if v.held {
            return Ok(());
        }
        let (Some(dirty), Some((incremental, x, y, w, h))) = (&mut v.dirty, v.request) else {
            return Ok(());
        };
        if !incremental {
            dirty.mark(x, y, w, h);
        } else if !v.resized && v.copy.is_none() && !dirty.any(x, y, w, h) {
            return Ok(());
        }
        let mut areas = dirty.take(x, y, w, h);
        if areas.len() > MAX_RECTS {
            areas = vec![bounding_box(&areas)];
        }
        let pf = v.rfb.pixel_format().expect("set at ServerInit");
        let encoding = best_encoding(v.rfb.encodings());
        let mut rects = Vec::with_capacity(areas.len() + 1);
        if v.resized {
            rects.push(Rect::desktop_size(mirror.width(), mirror.height()));
            v.resized = false;
        }
        if let Some((sx, sy, cx, cy, cw, ch)) = v.copy.take() {
            rects.push(Rect::copy_rect(cx, cy, cw, ch, sx, sy));
        }
        for (x, y, w, h) in areas {
            v.encoder
                .encode_into(mirror, encoding, x, y, w, h, &pf, &mut rects)?;
        }
        v.rfb.send(&ServerMsg::FramebufferUpdate(rects))?;
        v.request = None;
        Ok(())
    }
}

/// The viewer's most preferred encoding (it lists them preferred first) among those
/// vargr-rfb can make; Raw if none.
pub fn best_encoding(listed: &[i32]) -> i32 {
    listed
        .iter()
        .copied()
        .find(|e| [ZRLE, TIGHT, HEXTILE, RRE, RAW].contains(e))
        .unwrap_or(RAW)
}

fn bounding_box(areas: &[(u16, u16, u16, u16)]) -> (u16, u16, u16, u16) {
    let x0 = areas.iter().map(|a| a.0).min().unwrap_or(0);
    let y0 = areas.iter().map(|a| a.1).min().unwrap_or(0);
    let x1 = areas.iter().map(|a| a.0 + a.2).max().unwrap_or(0);
    let y1 = areas.iter().map(|a| a.1 + a.3).max().unwrap_or(0);
    (x0, y0, x1 - x0, y1 - y0)
}
