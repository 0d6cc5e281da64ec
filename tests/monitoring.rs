//! The monitoring files (`monitoring/`) with the tools operators run:
//! Debian's `prometheus-postgres-exporter` scrapes a server through
//! `monitoring/queries.yaml` as a role that is only a member of pg_monitor,
//! after IDs, a clock step back, a wait and a refusal, and every metric the
//! file declares is served with the server's values. The alert rules are
//! checked with promtool by `scripts/test` (`monitoring/alerts_test.yml`).
//! The exporter runs on the host only (Debian 12's package); in the sid
//! chroot of PostgreSQL 19 the queries are checked without it.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{db_error, install_extension_file, Cluster};

const EXPORTER: &str = "/usr/bin/prometheus-postgres-exporter";

fn queries_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("monitoring/queries.yaml")
}

/// One query of the file: its key, its SQL, and its columns with their usage.
#[derive(Debug)]
struct Query {
    key: String,
    sql: String,
    columns: Vec<(String, String)>,
}

/// The queries of `monitoring/queries.yaml`, read with just enough YAML for
/// its shape (a key per query; `query: |` then an indented block; `metrics:`
/// then `- column:` entries with a `usage:`).
fn queries() -> Vec<Query> {
    let text = std::fs::read_to_string(queries_file()).unwrap();
    let mut out: Vec<Query> = Vec::new();
    let mut in_sql = false;
    for line in text.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        if indent == 0 {
            let key = line.trim_end_matches(':').to_string();
            out.push(Query { key, sql: String::new(), columns: Vec::new() });
            in_sql = false;
            continue;
        }
        let q = out.last_mut().expect("a query key comes first");
        if line.trim() == "query: |" {
            in_sql = true;
        } else if in_sql && indent >= 4 {
            q.sql.push_str(line.trim());
            q.sql.push('\n');
        } else if let Some(column) = line.trim().strip_prefix("- ") {
            in_sql = false;
            q.columns.push((column.trim_end_matches(':').to_string(), String::new()));
        } else if let Some(usage) = line.trim().strip_prefix("usage:") {
            q.columns.last_mut().expect("usage under a column").1 = usage.trim().trim_matches('"').to_string();
        } else {
            in_sql = false;
        }
    }
    out
}

/// A scraped sample: its labels and value.
type Samples = BTreeMap<String, Vec<(BTreeMap<String, String>, f64)>>;

/// Parses Prometheus's text format (the exporter's label values hold no
/// escaped quotes here, which the test checks by parsing every line).
fn parse(text: &str) -> Samples {
    let mut out = Samples::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample line: {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("a value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').unwrap_or_else(|| panic!("labels: {line}"))),
            None => (series, ""),
        };
        let mut map = BTreeMap::new();
        let mut rest = labels;
        while !rest.is_empty() {
            let (key, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("a label: {line}"));
            let (val, after) = after.split_once('"').unwrap_or_else(|| panic!("a label value: {line}"));
            map.insert(key.to_string(), val.to_string());
            rest = after.strip_prefix(',').unwrap_or(after);
        }
        out.entry(name.to_string()).or_default().push((map, value));
    }
    out
}

/// Debian 12's exporter (0.11.1, the version CloudNativePG's query format
/// follows) is installed on the host by .ci/setup; the chroot of 19 has
/// none, and the tests that run it are skipped there.
fn exporter_here() -> bool {
    if std::env::var_os("SNOWFLAKE_IN_SID").is_some() && !Path::new(EXPORTER).exists() {
        eprintln!("skipped in the sid chroot: the exporter is tested on the host");
        return false;
    }
    true
}

/// The exporter, stopped when dropped.
struct Exporter {
    child: Child,
    port: u16,
}

