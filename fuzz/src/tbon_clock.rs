//! Clock frames of the tree's skew estimation arrive from other nodes: every decoder
//! must return an error for bytes that cannot be its message, never panic.

use vargr_tbon::clock::{check_ping, Pong, ReportMsg, SetMsg};

pub fn run(data: &[u8]) {
    let _ = check_ping(data);
    if let Ok(p) = Pong::decode(data) {
        assert_eq!(Pong::decode(&p.encode()), Ok(p));
    }
    if let Ok(s) = SetMsg::decode(data) {
        assert_eq!(SetMsg::decode(&s.encode()), Ok(s));
    }
    if let Ok(r) = ReportMsg::decode(data) {
        assert_eq!(ReportMsg::decode(&r.encode()), Ok(r));
    }
}
