//! Sequence mode under real concurrent sessions: registrations and
//! unregistrations racing DDL, transactions that began before them, busy
//! sequences, statements in flight, replication roles, and pgbench clients
//! inserting while the same sequences are registered, unregistered and
//! registered again. Each test states the promise it holds the server to:
//! no native value from a registered sequence, no ID twice, no snowflake ID
//! after an unregistration, and no statement failed by a registration.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{bindir, db_error, refused, Cluster};

const NODE: [&str; 2] = ["snowflake_id.datacenter_id = 2", "snowflake_id.worker_id = 5"];

/// Whether `id` is a snowflake ID of this server (node 2/5): a native value,
/// small or continuing above the IDs, decodes to another node.
const OURS: &str = "SELECT d.datacenter_id = 2 AND d.worker_id = 5 FROM snowflake_decode($1) d";

fn ours(c: &mut postgres::Client, id: i64) -> bool {
    c.query_one(OURS, &[&id]).unwrap().get(0)
}

fn cluster(name: &str) -> Cluster {
    let c = Cluster::new(name, &NODE);
    c.start();
    c
}

/// The fence holds: the sequence is registered, and a path no plan covers
/// (a CHECK constraint calling native nextval) meets it instead of a small
/// number.
fn assert_fenced(s: &mut postgres::Client, seq: &str, check_table: &str) {
    let registered: bool = s
        .query_one("SELECT EXISTS (SELECT FROM snowflake_sequences WHERE sequence = $1::text::regclass)", &[&seq])
        .unwrap()
        .get(0);
    assert!(registered, "{seq} is registered");
    let before: i64 = s.query_one(&format!("SELECT last_value FROM {seq}"), &[]).unwrap().get(0);
    for _ in 0..3 {
        let e = s.execute(&format!("INSERT INTO {check_table} VALUES (1)"), &[]).expect_err("the fence holds");
        assert_eq!(db_error(&e).0, "2200H", "{seq}: {e}");
    }
    let after: i64 = s.query_one(&format!("SELECT last_value FROM {seq}"), &[]).unwrap().get(0);
    assert_eq!(before, after, "no native value of {seq} was handed out");
}

/// Connects to database `db` of `c`.
fn connect_to(c: &Cluster, db: &str) -> postgres::Client {
    postgres::Client::connect(&format!("host=127.0.0.1 port={} user=postgres dbname={db}", c.port), postgres::NoTls)
        .unwrap()
}

/// A new database of `c` with the extension, and a session in it.
fn database(c: &Cluster, db: &str) -> postgres::Client {
    c.connect().batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let mut s = connect_to(c, db);
    s.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    s
}

/// Runs `sql` in a new session on another thread.
fn in_background(c: &Cluster, sql: &str) -> thread::JoinHandle<Result<(), postgres::Error>> {
    in_background_in(c, "postgres", sql)
}

/// Runs `sql` in a new session of database `db` on another thread.
fn in_background_in(c: &Cluster, db: &str, sql: &str) -> thread::JoinHandle<Result<(), postgres::Error>> {
    let mut s = connect_to(c, db);
    let sql = sql.to_string();
    thread::spawn(move || s.batch_execute(&sql))
}

