-- snowflake_id 0.9.0 -> 0.10.0.

-- Operations that hold (docs/monitoring.md): snowflake_status() says why the
-- high-water mark is unknown (mark_unknown: also on a standby, before a
-- failover needs it), how many clock step backs the layout's clock_back
-- field still holds, when its timestamp field ends, and how many IDs a tick
-- holds. The 0.9.0 SQL keeps working on this library until the update, with
-- the columns it declares.
--
-- The function is dropped and created again (its columns change), which
-- resets the privileges on it to the default (EXECUTE for PUBLIC). Granting
-- them again here would make them part of the extension's initial
-- privileges, which pg_dump leaves out and which keep a role from being
-- dropped; so the update warns instead, naming the statements that restore
-- them. A view over the function still stops the update, which names it:
-- drop the view first.
DO $update$
DECLARE
  acl aclitem[] := (SELECT proacl FROM pg_proc WHERE oid = 'snowflake_status()'::regprocedure);
  again text;
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
    SELECT string_agg(format('%s EXECUTE ON FUNCTION snowflake_status() %s %s%s;',
                             CASE WHEN g.granted THEN 'GRANT' ELSE 'REVOKE' END,
                             CASE WHEN g.granted THEN 'TO' ELSE 'FROM' END, g.grantee,
                             CASE WHEN g.grantable THEN ' WITH GRANT OPTION' ELSE '' END),
                      ' ' ORDER BY g.granted, g.grantee)
      INTO again
      FROM (SELECT 'PUBLIC' AS grantee, false AS granted, false AS grantable
             WHERE NOT EXISTS (SELECT FROM aclexplode(acl) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
            UNION ALL
            -- Each role once (several grantors may have granted it); the
            -- owner's own entry is the default's.
            SELECT a.grantee::regrole::text, true, bool_or(a.is_grantable) FROM aclexplode(acl) a
             WHERE a.grantee <> 0 AND a.privilege_type = 'EXECUTE' AND a.grantee <> a.grantor
             GROUP BY a.grantee) AS g;
    RAISE WARNING 'the update reset the privileges on snowflake_status() to the default'
      USING DETAIL = format('They were %s; the function was dropped and created again for its new columns.', acl),
            HINT = coalesce('Make them again: ' || again, 'Nothing to make again: they were the default.');
  END IF;
END
$update$;
