//! This server's state file (`snowflake_id.state` in the data directory):
//! reading it, and writing a mark or the note that the mark is unknown. The
//! format and the atomic write are the core's ([`crate::snowflake::state_file`]);
//! this module adds the path, PostgreSQL's file mode, the settings in force,
//! and the errors as PostgreSQL reports them. Callers serialise writes.
//!
//! It also keeps the note that this data directory has issued IDs
//! (`snowflake_id.issued`), written with its first mark (after the state
//! file, before any ID relies on the mark) and never removed: without it, a
//! state file that is not there cannot be told from a cluster that never
//! generated. An fsck that moves the file to lost+found, a copy or restore
//! that leaves it out, an operator tidying up: each would otherwise start the
//! generator again at the wall clock, below the IDs a bulk call, borrowed
//! time or a clock set back had run ahead of it. The note lies in the data
//! directory's top level, where base backups, pg_rewind and backup tools copy
//! it; not in `global/`, whose files pg_checksums and base backups of a
//! checksummed cluster read as relation files.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::prelude::*;

use super::error::{self, file_access_code, file_hint, os_message, ErrorReport, Raise};
use super::shmem::Lineage;
use super::{control, ffi, settings};
use crate::snowflake::config::sentence;
use crate::snowflake::generator::Mark;
use crate::snowflake::rewind_note::RewindNote;
use crate::snowflake::state_file::{self as format, StateFile, StateRecord};

/// The state file could not be written: the path the write failed on (the
/// file, its temporary file, their directory, or the note), and why.
pub use format::WriteFailure as WriteError;

impl From<WriteError> for ErrorReport {
    #[track_caller]
    fn from(e: WriteError) -> ErrorReport {
        error::new(
            file_access_code(&e.io),
            format!("could not write snowflake_id state file \"{}\": {}", e.path.display(), os_message(&e.io)),
        )
        .set_hint(file_hint(&e.io))
    }
}

/// The state file could not be read, or holds no mark that can be trusted.
#[derive(Debug)]
pub struct ReadError {
    pub path: &'static Path,
    pub error: format::StateFileError,
}

impl From<ReadError> for ErrorReport {
    #[track_caller]
    fn from(e: ReadError) -> ErrorReport {
        let shown = e.path.display();
        let recovery = RECOVERY_HINT;
        match e.error {
            format::StateFileError::Unreadable(io) => error::new(
                file_access_code(&io),
                format!("could not read snowflake_id state file \"{shown}\": {}", os_message(&io)),
            )
            .set_hint(format!("Check the file's permissions: it must be readable by the server's user. {recovery}")),
            format::StateFileError::Corrupt(why) => error::new(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                format!("snowflake_id state file \"{shown}\" is corrupt"),
            )
            .set_detail(sentence(&format!("the file is corrupt because {why}")))
            .set_hint(recovery),
        }
    }
}

/// What a DBA does about a state file that cannot be read, or is missing.
const RECOVERY_HINT: &str = "The file holds the floor above which this server continues; until that is known, calls \
     to generate IDs fail. An older copy (from a backup) is no floor. If you cannot repair it, raise the floor above \
     the newest ID this server may have issued, as a superuser and before applications generate: SELECT \
     snowflake_raise_floor(max(id)) over every table that holds its IDs (this writes a new file).";

/// The report of a state file that is not there in a data directory that
/// issued IDs before.
pub fn missing(path: &Path) -> ErrorReport {
    error::new(
        PgSqlErrorCode::ERRCODE_UNDEFINED_FILE,
        format!("snowflake_id state file \"{}\" is missing", path.display()),
    )
    .set_detail(format!(
        "This data directory issued IDs before (\"{}\" says so), and the state file was the record of how far they \
         got.",
        note_path().display()
    ))
    .set_hint(format!(
        "Put the file back where it was lost from (lost+found after an fsck, or a copy taken since the last stop) \
         and restart. {RECOVERY_HINT}"
    ))
}

/// What a DBA does about an unknown mark.
pub fn unknown_mark_hint(path: &Path) -> String {
    format!(
        "Stop the server, copy snowflake_id.state from the data directory of the cluster this one was made from \
         over \"{}\", and start it again. If that file is lost, run SELECT snowflake_raise_floor(max(id)) as a \
         superuser over every table that holds IDs of that cluster (and give the largest ID that left the \
         database, if higher). If that cluster never generated IDs, remove the file instead.",
        path.display()
    )
}

/// What the state file says; `None` when there is none.
pub fn read() -> Result<Option<StateFile>, ReadError> {
    let path = settings::state_path();
    format::read(path).map_err(|error| ReadError { path, error })
}

/// Writes a mark set ahead, or with `exact`, the point a clean shutdown
/// stopped at, with the settings in force and `lineage` (the mark's ID space
/// and node, the lineage's numbers); then the note that this data directory
/// issued IDs, so that a note always means a state file was written (a
/// failure before it leaves no note: no ID relies on a mark until this
/// returns).
pub fn write_mark(mark: &Mark, exact: bool, lineage: &Lineage) -> Result<(), WriteError> {
    let config = settings::config();
    let record = StateRecord::new(mark, exact, &config.codec, lineage.node, lineage.id_space, &lineage.claims);
    write(&record.by(control::writer()).render())?;
    note_ids_issued()
}

