//! The library's settings. vargr's libraries take typed values from their front end; this
//! library is its own front end (it runs inside a program that knows nothing of vargr),
//! so it reads its documented environment variables, here and nowhere else.
//!
//! - `VARGR_MPI_TRACE=DIR`: record every wrapped call and write each rank's trace file
//!   into DIR at `MPI_Finalize` (made if missing). Unset or empty: record nothing; the
//!   wrappers only call MPI.
//! - `VARGR_MPI_CODEC=off|adaptive|fixed:CODEC`: compress messages between sites
//!   ([`crate::compress`]); `fixed:lz4`, `fixed:zstd:3`, `fixed:fpc`, ... name a codec
//!   as `vargr codec` does. Unset: off.
//! - `VARGR_MPI_CODEC_MIN=BYTES` (default 16k): messages between sites of at least this
//!   many bytes may be compressed; from 4 KiB (or this size, if smaller) they travel in
//!   a frame, smaller ones untouched.
//! - `VARGR_MPI_SITES=hosts|blocks:N|list:A,B,...` (default hosts): which ranks share a
//!   site. `blocks:2` splits the world in two halves, for sites emulated on one machine.
//! - `VARGR_MPI_LINK=rtt=40ms,bandwidth=100mbit`: the WAN between sites, for the
//!   adaptive engine's model; without it the engine learns from the sends.
//! - `VARGR_MPI_CODEC_SAMPLES=DIR`: each rank records samples of its messages between
//!   sites into `DIR/<host>-<rank>.ctr` for `vargr codec plan DIR`, whose plan a later
//!   run uses with `VARGR_MPI_CODEC=guided:PLAN`.
//!
//! - `VARGR_MPI_MONITOR=ADDRS` and `VARGR_MPI_MONITOR_SECRET=HEX`: join the live
//!   monitor of `vargr mpi-run --monitor` (`vargr_coll::open_plane`) at the first of
//!   ADDRS (`unix:PATH,tcp:HOST:PORT`) that answers, proving the run's secret. The
//!   ranks' environment is readable only by their user; `vargr mpi-run` makes both.
//!
//! Every rank must see the same codec settings: `MPI_Init` checks and refuses to start
//! when they differ. `vargr mpi-run --trace DIR --codec MODE ...` sets them (with
//! `LD_PRELOAD`); under another launcher set them yourself.

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;

use vargr_codec::stage::CodecMode;
use vargr_coll::open_plane::PlaneAddress;
use vargr_net::auth::Secret;

use crate::compress::{CodecSettings, SiteRule};

pub use vargr_config::mpi_env::{
    ALL_VARS, CODEC_MIN_VAR, CODEC_VAR, LINK_VAR, MONITOR_SECRET_VAR, MONITOR_VAR, SAMPLES_VAR,
    SITES_VAR, TRACE_VAR,
};

/// The default threshold: below 16 KiB a message's transfer time on a WAN is its
/// latency, which compression does not shorten.
pub const DEFAULT_MIN: usize = 16 << 10;

/// What the library does in this process.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where trace files go; `None`: no records.
    pub trace_dir: Option<PathBuf>,
    /// Compression, if on; an error names the variable that is wrong.
    pub codec: Result<Option<CodecSettings>, String>,
    /// The live monitor to join, if any; an error names the variable that is wrong.
    pub monitor: Result<Option<PlaneAddress>, String>,
}

impl Settings {
    /// From the process's environment.
    pub fn from_env() -> Settings {
        Settings::from_vars(|k| std::env::var_os(k))
    }

    /// This process's settings, read from its environment once (at `MPI_Init`, where
    /// tracing and compression each need them).
    pub fn process() -> &'static Settings {
        static SETTINGS: std::sync::OnceLock<Settings> = std::sync::OnceLock::new();
        SETTINGS.get_or_init(Settings::from_env)
    }

    /// From any source of variables (the environment, or a test's map).
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Settings {
        let text = |k: &str| {
            var(k)
                .map(|v| v.to_string_lossy().trim().to_string())
                .filter(|v| !v.is_empty())
        };
        Settings {
            trace_dir: var(TRACE_VAR).filter(|d| !d.is_empty()).map(PathBuf::from),
            codec: codec(&text),
            monitor: monitor(&text),
        }
    }
}

fn monitor(text: &impl Fn(&str) -> Option<String>) -> Result<Option<PlaneAddress>, String> {
    let (addrs, secret) = match (text(MONITOR_VAR), text(MONITOR_SECRET_VAR)) {
        (None, None) => return Ok(None),
        (Some(a), Some(s)) => (a, s),
        (Some(_), None) => return Err(format!("{MONITOR_VAR} needs {MONITOR_SECRET_VAR}")),
        (None, Some(_)) => return Err(format!("{MONITOR_SECRET_VAR} without {MONITOR_VAR}")),
    };
    Ok(Some(PlaneAddress {
        addrs: PlaneAddress::parse_addrs(&addrs).map_err(|e| format!("{MONITOR_VAR}: {e}"))?,
        secret: Secret::from_hex(&secret).map_err(|e| format!("{MONITOR_SECRET_VAR}: {e}"))?,
    }))
}

