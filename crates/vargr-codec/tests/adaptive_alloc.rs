//! Once warmed up, `Engine::decide` allocates nothing: on the raw fast path and on the
//! path that confirms a compression with the model. (Periodic samples and studies do
//! compress a slice and may allocate; this test switches periodic samples off.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use vargr_codec::{testdata, ElemKind, Engine, EngineConfig, LinkKey, LinkModel, Reason};

struct Counting;

thread_local! {
    // A Cell of a plain integer has no destructor, so the allocator may touch it.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn warmed_up_decisions_do_not_allocate() {
    let config = EngineConfig {
        sample_every: 0,
        reevaluate_after: 1_000_000,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(config).unwrap();
    let link = LinkKey(3);
    engine.set_link_model(link, LinkModel::new(200e-6, 12.5e6));
    let noise = testdata::random_bytes(64 * 1024, 1);
    let field = testdata::f64_bytes(&testdata::smooth_field_f64(8192, 0.0, 2));
    // Warm-up: the first message of each class studies its candidates.
    assert_eq!(
        engine.decide(link, ElemKind::BYTES, &noise).reason,
        Reason::Studied
    );
    assert!(engine.decide(link, ElemKind::F64, &field).compress());

    let before = allocs();
    let mut compressed = 0;
    for _ in 0..10_000 {
        let raw = engine.decide(link, ElemKind::BYTES, &noise);
        let comp = engine.decide(link, ElemKind::F64, &field);
        compressed += usize::from(comp.compress()) + usize::from(raw.compress());
    }
    let after = allocs();
    assert_eq!(after - before, 0, "decide allocated");
    assert_eq!(compressed, 10_000);
}
