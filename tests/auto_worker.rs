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

/// IDs of `side` stored on `c`.
fn ids(c: &Cluster, side: &str) -> Vec<i64> {
    let rows = c.connect().query("SELECT id FROM t WHERE side = $1", &[&side]).unwrap();
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
    standby.stop();
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
    // Nothing claimed before the first ID.
    let row = s.query_one("SELECT worker_id, worker_id_source FROM snowflake_status()", &[]).unwrap();
    assert_eq!((row.get::<_, Option<i32>>(0), row.get::<_, String>(1)), (None, "auto".into()));
    assert!(claims(&p).is_empty());
    s.batch_execute(TABLE).unwrap();
    let mut all = insert(&p, "first", 1000);
    assert_eq!(worker(&p), Some(1), "pg-1 claims 1");
    assert_eq!(workers_in(&p, &all), HashSet::from([1]));
    assert_eq!(claims(&p), [(1, "auto".into(), true, true)]);
    let log = p.log();
    assert!(log.contains("snowflake_id claimed worker 1 of datacenter 1 on timeline 1"), "{log}");
    let timeline: i64 = p.one("SELECT timeline FROM snowflake_worker_claims()");
    assert_eq!(timeline, 1);

    // A restart, a crash and a backend crash keep the number: no claim again.
    p.stop();
    p.start();
    all.extend(insert(&p, "first", 1000));
    p.stop_immediate();
    p.start();
    all.extend(insert(&p, "first", 1000));
    let mut held = p.connect();
    let pid: i32 = held.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    p.crash_backend(pid);
    drop(held);
    all.extend(insert(&p, "first", 1000));
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

    // Failover: the primary is lost, s1 takes over.
    p.stop_immediate();
    s1.promote();
    let from_s1 = insert(&s1, "s1", 2000);
    assert_eq!(worker(&s1), Some(2), "pg-2 claims its ordinal: no server of the lineage used it");
    let p_ids: Vec<i64> = from_p.iter().chain(&from_p2).copied().collect();
    assert_above(&p_ids, &from_s1);
    assert_eq!(workers_in(&s1, &from_s1), HashSet::from([2]));
    assert_eq!(claims(&s1), [(1, "auto".into(), false, false), (2, "auto".into(), true, true)]);

    // s2 follows the new primary and learns its claim.
    follow(&s2, &s1);
    wait_for_claim(&s2, &s1, 2);

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
