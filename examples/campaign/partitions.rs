//! The faults of the network (net.rs makes the cuts): a synchronous standby
//! cut off, a split brain, a subscriber cut off while it generates, and a
//! subscriber whose proof of a clash must outlast a cut.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{sleep, JoinHandle};
use std::time::Duration;

use crate::common::Cluster;
use crate::fleet::{
    caught_up, guard_clashes, p_number, p_worker_setting, refs, wait_for, Fleet, Server, DATACENTER, P_WORKER,
    SPLIT_DATACENTER, TABLE,
};
use crate::net::{conninfo, Link};
use crate::record::{now_us, Id, Recorder};
use crate::rng::Rng;

/// A writer inserting rows into `table` of `cluster` until stopped; with a
/// lineage, the IDs it gets join the history as `server`'s.
struct Writer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<usize>,
}

impl Writer {
    fn start(cluster: &Cluster, table: &str, server: &str, lineage: Option<&'static str>, rec: &Recorder) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = cluster.connect();
        let timeline: i32 = c.query_one("SELECT timeline FROM snowflake_status()", &[]).unwrap().get(0);
        let insert = format!("INSERT INTO {table} (v) VALUES ('{server}') RETURNING id");
        let (stop2, rec, server) = (stop.clone(), rec.clone(), server.to_string());
        let thread = std::thread::spawn(move || {
            let mut written = 0;
            while !stop2.load(Ordering::Relaxed) {
                let started_us = now_us();
                // A cut subscriber or a promotion under way may refuse a
                // row now and then; the writer only counts what it got.
                if let Ok(row) = c.query_one(&insert, &[]) {
                    written += 1;
                    if let Some(lineage) = lineage {
                        let id = Id {
                            id: row.get(0),
                            server: server.clone(),
                            lineage,
                            timeline,
                            client: 950,
                            kind: "partition",
                            started_us,
                            ended_us: now_us(),
                            committed: true,
                        };
                        rec.ids(&[id]);
                    }
                }
                sleep(Duration::from_millis(20));
            }
            written
        });
        Writer { stop, thread }
    }

    fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

impl Fleet {
    /// Names the standby as synchronous (until the next takeover), and waits
    /// until the primary counts it so and it has replayed what the primary
    /// wrote before: from then on, every mark the primary writes waits for
    /// it. Says whether both came.
    pub fn make_standby_synchronous(&mut self) -> bool {
        let Some(standby) = &self.standby else { return false };
        let p = &self.primary.cluster;
        let sql = format!("ALTER SYSTEM SET synchronous_standby_names = '\"{}\"'", standby.name);
        let mut admin = p.connect();
        admin.batch_execute(&sql).unwrap();
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
        self.sync = true;
        let synchronous = wait_for(Duration::from_secs(60), || {
            p.one::<i64>(&format!(
                "SELECT count(*) FROM pg_stat_replication WHERE application_name = '{}' AND sync_state = 'sync'",
                standby.name
            )) > 0
        });
        // Sessions take the setting between statements.
        sleep(Duration::from_millis(500));
        let written: String = p.one("SELECT pg_current_wal_lsn()::text");
        let replayed = wait_for(Duration::from_secs(60), || {
            standby.cluster.one::<Option<bool>>(&format!("SELECT pg_last_wal_replay_lsn() >= '{written}'::pg_lsn"))
                == Some(true)
        });
        synchronous && replayed
    }

