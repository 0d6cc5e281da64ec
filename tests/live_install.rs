//! Installing a build while servers run from the installation (issue 30).
//!
//! `cargo pgrx install` copies files over the old ones in place, truncating
//! the library a running server has mapped: new sessions crash and the
//! postmaster crash-loops or dies. The documented from-source route and every
//! script install through `scripts/install` instead, which writes each file
//! beside its destination and renames it over; `cargo pgrx test` installs
//! through it too (CARGO_PGRX). This test runs it under a live server.

mod common;

use std::path::Path;
use std::process::Command;

use common::{pg_config, pg_major, Cluster};

/// The library files a process has mapped, as /proc/PID/maps names them.
fn mapped_library(pid: &str) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut libs: Vec<String> = maps
        .lines()
        .filter(|l| l.contains("snowflake_id.so"))
        .map(|l| l.split_whitespace().skip(5).collect::<Vec<_>>().join(" "))
        .collect();
    libs.dedup();
    libs
}

fn postmaster_pid(c: &Cluster) -> String {
    std::fs::read_to_string(c.data_path("postmaster.pid")).unwrap().lines().next().unwrap().to_string()
}

#[test]
fn installing_a_build_leaves_running_servers_untouched() {
    let c = Cluster::new("liveinstall", &[]);
    c.start();
    let mut open = c.session();
    let before: i64 = open.query_one("SELECT max(id) FROM snowflake_next_ids(1000) id", &[]).unwrap().get(0);
    let postmaster = postmaster_pid(&c);
    assert_eq!(mapped_library(&postmaster).len(), 1, "the postmaster has the library loaded");

    // The build this test binary belongs to, installed again over the running server.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install");
    let features = format!("{} pg_test", pg_major());
    let out = Command::new("bash")
        .arg(&script)
        .args(["--test", "--no-default-features", "--features", &features, "--pg-config"])
        .arg(pg_config())
        .output()
        .unwrap();
    assert!(out.status.success(), "scripts/install: {}", String::from_utf8_lossy(&out.stderr));

    // The open session, a new one (forked from the postmaster), and the postmaster itself run on.
    let a: i64 = open.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(a > before);
    let b: i64 = c.one("SELECT snowflake_next_id()");
    assert!(b > a);
    assert_eq!(postmaster_pid(&c), postmaster);
    let mapped = mapped_library(&postmaster);
    assert!(mapped.iter().all(|l| l.ends_with("(deleted)")), "the old file, replaced: {mapped:?}");
    drop(open);

    // A clean stop and start: the server now runs the installed file, and IDs continue above.
    c.stop();
    c.start();
    let mapped = mapped_library(&postmaster_pid(&c));
    assert!(!mapped.is_empty() && mapped.iter().all(|l| !l.ends_with("(deleted)")), "{mapped:?}");
    let after: i64 = c.one("SELECT snowflake_next_id()");
    assert!(after > b);
    let log = c.log();
    assert!(!log.contains("terminated by signal") && !log.contains("was terminated"), "{log}");
}
