//! snowflake_id beside TimescaleDB: hypertables whose key a registered
//! sequence fills, on every insert path TimescaleDB has, in both load
//! orders of shared_preload_libraries.
//!
//! Needs TimescaleDB for the PostgreSQL that SNOWFLAKE_PG_CONFIG names
//! (Debian sid's postgresql-18-timescaledb, which .ci/sid installs), and
//! snowflake_id installed there (scripts/test installs the .deb first).
//! Debian's build is TimescaleDB's Apache-licensed part: no compression.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;

use common::{db_error, Cluster};

const ROWS: i64 = 3000;

/// A server with both libraries, in `order`.
fn server(name: &str, order: &str) -> Cluster {
    let c = Cluster::new(
        name,
        &[
            &format!("shared_preload_libraries = '{order}'"),
            "timescaledb.telemetry_level = off",
            "snowflake_id.worker_id = 4",
        ],
    );
    c.start();
    c
}

/// A hypertable keyed by a serial (or identity) column whose sequence is
/// registered, partitioned by time in chunks of a day.
fn hypertable(s: &mut postgres::Client, name: &str, identity: bool) {
    let key = if identity { "bigint GENERATED ALWAYS AS IDENTITY" } else { "bigserial" };
    s.batch_execute(&format!(
        "CREATE TABLE {name} (id {key}, at timestamptz NOT NULL DEFAULT now(), v int, PRIMARY KEY (id, at));
         SELECT create_hypertable('{name}', by_range('at', interval '1 day'));
         SELECT snowflake_sequence_register(pg_get_serial_sequence('{name}', 'id'));"
    ))
    .unwrap_or_else(|e| panic!("{name}: {:?}", db_error(&e)));
}

/// COPY of `ROWS` rows spread over ten days (ten chunks), the key left out.
fn copy_rows(s: &mut postgres::Client, table: &str, filter: &str) -> Result<u64, postgres::Error> {
    let mut w = s.copy_in(&format!("COPY {table} (at, v) FROM STDIN{filter}"))?;
    for i in 0..ROWS {
        writeln!(w, "2026-11-{:02} 12:00:00+00\t{i}", 10 + i % 10).unwrap();
    }
    w.finish()
}

/// Every key of `table` is a snowflake ID of this server's number, none
/// repeated, and `rows` of them.
fn all_snowflake(s: &mut postgres::Client, table: &str, rows: i64, what: &str) {
    let row = s
        .query_one(
            &format!(
                "SELECT count(*), count(DISTINCT id),
                        count(*) FILTER (WHERE (SELECT worker_id FROM snowflake_decode(id)) <> 4 OR id < 1000000000),
                        count(DISTINCT tableoid)
                   FROM {table}"
            ),
            &[],
        )
        .unwrap();
    let (count, distinct, foreign, chunks): (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!((count, distinct, foreign), (rows, rows, 0), "{what}: rows, distinct keys, keys not ours");
    assert!(chunks > 1, "{what}: the rows went into {chunks} chunk(s)");
}

#[test]
#[ignore = "needs TimescaleDB: scripts/test runs it in the sid chroot on PostgreSQL 18"]
fn copy_into_a_hypertable_gets_snowflake_ids_with_snowflake_id_listed_after_timescaledb() {
    let c = server("tscopy", "timescaledb,snowflake_id");
    let mut s = c.session();
    s.batch_execute("CREATE EXTENSION timescaledb").unwrap();
    for (table, identity) in [("h", false), ("hi", true)] {
        hypertable(&mut s, table, identity);
        let copied = copy_rows(&mut s, table, "").unwrap_or_else(|e| panic!("{table}: {:?}", db_error(&e)));
        assert_eq!(copied as i64, ROWS, "{table}: COPY's count");
        all_snowflake(&mut s, table, ROWS, table);
    }
    // COPY's WHERE clause, as TimescaleDB's own COPY has it.
    let copied = copy_rows(&mut s, "h", " WHERE v % 3 = 0").unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
    assert_eq!(copied as i64, ROWS / 3, "COPY ... WHERE");
    all_snowflake(&mut s, "h", ROWS + ROWS / 3, "COPY ... WHERE");
    // Row triggers on the hypertable fire for each copied row, with its key.
    hypertable(&mut s, "ht", false);
    s.batch_execute(
        "CREATE TABLE seen (id bigint);
         CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO seen VALUES (NEW.id); RETURN NEW; END$$;
         CREATE TRIGGER noted AFTER INSERT ON ht FOR EACH ROW EXECUTE FUNCTION note();",
    )
    .unwrap();
    copy_rows(&mut s, "ht", "").unwrap();
    let row = s
        .query_one("SELECT count(seen.id), count(*) FILTER (WHERE ht.id IS NULL OR seen.id IS NULL) FROM ht FULL JOIN seen USING (id)", &[])
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (ROWS, 0), "row triggers saw each copied row");
    // What COPY's own path would do differently is refused before a row
    // is read: skipping bad rows, and a filter on a column the data does
    // not hold (it would see no default there).
    // Both before the client is told to send its data.
    for (filter, what) in [(" WITH (ON_ERROR ignore)", "ON_ERROR"), (" WHERE id > 0", "WHERE")] {
        let e = s.copy_in(&format!("COPY h (at, v) FROM STDIN{filter}")).err().expect(what);
        let (state, message, _) = db_error(&e);
        assert_eq!(state, "0A000", "{what}: {message}");
        // The client library loses its footing after an error that
        // precedes COPY's data (as in tests/coexistence.rs): a new session.
        s = c.session();
    }
    // A bad row names its line, as COPY does.
    let e = s
        .copy_in("COPY h (at, v) FROM STDIN")
        .and_then(|mut w| {
            w.write_all(b"2026-11-10 12:00:00+00\t1\nnot a time\t2\n").unwrap();
            w.finish()
        })
        .expect_err("a bad timestamp");
    let context = e.as_db_error().and_then(|d| d.where_().map(str::to_string)).unwrap_or_default();
    assert!(context.contains("COPY h, line 2"), "{context}");
    s = c.session();
    // No row: COPY's count is 0, nothing goes in.
    let none = s.copy_in("COPY h (at, v) FROM STDIN").and_then(|w| w.finish()).unwrap();
    assert_eq!(none, 0);
    // Privileges as COPY's: INSERT on the columns it names (and USAGE on
    // the sequence its default calls, as natively).
    s.batch_execute(
        "CREATE ROLE loader; GRANT USAGE ON SCHEMA public TO loader; GRANT INSERT (at, v) ON h TO loader;
         GRANT USAGE ON SEQUENCE h_id_seq TO loader;
         GRANT SELECT ON h TO loader; SET ROLE loader",
    )
    .unwrap();
    assert_eq!(
        copy_rows(&mut s, "h", "").map_err(|e| db_error(&e)),
        Ok(ROWS as u64),
        "COPY (at, v) by a role with INSERT on them"
    );
    s.batch_execute("RESET ROLE").unwrap();
    all_snowflake(&mut s, "h", 2 * ROWS + ROWS / 3, "after the loader's COPY");
    // A table that is no hypertable: COPY is ours as before (refused here,
    // another utility hook runs after ours), with the hint that says so.
    s.batch_execute(
        "CREATE TABLE plain (id bigserial PRIMARY KEY, at timestamptz, v int);
         SELECT snowflake_sequence_register('plain_id_seq')",
    )
    .unwrap();
    let e = copy_rows(&mut s, "plain", "").expect_err("a plain table's COPY with another hook after ours");
    assert_eq!(db_error(&e).0, "0A000", "{:?}", db_error(&e));
}