    /// The synchronous standby cut off from its primary by the network for
    /// a while, running all along: calls on the primary wait for it until
    /// their statement_timeout (57014), and none that ended before the heal
    /// may have returned an ID at or above the mark the standby holds. The
    /// fault checks that it took: the primary wrote WAL the standby never got.
    pub fn sync_standby_cut(&mut self, rng: &mut Rng) -> (String, String) {
        if self.standby.is_none() {
            return ("-".into(), "no standby".into());
        }
        let synchronous = self.make_standby_synchronous();
        let (p, standby) = (&self.primary.cluster, self.standby.as_ref().unwrap());
        self.rec.watch("P");
        let cut = self.net.cut(Link::Standby, p.port);
        let hold = rng.range(2, 8);
        sleep(Duration::from_secs(hold));
        // What the standby received is replayed, so its mark is the cut's:
        // replay stands still. (It may stop short of what was received: a
        // record cut in two by the partition is not replayed.)
        let replay = || -> Option<String> { standby.cluster.one("SELECT pg_last_wal_replay_lsn()::text") };
        let replayed = wait_for(Duration::from_secs(30), || {
            let before = replay();
            sleep(Duration::from_millis(500));
            before.is_some() && replay() == before
        });
        // The smallest ID of the mark's tick.
        let mark: Option<i64> =
            standby.cluster.one("SELECT snowflake_from_timestamp(high_water_mark) FROM snowflake_status()");
        let received: Option<String> = standby.cluster.one("SELECT pg_last_wal_receive_lsn()::text");
        let held = received.is_some_and(|lsn| p.one(&format!("SELECT pg_current_wal_lsn() > '{lsn}'::pg_lsn")));
        let heal_us = now_us();
        self.net.heal(cut);
        // The calls that ended before the heal are in the record by then.
        sleep(Duration::from_secs(1));
        let handed_out = self.rec.largest_ended_before("P", heal_us);
        let below = match (handed_out, mark) {
            (None, _) => true,
            (Some(id), Some(mark)) => id < mark,
            (Some(_), None) => false,
        };
        let ok = synchronous && replayed && held && below;
        (
            standby.name.clone(),
            format!(
                "synchronous, cut off for {hold} s ok={ok} (largest ID handed out before the heal {handed_out:?}, \
                 standby's mark {mark:?}; synchronous={synchronous} cut_held={held} replayed={replayed})"
            ),
        )
    }

