//! A physical standby: it refuses to generate while in recovery, and once
//! promoted the cross-server identity check tells it from its old primary.

mod common;

use common::{db_error, refused, Cluster};

fn identity(c: &Cluster) -> (i32, i32, i64, Option<i32>) {
    let row = c
        .connect()
        .query_one("SELECT datacenter_id, worker_id, system_identifier, timeline FROM snowflake_status()", &[])
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

#[test]
fn a_standby_refuses_to_generate_and_a_promoted_one_is_told_apart() {
    let primary = Cluster::new("primary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    let mut p = primary.session();
    p.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), v int); INSERT INTO t (v) VALUES (1)",
    )
    .unwrap();
    let standby = Cluster::standby_of(&primary, "standby", &[]);
    standby.start();

    let mut s = standby.connect();
    let e = s.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, hint) = db_error(&e);
    assert_eq!((code.as_str(), message.as_str()), ("25006", "cannot generate snowflake IDs during recovery"));
    assert!(hint.contains("snowflake_id.worker_id"), "{hint}");
    assert_eq!(refused(&standby, "in_recovery"), 1);
    // Reading IDs works on the standby.
    let worker: i32 = s.query_one("SELECT worker_id FROM t, snowflake_decode(t.id)", &[]).unwrap().get(0);
    assert_eq!(worker, 1);
    let (_, _, sysid, timeline) = identity(&standby);
    assert_eq!((sysid, timeline), (identity(&primary).2, None), "same system, no timeline while in recovery");

    // Marks made with its own number: a standby that shares its primary's
    // number says so (5 million IDs need more than one mark's window).
    let shared = "WARNING:  snowflake_id standby has the number its primary generates with (datacenter 0, worker 1)";
    assert!(!standby.log().contains(shared), "before any mark:\n{}", standby.log());
    primary.connect().batch_execute("SELECT count(*) FROM snowflake_next_ids(5000000)").unwrap();
    standby.wait_for_replay_of(&primary);
    assert!(standby.log().contains(shared), "{}", standby.log());

    // The guide's way to give a standby its own number before promotion.
    s.batch_execute("ALTER SYSTEM SET snowflake_id.worker_id = 2").unwrap();
    drop(s);
    standby.stop();
    standby.start();
    standby.promote();
    let mut s = standby.connect();
    s.execute("INSERT INTO t (v) VALUES (2)", &[]).unwrap();
    let workers: Vec<i32> = s
        .query("SELECT d.worker_id FROM t, snowflake_decode(t.id) d ORDER BY v", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(workers, vec![1, 2]);
    let (p_id, s_id) = (identity(&primary), identity(&standby));
    assert_eq!(p_id.2, s_id.2, "a promoted standby keeps the system identifier");
    // ...but moves to a new timeline, so had it kept worker 1, the check across
    // servers would see one (datacenter, worker) pair claimed by two servers.
    assert!(s_id.3 > p_id.3, "a new timeline: {p_id:?} {s_id:?}");
}

/// A standby that started without knowing its mark (upgraded, then rsynced
/// before the state file was copied) learns it from the first mark it
/// replays, and once promoted generates above its primary's IDs without a
/// restart.
#[test]
fn a_replayed_mark_ends_an_unknown_floor() {
    let primary = Cluster::new("knownprimary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    primary.session().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id())").unwrap();
    let standby = Cluster::standby_of(&primary, "unknownstandby", &["snowflake_id.worker_id = 2"]);
    let unknown = "# snowflake_id generator state: the high-water mark of this data directory is unknown.\n\
                   version=3\nkind=unknown\nreason=a test made this file\n";
    standby.write_data_file("snowflake_id.state", common::seal_state_file(unknown).as_bytes());
    let before = standby.log().len();
    standby.start();
    assert!(standby.log()[before..].contains("the high-water mark of this data directory is unknown"));
    primary.session().batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();
    standby.wait_for_replay_of(&primary);
    let max_primary: i64 = primary.one("SELECT max(id) FROM t");
    primary.stop_immediate();
    standby.promote();
    standby.wait_until_writable();
    let next: i64 = standby.one("SELECT snowflake_next_id()");
    assert!(next > max_primary, "the promoted standby continues above its primary's IDs");
}

