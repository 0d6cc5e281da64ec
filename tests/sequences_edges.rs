//! Sequence mode at its edges, one session at a time: privileges of the
//! functions that serve registered sequences, user functions that share
//! their names, lastval() beside unregistered sequences, copies of a fenced
//! sequence, hints that can be pasted back, domains and integer columns,
//! DROP EXTENSION, temporary sequences, and restores by a superuser and by a
//! database owner. Each test holds the server to a promise the review of
//! 0.6.0 found broken.

mod common;

use common::{db_error, Cluster};

const NODE: [&str; 2] = ["snowflake_id.datacenter_id = 2", "snowflake_id.worker_id = 5"];

fn cluster(name: &str) -> Cluster {
    let c = Cluster::new(name, &NODE);
    c.start();
    c
}

fn ours(c: &mut postgres::Client, id: i64) -> bool {
    c.query_one("SELECT d.datacenter_id = 2 AND d.worker_id = 5 FROM snowflake_decode($1) d", &[&id]).unwrap().get(0)
}

fn connect_as(c: &Cluster, db: &str, user: &str) -> postgres::Client {
    postgres::Client::connect(&format!("host=127.0.0.1 port={} user={user} dbname={db}", c.port), postgres::NoTls)
        .unwrap()
}

fn error_of(s: &mut postgres::Client, sql: &str) -> (String, String, String) {
    let e = s.batch_execute(sql).expect_err(sql);
    db_error(&e)
}

/// Review finding 5: `snowflake_sequence_nextval_identity` ran for PUBLIC
/// with no privilege check, so any role advanced any sequence and got
/// snowflake IDs without the right to generate them. An identity default
/// needs the right to insert into (or update) its column, as natively;
/// anything else needs USAGE on the sequence.
#[test]
fn no_role_advances_another_roles_sequence_through_the_identity_function() {
    let c = cluster("seqpriv");
    let mut s = c.session();
    s.batch_execute(
        "CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN; GRANT CREATE ON SCHEMA public TO alice;
         SET ROLE alice;
         CREATE SEQUENCE alice_private MAXVALUE 1000;
         CREATE TABLE alice_t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
         RESET ROLE;
         SET ROLE alice; SELECT snowflake_sequence_register_table('alice_t'); RESET ROLE;
         REVOKE EXECUTE ON FUNCTION snowflake_next_id() FROM PUBLIC;
         GRANT EXECUTE ON FUNCTION snowflake_next_id() TO alice;",
    )
    .unwrap();
    let mut bob = connect_as(&c, "postgres", "bob");
    for seq in ["alice_private", "alice_t_id_seq"] {
        for f in ["nextval", "snowflake_sequence_nextval", "snowflake_sequence_nextval_identity"] {
            let (code, message, _) = error_of(&mut bob, &format!("SELECT {f}('{seq}')"));
            assert_eq!(code, "42501", "{f}('{seq}'): {message}");
        }
    }
    let last: i64 = s.query_one("SELECT last_value FROM alice_private", &[]).unwrap().get(0);
    assert_eq!(last, 1, "alice_private was never advanced");
    // Given the right to insert, bob gets the identity default, as natively.
    s.batch_execute("GRANT INSERT, SELECT ON alice_t TO bob").unwrap();
    let id: i64 = bob.query_one("INSERT INTO alice_t (v) VALUES ('b') RETURNING id", &[]).unwrap().get(0);
    assert!(ours(&mut s, id));
    // Nothing that only serves the extension is PUBLIC's.
    let public: Vec<String> = s
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p
             JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
             JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
             WHERE p.proname IN ('snowflake_sequence_invalidate', 'snowflake_sequence_resume_value',
                                 'snowflake_sequence_check_block')
               AND has_function_privilege('bob', p.oid, 'EXECUTE')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(public.is_empty(), "internal functions PUBLIC may call: {public:?}");
}

