-- Sequence mode (src/pg/sequences): a registered sequence hands out
-- snowflake IDs on every path that asks it (nextval, serial and identity
-- defaults), with no change to the application.
--
-- The registry is a configuration table, so pg_dump keeps its rows (those of
-- sequences that exist and are not temporary). A fence guards every path the
-- planner hook cannot reach: the sequence's MAXVALUE is set to its current
-- value (and NO CYCLE), so native nextval fails with "reached maximum
-- value" instead of returning a small number. The values the fence
-- replaced are kept here and come back on unregistering.

CREATE TABLE snowflake_sequence_registry (
    seq regclass PRIMARY KEY,
    block_mode text NOT NULL CHECK (block_mode IN ('either', 'high', 'low')),
    native_max bigint NOT NULL,
    native_cycle boolean NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('snowflake_sequence_registry',
    'WHERE EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = seq AND c.relpersistence <> ''t'')');
REVOKE ALL ON snowflake_sequence_registry FROM PUBLIC;
GRANT SELECT ON snowflake_sequence_registry TO PUBLIC;

-- Any route to the table (the functions, a restore's COPY, an owner's own
-- INSERT) is held to what registering checks, and an inserted row's
-- sequence gets its fence; every change tells every backend to read the
-- registry again. ALWAYS: replication and migration tools run with
-- session_replication_role = replica.
CREATE TRIGGER snowflake_sequence_registry_check
    BEFORE INSERT OR UPDATE OR DELETE ON snowflake_sequence_registry
    FOR EACH ROW EXECUTE FUNCTION snowflake_sequence_registry_check();
CREATE TRIGGER snowflake_sequence_registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON snowflake_sequence_registry
    FOR EACH STATEMENT EXECUTE FUNCTION snowflake_sequence_registry_changed();
ALTER TABLE snowflake_sequence_registry ENABLE ALWAYS TRIGGER snowflake_sequence_registry_check;
ALTER TABLE snowflake_sequence_registry ENABLE ALWAYS TRIGGER snowflake_sequence_registry_changed;
GRANT INSERT, UPDATE, DELETE ON snowflake_sequence_registry TO PUBLIC;

-- A dropped sequence (by any DROP, or with the table, foreign table,
-- schema or extension that owns it) leaves the registry, and so does any
-- row whose sequence is gone some other way.
CREATE FUNCTION snowflake_sequence_dropped() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Only when such a row is there: a DELETE makes every backend plan
    -- again (the registry's statement trigger).
    IF EXISTS (SELECT FROM @extschema@.snowflake_sequence_registry r
               WHERE r.seq::oid IN (SELECT d.objid FROM pg_event_trigger_dropped_objects() d
                                    WHERE d.classid = 'pg_class'::regclass AND d.object_type = 'sequence')
                  OR NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = r.seq::oid)) THEN
        DELETE FROM @extschema@.snowflake_sequence_registry r
        WHERE r.seq::oid IN (SELECT d.objid FROM pg_event_trigger_dropped_objects() d
                             WHERE d.classid = 'pg_class'::regclass AND d.object_type = 'sequence')
           OR NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = r.seq::oid);
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION snowflake_sequence_dropped() FROM PUBLIC;
CREATE EVENT TRIGGER snowflake_sequence_dropped ON sql_drop
    EXECUTE FUNCTION snowflake_sequence_dropped();
ALTER EVENT TRIGGER snowflake_sequence_dropped ENABLE ALWAYS;

-- Every sequence a table's columns own (serial, bigserial, identity), or
-- every sequence of a schema, registered together (snowflake_sequence_register_all):
-- all or none, one wait for the transactions that began before,
-- and no deadlock with clients that use them in any order. One that cannot
-- hold snowflake IDs stops the call with the error it gives.
CREATE FUNCTION snowflake_sequence_register_table(tbl regclass, block_mode text DEFAULT 'either')
RETURNS SETOF regclass
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seqs regclass[];
BEGIN
    seqs := ARRAY(
        SELECT DISTINCT d.objid::regclass FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
        WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
          AND d.refobjid = tbl AND d.deptype IN ('a', 'i') AND c.relkind = 'S'
        ORDER BY 1);
    PERFORM @extschema@.snowflake_sequence_register_all(seqs, block_mode);
    RETURN QUERY SELECT unnest(seqs);
END
$$;

CREATE FUNCTION snowflake_sequence_register_schema(schema_name name, block_mode text DEFAULT 'either')
RETURNS SETOF regclass
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seqs regclass[];
BEGIN
    IF NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = schema_name) THEN
        RAISE EXCEPTION 'schema "%" does not exist', schema_name USING ERRCODE = 'invalid_schema_name';
    END IF;
    seqs := ARRAY(
        SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = schema_name AND c.relkind = 'S'
          AND NOT EXISTS (SELECT FROM @extschema@.snowflake_sequence_registry r WHERE r.seq = c.oid)
        ORDER BY 1);
    PERFORM @extschema@.snowflake_sequence_register_all(seqs, block_mode);
    RETURN QUERY SELECT unnest(seqs);
END
$$;

-- What is registered: the sequence, the table and column it feeds (serial
-- or identity; NULL for a free-standing one), its block mode and increment.
CREATE VIEW snowflake_sequences AS
SELECT r.seq AS sequence,
       d.refobjid::regclass AS table_name,
       a.attname AS column_name,
       CASE d.deptype WHEN 'i' THEN 'identity' WHEN 'a' THEN 'serial' END AS kind,
       r.block_mode,
       p.seqincrement AS increment,
       r.registered_at
FROM @extschema@.snowflake_sequence_registry r
JOIN pg_catalog.pg_sequence p ON p.seqrelid = r.seq
LEFT JOIN pg_catalog.pg_depend d
       ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = r.seq AND d.deptype IN ('a', 'i')
      AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid;
GRANT SELECT ON snowflake_sequences TO PUBLIC;
