//! `snowflake_id.worker_id = auto` with one configuration shared by every
//! server of a cluster, as CloudNativePG, Spilo and a Patroni `bootstrap.dcs`
//! section give it: each primary claims a worker number no server of its
//! lineage used, at its first start and at every promotion, logged in WAL.
//!
//! Every server runs in a UTS namespace of its own with a host name like a
//! StatefulSet's pods (`pg-1`, `pg-2`, ...), as on Kubernetes. Each test
//! keeps every ID each server handed out and checks that none repeats, and
//! that a promoted server's IDs lie above every ID of its lineage before it.

mod common;

use std::collections::HashSet;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{db_error, Cluster};

const TABLE: &str = "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), side text)";

/// One configuration file, included by every server's postgresql.conf.
struct Shared {
    dir: PathBuf,
    include: String,
}

impl Shared {
    fn new(extra: &[&str]) -> Shared {
        let dir = std::env::temp_dir().join(format!("sfauto-{}-{}", std::process::id(), next()));
        fs::create_dir_all(&dir).unwrap();
        let mut text = String::from(
            "snowflake_id.datacenter_id = 1\nsnowflake_id.worker_id = auto\nwal_log_hints = on\n\
             max_wal_senders = 10\nwal_keep_size = '256MB'\n",
        );
        for line in extra {
            text.push_str(line);
            text.push('\n');
        }
        let file = dir.join("shared.conf");
        fs::write(&file, text).unwrap();
        common::as_root("chmod", &["755", dir.to_str().unwrap()]);
        common::as_root("chmod", &["644", file.to_str().unwrap()]);
        Shared { include: format!("include '{}'", file.display()), dir }
    }

    /// A primary of its own (initdb) on `host`, with the shared configuration.
    fn primary(&self, name: &str, host: &str) -> Cluster {
        Cluster::new(name, &[&self.include]).on_host(host)
    }

    /// A directory the server user may write to, for a WAL archive.
    fn archive(&self) -> PathBuf {
        let dir = self.dir.join("archive");
        fs::create_dir_all(&dir).unwrap();
        common::as_root("chown", &["postgres:postgres", dir.to_str().unwrap()]);
        dir
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = common::as_root("rm", &["-rf", self.dir.to_str().unwrap()]);
        }
    }
}

fn next() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// The worker number a server generates with (NULL: none of its own yet).
fn worker(c: &Cluster) -> Option<i32> {
    c.one("SELECT worker_id FROM snowflake_status()")
}

/// `n` rows keyed by the column default, tagged `side`; returns their IDs.
fn insert(c: &Cluster, side: &str, n: i64) -> Vec<i64> {
    let mut s = c.connect();
    let rows = s
        .query("INSERT INTO t (side) SELECT $1 FROM generate_series(1, $2::bigint) RETURNING id", &[&side, &n])
        .unwrap_or_else(|e| panic!("inserting on {side}: {:?}\n{}", db_error(&e), c.log()));
    rows.iter().map(|r| r.get(0)).collect()
}