/// Review finding 10: EXECUTE's parameters (and table rewrites) renamed
/// every call named nextval or lastval to ours, a user's own function of
/// that name in another schema included.
#[test]
fn a_users_own_nextval_and_lastval_keep_their_meaning() {
    let c = cluster("seqownfn");
    let mut s = c.session();
    s.batch_execute(
        "CREATE SCHEMA app;
         CREATE FUNCTION app.nextval(int) RETURNS bigint LANGUAGE sql AS $$ SELECT 1000 + $1 $$;
         CREATE FUNCTION app.lastval() RETURNS text LANGUAGE sql AS $$ SELECT 'mine' $$;
         CREATE TABLE reg (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('reg');
         CREATE TABLE t (v int); INSERT INTO t VALUES (1), (2);
         SET search_path = app, public, pg_catalog;
         PREPARE q(bigint) AS SELECT $1; PREPARE q2(text) AS SELECT $1;",
    )
    .unwrap();
    let got: i64 = s.query_one("EXECUTE q(nextval(5))", &[]).unwrap().get(0);
    assert_eq!(got, 1005);
    let got: String = s.query_one("EXECUTE q2(lastval())", &[]).unwrap().get(0);
    assert_eq!(got, "mine");
    s.batch_execute("ALTER TABLE t ADD COLUMN k bigint DEFAULT nextval(7)").unwrap();
    let ks: Vec<i64> = s.query("SELECT k FROM t", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(ks, [1007, 1007]);
    // While a registered sequence's own calls are still ours there.
    let id: i64 = s.query_one("EXECUTE q(pg_catalog.nextval('public.reg_id_seq'))", &[]).unwrap().get(0);
    assert!(ours(&mut s, id));
}

/// Review finding 11: after an insert into an unregistered table, lastval()
/// returned the last registered ID (PHP PDO's lastInsertId() runs it).
#[test]
fn lastval_after_an_unregistered_insert_is_native() {
    let c = cluster("seqlastval");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE reg (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('reg');
         CREATE TABLE unreg (id bigserial PRIMARY KEY, v int);
         CREATE TABLE unreg_identity (id bigint GENERATED ALWAYS AS IDENTITY, v int);",
    )
    .unwrap();
    let reg: i64 = s.query_one("INSERT INTO reg (v) VALUES (1) RETURNING id", &[]).unwrap().get(0);
    let last: i64 = s.query_one("SELECT lastval()", &[]).unwrap().get(0);
    assert_eq!(last, reg);
    let unreg: i64 = s.query_one("INSERT INTO unreg (v) VALUES (1) RETURNING id", &[]).unwrap().get(0);
    let last: i64 = s.query_one("SELECT lastval()", &[]).unwrap().get(0);
    assert_eq!((unreg, last), (1, 1));
    let identity: i64 = s.query_one("INSERT INTO unreg_identity (v) VALUES (1) RETURNING id", &[]).unwrap().get(0);
    let last: i64 = s.query_one("SELECT lastval()", &[]).unwrap().get(0);
    assert_eq!((identity, last), (1, 1));
}

/// Review finding 12: `CREATE TABLE ... (LIKE t INCLUDING ALL)` copied the
/// fence into the new table's identity sequence, which failed after two
/// rows. A copy now takes the values the fence replaced.
#[test]
fn a_table_made_like_a_registered_one_is_usable() {
    let c = cluster("seqlike");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE idt (id bigint GENERATED ALWAYS AS IDENTITY (MAXVALUE 1000000) PRIMARY KEY, v int);
         INSERT INTO idt (v) VALUES (1);
         SELECT snowflake_sequence_register_table('idt');
         CREATE TABLE idt2 (LIKE idt INCLUDING ALL);
         CREATE TABLE idt3 (LIKE idt INCLUDING IDENTITY);",
    )
    .unwrap();
    for table in ["idt2", "idt3"] {
        let ids: Vec<i64> = (0..5)
            .map(|v| {
                s.query_one(&format!("INSERT INTO {table} (v) VALUES ($1) RETURNING id"), &[&v])
                    .unwrap_or_else(|e| panic!("{table}: {e}"))
                    .get(0)
            })
            .collect();
        assert_eq!(ids, [1, 2, 3, 4, 5], "{table}: an unregistered copy counts natively");
        let max: i64 = s
            .query_one(
                &format!(
                    "SELECT seqmax FROM pg_sequence WHERE seqrelid = pg_get_serial_sequence('{table}', 'id')::regclass"
                ),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(max, 1_000_000, "{table}: the MAXVALUE the fence replaced");
    }
    let id: i64 = s.query_one("INSERT INTO idt (v) VALUES (2) RETURNING id", &[]).unwrap().get(0);
    assert!(ours(&mut s, id), "the source stays registered");
}

/// Review finding 13: hints named sequences unqualified and unquoted, so the
/// statement they proposed failed, and the fence's hint was attached to an
/// unregistered sequence sharing a registered one's name.
#[test]
fn hints_name_sequences_so_that_they_can_be_pasted_back() {
    let c = cluster("seqhints");
    let mut s = c.session();
    s.batch_execute(
        r#"CREATE SCHEMA "Odd Schema"; CREATE SEQUENCE "Odd Schema"."My Seq";
           SELECT snowflake_sequence_register('"Odd Schema"."My Seq"');
           CREATE SCHEMA s1; CREATE SEQUENCE s1.orders_seq; SELECT snowflake_sequence_register('s1.orders_seq');
           CREATE SEQUENCE public.orders_seq MAXVALUE 3;
           SELECT nextval('public.orders_seq') FROM generate_series(1, 3);"#,
    )
    .unwrap();
    let (code, _, hint) = error_of(&mut s, r#"ALTER SEQUENCE "Odd Schema"."My Seq" RESTART"#);
    assert_eq!(code, "55000");
    let statement = hint.split_once(": ").map(|(_, sql)| sql.trim_end_matches('.')).unwrap_or_default().to_string();
    assert!(statement.starts_with("SELECT snowflake_sequence_unregister("), "{hint}");
    s.batch_execute(&statement).unwrap_or_else(|e| panic!("the hint's statement {statement}: {e}"));
    // The fence of a registered sequence names it so too.
    s.batch_execute(
        r#"SELECT snowflake_sequence_register('"Odd Schema"."My Seq"');
           CREATE TABLE oddchk (a int CHECK (nextval('"Odd Schema"."My Seq"') > 0));"#,
    )
    .unwrap();
    let (code, _, hint) = error_of(&mut s, "INSERT INTO oddchk VALUES (1)");
    assert_eq!(code, "2200H");
    assert!(hint.contains(r#"snowflake_sequence_nextval('"Odd Schema"."My Seq"')"#), "{hint}");
    // An unregistered sequence at its own MAXVALUE is not said to be registered.
    let (code, _, hint) = error_of(&mut s, "SELECT nextval('public.orders_seq')");
    assert_eq!(code, "2200H");
    assert!(!hint.contains("is registered with snowflake_id"), "{hint}");
}

/// Review finding 14: a column added with a domain whose default calls a
/// registered sequence met the fence; an integer column fed by one was
/// accepted at registration and failed at insert; a bigint domain column was
/// refused.
#[test]
fn domains_and_integer_columns_are_judged_at_registration() {
    let c = cluster("seqdomain");
    let mut s = c.session();
    s.batch_execute(
        "CREATE SEQUENCE dseq; SELECT snowflake_sequence_register('dseq');
         CREATE DOMAIN did AS bigint DEFAULT nextval('dseq');
         CREATE TABLE addt (v int); INSERT INTO addt VALUES (1), (2);
         ALTER TABLE addt ADD COLUMN k did;",
    )
    .unwrap();
    let ks: Vec<i64> = s.query("SELECT k FROM addt", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(ks.len(), 2);
    assert!(ks.iter().all(|k| ours(&mut s, *k)), "{ks:?}");
    let default: Option<String> = s
        .query_one("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'addt'::regclass", &[])
        .ok()
        .map(|r| r.get(0));
    assert_eq!(default, None, "the column takes its domain's default, as it was written");
    // An integer column fed by a sequence it does not own.
    s.batch_execute("CREATE SEQUENCE iseq; CREATE TABLE it (id int DEFAULT nextval('iseq'), v int)").unwrap();
    let (code, message, _) = error_of(&mut s, "SELECT snowflake_sequence_register('iseq')");
    assert_eq!(code, "42804", "{message}");
    // A domain over bigint holds one.
    s.batch_execute(
        "CREATE DOMAIN dom AS bigint; CREATE TABLE dt (id dom, v int);
         CREATE SEQUENCE dt_seq OWNED BY dt.id; ALTER TABLE dt ALTER id SET DEFAULT nextval('dt_seq');
         SELECT snowflake_sequence_register_table('dt');",
    )
    .unwrap();
    let id: i64 = s.query_one("INSERT INTO dt (v) VALUES (1) RETURNING id", &[]).unwrap().get(0);
    assert!(ours(&mut s, id));
}

/// Review findings 14 and 6a: a temporary sequence could be registered, and
/// its row outlived the session and broke the next restore.
#[test]
fn temporary_sequences_are_refused() {
    let c = cluster("seqtemp");
    let mut s = c.session();
    let (code, message, _) =
        error_of(&mut s, "CREATE TEMP SEQUENCE tmpseq; SELECT snowflake_sequence_register('tmpseq')");
    assert_eq!(code, "0A000", "{message}");
    let rows: i64 = s.query_one("SELECT count(*) FROM snowflake_sequence_registry", &[]).unwrap().get(0);
    assert_eq!(rows, 0);
}

/// Review finding 14: DROP EXTENSION with sequences registered left them
/// fenced with no hint, and registering them again after CREATE EXTENSION
/// recorded the fence as their own MAXVALUE, so unregistering failed.
#[test]
fn drop_extension_asks_for_cascade_and_a_second_registration_can_be_undone() {
    let c = cluster("seqdropext");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE t (id bigserial PRIMARY KEY, v int); INSERT INTO t (v) VALUES (1);
         SELECT snowflake_sequence_register_table('t');",
    )
    .unwrap();
    let (code, message, hint) = error_of(&mut s, "DROP EXTENSION snowflake_id");
    assert_eq!(code, "2BP01", "{message}");
    assert!(hint.contains("snowflake_sequence_unregister"), "{hint}");
    s.batch_execute("DROP EXTENSION snowflake_id CASCADE").unwrap();
    let (code, _, _) = error_of(&mut s, "INSERT INTO t (v) VALUES (2)");
    assert_eq!(code, "2200H", "the fence stays");
    s.batch_execute(
        "CREATE EXTENSION snowflake_id; SELECT snowflake_sequence_register_table('t');
         INSERT INTO t (v) VALUES (3);
         SELECT snowflake_sequence_unregister('t_id_seq');",
    )
    .unwrap();
    let ids: Vec<i64> =
        s.query("INSERT INTO t (v) VALUES (4), (5) RETURNING id", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(ids[1] - ids[0], 1, "native again: {ids:?}");
}

/// Review finding 14 (0.6.0): nextval reached through an operator was not
/// served. Third review of 0.7.0, finding 1: the planner serves it, but an
/// operator hides the call from the checks made by name (a setval so spelt
/// in COPY's WHERE, EXECUTE's parameters, a table rewrite or an inlined SQL
/// function moved a registered sequence below its fence). Where sequence
/// mode is installed no operator over nextval or setval is made, and no
/// sequence is registered while one exists.
#[test]
fn operators_over_sequence_functions_are_refused() {
    let c = cluster("seqoperator");
    let mut s = c.session();
    s.batch_execute("CREATE SEQUENCE reg_id_seq; SELECT snowflake_sequence_register('reg_id_seq')").unwrap();
    for ddl in [
        "CREATE OPERATOR @@ (RIGHTARG = regclass, FUNCTION = pg_catalog.nextval)",
        "CREATE OPERATOR #= (LEFTARG = regclass, RIGHTARG = bigint, FUNCTION = setval)",
    ] {
        let (code, message, _) = error_of(&mut s, ddl);
        assert_eq!(code, "0A000", "{ddl}: {message}");
    }
    s.batch_execute("CREATE OPERATOR <+> (LEFTARG = int, RIGHTARG = int, FUNCTION = int4pl)").unwrap();
    c.connect().batch_execute("CREATE DATABASE ops").unwrap();
    let mut ops = connect_as(&c, "ops", "postgres");
    ops.batch_execute(
        "CREATE OPERATOR @@ (RIGHTARG = regclass, FUNCTION = pg_catalog.nextval);
         CREATE EXTENSION snowflake_id; CREATE SEQUENCE s;",
    )
    .unwrap();
    let (code, message, hint) = error_of(&mut ops, "SELECT snowflake_sequence_register('s')");
    assert_eq!(code, "0A000", "{message}");
    assert!(hint.contains("DROP OPERATOR @@(NONE,regclass)"), "{hint}");
    ops.batch_execute("DROP OPERATOR @@ (NONE, regclass); SELECT snowflake_sequence_register('s')").unwrap();
    let id: i64 = ops.query_one("SELECT nextval('s')", &[]).unwrap().get(0);
    assert!(ours(&mut ops, id));
}

/// Runs pg_dump of database `db` into a custom-format file; returns its path.
fn dump(c: &Cluster, db: &str, extra: &[&str]) -> String {
    let file = c.dir.join(format!("{db}{}.dump", extra.join("").replace('-', "")));
    let port = c.port.to_string();
    let mut args = vec!["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-Fc", "-f", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(db);
    let out = c.run("pg_dump", &args);
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
    file.to_str().unwrap().to_string()
}

/// Runs pg_restore as `user`; returns what it reported. A restore by a
/// role that is no superuser reports the statements only a superuser may
/// run (the extension's comment), and goes on.
fn restore(c: &Cluster, file: &str, db: &str, user: &str, extra: &[&str]) -> String {
    let port = c.port.to_string();
    let mut args = vec!["-h", "127.0.0.1", "-p", &port, "-U", user, "-d", db];
    args.extend_from_slice(extra);
    args.push(file);
    let out = c.run("pg_restore", &args);
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() || user != "postgres", "pg_restore as {user}: {log}");
    log
}

/// The source of the restore tests: a serial and an identity table
/// registered, a pooled sequence, and a registered sequence whose table was
/// dropped with DROP FOREIGN TABLE (review finding 6a).
fn restore_source(c: &Cluster) -> i64 {
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE t (id bigserial PRIMARY KEY, v int);
         CREATE TABLE i (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);
         CREATE SEQUENCE pooled INCREMENT BY 50;
         SELECT setval('t_id_seq', 5); -- DUMPED_FENCE
         SELECT snowflake_sequence_register_table('t'); SELECT snowflake_sequence_register_table('i');
         SELECT snowflake_sequence_register('pooled', 'high');
         INSERT INTO t (v) SELECT generate_series(1, 100); INSERT INTO i (v) SELECT generate_series(1, 100);
         CREATE FOREIGN DATA WRAPPER dummy; CREATE SERVER loop FOREIGN DATA WRAPPER dummy;
         CREATE FOREIGN TABLE ft (id bigint, v int) SERVER loop;
         CREATE SEQUENCE ft_seq OWNED BY ft.id; SELECT snowflake_sequence_register('ft_seq');
         DROP FOREIGN TABLE ft; DROP SERVER loop; DROP FOREIGN DATA WRAPPER dummy;",
    )
    .unwrap();
    let left: i64 = s.query_one("SELECT count(*) FROM snowflake_sequence_registry", &[]).unwrap().get(0);
    assert_eq!(left, 3, "a dropped sequence leaves the registry");
    s.query_one("SELECT greatest((SELECT max(id) FROM t), (SELECT max(id) FROM i))", &[]).unwrap().get(0)
}

/// The registrations `expected` came back in database `db` with their
/// fences, and new IDs lie above the dumped ones.
fn assert_restored(c: &Cluster, db: &str, user: &str, dumped_max: i64, expected: &[&str]) {
    let mut r = connect_as(c, db, user);
    let registered: Vec<String> = r
        .query("SELECT sequence::text FROM snowflake_sequences ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|x| x.get(0))
        .collect();
    assert_eq!(registered, expected, "{db}");
    for table in ["t", "i"] {
        let id: i64 = r
            .query_one(&format!("INSERT INTO {table} (v) VALUES (-1) RETURNING id"), &[])
            .unwrap_or_else(|e| panic!("{db}.{table}: {e}"))
            .get(0);
        assert!(id > dumped_max && ours(&mut r, id), "{db}.{table}: {id}");
    }
    r.batch_execute("CREATE TABLE chk (a int CHECK (nextval('t_id_seq') > 0))").unwrap();
    let (code, _, _) = error_of(&mut r, "INSERT INTO chk VALUES (1)");
    assert_eq!(code, "2200H", "{db}: the fence came back");
    // Where it was: the values below it were handed out before registering.
    let fence: i64 =
        r.query_one("SELECT seqmax FROM pg_sequence WHERE seqrelid = 't_id_seq'::regclass", &[]).unwrap().get(0);
    assert_eq!(fence, DUMPED_FENCE, "{db}: the dumped fence");
}

/// Where the source's serial sequence stands when it is registered: its
/// fence, which a restore must give back (review of 0.7.0, finding 9).
const DUMPED_FENCE: i64 = 5;

/// Review finding 6: a dangling registry row (a sequence dropped with its
/// foreign table) made the registry's COPY fail whole, and a restore by the
/// database owner failed the owner check because the registry's rows come
/// before the sequences' values. Both routes now bring back every
/// registration and fence.
#[test]
fn restores_by_a_superuser_and_by_the_database_owner_bring_registrations_back() {
    let c = cluster("seqrestore");
    let dumped_max = restore_source(&c);
    let file = dump(&c, "postgres", &[]);
    // A superuser's restore into a new database.
    c.connect().batch_execute("CREATE DATABASE bysuper").unwrap();
    restore(&c, &file, "bysuper", "postgres", &["--exit-on-error"]);
    assert_restored(&c, "bysuper", "postgres", dumped_max, &["i_id_seq", "pooled", "t_id_seq"]);
    // Schema, then data with the tables' triggers disabled (the registry's
    // too): the dump's SEQUENCE SET puts each fence back.
    c.connect().batch_execute("CREATE DATABASE bysteps").unwrap();
    restore(&c, &file, "bysteps", "postgres", &["--exit-on-error", "--schema-only"]);
    restore(&c, &file, "bysteps", "postgres", &["--exit-on-error", "--data-only", "--disable-triggers"]);
    assert_restored(&c, "bysteps", "postgres", dumped_max, &["i_id_seq", "pooled", "t_id_seq"]);
    // The managed-service route: an administrator creates the database for
    // its owner and the extension in it; the owner restores with --no-owner.
    // A pooled sequence needs the right to generate in bulk, which the
    // administrator grants; without it, that one row is left out, with a
    // warning, and the rest come back.
    c.connect().batch_execute("CREATE ROLE dbo LOGIN").unwrap();
    for (db, bulk) in [("byowner", true), ("byowner_nobulk", false)] {
        c.connect().batch_execute(&format!("CREATE DATABASE {db} OWNER dbo")).unwrap();
        let grant = if bulk { "GRANT EXECUTE ON FUNCTION snowflake_next_ids(integer) TO dbo;" } else { "" };
        connect_as(&c, db, "postgres")
            .batch_execute(&format!("CREATE EXTENSION snowflake_id; GRANT CREATE ON SCHEMA public TO dbo; {grant}"))
            .unwrap();
        let log = restore(&c, &file, db, "dbo", &["--no-owner"]);
        if bulk {
            assert!(
                !log.contains("snowflake_sequence") && !log.contains("fence"),
                "the registry restored whole:\n{log}"
            );
            assert_restored(&c, db, "dbo", dumped_max, &["i_id_seq", "pooled", "t_id_seq"]);
        } else {
            // pg_restore does not show a server's warnings; its log does.
            assert!(c.log().contains("registry row of sequence \"public.pooled\" left out"), "{log}");
            assert_restored(&c, db, "dbo", dumped_max, &["i_id_seq", "t_id_seq"]);
        }
    }
}

/// A row of a dump made by 0.6.0 that names a dropped sequence by its
/// number is left out, with a warning, and the others are restored.
#[test]
fn a_registry_row_of_a_dropped_sequence_is_left_out_of_a_restore() {
    let c = cluster("seqdangling");
    let mut s = c.session();
    s.batch_execute("CREATE SEQUENCE kept").unwrap();
    let mut copy =
        s.copy_in("COPY snowflake_sequence_registry (seq, block_mode, native_max, native_cycle) FROM stdin").unwrap();
    use std::io::Write;
    copy.write_all(b"4000000000\teither\t9223372036854775807\tf\nkept\teither\t9223372036854775807\tf\n").unwrap();
    copy.finish().unwrap();
    let registered: Vec<String> =
        s.query("SELECT sequence::text FROM snowflake_sequences", &[]).unwrap().iter().map(|x| x.get(0)).collect();
    assert_eq!(registered, ["kept"]);
    let id: i64 = s.query_one("SELECT nextval('kept')", &[]).unwrap().get(0);
    assert!(ours(&mut s, id));
}

/// A schema-only dump carries each registered sequence's fence in its
/// MAXVALUE but no registration (the registry's rows are data), and so do
/// dumps of chosen tables (`-t`) or schemas (`-n`) the extension is not in
/// (they leave it and its configuration out): the fence's error says so,
/// and how to go on; registered again, the table continues above the
/// dumped IDs. A dump of the extension's schema carries the registry's rows
/// (pg_dump keeps a configuration table of a schema it dumps): restored
/// where the extension was created, the registrations come back; where a
/// row names a sequence of a schema the dump left out, the registry's COPY
/// fails whole (the name is no regclass there) and every sequence keeps
/// its fence.
#[test]
fn schema_only_and_selective_copies_meet_a_fence_that_explains_itself() {
    let c = cluster("seqschemaonly");
    let dumped_max = restore_source(&c);
    c.session()
        .batch_execute(
            "CREATE SCHEMA app; CREATE TABLE app.t (id bigserial PRIMARY KEY, v int);
             SELECT snowflake_sequence_register_table('app.t'); INSERT INTO app.t (v) VALUES (1);",
        )
        .unwrap();
    let app_max: i64 = c.session().query_one("SELECT max(id) FROM app.t", &[]).unwrap().get(0);
    let all = ["i_id_seq", "pooled", "t_id_seq"];
    // The database, pg_dump's options, the table, its dumped IDs' maximum,
    // the registrations restored.
    type Route<'a> = (&'a str, &'a [&'a str], &'a str, i64, &'a [&'a str]);
    let routes: [Route; 5] = [
        ("schemaonly", &["--schema-only"], "t", dumped_max, &[]),
        ("bytable", &["-t", "t"], "t", dumped_max, &[]),
        ("byschema", &["-n", "app"], "app.t", app_max, &[]),
        ("byextschema_app_left_out", &["-n", "public"], "t", dumped_max, &[]),
        ("byextschema", &["-n", "public"], "t", dumped_max, &all),
    ];
    for (db, extra, table, max, expected) in routes {
        if db == "byextschema" {
            c.session().batch_execute("DROP SCHEMA app CASCADE").unwrap();
        }
        let file = dump(&c, "postgres", extra);
        c.connect().batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
        let mut r = connect_as(&c, db, "postgres");
        if db != "schemaonly" {
            // Such a dump holds no CREATE EXTENSION.
            r.batch_execute("CREATE EXTENSION snowflake_id").unwrap();
        }
        if db.starts_with("byextschema") {
            // The dump creates its schema, which exists there; and the
            // registry's COPY fails where a row names a schema left out.
            let port = c.port.to_string();
            let out = c.run("pg_restore", &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", db, &file]);
            let log = String::from_utf8_lossy(&out.stderr);
            let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
            let expected_errors = if expected.is_empty() { 2 } else { 1 };
            assert_eq!(errors.len(), expected_errors, "{db}: {log}");
            assert!(errors[0].contains("schema \"public\" already exists"), "{db}: {log}");
        } else {
            restore(&c, &file, db, "postgres", &[]);
        }
        let registered: Vec<String> = r
            .query("SELECT sequence::text FROM snowflake_sequences ORDER BY 1", &[])
            .unwrap()
            .iter()
            .map(|x| x.get(0))
            .collect();
        assert_eq!(registered, expected, "{db}");
        if expected.is_empty() {
            let mut hint = String::new();
            for _ in 0..10 {
                if let Err(e) = r.batch_execute(&format!("INSERT INTO {table} (v) VALUES (1)")) {
                    let (code, _, h) = db_error(&e);
                    assert_eq!(code, "2200H", "{db}");
                    hint = h;
                    break;
                }
            }
            assert!(hint.contains("snowflake_sequence_register") && hint.contains("NO MAXVALUE"), "{db}: {hint}");
            r.batch_execute(&format!("SELECT snowflake_sequence_register_table('{table}')")).unwrap();
        }
        let id: i64 = r.query_one(&format!("INSERT INTO {table} (v) VALUES (2) RETURNING id"), &[]).unwrap().get(0);
        assert!(ours(&mut r, id) && id > max, "{db}: {id} after {max}");
    }
}

/// From the review's list of what held up, kept so: values a session cached
/// (CACHE 50) before a registration are not handed out after it, and an
/// UNLOGGED sequence keeps its fence through a crash (its init fork holds it).
#[test]
fn cached_values_and_unlogged_sequences_keep_the_fence() {
    let c = cluster("seqcache");
    let mut s = c.session();
    s.batch_execute(
        "CREATE SEQUENCE cached CACHE 50; CREATE TABLE cchk (a int CHECK (nextval('cached') > 0));
         CREATE UNLOGGED SEQUENCE ul; CREATE TABLE uchk (a int CHECK (nextval('ul') > 0));",
    )
    .unwrap();
    let mut other = c.connect();
    let first: i64 = other.query_one("SELECT nextval('cached')", &[]).unwrap().get(0);
    assert_eq!(first, 1);
    s.batch_execute("SELECT snowflake_sequence_register('cached'); SELECT snowflake_sequence_register('ul')").unwrap();
    let id: i64 = other.query_one("SELECT nextval('cached')", &[]).unwrap().get(0);
    assert!(ours(&mut s, id), "a value the session cached before: {id}");
    let (code, _, _) = error_of(&mut other, "INSERT INTO cchk VALUES (1)");
    assert_eq!(code, "2200H", "the cache was dropped with the registration");
    c.stop_immediate();
    c.start();
    let mut s = c.connect();
    let (code, _, _) = error_of(&mut s, "INSERT INTO uchk VALUES (1)");
    assert_eq!(code, "2200H", "an unlogged sequence's fence survives a crash");
    let id: i64 = s.query_one("SELECT nextval('ul')", &[]).unwrap().get(0);
    assert!(ours(&mut s, id));
    s.batch_execute("SELECT snowflake_sequence_unregister('ul')").unwrap();
    let next: Vec<i64> =
        s.query("SELECT nextval('ul') FROM generate_series(1, 2)", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(next[0] > id && next[1] == next[0] + 1, "{next:?}");
}

/// Review of 0.7.0, findings 7 and 8: once anything was registered, an
/// identity insert through a view (whose owner's rights govern the table)
/// was refused, while the right to insert into a child table let a role
/// advance its parent's identity sequence. A planned identity default now
/// checks what PostgreSQL checks (the statement's own rights), and a direct
/// call the column's right on the table the sequence feeds.
#[test]
fn identity_defaults_are_checked_as_postgresql_checks_them() {
    let c = cluster("seqidentityrights");
    let mut s = c.session();
    s.batch_execute(
        "CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN; GRANT CREATE ON SCHEMA public TO alice;
         SET ROLE alice;
         CREATE TABLE acct (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
         CREATE VIEW acct_v AS SELECT v FROM acct;
         GRANT INSERT ON acct_v TO bob;
         CREATE TABLE parent (id bigint GENERATED BY DEFAULT AS IDENTITY, v text);
         CREATE TABLE child () INHERITS (parent);
         GRANT INSERT ON child TO bob;
         RESET ROLE;
         CREATE SEQUENCE unrelated; SELECT snowflake_sequence_register('unrelated');",
    )
    .unwrap();
    let mut bob = connect_as(&c, "postgres", "bob");
    bob.batch_execute("INSERT INTO acct_v (v) VALUES ('through the view')")
        .unwrap_or_else(|e| panic!("an insert through a view bob may insert into: {e}"));
    let (code, message, _) = error_of(&mut bob, "SELECT snowflake_sequence_nextval_identity('parent_id_seq')");
    assert_eq!(code, "42501", "a child's INSERT right is no right on its parent's sequence: {message}");
    s.batch_execute("SELECT snowflake_sequence_register_table('acct')").unwrap();
    bob.batch_execute("INSERT INTO acct_v (v) VALUES ('registered')").unwrap();
    let id: i64 = s.query_one("SELECT id FROM acct WHERE v = 'registered'", &[]).unwrap().get(0);
    assert!(ours(&mut s, id));
}

/// Review of 0.7.0, finding 2: an unregistration's native values run into
/// the ID space, and a second registration served IDs below them (and then
/// equal to them). Registering now raises the server's floor above the
/// sequence's own value, and unregistering continues above both.
#[test]
fn a_registration_serves_ids_above_the_sequences_own_values() {
    let c = cluster("seqfloor");
    let mut s = c.session();
    s.batch_execute("CREATE TABLE u (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('u')")
        .unwrap();
    s.batch_execute("INSERT INTO u (v) VALUES (1); SELECT snowflake_sequence_unregister('u_id_seq')").unwrap();
    // Native values far into the ID space: a tenth of a second ahead, at a
    // node number above this server's.
    s.batch_execute(
        "SELECT setval('u_id_seq', snowflake_from_timestamp(clock_timestamp() + interval '100 ms') + (1::bigint << 21));
         INSERT INTO u (v) VALUES (2);",
    )
    .unwrap();
    let native: i64 = s.query_one("SELECT max(id) FROM u", &[]).unwrap().get(0);
    // Ahead of the clock: a floor there needs the right a floor needs.
    s.batch_execute(
        "CREATE ROLE owner_only LOGIN; ALTER TABLE u OWNER TO owner_only;
         GRANT EXECUTE ON FUNCTION snowflake_next_id() TO owner_only;",
    )
    .unwrap();
    let mut owner = connect_as(&c, "postgres", "owner_only");
    let (code, message, _) = error_of(&mut owner, "SELECT snowflake_sequence_register_table('u')");
    assert_eq!(code, "42501", "{message}");
    s.batch_execute("SELECT snowflake_sequence_register_table('u')").unwrap();
    let ids: Vec<i64> = s
        .query("INSERT INTO u (v) SELECT 3 FROM generate_series(1, 1000) RETURNING id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(ids.iter().all(|id| *id > native), "registered IDs above the native {native}");
    s.batch_execute("SELECT snowflake_sequence_unregister('u_id_seq')").unwrap();
    let after: i64 = s.query_one("INSERT INTO u (v) VALUES (4) RETURNING id", &[]).unwrap().get(0);
    assert!(ids.iter().all(|id| after > *id), "native again, above every ID");
}

/// Review of 0.7.0, finding 10: DDL that changes nothing the fence holds
/// (what ORMs' migrations write) was refused; what changes it still is.
/// And finding 11: a registration of a relation that does not exist said
/// XX000.
#[test]
fn ddl_that_changes_nothing_passes_and_a_missing_relation_is_named() {
    let c = cluster("seqnoop");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE ev (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);
         CREATE SEQUENCE plain INCREMENT BY 10;
         SELECT snowflake_sequence_register_table('ev'); SELECT snowflake_sequence_register('plain');",
    )
    .unwrap();
    let fence: i64 =
        s.query_one("SELECT seqmax FROM pg_sequence WHERE seqrelid = 'plain'::regclass", &[]).unwrap().get(0);
    s.batch_execute(&format!(
        "ALTER TABLE ev ALTER COLUMN id TYPE bigint;
         ALTER SEQUENCE plain NO CYCLE; ALTER SEQUENCE plain AS bigint; ALTER SEQUENCE plain INCREMENT BY 10;
         ALTER SEQUENCE plain MAXVALUE {fence}; ALTER SEQUENCE plain CACHE 5;"
    ))
    .unwrap_or_else(|e| panic!("DDL that changes nothing: {e}"));
    for ddl in [
        "ALTER SEQUENCE plain CYCLE",
        "ALTER SEQUENCE plain NO MAXVALUE",
        "ALTER SEQUENCE plain INCREMENT BY 20",
        "ALTER SEQUENCE plain RESTART",
        "ALTER SEQUENCE plain AS integer",
        "ALTER TABLE ev ALTER COLUMN id TYPE integer",
        "ALTER TABLE ev ALTER COLUMN id RESTART",
        "ALTER TABLE ev ALTER COLUMN id DROP IDENTITY",
    ] {
        let (code, message, _) = error_of(&mut s, ddl);
        assert_eq!(code, "55000", "{ddl}: {message}");
    }
    let (code, message, _) = error_of(&mut s, "SELECT snowflake_sequence_register(999999::oid::regclass)");
    assert_eq!(code, "42P01", "{message}");
}

/// A registry row deleted by its sequence's owner ends the registration as
/// unregistering does: the fence lifted, native values above every ID.
#[test]
fn deleting_a_registry_row_unregisters_its_sequence() {
    let c = cluster("seqdelete");
    let mut s = c.session();
    s.batch_execute("CREATE TABLE d (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('d')")
        .unwrap();
    let id: i64 = s.query_one("INSERT INTO d (v) VALUES (1) RETURNING id", &[]).unwrap().get(0);
    s.batch_execute("DELETE FROM snowflake_sequence_registry WHERE seq = 'd_id_seq'::regclass").unwrap();
    let next: Vec<i64> =
        s.query("INSERT INTO d (v) VALUES (2), (3) RETURNING id", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(next[0] > id && next[1] == next[0] + 1, "native above the ID handed out: {id}, then {next:?}");
}

/// Review of 0.7.0, finding 4: a registry read in parallel mode was kept as
/// "not installed", and the DDL checks were off for the rest of the session.
#[test]
fn a_registry_read_in_parallel_mode_is_not_kept() {
    let c = cluster("seqparallel");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE pt (id bigserial PRIMARY KEY); SELECT snowflake_sequence_register_table('pt');
         CREATE FUNCTION helper() RETURNS int LANGUAGE plpgsql PARALLEL SAFE AS $$
         BEGIN RETURN (SELECT CASE WHEN false THEN nextval('pt_id_seq') ELSE 1 END); END $$;",
    )
    .unwrap();
    let mut fresh = c.connect();
    let version: i32 = fresh.query_one("SELECT current_setting('server_version_num')::int", &[]).unwrap().get(0);
    let force = if version >= 160000 { "debug_parallel_query" } else { "force_parallel_mode" };
    fresh
        .batch_execute(&format!(
            "SET {force} = on; SET max_parallel_workers = 0; SELECT helper(); RESET {force}; RESET max_parallel_workers"
        ))
        .unwrap();
    let (code, message, _) = error_of(&mut fresh, "ALTER SEQUENCE pt_id_seq RESTART WITH 1");
    assert_eq!(code, "55000", "{message}");
}

/// Second review of 0.7.0, finding 1: the mark that tells the identity
/// function a call is a planned default (its input collation) could be
/// given by an aggregate's final function, which any role may create: no
/// privilege was checked. Such a call is now checked as any other.
#[test]
fn an_aggregate_cannot_pass_for_a_planned_identity_default() {
    let c = cluster("seqidagg");
    let mut s = c.session();
    s.batch_execute(
        "CREATE ROLE bob LOGIN; GRANT CREATE ON SCHEMA public TO bob;
         CREATE SEQUENCE private; CREATE SEQUENCE reg; SELECT snowflake_sequence_register('reg');",
    )
    .unwrap();
    let mut bob = connect_as(&c, "postgres", "bob");
    bob.batch_execute(
        "CREATE FUNCTION sf(regclass, text) RETURNS regclass LANGUAGE sql AS 'SELECT $2::regclass';
         CREATE AGGREGATE agg(text) (sfunc = sf, stype = regclass, finalfunc = snowflake_sequence_nextval_identity);",
    )
    .unwrap();
    for seq in ["private", "reg"] {
        let (code, message, _) = error_of(&mut bob, &format!("SELECT agg('{seq}' COLLATE \"C\")"));
        assert_eq!(code, "42501", "{seq}: {message}");
    }
}

/// Second review of 0.7.0, finding 2: a registry row inserted by hand
/// skipped what registering checks of the sequence's value and columns: a
/// sequence ahead of the clock was registered without raising the floor,
/// and IDs below its values were served. The row trigger now checks both.
#[test]
fn a_registry_row_inserted_by_hand_is_held_to_the_floor_and_the_columns() {
    let c = cluster("seqhandrow");
    let mut s = c.session();
    s.batch_execute(
        "CREATE ROLE owner_only LOGIN; GRANT CREATE ON SCHEMA public TO owner_only;
         GRANT EXECUTE ON FUNCTION snowflake_next_id() TO owner_only;
         GRANT INSERT ON snowflake_sequence_registry TO owner_only;
         SET ROLE owner_only;
         CREATE TABLE fut (id bigserial PRIMARY KEY, v int);
         CREATE TABLE narrow (id serial PRIMARY KEY, v int);
         CREATE SEQUENCE wide; CREATE TABLE narrow_default (id int DEFAULT nextval('wide'));
         SELECT setval('fut_id_seq', snowflake_from_timestamp(clock_timestamp() + interval '1 minute'));
         INSERT INTO fut (v) VALUES (1);
         RESET ROLE;",
    )
    .unwrap();
    let native: i64 = s.query_one("SELECT max(id) FROM fut", &[]).unwrap().get(0);
    let mut owner = connect_as(&c, "postgres", "owner_only");
    let row = |seq: &str| {
        format!("INSERT INTO snowflake_sequence_registry VALUES ('{seq}', 'either', 9223372036854775807, false)")
    };
    for seq in ["fut_id_seq", "narrow_id_seq", "wide"] {
        owner.batch_execute(&row(seq)).unwrap();
    }
    let registered: i64 = s.query_one("SELECT count(*) FROM snowflake_sequences", &[]).unwrap().get(0);
    assert_eq!(registered, 0, "rows left out");
    let log = c.log();
    assert!(log.contains("\"fut_id_seq\" left out: permission denied to raise"), "{log}");
    assert!(log.contains("\"narrow_id_seq\" left out: sequence \"narrow_id_seq\" is of type integer"), "{log}");
    assert!(
        log.contains("\"wide\" left out: column \"id\" of relation \"narrow_default\" is of type integer"),
        "{log}"
    );
    // A superuser's row raises the floor: the IDs lie above the sequence's.
    s.batch_execute(&row("fut_id_seq")).unwrap();
    let id: i64 = s.query_one("INSERT INTO fut (v) VALUES (2) RETURNING id", &[]).unwrap().get(0);
    assert!(id > native && ours(&mut s, id), "{id} above {native}");
    // Third review of 0.7.0: a floor refused (days ahead, beyond
    // max_clock_drift) leaves the row out instead of failing the statement
    // (a restore's COPY); a row whose native MAXVALUE lies below the
    // sequence's is no dump's fence: the fence is set where the sequence is.
    s.batch_execute(
        "CREATE SEQUENCE far; SELECT setval('far', snowflake_from_timestamp(clock_timestamp() + interval '3 days'));
         CREATE SEQUENCE odd; SELECT nextval('odd');",
    )
    .unwrap();
    s.batch_execute(&row("far")).unwrap_or_else(|e| panic!("a refused floor failed the statement: {:?}", db_error(&e)));
    assert!(c.log().contains("\"far\" left out: snowflake ID"), "{}", c.log());
    s.batch_execute("INSERT INTO snowflake_sequence_registry VALUES ('odd', 'either', 1000, false)").unwrap();
    let fence: i64 =
        s.query_one("SELECT seqmax FROM pg_sequence WHERE seqrelid = 'odd'::regclass", &[]).unwrap().get(0);
    assert_eq!(fence, 2, "the fence where the sequence stands (a fresh one gives up one value)");
}

/// Second review of 0.7.0, findings 4 and 5: a setval above the fence took
/// ALTER SEQUENCE's lock (two transactions that inserted and reset the
/// sequence, as Django's sqlsequencereset does, deadlocked), and SET LOGGED
/// or UNLOGGED, which rewrite a sequence, failed at commit.
#[test]
fn setval_and_set_unlogged_leave_the_fence_and_wait_for_nothing() {
    let c = cluster("seqsetvalwait");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE dl (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('dl');
         CREATE TABLE dl2 (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('dl2');
         CREATE TABLE chk (a int CHECK (nextval('dl_id_seq') > 0));",
    )
    .unwrap();
    let mut a = c.connect();
    let mut b = c.connect();
    let reset = "SELECT setval('dl_id_seq', (SELECT max(id) FROM dl))";
    a.batch_execute(&format!("BEGIN; INSERT INTO dl (v) VALUES (1); {reset}")).unwrap();
    b.batch_execute(&format!("SET statement_timeout = '5s'; BEGIN; INSERT INTO dl (v) VALUES (2); {reset}"))
        .unwrap_or_else(|e| panic!("a setval waited: {:?}", db_error(&e)));
    a.batch_execute(&format!("{reset}; COMMIT")).unwrap();
    b.batch_execute("COMMIT").unwrap();
    s.batch_execute(
        "BEGIN; ALTER SEQUENCE dl_id_seq SET UNLOGGED; ALTER TABLE dl2 SET UNLOGGED; COMMIT;
         ALTER SEQUENCE dl_id_seq SET LOGGED;",
    )
    .unwrap_or_else(|e| panic!("SET UNLOGGED: {:?}", db_error(&e)));
    let (code, _, _) = error_of(&mut s, "INSERT INTO chk VALUES (1)");
    assert_eq!(code, "2200H", "the fence holds");
    let id: i64 = s.query_one("INSERT INTO dl2 (v) VALUES (3) RETURNING id", &[]).unwrap().get(0);
    assert!(ours(&mut s, id));
}

/// Second review of 0.7.0, finding 6: COPY's WHERE clause, which no planner
/// sees, called native setval and moved a registered sequence below its
/// fence (a CHECK's nextval then handed out small numbers). snowflake_id
/// now runs such a COPY with its functions in the WHERE clause.
#[test]
fn copy_where_calls_the_registered_sequence() {
    use std::io::Write;
    let c = cluster("seqcopywhere");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE w (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('w');
         CREATE TABLE sink (a int, k bigint); CREATE TABLE chk (a int CHECK (nextval('w_id_seq') > 0));",
    )
    .unwrap();
    for clause in ["setval('w_id_seq', 1) > 0", "nextval('w_id_seq') > 0"] {
        let mut w = s.copy_in(&format!("COPY sink (a) FROM STDIN WHERE {clause}")).unwrap();
        w.write_all(b"1\n2\n").unwrap();
        assert_eq!(w.finish().unwrap(), 2, "{clause}");
    }
    let (code, _, _) = error_of(&mut s, "INSERT INTO chk VALUES (1)");
    assert_eq!(code, "2200H", "the fence holds");
}

/// Second review of 0.7.0, findings 7 to 9: currval, lastval and setval
/// as native ones answer. An unregistering session's currval is what it
/// was; a failed setval changes no answer; setval's bounds are the
/// sequence's own; a DISCARD that fails forgets nothing; lastval of a
/// dropped sequence is native lastval's error; and EXECUTE's parameters
/// know what the session was handed after an unregistration.
#[test]
fn currval_lastval_and_setval_answer_as_native_ones() {
    let c = cluster("seqnative");
    let mut s = c.session();
    s.batch_execute(
        "CREATE TABLE b (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('b');
         CREATE SEQUENCE plain MAXVALUE 100; CREATE SEQUENCE gone; SELECT snowflake_sequence_register('gone');",
    )
    .unwrap();
    let mut fresh = c.connect();
    fresh.batch_execute("SELECT snowflake_sequence_unregister('b_id_seq')").unwrap();
    let (code, message, _) = error_of(&mut fresh, "SELECT currval('b_id_seq')");
    assert_eq!(code, "55000", "the unregistering session's currval: {message}");
    s.batch_execute("SELECT snowflake_sequence_register_table('b')").unwrap();
    // A session handed an ID, and a native value.
    let mut a = c.connect();
    let id: i64 = a.query_one("SELECT nextval('b_id_seq')", &[]).unwrap().get(0);
    let p: i64 = a.query_one("SELECT nextval('plain')", &[]).unwrap().get(0);
    let (code, _, _) = error_of(&mut a, "SELECT setval('plain', 5000)");
    assert_eq!(code, "22003");
    let current: i64 = a.query_one("SELECT currval('plain')", &[]).unwrap().get(0);
    assert_eq!(current, p, "a failed setval changes nothing");
    let (code, message, _) = error_of(&mut a, "SELECT setval('b_id_seq', -5)");
    assert_eq!(code, "22003", "{message}");
    let (code, _, _) = error_of(&mut a, "BEGIN; DISCARD ALL");
    assert_eq!(code, "25001");
    a.batch_execute("ROLLBACK").unwrap();
    let current: i64 = a.query_one("SELECT currval('b_id_seq')", &[]).unwrap().get(0);
    assert_eq!(current, id, "a DISCARD that failed forgets nothing");
    a.batch_execute("SELECT nextval('gone')").unwrap();
    s.batch_execute("SELECT snowflake_sequence_unregister('gone'); DROP SEQUENCE gone").unwrap();
    let (code, message, _) = error_of(&mut a, "SELECT lastval()");
    assert_eq!(code, "55000", "lastval of a dropped sequence: {message}");
    let id: i64 = a.query_one("SELECT nextval('b_id_seq')", &[]).unwrap().get(0);
    s.batch_execute("SELECT snowflake_sequence_unregister('b_id_seq')").unwrap();
    a.batch_execute("PREPARE p(bigint) AS SELECT $1").unwrap();
    let row = a.query_one("EXECUTE p(lastval())", &[]).unwrap();
    assert_eq!(row.get::<_, i64>(0), id, "EXECUTE's lastval after the unregistration");
    let row = a.query_one("EXECUTE p(currval('b_id_seq'))", &[]).unwrap();
    assert_eq!(row.get::<_, i64>(0), id, "EXECUTE's currval after the unregistration");
}

/// Fourth review of 0.7.0, findings 1 to 3: an SQL function whose body
/// spells nextval or setval with Unicode escapes was inlined with the
/// native call; EXECUTE's parameters under EXPLAIN or CREATE TABLE AS were
/// native calls; and a ROLLBACK TO SAVEPOINT that gave a registered
/// sequence back an earlier storage failed the commit (it even lost the
/// registration made before the savepoint).
#[test]
fn escaped_names_wrapped_executes_and_savepoints_keep_the_fence() {
    let c = cluster("seqescapes");
    let mut s = c.session();
    s.batch_execute(
        r#"CREATE TABLE t (id bigserial PRIMARY KEY, v int); SELECT snowflake_sequence_register_table('t');
           CREATE TABLE store (k bigint); CREATE TABLE chk (a int CHECK (nextval('t_id_seq') > 0));
           CREATE FUNCTION hid_set(bigint) RETURNS bigint LANGUAGE sql AS $$ SELECT U&"\0073etval"('t_id_seq', $1) $$;
           CREATE FUNCTION hid_next() RETURNS bigint LANGUAGE sql AS $$ SELECT U&"\006Eextval"('t_id_seq') $$;
           PREPARE p(bigint) AS SELECT $1;"#,
    )
    .unwrap();
    s.batch_execute(
        "SELECT hid_set(1); INSERT INTO store SELECT hid_next();
         EXPLAIN (ANALYZE) EXECUTE p(setval('t_id_seq', 1)); EXPLAIN (ANALYZE) EXECUTE p(nextval('t_id_seq'));
         CREATE TABLE copied AS EXECUTE p(nextval('t_id_seq'));",
    )
    .unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
    let stored: Vec<i64> =
        s.query("SELECT k FROM store UNION ALL SELECT * FROM copied", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(stored.len(), 2);
    for id in stored {
        assert!(ours(&mut s, id), "{id}");
    }
    let (code, _, _) = error_of(&mut s, "INSERT INTO chk VALUES (1)");
    assert_eq!(code, "2200H", "the fence holds");
    s.batch_execute(
        "BEGIN; TRUNCATE t RESTART IDENTITY; SAVEPOINT a; TRUNCATE t RESTART IDENTITY; ROLLBACK TO a;
         INSERT INTO t (v) VALUES (1); COMMIT;
         CREATE TABLE u (id bigserial PRIMARY KEY);
         BEGIN; SELECT snowflake_sequence_register_table('u'); SAVEPOINT a; ALTER SEQUENCE u_id_seq CACHE 5;
         ROLLBACK TO a; COMMIT;",
    )
    .unwrap_or_else(|e| panic!("savepoints: {:?}", db_error(&e)));
    let registered: i64 = s
        .query_one("SELECT count(*) FROM snowflake_sequences WHERE sequence = 'u_id_seq'::regclass", &[])
        .unwrap()
        .get(0);
    assert_eq!(registered, 1);
}

/// Fourth review of 0.7.0, finding 7: DROP OWNED BY the extension's owner
/// dropped it, with registered sequences, without CASCADE.
#[test]
fn drop_owned_asks_for_cascade_as_drop_extension_does() {
    let c = cluster("seqdropowned");
    let mut admin = c.connect();
    admin.batch_execute("CREATE ROLE extowner SUPERUSER LOGIN").unwrap();
    admin.batch_execute("CREATE DATABASE owned").unwrap();
    let mut o = connect_as(&c, "owned", "extowner");
    o.batch_execute("CREATE EXTENSION snowflake_id; CREATE SEQUENCE s; SELECT snowflake_sequence_register('s')")
        .unwrap();
    let (code, message, hint) = error_of(&mut o, "DROP OWNED BY extowner");
    assert_eq!(code, "2BP01", "{message}");
    assert!(hint.contains("DROP OWNED ... CASCADE"), "{hint}");
    o.batch_execute("SELECT snowflake_sequence_unregister('s'); DROP OWNED BY extowner").unwrap();
}

/// Fourth review of 0.7.0: a pooled client that read a native value as its
/// block's first used the increment's values from it; a registration of
/// its sequence (counting natively in the ID space) raises the floor above
/// that block, not only above the value.
#[test]
fn a_registration_serves_ids_above_a_native_pooled_block() {
    let c = cluster("seqpooledfloor");
    let mut s = c.session();
    s.batch_execute(
        "CREATE SEQUENCE pooled INCREMENT BY 50;
         SELECT setval('pooled', snowflake_from_timestamp(clock_timestamp() + interval '50 ms'));",
    )
    .unwrap();
    let native: i64 = s.query_one("SELECT nextval('pooled')", &[]).unwrap().get(0);
    s.batch_execute("SELECT snowflake_sequence_register('pooled', 'low')").unwrap();
    let first: i64 = s.query_one("SELECT nextval('pooled')", &[]).unwrap().get(0);
    assert!(first > native + 49, "the first registered block {first} above the native one {native}..{}", native + 49);
}

/// Fifth review of 0.7.0: a function's parameter default that calls
/// nextval or setval was filled in by the planner after our hook, so it
/// called the native function (through a direct call, an inlined SQL
/// function, a BEGIN ATOMIC body, a procedure's CALL); an SQL function whose
/// body is not one SELECT failed while anything was registered; EXPLAIN of
/// CREATE TABLE AS EXECUTE ran a native setval; and registering ran the
/// caller's own operators.
#[test]
fn parameter_defaults_sql_bodies_and_nested_executes_keep_the_promise() {
    let c = cluster("seqdefaults");
    let mut s = c.session();
    s.batch_execute(
        r#"CREATE TABLE t (id bigserial PRIMARY KEY, v int); INSERT INTO t (v) VALUES (1), (2);
           CREATE FUNCTION h(x bigint DEFAULT nextval('t_id_seq')) RETURNS bigint LANGUAGE plpgsql AS 'BEGIN RETURN x; END';
           CREATE FUNCTION hs(x bigint DEFAULT nextval('t_id_seq')) RETURNS bigint LANGUAGE sql AS 'SELECT x';
           CREATE FUNCTION ins(v int, x bigint DEFAULT nextval('t_id_seq')) RETURNS bigint LANGUAGE sql
             AS 'INSERT INTO t VALUES (x, v) RETURNING id';
           CREATE FUNCTION w() RETURNS bigint LANGUAGE sql AS 'SELECT h()';
           CREATE FUNCTION atomic_w() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT h(); END;
           CREATE FUNCTION sv(x bigint DEFAULT setval('t_id_seq', 1)) RETURNS bigint LANGUAGE plpgsql AS 'BEGIN RETURN x; END';
           CREATE TABLE log (id bigint);
           CREATE PROCEDURE pr(x bigint DEFAULT nextval('t_id_seq')) LANGUAGE plpgsql AS 'BEGIN INSERT INTO log VALUES (x); END';
           CREATE FUNCTION wipe() RETURNS void LANGUAGE sql AS $$ TRUNCATE log $$;
           CREATE PROCEDURE notify_sql() LANGUAGE sql AS $$ NOTIFY done $$;
           CREATE SCHEMA evil;
           CREATE FUNCTION evil.oideq(oid, oid) RETURNS bool LANGUAGE plpgsql
             AS $$ BEGIN RAISE EXCEPTION 'the caller''s operator ran'; END $$;
           CREATE OPERATOR evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = evil.oideq);
           CREATE SEQUENCE other;
           CREATE FUNCTION f(a int DEFAULT 0, b int DEFAULT 0) RETURNS int LANGUAGE sql AS 'SELECT a + b';
           CREATE OR REPLACE FUNCTION f(a int DEFAULT f(1), b int DEFAULT 0) RETURNS int LANGUAGE sql AS 'SELECT a + b';
           CREATE FUNCTION k(a bigint DEFAULT 0, b bigint DEFAULT 0) RETURNS bigint LANGUAGE sql AS 'SELECT b';
           CREATE FUNCTION j(a bigint DEFAULT k(0)) RETURNS bigint LANGUAGE sql AS 'SELECT a';
           CREATE OR REPLACE FUNCTION k(a bigint DEFAULT j(), b bigint DEFAULT nextval('t_id_seq')) RETURNS bigint
             LANGUAGE sql AS 'SELECT b';"#,
    )
    .unwrap();
    // Only the defaults a call leaves out are looked into, as PostgreSQL
    // fills in only those (f's first one calls f again).
    let sum: i32 = s.query_one("SELECT f(5)", &[]).unwrap_or_else(|e| panic!("{:?}", db_error(&e))).get(0);
    assert_eq!(sum, 5);
    s.batch_execute("SELECT snowflake_sequence_register_table('t')").unwrap();
    let sums = s.query_one("SELECT f(5), f(b => 2), h(x => 7)", &[]).unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
    assert_eq!((sums.get::<_, i32>(0), sums.get::<_, i32>(1), sums.get::<_, i64>(2)), (5, 3, 7));
    // k's defaults call j, whose default calls k again: looked into from k
    // first, j's answer then is not kept as final, and j() later reaches
    // k's nextval.
    for call in ["SELECT k(1)", "SELECT j()"] {
        let id: i64 = s.query_one(call, &[]).unwrap_or_else(|e| panic!("{call}: {:?}", db_error(&e))).get(0);
        assert!(ours(&mut s, id), "{call}: {id}");
    }
    let row =
        s.query_one("SELECT h(), hs(), ins(5), w(), atomic_w()", &[]).unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
    for i in 0..5 {
        let id: i64 = row.get(i);
        assert!(ours(&mut s, id), "column {i}: {id}");
    }
    s.batch_execute("CALL pr()").unwrap();
    let logged: i64 = s.query_one("SELECT id FROM log", &[]).unwrap().get(0);
    assert!(ours(&mut s, logged), "{logged}");
    let native_before: i64 = s.query_one("SELECT last_value FROM t_id_seq", &[]).unwrap().get(0);
    s.batch_execute(
        "SELECT sv();
         PREPARE p(bigint) AS SELECT $1;
         EXPLAIN CREATE TABLE x AS EXECUTE p(setval('t_id_seq', 1));",
    )
    .unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
    let native_after: i64 = s.query_one("SELECT last_value FROM t_id_seq", &[]).unwrap().get(0);
    assert_eq!(native_after, native_before, "no native setval moved the sequence");
    let id: i64 = s.query_one("SELECT h()", &[]).unwrap().get(0);
    assert!(ours(&mut s, id) && id > logged, "{id}");
    s.batch_execute("SELECT wipe(); CALL notify_sql()").unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
    // Where calls are matched by name before analysis, a left-out default
    // that calls a registered sequence is refused, not run natively; COPY's
    // WHERE, analysed before it runs, is served.
    for refused in ["EXECUTE p(hs())", "ALTER TABLE log ADD COLUMN c bigint DEFAULT hs()"] {
        let (code, message, hint) = error_of(&mut s, refused);
        assert_eq!(code, "0A000", "{refused}: {message}");
        assert!(hint.contains("Pass that argument"), "{hint}");
    }
    s.batch_execute("COPY log FROM PROGRAM 'echo 1' WHERE hs() > 0").unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
    let native_now: i64 = s.query_one("SELECT last_value FROM t_id_seq", &[]).unwrap().get(0);
    assert_eq!(native_now, native_before, "nothing ran natively");
    s.batch_execute("SET search_path = evil, pg_catalog, public; SELECT snowflake_sequence_register('public.other')")
        .unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
}
