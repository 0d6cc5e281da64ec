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
