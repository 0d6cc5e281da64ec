-- The SQL surface of snowflake_id for fixed inputs. The server runs with
-- snowflake_id.datacenter_id = 3, snowflake_id.worker_id = 7 and the default layout.
CREATE EXTENSION snowflake_id;
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- Settings, as a DBA sees them.
SELECT name, setting, unit, context, vartype, min_val, max_val
FROM pg_settings WHERE name LIKE 'snowflake_id.%' ORDER BY name;
SHOW snowflake_id.max_clock_drift;

-- Functions and their labels.
SELECT p.proname, pg_get_function_arguments(p.oid) AS arguments, pg_get_function_result(p.oid) AS result,
       p.provolatile, p.proparallel, p.proisstrict, p.prorows
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public' AND p.proname LIKE 'snowflake\_%'
ORDER BY 1, 2;

-- Decoding under the server's layout.
SELECT * FROM snowflake_decode(0);
SELECT * FROM snowflake_decode(1 << 22);
SELECT * FROM snowflake_decode((1234567::bigint << 22) | (3 << 17) | (7 << 12) | 42);
SELECT snowflake_timestamp((1234567::bigint << 22) | (3 << 17) | (7 << 12) | 42);
SELECT * FROM snowflake_decode(9223372036854775807);

-- Decoding other systems' IDs.
SELECT * FROM snowflake_decode(175928847299117063, 'discord');
SELECT * FROM snowflake_decode(175928847299117063, 'twitter');
SELECT * FROM snowflake_decode((100::bigint << 24) | (5 << 16) | 42, 'sonyflake');
SELECT * FROM snowflake_decode((100::bigint << 24) | (5 << 16) | 42, 'sonyflake', '2020-01-01 00:00:00+00');
SELECT * FROM snowflake_decode((100::bigint << 24) | (5 << 16) | 42, 'sonyflake', NULL, 1);
SELECT * FROM snowflake_decode((1::bigint << 23) | (8191 << 10) | 1023, 'instagram');
SELECT * FROM snowflake_decode((1700000000000::bigint << 16) | 3, 'mastodon');
SELECT * FROM snowflake_decode(1 << 20, 'clock_back:2,timestamp:39,datacenter:5,worker:5,sequence:12');
SELECT * FROM snowflake_decode(5, ' Timestamp:20 , sequence:4 ');
SELECT * FROM snowflake_decode(515151347297825490, 'pgedge');
SELECT count(*) FROM snowflake_decode(NULL, 'twitter');
SELECT count(*) FROM snowflake_decode(1, NULL);

-- An epoch argument is read as the setting is: UTC unless it has an offset,
-- whatever the session's time zone (the function is IMMUTABLE).
SET timezone = 'America/New_York';
SELECT ts FROM snowflake_decode((1234567::bigint << 22) | 42, 'timestamp:41,datacenter:5,worker:5,sequence:12', '2025-01-01');
SELECT ts FROM snowflake_decode((1234567::bigint << 22) | 42, 'timestamp:41,datacenter:5,worker:5,sequence:12', '2025-01-01 00:00:00+00'::timestamptz);
SELECT ts FROM snowflake_decode((1234567::bigint << 22) | 42);
SET timezone = 'UTC';

-- The smallest ID of a tick, for range scans.
SELECT snowflake_from_timestamp('2025-01-01 00:00:00+00');
SELECT snowflake_from_timestamp('2025-01-01 00:00:00.0019+00');
SELECT snowflake_from_timestamp('2026-11-22 12:00:00+00');
SELECT snowflake_timestamp(snowflake_from_timestamp('2026-11-22 12:00:00.123+00'));
SELECT snowflake_from_timestamp('2094-09-07 15:47:35.551+00');
-- Spans of time in IDs: a chunk interval or an age on an ID key.
SELECT snowflake_from_interval('1 day'),
       snowflake_from_interval('1 day') = snowflake_from_timestamp('2026-01-02') - snowflake_from_timestamp('2026-01-01') AS one_day,
       snowflake_from_interval('-1 hour') = -snowflake_from_interval('1 hour') AS negative,
       snowflake_from_interval('0.5 ms'), snowflake_from_interval('-0.5 ms'), snowflake_from_interval('1 mon') = snowflake_from_interval('30 days') AS month;
SELECT snowflake_now() = snowflake_from_timestamp(now()) AS now;
SELECT snowflake_from_timestamp(NULL) IS NULL AS strict;

-- Generating: values change, their properties do not.
SELECT snowflake_next_id() > snowflake_from_timestamp(now() - interval '1 minute') AS recent;
SELECT datacenter_id, worker_id, clock_back FROM snowflake_decode(snowflake_next_id());
SELECT count(*), count(DISTINCT id), min(id) > 0 AS positive FROM snowflake_next_ids(10000) AS id;
SELECT count(*) FROM snowflake_next_ids(0);
SELECT array_length(array_agg(id ORDER BY ord), 1), bool_and(id > prev) AS increasing
FROM (SELECT id, ord, lag(id, 1, 0::bigint) OVER (ORDER BY ord) AS prev
      FROM snowflake_next_ids(1000) WITH ORDINALITY AS s(id, ord)) s;
SELECT snowflake_next_ids(3) IS NOT NULL AS in_select_list;

-- A DBA's floor: every later ID lies above it (an ID a tenth of a second ahead).
SELECT snowflake_next_id() + (100::bigint << 22) AS floor \gset
SELECT snowflake_raise_floor(:floor) > :floor AS returns_above;
SELECT snowflake_next_id() > :floor AS next_above;

-- Monitoring: the settings in force.
SELECT layout, epoch, tick_ms, datacenter_id, worker_id, max_clock_drift_ms, max_wait_ms,
       system_identifier = (SELECT system_identifier FROM pg_control_system()) AS same_system,
       timeline = (SELECT timeline_id FROM pg_control_checkpoint()) AS same_timeline,
       ids_issued > 0 AS issued, high_water_mark >= snowflake_timestamp(:floor) AS mark_ahead,
       state_file LIKE '%/snowflake_id.state' AS state_file
FROM snowflake_status();
