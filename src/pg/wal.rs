//! snowflake_id's WAL resource manager: every mark is a WAL record.
//!
//! Redo runs wherever WAL is replayed: in crash recovery, on a streaming or
//! log-shipping standby, and in point-in-time recovery. It raises the shared
//! generator's floor to the mark and writes it to this server's state file, so
//! a standby's `snowflake_status()` follows its primary's mark, and a promoted
//! standby or a restored backup continues above every ID whose mark reached
//! WAL. Any ID stored in a committed row had its mark logged before that row,
//! because the mark is flushed before the ID is handed out.
//!
//! The resource manager ID is `snowflake_id.wal_rmgr_id` (default
//! [`DEFAULT_RMGR_ID`]); it must be the same on a primary and its standbys.
//! PostgreSQL cannot replay these records without this library: see the README
//! before removing it from `shared_preload_libraries`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicU8, Ordering};

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{file_access_code, os_message, raise};
use super::marks;
use super::shmem::{self, MarkWriter};
use crate::snowflake::generator::Mark;
use crate::snowflake::mark_record::MarkRecord;
use crate::snowflake::wal_record::{self, WalMark};

/// The resource manager ID snowflake_id uses unless told otherwise. Custom IDs
/// are 128 to 255; 128 is for experiments, and low IDs are taken by other
/// extensions (OrioleDB uses 129, pgEdge's Spock 144).
pub const DEFAULT_RMGR_ID: i32 = 197;

const NAME: &CStr = c"snowflake_id";
/// The record's kind, in the bits of `xl_info` a resource manager owns.
const XLOG_MARK: u8 = 0x10;

static RMGR_ID: AtomicU8 = AtomicU8::new(0);

/// The resource manager's callbacks; PostgreSQL copies them at registration.
struct Rmgr(pg_sys::RmgrData);

// Only read, and only as the registration copies it.
unsafe impl Sync for Rmgr {}

static RMGR: Rmgr = Rmgr(pg_sys::RmgrData {
    rm_name: NAME.as_ptr(),
    rm_redo: Some(redo),
    rm_desc: Some(desc),
    rm_identify: Some(identify),
    rm_startup: None,
    rm_cleanup: None,
    rm_mask: None,
    rm_decode: None,
});

// The bindings differ between versions (pointer and length types); the ABI
// does not.
mod raw {
    unsafe extern "C-unwind" {
        pub fn XLogRegisterData(data: *const std::ffi::c_void, len: u32);
    }
}

/// Registers the resource manager, or stops the server when its ID is taken.
/// Postmaster only, while `shared_preload_libraries` load.
pub fn register(id: u8) {
    let taken_by = unsafe {
        let entry = (&raw const pg_sys::RmgrTable).cast::<pg_sys::RmgrData>().add(usize::from(id));
        let name = (*entry).rm_name;
        (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned())
    };
    if let Some(other) = taken_by {
        raise(
            PgLogLevel::FATAL,
            PgSqlErrorCode::ERRCODE_DUPLICATE_OBJECT,
            format!("WAL resource manager ID {id} of snowflake_id is already used by \"{other}\""),
            Some("snowflake_id logs its high-water marks in WAL under the ID in snowflake_id.wal_rmgr_id.".into()),
            Some(
                "Set snowflake_id.wal_rmgr_id to a free ID from 128 to 255, the same on this server and its \
                 standbys. Change it only after a clean shutdown, when no WAL needs replaying."
                    .into(),
            ),
        );
    }
    RMGR_ID.store(id, Ordering::Relaxed);
    unsafe { pg_sys::RegisterCustomRmgr(id, (&raw const RMGR.0).cast_mut()) };
}

/// Logs a mark and flushes WAL up to it. Not during recovery.
pub fn log_mark(mark: &Mark) {
    let config = shmem::config();
    let body = WalMark {
        mark: MarkRecord::new(mark, &config.codec),
        node: config.node,
        epoch: config.codec.time.epoch(),
    }
    .encode();
    let id = RMGR_ID.load(Ordering::Relaxed);
    unsafe {
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
            pg_sys::XLogBeginInsert();
            raw::XLogRegisterData(body.as_ptr().cast::<c_void>(), wal_record::LEN as u32);
            let lsn = pg_sys::XLogInsert(id, XLOG_MARK);
            pg_sys::XLogFlush(lsn);
        })
    };
}

/// The record of `record`, or an explanation.
unsafe fn decode(record: *mut pg_sys::XLogReaderState) -> Result<WalMark, String> {
    let decoded = unsafe { (*record).record };
    let info = unsafe { (*decoded).header.xl_info } & !(pg_sys::XLR_INFO_MASK as u8);
    if info != XLOG_MARK {
        return Err(format!("unknown snowflake_id WAL record kind {info:#04x}"));
    }
    let (data, len) = unsafe { ((*decoded).main_data, (*decoded).main_data_len as usize) };
    let bytes = if data.is_null() { &[][..] } else { unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) } };
    WalMark::decode(bytes).map_err(|e| e.to_string())
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    let wal_mark = unsafe { decode(record) }.unwrap_or_else(|why| {
        raise(
            PgLogLevel::PANIC,
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("could not replay snowflake_id WAL record: {why}"),
            None,
            None,
        )
    });
    raise_floor(&wal_mark);
}

/// Raises the generator to a replayed mark and records it in this server's
/// state file before redo moves on, so a later restartpoint or checkpoint
/// cannot leave it behind.
fn raise_floor(wal_mark: &WalMark) {
    let config = shmem::config();
    let mark = wal_mark.mark.to_mark(&config.codec);
    let _writer = MarkWriter::acquire();
    let raised = {
        let mut shared = shmem::exclusive();
        match shared.generator.raise_floor(mark) {
            Ok(true) => Some(shared.generator.mark()),
            Ok(false) => None,
            Err(e) => raise(
                PgLogLevel::ERROR,
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("could not replay snowflake_id mark: it carries clock_back {}", e.recorded),
                Some(format!(
                    "The record ({wal_mark}) comes from a server whose layout has a wider clock_back field than this \
                     server's snowflake_id.layout ({}), which holds at most {}.",
                    config.codec.layout, e.max
                )),
                Some("Give this server the same snowflake_id.layout as its primary.".into()),
            ),
        }
    };
    if let Some(floor) = raised {
        if let Err(e) = marks::write_file(&floor, false) {
            raise(
                PgLogLevel::ERROR,
                file_access_code(&e),
                format!(
                    "could not write snowflake_id state file \"{}\": {}",
                    shmem::state_path().display(),
                    os_message(&e)
                ),
                Some("The replayed high-water mark must be recorded before recovery continues.".into()),
                None,
            );
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    let text = match unsafe { decode(record) } {
        Ok(m) => m.to_string(),
        Err(why) => why,
    };
    let text = CString::new(text).unwrap_or_default();
    unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
    if info & !(pg_sys::XLR_INFO_MASK as u8) == XLOG_MARK {
        c"MARK".as_ptr()
    } else {
        std::ptr::null()
    }
}
