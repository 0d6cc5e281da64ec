//! What a DBA meets around the WAL resource manager: the records in
//! pg_waldump and pg_walinspect, an ID another library already took, removing
//! the library, and pg_upgrade (which carries neither WAL nor the state file).

mod common;

use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

use common::{db_error, install_c_library, Cluster};

/// Marks written so far, and the current WAL insert position.
fn marks_and_lsn(c: &Cluster) -> (i64, String) {
    let row = c
        .connect()
        .query_one("SELECT marks_written, pg_current_wal_insert_lsn()::text FROM snowflake_status()", &[])
        .unwrap();
    (row.get(0), row.get(1))
}

/// Generates an ID a second apart, three times: each one needs a new mark.
fn three_marks(c: &Cluster) {
    for _ in 0..3 {
        c.one::<i64>("SELECT snowflake_next_id()");
        sleep(Duration::from_millis(1100));
    }
}

#[test]
fn pg_waldump_and_pg_walinspect_show_the_marks() {
    let c = Cluster::new("waldump", &["snowflake_id.datacenter_id = 3", "snowflake_id.worker_id = 7"]);
    c.start();
    c.session().batch_execute("CREATE EXTENSION pg_walinspect").unwrap();
    let (marks_before, start) = marks_and_lsn(&c);
    three_marks(&c);
    let (marks_after, end) = marks_and_lsn(&c);
    let marks = marks_after - marks_before;
    assert!(marks >= 3, "{marks} marks");

    // pg_walinspect runs in the server, where the resource manager describes its records.
    let rows = c
        .connect()
        .query(
            "SELECT record_type, description FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
             WHERE resource_manager = 'snowflake_id'",
            &[&start, &end],
        )
        .unwrap();
    assert_eq!(rows.len() as i64, marks);
    for r in &rows {
        let (kind, desc): (String, String) = (r.get(0), r.get(1));
        assert_eq!(kind, "MARK");
        assert!(desc.starts_with("mark 20"), "{desc}");
        assert!(desc.contains(", clock_back 0, datacenter 3, worker 7, wall clock 20"), "{desc}");
    }

    // pg_waldump cannot load extension code: it names the records by their ID.
    let out = c.run("pg_waldump", &["-p", c.data.join("pg_wal").to_str().unwrap(), "-s", &start, "-e", &end]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dump = String::from_utf8_lossy(&out.stdout);
    let ours = dump.lines().filter(|l| l.contains("rmgr: custom197")).count();
    assert_eq!(ours as i64, marks, "{dump}");
}

/// A library that registers a WAL resource manager under `id`, named "other_rmgr".
fn other_rmgr_source(id: u8) -> String {
    format!(
        r#"#include "postgres.h"
#include "fmgr.h"
#include "access/xlog_internal.h"
PG_MODULE_MAGIC;
static void other_redo(XLogReaderState *record) {{}}
static void other_desc(StringInfo buf, XLogReaderState *record) {{}}
static const char *other_identify(uint8 info) {{ return NULL; }}
static RmgrData other = {{ .rm_name = "other_rmgr", .rm_redo = other_redo, .rm_desc = other_desc,
                          .rm_identify = other_identify }};
void _PG_init(void);
void _PG_init(void) {{ RegisterCustomRmgr({id}, &other); }}
"#
    )
}

#[test]
fn a_resource_manager_id_taken_by_another_library_stops_the_server_with_the_way_out() {
    let _other = install_c_library("other_rmgr", &other_rmgr_source(197));
    let c = Cluster::new("rmgrclash", &["include_if_exists = 'case.conf'"]);
    let refused = |settings: &str| -> String {
        c.write_data_file("case.conf", format!("{settings}\n").as_bytes());
        let log_before = c.log().len();
        assert!(c.try_start().is_err(), "started with {settings}");
        c.log()[log_before..].to_string()
    };
    // Loaded after the other library: snowflake_id names the setting that resolves it.
    let log = refused("shared_preload_libraries = 'other_rmgr,snowflake_id'");
    assert!(
        log.contains("FATAL:  WAL resource manager ID 197 of snowflake_id is already used by \"other_rmgr\""),
        "{log}"
    );
    assert!(log.contains("HINT:  Set snowflake_id.wal_rmgr_id to a free ID from 128 to 255"), "{log}");
    // Loaded before it: PostgreSQL's own refusal names snowflake_id.
    let log = refused("shared_preload_libraries = 'snowflake_id,other_rmgr'");
    assert!(log.contains("Custom resource manager \"snowflake_id\" already registered with the same ID"), "{log}");
    // The way out.
    c.write_data_file(
        "case.conf",
        b"shared_preload_libraries = 'other_rmgr,snowflake_id'\nsnowflake_id.wal_rmgr_id = 198\n",
    );
    c.start();
    let setting: String = c.session().query_one("SHOW snowflake_id.wal_rmgr_id", &[]).unwrap().get(0);
    assert_eq!(setting, "198");
    c.one::<i64>("SELECT snowflake_next_id()");
    // A value outside the custom range is refused at start, not replaced by the default.
    c.stop();
    c.write_data_file("case.conf", b"snowflake_id.wal_rmgr_id = 12\n");
    let log_before = c.log().len();
    assert!(c.try_start().is_err());
    let log = c.log()[log_before..].to_string();
    assert!(log.contains("FATAL:  invalid value for parameter \"snowflake_id.wal_rmgr_id\": \"12\""), "{log}");
}

#[test]
fn removing_the_library_waits_for_a_clean_shutdown() {
    let c = Cluster::new("removal", &["checkpoint_timeout = '1h'", "include_if_exists = 'case.conf'"]);
    c.start();
    c.session().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id())").unwrap();
    c.connect().batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();

    // The wrong way: after a crash, WAL holds marks that only the library can replay.
    c.stop_immediate();
    c.write_data_file("case.conf", b"shared_preload_libraries = ''\n");
    let log_before = c.log().len();
    assert!(c.try_start().is_err(), "recovery replayed marks without the library");
    let log = c.log()[log_before..].to_string();
    assert!(log.contains("resource manager with ID 197 not registered"), "{log}");
    // With the library back, recovery completes and nothing is lost.
    c.write_data_file("case.conf", b"");
    c.start();
    let before: i64 = c.one("SELECT max(id) FROM t");
    c.connect().batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();
    let above: i64 = c.connect().query_one("SELECT count(*) FROM t WHERE id > $1", &[&before]).unwrap().get(0);
    assert_eq!(above, 1000, "the new IDs are all above the old ones");

    // The documented way: drop the extension, stop cleanly (the shutdown
    // checkpoint leaves nothing to replay), then remove the library.
    c.connect().batch_execute("ALTER TABLE t ALTER COLUMN id DROP DEFAULT; DROP EXTENSION snowflake_id").unwrap();
    c.stop();
    c.write_data_file("case.conf", b"shared_preload_libraries = ''\n");
    c.start();
    // Even a crash now needs no library: no mark was logged since the checkpoint.
    c.stop_immediate();
    c.start();
    assert_eq!(c.one::<i64>("SELECT count(*) FROM t"), 2000);
}

