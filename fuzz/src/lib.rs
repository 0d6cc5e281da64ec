//! The pure core of snowflake_id, compiled on its own for fuzzing: no pgrx,
//! no PostgreSQL. The targets reach it as `snowflake_id_fuzz::snowflake`,
//! and build valid layouts from fuzzer input with [`arb`].

#[path = "../../src/snowflake/mod.rs"]
pub mod snowflake;

pub mod arb;
