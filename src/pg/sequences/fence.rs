//! The fence's error says what it is. A path no hook reaches (a CHECK
//! constraint, a trigger's WHEN, a default a logical replication apply
//! worker fills in) calls a registered sequence's native nextval and
//! meets the fence: PostgreSQL's "reached maximum value of sequence". This
//! log hook adds a hint to that error, naming the way out.

use std::ffi::{CStr, CString};

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::registry;

static mut PREVIOUS: pg_sys::emit_log_hook_type = None;

/// The untranslated message of native nextval at a sequence's MAXVALUE, up
/// to its value's format (`%lld` before PostgreSQL 18, `PRId64` since).
const AT_MAXVALUE: &[u8] = b"nextval: reached maximum value of sequence \"%s\" (";

pub fn init() {
    // SAFETY: hooks are chained from _PG_init, in the postmaster, once.
    unsafe {
        PREVIOUS = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(on_log);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_log(edata: *mut pg_sys::ErrorData) {
    // SAFETY: the previous hook, installed by a library loaded before us.
    if let Some(previous) = unsafe { PREVIOUS } {
        // SAFETY: passes PostgreSQL's own report on, as PostgreSQL would.
        unsafe { call_previous(previous, edata) };
    }
    // SAFETY: the report PostgreSQL is emitting; message_id is its
    // untranslated format string, a static C string, or NULL.
    unsafe {
        if edata.is_null()
            || (*edata).message_id.is_null()
            || !CStr::from_ptr((*edata).message_id).to_bytes().starts_with(AT_MAXVALUE)
            || !(*edata).hint.is_null()
            || (*edata).message.is_null()
        {
            return;
        }
        let message = CStr::from_ptr((*edata).message).to_string_lossy();
        let Some(name) = message.split('"').nth(1) else { return };
        let Some(hint) = hint_for(name) else { return };
        let Ok(hint) = CString::new(hint) else { return };
        // Allocated where the rest of the report lives.
        (*edata).hint = pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, hint.as_ptr());
    }
}

/// The hint for the fence of the sequence named `name`: certain when this
/// backend's registry knows it, worded as a condition when the registry is
/// not loaded here (an apply worker plans nothing).
fn hint_for(name: &str) -> Option<String> {
    let path = "a path no query plan covers (a CHECK constraint, a trigger's WHEN, a default filled by logical \
                replication) calls it directly";
    let fix = format!("call snowflake_sequence_nextval('{name}') in its place, or let an INSERT fill the key");
    match registry::registered_name(name) {
        Some(true) => Some(format!("Sequence \"{name}\" is registered with snowflake_id, and {path}: {fix}.")),
        Some(false) => None,
        None => Some(format!(
            "If sequence \"{name}\" is registered with snowflake_id (SELECT * FROM snowflake_sequences), {path}: {fix}."
        )),
    }
}

/// Calls the log hook another library installed before ours. Its type says
/// it may unwind, as pgrx types every hook; PostgreSQL code raises errors by
/// `longjmp` instead, and this frame holds nothing to drop.
///
/// # Safety
/// `hook` is the log hook saved in `init`, and `edata` the report being emitted.
#[allow(ffi_unwind_calls)]
unsafe fn call_previous(hook: unsafe extern "C-unwind" fn(*mut pg_sys::ErrorData), edata: *mut pg_sys::ErrorData) {
    // SAFETY: the caller's contract; an ERROR the hook raises is caught by
    // pgrx's boundary and rethrown.
    unsafe { pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| hook(edata)) }
}