#[test]
fn an_upgraded_cluster_refuses_until_the_old_state_file_is_brought_over() {
    for (mode, option) in [("link", &["--link"][..]), ("copy", &[])] {
        let settings = ["snowflake_id.worker_id = 5"];
        let old = Cluster::with_fake_clock("upgradeold", &settings);
        old.start();
        let mut s = old.session();
        s.batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), side text)").unwrap();
        // The old cluster's clock is an hour ahead: its IDs are an hour ahead
        // of the new cluster's clock, so only its state file keeps the new
        // one above them.
        s.query_one("SELECT snowflake_next_id()", &[]).unwrap();
        drop(s);
        // A state file from before the jump: in the copy case it is put into
        // the new cluster before pg_upgrade, as if the new cluster had
        // generated once itself (or the DBA had copied too early).
        let early_file = std::fs::read(old.state_file()).unwrap();
        old.clock.as_ref().unwrap().set_offset(3600);
        old.connect().batch_execute("INSERT INTO t (side) SELECT 'old' FROM generate_series(1, 10000)").unwrap();
        let old_max: i64 = old.one("SELECT max(id) FROM t");
        old.stop();

        let new = Cluster::new("upgradenew", &settings);
        if mode == "copy" {
            new.write_data_file("snowflake_id.state", &early_file);
        }
        old.pg_upgrade(&new, option).unwrap_or_else(|out| panic!("{mode}: {out}"));
        new.start();
        let e = new.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
        let (code, message, hint) = db_error(&e);
        assert_eq!(code, "55000", "{mode}: {message}");
        assert!(message.contains("high-water mark of this data directory is unknown"), "{message}");
        assert!(hint.contains("copy snowflake_id.state from the data directory of the cluster"), "{hint}");
        assert!(new.log().contains("WARNING:  snowflake_id will not generate IDs"), "{}", new.log());

        // The one step: bring the old cluster's state file over.
        new.stop();
        run_the_guides_upgrade_step(&old, &new);
        new.start();
        new.connect().batch_execute("INSERT INTO t (side) SELECT 'new' FROM generate_series(1, 10000)").unwrap();
        let new_min: i64 = new.one("SELECT min(id) FROM t WHERE side = 'new'");
        assert!(new_min > old_max, "{mode}: {new_min} after {old_max}");
        let ahead: bool =
            new.one("SELECT snowflake_timestamp(max(id)) > clock_timestamp() + interval '30 minutes' FROM t");
        assert!(ahead, "{mode}: the new IDs continue an hour ahead, above the old ones");
    }
}

