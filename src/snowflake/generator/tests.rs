use std::collections::HashSet;
use std::convert::Infallible;

use proptest::prelude::*;

use super::*;
use crate::snowflake::codec::{Codec, Node};
use crate::snowflake::layout::Layout;
use crate::snowflake::time::{TimeBase, UnixMillis};

fn template(spec: &str) -> IdTemplate {
    let codec = Codec::new(Layout::parse(spec).unwrap(), TimeBase::new(UnixMillis(0), 1).unwrap());
    codec.template(Node { datacenter: 1, worker: 2 })
}

fn ok(_: Mark) -> Result<(), Infallible> {
    Ok(())
}

/// Issues `want` IDs at wall tick `now` and returns them.
fn take(g: &mut Generator, now: i64, want: u64, drift: u64) -> Vec<i64> {
    g.reserve(now, want, drift, ok).expect("issued").collect()
}

const SMALL: &str = "timestamp:30,worker:3,sequence:2"; // 4 IDs per tick

#[test]
fn a_fresh_generator_starts_at_the_wall_clock() {
    let t = template(SMALL);
    let mut g = Generator::new(t, 10, None).unwrap();
    let ids = take(&mut g, 100, 1, 0);
    assert_eq!(ids, vec![t.encode(t.position(100), 0)]);
    assert_eq!(g.stats().ids_issued, 1);
}

#[test]
fn a_used_up_tick_borrows_the_next_within_the_drift_bound() {
    let t = template(SMALL);
    let mut g = Generator::new(t, 10, None).unwrap();
    let ids = take(&mut g, 100, 6, 5);
    assert_eq!(ids.len(), 6);
    assert_eq!(t.tick_of(g.next - 1), 101);
    assert_eq!(g.stats().sequence_exhaustions, 1);
    assert_eq!(g.stats().ticks_borrowed, 1);
    assert_eq!(g.drift(100), 1);
    // With no drift allowed, the caller must wait for tick 102.
    take(&mut g, 100, 2, 5);
    assert_eq!(g.reserve(100, 1, 1, ok), Err(Refusal::Wait { until: 101 }));
    assert_eq!(g.reserve(100, 1, 0, ok), Err(Refusal::Wait { until: 102 }));
}

#[test]
fn a_block_stops_at_the_drift_bound() {
    let t = template(SMALL);
    let mut g = Generator::new(t, 10, None).unwrap();
    let block = g.reserve(100, 1000, 2, ok).unwrap();
    assert_eq!(block.len(), 12); // ticks 100, 101, 102
    assert_eq!(block.last_tick(), 102);
}

#[test]
fn a_step_back_within_the_bound_keeps_going_on_the_last_tick() {
    let t = template(SMALL);
    let mut g = Generator::new(t, 10, None).unwrap();
    let before = take(&mut g, 1000, 1, 100);
    let after = take(&mut g, 950, 1, 100);
    assert!(after[0] > before[0]);
    assert_eq!(t.tick_of(g.next - 1), 1000);
    assert_eq!(g.stats().clock_step_backs, 1);
    assert_eq!(g.stats().largest_step_back, 50);
    assert_eq!(g.drift(950), 50);
}

#[test]
fn a_step_back_beyond_the_bound_waits_for_the_clock() {
    let t = template(SMALL);
    let mut g = Generator::new(t, 10, None).unwrap();
    take(&mut g, 1000, 1, 100);
    assert_eq!(g.reserve(800, 1, 100, ok), Err(Refusal::Wait { until: 900 }));
    assert_eq!(g.stats().ids_issued, 1);
    assert!(!take(&mut g, 900, 1, 100).is_empty());
}

