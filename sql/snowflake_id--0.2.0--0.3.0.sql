-- snowflake_id 0.2.0 -> 0.3.0.

-- snowflake_status() reports the marks replayed from WAL and the time spent
-- making marks durable.
DROP FUNCTION snowflake_status();
CREATE FUNCTION snowflake_status() RETURNS TABLE (
	"layout" TEXT,
	"epoch" timestamp with time zone,
	"tick_ms" INT,
	"datacenter_id" INT,
	"worker_id" INT,
	"system_identifier" bigint,
	"timeline" INT,
	"max_clock_drift_ms" bigint,
	"max_wait_ms" bigint,
	"ids_issued" bigint,
	"ticks_borrowed" bigint,
	"sequence_exhaustions" bigint,
	"clock_step_backs" bigint,
	"largest_step_back_ms" bigint,
	"waits" bigint,
	"wait_time_ms" double precision,
	"drift_ms" bigint,
	"high_water_mark" timestamp with time zone,
	"clock_back" INT,
	"marks_written" bigint,
	"marks_replayed" bigint,
	"mark_wal_time_ms" double precision,
	"mark_file_time_ms" double precision,
	"state_file" TEXT
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';
ALTER FUNCTION snowflake_status() ROWS 1;
