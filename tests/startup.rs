//! Servers with other settings: a non-default layout and node, settings that
//! must stop the server (bad values, misspelled or missing names), and the
//! library not preloaded.

mod common;

use std::time::{Duration, Instant};

use common::{db_error, Cluster};

#[test]
fn a_non_default_layout_and_node_decode_as_configured() {
    let c = Cluster::new("instagram", &["snowflake_id.layout = 'instagram'", "snowflake_id.worker_id = 1234"]);
    c.start();
    let mut s = c.session();
    let row = s
        .query_one(
            "SELECT d.worker_id, d.datacenter_id IS NULL, d.clock_back IS NULL,
                    abs(extract(epoch FROM d.ts - clock_timestamp())) < 60,
                    current_setting('snowflake_id.epoch'), st.layout
             FROM snowflake_decode(snowflake_next_id()) d, snowflake_status() st",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 1234);
    assert!(row.get::<_, bool>(1) && row.get::<_, bool>(2), "instagram has no datacenter or clock_back field");
    assert!(row.get::<_, bool>(3), "the timestamp is now, counted from Instagram's epoch");
    assert_eq!(row.get::<_, String>(4), "2011-08-24 21:07:01.721+00", "SHOW gives the preset's epoch");
    assert_eq!(row.get::<_, String>(5), "timestamp:40,worker:13,sequence:10");
    // The same ID read with the explicit layout gives the same fields.
    let same: bool = s
        .query_one(
            "WITH i AS (SELECT snowflake_next_id() AS id)
             SELECT a.ts = b.ts AND a.worker_id = b.worker_id AND a.sequence = b.sequence
             FROM i, snowflake_decode(i.id) a, snowflake_decode(i.id, 'instagram') b",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(same);
}

#[test]
fn an_explicit_epoch_and_tick_override_the_preset() {
    let c = Cluster::new(
        "sonyflake",
        &[
            "snowflake_id.layout = 'sonyflake'",
            "snowflake_id.worker_id = 65535",
            "snowflake_id.epoch = 1420070400000",
            "snowflake_id.tick_ms = 20",
        ],
    );
    c.start();
    let mut s = c.session();
    let row = s
        .query_one(
            "SELECT d.worker_id, current_setting('snowflake_id.tick_ms'), st.tick_ms, st.epoch = '2015-01-01 00:00:00+00',
                    abs(extract(epoch FROM d.ts - clock_timestamp())) < 60,
                    extract(milliseconds FROM d.ts)::int % 20
             FROM snowflake_decode(snowflake_next_id()) d, snowflake_status() st",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 65535);
    assert_eq!(row.get::<_, String>(1), "20");
    assert_eq!(row.get::<_, i32>(2), 20);
    assert!(row.get::<_, bool>(3) && row.get::<_, bool>(4));
    assert_eq!(row.get::<_, i32>(5), 0, "timestamps fall on 20 ms ticks");
}

#[test]
fn bad_identity_settings_stop_the_server() {
    let c = Cluster::new("refusals", &["include_if_exists = 'case.conf'"]);
    let cases: &[(&str, &str)] = &[
        ("snowflake_id.worker_id = 32", "\"snowflake_id.worker_id\": \"32\""),
        ("snowflake_id.worker_id = -1", "\"snowflake_id.worker_id\": \"-1\""),
        ("snowflake_id.worker_id = 'two'", "\"snowflake_id.worker_id\": \"two\""),
        // PostgreSQL would read these as 8, 31, 8 and 7 (octal, hex, rounded, a unit).
        ("snowflake_id.worker_id = 010", "\"snowflake_id.worker_id\": \"010\""),
        ("snowflake_id.worker_id = 0x1f", "\"snowflake_id.worker_id\": \"0x1f\""),
        ("snowflake_id.datacenter_id = 7.5", "\"snowflake_id.datacenter_id\": \"7.5\""),
        ("snowflake_id.tick_ms = '7ms'", "\"snowflake_id.tick_ms\": \"7ms\""),
        ("snowflake_id.datacenter_id = 99999999999", "\"snowflake_id.datacenter_id\": \"99999999999\""),
        ("snowflake_id.layout = 'timestamp:41,shard:10,sequence:12'", "\"snowflake_id.layout\""),
        ("snowflake_id.layout = 'timestamp:42,datacenter:5,worker:5,sequence:12'", "\"snowflake_id.layout\""),
        ("snowflake_id.layout = 'instagram'\nsnowflake_id.datacenter_id = 1", "\"snowflake_id.datacenter_id\": \"1\""),
        ("snowflake_id.epoch = 'last tuesday'", "\"snowflake_id.epoch\""),
        // Unix seconds where milliseconds belong: 1970-01-21 as milliseconds.
        ("snowflake_id.epoch = 1735689600", "\"snowflake_id.epoch\": \"1735689600\""),
        ("snowflake_id.tick_ms = 0", "\"snowflake_id.tick_ms\": \"0\""),
    ];
    for (settings, named) in cases {
        c.write_data_file("case.conf", format!("{settings}\n").as_bytes());
        let log_before = c.log().len();
        let started = c.try_start();
        let log = c.log()[log_before..].to_string();
        if started.is_ok() {
            c.stop();
            panic!("the server started with {settings:?}");
        }
        let fatal = format!("FATAL:  invalid value for parameter {named}");
        assert!(log.contains(&fatal), "{settings:?}: no {fatal:?} in\n{log}");
        assert!(log.contains("DETAIL:  ") && log.contains("HINT:  "), "{settings:?}: no detail or hint in\n{log}");
        if settings.ends_with("= 1735689600") {
            assert!(log.contains("looks like Unix seconds") && log.contains("write 1735689600000"), "{log}");
        }
        if ["= 010", "= 0x1f", "= 7.5", "= '7ms'"].iter().any(|v| settings.ends_with(v)) {
            assert!(log.contains("written in decimal digits, such as 7"), "{settings:?}:\n{log}");
            assert!(!log.contains("WARNING:"), "no PostgreSQL warning before the refusal:\n{log}");
        }
    }
    // And with the last case removed, the server starts.
    c.write_data_file("case.conf", b"snowflake_id.worker_id = 31\n");
    c.start();
    let worker: i32 =
        c.session().query_one("SELECT worker_id FROM snowflake_decode(snowflake_next_id())", &[]).unwrap().get(0);
    assert_eq!(worker, 31);
}

#[test]
fn a_setting_under_its_old_name_stops_the_server_with_the_new_name() {
    let c = Cluster::new("oldnames", &["include_if_exists = 'case.conf'"]);
    for (old, new) in [
        ("snowflake.layout = 'twitter'", "snowflake_id.layout"),
        ("snowflake.epoch = '2025-01-01'", "snowflake_id.epoch"),
        ("snowflake.tick_ms = 1", "snowflake_id.tick_ms"),
        ("snowflake.datacenter_id = 1", "snowflake_id.datacenter_id"),
        ("snowflake.worker_id = 7", "snowflake_id.worker_id"),
        ("snowflake.max_clock_drift = '1s'", "snowflake_id.max_clock_drift"),
        ("snowflake.max_wait = '1s'", "snowflake_id.max_wait"),
    ] {
        c.write_data_file("case.conf", format!("{old}\n").as_bytes());
        let log_before = c.log().len();
        assert!(c.try_start().is_err(), "the server started with {old:?}");
        let log = c.log()[log_before..].to_string();
        let name = old.split(' ').next().unwrap();
        let fatal = format!("FATAL:  configuration parameter \"{name}\" was renamed to \"{new}\"");
        assert!(log.contains(&fatal), "{old:?}: no {fatal:?} in\n{log}");
        assert!(log.contains(&format!("HINT:  Rename {name} to {new}")), "{log}");
    }
}

/// Starts `c` with `case.conf` holding `settings`; on failure, the log lines
/// of that attempt.
fn start_with(c: &Cluster, settings: &str) -> Result<(), String> {
    c.write_data_file("case.conf", format!("{settings}\n").as_bytes());
    let log_before = c.log().len();
    c.try_start().map_err(|_| c.log()[log_before..].to_string())
}

/// The log lines of a start with `settings` that the server refused; fails
/// the test if it started.
fn refused_start(c: &Cluster, settings: &str) -> String {
    match start_with(c, settings) {
        Ok(()) => {
            c.stop();
            panic!("the server started with {settings:?}");
        }
        Err(log) => log,
    }
}

#[test]
fn a_misspelled_setting_stops_the_server_naming_the_one_it_meant() {
    let c = Cluster::new("typos", &["include_if_exists = 'case.conf'"]);
    for (typo, meant) in [
        ("snowflake_id.workerid = 7", "snowflake_id.worker_id"),
        ("snowflake_id.datacentre_id = 1", "snowflake_id.datacenter_id"),
        ("snowflake_id.max_clock_dirft = '1s'", "snowflake_id.max_clock_drift"),
        ("snowflake_id.epoc = '2025-06-01'", "snowflake_id.epoch"),
    ] {
        let log = refused_start(&c, typo);
        let name = typo.split(' ').next().unwrap();
        let fatal = format!("FATAL:  unrecognized configuration parameter \"{name}\"");
        assert!(log.contains(&fatal), "{typo:?}: no {fatal:?} in\n{log}");
        assert!(log.contains("DETAIL:  It is set in file \"") && log.contains("case.conf\" line 1."), "{log}");
        assert!(log.contains(&format!("HINT:  Did you mean \"{meant}\"?")), "{typo:?}:\n{log}");
        assert!(!log.contains("WARNING:"), "PostgreSQL's own warning never comes:\n{log}");
    }
    // pgEdge's snowflake.* settings are not ours to judge.
    start_with(&c, "snowflake.node = 3").expect("another prefix is left alone");
    c.stop();
}

#[test]
fn a_layout_with_node_fields_needs_its_numbers_written_out() {
    let c = Cluster::without_identity("identity", &["include_if_exists = 'case.conf'"]);
    for (settings, fatal) in [
        ("", "parameters \"snowflake_id.datacenter_id\" and \"snowflake_id.worker_id\" must be set"),
        ("snowflake_id.worker_id = 3", "parameter \"snowflake_id.datacenter_id\" must be set"),
        ("snowflake_id.datacenter_id = 3", "parameter \"snowflake_id.worker_id\" must be set"),
        ("snowflake_id.layout = 'instagram'", "parameter \"snowflake_id.worker_id\" must be set"),
    ] {
        let log = refused_start(&c, settings);
        assert!(log.contains(&format!("FATAL:  {fatal}")), "{settings:?}: no {fatal:?} in\n{log}");
        assert!(log.contains("DETAIL:  The layout ") && log.contains("Left unset they would be 0"), "{log}");
        assert!(log.contains("HINT:  Set snowflake_id."), "{log}");
    }
    // A layout without node fields needs none.
    start_with(&c, "snowflake_id.layout = 'mastodon'").expect("mastodon has no node fields");
    c.stop();
    // Written out, 0 is as good a number as any.
    start_with(&c, "snowflake_id.datacenter_id = 0\nsnowflake_id.worker_id = 0").expect("explicit zeros start");
    let row = c
        .session()
        .query_one("SELECT datacenter_id, worker_id FROM snowflake_decode(snowflake_next_id())", &[])
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1)), (0, 0));
    c.stop();
}

