//! Compiles the MPI wrappers (`c/`) against the mpi.h of the MPI this library is built
//! for, and links that MPI's library.
//!
//! Handles differ between MPI ABIs (pointers in Open MPI, ints in MPICH), so the wrappers
//! are only correct against the header of the library they run on. Two packages share
//! this script and the sources: `vargr-mpi` builds `libvargr_mpi.so` for Open MPI, found
//! through its compiler wrapper (`mpicc --showme:*`, or `$VARGR_MPICC`), and
//! `vargr-mpi-mpich` builds `libvargr_mpi_mpich.so` for MPICH (`mpicc.mpich
//! -compile_info`/`-link_info`, or `$VARGR_MPICC_MPICH`). Without its MPI a library is
//! built without wrappers (`vargr_mpi_abi="none"`), so a workspace build never needs
//! MPI; `vargr mpi-run` then says what to install.

use std::path::PathBuf;
use std::process::Command;

fn output(cmd: &str, arg: &str) -> Option<String> {
    let out = Command::new(cmd).arg(arg).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Include and library directories, and libraries, of an MPI's compiler wrapper.
struct Mpi {
    incdirs: Vec<String>,
    libdirs: Vec<String>,
    libs: Vec<String>,
}

fn open_mpi(mpicc: &str) -> Option<Mpi> {
    let words = |what: &str| -> Option<Vec<String>> {
        Some(
            output(mpicc, &format!("--showme:{what}"))?
                .split_whitespace()
                .map(String::from)
                .collect(),
        )
    };
    Some(Mpi {
        incdirs: words("incdirs")?,
        libdirs: words("libdirs")?,
        libs: vec!["mpi".into()],
    })
}

/// MPICH's wrapper has no `--showme`: its flags, split into the parts used here.
fn mpich(mpicc: &str) -> Option<Mpi> {
    let flags = output(mpicc, "-link_info")?;
    let with = |p: &str| -> Vec<String> {
        flags
            .split_whitespace()
            .filter_map(|w| w.strip_prefix(p).map(String::from))
            .collect()
    };
    let libs = with("-l");
    (!libs.is_empty()).then(|| Mpi {
        incdirs: with("-I"),
        libdirs: with("-L"),
        libs,
    })
}

fn main() {
    let package = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    let for_mpich = package == "vargr-mpi-mpich";
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let c = if for_mpich {
        manifest.join("../vargr-mpi/c")
    } else {
        manifest.join("c")
    };
    for f in [
        "wrappers.c",
        "compress.c",
        "fortran.c",
        "shim.h",
        "reqmap.h",
    ] {
        println!("cargo:rerun-if-changed={}", c.join(f).display());
    }
    println!("cargo::rustc-check-cfg=cfg(vargr_mpi_abi, values(\"openmpi\", \"mpich\", \"none\"))");
    let (var, default, lib_name, abi) = if for_mpich {
        (
            "VARGR_MPICC_MPICH",
            "mpicc.mpich",
            "libvargr_mpi_mpich.so",
            "mpich",
        )
    } else {
        ("VARGR_MPICC", "mpicc", "libvargr_mpi.so", "openmpi")
    };
    println!("cargo:rerun-if-env-changed={var}");
    let mpicc = std::env::var(var).unwrap_or_else(|_| default.into());
    let found = if for_mpich {
        mpich(&mpicc)
    } else {
        open_mpi(&mpicc)
    };
    let Some(mpi) = found else {
        let install = if for_mpich {
            "mpich libmpich-dev"
        } else {
            "libopenmpi-dev"
        };
        println!(
            "cargo:warning={abi}'s {mpicc} not found: {lib_name} is built without MPI wrappers \
             (apt-get install {install}, then rebuild)"
        );
        println!("cargo:rustc-cfg=vargr_mpi_abi=\"none\"");
        return;
    };
    let mut build = cc::Build::new();
    build
        .file(c.join("wrappers.c"))
        .file(c.join("compress.c"))
        .define("VARGR_MPI_LIB", format!("\"{lib_name}\"").as_str())
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true);
    // Open MPI's Fortran bindings bypass the C wrappers (c/fortran.c replaces them);
    // MPICH's call them, so its programs need nothing more.
    if !for_mpich {
        build.file(c.join("fortran.c"));
    }
    for dir in &mpi.incdirs {
        build.include(dir);
        println!("cargo:rerun-if-changed={dir}/mpi.h");
    }
    build.compile("vargr_mpi_wrappers");
    for dir in &mpi.libdirs {
        println!("cargo:rustc-link-search=native={dir}");
    }
    // The wrappers call PMPI_*. Linking the MPI library resolves them and their
    // constants (e.g. Open MPI's `ompi_mpi_comm_world`) in any program; in a program of
    // another MPI the check at MPI_Init then finds the mismatch and says so, instead of
    // a loader error.
    for l in &mpi.libs {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{lib_name}");
    println!("cargo:rustc-cfg=vargr_mpi_abi=\"{abi}\"");
}
