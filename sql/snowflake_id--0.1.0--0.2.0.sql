-- snowflake_id 0.1.0 -> 0.2.0: adopting existing key columns.
--
-- This file is both the upgrade script and, included by src/pg/adopt.rs, part
-- of the 0.2.0 install script, so an upgraded and a fresh installation define
-- the same functions.

-- Switches an existing integer key column to DEFAULT snowflake_next_id(), in
-- the caller's transaction: widens it (and the columns of foreign keys that
-- reference it) to bigint, removes its identity or serial default, keeping the
-- old sequence unless drop_sequence, and refuses when existing values reach
-- the IDs the generator will issue.
CREATE FUNCTION snowflake_adopt(tbl regclass, col name, drop_sequence boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $adopt$
DECLARE
    att record;
    ref record;
    seq regclass;
    seq_name text;
    seq_next bigint;
    col_default text;
    max_existing bigint;
    first_id bigint;
BEGIN
    SELECT a.attnum, a.atttypid, a.attidentity, a.attgenerated
    INTO att
    FROM pg_attribute a
    WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', col, tbl
            USING ERRCODE = 'undefined_column',
                  HINT = 'Name the key column to adopt, such as snowflake_adopt(''orders'', ''id'').';
    END IF;
    IF NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = tbl), 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', tbl
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Run snowflake_adopt() as the owner of the table (and of the tables referencing it).';
    END IF;
    IF att.atttypid NOT IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype) THEN
        RAISE EXCEPTION 'column "%" of relation "%" is of type %, not an integer type', col, tbl, format_type(att.atttypid, NULL)
            USING ERRCODE = 'datatype_mismatch',
                  HINT = 'Snowflake IDs are bigint; only smallint, integer and bigint columns can take them.';
    END IF;
    IF att.attgenerated <> '' THEN
        RAISE EXCEPTION 'column "%" of relation "%" is a generated column', col, tbl
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Adopt a plain key column; a generated column cannot have a default.';
    END IF;

    -- Nothing may insert while the existing keys are checked and the column changes.
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);
    EXECUTE format('SELECT max(%I)::bigint FROM %s', col, tbl) INTO max_existing;
    first_id := @extschema@.snowflake_from_timestamp(clock_timestamp());
    IF max_existing >= first_id THEN
        RAISE EXCEPTION 'column "%" of relation "%" holds values up to %, not below the first snowflake ID %',
                col, tbl, max_existing, first_id
            USING ERRCODE = 'numeric_value_out_of_range',
                  DETAIL = 'New snowflake IDs could equal existing keys.',
                  HINT = 'Keep the existing keys below the first snowflake ID, or give the table a new key column.';
    END IF;

    -- Widen the columns of foreign keys that reference this column, then the column.
    FOR ref IN
        SELECT c.conrelid::regclass AS rel, a.attname AS name
        FROM pg_constraint c
        JOIN LATERAL unnest(c.confkey, c.conkey) AS k(referenced, referencing) ON k.referenced = att.attnum
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.referencing
        WHERE c.contype = 'f' AND c.confrelid = tbl AND a.atttypid IN ('int2'::regtype, 'int4'::regtype)
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE bigint', ref.rel, ref.name);
        RAISE NOTICE 'widened %.% to bigint', ref.rel, ref.name;
    END LOOP;
    IF att.atttypid <> 'int8'::regtype THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE bigint', tbl, col);
        RAISE NOTICE 'widened %.% to bigint', tbl, col;
    END IF;

    -- Remove the identity or the default, keeping the numbering unless asked not to.
    seq_name := pg_get_serial_sequence(tbl::text, col);
    IF seq_name IS NOT NULL THEN
        seq := seq_name::regclass;
        EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s', seq)
            INTO seq_next;
    END IF;
    IF att.attidentity <> '' THEN
        -- Dropping the identity drops its sequence; a kept one is recreated as a
        -- standalone sequence that continues where the identity stopped.
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tbl, col);
        IF drop_sequence THEN
            RAISE NOTICE 'dropped identity of %.% and its sequence', tbl, col;
        ELSE
            EXECUTE format('CREATE SEQUENCE %s START WITH %s', seq_name, seq_next);
            RAISE NOTICE 'dropped identity of %.%; sequence % kept, continuing at %', tbl, col, seq_name, seq_next;
        END IF;
    ELSE
        SELECT pg_get_expr(d.adbin, d.adrelid) INTO col_default
        FROM pg_attrdef d WHERE d.adrelid = tbl AND d.adnum = att.attnum;
        IF col_default IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', tbl, col);
            IF seq IS NOT NULL AND drop_sequence THEN
                EXECUTE format('DROP SEQUENCE %s', seq);
                RAISE NOTICE 'replaced default % of %.% and dropped sequence %', col_default, tbl, col, seq_name;
            ELSIF seq IS NOT NULL THEN
                EXECUTE format('ALTER SEQUENCE %s OWNED BY NONE', seq);
                RAISE NOTICE 'replaced default % of %.%; sequence % kept', col_default, tbl, col, seq_name;
            ELSE
                RAISE NOTICE 'replaced default % of %.%', col_default, tbl, col;
            END IF;
        END IF;
    END IF;

    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT @extschema@.snowflake_next_id()', tbl, col);
END
$adopt$;

COMMENT ON FUNCTION snowflake_adopt(regclass, name, boolean) IS
    'switch an integer key column to DEFAULT snowflake_next_id(), widening it and referencing columns to bigint';
