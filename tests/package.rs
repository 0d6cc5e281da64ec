//! The packages, as a DBA without Rust installs them: the Debian package for
//! PostgreSQL 15 (apt-get installs it, a server with the library preloaded
//! passes the pg_regress suite, and apt-get remove leaves no file of it
//! behind), and the tarball's install.sh, for the version under test (it
//! refuses another major version and an older glibc than the library needs,
//! and what it installs passes the pg_regress suite). The tarball is tested
//! on the system it names: 15 on Debian 12, 19 in the Debian sid chroot.
//!
//! scripts/test runs these after scripts/package built the packages, with
//! their paths in SNOWFLAKE_DEB and SNOWFLAKE_TARBALL, one at a time. They
//! replace the files the other tests installed, so they run last, on their own.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{as_root, run_pg_regress, Cluster, REGRESS_SETTINGS};

/// The Debian package, for Debian's PostgreSQL 15.
#[cfg(feature = "pg15")]
mod debian {
    use super::*;

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
        // Installed again under a server that runs with it loaded: dpkg
        // replaces each file by a rename, and the server never notices.
        let live = Live::start("debrunning");
        let out = as_root("apt-get", &["install", "--reinstall", "-y", "-q", &deb]);
        assert!(out.status.success(), "apt-get install --reinstall: {}", String::from_utf8_lossy(&out.stderr));
        let status = std::process::Command::new("dpkg-query")
            .args(["-W", "-f=${Status} ${Version}", "postgresql-15-snowflake-id"])
            .output()
            .unwrap();
        let status = String::from_utf8(status.stdout).unwrap();
        assert!(status.starts_with("install ok installed"), "{status}");
        for f in &files {
            assert!(Path::new(f).exists(), "{f} is installed");
        }
        live.check("apt-get install --reinstall");

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
}

#[test]
#[ignore = "needs the package: scripts/test runs it after scripts/package, with SNOWFLAKE_TARBALL set"]
fn the_tarball_installs_into_the_installation_its_pg_config_describes() {
    let tarball = std::env::var("SNOWFLAKE_TARBALL").expect("SNOWFLAKE_TARBALL names the tarball to test");
    let unpacked = Unpacked(PathBuf::from(format!("/tmp/sftarball-{}", std::process::id())));
    std::fs::create_dir_all(&unpacked.0).unwrap();
    let out = Command::new("tar").arg("-xzf").arg(&tarball).arg("-C").arg(&unpacked.0).output().unwrap();
    assert!(out.status.success(), "tar: {}", String::from_utf8_lossy(&out.stderr));
    let name = Path::new(&tarball).file_name().unwrap().to_str().unwrap().trim_end_matches(".tar.gz");
    let install = unpacked.0.join(name).join("install.sh");

    // A pg_config of another major version is refused before anything is copied.
    let other = unpacked.0.join("pg_config_14");
    std::fs::write(
        &other,
        "#!/bin/sh\ncase \"$1\" in --version) echo 'PostgreSQL 14.13' ;; *) echo /nonexistent ;; esac\n",
    )
    .unwrap();
    assert!(Command::new("chmod").arg("755").arg(&other).status().unwrap().success());
    let out = Command::new(&install).arg(&other).output().unwrap();
    assert!(!out.status.success(), "install.sh accepted PostgreSQL 14");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let major = std::fs::read_to_string(unpacked.0.join(name).join("PG_MAJOR")).unwrap();
    assert!(stderr.contains(&format!("this package is for PostgreSQL {}", major.trim())), "{stderr}");

    // So is a system whose glibc is older than the one the library needs.
    let old_system = unpacked.0.join("old-glibc");
    std::fs::create_dir_all(&old_system).unwrap();
    std::fs::write(old_system.join("getconf"), "#!/bin/sh\necho 'glibc 2.17'\n").unwrap();
    assert!(Command::new("chmod").arg("755").arg(old_system.join("getconf")).status().unwrap().success());
    let path = format!("{}:{}", old_system.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new(&install).arg(common::pg_config()).env("PATH", path).output().unwrap();
    assert!(!out.status.success(), "install.sh accepted glibc 2.17");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("this package needs glibc 2.") && stderr.contains("built on"), "{stderr}");

    let pg_config = common::pg_config();
    let dir = |arg: &str| {
        let out = Command::new(&pg_config).arg(arg).output().unwrap();
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    };
    let mut files = vec![dir("--pkglibdir").join("snowflake_id.so")];
    for f in std::fs::read_dir(unpacked.0.join(name).join("extension")).unwrap() {
        files.push(dir("--sharedir").join("extension").join(f.unwrap().file_name()));
    }
    // A server runs with the library loaded throughout (the Debian package's
    // test before this one may have removed every copy: install.sh puts one
    // there first); then the copies go, so that only install.sh can put them back.
    let out = as_root(install.to_str().unwrap(), &[pg_config.to_str().unwrap()]);
    assert!(out.status.success(), "install.sh: {}", String::from_utf8_lossy(&out.stderr));
    let live = Live::start("tarrunning");
    let installed = InstalledFiles(files);
    installed.remove();
    let out = as_root(install.to_str().unwrap(), &[pg_config.to_str().unwrap()]);
    assert!(out.status.success(), "install.sh: {}", String::from_utf8_lossy(&out.stderr));
    for f in &installed.0 {
        assert!(f.exists(), "{} is installed", f.display());
    }
    live.check("install.sh");

    let c = Cluster::new("tarball", &REGRESS_SETTINGS);
    c.start();
    if let Err(diffs) = run_pg_regress(&c, false) {
        panic!("the installed tarball differs from the expected SQL surface:\n{diffs}");
    }
    c.stop();
}

/// A server running with the library loaded, and a session open, while a
/// package is installed under it (issue 30): both must outlive the install.
struct Live {
    cluster: Cluster,
    session: postgres::Client,
    last: i64,
}

impl Live {
    fn start(name: &str) -> Live {
        let cluster = Cluster::new(name, &[]);
        cluster.start();
        let mut session = cluster.session();
        let last = session.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
        Live { cluster, session, last }
    }

    fn check(mut self, route: &str) {
        let open: i64 = self
            .session
            .query_one("SELECT snowflake_next_id()", &[])
            .unwrap_or_else(|e| panic!("the open session died when {route} ran: {e}\n{}", self.cluster.log()))
            .get(0);
        let new: i64 = self.cluster.one("SELECT snowflake_next_id()");
        assert!(self.last < open && open < new, "{route}");
        drop(self.session);
        self.cluster.stop();
        self.cluster.start();
        let after: i64 = self.cluster.one("SELECT snowflake_next_id()");
        assert!(after > new, "{route}: after a restart on the installed build");
        self.cluster.stop();
    }
}

/// The unpacked tarball, removed when the test ends.
struct Unpacked(PathBuf);

impl Drop for Unpacked {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The files install.sh copies, removed again when the test ends.
struct InstalledFiles(Vec<PathBuf>);

impl InstalledFiles {
    fn remove(&self) {
        for f in &self.0 {
            let _ = as_root("rm", &["-f", f.to_str().unwrap()]);
        }
    }
}

impl Drop for InstalledFiles {
    fn drop(&mut self) {
        self.remove();
    }
}
