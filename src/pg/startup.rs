//! Where the generator starts, and what a clean shutdown leaves for the next start.
//!
//! At server start, and when the postmaster re-initialises shared memory after
//! a backend crash, the generator starts from the state file: the last mark
//! made durable, or the exact point a clean shutdown stopped at. WAL redo then
//! raises it by every mark logged since the last checkpoint ([`super::wal`]).
//!
//! A clean shutdown writes the exact next position, so a restart continues
//! without a gap: the first call after it succeeds at once even with
//! `max_clock_drift = 0`, or with ticks of a minute. After a crash the
//! generator continues above the last mark instead, at most a mark's window
//! ahead of the clock.
//!
//! pg_upgrade carries neither the state file nor WAL to the new cluster. When
//! a new cluster first starts in pg_upgrade's binary-upgrade mode, this module
//! writes a state file that says the floor is unknown (replacing any file the
//! new cluster wrote before pg_upgrade), so that the upgraded server refuses
//! to generate until the DBA brings the old cluster's file over, rather than
//! starting again at the wall clock.

use std::ffi::CStr;
use std::path::Path;

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{os_message, raise, report};
use super::marks;
use super::shmem::{self, Shared};
use crate::snowflake::config::{sentence, Config};
use crate::snowflake::generator::{Generator, Mark};
use crate::snowflake::state_file::{self, StateFile, StateFileError};

/// How far ahead each durable mark reserves: a write every ¾ second at most
/// under full load, and after a crash the IDs run at most this far ahead of
/// the clock.
pub const WINDOW_MS: u64 = 1000;

/// What pg_upgrade's new cluster keeps in its data directory while the upgrade
/// runs (PostgreSQL 15 and later); the old cluster has no such directory.
const PG_UPGRADE_OUTPUT_DIR: &str = "pg_upgrade_output.d";

pub fn window_ticks(config: &Config) -> u64 {
    config.codec.time.ticks_in(WINDOW_MS).max(1)
}

/// The generator as shared memory starts. Postmaster only.
pub fn initial_state() -> Shared {
    let config = shmem::config();
    let path = shmem::state_path();
    if unsafe { pg_sys::IsBinaryUpgrade } {
        note_pg_upgrade(path);
    }
    let file = match state_file::read(path) {
        Ok(file) => file,
        Err(e) => refuse_state_file(path, e),
    };
    let record = match file {
        None => {
            report(
                PgLogLevel::LOG,
                PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
                format!("snowflake_id has no state file \"{}\": it starts at the system clock", path.display()),
                None,
                None,
            );
            return Shared::new(new_generator(config, None, path), false);
        }
        Some(StateFile::Unknown { reason }) => {
            report(
                PgLogLevel::WARNING,
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "snowflake_id will not generate IDs: the high-water mark of this data directory is unknown".into(),
                Some(sentence(&reason)),
                Some(unknown_floor_hint(path)),
            );
            return Shared::new(new_generator(config, None, path), true);
        }
        Some(StateFile::Floor(record)) => record,
    };
    let changed = record.changed_settings(&config.codec, config.node);
    if !changed.is_empty() {
        report(
            PgLogLevel::WARNING,
            PgSqlErrorCode::ERRCODE_WARNING,
            "snowflake_id settings changed since the state file was written".into(),
            Some(format!("Changed: {}.", changed.join(", "))),
            Some(
                "Changing the layout, epoch or node numbers of an ID space that already has IDs can repeat IDs; new \
                 IDs still start above the recorded time."
                    .into(),
            ),
        );
    }
    let mark = record.mark.to_mark(&config.codec);
    let generator = new_generator(config, Some(mark), path);
    report(
        PgLogLevel::LOG,
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        format!(
            "snowflake_id resumes {} {} (clock_back {})",
            if record.exact { "exactly after its clean shutdown at" } else { "above its mark" },
            record.mark.instant,
            record.mark.clock_back
        ),
        None,
        None,
    );
    Shared::new(generator, false)
}

fn new_generator(config: &Config, resume: Option<Mark>, path: &Path) -> Generator {
    let template = config.codec.template(config.node);
    Generator::new(template, window_ticks(config), resume).unwrap_or_else(|e| {
        let layout = config.codec.layout;
        let (detail, hint) = match layout.field(crate::snowflake::layout::Field::ClockBack) {
            None => (
                format!(
                    "The state file \"{}\" records clock_back {}, but snowflake_id.layout ({layout}) has no clock_back \
                     field: its IDs would repeat those issued after the clock went back.",
                    path.display(),
                    e.recorded
                ),
                "Put the clock_back field back into snowflake_id.layout. To leave clock_back mode, start a new ID \
                 space (a new table or key column) instead of changing the layout of this one.",
            ),
            Some(_) => (
                format!(
                    "The state file \"{}\" records clock_back {}, but the clock_back field of snowflake_id.layout \
                     ({layout}) holds at most {}.",
                    path.display(),
                    e.recorded,
                    e.max
                ),
                "Give the clock_back field of snowflake_id.layout back the width it had.",
            ),
        };
        raise(
            PgLogLevel::FATAL,
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "snowflake_id.layout cannot continue the IDs recorded in the state file".into(),
            Some(detail),
            Some(hint.into()),
        )
    })
}

