//! What the next server start will make of the configuration, said at the
//! reload that reads it.
//!
//! Our identity settings take effect only at a restart. A reload that reads a
//! changed one makes PostgreSQL log no more than "cannot be changed without
//! restarting", whatever the value; a misspelled `snowflake_id.` name makes it
//! drop the whole file with a LOG line. The next restart then stops the
//! server. Under Patroni, `patronictl edit-config` pushes settings to every
//! member without ALTER SYSTEM's checks, so the next `patronictl restart`
//! leaves every member down.
//!
//! So at every reload the postmaster reads the files a start reads
//! (postgresql.conf with its includes, then postgresql.auto.conf), keeps what
//! the command line sets, makes the start's own checks ([`Written::check`]),
//! and logs a WARNING in our words when they fail. It runs from the check
//! hooks of our settings, which a reload calls for each of them the files
//! set, and, when PostgreSQL drops the files for an error (no hook of ours
//! runs then), from the log hook that sees its "contains errors" line.

use std::ffi::CStr;
use std::time::{Duration, Instant};

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::{raw_setting, set_on_command_line, Written, NAMES};

/// The log hook installed before ours, called first.
static mut PREVIOUS_LOG_HOOK: pg_sys::emit_log_hook_type = None;

/// Reloads begun, counted by the postmaster's "reloading" line, and the
/// reload and instant of the last check: one reload calls several hooks of
/// ours, and one warning says it all. (The instant serves when LOG lines are
/// not logged, so the count stands still.)
static mut RELOADS: u64 = 0;
static mut LAST_CHECK: Option<(u64, Instant)> = None;

/// Installs the log hook. Postmaster only, while the libraries load.
pub fn init() {
    // SAFETY: written in the postmaster's main thread before any other
    // process exists; PostgreSQL calls the hook from that thread only.
    unsafe {
        PREVIOUS_LOG_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(on_log);
    }
}

/// Whether a check hook runs for a reload in the postmaster (rather than at
/// start, in a backend, or for ALTER SYSTEM), where the check belongs.
pub fn reloading(source: pg_sys::GucSource::Type) -> bool {
    // SAFETY: flags PostgreSQL sets in this process's main thread.
    unsafe {
        !pg_sys::process_shared_preload_libraries_in_progress
            && !pg_sys::IsUnderPostmaster
            && source == pg_sys::GucSource::PGC_S_FILE
    }
}

/// The untranslated message the postmaster logs as a reload begins.
const RELOADING: &CStr = c"received SIGHUP, reloading configuration files";

/// The untranslated messages PostgreSQL logs when a reload's files hold an error.
const FILE_ERRORS: [&CStr; 2] = [
    c"configuration file \"%s\" contains errors; no changes were applied",
    c"configuration file \"%s\" contains errors; unaffected changes were applied",
];

