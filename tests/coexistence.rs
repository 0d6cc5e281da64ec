//! snowflake_id beside pgEdge's snowflake extension in one server, as a DBA
//! moving from one to the other runs them. pgEdge's extension is not packaged
//! for Debian, so a small library stands in for it: it defines `snowflake.node`
//! the way pgEdge does (DefineCustomIntVariable, PGC_SUSET, no reserved prefix)
//! and generates IDs in pgEdge's format.

mod common;

use common::{db_error, install_c_library, Cluster};

const STAND_IN: &str = r#"#include "postgres.h"
#include "fmgr.h"
#include "utils/guc.h"
#include <time.h>
PG_MODULE_MAGIC;

static int node_id = 0;
static int64 last_ms = -1;
static int counter = 0;

void _PG_init(void);
void
_PG_init(void)
{
    DefineCustomIntVariable("snowflake.node", "Unique id of current node.", NULL, &node_id,
                            0, 0, 1023, PGC_SUSET, 0, NULL, NULL, NULL);
}

/* 41 bits of milliseconds since 2023-01-01, 10 bits of node, 12 of counter. */
PG_FUNCTION_INFO_V1(standin_nextval);
Datum
standin_nextval(PG_FUNCTION_ARGS)
{
    struct timespec ts;
    int64 ms;

    if (node_id == 0)
        ereport(ERROR, (errmsg("value for snowflake.node is not set")));
    clock_gettime(CLOCK_REALTIME, &ts);
    ms = (int64) ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - INT64CONST(1672531200000);
    if (ms <= last_ms)
    {
        ms = last_ms;
        if (++counter > 4095)
        {
            ms = ++last_ms;
            counter = 0;
        }
    }
    else
        counter = 0;
    last_ms = ms;
    PG_RETURN_INT64((ms << 22) | ((int64) node_id << 12) | counter);
}
"#;

#[test]
fn both_extensions_load_in_either_order_and_both_generate() {
    let _stand_in = install_c_library("pgedge_standin", STAND_IN);
    for order in ["snowflake_id,pgedge_standin", "pgedge_standin,snowflake_id"] {
        let c = Cluster::new(
            "coexist",
            &[&format!("shared_preload_libraries = '{order}'"), "snowflake.node = 3", "snowflake_id.worker_id = 5"],
        );
        c.start();
        let log = c.log();
        assert!(!log.contains("invalid configuration parameter name"), "{order}:\n{log}");
        let mut s = c.session();
        s.batch_execute("CREATE FUNCTION standin_nextval() RETURNS bigint AS 'pgedge_standin' LANGUAGE c").unwrap();
        let row = s
            .query_one(
                "SELECT current_setting('snowflake.node'), current_setting('snowflake_id.worker_id'),
                        (SELECT worker_id FROM snowflake_decode(snowflake_next_id())),
                        (SELECT worker_id FROM snowflake_decode(standin_nextval(), 'pgedge')),
                        (SELECT abs(extract(epoch FROM ts - clock_timestamp())) < 60
                         FROM snowflake_decode(standin_nextval(), 'pgedge'))",
                &[],
            )
            .unwrap_or_else(|e| panic!("{order}: {:?}", db_error(&e)));
        assert_eq!(row.get::<_, String>(0), "3", "{order}: pgEdge's setting is kept");
        assert_eq!(row.get::<_, String>(1), "5", "{order}");
        assert_eq!(row.get::<_, i32>(2), 5, "{order}: snowflake_id generates as worker 5");
        assert_eq!(row.get::<_, i32>(3), 3, "{order}: the stand-in generates as node 3, read with the pgedge preset");
        assert!(row.get::<_, bool>(4), "{order}: its timestamps decode to now");
    }
}