#[test]
fn without_preloading_the_extension_refuses_cleanly() {
    let c = Cluster::without_preload("nopreload");
    c.start();
    let mut s = c.connect();
    for sql in ["CREATE EXTENSION snowflake_id", "LOAD 'snowflake_id'"] {
        let e = s.batch_execute(sql).expect_err(sql);
        let (code, message, hint) = db_error(&e);
        assert_eq!(code, "55000", "{sql}: {message}");
        assert_eq!(message, "snowflake_id must be loaded via \"shared_preload_libraries\"");
        assert!(hint.contains("shared_preload_libraries"), "{hint}");
    }
    // The session survives the refusal.
    let one: i32 = s.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
}

#[test]
fn a_changed_worker_number_starts_and_says_what_to_check() {
    let c = Cluster::new("renumbered", &["snowflake_id.worker_id = 3"]);
    c.start();
    let before: i64 = c.session().query_one("SELECT max(id) FROM snowflake_next_ids(1000) AS id", &[]).unwrap().get(0);
    c.stop();
    c.set("snowflake_id.worker_id = 9");
    let log_before = c.log().len();
    c.start();
    let log = c.log()[log_before..].to_string();
    assert!(log.contains("WARNING:  snowflake_id node number changed since the state file was written"), "{log}");
    assert!(log.contains("Changed: snowflake_id.worker_id (3 → 9)."), "{log}");
    assert!(log.contains("HINT:  Check that no other server generates with datacenter 0, worker 9"), "{log}");
    assert!(log.contains("old number (datacenter 0, worker 3)"), "{log}");
    assert!(!log.contains("snowflake_id settings changed"), "only the node changed:\n{log}");
    let row = c
        .session()
        .query_one("SELECT s.id, d.worker_id FROM (SELECT snowflake_next_id() AS id) s, snowflake_decode(s.id) d", &[])
        .unwrap();
    assert!(row.get::<_, i64>(0) > before, "above the IDs of the old number");
    assert_eq!(row.get::<_, i32>(1), 9);
}

