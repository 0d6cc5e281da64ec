//! Many servers, one ID space: nodes with their own datacenter and worker
//! numbers generate keys concurrently, and logical replication merges every
//! node's rows into an aggregator without a conflict.

mod common;

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use common::Cluster;

/// `generated_after` comes before `id`: column defaults are evaluated in
/// column order, so it is read before the ID's clock reading, and
/// `created_at` after.
const EVENTS: &str = "CREATE TABLE events (
    generated_after timestamptz NOT NULL DEFAULT clock_timestamp(),
    id bigint PRIMARY KEY DEFAULT snowflake_next_id(),
    node text NOT NULL,
    client int NOT NULL,
    n int NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp())";

const LOGICAL: [&str; 3] = ["wal_level = logical", "max_replication_slots = 10", "max_wal_senders = 10"];

struct Node {
    name: &'static str,
    datacenter: i32,
    worker: i32,
    cluster: Cluster,
}

fn node(name: &'static str, datacenter: i32, worker: i32) -> Node {
    node_with(name, datacenter, worker, &[])
}

fn node_with(name: &'static str, datacenter: i32, worker: i32, extra: &[&str]) -> Node {
    let dc = format!("snowflake_id.datacenter_id = {datacenter}");
    let w = format!("snowflake_id.worker_id = {worker}");
    let mut settings: Vec<&str> = LOGICAL.to_vec();
    settings.push(&dc);
    settings.push(&w);
    settings.extend_from_slice(extra);
    let cluster = Cluster::new(name, &settings);
    cluster.start();
    Node { name, datacenter, worker, cluster }
}

/// Creates `events` on every node, publishes it, and subscribes `subscriber` to each.
fn publish_to(nodes: &[Node], subscriber: &mut postgres::Client) {
    for n in nodes {
        n.cluster
            .session()
            .batch_execute(&format!("{EVENTS}; CREATE PUBLICATION events_pub FOR TABLE events"))
            .unwrap();
        subscriber
            .batch_execute(&format!(
                "CREATE SUBSCRIPTION from_{} CONNECTION '{}' PUBLICATION events_pub",
                n.name,
                conninfo(&n.cluster)
            ))
            .unwrap();
    }
}

fn conninfo(c: &Cluster) -> String {
    format!("host=127.0.0.1 port={} user=postgres dbname=postgres", c.port)
}

/// `clients` connections per node insert `batches` batches of `batch` rows each, all at once.
fn generate(nodes: &[&Node], table: &str, clients: i32, batches: i32, batch: i32) {
    let start = std::sync::Arc::new(std::sync::Barrier::new(nodes.len() * clients as usize));
    thread::scope(|s| {
        for n in nodes {
            for client in 0..clients {
                let start = start.clone();
                let name = n.name;
                let cluster = &n.cluster;
                let table = table.to_string();
                s.spawn(move || {
                    let mut c = cluster.connect();
                    start.wait();
                    for b in 0..batches {
                        let from = b * batch + 1;
                        c.execute(
                            &format!(
                                "INSERT INTO {table} (node, client, n) SELECT $1, $2, g FROM generate_series($3::int, $4::int) g"
                            ),
                            &[&name, &client, &from, &(from + batch - 1)],
                        )
                        .unwrap();
                    }
                });
            }
        }
    });
}

