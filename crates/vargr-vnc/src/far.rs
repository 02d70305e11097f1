//! The far side: one RFB client to the VNC server and a shadow of its screen.
//!
//! The server is asked for RGB888 so the shadow needs no conversion, and for every
//! encoding vargr-rfb decodes (ZRLE and Hextile first, the best on real desktops).
//! One update request is always outstanding: servers answer an incremental request
//! when something changes, so the shadow stays current without polling.
//!
//! What changed is only marked ([`Dirty`]) until the caller says the link can take
//! more ([`FarSide::send_update`]): a slow link then gets the screen as it is when it
//! is ready, not every intermediate picture, and what waits is bounded by the screen's
//! size however fast the server draws. The changed area goes out as static tiles or,
//! for deduplication, as the regions of the Varg segmenter that touch it (the whole
//! screen is segmented, so anchors stay where the content is).

use std::collections::VecDeque;

use bytes::BytesMut;
use vargr_dedup::segment::{Varg, VargParams};
use vargr_rfb::encoding::{COPY_RECT, DESKTOP_SIZE, HEXTILE, RAW, RRE, TIGHT, ZRLE};
use vargr_rfb::{
    ClientConfig, ClientEvent, ClientMsg, ClientSide, Decoder, Framebuffer, PixelFormat, ServerMsg,
};

use crate::dirty::Dirty;
use crate::{ProxyLimits, ProxyMsg, Region, VncError};

/// Encodings asked of the server, preferred first. Tight is asked without a quality
/// level, so servers send it without JPEG, which vargr-rfb does not decode.
pub const SERVER_ENCODINGS: [i32; 7] = [ZRLE, HEXTILE, TIGHT, RRE, COPY_RECT, RAW, DESKTOP_SIZE];

#[derive(Debug, Clone, Default)]
pub struct FarConfig {
    /// How to reach the server: its password, if it wants one.
    pub client: ClientConfig,
    pub limits: ProxyLimits,
    pub regions: RegionCut,
    /// Keep every server update, as it came, for [`FarSide::poll_recorded`].
    pub record: bool,
}

/// What the far side has for the near side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    Msg(ProxyMsg),
    /// An update two ways, for a link that deduplicates: the Varg regions that touch
    /// the change (which the near side may hold already), or the changed tiles alone.
    /// The link sends the one that costs less ([`crate::FarLink::send_outgoing`]).
    Choice {
        regions: Vec<Region>,
        changed: Vec<Region>,
        /// How the segmenter cut the screen (bands, not columns): a near side told it
        /// cuts its mirror into the same regions ([`Varg::regions_oriented`]).
        horizontal: bool,
    },
}

/// How a changed area is cut into the regions of an update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RegionCut {
    /// The changed tiles, merged into rectangles: fewest bytes without a cache.
    #[default]
    Tiles,
    /// The regions of the Varg segmenter over the whole screen that touch a changed
    /// tile: content-anchored, so a scrolled picture gives the same regions again.
    Varg(VargParams),
}

/// A screen as the Varg segmenter reads it, four bytes a pixel, into `out` (whose
/// memory is reused): the far side cuts its shadow and the near side its mirror alike.
pub(crate) fn segmenter_image(fb: &Framebuffer, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(fb.pixels().len() * 4);
    for p in fb.pixels() {
        out.extend_from_slice(&p.to_le_bytes());
    }
}

pub struct FarSide {
    limits: ProxyLimits,
    rfb: ClientSide,
    decoder: Decoder,
    shadow: Option<Framebuffer>,
    /// Areas changed since the last update sent; set with the shadow.
    dirty: Option<Dirty>,
    varg: Option<Varg>,
    /// The shadow's pixels as bytes, for the segmenter (kept to reuse its memory).
    image: Vec<u8>,
    near_in: BytesMut,
    near_out: VecDeque<Outgoing>,
    /// The server's updates as they came (when recording): Init, then per update
    /// its Updates, Copies and Resizes in order.
    recorded: Option<VecDeque<ProxyMsg>>,
    error: Option<VncError>,
}

impl FarSide {
    pub fn new(config: FarConfig) -> Result<FarSide, VncError> {
        let varg = match config.regions {
            RegionCut::Tiles => None,
            RegionCut::Varg(p) => Some(Varg::new(p).map_err(|e| VncError::Config(e.to_string()))?),
        };
        Ok(FarSide {
            decoder: Decoder::new(config.client.limits.clone()),
            rfb: ClientSide::new(config.client),
            limits: config.limits,
            shadow: None,
            dirty: None,
            varg,
            image: Vec::new(),
            near_in: BytesMut::new(),
            near_out: VecDeque::new(),
            recorded: config.record.then(VecDeque::new),
            error: None,
        })
    }

