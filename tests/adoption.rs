//! Moving existing databases to snowflake_id and keeping them for years:
//! upgrading from the first release, dump and restore, and IDs in JSON.

mod common;

use std::path::Path;

use common::{install_extension_file, Cluster};

/// Every function of the extension with everything that defines it.
const SURFACE: &str = "SELECT string_agg(format('%s(%s) -> %s [%s%s%s rows=%s] %s %s', p.proname,
            pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid), p.provolatile, p.proparallel,
            CASE WHEN p.proisstrict THEN ' strict' ELSE '' END, p.prorows, md5(p.prosrc),
            (SELECT string_agg(a::text, ',' ORDER BY a::text)
             FROM unnest(coalesce(p.proacl, acldefault('f', p.proowner))) AS a)), E'\\n'
            ORDER BY p.proname, pg_get_function_identity_arguments(p.oid))
     FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
     JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
     WHERE p.pronamespace = e.extnamespace";

/// Every object the extension owns (tables, views, triggers, event triggers,
/// functions), by description.
const MEMBERS: &str = "SELECT string_agg(pg_describe_object(d.classid, d.objid, d.objsubid), E'\\n'
            ORDER BY pg_describe_object(d.classid, d.objid, d.objsubid))
     FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
       -- a build with the pg_test feature adds the #[pg_test]s in schema tests
       AND pg_describe_object(d.classid, d.objid, d.objsubid) !~ '^(function tests\\.|schema tests$)'";

/// Connects to database `db` of `c`.
fn connect_to(c: &Cluster, db: &str) -> postgres::Client {
    postgres::Client::connect(&format!("host=127.0.0.1 port={} user=postgres dbname={db}", c.port), postgres::NoTls)
        .unwrap()
}

