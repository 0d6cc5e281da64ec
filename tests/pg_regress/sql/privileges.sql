-- Who may generate. snowflake_next_id() is for everyone, so that column
-- defaults work for every role that may insert (as gen_random_uuid()).
-- snowflake_next_ids() is granted: one call can run every ID of the server up
-- to snowflake_id.max_clock_drift ahead of the clock.
\set VERBOSITY default
\set SHOW_CONTEXT never
CREATE ROLE snowflake_app;
CREATE ROLE snowflake_loader;
GRANT EXECUTE ON FUNCTION snowflake_next_ids(integer) TO snowflake_loader;

SET ROLE snowflake_app;
SELECT snowflake_next_id() > 0 AS generated;
SELECT count(*) FROM snowflake_next_ids(10);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SET ROLE snowflake_loader;
SELECT count(*) FROM snowflake_next_ids(10);
RESET ROLE;

-- snowflake_raise_floor() is a DBA's, like setval on a sequence.
SET ROLE snowflake_app;
SELECT snowflake_raise_floor(1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- The statements that make generating as restricted as a sequence's nextval().
REVOKE EXECUTE ON FUNCTION snowflake_next_id() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_next_id() TO snowflake_loader;
SET ROLE snowflake_app;
SELECT snowflake_next_id();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION snowflake_next_id() TO PUBLIC;

-- The state file's path tells where the data directory is: shown only to
-- roles that may see data_directory.
SET ROLE snowflake_app;
SELECT state_file IS NULL AS hidden, worker_id FROM snowflake_status();
\set VERBOSITY sqlstate
SHOW data_directory;
\set VERBOSITY default
RESET ROLE;
GRANT pg_read_all_settings TO snowflake_app;
SET ROLE snowflake_app;
SELECT state_file LIKE '%/snowflake_id.state' AS shown FROM snowflake_status();
RESET ROLE;


-- Every counter is anyone's to read; the path and a clash's report (which
-- names tables and other servers) only for roles that may see
-- data_directory, as a member of pg_monitor may. The NULL columns of each:
REVOKE pg_read_all_settings FROM snowflake_app;
SET ROLE snowflake_app;
SELECT string_agg(key, ', ' ORDER BY key) AS null_columns
FROM snowflake_status() s, jsonb_each(to_jsonb(s)) WHERE value = 'null';
RESET ROLE;
CREATE ROLE snowflake_monitor;
GRANT pg_monitor TO snowflake_monitor;
SET ROLE snowflake_monitor;
SELECT string_agg(key, ', ' ORDER BY key) AS null_columns
FROM snowflake_status() s, jsonb_each(to_jsonb(s)) WHERE value = 'null';
RESET ROLE;
DROP ROLE snowflake_monitor;

DROP ROLE snowflake_app;
REVOKE EXECUTE ON FUNCTION snowflake_next_ids(integer) FROM snowflake_loader;
REVOKE EXECUTE ON FUNCTION snowflake_next_id() FROM snowflake_loader;
DROP ROLE snowflake_loader;
