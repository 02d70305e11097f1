//! `vargr trace report` and `export` read trace files from crashed runs and other
//! machines: whatever decodes must analyse, export and render without a panic, and the
//! exported timeline must pass the exporter's own validator.
//!
//! The input is one or more trace files without their checksums, each starting with
//! the `VARGRTR2` magic; each is given its checksum back (see
//! [`crate::trace_decode::with_checksum`]) so that mutations reach the analysis.

use std::path::Path;

use vargr_trace::{analysis, export, report, TraceFile};

const MAGIC: &[u8] = b"VARGRTR2";

/// The pieces of `data` that start with the magic (the first piece whatever it holds).
pub(crate) fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let mut starts: Vec<usize> = data
        .windows(MAGIC.len())
        .enumerate()
        .filter(|(i, w)| *i > 0 && *w == MAGIC)
        .map(|(i, _)| i)
        .collect();
    starts.insert(0, 0);
    starts.push(data.len());
    starts.windows(2).map(|w| &data[w[0]..w[1]]).collect()
}

pub fn run(data: &[u8]) {
    let files: Vec<TraceFile> = pieces(data)
        .into_iter()
        .filter_map(|p| {
            TraceFile::decode(&crate::trace_decode::with_checksum(p), Path::new("fuzz")).ok()
        })
        .collect();
    if files.is_empty() {
        return;
    }
    // A file that decodes writes back to one that decodes the same.
    for f in &files {
        assert_eq!(
            &TraceFile::decode(&f.encode(), Path::new("again")).unwrap(),
            f
        );
    }
    let a = analysis::analyze(&files);
    let mut json = Vec::new();
    export::write_chrome(&a.timeline, &mut json).expect("writing to memory");
    let doc: serde_json::Value = serde_json::from_slice(&json).expect("the export is JSON");
    if let Err(errs) = export::validate(&doc) {
        panic!("the export does not validate: {errs:?}");
    }
    let _ = report::render(&a, "fuzz");
    let _ = a.summary.line();
}