/// A standby whose state file cannot be written waits in replay, keeps
/// serving reads, stops when asked, and continues once the file is writable.
#[test]
fn a_standby_that_cannot_write_its_state_file_waits_serving_reads() {
    let primary = Cluster::new("waitprimary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    primary.session().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id())").unwrap();
    let standby = Cluster::standby_of(&primary, "waitstandby", &[]);
    standby.start();
    let blocker = standby.data_path("snowflake_id.state.tmp");
    assert!(standby.run_program("mkdir", &[blocker.to_str().unwrap()]).status.success());
    // Ten million IDs need marks beyond the current one; the rows follow them in WAL.
    primary.connect().batch_execute("SELECT count(*) FROM snowflake_next_ids(10000000)").unwrap();
    primary.session().batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !standby.log().contains("replay waits until the replayed high-water mark is recorded") {
        assert!(std::time::Instant::now() < deadline, "no warning:\n{}", standby.log());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Still up, serving reads, and behind: the rows after the mark wait.
    let rows: i64 = standby.one("SELECT count(*) FROM t");
    assert_eq!(rows, 0, "replay went past the mark it could not record");
    assert!(!standby.log().contains("startup process"), "{}", standby.log());
    // A shutdown request ends the wait.
    standby.stop();
    assert!(standby.run_program("rmdir", &[blocker.to_str().unwrap()]).status.success());
    standby.start();
    standby.wait_for_replay_of(&primary);
    assert_eq!(standby.one::<i64>("SELECT count(*) FROM t"), 1000);
    let max_primary: i64 = primary.one("SELECT max(id) FROM snowflake_next_ids(1) id");
    primary.stop_immediate();
    standby.promote();
    standby.wait_until_writable();
    let next: i64 = standby.one("SELECT snowflake_next_id()");
    assert!(next > max_primary);
}

#[test]
fn a_replica_with_its_own_number_is_no_renumbering() {
    // Per-node numbers: every replica starts from its primary's state file,
    // written under the primary's number. 0.5.0 warned as for a renumbering,
    // with a hint about handing the old number on, on every one of them.
    let primary = Cluster::new("perprimary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    let before: i64 =
        primary.session().query_one("SELECT max(id) FROM snowflake_next_ids(100) id", &[]).unwrap().get(0);
    for (copy, name) in [
        (Cluster::standby_of(&primary, "perreplica", &["snowflake_id.worker_id = 2"]), "a replica"),
        (Cluster::base_backup_of(&primary, "perrestore"), "a restored backup"),
    ] {
        copy.set("snowflake_id.worker_id = 3");
        copy.start();
        let log = copy.log();
        assert!(
            log.contains(
                "LOG:  snowflake_id continues above the marks of the server this data directory was copied from \
                 (datacenter 0, worker 1), with its own number (datacenter 0, worker 3)"
            ),
            "{name}:\n{log}"
        );
        assert!(!log.contains("node number changed"), "{name}: a false alarm:\n{log}");
        assert!(!log.contains("has the number its primary generates with"), "{name}: a false alarm:\n{log}");
        if name == "a restored backup" {
            copy.wait_until_writable();
            let first: i64 = copy.one("SELECT snowflake_next_id()");
            assert!(first > before, "above the primary's IDs");
            // A crash re-initialises shared memory: still no false alarm.
            let mut s = copy.connect();
            let victim: i32 = s.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
            copy.crash_backend(victim);
            assert!(!copy.log().contains("node number changed"), "{name} after a crash:\n{}", copy.log());
        }
        copy.stop();
    }
}

#[test]
fn a_standby_given_its_primarys_state_file_by_hand_is_no_renumbering() {
    // The remedy for a standby whose mark is unknown (review of 0.8.0,
    // finding 8a): its primary's file, copied in. 0.10.0 warned that the
    // standby's node number had changed, with a hint about handing on a
    // number it never used; the file names its writer now.
    let primary = Cluster::new("handprimary", &["snowflake_id.worker_id = 1"]);
    primary.start();
    let before: i64 =
        primary.session().query_one("SELECT max(id) FROM snowflake_next_ids(100) id", &[]).unwrap().get(0);
    let standby = Cluster::standby_of(&primary, "handstandby", &["snowflake_id.worker_id = 19"]);
    standby.start();
    standby.wait_for_replay_of(&primary);
    standby.stop();
    let file = std::fs::read(primary.state_file()).unwrap();
    assert!(String::from_utf8_lossy(&file).contains("written_by="), "the primary's file names its writer");
    standby.write_data_file("snowflake_id.state", &file);
    standby.start();
    let log = standby.log();
    let restart = &log[log.rfind("database system is shut down").unwrap()..];
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let writer = format!("{}:{}", host.trim(), primary.data.display());
    assert!(
        restart.contains(&format!(
            "LOG:  snowflake_id continues above the marks of the server that wrote its state file ({writer})"
        )),
        "{restart}"
    );
    assert!(restart.contains("(datacenter 0, worker 1), with its own number (datacenter 0, worker 19)"), "{restart}");
    assert!(!restart.contains("node number changed"), "a false alarm:\n{restart}");
    // Not on a server that starts as a primary: another writer may be this
    // server moved, renamed or upgraded, and the renumbering warning stays.
    let elsewhere = Cluster::new("handcopy", &["snowflake_id.worker_id = 20"]);
    elsewhere.write_data_file("snowflake_id.state", &file);
    elsewhere.start();
    assert!(elsewhere.log().contains("WARNING:  snowflake_id node number changed"), "{}", elsewhere.log());
    primary.stop_immediate();
    standby.promote();
    standby.wait_until_writable();
    let next: i64 = standby.one("SELECT snowflake_next_id()");
    assert!(next > before, "above the primary's IDs: {next} <= {before}");
}
