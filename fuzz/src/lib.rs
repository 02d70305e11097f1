//! The checks behind every fuzz target, as plain functions.
//!
//! Each module's `run(data)` is one target's body: it feeds `data` to a decoder of
//! bytes that come from other processes, files or the network, and panics when an
//! invariant breaks. Keeping the bodies out of the libFuzzer binaries lets two drivers
//! share them: `cargo fuzz run NAME` (nightly, coverage-guided) through the thin
//! wrappers in `fuzz_targets/`, and the stable runner `fuzz-run` that CI uses, which
//! replays the seed corpus in `corpus/NAME/` and mutates it for a bounded time.

pub mod abort;
pub mod codec_decode;
pub mod codec_report;
pub mod codec_trace;
pub mod decode_frame;
pub mod dedup_delta;
pub mod dedup_layout;
pub mod dedup_protocol;
pub mod link_seal;
pub mod monitor_gather;
pub mod monitor_reply;
pub mod mpi_frame;
pub mod mutate;
pub mod rfb_decode;
pub mod seeds;
pub mod sync_frames;
pub mod tbon_clock;
pub mod tbon_monitor;
pub mod trace_decode;
pub mod trace_report;
pub mod vnc_proxy;

/// One fuzz target: its name (that of its libFuzzer binary and corpus directory), its
/// body, and the valid inputs its seed corpus starts from.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
    /// Named seed inputs, made with the crates' own encoders.
    pub seeds: fn() -> Vec<(String, Vec<u8>)>,
}

/// A seed's name as a file name that any file system and shell take as it is.
pub fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Every target, in the order the runner runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "codec_decode",
        run: codec_decode::run,
        seeds: seeds::codec_decode,
    },
    Target {
        name: "codec_report",
        run: codec_report::run,
        seeds: seeds::codec_report,
    },
    Target {
        name: "codec_trace",
        run: codec_trace::run,
        seeds: seeds::codec_trace,
    },
    Target {
        name: "decode_frame",
        run: decode_frame::run,
        seeds: seeds::decode_frame,
    },
    Target {
        name: "dedup_delta",
        run: dedup_delta::run,
        seeds: seeds::dedup_delta,
    },
    Target {
        name: "dedup_layout",
        run: dedup_layout::run,
        seeds: seeds::dedup_layout,
    },
    Target {
        name: "dedup_protocol",
        run: dedup_protocol::run,
        seeds: seeds::dedup_protocol,
    },
    Target {
        name: "link_seal",
        run: link_seal::run,
        seeds: seeds::link_seal,
    },
    Target {
        name: "monitor_reply",
        run: monitor_reply::run,
        seeds: seeds::monitor_reply,
    },
    Target {
        name: "monitor_gather",
        run: monitor_gather::run,
        seeds: seeds::monitor_gather,
    },
    Target {
        name: "rfb_decode",
        run: rfb_decode::run,
        seeds: seeds::rfb_decode,
    },
    Target {
        name: "mpi_frame",
        run: mpi_frame::run,
        seeds: seeds::mpi_frame,
    },
    Target {
        name: "vnc_proxy",
        run: vnc_proxy::run,
        seeds: seeds::vnc_proxy,
    },
    Target {
        name: "sync_frames",
        run: sync_frames::run,
        seeds: seeds::sync_frames,
    },
    Target {
        name: "tbon_clock",
        run: tbon_clock::run,
        seeds: seeds::tbon_clock,
    },
    Target {
        name: "tbon_monitor",
        run: tbon_monitor::run,
        seeds: seeds::tbon_monitor,
    },
    Target {
        name: "trace_report",
        run: trace_report::run,
        seeds: seeds::trace_report,
    },
    Target {
        name: "trace_decode",
        run: trace_decode::run,
        seeds: seeds::trace_decode,
    },
];

#[cfg(test)]
mod tests {
    /// A libFuzzer target that the runner does not know would never run in CI.
    #[test]
    fn the_runner_knows_every_libfuzzer_target() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz_targets");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut known: Vec<String> = super::TARGETS.iter().map(|t| t.name.into()).collect();
        known.sort();
        assert_eq!(files, known);
    }
}
