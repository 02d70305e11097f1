//! Rust user stages on a path: registered by name, built on the links the path names
//! (a whole tree in one process, real Unix sockets); one that panics closes its link
//! with an error naming it and the link, and the process and the other paths go on.

use std::time::Duration;

use bytes::Bytes;
use vargr_paths::PathSpec;
use vargr_stage::{user, Stage};
use vargr_tbon::{Backend, BackendSpec, NetworkOptions, Packet, SyncMode, TbonError, Value};

const GUARD: Duration = Duration::from_secs(20);

/// Appends "!" to the string of every "%s" packet it sends.
struct Bang;

impl Stage for Bang {
    fn name(&self) -> &str {
        "bang"
    }
    fn outbound(&mut self, _now: std::time::Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        let Ok(f) = vargr_wire::decode_exact(&frame, 1 << 20) else {
            return out.push(frame);
        };
        match Packet::decode_payload(f.stream, f.tag, &f.payload) {
            Ok(mut p) if f.kind == vargr_wire::FrameKind::Data && p.format.as_str() == "%s" => {
                if let Some(Value::Str(s)) = p.values.first_mut() {
                    s.push('!');
                }
                out.push(p.to_frame().to_wire());
            }
            _ => out.push(frame),
        }
    }
}

/// Panics on the first data frame it sees.
struct Boom;

impl Stage for Boom {
    fn name(&self) -> &str {
        "boom"
    }
    fn outbound(&mut self, _now: std::time::Instant, frame: Bytes, out: &mut Vec<Bytes>) {
        assert!(
            frame.get(2) != Some(&(vargr_wire::FrameKind::Data as u8)),
            "boom: a data frame"
        );
        out.push(frame);
    }
}

/// Answers each packet with "from RANK".
fn serve(be: Backend) {
    while let Ok(p) = be.recv() {
        let text = format!("from {}", be.rank());
        if be.send(p.stream, 1, "%s", vec![Value::Str(text)]).is_err() {
            return;
        }
    }
}

#[test]
fn rust_stages_run_on_the_links_their_paths_name() {
    user::register("bang", |_: &str| Ok(Box::new(Bang) as Box<dyn Stage>)).unwrap();
    user::register("boom", |_: &str| Ok(Box::new(Boom) as Box<dyn Stage>)).unwrap();
    let spec = PathSpec::parse(
        "[element]\nname = \"E\"\nhost = \"fe\"\n\
         [[path]]\nfrom = \"a:0-1\"\nstages = [\"bang\", \"remote:m\", \"bang\", \"remote:fe\"]\n\
         [[path]]\nfrom = \"b:0\"\nstages = [\"remote:fe\"]\n\
         [[path]]\nfrom = \"c:0\"\nstages = [\"boom\", \"remote:fe\"]\n",
        "run.toml",
    )
    .unwrap();
    assert!(spec.check_stages(false).unwrap().is_empty());
    let built = spec.merge().unwrap().build().unwrap();
    let c = built.topology.nodes().find(|n| n.host == "c").unwrap().id;
    let (net, s) = built
        .start(
            BackendSpec::threads(serve),
            NetworkOptions::default(),
            |o| o.sync(SyncMode::DontWait),
        )
        .unwrap();
    s.send(1, "%d", vec![Value::Int(0)]).unwrap();
    // a's answers cross two links with `bang`, b's none; c's link broke on the way down.
    let mut got = Vec::new();
    let mut lost = Vec::new();
    let deadline = std::time::Instant::now() + GUARD;
    while got.len() < 3 {
        assert!(std::time::Instant::now() < deadline, "{got:?} {lost:?}");
        match s.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(p)) => {
                let host = net.topology().backend(p.source).unwrap().host.clone();
                got.push((host, p.values[0].as_str().unwrap().to_string()));
            }
            Ok(None) => {}
            Err(e @ TbonError::NodeLost { .. }) => lost.push(e.to_string()),
            Err(e) => panic!("{e}"),
        }
    }
    got.sort();
    let rank = |host: &str| {
        net.topology()
            .backends()
            .into_iter()
            .filter(|n| n.host == host)
            .map(|n| n.backend_rank.unwrap())
            .collect::<Vec<_>>()
    };
    let (a, b) = (rank("a"), rank("b"));
    assert_eq!(
        got,
        [
            ("a".to_string(), format!("from {}!!", a[0])),
            ("a".to_string(), format!("from {}!!", a[1])),
            ("b".to_string(), format!("from {}", b[0])),
        ]
    );
    let broke = |f: &String| {
        f.contains("stage boom")
            && f.contains(&format!("node {c} on c"))
            && f.contains("panicked: boom: a data frame")
    };
    loop {
        let faults: Vec<String> = net.faults().iter().map(|e| e.to_string()).collect();
        if faults.iter().any(broke) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{faults:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    net.shutdown().unwrap();
}
