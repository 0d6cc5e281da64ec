//! Operators over `nextval` or `setval`. The planner hook serves them as it
//! serves the functions, but the checks made before an expression is
//! analysed (EXECUTE's parameters, table rewrites, COPY's WHERE, the bodies
//! of SQL functions the planner would inline) know calls by their names,
//! and an operator hides the name: a `setval` so spelt could move a
//! registered sequence below its fence. So where sequence mode is installed
//! no such operator is made, and no sequence is registered while one exists.

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use crate::pg::error::{self, ErrorReport, Raise};

/// The operators of this database over native nextval or setval, as
/// `regoperator` text.
pub fn over_sequence_functions() -> Vec<String> {
    let functions = [pg_sys::F_NEXTVAL, pg_sys::F_SETVAL_REGCLASS_INT8, pg_sys::F_SETVAL_REGCLASS_INT8_BOOL];
    let list = functions.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    let query = format!(
        "SELECT o.oid::pg_catalog.regoperator::pg_catalog.text FROM pg_catalog.pg_operator o \
         WHERE o.oprcode::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ('{{{list}}}'::pg_catalog.oid[]) ORDER BY 1"
    );
    Spi::connect(|client| {
        client
            .select(&query, None, &[])
            .map(|rows| rows.filter_map(|r| r.get::<String>(1).ok().flatten()).collect())
            .unwrap_or_default()
    })
}

/// A registration's check: no such operator exists.
pub fn check_none(seq_name: &str) -> Result<(), Box<ErrorReport>> {
    let Some(operator) = over_sequence_functions().into_iter().next() else { return Ok(()) };
    Err(Box::new(
        error::new(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("sequence \"{seq_name}\" cannot be registered while operator {operator} calls a sequence function"),
        )
        .set_detail(detail())
        .set_hint(format!("Drop it (DROP OPERATOR {operator}) and call the function by its name.")),
    ))
}

/// After CREATE OPERATOR, where sequence mode is installed: refused if it
/// made one over nextval or setval (one not `before` it).
pub fn refuse_new(before: &[String]) {
    let Some(operator) = over_sequence_functions().into_iter().find(|o| !before.contains(o)) else { return };
    error::new(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("operator {operator} cannot call a sequence function where snowflake_id's sequence mode is installed"),
    )
    .set_detail(detail())
    .set_hint("Call the function by its name.")
    .raise(PgLogLevel::ERROR)
}

fn detail() -> &'static str {
    "An operator over nextval or setval hides the call from the checks that route sequence calls through \
     snowflake_id's functions."
}

/// Whether `stmt` (a DefineStmt) creates an operator.
///
/// # Safety
/// `stmt` is a DefineStmt.
pub unsafe fn creates_operator(stmt: *mut pg_sys::DefineStmt) -> bool {
    // SAFETY: the caller's contract.
    unsafe { (*stmt).kind == pg_sys::ObjectType::OBJECT_OPERATOR }
}
