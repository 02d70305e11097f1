//! `vargr mpi-run [--trace DIR] [--monitor KINDS] [--codec MODE --sites SITES] -- mpirun
//! -n 4 ./app`: runs an unmodified MPI program under libvargr_mpi.so (crates/vargr-mpi;
//! libvargr_mpi_mpich.so under MPICH's launcher). It finds the library beside this
//! binary, puts it in `LD_PRELOAD` with the library's documented variables
//! (`vargr_mpi::settings`), runs the launcher, and says where the traces are. With
//! `--monitor` it also runs the live monitor (`vargr_coll::open_plane`), which the
//! ranks' agents join, and keeps the status `vargr top` shows.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::top_cmd::MonitorArgs;
use vargr_coll::open_plane::OpenMonitor;
use vargr_config::mpi_env::{CODEC_VARS, MONITOR_VARS, TRACE_VAR};
use vargr_net::runtime_dir::RuntimeDir;

#[derive(Args)]
pub struct MpiRunArgs {
    /// Write each rank's trace file into DIR (read them with `vargr trace report DIR`).
    #[arg(long, value_name = "DIR")]
    trace: Option<PathBuf>,
    /// Compress messages between sites: off, adaptive (vargr's engine decides per
    /// message), or fixed:CODEC (fixed:lz4, fixed:zstd:3, fixed:fpc, ...).
    #[arg(long, value_name = "MODE")]
    codec: Option<String>,
    /// Messages between sites of at least this many bytes are compressed [default: 16k].
    #[arg(long, value_name = "BYTES", requires = "codec")]
    codec_min: Option<String>,
    /// Which ranks share a site: hosts (the default), blocks:N (the world in N blocks of
    /// consecutive ranks, for sites emulated on one machine) or list:A,A,B,B.
    #[arg(long, value_name = "SITES", requires = "codec")]
    sites: Option<String>,
    /// The WAN between sites, for the adaptive engine (e.g. rtt=40ms,bandwidth=100mbit);
    /// without it the engine learns from the sends.
    #[arg(long, value_name = "PROFILE", requires = "codec")]
    link: Option<String>,
    /// Record samples of the messages between sites into DIR, for `vargr codec plan
    /// DIR`, whose plan a later run uses with `--codec guided:DIR/plan.json`.
    #[arg(long, value_name = "DIR", requires = "codec")]
    codec_samples: Option<PathBuf>,
    #[command(flatten)]
    mon: MonitorArgs,
    /// The interposition library [default: beside this vargr, libvargr_mpi.so for Open
    /// MPI's launcher, libvargr_mpi_mpich.so for MPICH's].
    #[arg(long, value_name = "FILE")]
    lib: Option<PathBuf>,
    /// The launcher and the program: `mpirun -n 4 ./app ARGS`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    command: Vec<OsString>,
}

/// The library's file name for each MPI ABI.
const LIB: &str = "libvargr_mpi.so";
const LIB_MPICH: &str = "libvargr_mpi_mpich.so";

/// The MPI whose launcher starts the program.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Launcher {
    OpenMpi,
    Mpich,
    Other,
}

/// What the monitor watches unless told: the world's collectives (the world's
/// point-to-point collectors share the `ctx0/` prefix but are not calls every rank makes).
const WORLD_COLLECTIVES: [&str; 9] = [
    "barrier",
    "bcast",
    "reduce",
    "allreduce",
    "gather",
    "allgather",
    "scatter",
    "alltoall",
    "alltoallv",
];