    /// Bytes from the VNC server.
    pub fn receive_server(&mut self, bytes: &[u8]) {
        self.rfb.receive(bytes);
    }

    /// Whether the handshake with the server is done, and how many of its bytes are
    /// the start of a message not complete yet (after [`FarSide::process`]): what a
    /// caller needs to give a server that stops half-way a deadline.
    pub fn server_progress(&self) -> (bool, usize) {
        (self.rfb.is_ready(), self.rfb.pending_input())
    }

    /// Bytes for the VNC server.
    pub fn take_server_output(&mut self) -> BytesMut {
        self.rfb.take_output()
    }

    /// Bytes from the near side: [`ProxyMsg`]s in their framing.
    pub fn receive_near(&mut self, bytes: &[u8]) {
        self.near_in.extend_from_slice(bytes);
    }

    /// What the far side has for a link that deduplicates.
    pub fn poll_near(&mut self) -> Option<Outgoing> {
        self.near_out.pop_front()
    }

    /// The next message for the near side, for a plain link: of a [`Outgoing::Choice`],
    /// the changed tiles.
    pub fn poll_near_msg(&mut self) -> Option<ProxyMsg> {
        match self.near_out.pop_front()? {
            Outgoing::Msg(m) => Some(m),
            Outgoing::Choice { changed, .. } => {
                let mut msgs = self.batches(changed).into_iter();
                let first = msgs.next();
                for (k, m) in msgs.enumerate() {
                    self.near_out.insert(k, Outgoing::Msg(m));
                }
                first
            }
        }
    }

    /// The messages for the near side, in their framing.
    pub fn take_near_output(&mut self) -> BytesMut {
        let mut out = BytesMut::new();
        while let Some(m) = self.poll_near_msg() {
            m.encode(&mut out);
        }
        out
    }

    /// The next recorded message (with [`FarConfig::record`]): Init, then the
    /// server's updates as they came, one [`ProxyMsg::Update`] per run of pixel
    /// rectangles and a [`ProxyMsg::Copy`] or [`ProxyMsg::Resize`] where the server
    /// sent one. Every server update ends with an Update (empty if it had no pixels),
    /// so a replay knows where updates end.
    pub fn poll_recorded(&mut self) -> Option<ProxyMsg> {
        self.recorded.as_mut()?.pop_front()
    }

    /// Whether part of the screen changed since the last update sent.
    pub fn has_update(&self) -> bool {
        self.dirty.as_ref().is_some_and(|d| d.any_at_all())
    }

