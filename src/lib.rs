//! snowflake_id: time-ordered 64-bit IDs generated inside PostgreSQL.
//!
//! [`snowflake`] is the pure Rust core (layouts, encoding, the generator state
//! machine, the state file), tested with `cargo test`; `pg` is the thin
//! PostgreSQL layer (settings, shared memory, SQL functions, errors).

pub mod snowflake;
