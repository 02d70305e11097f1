//! The far side: one RFB client to the VNC server and a shadow of its screen.
//!
//! The server is asked for RGB888 so the shadow needs no conversion, and for every
//! encoding vargr-rfb decodes (ZRLE and Hextile first, the best on real desktops).
//! One update request is always outstanding: servers answer an incremental request
//! when something changes, so the shadow stays current without polling.

use bytes::BytesMut;
use vargr_rfb::encoding::{COPY_RECT, DESKTOP_SIZE, HEXTILE, RAW, RRE, TIGHT, ZRLE};
use vargr_rfb::{
    ClientConfig, ClientEvent, ClientMsg, ClientSide, Decoder, Framebuffer, PixelFormat, ServerMsg,
};

use crate::{ProxyLimits, ProxyMsg, Region, VncError};

/// Encodings asked of the server, preferred first. Tight is asked without a quality
/// level, so servers send it without JPEG, which vargr-rfb does not decode.
pub const SERVER_ENCODINGS: [i32; 7] = [ZRLE, HEXTILE, TIGHT, RRE, COPY_RECT, RAW, DESKTOP_SIZE];

#[derive(Debug, Clone, Default)]
pub struct FarConfig {
    /// How to reach the server: its password, if it wants one.
    pub client: ClientConfig,
    pub limits: ProxyLimits,
}

pub struct FarSide {
    limits: ProxyLimits,
    rfb: ClientSide,
    decoder: Decoder,
    shadow: Option<Framebuffer>,
    /// Whether an update came since the first (full) request: until then, a
    /// near side's Request is answered by the server's full update anyway.
    updated: bool,
    near_in: BytesMut,
    near_out: BytesMut,
    error: Option<VncError>,
}

impl FarSide {
    pub fn new(config: FarConfig) -> FarSide {
        FarSide {
            decoder: Decoder::new(config.client.limits.clone()),
            rfb: ClientSide::new(config.client),
            limits: config.limits,
            shadow: None,
            updated: false,
            near_in: BytesMut::new(),
            near_out: BytesMut::new(),
            error: None,
        }
    }

    /// Bytes from the VNC server.
    pub fn receive_server(&mut self, bytes: &[u8]) {
        self.rfb.receive(bytes);
    }

    /// Bytes for the VNC server.
    pub fn take_server_output(&mut self) -> BytesMut {
        self.rfb.take_output()
    }

    /// Bytes from the near side.
    pub fn receive_near(&mut self, bytes: &[u8]) {
        self.near_in.extend_from_slice(bytes);
    }

    /// Bytes for the near side.
    pub fn take_near_output(&mut self) -> BytesMut {
        self.near_out.split()
    }

    /// The server's screen as far as its updates have come.
    pub fn shadow(&self) -> Option<&Framebuffer> {
        self.shadow.as_ref()
    }

