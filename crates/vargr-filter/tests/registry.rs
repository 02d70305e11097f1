//! Specs, registration and panic isolation.

mod common;

use common::*;
use vargr_filter::{apply_guarded, FilterContext, FilterError, Packet, Registry, TransformFilter};
use vargr_wire::Value;

struct Boom;
impl TransformFilter for Boom {
    fn apply(&mut self, _: &FilterContext, wave: Vec<Packet>) -> Result<Vec<Packet>, FilterError> {
        if wave.len() > 1 {
            panic!("boom with {} packets", wave.len());
        }
        Ok(wave)
    }
    fn name(&self) -> &str {
        "boom"
    }
}

#[test]
fn builtin_names_and_specs() {
    let r = Registry::with_builtins();
    let names = r.names();
    for n in [
        "avg",
        "concat",
        "equivalence",
        "histogram",
        "identity",
        "max",
        "min",
        "null",
        "sum",
        "timealign",
    ] {
        assert!(names.contains(&n.to_string()), "{n}");
    }
    assert!(r.create(" sum ").is_ok());
    let e = r.create("sum:3").err().unwrap();
    assert_eq!(
        e.to_string(),
        "sum: bad parameters \"3\": sum takes no parameters"
    );
    let e = r.create("median").err().unwrap();
    assert!(matches!(e, FilterError::UnknownFilter { .. }));
    assert!(
        e.to_string()
            .starts_with("unknown filter \"median\" (known: avg, concat,"),
        "{e}"
    );
    assert_eq!(Registry::default().names(), Vec::<String>::new());
}

#[test]
fn registered_filters_and_panics_are_contained() {
    let mut r = Registry::with_builtins();
    r.register(
        "boom",
        Box::new(|_: &str| Ok(Box::new(Boom) as Box<dyn TransformFilter>)),
    );
    let mut f = r.create("boom").unwrap();
    let one = vec![pkt("%d", vec![Value::Int(1)])];
    assert_eq!(
        apply_guarded(f.as_mut(), &ctx(true, 1), one.clone()).unwrap(),
        one
    );
    let e = apply_guarded(
        f.as_mut(),
        &ctx(true, 2),
        vec![one[0].clone(), one[0].clone()],
    )
    .unwrap_err();
    match &e {
        FilterError::Panicked { filter, message } => {
            assert_eq!(filter, "boom");
            assert_eq!(message, "boom with 2 packets");
        }
        other => panic!("expected Panicked, got {other:?}"),
    }
    assert_eq!(e.to_string(), "filter boom panicked: boom with 2 packets");
}

#[test]
fn builtin_errors_pass_through_apply_guarded() {
    let mut f = filter("sum");
    let e = apply_guarded(
        f.as_mut(),
        &ctx(true, 1),
        vec![pkt("%s", vec![Value::Str("x".into())])],
    )
    .unwrap_err();
    assert!(matches!(e, FilterError::Format { .. }));
}

#[test]
fn registry_and_filters_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Registry>();
    send::<Box<dyn TransformFilter>>();
    send::<vargr_filter::SyncFilter>();
    assert_eq!(vargr_filter::PLUGIN_ABI_VERSION, 1);
}
