use std::collections::HashSet;

use proptest::prelude::*;

use super::*;
use crate::snowflake::codec::{Codec, Node};
use crate::snowflake::layout::Layout;
use crate::snowflake::time::{TimeBase, UnixMillis};

fn template(spec: &str) -> IdTemplate {
    let codec = Codec::new(Layout::parse(spec).unwrap(), TimeBase::new(UnixMillis(0), 1).unwrap());
    codec.template(Node { datacenter: 1, worker: 2 })
}

/// A caller that writes every mark it is asked for at once, as the PostgreSQL
/// layer does when nothing fails, and keeps the last durable one.
struct Caller {
    g: Generator,
    written: Vec<Mark>,
}

impl Caller {
    fn new(spec: &str, window: u64) -> Caller {
        Caller {
            g: Generator::new(template(spec), Window::ticks(&template(spec), window), None).unwrap(),
            written: Vec::new(),
        }
    }

    fn take(&mut self, now: i64, want: u64, drift: u64) -> Result<Vec<i64>, Refusal> {
        loop {
            match self.g.reserve(now, want, drift) {
                Ok(grant) => {
                    let durable = self.g.mark();
                    assert!(grant.block.first + grant.block.len <= durable.position, "only below the durable mark");
                    let ids: Vec<i64> = grant.block.collect();
                    if let Some(m) = grant.renew {
                        self.write(m);
                    }
                    return Ok(ids);
                }
                Err(Refusal::NeedMark(m)) => self.write(m),
                Err(e) => return Err(e),
            }
        }
    }

    fn ids(&mut self, now: i64, want: u64, drift: u64) -> Vec<i64> {
        self.take(now, want, drift).expect("issued")
    }

    fn write(&mut self, m: Mark) {
        self.written.push(m);
        self.g.mark_written(m);
    }

    fn durable(&self) -> Option<Mark> {
        self.written.last().copied()
    }
}

#[test]
fn the_window_is_a_second_of_positions() {
    let t = template("timestamp:41,datacenter:5,worker:5,sequence:12");
    let window = |tick_ms| Window::of(&t, &TimeBase::new(UnixMillis(0), tick_ms).unwrap());
    assert_eq!(MARK_WINDOW_MS, 1000);
    let whole = |w: Window| (w.whole_ticks(), w.positions());
    assert_eq!(whole(window(1)), (1000, t.position(1000)));
    assert_eq!(whole(window(10)), (100, t.position(100)));
    assert_eq!(whole(window(3)), (333, t.position(333)), "rounded down");
    assert_eq!(whole(window(1000)), (1, t.position(1)));
    // A longer tick: the share of its 4096 positions that a second is.
    assert_eq!(whole(window(2000)), (0, 2048));
    assert_eq!(whole(window(60_000)), (0, 68));
    assert_eq!(whole(window(86_400_000)), (0, 1), "at least one position");
    let two_a_tick = template("timestamp:41,datacenter:5,worker:5,sequence:1");
    let one_day = Window::of(&two_a_tick, &TimeBase::new(UnixMillis(0), 86_400_000).unwrap());
    assert_eq!(whole(one_day), (0, 1));
}

const SMALL: &str = "timestamp:30,worker:3,sequence:2"; // 4 IDs per tick

/// Day ticks with a day of drift (issue 30): two crashes in a row left 0.5.0
/// two ticks ahead, refusing every call for about a day. A crash now skips
/// one position, so crash after crash in one day never stops generation and
/// never leaves a mark past the drift.
#[test]
fn crashes_with_day_ticks_never_leave_the_generator_beyond_the_drift() {
    let spec = "timestamp:41,datacenter:5,worker:5,sequence:12";
    let t = template(spec);
    let window = Window::of(&t, &TimeBase::new(UnixMillis(0), 86_400_000).unwrap());
    let (today, drift) = (700, 1);
    let mut c = Caller { g: Generator::new(t, window, None).unwrap(), written: Vec::new() };
    let mut last = 0;
    for crash in 0..1000 {
        let id = *c.take(today, 1, drift).unwrap_or_else(|e| panic!("after {crash} crashes: {e:?}")).last().unwrap();
        assert!(id > last);
        last = id;
        let mark = c.durable().unwrap();
        assert!(t.tick_of(mark.position) <= (today + drift as i64) as u64, "{crash}: {mark:?}");
        c.g = Generator::new(t, window, c.durable()).unwrap();
    }
    // Each crash skipped at most the one position its mark reserved.
    assert!(t.tick_of(c.g.mark().position) == today as u64, "{:?}", c.g.mark());
}