    /// Handles everything received from both sides. An error ends the session:
    /// every later call returns it again.
    pub fn process(&mut self) -> Result<(), VncError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let r = self.step();
        if let Err(e) = &r {
            self.error = Some(e.clone());
        }
        r
    }

    fn step(&mut self) -> Result<(), VncError> {
        while let Some(ev) = self.rfb.poll_event()? {
            match ev {
                ClientEvent::Version(_) | ClientEvent::Security(_) => {}
                ClientEvent::Challenge(_) => return Err(VncError::PasswordNeeded),
                ClientEvent::ServerInit(init) => {
                    self.rfb
                        .send(&ClientMsg::SetPixelFormat(PixelFormat::RGB888))?;
                    self.rfb
                        .send(&ClientMsg::SetEncodings(SERVER_ENCODINGS.to_vec()))?;
                    self.request(false)?;
                    self.shadow = Some(Framebuffer::new(init.width, init.height));
                    self.send_near(&ProxyMsg::Init {
                        width: init.width,
                        height: init.height,
                        name: init.name,
                    });
                }
                ClientEvent::Message(ServerMsg::FramebufferUpdate(rects)) => {
                    let mut changed = Vec::new();
                    for r in &rects {
                        if r.encoding == DESKTOP_SIZE {
                            // Regions before the resize are of the old screen.
                            self.send_regions(&std::mem::take(&mut changed));
                            let shadow = self.shadow.as_mut().expect("set at ServerInit");
                            self.decoder.apply(r, &PixelFormat::RGB888, shadow)?;
                            self.send_near(&ProxyMsg::Resize {
                                width: r.width,
                                height: r.height,
                            });
                        } else {
                            let shadow = self.shadow.as_mut().expect("set at ServerInit");
                            self.decoder.apply(r, &PixelFormat::RGB888, shadow)?;
                            if r.width > 0 && r.height > 0 {
                                changed.push((r.x, r.y, r.width, r.height));
                            }
                        }
                    }
                    self.send_regions(&changed);
                    self.updated = true;
                    self.request(true)?;
                }
                ClientEvent::Message(ServerMsg::Bell) => self.send_near(&ProxyMsg::Bell),
                ClientEvent::Message(ServerMsg::ServerCutText(t)) => {
                    self.send_near(&ProxyMsg::CutText(t))
                }
                // A true-colour format was asked for: a colour map means nothing.
                ClientEvent::Message(ServerMsg::SetColourMapEntries { .. }) => {}
            }
        }
        while let Some(msg) = ProxyMsg::decode(&mut self.near_in, &self.limits)? {
            match msg {
                ProxyMsg::Input(m) => {
                    if !self.rfb.is_ready() {
                        return Err(VncError::Unexpected {
                            message: "Input",
                            when: "before the server's ServerInit",
                        });
                    }
                    self.rfb.send(&m)?;
                }
                ProxyMsg::Request {
                    x,
                    y,
                    width,
                    height,
                } => {
                    if self.updated {
                        let shadow = self.shadow.as_ref().expect("set before updates");
                        let x1 = (x as u32 + width as u32).min(shadow.width() as u32);
                        let y1 = (y as u32 + height as u32).min(shadow.height() as u32);
                        if (x as u32) < x1 && (y as u32) < y1 {
                            let area = (x, y, (x1 - x as u32) as u16, (y1 - y as u32) as u16);
                            self.send_regions(&[area]);
                        }
                    }
                }
                other => {
                    return Err(VncError::Unexpected {
                        message: other.name(),
                        when: "from the near side",
                    })
                }
            }
        }
        Ok(())
    }

    fn request(&mut self, incremental: bool) -> Result<(), VncError> {
        let ctx = self.rfb.context().expect("after ServerInit");
        let (width, height) = (ctx.width, ctx.height);
        self.rfb.send(&ClientMsg::FramebufferUpdateRequest {
            incremental,
            x: 0,
            y: 0,
            width,
            height,
        })?;
        Ok(())
    }

    fn send_near(&mut self, msg: &ProxyMsg) {
        msg.encode(&mut self.near_out);
    }

    /// Sends the areas' current pixels, in Updates below the link's message limit:
    /// an area too large for one is sent in bands of rows (a row is the smallest).
    fn send_regions(&mut self, areas: &[(u16, u16, u16, u16)]) {
        if areas.is_empty() {
            return;
        }
        let shadow = self.shadow.as_ref().expect("set at ServerInit");
        let budget = (self.limits.max_message as usize / 2).max(1);
        let mut batch: Vec<Region> = Vec::new();
        let mut size = 4;
        for &(x, y, w, h) in areas {
            let band = (budget / (3 * w as usize).max(1)).clamp(1, u16::MAX as usize) as u16;
            let mut top = y;
            while top < y + h {
                let bh = band.min(y + h - top);
                let region = Region {
                    x,
                    y: top,
                    width: w,
                    height: bh,
                    pixels: shadow.get_rect(x, top, w, bh).expect("decoded inside"),
                };
                if size + region.encoded_len() > budget && !batch.is_empty() {
                    ProxyMsg::Update(std::mem::take(&mut batch)).encode(&mut self.near_out);
                    size = 4;
                }
                size += region.encoded_len();
                batch.push(region);
                top += bh;
            }
        }
        ProxyMsg::Update(batch).encode(&mut self.near_out);
    }
}
