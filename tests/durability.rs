//! What survives the generator's process: a restart with the clock set back, a
//! backend killed mid-generation (the postmaster re-initialises shared
//! memory), and state files that cannot be trusted.

mod common;

use common::{assert_phases_increase, db_error, Cluster, Load};

#[test]
fn a_restart_with_the_clock_an_hour_back_continues_above_the_old_ids() {
    let c = Cluster::with_fake_clock("restart", &[]);
    c.start();
    let mut s = c.session();
    let before: i64 = s.query_one("SELECT max(id) FROM snowflake_next_ids(10000) id", &[]).unwrap().get(0);
    drop(s);
    c.stop();
    c.clock.as_ref().unwrap().set_offset(-3600);
    c.start();
    let mut s = c.session();
    let row = s
        .query_one(
            "SELECT min(id), (SELECT drift_ms FROM snowflake_status()), (SELECT clock_step_backs FROM snowflake_status())
             FROM snowflake_next_ids(10000) id",
            &[],
        )
        .unwrap();
    let (after, drift, step_backs): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert!(after > before, "{after} after the restart is not above {before}");
    assert!(drift > 3_500_000, "the new IDs borrow the hour the clock lost: {drift} ms");
    assert_eq!(step_backs, 1, "the step back while the server was down is noticed");
}

#[test]
fn a_backend_killed_during_generation_does_not_repeat_ids() {
    let c = Cluster::with_fake_clock("crash", &[]);
    c.start();
    let load = Load::start(&c, 4, 500);
    load.wait_for_rows(1000);
    // The clock goes back an hour, then a generating backend dies: the postmaster
    // resets shared memory, and the generator must resume above the mark rather
    // than at the (earlier) wall clock.
    load.next_phase();
    c.clock.as_ref().unwrap().set_offset(-3600);
    load.wait_for_rows(1000);
    let mut s = c.connect();
    let pid: i32 = loop {
        // A client is caught between statements now and then: look again.
        let generating = s
            .query_opt(
                "SELECT pid FROM pg_stat_activity WHERE query LIKE 'INSERT INTO ids%' AND state = 'active' LIMIT 1",
                &[],
            )
            .unwrap();
        if let Some(row) = generating {
            break row.get(0);
        }
    };
    drop(s);
    c.crash_backend(pid);
    load.next_phase();
    load.wait_for_rows(1000);
    let errors = load.finish();
    assert!(!errors.is_empty(), "the crash must have cut the clients off");
    for e in &errors {
        assert!(!e.contains("duplicate key") && !e.contains("snowflake"), "not a crash error: {e}");
    }
    let log = c.log();
    assert!(log.contains("terminated by signal 9"), "{log}");
    assert!(log.contains("all server processes terminated; reinitializing"), "{log}");
    let mut s = c.session();
    assert_phases_increase(&mut s, 3);
}

