//! The wall clock misbehaving under a running server, through libfaketime: steps
//! back while backends generate, a strict drift bound, a used-up sequence, and
//! the clock_back field. Every ID goes into a table with a primary key.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{assert_phases_increase, db_error, refused, Cluster, Load};

fn status(s: &mut postgres::Client, column: &str) -> i64 {
    s.query_one(&format!("SELECT ({column})::bigint FROM snowflake_status()"), &[]).unwrap().get(0)
}

#[test]
fn steps_back_of_two_seconds_a_minute_and_an_hour_under_load() {
    let c = Cluster::with_fake_clock("stepback", &[]);
    c.start();
    let clock = c.clock.as_ref().unwrap();
    let load = Load::start(&c, 4, 500);
    let mut offset = 0;
    let mut since_the_hour = Instant::now();
    for back in [2, 60, 3600] {
        load.wait_for_rows(1000);
        load.next_phase();
        offset -= back;
        clock.set_offset(offset);
        since_the_hour = Instant::now();
    }
    load.wait_for_rows(1000);
    let errors = load.finish();
    assert!(errors.is_empty(), "generation failed: {errors:?}");
    let mut s = c.session();
    let per_phase = assert_phases_increase(&mut s, 4);
    assert!(per_phase.iter().all(|&n| n >= 500), "{per_phase:?}");
    assert!(status(&mut s, "clock_step_backs") >= 3);
    assert!(status(&mut s, "largest_step_back_ms") > 3_590_000, "the hour, less the time between two readings");
    // The IDs run ahead of the clock that went back by an hour, less the time since then.
    let since = since_the_hour.elapsed().as_millis() as i64;
    assert!(status(&mut s, "drift_ms") + since >= 3_600_000, "IDs run ahead of the clock that went back");
    let log = c.log();
    assert!(log.contains("WARNING:  system clock went back by"), "{log}");
}

