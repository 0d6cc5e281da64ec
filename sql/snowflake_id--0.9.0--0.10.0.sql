-- snowflake_id 0.9.0 -> 0.10.0.

-- Operations that hold (docs/monitoring.md): snowflake_status() says why the
-- high-water mark is unknown (mark_unknown: also on a standby, before a
-- failover needs it), how many clock step backs the layout's clock_back
-- field still holds, when its timestamp field ends, and how many IDs a tick
-- holds. The 0.9.0 SQL keeps working on this library until the update, with
-- the columns it declares.
--
-- The function is dropped and created again (its columns change); the
-- privileges on it are kept: a REVOKE from PUBLIC, or a GRANT to a role of
-- yours, made on 0.9.0's function holds on the new one. A view over it still
-- stops the update, which names it: drop the view first.
DO $update$
DECLARE
  acl aclitem[] := (SELECT proacl FROM pg_proc WHERE oid = 'snowflake_status()'::regprocedure);
  granted record;
BEGIN
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
  	refused_no_worker bigint,
  	mark_unknown text,
  	clock_back_left integer,
  	timestamp_range_end timestamp with time zone,
  	ids_per_tick bigint
  )
  STRICT VOLATILE PARALLEL SAFE ROWS 1
  LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';
  IF acl IS NOT NULL THEN
    REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
    FOR granted IN
      SELECT a.grantee, a.is_grantable FROM aclexplode(acl) AS a WHERE a.privilege_type = 'EXECUTE'
    LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION snowflake_status() TO %s%s',
                     CASE WHEN granted.grantee = 0 THEN 'PUBLIC' ELSE granted.grantee::regrole::text END,
                     CASE WHEN granted.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
  END IF;
END
$update$;