/// With ticks of a second or less and a drift shorter than the window, a
/// mark still reaches the whole window past the clock (one write a second),
/// and not more: after a crash the first call waits at most the window.
#[test]
fn a_short_drift_keeps_the_second_long_window() {
    let mut c = Caller::new(SMALL, 10);
    c.ids(100, 1, 0);
    assert_eq!(c.durable().unwrap().position, template(SMALL).position(110) + 1);
    // Running ahead within a drift of 30 ticks, marks reach no further than
    // it and the window's 10 ticks.
    let mut ahead = Caller::new(SMALL, 10);
    ahead.ids(100, 4 * 30, 30);
    let reach = template(SMALL).tick_of(ahead.durable().unwrap().position);
    assert!((130..=140).contains(&reach), "{reach}");
}

#[test]
fn a_fresh_generator_starts_at_the_wall_clock_once_its_first_mark_is_durable() {
    let t = template(SMALL);
    let mut g = Generator::new(t, Window::ticks(&t, 10), None).unwrap();
    let Err(Refusal::NeedMark(m)) = g.reserve(100, 1, 0) else { panic!("a first mark is needed") };
    assert_eq!(m, Mark { position: t.position(100) + 1 + t.position(10), clock_back: 0, wall: Some(100) });
    assert_eq!(g.stats().ids_issued, 0, "nothing issued before the mark is durable");
    g.mark_written(m);
    let grant = g.reserve(100, 1, 0).unwrap();
    assert_eq!(grant.block.collect::<Vec<_>>(), vec![t.encode(t.position(100), 0)]);
    assert_eq!(grant.renew, None, "far from the mark, no renewal yet");
    assert_eq!(g.stats().ids_issued, 1);
}

/// Runs for pooled allocators (issue 29): each is whole, in one tick,
/// consecutive IDs, above every ID before it, and never crosses the durable
/// mark, whatever calls of other sizes come between.
#[test]
fn a_run_is_whole_in_one_tick_and_above_everything_before() {
    let mut c = Caller::new(SMALL, 10);
    let mut last = -1;
    for (i, want) in [3u64, 1, 4, 2, 3, 3, 1, 4, 4, 2].into_iter().cycle().take(200).enumerate() {
        let now = 100 + i as i64 / 7; // slower than the IDs: runs meet partly used ticks
        let ids = if i % 3 == 0 {
            c.ids(now, want, 1000)
        } else {
            loop {
                match c.g.reserve_run(now, want, 1000) {
                    Ok(grant) => {
                        assert!(grant.block.first + grant.block.len <= c.g.mark().position);
                        if let Some(m) = grant.renew {
                            c.write(m);
                        }
                        break grant.block.collect::<Vec<_>>();
                    }
                    Err(Refusal::NeedMark(m)) => c.write(m),
                    Err(e) => panic!("{e:?}"),
                }
            }
        };
        if i % 3 != 0 {
            assert_eq!(ids.len() as u64, want, "whole");
            assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "consecutive integers: {ids:?}");
            assert_eq!(ids[0] >> 5, ids[ids.len() - 1] >> 5, "one tick: {ids:?}");
        }
        assert!(ids[0] > last, "above every ID before");
        last = *ids.last().unwrap();
    }
}

#[test]
fn a_run_that_would_cross_the_durable_mark_asks_for_a_mark_covering_it() {
    let t = template(SMALL);
    let mut c = Caller::new(SMALL, 1);
    c.ids(100, 1, 0);
    assert_eq!(c.g.mark().position, t.position(101) + 1, "a window of one tick past the first ID");
    // Three positions are left in tick 100: a run of 4 takes tick 101,
    // which the durable mark covers only in part.
    let Err(Refusal::NeedMark(m)) = c.g.reserve_run(100, 4, 5) else { panic!("no part of a run is granted") };
    assert!(m.position >= t.position(102), "{m:?}");
    c.write(m);
    let grant = c.g.reserve_run(100, 4, 5).unwrap();
    let ids: Vec<i64> = grant.block.collect();
    assert_eq!(ids, (0..4).map(|s| t.encode(t.position(101) + s, 0)).collect::<Vec<_>>());
}

#[test]
fn a_used_up_tick_borrows_the_next_within_the_drift_bound() {
    let mut c = Caller::new(SMALL, 10);
    let ids = c.ids(100, 6, 5);
    assert_eq!(ids.len(), 6);
    assert_eq!(c.g.template().tick_of(c.g.next - 1), 101);
    assert_eq!(c.g.stats().sequence_exhaustions, 1);
    assert_eq!(c.g.stats().ticks_borrowed, 1);
    assert_eq!(c.g.drift(100), 1);
    // With no drift allowed, the caller must wait for tick 102.
    c.ids(100, 2, 5);
    assert_eq!(c.take(100, 1, 1), Err(Refusal::Wait { until: 101, at_mark: false }));
    assert_eq!(c.take(100, 1, 0), Err(Refusal::Wait { until: 102, at_mark: false }));
}

