//! Marks: making one durable before any ID beyond the old one is handed out,
//! and replaying one from WAL. Every state file write of a running server
//! goes through here, with its failure policy.
//!
//! # Making a mark durable
//! A mark goes to WAL first, flushed, so that a standby, a point-in-time
//! restore and crash recovery replay it; then to the state file, fsynced,
//! because recovery only replays WAL from the last checkpoint and an extension
//! cannot make a checkpoint carry its state. (PostgreSQL's relation map is kept
//! the same way: WAL-logged, and its file written and fsynced at once.)
//!
//! Callers hold [`MarkWriter`], so marks reach the file in order, and never
//! hold the state lock while writing.
//!
//! Between the WAL record and the file, the backend delays checkpoints as a
//! committing transaction does (`DELAY_CHKPT_START`): a checkpoint whose redo
//! point lies after the record, so that recovery from it would not replay the
//! mark, waits until the file holds the mark. Without that, a base backup
//! whose checkpoint fell between the two could copy the old file and start
//! its WAL after the mark, and a server restored from it would not know the
//! mark that IDs in its replayed rows relied on.
//!
//! Measured at full speed (docs/bench/marks.md): 1.35 marks a second, each a
//! WAL insert and flush of 0.47 ms and a file write of 0.70 ms. The WAL flush
//! is the cheaper of the two; the file cannot go, for the reason above.
//!
//! Failure policy: a mark that no ID can do without ([`write_needed`]) fails
//! the call, and nothing beyond the old mark was issued. A renewal
//! ([`renew`]), written before the current mark is reached, only warns: the
//! IDs already granted do not depend on it, and it is asked for again.
//!
//! # Replaying a mark
//! Redo runs wherever WAL is replayed: in crash recovery, on a streaming or
//! log-shipping standby, and in point-in-time recovery. It raises the shared
//! generator's mark to the replayed one and writes it to this server's state
//! file before redo moves on, so a standby's `snowflake_status()` follows its
//! primary's mark, a later restartpoint cannot leave the mark behind, and a
//! promoted standby or a restored backup continues above every ID whose mark
//! reached WAL. Any ID stored in a committed row had its mark logged before
//! that row, because the mark is flushed before the ID is handed out.

use std::time::Instant;

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, ErrorReport, Raise};
use super::shmem::{self, MarkWriter, WriteTimes};
use super::state_file::{self, WriteError};
use super::{clock, settings, wal};
use crate::snowflake::generator::Mark;
use crate::snowflake::wal_record::WalMark;

/// Makes a mark durable that no ID can do without; on failure nothing was
/// issued beyond the old mark, and the call fails. The caller holds `_writer`.
pub fn write_needed(mark: Mark, _writer: &MarkWriter) {
    match make_durable(&mark) {
        Ok(times) => shmem::lock().mark_written(mark, times),
        Err(e) => ErrorReport::from(e)
            .set_detail("No ID was issued: the generator records its high-water mark before using it.")
            .raise(PgLogLevel::ERROR),
    }
}

/// Makes the next mark durable before the current one is reached, so that
/// other calls never wait for a write. The IDs already granted do not depend
/// on it: a failure is a warning, and the write is asked for again.
pub fn renew(mark: Mark, held: Option<MarkWriter>) {
    let _writer = held.unwrap_or_else(MarkWriter::acquire);
    if shmem::read().generator.covers(&mark) {
        return;
    }
    match make_durable(&mark) {
        Ok(times) => shmem::lock().mark_written(mark, times),
        Err(e) => {
            shmem::lock().generator.mark_failed();
            ErrorReport::from(e)
                .set_detail(
                    "IDs continue up to the current high-water mark, about a second; then generating fails until \
                     the file can be written.",
                )
                .report(PgLogLevel::WARNING);
        }
    }
}

