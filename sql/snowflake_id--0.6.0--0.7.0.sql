-- snowflake_id 0.6.0 -> 0.7.0.

-- Sequence mode that holds (docs/sequences.md): registering and
-- unregistering are done by the library, which makes a registration known
-- and waits for the transactions that began before it, decides under the
-- sequence's lock, and tells every backend whatever session_replication_role
-- says; the registry's row trigger (in the library, firing ALWAYS) holds a
-- restore's rows to the same checks and fences their sequences; no internal
-- function is PUBLIC's; the registry's dump leaves out rows of sequences that
-- are gone or temporary; a sequence dropped by any DROP leaves the registry.
-- The state file and WAL formats are unchanged.

-- What the library does itself now.
DROP TRIGGER snowflake_sequence_registry_owner_check ON snowflake_sequence_registry;
DROP FUNCTION snowflake_sequence_registry_owner_check();
DROP FUNCTION snowflake_sequence_check_block(bigint, text);
DROP FUNCTION snowflake_sequence_resume_value();
DROP FUNCTION snowflake_sequence_invalidate(oid);

CREATE OR REPLACE FUNCTION snowflake_sequence_register(seq regclass, block_mode text DEFAULT 'either') RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_register';
CREATE FUNCTION snowflake_sequence_register_all(seqs regclass[], block_mode text DEFAULT 'either') RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_register_all';
CREATE OR REPLACE FUNCTION snowflake_sequence_unregister(seq regclass) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_unregister';

-- Several sequences registered together: one wait, and their locks taken all at once.
CREATE OR REPLACE FUNCTION snowflake_sequence_register_table(tbl regclass, block_mode text DEFAULT 'either')
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

CREATE OR REPLACE FUNCTION snowflake_sequence_register_schema(schema_name name, block_mode text DEFAULT 'either')
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

CREATE FUNCTION snowflake_sequence_registry_check() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_registry_check';
REVOKE EXECUTE ON FUNCTION snowflake_sequence_registry_check() FROM PUBLIC;
CREATE TRIGGER snowflake_sequence_registry_check
    BEFORE INSERT OR UPDATE OR DELETE ON snowflake_sequence_registry
    FOR EACH ROW EXECUTE FUNCTION snowflake_sequence_registry_check();
ALTER TABLE snowflake_sequence_registry ENABLE ALWAYS TRIGGER snowflake_sequence_registry_check;
ALTER TABLE snowflake_sequence_registry ENABLE ALWAYS TRIGGER snowflake_sequence_registry_changed;

-- Rows of sequences that are gone (dropped with a foreign table, a temporary
-- one at its session's end) register nothing, and a temporary sequence is
-- no longer registered: 0.7.0 reads neither.
DELETE FROM snowflake_sequence_registry r
WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = r.seq AND c.relpersistence <> 't');
SELECT pg_catalog.pg_extension_config_dump('snowflake_sequence_registry',
    'WHERE EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = seq AND c.relpersistence <> ''t'')');

-- Every DROP, and whatever the replication role.
DROP EVENT TRIGGER snowflake_sequence_dropped;
CREATE OR REPLACE FUNCTION snowflake_sequence_dropped() RETURNS event_trigger
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
CREATE EVENT TRIGGER snowflake_sequence_dropped ON sql_drop
    EXECUTE FUNCTION snowflake_sequence_dropped();
ALTER EVENT TRIGGER snowflake_sequence_dropped ENABLE ALWAYS;