    /// A split brain: an asynchronous standby of the primary, made for the
    /// fault, is cut off and promoted while the primary goes on. With the
    /// lineage's number set by hand, it has a number of its own (as
    /// docs/deployment.md asks of every server) or, in half the faults, its
    /// primary's; with `worker_id = auto` it claims one when promoted, in
    /// the primary's datacenter. Its IDs join the history, as a lineage of
    /// its own; once the link is back, its rows meet the primary's at the
    /// aggregator through logical replication (a slot made at the
    /// promotion, so they are the rows of the split). With a number of its
    /// own or a claimed one nothing may repeat or be reported; with a shared
    /// one, repeats are the documented limit, and the guard must report them.
    pub fn split_brain(&mut self, rng: &mut Rng) -> (String, String) {
        let auto = self.p_auto;
        let shared = !auto && rng.chance(50);
        let name = self.next_name("b");
        let p = &self.primary.cluster;
        let mut settings =
            vec![format!("primary_conninfo = '{} application_name={name}'", conninfo(Link::Fault, p.port))];
        let number = if shared || auto {
            (DATACENTER, P_WORKER)
        } else {
            self.splits_with_own_number += 1;
            let number = (SPLIT_DATACENTER, (self.splits_with_own_number - 1) % 31);
            settings.push(format!("snowflake_id.datacenter_id = {}", number.0));
            settings.push(format!("snowflake_id.worker_id = {}", number.1));
            number
        };
        let b = Cluster::standby_of(p, &name, &refs(&settings));
        b.start();
        let streaming = wait_for(Duration::from_secs(60), || {
            p.one::<i64>(&format!(
                "SELECT count(*) FROM pg_stat_replication WHERE application_name = '{name}' AND state = 'streaming'"
            )) > 0
        });
        let cut = self.net.cut(Link::Fault, p.port);
        b.promote();
        b.wait_until_writable();
        // Its copy of the primary's settings may name a synchronous standby.
        let mut admin = b.connect();
        admin.batch_execute("ALTER SYSTEM RESET synchronous_standby_names").unwrap();
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
        sleep(Duration::from_millis(300));
        let mut admin = b.connect();
        admin.batch_execute("CREATE PUBLICATION pub_split FOR TABLE clash").unwrap();
        admin.batch_execute("SELECT pg_create_logical_replication_slot('sub_split', 'pgoutput')").unwrap();
        let lineage: &'static str = Box::leak(format!("B{name}").into_boxed_str());
        let writer = Writer::start(&b, "clash", &name, Some(lineage), &self.rec);
        let hold = rng.range(2, 6);
        sleep(Duration::from_secs(hold));
        self.net.heal(cut);
        let before = guard_clashes(&self.a);
        let sql = format!(
            "CREATE SUBSCRIPTION sub_split CONNECTION '{}' PUBLICATION pub_split
             WITH (create_slot = false, slot_name = 'sub_split', copy_data = false)",
            conninfo(Link::Fault, b.port)
        );
        self.a.connect().batch_execute(&sql).unwrap();
        // A report of this number: the guard counts other findings too.
        let number_text = if auto {
            p_number(&b)
        } else {
            let (datacenter, worker) = number;
            format!("(datacenter {datacenter}, worker {worker})")
        };
        let reported = |a: &Cluster| {
            guard_clashes(a) > before
                && a.one::<Option<String>>("SELECT last_clash FROM snowflake_status()")
                    .is_some_and(|text| text.contains(&number_text))
        };
        // Both write on: the aggregator gets the primary's rows all the time.
        let detected = if shared {
            wait_for(Duration::from_secs(300), || reported(&self.a))
        } else {
            sleep(Duration::from_secs(2));
            false
        };
        let written = writer.stop();
        let applied = caught_up(&b, "sub_split", Duration::from_secs(120));
        let detected = detected || reported(&self.a);
        self.a.connect().batch_execute("DROP SUBSCRIPTION sub_split").unwrap();
        drop(b);
        let whose = match (shared, auto) {
            (true, _) => "shared with its old primary".to_string(),
            (false, true) => format!("claimed by worker_id = auto beside its old primary's {}", p_number(p)),
            (false, false) => "of its own".to_string(),
        };
        // The fault happened as meant: a standby that streamed, then issued
        // IDs of its own that reached the aggregator.
        let ok = streaming && written > 0 && applied;
        (
            name,
            format!(
                "promoted while cut off for {hold} s, number {number_text} {whose} detected={detected} ok={ok} \
                 (streaming={streaming} written={written} applied={applied})"
            ),
        )
    }

