//! The proxy pair in memory: a fake VNC server (vargr-rfb's `ServerSide` and
//! `Encoder`) painting known pictures, the far side, the near side and viewers
//! (`ClientSide` and `Decoder`), joined by byte queues. Every viewer's decoded
//! framebuffer must equal the server's, as its pixel format can hold it.

use vargr_dedup::cache::MemCache;
use vargr_dedup::segment::VargParams;
use vargr_dedup::FpBits;
use vargr_rfb::encoding::{COPY_RECT, DESKTOP_SIZE, HEXTILE, RAW, RRE, TIGHT, ZRLE};
use vargr_rfb::{
    security, ClientConfig, ClientEvent, ClientMsg, ClientSide, Decoder, Encoder, Framebuffer,
    Limits, PixelFormat, ProtocolVersion, Rect, ServerConfig, ServerEvent, ServerInit, ServerMsg,
    ServerSide,
};
use vargr_vnc::{
    FarConfig, FarLink, FarSide, LinkConfig, NearConfig, NearLink, NearSide, ProxyMsg, RegionCut,
    ViewerId, VncError,
};

const W: u16 = 150;
const H: u16 = 100;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
}

/// A VNC server that answers each update request with what changed, in one encoding.
struct FakeServer {
    rfb: ServerSide,
    fb: Framebuffer,
    enc: Encoder,
    encoding: i32,
    request: bool,
    /// Areas changed while no request was outstanding.
    queued: Vec<(u16, u16, u16, u16)>,
    resized: bool,
    inputs: Vec<ClientMsg>,
}

impl FakeServer {
    fn new(encoding: i32, fb: Framebuffer) -> FakeServer {
        FakeServer {
            rfb: ServerSide::new(ServerConfig {
                max_version: ProtocolVersion::V3_8,
                security_types: vec![security::NONE],
                password: None,
                challenge: [3; 16],
                limits: Limits::default(),
            }),
            fb,
            enc: Encoder::new(),
            encoding,
            request: false,
            queued: Vec::new(),
            resized: false,
            inputs: Vec::new(),
        }
    }

    fn step(&mut self) {
        while let Some(ev) = self.rfb.poll_event().unwrap() {
            match ev {
                ServerEvent::ClientInit(_) => self
                    .rfb
                    .send_server_init(&ServerInit {
                        width: self.fb.width(),
                        height: self.fb.height(),
                        // Not what the far side wants: it must ask for RGB888.
                        pixel_format: PixelFormat::BGR233,
                        name: b"fake".to_vec(),
                    })
                    .unwrap(),
                ServerEvent::Message(ClientMsg::FramebufferUpdateRequest {
                    incremental, ..
                }) => {
                    assert!(!self.request, "two requests outstanding");
                    self.request = true;
                    if !incremental {
                        self.queued.push((0, 0, self.fb.width(), self.fb.height()));
                    }
                }
                ServerEvent::Message(
                    m @ (ClientMsg::KeyEvent { .. }
                    | ClientMsg::PointerEvent { .. }
                    | ClientMsg::ClientCutText(_)),
                ) => self.inputs.push(m),
                _ => {}
            }
        }
        if self.request && (self.resized || !self.queued.is_empty()) {
            let mut rects = Vec::new();
            if self.resized {
                rects.push(Rect::desktop_size(self.fb.width(), self.fb.height()));
                self.queued = vec![(0, 0, self.fb.width(), self.fb.height())];
                self.resized = false;
            }
            for (x, y, w, h) in std::mem::take(&mut self.queued) {
                rects.push(self.encode(x, y, w, h));
            }
            self.send(rects);
        }
    }

    fn encode(&mut self, x: u16, y: u16, w: u16, h: u16) -> Rect {
        let pf = self.rfb.pixel_format().unwrap();
        assert_eq!(pf, PixelFormat::RGB888, "the far side asks for RGB888");
        self.enc
            .encode(&self.fb, self.encoding, x, y, w, h, &pf)
            .unwrap()
    }

    fn send(&mut self, rects: Vec<Rect>) {
        self.rfb.send(&ServerMsg::FramebufferUpdate(rects)).unwrap();
        self.request = false;
    }

