//! User stages: a Rust stage registered by name, the example C plugin
//! (examples/stage-plugin), and every way one can fail: an error, a panic, a bad output
//! length; each names the stage and the link, and none takes the process down.
//! Needs a C compiler (`cc`) on the PATH.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use vargr_stage::user::{self, UserStageError};
use vargr_stage::{Stage, StageChain};
use vargr_wire::{Frame, FrameKind, Packet, Value};

fn string_frame(s: &str) -> Bytes {
    let p = Packet::new(7, 3, "%s", vec![Value::Str(s.into())]).unwrap();
    let mut b = BytesMut::new();
    p.encode_frame(&mut b);
    b.freeze()
}

fn decode(wire: &Bytes) -> Packet {
    let f = vargr_wire::decode_exact(wire, 1 << 20).unwrap();
    Packet::decode_payload(f.stream, f.tag, &f.payload).unwrap()
}

fn plugin(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/stage-plugin/stages.c");
    let out = dir.join("libstages.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed for {}", src.display());
    out
}

/// Reverses the payload of data frames it sends: a Rust user stage.
struct Reverse;

impl Stage for Reverse {
    fn name(&self) -> &str {
        "reverse"
    }
    fn outbound(&mut self, _now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        let mut f = vargr_wire::decode_exact(&frame, 1 << 20).unwrap();
        let mut p = Packet::decode_payload(f.stream, f.tag, &f.payload).unwrap();
        if let Some(Value::Str(s)) = p.values.first_mut() {
            *s = s.chars().rev().collect();
        }
        f = p.to_frame();
        out.push(f.to_wire());
    }
}

/// Panics on its second frame.
struct Fragile(u32);

impl Stage for Fragile {
    fn name(&self) -> &str {
        "fragile"
    }
    fn outbound(&mut self, _now: Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        self.0 += 1;
        assert!(self.0 < 2, "fragile broke on frame {}", self.0);
        out.push(frame);
    }
}

#[test]
fn a_rust_stage_registered_by_name_runs_in_a_chain() {
    user::register("reverse", |p: &str| {
        if p.is_empty() {
            Ok(Box::new(Reverse) as Box<dyn Stage>)
        } else {
            Err(format!("takes no params, got {p:?}"))
        }
    })
    .unwrap();
    assert!(user::is_registered("reverse"));
    let mut chain = StageChain::new(vec![user::create("reverse").unwrap()]);
    let mut out = Vec::new();
    chain.outbound(Instant::now(), string_frame("stage"), &mut out);
    assert_eq!(decode(&out[0]).values, vec![Value::Str("egats".into())]);
    let e = user::create("reverse:3").err().unwrap().to_string();
    assert!(
        e.contains("reverse") && e.contains("takes no params"),
        "{e}"
    );
    // Built-in kinds are not user stages' to take.
    let e = user::register("codec", |_: &str| Ok(Box::new(Reverse) as Box<dyn Stage>)).unwrap_err();
    assert!(matches!(e, UserStageError::Name { .. }), "{e}");
}

#[test]
fn a_panicking_rust_stage_fails_its_link_naming_both_and_the_process_goes_on() {
    user::register("fragile", |_: &str| {
        Ok(Box::new(Fragile(0)) as Box<dyn Stage>)
    })
    .unwrap();
    let mut chain = StageChain::new(vec![user::create("fragile").unwrap()]);
    let mut out = Vec::new();
    chain.outbound(Instant::now(), string_frame("one"), &mut out);
    assert_eq!(out.len(), 1);
    assert!(chain.take_failure("node 4 on a").is_none());
    chain.outbound(Instant::now(), string_frame("two"), &mut out);
    assert_eq!(out.len(), 1, "a broken stage emits nothing");
    let e = chain.take_failure("node 4 on a").unwrap().to_string();
    assert!(
        e.contains("stage fragile")
            && e.contains("node 4 on a")
            && e.contains("fragile broke on frame 2"),
        "{e}"
    );
    // Broken stays broken: later frames are dropped, not sent unguarded.
    chain.outbound(Instant::now(), string_frame("three"), &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn unknown_names_list_what_is_registered() {
    let e = user::create("nosuchstage:1").err().unwrap();
    let UserStageError::Unknown { name, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(name, "nosuchstage");
}

#[test]
fn the_example_c_plugin_transforms_frames_and_reports_a_bad_length() {
    let dir = tempfile::tempdir().unwrap();
    let so = plugin(dir.path());
    let mut names = user::load_plugin(&so).unwrap();
    names.sort();
    assert_eq!(names, ["faulty", "upper", "xor"]);
    assert_eq!(
        user::load_plugin(&so).unwrap().len(),
        3,
        "loading twice is harmless"
    );

    // upper: one way, what leaves is uppercase.
    let mut up = StageChain::new(vec![user::create("upper").unwrap()]);
    let mut out = Vec::new();
    up.outbound(Instant::now(), string_frame("Paths, 2002"), &mut out);
    let p = decode(&out[0]);
    assert_eq!(
        (p.values[0].clone(), p.stream, p.tag),
        (Value::Str("PATHS, 2002".into()), 7, 3)
    );
    // The tree's own frames pass untouched.
    let hb = Frame::new(FrameKind::Heartbeat, 0, 0, Bytes::from_static(b"abc")).to_wire();
    out.clear();
    up.outbound(Instant::now(), hb.clone(), &mut out);
    assert_eq!(out, vec![hb]);

    // xor: the wire differs, the far end reads what was sent.
    let mut near = StageChain::new(vec![user::create("xor:90").unwrap()]);
    let mut far = StageChain::new(vec![user::create("xor:90").unwrap()]);
    let sent = string_frame("secret");
    out.clear();
    near.outbound(Instant::now(), sent.clone(), &mut out);
    assert_ne!(out[0], sent);
    let mut got = Vec::new();
    let on_wire = vargr_wire::decode_exact(&out[0], 1 << 20).unwrap();
    far.inbound("node 1", Instant::now(), on_wire, &mut got)
        .unwrap();
    assert_eq!(got[0].to_wire(), sent);

    // Params are checked by the plugin's create, and its message is quoted.
    let e = user::create("xor:999").err().unwrap().to_string();
    assert!(
        e.contains("xor") && e.contains("expected a key 0-255"),
        "{e}"
    );

    // faulty:1 passes one frame, then claims more output than it had room for.
    let mut bad = StageChain::new(vec![user::create("faulty:1").unwrap()]);
    out.clear();
    bad.outbound(Instant::now(), string_frame("ok"), &mut out);
    assert!(bad.take_failure("node 2 on b").is_none());
    bad.outbound(Instant::now(), string_frame("not ok"), &mut out);
    assert_eq!(out.len(), 1, "the bad frame is dropped");
    let e = bad.take_failure("node 2 on b").unwrap().to_string();
    assert!(
        e.contains("stage faulty") && e.contains("node 2 on b") && e.contains("bad output length"),
        "{e}"
    );
}

#[test]
fn files_that_are_not_stage_plugins_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let e = user::load_plugin(&dir.path().join("absent.so"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("absent.so"), "{e}");
    let src = dir.path().join("empty.c");
    std::fs::write(&src, "int nothing(void) { return 0; }\n").unwrap();
    let so = dir.path().join("libempty.so");
    assert!(Command::new("cc")
        .args(["-shared", "-fPIC"])
        .arg(&src)
        .arg("-o")
        .arg(&so)
        .status()
        .unwrap()
        .success());
    let e = user::load_plugin(&so).unwrap_err().to_string();
    assert!(
        e.contains("libempty.so") && e.contains("vargr_stage_abi_version"),
        "{e}"
    );
}
