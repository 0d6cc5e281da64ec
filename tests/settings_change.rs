//! A layout, epoch, tick or node number change between restarts never
//! repeats an ID nor goes below one: the server continues above every ID
//! issued under the old settings, or starts and refuses each call (55000)
//! until it can, naming the way out; the "new ID space" step is one.

mod common;

use std::time::Duration;

use common::{db_error, Cluster};

const TABLE: &str = "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), phase int)";
const DEFAULT_EPOCH_MS: i64 = 1_735_689_600_000;

/// A started cluster with `rows` IDs of phase 1 in `t`; returns their maximum.
fn cluster_with_rows(name: &str, rows: i32) -> (Cluster, i64) {
    let c = Cluster::new(name, &[]);
    c.start();
    let mut s = c.session();
    s.batch_execute(TABLE).unwrap();
    s.execute("INSERT INTO t (phase) SELECT 1 FROM generate_series(1, $1)", &[&rows]).unwrap();
    let max: i64 = s.query_one("SELECT max(id) FROM t", &[]).unwrap().get(0);
    (c, max)
}

/// Inserts `rows` IDs of `phase` and returns the smallest: a repeated ID fails
/// the insert on the primary key.
fn insert_phase(c: &Cluster, phase: i32, rows: i32) -> i64 {
    let mut s = c.session();
    s.execute("INSERT INTO t (phase) SELECT $1 FROM generate_series(1, $2)", &[&phase, &rows])
        .unwrap_or_else(|e| panic!("inserting phase {phase}: {e}"));
    s.query_one("SELECT min(id) FROM t WHERE phase = $1", &[&phase]).unwrap().get(0)
}

/// The server log from `from` on.
fn log_since(c: &Cluster, from: usize) -> String {
    c.log()[from..].to_string()
}

/// What a start logs when the settings changed too far to continue now: the
/// server starts all the same (generator state never keeps it down), reads
/// and writes that take no new ID work, and each ID call fails with 55000
/// and the instant it would succeed from. Returns the log of the start.
fn start_refusing_ids(c: &Cluster) -> String {
    let before = c.log().len();
    c.start();
    let log = log_since(c, before);
    assert!(
        log.contains(
            "WARNING:  snowflake_id settings changed since the state file was written: new IDs would fall below IDs \
             already issued"
        ),
        "{log}"
    );
    assert!(!log.contains("FATAL"), "{log}");
    let mut s = c.session();
    let e = s.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, hint) = db_error(&e);
    assert_eq!(code, "55000", "{message}");
    assert!(message.starts_with("cannot generate snowflake IDs "), "{message}");
    assert!(hint.contains("Set the old values again and restart"), "{hint}");
    let rows: i64 = s.query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
    s.execute("INSERT INTO t (id, phase) VALUES (-1, 0)", &[]).expect("a write that takes no new ID");
    s.execute("DELETE FROM t WHERE id = -1", &[]).unwrap();
    assert!(rows > 0);
    log
}

