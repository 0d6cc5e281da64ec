//! snowflake_id: time-ordered 64-bit IDs generated inside PostgreSQL.
//!
//! [`snowflake`] is the pure Rust core (layouts, encoding, the generator state
//! machine, the state file), tested with `cargo test`; `pg` is the thin
//! PostgreSQL layer (settings, shared memory, SQL functions, errors).

use pgrx::prelude::*;

mod pg;
pub mod snowflake;

::pgrx::pg_module_magic!();

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    pg::init();
}

/// Settings for the server `cargo pgrx test` starts for the `#[pg_test]`s.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![
            "shared_preload_libraries = 'snowflake_id'",
            "snowflake_id.datacenter_id = 3",
            "snowflake_id.worker_id = 7",
        ]
    }
}