#[test]
fn corrupt_and_unreadable_state_files_refuse_ids_and_keep_the_server_up() {
    let c = Cluster::new("statefile", &[]);
    c.start();
    let before: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    c.stop();
    let good = std::fs::read(c.state_file()).expect("the first ID wrote the state file");
    let text = String::from_utf8(good.clone()).unwrap();
    assert!(text.contains("mark_unix_ms=") && text.contains("crc32="), "{text}");

    let edited = text.replacen("clock_back=0", "clock_back=1", 1);
    let body = text.split("crc32=").next().unwrap();
    // Half of the old file, and the second half of one written for a later
    // mark (its mark in the first half, its checksum in the second).
    let ms_line = body.lines().find(|l| l.starts_with("mark_unix_ms=")).unwrap();
    let ms: i64 = ms_line["mark_unix_ms=".len()..].parse().unwrap();
    let later = common::seal_state_file(&body.replacen(ms_line, &format!("mark_unix_ms={}", ms + 7), 1));
    let half = good.len() / 2;
    assert!(body.find(ms_line).unwrap() + ms_line.len() < half, "the mark lies in the first half");
    let torn = [&good[..half], &later.as_bytes()[half..]].concat();
    let version = body.lines().find(|l| l.starts_with("version=")).unwrap();
    let future = common::seal_state_file(&body.replacen(version, "version=9", 1));
    let cases: [(&str, Vec<u8>, &str); 6] = [
        ("garbage", b"not a state file".to_vec(), "is corrupt"),
        ("edited", edited.into_bytes(), "is corrupt"),
        ("empty", Vec::new(), "is corrupt"),
        ("torn", torn, "is corrupt"),
        ("truncated", good[..good.len() - 12].to_vec(), "is corrupt"),
        ("future version", future.into_bytes(), "its version 9 is not"),
    ];
    // Generator state never keeps the server down: it starts, serves reads,
    // and refuses each ID call (55000) until the file is repaired or a floor raised.
    let refuses_ids = |name: &str| {
        let e = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
        let (code, message, hint) = db_error(&e);
        assert_eq!(code, "55000", "{name}: {message}");
        assert!(message.contains("the high-water mark of this data directory is unknown"), "{name}: {message}");
        assert!(hint.contains("snowflake_raise_floor(max(id))"), "{name}: {hint}");
        let one: i32 = c.one("SELECT 1");
        assert_eq!(one, 1);
    };
    for (name, contents, says) in cases {
        c.write_data_file("snowflake_id.state", &contents);
        let log_before = c.log().len();
        c.start();
        let log = c.log()[log_before..].to_string();
        assert!(log.contains("WARNING:  snowflake_id state file") && log.contains(says), "{name}:\n{log}");
        assert!(log.contains("HINT:  The file holds the floor above which this server continues"), "{name}:\n{log}");
        assert!(log.contains("An older copy (from a backup) is no floor"), "{name}:\n{log}");
        refuses_ids(name);
        c.stop();
        assert_eq!(std::fs::read(c.state_file()).unwrap(), contents, "{name}: a clean stop leaves the file alone");
    }

    c.write_data_file("snowflake_id.state", &good);
    let chmod = c.run_program("chmod", &["000", c.state_file().to_str().unwrap()]);
    assert!(chmod.status.success());
    let log_before = c.log().len();
    c.start();
    let log = c.log()[log_before..].to_string();
    assert!(
        log.contains("WARNING:  could not read snowflake_id state file") && log.contains("Permission denied"),
        "{log}"
    );
    refuses_ids("unreadable");
    c.stop();

    let chmod = c.run_program("chmod", &["600", c.state_file().to_str().unwrap()]);
    assert!(chmod.status.success());
    // Another owner (a restore run as root): the server's user cannot read it.
    let state = c.state_file();
    if common::as_root("chown", &["root:root", state.to_str().unwrap()]).status.success() {
        let log_before = c.log().len();
        c.start();
        let log = c.log()[log_before..].to_string();
        assert!(log.contains("could not read snowflake_id state file") && log.contains("Permission denied"), "{log}");
        refuses_ids("another owner");
        c.stop();
        assert!(common::as_root("chown", &["postgres:postgres", state.to_str().unwrap()]).status.success());
    }
    c.start();
    let after: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(after > before);
}

/// The generator's files (the state file and the note that IDs were issued)
/// stay out of PostgreSQL's relation directories: pg_checksums, and a base
/// backup of a checksummed cluster (which 15 and 16 check file by file in
/// `global/`), pass.
#[test]
fn a_checksummed_cluster_that_generated_passes_pg_checksums_and_base_backups() {
    let c = Cluster::with_checksums("checksums", &["wal_level = replica", "max_wal_senders = 4"]);
    c.start();
    let id: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(c.data_path("snowflake_id.issued").exists() && c.state_file().exists());
    let copy = Cluster::base_backup_of(&c, "checksumscopy");
    assert!(copy.data_path("snowflake_id.issued").exists(), "the note comes with a base backup");
    c.stop();
    let out = c.run("pg_checksums", &["--check", "-D", c.data.to_str().unwrap()]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "pg_checksums: {text}");
    assert!(text.contains("Bad checksums:  0"), "{text}");
    assert!(id > 0);
}

