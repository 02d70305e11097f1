//! Trace files arrive from other processes (monitor pulls over the mesh) and from disk:
//! decoding arbitrary bytes must return an error, never panic or allocate without bound.

use std::path::Path;

/// `data` followed by its BLAKE3 hash: a version 2 trace file's checksum, without which
/// almost no mutated input would get past it to the structural checks.
pub fn with_checksum(data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    v.extend_from_slice(blake3::hash(data).as_bytes());
    v
}

pub fn run(data: &[u8]) {
    let _ = vargr_trace::TraceFile::decode(data, Path::new("fuzz"));
    let _ = vargr_trace::TraceFile::decode(&with_checksum(data), Path::new("fuzz"));
}