#[test]
#[ignore = "needs TimescaleDB: scripts/test runs it in the sid chroot on PostgreSQL 18"]
fn with_snowflake_id_listed_first_a_hypertables_copy_says_to_list_it_after_timescaledb() {
    let c = server("tsfirst", "snowflake_id,timescaledb");
    let mut s = c.session();
    s.batch_execute("CREATE EXTENSION timescaledb").unwrap();
    hypertable(&mut s, "h", false);
    let e = copy_rows(&mut s, "h", "").expect_err("TimescaleDB's own COPY meets the fence");
    let (state, message, hint) = db_error(&e);
    assert_eq!(state, "2200H", "{message}");
    assert!(
        hint.contains(
            "list snowflake_id after that library in shared_preload_libraries (for TimescaleDB, after timescaledb)"
        ),
        "{hint}"
    );
    // Nothing went in with a native value.
    let mut s = c.session();
    let rows: i64 = s.query_one("SELECT count(*) FROM h", &[]).unwrap().get(0);
    assert_eq!(rows, 0);
}

#[test]
#[ignore = "needs TimescaleDB: scripts/test runs it in the sid chroot on PostgreSQL 18"]
fn every_insert_path_into_a_hypertable_gets_snowflake_ids_in_either_order() {
    for order in ["timescaledb,snowflake_id", "snowflake_id,timescaledb"] {
        let c = server("tsinsert", order);
        let mut s = c.session();
        s.batch_execute("CREATE EXTENSION timescaledb").unwrap();
        hypertable(&mut s, "h", false);
        s.batch_execute(
            "INSERT INTO h (at, v) VALUES ('2026-11-10 01:00+00', 1);
             INSERT INTO h (at, v) VALUES ('2026-11-11 01:00+00', 2), ('2026-11-12 01:00+00', 3);
             INSERT INTO h (at, v) SELECT '2026-11-13 01:00+00'::timestamptz + i * interval '1 hour', i
               FROM generate_series(1, 96) i;
             INSERT INTO h (at, v) VALUES ('2026-11-10 01:00+00', 4) ON CONFLICT DO NOTHING;
             PREPARE ins(timestamptz) AS INSERT INTO h (at, v) VALUES ($1, 5);
             EXECUTE ins('2026-11-20 01:00+00'); EXECUTE ins('2026-11-21 01:00+00');",
        )
        .unwrap_or_else(|e| panic!("{order}: {:?}", db_error(&e)));
        all_snowflake(&mut s, "h", 1 + 2 + 96 + 1 + 2, order);
        // A hypertable keyed by snowflake_next_id() itself, no sequence.
        s.batch_execute(
            "CREATE TABLE d (id bigint NOT NULL DEFAULT snowflake_next_id(), at timestamptz NOT NULL, v int,
                             PRIMARY KEY (id, at));
             SELECT create_hypertable('d', by_range('at', interval '1 day'));",
        )
        .unwrap();
        let copied = copy_rows(&mut s, "d", "").unwrap_or_else(|e| panic!("{order}: {:?}", db_error(&e)));
        assert_eq!(copied as i64, ROWS, "{order}");
        all_snowflake(&mut s, "d", ROWS, &format!("{order}: DEFAULT snowflake_next_id()"));
        c.stop();
    }
}