#[test]
fn the_mark_is_written_before_issuing_beyond_it_and_at_most_once_per_window() {
    let t = template(SMALL);
    let mut g = Generator::new(t, 10, None).unwrap();
    let mut written = Vec::new();
    for now in 100..200 {
        let block = g
            .reserve(now, 1, 0, |m: Mark| {
                written.push(m);
                Ok::<(), Infallible>(())
            })
            .unwrap();
        assert!(block.last_tick() < written.last().unwrap().tick);
    }
    assert_eq!(written.len(), 10);
    assert_eq!(written[0], Mark { tick: 110, clock_back: 0 });
    assert_eq!(g.stats().marks_written, 10);
}

#[test]
fn a_failed_write_issues_nothing() {
    let t = template(SMALL);
    let mut g = Generator::new(t, 10, None).unwrap();
    take(&mut g, 100, 1, 0);
    let before = g.next;
    assert_eq!(g.reserve(200, 1, 0, |_| Err("disk full")), Err(Refusal::Persist("disk full")));
    assert_eq!((g.next, g.mark, g.stats().ids_issued), (before, 110, 1));
}

#[test]
fn a_restart_resumes_above_the_mark_whatever_the_clock_says() {
    let t = template(SMALL);
    let mut durable = None;
    let mut g = Generator::new(t, 10, None).unwrap();
    let mut before = Vec::new();
    for now in 1000..1005 {
        before.extend(g.reserve(now, 3, 1_000_000, |m| Ok::<(), Infallible>(durable = Some(m))).unwrap());
    }
    // The clock is an hour behind after the restart.
    let mut g = Generator::new(t, 10, durable).unwrap();
    let after = take(&mut g, 1000 - 3_600_000, 1, 10_000_000);
    assert!(after[0] > *before.iter().max().unwrap());
    assert_eq!(g.stats().clock_step_backs, 1);
    assert_eq!(g.stats().ticks_borrowed, 1);
    assert_eq!(g.stats().sequence_exhaustions, 0);
}

#[test]
fn the_timestamp_field_runs_out_with_an_error_not_a_wrap() {
    let t = template("timestamp:4,sequence:2");
    let mut g = Generator::new(t, 1, None).unwrap();
    assert_eq!(take(&mut g, 15, 4, 0).len(), 4);
    assert_eq!(g.reserve(15, 1, 10, ok), Err(Refusal::TimestampExhausted));
    assert_eq!(g.reserve(16, 1, 0, ok), Err(Refusal::TimestampExhausted));
    let mut fresh = Generator::new(t, 1, None).unwrap();
    assert_eq!(fresh.reserve(1 << 40, 1, 0, ok), Err(Refusal::TimestampExhausted));
}

#[test]
fn a_clock_before_the_epoch_waits() {
    let t = template(SMALL);
    let mut g = Generator::new(t, 10, None).unwrap();
    assert_eq!(g.reserve(-50, 1, 10, ok), Err(Refusal::Wait { until: -10 }));
}

const WITH_CB: &str = "clock_back:2,timestamp:30,worker:3,sequence:2";

#[test]
fn clock_back_mode_starts_a_new_era_at_the_wall_clock() {
    let t = template(WITH_CB);
    let mut g = Generator::new(t, 10, None).unwrap();
    let mut written = Vec::new();
    let mut persist = |m: Mark| {
        written.push(m);
        Ok::<(), Infallible>(())
    };
    let before = g.reserve(1000, 1, 5, &mut persist).unwrap().next().unwrap();
    let after = g.reserve(500, 1, 5, &mut persist).unwrap().next().unwrap();
    assert_eq!(g.clock_back(), 1);
    assert_eq!(t.tick_of(g.next - 1), 500);
    assert!(after > before, "clock_back above the timestamp keeps IDs increasing");
    assert_eq!(written.last(), Some(&Mark { tick: 510, clock_back: 1 }));
}

#[test]
fn clock_back_mode_still_waits_when_it_merely_ran_ahead() {
    let t = template(WITH_CB);
    let mut g = Generator::new(t, 10, None).unwrap();
    take(&mut g, 1000, 4, 0);
    assert_eq!(g.reserve(1000, 1, 0, ok), Err(Refusal::Wait { until: 1001 }));
    assert_eq!(g.clock_back(), 0);
}

