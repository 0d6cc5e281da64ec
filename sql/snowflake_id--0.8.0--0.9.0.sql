-- snowflake_id 0.8.0 -> 0.9.0.

-- Node numbers without a person (docs/configuration.md, worker_id = auto):
-- a primary with snowflake_id.worker_id = auto claims its worker number,
-- logged in WAL and kept in the state file (version 4). snowflake_status()
-- says where the number came from and counts refusals for want of a free
-- one; snowflake_worker_claims() lists the numbers the server's lineage used,
-- and snowflake_release_worker() releases one. The 0.8.0 SQL keeps working
-- on this library until the update, with the columns it declares.
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
	refused_sequence_fence bigint,
	worker_id_source text,
	refused_no_worker bigint
)
STRICT VOLATILE PARALLEL SAFE ROWS 1
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';

CREATE  FUNCTION "snowflake_worker_claims"() RETURNS TABLE (
	"datacenter_id" INT,  /* i32 */
	"worker_id" INT,  /* i32 */
	"source" TEXT,  /* String */
	"is_current" bool,  /* bool */
	"claimed_here" bool,  /* bool */
	"timeline" bigint,  /* Option < i64 > */
	"claimed_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"host" TEXT,  /* Option < String > */
	"last_mark" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"superseded_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"released_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"reusable_from" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT STABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_worker_claims_wrapper';

CREATE  FUNCTION "snowflake_release_worker"(
	"worker_id" INT, /* i32 */
	"datacenter_id" INT DEFAULT NULL /* Option < i32 > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_release_worker_wrapper';

REVOKE EXECUTE ON FUNCTION snowflake_worker_claims() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_worker_claims() TO pg_monitor;
REVOKE EXECUTE ON FUNCTION snowflake_release_worker(integer, integer) FROM PUBLIC;
