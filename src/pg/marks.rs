//! Making a mark durable before any ID beyond the old one is handed out.
//!
//! A mark goes to WAL first, flushed, so that a standby, a point-in-time
//! restore and crash recovery replay it; then to the state file, fsynced,
//! because recovery only replays WAL from the last checkpoint and an extension
//! cannot make a checkpoint carry its state. (PostgreSQL's relation map is kept
//! the same way: WAL-logged, and its file written and fsynced at once.)
//!
//! Callers hold [`super::shmem::MarkWriter`], so marks reach the file in
//! order, and never hold the generator's lock while writing.
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

use std::io;
use std::time::Instant;

use pgrx::pg_sys;

use crate::snowflake::generator::Mark;
use crate::snowflake::state_file::{self, StateRecord};

use super::shmem;
use super::wal;

/// How long the last durable write took, in microseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteTimes {
    pub wal_micros: u64,
    pub file_micros: u64,
}

/// Logs `mark` in WAL (flushed) and writes it to the state file. A WAL error
/// is raised as a PostgreSQL error; a file error is returned, and then no ID
/// may rely on the mark.
pub fn make_durable(mark: &Mark) -> Result<WriteTimes, io::Error> {
    let _delay = CheckpointDelay::start();
    let started = Instant::now();
    wal::log_mark(mark);
    let logged = Instant::now();
    #[cfg(feature = "pg_test")]
    test_pause::between_wal_and_file();
    write_file(mark, false)?;
    Ok(WriteTimes { wal_micros: micros(logged - started), file_micros: micros(logged.elapsed()) })
}

/// Writes the state file: a mark set ahead, or with `exact`, the point a clean
/// shutdown stopped at.
pub fn write_file(mark: &Mark, exact: bool) -> io::Result<()> {
    let config = shmem::config();
    let record = StateRecord::new(mark, exact, &config.codec, config.node);
    state_file::write(shmem::state_path(), &record.render(), file_mode())
}

/// The mode PostgreSQL gives files in the data directory: 0600, or 0640 for a
/// cluster initialised with `--allow-group-access`.
pub fn file_mode() -> u32 {
    unsafe extern "C" {
        static pg_file_create_mode: std::ffi::c_int;
    }
    (unsafe { pg_file_create_mode } as u32) & 0o777
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// This backend keeps checkpoints from starting while it holds one; cleared
/// when dropped, also when an error unwinds through the write.
struct CheckpointDelay;

impl CheckpointDelay {
    fn start() -> CheckpointDelay {
        // Only this backend writes its own flags; the checkpointer reads them
        // under ProcArrayLock after taking the WAL insertion locks, which
        // orders this store before the record's insertion.
        unsafe { (*pg_sys::MyProc).delayChkptFlags |= pg_sys::DELAY_CHKPT_START as i32 };
        CheckpointDelay
    }
}

impl Drop for CheckpointDelay {
    fn drop(&mut self) {
        unsafe { (*pg_sys::MyProc).delayChkptFlags &= !(pg_sys::DELAY_CHKPT_START as i32) };
    }
}

/// Test builds only: a mark write stops between WAL and the state file while
/// the data directory holds a file of this name, so that a test can start a
/// checkpoint or a base backup in between. The backend shows the wait in
/// `pg_stat_activity` as `wait_event_type = 'Extension'`.
#[cfg(feature = "pg_test")]
mod test_pause {
    use pgrx::pg_sys;

    const FILE_NAME: &str = "snowflake_id.test_pause";

    pub fn between_wal_and_file() {
        let pause = super::shmem::state_path().with_file_name(FILE_NAME);
        // At most a minute, so that a test that fails cannot hang the server.
        for _ in 0..600 {
            if !pause.exists() {
                return;
            }
            unsafe {
                pg_sys::WaitLatch(
                    pg_sys::MyLatch,
                    (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                    100,
                    pg_sys::PG_WAIT_EXTENSION,
                );
                pg_sys::ResetLatch(pg_sys::MyLatch);
            }
        }
    }
}
