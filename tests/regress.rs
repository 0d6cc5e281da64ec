//! pg_regress pins the SQL surface: every function's output for fixed inputs
//! and every error message, so that a change of user-visible behaviour shows
//! up as a diff against tests/pg_regress/expected.
//!
//! After an intended change, run with SNOWFLAKE_REGRESS_ACCEPT=1 to copy the
//! new results over the expected files, and review the diff before committing.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::Cluster;

const TESTS: [&str; 5] = ["surface", "errors", "adopt", "json", "privileges"];

fn pg_regress() -> PathBuf {
    let out = Command::new(common::pg_config()).arg("--pkglibdir").output().unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("pgxs/src/test/regress/pg_regress")
}

#[test]
fn the_sql_surface_is_unchanged() {
    let c = Cluster::new("regress", &["snowflake_id.datacenter_id = 3", "snowflake_id.worker_id = 7"]);
    c.start();
    // pg_regress --use-existing runs in an existing database.
    c.connect().batch_execute("CREATE DATABASE snowflake_regress").unwrap();
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pg_regress");
    let output = c.dir.join("regress");
    fs::create_dir_all(&output).unwrap();
    let status = Command::new(pg_regress())
        .arg("--use-existing")
        .args(["--host=127.0.0.1", &format!("--port={}", c.port), "--user=postgres"])
        .arg(format!("--bindir={}", common::bindir().display()))
        .arg(format!("--inputdir={}", input.display()))
        .arg(format!("--outputdir={}", output.display()))
        .arg("--dbname=snowflake_regress")
        .args(TESTS)
        .status()
        .unwrap();
    if std::env::var_os("SNOWFLAKE_REGRESS_ACCEPT").is_some() {
        for t in TESTS {
            fs::copy(output.join(format!("results/{t}.out")), input.join(format!("expected/{t}.out"))).unwrap();
        }
        return;
    }
    if !status.success() {
        let diffs = fs::read_to_string(output.join("regression.diffs")).unwrap_or_default();
        panic!("the SQL surface changed:\n{diffs}");
    }
}