#[test]
fn a_strict_drift_bound_waits_for_the_clock_then_refuses() {
    // max_wait long at first: only the timeout or the cancel can end those
    // waits, however long the canceller takes to see the call.
    let c =
        Cluster::with_fake_clock("strict", &["snowflake_id.max_clock_drift = 0", "snowflake_id.max_wait = '10min'"]);
    c.start();
    let mut s = c.session();
    let before: i64 = s.query_one("SELECT max(id) FROM snowflake_next_ids(1000) id", &[]).unwrap().get(0);
    c.clock.as_ref().unwrap().set_offset(-3600);
    let waits_before = status(&mut s, "waits");

    // Each case has a session of its own: an interrupt meant for one call can
    // never reach the next.
    // statement_timeout ends the wait...
    let mut timed = c.connect();
    timed.batch_execute("SET statement_timeout = '200ms'").unwrap();
    let e = timed.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    // 57014, not 55000 after max_wait: the timeout, not the bound, ended the wait.
    assert_eq!(db_error(&e).0, "57014", "{e}");

    // ...so does a cancel request, sent once the call is seen waiting (a
    // protocol cancel request is delivered later, through a postmaster child,
    // and one that lands after its call ended cancels the session's next).
    let mut cancelled = c.connect();
    let pid: i32 = cancelled.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let canceller = std::thread::spawn({
        let mut s = c.connect();
        let deadline = Instant::now() + Duration::from_secs(30);
        move || loop {
            assert!(Instant::now() < deadline, "the call was never seen waiting");
            let sent: bool = s
                .query_one(
                    "SELECT coalesce(bool_or(pg_cancel_backend(pid)), false) FROM pg_stat_activity
                     WHERE pid = $1 AND state = 'active' AND query = 'SELECT snowflake_next_id()'",
                    &[&pid],
                )
                .unwrap()
                .get(0);
            if sent {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let e = cancelled.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    canceller.join().unwrap();
    assert_eq!(db_error(&e).0, "57014", "{e}");
    assert_eq!(status(&mut s, "waits") - waits_before, 2, "a wait ended by a timeout or cancel counts");

    // ...and without either, snowflake_id.max_wait does (now 1 s, on a reload).
    let mut admin = c.connect();
    admin.batch_execute("ALTER SYSTEM SET snowflake_id.max_wait = '1s'").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while s.query_one("SHOW snowflake_id.max_wait", &[]).unwrap().get::<_, String>(0) != "1s" {
        assert!(Instant::now() < deadline, "the reload never reached the session");
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    let e = s.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, hint) = db_error(&e);
    assert_eq!(code, "55000", "{message}");
    assert!(message.contains("system clock is") && message.contains("behind the last ID"), "{message}");
    assert!(hint.contains("snowflake_id.max_clock_drift"), "{hint}");
    assert!(started.elapsed() >= Duration::from_millis(900), "waited for snowflake_id.max_wait");
    assert_eq!(status(&mut s, "waits") - waits_before, 3);
    // Only the last was refused by snowflake_id.max_wait: a timeout or a cancel is the client's.
    assert_eq!(refused(&c, "max_wait"), 1);

    // Once the clock is back, IDs continue above the old ones.
    c.clock.as_ref().unwrap().set_offset(0);
    let after: i64 = s.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    assert!(after > before);
}

#[test]
fn a_used_up_sequence_borrows_the_next_tick_and_never_repeats() {
    for (name, drift) in [("borrow", "1d"), ("wait", "0")] {
        let c = Cluster::new(
            name,
            &[
                "snowflake_id.layout = 'timestamp:41,worker:10,sequence:2'",
                &format!("snowflake_id.max_clock_drift = '{drift}'"),
            ],
        );
        c.start();
        let load = Load::start(&c, 4, 200);
        load.wait_for_rows(800);
        let errors = load.finish();
        assert!(errors.is_empty(), "{name}: {errors:?}");
        let mut s = c.session();
        // 200 IDs in one call of 4 a tick: full ticks (borrowed or waited for), whatever the speed.
        s.batch_execute("INSERT INTO ids SELECT id, 0, -1, 0 FROM snowflake_next_ids(200) AS id").unwrap();
        assert_phases_increase(&mut s, 1);
        assert!(status(&mut s, "sequence_exhaustions") > 0, "{name}");
        if drift == "0" {
            assert!(status(&mut s, "waits") > 0, "with no drift allowed, a full tick waits for the next");
            assert_eq!(status(&mut s, "ticks_borrowed"), 0);
        } else {
            assert!(status(&mut s, "ticks_borrowed") > 0, "{name}");
        }
        // Four IDs per millisecond at most.
        let per_tick: i64 = s
            .query_one("SELECT max(n) FROM (SELECT count(*) n FROM ids GROUP BY snowflake_timestamp(id)) t", &[])
            .unwrap()
            .get(0);
        assert!(per_tick <= 4, "{per_tick} IDs in one tick");
    }
}

#[test]
fn the_clock_back_field_counts_step_backs_and_survives_a_restart() {
    let c = Cluster::with_fake_clock(
        "clockback",
        &[
            "snowflake_id.layout = 'clock_back:2,timestamp:39,datacenter:5,worker:5,sequence:12'",
            "snowflake_id.max_clock_drift = '1s'",
        ],
    );
    c.start();
    let clock = c.clock.as_ref().unwrap();
    let mut s = c.session();
    s.batch_execute(common::IDS_TABLE).unwrap();
    let insert = "INSERT INTO ids SELECT id, $1 FROM snowflake_next_ids(2000) id";
    s.execute(insert, &[&0i32]).unwrap();
    clock.set_offset(-3600);
    s.execute(insert, &[&1i32]).unwrap();
    let row = s
        .query_one(
            "SELECT d.clock_back, abs(extract(epoch FROM d.ts - (now() ))) < 60, st.clock_back, st.drift_ms
             FROM ids, snowflake_decode(ids.id) d, snowflake_status() st WHERE phase = 1 ORDER BY id DESC LIMIT 1",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 1, "a step back beyond the bound starts era 1");
    assert!(row.get::<_, bool>(1), "era 1 timestamps follow the clock that went back");
    assert_eq!(row.get::<_, i32>(2), 1);
    assert!(row.get::<_, i64>(3) < 1000, "no drift in the new era");
    // The warning says what clock_back mode did, not what borrowing would.
    let log = c.log();
    assert!(
        log.contains("so snowflake_id counts it in the clock_back field and continues with the clock's time"),
        "{log}"
    );
    drop(s);

    c.stop();
    c.start();
    let mut s = c.session();
    s.execute(insert, &[&2i32]).unwrap();
    assert_eq!(status(&mut s, "clock_back"), 1, "the era is kept across a restart");
    assert_phases_increase(&mut s, 3);
}

#[test]
fn a_used_up_clock_back_field_is_an_error_not_a_wrap() {
    let c = Cluster::with_fake_clock(
        "clockbackfull",
        &[
            "snowflake_id.layout = 'clock_back:1,timestamp:40,worker:10,sequence:12'",
            "snowflake_id.max_clock_drift = 0",
        ],
    );
    c.start();
    let clock = c.clock.as_ref().unwrap();
    let mut s = c.session();
    s.query_one("SELECT snowflake_next_id()", &[]).unwrap();
    clock.set_offset(-60);
    let era1: i32 = s.query_one("SELECT clock_back FROM snowflake_decode(snowflake_next_id())", &[]).unwrap().get(0);
    assert_eq!(era1, 1);
    clock.set_offset(-120);
    let e = s.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, hint) = db_error(&e);
    assert_eq!(code, "2200H", "{message}");
    assert!(message.contains("clock_back field"), "{message}");
    assert_eq!(refused(&c, "exhausted"), 1);
    assert!(!hint.is_empty());
}

#[test]
fn an_exhausted_time_range_is_an_error_at_once_even_after_the_clock_went_back() {
    // A range that ends 20 seconds from now: 20 bits of milliseconds, 16 IDs each.
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let epoch = now_ms - (1 << 20) + 20_000;
    let c = Cluster::with_fake_clock(
        "rangeend",
        &[
            "snowflake_id.layout = 'timestamp:20,worker:10,sequence:4'",
            &format!("snowflake_id.epoch = {epoch}"),
            "snowflake_id.max_clock_drift = '1min'",
            "snowflake_id.max_wait = '5min'",
        ],
    );
    c.start();
    let mut s = c.session();
    // Borrowing runs the generator to the end of the range.
    let e = s.query_one("SELECT count(*) FROM snowflake_next_ids(1000000)", &[]).unwrap_err();
    assert_eq!(db_error(&e).0, "2200H", "{e}");
    // With the clock a minute back, waiting cannot help: the error comes at once.
    c.clock.as_ref().unwrap().set_offset(-60);
    let started = Instant::now();
    let e = s.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, _) = db_error(&e);
    assert_eq!(code, "2200H", "{message}");
    assert!(message.contains("time range is used up"), "{message}");
    // Far below max_wait (5 minutes), which a wait would last.
    assert!(started.elapsed() < Duration::from_secs(120), "no wait for snowflake_id.max_wait");
}

#[test]
fn a_host_that_boots_with_its_clock_before_the_epoch_starts_and_generates_once_the_clock_is_right() {
    // The default epoch is 2025-01-01; the host's clock says two years earlier
    // (no RTC before NTP, a restored VM) when the server starts.
    let c = Cluster::with_fake_clock("bootclock", &[]);
    let clock = c.clock.as_ref().unwrap();
    let now_s = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let in_2023 = 1_672_531_200 - now_s; // 2023-01-01
    clock.set_offset(in_2023);
    c.start();
    let mut s = c.session();
    let year: f64 = s.query_one("SELECT extract(year FROM clock_timestamp())::float8", &[]).unwrap().get(0);
    assert_eq!(year, 2023.0, "the server runs with the wrong clock");
    let e = s.query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
    let (code, message, hint) = db_error(&e);
    assert_eq!(code, "55000", "{message}");
    assert_eq!(message, "could not generate a snowflake ID: the system clock is before snowflake_id.epoch");
    assert!(hint.starts_with("Check the system clock"), "{hint}");
    let issued: i64 = status(&mut s, "ids_issued");
    assert_eq!(issued, 0);
    // NTP sets the clock right: the next call succeeds, no restart.
    clock.set_offset(0);
    let id: i64 = s.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
    let decoded: bool =
        s.query_one("SELECT abs(extract(epoch FROM snowflake_timestamp($1) - now())) < 60", &[&id]).unwrap().get(0);
    assert!(decoded, "the ID carries the right time");
}

#[test]
fn an_epoch_in_the_future_or_a_range_that_is_over_starts_the_server_and_refuses_per_call() {
    let c = Cluster::new("futureepoch", &["include_if_exists = 'case.conf'"]);
    let cases = [
        ("snowflake_id.epoch = '2999-01-01'", "55000", "the system clock is before snowflake_id.epoch"),
        // 28 bits of seconds from 2010 ran out in 2018.
        (
            "snowflake_id.layout = 'timestamp:28,sequence:10'\nsnowflake_id.epoch = '2010-01-01'\nsnowflake_id.tick_ms = 1000",
            "2200H",
            "the snowflake layout's time range is used up",
        ),
    ];
    for (settings, code, message) in cases {
        c.write_data_file("case.conf", format!("{settings}\n").as_bytes());
        c.start();
        let e = c.session().query_one("SELECT snowflake_next_id()", &[]).unwrap_err();
        let (got_code, got_message, _) = db_error(&e);
        assert_eq!(got_code, code, "{settings}: {got_message}");
        assert!(got_message.ends_with(message), "{settings}: {got_message}");
        let reason = if code == "55000" { "before_epoch" } else { "exhausted" };
        assert_eq!(refused(&c, reason), 1, "{settings}");
        c.stop();
    }
}
