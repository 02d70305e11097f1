//! Real VNC viewers for vargr-vnc's tests: TigerVNC's `vncviewer` and
//! `xtightvncviewer`, each on an Xvfb of its own, and pictures taken from X with `xwd`
//! of both the viewer's window and the server's screen, so a test compares what a
//! viewer shows with what the server has, pixel for pixel.
//!
//! Include it beside vargr-rfb's Xvnc helpers, whose `find` it uses:
//!
//! ```ignore
//! #[path = "../../vargr-rfb/tests/xvnc_support/mod.rs"]
//! mod xvnc_support;
//! #[path = "viewer_support/mod.rs"]
//! mod viewer_support;
//! ```
//!
//! Xvnc paints the cursor into what it sends a viewer that has not moved the pointer
//! itself, while `xwd -root` never shows it: [`hide_cursor`] blanks the root window's
//! cursor and parks the pointer in a corner so that the two pictures can be equal.

#![allow(dead_code)]

use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::xvnc_support::find;

/// Sends SIGTERM (X servers then remove their lock file and socket), SIGKILL if the
/// process lingers, and reaps it.
fn stop(child: &mut Child) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    let _ = Command::new("kill")
        .arg(child.id().to_string())
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn log_path(what: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "{}-{what}-{}-{n}.log",
        env!("CARGO_PKG_NAME"),
        std::process::id()
    ))
}