/// In pg_upgrade's new cluster, the old cluster's state file has not been
/// brought over yet: the DBA copies it once pg_upgrade has finished. Record
/// that the floor is unknown. A file already there is replaced too: it may be
/// the new cluster's own, from a start before pg_upgrade, which is no floor
/// for the old cluster's IDs.
fn note_pg_upgrade(path: &Path) {
    let data_dir = path.parent().unwrap_or(Path::new("."));
    if !data_dir.join(PG_UPGRADE_OUTPUT_DIR).is_dir() {
        return;
    }
    let reason = match state_file::read(path) {
        Ok(Some(StateFile::Unknown { .. })) => return, // an earlier start of this pg_upgrade run
        Ok(None) => {
            "pg_upgrade created this cluster, and the state file of the cluster it was upgraded from was not copied \
             into it; that cluster may have issued IDs ahead of the clock"
        }
        Ok(Some(StateFile::Floor(_))) | Err(_) => {
            "pg_upgrade created this cluster, and a state file was already here when pg_upgrade first started it; \
             it may be this cluster's own from before the upgrade, which is no floor for the IDs of the cluster it \
             was upgraded from"
        }
    };
    if let Err(e) = state_file::write(path, &state_file::render_unknown(reason), marks::file_mode()) {
        raise(
            PgLogLevel::FATAL,
            super::error::file_access_code(&e),
            format!("could not write snowflake_id state file \"{}\": {}", path.display(), os_message(&e)),
            None,
            None,
        );
    }
}

pub fn unknown_floor_hint(path: &Path) -> String {
    format!(
        "Stop the server, copy snowflake_id.state from the data directory of the cluster this one was made from \
         over \"{}\", and start it again. If that cluster never generated IDs, remove the file instead.",
        path.display()
    )
}

fn refuse_state_file(path: &Path, e: StateFileError) -> ! {
    let shown = path.display();
    let recovery = "The file holds the floor above which this server continues. An older copy (from a backup) is \
                    no floor. If you cannot repair it, move it aside and start the server only once the system clock \
                    is past the newest ID this server may have issued: snowflake_timestamp(max(id)) of your tables, \
                    plus snowflake_id.max_clock_drift if IDs ran ahead.";
    match e {
        StateFileError::Unreadable(io) => raise(
            PgLogLevel::FATAL,
            super::error::file_access_code(&io),
            format!("could not read snowflake_id state file \"{shown}\": {}", os_message(&io)),
            None,
            Some(format!("Check the file's permissions: it must be readable by the server's user. {recovery}")),
        ),
        StateFileError::Corrupt(why) => raise(
            PgLogLevel::FATAL,
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("snowflake_id state file \"{shown}\" is corrupt"),
            Some(sentence(&format!("the file is corrupt because {why}"))),
            Some(recovery.into()),
        ),
    }
}

/// Asks the postmaster to record the exact resume point when it exits after a
/// clean shutdown. Registered again after every re-initialisation, because
/// PostgreSQL forgets exit callbacks when it runs them.
pub fn at_postmaster_exit() {
    unsafe { pg_sys::on_shmem_exit(Some(record_clean_shutdown), pg_sys::Datum::from(0)) };
}

#[pg_guard]
unsafe extern "C-unwind" fn record_clean_shutdown(code: std::ffi::c_int, _arg: pg_sys::Datum) {
    // A non-zero code is a crash re-initialisation or a failed start.
    if code != 0 || unsafe { pg_sys::IsUnderPostmaster } {
        return;
    }
    let Some(shared) = shmem::unlocked_in_postmaster() else { return };
    if shared.floor_unknown || !shut_down_cleanly() {
        return;
    }
    // Every backend has exited normally (none between two statements of the
    // generator) and the shutdown checkpoint is written: the shared state is
    // final, and nothing was issued at or after its next position.
    let resume = shared.generator.resume_point();
    if resume.position == 0 && shared.generator.mark().position == 0 {
        return; // never generated: leave no file
    }
    if let Err(e) = marks::write_file(&resume, true) {
        report(
            PgLogLevel::LOG,
            super::error::file_access_code(&e),
            format!(
                "could not record snowflake_id's exact position in \"{}\": {}",
                shmem::state_path().display(),
                os_message(&e)
            ),
            Some("The last mark stays in force: the next start continues above it, up to a second later.".into()),
            None,
        );
    }
}

/// Whether the control file says the last shutdown checkpoint completed.
fn shut_down_cleanly() -> bool {
    let mut crc_ok = false;
    let data_dir: &CStr = unsafe { CStr::from_ptr(pg_sys::DataDir) };
    let control = unsafe { pg_sys::get_controlfile(data_dir.as_ptr(), &mut crc_ok) };
    if control.is_null() || !crc_ok {
        return false;
    }
    let state = unsafe { (*control).state };
    state == pg_sys::DBState::DB_SHUTDOWNED || state == pg_sys::DBState::DB_SHUTDOWNED_IN_RECOVERY
}
