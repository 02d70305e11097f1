//! `vargr._vargr`: the Rust half of the Python package `vargr` (python/vargr).
//!
//! vargr's users write Python as often as Rust: scientists who know mpi4py, tool
//! builders who script MRNet front-ends. This crate puts vargr's libraries behind that
//! interface without a second implementation: every call goes straight to the Rust
//! crates, and the only work done here is converting values and managing the GIL.
//!
//! - [`tbon`]: `Topology`, `Network`, `Stream`, `Backend`; Python filters at the
//!   front-end.
//! - [`paths`]: `Paths`, path specifications (python/vargr/paths.py runs their Python
//!   stages).
//! - [`coll`]: `World()` and `Comm` (mpi4py's names), `Op`, conditional allreduce.
//! - [`codec`] and [`dedup`]: the `vargr.codec` and `vargr.dedup` submodules.
//! - [`packet`]: format strings and values; numpy arrays in and out.
//! - [`io`]: `File`, `View` and `FileStats`: collective file I/O (vargr-io).
//! - [`errors`]: the `vargr.VargrError` hierarchy.
//! - [`block`]: blocking calls that Ctrl-C can interrupt.

use pyo3::prelude::*;

mod block;
mod codec;
mod coll;
mod dedup;
mod errors;
mod io;
mod p2p;
mod packet;
mod paths;
mod tbon;
mod trace;

#[pymodule]
fn _vargr(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Ctrl-C ends a collective's waits (see block::interruptible).
    vargr_net::mesh::set_interrupt_check(block::check_signals);
    // What the libraries report goes to stderr (warnings by default; VARGR_LOG or
    // RUST_LOG filters), as under the `vargr` command.
    let var = |name| std::env::var(name).ok();
    vargr_log::LogSettings::from_user(var("VARGR_LOG"), var("RUST_LOG"), 0).install_or_warn();
    // The process-wide settings (collectors on or off, ring size); a bad configuration
    // is reported when something uses it (joining a job, starting a tree).
    if let Ok(config) = vargr_config::from_process() {
        config.apply_to_process();
    }
    // `vargr.__version__`: the version of the code loaded, which is also the wheel's
    // (maturin takes the crate's), without reading the installed metadata at import.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<packet::PyPacket>()?;
    m.add_class::<tbon::PyTopology>()?;
    m.add_class::<tbon::PyNetwork>()?;
    m.add_class::<tbon::PyCommunicator>()?;
    m.add_class::<tbon::PyStream>()?;
    m.add_class::<tbon::PyBackend>()?;
    m.add_class::<paths::PyPaths>()?;
    m.add_function(wrap_pyfunction!(tbon::run_commnode, m)?)?;
    m.add_class::<coll::PyComm>()?;
    m.add_class::<coll::PyOp>()?;
    m.add_class::<p2p::PyRequest>()?;
    m.add_class::<coll::PyInPlace>()?;
    m.add_class::<coll::PyCondOutcome>()?;
    m.add_class::<coll::PyCondAllreduce>()?;
    m.add_function(wrap_pyfunction!(coll::world, m)?)?;
    m.add_function(wrap_pyfunction!(coll::solo, m)?)?;
    m.add_function(wrap_pyfunction!(coll::in_job, m)?)?;
    m.add_function(wrap_pyfunction!(coll::finish, m)?)?;
    m.add_function(wrap_pyfunction!(coll::write_trace, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_report, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_diff, m)?)?;
    use vargr_coll::Op;
    for op in [
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::Land,
        Op::Lor,
        Op::Band,
        Op::Bor,
    ] {
        let name = op.name().to_ascii_uppercase();
        m.add(name.as_str(), coll::PyOp::builtin(op))?;
    }
    m.add("IN_PLACE", coll::PyInPlace)?;
    m.add("SLICE_SECONDS", block::SLICE.as_secs_f64())?;
    m.add_class::<io::PyFile>()?;
    m.add_class::<io::PyView>()?;
    m.add_class::<io::PyFileStats>()?;
    codec::register(m)?;
    dedup::register(m)?;
    Ok(())
}