    fn paint(&mut self, x: u16, y: u16, w: u16, h: u16, px: &[u32]) {
        self.fb.put_rect(x, y, w, h, px).unwrap();
        self.changed(x, y, w, h);
    }

    fn changed(&mut self, x: u16, y: u16, w: u16, h: u16) {
        if self.request && !self.resized {
            let r = self.encode(x, y, w, h);
            self.send(vec![r]);
        } else {
            self.queued.push((x, y, w, h));
        }
    }

    /// A CopyRect when a request is outstanding, pixels otherwise.
    fn copy(&mut self, sx: u16, sy: u16, dx: u16, dy: u16, w: u16, h: u16) {
        self.fb.copy_rect(sx, sy, dx, dy, w, h).unwrap();
        if self.request && !self.resized {
            self.send(vec![Rect::copy_rect(dx, dy, w, h, sx, sy)]);
        } else {
            self.queued.push((dx, dy, w, h));
        }
    }

    fn resize(&mut self, w: u16, h: u16) {
        self.fb.resize(w, h);
        self.queued.clear();
        self.resized = true;
    }
}

/// A viewer that asks for updates again as soon as one came, as real ones do.
struct TestViewer {
    id: ViewerId,
    c: ClientSide,
    dec: Decoder,
    fb: Option<Framebuffer>,
    pf: PixelFormat,
    encodings: Vec<i32>,
    seen: Vec<i32>,
    /// Pixels in the last update.
    last_area: u64,
    bells: usize,
    cut: Vec<Vec<u8>>,
}

impl TestViewer {
    fn new(near: &mut NearSide, pf: PixelFormat, encodings: Vec<i32>) -> TestViewer {
        TestViewer {
            id: near.add_viewer(),
            c: ClientSide::new(ClientConfig::default()),
            dec: Decoder::new(Limits::default()),
            fb: None,
            pf,
            encodings,
            seen: Vec::new(),
            last_area: 0,
            bells: 0,
            cut: Vec::new(),
        }
    }

    fn step(&mut self) {
        while let Some(ev) = self.c.poll_event().unwrap() {
            match ev {
                ClientEvent::ServerInit(init) => {
                    assert_eq!(init.name, b"fake");
                    self.fb = Some(Framebuffer::new(init.width, init.height));
                    self.c.send(&ClientMsg::SetPixelFormat(self.pf)).unwrap();
                    self.c
                        .send(&ClientMsg::SetEncodings(self.encodings.clone()))
                        .unwrap();
                    self.c.request_screen(false).unwrap();
                }
                ClientEvent::Message(ServerMsg::FramebufferUpdate(rects)) => {
                    let fb = self.fb.as_mut().unwrap();
                    self.last_area = 0;
                    for r in &rects {
                        self.dec.apply(r, &self.pf, fb).unwrap();
                        self.seen.push(r.encoding);
                        if r.encoding != DESKTOP_SIZE {
                            self.last_area += r.width as u64 * r.height as u64;
                        }
                    }
                    self.c.request_screen(true).unwrap();
                }
                ClientEvent::Message(ServerMsg::Bell) => self.bells += 1,
                ClientEvent::Message(ServerMsg::ServerCutText(t)) => self.cut.push(t),
                _ => {}
            }
        }
    }
}

struct Rig {
    server: FakeServer,
    far: FarSide,
    near: NearSide,
    /// The dedup link between the sides, or their plain framing.
    link: Option<(FarLink<MemCache>, NearLink<MemCache>)>,
    viewers: Vec<TestViewer>,
}

impl Rig {
    fn new(encoding: i32, fb: Framebuffer) -> Rig {
        Rig {
            server: FakeServer::new(encoding, fb),
            far: FarSide::new(FarConfig::default()).unwrap(),
            near: NearSide::new(NearConfig::default()),
            link: None,
            viewers: Vec::new(),
        }
    }

    /// Varg: regions of the 2-D segmenter through the dedup link.
    fn linked(encoding: i32, fb: Framebuffer, caches: (MemCache, MemCache)) -> Rig {
        let config = LinkConfig {
            lessons: Some(VargParams::default()),
            ..LinkConfig::default()
        };
        Rig {
            server: FakeServer::new(encoding, fb),
            far: FarSide::new(FarConfig {
                regions: RegionCut::Varg(VargParams::default()),
                ..FarConfig::default()
            })
            .unwrap(),
            near: NearSide::new(NearConfig::default()),
            link: Some((
                FarLink::new(&config, caches.0).unwrap(),
                NearLink::new(&config, caches.1).unwrap(),
            )),
            viewers: Vec::new(),
        }
    }