/// Runs an X client to completion on `display` (":N"), returning its stdout.
pub fn x_run(display: &str, program: &str, args: &[&str]) -> Vec<u8> {
    let path = find(program).unwrap_or_else(|| panic!("{program} is not installed"));
    let out = Command::new(path)
        .args(args)
        .env("DISPLAY", display)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "DISPLAY={display} {program} {args:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Blanks the root window's cursor and parks the pointer in the bottom-right corner
/// of `display`, where the sessions leave the root window visible: Xvnc then paints
/// nothing for the cursor into viewers' pictures (an X capture never shows it).
pub fn hide_cursor(display: &str) {
    let xbm = log_path("blank").with_extension("xbm");
    // 16×16 (xsetroot wants the hot spot inside), all bits clear in the mask.
    let bits = vec!["0x00"; 32].join(",");
    std::fs::write(
        &xbm,
        format!("#define blank_width 16\n#define blank_height 16\nstatic char blank_bits[] = {{\n{bits}}};\n"),
    )
    .unwrap();
    let xbm_s = xbm.to_str().unwrap();
    x_run(display, "xsetroot", &["-cursor", xbm_s, xbm_s]);
    let _ = std::fs::remove_file(&xbm);
    let geometry = String::from_utf8(x_run(display, "xdotool", &["getdisplaygeometry"])).unwrap();
    let (w, h) = geometry.trim().split_once(' ').unwrap();
    let (x, y) = (w.parse::<u32>().unwrap() - 1, h.parse::<u32>().unwrap() - 1);
    x_run(
        display,
        "xdotool",
        &["mousemove", &x.to_string(), &y.to_string()],
    );
}

/// An Xvfb for one viewer, killed and reaped when dropped.
pub struct Xvfb {
    child: Child,
    pub display: u32,
    log: PathBuf,
    // Held open: Xvfb would die of SIGPIPE if it wrote to a closed pipe.
    _displayfd: std::process::ChildStdout,
}

impl Xvfb {
    /// Starts Xvfb, `width × height` at depth 24, on a display it picks itself
    /// (`-displayfd`), and returns once the display answers. Viewers place their
    /// window a few pixels in, so make the screen larger than the remote one.
    pub fn start(width: u32, height: u32) -> Xvfb {
        let xvfb = find("Xvfb").expect("Xvfb is installed");
        let log = log_path("xvfb");
        let mut child = Command::new(xvfb)
            .args(["-displayfd", "1", "-nolisten", "tcp", "-noreset"])
            .args(["-screen", "0", &format!("{width}x{height}x24")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("Xvfb starts");
        // Xvfb writes the display number once it accepts clients; end of file means
        // it exited.
        let mut out = child.stdout.take().unwrap();
        let mut number = String::new();
        let mut byte = [0u8; 1];
        while out.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
            number.push(byte[0] as char);
        }
        let Ok(display) = number.trim().parse() else {
            stop(&mut child);
            panic!(
                "Xvfb did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        let xvfb = Xvfb {
            child,
            display,
            log,
            _displayfd: out,
        };
        // The pointer starts in the middle, where the viewer's window will be; a
        // viewer that saw it there could send the server a pointer event. The corner
        // is outside any window of the remote screen's size.
        let (x, y) = ((width - 1).to_string(), (height - 1).to_string());
        x_run(&xvfb.name(), "xdotool", &["mousemove", &x, &y]);
        xvfb
    }

    /// ":N", for DISPLAY.
    pub fn name(&self) -> String {
        format!(":{}", self.display)
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        stop(&mut self.child);
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Which real viewer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    TigerVnc,
    XTightVnc,
}

/// How the viewer connects.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// TigerVNC: the `-PreferredEncoding` (Raw, Hextile, ZRLE or Tight; ZRLE if
    /// unset); it still announces the others, and Xvnc sends it CopyRect and Tight's
    /// solid fills beside the preferred one. xtightvncviewer: the `-encodings` list,
    /// which is all it announces, e.g. "hextile" or "tight copyrect" (its own
    /// default if unset).
    pub encodings: Option<String>,
    /// A VNC password file (see [`password_file`]): VNC authentication instead of None.
    pub password_file: Option<PathBuf>,
    /// Sends no key or pointer events to the server.
    pub view_only: bool,
}

/// Writes `password` in the obfuscated form of VNC password files (`vncpasswd -f`),
/// for Xvnc's `-PasswordFile` and the viewers' `-passwd`.
pub fn password_file(password: &str, path: &Path) {
    let vncpasswd = find("vncpasswd").expect("vncpasswd is installed");
    let mut child = Command::new(vncpasswd)
        .arg("-f")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.len() == 8,
        "vncpasswd -f"
    );
    std::fs::write(path, out.stdout).unwrap();
}

/// A real viewer on its Xvfb, connected to a VNC server; killed and reaped on drop,
/// its stderr (and stdout) kept for failure messages.
pub struct Viewer {
    child: Child,
    pub kind: Kind,
    /// The viewer's X display, ":N".
    pub display: String,
    log: PathBuf,
    window: Option<u64>,
}

impl Viewer {
    /// TigerVNC's vncviewer on `xvfb` against `addr`, ZRLE, no password.
    pub fn tigervnc(addr: SocketAddr, xvfb: &Xvfb) -> Viewer {
        Viewer::start(Kind::TigerVnc, addr, xvfb, &Options::default())
    }

    /// xtightvncviewer on `xvfb` against `addr`, its default encodings, no password.
    pub fn xtightvnc(addr: SocketAddr, xvfb: &Xvfb) -> Viewer {
        Viewer::start(Kind::XTightVnc, addr, xvfb, &Options::default())
    }

    /// The program, or None (with the reason) when it is not installed.
    pub fn program(kind: Kind) -> Result<PathBuf, String> {
        let name = match kind {
            Kind::TigerVnc => "vncviewer",
            Kind::XTightVnc => "xtightvncviewer",
        };
        find(name).ok_or_else(|| format!("{name} is not installed"))
    }

    /// The command line for `kind`: the remote screen shown 1:1 in full colour
    /// (no scaling, no lossy JPEG, the server's cursor drawn by X rather than into
    /// the picture, no overlaid hints), shared so that other clients stay connected,
    /// and exiting instead of opening a dialog when the connection fails.
    pub fn args(kind: Kind, addr: SocketAddr, opts: &Options) -> Vec<String> {
        let server = format!("{}::{}", addr.ip(), addr.port());
        let mut a: Vec<String> = Vec::new();
        match kind {
            Kind::TigerVnc => {
                let security = if opts.password_file.is_some() {
                    "VncAuth"
                } else {
                    "None"
                };
                a.extend(
                    [
                        "-SecurityTypes",
                        security,
                        "-AutoSelect=0",
                        "-FullColor",
                        "-NoJPEG",
                        "-PreferredEncoding",
                        opts.encodings.as_deref().unwrap_or("ZRLE"),
                        "-RemoteResize=0",
                        "-Shared",
                        "-ReconnectOnError=0",
                        "-AlertOnFatalError=0",
                        "-DotWhenNoCursor=0",
                        // No menu key: else "Press F8 to open the context menu" fades
                        // out over the picture for the first seconds.
                        "-MenuKey=",
                        "-geometry",
                        "+0+0",
                        "-Log",
                        "*:stderr:30",
                    ]
                    .map(String::from),
                );
                if let Some(p) = &opts.password_file {
                    a.extend(["-PasswordFile".into(), p.display().to_string()]);
                }
                if opts.view_only {
                    a.push("-ViewOnly".into());
                }
            }
            Kind::XTightVnc => {
                // -x11cursor: the cursor as an X cursor, not painted into the picture.
                a.extend(["-shared", "-truecolour", "-nojpeg", "-x11cursor"].map(String::from));
                a.extend(["-geometry".into(), "+0+0".into()]);
                if let Some(e) = &opts.encodings {
                    a.extend(["-encodings".into(), e.clone()]);
                }
                if let Some(p) = &opts.password_file {
                    a.extend(["-passwd".into(), p.display().to_string()]);
                }
                if opts.view_only {
                    a.push("-viewonly".into());
                }
            }
        }
        a.push(server);
        a
    }

    pub fn start(kind: Kind, addr: SocketAddr, xvfb: &Xvfb, opts: &Options) -> Viewer {
        let program = Viewer::program(kind).unwrap();
        let log = log_path("viewer");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(program)
            .args(Viewer::args(kind, addr, opts))
            .env("DISPLAY", xvfb.name())
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("the viewer starts");
        Viewer {
            child,
            kind,
            display: xvfb.name(),
            log,
            window: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the viewer printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the viewer still runs (it exits when the connection fails or ends).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The viewer's top-level window, waiting up to `timeout` for it to be mapped.
    /// Its client area is the remote screen: TigerVNC sizes it to the remote
    /// screen, xtightvncviewer's child windows fill it.
    pub fn window(&mut self, timeout: Duration) -> Result<u64, String> {
        if let Some(w) = self.window {
            return Ok(w);
        }
        let class = match self.kind {
            Kind::TigerVnc => "^TigerVNC Viewer$",
            Kind::XTightVnc => "^Vncviewer$",
        };
        let xdotool = find("xdotool").expect("xdotool is installed");
        let deadline = Instant::now() + timeout;
        loop {
            let out = Command::new(&xdotool)
                .args(["search", "--onlyvisible", "--class", class])
                .env("DISPLAY", &self.display)
                .output()
                .unwrap();
            let found = String::from_utf8_lossy(&out.stdout);
            if let Some(id) = found.lines().next().and_then(|l| l.trim().parse().ok()) {
                self.check_on_screen(id)?;
                self.window = Some(id);
                return Ok(id);
            }
            if !self.running() {
                return Err(format!("the viewer exited:\n{}", self.log()));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no viewer window after {timeout:?}:\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Viewer {
    /// The window's position and size on the viewer's display.
    fn geometry(&self, id: u64) -> Result<(u32, u32, u32, u32), String> {
        let numbers = |text: &str, key: &str, sep: char| -> Option<(u32, u32)> {
            let rest = text.lines().find_map(|l| l.trim().strip_prefix(key))?;
            let (a, b) = rest.trim().split(' ').next()?.split_once(sep)?;
            Some((a.parse().ok()?, b.parse().ok()?))
        };
        let win = String::from_utf8(x_run(
            &self.display,
            "xdotool",
            &["getwindowgeometry", &id.to_string()],
        ))
        .unwrap();
        match (
            numbers(&win, "Position:", ','),
            numbers(&win, "Geometry:", 'x'),
        ) {
            (Some((x, y)), Some((w, h))) => Ok((x, y, w, h)),
            _ => Err(format!("xdotool getwindowgeometry said {win:?}")),
        }
    }

    /// Moves the pointer on the viewer's display over remote pixel `x, y`, as a
    /// user would; the viewer sends the server a pointer event (unless view-only).
    /// TigerVNC (FLTK, no window manager) sends motion only after a first click in
    /// its window: see [`Viewer::click`].
    pub fn pointer_to(&mut self, x: u32, y: u32) {
        let id = self
            .window(Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("{e}"));
        let (wx, wy, _, _) = self.geometry(id).unwrap();
        let (px, py) = ((wx + x).to_string(), (wy + y).to_string());
        x_run(&self.display, "xdotool", &["mousemove", &px, &py]);
    }

    /// Clicks button 1 over remote pixel `x, y`.
    pub fn click(&mut self, x: u32, y: u32) {
        self.pointer_to(x, y);
        x_run(&self.display, "xdotool", &["click", "1"]);
    }

    /// X keeps no pixels for the parts of a window off the screen, so the whole
    /// window must fit on the Xvfb.
    fn check_on_screen(&self, id: u64) -> Result<(), String> {
        let (x, y, w, h) = self.geometry(id)?;
        let screen =
            String::from_utf8(x_run(&self.display, "xdotool", &["getdisplaygeometry"])).unwrap();
        let Some((sw, sh)) = screen
            .trim()
            .split_once(' ')
            .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        else {
            return Err(format!("xdotool getdisplaygeometry said {screen:?}"));
        };
        if x + w > sw || y + h > sh {
            return Err(format!(
                "the viewer's window, {w}×{h} at {x},{y}, does not fit on its {sw}×{sh} Xvfb"
            ));
        }
        Ok(())
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{:?} viewer's log:\n{}", self.kind, self.log());
        }
        stop(&mut self.child);
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A picture taken from X: `width × height` pixels of `0x00RRGGBB`, row by row (the
/// canonical form of vargr-rfb's `Framebuffer`).
#[derive(Clone, PartialEq, Eq)]
pub struct Picture {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u32>,
}

impl fmt::Debug for Picture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Picture({}×{})", self.width, self.height)
    }
}

/// Where two pictures differ, for failure messages.
#[derive(Clone, Debug)]
pub struct Diff {
    /// The sizes, if they differ (then nothing else is compared).
    pub sizes: Option<((u32, u32), (u32, u32))>,
    /// How many pixels differ.
    pub pixels: usize,
    /// The smallest rectangle holding them: x, y, width, height.
    pub bbox: (u32, u32, u32, u32),
    /// One differing pixel: x, y and the two values.
    pub first: Option<(u32, u32, u32, u32)>,
    /// The two pictures compared (the server's first, for wait_same).
    pub pictures: Box<(Picture, Picture)>,
    /// Where [`Diff::save`] wrote them.
    pub saved: Option<(PathBuf, PathBuf)>,
}

impl Diff {
    /// Writes both pictures as PPM files in the temporary directory, for a failure
    /// message to point at: `.unwrap_or_else(|d| panic!("{}", d.save()))`.
    pub fn save(mut self) -> Diff {
        let base = log_path("picture");
        let (a, b) = (base.with_extension("a.ppm"), base.with_extension("b.ppm"));
        self.pictures.0.save_ppm(&a);
        self.pictures.1.save_ppm(&b);
        self.saved = Some((a, b));
        self
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((a, b)) = self.sizes {
            write!(f, "sizes differ: {}×{} and {}×{}", a.0, a.1, b.0, b.1)?;
        } else {
            let (x, y, w, h) = self.bbox;
            write!(f, "{} pixels differ within {w}×{h} at {x},{y}", self.pixels)?;
            if let Some((x, y, a, b)) = self.first {
                write!(f, " (first at {x},{y}: {a:06x} and {b:06x})")?;
            }
        }
        if let Some((a, b)) = &self.saved {
            write!(
                f,
                "; the pictures are in {} and {}",
                a.display(),
                b.display()
            )?;
        }
        Ok(())
    }
}

impl Picture {
    /// The pixels of vargr-rfb's framebuffer, to compare with a viewer's picture.
    pub fn from_framebuffer(fb: &vargr_rfb::Framebuffer) -> Picture {
        Picture {
            width: fb.width() as u32,
            height: fb.height() as u32,
            rgb: fb.pixels().to_vec(),
        }
    }

    /// None if equal, else where they differ.
    pub fn diff(&self, other: &Picture) -> Option<Diff> {
        if (self.width, self.height) != (other.width, other.height) {
            return Some(Diff {
                sizes: Some(((self.width, self.height), (other.width, other.height))),
                pixels: 0,
                bbox: (0, 0, 0, 0),
                first: None,
                pictures: Box::new((self.clone(), other.clone())),
                saved: None,
            });
        }
        let (mut x0, mut y0, mut x1, mut y1) = (u32::MAX, u32::MAX, 0, 0);
        let mut pixels = 0;
        let mut first = None;
        for (i, (&a, &b)) in self.rgb.iter().zip(&other.rgb).enumerate() {
            if a != b {
                let (x, y) = (i as u32 % self.width, i as u32 / self.width);
                first.get_or_insert((x, y, a, b));
                pixels += 1;
                (x0, y0, x1, y1) = (x0.min(x), y0.min(y), x1.max(x), y1.max(y));
            }
        }
        (pixels > 0).then(|| Diff {
            sizes: None,
            pixels,
            bbox: (x0, y0, x1 - x0 + 1, y1 - y0 + 1),
            first,
            pictures: Box::new((self.clone(), other.clone())),
            saved: None,
        })
    }

    /// The mean absolute difference per channel (0 to 255), for lossy pictures
    /// (vncsnapshot's JPEG); infinite if the sizes differ.
    pub fn mean_abs_diff(&self, other: &Picture) -> f64 {
        if (self.width, self.height) != (other.width, other.height) {
            return f64::INFINITY;
        }
        let channel = |v: u32, s: u32| ((v >> s) & 0xff) as i32;
        let sum: u64 = self
            .rgb
            .iter()
            .zip(&other.rgb)
            .map(|(&a, &b)| {
                [16, 8, 0]
                    .iter()
                    .map(|&s| (channel(a, s) - channel(b, s)).unsigned_abs() as u64)
                    .sum::<u64>()
            })
            .sum();
        sum as f64 / (3.0 * self.rgb.len().max(1) as f64)
    }

    /// The rectangle `x, y, width × height` of this picture.
    pub fn crop(&self, x: u32, y: u32, width: u32, height: u32) -> Picture {
        assert!(x + width <= self.width && y + height <= self.height);
        let rgb = (y..y + height)
            .flat_map(|r| {
                let start = (r * self.width + x) as usize;
                self.rgb[start..start + width as usize].iter().copied()
            })
            .collect();
        Picture { width, height, rgb }
    }

    /// Writes the picture as binary PPM (for looking at a failure).
    pub fn save_ppm(&self, path: &Path) {
        let mut out = format!("P6\n{} {}\n255\n", self.width, self.height).into_bytes();
        for &p in &self.rgb {
            out.extend_from_slice(&[(p >> 16) as u8, (p >> 8) as u8, p as u8]);
        }
        std::fs::write(path, out).unwrap();
    }

    /// Reads a binary PPM (P6, maxval 255), e.g. from `djpeg -pnm`.
    pub fn from_ppm(data: &[u8]) -> Result<Picture, String> {
        // Header: magic, width, height, maxval, separated by whitespace (and comments).
        let mut fields = Vec::new();
        let mut i = 0;
        while fields.len() < 4 {
            while i < data.len() && data[i].is_ascii_whitespace() {
                i += 1;
            }
            if data.get(i) == Some(&b'#') {
                while i < data.len() && data[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            let start = i;
            while i < data.len() && !data[i].is_ascii_whitespace() {
                i += 1;
            }
            if start == i {
                return Err("PPM: header cut short".into());
            }
            fields.push(String::from_utf8_lossy(&data[start..i]).into_owned());
        }
        i += 1; // the single whitespace byte before the pixels
        let num = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| format!("PPM: bad number {s:?}"))
        };
        if fields[0] != "P6" || num(&fields[3])? != 255 {
            return Err(format!("PPM: want P6 with maxval 255, got {fields:?}"));
        }
        let (width, height) = (num(&fields[1])?, num(&fields[2])?);
        let px = data
            .get(i..i + 3 * (width * height) as usize)
            .ok_or("PPM: pixels cut short")?;
        let rgb = px
            .chunks_exact(3)
            .map(|c| (c[0] as u32) << 16 | (c[1] as u32) << 8 | c[2] as u32)
            .collect();
        Ok(Picture { width, height, rgb })
    }

    /// Reads an X window dump (`xwd`): a big-endian header of `header_size` bytes
    /// (the window's name ends it), `ncolors` colormap entries of 12 bytes, then
    /// ZPixmap rows of `bytes_per_line` in the header's byte order. True/DirectColor
    /// pixels are split by the masks; others are looked up in the colormap.
    pub fn from_xwd(data: &[u8]) -> Result<Picture, String> {
        let field = |i: usize| -> Result<u32, String> {
            data.get(4 * i..4 * i + 4)
                .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
                .ok_or_else(|| "xwd: header cut short".to_string())
        };
        let header_size = field(0)? as usize;
        if field(1)? != 7 || field(2)? != 2 {
            return Err(format!(
                "xwd: want version 7, ZPixmap; got version {}, format {}",
                field(1)?,
                field(2)?
            ));
        }
        let (width, height) = (field(4)?, field(5)?);
        let lsb_first = field(7)? == 0;
        let (bpp, bytes_per_line) = (field(11)?, field(12)? as usize);
        let visual_class = field(13)?;
        let masks = [field(14)?, field(15)?, field(16)?];
        let ncolors = field(19)? as usize;
        let colors_at = header_size;
        let pixels_at = colors_at + 12 * ncolors;
        if ![8, 16, 24, 32].contains(&bpp) {
            return Err(format!("xwd: {bpp} bits per pixel"));
        }
        let colormap: Vec<(u32, u32)> = (0..ncolors)
            .map(|c| {
                let e = &data[colors_at + 12 * c..colors_at + 12 * c + 12];
                let value = u32::from_be_bytes(e[0..4].try_into().unwrap());
                // Colormap channels are 16-bit; keep the high byte.
                let rgb = (e[4] as u32) << 16 | (e[6] as u32) << 8 | e[8] as u32;
                (value, rgb)
            })
            .collect();
        let true_colour = visual_class == 4 || visual_class == 5;
        let scale = |v: u32, mask: u32| -> u32 {
            let bits = mask.count_ones();
            let v = (v & mask) >> mask.trailing_zeros();
            if bits >= 8 {
                v >> (bits - 8)
            } else {
                // Spread a narrow channel over 0..=255.
                v * 255 / ((1 << bits) - 1)
            }
        };
        let bytes = bpp as usize / 8;
        let need = pixels_at + bytes_per_line * height as usize;
        if data.len() < need {
            return Err(format!("xwd: {} bytes, want {need}", data.len()));
        }
        let mut rgb = Vec::with_capacity((width * height) as usize);
        for y in 0..height as usize {
            let row = &data[pixels_at + y * bytes_per_line..];
            for x in 0..width as usize {
                let p = &row[x * bytes..x * bytes + bytes];
                let v = if lsb_first {
                    p.iter().rev().fold(0u32, |v, &b| v << 8 | b as u32)
                } else {
                    p.iter().fold(0u32, |v, &b| v << 8 | b as u32)
                };
                rgb.push(if true_colour {
                    scale(v, masks[0]) << 16 | scale(v, masks[1]) << 8 | scale(v, masks[2])
                } else {
                    colormap
                        .iter()
                        .find(|c| c.0 == v)
                        .map(|c| c.1)
                        .ok_or_else(|| format!("xwd: pixel {v} is not in the colormap"))?
                });
            }
        }
        Ok(Picture { width, height, rgb })
    }
}

/// `xwd` of a window (`Some(id)`) or the root window of `display`, parsed.
pub fn xwd(display: &str, window: Option<u64>) -> Picture {
    let id = window.map(|w| w.to_string());
    let target: Vec<&str> = match &id {
        Some(id) => vec!["-id", id],
        None => vec!["-root"],
    };
    let mut args = vec!["-silent", "-display", display];
    args.extend(target);
    Picture::from_xwd(&x_run(display, "xwd", &args)).unwrap_or_else(|e| panic!("xwd {args:?}: {e}"))
}

/// What the viewer shows of the remote screen: its window's client area.
pub fn capture(viewer: &mut Viewer) -> Picture {
    let win = viewer
        .window(Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{e}"));
    xwd(&viewer.display, Some(win))
}

/// The screen of an X display (e.g. Xvnc's, ":N") as X has it.
pub fn server_picture(display: &str) -> Picture {
    xwd(display, None)
}

/// Captures the server's screen and the viewer's until they are equal, or until
/// `timeout` (or the viewer exits); then the last difference.
pub fn wait_same(viewer: &mut Viewer, server_display: &str, timeout: Duration) -> Result<(), Diff> {
    let deadline = Instant::now() + timeout;
    loop {
        let server = server_picture(server_display);
        let shown = capture(viewer);
        let Some(diff) = server.diff(&shown) else {
            return Ok(());
        };
        if Instant::now() > deadline || !viewer.running() {
            return Err(diff);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A session of bench/vnc/session.sh drawing on a display; ended (SIGTERM) and
/// reaped when dropped.
pub struct Session {
    child: Child,
    pub name: String,
    lines: mpsc::Receiver<String>,
    log: PathBuf,
}

impl Session {
    pub fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/vnc/session.sh")
    }

    /// Starts session `name` on `display` for `seconds`; with `hold` it then keeps
    /// its windows still until dropped (see [`Session::wait_holding`]).
    pub fn start(display: &str, name: &str, seconds: u32, hold: bool) -> Session {
        let log = log_path("session");
        let mut child = Command::new("bash")
            .arg(Session::script())
            .arg(name)
            .env("DISPLAY", display)
            .env("SECONDS", seconds.to_string())
            .env("HOLD", if hold { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("bash runs session.sh");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Session {
            child,
            name: name.into(),
            lines,
            log,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until a `hold` session has drawn for its seconds and holds still.
    pub fn wait_holding(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(line) if line == "holding" => return,
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let status = self.child.try_wait();
        panic!(
            "session {} does not hold ({status:?}): {}",
            self.name,
            self.stderr()
        );
    }

    /// Waits for a session without `hold` to end, and checks that it succeeded.
    pub fn finish(mut self) {
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "session {}: {status}: {}",
            self.name,
            self.stderr()
        );
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // session.sh ends what it started on SIGTERM, within a fraction of a second.
            stop(&mut self.child);
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The encoders Xvnc used for each closed connection, in the order they closed, read
/// from the statistics it logs then (lines `EncodeManager:   Hextile:`). TigerVNC's
/// viewer announces every encoding it knows, its preferred one first, so Xvnc also
/// sends it Tight (solid areas) and CopyRect; xtightvncviewer announces only its
/// `-encodings`.
pub fn encoders_used(xvnc_log: &str) -> Vec<std::collections::BTreeSet<String>> {
    let mut all = Vec::new();
    let mut current = std::collections::BTreeSet::new();
    for line in xvnc_log.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("EncodeManager:   ") {
            // Encoder names sit 3 spaces in; their kinds of rectangle 5.
            if let Some(name) = rest.strip_suffix(':').filter(|n| !n.starts_with(' ')) {
                current.insert(name.to_string());
            }
        } else if line.contains("Connections: closed") {
            all.push(std::mem::take(&mut current));
        }
    }
    all
}

/// vncsnapshot's picture of the server at `addr`, decoded with djpeg.
pub fn snapshot(addr: SocketAddr) -> Picture {
    let jpeg = std::env::temp_dir().join(format!("vargr-vnc-snapshot-{}.jpg", std::process::id()));
    // Hextile: with Tight (its default) vncsnapshot 1.2a hangs against Xvnc 1.12
    // after a "Zero size rect".
    let mut child = Command::new(find("vncsnapshot").expect("vncsnapshot installed"))
        .args([
            "-quiet",
            "-nocursor",
            "-encodings",
            "hextile",
            "-quality",
            "100",
        ])
        .arg(format!("{}::{}", addr.ip(), addr.port()))
        .arg(&jpeg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("vncsnapshot did not finish in 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "vncsnapshot: {status}");
    let ppm = Command::new(find("djpeg").expect("djpeg installed"))
        .args(["-pnm"])
        .arg(&jpeg)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&jpeg);
    assert!(ppm.status.success(), "djpeg");
    Picture::from_ppm(&ppm.stdout).unwrap()
}
