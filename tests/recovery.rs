//! Recovery paths: point-in-time recovery from a base backup, crash recovery
//! with a state file older than WAL, restarts and crashes in the middle of a
//! bulk call, the first call after a clean restart, and a state file written
//! by the previous release.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::sleep;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{db_error, install_extension_file, Cluster};

const TABLE: &str = "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), phase text)";

fn insert(c: &Cluster, phase: &str, rows: i64) {
    c.connect()
        .execute("INSERT INTO t (phase) SELECT $1 FROM generate_series(1, $2::bigint)", &[&phase, &rows])
        .unwrap_or_else(|e| panic!("inserting {phase}: {:?}", db_error(&e)));
}

fn max_id(c: &Cluster, phase: &str) -> i64 {
    c.connect().query_one("SELECT max(id) FROM t WHERE phase = $1", &[&phase]).unwrap().get(0)
}

fn min_id(c: &Cluster, phase: &str) -> i64 {
    c.connect().query_one("SELECT min(id) FROM t WHERE phase = $1", &[&phase]).unwrap().get(0)
}

/// Asserts that the newest ID in `t` lies more than half an hour ahead of the
/// server's clock: without the replayed marks the server would start below it.
fn assert_ids_ahead_of_the_clock(c: &Cluster) {
    let ahead: bool = c.one("SELECT snowflake_timestamp(max(id)) > clock_timestamp() + interval '30 minutes' FROM t");
    assert!(ahead, "the old IDs are not ahead of this server's clock");
}