impl Exporter {
    fn start(c: &Cluster, user: &str) -> Exporter {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(EXPORTER)
            .env(
                "DATA_SOURCE_NAME",
                format!("host=127.0.0.1 port={} user={user} dbname=postgres sslmode=disable", c.port),
            )
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!("--extend.query-path={}", queries_file().display()))
            .args([
                "--disable-default-metrics",
                "--disable-settings-metrics",
                "--no-collector.database",
                "--no-collector.bgwriter",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{EXPORTER} (scripts/test installs it through .ci/setup): {e}"));
        Exporter { child, port }
    }

    /// GET /metrics, once the exporter listens.
    fn scrape(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
                let mut response = String::new();
                stream.read_to_string(&mut response).unwrap();
                let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
                assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
                return body.to_string();
            }
            assert!(Instant::now() < deadline, "the exporter did not listen on port {}", self.port);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one sample of `name` with the given labels (a subset).
fn sample(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = samples
        .get(name)
        .unwrap_or_else(|| panic!("{name} is not served"))
        .iter()
        .filter(|(l, _)| labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {:?}", samples.get(name));
    found[0]
}

#[test]
fn every_query_maps_each_column_it_returns() {
    // CloudNativePG drops a query whose columns and mappings differ in
    // number; postgres_exporter serves an unmapped column as untyped. Run as
    // CloudNativePG runs them: a pg_monitor role, in a read-only transaction,
    // with its search_path.
    let c = Cluster::new("monqueries", &[]);
    c.start();
    c.connect()
        .batch_execute("CREATE EXTENSION snowflake_id; CREATE ROLE cnpg_metrics_exporter LOGIN IN ROLE pg_monitor")
        .unwrap();
    let mut s = postgres::Client::connect(
        &format!("host=127.0.0.1 port={} user=cnpg_metrics_exporter dbname=postgres", c.port),
        postgres::NoTls,
    )
    .unwrap();
    let queries = queries();
    assert_eq!(
        queries.iter().map(|q| q.key.as_str()).collect::<Vec<_>>(),
        ["snowflake_id", "snowflake_id_mark", "snowflake_id_refusals", "snowflake_id_node"]
    );
    for q in &queries {
        let mut t = s.build_transaction().read_only(true).start().unwrap();
        t.batch_execute("SET LOCAL search_path = pg_catalog, public, pg_temp").unwrap();
        let rows = t.query(&q.sql, &[]).unwrap_or_else(|e| panic!("{}: {e:?}", q.key));
        t.commit().unwrap();
        assert!(!rows.is_empty(), "{}", q.key);
        let returned: Vec<&str> = rows[0].columns().iter().map(|c| c.name()).collect();
        let mapped: Vec<&str> = q.columns.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(returned, mapped, "{}", q.key);
        for (column, usage) in &q.columns {
            assert!(["LABEL", "COUNTER", "GAUGE"].contains(&usage.as_str()), "{}.{column}: {usage:?}", q.key);
            // Prometheus's conventions: counters end in _total, and units are base units.
            let name = format!("{}_{column}", q.key);
            assert_eq!(usage == "COUNTER", name.ends_with("_total"), "{name}");
            assert!(!column.contains("_ms"), "{}.{column}: not a base unit", q.key);
        }
    }
}

#[test]
fn the_exporter_serves_every_metric_with_the_servers_values() {
    if !exporter_here() {
        return;
    }
    let c = Cluster::with_fake_clock(
        "monexporter",
        &[
            "snowflake_id.datacenter_id = 3",
            "snowflake_id.worker_id = 17",
            "snowflake_id.max_clock_drift = '3s'",
            "snowflake_id.max_wait = '300ms'",
        ],
    );
    c.start();
    let clock = c.clock.as_ref().unwrap();
    let mut s = c.connect();
    s.batch_execute(
        "CREATE EXTENSION snowflake_id; CREATE ROLE snowflake_exporter LOGIN IN ROLE pg_monitor;
         SELECT count(*) FROM snowflake_next_ids(5000)",
    )
    .unwrap();
    // A step back within max_clock_drift (3 s, less the 2 s the clock takes
    // to be read): IDs go on, ahead of the clock...
    clock.set_offset(-3);
    s.query_one("SELECT snowflake_next_id()", &[]).unwrap();
    s.query_one("SELECT snowflake_next_id()", &[]).unwrap();
    // ...and one beyond it: a call waits max_wait for the clock, then is refused.
    clock.set_offset(-10);
    let e = s.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "55000", "{e}");
    clock.set_offset(0);

    let exporter = Exporter::start(&c, "snowflake_exporter");
    let text = exporter.scrape();
    let samples = parse(&text);
    // What the server says, read after the scrape: nothing issued IDs between.
    let row = s.query_one("SELECT * FROM snowflake_status()", &[]).unwrap();
    let int = |column: &str| -> f64 {
        match row.columns().iter().find(|c| c.name() == column).map(|c| c.type_().name()) {
            Some("int4") => row.get::<_, i32>(column) as f64,
            Some("int8") => row.get::<_, i64>(column) as f64,
            other => panic!("{column}: {other:?}"),
        }
    };
    let fine = |name: &str| format!("exporter's {name}\n{text}");
    assert_eq!(sample(&samples, "pg_exporter_last_scrape_error", &[]), 0.0, "{}", fine("scrape error"));
    for (_, v) in samples.get("pg_exporter_user_queries_load_error").expect("the file is loaded") {
        assert_eq!(*v, 0.0, "{}", fine("load error"));
    }

    // Every metric the file declares, each with the node's labels.
    let node = [("datacenter_id", "3"), ("worker_id", "17")];
    for q in queries() {
        for (column, usage) in q.columns.iter().filter(|(_, u)| u != "LABEL") {
            let name = format!("{}_{column}", q.key);
            let series = samples.get(&name).unwrap_or_else(|| panic!("{name} ({usage}) is not served\n{text}"));
            assert!(
                series.iter().all(|(l, _)| node.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))),
                "{name}: {series:?}"
            );
            let kind = format!("# TYPE {name} {}", usage.to_lowercase());
            assert!(text.contains(&kind), "{kind}");
        }
    }