#[test]
fn a_block_stops_at_the_drift_bound() {
    let mut c = Caller::new(SMALL, 10);
    let ids = c.ids(100, 1000, 2);
    assert_eq!(ids.len(), 12); // ticks 100, 101, 102
}

#[test]
fn a_block_stops_at_the_durable_mark_and_asks_for_the_rest() {
    let t = template(SMALL);
    let mut g = Generator::new(
        t,
        Window::ticks(&t, 10),
        Some(Mark { position: t.position(105), clock_back: 0, wall: Some(100) }),
    )
    .unwrap();
    // Positions 100..105 of the old mark count as issued; nothing at or above 105.
    let Err(Refusal::NeedMark(m)) = g.reserve(100, 100, 1000) else { panic!() };
    assert_eq!(m.position, t.position(105) + 100 + t.position(10), "the mark covers the whole block wanted");
    g.mark_written(Mark { position: t.position(107), ..m });
    let grant = g.reserve(100, 100, 1000).unwrap();
    assert_eq!(grant.block.len(), 8, "up to the durable mark");
    assert_eq!(grant.renew, Some(m), "and a renewal for the rest");
    g.mark_written(m);
    assert_eq!(g.reserve(100, 92, 1000).unwrap().block.len(), 92);
}

#[test]
fn a_step_back_within_the_bound_keeps_going_on_the_last_tick() {
    let mut c = Caller::new(SMALL, 10);
    let before = c.ids(1000, 1, 100);
    let after = c.ids(950, 1, 100);
    assert!(after[0] > before[0]);
    assert_eq!(c.g.template().tick_of(c.g.next - 1), 1000);
    assert_eq!(c.g.stats().clock_step_backs, 1);
    assert_eq!(c.g.stats().largest_step_back, 50);
    assert_eq!(c.g.drift(950), 50);
}

#[test]
fn a_step_back_beyond_the_bound_waits_for_the_clock() {
    let mut c = Caller::new(SMALL, 10);
    c.ids(1000, 1, 100);
    assert_eq!(c.take(800, 1, 100), Err(Refusal::Wait { until: 900, at_mark: false }));
    assert_eq!(c.g.stats().ids_issued, 1);
    assert!(!c.ids(900, 1, 100).is_empty());
}