/// The decoded worker numbers of `ids`.
fn workers_in(c: &Cluster, ids: &[i64]) -> HashSet<i32> {
    let rows = c
        .connect()
        .query("SELECT DISTINCT d.worker_id FROM unnest($1::bigint[]) AS u(id), snowflake_decode(u.id) AS d", &[&ids])
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// Waits until `c` generates with worker `w` (the background worker claims
/// as soon as the server accepts writes).
fn wait_for_worker(c: &Cluster, w: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while worker(c) != Some(w) {
        assert!(Instant::now() < deadline, "no claim of worker {w}: {:?}\n{}", worker(c), c.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every ID in `sets` appears once.
fn assert_no_repeat(sets: &[(&str, &[i64])]) {
    let mut seen = HashSet::new();
    let mut total = 0;
    for (side, ids) in sets {
        for id in *ids {
            assert!(seen.insert(*id), "ID {id} of {side} was issued twice");
        }
        total += ids.len();
    }
    assert!(total > 0);
}

/// Every ID of `later` lies above every ID of `earlier`.
fn assert_above(earlier: &[i64], later: &[i64]) {
    let (max, min) = (earlier.iter().max().unwrap(), later.iter().min().unwrap());
    assert!(min > max, "IDs went down within a lineage: {min} after {max}");
}

/// The numbers `c`'s lineage used, as (worker, source, is_current, claimed_here).
fn claims(c: &Cluster) -> Vec<(i32, String, bool, bool)> {
    let rows = c
        .connect()
        .query("SELECT worker_id, source, is_current, claimed_here FROM snowflake_worker_claims()", &[])
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect()
}

/// Points a standby at another primary, as an HA manager does, and restarts it.
fn follow(standby: &Cluster, primary: &Cluster) {
    if standby.is_running() {
        standby.stop();
    }
    standby.set(&format!("primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=s'", primary.port));
    if !standby.data_path("standby.signal").exists() {
        standby.write_data_file("standby.signal", b"");
    }
    standby.start();
}

/// Waits until `c` has replayed up to `primary`'s WAL, and its status shows
/// the lineage's number `worker` current.
fn wait_for_claim(c: &Cluster, primary: &Cluster, worker: i32) {
    c.wait_for_replay_of(primary);
    let current: Vec<i32> = claims(c).iter().filter(|r| r.2).map(|r| r.0).collect();
    assert_eq!(current, [worker], "{:?}", claims(c));
}

#[test]
fn a_primary_claims_its_hosts_ordinal_before_its_first_id_and_keeps_it_across_restarts_and_crashes() {
    let shared = Shared::new(&[]);
    let p = shared.primary("first", "pg-1");
    p.start();
    let mut s = p.session();
    // Claimed at start by the background worker, before any ID was asked for.
    wait_for_worker(&p, 1);
    let row = s.query_one("SELECT worker_id_source, ids_issued FROM snowflake_status()", &[]).unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, i64>(1)), ("auto".into(), 0));
    s.batch_execute(TABLE).unwrap();
    let mut all = insert(&p, "first", 1000);
    assert_eq!(worker(&p), Some(1), "pg-1 claims 1");
    assert_eq!(workers_in(&p, &all), HashSet::from([1]));
    assert_eq!(claims(&p), [(1, "auto".into(), true, true)]);
    let log = p.log();
    assert!(log.contains("snowflake_id claimed worker 1 of datacenter 1 on timeline 1"), "{log}");
    let timeline: i64 = p.one("SELECT timeline FROM snowflake_worker_claims()");
    assert_eq!(timeline, 1);

    // A restart, a crash and a backend crash keep the number: no claim
    // again, and every batch lies above the one before.
    p.stop();
    p.start();
    let after_restart = insert(&p, "first", 1000);
    assert_above(&all, &after_restart);
    all.extend(after_restart);
    p.stop_immediate();
    p.start();
    let after_crash = insert(&p, "first", 1000);
    assert_above(&all, &after_crash);
    all.extend(after_crash);
    let mut held = p.connect();
    let pid: i32 = held.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    p.crash_backend(pid);
    drop(held);
    let after_backend_crash = insert(&p, "first", 1000);
    assert_above(&all, &after_backend_crash);
    all.extend(after_backend_crash);
    assert_eq!(workers_in(&p, &all), HashSet::from([1]));
    assert_eq!(p.log().matches("snowflake_id claimed worker").count(), 1, "one claim only");
    assert_eq!(claims(&p), [(1, "auto".into(), true, true)]);
    assert_no_repeat(&[("first", &all)]);
    let stored: i64 = p.one("SELECT count(*) FROM t");
    assert_eq!(stored, all.len() as i64);
}

#[test]
fn a_failover_and_a_switchover_give_each_new_primary_a_number_no_server_of_the_lineage_used() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let from_p = insert(&p, "p", 2000);
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    let s2 = Cluster::standby_of(&p, "s2", &[]).on_host("pg-3");
    s1.start();
    s2.start();
    let from_p2 = insert(&p, "p", 2000);
    for s in [&s1, &s2] {
        wait_for_claim(s, &p, 1);
        // A standby has no number of its own, and says so.
        let row = s.connect().query_one("SELECT worker_id, worker_id_source FROM snowflake_status()", &[]).unwrap();
        assert_eq!((row.get::<_, Option<i32>>(0), row.get::<_, String>(1)), (None, "auto".into()));
        assert_eq!(claims(s), [(1, "auto".into(), true, false)], "the primary's claim, not its own");
        let e = s.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
        assert_eq!(db_error(&e).0, "25006");
    }
    // A standby's restart changes nothing.
    s2.stop();
    s2.start();
    assert_eq!(worker(&s2), None);

    // Failover: the primary is lost, s1 takes over. It claims at once, and
    // s2, following it, learns the claim before s1 has issued any ID.
    p.stop_immediate();
    s1.promote();
    wait_for_worker(&s1, 2);
    follow(&s2, &s1);
    wait_for_claim(&s2, &s1, 2);
    let issued: i64 = s1.one("SELECT ids_issued FROM snowflake_status()");
    assert_eq!(issued, 0, "claimed before any ID");
    let from_s1 = insert(&s1, "s1", 2000);
    assert_eq!(worker(&s1), Some(2), "pg-2 claims its ordinal: no server of the lineage used it");
    let p_ids: Vec<i64> = from_p.iter().chain(&from_p2).copied().collect();
    assert_above(&p_ids, &from_s1);
    assert_eq!(workers_in(&s1, &from_s1), HashSet::from([2]));
    assert_eq!(claims(&s1), [(1, "auto".into(), false, false), (2, "auto".into(), true, true)]);

    // Switchover back to pg-1: it rejoins as a standby of s1 (rewound onto
    // s1's timeline, as it crashed), s1 stops cleanly, and pg-1 is promoted.
    // pg-1 claims again, and not its old number (its old IDs may run ahead
    // of the clock).
    rewind(&p, &s1);
    p.start();
    let from_s1_b = insert(&s1, "s1", 2000);
    wait_for_claim(&p, &s1, 2);
    assert_eq!(worker(&p), None, "a rewound old primary has no number until it is promoted");
    s1.stop();
    p.promote();
    let from_p3 = insert(&p, "p-again", 2000);
    let again = worker(&p).unwrap();
    assert!(![1, 2].contains(&again), "pg-1 took {again}, a number its lineage held");
    let s1_ids: Vec<i64> = from_s1.iter().chain(&from_s1_b).copied().collect();
    assert_above(&s1_ids, &from_p3);
    assert_no_repeat(&[("p", &p_ids), ("s1", &s1_ids), ("p again", &from_p3)]);
    let sources: Vec<(i32, bool)> = claims(&p).iter().map(|r| (r.0, r.2)).collect();
    assert_eq!(sources, [(1, false), (2, false), (again, true)]);
}

#[test]
fn a_clean_switchover_and_back_gives_each_new_primary_a_number_of_its_own() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    let s2 = Cluster::standby_of(&p, "s2", &[]).on_host("pg-3");
    s1.start();
    s2.start();
    let from_p = insert(&p, "p", 2000);
    s1.wait_for_replay_of(&p);
    s2.wait_for_replay_of(&p);
    // Switchover: the primary stops cleanly (its shutdown reaches the
    // standbys), s1 is promoted, the old primary and s2 follow s1 (no
    // rewind: nothing diverged).
    p.stop();
    s1.promote();
    let from_s1 = insert(&s1, "s1", 2000);
    assert_eq!(worker(&s1), Some(2));
    follow(&p, &s1);
    follow(&s2, &s1);
    let from_s1_b = insert(&s1, "s1", 2000);
    wait_for_claim(&p, &s1, 2);
    wait_for_claim(&s2, &s1, 2);
    assert_eq!(worker(&p), None, "the old primary, now a standby, has no number of its own");
    assert_eq!(claims(&p), [(1, "auto".into(), false, false), (2, "auto".into(), true, false)]);
    // And back: s1 stops cleanly, the old primary is promoted again. Its
    // own number is held (superseded moments ago), so it claims another.
    s1.stop();
    p.promote();
    let back = insert(&p, "p again", 2000);
    let again = worker(&p).unwrap();
    assert!(![1, 2].contains(&again), "took {again}");
    follow(&s2, &p);
    insert(&p, "p again", 10);
    wait_for_claim(&s2, &p, again);
    let s1_ids: Vec<i64> = from_s1.iter().chain(&from_s1_b).copied().collect();
    assert_above(&from_p, &from_s1);
    assert_above(&s1_ids, &back);
    assert_no_repeat(&[("p", &from_p), ("s1", &s1_ids), ("p again", &back)]);
}