pub fn run(a: MpiRunArgs, config_file: Option<&Path>) -> Result<()> {
    let (launcher, rest) = a.command.split_first().expect("clap requires a command");
    let mpi = launcher_mpi(launcher);
    let lib = match &a.lib {
        Some(l) => l.clone(),
        None => beside_exe(if mpi == Launcher::Mpich {
            LIB_MPICH
        } else {
            LIB
        })?,
    };
    if !lib.is_file() {
        let (package, headers) = if mpi == Launcher::Mpich {
            (
                "vargr-mpi-mpich",
                "MPICH's headers: apt-get install libmpich-dev",
            )
        } else {
            (
                "vargr-mpi",
                "Open MPI's headers: apt-get install libopenmpi-dev",
            )
        };
        bail!(
            "{}: no such file; build it with `cargo build -p {package}` (it needs {headers}) \
             or give --lib FILE",
            lib.display()
        );
    }
    let lib = std::path::absolute(&lib).with_context(|| format!("{}", lib.display()))?;
    let trace = match &a.trace {
        Some(d) => {
            // Absolute, since ranks may start in another directory (mpirun --wdir).
            let d = std::path::absolute(d).with_context(|| format!("{}", d.display()))?;
            std::fs::create_dir_all(&d)
                .with_context(|| format!("{}: cannot make the trace directory", d.display()))?;
            Some(d)
        }
        None => None,
    };
    let preload = match std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        Some(p) => {
            let mut v = lib.clone().into_os_string();
            v.push(" ");
            v.push(p);
            v
        }
        None => lib.clone().into_os_string(),
    };
    // Checked here, so a typo is one message rather than one per rank.
    if let Some(m) = &a.codec {
        m.parse::<vargr_codec::stage::CodecMode>()
            .with_context(|| format!("--codec {m}"))?;
    }
    if let Some(l) = &a.link {
        l.parse::<vargr_emu::WanProfile>()
            .with_context(|| format!("--link {l}"))?;
    }
    // Absolute, since ranks may start in another directory (mpirun --wdir).
    let samples = match &a.codec_samples {
        Some(d) => {
            let d = std::path::absolute(d).with_context(|| format!("{}", d.display()))?;
            std::fs::create_dir_all(&d)
                .with_context(|| format!("{}: cannot make the samples directory", d.display()))?;
            Some(d.display().to_string())
        }
        None => None,
    };
    let monitor = match &a.mon.monitor {
        Some(kinds) => Some(start_monitor(&a, kinds, config_file)?),
        None => None,
    };
    let monitor_vars = monitor.as_ref().map(|m| {
        let at = m.monitor.address();
        [at.addrs_text(), at.secret.to_hex()]
    });
    let codec: Vec<(&str, &Option<String>)> = CODEC_VARS
        .into_iter()
        .zip([&a.codec, &a.codec_min, &a.sites, &a.link, &samples])
        .collect();
    let mut cmd = Command::new(launcher);
    // Open MPI's mpirun passes only the variables named with -x to ranks on other hosts
    // (MPICH's passes the whole environment).
    if mpi == Launcher::OpenMpi {
        cmd.args(["-x", "LD_PRELOAD"]);
        if trace.is_some() {
            cmd.args(["-x", TRACE_VAR]);
        }
        for (var, value) in &codec {
            if value.is_some() {
                cmd.args(["-x", var]);
            }
        }
        if monitor_vars.is_some() {
            for var in MONITOR_VARS {
                cmd.args(["-x", var]);
            }
        }
    }
    match &monitor_vars {
        Some(values) => {
            for (var, v) in MONITOR_VARS.iter().zip(values) {
                cmd.env(var, v);
            }
        }
        None => {
            for var in MONITOR_VARS {
                cmd.env_remove(var);
            }
        }
    }
    for (var, value) in &codec {
        match value {
            Some(v) => cmd.env(var, v),
            None => cmd.env_remove(var),
        };
    }
    cmd.args(rest).env("LD_PRELOAD", &preload);
    match &trace {
        Some(d) => cmd.env(TRACE_VAR, d),
        None => cmd.env_remove(TRACE_VAR),
    };
    // Ctrl-C reaches the launcher too, which ends the ranks and then itself; waiting for
    // it lets the monitor pull what they recorded and its status file go.
    ctrlc::set_handler(|| {}).context("installing the Ctrl-C handler")?;
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", launcher.to_string_lossy()));
    if let Some(m) = monitor {
        m.stop();
    }
    let status = status?;
    if !status.success() {
        return Err(crate::run_cmd::JobFailed {
            message: format!("{} ended with {status}", Path::new(launcher).display()),
            code: status.code().unwrap_or(1),
        }
        .into());
    }
    if let Some(d) = trace {
        let files = std::fs::read_dir(&d)
            .with_context(|| format!("{}", d.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "vtr"))
            .count();
        if files == 0 {
            bail!(
                "{}: no trace files: did the program call MPI_Finalize, and run on the MPI \
                 {} was built for?",
                d.display(),
                lib.display()
            );
        }
        println!(
            "vargr mpi-run: {files} trace file{} in {}; `vargr trace report {}` reads them",
            if files == 1 { "" } else { "s" },
            d.display(),
            d.display()
        );
    }
    Ok(())
}

