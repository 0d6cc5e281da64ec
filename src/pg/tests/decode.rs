//! snowflake_decode(), snowflake_timestamp() and snowflake_from_timestamp()
//! (`src/pg/decode.rs`) on IDs of this server and of other systems, and range
//! scans by time. The outputs for fixed inputs are pinned in
//! `tests/pg_regress/sql/surface.sql`, the errors (IDs that are no snowflakes,
//! bad layouts, ticks and epochs, times out of range) in `errors.sql`.

#[pgrx::pg_schema]
mod tests {
    use crate::pg::tests::one;
    use pgrx::prelude::*;

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

    /// Times before the epoch, past the last tick and infinite are refused in errors.sql.
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
    }

    /// A relative time such as 'yesterday' is refused in errors.sql.
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
        let volatility = one::<String>(
            "SELECT string_agg(provolatile::text, '' ORDER BY pronargs, proargtypes::text)
             FROM pg_proc WHERE proname = 'snowflake_decode' AND pronargs = 4",
        );
        assert_eq!(volatility, "ii", "both forms stay IMMUTABLE");
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
}
