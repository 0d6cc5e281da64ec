//! The replication guard: two servers with one (datacenter, worker) number
//! can repeat each other's IDs, and `snowflake_guard(table)` catches that
//! where their rows meet, in logical replication.
//!
//! `SELECT snowflake_guard('public.t'::regclass)` creates the row trigger
//! `snowflake_id_guard` on the table and enables it as a REPLICA trigger, so
//! it fires only in apply workers, never for local writes. For each applied
//! INSERT (and UPDATE that changes the ID) generated since the guard was
//! armed, it reports
//!   (a) an ID that carries this server's own number: another server uses it;
//!   (b) one number from two servers whose IDs interleave (an aggregator). A
//!       server is what its publisher answers to IDENTIFY_SYSTEM: system
//!       identifier and timeline, whatever the subscription, publication,
//!       database or replication origin its rows arrive through.
//! `snowflake_id.guard_action` (reload) is `error` (the apply fails and
//! retries; nothing is stored) or `warning` (the row is stored), and
//! `snowflake_status()` counts the clashes (`guard_clashes`, `last_clash`,
//! `last_clash_at`).
//!
//! Each test builds its own servers. Every server gets `wal_level = logical`
//! (needed where it publishes, harmless elsewhere) and its numbers written out;
//! subscriptions are made with `copy_data = false` unless a test says
//! otherwise: the slot is created by CREATE SUBSCRIPTION itself, so every row
//! inserted after it returns is streamed, and there is no initial table sync
//! to wait for. The table of verified topologies in docs/guard.md links each test.

mod common;

use std::fs;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::Cluster;

/// Settings of a server that may publish.
const LOGICAL: [&str; 3] = ["wal_level = logical", "max_replication_slots = 10", "max_wal_senders = 10"];

/// The table every server has; `v` says where (and whether) a row was written or changed.
const TABLE: &str = "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), v text)";

/// How long a few rows may take to be applied (an apply worker that failed
/// restarts after wal_retrieve_retry_interval, 5 s).
const SHORT: Duration = Duration::from_secs(60);

/// How long hundreds of thousands of rows may take to be applied, on a small CI machine.
const LONG: Duration = Duration::from_secs(600);

// The guard's messages, matched by fragments kept here, so that a change of
// wording is a change in one place. In full:
//   snowflake_id number (datacenter D, worker W) of this server arrives from subscription "SUB" in table "public.t"
//   snowflake_id number (datacenter D, worker W) arrives from two servers in table "public.t"
//     DETAIL: The applied ID N arrives through subscription "SUB" from the server with system identifier S
//     (timeline T), among IDs of that number from L to H that arrived from the server with system identifier S2
//     (timeline T2) (since this server started): ...

/// In every clash message, of either kind.
const CLASH: &str = "snowflake_id number (";

/// In the message of a number from two servers.
const TWO_SERVERS: &str = "arrives from two servers";

/// The table every message here names.
const IN_TABLE_T: &str = "\"public.t\"";

/// The number a message names.
fn number(datacenter: i32, worker: i32) -> String {
    format!("(datacenter {datacenter}, worker {worker})")
}

/// A row with this server's own number arrived through `subscription`.
fn own_number_from(subscription: &str) -> String {
    format!("of this server arrives from subscription \"{subscription}\"")
}

/// A server as a clash report names it: its system identifier and timeline.
fn server(c: &Cluster) -> String {
    let (system, timeline): (i64, i32) = {
        let row = c.connect().query_one("SELECT system_identifier, timeline FROM snowflake_status()", &[]).unwrap();
        (row.get(0), row.get(1))
    };
    format!("the server with system identifier {} (timeline {timeline})", system as u64)
}

// ---------------------------------------------------------------------------
// Servers, publications and subscriptions

/// A started server with snowflake_id, the numbers (`datacenter`, `worker`),
/// the logical replication settings, `extra` settings, and the table `t`.
fn node(name: &str, datacenter: i32, worker: i32, extra: &[&str]) -> Cluster {
    let dc = format!("snowflake_id.datacenter_id = {datacenter}");
    let w = format!("snowflake_id.worker_id = {worker}");
    let mut settings: Vec<&str> = LOGICAL.to_vec();
    settings.push(&dc);
    settings.push(&w);
    settings.extend_from_slice(extra);
    let c = Cluster::new(name, &settings);
    c.start();
    c.session().batch_execute(TABLE).unwrap();
    c
}

/// A connection string for `c`, as a subscriber (or pg_createsubscriber) uses it.
fn conninfo(c: &Cluster) -> String {
    format!("host=127.0.0.1 port={} user=postgres dbname=postgres", c.port)
}

/// Publishes `t` on `publisher` as `publication`.
fn publish(publisher: &Cluster, publication: &str) {
    publisher.connect().batch_execute(&format!("CREATE PUBLICATION {publication} FOR TABLE t")).unwrap();
}

