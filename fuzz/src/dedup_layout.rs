//! Arbitrary layouts and segments into every segmenter's reassembly (the receiver's
//! side of a message from the network): an error or a message, never a panic or an
//! output larger than the segments.

pub const SPECS: [&str; 6] = ["cdc", "static:64", "sw", "tiles:4x4", "varg", "ndarray"];

pub fn run(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let seg = vargr_dedup::by_name(SPECS[usize::from(pick) % SPECS.len()]).unwrap();
    let split = rest.len() / 3;
    let (layout, body) = rest.split_at(split);
    let segments: Vec<&[u8]> = body.chunks(7).collect();
    let mut out = vec![1, 2, 3];
    match seg.reassemble(layout, &segments, &mut out) {
        Ok(()) => assert!(out.len() - 3 <= body.len()),
        Err(_) => assert_eq!(out, [1, 2, 3]),
    }
}
