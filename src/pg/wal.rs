//! snowflake_id's WAL resource manager: registering it, logging a mark, and
//! describing a record for `pg_walinspect`. What replaying a mark does is
//! [`super::marks`]'s: it hands its redo function to [`register`].
//!
//! The resource manager ID is `snowflake_id.wal_rmgr_id` (default
//! [`super::settings::DEFAULT_RMGR_ID`]); it must be the same on a primary and
//! its standbys. PostgreSQL cannot replay these records without this library:
//! see docs/guarantees.md (the high-water mark in WAL) before removing it
//! from `shared_preload_libraries`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, Raise};
use super::{ffi, settings};
use crate::snowflake::claim_record::{WalClaim, WalRelease};
use crate::snowflake::codec::Node;
use crate::snowflake::generator::Mark;
use crate::snowflake::mark_record::MarkRecord;
use crate::snowflake::wal_record::WalMark;

const NAME: &CStr = c"snowflake_id";
/// The records' kinds, in the bits of `xl_info` a resource manager owns.
const XLOG_MARK: u8 = 0x10;
const XLOG_CLAIM: u8 = 0x20;
const XLOG_RELEASE: u8 = 0x30;

/// A record of this resource manager.
pub enum Record {
    Mark(WalMark),
    Claim(WalClaim),
    Release(WalRelease),
}

static RMGR_ID: AtomicU8 = AtomicU8::new(0);

/// A redo callback, as PostgreSQL calls it.
pub type Redo = unsafe extern "C-unwind" fn(record: *mut pg_sys::XLogReaderState);

/// Registers the resource manager with `redo` as its redo function, or stops
/// the server when its ID is taken; and reads which form the server's
/// synchronous standby status has. Postmaster only, while
/// `shared_preload_libraries` load.
pub fn register(redo: Redo) {
    decide_sync_standbys_format();
    let id = settings::wal_rmgr_id();
    // SAFETY: RmgrTable has an entry for every ID up to 255; custom entries
    // are filled only by RegisterCustomRmgr, while libraries load.
    let taken_by = unsafe {
        let entry = (&raw const pg_sys::RmgrTable).cast::<pg_sys::RmgrData>().add(usize::from(id));
        let name = (*entry).rm_name;
        (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned())
    };
    if let Some(other) = taken_by {
        error::new(
            PgSqlErrorCode::ERRCODE_DUPLICATE_OBJECT,
            format!("WAL resource manager ID {id} of snowflake_id is already used by \"{other}\""),
        )
        .set_detail("snowflake_id logs its high-water marks in WAL under the ID in snowflake_id.wal_rmgr_id.")
        .set_hint(
            "Set snowflake_id.wal_rmgr_id to a free ID from 128 to 255, the same on this server and its standbys. \
             Change it only after a clean shutdown, when no WAL needs replaying.",
        )
        .raise(PgLogLevel::FATAL);
    }
    RMGR_ID.store(id, Ordering::Relaxed);
    let rmgr = pg_sys::RmgrData {
        rm_name: NAME.as_ptr(),
        rm_redo: Some(redo),
        rm_desc: Some(desc),
        rm_identify: Some(identify),
        rm_startup: None,
        rm_cleanup: None,
        rm_mask: None,
        rm_decode: None,
    };
    // SAFETY: PostgreSQL copies the struct (15 declares the pointer mutable,
    // 16 and later const); the name is a static C string and the callbacks
    // live as long as the library.
    unsafe { pg_sys::RegisterCustomRmgr(id, (&raw const rmgr).cast_mut()) };
}

/// Logs a mark of ID space `id_space` made with `node`, with the settings
/// it was made under, flushes WAL up to it and returns its end. Not during
/// recovery.
pub fn log_mark(mark: &Mark, id_space: u32, node: Node) -> pg_sys::XLogRecPtr {
    let config = settings::config();
    let body = WalMark {
        mark: MarkRecord::new(mark, &config.codec),
        node,
        epoch: config.codec.time.epoch(),
        layout: Some(config.codec.layout),
        id_space,
    }
    .encode();
    log(XLOG_MARK, &body)
}

/// Logs a worker number claimed, flushed; returns the record's end.
pub fn log_claim(claim: &WalClaim) -> pg_sys::XLogRecPtr {
    log(XLOG_CLAIM, &claim.encode())
}

