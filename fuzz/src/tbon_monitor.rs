//! Monitor answers come up the tree from other nodes: decoding arbitrary bytes must
//! return an error naming the sender, never panic or allocate without bound.

pub fn run(data: &[u8]) {
    let _ = vargr_tbon::monitor::decode_answers(data, "fuzz");
}
