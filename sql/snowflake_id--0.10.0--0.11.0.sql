-- snowflake_id 0.10.0 -> 0.11.0.

-- IDs as a time axis (docs/timescaledb.md): snowflake_from_interval() gives
-- a span of time in IDs under this server's layout, epoch and tick (a
-- TimescaleDB chunk interval or drop_chunks age on an ID key), and
-- snowflake_now() the first ID of the transaction's start (TimescaleDB's
-- integer_now function). The state file also names the server that wrote it
-- (written_by=, which 0.10.0 passes over), so that a standby given its
-- primary's file by hand is not taken for a renumbered server.
CREATE FUNCTION snowflake_from_interval(span interval) RETURNS bigint
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_from_interval_wrapper';

CREATE FUNCTION snowflake_now() RETURNS bigint
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_now_wrapper';
