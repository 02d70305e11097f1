//! `vargr bench mpi-shim` end to end, small: NetPIPE, the IS exchange and the IMB-like
//! loops under Open MPI, on one machine (shared memory and TCP) and between two emulated
//! sites (network namespaces joined by a link shaped to 100 Mbit/s), without the
//! library, traced, monitored and compressed. Checks what holds
//! whatever the machine's speed: every record verified (IS's checksum equal to the run
//! without the library), bytes between sites counted on the wan rows only, and NetPIPE's
//! constant payload crossing the link in far fewer bytes compressed than not.
//!
//! Skipped with a printed reason without root (namespaces), mpirun or NetPIPE.

mod common;

use std::process::Command;
use std::time::Duration;

use common::run_cli;
use serde_json::Value;

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn mpi_shim_benchmark_measures_every_mode_and_verifies_results() {
    // SAFETY: a plain system call.
    let root = unsafe { libc::geteuid() } == 0;
    for (ok, why) in [
        (root, "not root (the sites are network namespaces)"),
        (have("mpirun") && have("mpicc"), "no Open MPI"),
        (have("NPopenmpi"), "no NetPIPE (netpipe-openmpi)"),
        (have("ip") && have("tc"), "no ip or tc"),
    ] {
        if !ok {
            eprintln!("skipped: {why}");
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("mpi-shim.json");
    let run = run_cli(
        &[
            "bench",
            "mpi-shim",
            "--quick",
            "--runs",
            "1",
            "--programs",
            "netpipe,is,imb",
            "--modes",
            "off,trace,monitor,codec-fixed:lz4",
            "--networks",
            "local,tcp,wan",
            "--pcontrol-pairs",
            "4",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    let (out, err) = (&run.stdout, &run.stderr);
    assert!(run.status.success(), "{out}\n{err}");
    let records: Vec<Value> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let find = |program: &str, sites: u64, mode: &str| {
        records
            .iter()
            .find(|r| r["program"] == program && r["sites"] == sites && r["mode"] == mode)
            .unwrap_or_else(|| panic!("no record {program} {sites} {mode} in {records:?}"))
    };
    // On each machine-local network: netpipe, is and imb's four loops, in three modes;
    // between sites the same in four (codec modes run there only).
    assert_eq!(records.len(), 2 * 6 * 3 + 6 * 4, "{records:?}");
    for (link, modes) in [
        ("shared memory", &["off", "trace", "monitor"][..]),
        ("TCP on loopback", &["off", "trace", "monitor"][..]),
        (
            "100mbit",
            &["off", "trace", "monitor", "codec-fixed:lz4"][..],
        ),
    ] {
        for &mode in modes {
            let loops = records
                .iter()
                .filter(|r| {
                    r["link"] == link
                        && r["mode"] == mode
                        && r["program"].as_str().unwrap().starts_with("imb-")
                })
                .count();
            assert_eq!(loops, 4, "{link} {mode}: {records:?}");
        }
    }
    for r in &records {
        assert_eq!(r["benchmark"], "mpi-shim");
        assert_eq!(r["verified"], true, "{r}");
        assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
        let wan = r["sites"] == 2;
        assert_eq!(r["bytes_between_sites"].is_u64(), wan, "{r}");
        if r["mode"] == "off" {
            assert_eq!(r["overhead_pct"].as_f64(), Some(0.0), "{r}");
            assert_eq!(r["paired_overhead_pct"].as_f64(), Some(0.0), "{r}");
        }
        // The loops' blocks, recorded and paused by MPI_Pcontrol: 4 pairs a run.
        let imb = r["program"].as_str().unwrap().starts_with("imb-");
        assert_eq!(r["pcontrol"]["pairs"].as_u64(), imb.then_some(4), "{r}");
    }
    let between = |mode: &str| {
        find("netpipe", 2, mode)["bytes_between_sites"]
            .as_u64()
            .unwrap()
    };
    // NetPIPE sends 64 KiB to 256 KiB messages 10 times each way: megabytes cross.
    assert!(between("off") > 4 << 20, "{}", between("off"));
    assert!(
        between("codec-fixed:lz4") * 10 < between("off"),
        "{} vs {}",
        between("codec-fixed:lz4"),
        between("off")
    );
    let summary = find("is", 2, "codec-fixed:lz4")["summary"]
        .as_str()
        .unwrap();
    assert!(
        summary.starts_with("vargr-mpi: compression fixed:lz4:"),
        "{summary}"
    );
    assert!(out.contains("overhead"), "{out}");
}