/// The names of the chunks a plan scans.
fn chunks_scanned(s: &mut postgres::Client, query: &str) -> Vec<String> {
    let plan: Vec<String> = s
        .query(&format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut chunks: Vec<String> = plan
        .iter()
        .filter(|line| !line.contains("never executed"))
        .filter_map(|line| line.split_whitespace().find(|w| w.starts_with("_hyper_")).map(str::to_string))
        .collect();
    chunks.sort();
    chunks.dedup();
    chunks
}

#[test]
#[ignore = "needs TimescaleDB: scripts/test runs it in the sid chroot on PostgreSQL 18"]
fn a_hypertable_partitioned_by_the_snowflake_id_takes_its_chunks_and_ages_as_time() {
    let c = server("tsbyid", "timescaledb,snowflake_id");
    let mut s = c.session();
    s.batch_execute(
        "CREATE EXTENSION timescaledb;
         CREATE TABLE e (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), days_ago int);
         SELECT create_hypertable('e', by_range('id', snowflake_from_interval('1 day')));
         SELECT set_integer_now_func('e', 'snowflake_now');
         -- Rows of the last ten days, with the IDs they would have had then.
         INSERT INTO e SELECT snowflake_from_timestamp(now() - d * interval '1 day') + i, d
           FROM generate_series(1, 10) d, generate_series(1, 100) i;
         INSERT INTO e (days_ago) SELECT 0 FROM generate_series(1, 100);",
    )
    .unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
    // Chunks of a day each, as the IDs count days.
    let row = s
        .query_one(
            "SELECT count(*), min(range_end_integer - range_start_integer), max(range_end_integer - range_start_integer),
                    snowflake_from_interval('1 day')
               FROM timescaledb_information.chunks WHERE hypertable_name = 'e'",
            &[],
        )
        .unwrap();
    let (chunks, narrowest, widest, day): (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert!(chunks >= 11, "{chunks} chunks for eleven days");
    assert_eq!((narrowest, widest), (day, day), "a chunk spans a day of IDs");
    // Chunks of a day line up with days since the epoch (midnight UTC),
    // and a range of time scans only its chunks.
    let aligned: bool = s
        .query_one(
            "SELECT bool_and(snowflake_timestamp(range_start_integer) = date_trunc('day', snowflake_timestamp(range_start_integer), 'UTC'))
               FROM timescaledb_information.chunks WHERE hypertable_name = 'e'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(aligned, "chunks start at midnight UTC");
    let recent = chunks_scanned(
        &mut s,
        "SELECT count(*) FROM e WHERE id >= snowflake_from_timestamp(now() - interval '36 hours')",
    );
    let all = chunks_scanned(&mut s, "SELECT count(*) FROM e");
    assert!((2..=3).contains(&recent.len()), "36 hours scanned {recent:?}, of {}", all.len());
    assert!(all.len() as i64 >= 11, "{all:?}");
    // time_bucket on the key, in days of IDs.
    let buckets: i64 = s
        .query_one("SELECT count(DISTINCT time_bucket(snowflake_from_interval('1 day'), id)) FROM e", &[])
        .unwrap()
        .get(0);
    assert!((11..=12).contains(&buckets), "{buckets} daily buckets");
    // Retention by age (an integer cut-off is absolute for drop_chunks):
    // chunks wholly older than five days go, the newer stay.
    s.batch_execute("SELECT drop_chunks('e', older_than => snowflake_now() - snowflake_from_interval('5 days'))")
        .unwrap();
    // TimescaleDB's integer_now is the one it was given.
    let now: String = s
        .query_one("SELECT integer_now_func FROM timescaledb_information.dimensions WHERE hypertable_name = 'e'", &[])
        .unwrap()
        .get(0);
    assert_eq!(now, "snowflake_now");
    let row = s
        .query_one("SELECT count(*) FILTER (WHERE days_ago >= 7), count(*) FILTER (WHERE days_ago <= 4) FROM e", &[])
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (0, 500), "rows of 7+ days gone, of 0 to 4 days kept");
}