/// pg_rewind of `old` onto `source` (running), as Patroni runs it, and
/// `old` set up as `source`'s standby. pg_rewind finishes the crash
/// recovery of an old primary that did not stop cleanly first.
fn rewind(old: &Cluster, source: &Cluster) {
    let _ = old.try_stop_immediate();
    let _ = old.remove_data_file_if_there("standby.signal");
    // A just-promoted source's control file names its new timeline only
    // after a checkpoint (Patroni makes one too).
    source.connect().batch_execute("CHECKPOINT").unwrap();
    let out = old.run(
        "pg_rewind",
        &[
            "--target-pgdata",
            old.data.to_str().unwrap(),
            "--source-server",
            &format!("host=127.0.0.1 port={} user=postgres dbname=postgres", source.port),
        ],
    );
    assert!(out.status.success(), "pg_rewind: {}{}", String::from_utf8_lossy(&out.stderr), old.log());
    // pg_rewind copies the source's configuration too: this server's own
    // settings go after it.
    old.write_data_file("standby.signal", b"");
    old.set(&format!("port = {}\nunix_socket_directories = '{}'", old.port, old.dir.display()));
    old.set(&format!("primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=old'", source.port));
}

#[test]
fn a_split_brain_with_one_shared_configuration_repeats_no_id() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let before = insert(&p, "before", 1000);
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    s1.start();
    s1.wait_for_replay_of(&p);
    // The standby is promoted while its primary goes on: both generate, for
    // seconds, each with the configuration the other has.
    s1.promote();
    let deadline = Instant::now() + Duration::from_secs(4);
    let (mut on_p, mut on_s1) = (Vec::new(), Vec::new());
    while Instant::now() < deadline {
        on_p.extend(insert(&p, "p", 500));
        on_s1.extend(insert(&s1, "s1", 500));
    }
    let (wp, ws) = (worker(&p).unwrap(), worker(&s1).unwrap());
    assert_ne!(wp, ws);
    assert_eq!((wp, ws), (1, 2));
    assert_no_repeat(&[("before", &before), ("p", &on_p), ("s1", &on_s1)]);
    assert_above(&before, &on_s1);
    assert!(on_p.len() > 1000 && on_s1.len() > 1000);
    // Their rows meet: none repeats (the primary key would refuse it).
    let mut s = p.connect();
    s.batch_execute("CREATE TABLE merged (id bigint PRIMARY KEY)").unwrap();
    let all: Vec<i64> = on_p.iter().chain(&on_s1).chain(&before).copied().collect();
    s.execute("INSERT INTO merged SELECT unnest($1::bigint[])", &[&all]).unwrap();
}

