//! Many IDs at once: a bulk call holds millions of them, and a cancel request
//! or statement_timeout must end it quickly; several backends at once, and a
//! parallel query's workers, share the one generator (the workers may log its
//! marks) and never repeat an ID.

mod common;

use std::time::{Duration, Instant};

use common::{db_error, Cluster};

#[test]
fn a_timeout_ends_a_large_bulk_call_promptly() {
    let c = Cluster::new("cancelbulk", &[]);
    c.start();
    let mut s = c.session();
    // What a tenth of the call takes on this machine now: the whole call
    // takes about ten times that (it fills one result set, block by block).
    let started = Instant::now();
    s.query_one("SELECT count(*) FROM snowflake_next_ids(10000000)", &[]).unwrap();
    let tenth = started.elapsed();
    s.batch_execute("SET statement_timeout = '200ms'").unwrap();
    let started = Instant::now();
    let e = s.query_one("SELECT count(*) FROM snowflake_next_ids(100000000)", &[]).unwrap_err();
    let took = started.elapsed();
    assert_eq!(db_error(&e).0, "57014", "{e}");
    // Ended by the timeout within the call, not after it: far below the call's
    // own length, measured side by side rather than against a fixed time.
    assert!(took < Duration::from_millis(200) + tenth * 5, "ended after {took:?}; a tenth of the call takes {tenth:?}");
    s.batch_execute("SET statement_timeout = 0").unwrap();
    let after: i64 = s.query_one("SELECT count(*) FROM snowflake_next_ids(1000)", &[]).unwrap().get(0);
    assert_eq!(after, 1000, "the generator goes on");
}

#[test]
fn parallel_workers_generate_and_log_marks_without_repeating() {
    let c = Cluster::new("parallel", &[]);
    c.start();
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE big AS SELECT g FROM generate_series(1, 300000) g;
         ANALYZE big;
         SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
         SET min_parallel_table_scan_size = 0;",
    )
    .unwrap();
    // The first ID needs the first mark: whichever process gets there first,
    // a worker or the leader, logs it in WAL.
    let query = "SELECT count(*), count(DISTINCT id) FROM (SELECT snowflake_next_id() AS id FROM big) s";
    let plan: String = s
        .query(&format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(plan.contains("Workers Launched: 2"), "{plan}");
    let row = s.query_one(query, &[]).unwrap();
    let (n, distinct): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((n, distinct), (300_000, 300_000));
    let marks: i64 = s.query_one("SELECT marks_written FROM snowflake_status()", &[]).unwrap().get(0);
    assert!(marks >= 1);
}

/// Several backends at once, each through its own client connection,
/// alternating single calls and bulk calls.
#[test]
fn concurrent_backends_never_collide() {
    let c = Cluster::new("backends", &[]);
    c.start();
    drop(c.session()); // creates the extension, once
    let c = &c;
    let mut all: Vec<i64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|i| {
                scope.spawn(move || {
                    let mut client = c.connect();
                    let mut ids = Vec::new();
                    for round in 0..10 {
                        let sql = if (i + round) % 2 == 0 {
                            "SELECT snowflake_next_id() FROM generate_series(1, 5000)"
                        } else {
                            "SELECT snowflake_next_ids(5000)"
                        };
                        let batch: Vec<i64> = client.query(sql, &[]).unwrap().iter().map(|r| r.get(0)).collect();
                        assert!(batch.windows(2).all(|w| w[0] < w[1]), "each backend sees increasing IDs");
                        ids.extend(batch);
                    }
                    ids
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "duplicates across backends");
    assert_eq!(n, 200_000);
}