#[test]
fn a_point_in_time_restore_continues_above_every_id_it_replayed() {
    let primary = Cluster::with_fake_clock("pitr", &["archive_mode = on"]);
    let archive = primary.dir.join("archive");
    assert!(primary.run_program("mkdir", &[archive.to_str().unwrap()]).status.success());
    primary.set(&format!("archive_command = 'cp %p {}/%f'", archive.display()));
    primary.start();
    primary.session().batch_execute(TABLE).unwrap();
    insert(&primary, "before backup", 1000);
    let restored = Cluster::base_backup_of(&primary, "restored");

    // The primary's clock runs an hour ahead from now on, so its IDs after the
    // base backup are an hour ahead of the restored server's clock; the state
    // file in the backup knows nothing of them.
    primary.clock.as_ref().unwrap().set_offset(3600);
    insert(&primary, "replayed", 100_000);
    primary.connect().batch_execute("SELECT pg_create_restore_point('after_ids')").unwrap();
    insert(&primary, "after target", 1000);
    let segment: String = primary.one("SELECT pg_walfile_name(pg_switch_wal())");
    for _ in 0..600 {
        let archived: Option<String> = primary.one("SELECT last_archived_wal FROM pg_stat_archiver");
        if archived.as_deref() >= Some(segment.as_str()) {
            break;
        }
        sleep(Duration::from_millis(50));
    }
    primary.stop();

    restored.set("archive_mode = off");
    restored.set(&format!("restore_command = 'cp {}/%f %p'", archive.display()));
    restored.set("recovery_target_name = 'after_ids'");
    restored.set("recovery_target_action = 'promote'");
    restored.write_data_file("recovery.signal", b"");
    restored.start();
    restored.wait_until_writable();
    let phases: Vec<String> = restored
        .connect()
        .query("SELECT DISTINCT phase FROM t ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(phases, ["before backup", "replayed"], "recovered up to the restore point");
    assert_ids_ahead_of_the_clock(&restored);
    insert(&restored, "restored", 100_000);
    assert!(min_id(&restored, "restored") > max_id(&restored, "replayed"));
    let replayed: i64 = restored.one("SELECT marks_replayed FROM snowflake_status()");
    assert!(replayed > 0);
}

#[test]
fn base_backups_taken_while_marks_are_written_know_every_mark_their_rows_rely_on() {
    let primary = Cluster::with_fake_clock("midmark", &[]);
    primary.start();
    primary.session().batch_execute(TABLE).unwrap();
    insert(&primary, "before", 1000);
    // An hour ahead from now on: the IDs in the backups lie far above the
    // restored servers' clocks, so a backup that missed a mark would restart
    // below the IDs it holds. Each backup's checkpoint falls among mark writes
    // (a mark a second), its file written before the mark's WAL record.
    primary.clock.as_ref().unwrap().set_offset(3600);
    let inserting = AtomicBool::new(true);
    let backups = std::thread::scope(|scope| {
        scope.spawn(|| {
            while inserting.load(Ordering::Relaxed) {
                insert(&primary, "ahead", 5000);
            }
        });
        // Between two backups, at least one more mark (the inserts renew it
        // about every second): each backup falls among mark writes however
        // fast the machine takes it.
        let marks = || -> i64 { primary.one("SELECT marks_written FROM snowflake_status()") };
        let mut backups = Vec::new();
        for i in 0..3 {
            let before = marks();
            backups.push(Cluster::base_backup_of(&primary, &format!("midmark{i}")));
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            while marks() <= before {
                assert!(std::time::Instant::now() < deadline, "no mark in 120 s of inserts");
                sleep(Duration::from_millis(50));
            }
        }
        inserting.store(false, Ordering::Relaxed);
        backups
    });
    primary.stop();
    for restored in &backups {
        // Recovers to the end of the backup's WAL, then runs as a primary.
        restored.start();
        restored.wait_until_writable();
        assert_ids_ahead_of_the_clock(restored);
        insert(restored, "restored", 1000);
        assert!(min_id(restored, "restored") > max_id(restored, "ahead"));
        restored.stop();
    }
}

#[test]
fn crash_recovery_with_an_older_state_file_continues_above_the_marks_in_wal() {
    // Checkpoints far apart: the marks logged after the last one are in WAL.
    // (1d: the clock moved an hour ahead below must not make one due.)
    let c = Cluster::with_fake_clock("oldfile", &["checkpoint_timeout = '1d'", "max_wal_size = '4GB'"]);
    c.start();
    c.session().batch_execute(TABLE).unwrap();
    c.connect().batch_execute("CHECKPOINT").unwrap();
    insert(&c, "old", 1000);
    let old_file = std::fs::read(c.state_file()).unwrap();

    c.clock.as_ref().unwrap().set_offset(3600);
    insert(&c, "ahead", 100_000);
    c.stop_immediate();
    // An older copy of the file is put back, and the clock is right again.
    c.write_data_file("snowflake_id.state", &old_file);
    c.clock.as_ref().unwrap().set_offset(0);
    c.start();

    assert_ids_ahead_of_the_clock(&c);
    let replayed: i64 = c.one("SELECT marks_replayed FROM snowflake_status()");
    assert!(replayed > 0, "crash recovery replayed the marks");
    insert(&c, "after", 1000);
    assert!(min_id(&c, "after") > max_id(&c, "ahead"));
}

/// A call that takes many seconds: with `max_clock_drift` of 2s it borrows two
/// seconds, then waits for the clock for each further block.
const LONG_BULK: &str = "SELECT count(*) FROM snowflake_next_ids(60000000)";

/// Starts `LONG_BULK` in a thread and returns once it runs; the thread returns
/// the error that ends it.
fn start_long_bulk(c: &Cluster) -> std::thread::JoinHandle<String> {
    let mut s = c.connect();
    let handle = std::thread::spawn(move || match s.query_one(LONG_BULK, &[]) {
        Ok(_) => "finished".to_string(),
        Err(e) => e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string()),
    });
    // The call lasts at least 12 s of wall clock (60 million IDs of 4096 a
    // millisecond, 2 s of them borrowed): it runs well past this.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        let running: i64 = c
            .one("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT count(*) FROM snowflake_next_ids(6%'");
        if running == 1 {
            sleep(Duration::from_millis(1500));
            return handle;
        }
        sleep(Duration::from_millis(20));
    }
    panic!("the bulk call did not start");
}

fn assert_no_step_back(c: &Cluster, after: &str) {
    let row = c.connect().query_one("SELECT clock_back, clock_step_backs FROM snowflake_status()", &[]).unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i64>(1)), (0, 0), "after {after}");
    assert!(!c.log().contains("went back"), "after {after}:\n{}", c.log());
}