#[test]
fn two_standbys_promoted_at_once_choose_apart() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let before = insert(&p, "p", 1000);
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    let s2 = Cluster::standby_of(&p, "s2", &[]).on_host("pg-3");
    s1.start();
    s2.start();
    s1.wait_for_replay_of(&p);
    s2.wait_for_replay_of(&p);
    // A double failover: both promoted from one primary that still runs.
    s1.promote();
    s2.promote();
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..4 {
        a.extend(insert(&p, "p", 500));
        b.extend(insert(&s1, "s1", 500));
        c.extend(insert(&s2, "s2", 500));
    }
    let numbers = [worker(&p).unwrap(), worker(&s1).unwrap(), worker(&s2).unwrap()];
    assert_eq!(numbers, [1, 2, 3]);
    assert_no_repeat(&[("before", &before), ("p", &a), ("s1", &b), ("s2", &c)]);
    assert_above(&before, &b);
    assert_above(&before, &c);

    // Two servers on one host, no ordinal to tell them apart: their data
    // directories and ports order the numbers for each (they meet with a
    // chance of one in the free numbers, which the guard catches where
    // their rows meet); neither takes its primary's.
    let q = shared.primary("q", "db");
    q.start();
    q.session().batch_execute(TABLE).unwrap();
    insert(&q, "q", 100);
    let t1 = Cluster::standby_of(&q, "t1", &[]).on_host("db");
    let t2 = Cluster::standby_of(&q, "t2", &[]).on_host("db");
    t1.start();
    t2.start();
    t1.wait_for_replay_of(&q);
    t2.wait_for_replay_of(&q);
    t1.promote();
    t2.promote();
    insert(&t1, "t1", 100);
    insert(&t2, "t2", 100);
    let (wq, w1, w2) = (worker(&q).unwrap(), worker(&t1).unwrap(), worker(&t2).unwrap());
    assert!(wq != w1 && wq != w2, "a promoted standby took its primary's number: {wq} {w1} {w2}");
}

/// Waits until `c`'s archiver has archived the WAL segment in use now.
fn archive_current_segment(c: &Cluster) {
    let segment: String = c.one("SELECT pg_walfile_name(pg_switch_wal())");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let archived: Option<String> = c.one("SELECT last_archived_wal FROM pg_stat_archiver");
        if archived.as_deref() >= Some(segment.as_str()) {
            return;
        }
        assert!(Instant::now() < deadline, "segment {segment} was not archived");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_point_in_time_restore_to_before_a_promotion_claims_apart_from_the_promoted_branch() {
    let shared = Shared::new(&["archive_mode = on"]);
    let archive = shared.archive();
    let archiving = format!("archive_command = 'test ! -f {0}/%f && cp %p {0}/%f'", archive.display());
    let p = shared.primary("p", "pg-1");
    p.set(&archiving);
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let from_p = insert(&p, "p", 1000);
    let backup = Cluster::base_backup_of(&p, "restored").on_host("pg-4");
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    s1.start();
    let target: String = p.one("SELECT pg_current_wal_insert_lsn()::text");
    let from_p2 = insert(&p, "p after target", 1000);
    s1.wait_for_replay_of(&p);
    archive_current_segment(&p);
    // The standby is promoted (its history file goes to the shared archive)
    // and generates; the old primary stops.
    p.stop();
    s1.promote();
    let from_s1 = insert(&s1, "s1", 1000);
    assert_eq!(worker(&s1), Some(2));
    archive_current_segment(&s1);

    // The backup, restored to a point before the promotion: it knows the
    // primary's claim, not the promoted branch's.
    backup.set(&format!("restore_command = 'cp {}/%f %p'", archive.display()));
    backup.set(&format!("recovery_target_lsn = '{target}'"));
    backup.set("recovery_target_action = 'promote'");
    backup.set("recovery_target_timeline = 'current'");
    backup.write_data_file("recovery.signal", b"");
    backup.start();
    backup.wait_until_writable();
    let restored_ids = insert(&backup, "restored", 1000);
    let number = worker(&backup).unwrap();
    assert!(![1, 2].contains(&number), "the restore took {number}, which the lineage or its sibling holds");
    assert_eq!(number, 4, "pg-4's ordinal");
    let restored_timeline: i64 =
        backup.one("SELECT timeline FROM snowflake_worker_claims() WHERE is_current AND claimed_here");
    assert!(restored_timeline > 2, "the restore skipped the promoted branch's timeline: {restored_timeline}");
    assert_above(&from_p, &restored_ids);
    assert_no_repeat(&[("p", &from_p), ("p after", &from_p2), ("s1", &from_s1), ("restored", &restored_ids)]);
}

#[test]
fn base_backups_started_as_primaries_claim_their_own_numbers() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let from_p = insert(&p, "p", 1000);
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    s1.start();
    let from_p2 = insert(&p, "p", 1000);
    s1.wait_for_replay_of(&p);
    // A clone of the primary on a host of the same name (a restore onto the
    // same machine): its state file says pg-1 claimed 1, on this timeline,
    // but it came with a backup_label: the claim is its source's.
    let clone = Cluster::base_backup_of(&p, "clone").on_host("pg-1");
    clone.start();
    // A crash before its first ID: the backup_label is gone at the next
    // start, and the state file still must not say the claim is its own.
    clone.stop_immediate();
    clone.start();
    let from_clone = insert(&clone, "clone", 1000);
    let cloned = worker(&clone).unwrap();
    assert_ne!(cloned, 1, "a clone took its source's number");
    assert_above(&from_p, &from_clone);
    // A base backup taken from the standby, started as a primary.
    let from_standby = Cluster::base_backup_of(&s1, "fromstandby").on_host("pg-5");
    // (A backup of a standby holds its standby.signal.)
    assert!(from_standby.remove_data_file_if_there("standby.signal"));
    from_standby.start();
    let ids_b = insert(&from_standby, "b", 1000);
    assert_eq!(worker(&from_standby), Some(5));
    assert_above(&from_p2, &ids_b);
    // A base backup of the standby started as a standby of the primary,
    // then promoted.
    let b2 = Cluster::base_backup_of(&s1, "b2").on_host("pg-6");
    b2.write_data_file("standby.signal", b"");
    b2.set(&format!("primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=b2'", p.port));
    b2.start();
    let from_p3 = insert(&p, "p", 1000);
    b2.wait_for_replay_of(&p);
    assert_eq!(worker(&b2), None);
    b2.promote();
    let ids_b2 = insert(&b2, "b2", 1000);
    assert_eq!(worker(&b2), Some(6));
    assert_above(&from_p3, &ids_b2);
    assert_eq!(worker(&p), Some(1));
    let p_ids: Vec<i64> = from_p.iter().chain(&from_p2).chain(&from_p3).copied().collect();
    assert_no_repeat(&[("p", &p_ids), ("clone", &from_clone), ("b", &ids_b), ("b2", &ids_b2)]);
}