#[test]
fn an_upgrade_from_every_release_matches_a_fresh_install() {
    let sql = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let _old_scripts = ["0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.10.0"]
        .map(|old| install_extension_file(&sql.join(format!("snowflake_id--{old}.sql"))));
    let c = Cluster::new("upgrade", &["snowflake_id.worker_id = 3"]);
    c.start();
    c.connect().batch_execute("CREATE DATABASE fresh").unwrap();
    let mut fresh = connect_to(&c, "fresh");
    fresh.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    let installed: String = fresh.query_one(SURFACE, &[]).unwrap().get(0);
    let members: String = fresh.query_one(MEMBERS, &[]).unwrap().get(0);

    for old in ["0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.10.0"] {
        let db = format!("from_{}", old.replace('.', "_"));
        c.connect().batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
        let mut s = connect_to(&c, &db);
        s.batch_execute(&format!(
            "CREATE EXTENSION snowflake_id VERSION '{old}';
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), v int);
             INSERT INTO t (v) SELECT generate_series(1, 100);
             CREATE TABLE legacy (id serial PRIMARY KEY, v int);
             INSERT INTO legacy (v) SELECT generate_series(1, 10);"
        ))
        .unwrap();
        let version = |s: &mut postgres::Client| -> String {
            s.query_one("SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id'", &[]).unwrap().get(0)
        };
        assert_eq!(version(&mut s), old);
        let before: i64 = s.query_one("SELECT max(id) FROM t", &[]).unwrap().get(0);
        // A guard armed by 0.4.0 has no arming time; the update arms it again.
        let guarded = old == "0.4.0";
        if guarded {
            // Armed on a column renamed since, and on a partitioned table
            // (each partition inherits a clone of the trigger), one disabled.
            s.batch_execute(
                "CREATE TABLE g (key bigint PRIMARY KEY); SELECT snowflake_guard('g'); ALTER TABLE g RENAME key TO k;
                 CREATE TABLE parted (id bigint PRIMARY KEY) PARTITION BY RANGE (id);
                 CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (1000);
                 SELECT snowflake_guard('parted'); ALTER TABLE parted DISABLE TRIGGER snowflake_id_guard;
                 SELECT snowflake_guard('t')",
            )
            .unwrap();
        }

        // Sequences registered by 0.6.0, a serial and a pooled one, with a
        // session's plan of each made before the update.
        let registered = old == "0.6.0";
        let mut planned = connect_to(&c, &db);
        if registered {
            s.batch_execute(
                "CREATE TABLE reg (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('reg');
                 CREATE SEQUENCE pooled INCREMENT BY 50; SELECT snowflake_sequence_register('pooled', 'high');
                 INSERT INTO reg (v) VALUES (1);",
            )
            .unwrap();
            planned.batch_execute("PREPARE ins AS INSERT INTO reg (v) VALUES (2) RETURNING id").unwrap();
            // 0.6.0 registered temporary sequences; the update drops such a
            // row, of another session that is still there.
            planned
                .batch_execute("CREATE TEMPORARY SEQUENCE scratch; SELECT snowflake_sequence_register('scratch')")
                .unwrap();
        }
        // The new library serves the old SQL's snowflake_status() until the
        // update, with the columns it declares.
        let issued: i64 = s.query_one("SELECT ids_issued FROM snowflake_status()", &[]).unwrap().get(0);
        assert!(issued >= 100, "old status from {old}: {issued}");
        // A site that keeps snowflake_status() from PUBLIC, for its monitoring
        // role only: from 0.9.0 the update, which resets the privileges on
        // it, says so and names the statements that make them again.
        let restricted = old == "0.9.0";
        if restricted {
            s.batch_execute(
                "CREATE ROLE status_reader; REVOKE EXECUTE ON FUNCTION snowflake_status() FROM PUBLIC;
                 GRANT EXECUTE ON FUNCTION snowflake_status() TO status_reader",
            )
            .unwrap();
        }
        s.batch_execute("ALTER EXTENSION snowflake_id UPDATE").unwrap();
        if restricted {
            let reset: bool = s
                .query_one("SELECT proacl IS NULL FROM pg_proc WHERE oid = 'snowflake_status()'::regprocedure", &[])
                .unwrap()
                .get(0);
            assert!(reset, "the privileges are the default again");
            let log = c.log();
            assert!(
                log.contains("WARNING:  the update reset the privileges on snowflake_status() to the default"),
                "{log}"
            );
            let again = "REVOKE EXECUTE ON FUNCTION snowflake_status() FROM PUBLIC; \
                         GRANT EXECUTE ON FUNCTION snowflake_status() TO status_reader;";
            assert!(log.contains(&format!("HINT:  Make them again: {again}")), "{log}");
            // Made again as the hint says, they hold, and the role can go
            // once they are taken back: none is the extension's own.
            s.batch_execute(again).unwrap();
            s.batch_execute(
                "GRANT EXECUTE ON FUNCTION snowflake_status() TO PUBLIC;
                 REVOKE EXECUTE ON FUNCTION snowflake_status() FROM status_reader; DROP ROLE status_reader",
            )
            .unwrap();
        }
        if registered {
            let before: i64 = s.query_one("SELECT max(id) FROM reg", &[]).unwrap().get(0);
            let prepared: i64 = planned.query_one("EXECUTE ins", &[]).unwrap().get(0);
            let pooled: i64 = s.query_one("SELECT nextval('pooled')", &[]).unwrap().get(0);
            let registry: Vec<String> = s
                .query("SELECT sequence::text FROM snowflake_sequences ORDER BY 1", &[])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert_eq!(registry, ["pooled", "reg_id_seq"], "registrations kept by the update");
            assert!(prepared > before && pooled > before, "snowflake IDs above those of 0.6.0");
            s.batch_execute("CREATE TABLE chk (a int CHECK (nextval('reg_id_seq') > 0))").unwrap();
            let e = s.batch_execute("INSERT INTO chk VALUES (1)").expect_err("the fence stays");
            assert_eq!(e.code().map(|c| c.code()), Some("2200H"));
            s.batch_execute("SELECT snowflake_sequence_unregister('reg_id_seq')").unwrap();
            let native: Vec<i64> = s
                .query("INSERT INTO reg (v) VALUES (3), (4) RETURNING id", &[])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert!(native[0] > prepared && native[1] == native[0] + 1, "native above the IDs: {native:?}");
        }
        if guarded {
            let row = s
                .query_one(
                    "SELECT tgnargs::int, tgenabled::text, tgfoid::regprocedure::text FROM pg_trigger \
                     WHERE tgrelid = 't'::regclass AND tgname = 'snowflake_id_guard'",
                    &[],
                )
                .unwrap();
            let (nargs, enabled, function): (i32, String, String) = (row.get(0), row.get(1), row.get(2));
            assert_eq!((nargs, enabled.as_str(), function.as_str()), (2, "R", "snowflake_guard_check()"));
            let rearmed: Vec<String> = s
                .query(
                    "SELECT format('%s %s %s %s', tgrelid::regclass, tgnargs, tgenabled, \
                            (SELECT attname FROM pg_attribute WHERE attrelid = tgrelid AND attnum = tgattr[0])) \
                     FROM pg_trigger WHERE tgname = 'snowflake_id_guard' AND tgrelid <> 't'::regclass ORDER BY 1",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert_eq!(rearmed, ["g 2 R k", "parted 2 D id", "parted_1 2 D id"], "from {old}");
        }
        assert_eq!(version(&mut s), env!("CARGO_PKG_VERSION"), "from {old}");
        // What the old version created keeps working, and what the update added works.
        s.batch_execute(
            "INSERT INTO t (v) VALUES (101); SELECT snowflake_adopt('legacy', 'id'); INSERT INTO legacy (v) VALUES (11)",
        )
        .unwrap();
        let row = s
            .query_one(
                "SELECT (SELECT max(id) FROM t), (SELECT worker_id FROM snowflake_decode((SELECT max(id) FROM legacy))),
                        (SELECT worker_id FROM snowflake_status())",
                &[],
            )
            .unwrap();
        assert!(row.get::<_, i64>(0) > before, "from {old}");
        assert_eq!((row.get::<_, i32>(1), row.get::<_, i32>(2)), (3, 3), "from {old}");

        // The upgraded extension defines exactly what a fresh install does.
        let upgraded: String = s.query_one(SURFACE, &[]).unwrap().get(0);
        assert_eq!(upgraded, installed, "upgraded from {old}");
        let upgraded: String = s.query_one(MEMBERS, &[]).unwrap().get(0);
        assert_eq!(upgraded, members, "upgraded from {old}");
        // Sequence mode (0.6.0) works in an upgraded database.
        s.batch_execute("CREATE SEQUENCE up_s; SELECT snowflake_sequence_register('up_s')").unwrap();
        let worker: i32 = s.query_one("SELECT worker_id FROM snowflake_decode(nextval('up_s'))", &[]).unwrap().get(0);
        assert_eq!(worker, 3, "sequence mode from {old}");
    }
}