/// The lowest and highest of 100 000 new IDs, and their highest clock_back.
fn take(c: &Cluster) -> (i64, i64, i32) {
    let row = c
        .connect()
        .query_one(
            "SELECT min(id), max(id), max((SELECT clock_back FROM snowflake_decode(id))) FROM snowflake_next_ids(100000) id",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[test]
fn restarts_and_crashes_during_a_bulk_call_are_no_clock_step_back() {
    let c = Cluster::new(
        "bulkrestart",
        &[
            "snowflake_id.layout = 'clock_back:2,timestamp:39,datacenter:5,worker:5,sequence:12'",
            "snowflake_id.max_clock_drift = '2s'",
        ],
    );
    c.start();
    c.session();
    let (_, before, era) = take(&c);
    assert_eq!(era, 0);

    // Three of each: the issue this guards against used up a 2-bit field in three.
    let mut last = before;
    for round in 1..=3 {
        let bulk = start_long_bulk(&c);
        c.stop();
        c.start();
        let error = bulk.join().unwrap();
        assert!(error.contains("terminat") || error.contains("closed"), "{error}");
        assert_no_step_back(&c, &format!("fast restart {round}"));
        let (low, high, era) = take(&c);
        assert!(low > last && era == 0, "{low} after {last}, clock_back {era}");
        last = high;

        let bulk = start_long_bulk(&c);
        let pid: i32 =
            c.one("SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT count(*) FROM snowflake_next_ids(6%'");
        c.crash_backend(pid);
        let _ = bulk.join().unwrap();
        assert_no_step_back(&c, &format!("crash {round}"));
        let (low, high, era) = take(&c);
        assert!(low > last && era == 0, "{low} after {last}, clock_back {era}");
        last = high;
    }
}

#[test]
fn the_first_call_after_a_clean_restart_needs_no_drift_and_no_wait() {
    let strict = ["snowflake_id.max_clock_drift = 0", "snowflake_id.max_wait = 0"];
    for (name, tick) in [("strict", "1"), ("minutes", "60000")] {
        let mut settings = strict.to_vec();
        let tick_setting = format!("snowflake_id.tick_ms = {tick}");
        settings.push(&tick_setting);
        let c = Cluster::new(name, &settings);
        c.start();
        let before: i64 = c.session().query_one("SELECT max(id) FROM snowflake_next_ids(1000) id", &[]).unwrap().get(0);
        c.stop();
        c.start();
        let first = c.connect().query_one("SELECT snowflake_next_id()", &[]);
        let first: i64 = first.unwrap_or_else(|e| panic!("{name}: {:?}", db_error(&e))).get(0);
        assert!(first > before, "{name}");
        assert!(c.log().contains("resumes exactly after its clean shutdown"), "{name}:\n{}", c.log());

        // After a crash the generator continues above its mark instead, which
        // may lie ahead of the clock: a refusal then names the mark.
        let mut s = c.connect();
        let victim: i32 = s.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        c.crash_backend(victim);
        match c.connect().query_one("SELECT snowflake_next_id()", &[]) {
            Ok(row) => assert!(row.get::<_, i64>(0) > first, "{name}"),
            Err(e) => {
                let (code, message, _) = db_error(&e);
                assert_eq!(code, "55000", "{name}: {message}");
                assert!(message.contains("behind the high-water mark this server resumed from"), "{message}");
            }
        }
        drop(s);
    }
}

#[test]
fn an_upgrade_from_0_2_0_continues_above_its_state_file_with_no_marks_in_wal_yet() {
    let _old_script =
        install_extension_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/snowflake_id--0.2.0.sql"));
    let c = Cluster::new("fromv1", &["snowflake_id.datacenter_id = 3", "snowflake_id.worker_id = 7"]);
    // The state file as 0.2.0 left it: a mark an hour ahead of the clock.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    let mark = now + 3_600_000;
    let body = format!(
        "# snowflake_id generator state. Written by the server; do not edit.\n\
         # No ID was issued at or after mark_unix_ms (in era clock_back).\n\
         version=1\nmark_unix_ms={mark}\nmark=(not read)\nclock_back=0\n\
         layout=timestamp:41,datacenter:5,worker:5,sequence:12\nepoch_unix_ms=1735689600000\n\
         tick_ms=1\ndatacenter_id=3\nworker_id=7\n"
    );
    let file = common::seal_state_file(&body);
    c.write_data_file("snowflake_id.state", file.as_bytes());
    c.start();
    let mut s = c.connect();
    s.batch_execute("CREATE EXTENSION snowflake_id VERSION '0.2.0'; ALTER EXTENSION snowflake_id UPDATE").unwrap();
    let row = s
        .query_one(
            "SELECT id, extract(epoch FROM snowflake_timestamp(id))::float8 * 1000
             FROM (SELECT snowflake_next_id() AS id) i",
            &[],
        )
        .unwrap();
    let (id, at): (i64, f64) = (row.get(0), row.get(1));
    assert!(at >= mark as f64, "the first ID ({at}) is at or above the old mark ({mark})");
    drop(s);
    c.stop();
    let text = std::fs::read_to_string(c.state_file()).unwrap();
    assert!(text.contains("version=4\nkind=resume\n"), "{text}");
    c.start();
    let next: i64 = c.one("SELECT snowflake_next_id()");
    assert!(next > id);
}

#[test]
fn the_refusal_after_a_crash_says_how_far_ahead_the_mark_lies() {
    let c = Cluster::new("markahead", &["snowflake_id.max_wait = '100ms'", "include_if_exists = 'case.conf'"]);
    c.start();
    // The mark ten minutes ahead of the clock, put there by a floor rather than
    // by a bulk call that must outrun the clock (which a slow machine does not);
    // minutes, so that no restart is slow enough to eat them.
    c.session()
        .batch_execute("SELECT snowflake_raise_floor(snowflake_from_timestamp(clock_timestamp() + interval '10 min'))")
        .unwrap();
    c.stop_immediate();
    c.write_data_file("case.conf", b"snowflake_id.max_clock_drift = 0\n");
    c.start();
    let e = c.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, detail) = {
        let d = e.as_db_error().expect("a server error");
        (d.code().code().to_string(), d.message().to_string(), d.detail().unwrap_or_default().to_string())
    };
    assert_eq!(code, "55000", "{message}");
    assert!(message.contains("behind the high-water mark this server resumed from"), "{message}");
    // Which mark: named as snowflake_status() shows it.
    let named = message.split("resumed from (").nth(1).and_then(|rest| rest.strip_suffix(')'));
    assert!(named.is_some_and(|mark| mark.starts_with("20") && mark.ends_with("+00")), "{message}");
    // How far: computed from the mark, not a fixed second.
    let behind = message.split("the system clock is ").nth(1).and_then(|rest| rest.split(" behind").next());
    let ms: u64 = match behind {
        Some(text) if text.ends_with("ms") => text.trim_end_matches("ms").parse().unwrap(),
        Some(text) if text.ends_with('s') => text.trim_end_matches('s').parse::<u64>().unwrap() * 1000,
        _ => panic!("no distance in {message}"),
    };
    assert!(ms > 300_000, "the mark lies minutes ahead: {message}");
    assert!(detail.contains("A mark lies at most 1000 ticks of 1ms (1s) past the IDs it covered"), "{detail}");
}

#[test]
fn crash_after_crash_with_day_ticks_never_stops_generation() {
    // 0.5.0 resumed a whole tick ahead after each crash: after two, calls
    // failed for about a day ("the system clock is 2d behind the high-water
    // mark"). With max_wait = 0 any wait for the clock would fail the call.
    let c = Cluster::new("dayticks", &["snowflake_id.tick_ms = 86400000", "snowflake_id.max_wait = 0"]);
    c.start();
    let mut last: i64 = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    for round in 1..=4 {
        if round % 2 == 0 {
            let mut s = c.connect();
            let victim: i32 = s.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
            c.crash_backend(victim);
        } else {
            c.stop_immediate();
            c.start();
        }
        let next = c.connect().query_one("SELECT snowflake_next_id()", &[]);
        let next: i64 = next.unwrap_or_else(|e| panic!("after crash {round}: {:?}", db_error(&e))).get(0);
        assert!(next > last, "after crash {round}");
        let ahead: bool =
            c.one("SELECT snowflake_timestamp(snowflake_next_id()) <= clock_timestamp() + interval '1 day'");
        assert!(ahead, "within max_clock_drift after crash {round}");
        last = next;
    }
}
