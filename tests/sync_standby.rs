//! Synchronous standbys: a call that makes a mark waits for them as a commit
//! would, so an ID a bare SELECT handed out is known to a standby that may be
//! promoted; cancel, statement_timeout and synchronous_commit = local work as
//! for a commit.

mod common;

use std::time::{Duration, Instant};

use common::{db_error, refused, Cluster};

fn marks(c: &Cluster) -> i64 {
    c.one("SELECT marks_written FROM snowflake_status()")
}

#[test]
fn a_mark_waits_for_the_synchronous_standby_and_a_promoted_one_continues_above_a_bare_select() {
    // 16 IDs per tick: a bulk call of a million runs the IDs a minute ahead
    // of the clock, whatever the machine's speed.
    let small_sequence = "snowflake_id.layout = 'timestamp:49,datacenter:5,worker:5,sequence:4'";
    let primary = Cluster::new("syncprimary", &[small_sequence, "snowflake_id.worker_id = 1"]);
    primary.start();
    // Before the standby is named: a commit would wait for it.
    primary.session().batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next_id())").unwrap();
    let standby = Cluster::standby_of(&primary, "syncstandby", &[]);
    // Named at a restart, not a reload: every backend sees it at once (a
    // reload reaches the server's shared view a moment later).
    primary.stop();
    primary.set("synchronous_standby_names = 'syncstandby'");
    primary.start();

    // With the standby down, the first call makes a mark, and waits for the
    // standby before it hands out an ID; statement_timeout ends the wait.
    let timed = || {
        let mut c = primary.connect();
        c.batch_execute("SET statement_timeout = '1s'").unwrap();
        c
    };
    let expect_timeout = |c: &mut postgres::Client, sql: &str| {
        let started = Instant::now();
        let e = c.batch_execute(sql).unwrap_err();
        let (code, message, _) = db_error(&e);
        assert_eq!(code, "57014", "{sql}: {message}");
        // It waited (the standby is down) until the timeout, which 57014 says ended it.
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(900), "{sql}: {waited:?}");
    };
    let written = marks(&primary);
    let mut s = timed();
    expect_timeout(&mut s, "SELECT snowflake_next_id()");
    assert_eq!(refused(&primary, "standby_wait"), 1);
    assert!(marks(&primary) > written, "the mark was written, then waited for");
    // Every session that asks for the standby waits for the mark, also one
    // that did not write it.
    expect_timeout(&mut timed(), "SELECT snowflake_next_id()");
    // A multi-row statement stops at its timeout too.
    expect_timeout(&mut timed(), "INSERT INTO t SELECT FROM generate_series(1, 100000)");
    // A session that does not ask for a synchronous standby does not wait;
    // the marks it writes are still waited for by the sessions that ask.
    let mut local = primary.connect();
    local.batch_execute("SET synchronous_commit = local").unwrap();
    local.batch_execute("SELECT count(*) FROM snowflake_next_ids(1000000)").unwrap();
    expect_timeout(&mut timed(), "SELECT snowflake_next_id()");
    drop(local);

    standby.start();
    standby.wait_for_replay_of(&primary);
    s.batch_execute("RESET statement_timeout").unwrap();
    // Once the standby has the marks, the same calls go through.
    primary.connect().batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)").unwrap();
    // Bare SELECTs: no row, no commit. The burst runs the IDs seconds ahead
    // of the clock, so only the marks the standby received keep it above them
    // once promoted.
    let taken: i64 = s
        .query_one("SELECT max(id) FROM (SELECT snowflake_next_id() AS id FROM generate_series(1, 10)) i", &[])
        .unwrap()
        .get(0);
    let burst: i64 = s.query_one("SELECT max(id) FROM snowflake_next_ids(2000000) id", &[]).unwrap().get(0);
    assert!(burst > taken);
    let ahead: bool = standby.one(&format!("SELECT snowflake_timestamp({burst}) > clock_timestamp() + interval '1s'"));
    assert!(ahead, "the burst ran ahead of the standby's clock");
    primary.stop_immediate();
    standby.promote();
    standby.wait_until_writable();
    let next: i64 = standby.one("SELECT snowflake_next_id()");
    assert!(next > burst, "the promoted standby continues above the IDs handed out: {next} after {burst}");
}

