//! `Network::new` failures: each must explain itself and leave nothing behind (no
//! processes, no socket directory). This file is its own test binary, so no other
//! network of this process creates socket directories meanwhile.

mod common;

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use vargr_tbon::{BackendSpec, Network, NetworkOptions};
use vargr_topo::Topology;

/// The tests of this file compare this process's socket directories before and after:
/// one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// This process's socket directories (`tree-PID-*` in the user's runtime directory).
fn my_sockdirs() -> BTreeSet<String> {
    let prefix = vargr_tbon::sockdir_prefix(std::process::id());
    std::fs::read_dir(vargr_net::runtime_dir::default_path())
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs a failing `Network::new`; returns its error text and the socket directories it
/// left behind (removed again, so failing runs do not litter).
fn failing(spec: &str, backend: BackendSpec, opts: NetworkOptions) -> (String, Vec<String>) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let before = my_sockdirs();
    let r = Network::new(Topology::generate(spec).unwrap(), backend, opts);
    let e = match r {
        Ok(net) => {
            let _ = net.shutdown();
            panic!("{spec}: Network::new succeeded");
        }
        Err(e) => e.to_string(),
    };
    let left = wait_all_gone(&my_descendants(), Duration::from_secs(5));
    assert!(left.is_empty(), "{spec}: processes left: {left:#?}");
    let leaked: Vec<String> = my_sockdirs().difference(&before).cloned().collect();
    for d in &leaked {
        let _ = std::fs::remove_dir_all(vargr_net::runtime_dir::default_path().join(d));
    }
    (e, leaked)
}

/// Start-up failures (a back-end that cannot be started, or exits at once) name the
/// node and clean up.
#[test]
fn startup_failures_name_the_node_and_clean_up() {
    let (e, leaked) = failing(
        "flat:2",
        BackendSpec::command("/nonexistent/vargr-backend", &[]),
        opts(),
    );
    assert!(
        e.contains("/nonexistent/vargr-backend") && e.contains("node 1"),
        "{e}"
    );
    assert!(leaked.is_empty(), "socket directories left: {leaked:?}");

    let (e, leaked) = failing("1x2x4", BackendSpec::command("false", &[]), opts());
    assert!(
        e.contains("exited before connecting") || e.contains("failed"),
        "{e}"
    );
    assert!(leaked.is_empty(), "socket directories left: {leaked:?}");
}

fn config_error(opts: NetworkOptions) -> (String, Vec<String>) {
    failing(
        "flat:2",
        BackendSpec::command(vargr(), &["backend", "echo"]),
        opts,
    )
}

/// Configuration errors are refused before anything starts, quoting the bad value.
#[test]
fn config_errors_quote_the_bad_value() {
    let (e, _) = config_error(NetworkOptions {
        transport: "carrier-pigeon".into(),
        ..opts()
    });
    assert!(e.contains("carrier-pigeon"), "{e}");
    let (e, _) = config_error(NetworkOptions {
        remote_template: Some("ssh {host}".into()),
        ..opts()
    });
    assert!(e.contains("ssh {host}") && e.contains("{cmd}"), "{e}");
}

/// ... and also remove the socket directory `Network::new` made first.
#[test]
fn config_errors_leave_no_socket_directory() {
    let (_, leaked) = config_error(NetworkOptions {
        transport: "carrier-pigeon".into(),
        ..opts()
    });
    let (_, leaked2) = config_error(NetworkOptions {
        remote_template: Some("ssh {host}".into()),
        ..opts()
    });
    assert!(
        leaked.is_empty() && leaked2.is_empty(),
        "socket directories left: transport error {leaked:?}, template error {leaked2:?}"
    );
}