/// Sequence mode's hooks (planner, utility, log) chain with those of
/// pg_stat_statements in either load order: registered sequences serve
/// every path, and pg_stat_statements still counts the statements. COPY FROM
/// into a registered default is run by snowflake_id only where its utility
/// hook is the last before PostgreSQL's; listed after another library, it
/// refuses that COPY before reading a row, with a hint, and a COPY into a
/// table whose default calls no registered sequence runs as usual.
#[test]
fn sequence_mode_chains_with_pg_stat_statements_in_either_order() {
    use std::io::Write;
    // Its own copy of the stand-in: the tests of this file run at once.
    let _stand_in = install_c_library("pgedge_standin_chain", STAND_IN);
    for order in
        ["snowflake_id,pg_stat_statements,pgedge_standin_chain", "pgedge_standin_chain,pg_stat_statements,snowflake_id"]
    {
        let c = Cluster::new("chain", &[&format!("shared_preload_libraries = '{order}'"), "snowflake.node = 3"]);
        c.start();
        let mut s = c.session();
        s.batch_execute(
            "CREATE EXTENSION pg_stat_statements;
             CREATE TABLE chained (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text);
             SELECT snowflake_sequence_register(pg_get_serial_sequence('chained', 'id'));
             SELECT pg_stat_statements_reset();
             INSERT INTO chained (note) SELECT 'i' || i FROM generate_series(1, 100) i;",
        )
        .unwrap_or_else(|e| panic!("{order}: {:?}", db_error(&e)));
        let copied = s.copy_in("COPY chained (note) FROM STDIN").and_then(|mut w| {
            for i in 0..1000 {
                writeln!(w, "c{i}").unwrap();
            }
            w.finish()
        });
        let snowflake_last = order.ends_with("snowflake_id");
        match copied {
            Ok(rows) => {
                assert!(!snowflake_last, "{order}: COPY ran though another utility hook follows ours");
                assert_eq!(rows, 1000, "{order}");
            }
            Err(e) => {
                assert!(snowflake_last, "{order}: {:?}", db_error(&e));
                let (state, message, hint) = db_error(&e);
                assert_eq!(state, "0A000", "{order}: {message}");
                assert!(hint.contains("first in shared_preload_libraries"), "{order}: {hint}");
                // The client library loses its footing after an error that
                // precedes COPY's data: a new session.
                s = c.session();
            }
        }
        // A table whose default no registration concerns: COPY works in
        // either order, with its native values.
        s.batch_execute("CREATE TABLE unconcerned (id bigserial PRIMARY KEY, note text)").unwrap();
        let plain = s.copy_in("COPY unconcerned (note) FROM STDIN").and_then(|mut w| {
            for i in 0..10 {
                writeln!(w, "p{i}").unwrap();
            }
            w.finish()
        });
        assert_eq!(plain.map_err(|e| db_error(&e)), Ok(10), "{order}: COPY into a table nothing registered fills");
        let native: i64 = s.query_one("SELECT max(id) FROM unconcerned", &[]).unwrap().get(0);
        assert_eq!(native, 10, "{order}");
        // And while another sequence's registration waits for a
        // transaction older than it.
        s.batch_execute("CREATE SEQUENCE waiting").unwrap();
        let mut holder = c.connect();
        holder.batch_execute("BEGIN; SELECT 1").unwrap();
        let mut registering = c.connect();
        let waiter = std::thread::spawn(move || {
            registering.batch_execute("SELECT snowflake_sequence_register('waiting')").map_err(|e| db_error(&e))
        });
        let waits = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%register%'";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while s.query_one(waits, &[]).unwrap().get::<_, i64>(0) == 0 {
            assert!(std::time::Instant::now() < deadline, "{order}: the registration never waited");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let during = s.copy_in("COPY unconcerned (note) FROM STDIN").and_then(|mut w| {
            writeln!(w, "during").unwrap();
            w.finish()
        });
        assert_eq!(during.map_err(|e| db_error(&e)), Ok(1), "{order}: COPY while a registration waits");
        holder.batch_execute("COMMIT").unwrap();
        assert_eq!(waiter.join().unwrap(), Ok(()), "{order}");
        let (rows, ours, distinct): (i64, i64, i64) = {
            let r = s
                .query_one(
                    "SELECT count(*), count(*) FILTER (WHERE d.worker_id IS NOT NULL
                            AND d.ts > now() - interval '10 minutes'), count(DISTINCT id)
                     FROM chained, snowflake_decode(id) d",
                    &[],
                )
                .unwrap();
            (r.get(0), r.get(1), r.get(2))
        };
        let expected = if snowflake_last { 100 } else { 1100 };
        assert_eq!((rows, ours, distinct), (expected, expected, expected), "{order}");
        let counted: i64 = s
            .query_one(
                "SELECT coalesce(sum(rows), 0)::bigint FROM pg_stat_statements
                 WHERE query LIKE 'INSERT INTO chained%' OR query LIKE 'COPY chained%'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(counted, expected, "{order}: pg_stat_statements counts every row stored");
        s.batch_execute("CREATE FUNCTION standin_nextval() RETURNS bigint AS 'pgedge_standin_chain' LANGUAGE c")
            .unwrap();
        let node: i32 = s
            .query_one("SELECT worker_id FROM snowflake_decode(standin_nextval(), 'pgedge')", &[])
            .map_or(-1, |r| r.get(0));
        assert_eq!(node, 3, "{order}: the stand-in generates beside sequence mode");
        c.stop();
    }
}
