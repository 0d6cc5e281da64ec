//! snowflake_id beside pg_hint_plan, whose planner hook sits on the same
//! path as sequence mode's: hints on statements that call registered
//! sequences are obeyed, and the statements still get snowflake IDs, in
//! both load orders of shared_preload_libraries.
//!
//! Needs pg_hint_plan for the PostgreSQL that SNOWFLAKE_PG_CONFIG names
//! (Debian sid's postgresql-18-pg-hint-plan, which .ci/sid installs), and
//! snowflake_id installed there (scripts/test installs the .deb first).

#![allow(clippy::unwrap_used)]

mod common;

use common::{db_error, Cluster};

/// The plan's lines.
fn plan(s: &mut postgres::Client, statement: &str) -> String {
    let rows = s.query(&format!("EXPLAIN (VERBOSE, COSTS OFF) {statement}"), &[]).unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
}

#[test]
#[ignore = "needs pg_hint_plan: scripts/test runs it in the sid chroot on PostgreSQL 18"]
fn hinted_statements_get_their_plans_and_snowflake_ids_in_either_order() {
    for order in ["pg_hint_plan,snowflake_id", "snowflake_id,pg_hint_plan"] {
        let c = Cluster::new(
            "hintplan",
            &[
                &format!("shared_preload_libraries = '{order}'"),
                "snowflake_id.worker_id = 6",
                "pg_hint_plan.enable_hint = on",
            ],
        );
        c.start();
        let mut s = c.session();
        s.batch_execute(
            "CREATE EXTENSION pg_hint_plan;
             CREATE TABLE t (id bigserial PRIMARY KEY, v int);
             SELECT snowflake_sequence_register('t_id_seq');
             CREATE TABLE src (v int PRIMARY KEY);
             INSERT INTO src SELECT generate_series(1, 1000);
             ANALYZE src;",
        )
        .unwrap_or_else(|e| panic!("{order}: {:?}", db_error(&e)));
        // The hint decides the scan of an INSERT ... SELECT whose key a
        // registered sequence fills, and of an explicit nextval.
        let insert = "INSERT INTO t (v) SELECT v FROM src WHERE v < 10";
        let seq = plan(&mut s, &format!("/*+ SeqScan(src) */ {insert}"));
        let index = plan(&mut s, &format!("/*+ IndexScan(src) */ {insert}"));
        assert!(seq.contains("Seq Scan on public.src") && !seq.contains("Index"), "{order}: SeqScan hint:\n{seq}");
        assert!(index.contains("Index Scan using src_pkey"), "{order}: IndexScan hint:\n{index}");
        assert!(index.contains("snowflake_sequence_nextval"), "{order}: the registered default is ours:\n{index}");
        s.batch_execute(&format!("/*+ IndexScan(src) */ {insert}")).unwrap();
        s.batch_execute(&format!("/*+ SeqScan(src) */ {insert}")).unwrap();
        let explicit = plan(&mut s, "/*+ IndexScan(src) */ SELECT nextval('t_id_seq') FROM src WHERE v < 5");
        assert!(explicit.contains("Index Scan using src_pkey"), "{order}:\n{explicit}");
        let ids: Vec<i64> = s
            .query("/*+ IndexScan(src) */ SELECT nextval('t_id_seq') FROM src WHERE v < 5", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(ids.len(), 4, "{order}");
        // Every ID is a snowflake ID of this server's number, none repeated;
        // decoding and the generator are untouched by the hints.
        let row = s
            .query_one(
                "SELECT count(*), count(DISTINCT id),
                        count(*) FILTER (WHERE (SELECT worker_id FROM snowflake_decode(id)) <> 6 OR id < 1000000000)
                   FROM t",
                &[],
            )
            .unwrap();
        assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2)), (18, 18, 0), "{order}");
        for id in ids {
            let worker: i32 = s.query_one("SELECT worker_id FROM snowflake_decode($1)", &[&id]).unwrap().get(0);
            assert_eq!(worker, 6, "{order}: nextval {id}");
        }
        let next: i64 = s.query_one("/*+ SeqScan(src) */ SELECT snowflake_next_id()", &[]).unwrap().get(0);
        assert!(next > 1_000_000_000, "{order}: {next}");
        c.stop();
    }
}