/// Writes `settings` to `case.conf`, reloads, waits until the postmaster has
/// read the files (it logs `until` then), and returns what it logged.
fn reload_with(c: &Cluster, settings: &str, until: &str) -> String {
    c.write_data_file("case.conf", format!("{settings}\n").as_bytes());
    let before = c.log().len();
    c.connect().batch_execute("SELECT pg_reload_conf()").unwrap();
    // A bound for a hung server, not a measure of speed: the loop ends as soon
    // as the line is there.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = c.log()[before..].to_string();
        if log.contains(until) {
            return log;
        }
        assert!(Instant::now() < deadline, "no {until:?} after the reload:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_reload_says_at_once_when_the_next_start_will_fail() {
    // Patroni's edit-config pushes settings without ALTER SYSTEM's checks; 0.5.0
    // said nothing at the reload, and the next restart left the server down.
    let c = Cluster::new("reloads", &["snowflake_id.worker_id = 7", "include_if_exists = 'case.conf'"]);
    c.start();
    const NEXT_START: &str = "WARNING:  the next server start will fail";

    // A value out of the layout's range: only "cannot be changed without restarting" from PostgreSQL.
    let log = reload_with(&c, "snowflake_id.worker_id = 32", "cannot be changed without restarting");
    let warning = format!("{NEXT_START}: invalid value for parameter \"snowflake_id.worker_id\": \"32\"");
    assert!(log.contains(&warning), "{log}");
    assert!(log.contains("A reload leaves this server running with the settings it started with"), "{log}");

    // A misspelled name: PostgreSQL drops the whole file.
    let log = reload_with(&c, "snowflake_id.workerid = 8", "contains errors");
    assert!(log.contains(&format!("{NEXT_START}: unrecognized configuration parameter \"snowflake_id.workerid\"")));
    assert!(
        log.contains("Did you mean \"snowflake_id.worker_id\"?") && log.contains("patronictl edit-config"),
        "{log}"
    );

    // A date typed without dashes as the epoch.
    let log = reload_with(&c, "snowflake_id.epoch = 20250101", "contains errors");
    assert!(log.contains(&format!("{NEXT_START}: invalid value for parameter \"snowflake_id.epoch\"")), "{log}");
    assert!(log.contains("typed without dashes"), "{log}");

    // A valid new number, with a runtime setting that shows the reload was read: no warning.
    let log = reload_with(
        &c,
        "snowflake_id.worker_id = 8\nsnowflake_id.max_wait = '7s'",
        "cannot be changed without restarting",
    );
    assert!(!log.contains(NEXT_START), "a false alarm:\n{log}");
    assert_eq!(c.one::<String>("SHOW snowflake_id.max_wait"), "7s");

    // The warnings told the truth: with worker 32 the next start fails.
    c.write_data_file("case.conf", b"snowflake_id.worker_id = 32\n");
    c.stop();
    assert!(c.try_start().is_err(), "the server started with worker 32");
    c.write_data_file("case.conf", b"snowflake_id.worker_id = 8\n");
    c.start();
    let worker: i32 = c.session().query_one("SELECT worker_id FROM snowflake_status()", &[]).unwrap().get(0);
    assert_eq!(worker, 8);
}