/// Waits until a session of the server shows `wait_event_type` `Lock` on a
/// statement that starts with `query`.
fn wait_until_waiting(c: &Cluster, query: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut s = c.connect();
    loop {
        let waiting: bool = s
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1 || '%')",
                &[&query],
            )
            .unwrap()
            .get(0);
        if waiting {
            return;
        }
        assert!(Instant::now() < deadline, "no session waits on a lock in {query:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Review finding 1: a transaction that began before a registration ran
/// `ALTER SEQUENCE ... NO MAXVALUE RESTART` or `TRUNCATE ... RESTART
/// IDENTITY` once the registration had committed, and the registered
/// sequence lost its fence (the TRUNCATE when it was the database's first
/// registration, or in REPEATABLE READ after a write). A registration now
/// waits for the transactions that began before it, and fences the sequence
/// as they left it.
#[test]
fn ddl_in_a_transaction_older_than_a_registration_never_opens_the_fence() {
    let c = cluster("seqddlold");
    for (db, begin, ddl, register, seq, check) in [
        (
            "alter_rc",
            "",
            "ALTER SEQUENCE fs NO MAXVALUE RESTART",
            "SELECT snowflake_sequence_register('fs')",
            "fs",
            "fschk",
        ),
        (
            "truncate_rc",
            "",
            "TRUNCATE tr RESTART IDENTITY",
            "SELECT snowflake_sequence_register_table('tr')",
            "tr_id_seq",
            "trchk",
        ),
        (
            "truncate_rr",
            "ISOLATION LEVEL REPEATABLE READ; INSERT INTO other VALUES (1)",
            "TRUNCATE tr RESTART IDENTITY",
            "SELECT snowflake_sequence_register_table('tr')",
            "tr_id_seq",
            "trchk",
        ),
    ] {
        let mut s = database(&c, db);
        s.batch_execute(
            "CREATE SEQUENCE fs; CREATE TABLE fschk (a int CHECK (nextval('fs') > 0));
             CREATE TABLE tr (id bigserial, v int); CREATE TABLE trchk (a int CHECK (nextval('tr_id_seq') > 0));
             INSERT INTO tr (v) SELECT generate_series(1, 5); CREATE TABLE other (x int);
             CREATE SEQUENCE already;",
        )
        .unwrap();
        if db.ends_with("_rr") {
            s.batch_execute("SELECT snowflake_sequence_register('already')").unwrap();
        }
        s.batch_execute(&format!("BEGIN {begin}; SELECT count(*) FROM tr")).unwrap();
        let registration = in_background_in(&c, db, register);
        // Long enough for a registration that does not wait to commit.
        thread::sleep(Duration::from_millis(1500));
        s.batch_execute(&format!("{ddl}; COMMIT")).unwrap();
        registration.join().unwrap().unwrap();
        assert_fenced(&mut connect_to(&c, db), seq, check);
    }
}

/// The same race the other way round: the DDL waits for the lock a
/// registration holds, and is judged when it has it, with the registration
/// committed: refused.
#[test]
fn ddl_waiting_behind_a_registration_is_judged_after_it_commits() {
    let c = cluster("seqddlwait");
    let mut s = c.session();
    s.batch_execute(
        "CREATE SEQUENCE fs; CREATE TABLE fschk (a int CHECK (nextval('fs') > 0));
         CREATE TABLE tr (id bigserial, v int); CREATE TABLE trchk (a int CHECK (nextval('tr_id_seq') > 0));
         INSERT INTO tr (v) SELECT generate_series(1, 5);",
    )
    .unwrap();
    // The first registration in the database, and another one after it.
    for (register, ddl, seq, check, refused) in [
        ("SELECT snowflake_sequence_register('fs')", "ALTER SEQUENCE fs NO MAXVALUE RESTART", "fs", "fschk", true),
        ("SELECT snowflake_sequence_register_table('tr')", "TRUNCATE tr RESTART IDENTITY", "tr_id_seq", "trchk", false),
    ] {
        s.batch_execute(&format!("BEGIN; {register}")).unwrap();
        let ddl_session = in_background(&c, ddl);
        wait_until_waiting(&c, ddl.split(' ').next().unwrap());
        s.batch_execute("COMMIT").unwrap();
        match ddl_session.join().unwrap() {
            Ok(()) => assert!(!refused, "{ddl} is refused on a registered sequence"),
            Err(e) => {
                assert!(refused, "{ddl}: {e}");
                assert_eq!(db_error(&e).0, "55000", "{e}");
            }
        }
        assert_fenced(&mut c.connect(), seq, check);
    }
}

/// Review finding 2: a REPEATABLE READ transaction that has written read the
/// registry with its own snapshot, and went on handing out snowflake IDs
/// after an unregistration committed, above where the native values
/// continued. Now every value after the unregistration is native and
/// continues upwards.
#[test]
fn an_unregistration_is_seen_by_a_repeatable_read_transaction_that_has_written() {
    let c = cluster("sequnregrr");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE u (id bigserial PRIMARY KEY, v int); CREATE TABLE other (x int);
         CREATE TABLE keep (id bigserial PRIMARY KEY); SELECT snowflake_sequence_register_table('keep');
         SELECT snowflake_sequence_register_table('u'); INSERT INTO u (v) VALUES (0);",
    )
    .unwrap();
    s.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; INSERT INTO other VALUES (7)").unwrap();
    let mut other = c.connect();
    other.batch_execute("SELECT snowflake_sequence_unregister('u_id_seq'); INSERT INTO u (v) VALUES (1)").unwrap();
    s.batch_execute("INSERT INTO u (v) VALUES (2); COMMIT; INSERT INTO u (v) VALUES (3)").unwrap();
    let ids: Vec<i64> = s.query("SELECT id FROM u ORDER BY v", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(ours(&mut s, ids[0]), "registered: a snowflake ID");
    for v in 1..=3 {
        assert!(!ours(&mut s, ids[v]), "v = {v}, after the unregistration: native");
        assert!(ids[v] > ids[0], "v = {v}: above every ID handed out");
    }
    assert_eq!((ids[2] - ids[1], ids[3] - ids[2]), (1, 1), "native values continue upwards: {ids:?}");
}

/// Review finding 3: in such a transaction a SQL function calling nextval
/// was inlined with native nextval after a registration elsewhere, and met
/// the fence.
#[test]
fn sql_functions_call_the_registered_sequence_in_repeatable_read_after_a_write() {
    let c = cluster("seqinlinerr");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE o (id bigserial PRIMARY KEY, v int); CREATE TABLE w (x int); CREATE SEQUENCE s2; CREATE SEQUENCE s4;
         CREATE FUNCTION f() RETURNS bigint LANGUAGE sql AS $$ SELECT nextval('o_id_seq') $$;
         SELECT snowflake_sequence_register_table('o');",
    )
    .unwrap();
    // A registration in the same transaction.
    s.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT snowflake_sequence_register('s2')").unwrap();
    let id: i64 = s.query_one("SELECT f()", &[]).unwrap().get(0);
    s.batch_execute("COMMIT").unwrap();
    assert!(ours(&mut s, id), "{id}");
    // One in another session while the transaction has written.
    s.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; INSERT INTO w VALUES (1)").unwrap();
    let registration = in_background(&c, "SELECT snowflake_sequence_register('s4')");
    thread::sleep(Duration::from_millis(1500));
    let id: i64 = s.query_one("SELECT f() FROM w", &[]).unwrap().get(0);
    s.batch_execute("COMMIT").unwrap();
    registration.join().unwrap().unwrap();
    assert!(ours(&mut s, id), "{id}");
}