#[test]
fn an_epoch_moved_later_refuses_until_the_new_ids_pass_the_old() {
    let (c, max_old) = cluster_with_rows("epochlater", 300_000);
    c.stop();
    // An hour later: the calls must be refused for an hour, however slow the
    // restart, the crash below and the call after it.
    c.set(&format!("snowflake_id.epoch = {}", DEFAULT_EPOCH_MS + 3_600_000));
    let log = start_refusing_ids(&c);
    assert!(log.contains("Changed: snowflake_id.epoch (2025-01-01 00:00:00+00 → 2025-01-01 01:00:00+00)"), "{log}");
    assert!(log.contains("min from now"), "{log}");
    assert!(log.contains("HINT:  Set the old values again and restart, or wait: calls succeed from"), "{log}");
    assert!(log.contains("snowflake_id.new_id_space"), "the hint names the new ID space step: {log}");
    // A crash re-initialises shared memory with the same refusal, not a server that stays down.
    let mut victim = c.connect();
    let pid: i32 = victim.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    c.crash_backend(pid);
    let e = c.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "55000");
    c.stop();

    // 3 s later: refused until the new settings pass the old IDs, then continues above them, without a restart.
    c.set(&format!("snowflake_id.epoch = {}", DEFAULT_EPOCH_MS + 3_000));
    let before = c.log().len();
    c.start();
    let log = log_since(&c, before);
    assert!(
        log.contains("IDs continue above every ID issued under the old settings") || log.contains("calls succeed from")
    );
    // A bound for a hung server: the refusal lasts about 3 s of wall clock.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut s = c.session();
    while let Err(e) = s.query_one("SELECT snowflake_next_id()", &[]) {
        assert_eq!(db_error(&e).0, "55000");
        assert!(std::time::Instant::now() < deadline, "still refused after 120 s: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let min_new = insert_phase(&c, 2, 100_000);
    assert!(min_new > max_old, "new IDs start at {min_new}, old ones end at {max_old}");
}

/// The review's case: with minute ticks, worker 9 issues IDs, stops cleanly in
/// the middle of a minute and is renumbered to 3. The clean shutdown resumes
/// in the same tick, where worker 3's IDs lie below worker 9's: the node
/// change is carried like any other, to the next tick, and calls wait for it
/// (refused per call, not a server that will not start). With 1 ms ticks, a
/// bulk call that ran ahead shows the same: the next ID is above every ID
/// issued under the old number.
#[test]
fn a_renumbered_server_never_goes_below_the_ids_of_its_old_number() {
    let c = Cluster::new("renumber", &["snowflake_id.tick_ms = 60000", "snowflake_id.worker_id = 9"]);
    c.start();
    c.session().batch_execute(TABLE).unwrap();
    let max_old = insert_phase(&c, 1, 100).max(c.one::<i64>("SELECT max(id) FROM t"));
    c.stop();
    c.set("snowflake_id.worker_id = 3");
    let before = c.log().len();
    c.start();
    let log = log_since(&c, before);
    assert!(log.contains("WARNING:  snowflake_id node number changed since the state file was written"), "{log}");
    // The next minute is more than a mark's window away, unless the minute just ended.
    match c.session().query_one("SELECT snowflake_next_id()", &[]) {
        Ok(row) => assert!(row.get::<_, i64>(0) > max_old, "renumbered below the old IDs"),
        Err(e) => {
            let (code, message, _) = db_error(&e);
            assert_eq!(code, "55000", "{message}");
            assert!(message.starts_with("cannot generate snowflake IDs before"), "{message}");
        }
    }
    c.stop();

    // 1 ms ticks: a bulk call runs the old number's IDs far ahead of the clock
    // (16 IDs per tick: 2 million IDs are two minutes).
    let small_sequence = "snowflake_id.layout = 'timestamp:49,datacenter:5,worker:5,sequence:4'";
    let c = Cluster::new("renumberbulk", &[small_sequence, "snowflake_id.worker_id = 9"]);
    c.start();
    c.session().batch_execute(TABLE).unwrap();
    let max_old: i64 = c.one("SELECT max(id) FROM snowflake_next_ids(2000000) AS id");
    let ahead_ms: f64 =
        c.one(&format!("SELECT extract(epoch FROM snowflake_timestamp({max_old}) - clock_timestamp())::float8 * 1000"));
    assert!(ahead_ms > 30_000.0, "the bulk call ran {ahead_ms} ms ahead only: the test could not fail");
    c.stop();
    c.set("snowflake_id.worker_id = 3");
    c.start();
    let next: i64 = c.one("SELECT snowflake_next_id()");
    assert!(next > max_old, "renumbered from 9 to 3, the next ID {next} is below {max_old}");
    let worker: i32 = c.one(&format!("SELECT worker_id FROM snowflake_decode({next})"));
    assert_eq!(worker, 3);
}

/// The review's case for availability: a standby made from its primary's
/// base backup with other settings (tick 10 against the primary's 1) knows
/// no mark it can carry; promoted, it refuses IDs (55000). A backend crash
/// then re-initialises shared memory from a state file of the primary's
/// settings, on a server that is no longer a standby: that must not stop
/// the server (it would not start again either), only keep refusing IDs.
#[test]
fn a_promoted_standby_with_other_settings_survives_a_backend_crash() {
    let primary = Cluster::new("tickprimary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    primary.session().batch_execute(TABLE).unwrap();
    insert_phase(&primary, 1, 10_000);
    let standby =
        Cluster::standby_of(&primary, "tickstandby", &["snowflake_id.worker_id = 2", "snowflake_id.tick_ms = 10"]);
    standby.start();
    standby.wait_for_replay_of(&primary);
    primary.stop_immediate();
    standby.promote();
    standby.wait_until_writable();
    let refused = |c: &Cluster| {
        let e = c.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
        let (code, message, hint) = db_error(&e);
        assert_eq!(code, "55000", "{message}");
        assert!(!hint.is_empty(), "{message}");
    };
    refused(&standby);
    let mut victim = standby.connect();
    let pid: i32 = victim.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    standby.crash_backend(pid);
    refused(&standby);
    let rows: i64 = standby.one("SELECT count(*) FROM t");
    assert_eq!(rows, 10_000, "reads work");
    standby.connect().execute("INSERT INTO t (id, phase) VALUES (-1, 0)", &[]).expect("other writes work");
    // And it starts again after a clean stop.
    standby.stop();
    standby.start();
    refused(&standby);
}

#[test]
fn a_wider_timestamp_field_refuses_ids_and_a_narrower_one_continues_above_the_old_ids() {
    let (c, max_old) = cluster_with_rows("narrower", 100_000);
    c.stop();
    // One bit more for the timestamp, one less for the sequence: the timestamp
    // moves a bit down and today's IDs are about half the old ones: refused.
    c.set("snowflake_id.layout = 'timestamp:42,datacenter:5,worker:5,sequence:11'");
    assert!(start_refusing_ids(&c).contains("days from now"));
    c.stop();
    // One bit less for the timestamp, one more for the worker: the timestamp
    // moves a bit up, so today's IDs are about twice the old ones.
    c.set("snowflake_id.layout = 'timestamp:40,datacenter:5,worker:6,sequence:12'");
    let before = c.log().len();
    c.start();
    let log = log_since(&c, before);
    assert!(log.contains("WARNING:  snowflake_id settings changed since the state file was written"), "{log}");
    assert!(log.contains("snowflake_id.layout (timestamp:41,datacenter:5,worker:5,sequence:12 →"), "{log}");
    let min_new = insert_phase(&c, 2, 100_000);
    assert!(min_new > max_old, "new IDs start at {min_new}, old ones end at {max_old}");
}

#[test]
fn longer_ticks_refuse_ids_and_a_new_id_space_is_the_way_past() {
    let (c, _) = cluster_with_rows("longticks", 100_000);
    c.stop();
    c.set("snowflake_id.tick_ms = 10");
    let log = start_refusing_ids(&c);
    assert!(log.contains("Changed: snowflake_id.tick_ms (1 → 10)"), "{log}");
    assert!(log.contains("days from now"), "{log}");
    c.stop();

    // The new ID space step is refused after an unclean stop: WAL replay would bring the old space back.
    c.set("snowflake_id.tick_ms = 1");
    c.start();
    c.session().batch_execute("TRUNCATE t").unwrap();
    c.stop_immediate();
    c.set("snowflake_id.tick_ms = 10");
    c.write_data_file("snowflake_id.new_id_space", b"");
    let before = c.log().len();
    assert!(c.try_start().is_err(), "a new ID space after a crash");
    let log = log_since(&c, before);
    assert!(log.contains("FATAL:  cannot start a new snowflake_id ID space: the server was not shut down cleanly"));

    // After a clean stop it starts ID space 1 and keeps the old state file.
    c.set("snowflake_id.tick_ms = 1");
    std::fs::remove_file(c.data_path("snowflake_id.new_id_space")).unwrap();
    c.start();
    c.stop();
    let old_state = std::fs::read_to_string(c.state_file()).unwrap();
    c.set("snowflake_id.tick_ms = 10");
    c.write_data_file("snowflake_id.new_id_space", b"");
    let before = c.log().len();
    c.start();
    let log = log_since(&c, before);
    assert!(log.contains("WARNING:  snowflake_id starts ID space 1: IDs issued before may be issued again"), "{log}");
    let kept = c.data_path("snowflake_id.state.before-space-1");
    assert!(log.contains(&kept.display().to_string()), "{log}");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), old_state, "the old space's file is kept as it was");
    assert!(!c.data_path("snowflake_id.new_id_space").exists(), "the step happens once");
    insert_phase(&c, 2, 10_000);
    let space: i64 = c.one("SELECT id_space FROM snowflake_status()");
    assert_eq!(space, 1);

    // Later restarts continue in the new space, with no further warning.
    c.stop();
    assert!(std::fs::read_to_string(c.state_file()).unwrap().contains("id_space=1\n"));
    let before = c.log().len();
    c.start();
    assert!(!log_since(&c, before).contains("WARNING"), "{}", log_since(&c, before));
    insert_phase(&c, 3, 10_000);

    // A state file that cannot be read: the server still knows its ID space
    // from the file the step kept, so the floor the DBA raises (and every
    // mark after it) is of space 1, which standbys in that space replay.
    c.stop();
    c.write_data_file("snowflake_id.state", b"not a state file");
    c.start();
    let space: i64 = c.one("SELECT id_space FROM snowflake_status()");
    assert_eq!(space, 1, "the ID space of a server whose state file cannot be read");
    c.connect().query_one("SELECT snowflake_raise_floor(max(id)) FROM t", &[]).unwrap();
    assert!(std::fs::read_to_string(c.state_file()).unwrap().contains("id_space=1\n"));
}