    // The values are the server's.
    for (metric, column) in [
        ("snowflake_id_ids_issued_total", "ids_issued"),
        ("snowflake_id_clock_step_backs_total", "clock_step_backs"),
        ("snowflake_id_clock_waits_total", "waits"),
        ("snowflake_id_ticks_borrowed_total", "ticks_borrowed"),
        ("snowflake_id_marks_written_total", "marks_written"),
        ("snowflake_id_mark_write_failures_total", "mark_write_failures"),
        ("snowflake_id_guard_clashes_total", "guard_clashes"),
        ("snowflake_id_guard_evidence_total", "guard_evidence"),
        ("snowflake_id_sequence_exhaustions_total", "sequence_exhaustions"),
        ("snowflake_id_marks_replayed_total", "marks_replayed"),
    ] {
        assert_eq!(sample(&samples, metric, &node), int(column), "{metric}");
    }
    assert!(int("ids_issued") >= 5002.0 && int("clock_step_backs") >= 2.0 && int("waits") >= 1.0);
    let seconds = |metric: &str, column: &str| {
        assert_eq!(sample(&samples, metric, &node), int(column) / 1000.0, "{metric}");
    };
    seconds("snowflake_id_max_clock_drift_seconds", "max_clock_drift_ms");
    seconds("snowflake_id_max_wait_seconds", "max_wait_ms");
    seconds("snowflake_id_tick_seconds", "tick_ms");
    seconds("snowflake_id_largest_clock_step_back_seconds", "largest_step_back_ms");
    assert!(sample(&samples, "snowflake_id_largest_clock_step_back_seconds", &node) >= 3.0, "the second step");
    for (metric, column) in [
        ("snowflake_id_mark_wal_seconds_total", "mark_wal_time_ms"),
        ("snowflake_id_mark_file_seconds_total", "mark_file_time_ms"),
    ] {
        let ms: f64 = row.get(column);
        assert!((sample(&samples, metric, &node) - ms / 1000.0).abs() < 1e-9, "{metric}");
    }
    assert!(int("marks_written") >= 1.0);
    // Drift moves with the clock: the scrape's and the later read's differ by the time between.
    let drift = sample(&samples, "snowflake_id_drift_seconds", &node);
    assert!((drift - int("drift_ms") / 1000.0).abs() <= 1.0 && drift >= 0.0, "{drift}");
    let waited: f64 = row.get("wait_time_ms");
    assert!((sample(&samples, "snowflake_id_clock_wait_seconds_total", &node) - waited / 1000.0).abs() < 1e-9);
    assert!(waited >= 300.0, "max_wait was waited: {waited}");
    let mark: f64 =
        s.query_one("SELECT extract(epoch FROM high_water_mark)::float8 FROM snowflake_status()", &[]).unwrap().get(0);
    assert_eq!(sample(&samples, "snowflake_id_high_water_mark_timestamp_seconds", &node), mark);
    assert!(sample(&samples, "snowflake_id_last_clash_timestamp_seconds", &node).is_nan(), "no clash: NaN");
    // What is left before a refusal: no clock_back field here (NaN), the
    // timestamp range's end, a tick's IDs; and the mark is known.
    assert!(sample(&samples, "snowflake_id_clock_back_left", &node).is_nan(), "no clock_back field: NaN");
    let end: f64 = s
        .query_one("SELECT extract(epoch FROM timestamp_range_end)::float8 FROM snowflake_status()", &[])
        .unwrap()
        .get(0);
    assert_eq!(sample(&samples, "snowflake_id_timestamp_range_end_seconds", &node), end);
    assert_eq!(sample(&samples, "snowflake_id_ids_per_tick", &node), int("ids_per_tick"));
    assert_eq!(sample(&samples, "snowflake_id_mark_unknown", &node), 0.0, "the mark is known");