    /// A failover and Patroni's failback, with a split brain between (the
    /// failover kind's variant for half its rewinds). The old primary O,
    /// cut off from its standby S, goes on for a client of its own (lineage
    /// `D<O>`) with its clock ahead, while S is promoted: with a number of
    /// its own (the deployment guide's rule for a standby promoted while its
    /// old primary may still run) or the one it claims with `worker_id =
    /// auto`. O stops, its clock is set right, it is rewound onto S and,
    /// keeping its own number as configuration outside the data directory
    /// would, promoted again in S's place. With a number set by hand it must
    /// refuse IDs until the DBA's floor covers what it issued on the lost
    /// timeline (from the clients' record), and the checker holds its IDs
    /// after the failback above those; with `auto` it claims anew.
    pub fn failback_after_divergence(&mut self, standby: Server, rng: &mut Rng) -> (String, String) {
        let auto = self.p_auto;
        let (o_name, s_name) = (self.primary.name.clone(), standby.name.clone());
        let o_number_before = p_number(&self.primary.cluster);
        let cut = self.net.cut(Link::Standby, self.primary.cluster.port);
        if !auto {
            self.splits_with_own_number += 1;
            let worker = (self.splits_with_own_number - 1) % 31;
            standby.cluster.stop();
            standby
                .cluster
                .set(&format!("snowflake_id.datacenter_id = {SPLIT_DATACENTER}\nsnowflake_id.worker_id = {worker}"));
            standby.cluster.start();
        }
        // Clients leave O before S takes over, so S's floor covers what
        // they got from O; only D's client stays on O.
        self.targets.pause("P");
        standby.cluster.promote();
        standby.cluster.wait_until_writable();
        let o = std::mem::replace(&mut self.primary, standby);
        self.raise_floor_to_what_got_out();
        self.follow_primary();
        let s_number = p_number(&self.primary.cluster);
        // O's lost timeline, ahead of the clock.
        let ahead = rng.range(30, 90) as i64;
        let o_clock = o.cluster.clock.as_ref().expect("P's servers have a fake clock");
        o_clock.set_offset(ahead);
        let lineage: &'static str = Box::leak(format!("D{o_name}").into_boxed_str());
        let writer = Writer::start(&o.cluster, "clash", &o_name, Some(lineage), &self.rec);
        let hold = rng.range(2, 4);
        sleep(Duration::from_secs(hold));
        let diverged = writer.stop();
        // The lost timeline ran ahead of the wall clock (the fake clock took).
        let stopped_ms = now_us() / 1000;
        let ran_ahead = self.rec.max_of(lineage).is_some_and(|id| {
            let at: i64 = self
                .primary
                .cluster
                .connect()
                .query_one("SELECT (extract(epoch FROM snowflake_timestamp($1)) * 1000)::bigint", &[&id])
                .unwrap()
                .get(0);
            at > stopped_ms + 10_000
        });
        o.cluster.stop_immediate();
        o_clock.set_offset(0);
        self.net.heal(cut);
        let own = if auto {
            vec![]
        } else {
            vec![format!("snowflake_id.datacenter_id = {DATACENTER}"), format!("snowflake_id.worker_id = {P_WORKER}")]
        };
        let Some(o) = self.rewind_onto_primary(o, &own) else {
            self.after_takeover(None);
            return (o_name, format!("diverged {ahead} s ahead, pg_rewind failed ok=false"));
        };
        // S's clients for a moment, then the failback.
        let written: String = self.primary.cluster.one("SELECT pg_current_wal_lsn()::text");
        let following = wait_for(Duration::from_secs(60), || {
            o.cluster.one::<Option<bool>>(&format!("SELECT pg_last_wal_replay_lsn() >= '{written}'::pg_lsn"))
                == Some(true)
        });
        sleep(Duration::from_secs(rng.range(1, 3)));
        self.targets.pause("P");
        while self.targets.p_calls_in_flight() > 0 {
            sleep(Duration::from_millis(10));
        }
        self.primary.cluster.stop_immediate();
        o.cluster.promote();
        o.cluster.wait_until_writable();
        let s = std::mem::replace(&mut self.primary, o);
        drop(s);
        let o = &self.primary.cluster;
        let unknown: Option<String> = o.one("SELECT mark_unknown FROM snowflake_status()");
        let refused = o.connect().query_one("SELECT snowflake_next_id()", &[]).err().and_then(|e| e.code().cloned());
        let refused = refused.map(|code| code.code().to_string());
        // The DBA's floor: above what got out of P and of O's lost timeline.
        let floor = if auto {
            self.raise_floor_to_what_got_out()
        } else {
            let floor = self.rec.max_of("P").max(self.rec.max_of(lineage));
            if let Some(f) = floor {
                o.connect().query_one("SELECT snowflake_raise_floor($1)", &[&f]).unwrap();
            }
            floor
        };
        let o_number = p_number(&self.primary.cluster);
        self.after_takeover(None);
        // With a number set by hand, O refused until the floor; with auto
        // it did not, and claimed anew.
        let as_documented = if auto {
            refused.is_none() && o_number != o_number_before
        } else {
            refused.as_deref() == Some("55000") && unknown.as_deref() == Some("pg_rewind")
        };
        let ok = diverged > 0 && ran_ahead && following && as_documented;
        (
            o_name,
            format!(
                "diverged {ahead} s ahead for {hold} s ({diverged} IDs as {lineage}), {} promoted with number \
                 {s_number}, failed back after pg_rewind: refused={refused:?} mark_unknown={unknown:?}, floor \
                 {floor:?}, worker_id = {}, number {o_number} (before {o_number_before}) ok={ok} \
                 (ran_ahead={ran_ahead} following={following})",
                s_name,
                p_worker_setting(auto),
            ),
        )
    }