/// A cluster made by pg_upgrade from a fresh one, in one of two ways that
/// leave a `pg_upgrade_output.d` directory in it, given a floor (its origin's
/// state file), then generating an hour ahead of the clock.
fn upgraded_cluster_ahead(how: &str, settings: &[&str]) -> (Cluster, i64) {
    let origin = Cluster::new("upgradeorigin", settings);
    let made = Cluster::with_fake_clock("upgrademade", settings);
    match how {
        "retain" => origin.pg_upgrade(&made, &["--retain"]).unwrap(),
        _ => {
            // A check that fails (the new cluster holds a table), then the upgrade.
            made.start();
            made.connect().batch_execute("CREATE TABLE in_the_way ()").unwrap();
            made.stop();
            assert!(origin.pg_upgrade(&made, &["--check"]).is_err(), "the check failed");
            made.start();
            made.connect().batch_execute("DROP TABLE in_the_way").unwrap();
            made.stop();
            origin.pg_upgrade(&made, &[]).unwrap_or_else(|out| panic!("{how}: {out}"));
        }
    }
    assert!(made.data_path("pg_upgrade_output.d").is_dir(), "{how}: pg_upgrade left its directory behind");
    // The origin never generated: the DBA removes the unknown mark, as the hint says.
    assert!(made.run_program("rm", &[made.state_file().to_str().unwrap()]).status.success());
    made.start();
    made.session()
        .batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), side text)")
        .unwrap();
    made.clock.as_ref().unwrap().set_offset(3600);
    made.connect().batch_execute("INSERT INTO t (side) SELECT 'made' FROM generate_series(1, 10000)").unwrap();
    let max: i64 = made.one("SELECT max(id) FROM t");
    made.stop();
    (made, max)
}

#[test]
fn upgrading_a_cluster_that_pg_upgrade_made_keeps_its_floor() {
    for how in ["retain", "failed check"] {
        let settings = ["snowflake_id.worker_id = 5"];
        let (old, old_max) = upgraded_cluster_ahead(how, &settings);
        let mark_lines = |text: &str| -> Vec<String> {
            assert!(!text.contains("kind=unknown"), "{how}: {text}");
            text.lines().filter(|l| l.starts_with("mark") || l.starts_with("kind")).map(String::from).collect()
        };
        let floor = mark_lines(&std::fs::read_to_string(old.state_file()).unwrap());
        let new = Cluster::new("upgradeagain", &settings);
        old.pg_upgrade(&new, &[]).unwrap_or_else(|out| panic!("{how}: {out}"));
        // pg_upgrade started the old cluster in binary-upgrade mode too: its floor stays.
        let after = mark_lines(&std::fs::read_to_string(old.state_file()).unwrap());
        assert_eq!(after, floor, "{how}: the old cluster's state file");
        new.start();
        let e = new.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
        assert_eq!(db_error(&e).0, "55000", "{how}: the new cluster waits for the old floor");
        new.stop();
        let copied = new.run_program("cp", &[old.state_file().to_str().unwrap(), new.state_file().to_str().unwrap()]);
        assert!(copied.status.success());
        new.start();
        new.connect().batch_execute("INSERT INTO t (side) SELECT 'new' FROM generate_series(1, 10000)").unwrap();
        let new_min: i64 = new.one("SELECT min(id) FROM t WHERE side = 'new'");
        assert!(new_min > old_max, "{how}: {new_min} after {old_max}");
    }
}

#[test]
fn a_state_file_in_the_new_cluster_before_pg_upgrade_is_kept_under_another_name() {
    let settings = ["snowflake_id.worker_id = 5"];
    let old = Cluster::new("keepold", &settings);
    old.start();
    old.session().query_one("SELECT snowflake_next_id()", &[]).unwrap();
    old.stop();
    let old_file = std::fs::read_to_string(old.state_file()).unwrap();
    let new = Cluster::new("keepnew", &settings);
    // Copied a step too early: pg_upgrade's first start finds it.
    new.write_data_file("snowflake_id.state", old_file.as_bytes());
    old.pg_upgrade(&new, &[]).unwrap();
    let kept = new.data_path("snowflake_id.state.before-pg_upgrade");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), old_file, "the file is kept, not destroyed");
    new.start();
    let e = new.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, _) = db_error(&e);
    assert_eq!(code, "55000", "{message}");
    let log = new.log();
    assert!(log.contains(&format!("kept as \"{}\"", kept.display())), "{log}");
}