#[test]
fn a_crash_between_the_claims_state_file_and_its_wal_record_keeps_the_claim_and_the_standbys_learn_it() {
    // No background worker slot: the claim waits for the first ID, and the
    // test can stop a promoted server before it claims.
    let shared = Shared::new(&["max_worker_processes = 0"]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let from_p = insert(&p, "p", 1000);
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    s1.start();
    s1.wait_for_replay_of(&p);
    p.stop();
    s1.promote();
    assert_eq!(worker(&s1), None, "no claim before the first ID without the background worker");
    // A standby of s1, made now: it knows only p's number.
    let s2 = Cluster::standby_of(&s1, "s2", &[]).on_host("pg-7");
    s2.start();
    s2.wait_for_replay_of(&s1);
    assert_eq!(claims(&s2).iter().filter(|c| c.2).map(|c| c.0).collect::<Vec<_>>(), [1]);
    // s1 has not claimed yet. A crash between the claim's two writes leaves
    // what the first write makes: the state file names the claim, this
    // server's own, on its timeline; WAL has no record of it. (No
    // checkpoint since the promotion: crash recovery replays p's marks from
    // before it, which must not take the claim away.)
    s1.stop_immediate();
    let text = String::from_utf8(common::as_root("cat", &[s1.state_file().to_str().unwrap()]).stdout).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("crc32="))
        .map(|l| match l {
            "current=1,1" => "current=1,7".to_string(),
            "claimed_here=no" => "claimed_here=yes".to_string(),
            "worker_id=1" => "worker_id=7".to_string(),
            l if l.starts_with("claim=1,1,auto,1,") => {
                let mut fields: Vec<&str> = l.split(',').collect();
                let superseded = now.to_string();
                fields[6] = &superseded;
                format!("{}\nclaim=1,7,auto,2,{now},-,-,-,pg-2", fields.join(","))
            }
            l => l.to_string(),
        })
        .map(|l| l + "\n")
        .collect();
    assert!(body.contains("claim=1,7,auto,2,") && body.contains("claimed_here=yes"), "{text}");
    s1.write_data_file("snowflake_id.state", common::seal_state_file(&body).as_bytes());
    s1.start();
    let from_s1 = insert(&s1, "s1", 1000);
    assert_eq!(worker(&s1), Some(7), "the claim in its file is its own, on its timeline");
    assert!(!s1.log().contains("snowflake_id claimed worker"), "no second claim");
    // The standby learns the number from s1's marks; promoted in a split
    // brain beside s1, it takes another.
    wait_for_claim(&s2, &s1, 7);
    s2.promote();
    let from_s2 = insert(&s2, "s2", 1000);
    let from_s1_b = insert(&s1, "s1", 1000);
    let w2 = worker(&s2).unwrap();
    assert!(![1, 7].contains(&w2), "the standby took {w2}");
    let s1_ids: Vec<i64> = from_s1.iter().chain(&from_s1_b).copied().collect();
    assert_above(&from_p, &from_s1);
    assert_above(&from_p, &from_s2);
    assert_no_repeat(&[("p", &from_p), ("s1", &s1_ids), ("s2", &from_s2)]);
}