/// Logs a worker number released, flushed; returns the record's end.
pub fn log_release(release: &WalRelease) -> pg_sys::XLogRecPtr {
    log(XLOG_RELEASE, &release.encode())
}

fn log(kind: u8, body: &[u8]) -> pg_sys::XLogRecPtr {
    let id = RMGR_ID.load(Ordering::Relaxed);
    // SAFETY: the usual sequence for a WAL record, inside one error trap
    // (XLogRegisterData needs it, see ffi); `body` outlives XLogInsert.
    unsafe {
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
            pg_sys::XLogBeginInsert();
            ffi::XLogRegisterData(body.as_ptr().cast::<c_void>(), body.len() as u32);
            let lsn = pg_sys::XLogInsert(id, kind);
            pg_sys::XLogFlush(lsn);
            lsn
        })
    }
}

/// The timeline this primary writes WAL on: a new one after every
/// promotion. Not during recovery.
pub fn insertion_timeline() -> u32 {
    // SAFETY: valid outside recovery, which callers have checked.
    unsafe { pg_sys::GetWALInsertionTimeLine() }
}

/// The wait for the synchronous standbys ended before they had the record:
/// a cancel request, statement_timeout or termination.
#[derive(Debug)]
pub struct SyncWaitCancelled;

/// The standbys' confirmed position this session's `synchronous_commit`
/// waits for (their write for `remote_write`, else their flush), when it asks
/// for synchronous standbys (PostgreSQL's `SyncRepRequested()`). Whether any
/// are named is [`standbys_defined`]'s to say.
#[inline]
fn sync_mode() -> Option<usize> {
    use pg_sys::SyncCommitLevel::{SYNCHRONOUS_COMMIT_LOCAL_FLUSH, SYNCHRONOUS_COMMIT_REMOTE_WRITE};
    // SAFETY: this backend's settings, read in its main thread.
    let (level, wal_senders) = unsafe { (pg_sys::synchronous_commit as u32, pg_sys::max_wal_senders) };
    if level <= SYNCHRONOUS_COMMIT_LOCAL_FLUSH || wal_senders == 0 {
        return None;
    }
    Some(if level == SYNCHRONOUS_COMMIT_REMOTE_WRITE {
        pg_sys::SYNC_REP_WAIT_WRITE as usize
    } else {
        pg_sys::SYNC_REP_WAIT_FLUSH as usize
    })
}

/// Flags of `WalSndCtl->sync_standbys_status` (walsender_private.h), written
/// out because the headers of minor releases before it lack them.
const SYNC_STANDBY_INIT: u8 = 1 << 0;
const SYNC_STANDBY_DEFINED: u8 = 1 << 1;

/// Whether synchronous standbys are named, as a commit decides it: by the
/// checkpointer's shared view of `synchronous_standby_names`, which follows a
/// reload at once, while this backend rereads its own copy only between
/// statements (so a long statement would miss the DBA's change). Until the
/// checkpointer has set that view up at start, by this backend's own copy,
/// as PostgreSQL does.
#[inline]
fn standbys_defined() -> bool {
    let shared = shared_sync_standbys();
    if !shared_sync_standbys_are_flags() {
        return shared != 0;
    }
    if shared & SYNC_STANDBY_INIT != 0 {
        return shared & SYNC_STANDBY_DEFINED != 0;
    }
    // SAFETY: this backend's setting, read in its main thread.
    let names = unsafe { pg_sys::SyncRepStandbyNames };
    // SAFETY: not NULL, so a C string PostgreSQL keeps.
    !names.is_null() && unsafe { *names } != 0
}

/// [`standbys_defined`] once a wait has ended without the standbys, read
/// under `SyncRepLock`: the checkpointer wakes the waiting backends and then
/// records that none are named, both under that lock, so a backend it woke
/// may otherwise still read the old status. Without the lock (a server that
/// has another lock in its slot) a stale read fails the call, at worst.
fn standbys_defined_after_wait() -> bool {
    let Some(lock) = sync_rep_lock() else { return standbys_defined() };
    // SAFETY: an initialised LWLock in shared memory, taken by a backend that
    // holds no other (see ffi::lwlock_acquire), and released right after.
    unsafe { ffi::lwlock_acquire(lock, pg_sys::LWLockMode::LW_SHARED) };
    let defined = standbys_defined();
    // SAFETY: taken just above.
    unsafe { ffi::lwlock_release(lock) };
    defined
}

