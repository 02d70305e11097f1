//! A job monitor's gather tree: an interior agent's answer (its sub-tree's processes,
//! merged call summaries, other replies, who was missing) arrives from another process.
//! Decoding arbitrary bytes must return an error, never panic or allocate without bound.

pub fn run(data: &[u8]) {
    if let Ok(g) = vargr_coll::gather::Gathered::decode(data, "fuzz") {
        // What decodes encodes and decodes again to the same answer.
        let again = vargr_coll::gather::Gathered::decode(&g.encode(), "fuzz")
            .expect("an encoded answer decodes");
        assert_eq!(again, g);
    }
}
