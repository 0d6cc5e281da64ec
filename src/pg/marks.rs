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
//! Measured at full speed (docs/bench/marks.md): 1.35 marks a second, each a
//! WAL insert and flush of 0.47 ms and a file write of 0.70 ms. The WAL flush
//! is the cheaper of the two; the file cannot go, for the reason above.

use std::io;
use std::time::Instant;

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
    let started = Instant::now();
    wal::log_mark(mark);
    let logged = Instant::now();
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
