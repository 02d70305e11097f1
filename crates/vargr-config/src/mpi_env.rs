//! The variables through which `libvargr_mpi.so` is configured: it is loaded into MPI
//! programs that vargr does not start itself (mpirun does, on every host), so the
//! process environment is the one way settings reach it. `vargr mpi-run` sets them and
//! the library reads them; both take the names from here.

/// The directory each rank writes its trace file into.
pub const TRACE_VAR: &str = "VARGR_MPI_TRACE";
/// `off`, `adaptive`, `fixed:CODEC` or `guided:PLAN`: compression between sites.
pub const CODEC_VAR: &str = "VARGR_MPI_CODEC";
/// The smallest message between sites that is compressed.
pub const CODEC_MIN_VAR: &str = "VARGR_MPI_CODEC_MIN";
/// Which ranks share a site.
pub const SITES_VAR: &str = "VARGR_MPI_SITES";
/// The WAN between sites, for the adaptive engine's first guess.
pub const LINK_VAR: &str = "VARGR_MPI_LINK";
/// Where ranks record samples of their messages for `vargr codec plan`.
pub const SAMPLES_VAR: &str = "VARGR_MPI_CODEC_SAMPLES";
/// The live monitor's addresses.
pub const MONITOR_VAR: &str = "VARGR_MPI_MONITOR";
/// The live monitor's secret (hex).
pub const MONITOR_SECRET_VAR: &str = "VARGR_MPI_MONITOR_SECRET";

/// The variables of compression.
pub const CODEC_VARS: [&str; 5] = [CODEC_VAR, CODEC_MIN_VAR, SITES_VAR, LINK_VAR, SAMPLES_VAR];
/// The variables of the live monitor.
pub const MONITOR_VARS: [&str; 2] = [MONITOR_VAR, MONITOR_SECRET_VAR];
/// Every variable the library reads, for launchers that pass them on.
pub const ALL_VARS: [&str; 8] = [
    TRACE_VAR,
    CODEC_VAR,
    CODEC_MIN_VAR,
    SITES_VAR,
    LINK_VAR,
    SAMPLES_VAR,
    MONITOR_VAR,
    MONITOR_SECRET_VAR,
];
