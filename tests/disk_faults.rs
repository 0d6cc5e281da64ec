//! Faults at the disk: a state file that is lost, a data directory or a WAL
//! directory that fills up, a state file the operating system refuses to
//! replace, and a file system the kernel turns read-only on an error. Each checks the first promise: no ID handed out beyond the mark
//! that was durable, and none at or below an ID handed out before, across
//! the fault, its repair and a crash in the middle of it.

mod common;

use std::time::{Duration, Instant};

use common::{db_error, fill_disk, free_disk, refused, Cluster};

/// The mark a state file holds, as (unix ms, sequence).
fn file_mark(c: &Cluster) -> (i64, i64) {
    let text = std::fs::read_to_string(c.state_file()).unwrap();
    let field = |name: &str| -> i64 {
        let line = text.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).unwrap_or_else(|| panic!("{text}"));
        line.parse().unwrap()
    };
    (field("mark_unix_ms"), field("mark_sequence"))
}

/// An ID's place as (unix ms, sequence), comparable with a file's mark
/// (ticks of a millisecond, no clock step back).
fn place(s: &mut postgres::Client, id: i64) -> (i64, i64) {
    let row = s
        .query_one("SELECT (extract(epoch FROM ts) * 1000)::bigint, sequence::bigint FROM snowflake_decode($1)", &[&id])
        .unwrap();
    (row.get(0), row.get(1))
}

/// Generates one ID at a time until a call fails (at most `within`):
/// the IDs handed out, and the error.
fn generate_until_refused(s: &mut postgres::Client, within: Duration) -> (Vec<i64>, postgres::Error) {
    let deadline = Instant::now() + within;
    let mut ids = Vec::new();
    loop {
        match s.query_one("SELECT snowflake_next_id()", &[]) {
            Ok(row) => ids.push(row.get(0)),
            Err(e) => return (ids, e),
        }
        assert!(Instant::now() < deadline, "no call failed within {within:?} ({} IDs)", ids.len());
    }
}

/// The warnings a state file that cannot be written left in the log since `from`.
fn write_warnings(c: &Cluster, from: usize) -> usize {
    c.log()[from..].matches("WARNING:  could not write snowflake_id state file").count()
}

#[test]
fn a_lost_state_file_refuses_ids_rather_than_repeat_them() {
    let c = Cluster::with_fake_clock("lostfile", &[]);
    let note = c.data_path("snowflake_id.issued");
    c.start();
    let mut s = c.session();
    assert!(!note.exists(), "no ID yet, no note");
    s.query_one("SELECT snowflake_next_id()", &[]).unwrap();
    assert!(note.exists() && c.state_file().exists(), "the first mark leaves the note");

    // IDs an hour ahead of the clock (as a bulk call or borrowed time runs
    // them), then the clock set right: the state file is the only floor.
    c.clock.as_ref().unwrap().set_offset(3600);
    let ahead: i64 = s.query_one("SELECT max(id) FROM snowflake_next_ids(1000) id", &[]).unwrap().get(0);
    c.clock.as_ref().unwrap().set_offset(0);
    drop(s);
    c.stop();
    let saved = std::fs::read(c.state_file()).unwrap();

    // Lost after a clean stop (an fsck, a copy that left it out, a tidy-up).
    c.remove_data_file(&c.state_file());
    let from = c.log().len();
    c.start();
    let log = c.log()[from..].to_string();
    assert!(log.contains("WARNING:  snowflake_id state file") && log.contains("is missing"), "{log}");
    assert!(log.contains("issued IDs before"), "{log}");
    let refused = |c: &Cluster| {
        let e = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
        let (code, message, hint) = db_error(&e);
        assert_eq!(code, "55000", "{message}");
        assert!(message.contains("the high-water mark of this data directory is unknown"), "{message}");
        assert!(hint.starts_with("Put the state file back") && hint.contains("snowflake_raise_floor"), "{hint}");
    };
    refused(&c);
    c.stop();
    assert!(!c.state_file().exists(), "a stop with an unknown mark writes no file");

    // Put back, the generator continues above the hour ahead.
    c.write_data_file("snowflake_id.state", &saved);
    c.start();
    let after: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(after > ahead, "{after} is not above {ahead}");

    // Lost after a crash whose WAL holds marks since the last checkpoint:
    // replay brings the floor back, and IDs flow at once.
    let top: i64 = c.session().query_one("SELECT max(id) FROM snowflake_next_ids(100000) id", &[]).unwrap().get(0);
    c.stop_immediate();
    c.remove_data_file(&c.state_file());
    c.start();
    let replayed: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(replayed > top, "{replayed} is not above {top}");
    assert!(c.state_file().exists(), "replay wrote the file again");

    // Lost after a crash that followed a checkpoint: no mark to replay, so
    // the mark is unknown until a DBA raises the floor.
    c.clock.as_ref().unwrap().set_offset(3600);
    let top: i64 = c.session().query_one("SELECT max(id) FROM snowflake_next_ids(1000) id", &[]).unwrap().get(0);
    c.clock.as_ref().unwrap().set_offset(0);
    c.connect().batch_execute("CHECKPOINT").unwrap();
    c.stop_immediate();
    c.remove_data_file(&c.state_file());
    c.start();
    refused(&c);
    let floor: i64 = c.one(&format!("SELECT snowflake_raise_floor({top})"));
    assert!(floor > top);
    let next: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(next > top, "{next} is not above {top}");

    // A data directory that generated before the note existed gets it at start.
    c.stop();
    c.remove_data_file(&note);
    c.start();
    assert!(note.exists(), "the start wrote the note beside a state file with a mark");
}

