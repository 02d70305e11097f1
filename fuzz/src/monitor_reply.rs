//! Monitor replies arrive from every agent of a job over the monitor plane: decoding
//! arbitrary bytes must return an error, never panic or allocate without bound.

pub fn run(data: &[u8]) {
    let _ = vargr_trace::scope::Reply::decode(data, "fuzz");
    // A records reply holds a trace file: also with a valid checksum, so that mutated
    // files reach the checks behind it.
    if let [b'R', file @ ..] = data {
        let mut sealed = vec![b'R'];
        sealed.extend(crate::trace_decode::with_checksum(file));
        let _ = vargr_trace::scope::Reply::decode(&sealed, "fuzz");
    }
}