#[test]
fn a_state_file_that_cannot_be_written_stops_generation_without_losing_an_id() {
    let c = Cluster::new("unwritable", &[]);
    c.start();
    let mut s = c.session();
    s.batch_execute("CREATE EXTENSION pg_walinspect").unwrap();
    let before: i64 = s.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    let lsn: String = s.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).unwrap().get(0);
    // The temporary file's name taken by a directory: the next write of the mark fails.
    let blocker = c.data.join("snowflake_id.state.tmp");
    let ok = c.run_program("mkdir", &[blocker.to_str().unwrap()]).status.success();
    assert!(ok);
    // Ten million IDs run seconds past the one-second mark, so a write is needed.
    let e = s.query_one("SELECT count(*) FROM snowflake_next_ids(10000000)", &[]).unwrap_err();
    let (code, message, _) = db_error(&e);
    assert_eq!(code, "58030", "{message}");
    assert!(message.starts_with("could not write snowflake_id state file"), "{message}");
    // The file comes first: a mark it does not hold was never logged. (Some
    // WAL of its own after the call: pg_walinspect wants a range with records.)
    s.batch_execute("CREATE TABLE after_the_failure ()").unwrap();
    let logged: i64 = s
        .query_one(
            "SELECT count(*) FROM pg_get_wal_records_info($1::text::pg_lsn, pg_current_wal_flush_lsn()) \
             WHERE resource_manager = 'snowflake_id'",
            &[&lsn],
        )
        .unwrap()
        .get(0);
    assert_eq!(logged, 0, "a mark the state file does not hold reached WAL");
    let ok = c.run_program("rmdir", &[blocker.to_str().unwrap()]).status.success();
    assert!(ok);
    let after: i64 = s.query_one("SELECT max(id) FROM snowflake_next_ids(10000000) id", &[]).unwrap().get(0);
    assert!(after > before);
    // Whatever was issued before the failure stays below the recorded mark.
    drop(s);
    c.stop();
    c.start();
    let restarted: i64 = c.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(restarted > after);
}

#[test]
fn the_state_file_follows_the_data_directorys_group_access() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |c: &Cluster| std::fs::metadata(c.state_file()).unwrap().permissions().mode() & 0o777;
    let private = Cluster::new("private", &[]);
    private.start();
    private.session().query_one("SELECT snowflake_next_id()", &[]).unwrap();
    assert_eq!(mode(&private), 0o600);
    // initdb --allow-group-access: backup tools in the group may read every file.
    let shared = Cluster::with_group_access("groupaccess", &[]);
    shared.start();
    shared.session().query_one("SELECT snowflake_next_id()", &[]).unwrap();
    assert_eq!(mode(&shared), 0o640);
}

#[test]
fn removing_the_clock_back_field_after_a_step_back_says_what_happened() {
    let with_field = "snowflake_id.layout = 'clock_back:2,timestamp:39,datacenter:5,worker:5,sequence:12'";
    let c = Cluster::with_fake_clock("dropfield", &[with_field, "snowflake_id.max_clock_drift = 0"]);
    c.start();
    let mut s = c.session();
    s.query_one("SELECT snowflake_next_id()", &[]).unwrap();
    c.clock.as_ref().unwrap().set_offset(-60);
    let era: i32 = s.query_one("SELECT clock_back FROM snowflake_decode(snowflake_next_id())", &[]).unwrap().get(0);
    assert_eq!(era, 1);
    drop(s);
    c.stop();
    c.set("snowflake_id.layout = 'timestamp:41,datacenter:5,worker:5,sequence:12'");
    let log_before = c.log().len();
    c.start();
    let log = c.log()[log_before..].to_string();
    // Era 1 of the old layout lies above every ID the new one reaches for years:
    // the server starts, and each call is refused until then.
    assert!(log.contains("WARNING:  snowflake_id settings changed since the state file was written"), "{log}");
    let e = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, _) = db_error(&e);
    assert_eq!(code, "55000", "{message}");
    assert!(message.starts_with("cannot generate snowflake IDs before"), "{message}");
    assert!(log.contains("Changed: snowflake_id.layout (clock_back:2,timestamp:39,"), "{log}");
    assert!(log.contains("days from now"), "{log}");
    assert!(log.contains("HINT:  Set the old values again"), "{log}");
    assert!(!log.contains("corrupt"), "{log}");
}
