-- Sequence mode (src/pg/sequences): a registered sequence hands out
-- snowflake IDs on every path that asks it (nextval, serial and identity
-- defaults), with no change to the application.
--
-- The registry is a configuration table, so pg_dump keeps its rows. A fence
-- guards every path the planner hook cannot reach: the sequence's MAXVALUE
-- is set to its current value (and NO CYCLE), so native nextval fails with
-- "reached maximum value" instead of returning a small number. The values
-- the fence replaced are kept here and come back on unregistering.

CREATE TABLE snowflake_sequence_registry (
    seq regclass PRIMARY KEY,
    block_mode text NOT NULL CHECK (block_mode IN ('either', 'high', 'low')),
    native_max bigint NOT NULL,
    native_cycle boolean NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('snowflake_sequence_registry', '');
REVOKE ALL ON snowflake_sequence_registry FROM PUBLIC;
GRANT SELECT ON snowflake_sequence_registry TO PUBLIC;

-- Every backend keeps the registry in a cache; a change of it, by the
-- functions below or by a restore's COPY, tells them all to read it again.
CREATE FUNCTION snowflake_sequence_registry_changed() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_registry_changed';
CREATE TRIGGER snowflake_sequence_registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON snowflake_sequence_registry
    FOR EACH STATEMENT EXECUTE FUNCTION snowflake_sequence_registry_changed();

-- Only a sequence's owner registers or unregisters it, whatever the route
-- to the table (the functions below, or an INSERT of one's own).
CREATE FUNCTION snowflake_sequence_registry_owner_check() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq regclass;
    sq pg_sequence;
    last bigint;
    called boolean;
BEGIN
    -- A row written by a role other than a superuser (a restore) must be
    -- what snowflake_sequence_register writes: a bigint sequence, fenced,
    -- whose blocks fit, by a role with the right to generate them.
    IF TG_OP <> 'DELETE' AND NOT (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user) THEN
        SELECT * INTO sq FROM pg_sequence p WHERE p.seqrelid = NEW.seq;
        IF NOT FOUND OR sq.seqtypid <> 'bigint'::regtype THEN
            RAISE EXCEPTION '"%" is no bigint sequence', NEW.seq USING ERRCODE = 'wrong_object_type',
                HINT = 'Register sequences with snowflake_sequence_register().';
        END IF;
        PERFORM @extschema@.snowflake_sequence_check_block(sq.seqincrement, NEW.block_mode);
        IF NOT has_function_privilege('@extschema@.snowflake_next_id()', 'EXECUTE')
           OR (sq.seqincrement > 1 AND NOT has_function_privilege('@extschema@.snowflake_next_ids(integer)', 'EXECUTE')) THEN
            RAISE EXCEPTION 'permission denied to register sequence "%"', NEW.seq USING ERRCODE = 'insufficient_privilege',
                HINT = 'Register sequences with snowflake_sequence_register(), which says which right is missing.';
        END IF;
        EXECUTE format('SELECT last_value, is_called FROM %s', NEW.seq) INTO last, called;
        IF sq.seqcycle OR NOT called OR last <> sq.seqmax THEN
            RAISE EXCEPTION 'sequence "%" is not fenced', NEW.seq USING ERRCODE = 'object_not_in_prerequisite_state',
                HINT = 'Register sequences with snowflake_sequence_register(), which sets the fence.';
        END IF;
    END IF;
    -- The row's sequence before and after: an UPDATE may not move another
    -- owner's row. A row of a sequence that is gone (dropped) may go by anyone.
    FOR seq IN SELECT s FROM unnest(ARRAY[CASE WHEN TG_OP <> 'INSERT' THEN OLD.seq END,
                                          CASE WHEN TG_OP <> 'DELETE' THEN NEW.seq END]) s WHERE s IS NOT NULL
    LOOP
        IF EXISTS (SELECT FROM pg_class c WHERE c.oid = seq AND NOT pg_has_role(current_user, c.relowner, 'USAGE'))
           OR (TG_OP <> 'DELETE' AND NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = seq)) THEN
            RAISE EXCEPTION 'must be owner of sequence %', seq USING ERRCODE = 'insufficient_privilege';
        END IF;
        PERFORM @extschema@.snowflake_sequence_invalidate(seq);
    END LOOP;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER snowflake_sequence_registry_owner_check
    BEFORE INSERT OR UPDATE OR DELETE ON snowflake_sequence_registry
    FOR EACH ROW EXECUTE FUNCTION snowflake_sequence_registry_owner_check();
-- Trigger functions, called by their triggers only.
REVOKE EXECUTE ON FUNCTION snowflake_sequence_registry_changed() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION snowflake_sequence_registry_owner_check() FROM PUBLIC;
GRANT INSERT, UPDATE, DELETE ON snowflake_sequence_registry TO PUBLIC;

-- A dropped sequence (DROP SEQUENCE, or DROP TABLE of the table it feeds)
-- leaves the registry, so that a dump never names a relation that is gone.
CREATE FUNCTION snowflake_sequence_dropped() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Only when a registered one is among them: a DELETE makes every
    -- backend plan again (the registry's statement trigger).
    IF EXISTS (SELECT FROM @extschema@.snowflake_sequence_registry r
               JOIN pg_event_trigger_dropped_objects() d ON d.objid = r.seq::oid
               WHERE d.classid = 'pg_class'::regclass AND d.object_type = 'sequence') THEN
        DELETE FROM @extschema@.snowflake_sequence_registry r
        WHERE r.seq::oid IN (SELECT d.objid FROM pg_event_trigger_dropped_objects() d
                             WHERE d.classid = 'pg_class'::regclass AND d.object_type = 'sequence');
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION snowflake_sequence_dropped() FROM PUBLIC;
CREATE EVENT TRIGGER snowflake_sequence_dropped ON sql_drop
    WHEN TAG IN ('DROP SEQUENCE', 'DROP TABLE', 'DROP SCHEMA', 'DROP OWNED', 'ALTER TABLE')
    EXECUTE FUNCTION snowflake_sequence_dropped();

CREATE FUNCTION snowflake_sequence_register(seq regclass, block_mode text DEFAULT 'either') RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kind "char";
    owner oid;
    s pg_sequence;
    col record;
    last bigint;
    called boolean;
BEGIN
    SELECT c.relkind, c.relowner INTO kind, owner FROM pg_class c WHERE c.oid = seq;
    IF kind IS DISTINCT FROM 'S' THEN
        RAISE EXCEPTION '"%" is not a sequence', seq USING ERRCODE = 'wrong_object_type',
            HINT = 'Name the sequence a column takes its values from, as pg_get_serial_sequence(''table'', ''column'') gives it, or register a whole table with snowflake_sequence_register_table().';
    END IF;
    IF NOT pg_has_role(current_user, owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of sequence %', seq USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT FROM @extschema@.snowflake_sequence_registry r WHERE r.seq = $1) THEN
        RAISE NOTICE 'sequence "%" is registered already, skipping', seq;
        RETURN;
    END IF;
    SELECT * INTO s FROM pg_sequence p WHERE p.seqrelid = seq;
    IF s.seqtypid <> 'bigint'::regtype THEN
        RAISE EXCEPTION 'sequence "%" is of type %, which cannot hold a snowflake ID', seq, s.seqtypid::regtype
            USING ERRCODE = 'datatype_mismatch',
                  HINT = format('Make it bigint first: ALTER SEQUENCE %s AS bigint.', seq);
    END IF;
    FOR col IN
        SELECT d.refobjid::regclass AS tbl, a.attname, a.atttypid::regtype AS typ
        FROM pg_depend d JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
        WHERE d.classid = 'pg_class'::regclass AND d.objid = seq AND d.deptype IN ('a', 'i')
          AND d.refclassid = 'pg_class'::regclass
    LOOP
        IF col.typ <> 'bigint'::regtype THEN
            RAISE EXCEPTION 'column "%" of relation "%" is of type %, which cannot hold a snowflake ID',
                col.attname, col.tbl, col.typ
                USING ERRCODE = 'datatype_mismatch',
                      HINT = format('Make it bigint first: ALTER TABLE %s ALTER COLUMN %I TYPE bigint.', col.tbl, col.attname);
        END IF;
    END LOOP;
    PERFORM @extschema@.snowflake_sequence_check_block(s.seqincrement, block_mode);
    -- A registered sequence generates for whoever may call nextval on it:
    -- its owner must have the rights the extension grants to generate, and
    -- for blocks (INCREMENT BY more than 1) those of snowflake_next_ids().
    IF NOT has_function_privilege('@extschema@.snowflake_next_id()', 'EXECUTE') THEN
        RAISE EXCEPTION 'permission denied to register sequence "%": no right to generate snowflake IDs', seq
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'GRANT EXECUTE ON FUNCTION snowflake_next_id() TO the role that registers it.';
    END IF;
    IF s.seqincrement > 1 AND NOT has_function_privilege('@extschema@.snowflake_next_ids(integer)', 'EXECUTE') THEN
        RAISE EXCEPTION 'permission denied to register sequence "%" of increment %: blocks need the right to generate in bulk',
            seq, s.seqincrement
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'GRANT EXECUTE ON FUNCTION snowflake_next_ids(integer) TO the role that registers it.';
    END IF;
    -- The fence: MAXVALUE at the current value, which needs a value above
    -- MINVALUE that nextval has handed out (a fresh sequence gives up one).
    EXECUTE format('SELECT last_value, is_called FROM %s', seq) INTO last, called;
    IF NOT called OR last <= s.seqmin THEN
        last := greatest(last, s.seqmin + 1);
        PERFORM setval(seq, last, true);
    END IF;
    EXECUTE format('ALTER SEQUENCE %s NO CYCLE MAXVALUE %s', seq, last);
    INSERT INTO @extschema@.snowflake_sequence_registry (seq, block_mode, native_max, native_cycle)
    VALUES (seq, lower(block_mode), s.seqmax, s.seqcycle);
END
$$;

-- Every sequence a table's columns own (serial, bigserial, identity), or
-- every sequence of a schema; all or none: one that cannot hold snowflake
-- IDs stops the call with the error snowflake_sequence_register gives.
CREATE FUNCTION snowflake_sequence_register_table(tbl regclass, block_mode text DEFAULT 'either')
RETURNS SETOF regclass
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq regclass;
BEGIN
    FOR seq IN
        SELECT DISTINCT d.objid::regclass FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
        WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
          AND d.refobjid = tbl AND d.deptype IN ('a', 'i') AND c.relkind = 'S'
        ORDER BY 1
    LOOP
        PERFORM @extschema@.snowflake_sequence_register(seq, block_mode);
        RETURN NEXT seq;
    END LOOP;
END
$$;

CREATE FUNCTION snowflake_sequence_register_schema(schema_name name, block_mode text DEFAULT 'either')
RETURNS SETOF regclass
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq regclass;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = schema_name) THEN
        RAISE EXCEPTION 'schema "%" does not exist', schema_name USING ERRCODE = 'invalid_schema_name';
    END IF;
    FOR seq IN
        SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = schema_name AND c.relkind = 'S'
          AND NOT EXISTS (SELECT FROM @extschema@.snowflake_sequence_registry r WHERE r.seq = c.oid)
        ORDER BY 1
    LOOP
        PERFORM @extschema@.snowflake_sequence_register(seq, block_mode);
        RETURN NEXT seq;
    END LOOP;
END
$$;

CREATE FUNCTION snowflake_sequence_unregister(seq regclass) RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r @extschema@.snowflake_sequence_registry;
    above bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = seq AND pg_has_role(current_user, c.relowner, 'USAGE')) THEN
        RAISE EXCEPTION 'must be owner of sequence %', seq USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT * INTO r FROM @extschema@.snowflake_sequence_registry x WHERE x.seq = $1 FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'sequence "%" is not registered', seq USING ERRCODE = 'undefined_object',
            HINT = 'SELECT * FROM snowflake_sequences lists the registered sequences.';
    END IF;
    DELETE FROM @extschema@.snowflake_sequence_registry x WHERE x.seq = $1;
    -- The ALTER waits for every transaction that took snowflake IDs through
    -- the sequence (they hold its lock), and keeps new ones out until this
    -- one ends.
    EXECUTE format('ALTER SEQUENCE %s MAXVALUE %s %s', seq, r.native_max, CASE WHEN r.native_cycle THEN 'CYCLE' ELSE 'NO CYCLE' END);
    -- Native values continue above every ID this server handed out.
    above := @extschema@.snowflake_sequence_resume_value();
    IF above > r.native_max THEN
        RAISE EXCEPTION 'sequence "%" cannot continue above the snowflake IDs it handed out', seq
            USING ERRCODE = 'numeric_value_out_of_range',
                  DETAIL = format('Its MAXVALUE before registering was %s; the IDs reach %s.', r.native_max, above),
                  HINT = 'Keep the sequence registered, or raise its MAXVALUE in the registry first.';
    END IF;
    PERFORM setval(seq, above, true);
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
