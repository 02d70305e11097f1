//! `vargr config`: one configuration from defaults, a file, the environment and flags,
//! shown with where each value came from; a bad value stops the command and names it.

mod common;

use std::process::Command;

use common::vargr;

fn config_show(home: &std::path::Path, env: &[(&str, &str)], args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(vargr());
    cmd.args(["config", "show"]).args(args);
    cmd.env("HOME", home).env_remove("XDG_CONFIG_HOME");
    // Only what this test sets: the suite's own variables would show up otherwise.
    for k in vargr_config::KEYS {
        cmd.env_remove(k.env);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn line<'a>(shown: &'a str, key: &str) -> &'a str {
    shown
        .lines()
        .find(|l| l.split_whitespace().next() == Some(key))
        .unwrap_or_else(|| panic!("no {key} in {shown}"))
}

#[test]
fn the_users_file_then_the_environment_and_each_values_source() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".config/vargr");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[links]\ncodec = \"fixed:lz4\"\n[job]\nsched = \"serialize\"\n",
    )
    .unwrap();
    let (ok, shown) = config_show(home.path(), &[("VARGR_SCHED", "priority")], &[]);
    assert!(ok, "{shown}");
    assert!(
        line(&shown, "links.codec").contains("\"fixed:lz4\""),
        "{shown}"
    );
    assert!(
        line(&shown, "links.codec").ends_with("config.toml"),
        "{shown}"
    );
    assert!(
        line(&shown, "job.sched").ends_with("environment VARGR_SCHED"),
        "{shown}"
    );
    assert!(line(&shown, "trace.ring").ends_with("default"), "{shown}");

    // --config replaces the user's file.
    let other = home.path().join("other.toml");
    std::fs::write(&other, "[links]\ndedup = \"cdc:256:1k:8k\"\n").unwrap();
    let (ok, shown) = config_show(home.path(), &[], &["--config", other.to_str().unwrap()]);
    assert!(ok, "{shown}");
    assert!(line(&shown, "links.codec").ends_with("default"), "{shown}");
    assert!(
        line(&shown, "links.dedup").ends_with("other.toml"),
        "{shown}"
    );
}

#[test]
fn bad_settings_name_their_source_key_and_value() {
    let home = tempfile::tempdir().unwrap();
    let bad = home.path().join("bad.toml");
    std::fs::write(&bad, "[links]\ncodek = \"off\"\n").unwrap();
    let (ok, shown) = config_show(home.path(), &[], &["--config", bad.to_str().unwrap()]);
    assert!(
        !ok && shown.contains("bad.toml") && shown.contains("links.codek"),
        "{shown}"
    );

    let (ok, shown) = config_show(home.path(), &[("VARGR_WAN", "rtt=fast")], &[]);
    assert!(
        !ok && shown.contains("VARGR_WAN") && shown.contains("rtt=fast"),
        "{shown}"
    );

    let missing = home.path().join("missing.toml");
    let (ok, shown) = config_show(home.path(), &[], &["--config", missing.to_str().unwrap()]);
    assert!(!ok && shown.contains("missing.toml"), "{shown}");
}
