//! The fence's error says what it is. A path no hook reaches (a CHECK
//! constraint, a trigger's WHEN, a default a logical replication apply
//! worker fills in) calls a registered sequence's native nextval and
//! meets the fence: PostgreSQL's "reached maximum value of sequence". This
//! log hook adds a hint to that error, naming the way out.
//!
//! The error names the sequence by its bare name and its MAXVALUE, and a
//! log hook may read no catalog: the registry this backend read last says
//! whether a registered sequence has that name and that fence, and gives
//! its qualified name. Where the registry is not read here (a backend that
//! planned nothing, such as an apply worker), the hint is a condition. A
//! sequence that is not registered in a database with the extension may be
//! a copy of a registered one that carries its fence (a schema-only dump):
//! its hint says how to go on.

use std::ffi::{CStr, CString};

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::registry::{self, Fence};
use super::{names, utility};
use crate::pg::shmem::{self, Refused};

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
        let Some((name, value)) = name_and_value(&message) else { return };
        let Some(hint) = hint_for(name, value) else { return };
        let Ok(hint) = CString::new(hint) else { return };
        // Allocated where the rest of the report lives.
        (*edata).hint = pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, hint.as_ptr());
    }
}

/// The sequence's name and value in `nextval: reached maximum value of
/// sequence "NAME" (VALUE)` (a name may hold quotes and parentheses).
fn name_and_value(message: &str) -> Option<(&str, i64)> {
    let (head, value) = message.strip_suffix(')')?.rsplit_once(" (")?;
    let name = head.split_once('"')?.1.strip_suffix('"')?;
    Some((name, value.parse().ok()?))
}

/// The hint for the fence of the sequence named `name` at `value`: certain
/// when this backend's registry knows it, a condition when the registry is
/// not read here.
fn hint_for(name: &str, value: i64) -> Option<String> {
    let copy_elsewhere = copy_run_by_a_later_library();
    let path = if copy_elsewhere {
        "a library listed after snowflake_id in shared_preload_libraries ran this COPY itself (TimescaleDB does, \
         into a hypertable), whose defaults call it directly"
    } else {
        "a path no query plan covers (a CHECK constraint, a trigger's WHEN, a default filled by logical \
         replication) calls it directly"
    };
    let fix = |qualified: &str| {
        let call = names::literal(qualified);
        if copy_elsewhere {
            format!(
                "list snowflake_id after that library in shared_preload_libraries (for TimescaleDB, after \
                 timescaledb) and restart, or name the column in COPY and fill it with \
                 snowflake_sequence_nextval({call})"
            )
        } else {
            format!("call snowflake_sequence_nextval({call}) in its place, or let an INSERT fill the key")
        }
    };
    // As PostgreSQL quotes a name that needs it; the schema is not known here.
    let bare = quote_identifier(name);
    match registry::fence(name, value) {
        Fence::Registered(qualified) => {
            shmem::count_refusal(Refused::SequenceFence);
            Some(format!("Sequence {qualified} is registered with snowflake_id, and {path}: {}.", fix(&qualified)))
        }
        Fence::NotInstalled => None,
        Fence::NotRegistered => Some(format!(
            "If sequence {bare} was copied from one registered with snowflake_id (a schema-only dump copies each \
             sequence's MAXVALUE, not its registration), that MAXVALUE is the registered one's fence: register the \
             copy too, SELECT snowflake_sequence_register({}), or lift it with ALTER SEQUENCE {bare} NO MAXVALUE.",
            names::literal(&bare)
        )),
        Fence::Unknown => Some(format!(
            "If sequence {bare} is registered with snowflake_id (SELECT * FROM snowflake_sequences), {path}: {}.",
            fix(&bare)
        )),
    }
}

/// Whether the statement that met the fence is a COPY that a utility hook
/// in front of ours ran itself (see [`utility::another_hook_runs_first`]):
/// ours never saw it.
fn copy_run_by_a_later_library() -> bool {
    // SAFETY: PostgreSQL's text of the statement under way, or NULL.
    let text = unsafe { pg_sys::debug_query_string };
    if text.is_null() || utility::copy_seen() || !utility::another_hook_runs_first() {
        return false;
    }
    // SAFETY: a NUL-terminated string while the statement runs.
    let text = unsafe { CStr::from_ptr(text) }.to_bytes();
    let start = text.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(text.len());
    text[start..].get(..4).is_some_and(|word| word.eq_ignore_ascii_case(b"copy"))
}

/// `name` quoted as an SQL identifier where it must be (as PostgreSQL's
/// quote_identifier does, with no catalog: keywords are not known here, so
/// any name that is not plain lower case letters, digits and underscores
/// is quoted).
fn quote_identifier(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_and_value_come_from_the_end_of_the_message() {
        assert_eq!(name_and_value(r#"nextval: reached maximum value of sequence "s" (2)"#), Some(("s", 2)));
        assert_eq!(
            name_and_value(r#"nextval: reached maximum value of sequence "My "(odd)" Seq" (-7)"#),
            Some((r#"My "(odd)" Seq"#, -7))
        );
        assert_eq!(name_and_value("nextval: reached maximum value of sequence"), None);
    }

    #[test]
    fn names_that_need_quotes_get_them() {
        assert_eq!(quote_identifier("orders_seq"), "orders_seq");
        assert_eq!(quote_identifier("My Seq"), r#""My Seq""#);
        assert_eq!(quote_identifier(r#"a"b"#), r#""a""b""#);
    }
}
