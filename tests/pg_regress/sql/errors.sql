-- Every error a user can meet, with its SQLSTATE, message, detail and hint.
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- Runs a statement and shows the error it raises, one row per error. The
-- #[pg_test]s catch errors with this same definition (src/pg/tests/mod.rs reads it).
CREATE FUNCTION pg_temp.try(statement text,
    OUT state text, OUT message text, OUT detail text, OUT hint text) AS $$
BEGIN
    EXECUTE statement;
    message := 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
END $$ LANGUAGE plpgsql;
\x on

-- IDs that are no snowflakes.
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(-1)');
SELECT * FROM pg_temp.try('SELECT snowflake_timestamp(-1)');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1::bigint << 40, ''timestamp:20,sequence:4'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1::bigint << 50, ''reserved:1,timestamp:40,sequence:10'')');

-- Layouts and ticks given to snowflake_decode.
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''timestamp:41,shard:10,sequence:12'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''timestamp:42,datacenter:5,worker:5,sequence:12'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''sequence:12,timestamp:41'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''timestamp:41,worker:10'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''timestamp:41,worker:10,worker:2,sequence:10'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''timestamp'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, '''')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''timestamp:20,sequence:32'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''twitter'', NULL, 0)');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''twitter'', ''infinity''::timestamptz)');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''twitter'', ''infinity'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''twitter'', ''2025-01-01 00:00:00 Europe/Paris'')');
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''discord'', ''yesterday'')');
-- Unix seconds where milliseconds belong.
SELECT * FROM pg_temp.try('SELECT * FROM snowflake_decode(1, ''discord'', ''1420070400'')');

-- Tables snowflake_guard() cannot arm.
CREATE TABLE guard_nokey (id bigint);
CREATE TABLE guard_textkey (id text PRIMARY KEY);
SELECT * FROM pg_temp.try('SELECT snowflake_guard(''guard_nokey'')');
SELECT * FROM pg_temp.try('SELECT snowflake_guard(''guard_textkey'')');
SELECT * FROM pg_temp.try('SELECT snowflake_guard(''guard_nokey'', ''nosuch'')');
SELECT * FROM pg_temp.try('SELECT snowflake_guard(''guard_nokey'', ''id'')');
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'guard_nokey'::regclass;
DROP TABLE guard_nokey, guard_textkey;

-- Times outside the layout.
SELECT * FROM pg_temp.try('SELECT snowflake_from_timestamp(''2024-12-31 23:59:59.999+00'')');
SELECT * FROM pg_temp.try('SELECT snowflake_from_timestamp(''2094-09-07 15:47:35.552+00'')');
SELECT * FROM pg_temp.try('SELECT snowflake_from_timestamp(''infinity'')');
SELECT * FROM pg_temp.try('SELECT snowflake_from_timestamp(''-infinity'')');
SELECT * FROM pg_temp.try('SELECT snowflake_from_interval(''100 years'')');
SELECT * FROM pg_temp.try('SELECT snowflake_from_interval(''-100 years'')');

-- Bulk sizes.
SELECT * FROM pg_temp.try('SELECT snowflake_next_ids(-1)');
SELECT * FROM pg_temp.try('SELECT snowflake_next_ids(100000001)');

-- Identity settings cannot change in a session, not even for a superuser.
SELECT * FROM pg_temp.try('SET snowflake_id.worker_id = 8');
SELECT * FROM pg_temp.try('SET snowflake_id.datacenter_id = 1');
SELECT * FROM pg_temp.try('SET snowflake_id.layout = ''instagram''');
SELECT * FROM pg_temp.try('SET snowflake_id.epoch = ''2020-01-01''');
SELECT * FROM pg_temp.try('SET snowflake_id.tick_ms = 10');
SELECT * FROM pg_temp.try('SET snowflake_id.max_clock_drift = ''1s''');
SHOW snowflake_id.worker_id;

-- ALTER SYSTEM checks each setting on its own (the restart checks them together).
\x off
\set VERBOSITY default
\set SHOW_CONTEXT never
ALTER SYSTEM SET snowflake_id.layout = 'bogus';
ALTER SYSTEM SET snowflake_id.layout = 'timestamp:42,datacenter:5,worker:5,sequence:12';
ALTER SYSTEM SET snowflake_id.epoch = 'last tuesday';
ALTER SYSTEM SET snowflake_id.epoch = '1969-12-31';
ALTER SYSTEM SET snowflake_id.epoch = '1735689600';
ALTER SYSTEM SET snowflake_id.worker_id = 32;
ALTER SYSTEM SET snowflake_id.worker_id = 'automatic';
ALTER SYSTEM SET snowflake_id.worker_id = '07';
ALTER SYSTEM SET snowflake_id.datacenter_id = 40;
ALTER SYSTEM SET snowflake_id.wal_rmgr_id = 99;
-- Accepted, then taken back.
ALTER SYSTEM SET snowflake_id.worker_id = 9;
ALTER SYSTEM SET snowflake_id.worker_id = auto;
ALTER SYSTEM SET snowflake_id.layout = 'pgedge';
ALTER SYSTEM RESET snowflake_id.worker_id;
ALTER SYSTEM RESET snowflake_id.layout;

-- Releases of worker numbers this server's lineage never used, or uses now.
SELECT * FROM pg_temp.try('SELECT snowflake_release_worker(9)');
SELECT * FROM pg_temp.try('SELECT snowflake_release_worker(7)');
SELECT * FROM pg_temp.try('SELECT snowflake_release_worker(7, 4)');
SELECT * FROM pg_temp.try('SELECT snowflake_release_worker(-1)');
SELECT * FROM pg_temp.try('SELECT snowflake_release_worker(32)');
SELECT * FROM pg_temp.try('SELECT snowflake_release_worker(1, 40)');
SELECT * FROM pg_temp.try('SELECT snowflake_release_worker(NULL)');

-- Floors a DBA asks for that are no ID of this server, or too far ahead.
SELECT * FROM pg_temp.try('SELECT snowflake_raise_floor(-1)');
SELECT state, message, hint FROM pg_temp.try('SELECT snowflake_raise_floor(snowflake_from_timestamp(''2090-01-01''))');

-- Sequence mode: registrations that cannot hand out snowflake IDs, and DDL
-- that would open a registered sequence's fence.
CREATE TABLE seq_small (id serial PRIMARY KEY);
SELECT state, message, hint FROM pg_temp.try('SELECT snowflake_sequence_register(''seq_small_id_seq'')');
CREATE SEQUENCE seq_big_block INCREMENT BY 3000;
SELECT state, message, hint FROM pg_temp.try('SELECT snowflake_sequence_register(''seq_big_block'')');
SELECT state, message, hint FROM pg_temp.try('SELECT snowflake_sequence_register(''seq_big_block'', ''pooled'')');
SELECT state, message, hint FROM pg_temp.try('SELECT snowflake_sequence_register(''pg_class'')');
CREATE SEQUENCE seq_fenced;
SELECT snowflake_sequence_register('seq_fenced');
SELECT state, message, hint FROM pg_temp.try('ALTER SEQUENCE seq_fenced RESTART');
SELECT state, message, hint FROM pg_temp.try('SELECT snowflake_sequence_unregister(''seq_big_block'')');
DROP TABLE seq_small;
DROP SEQUENCE seq_big_block, seq_fenced;
