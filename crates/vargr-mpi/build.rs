//! Compiles the MPI wrappers (`c/wrappers.c`) against the mpi.h of the MPI this library
//! is built for, and links that MPI's libmpi.
//!
//! Handles differ between MPI ABIs (pointers in Open MPI, ints in MPICH), so the wrappers
//! are only correct against the header of the library they run on: this build is for
//! Open MPI, found through its compiler wrapper (`mpicc --showme:*`, or `$VARGR_MPICC`).
//! Without Open MPI the library is built without wrappers (`vargr_mpi_abi="none"`), so a
//! workspace build never needs MPI; `vargr mpi-run` then says what to install.

use std::process::Command;

fn showme(mpicc: &str, what: &str) -> Option<Vec<String>> {
    let out = Command::new(mpicc)
        .arg(format!("--showme:{what}"))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect(),
    )
}

fn main() {
    println!("cargo:rerun-if-changed=c/wrappers.c");
    println!("cargo:rerun-if-changed=c/compress.c");
    println!("cargo:rerun-if-changed=c/fortran.c");
    println!("cargo:rerun-if-changed=c/shim.h");
    println!("cargo:rerun-if-changed=c/reqmap.h");
    println!("cargo:rerun-if-env-changed=VARGR_MPICC");
    println!("cargo::rustc-check-cfg=cfg(vargr_mpi_abi, values(\"openmpi\", \"none\"))");
    let mpicc = std::env::var("VARGR_MPICC").unwrap_or_else(|_| "mpicc".into());
    // `--showme` is Open MPI's; MPICH's mpicc has `-show` instead, and is not this build's.
    let (Some(incdirs), Some(libdirs)) = (showme(&mpicc, "incdirs"), showme(&mpicc, "libdirs"))
    else {
        println!(
            "cargo:warning=Open MPI's {mpicc} not found: libvargr_mpi.so is built without \
             MPI wrappers (apt-get install libopenmpi-dev, then rebuild)"
        );
        println!("cargo:rustc-cfg=vargr_mpi_abi=\"none\"");
        return;
    };
    let mut build = cc::Build::new();
    build
        .file("c/wrappers.c")
        .file("c/compress.c")
        .file("c/fortran.c")
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true);
    for dir in &incdirs {
        build.include(dir);
        println!("cargo:rerun-if-changed={dir}/mpi.h");
    }
    build.compile("vargr_mpi_wrappers");
    for dir in &libdirs {
        println!("cargo:rustc-link-search=native={dir}");
    }
    // The wrappers call PMPI_*. Linking libmpi resolves them and their constants (e.g.
    // Open MPI's `ompi_mpi_comm_world`) in any program; in a program of another MPI the
    // check at MPI_Init then finds the mismatch and says so, instead of a loader error.
    println!("cargo:rustc-link-lib=dylib=mpi");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvargr_mpi.so");
    println!("cargo:rustc-cfg=vargr_mpi_abi=\"openmpi\"");
}