#[test]
fn marks_are_renewed_before_they_are_reached_about_once_per_window() {
    let mut c = Caller::new(SMALL, 10);
    let mut needed = 0;
    for now in 100..400 {
        loop {
            match c.g.reserve(now, 1, 0) {
                Ok(grant) => {
                    if let Some(m) = grant.renew {
                        c.write(m);
                    }
                    break;
                }
                Err(Refusal::NeedMark(m)) => {
                    needed += 1;
                    c.write(m);
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    assert_eq!(needed, 1, "under steady load only the first call waits for a mark");
    // A mark reaches 10 ticks ahead and is renewed a quarter window before it is reached.
    let writes = c.written.len();
    assert!((38..=42).contains(&writes), "{writes} writes in 300 ticks");
    assert_eq!(c.g.stats().marks_written, writes as u64);
}

#[test]
fn the_quick_path_serves_steady_load_and_leaves_marks_and_step_backs_to_reserve() {
    let spec = "timestamp:41,datacenter:5,worker:5,sequence:12";
    let mut c = Caller::new(spec, 1000);
    let (mut quick, mut general, mut last) = (0, 0, i64::MIN);
    // 20 IDs a tick for 3000 ticks, then the clock steps back 5 ticks.
    for now in (1000..4000).chain(3995..4000) {
        for _ in 0..20 {
            let before = c.g;
            let id = match c.g.reserve_one(now, 10) {
                Some(id) => {
                    quick += 1;
                    id
                }
                None => {
                    assert_eq!(c.g, before);
                    general += 1;
                    c.ids(now, 1, 10)[0]
                }
            };
            assert!(id > last);
            last = id;
        }
    }
    // The first call, one renewal every 750 ticks, and the step back.
    assert!((5..=10).contains(&general), "{general} calls took the general path");
    assert_eq!(quick + general, 60_100);
    assert_eq!(c.g.stats().ids_issued, 60_100);
    assert_eq!(c.g.stats().clock_step_backs, 1);
}

#[test]
fn one_renewal_at_a_time_and_a_failed_one_is_asked_for_again() {
    let t = template(SMALL);
    let mut c = Caller::new(SMALL, 10);
    c.ids(100, 1, 0);
    // Come close to the durable mark: the renewal is handed to one caller only.
    let durable_tick = t.tick_of(c.g.mark().position);
    let first = c.g.reserve(durable_tick as i64 - 2, 1, 0).unwrap();
    assert!(first.renew.is_some());
    assert_eq!(c.g.reserve(durable_tick as i64 - 2, 1, 0).unwrap().renew, None, "already being written");
    c.g.mark_failed();
    let again = c.g.reserve(durable_tick as i64 - 2, 1, 0).unwrap();
    assert!(again.renew.is_some(), "asked for again after a failure");
    // Without it, IDs stop at the mark: the caller must write one first.
    let before = c.g.stats().ids_issued;
    assert!(matches!(c.g.reserve(durable_tick as i64 + 1, 1, 0), Err(Refusal::NeedMark(_))));
    assert_eq!(c.g.stats().ids_issued, before);
}

#[test]
fn a_renewal_overtaken_by_a_larger_mark_changes_nothing() {
    let mut c = Caller::new(SMALL, 10);
    c.ids(100, 1, 0);
    let big = Mark { position: c.g.mark().position + 1000, ..c.g.mark() };
    let small = Mark { position: c.g.mark().position + 10, ..c.g.mark() };
    c.g.mark_written(big);
    assert!(c.g.covers(&small));
    c.g.mark_written(small);
    assert_eq!(c.g.mark().position, big.position);
}

#[test]
fn a_restart_resumes_above_the_mark_whatever_the_clock_says() {
    let t = template(SMALL);
    let mut c = Caller::new(SMALL, 10);
    let mut before = Vec::new();
    for now in 1000..1005 {
        before.extend(c.ids(now, 3, 1_000_000));
    }
    // The clock is an hour behind after the restart.
    let mut r = Caller { g: Generator::new(t, Window::ticks(&t, 10), c.durable()).unwrap(), written: Vec::new() };
    let after = r.ids(1000 - 3_600_000, 1, 10_000_000);
    assert!(after[0] > *before.iter().max().unwrap());
    assert_eq!(r.g.stats().clock_step_backs, 1, "the clock is below the reading the mark recorded");
    assert_eq!(r.g.stats().sequence_exhaustions, 0);
}

#[test]
fn a_resume_after_running_ahead_is_no_step_back() {
    // clock_back mode with a small drift bound: the generator ran 8 ticks ahead
    // of the clock, then the server restarted with the clock unchanged.
    let t = template(WITH_CB);
    let mut c = Caller::new(WITH_CB, 10);
    c.ids(1000, 36, 8);
    assert_eq!(c.g.drift(1000), 8);
    let mut r = Caller { g: Generator::new(t, Window::ticks(&t, 10), c.durable()).unwrap(), written: Vec::new() };
    // The mark lies ahead of the clock: the first call waits for it rather than
    // starting a new era or counting a step back.
    assert!(matches!(r.take(1001, 1, 8), Err(Refusal::Wait { at_mark: true, .. })));
    assert_eq!((r.g.clock_back(), r.g.stats().clock_step_backs), (0, 0));
    r.ids(1000 + 20, 1, 8);
    assert_eq!((r.g.clock_back(), r.g.stats().clock_step_backs), (0, 0));
}

#[test]
fn a_clean_shutdown_resumes_without_a_gap() {
    let t = template(SMALL);
    let mut c = Caller::new(SMALL, 10);
    let last = *c.ids(500, 3, 0).last().unwrap();
    let resume = c.g.resume_point();
    assert_eq!(resume.position, t.position(500) + 3);
    // With no drift allowed, the first call after the restart issues at once,
    // in the same tick, right after the last ID.
    let mut r = Caller { g: Generator::new(t, Window::ticks(&t, 10), Some(resume)).unwrap(), written: Vec::new() };
    let first = r.ids(500, 1, 0);
    assert_eq!(first, vec![t.encode(t.position(500) + 3, 0)]);
    assert!(first[0] > last);
}

#[test]
fn the_timestamp_field_runs_out_with_an_error_not_a_wrap() {
    let mut c = Caller::new("timestamp:4,sequence:2", 1);
    assert_eq!(c.ids(15, 4, 0).len(), 4);
    assert_eq!(c.take(15, 1, 10), Err(Refusal::TimestampExhausted));
    assert_eq!(c.take(16, 1, 0), Err(Refusal::TimestampExhausted));
    let mut fresh = Caller::new("timestamp:4,sequence:2", 1);
    assert_eq!(fresh.take(1 << 40, 1, 0), Err(Refusal::TimestampExhausted));
}

#[test]
fn an_exhausted_range_is_an_error_at_once_even_when_the_clock_is_behind() {
    // The last tick is used up while the clock is still behind it: no wait can help.
    let mut c = Caller::new("timestamp:4,sequence:2", 1);
    c.ids(14, 8, 1);
    assert_eq!(c.take(13, 1, 0), Err(Refusal::TimestampExhausted));
}

#[test]
fn a_clock_before_the_epoch_is_refused_beyond_the_drift_and_borrows_within_it() {
    let mut c = Caller::new(SMALL, 10);
    assert_eq!(c.take(-50, 1, 10), Err(Refusal::BeforeEpoch));
    assert_eq!(c.g.stats().ids_issued, 0);
    // Within max_drift of the epoch, IDs of tick 0 run ahead of the clock.
    let first = c.ids(-5, 1, 10);
    let t = template(SMALL);
    assert!(first[0] < t.encode(t.position(1), 0), "an ID of tick 0");
    // Once the clock is right, IDs continue above.
    assert!(c.ids(100, 1, 10)[0] > first[0]);
    // A clock that later falls before the epoch again is refused, not waited for.
    assert_eq!(c.take(-50, 1, 10), Err(Refusal::BeforeEpoch));
}

const WITH_CB: &str = "clock_back:2,timestamp:30,worker:3,sequence:2";

#[test]
fn clock_back_mode_starts_a_new_era_at_the_wall_clock_once_its_mark_is_durable() {
    let t = template(WITH_CB);
    let mut c = Caller::new(WITH_CB, 10);
    let before = c.ids(1000, 1, 5)[0];
    let Err(Refusal::NeedMark(m)) = c.g.reserve(500, 1, 5) else { panic!("a new era needs its mark") };
    assert_eq!(m, Mark { position: t.position(510), clock_back: 1, wall: Some(500) });
    assert_eq!(c.g.clock_back(), 0, "not before the mark is durable");
    c.write(m);
    let after = c.ids(500, 1, 5)[0];
    assert_eq!(c.g.clock_back(), 1);
    assert_eq!(t.tick_of(c.g.next - 1), 500);
    assert!(after > before, "clock_back above the timestamp keeps IDs increasing");
}

#[test]
fn a_reading_taken_before_a_recorded_step_back_is_declined_so_the_step_opens_one_era() {
    let mut c = Caller::new(WITH_CB, 1000);
    c.ids(1000, 1, 5);
    // Backend A reads the clock (1001) before taking the lock; the clock
    // steps back; backend B takes the lock first and records the step back.
    let a = EarlyReading { now: 1001, step_backs_before: c.g.stats().clock_step_backs };
    c.ids(501, 1, 5);
    assert_eq!((c.g.clock_back(), c.g.stats().clock_step_backs), (1, 1));
    let before = c.g;
    // Accepted, A's reading would undo the step back: the next reading
    // counts it again and opens a second era.
    let mut unchecked = before;
    assert!(unchecked.reserve_one(a.now, 5).is_some());
    let mut unchecked = Caller { g: unchecked, written: Vec::new() };
    unchecked.ids(502, 1, 5);
    assert_eq!((unchecked.g.clock_back(), unchecked.g.stats().clock_step_backs), (2, 2));
    // Declined, it changes nothing; A reads the clock again under the lock.
    assert_eq!(c.g.reserve_one_early(a, 5), None);
    assert_eq!(c.g, before);
    c.ids(502, 1, 5);
    assert_eq!((c.g.clock_back(), c.g.stats().clock_step_backs), (1, 1));
    // A reading taken after the step back was recorded is served.
    let b = EarlyReading { now: 503, step_backs_before: c.g.stats().clock_step_backs };
    assert!(c.g.reserve_one_early(b, 5).is_some());
}

#[test]
fn clock_back_mode_still_waits_when_it_merely_ran_ahead() {
    let mut c = Caller::new(WITH_CB, 10);
    c.ids(1000, 4, 0);
    assert_eq!(c.take(1000, 1, 0), Err(Refusal::Wait { until: 1001, at_mark: false }));
    assert_eq!(c.g.clock_back(), 0);
}

#[test]
fn clock_back_mode_errors_when_the_counter_would_wrap() {
    let t = template(WITH_CB);
    let g = Generator::new(
        t,
        Window::ticks(&t, 10),
        Some(Mark { position: t.position(1000), clock_back: 3, wall: Some(1000) }),
    );
    let mut c = Caller { g: g.unwrap(), written: Vec::new() };
    assert_eq!(c.take(10, 1, 5), Err(Refusal::ClockBackExhausted));
    let resume = |clock_back| Some(Mark { position: 1, clock_back, wall: None });
    assert_eq!(
        Generator::new(t, Window::ticks(&t, 10), resume(4)).err(),
        Some(ClockBackOutOfRange { recorded: 4, max: 3 })
    );
    assert!(Generator::new(template(SMALL), Window::ticks(&template(SMALL), 10), resume(1)).is_err());
}

#[test]
fn a_replayed_mark_raises_the_mark_of_a_standby() {
    let t = template(SMALL);
    // The primary issues IDs under marks; the standby starts from an older
    // mark (its base backup) and replays the later ones from WAL.
    let mut primary = Caller::new(SMALL, 10);
    primary.ids(1000, 1, 1_000_000);
    let base = primary.durable();
    let mut issued = Vec::new();
    for now in 1000..1100 {
        issued.extend(primary.ids(now, 50, 1_000_000));
    }
    let mut standby = Generator::new(t, Window::ticks(&t, 10), base).unwrap();
    for m in &primary.written {
        standby.raise_mark(*m).unwrap();
    }
    let (s, p) = (standby.mark(), primary.g.mark());
    assert_eq!((s.position, s.clock_back), (p.position, p.clock_back));
    assert!(standby.stats().marks_replayed > 0);
    // Promoted with its clock two seconds behind, it continues above them all.
    let mut promoted = Caller { g: standby, written: Vec::new() };
    let next = promoted.ids(1000 - 2000, 1, 1_000_000)[0];
    assert!(next > *issued.iter().max().unwrap());
    // An older or equal mark changes nothing; one of an era the layout lacks is refused.
    let before = promoted.g.mark();
    assert_eq!(promoted.g.raise_mark(primary.written[0]), Ok(false));
    assert_eq!(promoted.g.mark(), before);
    assert!(promoted.g.raise_mark(Mark { position: 0, clock_back: 1, wall: None }).is_err());
}

#[test]
fn a_replayed_mark_of_a_later_era_switches_the_standby_to_it() {
    let t = template(WITH_CB);
    let mut standby = Generator::new(t, Window::ticks(&t, 10), None).unwrap();
    standby.raise_mark(Mark { position: t.position(510), clock_back: 1, wall: Some(500) }).unwrap();
    assert_eq!(standby.clock_back(), 1);
    let mut promoted = Caller { g: standby, written: Vec::new() };
    let id = promoted.ids(505, 1, 100)[0];
    let d = Codec::new(Layout::parse(WITH_CB).unwrap(), TimeBase::new(UnixMillis(0), 1).unwrap()).decode(id).unwrap();
    assert_eq!((d.clock_back, d.tick), (Some(1), 510), "above everything the primary may have issued in era 1");
}

// ---- Property tests: random clocks, crashes, restarts and failovers -------------------

#[derive(Clone, Debug)]
enum Step {
    /// Move the wall clock by this many ticks (back, stuck or forward), then
    /// take IDs: a block, or a run in one tick (at most a tick's positions).
    Take { clock_moves: i64, want: u64, run: bool },
    /// Renewals handed out so far are written (or fail, after FailNextWrite).
    WriteRenewals,
    /// The server crashes: renewals not yet written are lost; the state file
    /// holds the mark `lag` writes before the last, and WAL redo replays the rest.
    Crash { lag: usize },
    /// A clean shutdown records the exact resume point.
    CleanRestart,
    /// The next write fails.
    FailNextWrite,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (prop_oneof![Just(0i64), -3i64..4, -5_000i64..5_000, -10_000_000i64..10_000_000],
              prop_oneof![Just(1u64), 1u64..20],
              any::<bool>())
            .prop_map(|(clock_moves, want, run)| Step::Take { clock_moves, want, run }),
        2 => Just(Step::WriteRenewals),
        1 => (0usize..4).prop_map(|lag| Step::Crash { lag }),
        1 => Just(Step::CleanRestart),
        1 => Just(Step::FailNextWrite),
    ]
}

/// A window of `ticks` whole ticks, or with 0, the window of ticks longer
/// than a second: part of one tick's positions, reaching no tick past the clock.
fn window_of(t: &IdTemplate, ticks: u64) -> Window {
    if ticks == 0 {
        Window::of(t, &TimeBase::new(UnixMillis(0), 3_000).unwrap())
    } else {
        Window::ticks(t, ticks)
    }
}

/// `reserve_one` grants what `reserve` of one ID grants when that asks for
/// no mark, and leaves the generator as `reserve` does; or it declines and
/// changes nothing.
fn same_as_reserve(g: Generator, now: i64, drift: u64) {
    let (mut quick, mut general) = (g, g);
    match quick.reserve_one(now, drift) {
        Some(id) => {
            let grant = general.reserve(now, 1, drift).expect("reserve_one granted");
            assert_eq!(grant.renew, None);
            assert_eq!(grant.block.collect::<Vec<_>>(), [id]);
            assert_eq!(quick, general);
        }
        None => assert_eq!(quick, g, "a declined call changes nothing"),
    }
    // A reading taken before the lock is served alike when no step back was
    // recorded since it was taken, and declined otherwise.
    let seen = g.stats().clock_step_backs;
    let (mut early, mut quick) = (g, g);
    assert_eq!(
        early.reserve_one_early(EarlyReading { now, step_backs_before: seen }, drift),
        quick.reserve_one(now, drift)
    );
    assert_eq!(early, quick);
    if let Some(older) = seen.checked_sub(1) {
        let mut early = g;
        assert_eq!(early.reserve_one_early(EarlyReading { now, step_backs_before: older }, drift), None);
        assert_eq!(early, g);
    }
}

/// Runs the steps and returns every ID issued, in order, with its era.
/// Checks each mark asked for against the reach the module promises.
fn run(spec: &str, drift: u64, window: u64, steps: &[Step]) -> Vec<(u64, i64)> {
    let t = template(spec);
    let window = window_of(&t, window);
    let mut g = Generator::new(t, window, None).unwrap();
    let mut durable: Vec<Mark> = Vec::new();
    let mut renewals: Vec<Mark> = Vec::new();
    let mut now: i64 = 1 << 24;
    let mut fail_next = false;
    let mut issued = Vec::new();
    // Writes a mark unless it is already covered; false when the write fails.
    fn write(g: &mut Generator, durable: &mut Vec<Mark>, fail_next: &mut bool, m: Mark) -> bool {
        if g.covers(&m) {
            return true;
        }
        if std::mem::take(fail_next) {
            return false;
        }
        durable.push(m);
        g.mark_written(m);
        true
    }
    for s in steps {
        match *s {
            Step::Crash { lag } => {
                renewals.clear();
                let file = durable.len().checked_sub(lag + 1).map(|i| durable[i]);
                g = Generator::new(t, window, file).unwrap();
                for m in &durable[durable.len().saturating_sub(lag)..] {
                    g.raise_mark(*m).unwrap();
                }
            }
            Step::CleanRestart => {
                for m in std::mem::take(&mut renewals) {
                    write(&mut g, &mut durable, &mut false, m);
                }
                let resume = g.resume_point();
                g = Generator::new(t, window, Some(resume)).unwrap();
            }
            Step::FailNextWrite => fail_next = true,
            Step::WriteRenewals => {
                for m in std::mem::take(&mut renewals) {
                    if !write(&mut g, &mut durable, &mut fail_next, m) {
                        g.mark_failed();
                    }
                }
            }
            Step::Take { clock_moves, want, run } => {
                let want = if run { want.min(t.position(1)) } else { want };
                now = (now + clock_moves).clamp(-100, 1 << 29);
                // A mark reaches at most drift and the window's whole ticks
                // past the clock, to the end of that tick: a crash never
                // leaves the generator further ahead.
                let reach = |now: i64| (now.max(0) as u64 + drift + window.whole_ticks()).min(t.max_tick());
                let within_reach = |m: &Mark, now: i64| m.position <= t.position(reach(now) + 1);
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    assert!(attempts < 10, "a call settles within a few attempts");
                    if want == 1 && !run {
                        same_as_reserve(g, now, drift);
                    }
                    let reserved = if run { g.reserve_run(now, want, drift) } else { g.reserve(now, want, drift) };
                    match reserved {
                        Ok(grant) => {
                            if run {
                                let b = grant.block;
                                assert_eq!(b.len(), want, "a run is whole");
                                assert_eq!(t.tick_of(b.first), t.tick_of(b.first + want - 1), "a run is one tick");
                            }
                            assert!(
                                grant.renew.iter().all(|m| within_reach(m, now)),
                                "{:?} past tick {}",
                                grant.renew,
                                reach(now)
                            );
                            issued.extend(grant.block.map(|id| (g.clock_back(), id)));
                            renewals.extend(grant.renew);
                            break;
                        }
                        Err(Refusal::NeedMark(m)) => {
                            assert!(within_reach(&m, now), "{m:?} past tick {}", reach(now));
                            if !write(&mut g, &mut durable, &mut fail_next, m) {
                                break; // the caller gets an error
                            }
                        }
                        // The caller sleeps until the wall clock gets there.
                        Err(Refusal::Wait { until, .. }) => {
                            assert!(until > now, "a wait must be for a later tick");
                            now = until;
                        }
                        Err(Refusal::BeforeEpoch | Refusal::TimestampExhausted | Refusal::ClockBackExhausted) => break,
                    }
                }
            }
        }
    }
    issued
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn never_a_repeated_or_decreasing_id(steps in proptest::collection::vec(step(), 1..120),
                                         drift in prop_oneof![Just(0u64), 0u64..10, 0u64..100_000_000],
                                         window in 0u64..50) {
        let issued = run(SMALL, drift, window, &steps);
        for pair in issued.windows(2) {
            prop_assert!(pair[0].1 < pair[1].1, "{:?} then {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn clock_back_mode_never_repeats(steps in proptest::collection::vec(step(), 1..120),
                                     drift in 0u64..20, window in 0u64..50) {
        // clock_back below the timestamp: IDs may decrease across eras but never repeat.
        let issued = run("timestamp:30,clock_back:3,sequence:2", drift, window, &steps);
        let mut seen = HashSet::new();
        for (_, id) in &issued {
            prop_assert!(seen.insert(*id), "{id} issued twice");
        }
        for pair in issued.windows(2) {
            if pair[0].0 == pair[1].0 {
                prop_assert!(pair[0].1 < pair[1].1, "increasing within an era");
            }
        }
    }

    #[test]
    fn restarts_without_a_clock_change_never_start_an_era(takes in proptest::collection::vec((1u64..40, 0u64..3), 1..60),
                                                         drift in 0u64..20, window in 1u64..50) {
        // The clock only moves forward; restarts (clean or crashes) come and go.
        let t = template(WITH_CB);
        let mut c = Caller { g: Generator::new(t, Window::ticks(&t, window), None).unwrap(), written: Vec::new() };
        let mut now = 10_000i64;
        for (want, event) in takes {
            now += 1;
            match event {
                1 => c.g = Generator::new(t, Window::ticks(&t, window), c.durable()).unwrap(),
                2 => c.g = Generator::new(t, Window::ticks(&t, window), Some(c.g.resume_point())).unwrap(),
                _ => {}
            }
            loop {
                match c.take(now, want, drift) {
                    Ok(_) => break,
                    Err(Refusal::Wait { until, .. }) => now = until,
                    Err(e) => prop_assert!(false, "{e:?}"),
                }
            }
            prop_assert_eq!(c.g.clock_back(), 0);
            prop_assert_eq!(c.g.stats().clock_step_backs, 0);
        }
    }

    #[test]
    fn ids_stay_within_the_drift_bound(moves in proptest::collection::vec(-50i64..50, 1..200),
                                       drift in 0u64..20) {
        let mut c = Caller::new(SMALL, 10);
        let mut now = 10_000;
        for m in moves {
            now += m;
            if let Ok(ids) = c.take(now, 3, drift) {
                let last = *ids.last().unwrap() as u64 >> 5;
                prop_assert!(last as i64 <= now + drift as i64);
            }
        }
    }
}

#[test]
fn a_new_id_space_may_start_below_the_old_mark_and_keeps_the_counters() {
    let spec = "timestamp:41,datacenter:5,worker:5,sequence:12";
    let mut c = Caller::new(spec, 1000);
    c.take(50_000, 10, 0).unwrap();
    let t = template(spec);
    let start = Mark { position: t.position(1_000), clock_back: 0, wall: None };
    c.g.enter_new_space(start).unwrap();
    assert_eq!(c.g.mark(), start, "lower than the old space's mark");
    assert_eq!((c.g.stats().ids_issued, c.g.stats().marks_replayed), (10, 1));
    // The window is kept: the next mark reaches a second past the clock.
    let Err(Refusal::NeedMark(next)) = c.g.reserve(2_000, 1, 0) else { panic!("a mark first") };
    assert_eq!(next.position, t.position(3_000) + 1);
    let era = Mark { clock_back: 1, ..start };
    assert!(c.g.enter_new_space(era).is_err(), "no clock_back field");
}

#[test]
fn a_floor_within_the_mark_moves_the_next_id_and_one_beyond_it_is_written_first() {
    let t = template(SMALL);
    let mut c = Caller::new(SMALL, 10);
    c.ids(100, 1, 0);
    let mark = c.g.mark();
    // Within the durable mark: nothing to write, the next ID is the floor's.
    let within = Mark { position: mark.position - 2, clock_back: 0, wall: None };
    assert_eq!(c.g.raise_floor(within), Ok(false));
    assert_eq!(c.ids(100, 1, 1000)[0], t.encode(within.position, 0));
    // Beyond it: nothing changes until the floor is durable.
    let mark = c.g.mark();
    let beyond = Mark { position: mark.position + 50, clock_back: 0, wall: None };
    assert_eq!(c.g.raise_floor(beyond), Ok(true));
    assert_eq!(c.g.mark(), mark);
    c.g.floor_written(beyond);
    assert_eq!(c.g.mark().position, beyond.position);
    assert_eq!(c.ids(100, 1, 1000)[0], t.encode(beyond.position, 0));
    // A floor of an era the layout does not have is refused.
    assert!(c.g.raise_floor(Mark { position: 0, clock_back: 1, wall: None }).is_err());
}