/// What a writer returns: each ID with the server's clock (epoch seconds)
/// at its insert, and its errors.
type Written = (Vec<(i64, f64)>, Vec<String>);

/// A prepared transaction runs no statement any more: a registration does
/// not wait for it, unless it took values of the sequence (then the fence's
/// lock waits for it, as ALTER SEQUENCE does).
#[test]
fn a_prepared_transaction_does_not_hold_a_registration_up() {
    let c = Cluster::new("seqprepared", &[NODE[0], NODE[1], "max_prepared_transactions = 4"]);
    c.start();
    let mut s = c.session();
    s.batch_execute("CREATE TABLE other (x int); CREATE SEQUENCE free; CREATE SEQUENCE taken").unwrap();
    s.batch_execute("BEGIN; INSERT INTO other VALUES (1); PREPARE TRANSACTION 'unrelated'").unwrap();
    s.batch_execute("BEGIN; SELECT nextval('taken'); PREPARE TRANSACTION 'took'").unwrap();
    s.batch_execute("SET lock_timeout = '3s'; SELECT snowflake_sequence_register('free')").unwrap();
    let e = s.batch_execute("SELECT snowflake_sequence_register('taken')").expect_err("waits for 'took'");
    assert_eq!(db_error(&e).0, "55P03", "{e}");
    for sql in
        ["COMMIT PREPARED 'took'", "SELECT snowflake_sequence_register('taken')", "ROLLBACK PREPARED 'unrelated'"]
    {
        s.batch_execute(sql).unwrap();
    }
    for seq in ["free", "taken"] {
        let id: i64 = s.query_one(&format!("SELECT nextval('{seq}')"), &[]).unwrap().get(0);
        assert!(ours(&mut s, id), "{seq}: {id}");
    }
}

