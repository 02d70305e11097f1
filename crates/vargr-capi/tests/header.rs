//! The checked-in `include/vargr.h` is what cbindgen makes of the sources, and it
//! compiles as C99 and as C++ in either include order with the filter plugin header.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn generate() -> Vec<u8> {
    let config = cbindgen::Config::from_file(crate_dir().join("cbindgen.toml"))
        .expect("reading cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir())
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate vargr.h");
    let mut out = Vec::new();
    bindings.write(&mut out);
    out
}

#[test]
fn header_matches_the_sources() {
    let path = crate_dir().join("include/vargr.h");
    let fresh = generate();
    if std::env::var("VARGR_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &fresh).expect("writing include/vargr.h");
        return;
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(
        current == fresh,
        "{} is stale: the C API changed. Regenerate it with\n    \
         VARGR_BLESS=1 cargo test -p vargr-capi --test header\nand commit the result.",
        path.display()
    );
}

fn filter_include() -> PathBuf {
    crate_dir().join("../vargr-filter/include")
}

/// Compiles `source` (C or C++ text) with `compiler` and `flags`, syntax only.
fn compiles(compiler: &str, flags: &[&str], ext: &str, source: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("t.{ext}"));
    std::fs::write(&file, source).unwrap();
    let out = Command::new(compiler)
        .args(flags)
        .args(["-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
        .arg(crate_dir().join("include"))
        .arg("-I")
        .arg(filter_include())
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("running {compiler}: {e}"));
    assert!(
        out.status.success(),
        "{compiler} {flags:?} rejected:\n{source}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const USE: &str =
    "int f(vargr_stream *s) { return vargr_stream_send(s, 1, \"%d\", 2) == VARGR_OK; }\n";

#[test]
fn header_compiles_as_c99_and_cpp_in_any_include_order() {
    let orders = [
        "#include <vargr.h>\n",
        "#include <vargr_filter.h>\n#include <vargr.h>\n",
        "#include <vargr.h>\n#include <vargr_filter.h>\n",
    ];
    for inc in orders {
        let src = format!("{inc}{USE}");
        compiles("cc", &["-std=c99", "-pedantic"], "c", &src);
        compiles("c++", &["-std=c++11", "-pedantic"], "cpp", &src);
    }
}
