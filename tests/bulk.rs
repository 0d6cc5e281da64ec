//! Bulk calls hold millions of IDs: a cancel request or statement_timeout
//! must end one quickly, not after the whole result is built.

mod common;

use std::time::{Duration, Instant};

use common::{db_error, Cluster};

#[test]
fn a_timeout_ends_a_large_bulk_call_promptly() {
    let c = Cluster::new("cancelbulk", &[]);
    c.start();
    let mut s = c.session();
    // Untouched, the call below takes seconds (measured: 9 s on 2 cores).
    s.batch_execute("SET statement_timeout = '200ms'").unwrap();
    let started = Instant::now();
    let e = s.query_one("SELECT count(*) FROM snowflake_next_ids(100000000)", &[]).unwrap_err();
    let took = started.elapsed();
    assert_eq!(db_error(&e).0, "57014", "{e}");
    // 200 ms, plus up to ~10 ms to the next look for interrupts; loose for a busy machine.
    assert!(took < Duration::from_millis(1500), "ended after {took:?}");
    s.batch_execute("SET statement_timeout = 0").unwrap();
    let after: i64 = s.query_one("SELECT count(*) FROM snowflake_next_ids(1000)", &[]).unwrap().get(0);
    assert_eq!(after, 1000, "the generator goes on");
}