/// Clients inserting one row per transaction into `table` until stopped.
struct Writers {
    stop: Arc<AtomicBool>,
    handles: Vec<thread::JoinHandle<Written>>,
}

impl Writers {
    fn start(c: &Cluster, table: &str, clients: usize) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..clients)
            .map(|_| {
                let mut s = c.connect();
                let (stop, table) = (stop.clone(), table.to_string());
                thread::spawn(move || {
                    let insert = s
                        .prepare(&format!(
                            "INSERT INTO {table} (v) VALUES (1) RETURNING id, extract(epoch FROM clock_timestamp())::float8"
                        ))
                        .unwrap();
                    let (mut ids, mut errors) = (Vec::new(), Vec::new());
                    while !stop.load(Ordering::Relaxed) {
                        match s.query_one(&insert, &[]) {
                            Ok(row) => ids.push((row.get(0), row.get(1))),
                            Err(e) => errors.push(e.to_string()),
                        }
                    }
                    (ids, errors)
                })
            })
            .collect();
        Writers { stop, handles }
    }

    fn finish(self) -> Written {
        self.stop.store(true, Ordering::Relaxed);
        let (mut ids, mut errors) = (Vec::new(), Vec::new());
        for h in self.handles {
            let (i, e) = h.join().unwrap();
            ids.extend(i);
            errors.extend(e);
        }
        (ids, errors)
    }
}

/// Review findings 5 and 8: registering a sequence that clients use failed
/// with "RESTART value (X) cannot be greater than MAXVALUE (Y)" (its value
/// read before the ALTER's lock), and every statement in flight failed at the
/// fence. Now each registration succeeds, no client statement fails, and
/// every value handed out after a registration returned is a snowflake ID.
#[test]
fn registering_sequences_in_use_fails_neither_the_registration_nor_a_client() {
    let c = cluster("seqbusy");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE live (id bigserial PRIMARY KEY, v int);
         CREATE TABLE live_identity (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);",
    )
    .unwrap();
    for table in ["live", "live_identity"] {
        let writers = Writers::start(&c, table, 4);
        thread::sleep(Duration::from_millis(700));
        s.batch_execute(&format!("SELECT snowflake_sequence_register_table('{table}')")).unwrap();
        let registered: f64 = s.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[]).unwrap().get(0);
        thread::sleep(Duration::from_millis(700));
        let (ids, errors) = writers.finish();
        assert!(errors.is_empty(), "{table}: {} statements failed, first: {}", errors.len(), errors[0]);
        let after: Vec<i64> = ids.iter().filter(|(_, at)| *at > registered).map(|(id, _)| *id).collect();
        assert!(!after.is_empty(), "{table}: clients ran after the registration");
        let native = after.iter().filter(|id| !ours(&mut s, **id)).count();
        assert_eq!(native, 0, "{table}: native values after the registration returned");
        let count: i64 = s.query_one(&format!("SELECT count(*) FROM {table}"), &[]).unwrap().get(0);
        assert_eq!(count as usize, ids.len(), "{table}: every insert that returned is stored");
    }
}