    /// Moves what the far side has for the near side (through the link, if any) and
    /// back; returns whether anything moved.
    fn cross(&mut self) -> bool {
        let mut moved = false;
        match &mut self.link {
            None => {
                self.far.send_update();
                let b = self.far.take_near_output();
                moved |= !b.is_empty();
                self.near.receive_far(&b);
            }
            Some((fl, nl)) => {
                if fl.ready() {
                    self.far.send_update();
                }
                while let Some(m) = self.far.poll_near() {
                    fl.send_outgoing(&m).unwrap();
                }
                fl.flush().unwrap();
                let b = fl.take_output();
                moved |= !b.is_empty();
                nl.receive(&b).unwrap();
                while let Some(m) = nl.poll_msg() {
                    self.near.receive_far_msg(m);
                    if nl.lesson_pending() {
                        self.near.apply_far().unwrap();
                        nl.learn(self.near.mirror()).unwrap();
                    }
                }
            }
        }
        moved
    }

    fn cross_back(&mut self) -> bool {
        let b = self.near.take_far_output();
        let mut moved = !b.is_empty();
        match &mut self.link {
            None => self.far.receive_near(&b),
            Some((fl, nl)) => {
                nl.send_control(&b);
                let b = nl.take_output();
                moved |= !b.is_empty();
                fl.receive(&b).unwrap();
                self.far.receive_near(&fl.take_control());
            }
        }
        moved
    }

    fn viewer(&mut self, pf: PixelFormat, encodings: Vec<i32>) -> usize {
        self.viewers
            .push(TestViewer::new(&mut self.near, pf, encodings));
        self.viewers.len() - 1
    }

    /// Moves bytes until none move; returns the viewers that failed.
    fn pump(&mut self) -> Vec<(ViewerId, VncError)> {
        let mut failed = Vec::new();
        for _ in 0..10_000 {
            let mut moved = false;
            self.server.step();
            let b = self.server.rfb.take_output();
            moved |= !b.is_empty();
            self.far.receive_server(&b);
            self.far.process().unwrap();
            let b = self.far.take_server_output();
            moved |= !b.is_empty();
            self.server.rfb.receive(&b);
            moved |= self.cross();
            failed.extend(self.near.process().unwrap());
            moved |= self.cross_back();
            for v in &mut self.viewers {
                let Ok(b) = self.near.take_viewer_output(v.id) else {
                    continue;
                };
                moved |= !b.is_empty();
                v.c.receive(&b);
                v.step();
                let b = v.c.take_output();
                moved |= !b.is_empty();
                self.near.receive_viewer(v.id, &b).unwrap();
            }
            if !moved {
                return failed;
            }
        }
        panic!("the proxy pair never went quiet");
    }

    /// Every viewer (but those listed) shows the server's picture.
    fn check(&self, what: &str, except: &[usize]) {
        assert_eq!(self.far.shadow(), Some(&self.server.fb), "{what}: shadow");
        assert_eq!(self.near.mirror(), Some(&self.server.fb), "{what}: mirror");
        for (i, v) in self.viewers.iter().enumerate() {
            if except.contains(&i) {
                continue;
            }
            let want = self.server.fb.as_seen_in(&v.pf);
            assert!(
                v.fb.as_ref() == Some(&want),
                "{what}: viewer {i} ({:?}, {:?}) differs from the server",
                v.pf,
                v.encodings
            );
        }
    }
}

/// Text-like strokes over a gradient: several colours per tile, long runs too.
fn picture(w: u16, h: u16) -> Framebuffer {
    let mut fb = Framebuffer::new(w, h);
    let mut px = Vec::new();
    for y in 0..h as u32 {
        for x in 0..w as u32 {
            px.push(if x % 7 < 2 && y % 11 < 8 {
                0x101010
            } else {
                (x * 255 / w as u32) << 16 | (y * 255 / h as u32) << 8 | 0x40
            });
        }
    }
    fb.put_rect(0, 0, w, h, &px).unwrap();
    fb
}