/// The run's monitor, and the status file it keeps.
struct RunMonitor {
    monitor: OpenMonitor,
    /// The status file, when it is ours to remove at the end.
    own_status: Option<PathBuf>,
}

impl RunMonitor {
    /// Pulls the last records, logs the final summary and removes our status file.
    fn stop(self) {
        if let Some(lb) = self.monitor.stop() {
            lb.log_final();
        }
        if let Some(f) = self.own_status {
            // `vargr top` must not show a finished run as live.
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Resolves the monitor's settings (flags over the configuration) and starts it.
fn start_monitor(a: &MpiRunArgs, kinds: &str, config_file: Option<&Path>) -> Result<RunMonitor> {
    let runtime = vargr_net::runtime_dir::default_path();
    let (status, own_status) = match &a.mon.status {
        Some(p) => (std::path::absolute(p)?, None),
        None => {
            let dir = RuntimeDir::open(&runtime)?.subdir("top")?;
            let f = dir.join(format!("mpi-run-{}.json", std::process::id()));
            (f.clone(), Some(f))
        }
    };
    let (mut layers, _) = crate::config_cmd::layers(config_file)?;
    layers.flag("monitor.kinds", "--monitor", kinds);
    layers.flag("monitor.status", "--status", status.display().to_string());
    if let Some(s) = &a.mon.monitor_scope {
        layers.flag("monitor.scope", "--monitor-scope", s);
    }
    let mut cfg = vargr_config::Config::resolve(&layers)?
        .monitor
        .context("--monitor: no monitor configured")?;
    if cfg.collectors == ["ctx0/*"] {
        cfg.collectors = WORLD_COLLECTIVES
            .iter()
            .map(|k| format!("ctx0/{k}"))
            .collect();
    }
    let monitor = OpenMonitor::start(&runtime, cfg).context("starting the monitor")?;
    Ok(RunMonitor {
        monitor,
        own_status,
    })
}

fn beside_exe(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the vargr binary")?;
    Ok(exe.with_file_name(name))
}

/// Whose `launcher` is: `--version` names Open MPI, or MPICH's Hydra.
fn launcher_mpi(launcher: &std::ffi::OsStr) -> Launcher {
    let name = Path::new(launcher)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !matches!(
        name.as_str(),
        "mpirun"
            | "mpiexec"
            | "orterun"
            | "mpirun.openmpi"
            | "mpiexec.openmpi"
            | "mpirun.mpich"
            | "mpiexec.mpich"
            | "mpiexec.hydra"
    ) {
        return Launcher::Other;
    }
    let Ok(o) = Command::new(launcher).arg("--version").output() else {
        return Launcher::Other;
    };
    let said = String::from_utf8_lossy(&o.stdout);
    if said.contains("Open MPI") {
        Launcher::OpenMpi
    } else if said.contains("HYDRA") {
        Launcher::Mpich
    } else {
        Launcher::Other
    }
}
