//! The C entry points that 0.6.0's SQL calls and 0.7.0's does not: a
//! database keeps 0.6.0's SQL from the restart that loads this library
//! until `ALTER EXTENSION snowflake_id UPDATE`, and its registrations must
//! work meanwhile. They do what 0.6.0's did; the update drops the SQL
//! functions that call them.

use pgrx::pg_sys::Oid;
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::fence;
use super::nextval::{check_block, resume_value};
use crate::pg::error::Raise;

/// 0.6.0's `snowflake_sequence_check_block(bigint, text)`.
#[pg_extern(volatile, parallel_safe, sql = false)]
pub fn snowflake_sequence_check_block(increment: i64, block_mode: &str) {
    if let Err(refused) = check_block(increment, block_mode) {
        (*refused).raise(PgLogLevel::ERROR);
    }
}

/// 0.6.0's `snowflake_sequence_resume_value()`.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
pub fn snowflake_sequence_resume_value() -> i64 {
    resume_value()
}

/// 0.6.0's `snowflake_sequence_invalidate(oid)`, which its registry's
/// trigger calls for each row it lets through: a registration's fence,
/// set by 0.6.0's SQL, is noted as holding (see [`fence::verified`]).
#[pg_extern(volatile, parallel_unsafe, sql = false)]
pub fn snowflake_sequence_invalidate(seq: Oid) {
    fence::invalidate(seq);
    fence::verified_if_at_fence(seq);
}