/// `SyncRepLock`'s slot among PostgreSQL's individual LWLocks (15 to 19). It
/// is a C macro (`&MainLWLockArray[32].lock`), so bindings do not have it.
const SYNC_REP_LOCK: u16 = 32;

/// `SyncRepLock`, if this server has it in the slot this build expects.
fn sync_rep_lock() -> Option<*mut pg_sys::LWLock> {
    // SAFETY: looks the name up in a static table.
    let name = unsafe { pg_sys::GetLWLockIdentifier(pg_sys::PG_WAIT_LWLOCK, SYNC_REP_LOCK) };
    // SAFETY: a static C string, or NULL.
    let name = (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) });
    // SAFETY: the individual LWLocks live in shared memory from server start.
    (name == Some(c"SyncRep"))
        .then(|| unsafe { &raw mut (*pg_sys::MainLWLockArray.add(usize::from(SYNC_REP_LOCK))).lock })
}

/// `WalSndCtl->sync_standbys_status`, read by its place, the byte after
/// `lsn`: minor releases before 15.13, 16.9 and 17.5 have the bool
/// `sync_standbys_defined` there instead (same place, same size), and their
/// headers no field of this name.
#[inline]
fn shared_sync_standbys() -> u8 {
    // SAFETY: WalSndCtl lives in shared memory for the server's life, and in
    // PostgreSQL 15 to 19 a one-byte field directly follows the `lsn` array
    // (a byte needs no padding). The checkpointer writes it under
    // SyncRepLock; a byte is read whole, as PostgreSQL's own unlocked fast
    // path in SyncRepWaitForLSN reads it.
    unsafe { std::ptr::read_volatile((&raw const (*pg_sys::WalSndCtl).lsn).add(1).cast::<u8>()) }
}

/// Whether [`shared_sync_standbys`] holds flags rather than a bool: from
/// 15.13, 16.9, 17.5 and 18 on (19 too). Decided by the running server, which may be
/// another minor release than the headers this library was built with.
#[inline]
fn shared_sync_standbys_are_flags() -> bool {
    SYNC_STANDBYS_ARE_FLAGS.load(Ordering::Relaxed)
}

/// [`shared_sync_standbys_are_flags`], decided when the library loads (in
/// the postmaster, inherited by every backend), so that the hot path reads a
/// byte rather than initialising anything.
static SYNC_STANDBYS_ARE_FLAGS: AtomicBool = AtomicBool::new(false);

fn decide_sync_standbys_format() {
    let version = server_version_num();
    let first_with_flags = match version / 10_000 {
        15 => 150_013,
        16 => 160_009,
        17 => 170_005,
        _ => 0,
    };
    SYNC_STANDBYS_ARE_FLAGS.store(version >= first_with_flags, Ordering::Relaxed);
}

