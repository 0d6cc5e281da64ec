//! The "new ID space" step: a DBA's explicit way past a settings change that
//! cannot continue the IDs already issued (see [`super::startup`]).
//!
//! With the server stopped cleanly, the DBA creates the file
//! `snowflake_id.new_id_space` in the data directory and starts the server.
//! The start then abandons every ID this data directory issued before: the
//! state file is kept under another name, a new one starts ID space `n + 1`
//! at the wall clock, and the signal file is removed. Later IDs may equal
//! earlier ones, so the step is only for a DBA who knows no table holds IDs
//! of the old space.
//!
//! The step is refused after a crash or on a server starting in recovery: WAL
//! replayed from before the step would bring the old space back. Standbys do
//! not take the step themselves: the primary's marks carry the new space's
//! number, and a standby replaying the first of them enters that space too.

use std::fs;
use std::path::{Path, PathBuf};

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::control::{self, LastStop};
use super::error::{self, os_message, ErrorReport, Raise};
use super::shmem::Lineage;
use super::{settings, state_file};
use crate::snowflake::generator::Mark;
use crate::snowflake::state_file::StateFile;

/// The signal file's name in the data directory.
pub const SIGNAL: &str = "snowflake_id.new_id_space";

pub fn signal_path() -> PathBuf {
    settings::state_path().with_file_name(SIGNAL)
}

/// Whether a DBA asked for a new ID space.
pub fn requested() -> bool {
    signal_path().exists()
}

/// Starts the new ID space after the one the state file (`old`) records, and
/// returns its number. Postmaster only, before shared memory is set up.
pub fn start(old: Option<&StateFile>, lineage: &Lineage) -> u32 {
    let signal = signal_path();
    if control::last_stop() != LastStop::Primary || control::starts_in_recovery() {
        error::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "cannot start a new snowflake_id ID space: the server was not shut down cleanly as a primary",
        )
        .set_detail(format!(
            "The file \"{}\" asks for a new ID space. WAL replayed after an unclean stop, or on a server starting in \
             recovery, would bring back the marks of the old one.",
            signal.display()
        ))
        .set_hint(
            "Remove the file, start the server (without standby.signal or recovery.signal), stop it with pg_ctl \
             stop -m fast, create the file again and start it. A standby enters the new ID space from its \
             primary's WAL.",
        )
        .raise(PgLogLevel::FATAL);
    }
    // Above the last space a step kept a file for, too: without a state
    // file, standbys of that space would pass over the new one's marks.
    let number = match old {
        Some(StateFile::Mark(record)) => record.id_space,
        _ => 0,
    }
    .max(state_file::last_space_kept())
        + 1;
    // In this order, each step durable before the next: a crash between two
    // leaves the old state file in force and no request, so the next start
    // continues the old space or refuses as before, and the DBA asks again.
    let kept = state_file::keep_copy(&format!("before-space-{number}"));
    remove_signal(&signal);
    let start = Mark { position: 0, clock_back: 0, wall: None };
    let lineage = Lineage { id_space: number, ..*lineage };
    state_file::write_mark(&start, false, &lineage).unwrap_or_else(|e| ErrorReport::from(e).raise(PgLogLevel::FATAL));
    error::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!("snowflake_id starts ID space {number}: IDs issued before may be issued again"),
    )
    .set_detail(match &kept {
        Some(k) => format!(
            "\"{}\" asked for it. The state file of the old ID space is kept as \"{}\".",
            signal.display(),
            k.display()
        ),
        None => format!("\"{}\" asked for it. There was no state file.", signal.display()),
    })
    .set_hint("Only tables that hold no ID of the old ID space may receive IDs of the new one.")
    .report(PgLogLevel::WARNING);
    number
}

/// The request for a new ID space waits: the old state file cannot be read,
/// and the step keeps it before it starts the new space.
pub fn report_not_carried_out() {
    error::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        "snowflake_id does not start a new ID space now: the state file cannot be read",
    )
    .set_detail(format!(
        "\"{}\" asks for a new ID space; the step keeps the old state file before it starts one.",
        signal_path().display()
    ))
    .set_hint("Repair or move aside the state file and restart the server; the request is carried out then.")
    .report(PgLogLevel::WARNING);
}

fn remove_signal(signal: &Path) {
    let dir = signal.parent().unwrap_or(Path::new("."));
    let removed = fs::remove_file(signal).and_then(|()| fs::File::open(dir)?.sync_all());
    if let Err(e) = removed {
        error::new(
            error::file_access_code(&e),
            format!("could not remove file \"{}\": {}", signal.display(), os_message(&e)),
        )
        .raise(PgLogLevel::FATAL);
    }
}