/// Review finding 7: with `session_replication_role = replica` the
/// registry's triggers did not fire, other backends never learned of a
/// registration and failed at the fence.
#[test]
fn a_registration_made_in_replica_mode_is_seen_by_every_backend() {
    let c = cluster("seqreplica");
    let mut s = c.session();
    s.batch_execute("CREATE TABLE srr (id bigserial PRIMARY KEY, v int)").unwrap();
    let mut other = c.connect();
    let first: i64 = other.query_one("INSERT INTO srr (v) VALUES (0) RETURNING id", &[]).unwrap().get(0);
    assert!(!ours(&mut s, first));
    s.batch_execute("SET session_replication_role = replica; SELECT snowflake_sequence_register_table('srr')").unwrap();
    for v in 1..=2 {
        let id: i64 = other
            .query_one("INSERT INTO srr (v) VALUES ($1) RETURNING id", &[&v])
            .unwrap_or_else(|e| panic!("insert {v}: {e}"))
            .get(0);
        assert!(ours(&mut s, id), "{id}");
    }
    s.batch_execute("SELECT snowflake_sequence_unregister('srr_id_seq')").unwrap();
    let id: i64 = other.query_one("INSERT INTO srr (v) VALUES (3) RETURNING id", &[]).unwrap().get(0);
    assert!(!ours(&mut s, id), "unregistered in replica mode: native again ({id})");
}

/// The load test: pgbench, 8 clients with prepared statements,
/// inserting into a serial and an identity table while both are
/// registered, unregistered and registered again. No statement fails, no
/// ID is stored twice (primary keys), and every row inserted between a
/// registration's return and the next unregistration's start has a
/// snowflake ID of this server.
#[test]
fn pgbench_clients_lose_nothing_while_sequences_are_registered_and_unregistered() {
    let c = cluster("seqpgbench");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE live (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp(), v int);
         CREATE TABLE live_identity (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                                     at timestamptz NOT NULL DEFAULT clock_timestamp(), v int);",
    )
    .unwrap();
    let script = c.dir.join("live.sql");
    std::fs::write(
        &script,
        "INSERT INTO live (v) VALUES (:client_id);\nINSERT INTO live_identity (v) VALUES (:client_id);\n",
    )
    .unwrap();
    let port = c.port.to_string();
    let pgbench = bindir().join("pgbench");
    let bench = thread::spawn({
        let script = script.clone();
        move || {
            std::process::Command::new(pgbench)
                .args(["-n", "-M", "prepared", "-c", "8", "-j", "2", "-T", "12", "-h", "127.0.0.1", "-p", &port])
                .args(["-U", "postgres", "-f"])
                .arg(script)
                .arg("postgres")
                .output()
                .unwrap()
        }
    });
    // Registered windows: from a registration's return to the next unregistration's start.
    let mut windows = Vec::new();
    let now = |s: &mut postgres::Client| -> f64 {
        s.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[]).unwrap().get(0)
    };
    thread::sleep(Duration::from_secs(2));
    for _ in 0..3 {
        s.batch_execute(
            "SELECT snowflake_sequence_register_table('live'); SELECT snowflake_sequence_register_table('live_identity')",
        )
        .unwrap();
        let from = now(&mut s);
        thread::sleep(Duration::from_millis(1500));
        let to = now(&mut s);
        s.batch_execute("SELECT snowflake_sequence_unregister(sequence) FROM snowflake_sequences").unwrap();
        windows.push((from, to));
        thread::sleep(Duration::from_millis(700));
    }
    let out = bench.join().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "pgbench:\n{report}");
    assert!(!report.contains("aborted") && !report.contains("error"), "pgbench:\n{report}");
    for table in ["live", "live_identity"] {
        for (from, to) in &windows {
            let (rows, native): (i64, i64) = {
                let row = s
                    .query_one(
                        &format!(
                            "SELECT count(*), count(*) FILTER (WHERE d.datacenter_id <> 2 OR d.worker_id <> 5)
                             FROM {table}, snowflake_decode(id) d
                             WHERE extract(epoch FROM at)::float8 > $1 AND extract(epoch FROM at)::float8 < $2"
                        ),
                        &[from, to],
                    )
                    .unwrap();
                (row.get(0), row.get(1))
            };
            assert!(rows > 0, "{table}: rows were inserted while registered");
            assert_eq!(native, 0, "{table}: native values while registered ({rows} rows)");
        }
    }
}

