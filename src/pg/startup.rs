//! The generator's lifecycle: where it starts, and what a clean shutdown
//! leaves for the next start. This module owns the shared memory hooks
//! (request and startup) and the postmaster's exit callback; [`super::shmem`]
//! is the mechanism they drive.
//!
//! At server start, and when the postmaster re-initialises shared memory after
//! a backend crash, the generator starts from the state file: the last mark
//! made durable, or the exact point a clean shutdown stopped at. WAL redo then
//! raises it by every mark logged since the last checkpoint ([`super::marks`]).
//!
//! A clean shutdown writes the exact next position, so a restart continues
//! without a gap: the first call after it succeeds at once even with
//! `max_clock_drift = 0`, or with ticks of a minute. After a crash the
//! generator continues above the last mark instead, at most a mark's window
//! ahead of the clock.
//!
//! pg_upgrade carries neither the state file nor WAL to the new cluster. When
//! a new cluster first starts in pg_upgrade's binary-upgrade mode, this module
//! writes a state file that says the mark is unknown (replacing any file the
//! new cluster wrote before pg_upgrade), so that the upgraded server refuses
//! to generate until the DBA brings the old cluster's file over, rather than
//! starting again at the wall clock.

use std::ffi::CStr;
use std::path::Path;

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, os_message, ErrorReport, Raise};
use super::shmem::{self, State};
use super::{settings, state_file};
use crate::snowflake::codec::Node;
use crate::snowflake::config::{sentence, Config};
use crate::snowflake::generator::{window_ticks, Generator, Mark};
use crate::snowflake::state_file::StateFile;

/// What pg_upgrade's new cluster keeps in its data directory while the upgrade
/// runs (PostgreSQL 15 and later); the old cluster has no such directory.
const PG_UPGRADE_OUTPUT_DIR: &str = "pg_upgrade_output.d";

static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// Installs the shared memory hooks. Postmaster only, while
/// `shared_preload_libraries` load.
pub fn init() {
    // SAFETY: hooks are chained here, in the postmaster's main thread, before
    // any of them runs.
    unsafe {
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_shmem);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup_shmem);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn request_shmem() {
    // SAFETY: the hook saved in `init`, called as PostgreSQL would.
    if let Some(prev) = unsafe { PREV_SHMEM_REQUEST_HOOK } {
        // SAFETY: as above.
        unsafe { call_previous(prev) };
    }
    shmem::request();
}

/// Runs in the postmaster at start and again when it re-initialises shared
/// memory after a backend crashed.
#[pg_guard]
unsafe extern "C-unwind" fn startup_shmem() {
    // SAFETY: the hook saved in `init`, called as PostgreSQL would.
    if let Some(prev) = unsafe { PREV_SHMEM_STARTUP_HOOK } {
        // SAFETY: as above.
        unsafe { call_previous(prev) };
    }
    shmem::create(initial_state());
    at_postmaster_exit();
}

/// Calls the hook another library installed before ours. Its type says it may
/// unwind, as pgrx types every hook; PostgreSQL code raises errors by
/// `longjmp` instead, and this frame holds nothing to drop.
///
/// # Safety
/// `hook` is a shared memory hook saved in `init`.
#[allow(ffi_unwind_calls)]
unsafe fn call_previous(hook: unsafe extern "C-unwind" fn()) {
    // SAFETY: the caller's contract; called where PostgreSQL would call it.
    unsafe { hook() }
}

/// The generator as shared memory starts. Postmaster only.
fn initial_state() -> State {
    let config = settings::config();
    let path = settings::state_path();
    // SAFETY: a flag set once from the command line.
    if unsafe { pg_sys::IsBinaryUpgrade } {
        note_pg_upgrade(path);
    }
    let file = state_file::read().unwrap_or_else(|e| ErrorReport::from(e).raise(PgLogLevel::FATAL));
    let record = match file {
        None => {
            error::new(
                PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
                format!("snowflake_id has no state file \"{}\": it starts at the system clock", path.display()),
            )
            .report(PgLogLevel::LOG);
            return State::new(new_generator(config, None, path), false);
        }
        Some(StateFile::Unknown { reason }) => {
            error::new(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "snowflake_id will not generate IDs: the high-water mark of this data directory is unknown",
            )
            .set_detail(sentence(&reason))
            .set_hint(state_file::unknown_mark_hint(path))
            .report(PgLogLevel::WARNING);
            return State::new(new_generator(config, None, path), true);
        }
        Some(StateFile::Mark(record)) => record,
    };
    let scale = record.changed_scale(&config.codec);
    if !scale.is_empty() {
        error::new(PgSqlErrorCode::ERRCODE_WARNING, "snowflake_id settings changed since the state file was written")
            .set_detail(format!("Changed: {}.", scale.join(", ")))
            .set_hint(
                "Changing the layout, epoch or node numbers of an ID space that already has IDs can repeat IDs; new \
                 IDs still start above the recorded time.",
            )
            .report(PgLogLevel::WARNING);
    }
    let node = record.changed_node(config.node);
    if !node.is_empty() {
        report_new_node(&node, record.node, config.node);
    }
    let mark = record.mark.to_mark(&config.codec);
    let generator = new_generator(config, Some(mark), path);
    error::new(
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        format!(
            "snowflake_id resumes {} {} (clock_back {})",
            if record.exact { "exactly after its clean shutdown at" } else { "above its mark" },
            record.mark.instant,
            record.mark.clock_back
        ),
    )
    .report(PgLogLevel::LOG);
    State::new(generator, false)
}

