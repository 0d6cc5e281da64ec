//! Synchronous standbys: a call that makes a mark waits for them as a commit
//! would, so an ID a bare SELECT handed out is known to a standby that may be
//! promoted; cancel, statement_timeout and synchronous_commit = local work as
//! for a commit.

mod common;

use std::time::{Duration, Instant};

use common::{db_error, Cluster};

fn issued(c: &Cluster) -> i64 {
    c.one("SELECT ids_issued FROM snowflake_status()")
}

#[test]
fn a_mark_waits_for_the_synchronous_standby_and_a_promoted_one_continues_above_a_bare_select() {
    let primary = Cluster::new("syncprimary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    // Before the standby is named: a commit would wait for it.
    primary.session().batch_execute("SELECT 1").unwrap();
    let standby = Cluster::standby_of(&primary, "syncstandby", &[]);
    let mut admin = primary.connect();
    admin.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'syncstandby'").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    drop(admin);

    // With the standby down, the first call needs a mark and waits for it;
    // statement_timeout ends the wait, and nothing was issued.
    let mut s = primary.connect();
    s.batch_execute("SET statement_timeout = '1s'").unwrap();
    let before = issued(&primary);
    let started = Instant::now();
    let e = s.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, _) = db_error(&e);
    assert_eq!(code, "57014", "{message}");
    assert!(started.elapsed() >= Duration::from_millis(900), "the call waited for the standby");
    assert_eq!(issued(&primary), before, "no ID relies on a mark the standby may not have");
    // Another session waiting for the mark writer is not stuck either.
    let mut other = primary.connect();
    other.batch_execute("SET statement_timeout = '1s'").unwrap();
    let e = other.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "57014");
    // A session that does not ask for a synchronous standby does not wait.
    s.batch_execute("SET synchronous_commit = local").unwrap();
    s.query_one("SELECT snowflake_next_id()", &[]).unwrap();
    s.batch_execute("RESET synchronous_commit").unwrap();

    standby.start();
    standby.wait_for_replay_of(&primary);
    s.batch_execute("RESET statement_timeout").unwrap();
    // Bare SELECTs: no row, no commit. The burst runs the IDs seconds ahead
    // of the clock, so only the marks the standby received keep it above them
    // once promoted.
    let taken: i64 = s
        .query_one("SELECT max(id) FROM (SELECT snowflake_next_id() AS id FROM generate_series(1, 10)) i", &[])
        .unwrap()
        .get(0);
    let burst: i64 = s.query_one("SELECT max(id) FROM snowflake_next_ids(20000000) id", &[]).unwrap().get(0);
    assert!(burst > taken);
    let ahead: bool = standby.one(&format!("SELECT snowflake_timestamp({burst}) > clock_timestamp() + interval '1s'"));
    assert!(ahead, "the burst ran ahead of the standby's clock");
    primary.stop_immediate();
    standby.promote();
    standby.wait_until_writable();
    let next: i64 = standby.one("SELECT snowflake_next_id()");
    assert!(next > burst, "the promoted standby continues above the IDs handed out: {next} after {burst}");
}
