//! pg_regress pins the SQL surface: every function's output for fixed inputs
//! and every error message, so that a change of user-visible behaviour shows
//! up as a diff against tests/pg_regress/expected.
//!
//! After an intended change, run with SNOWFLAKE_REGRESS_ACCEPT=1 to copy the
//! new results over the expected files, and review the diff before committing.

mod common;

use common::{run_pg_regress, Cluster, REGRESS_SETTINGS};

#[test]
fn the_sql_surface_is_unchanged() {
    let c = Cluster::new("regress", &REGRESS_SETTINGS);
    c.start();
    let accept = std::env::var_os("SNOWFLAKE_REGRESS_ACCEPT").is_some();
    if let Err(diffs) = run_pg_regress(&c, accept) {
        panic!("the SQL surface changed:\n{diffs}");
    }
}
