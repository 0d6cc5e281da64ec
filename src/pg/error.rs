//! Errors as values, reported in PostgreSQL's style: a lower-case message
//! without a trailing period, a detail and a hint as sentences, and an SQLSTATE.
//!
//! Every report is a pgrx [`ErrorReport`], built with [`new`] and raised with
//! [`Raise::raise`]. A failure that more than one place reports has a type of
//! its own in the module that owns it (a state file that cannot be written or
//! read, an invalid setting), converted into an `ErrorReport` once, so that its
//! message is written in one place; callers add the detail that differs.

use std::borrow::Cow;
use std::io;

pub use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::PgLogLevel;

/// A report with `code` and `message`, located at the caller.
#[track_caller]
pub fn new(code: PgSqlErrorCode, message: impl Into<Cow<'static, str>>) -> ErrorReport {
    ErrorReport::new(code, message, "snowflake_id")
}

/// Raising a report at ERROR or above, where the code does not go on.
pub trait Raise {
    /// Raises the report at `level` (ERROR, FATAL or PANIC) and does not return.
    fn raise(self, level: PgLogLevel) -> !;
}

impl Raise for ErrorReport {
    #[track_caller]
    fn raise(self, level: PgLogLevel) -> ! {
        debug_assert!(level >= PgLogLevel::ERROR, "a report below ERROR returns");
        self.report(level);
        unreachable!("an error report at ERROR or above does not return")
    }
}

/// The SQLSTATE of a failed file operation, as PostgreSQL's
/// `errcode_for_file_access()` gives it, except that a file the operating
/// system refuses (EACCES, EPERM) is an I/O error (58030) rather than
/// 42501, which reads as a missing GRANT to an application and its DBA.
pub fn file_access_code(e: &io::Error) -> PgSqlErrorCode {
    match e.kind() {
        io::ErrorKind::NotFound => PgSqlErrorCode::ERRCODE_UNDEFINED_FILE,
        io::ErrorKind::AlreadyExists => PgSqlErrorCode::ERRCODE_DUPLICATE_FILE,
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => PgSqlErrorCode::ERRCODE_DISK_FULL,
        _ => PgSqlErrorCode::ERRCODE_IO_ERROR,
    }
}

/// What to check about a file operation that failed with `e`, in the words
/// PostgreSQL uses where it has them.
pub fn file_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => "Check free disk space.",
        Some(libc::EACCES | libc::EPERM) => {
            "Check the permissions and attributes (chattr) of the data directory and of the file: the server's user \
             must be able to create, write and rename files there."
        }
        Some(libc::EROFS) => "Check the file system that holds the data directory: it is mounted read-only.",
        Some(libc::ENOENT) => "Check the data directory: a directory on the path named is missing.",
        Some(libc::EMFILE | libc::ENFILE) => {
            "Too many files are open: check the server's and the system's limits on open files."
        }
        Some(libc::EISDIR | libc::ENOTDIR | libc::ENOTEMPTY) => {
            "Check the data directory: something else is in the way of the file named, and must be moved."
        }
        _ => "Check the device that holds the data directory and the kernel log.",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_like_percent_m() {
        let e = io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(os_message(&e), "No space left on device");
        assert_eq!(file_access_code(&e), PgSqlErrorCode::ERRCODE_DISK_FULL);
        assert_eq!(file_hint(&e), "Check free disk space.");
        for refused in [libc::EACCES, libc::EPERM, libc::EROFS, libc::EIO] {
            let e = io::Error::from_raw_os_error(refused);
            assert_eq!(file_access_code(&e), PgSqlErrorCode::ERRCODE_IO_ERROR, "{e}");
        }
        assert_eq!(os_message(&io::Error::other("plain")), "plain");
    }
}