fn random(rng: &mut Lcg, n: usize) -> Vec<u32> {
    (0..n).map(|_| rng.next() & 0xffffff).collect()
}

fn big_endian() -> PixelFormat {
    let mut be = PixelFormat::RGB888;
    be.big_endian = true;
    be
}

#[test]
fn viewers_see_the_servers_picture_in_every_format_and_encoding() {
    for server_encoding in [ZRLE, HEXTILE, RRE, RAW] {
        let mut rig = Rig::new(server_encoding, picture(W, H));
        let kinds = [
            (PixelFormat::RGB888, ZRLE),
            (PixelFormat::RGB565, HEXTILE),
            (PixelFormat::BGR233, RRE),
            (big_endian(), RAW),
            (PixelFormat::RGB565, TIGHT),
        ];
        for (pf, enc) in kinds {
            // Listed after one the near side cannot make (zlib): it must skip it.
            rig.viewer(pf, vec![6, enc, COPY_RECT]);
        }
        rig.pump();
        rig.check("first screen", &[]);

        let mut rng = Lcg(server_encoding as u64);
        rig.server.paint(10, 10, 20, 5, &[0xff0000; 100]);
        rig.pump();
        rig.check("a filled rectangle", &[]);
        for v in &rig.viewers {
            // One 32-pixel tile touched: incremental, not the whole screen again.
            assert_eq!(v.last_area, 32 * 32, "incremental update's size");
        }
        let px = random(&mut rng, 40 * 30);
        rig.server.paint(100, 60, 40, 30, &px);
        rig.pump();
        rig.check("random pixels", &[]);
        rig.server.copy(0, 0, 60, 40, 50, 50);
        rig.pump();
        rig.check("a CopyRect", &[]);
        // Changes while a request is not outstanding pile up.
        rig.server.paint(0, 90, 150, 10, &random(&mut rng, 1500));
        rig.server.paint(140, 0, 10, 100, &random(&mut rng, 1000));
        rig.server.copy(100, 0, 0, 0, 40, 40);
        rig.pump();
        rig.check("several changes", &[]);
        for (v, (_, enc)) in rig.viewers.iter().zip(kinds) {
            assert!(
                v.seen.iter().all(|&e| e == enc || e == COPY_RECT),
                "viewer asked for {enc}, got {:?}",
                v.seen
            );
            // The server's CopyRects reach viewers that take them as CopyRects.
            assert!(v.seen.contains(&COPY_RECT), "{enc}: {:?}", v.seen);
        }
    }
}

#[test]
fn a_late_viewer_gets_everything_and_input_bell_and_cut_text_pass() {
    let mut rig = Rig::new(ZRLE, picture(W, H));
    let first = rig.viewer(PixelFormat::RGB888, vec![ZRLE]);
    rig.pump();
    let mut rng = Lcg(5);
    rig.server.paint(3, 4, 100, 50, &random(&mut rng, 5000));
    rig.pump();
    let late = rig.viewer(PixelFormat::RGB565, vec![HEXTILE]);
    rig.pump();
    rig.check("a late viewer", &[]);

    let inputs = [
        ClientMsg::KeyEvent {
            down: true,
            key: 0x61,
        },
        ClientMsg::PointerEvent {
            buttons: 4,
            x: 17,
            y: 99,
        },
        ClientMsg::ClientCutText(b"from the viewer".to_vec()),
    ];
    for m in &inputs {
        rig.viewers[late].c.send(m).unwrap();
    }
    rig.server.rfb.send(&ServerMsg::Bell).unwrap();
    rig.server
        .rfb
        .send(&ServerMsg::ServerCutText(b"from the server".to_vec()))
        .unwrap();
    rig.pump();
    assert_eq!(rig.server.inputs, inputs);
    for i in [first, late] {
        assert_eq!(rig.viewers[i].bells, 1);
        assert_eq!(rig.viewers[i].cut, vec![b"from the server".to_vec()]);
    }
}

