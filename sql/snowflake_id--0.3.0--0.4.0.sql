-- snowflake_id 0.3.0 -> 0.4.0.

-- snowflake_status() reports the ID space the generator is in (a DBA starts a
-- new one with the "new ID space" step) and the guard's clashes.
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
	"state_file" TEXT,
	"id_space" bigint,
	"guard_clashes" bigint,
	"last_clash" TEXT,
	"last_clash_at" timestamp with time zone
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';
ALTER FUNCTION snowflake_status() ROWS 1;

-- The guard: snowflake_guard(tbl). A copy of sql/snowflake_guard.sql.
-- snowflake_guard(tbl): arms the check that catches two servers generating
-- with one node number where their rows meet, in rows applied by logical
-- replication (see src/pg/guard.rs and the README). The trigger is enabled
-- as REPLICA, so it fires only where session_replication_role = replica, as
-- in apply workers (native subscriptions, pglogical, Spock): local inserts
-- never call it.

CREATE FUNCTION snowflake_guard_check() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_guard_check';

CREATE FUNCTION snowflake_guard(tbl regclass, id_column name DEFAULT NULL) RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col name := id_column;
    typ regtype;
BEGIN
    IF col IS NULL THEN
        SELECT a.attname INTO col
        FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
        WHERE i.indrelid = tbl AND i.indisprimary AND i.indnkeyatts = 1;
        IF col IS NULL THEN
            RAISE EXCEPTION 'table "%" has no single-column primary key', tbl
                USING ERRCODE = 'invalid_table_definition',
                      HINT = format('Name the column that holds snowflake IDs: SELECT snowflake_guard(%L, ''id'').', tbl::text);
        END IF;
    END IF;
    SELECT a.atttypid::regtype INTO typ
    FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF typ IS NULL THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', col, tbl USING ERRCODE = 'undefined_column';
    END IF;
    IF typ <> 'bigint'::regtype THEN
        RAISE EXCEPTION 'column "%" of relation "%" is of type %, not bigint', col, tbl, typ
            USING ERRCODE = 'datatype_mismatch',
                  HINT = 'snowflake_guard() checks a column that holds snowflake IDs.';
    END IF;
    -- Armed again, the check follows the column given now.
    IF EXISTS (SELECT FROM pg_trigger WHERE tgrelid = tbl AND tgname = 'snowflake_id_guard') THEN
        EXECUTE format('DROP TRIGGER snowflake_id_guard ON %s', tbl);
    END IF;
    EXECUTE format('CREATE TRIGGER snowflake_id_guard BEFORE INSERT OR UPDATE OF %I ON %s '
                   'FOR EACH ROW EXECUTE FUNCTION @extschema@.snowflake_guard_check(%L)', col, tbl, col);
    EXECUTE format('ALTER TABLE %s ENABLE REPLICA TRIGGER snowflake_id_guard', tbl);
END
$$;

-- snowflake_raise_floor(id): a DBA's setval for the high-water mark.
CREATE FUNCTION snowflake_raise_floor(
	"id" bigint
) RETURNS bigint
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_raise_floor_wrapper';
REVOKE EXECUTE ON FUNCTION snowflake_raise_floor(bigint) FROM PUBLIC;
