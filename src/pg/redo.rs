//! The resource manager's redo function: each record replayed by its kind,
//! a mark ([`super::marks`]), a claim or a release ([`super::claim`]).

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, Raise};
use super::wal::{self, Record};
use super::{claim, marks};

/// The resource manager's redo function.
///
/// # Safety
/// Called by PostgreSQL's WAL replay with a record of this resource manager.
#[pg_guard]
pub unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: the function's contract.
    let record = unsafe { wal::decode(record) }.unwrap_or_else(|why| {
        error::new(PgSqlErrorCode::ERRCODE_DATA_CORRUPTED, format!("could not replay snowflake_id WAL record: {why}"))
            .raise(PgLogLevel::PANIC)
    });
    match record {
        Record::Mark(wal_mark) => marks::replay(&wal_mark),
        Record::Claim(claim) => claim::replay_claim(&claim),
        Record::Release(release) => claim::replay_release(&release),
    }
}