/// Subscribes `subscriber` to `publication` on `publisher` as `name`, with
/// `copy_data = false` and `options` (such as `origin = none`).
fn subscribe(subscriber: &Cluster, name: &str, publisher: &Cluster, publication: &str, options: &[&str]) {
    let with: Vec<&str> = std::iter::once("copy_data = false").chain(options.iter().copied()).collect();
    let sql = format!(
        "CREATE SUBSCRIPTION {name} CONNECTION '{}' PUBLICATION {publication} WITH ({})",
        conninfo(publisher),
        with.join(", ")
    );
    subscriber.connect().batch_execute(&sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Arms the guard on `t` (its ID column: the single-column bigint primary key)
/// and checks that the trigger it made fires only in apply workers.
fn arm_guard(c: &Cluster) {
    // Through the simple protocol, whatever the function returns.
    let sql = "SELECT snowflake_guard('public.t'::regclass)";
    c.connect().batch_execute(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let enabled: String = c.one(
        "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = 'public.t'::regclass AND tgname = 'snowflake_id_guard'",
    );
    assert_eq!(enabled, "R", "the guard is an ENABLE REPLICA trigger");
}

/// Inserts `n` rows with generated IDs into `t` on `c`, all with `v`.
fn insert(c: &Cluster, n: i64, v: &str) {
    c.connect().execute("INSERT INTO t (v) SELECT $1::text FROM generate_series(1, $2::bigint)", &[&v, &n]).unwrap();
}

/// The number of rows of `t` on `c` that match `filter`.
fn rows(c: &Cluster, filter: &str) -> i64 {
    c.one(&format!("SELECT count(*) FROM t WHERE {filter}"))
}

/// The rows of `t` on `c` that match `filter` (which may use `d`, the decoded
/// ID), summed up: their number, the sum of their IDs and how many were updated.
/// Two servers with the same rows give the same string.
fn fingerprint(c: &Cluster, filter: &str) -> String {
    c.one(&format!(
        "SELECT format('%s rows, id sum %s, %s updated',
                       count(*), coalesce(sum(t.id), 0), count(*) FILTER (WHERE t.v LIKE '%updated%'))
         FROM t, snowflake_decode(t.id) d WHERE {filter}"
    ))
}

/// The guard's counters in `snowflake_status()`.
#[derive(Debug)]
struct GuardStatus {
    clashes: i64,
    evidence: i64,
    last_clash: Option<String>,
    last_clash_at_set: bool,
}

fn guard_status(c: &Cluster) -> GuardStatus {
    let row = c
        .connect()
        .query_one(
            "SELECT guard_clashes, guard_evidence, last_clash, last_clash_at IS NOT NULL FROM snowflake_status()",
            &[],
        )
        .unwrap();
    GuardStatus { clashes: row.get(0), evidence: row.get(1), last_clash: row.get(2), last_clash_at_set: row.get(3) }
}

/// Asserts that `c` has seen no clash: none counted, none logged since `mark`.
fn assert_no_clash(c: &Cluster, mark: usize) {
    let status = guard_status(c);
    assert_eq!(status.clashes, 0, "{status:?}");
    assert!(status.last_clash.is_none() && !status.last_clash_at_set, "{status:?}");
    let log = log_since(c, mark);
    assert!(!log.contains(CLASH), "a clash was logged:\n{log}");
}

/// What `pg_config` of the installation under test says for `option`.
fn pg_config_value(option: &str) -> String {
    let out = Command::new(common::pg_config()).arg(option).output().expect("pg_config runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The major version of the PostgreSQL under test.
fn pg_major() -> u32 {
    common::installed_major().parse().expect("a major version")
}

// ---------------------------------------------------------------------------
// Waiting, and server logs

/// Polls `done` until it holds; after `timeout`, fails, showing the end of the
/// logs of `clusters`.
fn wait_until(what: &str, timeout: Duration, clusters: &[&Cluster], mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting until {what}\n{}", log_tails(clusters));
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Where `c`'s log ends now: what it logs from here on is `log_since(c, mark)`.
fn log_mark(c: &Cluster) -> usize {
    fs::metadata(c.log_path()).map(|m| m.len() as usize).unwrap_or(0)
}

/// What `c` logged after `mark`.
fn log_since(c: &Cluster, mark: usize) -> String {
    let bytes = fs::read(c.log_path()).unwrap_or_default();
    String::from_utf8_lossy(bytes.get(mark..).unwrap_or_default()).into_owned()
}

/// The lines of `log` at `level` (`ERROR`, `WARNING`) that hold every fragment.
fn lines_with(log: &str, level: &str, fragments: &[&str]) -> Vec<String> {
    let tag = format!("{level}:  ");
    log.lines().filter(|l| l.contains(&tag) && fragments.iter().all(|f| l.contains(f))).map(String::from).collect()
}

/// Waits until `c` logs after `mark` a line at `level` that holds every
/// fragment, and returns it.
fn wait_for_log(c: &Cluster, mark: usize, level: &str, fragments: &[&str]) -> String {
    let mut found = None;
    wait_until(&format!("the log has a {level} with {fragments:?}"), SHORT, &[c], || {
        found = lines_with(&log_since(c, mark), level, fragments).into_iter().next();
        found.is_some()
    });
    found.unwrap()
}

/// The last lines of each cluster's log, for a failure message.
fn log_tails(clusters: &[&Cluster]) -> String {
    clusters
        .iter()
        .map(|c| {
            let log = c.log();
            let lines: Vec<&str> = log.lines().collect();
            format!(
                "--- {} (last lines)\n{}",
                c.log_path().display(),
                lines[lines.len().saturating_sub(40)..].join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------
// The tests

/// A subscriber configured with its publisher's number (a copied
/// postgresql.conf, say) receives IDs it could generate itself: the apply
/// stops at the first such row, until the guard is told to only warn.
#[test]
fn a_subscriber_with_its_publishers_number_stops_the_apply() {
    let publisher = node("publisher", 1, 1, &[]);
    let subscriber = node("subscriber", 1, 1, &[]);
    publish(&publisher, "pub");
    subscribe(&subscriber, "sub_a", &publisher, "pub", &[]);
    arm_guard(&subscriber);

    // guard_action = error (the default): the apply worker fails on the row,
    // restarts, and fails again; the row is never stored.
    let mark = log_mark(&subscriber);
    insert(&publisher, 1, "from the publisher");
    let own = own_number_from("sub_a");
    let line = wait_for_log(&subscriber, mark, "ERROR", &[&own, &number(1, 1), IN_TABLE_T]);
    assert_eq!(rows(&subscriber, "true"), 0, "the row was stored despite: {line}");
    let retry = log_mark(&subscriber);
    wait_for_log(&subscriber, retry, "ERROR", &[&own]);
    assert_eq!(rows(&subscriber, "true"), 0, "the row was stored on a retry");
    let status = guard_status(&subscriber);
    assert!(status.clashes >= 1, "{status:?}");
    assert!(status.last_clash.as_deref().is_some_and(|m| m.contains(&own)), "{status:?}");
    assert!(status.last_clash_at_set, "{status:?}");
    // Its text names tables, subscriptions and other servers: hidden, like
    // state_file, from roles that may not see the server's settings.
    let mut plain = subscriber.connect();
    plain.batch_execute("CREATE ROLE clash_reader; SET ROLE clash_reader").unwrap();
    let row = plain
        .query_one("SELECT guard_clashes, last_clash, last_clash_at IS NOT NULL FROM snowflake_status()", &[])
        .unwrap();
    let (clashes, text, at): (i64, Option<String>, bool) = (row.get(0), row.get(1), row.get(2));
    assert!(clashes >= 1 && text.is_none() && at, "{clashes} {text:?} {at}");
    // A monitoring role (pg_monitor) reads it, and every row so far was a stop.
    plain.batch_execute("RESET ROLE; CREATE ROLE clash_monitor IN ROLE pg_monitor; SET ROLE clash_monitor").unwrap();
    let row =
        plain.query_one("SELECT guard_clashes, refused_by_guard, last_clash FROM snowflake_status()", &[]).unwrap();
    let (clashes, stops, text): (i64, i64, Option<String>) = (row.get(0), row.get(1), row.get(2));
    // A clash is counted under the guard lock, its stop after: a read between sees one more clash.
    assert!(stops >= 2 && (0..=1).contains(&(clashes - stops)), "{clashes} clashes, {stops} stops");
    assert!(text.is_some_and(|m| m.contains(&own)));
    drop(plain);

    // guard_action = warning, on a reload: the next retry stores the row and warns.
    let mark = log_mark(&subscriber);
    let mut s = subscriber.connect();
    s.batch_execute("ALTER SYSTEM SET snowflake_id.guard_action = 'warning'").unwrap();
    s.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until("the row arrives", SHORT, &[&subscriber], || rows(&subscriber, "v = 'from the publisher'") == 1);
    wait_for_log(&subscriber, mark, "WARNING", &[&own, &number(1, 1), IN_TABLE_T]);

    // A local insert, with the same number, is no business of the guard's.
    let before = guard_status(&subscriber).clashes;
    let mark = log_mark(&subscriber);
    insert(&subscriber, 1, "local");
    assert_eq!(guard_status(&subscriber).clashes, before, "a local insert counted as a clash");
    assert!(!log_since(&subscriber, mark).contains(CLASH), "a local insert was reported");
}

/// A partition between a publisher and a subscriber that shares its number,
/// during which the subscriber generates IDs of its own past the publisher's
/// held-back rows (the subscription disabled stands in for the cut link):
/// the rows refused as proof before the cut stay refused after it, and so do
/// the publisher's rows of the cut, as long as no row of the subscriber can
/// come back to it. With a publication of its own, its rows could: then
/// they are evidence, stored and counted.
#[test]
fn a_clash_proven_before_a_partition_stays_proven_after_it() {
    let publisher = node("cutpub", 1, 1, &[]);
    let subscriber = node("cutsub", 1, 1, &[]);
    publish(&publisher, "pub");
    subscribe(&subscriber, "sub_a", &publisher, "pub", &[]);
    arm_guard(&subscriber);
    let own = own_number_from("sub_a");

    let mark = log_mark(&subscriber);
    insert(&publisher, 1, "before the cut");
    wait_for_log(&subscriber, mark, "ERROR", &[&own]);
    subscriber.connect().batch_execute("ALTER SUBSCRIPTION sub_a DISABLE").unwrap();
    // The cut: the publisher goes on, then the subscriber issues IDs past
    // every one of them.
    insert(&publisher, 200, "during the cut");
    insert(&subscriber, 200, "local");
    let held_back: i64 = publisher.one("SELECT max(id) FROM t");
    let issued: i64 = subscriber.one("SELECT min(id) FROM t WHERE v = 'local'");
    assert!(held_back < issued, "the subscriber's IDs lie past the held-back rows");
    let mark = log_mark(&subscriber);
    subscriber.connect().batch_execute("ALTER SUBSCRIPTION sub_a ENABLE").unwrap();
    let line = wait_for_log(&subscriber, mark, "ERROR", &[&own]);
    let log = log_since(&subscriber, mark);
    assert!(log.contains("DETAIL:  The applied ID") && log.contains("already proven another server's"), "{log}");
    thread::sleep(Duration::from_secs(3));
    assert_eq!(rows(&subscriber, "v <> 'local'"), 0, "a held-back row was stored despite: {line}");

    // Rows of the subscriber may now leave it, and come back: evidence.
    subscriber.connect().batch_execute("CREATE PUBLICATION back FOR TABLE t").unwrap();
    let mark = log_mark(&subscriber);
    wait_until("the held-back rows below the subscriber's IDs are stored", SHORT, &[&subscriber], || {
        rows(&subscriber, "v = 'during the cut'") > 0
    });
    wait_for_log(&subscriber, mark, "WARNING", &[&own]);
}

/// A subscription that copies the rows already there (copy_data, the
/// default) applies them through a table synchronisation worker with an
/// origin of its own; they count as the subscription's, so its later rows,
/// and those of a second table synchronised apart, are no clash.
#[test]
fn a_subscription_that_copies_existing_rows_is_one_origin() {
    let a = node("copya", 1, 3, &[]);
    let c = node("copyc", 1, 9, &[]);
    a.connect().batch_execute("CREATE TABLE u (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), v text)").unwrap();
    c.connect().batch_execute("CREATE TABLE u (id bigint PRIMARY KEY, v text)").unwrap();
    insert(&a, 1000, "before");
    a.connect().batch_execute("INSERT INTO u (v) SELECT 'before' FROM generate_series(1, 1000)").unwrap();
    arm_guard(&c);
    c.connect().batch_execute("SELECT snowflake_guard('public.u')").unwrap();
    let mark = log_mark(&c);
    a.connect().batch_execute("CREATE PUBLICATION pub FOR TABLE t, u").unwrap();
    let sql = format!("CREATE SUBSCRIPTION sub_a CONNECTION '{}' PUBLICATION pub", conninfo(&a));
    c.connect().batch_execute(&sql).unwrap();
    wait_until("C has copied A's rows", SHORT, &[&c], || {
        rows(&c, "v = 'before'") == 1000 && c.one::<i64>("SELECT count(*) FROM u") == 1000
    });
    insert(&a, 1000, "after");
    wait_until("C has A's new rows", SHORT, &[&c], || rows(&c, "v = 'after'") == 1000);
    assert_no_clash(&c, mark);
}

/// Two publishers with one number (A and B, worker 5) feed an aggregator (C,
/// worker 9): their IDs are not C's, but the number comes from two servers.
/// It is caught as soon as their IDs interleave at C: A's rows, then B's
/// (which could be a server that took the number over), then A's again.
#[test]
fn two_publishers_with_one_number_are_caught_at_the_aggregator() {
    const ROWS: i64 = 3000;
    // Transactions larger than logical_decoding_work_mem are streamed, and
    // from PostgreSQL 16 on applied by parallel apply workers, which must
    // ask their publisher too.
    let small = "logical_decoding_work_mem = '64kB'";
    let a = node("a", 1, 5, &[small]);
    let b = node("b", 1, 5, &[small]);
    let c = node("c", 1, 9, &["snowflake_id.guard_action = 'warning'"]);
    let streaming: &[&str] = if pg_major() >= 16 { &["streaming = parallel"] } else { &["streaming = on"] };
    for (publisher, sub) in [(&a, "sub_a"), (&b, "sub_b")] {
        publish(publisher, "pub");
        subscribe(&c, sub, publisher, "pub", streaming);
    }
    arm_guard(&c);
    let mark = log_mark(&c);

    insert(&a, ROWS, "a1");
    wait_until("C has A's rows", SHORT, &[&c], || rows(&c, "v = 'a1'") == ROWS);
    insert(&b, ROWS, "b");
    wait_until("C has B's rows", SHORT, &[&c], || rows(&c, "v = 'b'") == ROWS);
    assert_no_clash(&c, mark);
    // A again: both generate with (1, 5) at once. Stored (warning), and reported.
    insert(&a, ROWS, "a2");
    wait_until("C has A's new rows", SHORT, &[&c], || rows(&c, "v = 'a2'") == ROWS);
    let line = wait_for_log(&c, mark, "WARNING", &[TWO_SERVERS, &number(1, 5), IN_TABLE_T]);
    assert!(!log_since(&c, mark).contains("could not ask the publisher"), "{}", log_since(&c, mark));
    let status = guard_status(&c);
    assert!(status.clashes > 0, "{status:?}");
    let last = status.last_clash.as_deref().unwrap_or_default();
    for fragment in [&server(&a), &server(&b), "through subscription \"sub_a\""] {
        assert!(last.contains(fragment), "{fragment:?} not in {last:?} ({line})");
    }

    // Fixed by removing B: its subscription is dropped, and A's rows, whose
    // IDs still lie around B's, are no clash any more, even with
    // guard_action = error (it would stop A's apply until a restart).
    let mut s = c.connect();
    s.batch_execute("DROP SUBSCRIPTION sub_b").unwrap();
    s.batch_execute("ALTER SYSTEM SET snowflake_id.guard_action = 'error'").unwrap();
    s.batch_execute("SELECT pg_reload_conf()").unwrap();
    let clashes = guard_status(&c).clashes;
    let mark = log_mark(&c);
    insert(&a, 100, "a3");
    wait_until("C has A's rows after B is gone", SHORT, &[&c], || rows(&c, "v = 'a3'") == 100);
    assert_eq!(guard_status(&c).clashes, clashes, "{}", log_since(&c, mark));
}

/// Three publishers with their own numbers into an aggregator with its own:
/// inserts, updates and deletes all arrive, and nothing is a clash. With
/// guard_action = error, a false clash would stop an apply, and the wait
/// for the aggregator to match would time out.
#[test]
fn distinct_numbers_never_clash() {
    const ROWS: i64 = 100_000;
    let publishers = [("a", 1, 1), ("b", 1, 2), ("c", 2, 1)];
    let publishers: Vec<(&str, i32, i32, Cluster)> =
        publishers.iter().map(|&(name, dc, w)| (name, dc, w, node(name, dc, w, &[]))).collect();
    let aggregator = node("aggregator", 3, 3, &[]);
    for (name, _, _, p) in &publishers {
        publish(p, "pub");
        subscribe(&aggregator, &format!("sub_{name}"), p, "pub", &[]);
    }
    arm_guard(&aggregator);
    let mark = log_mark(&aggregator);

    thread::scope(|s| {
        for (name, _, _, p) in &publishers {
            s.spawn(move || insert(p, ROWS, name));
        }
    });
    let all = ROWS * publishers.len() as i64;
    wait_until("the aggregator has every row", LONG, &[&aggregator], || rows(&aggregator, "true") == all);

    // Changes on each origin after its rows replicated: updates that keep the ID, and deletes.
    for (_, _, _, p) in &publishers {
        p.connect()
            .batch_execute("UPDATE t SET v = v || ' updated' WHERE id % 10 = 0; DELETE FROM t WHERE id % 10 = 5")
            .unwrap();
    }
    for (name, dc, w, p) in &publishers {
        let want = fingerprint(p, "true");
        let from_p = format!("(d.datacenter_id, d.worker_id) = ({dc}, {w})");
        wait_until(&format!("the aggregator matches {name}: {want}"), LONG, &[&aggregator], || {
            fingerprint(&aggregator, &from_p) == want
        });
    }
    assert_eq!(rows(&aggregator, "true"), publishers.iter().map(|p| rows(&p.3, "true")).sum::<i64>());
    assert_no_clash(&aggregator, mark);
}

/// Two servers that replicate to each other (PostgreSQL 16's `origin = none`)
/// each receive only the other's number: inserts on both sides, and updates
/// and deletes of the other side's rows, never clash.
#[test]
fn a_bidirectional_pair_never_clashes() {
    if pg_major() < 16 {
        eprintln!("skipped: origin = none needs PostgreSQL 16");
        return;
    }
    const ROWS: i64 = 100_000;
    let a = node("a", 1, 1, &[]);
    let b = node("b", 1, 2, &[]);
    publish(&a, "pub");
    publish(&b, "pub");
    subscribe(&a, "sub_from_b", &b, "pub", &["origin = none"]);
    subscribe(&b, "sub_from_a", &a, "pub", &["origin = none"]);
    arm_guard(&a);
    arm_guard(&b);
    let (mark_a, mark_b) = (log_mark(&a), log_mark(&b));

    thread::scope(|s| {
        s.spawn(|| insert(&a, ROWS, "a"));
        s.spawn(|| insert(&b, ROWS, "b"));
    });
    for n in [&a, &b] {
        wait_until("both sides have every row", LONG, &[&a, &b], || rows(n, "true") == 2 * ROWS);
    }

    // Each side changes the other's rows (disjoint sets, so no conflict).
    let change = |c: &Cluster, other: &str| {
        c.connect()
            .batch_execute(&format!(
                "UPDATE t SET v = v || ' updated' WHERE v = '{other}' AND id % 10 = 0;
                 DELETE FROM t WHERE v = '{other}' AND id % 10 = 5"
            ))
            .unwrap();
    };
    change(&a, "b");
    change(&b, "a");
    // Only A changed B's rows and only B changed A's: those sets are final where they were changed.
    let b_rows = fingerprint(&a, "t.v LIKE 'b%'");
    let a_rows = fingerprint(&b, "t.v LIKE 'a%'");
    wait_until("both sides converge", LONG, &[&a, &b], || {
        fingerprint(&b, "t.v LIKE 'b%'") == b_rows && fingerprint(&a, "t.v LIKE 'a%'") == a_rows
    });
    assert_eq!(fingerprint(&a, "true"), fingerprint(&b, "true"));
    assert_no_clash(&a, mark_a);
    assert_no_clash(&b, mark_b);
}

/// A chain A (worker 1) → B (worker 2) → C (worker 3): B publishes `t` with
/// the rows it applied from A (a subscription's default `origin = any`), so C
/// receives A's and B's rows, both from server B: one server may deliver
/// several numbers. No clash on B or C.
///
/// Not tested: if C also subscribed to A directly, A's rows would reach C
/// twice, from A and from B (which forwards them), and the guard would
/// report number (1, 1) arriving from two servers: such a topology also
/// applies every one of A's rows twice, which the primary key refuses.
#[test]
fn a_forwarding_chain_is_no_clash() {
    const ROWS: i64 = 1000;
    let a = node("a", 1, 1, &[]);
    let b = node("b", 1, 2, &[]);
    let c = node("c", 1, 3, &[]);
    publish(&a, "pub_a");
    subscribe(&b, "sub_b_from_a", &a, "pub_a", &[]);
    publish(&b, "pub_b");
    subscribe(&c, "sub_c_from_b", &b, "pub_b", &[]);
    arm_guard(&b);
    arm_guard(&c);
    let (mark_b, mark_c) = (log_mark(&b), log_mark(&c));

    insert(&a, ROWS, "a");
    insert(&b, ROWS, "b");
    let (from_a, from_b) = ("(d.datacenter_id, d.worker_id) = (1, 1)", "(d.datacenter_id, d.worker_id) = (1, 2)");
    wait_until("B has A's rows", SHORT, &[&b], || fingerprint(&b, from_a) == fingerprint(&a, "true"));
    let (want_a, want_b) = (fingerprint(&a, "true"), fingerprint(&b, from_b));
    wait_until("C has A's and B's rows", SHORT, &[&b, &c], || {
        fingerprint(&c, from_a) == want_a && fingerprint(&c, from_b) == want_b
    });
    assert_eq!(rows(&c, "true"), 2 * ROWS);
    assert_no_clash(&b, mark_b);
    assert_no_clash(&c, mark_c);
}

/// pg_createsubscriber (PostgreSQL 17) turns a physical standby into a
/// logical subscriber of its primary. The standby kept its primary's
/// postgresql.conf, number included, and the guard armed on the primary came
/// along in the copy: the first row the new subscriber applies carries its own
/// number, and stops the apply.
#[test]
fn pg_createsubscriber_turns_a_standby_into_a_subscriber_with_its_primarys_number() {
    if pg_major() < 17 {
        eprintln!("skipped: pg_createsubscriber is new in PostgreSQL 17");
        return;
    }
    let primary = node("primary", 1, 4, &[]);
    arm_guard(&primary);
    let standby = Cluster::standby_of(&primary, "standby", &[]);
    standby.start();
    standby.wait_for_replay_of(&primary);
    standby.stop();

    // pg_createsubscriber starts the stopped standby itself, on -p and a socket
    // in -s (no TCP), to recover up to a point, promote it and subscribe it;
    // it leaves it stopped. The recovery settings it writes carry every option
    // of its own libpq (17's `sslnegotiation`), and the walreceiver of PyPI's
    // PostgreSQL 17 loads the system's older libpq, which refuses them: the
    // installation's libdir comes first, so that the server it starts loads
    // the installation's libpq. (Harmless where the server already does.)
    let program = common::bindir().join("pg_createsubscriber");
    let library_path = format!("LD_LIBRARY_PATH={}", pg_config_value("--libdir"));
    let (data, dir, port) = (standby.data.display().to_string(), standby.dir.display().to_string(), standby.port);
    let out = standby.run_program(
        "env",
        &[
            &library_path,
            program.to_str().unwrap(),
            "-D",
            &data,
            "-P",
            &conninfo(&primary),
            "-d",
            "postgres",
            "--publication=pub_p",
            "--subscription=sub_p",
            "-p",
            &port.to_string(),
            "-s",
            &dir,
            "-U",
            "postgres",
            "-t",
            "120",
        ],
    );
    assert!(
        out.status.success(),
        "pg_createsubscriber:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    standby.start();
    assert_eq!(standby.one::<i32>("SELECT worker_id FROM snowflake_status()"), 4, "the primary's number");

    let mark = log_mark(&standby);
    insert(&primary, 1, "after the conversion");
    wait_for_log(&standby, mark, "ERROR", &[&own_number_from("sub_p"), &number(1, 4), IN_TABLE_T]);
    assert_eq!(rows(&standby, "true"), 0, "the row was stored");
    let status = guard_status(&standby);
    assert!(status.clashes >= 1, "{status:?}");
}

/// Connects to database `db` of `c`.
fn connect_to(c: &Cluster, db: &str) -> postgres::Client {
    postgres::Client::connect(&format!("host=127.0.0.1 port={} user=postgres dbname={db}", c.port), postgres::NoTls)
        .unwrap()
}

/// One publisher A (worker 5) with two publications, `p1` for `t` and `p2`
/// for `t2`, and an aggregator C that subscribes to both (`s1`, `s2`) and,
/// from a second database, to `p1` again (`s3`): A's number arrives through
/// three subscriptions, two tables and two databases, all from one server.
/// With guard_action = error, a false clash would stop an apply and the
/// waits would time out.
#[test]
fn one_publisher_through_several_publications_subscriptions_and_databases_is_one_server() {
    let a = node("multia", 1, 5, &[]);
    let c = node("multic", 1, 9, &[]);
    let t2 = "CREATE TABLE t2 (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), v text)";
    a.connect()
        .batch_execute(&format!("{t2}; CREATE PUBLICATION p1 FOR TABLE t; CREATE PUBLICATION p2 FOR TABLE t2"))
        .unwrap();
    c.connect().batch_execute(t2).unwrap();
    c.connect().batch_execute("CREATE DATABASE db2").unwrap();
    let mut db2 = connect_to(&c, "db2");
    db2.batch_execute(&format!("CREATE EXTENSION snowflake_id; {TABLE}")).unwrap();
    subscribe(&c, "s1", &a, "p1", &[]);
    subscribe(&c, "s2", &a, "p2", &[]);
    let sql = format!("CREATE SUBSCRIPTION s3 CONNECTION '{}' PUBLICATION p1 WITH (copy_data = false)", conninfo(&a));
    db2.batch_execute(&sql).unwrap();
    arm_guard(&c);
    c.connect().batch_execute("SELECT snowflake_guard('public.t2')").unwrap();
    db2.batch_execute("SELECT snowflake_guard('public.t')").unwrap();
    let mark = log_mark(&c);

    // Interleaved rounds, so that every path carries IDs among the others'.
    for round in 1..=5 {
        insert(&a, 20, &format!("r{round}"));
        a.connect()
            .execute("INSERT INTO t2 (v) SELECT $1 FROM generate_series(1, 20)", &[&format!("r{round}")])
            .unwrap();
    }
    let want = fingerprint(&a, "true");
    wait_until("C has every row of t, t2 and db2.t", SHORT, &[&a, &c], || {
        let t2_rows: i64 = c.one("SELECT count(*) FROM t2");
        let db2_rows: i64 = connect_to(&c, "db2").query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
        fingerprint(&c, "true") == want && t2_rows == 100 && db2_rows == 100
    });
    assert_no_clash(&c, mark);
}

/// PostgreSQL reuses a dropped subscription's replication-origin number: C
/// drops `s1` (to A, worker 5) after A's rows arrived, subscribes to B
/// (worker 6) as `sb`, which gets origin number 1 again, and then to A anew.
/// The rows of each arrive under whatever origin: the guard tells servers
/// apart, so nothing is a clash.
#[test]
fn a_reused_origin_number_names_the_server_behind_it_now() {
    let a = node("reusea", 1, 5, &[]);
    let b = node("reuseb", 1, 6, &[]);
    let c = node("reusec", 1, 9, &[]);
    publish(&a, "pub");
    publish(&b, "pub");
    subscribe(&c, "s1", &a, "pub", &[]);
    arm_guard(&c);
    let mark = log_mark(&c);
    let origin_of = |sub: &str| -> i32 {
        c.one(&format!(
            "SELECT o.roident::int FROM pg_replication_origin o, pg_subscription s \
             WHERE s.subname = '{sub}' AND o.roname = 'pg_' || s.oid"
        ))
    };
    let first = origin_of("s1");
    insert(&a, 100, "a1");
    wait_until("C has A's rows", SHORT, &[&c], || rows(&c, "v = 'a1'") == 100);
    c.connect().batch_execute("DROP SUBSCRIPTION s1").unwrap();
    subscribe(&c, "sb", &b, "pub", &[]);
    assert_eq!(origin_of("sb"), first, "PostgreSQL gave sb the origin number s1 had: the test cannot fail");
    insert(&b, 100, "b");
    wait_until("C has B's rows", SHORT, &[&c], || rows(&c, "v = 'b'") == 100);
    subscribe(&c, "s1new", &a, "pub", &[]);
    insert(&a, 100, "a2");
    insert(&b, 100, "b2");
    wait_until("C has everyone's new rows", SHORT, &[&c], || rows(&c, "v IN ('a2', 'b2')") == 200);
    assert_no_clash(&c, mark);
}

/// Two publishers whose tables kept their legacy keys (1, 3, 5, ... and 2,
/// 4, 6, ...: what a serial gave before `snowflake_adopt()`) feed an
/// aggregator numbered (0, 0), the number every legacy key below 4096
/// decodes to. The table synchronisation copies them all; then both go on
/// with snowflake IDs. Keys that are no IDs of the time since the guard was
/// armed are not judged: no clash, and no "own number". The epoch is half an
/// hour before the test (a go-live today), so that the keys' instants lie
/// well within a day of the arming.
#[test]
fn legacy_keys_are_not_taken_for_node_numbers() {
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let epoch = format!("snowflake_id.epoch = {}", now_ms - 1_800_000);
    let a = node("legacya", 1, 1, &[&epoch]);
    let b = node("legacyb", 1, 2, &[&epoch]);
    let c = node("legacyc", 0, 0, &[&epoch]);
    a.connect()
        .batch_execute("INSERT INTO t (id, v) SELECT 2 * n - 1, 'legacy' FROM generate_series(1, 3000) n")
        .unwrap();
    b.connect().batch_execute("INSERT INTO t (id, v) SELECT 2 * n, 'legacy' FROM generate_series(1, 3000) n").unwrap();
    arm_guard(&c);
    let mark = log_mark(&c);
    for (publisher, sub) in [(&a, "sla"), (&b, "slb")] {
        publish(publisher, "pub");
        // The default copy_data: the table synchronisation copies the legacy keys.
        let sql = format!("CREATE SUBSCRIPTION {sub} CONNECTION '{}' PUBLICATION pub", conninfo(publisher));
        c.connect().batch_execute(&sql).unwrap();
    }
    wait_until("C has both tables' legacy keys", SHORT, &[&c], || rows(&c, "v = 'legacy'") == 6000);
    insert(&a, 100, "a");
    insert(&b, 100, "b");
    insert(&a, 100, "a");
    wait_until("C has the new rows", SHORT, &[&c], || rows(&c, "v IN ('a', 'b')") == 300);
    assert_no_clash(&c, mark);
}

/// The publisher A fails over to its physical standby A2, which keeps A's
/// number (the deployment guide's failover: A is gone for good), and the
/// subscription is re-pointed at A2 (a slot made there, then ALTER
/// SUBSCRIPTION ... CONNECTION). A2 is A's system on the next timeline and
/// continues above A's IDs: no clash.
#[test]
fn failover_of_the_publisher_is_no_clash() {
    let a = node("failovera", 1, 5, &[]);
    let a2 = Cluster::standby_of(&a, "failovera2", &[]);
    a2.start();
    let c = node("failoverc", 1, 9, &[]);
    publish(&a, "pub");
    subscribe(&c, "sub", &a, "pub", &[]);
    arm_guard(&c);
    let mark = log_mark(&c);
    insert(&a, 100, "before");
    wait_until("C has A's rows", SHORT, &[&c], || rows(&c, "v = 'before'") == 100);
    a2.wait_for_replay_of(&a);
    a.stop_immediate();
    a2.promote();
    a2.wait_until_writable();
    a2.connect().batch_execute("SELECT pg_create_logical_replication_slot('sub', 'pgoutput')").unwrap();
    c.connect().batch_execute(&format!("ALTER SUBSCRIPTION sub CONNECTION '{}'", conninfo(&a2))).unwrap();
    insert(&a2, 100, "after");
    wait_until("C has A2's rows", SHORT, &[&c], || rows(&c, "v = 'after'") == 100);
    let promoted: i32 = a2.one("SELECT timeline FROM snowflake_status()");
    assert_eq!(promoted, 2, "A2 is A's system on the next timeline");
    assert_no_clash(&c, mark);
}

/// Split brain: A's standby A2 is promoted while A keeps running, both with
/// A's number, and C subscribes to both. A2 continues above what it
/// replayed of A; A goes on at its clock: once A2's rows have reached C, A's
/// next ones interleave with them, and the guard names one system on two
/// timelines.
#[test]
fn split_brain_is_caught() {
    let a = node("splita", 1, 5, &[]);
    let a2 = Cluster::standby_of(&a, "splita2", &[]);
    a2.start();
    let c = node("splitc", 1, 9, &["snowflake_id.guard_action = 'warning'"]);
    publish(&a, "pub");
    subscribe(&c, "sub_old", &a, "pub", &[]);
    arm_guard(&c);
    let mark = log_mark(&c);
    insert(&a, 10, "old");
    wait_until("C has A's rows", SHORT, &[&c], || rows(&c, "v = 'old'") == 10);
    a2.wait_for_replay_of(&a);
    a2.promote();
    a2.wait_until_writable();
    subscribe(&c, "sub_new", &a2, "pub", &[]);
    // A's clock passes the mark A2 replayed (a mark's window ahead of A's IDs).
    thread::sleep(Duration::from_millis(1500));
    insert(&a2, 10, "new");
    wait_until("C has A2's rows", SHORT, &[&c], || rows(&c, "v = 'new'") == 10);
    assert_no_clash(&c, mark);
    insert(&a, 10, "old again");
    wait_until("C has A's new rows", SHORT, &[&c], || rows(&c, "v = 'old again'") == 10);
    wait_for_log(&c, mark, "WARNING", &[TWO_SERVERS, &number(1, 5), IN_TABLE_T]);
    let last = guard_status(&c).last_clash.unwrap_or_default();
    assert!(last.contains("split brain"), "{last}");
    assert!(last.contains(&server(&a)) && last.contains(&server(&a2)), "{last}");
}

/// A subscription between two databases of one cluster applies the server's
/// own rows, with its own number: no clash (the publisher is this server).
#[test]
fn a_subscription_within_one_cluster_is_no_clash() {
    let c = node("selfsub", 1, 3, &[]);
    let mut admin = c.connect();
    admin.batch_execute("CREATE PUBLICATION pubself FOR TABLE t").unwrap();
    // Within one cluster, CREATE SUBSCRIPTION cannot make its slot itself.
    admin.batch_execute("SELECT pg_create_logical_replication_slot('selfsub', 'pgoutput')").unwrap();
    admin.batch_execute("CREATE DATABASE db2").unwrap();
    let mut db2 = connect_to(&c, "db2");
    db2.batch_execute(&format!("CREATE EXTENSION snowflake_id; {TABLE}; SELECT snowflake_guard('public.t')")).unwrap();
    let sql = format!(
        "CREATE SUBSCRIPTION selfsub CONNECTION '{}' PUBLICATION pubself \
         WITH (create_slot = false, slot_name = 'selfsub', copy_data = false)",
        conninfo(&c)
    );
    db2.batch_execute(&sql).unwrap();
    let mark = log_mark(&c);
    insert(&c, 100, "own");
    wait_until("db2 has the rows", SHORT, &[&c], || {
        connect_to(&c, "db2").query_one("SELECT count(*) FROM t", &[]).unwrap().get::<_, i64>(0) == 100
    });
    assert_no_clash(&c, mark);
}

/// Rows of this server's own number that it issued itself come back to it:
/// A (worker 7) guards and publishes `t`; P (worker 8) copies it, stops
/// subscribing and publishes `t`; A empties `t` and copies it back from P.
/// That is how a table is re-seeded; 0.5.0 refused the copy for ever. A's
/// own IDs below where its IDs end are no proof of another server: stored,
/// warned about and counted, whatever guard_action says.
#[test]
fn own_rows_coming_back_in_a_copy_are_no_clash() {
    let a = node("reseeda", 1, 7, &[]);
    let p = node("reseedp", 1, 8, &[]);
    arm_guard(&a);
    insert(&a, 50, "a");
    publish(&a, "puba");
    let sql = format!("CREATE SUBSCRIPTION sub_a CONNECTION '{}' PUBLICATION puba", conninfo(&a));
    p.connect().batch_execute(&sql).unwrap();
    wait_until("P has copied A's rows", SHORT, &[&p], || rows(&p, "v = 'a'") == 50);
    p.connect().batch_execute("DROP SUBSCRIPTION sub_a").unwrap();
    publish(&p, "pubp");
    a.connect().batch_execute("TRUNCATE t").unwrap();
    let mark = log_mark(&a);
    let sql = format!("CREATE SUBSCRIPTION sub_p CONNECTION '{}' PUBLICATION pubp", conninfo(&p));
    a.connect().batch_execute(&sql).unwrap();
    wait_until("A has its rows back", SHORT, &[&a, &p], || rows(&a, "v = 'a'") == 50);
    let log = log_since(&a, mark);
    assert!(lines_with(&log, "ERROR", &[CLASH]).is_empty(), "the copy was stopped:\n{log}");
    wait_for_log(&a, mark, "WARNING", &[&own_number_from("sub_p"), &number(1, 7)]);
    assert!(log_since(&a, mark).contains("may be one of this server's own rows coming back"));
    // Counted as evidence, which pages for nothing; no clash, no report.
    let status = guard_status(&a);
    assert!(status.evidence >= 1 && status.clashes == 0 && status.last_clash.is_none(), "{status:?}");
    // P's own rows go on arriving.
    insert(&p, 10, "p");
    wait_until("A has P's new rows", SHORT, &[&a, &p], || rows(&a, "v = 'p'") == 10);
}

/// A pglogical or Spock provider reached through two subscriptions: rows of
/// one provider under two replication origins of another system's naming
/// (applied with session_replication_role = replica, as their apply
/// workers do), whose IDs interleave. Those origins do not say which server
/// they are, so this is no proof: 0.5.0 stopped the apply ("arrives from two
/// servers"); now the rows are stored and the finding counted.
#[test]
fn two_origins_of_another_system_are_no_proof() {
    let c = node("pglc", 1, 9, &[]);
    arm_guard(&c);
    let mark = log_mark(&c);
    let mut s = c.connect();
    s.batch_execute(
        "SELECT pg_replication_origin_create('pgl_provider_set1'), pg_replication_origin_create('pgl_provider_set2');
         SET session_replication_role = replica",
    )
    .unwrap();
    // IDs of (datacenter 1, worker 5) at now, +10 ms and +20 ms, as the provider generated them.
    let id_at = |ms: i32| {
        format!(
            "snowflake_from_timestamp(clock_timestamp() + interval '{ms} ms') | (1::bigint << 17) | (5::bigint << 12)"
        )
    };
    for (origin, ms) in [("pgl_provider_set1", 0), ("pgl_provider_set2", 10), ("pgl_provider_set1", 20)] {
        let sql = format!(
            "SELECT pg_replication_origin_session_setup('{origin}');
             INSERT INTO t (id, v) SELECT {}, '{origin}';
             SELECT pg_replication_origin_session_reset();",
            id_at(ms)
        );
        s.batch_execute(&sql).unwrap_or_else(|e| panic!("{origin}: {e:?}\n{}", log_since(&c, mark)));
    }
    assert_eq!(rows(&c, "v LIKE 'pgl_provider_set%'"), 3, "every row stored");
    let line = wait_for_log(&c, mark, "WARNING", &[TWO_SERVERS, &number(1, 5)]);
    let log = log_since(&c, mark);
    assert!(log.contains("no proof of a clash"), "{line}\n{log}");
    let status = guard_status(&c);
    assert!(status.evidence >= 1 && status.clashes == 0 && status.last_clash.is_none(), "{status:?}");
}

/// A coordinated column rename (on the publisher and the subscriber, valid
/// for logical replication): the guard follows its column by number, as the
/// trigger's UPDATE OF column does. 0.5.0 looked it up by its old name and
/// failed every apply with "column \"id\" checked by snowflake_id_guard is
/// no bigint column".
#[test]
fn the_guard_follows_a_renamed_column() {
    let a = node("renamea", 1, 5, &[]);
    let c = node("renamec", 1, 9, &[]);
    publish(&a, "pub");
    subscribe(&c, "sub_a", &a, "pub", &[]);
    arm_guard(&c);
    insert(&a, 10, "before");
    wait_until("C has A's rows", SHORT, &[&a, &c], || rows(&c, "v = 'before'") == 10);
    for server in [&c, &a] {
        server.connect().batch_execute("ALTER TABLE t RENAME COLUMN id TO tid").unwrap();
    }
    let mark = log_mark(&c);
    insert(&a, 10, "after");
    wait_until("C has A's rows after the rename", SHORT, &[&a, &c], || rows(&c, "v = 'after'") == 10);
    assert!(!log_since(&c, mark).contains("checked by snowflake_id_guard"), "{}", log_since(&c, mark));
    // Still checked: a row with C's own number, which C never issued, stops the apply.
    let own =
        "snowflake_from_timestamp(clock_timestamp() + interval '1 minute') | (1::bigint << 17) | (9::bigint << 12)";
    a.connect().batch_execute(&format!("INSERT INTO t (tid, v) SELECT {own}, 'own'")).unwrap();
    wait_for_log(&c, mark, "ERROR", &[&own_number_from("sub_a"), &number(1, 9)]);
    assert_eq!(rows(&c, "v = 'own'"), 0);
}

/// PostgreSQL 19's subscriptions through a foreign server and a user mapping
/// (`CREATE SUBSCRIPTION ... SERVER`) keep no connection string in the
/// catalog; the guard builds it as the apply worker does. 0.5.0 could not
/// ask such a publisher who it is, so two publishers with one number, one
/// of them behind such a subscription, went unseen.
#[test]
fn a_subscription_through_a_foreign_server_names_its_publisher() {
    if pg_major() < 19 {
        eprintln!("skipped: CREATE SUBSCRIPTION ... SERVER is new in PostgreSQL 19");
        return;
    }
    let a = node("fdwa", 1, 5, &[]);
    let b = node("fdwb", 1, 5, &[]);
    let c = node("fdwc", 1, 9, &["snowflake_id.guard_action = 'warning'"]);
    publish(&a, "pub");
    publish(&b, "pub");
    c.connect()
        .batch_execute(&format!(
            "CREATE EXTENSION postgres_fdw;
             CREATE SERVER pub_a FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', port '{}', dbname 'postgres');
             CREATE USER MAPPING FOR postgres SERVER pub_a OPTIONS (user 'postgres')",
            a.port
        ))
        .unwrap();
    // A statement of its own: it creates the slot, which no transaction block may.
    c.connect()
        .batch_execute("CREATE SUBSCRIPTION sub_a SERVER pub_a PUBLICATION pub WITH (copy_data = false)")
        .unwrap();
    subscribe(&c, "sub_b", &b, "pub", &[]);
    arm_guard(&c);
    let mark = log_mark(&c);
    insert(&a, 10, "a1");
    wait_until("C has A's rows", SHORT, &[&c], || rows(&c, "v = 'a1'") == 10);
    insert(&b, 10, "b");
    wait_until("C has B's rows", SHORT, &[&c], || rows(&c, "v = 'b'") == 10);
    insert(&a, 10, "a2");
    wait_until("C has A's new rows", SHORT, &[&c], || rows(&c, "v = 'a2'") == 10);
    wait_for_log(&c, mark, "WARNING", &[TWO_SERVERS, &number(1, 5)]);
    let log = log_since(&c, mark);
    assert!(!log.contains("could not ask the publisher"), "{log}");
    let last = guard_status(&c).last_clash.unwrap_or_default();
    assert!(last.contains(&server(&a)) && last.contains(&server(&b)), "{last}");
}
