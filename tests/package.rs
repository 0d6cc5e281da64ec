//! The Debian package for PostgreSQL 15, as a DBA without Rust installs it:
//! apt-get installs it, a server with the library preloaded passes the
//! pg_regress suite, and apt-get remove leaves no file of it behind.
//!
//! scripts/test runs this after scripts/package built the package, with the
//! package's path in SNOWFLAKE_DEB. It replaces the files the other tests
//! installed, so it runs last, on its own.

mod common;

use std::path::Path;

use common::{as_root, run_pg_regress, Cluster, REGRESS_SETTINGS};

/// The regular files a package holds, as absolute paths.
fn files_of(deb: &str) -> Vec<String> {
    let out = std::process::Command::new("dpkg-deb").args(["-c", deb]).output().unwrap();
    assert!(out.status.success(), "dpkg-deb -c {deb}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with('-'))
        .map(|l| l.rsplit(' ').next().unwrap().trim_start_matches('.').to_string())
        .collect()
}

#[cfg(feature = "pg15")]
#[test]
#[ignore = "needs the package: scripts/test runs it after scripts/package, with SNOWFLAKE_DEB set"]
fn the_debian_package_installs_passes_pg_regress_and_removes_cleanly() {
    let deb = std::env::var("SNOWFLAKE_DEB").expect("SNOWFLAKE_DEB names the .deb to test");
    let deb = std::fs::canonicalize(&deb).unwrap().to_string_lossy().into_owned();
    let files = files_of(&deb);
    assert!(files.iter().any(|f| f.ends_with("/lib/snowflake_id.so")), "{files:?}");
    assert!(files.iter().any(|f| f.ends_with("/extension/snowflake_id.control")), "{files:?}");

    let out = as_root("apt-get", &["install", "-y", "-q", &deb]);
    assert!(out.status.success(), "apt-get install: {}", String::from_utf8_lossy(&out.stderr));
    let installed = Installed;
    let status = std::process::Command::new("dpkg-query")
        .args(["-W", "-f=${Status} ${Version}", "postgresql-15-snowflake-id"])
        .output()
        .unwrap();
    let status = String::from_utf8(status.stdout).unwrap();
    assert!(status.starts_with("install ok installed"), "{status}");
    for f in &files {
        assert!(Path::new(f).exists(), "{f} is installed");
    }

    let c = Cluster::new("debpackage", &REGRESS_SETTINGS);
    c.start();
    if let Err(diffs) = run_pg_regress(&c, false) {
        panic!("the installed package differs from the expected SQL surface:\n{diffs}");
    }
    c.stop();
    installed.remove();
    let left: Vec<&String> = files.iter().filter(|f| Path::new(f).exists()).collect();
    assert!(left.is_empty(), "left behind by apt-get remove: {left:?}");
}

/// The installed package, removed again also when the test fails midway.
struct Installed;

impl Installed {
    fn remove(self) {
        let out = as_root("apt-get", &["remove", "-y", "-q", "postgresql-15-snowflake-id"]);
        assert!(out.status.success(), "apt-get remove: {}", String::from_utf8_lossy(&out.stderr));
        std::mem::forget(self);
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = as_root("apt-get", &["remove", "-y", "-q", "postgresql-15-snowflake-id"]);
    }
}