#[test]
fn a_resize_reaches_viewers_that_listed_desktop_size_and_ends_the_others() {
    let mut rig = Rig::new(HEXTILE, picture(W, H));
    let follows = rig.viewer(PixelFormat::RGB888, vec![ZRLE, DESKTOP_SIZE]);
    let cannot = rig.viewer(PixelFormat::RGB888, vec![ZRLE]);
    rig.pump();
    rig.check("before", &[]);
    rig.server.resize(200, 70);
    rig.server.paint(160, 10, 40, 40, &[0x00ff00; 1600]);
    let failed = rig.pump();
    assert_eq!(
        failed,
        vec![(
            rig.viewers[cannot].id,
            VncError::ResizeUnsupported {
                width: 200,
                height: 70
            }
        )]
    );
    rig.near.remove_viewer(rig.viewers[cannot].id);
    rig.check("after the resize", &[cannot]);
    assert!(rig.viewers[follows].seen.contains(&DESKTOP_SIZE));
    rig.server.paint(0, 0, 200, 5, &[0x0000ff; 1000]);
    rig.pump();
    rig.check("after the resize, incremental", &[cannot]);
}

#[test]
fn a_request_is_answered_from_the_shadow_and_wrong_messages_end_the_session() {
    use bytes::BytesMut;
    use vargr_vnc::{ProxyLimits, Region};

    let mut rig = Rig::new(ZRLE, picture(W, H));
    rig.viewer(PixelFormat::RGB888, vec![ZRLE]);
    rig.pump();
    let mut wire = BytesMut::new();
    ProxyMsg::Request {
        x: 140,
        y: 90,
        width: 50,
        height: 50,
    }
    .encode(&mut wire);
    rig.far.receive_near(&wire);
    rig.far.process().unwrap();
    assert!(rig.far.send_update());
    let mut out = rig.far.take_near_output();
    let got = ProxyMsg::decode(&mut out, &ProxyLimits::default()).unwrap();
    assert_eq!(
        got,
        // Whole tiles of 32 pixels, clipped to the screen.
        Some(ProxyMsg::Update(vec![Region {
            x: 128,
            y: 64,
            width: W - 128,
            height: H - 64,
            pixels: rig.server.fb.get_rect(128, 64, W - 128, H - 64).unwrap(),
        }]))
    );

    // Screen messages go the other way: the far side refuses them, for good.
    let mut wire = BytesMut::new();
    ProxyMsg::Bell.encode(&mut wire);
    rig.far.receive_near(&wire);
    let err = rig.far.process().unwrap_err();
    assert!(
        matches!(
            err,
            VncError::Unexpected {
                message: "Bell",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(rig.far.process(), Err(err));

    // A near side fed an Update before Init refuses it.
    let mut near = NearSide::new(NearConfig::default());
    let mut wire = BytesMut::new();
    ProxyMsg::Update(Vec::new()).encode(&mut wire);
    near.receive_far(&wire);
    assert!(matches!(
        near.process(),
        Err(VncError::Unexpected {
            message: "Update",
            when: "before Init"
        })
    ));
}

fn caches() -> (MemCache, MemCache) {
    let c = || MemCache::new(FpBits::DEFAULT, 64 << 20);
    (c(), c())
}

#[test]
fn varg_link_carries_every_change_to_viewers_in_every_format() {
    for server_encoding in [ZRLE, HEXTILE, RAW] {
        let mut rig = Rig::linked(server_encoding, picture(W, H), caches());
        rig.viewer(PixelFormat::RGB888, vec![ZRLE]);
        rig.viewer(PixelFormat::RGB565, vec![HEXTILE]);
        rig.viewer(big_endian(), vec![RAW]);
        rig.pump();
        rig.check("first screen", &[]);
        let mut rng = Lcg(7 + server_encoding as u64);
        rig.server.paint(10, 10, 20, 5, &[0xff0000; 100]);
        rig.pump();
        rig.check("a filled rectangle", &[]);
        rig.server
            .paint(100, 60, 40, 30, &random(&mut rng, 40 * 30));
        rig.server.copy(0, 0, 60, 40, 50, 50);
        rig.pump();
        rig.check("random pixels and a CopyRect", &[]);
        rig.viewer(PixelFormat::RGB888, vec![HEXTILE]);
        rig.pump();
        rig.check("a late viewer", &[]);
    }
}

#[test]
fn varg_link_sends_a_revisited_or_scrolled_screen_as_fingerprints() {
    let mut rig = Rig::linked(ZRLE, picture(W, H), caches());
    rig.viewer(PixelFormat::RGB888, vec![ZRLE]);
    rig.pump();
    let mut rng = Lcg(99);
    // A tall random picture, shown through the screen at two offsets.
    let tall = random(&mut rng, W as usize * (H as usize + 40));
    let rows = |top: usize| tall[top * W as usize..(top + H as usize) * W as usize].to_vec();
    let sent = |rig: &mut Rig, px: &[u32]| {
        let before = rig.link.as_ref().unwrap().0.data_sent();
        rig.server.paint(0, 0, W, H, px);
        rig.pump();
        rig.check("a new screen", &[]);
        rig.link.as_ref().unwrap().0.data_sent() - before
    };
    let first = sent(&mut rig, &rows(0));
    // Random pixels do not compress: the screen's 3 bytes a pixel cross (as tiles:
    // the caches learn its regions all the same).
    assert!(first > 3 * W as u64 * H as u64 * 9 / 10, "first {first}");
    let stats = |rig: &Rig| rig.link.as_ref().unwrap().0.stats().clone();
    let before = stats(&rig);
    let scrolled = sent(&mut rig, &rows(13));
    let after = stats(&rig);
    // On a screen this small, a third of the regions touch the top or bottom edge
    // and change; the others cost a fingerprint.
    let (regions, known) = (
        after.segments - before.segments,
        after.fingerprinted - before.fingerprinted,
    );
    assert!(
        known * 3 >= regions && scrolled < first * 3 / 4,
        "scrolled by 13 rows: {known} of {regions} regions known, {scrolled} of {first} bytes"
    );
    let other = sent(&mut rig, &random(&mut rng, W as usize * H as usize));
    assert!(other > first * 9 / 10, "another screen: {other}");
    let back = sent(&mut rig, &rows(0));
    assert!(back < first / 20, "a screen seen before: {back} of {first}");

    // A dot drawn on a flat screen: its tile costs less than the regions around it,
    // which a flat screen makes tall.
    sent(&mut rig, &vec![0x203040; W as usize * H as usize]);
    let plains = rig.link.as_ref().unwrap().0.plain_updates();
    let dot = sent(&mut rig, &{
        let mut px = vec![0x203040; W as usize * H as usize];
        px[40 * W as usize + 70] = 0xffffff;
        px
    });
    assert_eq!(rig.link.as_ref().unwrap().0.plain_updates(), plains + 1);
    assert!(dot < 200, "a dot cost {dot} bytes");
}

#[test]
fn a_recording_replays_to_the_servers_screen() {
    let mut rig = Rig::new(HEXTILE, picture(W, H));
    rig.far = FarSide::new(FarConfig {
        record: true,
        ..FarConfig::default()
    })
    .unwrap();
    rig.viewer(PixelFormat::RGB888, vec![ZRLE, COPY_RECT]);
    rig.pump();
    let mut rng = Lcg(3);
    rig.server
        .paint(100, 60, 40, 30, &random(&mut rng, 40 * 30));
    rig.pump();
    rig.server.copy(0, 0, 60, 40, 50, 50);
    rig.pump();
    rig.server.paint(0, 90, 150, 10, &random(&mut rng, 1500));
    rig.server.copy(100, 0, 0, 0, 40, 40);
    rig.pump();
    let mut fb: Option<Framebuffer> = None;
    let (mut updates, mut copies) = (0, 0);
    while let Some(m) = rig.far.poll_recorded() {
        match &m {
            ProxyMsg::Update(_) => updates += 1,
            ProxyMsg::Copy { .. } => copies += 1,
            ProxyMsg::Init { .. } => {}
            other => panic!("unexpected {other:?} in a recording"),
        }
        m.paint_on(&mut fb).unwrap();
    }
    assert_eq!(fb.as_ref(), Some(&rig.server.fb));
    assert!(updates >= 4, "{updates} updates recorded");
    // The fake server sends the second copy as pixels: it follows a paint.
    assert!(copies >= 1, "{copies} copies recorded");
}