#[test]
fn clock_back_mode_errors_when_the_counter_would_wrap() {
    let t = template(WITH_CB);
    let mut g = Generator::new(t, 10, Some(Mark { tick: 1000, clock_back: 3 })).unwrap();
    assert_eq!(g.reserve(10, 1, 5, ok), Err(Refusal::ClockBackExhausted));
    assert_eq!(
        Generator::new(t, 10, Some(Mark { tick: 1, clock_back: 4 })).err(),
        Some(ClockBackOutOfRange { recorded: 4, max: 3 })
    );
    assert!(Generator::new(template(SMALL), 10, Some(Mark { tick: 1, clock_back: 1 })).is_err());
}

// ---- Property tests: random clocks, crashes and restarts ------------------------------

#[derive(Clone, Debug)]
enum Step {
    /// Move the wall clock by this many ticks (back, stuck or forward), then take IDs.
    Take { clock_moves: i64, want: u64 },
    /// The server restarts (or a backend crash resets shared memory):
    /// only the durable mark survives.
    Restart,
    /// The next durable write fails.
    FailNextWrite,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (prop_oneof![Just(0i64), -3i64..4, -5_000i64..5_000, -10_000_000i64..10_000_000], 1u64..20)
            .prop_map(|(clock_moves, want)| Step::Take { clock_moves, want }),
        1 => Just(Step::Restart),
        1 => Just(Step::FailNextWrite),
    ]
}

/// Runs the steps and returns every ID issued, in order, with its era.
fn run(spec: &str, drift: u64, window: u64, steps: &[Step]) -> Vec<(u64, i64)> {
    let t = template(spec);
    let mut durable: Option<Mark> = None;
    let mut g = Generator::new(t, window, durable).unwrap();
    let mut now: i64 = 1 << 24;
    let mut fail_next = false;
    let mut issued = Vec::new();
    for s in steps {
        match *s {
            Step::Restart => g = Generator::new(t, window, durable).unwrap(),
            Step::FailNextWrite => fail_next = true,
            Step::Take { clock_moves, want } => {
                now = (now + clock_moves).clamp(-100, 1 << 29);
                let mut waited = 0;
                loop {
                    let persist = |m: Mark| {
                        if std::mem::take(&mut fail_next) {
                            return Err(());
                        }
                        durable = Some(m);
                        Ok(())
                    };
                    match g.reserve(now, want, drift, persist) {
                        Ok(block) => {
                            issued.extend(block.map(|id| (g.clock_back(), id)));
                            break;
                        }
                        Err(Refusal::Persist(())) => {}
                        // The caller sleeps until the wall clock gets there.
                        Err(Refusal::Wait { until }) => {
                            assert!(until > now, "a wait must be for a later tick");
                            now = until;
                            waited += 1;
                            assert!(waited < 3, "one wait reaches the allowed tick");
                        }
                        Err(Refusal::TimestampExhausted | Refusal::ClockBackExhausted) => break,
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
                                         window in 1u64..50) {
        let issued = run(SMALL, drift, window, &steps);
        for pair in issued.windows(2) {
            prop_assert!(pair[0].1 < pair[1].1, "{:?} then {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn clock_back_mode_never_repeats(steps in proptest::collection::vec(step(), 1..120),
                                     drift in 0u64..20, window in 1u64..50) {
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
    fn ids_stay_within_the_drift_bound(moves in proptest::collection::vec(-50i64..50, 1..200),
                                       drift in 0u64..20) {
        let t = template(SMALL);
        let mut g = Generator::new(t, 10, None).unwrap();
        let mut now = 10_000;
        for m in moves {
            now += m;
            if let Ok(block) = g.reserve(now, 3, drift, ok) {
                prop_assert!(block.last_tick() as i64 <= now + drift as i64);
            }
        }
    }
}
