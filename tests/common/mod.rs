//! Throwaway PostgreSQL clusters for integration tests: each test starts its
//! own servers (with their own settings, clocks and crashes) on loopback ports.
//!
//! The PostgreSQL version is the one the tests were built for (the `pg15` or
//! `pg18` feature); its `pg_config` comes from `SNOWFLAKE_PG_CONFIG` or from
//! `~/.pgrx/config.toml`. The extension must already be installed into it,
//! which `cargo pgrx test` does. As root, servers run as the `postgres` user.

#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The identity a DBA writes out for a server whose number no other server
/// has; a test's own settings come after it and win.
const DEFAULT_IDENTITY: [&str; 2] = ["snowflake_id.datacenter_id = 0", "snowflake_id.worker_id = 0"];

fn with_identity<'a>(settings: &[&'a str]) -> Vec<&'a str> {
    DEFAULT_IDENTITY.iter().copied().chain(settings.iter().copied()).collect()
}

pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

pub fn pg_major() -> &'static str {
    if cfg!(feature = "pg19") {
        "pg19"
    } else if cfg!(feature = "pg18") {
        "pg18"
    } else if cfg!(feature = "pg17") {
        "pg17"
    } else if cfg!(feature = "pg16") {
        "pg16"
    } else {
        "pg15"
    }
}

/// The PostgreSQL installation under test.
pub fn pg_config() -> PathBuf {
    if let Ok(p) = std::env::var("SNOWFLAKE_PG_CONFIG") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").expect("HOME is set");
    let config = fs::read_to_string(Path::new(&home).join(".pgrx/config.toml")).expect("~/.pgrx/config.toml exists");
    let key = format!("{} = ", pg_major());
    let line = config.lines().find(|l| l.trim_start().starts_with(&key)).expect("pgrx knows this PostgreSQL version");
    PathBuf::from(line.split('"').nth(1).expect("a quoted path"))
}

/// The major version of the installation under test, as its pg_config says
/// ("PostgreSQL 17.11", "PostgreSQL 15.20 (Debian ...)", "PostgreSQL
/// 18beta1"): a test binary built for one version may test another.
pub fn installed_major() -> String {
    let out = Command::new(pg_config()).arg("--version").output().expect("pg_config runs");
    let version = String::from_utf8(out.stdout).unwrap();
    let number = version.trim().trim_start_matches("PostgreSQL ");
    number.split(|c: char| !c.is_ascii_digit()).next().unwrap().to_string()
}

pub fn bindir() -> PathBuf {
    let out = Command::new(pg_config()).arg("--bindir").output().expect("pg_config runs");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Copies a file into the installation's `extension` directory (as root, or
/// through sudo), as an older release of the extension would have left it.
/// It is removed again when the returned value is dropped.
#[must_use = "the file is removed when this is dropped"]
pub fn install_extension_file(src: &Path) -> InstalledFile {
    let out = Command::new(pg_config()).arg("--sharedir").output().expect("pg_config runs");
    let dest = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("extension");
    let mut install = if running_as_root() { Command::new("install") } else { Command::new("sudo") };
    if !running_as_root() {
        install.args(["-n", "install"]);
    }
    let ok = install.args(["-m", "644"]).arg(src).arg(&dest).status().unwrap().success();
    assert!(ok, "install {} into {}", src.display(), dest.display());
    InstalledFile(dest.join(src.file_name().expect("a file")))
}

fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0\n")).unwrap_or(false)
}

/// A command run as the user that owns the clusters, with `env` (`NAME=value`) added.
fn as_server_user_with(program: &Path, env: &[String]) -> Command {
    let mut c = if running_as_root() {
        let mut sudo = Command::new("sudo");
        sudo.args(["-n", "-u", "postgres", "--", "env"]);
        sudo
    } else {
        Command::new("env")
    };
    c.args(env).arg(program);
    c
}

