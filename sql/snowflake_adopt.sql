-- snowflake_adopt(), included in the install script by src/pg/adopt.rs. The
-- upgrade script that introduces a new version of it carries a copy, and
-- tests/adoption.rs checks that an upgraded installation equals a fresh one.

-- Switches an existing integer key column to DEFAULT snowflake_next_id(), in
-- the caller's transaction: widens it (and the columns of foreign keys that
-- reference it) to bigint, removes its identity or serial default, keeping the
-- old sequence unless drop_sequence, and refuses when existing values reach
-- the IDs the generator will issue.
CREATE OR REPLACE FUNCTION snowflake_adopt(tbl regclass, col name, drop_sequence boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $adopt$
DECLARE
    att record;
    widen_rels regclass[];
    widen_cols name[];
    i integer;
    seq regclass;
    seq_name text;
    seq_next bigint;
    seq_opts record;
    grant_row record;
    col_default text;
    max_existing bigint;
    first_id bigint;
    key_of regclass;
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
    IF (SELECT relispartition FROM pg_class WHERE oid = tbl) THEN
        RAISE EXCEPTION 'relation "%" is a partition of "%"', tbl, pg_partition_root(tbl)
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Adopt the key column of the partitioned table; its partitions follow.';
    END IF;

    -- The columns to widen: those of foreign keys that reference this column
    -- (a partitioned referencing table through its root, which widens its
    -- partitions), then the column itself.
    SELECT array_agg(w.rel ORDER BY w.ord, w.rel::text, w.name), array_agg(w.name ORDER BY w.ord, w.rel::text, w.name)
    INTO widen_rels, widen_cols
    FROM (
        SELECT DISTINCT coalesce(pg_partition_root(c.conrelid), c.conrelid) AS rel, a.attname AS name, 1 AS ord
        FROM pg_constraint c
        JOIN LATERAL unnest(c.confkey, c.conkey) AS k(referenced, referencing) ON k.referenced = att.attnum
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.referencing
        WHERE c.contype = 'f' AND c.confrelid = tbl AND c.conparentid = 0
          AND a.atttypid IN ('int2'::regtype, 'int4'::regtype)
        UNION ALL
        SELECT tbl, col, 2 WHERE att.atttypid <> 'int8'::regtype
    ) w;

    -- PostgreSQL cannot change the type of a partition key column: refuse
    -- before changing anything.
    FOR i IN 1 .. coalesce(array_length(widen_rels, 1), 0) LOOP
        SELECT t.relid INTO key_of
        FROM pg_partition_tree(widen_rels[i]) t
        JOIN pg_partitioned_table pt ON pt.partrelid = t.relid
        JOIN pg_attribute pa ON pa.attrelid = t.relid AND pa.attname = widen_cols[i]
        WHERE pa.attnum = ANY (pt.partattrs::int2[])
        LIMIT 1;
        IF key_of IS NOT NULL THEN
            RAISE EXCEPTION 'column "%" of relation "%" is a partition key and cannot be widened to bigint',
                    widen_cols[i], key_of
                USING ERRCODE = 'feature_not_supported',
                      DETAIL = CASE WHEN widen_rels[i] = tbl AND widen_cols[i] = col THEN 'It is the key column to adopt.'
                               ELSE format('It references %s(%I), whose values become snowflake IDs.', tbl, col) END,
                      HINT = 'PostgreSQL cannot change the type of a partition key. Recreate the partitioned table '
                             'with a bigint column (or partitioned by another column), then adopt again.';
        END IF;
    END LOOP;

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

    FOR i IN 1 .. coalesce(array_length(widen_rels, 1), 0) LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE bigint', widen_rels[i], widen_cols[i]);
        RAISE NOTICE 'widened %.% to bigint', widen_rels[i], widen_cols[i];
    END LOOP;

    -- Remove the identity or the default, keeping the numbering unless asked not to.
    seq_name := pg_get_serial_sequence(tbl::text, col);
    IF seq_name IS NOT NULL THEN
        seq := seq_name::regclass;
        SELECT s.seqtypid, s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
               c.relowner, c.relacl, c.relpersistence, obj_description(c.oid, 'pg_class') AS comment
        INTO seq_opts
        FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
        WHERE s.seqrelid = seq;
        EXECUTE format('SELECT CASE WHEN is_called THEN last_value + %s ELSE last_value END FROM %s',
                       seq_opts.seqincrement, seq)
            INTO seq_next;
    END IF;
    IF att.attidentity <> '' THEN
        -- Dropping the identity drops its sequence; a kept one is recreated as a
        -- standalone sequence with the same options, owner and grants, that
        -- continues where the identity stopped.
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tbl, col);
        IF drop_sequence THEN
            RAISE NOTICE 'dropped identity of %.% and its sequence', tbl, col;
        ELSE
            EXECUTE format('CREATE %s SEQUENCE %s AS %s INCREMENT BY %s MINVALUE %s MAXVALUE %s START WITH %s CACHE %s %s',
                           CASE WHEN seq_opts.relpersistence = 'u' THEN 'UNLOGGED' ELSE '' END, seq_name,
                           format_type(seq_opts.seqtypid, NULL), seq_opts.seqincrement, seq_opts.seqmin,
                           seq_opts.seqmax, seq_next, seq_opts.seqcache,
                           CASE WHEN seq_opts.seqcycle THEN 'CYCLE' ELSE 'NO CYCLE' END);
            EXECUTE format('ALTER SEQUENCE %s OWNER TO %s', seq_name, seq_opts.relowner::regrole);
            FOR grant_row IN
                SELECT a.grantee, a.privilege_type, a.is_grantable
                FROM aclexplode(seq_opts.relacl) a
                WHERE a.grantee <> seq_opts.relowner
            LOOP
                EXECUTE format('GRANT %s ON SEQUENCE %s TO %s%s', grant_row.privilege_type, seq_name,
                               CASE WHEN grant_row.grantee = 0 THEN 'PUBLIC' ELSE grant_row.grantee::regrole::text END,
                               CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            END LOOP;
            IF seq_opts.comment IS NOT NULL THEN
                EXECUTE format('COMMENT ON SEQUENCE %s IS %L', seq_name, seq_opts.comment);
            END IF;
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
                RAISE NOTICE 'replaced default % of %.%; sequence % kept, continuing at %',
                    col_default, tbl, col, seq_name, seq_next;
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
