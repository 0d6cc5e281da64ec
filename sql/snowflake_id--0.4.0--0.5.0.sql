-- snowflake_id 0.4.0 -> 0.5.0.

-- The guard tells servers apart (asking each publisher who it is) instead of
-- replication origins, and judges only IDs generated since it was armed: the
-- trigger now carries the time it was armed as its second argument. A copy
-- of snowflake_guard() as sql/snowflake_guard.sql defines it.
CREATE OR REPLACE FUNCTION snowflake_guard(tbl regclass, id_column name DEFAULT NULL) RETURNS void
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
    -- Armed again, the check follows the column given now. The second
    -- argument is when it was armed, in Unix milliseconds: IDs generated
    -- before that (less snowflake_id.max_clock_drift), and keys that are no
    -- snowflake IDs, are not judged.
    IF EXISTS (SELECT FROM pg_trigger WHERE tgrelid = tbl AND tgname = 'snowflake_id_guard') THEN
        EXECUTE format('DROP TRIGGER snowflake_id_guard ON %s', tbl);
    END IF;
    EXECUTE format('CREATE TRIGGER snowflake_id_guard BEFORE INSERT OR UPDATE OF %I ON %s '
                   'FOR EACH ROW EXECUTE FUNCTION @extschema@.snowflake_guard_check(%L, %L)', col, tbl, col,
                   floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    EXECUTE format('ALTER TABLE %s ENABLE REPLICA TRIGGER snowflake_id_guard', tbl);
END
$$;

-- Every guard armed under 0.4.0 is armed again, on the column it checks
-- (named by the trigger's UPDATE OF column, so a column renamed since is
-- followed), as of now: what it applied before was judged by the old rules.
-- Triggers that partitions inherit are re-made with their parent's; a guard
-- the DBA had disabled (or enabled otherwise) is left so. Each table is
-- locked for a moment, as CREATE TRIGGER locks it.
DO $$
DECLARE
    armed record;
BEGIN
    FOR armed IN
        SELECT t.tgrelid::regclass AS tbl, a.attname AS col, t.tgenabled AS enabled
        FROM pg_catalog.pg_trigger t
        JOIN pg_catalog.pg_attribute a ON a.attrelid = t.tgrelid AND a.attnum = t.tgattr[0]
        WHERE t.tgname = 'snowflake_id_guard' AND t.tgparentid = 0
          AND t.tgfoid = '@extschema@.snowflake_guard_check()'::regprocedure
    LOOP
        PERFORM @extschema@.snowflake_guard(armed.tbl, armed.col);
        IF armed.enabled <> 'R' THEN
            EXECUTE format('ALTER TABLE %s %s TRIGGER snowflake_id_guard', armed.tbl,
                           CASE armed.enabled WHEN 'D' THEN 'DISABLE' WHEN 'A' THEN 'ENABLE ALWAYS' ELSE 'ENABLE' END);
        END IF;
    END LOOP;
END
$$;
