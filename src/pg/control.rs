//! What the data directory says about how the server last stopped and how it
//! starts now: the control file's state, and the recovery signal files. Read
//! in the postmaster, before the startup process has looked at either.

use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::prelude::*;

/// How the control file says the server last stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastStop {
    /// A shutdown checkpoint completed on a primary: no WAL before it is
    /// replayed again.
    Primary,
    /// A standby stopped at a restartpoint: replay continues from there.
    Standby,
    /// A crash, an immediate stop, a base backup, or a control file that
    /// cannot be read.
    Unclean,
}

pub fn last_stop() -> LastStop {
    let mut crc_ok = false;
    // SAFETY: reads pg_control into palloc'd memory, or returns NULL.
    let control = unsafe { pg_sys::get_controlfile(data_dir().as_ptr(), &mut crc_ok) };
    if control.is_null() || !crc_ok {
        return LastStop::Unclean;
    }
    // SAFETY: not NULL, so a whole ControlFileData.
    match unsafe { (*control).state } {
        pg_sys::DBState::DB_SHUTDOWNED => LastStop::Primary,
        pg_sys::DBState::DB_SHUTDOWNED_IN_RECOVERY => LastStop::Standby,
        _ => LastStop::Unclean,
    }
}

/// Whether this server started from a copy of another server's data
/// directory: a `backup_label` was there at its first start, which
/// pg_basebackup (and so a Patroni reinit), pg_rewind and backup tools such
/// as pgBackRest leave for recovery, and which recovery renames before this
/// server writes a file of its own. Set by the postmaster at its first start
/// ([`note_start`]) and inherited by every process it forks, so that a
/// re-initialisation after a crash remembers it.
pub fn started_from_copy() -> bool {
    STARTED_FROM_COPY.load(Ordering::Relaxed)
}

static STARTED_FROM_COPY: AtomicBool = AtomicBool::new(false);

/// Looks for the `backup_label` of a copy. Postmaster only, at its first
/// start, before the startup process runs.
pub fn note_start() {
    STARTED_FROM_COPY.store(data_dir_path().join("backup_label").exists(), Ordering::Relaxed);
}

/// Whether the server starts as a standby (`standby.signal`).
pub fn starts_as_standby() -> bool {
    data_dir_path().join("standby.signal").exists()
}

/// Whether the server starts in recovery that a DBA asked for: a standby, or
/// point-in-time recovery (`recovery.signal`).
pub fn starts_in_recovery() -> bool {
    starts_as_standby() || data_dir_path().join("recovery.signal").exists()
}

fn data_dir() -> &'static CStr {
    // SAFETY: DataDir is set before shared_preload_libraries load, and stays.
    unsafe { CStr::from_ptr(pg_sys::DataDir) }
}

fn data_dir_path() -> PathBuf {
    PathBuf::from(data_dir().to_string_lossy().into_owned())
}
