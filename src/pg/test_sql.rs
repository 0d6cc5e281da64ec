//! SQL behaviour in one server: `cargo pgrx test` starts it with the settings in
//! `crate::pg_test` (datacenter 3, worker 7, default layout). Shared memory is
//! not rolled back between tests, so tests compare before and after.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// The SQLSTATE, message and hint of the error `sql` raises, caught in a
    /// PL/pgSQL subtransaction; `None` if it raises none.
    fn error_of(sql: &str) -> Option<(String, String, Option<String>)> {
        // Created once per session, by the role that first needs it.
        Spi::run(
            "DO $do$ BEGIN
               IF to_regproc('pg_temp.error_of') IS NULL THEN
                 CREATE FUNCTION pg_temp.error_of(q text, OUT state text, OUT message text, OUT hint text)
                 LANGUAGE plpgsql AS $f$
                 BEGIN
                   EXECUTE q;
                 EXCEPTION WHEN OTHERS THEN
                   GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
                 END $f$;
               END IF;
             END $do$",
        )
        .unwrap();
        let (state, message, hint) =
            Spi::get_three_with_args::<String, String, String>("SELECT * FROM pg_temp.error_of($1)", &[sql.into()])
                .expect("error_of runs");
        state.map(|s| (s, message.unwrap_or_default(), hint.filter(|h| !h.is_empty())))
    }

    /// One of our errors: the SQLSTATE, a message in PostgreSQL's style, and a hint.
    fn assert_error(sql: &str, sqlstate: &str, message_part: &str) {
        let hint = assert_pg_error(sql, sqlstate, message_part);
        assert!(hint.is_some(), "{sql}: no hint");
    }

    /// Any error, ours or PostgreSQL's; returns its hint.
    fn assert_pg_error(sql: &str, sqlstate: &str, message_part: &str) -> Option<String> {
        let (state, message, hint) = error_of(sql).unwrap_or_else(|| panic!("{sql} raised no error"));
        assert_eq!(state, sqlstate, "{sql}: {message}");
        assert!(message.contains(message_part), "{sql}: {message:?} lacks {message_part:?}");
        assert!(!message.ends_with('.') && !message.starts_with(char::is_uppercase), "style of {message:?}");
        assert!(!message.contains("panicked"), "a panic leaked: {message}");
        hint
    }

    fn one<T: IntoDatum + FromDatum>(sql: &str) -> T {
        Spi::get_one::<T>(sql).expect("query runs").expect("not null")
    }

    #[pg_test]
    fn next_id_is_positive_and_increasing() {
        let a = one::<i64>("SELECT snowflake_next_id()");
        let b = one::<i64>("SELECT snowflake_next_id()");
        assert!(a > 0 && b > a, "{a} then {b}");
    }

    #[pg_test]
    fn an_id_decodes_to_this_server_and_now() {
        let ok = one::<bool>(
            "WITH t AS (SELECT clock_timestamp() AS before, snowflake_next_id() AS id, clock_timestamp() AS after)
             SELECT d.datacenter_id = 3 AND d.worker_id = 7 AND d.clock_back IS NULL AND d.sequence >= 0
                AND d.ts >= date_trunc('milliseconds', t.before) AND d.ts <= t.after + interval '1 minute'
                AND snowflake_timestamp(t.id) = d.ts
             FROM t, snowflake_decode(t.id) d",
        );
        assert!(ok);
    }

    #[pg_test]
    fn a_hundred_thousand_ids_from_one_call_are_unique_and_increasing() {
        let (n, distinct, increasing) = Spi::get_three::<i64, i64, bool>(
            "SELECT count(*), count(DISTINCT id), bool_and(id > prev)
             FROM (SELECT id, lag(id, 1, 0::bigint) OVER (ORDER BY ord) AS prev
                   FROM snowflake_next_ids(100000) WITH ORDINALITY AS s(id, ord)) s",
        )
        .unwrap();
        assert_eq!((n, distinct, increasing), (Some(100_000), Some(100_000), Some(true)));
    }

    #[pg_test]
    fn single_calls_in_one_statement_are_unique() {
        let (n, distinct) = Spi::get_two::<i64, i64>(
            "SELECT count(*), count(DISTINCT id) FROM (SELECT snowflake_next_id() AS id FROM generate_series(1, 100000)) s",
        )
        .unwrap();
        assert_eq!(n, distinct);
    }

    #[pg_test]
    fn next_ids_edge_counts() {
        assert_eq!(one::<i64>("SELECT count(*) FROM snowflake_next_ids(0)"), 0);
        assert_eq!(one::<i64>("SELECT count(*) FROM snowflake_next_ids(NULL)"), 0);
        assert_eq!(one::<i64>("SELECT count(*) FROM snowflake_next_ids(1)"), 1);
        assert_error("SELECT snowflake_next_ids(-1)", "22023", "number of IDs");
        assert_error("SELECT snowflake_next_ids(100000001)", "22023", "number of IDs");
    }

    #[pg_test]
    fn decode_refuses_what_is_no_snowflake() {
        assert_error("SELECT snowflake_decode(-1)", "22023", "invalid snowflake ID");
        assert_error("SELECT snowflake_timestamp(-5)", "22023", "invalid snowflake ID");
        assert_error(
            "SELECT snowflake_decode(1, 'timestamp:41,shard:10,sequence:12')",
            "22023",
            "invalid snowflake layout",
        );
        assert_error("SELECT snowflake_decode(1, 'twitter', NULL, 0)", "22023", "invalid snowflake tick");
        // Bits above a 24-bit layout.
        assert_error("SELECT snowflake_decode(1 << 30, 'timestamp:20,sequence:4')", "22023", "invalid snowflake ID");
    }

    #[pg_test]
    fn decode_reads_discords_documented_example() {
        let (ts, worker, process) = Spi::get_three::<String, i32, i32>(
            "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), datacenter_id, worker_id
             FROM snowflake_decode(175928847299117063, 'discord')",
        )
        .unwrap();
        assert_eq!((ts.as_deref(), worker, process), (Some("2016-04-30 11:18:25.796"), Some(1), Some(0)));
        assert_eq!(one::<i32>("SELECT sequence FROM snowflake_decode(175928847299117063, 'discord')"), 7);
    }

    #[pg_test]
    fn decode_with_layout_honours_epoch_and_tick() {
        // Sonyflake counts 10 ms ticks: tick 100 of an epoch is one second after it.
        let ts = one::<String>(
            "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS')
             FROM snowflake_decode((100::bigint << 24) | (5 << 16) | 42, 'sonyflake', '2020-01-01 00:00:00+00')",
        );
        assert_eq!(ts, "2020-01-01 00:00:01.000");
        let (worker, seq) = Spi::get_two::<i32, i32>(
            "SELECT worker_id, sequence FROM snowflake_decode((100::bigint << 24) | (5 << 16) | 42, 'sonyflake')",
        )
        .unwrap();
        assert_eq!((worker, seq), (Some(42), Some(5)));
        assert_eq!(one::<i64>("SELECT count(*) FROM snowflake_decode(NULL, 'twitter')"), 0);
        assert!(one::<bool>(
            "SELECT datacenter_id IS NULL AND worker_id IS NULL FROM snowflake_decode(1 << 16, 'mastodon')"
        ));
    }

    #[pg_test]
    fn from_timestamp_bounds_ids_of_that_time() {
        assert!(one::<bool>(
            "SELECT snowflake_from_timestamp(clock_timestamp() - interval '1 second') <= snowflake_next_id()
                AND snowflake_next_id() < snowflake_from_timestamp(clock_timestamp() + interval '1 minute')"
        ));
        assert_eq!(one::<i64>("SELECT snowflake_from_timestamp('2025-01-01 00:00:00+00')"), 0);
        assert_eq!(one::<i64>("SELECT snowflake_from_timestamp('2025-01-01 00:00:00.001+00')"), 1 << 22);
        assert_eq!(
            one::<String>("SELECT snowflake_timestamp(snowflake_from_timestamp('2026-03-04 05:06:07.089+00'))::text"),
            one::<String>("SELECT '2026-03-04 05:06:07.089+00'::timestamptz::text")
        );
        assert_error(
            "SELECT snowflake_from_timestamp('2024-12-31 23:59:59.999+00')",
            "22008",
            "timestamp out of range",
        );
        assert_error("SELECT snowflake_from_timestamp('2100-01-01')", "22008", "timestamp out of range");
        assert_error("SELECT snowflake_from_timestamp('infinity')", "22008", "timestamp out of range");
    }

    #[pg_test]
    fn settings_are_visible_and_cannot_be_set_in_a_session() {
        assert_eq!(one::<String>("SHOW snowflake_id.worker_id"), "7");
        assert_eq!(one::<String>("SHOW snowflake_id.datacenter_id"), "3");
        assert_eq!(one::<String>("SHOW snowflake_id.layout"), "timestamp:41,datacenter:5,worker:5,sequence:12");
        assert_eq!(one::<String>("SHOW snowflake_id.epoch"), "2025-01-01 00:00:00+00");
        assert_eq!(one::<String>("SHOW snowflake_id.tick_ms"), "1");
        assert_eq!(one::<String>("SHOW snowflake_id.max_clock_drift"), "1d");
        assert_eq!(one::<String>("SHOW snowflake_id.max_wait"), "10s");
        let contexts = one::<String>(
            "SELECT string_agg(name || '=' || context, ' ' ORDER BY name) FROM pg_settings WHERE name LIKE 'snowflake_id.%'",
        );
        assert_eq!(
            contexts,
            "snowflake_id.datacenter_id=postmaster snowflake_id.epoch=postmaster snowflake_id.layout=postmaster \
             snowflake_id.max_clock_drift=sighup snowflake_id.max_wait=sighup snowflake_id.tick_ms=postmaster \
             snowflake_id.wal_rmgr_id=postmaster snowflake_id.worker_id=postmaster"
        );
        for setting in
            ["worker_id = 8", "datacenter_id = 1", "layout = 'instagram'", "epoch = '2020-01-01'", "tick_ms = 2"]
        {
            assert_pg_error(&format!("SET snowflake_id.{setting}"), "55P02", "cannot be changed");
        }
        assert_pg_error("SET snowflake_id.max_clock_drift = '1s'", "55P02", "cannot be changed");
        assert_eq!(one::<String>("SHOW snowflake_id.worker_id"), "7");
    }

    #[pg_test]
    fn functions_carry_the_right_labels() {
        let labels = one::<String>(
            "SELECT string_agg(format('%s(%s):%s%s%s', proname, pronargs, provolatile, proparallel,
                                      CASE WHEN proisstrict THEN 'S' ELSE '' END), ' ' ORDER BY proname, pronargs)
             FROM pg_proc WHERE proname LIKE 'snowflake\\_%' AND pronamespace = 'public'::regnamespace",
        );
        assert_eq!(
            labels,
            "snowflake_adopt(3):vu snowflake_decode(1):ssS snowflake_decode(4):is snowflake_decode(4):is \
             snowflake_from_timestamp(1):ssS \
             snowflake_next_id(0):vsS snowflake_next_ids(1):vsS snowflake_status(0):vsS snowflake_timestamp(1):ssS"
        );
        let one_row = one::<bool>(
            "SELECT bool_and(prorows = 1) FROM pg_proc WHERE proname IN ('snowflake_decode', 'snowflake_status')",
        );
        assert!(one_row, "single-row functions tell the planner so");
    }

    #[pg_test]
    fn a_table_default_fills_increasing_keys_of_this_worker() {
        Spi::run(
            "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), n int);
             INSERT INTO orders (n) SELECT g FROM generate_series(1, 5000) g",
        )
        .unwrap();
        let (count, in_order, workers) = Spi::get_three::<i64, bool, i64>(
            "SELECT count(*), bool_and(id > prev), count(DISTINCT (d).worker_id)
             FROM (SELECT id, lag(id, 1, 0::bigint) OVER (ORDER BY n) AS prev, snowflake_decode(id) AS d FROM orders) s",
        )
        .unwrap();
        assert_eq!((count, in_order, workers), (Some(5000), Some(true), Some(1)));
    }

    #[pg_test]
    fn status_counts_what_was_issued() {
        let before = one::<i64>("SELECT ids_issued FROM snowflake_status()");
        Spi::run("SELECT count(*) FROM snowflake_next_ids(1000)").unwrap();
        let (after, worker, layout) =
            Spi::get_three::<i64, i32, String>("SELECT ids_issued, worker_id, layout FROM snowflake_status()").unwrap();
        assert!(after.unwrap() >= before + 1000);
        assert_eq!(worker, Some(7));
        assert_eq!(layout.as_deref(), Some("timestamp:41,datacenter:5,worker:5,sequence:12"));
        assert!(one::<bool>(
            "SELECT high_water_mark > clock_timestamp() AND state_file LIKE '%snowflake_id.state'
                AND marks_written > 0 AND drift_ms >= 0 FROM snowflake_status()"
        ));
    }

    #[pg_test]
    fn adopt_switches_serial_and_identity_keys_and_widens_references() {
        Spi::run(
            "CREATE TABLE customers (id serial PRIMARY KEY, name text);
             CREATE TABLE orders (id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                                  customer_id integer REFERENCES customers);
             CREATE TABLE notes (customer smallint REFERENCES customers (id));
             INSERT INTO customers (name) SELECT 'c' || g FROM generate_series(1, 100) g;
             INSERT INTO orders (customer_id) SELECT g % 100 + 1 FROM generate_series(1, 500) g;
             SELECT snowflake_adopt('customers', 'id');
             SELECT snowflake_adopt('orders', 'id', drop_sequence => true);",
        )
        .unwrap();
        let types = one::<String>(
            "SELECT string_agg(format('%s.%s:%s', attrelid::regclass, attname, format_type(atttypid, NULL)), ' '
                               ORDER BY attrelid::regclass::text, attname)
             FROM pg_attribute WHERE attrelid IN ('customers'::regclass, 'orders'::regclass, 'notes'::regclass)
              AND attname IN ('id', 'customer_id', 'customer')",
        );
        assert_eq!(
            types, "customers.id:bigint notes.customer:bigint orders.customer_id:bigint orders.id:bigint",
            "keys and the columns referencing them are bigint"
        );
        assert!(one::<bool>(
            "SELECT bool_and(pg_get_expr(adbin, adrelid) LIKE '%snowflake_next_id()')
                AND count(*) = 2 FROM pg_attrdef WHERE adrelid IN ('customers'::regclass, 'orders'::regclass)"
        ));
        assert!(one::<bool>(
            "SELECT attidentity = '' FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attname = 'id'"
        ));
        // The serial's sequence is kept and no longer owned by the column; the identity's is gone.
        assert!(one::<bool>(
            "SELECT pg_get_serial_sequence('customers', 'id') IS NULL AND to_regclass('customers_id_seq') IS NOT NULL"
        ));
        assert!(one::<bool>("SELECT to_regclass('orders_id_seq') IS NULL"));
        // New rows take snowflake keys above the old ones, and references still hold.
        let (id, worker) = Spi::get_two::<i64, i32>(
            "WITH c AS (INSERT INTO customers (name) VALUES ('new') RETURNING id)
             SELECT c.id, (snowflake_decode(c.id)).worker_id FROM c",
        )
        .unwrap();
        assert!(id.unwrap() > 100 && worker == Some(7));
        Spi::run("INSERT INTO orders (customer_id) SELECT max(id) FROM customers").unwrap();
        assert_pg_error("INSERT INTO orders (customer_id) VALUES (-1)", "23503", "violates foreign key");
    }

    #[pg_test]
    fn adopt_keeps_an_identity_numbering_as_a_standalone_sequence() {
        Spi::run(
            "CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);
             INSERT INTO t (v) SELECT g FROM generate_series(1, 41) g;
             SELECT snowflake_adopt('t', 'id');",
        )
        .unwrap();
        assert_eq!(
            one::<i64>("SELECT nextval('t_id_seq')"),
            42,
            "the kept sequence continues where the identity stopped"
        );
        // GENERATED ALWAYS is gone too: an explicit key is accepted again.
        Spi::run("INSERT INTO t (id, v) VALUES (7000, 1)").unwrap();
    }

    #[pg_test]
    fn adopt_keeps_an_identity_sequences_options_owner_and_grants() {
        Spi::run(
            "CREATE ROLE snowflake_seq_owner; CREATE ROLE snowflake_seq_reader;
             CREATE TABLE ident (id integer GENERATED BY DEFAULT AS IDENTITY
                                 (INCREMENT BY 5 MAXVALUE 100000 CACHE 10) PRIMARY KEY, v int);
             ALTER TABLE ident OWNER TO snowflake_seq_owner;
             GRANT SELECT, USAGE ON SEQUENCE ident_id_seq TO snowflake_seq_reader;
             COMMENT ON SEQUENCE ident_id_seq IS 'order numbers';
             INSERT INTO ident (v) SELECT g FROM generate_series(1, 4) g;",
        )
        .unwrap();
        // With CACHE 10 the session reserved ten values: the sequence stands at the last of them.
        let last = one::<i64>("SELECT last_value FROM ident_id_seq");
        Spi::run("SELECT snowflake_adopt('ident', 'id')").unwrap();
        let (options, owner, grants) = Spi::get_three::<String, String, String>(
            "SELECT format('%s %s %s %s %s', s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle),
                    c.relowner::regrole::text,
                    (SELECT string_agg(privilege_type, ',' ORDER BY privilege_type) FROM aclexplode(c.relacl)
                     WHERE grantee = 'snowflake_seq_reader'::regrole)
             FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid WHERE c.oid = 'ident_id_seq'::regclass",
        )
        .unwrap();
        assert_eq!(options.as_deref(), Some("5 1 100000 10 f"));
        assert_eq!(owner.as_deref(), Some("snowflake_seq_owner"));
        assert_eq!(grants.as_deref(), Some("SELECT,USAGE"));
        assert_eq!(one::<String>("SELECT obj_description('ident_id_seq'::regclass, 'pg_class')"), "order numbers");
        assert_eq!(one::<i64>("SELECT nextval('ident_id_seq')"), last + 5, "continues by its increment");
    }

    #[pg_test]
    fn adopt_widens_a_partitioned_referencing_table_through_its_root() {
        Spi::run(
            "CREATE TABLE parent (id serial PRIMARY KEY);
             CREATE TABLE child (pid int REFERENCES parent, v int) PARTITION BY RANGE (v);
             CREATE TABLE child_1 PARTITION OF child FOR VALUES FROM (0) TO (10);
             CREATE TABLE child_2 PARTITION OF child FOR VALUES FROM (10) TO (20);
             INSERT INTO parent SELECT FROM generate_series(1, 5);
             INSERT INTO child SELECT g % 5 + 1, g FROM generate_series(0, 19) g;
             SELECT snowflake_adopt('parent', 'id');",
        )
        .unwrap();
        let types = one::<String>(
            "SELECT string_agg(format('%s:%s', attrelid::regclass, format_type(atttypid, NULL)), ' '
                               ORDER BY attrelid::regclass::text)
             FROM pg_attribute WHERE attname = 'pid' AND attrelid IN ('child'::regclass, 'child_1'::regclass,
                                                                      'child_2'::regclass)",
        );
        assert_eq!(types, "child:bigint child_1:bigint child_2:bigint");
        Spi::run("INSERT INTO child SELECT id, 3 FROM parent ORDER BY id DESC LIMIT 1").unwrap();
        let new_key = one::<i64>("INSERT INTO parent DEFAULT VALUES RETURNING id");
        assert!(new_key > 1 << 22, "new keys are snowflake IDs");
    }

    #[pg_test]
    fn adopt_refuses_a_partition_key_up_front_and_changes_nothing() {
        Spi::run(
            "CREATE TABLE referenced (id serial PRIMARY KEY);
             CREATE TABLE by_key (rid int REFERENCES referenced, v int) PARTITION BY RANGE (rid);
             CREATE TABLE by_key_1 PARTITION OF by_key FOR VALUES FROM (0) TO (100);
             CREATE TABLE keyed (id serial, PRIMARY KEY (id)) PARTITION BY RANGE (id);",
        )
        .unwrap();
        let hint = assert_pg_error(
            "SELECT snowflake_adopt('referenced', 'id')",
            "0A000",
            "column \"rid\" of relation \"public.by_key\" is a partition key and cannot be widened to bigint",
        );
        assert!(hint.unwrap_or_default().contains("Recreate the partitioned table"));
        assert_pg_error(
            "SELECT snowflake_adopt('keyed', 'id')",
            "0A000",
            "column \"id\" of relation \"public.keyed\" is a partition key",
        );
        assert_pg_error("SELECT snowflake_adopt('by_key_1', 'rid')", "42809", "is a partition of");
        assert_eq!(
            one::<String>("SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = 'referenced'::regclass AND attname = 'id'"),
            "integer",
            "nothing changed"
        );
    }

    #[pg_test]
    fn decode_reads_an_epoch_argument_in_utc_whatever_the_session_time_zone() {
        for zone in ["UTC", "America/New_York", "Asia/Kolkata"] {
            Spi::run(&format!("SET LOCAL timezone = '{zone}'")).unwrap();
            let same = one::<bool>(
                "WITH i AS (SELECT snowflake_next_id() AS id)
                 SELECT a.ts = b.ts AND a.ts = c.ts AND a.ts = d.ts
                 FROM i, snowflake_decode(i.id) a,
                      snowflake_decode(i.id, 'timestamp:41,datacenter:5,worker:5,sequence:12', '2025-01-01') b,
                      snowflake_decode(i.id, 'timestamp:41,datacenter:5,worker:5,sequence:12', '1735689600000') c,
                      snowflake_decode(i.id, 'timestamp:41,datacenter:5,worker:5,sequence:12',
                                       '2025-01-01 00:00:00+00'::timestamptz) d",
            );
            assert!(same, "in time zone {zone}");
        }
        // An offset in the text is honoured, and an explicit timestamptz is an instant.
        assert!(one::<bool>(
            "SELECT a.ts = b.ts FROM snowflake_decode(175928847299117063, 'discord') a,
                    snowflake_decode(175928847299117063, 'discord', '2014-12-31 19:00:00-05') b"
        ));
        assert_error("SELECT * FROM snowflake_decode(1, 'discord', 'yesterday')", "22023", "invalid snowflake epoch");
        let volatility = one::<String>(
            "SELECT string_agg(provolatile::text, '' ORDER BY pronargs, proargtypes::text)
             FROM pg_proc WHERE proname = 'snowflake_decode' AND pronargs = 4",
        );
        assert_eq!(volatility, "ii", "both forms stay IMMUTABLE");
    }

    #[pg_test]
    fn adopt_refuses_clearly_and_changes_nothing() {
        Spi::run(
            "CREATE TABLE labelled (id text PRIMARY KEY);
             CREATE TABLE huge (id bigint PRIMARY KEY); INSERT INTO huge VALUES (9000000000000000000);
             CREATE TABLE small (id integer PRIMARY KEY); CREATE TABLE refs (s integer REFERENCES small);
             CREATE ROLE snowflake_stranger;",
        )
        .unwrap();
        assert_error("SELECT snowflake_adopt('small', 'nope')", "42703", "does not exist");
        assert_error("SELECT snowflake_adopt('labelled', 'id')", "42804", "not an integer type");
        assert_error("SELECT snowflake_adopt('huge', 'id')", "22003", "not below the first snowflake ID");
        Spi::run("SET ROLE snowflake_stranger").unwrap();
        assert_error("SELECT snowflake_adopt('small', 'id')", "42501", "must be owner");
        Spi::run("RESET ROLE").unwrap();
        // A failure half-way undoes every step: the stranger owns `small` but not
        // `refs`, whose column is widened first, so the widening of `small` never stays.
        Spi::run("ALTER TABLE small OWNER TO snowflake_stranger; SET ROLE snowflake_stranger").unwrap();
        assert_pg_error("SELECT snowflake_adopt('small', 'id')", "42501", "must be owner of table refs");
        Spi::run("RESET ROLE").unwrap();
        let types = one::<String>(
            "SELECT string_agg(format_type(atttypid, NULL), ',' ORDER BY attrelid::regclass::text)
             FROM pg_attribute WHERE (attrelid, attname) IN (('small'::regclass, 'id'), ('refs'::regclass, 's'))",
        );
        assert_eq!(types, "integer,integer");
        assert!(one::<bool>("SELECT pg_get_expr(adbin, adrelid) IS NULL FROM pg_attribute a LEFT JOIN pg_attrdef d ON (d.adrelid, d.adnum) = (a.attrelid, a.attnum) WHERE a.attrelid = 'small'::regclass AND a.attname = 'id'"));
    }

    #[pg_test]
    fn range_scans_by_time_use_the_primary_key() {
        Spi::run(
            "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), v int);
             INSERT INTO events (v) SELECT g FROM generate_series(1, 20000) g;
             ANALYZE events;",
        )
        .unwrap();
        let plan = one::<pgrx::Json>(
            "EXPLAIN (FORMAT JSON) SELECT * FROM events
             WHERE id >= snowflake_from_timestamp(now() - interval '2 hours')
               AND id < snowflake_from_timestamp(now() - interval '1 hour')",
        )
        .0
        .to_string();
        assert!(plan.contains("events_pkey"), "the primary key index is used: {plan}");
        assert!(
            plan.contains("Index Cond") && plan.contains("snowflake_from_timestamp"),
            "as an index condition: {plan}"
        );
    }

    /// Does nothing; starting it makes sure the shared test server runs.
    #[pg_test]
    fn server_is_up() {}

    /// Several backends at once, each through its own client connection.
    #[cfg(test)]
    #[test]
    fn concurrent_backends_never_collide() {
        pgrx_tests::run_test("server_is_up", None, crate::pg_test::postgresql_conf_options()).unwrap();
        let workers: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    let (mut client, _) = pgrx_tests::client().unwrap();
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
        let mut all: Vec<i64> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "duplicates across backends");
        assert_eq!(n, 200_000);
    }
}
