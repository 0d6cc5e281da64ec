//! `snowflake_raise_floor(id)`: a DBA's setval for the high-water mark. A lost
//! or unknown state file, and IDs a standby never saw, are answered by raising
//! the floor to the largest ID known; standbys replay the floor.

mod common;

use std::time::{Duration, SystemTime};

use common::{db_error, refused, Cluster};

const TABLE: &str = "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), side text)";

fn insert(c: &Cluster, side: &str) {
    c.connect()
        .execute("INSERT INTO t (side) SELECT $1 FROM generate_series(1, 10000)", &[&side])
        .unwrap_or_else(|e| panic!("inserting {side}: {:?}", db_error(&e)));
}

fn side_min_max(c: &Cluster, side: &str) -> (i64, i64) {
    let row = c.connect().query_one("SELECT min(id), max(id) FROM t WHERE side = $1", &[&side]).unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn a_lost_state_file_is_answered_by_raising_the_floor_and_a_standby_replays_it() {
    let primary = Cluster::with_fake_clock("floorprimary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    primary.session().batch_execute(TABLE).unwrap();
    // An hour ahead, then the clock is set right and the state file is lost:
    // the server knows it issued IDs (its note, snowflake_id.issued) and refuses to
    // generate rather than start at the clock, an hour below its own IDs.
    primary.clock.as_ref().unwrap().set_offset(3600);
    insert(&primary, "ahead");
    let (_, ahead_max) = side_min_max(&primary, "ahead");
    primary.stop();
    assert!(primary.run_program("rm", &[primary.state_file().to_str().unwrap()]).status.success());
    primary.clock.as_ref().unwrap().set_offset(0);
    primary.start();
    let e = primary.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "55000", "a lost state file is an unknown mark: {e}");
    assert_eq!(refused(&primary, "unknown_mark"), 1);
    // A standby made now knows nothing of the IDs an hour ahead: its backup
    // holds no state file and no WAL of theirs.
    let standby = Cluster::standby_of(&primary, "floorstandby", &["snowflake_id.worker_id = 2"]);
    standby.start();
    let below: Option<bool> =
        standby.one(&format!("SELECT high_water_mark > snowflake_timestamp({ahead_max}) FROM snowflake_status()"));
    assert_ne!(below, Some(true), "the standby does not know the IDs ahead yet");

    // Refused for the standby, and for an ID past max_clock_drift.
    let e = standby.connect().query_one("SELECT snowflake_raise_floor(max(id)) FROM t", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "25006", "{e}");
    let far: i64 = primary.one("SELECT snowflake_from_timestamp(now() + interval '2 days')");
    let e = primary.connect().query_one("SELECT snowflake_raise_floor($1)", &[&far]).unwrap_err();
    let (code, message, _) = db_error(&e);
    assert_eq!(code, "22023", "{message}");
    assert!(message.ends_with("lies more than snowflake_id.max_clock_drift ahead of the clock"), "{message}");

    // The documented remedy: the largest ID of the tables, from any node.
    let first: i64 = primary.one("SELECT snowflake_raise_floor(max(id)) FROM t");
    assert!(first > ahead_max);
    // In WAL at once: the standby replays the floor itself, before any ID needs a mark.
    standby.wait_for_replay_of(&primary);
    // Carried to the standby's own number: at the primary's mark, or the tick
    // after it where its lower number would not pass the primary's IDs.
    let mark = "SELECT high_water_mark FROM snowflake_status()";
    let (on_standby, on_primary): (Option<SystemTime>, Option<SystemTime>) = (standby.one(mark), primary.one(mark));
    let (on_standby, on_primary) = (on_standby.expect("a mark"), on_primary.expect("a mark"));
    assert!(on_standby >= on_primary, "the standby has the floor: {on_standby:?} below {on_primary:?}");
    assert!(on_standby <= on_primary + Duration::from_millis(1), "{on_standby:?} beyond {on_primary:?}");
    let at_floor: bool =
        primary.one(&format!("SELECT high_water_mark >= snowflake_timestamp({ahead_max}) FROM snowflake_status()"));
    assert!(at_floor);
    insert(&primary, "raised");
    let (raised_min, raised_max) = side_min_max(&primary, "raised");
    assert!(raised_min > ahead_max, "{raised_min} after {ahead_max}");
    assert!(raised_min >= first);
    // A floor below the mark changes nothing, and says so truly: it returns
    // the smallest ID this server may issue next, above every ID it issued.
    for low in ["SELECT snowflake_raise_floor(min(id)) FROM t", "SELECT snowflake_raise_floor(1)"] {
        let returned: i64 = primary.one(low);
        assert!(returned > raised_max, "raise_floor({low}) returned {returned}, below the issued {raised_max}");
        let next: i64 = primary.one("SELECT snowflake_next_id()");
        assert!(next >= returned, "raise_floor({low}) returned {returned}, then the next ID was {next}");
    }
    let next: i64 = primary.one("SELECT snowflake_next_id()");
    assert!(next > raised_max);
    // The largest ID of the layout ends its range: no floor, and the detail says why.
    let e = primary.connect().query_one("SELECT snowflake_raise_floor(9223372036854775807)", &[]).unwrap_err();
    let db = e.as_db_error().unwrap();
    assert_eq!(db.code().code(), "22023", "{e}");
    let detail = db.detail().unwrap_or_default();
    assert!(detail.contains("before the layout's time range ends"), "{detail}");
    assert!(!detail.contains("node field above the timestamp"), "the default layout has none: {detail}");

    // The floor is in WAL and in the file: the standby, promoted, continues above it.
    standby.wait_for_replay_of(&primary);
    primary.stop_immediate();
    standby.promote();
    standby.wait_until_writable();
    insert(&standby, "promoted");
    let (promoted_min, _) = side_min_max(&standby, "promoted");
    assert!(promoted_min > next, "{promoted_min} after {next}");
    // And the primary's file holds it across a crash.
    primary.start();
    let after_crash: i64 = primary.one("SELECT snowflake_next_id()");
    assert!(after_crash > next);
}

#[test]
fn raising_the_floor_ends_an_unknown_mark() {
    let c = Cluster::new("floorunknown", &[]);
    c.start();
    c.session().batch_execute(TABLE).unwrap();
    insert(&c, "before");
    let (_, before_max) = side_min_max(&c, "before");
    c.stop();
    let unknown = "# snowflake_id generator state: the high-water mark of this data directory is unknown.\n\
                   version=3\nkind=unknown\nreason=a test made this file\n";
    c.write_data_file("snowflake_id.state", common::seal_state_file(unknown).as_bytes());
    c.start();
    let e = c.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "55000");
    // Even a floor the clock has passed ends it: the DBA vouches for it.
    c.connect().query_one("SELECT snowflake_raise_floor(max(id)) FROM t", &[]).unwrap();
    insert(&c, "after");
    assert!(side_min_max(&c, "after").0 > before_max);
    let file = std::fs::read_to_string(c.state_file()).unwrap();
    assert!(file.contains("kind=mark"), "{file}");
    c.stop();
    c.start();
    let next: i64 = c.one("SELECT snowflake_next_id()");
    assert!(next > before_max);
}