#[test]
fn a_dump_restores_into_a_fresh_server_with_its_defaults() {
    let source = Cluster::new("dumpsource", &["snowflake_id.worker_id = 4"]);
    source.start();
    source
        .session()
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), item text);
             CREATE TABLE lines (id bigint PRIMARY KEY DEFAULT snowflake_next_id(),
                                 order_id bigint NOT NULL REFERENCES orders, qty int);
             INSERT INTO orders (item) SELECT 'item ' || g FROM generate_series(1, 1000) g;
             INSERT INTO lines (order_id, qty) SELECT id, 1 FROM orders;",
        )
        .unwrap();
    let dump = source.dir.join("db.dump");
    let port = source.port.to_string();
    let out = source.run(
        "pg_dump",
        &["-Fc", "-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-f", dump.to_str().unwrap(), "postgres"],
    );
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));

    // The replacement server: same worker number, its own (empty) state.
    let target = Cluster::new("dumptarget", &["snowflake_id.worker_id = 4"]);
    target.start();
    let port = target.port.to_string();
    let out = target.run(
        "pg_restore",
        &[
            "--exit-on-error",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-d",
            "postgres",
            dump.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "pg_restore: {}", String::from_utf8_lossy(&out.stderr));

    let mut s = target.connect();
    let restored: i64 = s
        .query_one("SELECT max(id) FROM (SELECT id FROM orders UNION ALL SELECT id FROM lines) ids", &[])
        .unwrap()
        .get(0);
    let defaults: i64 = s
        .query_one(
            "SELECT count(*) FROM pg_attrdef WHERE pg_get_expr(adbin, adrelid) = 'snowflake_next_id()'
               AND adrelid IN ('orders'::regclass, 'lines'::regclass)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(defaults, 2, "both keys still default to snowflake_next_id()");
    let row = s
        .query_one(
            "WITH o AS (INSERT INTO orders (item) VALUES ('after restore') RETURNING id),
                  l AS (INSERT INTO lines (order_id, qty) SELECT id, 2 FROM o RETURNING id)
             SELECT (SELECT id FROM o), (SELECT id FROM l), (SELECT count(*) FROM orders)",
            &[],
        )
        .unwrap();
    let (order, line, count): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(count, 1000, "every row was restored");
    assert!(order > restored && line > order, "new IDs {order}, {line} are above every restored one ({restored})");
}

#[test]
fn ids_reach_javascript_intact_only_as_text() {
    let c = Cluster::new("json", &[]);
    c.start();
    let mut s = c.session();
    // Discord's documented example, and a fresh ID with an odd sequence number:
    // both need more than the 53 bits a JavaScript number holds exactly.
    let rows = s
        .query(
            "WITH t(id, item) AS (VALUES (175928847299117063, 'tea'), ((SELECT max(i) FROM snowflake_next_ids(2) i), 'cake'))
             SELECT id, json_build_object('id', id)::text, json_build_object('id', id::text)::text,
                    (to_jsonb(t) || jsonb_build_object('id', t.id::text))::text
             FROM t",
            &[],
        )
        .unwrap();
    for r in rows {
        let (id, as_number, as_text, row_json): (i64, String, String, String) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        // JSON.parse reads a number as an IEEE double, as f64 does.
        let number = json_value(&as_number);
        let parsed: f64 = number.parse().unwrap();
        assert_ne!(parsed as i64, id, "a JSON number loses the low bits of {id}");
        assert_eq!(json_value(&as_text), format!("\"{id}\""), "as a string it arrives intact");
        assert!(row_json.contains(&format!("\"id\": \"{id}\"")), "the row pattern of docs/javascript.md: {row_json}");
    }
}

/// The value of the "id" key of a one-key JSON object, as written.
fn json_value(json: &str) -> String {
    let after = json.split_once(':').expect("a JSON object").1;
    after.trim().trim_end_matches('}').trim().to_string()
}