/// Review of 0.7.0, finding 1: a logical replication apply worker replays a
/// TRUNCATE ... RESTART IDENTITY with PostgreSQL's own functions, past every
/// hook, and the subscriber's registered sequence restarted at 1. The fence
/// is now set again before such a transaction commits, and a transaction
/// that took native values after the reset fails: no row gets a small key.
#[test]
fn a_replicated_truncate_restart_identity_never_reopens_the_fence() {
    let publisher = Cluster::new("seqtrpub", &["wal_level = logical", NODE[0], "snowflake_id.worker_id = 6"]);
    let subscriber = Cluster::new("seqtrsub", &[NODE[0], NODE[1]]);
    publisher.start();
    subscriber.start();
    let mut p = publisher.session();
    let mut s = subscriber.session();
    p.batch_execute("CREATE TABLE t (id int PRIMARY KEY, v text); CREATE PUBLICATION pub FOR TABLE t").unwrap();
    s.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text, sid bigserial);
         SELECT snowflake_sequence_register_table('t');",
    )
    .unwrap();
    s.batch_execute(&format!(
        "CREATE SUBSCRIPTION sub CONNECTION 'host=127.0.0.1 port={} user=postgres dbname=postgres' PUBLICATION pub",
        publisher.port
    ))
    .unwrap();
    let fence: i64 =
        s.query_one("SELECT seqmax FROM pg_sequence WHERE seqrelid = 't_sid_seq'::regclass", &[]).unwrap().get(0);
    // The table synchronised (it is empty: a row would meet the fence, as
    // the docs say of defaults an apply worker fills).
    let deadline = Instant::now() + Duration::from_secs(60);
    let synchronising = "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'";
    while s.query_one(synchronising, &[]).unwrap().get::<_, i64>(0) > 0 {
        assert!(Instant::now() < deadline, "the table never synchronised:\n{}", subscriber.log());
        thread::sleep(Duration::from_millis(100));
    }
    // A TRUNCATE of its own transaction: the fence comes back with its commit.
    let before: i64 = s.query_one("SELECT pg_relation_filenode('t_sid_seq')::bigint", &[]).unwrap().get(0);
    p.batch_execute("TRUNCATE t RESTART IDENTITY").unwrap();
    let fenced = |s: &mut postgres::Client| -> bool {
        let row = s.query_one("SELECT last_value, is_called FROM t_sid_seq", &[]).unwrap();
        row.get::<_, i64>(0) == fence && row.get::<_, bool>(1)
    };
    // Replayed once the truncate is applied: wait for a relfilenode change.
    loop {
        let now: i64 = s.query_one("SELECT pg_relation_filenode('t_sid_seq')::bigint", &[]).unwrap().get(0);
        if now != before {
            break;
        }
        assert!(Instant::now() < deadline, "the TRUNCATE was not replayed");
        thread::sleep(Duration::from_millis(100));
    }
    assert!(fenced(&mut s), "the fence is set again when the replayed TRUNCATE commits");
    // A TRUNCATE and inserts in one transaction: the replayed transaction
    // takes native values after the reset, and fails at its commit.
    p.batch_execute("BEGIN; TRUNCATE t RESTART IDENTITY; INSERT INTO t VALUES (10, 'a'), (11, 'b'); COMMIT").unwrap();
    let reported = "handed out native values after it was reset";
    while !subscriber.log().contains(reported) {
        assert!(Instant::now() < deadline, "the apply worker's transaction did not fail:\n{}", subscriber.log());
        thread::sleep(Duration::from_millis(100));
    }
    let small: i64 = s.query_one("SELECT count(*) FROM t WHERE sid < 1000000", &[]).unwrap().get(0);
    assert_eq!(small, 0, "no row got a native key");
    assert!(fenced(&mut s), "the fence holds");
    // Each failed apply counted (the worker retries, so at least one).
    assert!(refused(&subscriber, "sequence_fence") >= 1);
    s.batch_execute("ALTER SUBSCRIPTION sub DISABLE").unwrap();
}

