//! `#[pg_test]`s: SQL behaviour in one server that `cargo pgrx test` starts with
//! the settings in `crate::pg_test` (datacenter 3, worker 7, default layout).
//! Shared memory is not rolled back between tests, so tests compare before and after.
//!
//! One file per area of `src/pg`, laid out as pgrx's own tests are: each file
//! holds its tests in a `#[pgrx::pg_schema] mod tests { }`. pgrx creates every
//! `#[pg_test]` as an SQL function in the schema named after that module and
//! calls it as `tests.<name>()`, so the module must be named `tests` and written
//! inline, and a test's name must be unique across the files.
//!
//! What is tested where:
//! - here: what needs Rust between statements: properties over many IDs,
//!   before-and-after comparisons, catalog state after DDL;
//! - `tests/pg_regress`: SQL in, SQL out for fixed inputs, and every error a
//!   user can meet with its SQLSTATE, message, detail and hint (`errors.sql`;
//!   `adopt.sql` for snowflake_adopt()'s refusals);
//! - `tests/*.rs`: servers of their own: other settings, several connections
//!   at once, crashes, restarts, standbys, clocks set back.

mod adopt;
mod decode;
mod generate;
mod sequences;
mod settings;
mod status;

use pgrx::prelude::*;

/// The definition of `pg_temp.try` in `tests/pg_regress/sql/errors.sql`: the
/// tests here catch errors with the same function as pg_regress.
fn try_function() -> &'static str {
    const ERRORS_SQL: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pg_regress/sql/errors.sql"));
    const END: &str = "LANGUAGE plpgsql";
    let start = ERRORS_SQL.find("CREATE FUNCTION pg_temp.try(").expect("errors.sql defines pg_temp.try");
    let len = ERRORS_SQL[start..].find(END).expect("pg_temp.try is in PL/pgSQL") + END.len();
    &ERRORS_SQL[start..start + len]
}

/// The SQLSTATE, message and hint of the error `sql` raises, caught in a
/// PL/pgSQL subtransaction by errors.sql's `pg_temp.try`; `None` if it raises none.
fn error_of(sql: &str) -> Option<(String, String, Option<String>)> {
    // Created once per test (each runs in a transaction that is rolled back),
    // by the role that first needs it.
    if Spi::get_one::<bool>("SELECT to_regproc('pg_temp.try') IS NULL").expect("to_regproc runs") == Some(true) {
        Spi::run(try_function()).expect("pg_temp.try is created");
    }
    let (state, message, hint) = Spi::get_three_with_args::<String, String, String>(
        "SELECT state, message, hint FROM pg_temp.try($1)",
        &[sql.into()],
    )
    .expect("pg_temp.try runs");
    state.map(|s| (s, message.unwrap_or_default(), hint.filter(|h| !h.is_empty())))
}

/// One of our errors: the SQLSTATE, a message in PostgreSQL's style, and a hint.
fn assert_error(sql: &str, sqlstate: &str, message_part: &str) {
    let hint = assert_pg_error(sql, sqlstate, message_part);
    assert!(hint.is_some(), "{sql}: no hint");
}

/// Any error, ours or PostgreSQL's; returns its hint.
fn assert_pg_error(sql: &str, sqlstate: &str, message_part: &str) -> Option<String> {
    let (state, message, hint) = error_of(sql).unwrap_or_else(|| panic!("{sql} raised no error"));
    assert_eq!(state, sqlstate, "{sql}: {message}");
    assert!(message.contains(message_part), "{sql}: {message:?} lacks {message_part:?}");
    assert!(!message.ends_with('.') && !message.starts_with(char::is_uppercase), "style of {message:?}");
    assert!(!message.contains("panicked"), "a panic leaked: {message}");
    hint
}

fn one<T: IntoDatum + FromDatum>(sql: &str) -> T {
    Spi::get_one::<T>(sql).expect("query runs").expect("not null")
}
