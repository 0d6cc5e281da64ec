//! Time partitioning on the snowflake key (docs/partitioning.md): a table
//! partitioned by range of `id` into days, with bounds from
//! `snowflake_from_timestamp()`, by hand (plain PostgreSQL) and with the
//! real pg_partman 5 (installed for PostgreSQL 18 by .ci/setup). Rows land
//! in the partition of their ID's time, a time-range query on `id` prunes
//! the other partitions, partitions are made ahead, and old ones dropped.

mod common;

use common::Cluster;

/// One day of IDs under the default layout (epoch 2025-01-01 00:00 UTC):
/// each UTC day's IDs start at a multiple of it.
const DAY_OF_IDS: &str = "(snowflake_from_timestamp('2025-01-02+00') - snowflake_from_timestamp('2025-01-01+00'))";

/// The partition (a table name) each row with `filter` of `table` is in, and
/// how many rows are in each.
fn partitions_of(s: &mut postgres::Client, table: &str, filter: &str) -> Vec<(String, i64)> {
    s.query(
        &format!("SELECT tableoid::regclass::text, count(*) FROM {table} WHERE {filter} GROUP BY 1 ORDER BY 1"),
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// The plan of `query` as EXPLAIN (ANALYZE) shows it.
fn plan(s: &mut postgres::Client, query: &str) -> String {
    s.query(&format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn daily_partitions_by_hand_from_snowflake_from_timestamp() {
    let c = Cluster::new("partitions", &["timezone = 'UTC'"]);
    c.start();
    let mut s = c.session();
    // The recipe of docs/partitioning.md: a partition per UTC day, five days
    // back and two ahead, each bounded by the first IDs of its day and the next.
    s.batch_execute(
        "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), payload text) PARTITION BY RANGE (id);
         CREATE FUNCTION events_partition_for(day date) RETURNS void LANGUAGE plpgsql AS $$
         BEGIN
           EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF events FOR VALUES FROM (%s) TO (%s)',
                          'events_' || to_char(day, 'YYYYMMDD'),
                          snowflake_from_timestamp(day::timestamptz),
                          snowflake_from_timestamp((day + 1)::timestamptz));
         END $$;
         SELECT events_partition_for(d::date) FROM generate_series(current_date - 5, current_date + 2, interval '1 day') d;",
    )
    .unwrap();
    // New rows land in today's partition; a row whose ID is from two days ago, in that day's.
    s.batch_execute(
        "INSERT INTO events (payload) SELECT 'now' FROM generate_series(1, 100);
         INSERT INTO events VALUES (snowflake_from_timestamp(now() - interval '2 days'), 'two days ago')",
    )
    .unwrap();
    let today: String = s.query_one("SELECT 'events_' || to_char(current_date, 'YYYYMMDD')", &[]).unwrap().get(0);
    let two_days_ago: String =
        s.query_one("SELECT 'events_' || to_char(current_date - 2, 'YYYYMMDD')", &[]).unwrap().get(0);
    assert_eq!(partitions_of(&mut s, "events", "payload = 'now'"), vec![(today.clone(), 100)]);
    assert_eq!(partitions_of(&mut s, "events", "payload = 'two days ago'"), vec![(two_days_ago.clone(), 1)]);
    // A time-range query on the key scans only the partitions of that range.
    let plan =
        plan(&mut s, "SELECT count(*) FROM events WHERE id >= snowflake_from_timestamp(now() - interval '1 hour')");
    assert!(plan.contains(&today) && !plan.contains(&two_days_ago), "{plan}");
    assert!(plan.contains("Subplans Removed"), "pruned at executor start:\n{plan}");
    // Retention: an old day goes with DETACH and DROP, its rows with it.
    s.batch_execute(&format!("ALTER TABLE events DETACH PARTITION {two_days_ago}; DROP TABLE {two_days_ago}")).unwrap();
    assert_eq!(partitions_of(&mut s, "events", "payload = 'two days ago'"), vec![]);
    let day: i64 = s.query_one(&format!("SELECT {DAY_OF_IDS}"), &[]).unwrap().get(0);
    assert_eq!(day, 86_400_000 << 22, "a day of IDs is 86 400 000 ms above the node and sequence bits");
}

#[test]
fn daily_partitions_with_pg_partman() {
    let share = {
        let out = std::process::Command::new(common::pg_config()).arg("--sharedir").output().unwrap();
        std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("extension")
    };
    if !share.join("pg_partman.control").exists() {
        // scripts/test requires it where .ci/setup installed it (18, with 19's chroot).
        assert!(
            std::env::var_os("SNOWFLAKE_PARTMAN_REQUIRED").is_none(),
            "pg_partman is not installed: .ci/setup installs it for PostgreSQL 18 (through PostgreSQL 19's chroot)"
        );
        eprintln!("skipped: no pg_partman in this PostgreSQL (.ci/setup installs it for 18)");
        return;
    }
    let c = Cluster::new("partman", &["timezone = 'UTC'"]);
    c.start();
    let mut s = c.session();
    // pg_partman 5 takes a time encoder only for text and uuid keys, so a
    // bigint snowflake key uses its integer partitioning, with an interval
    // of one day of IDs: each UTC day's IDs start at a multiple of it, so the
    // partitions are the days.
    s.batch_execute(&format!(
        "CREATE SCHEMA partman; CREATE EXTENSION pg_partman SCHEMA partman;
         CREATE TABLE events (id bigint NOT NULL DEFAULT snowflake_next_id(), payload text, PRIMARY KEY (id))
           PARTITION BY RANGE (id);
         SELECT partman.create_parent(
           p_parent_table := 'public.events', p_control := 'id', p_interval := {DAY_OF_IDS}::text,
           p_start_partition := snowflake_from_timestamp(current_date - 3)::text, p_premake := 4);"
    ))
    .unwrap();
    let day: i64 = s.query_one(&format!("SELECT {DAY_OF_IDS}"), &[]).unwrap().get(0);
    // The partition of a UTC day starts at that day's first ID.
    let day_partition = |s: &mut postgres::Client, days_from_today: i32| -> String {
        s.query_one(
            "SELECT 'events_p' || (snowflake_from_timestamp((current_date + $1::int)::timestamptz))::text",
            &[&days_from_today],
        )
        .unwrap()
        .get(0)
    };
    s.batch_execute(
        "INSERT INTO events (payload) SELECT 'now' FROM generate_series(1, 100);
         INSERT INTO events VALUES (snowflake_from_timestamp(now() - interval '2 days'), 'two days ago')",
    )
    .unwrap();
    let today = day_partition(&mut s, 0);
    assert_eq!(partitions_of(&mut s, "events", "payload = 'now'"), vec![(today.clone(), 100)]);
    let two_days_ago = day_partition(&mut s, -2);
    assert_eq!(partitions_of(&mut s, "events", "payload = 'two days ago'"), vec![(two_days_ago.clone(), 1)]);

    // Maintenance makes partitions ahead of the newest ID: four more days.
    s.batch_execute("CALL partman.run_maintenance_proc()").unwrap();
    let ahead: Vec<String> = (1..=4).map(|d| day_partition(&mut s, d)).collect();
    let exists = |s: &mut postgres::Client, name: &str| -> bool {
        s.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name]).unwrap().get(0)
    };
    for name in &ahead {
        assert!(exists(&mut s, name), "{name} made ahead");
    }

    // Pruning on a time range of the key.
    let plan =
        plan(&mut s, "SELECT count(*) FROM events WHERE id >= snowflake_from_timestamp(now() - interval '1 hour')");
    assert!(plan.contains(&today) && !plan.contains(&two_days_ago), "{plan}");

    // Retention of two days of IDs: older days are dropped by maintenance.
    let three_days_ago = day_partition(&mut s, -3);
    assert!(exists(&mut s, &three_days_ago));
    s.batch_execute(&format!(
        "UPDATE partman.part_config SET retention = ({day} * 2)::text, retention_keep_table = false
         WHERE parent_table = 'public.events'"
    ))
    .unwrap();
    s.batch_execute("CALL partman.run_maintenance_proc()").unwrap();
    assert!(!exists(&mut s, &three_days_ago), "three days back is gone");
    assert!(exists(&mut s, &two_days_ago), "two days back is kept");
    assert_eq!(partitions_of(&mut s, "events", "payload = 'two days ago'"), vec![(two_days_ago, 1)]);
}