/// Logs `mark` in WAL (flushed) and writes it to the state file. A WAL error
/// is raised as a PostgreSQL error; a file error is returned, and then no ID
/// may rely on the mark.
fn make_durable(mark: &Mark) -> Result<WriteTimes, WriteError> {
    let _delay = CheckpointDelay::start();
    let started = Instant::now();
    wal::log_mark(mark);
    let logged = Instant::now();
    #[cfg(feature = "pg_test")]
    test_pause::between_wal_and_file();
    state_file::write_mark(mark, false)?;
    Ok(WriteTimes { wal_micros: clock::micros(logged - started), file_micros: clock::micros(logged.elapsed()) })
}

/// The resource manager's redo function.
///
/// # Safety
/// Called by PostgreSQL's WAL replay with a record of this resource manager.
#[pg_guard]
pub unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: the function's contract.
    let wal_mark = unsafe { wal::decode(record) }.unwrap_or_else(|why| {
        error::new(PgSqlErrorCode::ERRCODE_DATA_CORRUPTED, format!("could not replay snowflake_id WAL record: {why}"))
            .raise(PgLogLevel::PANIC)
    });
    replay(&wal_mark);
}

/// Raises the generator to a replayed mark and records it in this server's
/// state file before redo moves on.
fn replay(wal_mark: &WalMark) {
    let config = settings::config();
    let mark = wal_mark.mark.to_mark(&config.codec);
    let _writer = MarkWriter::acquire();
    let raised = {
        let mut state = shmem::lock();
        match state.generator.raise_mark(mark) {
            Ok(true) => Ok(Some(state.generator.mark())),
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let raised = raised.unwrap_or_else(|e| {
        error::new(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("could not replay snowflake_id mark: it carries clock_back {}", e.recorded),
        )
        .set_detail(format!(
            "The record ({wal_mark}) comes from a server whose layout has a wider clock_back field than this \
             server's snowflake_id.layout ({}), which holds at most {}.",
            config.codec.layout, e.max
        ))
        .set_hint("Give this server the same snowflake_id.layout as its primary.")
        .raise(PgLogLevel::ERROR)
    });
    if let Some(mark) = raised {
        if let Err(e) = state_file::write_mark(&mark, false) {
            ErrorReport::from(e)
                .set_detail("The replayed high-water mark must be recorded before recovery continues.")
                .raise(PgLogLevel::ERROR);
        }
    }
}

/// This backend keeps checkpoints from starting while it holds one; cleared
/// when dropped, also when an error unwinds through the write.
struct CheckpointDelay;

impl CheckpointDelay {
    fn start() -> CheckpointDelay {
        // SAFETY: MyProc is this backend's own PGPROC; only this backend writes
        // its flags. The checkpointer reads them under ProcArrayLock after
        // taking the WAL insertion locks, which orders this store before the
        // record's insertion.
        unsafe { (*pg_sys::MyProc).delayChkptFlags |= pg_sys::DELAY_CHKPT_START as i32 };
        CheckpointDelay
    }
}

impl Drop for CheckpointDelay {
    fn drop(&mut self) {
        // SAFETY: as in `start`.
        unsafe { (*pg_sys::MyProc).delayChkptFlags &= !(pg_sys::DELAY_CHKPT_START as i32) };
    }
}

/// Test builds only: a mark write stops between WAL and the state file while
/// the data directory holds a file of this name, so that a test can start a
/// checkpoint or a base backup in between. The backend shows the wait in
/// `pg_stat_activity` as `wait_event_type = 'Extension'`.
#[cfg(feature = "pg_test")]
mod test_pause {
    use std::time::Duration;

    const FILE_NAME: &str = "snowflake_id.test_pause";

    pub fn between_wal_and_file() {
        let pause = super::settings::state_path().with_file_name(FILE_NAME);
        // At most a minute, so that a test that fails cannot hang the server.
        for _ in 0..600 {
            if !pause.exists() {
                return;
            }
            super::clock::nap(Duration::from_millis(100));
        }
    }
}