#[test]
fn an_old_cluster_configured_like_pg_upgrades_new_one_keeps_its_state_file() {
    // fsync = off comes with every test cluster: with full_page_writes off
    // too, the old cluster's own configuration holds the values pg_upgrade
    // gives the new cluster on its command line.
    let settings = ["snowflake_id.worker_id = 5", "full_page_writes = off"];
    let old = Cluster::new("fpwold", &settings);
    old.start();
    old.session().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id())").unwrap();
    old.connect().batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();
    let old_max: i64 = old.one("SELECT max(id) FROM t");
    old.stop();
    let file = std::fs::read_to_string(old.state_file()).unwrap();

    let new = Cluster::new("fpwnew", &settings);
    // Options for the new cluster come on its command line after pg_upgrade's
    // own: they do not hide it, whatever their values.
    old.pg_upgrade(&new, &["-O", "-c fsync=on"]).unwrap_or_else(|out| panic!("{out}"));
    assert_eq!(std::fs::read_to_string(old.state_file()).unwrap(), file, "the old cluster's state file is untouched");
    assert!(
        !old.data_path("snowflake_id.state.before-pg_upgrade").exists(),
        "nothing was set aside in the old cluster"
    );
    new.start();
    let e = new.connect().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "55000", "the new cluster waits for the old state file");
    new.stop();
    let copied = new.run_program("cp", &[old.state_file().to_str().unwrap(), new.state_file().to_str().unwrap()]);
    assert!(copied.status.success(), "{}", String::from_utf8_lossy(&copied.stderr));
    new.start();
    new.connect().batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();
    let above: i64 = new.connect().query_one("SELECT count(*) FROM t WHERE id > $1", &[&old_max]).unwrap().get(0);
    assert_eq!(above, 1000, "the new IDs are all above the old ones");
}

/// The step docs/deployment.md gives after pg_upgrade, as it is written
/// there: the lines of its script between the comment that opens them and
/// `pg_ctl start`, with the two data directories put in.
fn run_the_guides_upgrade_step(old: &Cluster, new: &Cluster) {
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/deployment.md")).unwrap();
    let script: String = guide
        .lines()
        .skip_while(|l| *l != "# as the server's user:")
        .skip(1)
        .take_while(|l| !l.starts_with("pg_ctl start"))
        .map(|l| {
            format!(
                "{}\n",
                l.replace("OLD_PGDATA", old.data.to_str().unwrap()).replace("NEW_PGDATA", new.data.to_str().unwrap())
            )
        })
        .collect();
    assert!(script.contains("snowflake_id.state"), "the guide's step is not where it was: {script:?}");
    let out = new.run_program("bash", &["-euc", &script]);
    assert!(out.status.success(), "{script}\n{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_upgraded_cluster_that_never_generated_starts_at_the_clock_after_the_guides_step() {
    // The extension installed and a table's default set, but no ID taken:
    // no state file and no note in the old cluster.
    let settings = ["snowflake_id.worker_id = 5"];
    let old = Cluster::new("nevergenold", &settings);
    old.start();
    old.session().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id())").unwrap();
    old.stop();
    assert!(!old.state_file().exists(), "the old cluster never generated");
    let new = Cluster::new("nevergennew", &settings);
    old.pg_upgrade(&new, &[]).unwrap_or_else(|out| panic!("{out}"));
    // Without the step the new cluster would refuse (the mark unknown);
    // with it, it generates at once.
    run_the_guides_upgrade_step(&old, &new);
    new.start();
    let ids: i64 =
        new.one("WITH n AS (INSERT INTO t SELECT FROM generate_series(1, 10) RETURNING id) SELECT count(*) FROM n");
    assert_eq!(ids, 10);
    let unknown: Option<String> = new.one("SELECT mark_unknown FROM snowflake_status()");
    assert_eq!(unknown, None);
}

#[test]
fn pg_upgrade_check_leaves_an_old_cluster_without_a_state_file_generating() {
    let settings = ["snowflake_id.worker_id = 5"];
    let old = Cluster::new("checkold", &settings);
    old.start();
    old.session().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id())").unwrap();
    old.stop();
    assert!(!old.state_file().exists(), "the old cluster never generated");
    let new = Cluster::new("checknew", &settings);
    // The check starts the old cluster in binary-upgrade mode, and changes nothing.
    old.pg_upgrade(&new, &["--check"]).unwrap_or_else(|out| panic!("{out}"));
    assert!(!old.state_file().exists(), "the check wrote a state file into the old cluster");
    old.start();
    old.connect().batch_execute("INSERT INTO t SELECT FROM generate_series(1, 10)").unwrap();
}