#[test]
fn a_data_directory_that_never_generated_starts_at_the_clock_without_a_file() {
    let c = Cluster::new("neverran", &[]);
    c.start();
    c.connect().query_one("SELECT 1", &[]).unwrap();
    c.stop();
    assert!(!c.state_file().exists() && !c.data_path("snowflake_id.issued").exists());
    let from = c.log().len();
    c.start();
    let id: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(id > 0);
    assert!(!c.log()[from..].contains("is missing"), "{}", c.log());
}

#[test]
fn a_full_disk_fails_calls_at_the_mark_and_recovers_without_a_restart() {
    let c = Cluster::on_small_disks("fulldisk", 48, 64, &[]);
    c.start();
    let mut s = c.session();
    let mut before: i64 = s.query_one("SELECT max(id) FROM snowflake_next_ids(1000) id", &[]).unwrap().get(0);

    for episode in ["full", "full, then a crash"] {
        let from = c.log().len();
        fill_disk(c.data_disk());
        let (ids, e) = generate_until_refused(&mut s, Duration::from_secs(30));
        let (code, message, hint) = db_error(&e);
        assert_eq!(code, "53100", "{episode}: {message}");
        assert!(message.starts_with("could not write snowflake_id state file"), "{episode}: {message}");
        assert!(message.ends_with("No space left on device"), "{episode}: {message}");
        assert_eq!(hint, "Check free disk space.", "{episode}");
        // Calls keep failing while the disk is full; nothing beyond the durable mark left.
        let (refused_before, failures_before) = (refused(&c, "mark_not_durable"), mark_write_failures(&c));
        for _ in 0..20 {
            let e = s.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
            assert_eq!(db_error(&e).0, "53100", "{episode}");
        }
        // Each refusal counted, and each failed write behind it.
        assert_eq!(refused(&c, "mark_not_durable") - refused_before, 20, "{episode}");
        assert!(mark_write_failures(&c) - failures_before >= 20, "{episode}");
        let mark = file_mark(&c);
        for &id in ids.iter().chain([&before]) {
            assert!(place(&mut s, id) < mark, "{episode}: {id} is not below the durable mark {mark:?}");
        }
        assert!(ids.iter().all(|&id| id > before), "{episode}: an ID at or below {before}");
        assert_eq!(write_warnings(&c, from), 1, "{episode}: one warning for the episode:\n{}", &c.log()[from..]);
        before = ids.iter().copied().max().unwrap_or(before);

        if episode == "full, then a crash" {
            c.stop_immediate();
            free_disk(c.data_disk());
            c.start();
            s = c.session();
        } else {
            free_disk(c.data_disk());
        }
        let after: i64 = s.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
        assert!(after > before, "{episode}: {after} is not above {before}");
        before = after;
        if episode == "full" {
            assert!(c.log()[from..].contains("snowflake_id wrote its state file again"), "{}", &c.log()[from..]);
        }
    }
}

