//! `snowflake_adopt()`, written in PL/pgSQL: it is a sequence of DDL statements.
//! Its source is the 0.1.0 -> 0.2.0 upgrade script, included here so that a
//! fresh installation and an upgraded one define the same function.

pgrx::extension_sql_file!(
    "../../sql/snowflake_id--0.1.0--0.2.0.sql",
    name = "adopt",
    requires = [snowflake_from_timestamp, snowflake_next_id]
);
