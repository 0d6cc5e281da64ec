//! `snowflake_adopt()`, written in PL/pgSQL: it is a sequence of DDL statements.
//! Its source is `sql/snowflake_adopt.sql`; the upgrade script that brought its
//! current version carries a copy, and tests/adoption.rs checks that an
//! upgraded installation defines the same function as a fresh one.

pgrx::extension_sql_file!(
    "../../sql/snowflake_adopt.sql",
    name = "adopt",
    requires = [snowflake_from_timestamp, "snowflake_next_id"]
);