#[test]
fn with_every_number_held_a_claim_is_refused_until_a_superuser_releases_one() {
    // One worker bit: two numbers.
    let shared = Shared::new(&["snowflake_id.layout = 'timestamp:41,datacenter:5,worker:1,sequence:16'"]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let from_p = insert(&p, "p", 1000);
    assert_eq!(worker(&p), Some(1));
    let s = Cluster::standby_of(&p, "s", &[]).on_host("pg-2");
    s.start();
    s.wait_for_replay_of(&p);
    p.stop();
    s.promote();
    let from_s = insert(&s, "s", 1000);
    assert_eq!(worker(&s), Some(0), "pg-2's ordinal, modulo two");
    let t = Cluster::standby_of(&s, "t", &[]).on_host("pg-3");
    t.start();
    t.wait_for_replay_of(&s);
    // A split brain: t promoted while s runs. 0 is s's, 1 was superseded
    // moments ago: none is free.
    t.promote();
    let e = t.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, hint) = db_error(&e);
    assert_eq!(code, "53400");
    assert_eq!(message, "could not claim a worker number: all 2 numbers of datacenter 1 are held");
    assert!(hint.contains("snowflake_release_worker()") && hint.contains("by hand"), "{hint}");
    let detail = e.as_db_error().unwrap().detail().unwrap().to_string();
    assert!(detail.contains("The first is free from"), "{detail}");
    assert_eq!(common::refused(&t, "no_worker"), 1);
    assert_eq!(worker(&t), None);

    // Only a superuser releases; not the lineage's current number.
    let mut ts = t.connect();
    ts.batch_execute("CREATE ROLE app LOGIN").unwrap();
    let mut app =
        postgres::Client::connect(&format!("host=127.0.0.1 port={} user=app dbname=postgres", t.port), postgres::NoTls)
            .unwrap();
    let e = app.query_one("SELECT snowflake_release_worker(1)", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "42501");
    let e = app.query_one("SELECT count(*) FROM snowflake_worker_claims()", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "42501");
    ts.batch_execute("GRANT pg_monitor TO app").unwrap();
    let listed: i64 = app.query_one("SELECT count(*) FROM snowflake_worker_claims()", &[]).unwrap().get(0);
    assert_eq!(listed, 2);
    let e = ts.query_one("SELECT snowflake_release_worker(0)", &[]).unwrap_err();
    assert_eq!(db_error(&e).1, "cannot release datacenter 1, worker 0: this server's lineage generates with it");
    let e = ts.query_one("SELECT snowflake_release_worker(1, 3)", &[]).unwrap_err();
    assert_eq!(db_error(&e).1, "datacenter 3, worker 1 was never used by this server's lineage");
    // pg-1 is gone for good: release its number. The next call claims it
    // once the clock has passed pg-1's last mark (within max_wait).
    let free_from: std::time::SystemTime = ts.query_one("SELECT snowflake_release_worker(1)", &[]).unwrap().get(0);
    assert!(free_from <= std::time::SystemTime::now() + Duration::from_secs(5));
    let from_t = insert(&t, "t", 1000);
    assert_eq!(worker(&t), Some(1));
    let released: bool = t.one("SELECT released_at IS NOT NULL FROM snowflake_worker_claims() WHERE worker_id = 1");
    assert!(!released, "claimed anew");
    assert_above(&from_s, &from_t);
    assert_no_repeat(&[("p", &from_p), ("s", &from_s), ("t", &from_t)]);
}