#[pg_guard]
unsafe extern "C-unwind" fn on_log(edata: *mut pg_sys::ErrorData) {
    // SAFETY: the previous hook, installed by a library loaded before us.
    if let Some(previous) = unsafe { PREVIOUS_LOG_HOOK } {
        // SAFETY: passes PostgreSQL's own report on, as PostgreSQL would.
        unsafe { call_previous(previous, edata) };
    }
    // SAFETY: the report PostgreSQL is emitting; message_id is its
    // untranslated format string, a static C string, or NULL.
    let message = unsafe {
        (!pg_sys::IsUnderPostmaster && !edata.is_null() && !(*edata).message_id.is_null())
            .then(|| CStr::from_ptr((*edata).message_id))
    };
    match message {
        // SAFETY: a static of the postmaster's main thread (see init).
        Some(m) if m == RELOADING => unsafe { RELOADS += 1 },
        Some(m) if FILE_ERRORS.contains(&m) => check(),
        _ => {}
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
    // SAFETY: the caller's contract.
    unsafe { hook(edata) }
}

/// Reads the files the next start reads and warns if that start would fail.
pub fn check() {
    // SAFETY: statics of the postmaster's main thread (see init).
    let (reload, last) = unsafe { (RELOADS, LAST_CHECK) };
    if last.is_some_and(|(seen, at)| seen == reload && at.elapsed() < Duration::from_secs(1)) {
        return;
    }
    // SAFETY: as above.
    unsafe { LAST_CHECK = Some((reload, Instant::now())) };
    // A memory context of its own, deleted at the end: from the log hook the
    // current one is ErrorContext, which the postmaster never resets, and
    // every reload would leave the files' lists behind in every child.
    // SAFETY: a context under TopMemoryContext with a static name, made
    // current for this check only and deleted after it; nothing allocated in
    // it outlives the check.
    let (context, previous) = unsafe {
        let context = pg_sys::AllocSetContextCreateExtended(
            pg_sys::TopMemoryContext,
            c"snowflake_id next start check".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        (context, pg_sys::MemoryContextSwitchTo(context))
    };
    // A panic here is a bug of ours; in the postmaster it must not become
    // an ERROR, which is FATAL there.
    let checked = std::panic::catch_unwind(warn_if_the_next_start_fails);
    // SAFETY: as above.
    unsafe {
        pg_sys::MemoryContextSwitchTo(previous);
        pg_sys::MemoryContextDelete(context);
    }
    if checked.is_err() {
        crate::pg::error::new(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            "snowflake_id could not check what the next server start will make of the configuration files",
        )
        .report(PgLogLevel::LOG);
    }
}

/// Reads the files, makes a start's checks, and warns when they fail.
fn warn_if_the_next_start_fails() {
    let Some(mut written) = read_files() else { return };
    for name in NAMES {
        if set_on_command_line(name) {
            if let Some(value) = raw_setting(name) {
                written.set(name, value);
            }
        }
    }
    let Err(refusal) = written.check() else { return };
    let mut report = crate::pg::error::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!("the next server start will fail: {}", refusal.message()),
    )
    .set_detail(format!(
        "{} A reload leaves this server running with the settings it started with; this is what a start makes of \
         the configuration files as they are now.",
        refusal.detail().unwrap_or_default()
    ));
    if let Some(hint) = refusal.hint() {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::WARNING);
}

/// The settings in postgresql.conf (with its includes) and
/// postgresql.auto.conf, as a start reads them; `None` when they cannot be
/// parsed (PostgreSQL reports that itself).
fn read_files() -> Option<Written> {
    let mut head: *mut pg_sys::ConfigVariable = std::ptr::null_mut();
    let mut tail: *mut pg_sys::ConfigVariable = std::ptr::null_mut();
    let quiet = pg_sys::DEBUG2 as i32;
    // SAFETY: ProcessConfigFile's own reading, in the postmaster, with its
    // own file names; the list is allocated in the current memory context and
    // freed below. Problems are reported at DEBUG2, not raised.
    let parsed = unsafe {
        pg_sys::ParseConfigFile(pg_sys::ConfigFileName, true, std::ptr::null(), 0, 0, quiet, &mut head, &mut tail)
            && pg_sys::ParseConfigFile(
                c"postgresql.auto.conf".as_ptr(),
                false,
                std::ptr::null(),
                0,
                0,
                quiet,
                &mut head,
                &mut tail,
            )
    };
    let text = |p: *const std::ffi::c_char| {
        // SAFETY: a C string of the list, or NULL.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let mut entries = Vec::new();
    let mut item = head;
    while !item.is_null() {
        // SAFETY: an element of the list ParseConfigFile built.
        let v = unsafe { &*item };
        if let (Some(name), Some(value)) = (text(v.name), text(v.value)) {
            entries.push((name, value, text(v.filename).map(|f| (f, v.sourceline))));
        }
        item = v.next;
    }
    // SAFETY: the list built above, not used after this.
    unsafe { pg_sys::FreeConfigVariables(head) };
    parsed.then(|| Written::from_entries(entries))
}