    /// Queues an update of everything changed since the last (none if nothing
    /// changed); returns whether it did. Call it when the link can take more.
    pub fn send_update(&mut self) -> bool {
        if !self.has_update() {
            return false;
        }
        let shadow = self.shadow.as_ref().expect("set with dirty");
        let dirty = self.dirty.as_mut().expect("checked");
        let (w, h) = (shadow.width(), shadow.height());
        let Some(varg) = &self.varg else {
            let areas = dirty.take(0, 0, w, h);
            let regions = self.regions(&areas);
            for m in self.batches(regions) {
                self.near_out.push_back(Outgoing::Msg(m));
            }
            return true;
        };
        segmenter_image(shadow, &mut self.image);
        let cut = varg
            .regions(&self.image, h as usize, w as usize, 4)
            .expect("the image has the screen's size");
        let touched: Vec<_> = cut
            .boxes
            .iter()
            .map(|b| (b.col as u16, b.row as u16, b.width as u16, b.height as u16))
            .filter(|&(x, y, bw, bh)| dirty.any(x, y, bw, bh))
            .collect();
        let changed = dirty.take(0, 0, w, h);
        let choice = Outgoing::Choice {
            regions: self.regions(&touched),
            changed: self.regions(&changed),
            horizontal: cut.horizontal,
        };
        self.near_out.push_back(choice);
        true
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
                    self.rfb.request_screen(false)?;
                    self.shadow = Some(Framebuffer::new(init.width, init.height));
                    self.dirty = Some(Dirty::clean(init.width, init.height));
                    let msg = ProxyMsg::Init {
                        width: init.width,
                        height: init.height,
                        name: init.name,
                    };
                    if let Some(r) = &mut self.recorded {
                        r.push_back(msg.clone());
                    }
                    self.send_near(msg);
                }
                ClientEvent::Message(ServerMsg::FramebufferUpdate(rects)) => {
                    let mut pixels = Vec::new();
                    for r in &rects {
                        let shadow = self.shadow.as_mut().expect("set at ServerInit");
                        self.decoder.apply(r, &PixelFormat::RGB888, shadow)?;
                        let dirty = self.dirty.as_mut().expect("set at ServerInit");
                        let event = match r.encoding {
                            DESKTOP_SIZE => {
                                // What changed before is of the old screen: the near
                                // side keeps the shared area, and gets all of the new.
                                let msg = ProxyMsg::Resize {
                                    width: r.width,
                                    height: r.height,
                                };
                                self.near_out.push_back(Outgoing::Msg(msg.clone()));
                                *dirty = Dirty::all(r.width, r.height);
                                Some(msg)
                            }
                            COPY_RECT => {
                                let (sx, sy) = (
                                    u16::from_be_bytes([r.data[0], r.data[1]]),
                                    u16::from_be_bytes([r.data[2], r.data[3]]),
                                );
                                let msg = ProxyMsg::Copy {
                                    src_x: sx,
                                    src_y: sy,
                                    x: r.x,
                                    y: r.y,
                                    width: r.width,
                                    height: r.height,
                                };
                                // The near side copies what it has: where part of
                                // the source waits to be sent, the copy lands stale
                                // and waits too.
                                dirty.mark_copied(sx, sy, r.x, r.y, r.width, r.height);
                                self.near_out.push_back(Outgoing::Msg(msg.clone()));
                                Some(msg)
                            }
                            _ => {
                                dirty.mark(r.x, r.y, r.width, r.height);
                                if self.recorded.is_some() && r.width > 0 && r.height > 0 {
                                    pixels.push(Region {
                                        x: r.x,
                                        y: r.y,
                                        width: r.width,
                                        height: r.height,
                                        pixels: shadow
                                            .get_rect(r.x, r.y, r.width, r.height)
                                            .expect("decoded inside"),
                                    });
                                }
                                None
                            }
                        };
                        if let (Some(rec), Some(msg)) = (&mut self.recorded, event) {
                            if !pixels.is_empty() {
                                rec.push_back(ProxyMsg::Update(std::mem::take(&mut pixels)));
                            }
                            rec.push_back(msg);
                        }
                    }
                    if let Some(rec) = &mut self.recorded {
                        rec.push_back(ProxyMsg::Update(pixels));
                    }
                    self.rfb.request_screen(true)?;
                }
                ClientEvent::Message(ServerMsg::Bell) => self.send_near(ProxyMsg::Bell),
                ClientEvent::Message(ServerMsg::ServerCutText(t)) => {
                    self.send_near(ProxyMsg::CutText(t))
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
                    // Before ServerInit the near side gets everything anyway.
                    if let Some(d) = &mut self.dirty {
                        d.mark(x, y, width, height);
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

    fn send_near(&mut self, msg: ProxyMsg) {
        self.near_out.push_back(Outgoing::Msg(msg));
    }

    /// The areas' current pixels.
    fn regions(&self, areas: &[(u16, u16, u16, u16)]) -> Vec<Region> {
        let shadow = self.shadow.as_ref().expect("set at ServerInit");
        areas
            .iter()
            .map(|&(x, y, width, height)| Region {
                x,
                y,
                width,
                height,
                pixels: shadow.get_rect(x, y, width, height).expect("inside"),
            })
            .collect()
    }

    /// Regions in Updates below the link's message limit: a region too large for one
    /// is cut in bands of rows (a row is the smallest).
    fn batches(&self, regions: Vec<Region>) -> Vec<ProxyMsg> {
        let budget = (self.limits.max_message as usize / 2).max(1);
        let mut msgs = Vec::new();
        let mut batch: Vec<Region> = Vec::new();
        let mut size = 4;
        for r in regions {
            let w = r.width as usize;
            let band = (budget / (3 * w).max(1)).clamp(1, u16::MAX as usize);
            for (k, rows) in r.pixels.chunks((band * w).max(1)).enumerate() {
                let region = Region {
                    x: r.x,
                    y: r.y + (k * band) as u16,
                    width: r.width,
                    height: (rows.len() / w.max(1)) as u16,
                    pixels: rows.to_vec(),
                };
                if size + region.encoded_len() > budget && !batch.is_empty() {
                    msgs.push(ProxyMsg::Update(std::mem::take(&mut batch)));
                    size = 4;
                }
                size += region.encoded_len();
                batch.push(region);
            }
        }
        if !batch.is_empty() || msgs.is_empty() {
            msgs.push(ProxyMsg::Update(batch));
        }
        msgs
    }
}