/// Writes `record`: a file read at start, rewritten with a change that must
/// outlast a crash before the next mark (this server its writer now).
pub fn write_record(record: &StateRecord) -> Result<(), WriteError> {
    write(&record.clone().by(control::writer()).render())
}

/// The note's name in the data directory.
const NOTE_NAME: &str = "snowflake_id.issued";

const NOTE_TEXT: &str = "snowflake_id has issued IDs from this data directory. Its state file, snowflake_id.state, \
records the floor above which they continue; a server that finds this note without that file refuses to generate \
until the file is back or a floor is raised. Do not remove this note.\n";

/// This process knows the note is there.
static NOTED: AtomicBool = AtomicBool::new(false);

fn note_path() -> PathBuf {
    settings::state_path().with_file_name(NOTE_NAME)
}

/// Makes sure the note that this data directory issued IDs is there,
/// durably: looked for once per process, written when absent.
pub fn note_ids_issued() -> Result<(), WriteError> {
    if NOTED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let path = note_path();
    if !path.exists() {
        format::write(&path, NOTE_TEXT, ffi::file_create_mode())?;
    }
    NOTED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Whether this data directory issued IDs before. A note that cannot be
/// looked at counts as there: the safe answer.
pub fn issued_before() -> bool {
    match std::fs::symlink_metadata(note_path()) {
        Ok(_) => true,
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    }
}

/// The note of a rewind (`snowflake_id.rewound`, beside the state file),
/// if there is one; `Err` when it is there and cannot be read, which counts
/// as a note for any number.
pub fn rewind_note() -> Option<Result<RewindNote, String>> {
    let path = rewind_note_path();
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(RewindNote::parse(&text).map_err(|e| format!("\"{}\": {e}", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(format!("\"{}\": {}", path.display(), os_message(&e)))),
    }
}

/// Writes the note of a rewind, durably.
pub fn write_rewind_note(note: &RewindNote) -> Result<(), WriteError> {
    format::write(&rewind_note_path(), &note.render(), ffi::file_create_mode())
}

/// Removes the note of a rewind: the IDs it stood for lie below the floor
/// now, or this server generates with another number.
pub fn remove_rewind_note() -> io::Result<()> {
    match std::fs::remove_file(rewind_note_path()) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn rewind_note_path() -> PathBuf {
    settings::state_path().with_file_name(REWIND_NOTE_NAME)
}

const REWIND_NOTE_NAME: &str = "snowflake_id.rewound";

/// The ID space of the last "new ID space" step taken in this data
/// directory: the highest N of the `snowflake_id.state.before-space-N`
/// files it kept (0 when there is none).
pub fn last_space_kept() -> u32 {
    let path = settings::state_path();
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return 0 };
    let prefix = format!("{}.before-space-", name.to_string_lossy());
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let file = entry.file_name().to_string_lossy().into_owned();
            let rest = file.strip_prefix(&prefix)?;
            rest.split('.').next()?.parse::<u32>().ok()
        })
        .max()
        .unwrap_or(0)
}

/// Writes that this data directory's mark is unknown, and why.
pub fn write_unknown(reason: &str) -> Result<(), WriteError> {
    write(&format::render_unknown(reason))
}

fn write(contents: &str) -> Result<(), WriteError> {
    let path = settings::state_path();
    format::write(path, contents, ffi::file_create_mode())
}

/// Keeps a copy of the state file as `snowflake_id.state.<label>` (or, if a
/// file of that name is there, the first free `.<n>` after it), durably,
/// before the file is replaced: a floor is never destroyed, only set aside
/// under a name the report gives. `None` when there is no file. Stops the
/// server when the copy cannot be made. Postmaster only.
pub fn keep_copy(label: &str) -> Option<PathBuf> {
    let path = settings::state_path();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(io) => ErrorReport::from(ReadError { path, error: format::StateFileError::Unreadable(io) })
            .raise(pgrx::PgLogLevel::FATAL),
    };
    let kept = (0..)
        .map(|n: u32| {
            let mut name = path.as_os_str().to_owned();
            name.push(format!(".{label}"));
            if n > 0 {
                name.push(format!(".{n}"));
            }
            PathBuf::from(name)
        })
        .find(|candidate| !candidate.exists())
        .expect("a free name");
    if let Err(e) = format::write(&kept, &text, ffi::file_create_mode()) {
        error::new(
            file_access_code(&e.io),
            format!(
                "could not keep the old snowflake_id state file as \"{}\": {}",
                e.path.display(),
                os_message(&e.io)
            ),
        )
        .set_hint(file_hint(&e.io))
        .raise(pgrx::PgLogLevel::FATAL);
    }
    Some(kept)
}