    /// The aggregator's subscription to P or Q cut off for a while, longer
    /// than the replication timeouts at times, while the aggregator issues
    /// IDs of its own (they join the history as lineage A): when the link
    /// is back it catches up, and its guard reports nothing.
    pub fn subscriber_cut(&mut self, rng: &mut Rng) -> (String, String) {
        let (sub, publisher) =
            if rng.chance(50) { ("sub_p", &self.primary.cluster) } else { ("sub_q", &self.q.cluster) };
        let writer = Writer::start(&self.a, "t", "a", Some("A"), &self.rec);
        let cut = self.net.cut(Link::Subscription, publisher.port);
        let hold = rng.range(2, 9);
        sleep(Duration::from_secs(hold));
        self.net.heal(cut);
        let written = writer.stop();
        let ok = caught_up(publisher, sub, Duration::from_secs(120));
        ("a".into(), format!("{sub} cut off for {hold} s, {written} IDs issued meanwhile, caught up ok={ok}"))
    }

    /// A subscriber Y of Q that shares Q's number, its guard refusing Q's
    /// rows as proof (guard_action = error), is cut off from Q and issues
    /// IDs of its own meanwhile, above Q's rows still to come: after the
    /// link is back, those rows must still be refused as proof past a proof,
    /// none stored. Y's IDs are not the fleet's (Q's number) and stay out of
    /// the history.
    pub fn clash_across_cut(&mut self, rng: &mut Rng) -> (String, String) {
        let name = self.next_name("y");
        let y = self.server_with_q_number(&name);
        y.session().batch_execute(&format!("{TABLE}; SELECT snowflake_guard('t')")).unwrap();
        let sql = format!(
            "CREATE SUBSCRIPTION sub_y CONNECTION '{}' PUBLICATION pub WITH (copy_data = false)",
            conninfo(Link::Fault, self.q.cluster.port)
        );
        y.connect().batch_execute(&sql).unwrap();
        // Apply stops at each refused row, and goes row by row: once the
        // count of its errors moves, every row before the refused one is in.
        let errors = |y: &Cluster| -> i64 {
            y.one("SELECT coalesce(sum(apply_error_count), 0)::bigint FROM pg_stat_subscription_stats WHERE subname = 'sub_y'")
        };
        let last_clash = |y: &Cluster| -> String {
            y.one::<Option<String>>("SELECT last_clash FROM snowflake_status()").unwrap_or_default()
        };
        // Q's clients insert into t all the time. Bounded waits: the slot
        // holds Q's WAL, on its small file system, until the subscription goes.
        let refused_before = wait_for(Duration::from_secs(60), || errors(&y) > 0);
        let q_port = self.q.cluster.port;
        let cut = self.net.cut(Link::Fault, q_port);
        let writer = Writer::start(&y, "t", "y", None, &self.rec);
        let hold = rng.range(2, 8);
        sleep(Duration::from_secs(hold));
        let written = writer.stop();
        let at_heal = errors(&y);
        self.net.heal(cut);
        let refused_after = wait_for(Duration::from_secs(60), || errors(&y) > at_heal);
        let stored: i64 = y.one("SELECT count(*) FROM t WHERE v <> 'y'");
        let past_a_proof = last_clash(&y).contains("already proven");
        y.connect().batch_execute("DROP SUBSCRIPTION sub_y").unwrap();
        drop(y);
        let ok = refused_before && written > 0 && refused_after && past_a_proof && stored == 0;
        let (datacenter, worker) = self.q_number;
        (
            name,
            format!(
                "number (datacenter {datacenter}, worker {worker}) of Q, cut off for {hold} s, {written} IDs of its own \
                 meanwhile ok={ok} (refused before={refused_before} after={refused_after} as past a proof={past_a_proof}, \
                 stored={stored})"
            ),
        )
    }
}
