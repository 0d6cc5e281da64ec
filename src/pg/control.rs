//! What the data directory says about how the server last stopped and how it
//! starts now: the control file's state, and the recovery signal files. Read
//! in the postmaster, before the startup process has looked at either.

use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use pgrx::prelude::*;

use crate::snowflake::claims::Claim;

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

/// Whether the `backup_label` of [`started_from_copy`] is pg_rewind's
/// (`BACKUP METHOD: pg_rewind`): this data directory was a server of the
/// lineage that went on alone, and every file of it, the state file among
/// them, is now the source's.
pub fn started_from_rewind() -> bool {
    STARTED_FROM_REWIND.load(Ordering::Relaxed)
}

static STARTED_FROM_REWIND: AtomicBool = AtomicBool::new(false);

/// Looks for the `backup_label` of a copy, and whether pg_rewind wrote it.
/// Postmaster only, at its first start, before the startup process runs.
pub fn note_start() {
    let label = data_dir_path().join("backup_label");
    STARTED_FROM_COPY.store(label.exists(), Ordering::Relaxed);
    // A label that cannot be read is a copy's all the same.
    let rewound =
        std::fs::read_to_string(&label).is_ok_and(|text| text.lines().any(|l| l == "BACKUP METHOD: pg_rewind"));
    STARTED_FROM_REWIND.store(rewound, Ordering::Relaxed);
}

/// The claim of a worker number this data directory held as its own when
/// the server (or its shared memory, after a crash) last started: the one
/// claim a record replayed now may be this server's own. Set by the
/// postmaster before it forks the startup process.
static OWN_CLAIM_AT_START: Mutex<Option<Claim>> = Mutex::new(None);

/// The claim a copy came with (its source's own), noted at the first start:
/// never this server's, also after a crash re-initialisation, when the
/// `backup_label` is gone.
static COPIED_CLAIM: Mutex<Option<Claim>> = Mutex::new(None);

/// Records the own claim of the state file this start read (`None` if it
/// has none), and returns whether this server may keep it as its own: not
/// in recovery (a standby has no number of its own), and not the claim a
/// copy came with. Postmaster only.
pub fn own_claim_at_start(own: Option<Claim>, first_start: bool) -> bool {
    let mut copied = COPIED_CLAIM.lock().unwrap_or_else(|e| e.into_inner());
    if first_start {
        *copied = if started_from_copy() { own } else { None };
    }
    let from_the_copy = own.is_some_and(|own| copied.is_some_and(|c| c.is(&own)));
    let keep = own.is_some() && !starts_in_recovery() && !from_the_copy;
    *OWN_CLAIM_AT_START.lock().unwrap_or_else(|e| e.into_inner()) = own.filter(|_| keep);
    keep
}

/// The claim this server held as its own at start, if any (see
/// [`own_claim_at_start`]).
pub fn own_claim() -> Option<Claim> {
    *OWN_CLAIM_AT_START.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `claim`, replayed from WAL, is this server's own: the claim its
/// state file held as its own at start. The claiming server writes the file
/// before the WAL record, so its crash recovery finds the claim there; a
/// standby, a copy or another server on this host does not.
pub fn is_own_claim(claim: &Claim) -> bool {
    OWN_CLAIM_AT_START.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|own| own.is(claim))
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

/// This server's host name, as the kernel has it (a pod's name on Kubernetes).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a buffer of its stated length; gethostname writes at most that.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..len]).into_owned()
    } else {
        String::new()
    }
}

/// This server as a state file names its writer: host name and data
/// directory, which tell the primary's file copied into a standby from the
/// standby's own (see `StateRecord::written_by`).
pub fn writer() -> &'static str {
    static WRITER: OnceLock<String> = OnceLock::new();
    WRITER.get_or_init(|| format!("{}:{}", host_name(), data_dir().to_string_lossy()))
}

fn data_dir() -> &'static CStr {
    // SAFETY: DataDir is set before shared_preload_libraries load, and stays.
    unsafe { CStr::from_ptr(pg_sys::DataDir) }
}

fn data_dir_path() -> PathBuf {
    PathBuf::from(data_dir().to_string_lossy().into_owned())
}