#[test]
fn a_standby_follows_its_primary_into_a_new_id_space() {
    let primary = Cluster::new("spaceprimary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    primary.session().batch_execute(TABLE).unwrap();
    insert_phase(&primary, 1, 10_000);
    let standby = Cluster::standby_of(&primary, "spacestandby", &["snowflake_id.worker_id = 2"]);
    standby.start();
    standby.wait_for_replay_of(&primary);

    // The primary moves to 10 ms ticks through a new ID space.
    primary.session().batch_execute("TRUNCATE t").unwrap();
    primary.stop();
    primary.set("snowflake_id.tick_ms = 10");
    primary.write_data_file("snowflake_id.new_id_space", b"");
    primary.start();
    // The standby gets the new tick too: its state file is of the old settings,
    // which a standby does not refuse to start with; it waits for its primary's marks.
    standby.stop();
    standby.set("snowflake_id.tick_ms = 10");
    let before = standby.log().len();
    standby.start();
    let log = log_since(&standby, before);
    assert!(log.contains("WARNING:  snowflake_id settings changed since the state file was written"), "{log}");
    let max_primary = insert_phase(&primary, 2, 10_000).max(primary.one::<i64>("SELECT max(id) FROM t"));
    standby.wait_for_replay_of(&primary);
    let space: i64 = standby.one("SELECT id_space FROM snowflake_status()");
    assert_eq!(space, 1, "the standby entered the primary's ID space");
    primary.stop_immediate();
    standby.promote();
    standby.wait_until_writable();
    let min_promoted = insert_phase(&standby, 3, 10_000);
    assert!(min_promoted > max_primary, "the promoted standby continues above its primary's IDs");
}
