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