    // One refusal, by max_wait; every other reason at zero.
    let refusals = samples.get("snowflake_id_refusals_total").expect("refusals are served");
    assert_eq!(refusals.len(), 10, "{refusals:?}");
    for (labels, value) in refusals {
        let reason = labels.get("reason").expect("a reason");
        let column = format!("refused_{reason}");
        assert_eq!(*value, int(&column), "{reason}");
        assert_eq!(*value, if reason == "max_wait" { 1.0 } else { 0.0 }, "{reason}");
    }

    // Who the server is.
    let system: i64 = s.query_one("SELECT system_identifier FROM pg_control_system()", &[]).unwrap().get(0);
    let system = system.to_string();
    let info = [
        ("datacenter_id", "3"),
        ("worker_id", "17"),
        ("system_identifier", system.as_str()),
        ("timeline", "1"),
        ("layout", "timestamp:41,datacenter:5,worker:5,sequence:12"),
        ("id_space", "0"),
    ];
    assert_eq!(sample(&samples, "snowflake_id_node_info", &info), 1.0);
}

#[test]
fn an_older_sql_loses_the_series_the_absence_alert_watches_until_the_update() {
    if !exporter_here() {
        return;
    }
    // The library is new, the database's SQL the release before (between
    // the restart and ALTER EXTENSION ... UPDATE): the shipped queries fail,
    // and the exporter says so while it reaches the database, which is what
    // SnowflakeMetricsAbsent and SnowflakeMetricsQueryFailing read
    // (monitoring/alerts_test.yml).
    let sql = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let _previous = install_extension_file(&sql.join("snowflake_id--0.9.0.sql"));
    let c = Cluster::new("monolder", &[]);
    c.start();
    c.connect()
        .batch_execute(
            "CREATE EXTENSION snowflake_id VERSION '0.9.0'; CREATE ROLE snowflake_exporter LOGIN IN ROLE pg_monitor",
        )
        .unwrap();
    let exporter = Exporter::start(&c, "snowflake_exporter");
    let samples = parse(&exporter.scrape());
    let value = |name: &str| samples.get(name).and_then(|series| series.first()).map(|(_, v)| *v);
    assert_eq!(value("pg_up"), Some(1.0), "the exporter reaches the database");
    assert_eq!(value("pg_exporter_last_scrape_error"), Some(1.0), "a query failed");
    assert_eq!(value("snowflake_id_ids_issued_total"), None, "the main query's series are gone");

    c.connect().batch_execute("ALTER EXTENSION snowflake_id UPDATE").unwrap();
    let samples = parse(&exporter.scrape());
    let value = |name: &str| samples.get(name).and_then(|series| series.first()).map(|(_, v)| *v);
    assert_eq!(value("pg_exporter_last_scrape_error"), Some(0.0));
    assert!(value("snowflake_id_ids_issued_total").is_some(), "the series are back");
}