/// The running server's `server_version_num`, such as 170011.
fn server_version_num() -> u32 {
    // SAFETY: with missing_ok an unknown name gives NULL rather than an ERROR;
    // the value is a C string PostgreSQL keeps.
    let value = unsafe { pg_sys::GetConfigOption(c"server_version_num".as_ptr(), true, false) };
    if value.is_null() {
        return 0;
    }
    // SAFETY: as above.
    unsafe { CStr::from_ptr(value) }.to_str().ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Whether the synchronous standbys have confirmed WAL up to `lsn` (for
/// `mode`).
fn confirmed(lsn: pg_sys::XLogRecPtr, mode: usize) -> bool {
    // SAFETY: WalSndCtl lives in shared memory for the server's life; an
    // XLogRecPtr is read whole on the platforms PostgreSQL supports, and the
    // position only grows.
    unsafe { std::ptr::read_volatile(&raw const (*pg_sys::WalSndCtl).lsn[mode]) >= lsn }
}

/// Whether [`wait_for_synchronous_standbys`] has anything to wait for, and
/// in which mode. Reads this backend's settings and shared memory only: it
/// never raises an ERROR or panics (the hot path asks it outside a guard).
#[inline(always)]
pub fn wait_mode(lsn: pg_sys::XLogRecPtr) -> Option<usize> {
    let mode = sync_mode()?;
    (lsn != 0 && !confirmed(lsn, mode) && standbys_defined()).then_some(mode)
}

/// Waits, as a commit would, until the synchronous standbys have WAL up to
/// `lsn` (the record of the mark the caller's IDs rely on), when this
/// session's `synchronous_commit` asks for synchronous standbys and the
/// server's `synchronous_standby_names` names some (as the server last read
/// it: a statement running when the DBA names standbys waits from then on).
/// The mark is shared, and may have been written by a session that did not
/// ask, so every session that asks checks before it hands out IDs; the check
/// is a few reads, and the wait happens about once per mark. A cancel
/// request, statement_timeout or termination ends the wait as it ends a
/// commit's, with PostgreSQL's WARNING; the caller then hands out nothing.
/// Emptying `synchronous_standby_names` ends it too, and the caller hands out
/// its IDs, whatever other interrupt came meanwhile.
#[inline]
pub fn wait_for_synchronous_standbys(lsn: pg_sys::XLogRecPtr) -> Result<(), SyncWaitCancelled> {
    let Some(mode) = wait_mode(lsn) else { return Ok(()) };
    // SAFETY: a backend with a PGPROC, outside any critical section, holding
    // interrupts as a commit does (PostgreSQL asserts it); the wait itself
    // serves cancel and termination requests. pgrx's binding traps an ERROR.
    unsafe {
        pg_sys::InterruptHoldoffCount += 1;
        pg_sys::SyncRepWaitForLSN(lsn, false);
        pg_sys::InterruptHoldoffCount -= 1;
    }
    if confirmed(lsn, mode) {
        return Ok(());
    }
    // Not confirmed: the wait was cancelled, or it ended (or never began)
    // because synchronous_standby_names no longer names any standby. A
    // termination leaves ProcDiePending set. A cancel leaves InterruptPending
    // set (PostgreSQL clears QueryCancelPending as it ends the wait), but so
    // do interrupts the wait does not serve (a request to log memory
    // contexts, a barrier): with no standbys named any more, the wait ended
    // because of that, not of the interrupt.
    // SAFETY: flags of this process, set by signal handlers.
    let (interrupted, dying) = unsafe {
        (
            std::ptr::read_volatile(&raw const pg_sys::InterruptPending) != 0,
            std::ptr::read_volatile(&raw const pg_sys::ProcDiePending) != 0,
        )
    };
    if dying || (interrupted && standbys_defined_after_wait()) {
        Err(SyncWaitCancelled)
    } else {
        Ok(())
    }
}

/// The record `record` holds, or why it cannot be read.
///
/// # Safety
/// `record` is the reader state PostgreSQL passes a resource manager
/// callback, positioned on a record of this resource manager.
pub unsafe fn decode(record: *mut pg_sys::XLogReaderState) -> Result<Record, String> {
    // SAFETY: the caller's contract: a decoded record is current.
    let decoded = unsafe { (*record).record };
    // SAFETY: as above.
    let info = unsafe { (*decoded).header.xl_info } & !(pg_sys::XLR_INFO_MASK as u8);
    // SAFETY: as above.
    let (data, len) = unsafe { ((*decoded).main_data, (*decoded).main_data_len as usize) };
    let bytes = if data.is_null() {
        &[][..]
    } else {
        // SAFETY: the record's main data, `len` bytes, lives as long as the callback.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
    };
    match info {
        XLOG_MARK => WalMark::decode(bytes).map(Record::Mark).map_err(|e| e.to_string()),
        XLOG_CLAIM => WalClaim::decode(bytes).map(Record::Claim).map_err(|e| e.to_string()),
        XLOG_RELEASE => WalRelease::decode(bytes).map(Record::Release).map_err(|e| e.to_string()),
        _ => Err(format!("unknown snowflake_id WAL record kind {info:#04x}")),
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL calls desc with a record of this resource manager.
    let text = match unsafe { decode(record) } {
        Ok(Record::Mark(m)) => m.to_string(),
        Ok(Record::Claim(c)) => c.to_string(),
        Ok(Record::Release(r)) => r.to_string(),
        Err(why) => why,
    };
    let text = CString::new(text).unwrap_or_default();
    // SAFETY: `buf` is the StringInfo PostgreSQL passes; the text is copied.
    unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
    match info & !(pg_sys::XLR_INFO_MASK as u8) {
        XLOG_MARK => c"MARK".as_ptr(),
        XLOG_CLAIM => c"CLAIM".as_ptr(),
        XLOG_RELEASE => c"RELEASE".as_ptr(),
        _ => std::ptr::null(),
    }
}