/// A server renumbered (the deployment guide's standby before promotion, or
/// a copy given its own number) continues above its mark with the new
/// number; what is left to check lies outside this server.
fn report_new_node(changed: &[String], old: Node, new: Node) {
    error::new(PgSqlErrorCode::ERRCODE_WARNING, "snowflake_id node number changed since the state file was written")
        .set_detail(format!(
            "Changed: {}. IDs continue above the recorded mark with datacenter {}, worker {}.",
            changed.join(", "),
            new.datacenter,
            new.worker
        ))
        .set_hint(format!(
            "Check that no other server generates with datacenter {}, worker {} (compare snowflake_status() across \
             servers; the deployment guide has a query). Give the old number (datacenter {}, worker {}) to another \
             server only once this one no longer uses it.",
            new.datacenter, new.worker, old.datacenter, old.worker
        ))
        .report(PgLogLevel::WARNING);
}

fn new_generator(config: &Config, resume: Option<Mark>, path: &Path) -> Generator {
    let template = config.codec.template(config.node);
    Generator::new(template, window_ticks(&config.codec.time), resume).unwrap_or_else(|e| {
        let layout = config.codec.layout;
        let (detail, hint) = match layout.max_clock_back() {
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
        error::new(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "snowflake_id.layout cannot continue the IDs recorded in the state file",
        )
        .set_detail(detail)
        .set_hint(hint)
        .raise(PgLogLevel::FATAL)
    })
}

/// In pg_upgrade's new cluster, the old cluster's state file has not been
/// brought over yet: the DBA copies it once pg_upgrade has finished. Record
/// that the mark is unknown. A file already there is replaced too: it may be
/// the new cluster's own, from a start before pg_upgrade, which is no mark
/// for the old cluster's IDs.
fn note_pg_upgrade(path: &Path) {
    let data_dir = path.parent().unwrap_or(Path::new("."));
    if !data_dir.join(PG_UPGRADE_OUTPUT_DIR).is_dir() {
        return;
    }
    let reason = match state_file::read() {
        Ok(Some(StateFile::Unknown { .. })) => return, // an earlier start of this pg_upgrade run
        Ok(None) => {
            "pg_upgrade created this cluster, and the state file of the cluster it was upgraded from was not copied \
             into it; that cluster may have issued IDs ahead of the clock"
        }
        Ok(Some(StateFile::Mark(_))) | Err(_) => {
            "pg_upgrade created this cluster, and a state file was already here when pg_upgrade first started it; \
             it may be this cluster's own from before the upgrade, which is no floor for the IDs of the cluster it \
             was upgraded from"
        }
    };
    if let Err(e) = state_file::write_unknown(reason) {
        ErrorReport::from(e).raise(PgLogLevel::FATAL);
    }
}

/// Asks the postmaster to record the exact resume point when it exits after a
/// clean shutdown. Registered again after every re-initialisation, because
/// PostgreSQL forgets exit callbacks when it runs them.
fn at_postmaster_exit() {
    // SAFETY: registers a #[pg_guard]ed callback; PostgreSQL keeps the pointer.
    unsafe { pg_sys::on_shmem_exit(Some(record_clean_shutdown), pg_sys::Datum::from(0)) };
}

#[pg_guard]
unsafe extern "C-unwind" fn record_clean_shutdown(code: std::ffi::c_int, _arg: pg_sys::Datum) {
    // A non-zero code is a crash re-initialisation or a failed start.
    // SAFETY: a flag set once at process start.
    if code != 0 || unsafe { pg_sys::IsUnderPostmaster } {
        return;
    }
    let Some(state) = shmem::unlocked_in_postmaster() else { return };
    if state.mark_unknown || !shut_down_cleanly() {
        return;
    }
    // Every backend has exited normally (none between two statements of the
    // generator) and the shutdown checkpoint is written: the shared state is
    // final, and nothing was issued at or after its next position.
    let resume = state.generator.resume_point();
    if resume.position == 0 && state.generator.mark().position == 0 {
        return; // never generated: leave no file
    }
    if let Err(e) = state_file::write_mark(&resume, true) {
        error::new(
            error::file_access_code(&e.io),
            format!(
                "could not record snowflake_id's exact position in \"{}\": {}",
                e.path.display(),
                os_message(&e.io)
            ),
        )
        .set_detail("The last mark stays in force: the next start continues above it, up to a second later.")
        .report(PgLogLevel::LOG);
    }
}

/// Whether the control file says the last shutdown checkpoint completed.
fn shut_down_cleanly() -> bool {
    let mut crc_ok = false;
    // SAFETY: DataDir is set before shared_preload_libraries load, and stays.
    let data_dir: &CStr = unsafe { CStr::from_ptr(pg_sys::DataDir) };
    // SAFETY: reads pg_control into palloc'd memory, or returns NULL.
    let control = unsafe { pg_sys::get_controlfile(data_dir.as_ptr(), &mut crc_ok) };
    if control.is_null() || !crc_ok {
        return false;
    }
    // SAFETY: not NULL, so a whole ControlFileData.
    let state = unsafe { (*control).state };
    state == pg_sys::DBState::DB_SHUTDOWNED || state == pg_sys::DBState::DB_SHUTDOWNED_IN_RECOVERY
}