/// Review of 0.7.0, finding 6: registering a schema held one sequence's
/// lock while it waited for the next one's, and clients that use them in
/// the other order deadlocked (40P01). The locks are now taken all at once.
#[test]
fn registering_several_sequences_deadlocks_no_client() {
    let c = cluster("seqmanylocks");
    let mut s = c.session();
    s.batch_execute(
        "CREATE SCHEMA app;
         CREATE TABLE app.orders (id bigserial PRIMARY KEY, v int);
         CREATE TABLE app.lines (id bigserial PRIMARY KEY, v int);",
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|i| {
            let (mut w, stop) = (c.connect(), stop.clone());
            // Half the clients in each order.
            let tables = if i % 2 == 0 { ["app.lines", "app.orders"] } else { ["app.orders", "app.lines"] };
            thread::spawn(move || {
                let mut errors = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let sql = format!(
                        "BEGIN; INSERT INTO {} (v) VALUES (1); SELECT pg_sleep(0.01); INSERT INTO {} (v) VALUES (1); COMMIT",
                        tables[0], tables[1]
                    );
                    if let Err(e) = w.batch_execute(&sql) {
                        errors.push(e.to_string());
                        let _ = w.batch_execute("ROLLBACK");
                    }
                }
                errors
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(500));
    s.batch_execute("SELECT snowflake_sequence_register_schema('app')").unwrap();
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let errors: Vec<String> = clients.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert!(errors.is_empty(), "{} client transactions failed, first: {}", errors.len(), errors[0]);
    let registered: i64 = s.query_one("SELECT count(*) FROM snowflake_sequences", &[]).unwrap().get(0);
    assert_eq!(registered, 2);
}

/// Review of 0.7.0, finding 5: plans that name no relation (a generic plan
/// of `nextval($1)`, a PL/pgSQL trigger's dynamic call) cached before the
/// first registration of a database were never made again, and met the
/// fence. A registration now resets every cached plan of the database.
#[test]
fn plans_that_name_no_relation_are_made_again_at_a_registration() {
    let c = cluster("seqgeneric");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY, v int); CREATE SEQUENCE t_id_seq;
         CREATE FUNCTION gen_id() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN NEW.id := nextval(TG_TABLE_NAME || '_id_seq'); RETURN NEW; END $$;
         CREATE TRIGGER gen BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION gen_id();",
    )
    .unwrap();
    let mut a = c.connect();
    a.batch_execute(
        "SET plan_cache_mode = force_generic_plan; PREPARE p(regclass) AS SELECT nextval($1);
         INSERT INTO t (v) VALUES (1); EXECUTE p('t_id_seq');",
    )
    .unwrap();
    s.batch_execute("SELECT snowflake_sequence_register('t_id_seq')").unwrap();
    let id: i64 = a.query_one("INSERT INTO t (v) VALUES (2) RETURNING id", &[]).unwrap().get(0);
    assert!(ours(&mut s, id), "the trigger's call: {id}");
    let id: i64 = a.query_one("EXECUTE p('t_id_seq')", &[]).unwrap().get(0);
    assert!(ours(&mut s, id), "the generic plan: {id}");
}