fn codec(text: &impl Fn(&str) -> Option<String>) -> Result<Option<CodecSettings>, String> {
    let samples = text(SAMPLES_VAR).map(PathBuf::from);
    let mode = match text(CODEC_VAR) {
        None => CodecMode::Off,
        Some(m) => CodecMode::from_str(&m).map_err(|e| format!("{CODEC_VAR}={m}: {e}"))?,
    };
    if mode == CodecMode::Off {
        return match samples {
            // Samples are taken where messages are framed.
            Some(_) => Err(format!(
                "{SAMPLES_VAR} needs {CODEC_VAR} (record with adaptive or fixed:CODEC)"
            )),
            None => Ok(None),
        };
    }
    let min = match text(CODEC_MIN_VAR) {
        None => DEFAULT_MIN,
        Some(t) => match vargr_emu::parse_size(&t) {
            Ok(n) if (64..=1 << 30).contains(&n) => n as usize,
            Ok(n) => return Err(format!("{CODEC_MIN_VAR}={t}: {n} bytes, expected 64 to 1g")),
            Err(e) => return Err(format!("{CODEC_MIN_VAR}={t}: {e}")),
        },
    };
    let sites = match text(SITES_VAR) {
        None => SiteRule::Hosts,
        Some(s) => s.parse().map_err(|e| format!("{SITES_VAR}: {e}"))?,
    };
    let link = match text(LINK_VAR) {
        None => None,
        Some(l) => {
            let p: vargr_emu::WanProfile = l.parse().map_err(|e| format!("{LINK_VAR}={l}: {e}"))?;
            let rate = p.bandwidth_bits_per_s.map_or(1e12, |b| b as f64 / 8.0);
            Some((p.latency.as_secs_f64(), rate))
        }
    };
    Ok(Some(CodecSettings {
        mode,
        min,
        sites,
        link,
        samples,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Settings {
        let map: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_vars(|k| {
            map.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn an_empty_or_missing_directory_means_no_trace() {
        assert_eq!(vars(&[]).trace_dir, None);
        assert_eq!(vars(&[(TRACE_VAR, "")]).trace_dir, None);
        let s = vars(&[(TRACE_VAR, "/tmp/t")]);
        assert_eq!(s.trace_dir, Some(PathBuf::from("/tmp/t")));
    }

    #[test]
    fn codec_settings_are_read_and_bad_ones_named() {
        assert!(matches!(vars(&[]).codec, Ok(None)));
        assert!(matches!(vars(&[(CODEC_VAR, "off")]).codec, Ok(None)));
        let s = vars(&[
            (CODEC_VAR, "fixed:lz4"),
            (CODEC_MIN_VAR, "64k"),
            (SITES_VAR, "blocks:2"),
            (LINK_VAR, "rtt=20ms,bandwidth=100mbit"),
        ])
        .codec
        .unwrap()
        .unwrap();
        assert_eq!(s.min, 64 << 10);
        assert_eq!(s.sites, SiteRule::Blocks(2));
        let (lat, rate) = s.link.unwrap();
        assert!((lat - 0.010).abs() < 1e-9 && (rate - 12.5e6).abs() < 1.0);
        let a = vars(&[(CODEC_VAR, "adaptive")]).codec.unwrap().unwrap();
        assert_eq!((a.min, a.sites), (DEFAULT_MIN, SiteRule::Hosts));
        for (k, v) in [
            (CODEC_VAR, "sometimes"),
            (CODEC_MIN_VAR, "lots"),
            (CODEC_MIN_VAR, "3"),
            (SITES_VAR, "rings"),
            (LINK_VAR, "fast"),
        ] {
            let mut pairs = vec![(CODEC_VAR, "adaptive")];
            pairs.retain(|(n, _)| *n != k);
            pairs.push((k, v));
            let e = vars(&pairs).codec.unwrap_err();
            assert!(e.contains(k), "{k}={v}: {e}");
        }
    }

    #[test]
    fn a_monitor_needs_an_address_and_its_secret() {
        assert!(matches!(vars(&[]).monitor, Ok(None)));
        let hex = Secret::random().to_hex();
        let m = vars(&[
            (MONITOR_VAR, "unix:/run/x.sock,tcp:h:4711"),
            (MONITOR_SECRET_VAR, &hex),
        ])
        .monitor
        .unwrap()
        .unwrap();
        assert_eq!(m.addrs.len(), 2);
        assert_eq!(m.secret.to_hex(), hex);
        for pairs in [
            vec![(MONITOR_VAR, "unix:/run/x.sock")],
            vec![(MONITOR_SECRET_VAR, hex.as_str())],
            vec![(MONITOR_VAR, "carrier-pigeon"), (MONITOR_SECRET_VAR, &hex)],
            vec![(MONITOR_VAR, "tcp:h:1"), (MONITOR_SECRET_VAR, "abc")],
        ] {
            let e = vars(&pairs).monitor.unwrap_err();
            assert!(e.contains("VARGR_MPI_MONITOR"), "{pairs:?}: {e}");
        }
    }

    #[test]
    fn samples_need_a_codec_to_take_them_from() {
        let s = vars(&[(SAMPLES_VAR, "/tmp/samples")]);
        assert!(s.codec.unwrap_err().contains(CODEC_VAR));
        let s = vars(&[(SAMPLES_VAR, "/tmp/samples"), (CODEC_VAR, "adaptive")]);
        assert_eq!(
            s.codec.unwrap().unwrap().samples,
            Some(PathBuf::from("/tmp/samples"))
        );
    }
}
