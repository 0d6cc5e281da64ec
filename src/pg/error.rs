//! Raising PostgreSQL errors in PostgreSQL's style: a lower-case message
//! without a trailing period, a detail and a hint as sentences, and an SQLSTATE.

use std::io;

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::PgLogLevel;

/// Raises an error (or worse, by `level`) and does not return.
#[track_caller]
pub fn raise(
    level: PgLogLevel,
    code: PgSqlErrorCode,
    message: String,
    detail: Option<String>,
    hint: Option<String>,
) -> ! {
    report(level, code, message, detail, hint);
    unreachable!("an error report at ERROR or above does not return")
}

/// Reports a message at any level; returns for levels below ERROR.
#[track_caller]
pub fn report(level: PgLogLevel, code: PgSqlErrorCode, message: String, detail: Option<String>, hint: Option<String>) {
    let mut r = ErrorReport::new(code, message, "snowflake_id");
    if let Some(d) = detail {
        r = r.set_detail(d);
    }
    if let Some(h) = hint {
        r = r.set_hint(h);
    }
    r.report(level);
}

/// The SQLSTATE PostgreSQL's `errcode_for_file_access()` gives an I/O error.
pub fn file_access_code(e: &io::Error) -> PgSqlErrorCode {
    match e.kind() {
        io::ErrorKind::PermissionDenied => PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        io::ErrorKind::NotFound => PgSqlErrorCode::ERRCODE_UNDEFINED_FILE,
        io::ErrorKind::AlreadyExists => PgSqlErrorCode::ERRCODE_DUPLICATE_FILE,
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => PgSqlErrorCode::ERRCODE_DISK_FULL,
        _ => PgSqlErrorCode::ERRCODE_IO_ERROR,
    }
}

/// An I/O error's text as `%m` prints it: without Rust's "(os error N)".
pub fn os_message(e: &io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// SQLSTATE 22008. pgrx names it only ERRCODE_DATETIME_FIELD_OVERFLOW, which
/// PostgreSQL defines as the same code.
pub const DATETIME_VALUE_OUT_OF_RANGE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW;