fn count(c: &mut postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

/// Waits until the subscriber has `want` rows in `table`.
fn wait_for_rows(c: &mut postgres::Client, table: &str, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let have = count(c, &format!("SELECT count(*) FROM {table}"));
        if have == want {
            return;
        }
        assert!(Instant::now() < deadline, "replication stalled at {have} of {want} rows in {table}");
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn three_nodes_merge_into_an_aggregator_without_conflict() {
    let nodes = [node("a", 1, 1), node("b", 1, 2), node("c", 2, 1)];
    let aggregator = Cluster::new("aggregator", &LOGICAL);
    aggregator.start();
    let mut agg = aggregator.session();
    agg.batch_execute(EVENTS).unwrap();
    publish_to(&nodes, &mut agg);

    let (clients, batches, batch) = (3, 20, 500);
    generate(&nodes.iter().collect::<Vec<_>>(), "events", clients, batches, batch);
    let per_node = i64::from(clients * batches * batch);
    wait_for_rows(&mut agg, "events", per_node * nodes.len() as i64);

    // Every row arrived, no key twice.
    for n in &nodes {
        let mut c = n.cluster.connect();
        assert_eq!(count(&mut c, "SELECT count(*) FROM events"), per_node);
        let arrived = count(&mut agg, &format!("SELECT count(*) FROM events WHERE node = '{}'", n.name));
        assert_eq!(arrived, per_node, "rows of node {}", n.name);
    }
    assert_eq!(count(&mut agg, "SELECT count(*) - count(DISTINCT id) FROM events"), 0);

    // Each node's IDs increase in insertion order (per client, whose inserts are sequential).
    let disorder = count(
        &mut agg,
        "SELECT count(*) FROM (SELECT id, lag(id) OVER (PARTITION BY node, client ORDER BY n) AS prev FROM events) s
         WHERE id <= prev",
    );
    assert_eq!(disorder, 0);

    // The decoded node fields name the node that wrote the row.
    let fields: HashMap<String, (i32, i32, i64)> = agg
        .query(
            "SELECT node, min(d.datacenter_id), min(d.worker_id), count(DISTINCT (d.datacenter_id, d.worker_id))
             FROM events, snowflake_decode(id) d GROUP BY node",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), (r.get(1), r.get(2), r.get(3))))
        .collect();
    for n in &nodes {
        assert_eq!(fields[n.name], (n.datacenter, n.worker, 1), "node {}", n.name);
    }

    // Sorted by ID, rows follow creation time across nodes, within the clocks'
    // skew (none: one machine here): IDs sort by their timestamp field first, so
    // it is enough that each ID's timestamp lies between the two clock readings
    // of its row's defaults around it, however long a backend was descheduled
    // between them.
    let outside: i64 = agg
        .query_one(
            "SELECT count(*) FROM events
             WHERE NOT (date_trunc('milliseconds', generated_after) <= snowflake_timestamp(id)
                        AND snowflake_timestamp(id) <= created_at)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(outside, 0, "IDs whose timestamp is not the time their row was made");

    // The monitoring query of the deployment guide finds nothing wrong.
    let claims = identity_conflicts(&nodes.iter().map(|n| &n.cluster).collect::<Vec<_>>());
    assert!(claims.is_empty(), "{claims:?}");
}

/// The guide's cross-node check: (datacenter, worker) pairs claimed by more
/// than one server, from each server's snowflake_status().
fn identity_conflicts(clusters: &[&Cluster]) -> Vec<(i32, i32, usize)> {
    let mut claims: HashMap<(i32, i32), Vec<String>> = HashMap::new();
    for c in clusters {
        let row = c
            .connect()
            .query_one(
                "SELECT datacenter_id, worker_id, system_identifier::text, timeline FROM snowflake_status()",
                &[],
            )
            .unwrap();
        let server = format!("{}/{}", row.get::<_, String>(2), row.get::<_, i32>(3));
        claims.entry((row.get(0), row.get(1))).or_default().push(server);
    }
    claims.into_iter().filter(|(_, servers)| servers.len() > 1).map(|((dc, w), s)| (dc, w, s.len())).collect()
}

#[test]
fn two_nodes_with_one_worker_id_collide_and_the_guide_finds_them() {
    // Four IDs per millisecond: each node's 40 000 IDs cover ten seconds of
    // positions from where it starts, so the two nodes' IDs overlap (and
    // repeat) whatever the machine's speed, not only if both happen to
    // generate in the same milliseconds.
    let layout = "snowflake_id.layout = 'timestamp:41,datacenter:5,worker:5,sequence:2'";
    let nodes = [node_with("x", 1, 5, &[layout]), node_with("y", 1, 5, &[layout])];
    let mut collector_settings = LOGICAL.to_vec();
    collector_settings.push(layout);
    let aggregator = Cluster::new("collector", &collector_settings);
    aggregator.start();
    let mut agg = aggregator.session();
    // Keyed by (node, id), so that colliding IDs both arrive and can be shown.
    agg.batch_execute(
        "CREATE TABLE events (generated_after timestamptz, id bigint, node text, client int, n int, created_at timestamptz,
                              PRIMARY KEY (node, id))",
    )
    .unwrap();
    publish_to(&nodes, &mut agg);
    generate(&nodes.iter().collect::<Vec<_>>(), "events", 2, 20, 1000);
    wait_for_rows(&mut agg, "events", 2 * 2 * 20 * 1000);

    // The guide's query on merged data: one (datacenter, worker) pair, rows from two nodes.
    let flagged: Vec<(i32, i32, i64)> = agg
        .query(
            "SELECT d.datacenter_id, d.worker_id, count(DISTINCT e.node)
             FROM events e, snowflake_decode(e.id) d
             GROUP BY 1, 2 HAVING count(DISTINCT e.node) > 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(flagged, vec![(1, 5, 2)]);
    let repeated = count(&mut agg, "SELECT count(*) FROM (SELECT id FROM events GROUP BY id HAVING count(*) > 1) s");
    assert!(repeated > 0, "two servers with one worker ID generating at once repeat IDs");
    eprintln!("two nodes with one worker ID repeated {repeated} IDs");

    // And the monitoring check across servers flags the pair before any data is merged.
    let claims = identity_conflicts(&nodes.iter().map(|n| &n.cluster).collect::<Vec<_>>());
    assert_eq!(claims, vec![(1, 5, 2)]);
}

/// PostgreSQL 16 and later can replicate both ways without loops (`origin = none`).
#[cfg(not(feature = "pg15"))]
#[test]
fn a_bidirectional_pair_writes_one_table_on_both_sides() {
    let nodes = [node("p", 1, 1), node("q", 1, 2)];
    for n in &nodes {
        n.cluster
            .session()
            .batch_execute(&format!("{EVENTS}; CREATE PUBLICATION events_pub FOR TABLE events"))
            .unwrap();
    }
    for (i, n) in nodes.iter().enumerate() {
        let other = &nodes[1 - i];
        n.cluster
            .connect()
            .batch_execute(&format!(
                "CREATE SUBSCRIPTION from_{} CONNECTION '{}' PUBLICATION events_pub WITH (origin = none, copy_data = false)",
                other.name,
                conninfo(&other.cluster)
            ))
            .unwrap();
    }
    // Subscriptions start asynchronously: make sure both apply workers are streaming.
    for n in &nodes {
        let mut c = n.cluster.connect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while count(&mut c, "SELECT count(*) FROM pg_stat_subscription WHERE received_lsn IS NOT NULL") < 1 {
            assert!(Instant::now() < deadline, "subscription on {} did not start", n.name);
            thread::sleep(Duration::from_millis(100));
        }
    }
    generate(&nodes.iter().collect::<Vec<_>>(), "events", 2, 10, 500);
    let total = 2 * 2 * 10 * 500;
    for n in &nodes {
        let mut c = n.cluster.connect();
        wait_for_rows(&mut c, "events", total);
        assert_eq!(count(&mut c, "SELECT count(*) - count(DISTINCT id) FROM events"), 0);
        let wrong_origin = count(
            &mut c,
            "SELECT count(*) FROM events, snowflake_decode(id) d
             WHERE (node = 'p' AND d.worker_id <> 1) OR (node = 'q' AND d.worker_id <> 2)",
        );
        assert_eq!(wrong_origin, 0);
    }
}
