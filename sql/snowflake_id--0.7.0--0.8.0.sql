-- snowflake_id 0.7.0 -> 0.8.0.

-- Monitoring that plugs in (docs/monitoring.md): snowflake_status() counts
-- the calls it refused, by reason, and the marks it failed to make durable,
-- and the guard's rows stored as evidence apart from the clashes it proved
-- (guard_clashes counts proofs only from now on). The state file and WAL
-- formats are unchanged; the 0.7.0 SQL keeps working on this library until
-- the update, with the columns it declares.
DROP FUNCTION snowflake_status();
CREATE FUNCTION snowflake_status() RETURNS TABLE (
	layout text,
	epoch timestamp with time zone,
	tick_ms integer,
	datacenter_id integer,
	worker_id integer,
	system_identifier bigint,
	timeline integer,
	max_clock_drift_ms bigint,
	max_wait_ms bigint,
	ids_issued bigint,
	ticks_borrowed bigint,
	sequence_exhaustions bigint,
	clock_step_backs bigint,
	largest_step_back_ms bigint,
	waits bigint,
	wait_time_ms double precision,
	drift_ms bigint,
	high_water_mark timestamp with time zone,
	clock_back integer,
	marks_written bigint,
	marks_replayed bigint,
	mark_wal_time_ms double precision,
	mark_file_time_ms double precision,
	state_file text,
	id_space bigint,
	guard_clashes bigint,
	last_clash text,
	last_clash_at timestamp with time zone,
	guard_evidence bigint,
	mark_write_failures bigint,
	refused_max_wait bigint,
	refused_mark_not_durable bigint,
	refused_unknown_mark bigint,
	refused_in_recovery bigint,
	refused_standby_wait bigint,
	refused_before_epoch bigint,
	refused_exhausted bigint,
	refused_by_guard bigint,
	refused_sequence_fence bigint
)
STRICT VOLATILE PARALLEL SAFE ROWS 1
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';