#[test]
fn switching_a_cluster_from_a_fixed_number_to_auto_and_back_repeats_no_id() {
    let shared = Shared::new(&[]);
    let p = Cluster::new("p", &[&shared.include, "snowflake_id.worker_id = 5"]).on_host("pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let fixed = insert(&p, "fixed", 1000);
    assert_eq!(worker(&p), Some(5));
    let row = p.connect().query_one("SELECT worker_id_source FROM snowflake_status()", &[]).unwrap();
    assert_eq!(row.get::<_, String>(0), "setting");
    assert_eq!(claims(&p), [(5, "setting".into(), true, false)]);
    // To auto: the first claim takes neither the fixed number nor any other
    // the lineage used (pg-1's ordinal is free).
    p.stop();
    p.set("snowflake_id.worker_id = auto");
    p.start();
    let auto = insert(&p, "auto", 1000);
    assert_eq!(worker(&p), Some(1));
    assert_eq!(claims(&p), [(5, "setting".into(), false, false), (1, "auto".into(), true, true)]);
    // And back to a number: it continues above every ID.
    p.stop();
    p.set("snowflake_id.worker_id = 5");
    p.start();
    let back = insert(&p, "back", 1000);
    assert_eq!(worker(&p), Some(5));
    assert!(p.log().contains("snowflake_id node number changed since the state file was written"));
    assert_above(&fixed, &auto);
    assert_above(&auto, &back);
    assert_no_repeat(&[("fixed", &fixed), ("auto", &auto), ("back", &back)]);
    // A fixed cluster's standby switched with it: promoted, it avoids both.
    let s = Cluster::standby_of(&p, "s", &["snowflake_id.worker_id = auto"]).on_host("pg-5");
    s.start();
    let more = insert(&p, "back", 1000);
    s.wait_for_replay_of(&p);
    p.stop();
    s.promote();
    let promoted = insert(&s, "s", 1000);
    let w = worker(&s).unwrap();
    assert!(![1, 5].contains(&w), "took {w}");
    assert_above(&more, &promoted);
}

#[test]
fn pg_rewind_of_an_old_primary_then_its_promotion_takes_a_new_number() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let before = insert(&p, "before", 1000);
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    s1.start();
    s1.wait_for_replay_of(&p);
    // Split brain: both generate; the old primary's IDs on its diverged
    // timeline never reach the new one.
    s1.promote();
    let diverged = insert(&p, "diverged", 2000);
    let from_s1 = insert(&s1, "s1", 2000);
    rewind(&p, &s1);
    p.start();
    let from_s1_b = insert(&s1, "s1", 1000);
    wait_for_claim(&p, &s1, 2);
    assert_eq!(worker(&p), None, "rewound and following s1: no number of its own");
    // The rewind is noted, and with auto the note refuses nothing: the claim
    // at its promotion keeps its IDs apart from those it lost the marks of.
    assert!(p.log().contains("was rewound by pg_rewind: promoted, it claims a number"), "{}", p.log());
    let gone: i64 = p.one("SELECT count(*) FROM t WHERE side = 'diverged'");
    assert_eq!(gone, 0, "the rewind removed the diverged rows");
    // Promoted again (s1 gone): a number neither 1 (its IDs of the diverged
    // timeline) nor 2.
    s1.stop();
    p.promote();
    let after = insert(&p, "after", 2000);
    let w = worker(&p).unwrap();
    assert!(![1, 2].contains(&w), "took {w}");
    let s1_ids: Vec<i64> = from_s1.iter().chain(&from_s1_b).copied().collect();
    assert_above(&s1_ids, &after);
    assert_no_repeat(&[("before", &before), ("diverged", &diverged), ("s1", &s1_ids), ("after", &after)]);
    // Its restart keeps the new number.
    p.stop();
    p.start();
    let later = insert(&p, "after", 1000);
    assert_eq!(worker(&p), Some(w));
    assert_above(&after, &later);
}

#[test]
fn pg_upgrade_of_an_auto_cluster_keeps_its_claim() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let from_p = insert(&p, "p", 1000);
    // The cluster to upgrade is a promoted standby: on timeline 2, with a
    // claim of its own there.
    let s = Cluster::standby_of(&p, "s", &[]).on_host("pg-2");
    s.start();
    s.wait_for_replay_of(&p);
    p.stop();
    s.promote();
    let from_s = insert(&s, "s", 1000);
    assert_eq!(worker(&s), Some(2));
    s.stop();
    let new = Cluster::new("new", &[&shared.include]).on_host("pg-2");
    s.pg_upgrade(&new, &[]).unwrap_or_else(|out| panic!("{out}"));
    // The documented step: the old cluster's state file, copied over.
    let copied = new.run_program("cp", &[s.state_file().to_str().unwrap(), new.state_file().to_str().unwrap()]);
    assert!(copied.status.success(), "{}", String::from_utf8_lossy(&copied.stderr));
    new.start();
    let upgraded = insert(&new, "new", 1000);
    // pg_upgrade starts the new cluster on timeline 1 again: the claim of
    // timeline 2 is kept, claimed again there.
    assert_eq!(worker(&new), Some(2), "the claim of the upgraded cluster");
    let log = new.log();
    assert!(log.contains("snowflake_id keeps worker 2 of datacenter 1, claimed again on timeline 1"), "{log}");
    assert!(!log.contains("snowflake_id claimed worker"), "{log}");
    let timeline: i64 = new.one("SELECT timeline FROM snowflake_worker_claims() WHERE is_current");
    assert_eq!(timeline, 1);
    assert_eq!(claims(&new), [(1, "auto".into(), false, false), (2, "auto".into(), true, true)]);
    assert_above(&from_s, &upgraded);
    assert_no_repeat(&[("p", &from_p), ("s", &from_s), ("new", &upgraded)]);
}

