//! The clients: each picks a generating server and an operation from its
//! own seeded stream, and records every ID it receives, committed or not,
//! and every error it sees.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::record::{now_us, Id, Recorder};
use crate::rng::Rng;

/// A server clients generate on now, for one lineage (`P`: the primary and
/// the servers promoted or restored from it; `Q`: the second server).
#[derive(Clone, Debug)]
pub struct Target {
    pub server: String,
    pub port: u16,
}

/// Where each lineage generates now; the fault procedures move it.
#[derive(Clone, Default)]
pub struct Targets {
    by_lineage: Arc<RwLock<HashMap<&'static str, Target>>>,
    /// Calls on lineage P under way (see `p_calls_in_flight`).
    p_in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

impl Targets {
    /// Calls on lineage P that have started and whose outcome is not
    /// recorded yet: a takeover reads the largest ID that got out once none is.
    pub fn p_calls_in_flight(&self) -> usize {
        self.p_in_flight.load(Ordering::SeqCst)
    }

    pub fn set(&self, lineage: &'static str, server: &str, port: u16) {
        self.by_lineage.write().unwrap().insert(lineage, Target { server: server.to_string(), port });
    }

    /// Clients leave `lineage` alone until it is set again.
    pub fn pause(&self, lineage: &str) {
        self.by_lineage.write().unwrap().remove(lineage);
    }

    pub fn get(&self, lineage: &str) -> Option<Target> {
        self.by_lineage.read().unwrap().get(lineage).cloned()
    }
}

/// The operations, with their weights: snowflake_next_id() as a default,
/// alone, in bulk and rolled back; an identity column and a pooled
/// allocator through registered sequences (sequence mode).
const OPERATIONS: [(&str, u64); 6] =
    [("insert", 40), ("select", 25), ("bulk", 10), ("rollback", 25), ("identity", 15), ("pooled", 5)];

/// The pooled allocator's sequence increments by this (fleet.rs), and is
/// registered with block mode 'either': a call returning v reserves every ID
/// from v - POOL to v + POOL - 1, the blocks of every reading (Hibernate 3's
/// v-n ..= v-1, pooled's v-n+1 ..= v, pooled-lo's v ..= v+n-1), all recorded.
const POOL: i64 = 20;

struct Connection {
    port: u16,
    client: postgres::Client,
    timeline: i32,
}

fn connect(port: u16) -> Result<Connection, postgres::Error> {
    let mut client = postgres::Config::new()
        .host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname("postgres")
        .connect_timeout(Duration::from_secs(3))
        .connect(postgres::NoTls)?;
    // A synchronous standby that is down makes calls wait: the timeout ends them (57014).
    client.batch_execute("SET statement_timeout = '3s'")?;
    let timeline: Option<i32> = client.query_one("SELECT timeline FROM snowflake_status()", &[])?.get(0);
    Ok(Connection { port, client, timeline: timeline.unwrap_or(-1) })
}

/// Runs one client until `stop`.
pub fn run(n: usize, seed: u64, targets: Targets, rec: Recorder, stop: Arc<AtomicBool>) {
    let mut rng = Rng::fork(seed, 1000 + n as u64);
    let mut conns: HashMap<&'static str, Connection> = HashMap::new();
    let total: u64 = OPERATIONS.iter().map(|o| o.1).sum();
    while !stop.load(Ordering::Relaxed) {
        let lineage: &'static str = if rng.chance(65) { "P" } else { "Q" };
        let mut roll = rng.range(0, total - 1);
        let op = OPERATIONS.iter().find(|o| {
            roll < o.1 || {
                roll -= o.1;
                false
            }
        });
        let op = op.map_or("insert", |o| o.0);
        let bulk = rng.range(2, 64) as i32;
        // A few milliseconds between calls keep the history a size the
        // checker reads in seconds, also for an hour's run.
        std::thread::sleep(Duration::from_millis(rng.range(1, 8)));
        let Some(target) = targets.get(lineage) else { continue };
        if conns.get(lineage).is_none_or(|c| c.port != target.port || c.client.is_closed()) {
            conns.remove(lineage);
            match connect(target.port) {
                Ok(c) => {
                    conns.insert(lineage, c);
                }
                Err(e) => {
                    report(&rec, n, &target.server, lineage, "connect", &e);
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
        }
        let conn = conns.get_mut(lineage).expect("connected above");
        let on_p = lineage == "P";
        if on_p {
            targets.p_in_flight.fetch_add(1, Ordering::SeqCst);
        }
        let started_us = now_us();
        let result = call(&mut conn.client, op, n, bulk);
        let ended_us = now_us();
        match result {
            Ok((ids, committed)) => {
                let ids: Vec<Id> = ids
                    .into_iter()
                    .map(|id| Id {
                        id,
                        server: target.server.clone(),
                        lineage,
                        timeline: conn.timeline,
                        client: n,
                        kind: op,
                        started_us,
                        ended_us,
                        committed,
                    })
                    .collect();
                rec.ids(&ids);
            }
            Err(e) => {
                report(&rec, n, &target.server, lineage, op, &e);
                conns.remove(lineage);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if on_p {
            targets.p_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// One operation: the IDs it received, and whether they are stored in a
/// committed row.
fn call(c: &mut postgres::Client, op: &str, n: usize, bulk: i32) -> Result<(Vec<i64>, bool), postgres::Error> {
    let tag = format!("c{n}");
    match op {
        "insert" => {
            let row = c.query_one("INSERT INTO t (v) VALUES ($1) RETURNING id", &[&tag])?;
            Ok((vec![row.get(0)], true))
        }
        "select" => Ok((vec![c.query_one("SELECT snowflake_next_id()", &[])?.get(0)], false)),
        "bulk" => {
            let rows = c.query("SELECT id FROM snowflake_next_ids($1) AS id", &[&bulk])?;
            Ok((rows.iter().map(|r| r.get(0)).collect(), false))
        }
        "identity" => {
            let row = c.query_one("INSERT INTO ts (v) VALUES ($1) RETURNING id", &[&tag])?;
            Ok((vec![row.get(0)], true))
        }
        "pooled" => {
            let v: i64 = c.query_one("SELECT nextval('pooled')", &[])?.get(0);
            Ok(((v - POOL..=v + POOL - 1).collect(), false))
        }
        _ => {
            let mut tx = c.transaction()?;
            let id: i64 = tx.query_one("INSERT INTO t (v) VALUES ($1) RETURNING id", &[&tag])?.get(0);
            tx.rollback()?;
            Ok((vec![id], false))
        }
    }
}

fn report(rec: &Recorder, n: usize, server: &str, lineage: &str, op: &str, e: &postgres::Error) {
    let (sqlstate, message) = match e.as_db_error() {
        Some(db) => (db.code().code().to_string(), db.message().to_string()),
        None => (String::new(), e.to_string()),
    };
    rec.error(n, server, lineage, op, &sqlstate, &message);
}