pub fn as_server_user(program: &Path) -> Command {
    as_server_user_with(program, &[])
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A new, empty directory for one cluster, owned by the server user. Short:
/// it also holds the Unix socket.
fn cluster_dir() -> PathBuf {
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let dir = PathBuf::from(format!("/tmp/sf{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    if running_as_root() {
        let ok = Command::new("chown").args(["postgres:postgres"]).arg(&dir).status().unwrap().success();
        assert!(ok, "chown {dir:?}");
    }
    dir
}

/// Builds a small C library from `source` against the installation under test
/// and installs it as `name` into its library directory: a stand-in for
/// another extension (one that registers a WAL resource manager, or defines
/// settings as pgEdge's snowflake does). It is removed again when the
/// returned value is dropped.
#[must_use = "the library is removed when this is dropped"]
pub fn install_c_library(name: &str, source: &str) -> InstalledFile {
    let config = |arg: &str| {
        let out = Command::new(pg_config()).arg(arg).output().expect("pg_config runs");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let dir = std::env::temp_dir().join(format!("sflib-{}-{name}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let c_file = dir.join(format!("{name}.c"));
    let so_file = dir.join(format!("{name}.so"));
    fs::write(&c_file, source).unwrap();
    let out = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so_file)
        .arg(format!("-I{}", config("--includedir-server")))
        .arg(&c_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "gcc {name}: {}", String::from_utf8_lossy(&out.stderr));
    let dest = PathBuf::from(config("--pkglibdir"));
    let mut install = if running_as_root() { Command::new("install") } else { Command::new("sudo") };
    if !running_as_root() {
        install.args(["-n", "install"]);
    }
    let ok = install.args(["-m", "755"]).arg(&so_file).arg(&dest).status().unwrap().success();
    assert!(ok, "install {name}.so into {}", dest.display());
    let _ = fs::remove_dir_all(&dir);
    InstalledFile(dest.join(format!("{name}.so")))
}

/// A file a test put into the PostgreSQL installation; removed when dropped.
pub struct InstalledFile(PathBuf);

impl Drop for InstalledFile {
    fn drop(&mut self) {
        let _ = as_root("rm", &["-f", self.0.to_str().unwrap()]);
    }
}

/// A clock file libfaketime re-reads every second or two, so a test can step the
/// server's wall clock while it runs. (Re-reading it on every call, with
/// FAKETIME_NO_CACHE, deadlocks: PostgreSQL's SIGALRM handler reads the time,
/// and libfaketime's fopen() is not async-signal-safe.)
pub struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    /// Sets the server's clock `offset_s` seconds away from the real clock, and
    /// waits until every process has read it.
    pub fn set_offset(&self, offset_s: i64) {
        self.write(offset_s);
        // libfaketime re-reads the file once more than one whole second has passed.
        std::thread::sleep(Duration::from_millis(2100));
    }

    fn write(&self, offset_s: i64) {
        let tmp = self.file.with_extension("tmp");
        fs::write(&tmp, format!("{offset_s:+}\n")).unwrap();
        fs::rename(&tmp, &self.file).unwrap();
    }
}

pub struct Cluster {
    pub dir: PathBuf,
    pub data: PathBuf,
    pub port: u16,
    bin: PathBuf,
    pub clock: Option<FakeClock>,
    /// File systems mounted for this cluster alone, unmounted when it is dropped.
    mounts: Vec<PathBuf>,
    /// The host name its server sees, in a UTS namespace of its own (as a
    /// container or a Kubernetes pod has): see [`Cluster::on_host`].
    host: Option<String>,
}

impl Cluster {
    /// A new cluster with snowflake_id preloaded, its identity written out as
    /// a DBA must (datacenter 0, worker 0), and `settings` appended to
    /// postgresql.conf, where they win over those. Not started.
    pub fn new(name: &str, settings: &[&str]) -> Cluster {
        Self::build(name, true, &with_identity(settings), false, &[])
    }

    /// Like `new`, without the identity settings: only `settings`.
    pub fn without_identity(name: &str, settings: &[&str]) -> Cluster {
        Self::build(name, true, settings, false, &[])
    }

    /// Like `new`, initialised with `initdb --allow-group-access`.
    pub fn with_group_access(name: &str, settings: &[&str]) -> Cluster {
        Self::build(name, true, &with_identity(settings), false, &["--allow-group-access"])
    }

    /// Like `new`, initialised with `initdb --data-checksums`.
    pub fn with_checksums(name: &str, settings: &[&str]) -> Cluster {
        Self::build(name, true, &with_identity(settings), false, &["--data-checksums"])
    }

    /// Like `new`, with a clock the test can step through libfaketime.
    pub fn with_fake_clock(name: &str, settings: &[&str]) -> Cluster {
        Self::build(name, true, &with_identity(settings), true, &[])
    }

    /// A cluster without snowflake_id in shared_preload_libraries.
    pub fn without_preload(name: &str) -> Cluster {
        Self::build(name, false, &[], false, &[])
    }

    /// Like `new`, run by the binaries in `bin`: another installation of
    /// the same major version.
    pub fn of_installation(bin: &Path, name: &str, settings: &[&str]) -> Cluster {
        Self::build_with(bin.to_path_buf(), name, true, &with_identity(settings), false, &[])
    }

    fn build(name: &str, preload: bool, settings: &[&str], fake_clock: bool, initdb_args: &[&str]) -> Cluster {
        Self::build_with(bindir(), name, preload, settings, fake_clock, initdb_args)
    }

    /// Like `new`, with its data directory alone on a file system of
    /// `data_mb` MiB (a tmpfs made for it) and its WAL (`initdb -X`) on
    /// another of `wal_mb`, so that a test can fill either: [`Cluster::data_disk`]
    /// and [`Cluster::wal_disk`]. Needs root (or sudo).
    pub fn on_small_disks(name: &str, data_mb: u32, wal_mb: u32, settings: &[&str]) -> Cluster {
        Self::small_disks(name, data_mb, wal_mb, settings, false)
    }

    /// Like `on_small_disks`, with a clock the test can step.
    pub fn on_small_disks_with_fake_clock(name: &str, data_mb: u32, wal_mb: u32, settings: &[&str]) -> Cluster {
        Self::small_disks(name, data_mb, wal_mb, settings, true)
    }

    /// Like `on_small_disks`, with the data directory on ext4 (a file on a
    /// loop device, `errors=remount-ro`), which [`Cluster::fail_data_disk`]
    /// turns read-only as a kernel does on an I/O error.
    pub fn on_ext4_data_disk(name: &str, data_mb: u32, wal_mb: u32, settings: &[&str]) -> Cluster {
        Self::disks(name, data_mb, wal_mb, settings, false, true)
    }

    fn small_disks(name: &str, data_mb: u32, wal_mb: u32, settings: &[&str], fake_clock: bool) -> Cluster {
        Self::disks(name, data_mb, wal_mb, settings, fake_clock, false)
    }

    fn disks(name: &str, data_mb: u32, wal_mb: u32, settings: &[&str], fake_clock: bool, ext4: bool) -> Cluster {
        let dir = cluster_dir();
        let (data_disk, wal_disk) = (dir.join("disk"), dir.join("wal"));
        if ext4 {
            mount_ext4(&dir.join("disk.img"), &data_disk, data_mb);
        } else {
            mount_tmpfs(&data_disk, data_mb);
        }
        mount_tmpfs(&wal_disk, wal_mb);
        let wal = wal_disk.join("pg_wal");
        let mut c = Self::build_in(
            bindir(),
            dir,
            data_disk.join("data"),
            name,
            true,
            &with_identity(settings),
            fake_clock,
            &["-X", wal.to_str().unwrap()],
        );
        c.mounts = vec![data_disk, wal_disk];
        c
    }

    /// The file system that holds the data directory of a cluster made by
    /// [`Cluster::on_small_disks`].
    pub fn data_disk(&self) -> &Path {
        &self.mounts[0]
    }

    /// The file system that holds its WAL.
    pub fn wal_disk(&self) -> &Path {
        &self.mounts[1]
    }

    /// Makes the ext4 file system of [`Cluster::on_ext4_data_disk`] fail: the
    /// kernel's own error path, which remounts it read-only.
    pub fn fail_data_disk(&self) {
        let device = findmnt_source(self.data_disk());
        let name = device.rsplit('/').next().unwrap().to_string();
        let out = as_root("sh", &["-c", &format!("echo test > /sys/fs/ext4/{name}/trigger_fs_error")]);
        assert!(out.status.success(), "trigger_fs_error: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Repairs it as a DBA would, the server being stopped: unmount, e2fsck,
    /// mount again.
    pub fn repair_data_disk(&self) {
        let disk = self.data_disk().to_str().unwrap();
        let image = self.dir.join("disk.img");
        let out = as_root("umount", &[disk]);
        assert!(out.status.success(), "umount: {}", String::from_utf8_lossy(&out.stderr));
        // 1: errors corrected.
        let out = as_root("e2fsck", &["-fy", image.to_str().unwrap()]);
        assert!(matches!(out.status.code(), Some(0 | 1)), "e2fsck: {}", String::from_utf8_lossy(&out.stdout));
        let out = as_root("mount", &["-o", "loop,errors=remount-ro", image.to_str().unwrap(), disk]);
        assert!(out.status.success(), "mount: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn build_with(
        bin: PathBuf,
        name: &str,
        preload: bool,
        settings: &[&str],
        fake_clock: bool,
        initdb_args: &[&str],
    ) -> Cluster {
        let dir = cluster_dir();
        let data = dir.join("data");
        Self::build_in(bin, dir, data, name, preload, settings, fake_clock, initdb_args)
    }

    #[allow(clippy::too_many_arguments)]
    fn build_in(
        bin: PathBuf,
        dir: PathBuf,
        data: PathBuf,
        name: &str,
        preload: bool,
        settings: &[&str],
        fake_clock: bool,
        initdb_args: &[&str],
    ) -> Cluster {
        let out = as_server_user(&bin.join("initdb"))
            .args(["--auth=trust", "--username=postgres", "--no-sync", "--encoding=UTF8", "--locale=C"])
            .args(initdb_args)
            .arg("-D")
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb for {name}: {}", String::from_utf8_lossy(&out.stderr));
        let port = free_port();
        let mut conf = format!(
            "\n# {name}\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nmax_connections = 40\nlog_min_messages = warning\nlog_line_prefix = '%m [%p] '\n",
            dir.display()
        );
        if preload {
            conf.push_str("shared_preload_libraries = 'snowflake_id'\n");
        }
        for s in settings {
            conf.push_str(s);
            conf.push('\n');
        }
        let clock = fake_clock.then(|| {
            let c = FakeClock { file: dir.join("faketime.rc") };
            c.write(0);
            c
        });
        let cluster = Cluster { dir, data, port, bin, clock, mounts: Vec::new(), host: None };
        cluster.append_conf(&conf);
        cluster
    }

    /// A physical standby of `primary`, from a base backup, with `settings`
    /// appended. Not started.
    pub fn standby_of(primary: &Cluster, name: &str, settings: &[&str]) -> Cluster {
        Self::copy_of(primary, name, settings, true, false)
    }

    /// A standby whose clock the test can step (through libfaketime) apart
    /// from its primary's.
    pub fn standby_with_fake_clock(primary: &Cluster, name: &str, settings: &[&str]) -> Cluster {
        Self::copy_of(primary, name, settings, true, true)
    }

    /// A base backup of `primary` (pg_basebackup, WAL streamed into it) as a
    /// cluster of its own, not configured for recovery. Not started.
    pub fn base_backup_of(primary: &Cluster, name: &str) -> Cluster {
        Self::copy_of(primary, name, &[], false, false)
    }

    /// Like `base_backup_of`, with a clock the test can step.
    pub fn base_backup_with_fake_clock(primary: &Cluster, name: &str) -> Cluster {
        Self::copy_of(primary, name, &[], false, true)
    }

    fn copy_of(primary: &Cluster, name: &str, settings: &[&str], standby: bool, fake_clock: bool) -> Cluster {
        let dir = cluster_dir();
        let data = dir.join("data");
        let bin = bindir();
        // A fast checkpoint: the default spreads it over ten seconds.
        let out = as_server_user(&bin.join("pg_basebackup"))
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string(), "-U", "postgres", "-X", "stream", "-c", "fast"])
            .arg("-D")
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_basebackup for {name}: {}", String::from_utf8_lossy(&out.stderr));
        let port = free_port();
        let mut conf = format!("\n# {name}\nport = {port}\nunix_socket_directories = '{}'\n", dir.display());
        if standby {
            // Rather than pg_basebackup -R, whose connection string may carry
            // options (sslcertmode) that an older libpq loaded by the server
            // refuses, as PyPI's PostgreSQL 16 does.
            conf.push_str(&format!(
                "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={name}'\n",
                primary.port
            ));
        }
        for s in settings {
            conf.push_str(s);
            conf.push('\n');
        }
        let clock = fake_clock.then(|| {
            let c = FakeClock { file: dir.join("faketime.rc") };
            c.write(0);
            c
        });
        let copy = Cluster { dir, data, port, bin, clock, mounts: Vec::new(), host: None };
        copy.append_conf(&conf);
        if standby {
            copy.write_data_file("standby.signal", b"");
        }
        copy
    }

    /// Stops the server without a shutdown checkpoint, as a crash would.
    pub fn stop_immediate(&self) {
        let out = self.pg_ctl().args(["stop", "-w", "-m", "immediate", "-D"]).arg(&self.data).output().unwrap();
        assert!(out.status.success(), "stop: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Whether the server's postmaster runs (`pg_ctl status`).
    pub fn is_running(&self) -> bool {
        self.pg_ctl().args(["status", "-D"]).arg(&self.data).output().unwrap().status.success()
    }

    /// Like `stop_immediate`, for a server that may be down already.
    pub fn try_stop_immediate(&self) -> bool {
        let out = self.pg_ctl().args(["stop", "-w", "-m", "immediate", "-D"]).arg(&self.data).output().unwrap();
        out.status.success()
    }

    /// Removes a file of the data directory, if it is there; whether it was.
    pub fn remove_data_file_if_there(&self, name: &str) -> bool {
        let path = self.data_path(name);
        path.exists() && self.run_program("rm", &[path.to_str().unwrap()]).status.success()
    }

    /// Removes a file of the data directory as the server user.
    pub fn remove_data_file(&self, path: &Path) {
        let out = self.run_program("rm", &[path.to_str().unwrap()]);
        assert!(out.status.success(), "rm {path:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Waits until this standby has replayed everything `primary` has written so far.
    pub fn wait_for_replay_of(&self, primary: &Cluster) {
        let target: String =
            primary.connect().query_one("SELECT pg_current_wal_flush_lsn()::text", &[]).unwrap().get(0);
        let mut s = self.connect();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let done: bool =
                s.query_one("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &[&target]).unwrap().get(0);
            if done {
                return;
            }
            assert!(Instant::now() < deadline, "the standby did not replay up to {target}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the server is out of recovery (after promotion or a
    /// point-in-time recovery that ends by promoting).
    pub fn wait_until_writable(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let in_recovery: bool = self.connect().query_one("SELECT pg_is_in_recovery()", &[]).unwrap().get(0);
            if !in_recovery {
                return;
            }
            assert!(Instant::now() < deadline, "still in recovery:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Upgrades this (stopped) cluster with pg_upgrade into `new`, made by
    /// [`Cluster::new`] with the same settings and never started; `mode`
    /// holds pg_upgrade's mode option (`--link`, or none for a copy). On
    /// failure returns pg_upgrade's output.
    pub fn pg_upgrade(&self, new: &Cluster, mode: &[&str]) -> Result<(), String> {
        let out = as_server_user(&self.bin.join("pg_upgrade"))
            .current_dir(&new.dir)
            .args(mode)
            .args(["-U", "postgres", "-b"])
            .arg(&self.bin)
            .arg("-B")
            .arg(&new.bin)
            .arg("-d")
            .arg(&self.data)
            .arg("-D")
            .arg(&new.data)
            .args(["-p", &free_port().to_string(), "-P", &free_port().to_string()])
            .output()
            .unwrap();
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// One value from a query in the postgres database.
    pub fn one<T: for<'a> postgres::types::FromSql<'a>>(&self, sql: &str) -> T {
        self.connect().query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
    }

    /// Promotes a standby and waits until it accepts writes.
    pub fn promote(&self) {
        let out = self.pg_ctl().args(["promote", "-w", "-t", "300", "-D"]).arg(&self.data).output().unwrap();
        assert!(out.status.success(), "promote: {}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn append_conf(&self, text: &str) {
        let path = self.data.join("postgresql.conf");
        let mut child = as_server_user(Path::new("tee"))
            .arg("-a")
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        child.stdin.as_mut().unwrap().write_all(text.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success());
    }

    /// Sets a parameter for the next start (the last setting in the file wins).
    pub fn set(&self, line: &str) {
        self.append_conf(&format!("{line}\n"));
    }

    fn pg_ctl(&self) -> Command {
        let env: Vec<String> = match &self.clock {
            Some(clock) => vec![
                format!("LD_PRELOAD={LIBFAKETIME}"),
                format!("FAKETIME_TIMESTAMP_FILE={}", clock.file.display()),
                "FAKETIME_CACHE_DURATION=1".into(),
                "FAKETIME_DONT_FAKE_MONOTONIC=1".into(),
                "NO_FAKE_STAT=1".into(),
            ],
            None => Vec::new(),
        };
        as_server_user_with(&self.bin.join("pg_ctl"), &env)
    }

    /// Runs this cluster's server under the host name `host`, as a pod or a
    /// container of its own would: its postmaster starts in a UTS namespace
    /// of its own (`unshare --uts`, as root), where the name is set.
    pub fn on_host(mut self, host: &str) -> Cluster {
        self.host = Some(host.to_string());
        self
    }

    /// Starts the server; on failure returns the server log.
    pub fn try_start(&self) -> Result<(), String> {
        let mut start = self.pg_ctl();
        start.args(["start", "-w", "-t", "300", "-D"]).arg(&self.data).arg("-l").arg(self.log_path());
        if let Some(host) = &self.host {
            let mut unshare = if running_as_root() { Command::new("unshare") } else { Command::new("sudo") };
            if !running_as_root() {
                unshare.args(["-n", "unshare"]);
            }
            unshare
                .args(["--uts", "--", "sh", "-c", "hostname \"$0\" && exec \"$@\"", host])
                .arg(start.get_program())
                .args(start.get_args());
            start = unshare;
        }
        let out = start.output().unwrap();
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{}\n{}", String::from_utf8_lossy(&out.stderr), self.log()))
        }
    }

    pub fn start(&self) {
        if let Err(log) = self.try_start() {
            panic!("server did not start:\n{log}");
        }
    }

    pub fn stop(&self) {
        let out = self.pg_ctl().args(["stop", "-w", "-t", "300", "-m", "fast", "-D"]).arg(&self.data).output().unwrap();
        assert!(out.status.success(), "stop: {}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn connect(&self) -> postgres::Client {
        let url = format!("host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=10", self.port);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match postgres::Client::connect(&url, postgres::NoTls) {
                Ok(c) => return c,
                // After a crash the server refuses connections while it recovers.
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("connect to {}: {e}", self.port),
            }
        }
    }

    /// Connects and creates the extension.
    pub fn session(&self) -> postgres::Client {
        let mut c = self.connect();
        c.batch_execute("CREATE EXTENSION IF NOT EXISTS snowflake_id").unwrap();
        c
    }

    /// Runs a program of the installation (psql, pg_dump, ...) as the server user.
    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        as_server_user(&self.bin.join(program)).args(args).output().unwrap()
    }

    /// Runs a program from PATH as the server user.
    pub fn run_program(&self, program: &str, args: &[&str]) -> Output {
        as_server_user(Path::new(program)).args(args).output().unwrap()
    }

    /// Kills one backend with SIGKILL and waits until the postmaster has reset
    /// shared memory and accepts queries again.
    pub fn crash_backend(&self, pid: i32) {
        let log_before = self.log().len();
        let ok = Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success();
        assert!(ok, "kill -9 {pid}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.log()[log_before..].contains("all server processes terminated; reinitializing") {
            assert!(Instant::now() < deadline, "no crash restart:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        // A connection made while the postmaster restarts may still be cut off.
        loop {
            if self.connect().query_one("SELECT 1", &[]).is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "no recovery after the crash");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn state_file(&self) -> PathBuf {
        self.data.join("snowflake_id.state")
    }

    /// A file's path in the data directory.
    pub fn data_path(&self, name: &str) -> PathBuf {
        self.data.join(name)
    }

    /// Writes a file in the data directory as the server user.
    pub fn write_data_file(&self, name: &str, contents: &[u8]) {
        let mut child = as_server_user(Path::new("tee"))
            .arg(self.data.join(name))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        child.stdin.as_mut().unwrap().write_all(contents).unwrap();
        assert!(child.wait().unwrap().success());
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl().args(["stop", "-w", "-m", "immediate", "-D"]).arg(&self.data).output();
        for mount in &self.mounts {
            let _ = as_root("umount", &["-l", mount.to_str().unwrap()]);
        }
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("kept {} for inspection", self.dir.display());
        }
    }
}

/// The SQLSTATE, message and hint of a failed statement.
/// How many calls `c` refused for `reason` since it started
/// (`snowflake_status().refused_<reason>`).
pub fn refused(c: &Cluster, reason: &str) -> i64 {
    c.one(&format!("SELECT refused_{reason} FROM snowflake_status()"))
}

pub fn db_error(e: &postgres::Error) -> (String, String, String) {
    let db = e.as_db_error().unwrap_or_else(|| panic!("not a server error: {e}"));
    (db.code().code().to_string(), db.message().to_string(), db.hint().unwrap_or_default().to_string())
}

/// Clients inserting generated IDs into `ids` (primary key: a duplicate fails
/// the insert) while the test changes the clock or crashes the server.
///
/// Each batch is tagged with the phase it ran in; a batch that saw the phase
/// change while it ran is tagged NULL. A batch tagged k started after the
/// switch to k and ended before the switch to k+1, so every ID of phase k must
/// be below every ID of phase k+1.
pub struct Load {
    /// Rows each phase holds for good: counted by a client once it has seen
    /// that its batch kept its phase.
    stored: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<i32, i64>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    phase: std::sync::Arc<std::sync::atomic::AtomicI32>,
    clients: Vec<std::thread::JoinHandle<Vec<String>>>,
}

pub const IDS_TABLE: &str = "CREATE TABLE IF NOT EXISTS ids (id bigint PRIMARY KEY, phase int, client int, batch int)";

impl Load {
    /// `clients` connections, each inserting `batch` IDs per statement, half of
    /// them with single calls and half with `snowflake_next_ids`.
    pub fn start(cluster: &Cluster, clients: usize, batch: i32) -> Load {
        use std::sync::atomic::{AtomicBool, AtomicI32};
        use std::sync::Arc;
        cluster.session().batch_execute(IDS_TABLE).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let phase = Arc::new(AtomicI32::new(0));
        let stored = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
        let url = format!("host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=10", cluster.port);
        let clients = (0..clients as i32)
            .map(|client| {
                let (stop, phase, url, stored) = (stop.clone(), phase.clone(), url.clone(), stored.clone());
                std::thread::spawn(move || {
                    let insert = if client % 2 == 0 {
                        "INSERT INTO ids SELECT snowflake_next_id(), $1, $2, $3 FROM generate_series(1, $4)"
                    } else {
                        "INSERT INTO ids SELECT id, $1, $2, $3 FROM snowflake_next_ids($4) AS id"
                    };
                    let mut errors = Vec::new();
                    let mut conn: Option<postgres::Client> = None;
                    let mut batch_no = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let c = match conn.as_mut() {
                            Some(c) => c,
                            None => match postgres::Client::connect(&url, postgres::NoTls) {
                                Ok(c) => conn.insert(c),
                                Err(_) => {
                                    std::thread::sleep(Duration::from_millis(50));
                                    continue;
                                }
                            },
                        };
                        batch_no += 1;
                        let before = phase.load(Ordering::SeqCst);
                        let result = c.execute(insert, &[&before, &client, &batch_no, &batch]).and_then(|_| {
                            if phase.load(Ordering::SeqCst) != before {
                                c.execute(
                                    "UPDATE ids SET phase = NULL WHERE client = $1 AND batch = $2",
                                    &[&client, &batch_no],
                                )?;
                            } else {
                                // Kept its phase: the next phase starts after this count.
                                *stored.lock().unwrap().entry(before).or_insert(0) += i64::from(batch);
                            }
                            Ok(())
                        });
                        if let Err(e) = result {
                            errors.push(e.to_string());
                            conn = None;
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                    errors
                })
            })
            .collect();
        Load { stored, stop, phase, clients }
    }

    /// Waits until the current phase holds at least `rows` IDs for good (in
    /// batches that kept their phase): a phase ends when the clients have done
    /// something in it, whatever the machine's speed. (The bound is for a hung
    /// server, not a measure.)
    pub fn wait_for_rows(&self, rows: i64) {
        let phase = self.phase.load(Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let stored = self.stored.lock().unwrap().get(&phase).copied().unwrap_or(0);
            if stored >= rows {
                return;
            }
            assert!(Instant::now() < deadline, "phase {phase} has {stored} of {rows} rows after 300 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn next_phase(&self) -> i32 {
        self.phase.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Stops the clients and returns the errors they saw.
    pub fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.clients.into_iter().flat_map(|c| c.join().unwrap()).collect()
    }
}

/// Asserts that every phase has IDs and that each phase's IDs are all above the
/// previous phase's; returns the number of rows per phase.
pub fn assert_phases_increase(c: &mut postgres::Client, phases: i32) -> Vec<i64> {
    let rows = c
        .query(
            "SELECT phase, count(*), min(id), max(id) FROM ids WHERE phase IS NOT NULL GROUP BY phase ORDER BY phase",
            &[],
        )
        .unwrap();
    let got: Vec<(i32, i64, i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..phases).collect::<Vec<_>>(),
        "every phase has IDs: {got:?}"
    );
    for w in got.windows(2) {
        assert!(w[0].3 < w[1].2, "phase {} max {} is not below phase {} min {}", w[0].0, w[0].3, w[1].0, w[1].2);
    }
    let dupes: i64 = c.query_one("SELECT count(*) - count(DISTINCT id) FROM ids", &[]).unwrap().get(0);
    assert_eq!(dupes, 0);
    got.iter().map(|g| g.1).collect()
}

/// The tests under tests/pg_regress, in order.
pub const REGRESS_TESTS: [&str; 5] = ["surface", "errors", "adopt", "json", "privileges"];

/// The settings the pg_regress expected files were made with.
pub const REGRESS_SETTINGS: [&str; 2] = ["snowflake_id.datacenter_id = 3", "snowflake_id.worker_id = 7"];

/// Runs the pg_regress suite against `c` (started, with `REGRESS_SETTINGS`);
/// on a difference returns the diffs. With `accept`, copies the results over
/// the expected files instead.
pub fn run_pg_regress(c: &Cluster, accept: bool) -> Result<(), String> {
    // pg_regress --use-existing runs in an existing database.
    c.connect().batch_execute("CREATE DATABASE snowflake_regress").unwrap();
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pg_regress");
    let output = c.dir.join("regress");
    fs::create_dir_all(&output).unwrap();
    let out = Command::new(pg_config()).arg("--pkglibdir").output().unwrap();
    let pg_regress =
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("pgxs/src/test/regress/pg_regress");
    let status = Command::new(pg_regress)
        .arg("--use-existing")
        .args(["--host=127.0.0.1", &format!("--port={}", c.port), "--user=postgres"])
        .arg(format!("--bindir={}", bindir().display()))
        .arg(format!("--inputdir={}", input.display()))
        .arg(format!("--outputdir={}", output.display()))
        .arg("--dbname=snowflake_regress")
        .args(REGRESS_TESTS)
        .status()
        .unwrap();
    if accept {
        for t in REGRESS_TESTS {
            fs::copy(output.join(format!("results/{t}.out")), input.join(format!("expected/{t}.out"))).unwrap();
        }
        return Ok(());
    }
    if status.success() {
        Ok(())
    } else {
        Err(fs::read_to_string(output.join("regression.diffs")).unwrap_or_default())
    }
}

/// Mounts a tmpfs of `size_mb` MiB at `at` (made here), owned by the server user.
fn mount_tmpfs(at: &Path, size_mb: u32) {
    fs::create_dir_all(at).unwrap();
    let at = at.to_str().unwrap();
    let out = as_root("mount", &["-t", "tmpfs", "-o", &format!("size={size_mb}m,mode=0700"), "tmpfs", at]);
    assert!(out.status.success(), "mount a tmpfs at {at}: {}", String::from_utf8_lossy(&out.stderr));
    let out = as_root("chown", &["postgres:postgres", at]);
    assert!(out.status.success(), "chown {at}: {}", String::from_utf8_lossy(&out.stderr));
}

/// An ext4 file system of `size_mb` MiB in the file `image`, on a loop
/// device, mounted at `at` (made here) with `errors=remount-ro`, owned by
/// the server user.
fn mount_ext4(image: &Path, at: &Path, size_mb: u32) {
    fs::create_dir_all(at).unwrap();
    let (image, at) = (image.to_str().unwrap(), at.to_str().unwrap());
    let out = as_root("truncate", &["-s", &format!("{size_mb}M"), image]);
    assert!(out.status.success(), "truncate: {}", String::from_utf8_lossy(&out.stderr));
    let out = as_root("mkfs.ext4", &["-q", "-F", image]);
    assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));
    let out = as_root("mount", &["-o", "loop,errors=remount-ro", image, at]);
    assert!(out.status.success(), "mount {image} at {at}: {}", String::from_utf8_lossy(&out.stderr));
    let out = as_root("chown", &["postgres:postgres", at]);
    assert!(out.status.success(), "chown {at}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The device mounted at `at`.
fn findmnt_source(at: &Path) -> String {
    let out = Command::new("findmnt").args(["-n", "-o", "SOURCE"]).arg(at).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Fills the file system mounted at `disk` to its last byte (files `fill`,
/// `fill.more` and `fill.last`, which [`free_disk`] removes).
pub fn fill_disk(disk: &Path) {
    let avail = || -> u64 {
        let out = Command::new("df").args(["--output=avail", "-B1"]).arg(disk).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
    };
    let fill = disk.join("fill");
    // Most of it at once; a server writing meanwhile may take a little of
    // what df saw (fallocate is all or nothing), so a little is left to dd.
    let mut took = false;
    for _ in 0..10 {
        let room = avail().saturating_sub(1 << 20);
        if room == 0 || as_root("fallocate", &["-l", &room.to_string(), fill.to_str().unwrap()]).status.success() {
            took = true;
            break;
        }
    }
    assert!(took, "fallocate could not take the room on {disk:?}");
    // Whatever is left: dd stops at the first ENOSPC. Twice: a file being
    // replaced while the first ran may have given a block back.
    for (name, wait) in [("fill.more", 0), ("fill.last", 200)] {
        std::thread::sleep(Duration::from_millis(wait));
        let of = format!("of={}", disk.join(name).display());
        as_root("dd", &["if=/dev/zero", &of, "bs=512"]);
    }
}

/// Frees what [`fill_disk`] took.
pub fn free_disk(disk: &Path) {
    let files: Vec<String> =
        ["fill", "fill.more", "fill.last"].iter().map(|f| disk.join(f).to_str().unwrap().to_string()).collect();
    let out = as_root("rm", &["-f", &files[0], &files[1], &files[2]]);
    assert!(out.status.success(), "rm: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs a command as root (directly, or through sudo); returns its output.
pub fn as_root(program: &str, args: &[&str]) -> Output {
    let mut c = if running_as_root() { Command::new(program) } else { Command::new("sudo") };
    if !running_as_root() {
        c.args(["-n", program]);
    }
    c.args(args).output().unwrap()
}

/// A state file's text: `body` with the CRC-32 (IEEE) line the server checks.
pub fn seal_state_file(body: &str) -> String {
    let mut crc = !0u32;
    for &b in body.as_bytes() {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    format!("{body}crc32={:08x}\n", !crc)
}