/// Sets `synchronous_standby_names` as a DBA does while the server runs.
fn name_synchronous_standbys(c: &Cluster, names: &str) {
    let mut admin = c.connect();
    admin.batch_execute(&format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'")).unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
}

/// Whether the backend `pid` comes to wait for synchronous standbys within `limit`.
fn waits_for_standbys(c: &Cluster, pid: i32, limit: Duration) -> bool {
    let mut admin = c.connect();
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let event: Option<String> =
            admin.query_one("SELECT wait_event FROM pg_stat_activity WHERE pid = $1", &[&pid]).unwrap().get(0);
        if event.as_deref() == Some("SyncRep") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A session's backend pid, and a call to generate an ID running in it.
type Running<T> = (i32, std::thread::JoinHandle<Result<T, postgres::Error>>);

fn run_in_session<T: Send + 'static>(
    c: &Cluster,
    call: impl FnOnce(&mut postgres::Client) -> Result<T, postgres::Error> + Send + 'static,
) -> Running<T> {
    let mut s = c.connect();
    let pid: i32 = s.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    (pid, std::thread::spawn(move || call(&mut s)))
}

#[test]
fn a_statement_running_when_synchronous_standby_names_is_set_waits_from_then_on() {
    let primary = Cluster::new("syncset", &[]);
    primary.start();
    primary.session();
    // A backend rereads the configuration only between statements: the
    // shared view of synchronous_standby_names decides, as for a commit.
    // A statement that would run for hours, taking an ID every 10 ms.
    let (pid, run) = run_in_session(&primary, |s| {
        s.batch_execute("SET statement_timeout = '10min'")?;
        s.query("SELECT snowflake_next_id(), pg_sleep(0.01) FROM generate_series(1, 1000000)", &[]).map(|r| r.len())
    });
    let mut admin = primary.connect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while admin
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", &[&pid])
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(Instant::now() < deadline, "the statement never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    name_synchronous_standbys(&primary, "nosuch");
    let waited = waits_for_standbys(&primary, pid, Duration::from_secs(120));
    admin.query_one("SELECT pg_cancel_backend($1)", &[&pid]).unwrap();
    let result = run.join().unwrap();
    assert!(waited, "the statement did not wait for the standby named while it ran: {result:?}");
    let e = result.unwrap_err();
    assert_eq!(db_error(&e).0, "57014", "{e}");
}

#[test]
fn only_a_cancel_or_termination_fails_a_wait_for_the_standbys() {
    let primary = Cluster::new("syncinterrupt", &["log_min_messages = log"]);
    primary.start();
    primary.session();
    primary.stop();
    // Named at start: the first call's mark waits for a standby that never comes.
    primary.set("synchronous_standby_names = 'nosuch'");
    primary.start();
    let next_id = |s: &mut postgres::Client| s.query_one("SELECT snowflake_next_id()", &[]).map(|r| r.get::<_, i64>(0));
    // Asking a waiting backend to log its memory contexts interrupts it too;
    // only the cancel that follows ends its wait, with an error.
    let (pid, run) = run_in_session(&primary, next_id);
    assert!(waits_for_standbys(&primary, pid, Duration::from_secs(120)), "no wait");
    primary.one::<bool>(&format!("SELECT pg_log_backend_memory_contexts({pid})"));
    std::thread::sleep(Duration::from_millis(300));
    primary.one::<bool>(&format!("SELECT pg_cancel_backend({pid})"));
    let e = run.join().unwrap().unwrap_err();
    assert_eq!(db_error(&e).0, "57014", "{e}");

    // The same interrupt, then the DBA stops asking for standbys: the wait
    // ends without them, as a commit's does, and the call hands out its ID.
    let (pid, run) = run_in_session(&primary, next_id);
    assert!(waits_for_standbys(&primary, pid, Duration::from_secs(120)), "no wait");
    primary.one::<bool>(&format!("SELECT pg_log_backend_memory_contexts({pid})"));
    std::thread::sleep(Duration::from_millis(300));
    name_synchronous_standbys(&primary, "");
    let id = run.join().unwrap().unwrap_or_else(|e| panic!("no ID once no standby is asked for: {:?}", db_error(&e)));
    assert!(id > 0);
    let logged = format!("logging memory contexts of PID {pid}");
    assert!(primary.log().contains(&logged), "the interrupt was served after the call:\n{}", primary.log());
}