#[test]
fn a_changed_datacenter_or_a_narrower_worker_field_makes_an_auto_primary_claim_anew() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-20");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let first = insert(&p, "first", 1000);
    assert_eq!(worker(&p), Some(20));
    // Another datacenter (two clusters found they shared one): the claim of
    // datacenter 1 is not one to generate with any more.
    p.stop();
    p.set("snowflake_id.datacenter_id = 2");
    p.start();
    let moved = insert(&p, "moved", 1000);
    let row = p.connect().query_one("SELECT datacenter_id, worker_id FROM snowflake_status()", &[]).unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, Option<i32>>(1)), (2, Some(20)));
    let decoded: Vec<(i32, i32)> = p
        .connect()
        .query(
            "SELECT DISTINCT d.datacenter_id, d.worker_id FROM unnest($1::bigint[]) u(id), snowflake_decode(u.id) d",
            &[&moved],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(decoded, [(2, 20)]);
    assert_above(&first, &moved);
    // A worker field of 3 bits, which 20 does not fit: 20 modulo 8.
    p.stop();
    p.set("snowflake_id.layout = 'timestamp:41,datacenter:7,worker:3,sequence:12'");
    p.start();
    let narrow = insert(&p, "narrow", 1000);
    assert_eq!(worker(&p), Some(4));
    let workers: Vec<(i32, i32)> = p
        .connect()
        .query(
            "SELECT DISTINCT d.datacenter_id, d.worker_id FROM unnest($1::bigint[]) u(id),
                    snowflake_decode(u.id, 'timestamp:41,datacenter:7,worker:3,sequence:12') d",
            &[&narrow],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(workers, [(2, 4)]);
    assert_above(&moved, &narrow);
    assert_no_repeat(&[("first", &first), ("moved", &moved), ("narrow", &narrow)]);
}

#[test]
fn a_standby_on_the_primarys_host_started_without_standby_signal_claims_its_own_number() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "db");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let from_p = insert(&p, "p", 1000);
    let s = Cluster::standby_of(&p, "s", &[]).on_host("db");
    s.start();
    let from_p2 = insert(&p, "p", 1000);
    s.wait_for_replay_of(&p);
    // Stopped cleanly and started without standby.signal: a primary on the
    // same timeline, on the same host, replaying the primary's claim in its
    // crash recovery. That claim is not its own.
    s.stop();
    assert!(s.remove_data_file_if_there("standby.signal"));
    s.start();
    let from_s = insert(&s, "s", 1000);
    let from_p3 = insert(&p, "p", 1000);
    let (wp, ws) = (worker(&p).unwrap(), worker(&s).unwrap());
    assert_ne!(wp, ws);
    let p_ids: Vec<i64> = from_p.iter().chain(&from_p2).chain(&from_p3).copied().collect();
    assert_above(&from_p2, &from_s);
    assert_no_repeat(&[("p", &p_ids), ("s", &from_s)]);
}

#[test]
fn a_promoted_copy_keeps_its_claim_across_backend_crashes_and_a_floor_is_raised_under_its_number() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    s1.start();
    let from_p = insert(&p, "p", 1000);
    s1.wait_for_replay_of(&p);
    p.stop_immediate();
    s1.promote();
    // A floor raised right after the promotion, as after an asynchronous
    // failover: one of the number s1 claims, above the old primary's IDs.
    let max: i64 = s1.one("SELECT max(id) FROM t");
    let next: i64 = s1.one(&format!("SELECT snowflake_raise_floor({max})"));
    assert!(next > max);
    wait_for_worker(&s1, 2);
    let decoded: i32 = s1.one(&format!("SELECT worker_id FROM snowflake_decode({next})"));
    assert_eq!(decoded, 2);
    let mut all = insert(&s1, "s1", 1000);
    assert!(all.iter().all(|&id| id >= next));
    // s1 started from a base backup (a copy): crashes re-initialise its
    // shared memory, and the claim it made itself stays its own.
    for _ in 0..3 {
        let mut held = s1.connect();
        let pid: i32 = held.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        s1.crash_backend(pid);
        drop(held);
        let more = insert(&s1, "s1", 1000);
        assert_above(&all, &more);
        all.extend(more);
    }
    assert_eq!(worker(&s1), Some(2));
    assert_eq!(s1.log().matches("snowflake_id claimed worker").count(), 1, "{}", s1.log());
    assert_above(&from_p, &all);
    assert_no_repeat(&[("p", &from_p), ("s1", &all)]);
}

#[test]
fn a_standby_whose_backend_crashed_still_claims_at_its_promotion() {
    let shared = Shared::new(&[]);
    let p = shared.primary("p", "pg-1");
    p.start();
    p.session().batch_execute(TABLE).unwrap();
    let from_p = insert(&p, "p", 1000);
    let s1 = Cluster::standby_of(&p, "s1", &[]).on_host("pg-2");
    s1.start();
    s1.wait_for_replay_of(&p);
    // A crash re-initialisation of the standby (an OOM-killed query): the
    // claim worker, waiting for the end of recovery, stays registered.
    let mut held = s1.connect();
    let pid: i32 = held.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    s1.crash_backend(pid);
    drop(held);
    p.stop();
    s1.promote();
    wait_for_worker(&s1, 2);
    let issued: i64 = s1.one("SELECT ids_issued FROM snowflake_status()");
    assert_eq!(issued, 0, "claimed at the promotion, before any ID");
    let from_s1 = insert(&s1, "s1", 1000);
    assert_above(&from_p, &from_s1);
    assert_no_repeat(&[("p", &from_p), ("s1", &from_s1)]);
}