/// Review of 0.7.0, finding 3: after an unregistration, currval and lastval
/// returned the last native value (a row of long ago) instead of the
/// snowflake ID the session was handed; and after a registration, currval of
/// a native value the session took before failed.
#[test]
fn currval_and_lastval_return_what_the_session_was_handed() {
    let c = cluster("seqcurrval");
    let mut s = c.session();
    s.batch_execute("CREATE TABLE t (id bigserial PRIMARY KEY, v int)").unwrap();
    s.batch_execute("CREATE SEQUENCE other").unwrap();
    let mut a = c.connect();
    let mine: i64 = s.query_one("INSERT INTO t (v) VALUES (0) RETURNING id", &[]).unwrap().get(0);
    let other: i64 = s.query_one("SELECT nextval('other')", &[]).unwrap().get(0);
    let native: i64 = a.query_one("INSERT INTO t (v) VALUES (1) RETURNING id", &[]).unwrap().get(0);
    s.batch_execute("SELECT snowflake_sequence_register_table('t')").unwrap();
    let current: i64 = a.query_one("SELECT currval('t_id_seq')", &[]).unwrap().get(0);
    assert_eq!(current, native, "a value taken before the registration");
    // The registering session's own: the fence's setval is no value it took.
    let row = s.query_one("SELECT currval('t_id_seq'), lastval()", &[]).unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (mine, other), "the registering session's");
    let mut fresh = c.connect();
    fresh.batch_execute("CREATE SEQUENCE untouched; SELECT snowflake_sequence_register('untouched')").unwrap();
    let (code, message, _) = db_error(&fresh.batch_execute("SELECT currval('untouched')").unwrap_err());
    assert_eq!(code, "55000", "currval before any nextval, in the session that registered: {message}");
    let id: i64 = a.query_one("INSERT INTO t (v) VALUES (2) RETURNING id", &[]).unwrap().get(0);
    s.batch_execute("SELECT snowflake_sequence_unregister('t_id_seq')").unwrap();
    let (current, last): (i64, i64) = {
        let row = a.query_one("SELECT currval('t_id_seq'), lastval()", &[]).unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((current, last), (id, id), "the snowflake ID handed out, after the unregistration");
}

/// Fourth review of 0.7.0: DROP EXTENSION read the registry before any
/// lock, so a registration committing meanwhile slipped past its refusal.
/// It now waits for registrations in progress, then decides.
#[test]
fn drop_extension_waits_for_a_registration_in_progress() {
    let c = cluster("seqdropwait");
    c.session().batch_execute("CREATE SEQUENCE s").unwrap();
    let mut holder = c.connect();
    holder.batch_execute("BEGIN; SELECT 1").unwrap();
    let mut registering = c.connect();
    let registration = thread::spawn(move || {
        registering.batch_execute("SELECT snowflake_sequence_register('s')").map_err(|e| db_error(&e))
    });
    let mut watcher = c.connect();
    let waiting = |w: &mut postgres::Client, like: &str| -> bool {
        let q = format!("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '{like}'");
        w.query_one(&q, &[]).unwrap().get::<_, i64>(0) > 0
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !waiting(&mut watcher, "%register%") {
        assert!(Instant::now() < deadline, "the registration never waited");
        thread::sleep(Duration::from_millis(50));
    }
    let mut dropper = c.connect();
    let dropping =
        thread::spawn(move || dropper.batch_execute("DROP EXTENSION snowflake_id").map_err(|e| db_error(&e)));
    while !waiting(&mut watcher, "DROP EXTENSION%") {
        assert!(Instant::now() < deadline, "DROP EXTENSION never waited for the registration");
        thread::sleep(Duration::from_millis(50));
    }
    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(registration.join().unwrap(), Ok(()));
    let refused = dropping.join().unwrap().expect_err("DROP EXTENSION went through");
    assert_eq!(refused.0, "2BP01", "{}", refused.1);
}
