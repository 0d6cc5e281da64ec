//! A layout, epoch or tick change between restarts never repeats an ID: the
//! server continues above every ID issued under the old settings, or refuses
//! to start and names the way out; the "new ID space" step is that way out.

mod common;

use std::time::Duration;

use common::Cluster;

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

#[test]
fn an_epoch_moved_later_refuses_until_the_new_ids_pass_the_old() {
    let (c, max_old) = cluster_with_rows("epochlater", 300_000);
    c.stop();
    // 30 s later: no restart is that slow, so the start must be refused.
    c.set(&format!("snowflake_id.epoch = {}", DEFAULT_EPOCH_MS + 30_000));
    let before = c.log().len();
    assert!(c.try_start().is_err(), "started with IDs 30 s behind the old ones");
    let log = log_since(&c, before);
    assert!(log.contains("FATAL:  snowflake_id settings changed since the state file was written"), "{log}");
    assert!(log.contains("Changed: snowflake_id.epoch (2025-01-01 00:00:00+00 → 2025-01-01 00:00:30+00)"), "{log}");
    assert!(log.contains("s from now"), "{log}");
    assert!(log.contains("HINT:  Set the old values again or start the server after"), "{log}");
    assert!(log.contains("snowflake_id.new_id_space"), "the hint names the new ID space step: {log}");

    // 3 s later: refused until the new settings pass the old IDs, then continues above them.
    c.set(&format!("snowflake_id.epoch = {}", DEFAULT_EPOCH_MS + 3_000));
    let before = c.log().len();
    if c.try_start().is_err() {
        assert!(log_since(&c, before).contains("s from now"));
        std::thread::sleep(Duration::from_secs(4));
        c.start();
    }
    assert!(log_since(&c, before).contains("IDs continue above every ID issued under the old settings"));
    let min_new = insert_phase(&c, 2, 100_000);
    assert!(min_new > max_old, "new IDs start at {min_new}, old ones end at {max_old}");
}

#[test]
fn a_wider_timestamp_field_refuses_and_a_narrower_one_continues_above_the_old_ids() {
    let (c, max_old) = cluster_with_rows("narrower", 100_000);
    c.stop();
    // One bit more for the timestamp, one less for the sequence: the timestamp
    // moves a bit down and today's IDs are about half the old ones: refused.
    c.set("snowflake_id.layout = 'timestamp:42,datacenter:5,worker:5,sequence:11'");
    let before = c.log().len();
    assert!(c.try_start().is_err(), "started with IDs half the old ones");
    assert!(log_since(&c, before).contains("days from now"), "{}", log_since(&c, before));
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
fn longer_ticks_refuse_to_start_and_a_new_id_space_is_the_way_past() {
    let (c, _) = cluster_with_rows("longticks", 100_000);
    c.stop();
    c.set("snowflake_id.tick_ms = 10");
    let before = c.log().len();
    assert!(c.try_start().is_err(), "started with IDs ten times smaller than the old ones");
    let log = log_since(&c, before);
    assert!(log.contains("Changed: snowflake_id.tick_ms (1 → 10)"), "{log}");
    assert!(log.contains("days from now"), "{log}");

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
