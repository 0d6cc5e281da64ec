//! A primary fails and its streaming standby takes over, with the same
//! settings (as HA managers keep them): the promoted server continues above
//! every ID the old primary stored, because every mark the primary used
//! reached WAL before the rows that hold its IDs.

mod common;

use common::{db_error, Cluster};

const ROWS: i64 = 300_000;

const TABLE: &str = "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), side text)";

/// Inserts `ROWS` rows keyed by the column default.
fn insert(c: &Cluster, side: &str) {
    let mut s = c.connect();
    let n = s
        .execute("INSERT INTO t (side) SELECT $1 FROM generate_series(1, $2::bigint)", &[&side, &ROWS])
        .unwrap_or_else(|e| panic!("inserting on the {side}: {:?}", db_error(&e)));
    assert_eq!(n, ROWS as u64);
}

/// The status of the generator as numbers: (high_water_mark in Unix ms, marks_replayed).
fn mark_of(c: &Cluster) -> (f64, i64) {
    let row = c
        .connect()
        .query_one(
            "SELECT extract(epoch FROM high_water_mark)::float8 * 1000, marks_replayed FROM snowflake_status()",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Fails the primary over to the standby after both sides' inserts, and checks
/// that the new primary's IDs are all above the replicated ones. With
/// `ahead_at_promotion`, also that the old primary's IDs were ahead of the new
/// primary's clock when it took over: only the replayed marks keep it above them.
fn fail_over(primary: Cluster, standby: Cluster, ahead_at_promotion: bool) {
    insert(&primary, "old primary");
    standby.wait_for_replay_of(&primary);

    // The standby follows its primary's high-water mark.
    let (primary_mark, _) = mark_of(&primary);
    let (standby_mark, replayed) = mark_of(&standby);
    assert_eq!(standby_mark, primary_mark, "the standby shows its primary's mark");
    assert!(replayed > 0, "the standby replayed marks from WAL");

    primary.stop_immediate();
    standby.promote();
    if ahead_at_promotion {
        let ahead: bool = standby.one("SELECT snowflake_timestamp(max(id)) > clock_timestamp() FROM t");
        assert!(ahead, "the old primary's IDs were no longer ahead of the clock");
    }
    insert(&standby, "new primary");

    let row = standby
        .connect()
        .query_one(
            "SELECT (SELECT max(id) FROM t WHERE side = 'old primary'), (SELECT min(id) FROM t WHERE side = 'new primary'),
                    (SELECT count(*) FROM t)",
            &[],
        )
        .unwrap();
    let (old_max, new_min, count): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(count, 2 * ROWS);
    assert!(new_min > old_max, "the promoted server's IDs start at {new_min}, not above {old_max}");
}

#[test]
fn a_standby_with_a_clock_two_seconds_behind_takes_over_above_every_replicated_id() {
    let primary = Cluster::new("primary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    primary.session().batch_execute(TABLE).unwrap();
    let standby = Cluster::standby_with_fake_clock(&primary, "standby", &[]);
    standby.clock.as_ref().unwrap().set_offset(-2);
    standby.start();
    // The standby's clock read between two readings of the real one, so that
    // however long the query takes, it must lie about 2 s behind both.
    let real = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let before = real();
    let on_standby: f64 = standby.one("SELECT extract(epoch FROM clock_timestamp())::float8");
    let after = real();
    assert!(
        on_standby >= before - 3.0 && on_standby <= after - 1.0,
        "the standby's clock says {on_standby}, not 2 s behind {before}..{after}"
    );
    fail_over(primary, standby, false);
}

#[test]
fn a_standby_takes_over_above_ids_its_primary_issued_ahead_of_the_clock() {
    // 16 IDs per millisecond, so that a burst of two million IDs runs the
    // generator about two minutes ahead of the clock, whatever the machine's speed.
    let settings =
        ["snowflake_id.layout = 'timestamp:45,datacenter:5,worker:9,sequence:4'", "snowflake_id.worker_id = 1"];
    let primary = Cluster::new("burst", &settings);
    primary.start();
    let mut s = primary.session();
    s.batch_execute(TABLE).unwrap();
    let standby = Cluster::standby_of(&primary, "burststandby", &[]);
    standby.start();
    s.query_one("SELECT count(*) FROM snowflake_next_ids(2000000)", &[]).unwrap();
    let drift: i64 = s.query_one("SELECT drift_ms FROM snowflake_status()", &[]).unwrap().get(0);
    assert!(drift > 30_000, "the burst ran {drift} ms ahead of the clock");
    drop(s);
    fail_over(primary, standby, true);
}