#[test]
fn a_state_file_the_system_refuses_is_an_io_error_that_says_what_to_check() {
    let c = Cluster::on_small_disks("immutable", 48, 64, &[]);
    c.start();
    let mut s = c.session();
    let before: i64 = s.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    let file = c.state_file();
    let chattr = |flag: &str| {
        let out = common::as_root("chattr", &[flag, file.to_str().unwrap()]);
        assert!(out.status.success(), "chattr {flag}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let from = c.log().len();
    chattr("+i");
    let (ids, e) = generate_until_refused(&mut s, Duration::from_secs(30));
    chattr("-i");
    let (code, message, hint) = db_error(&e);
    assert_eq!(code, "58030", "not a missing privilege (42501): {message}");
    assert!(message.ends_with("Operation not permitted"), "{message}");
    assert!(hint.contains("permissions and attributes (chattr)"), "{hint}");
    assert_eq!(write_warnings(&c, from), 1, "{}", &c.log()[from..]);
    let after: i64 = s.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(ids.iter().all(|&id| id > before && id < after), "IDs in order across the episode");
}

#[test]
fn a_full_wal_disk_stops_the_server_and_the_next_start_continues_above_every_id() {
    let c = Cluster::on_small_disks("fullwal", 48, 40, &[]);
    c.start();
    let mut s = c.session();
    let mut ids: Vec<i64> = Vec::new();
    ids.push(s.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0));
    fill_disk(c.wal_disk());
    // The next segment cannot be made: the next WAL record, a mark among
    // them (one a second even for SELECT-only callers), PANICs the server.
    s.batch_execute("SELECT pg_switch_wal()").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match s.query_one("SELECT snowflake_next_id()", &[]) {
            Ok(row) => ids.push(row.get(0)),
            Err(_) => break,
        }
        assert!(Instant::now() < deadline, "the server kept writing WAL on a full disk");
    }
    let log = c.log();
    assert!(log.contains("PANIC:") && log.contains("No space left on device"), "{log}");
    // PostgreSQL stops the server once recovery cannot write WAL either;
    // make sure it is down before giving the space back.
    let _ = c.try_stop_immediate();
    free_disk(c.wal_disk());
    c.start();
    let top = *ids.iter().max().unwrap();
    let after: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(after > top, "{after} is not above {top}");
}

#[test]
fn a_file_system_gone_read_only_fails_calls_at_the_mark_and_a_repair_continues_above() {
    // WAL on its own tmpfs: the server outlives its data directory's file
    // system going read-only long enough to see what callers get.
    let c = Cluster::on_ext4_data_disk("readonly", 64, 64, &[]);
    c.start();
    let mut s = c.session();
    let before: i64 = s.query_one("SELECT max(id) FROM snowflake_next_ids(1000) id", &[]).unwrap().get(0);
    // Written long ago on a real server: the configuration, on disk before
    // the journal aborts and drops what was not.
    assert!(common::as_root("sync", &[]).status.success());
    c.fail_data_disk();
    let (ids, e) = generate_until_refused(&mut s, Duration::from_secs(30));
    let (code, message, hint) = db_error(&e);
    assert_eq!(code, "58030", "{message}");
    assert!(message.starts_with("could not write snowflake_id state file"), "{message}");
    assert!(message.ends_with("Read-only file system"), "{message}");
    assert!(hint.contains("mounted read-only"), "{hint}");
    let mark = file_mark(&c);
    for &id in ids.iter().chain([&before]) {
        assert!(place(&mut s, id) < mark, "{id} is not below the durable mark {mark:?}");
    }
    drop(s);
    // The file system needs its repair, the server a start.
    let _ = c.try_stop_immediate();
    c.repair_data_disk();
    // The lock file the failing file system kept empty, as after a crash
    // during a start: a DBA removes it once no server runs.
    let pid_file = c.data_path("postmaster.pid");
    if pid_file.exists() {
        c.remove_data_file(&pid_file);
    }
    c.start();
    let top = ids.iter().copied().max().unwrap_or(before).max(before);
    let after: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(after > top, "{after} is not above {top}");
}

/// Marks `c` failed to make durable since it started.
fn mark_write_failures(c: &Cluster) -> i64 {
    c.one("SELECT mark_write_failures FROM snowflake_status()")
}
