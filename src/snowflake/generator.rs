//! The generator: a logical clock over (tick, sequence) positions with a durable
//! high-water mark.
//!
//! # Terms
//!
//! - *Position*: an ID's tick and sequence as one number,
//!   `tick << sequence_bits | sequence` (see [`IdTemplate`]). Consecutive
//!   positions are consecutive IDs of a node, and a node's IDs of one era
//!   are ordered by position.
//! - *Era*: the clock_back value. A layout without a clock_back field has
//!   only era 0; with one, the generator starts the next era when the wall
//!   clock goes back (see the invariants below).
//! - *Mark* ([`Mark`]), the high-water mark of the user docs and of
//!   `snowflake_status()`: a position with its era such that no ID at or
//!   after it in that era, and none in a later era, was issued. A new mark is
//!   made durable, in WAL and in the state file, before any ID at or beyond
//!   the old one is handed out.
//! - *Resume point* ([`Generator::resume_point`]): the exact next free
//!   position, recorded in the state file at a clean shutdown instead of a
//!   mark set ahead. It is a mark too, the tightest one: the next start
//!   continues there without a gap.
//! - *Window* ([`Window`], [`MARK_WINDOW_MS`]): how far a new mark reaches
//!   past the IDs asked for (or past the wall clock, when that is later): a
//!   second's worth of positions, so that one durable write covers many IDs.
//!
//! # Invariants
//! - Positions are handed out in strictly increasing order within one
//!   clock_back era, so one node never issues the same ID twice and its IDs
//!   increase (across eras too when the layout puts clock_back above timestamp).
//! - Nothing is issued at or above the durable mark. The generator asks the
//!   caller to make a new mark durable ([`Refusal::NeedMark`]) before it issues
//!   beyond the old one, and asks for the next mark early ([`Grant::renew`]) so
//!   that under steady load no caller waits for a write. A generator resumed
//!   from the last durable mark, or raised to it by [`Generator::raise_mark`]
//!   (WAL redo on a standby or in recovery), therefore continues above every ID
//!   issued before, whatever the wall clock did meanwhile.
//! - An issued tick is at most `max_drift` ticks ahead of the wall clock
//!   reading it was issued against, and a mark lies at most `max_drift`
//!   plus the window's whole ticks ahead of it (none when a tick is longer
//!   than [`MARK_WINDOW_MS`]). So a generator resumed from a mark after a
//!   crash lies at most the window's whole ticks further ahead than
//!   `max_drift` allows (with long ticks, no further), and repeated crashes
//!   cannot ratchet it further. When that would be broken the generator
//!   asks the caller to wait, or with a clock_back field and a clock that went
//!   back, starts a new era at the wall clock once its mark is durable.
//! - A resume is not a clock step back: a mark records the wall clock it was
//!   written at, and only a reading below that counts as the clock going back.
//!
//! The generator never reads a clock or touches a file: the caller passes the
//! wall-clock tick and writes the marks it is asked for, so every fault can be
//! replayed.

use super::codec::IdTemplate;
use super::time::TimeBase;

/// How far ahead each durable mark reserves: a write every ¾ second at most
/// under full load.
pub const MARK_WINDOW_MS: u64 = 1000;

/// How far a new mark reaches: [`MARK_WINDOW_MS`] of the layout's positions
/// past the IDs it covers, and past the wall clock by at most `max_drift`
/// plus the window's whole ticks.
///
/// With ticks of a second or less the window is whole ticks (1000 of 1 ms).
/// A longer tick holds more than a second of positions, so the window is the
/// part of one tick's positions that a second is (at least one): a mark never
/// reaches a whole long tick past its IDs, and a crash never skips one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Positions a new mark reserves past the IDs it covers.
    positions: u64,
    /// Whole ticks in the window (0 when a tick is longer than it): how far
    /// past `max_drift` a mark may reach, so that a generator at the drift
    /// limit still renews its mark ahead (a write a second, not one a tick).
    ticks: u64,
}

impl Window {
    /// The window of a layout whose ticks `time` counts.
    pub fn of(template: &IdTemplate, time: &TimeBase) -> Window {
        let ticks = time.ticks_in(MARK_WINDOW_MS);
        if ticks > 0 {
            return Window::ticks(template, ticks);
        }
        let per_tick = u128::from(template.position(1));
        let share = per_tick * u128::from(MARK_WINDOW_MS) / u128::from(time.tick_ms());
        Window { positions: (share as u64).max(1), ticks: 0 }
    }

    /// A window of `ticks` whole ticks (at least one).
    pub fn ticks(template: &IdTemplate, ticks: u64) -> Window {
        let ticks = ticks.max(1);
        Window { positions: template.position(ticks), ticks }
    }

    /// Positions a new mark reserves past the IDs it covers.
    pub fn positions(&self) -> u64 {
        self.positions
    }

    /// Whole ticks in the window; 0 when a tick is longer than it.
    pub fn whole_ticks(&self) -> u64 {
        self.ticks
    }
}

/// A high-water mark: no ID of era `clock_back` was issued at or after
/// `position`, and none in a later era.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub position: u64,
    pub clock_back: u64,
    /// The highest wall-clock tick seen in the era when the mark was set;
    /// `None` when unknown (a state file written before version 0.3.0).
    pub wall: Option<i64>,
}

impl Mark {
    /// Whether this mark says at least as much as `other`: every ID `other`
    /// rules out is ruled out by this one.
    pub fn covers(&self, other: &Mark) -> bool {
        self.clock_back > other.clock_back || (self.clock_back == other.clock_back && self.position >= other.position)
    }
}

/// Counters since the generator was created (that is, since server start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub ids_issued: u64,
    /// Ticks moved onto while the wall clock was still behind them.
    pub ticks_borrowed: u64,
    /// Ticks whose sequence was used up, so that the next ID took the next tick.
    pub sequence_exhaustions: u64,
    /// Wall-clock readings below the previous reading.
    pub clock_step_backs: u64,
    /// Largest and most recent step back, in ticks.
    pub largest_step_back: u64,
    pub last_step_back: u64,
    /// Calls that had to wait for the wall clock, and the time they waited.
    pub waits: u64,
    pub wait_micros: u64,
    /// Marks made durable by this server, and marks raised to by WAL redo.
    pub marks_written: u64,
    pub marks_replayed: u64,
}

/// A clock reading (in ticks) taken before the generator's lock, for
/// [`Generator::reserve_one_early`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EarlyReading {
    pub now: i64,
    /// [`Stats::clock_step_backs`] as last published by a holder of the lock,
    /// read before the clock: no higher than the count when the clock was read.
    pub step_backs_before: u64,
}

/// Why no block was handed out. Nothing was issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Issuing now would run more than `max_drift` ahead of the wall clock;
    /// try again once the wall clock reaches tick `until`. `at_mark` when what
    /// lies ahead is a mark resumed from or replayed (after a crash), not an
    /// ID this generator issued.
    Wait { until: i64, at_mark: bool },
    /// Nothing can be issued before this mark is durable: make it so, report
    /// it with [`Generator::mark_written`], and try again.
    NeedMark(Mark),
    /// The wall clock lies before the epoch by more than `max_drift`: no
    /// timestamp can hold it, and no wait is worth making (a host that booted
    /// with a wrong clock, or an epoch set in the future).
    BeforeEpoch,
    /// The timestamp field has no tick left: the layout's time range is over.
    TimestampExhausted,
    /// The clock went back again but the clock_back field is at its maximum.
    ClockBackExhausted,
}

/// A block to hand out, and possibly a mark the caller should make durable
/// next (then report with [`Generator::mark_written`] or
/// [`Generator::mark_failed`]); the block is valid either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub block: Block,
    pub renew: Option<Mark>,
}

/// A mark from a state file or a WAL record that does not fit the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockBackOutOfRange {
    pub recorded: u64,
    pub max: u64,
}

/// Consecutive IDs handed out together: positions `first..first + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    template: IdTemplate,
    first: u64,
    len: u64,
    clock_back: u64,
}

impl Block {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Iterator for Block {
    type Item = i64;

    #[inline]
    fn next(&mut self) -> Option<i64> {
        if self.len == 0 {
            return None;
        }
        let id = self.template.encode(self.first, self.clock_back);
        self.first += 1;
        self.len -= 1;
        Some(id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.len).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

/// The state of one node's generator. Plain data (`Copy`), so it can live in
/// shared memory behind a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generator {
    template: IdTemplate,
    window: Window,
    /// Ask for the next mark once issuing comes this close to the durable one.
    renew_margin: u64,
    /// The next free position.
    next: u64,
    /// Nothing issued since creation.
    fresh: bool,
    clock_back: u64,
    /// The previous wall-clock reading, for counting step backs.
    wall_last: i64,
    /// The highest wall-clock reading in this era, for telling a clock that
    /// went back from a generator that ran ahead.
    wall_high: i64,
    /// The durable mark's position in era `clock_back`; see [`Mark`].
    durable: u64,
    /// The highest mark handed out for writing; above `durable` while a
    /// renewal is being written.
    requested: u64,
    stats: Stats,
}

/// No wall-clock reading yet.
const NO_READING: i64 = i64::MIN;

impl Generator {
    /// A generator for a node, continuing above `resume` (the last durable
    /// mark) if there is one; `window` is how far each new mark reaches.
    pub fn new(template: IdTemplate, window: Window, resume: Option<Mark>) -> Result<Self, ClockBackOutOfRange> {
        let mut g = Generator {
            template,
            window,
            renew_margin: window.positions / 4,
            next: 0,
            fresh: true,
            clock_back: 0,
            wall_last: NO_READING,
            wall_high: NO_READING,
            durable: 0,
            requested: 0,
            stats: Stats::default(),
        };
        if let Some(m) = resume {
            g.check_era(m.clock_back)?;
            let position = m.position.min(template.position(template.max_tick() + 1));
            g.next = position;
            g.durable = position;
            g.requested = position;
            g.clock_back = m.clock_back;
            // The wall clock read this much when the mark was set: a reading
            // below it after the resume is a real step back, a reading below
            // the mark itself is not.
            let seen = m.wall.unwrap_or(NO_READING);
            g.wall_last = seen;
            g.wall_high = seen;
        }
        Ok(g)
    }

    fn check_era(&self, clock_back: u64) -> Result<(), ClockBackOutOfRange> {
        let max = self.template.max_clock_back().unwrap_or(0);
        if clock_back > max {
            return Err(ClockBackOutOfRange { recorded: clock_back, max });
        }
        Ok(())
    }

    /// Hands out up to `want` (at least one) consecutive IDs against the wall
    /// clock tick `now`, never more than `max_drift` ticks ahead of it, and
    /// never at or beyond the durable mark.
    ///
    /// # Examples
    ///
    /// ```
    /// use snowflake_id::snowflake::codec::{Codec, Node};
    /// use snowflake_id::snowflake::generator::{Generator, Refusal, Window};
    /// use snowflake_id::snowflake::layout::Layout;
    /// use snowflake_id::snowflake::time::{TimeBase, UnixMillis};
    ///
    /// let layout = Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap();
    /// let codec = Codec::new(layout, TimeBase::new(UnixMillis(1_735_689_600_000), 1).unwrap());
    /// let template = codec.template(Node { datacenter: 3, worker: 7 });
    /// let mut g = Generator::new(template, Window::of(&template, &codec.time), None).unwrap();
    /// let now = 5_000; // the wall clock, in ticks since the epoch
    ///
    /// // Nothing is issued before a mark is durable: the caller writes it
    /// // (to WAL and the state file) and reports it.
    /// let Err(Refusal::NeedMark(mark)) = g.reserve(now, 3, 0) else { panic!("a first mark is needed") };
    /// // A window (1000 ticks of 1 ms) past the three IDs asked for.
    /// assert_eq!(mark.position, template.position(5_000 + 1000) + 3);
    /// g.mark_written(mark);
    ///
    /// let grant = g.reserve(now, 3, 0).unwrap();
    /// let ids: Vec<i64> = grant.block.collect();
    /// assert_eq!(ids, [template.encode(template.position(5_000), 0), ids[0] + 1, ids[0] + 2]);
    /// assert_eq!(codec.decode(ids[0]).unwrap().tick, 5_000);
    /// assert_eq!(grant.renew, None, "the mark is still far ahead");
    /// ```
    #[inline]
    pub fn reserve(&mut self, now: i64, want: u64, max_drift: u64) -> Result<Grant, Refusal> {
        self.reserve_within::<false>(now, want, max_drift)
    }

    /// One ID, when nothing but counting is needed: the clock did not go
    /// back, the ID lies within `max_drift` of it, and the durable mark is
    /// further ahead than the renewal margin. Then the result and the state
    /// afterwards are exactly those of `reserve(now, 1, max_drift)` with a
    /// grant that asks for no mark (a property test holds the two together).
    /// Otherwise `None`, and nothing changed: call [`Generator::reserve`].
    ///
    /// The hot path of a single ID, which its caller runs outside a panic
    /// guard: it has no panic path in a release build (no division, no
    /// indexing, no unwrap; sums saturate or are bounded by the checks before
    /// them). A debug build adds overflow checks, to the counters among
    /// others, that cannot fire (they would need 2^64 IDs).
    #[inline(always)]
    pub fn reserve_one(&mut self, now: i64, max_drift: u64) -> Option<i64> {
        let t = self.template;
        // A clock before the epoch or past the range, or one that went back
        // (to be counted and reported), takes the general path.
        if now < self.wall_last || now < 0 || now as u64 > t.max_tick() {
            return None;
        }
        let wall_tick = now as u64;
        let start = self.next.max(t.position(wall_tick));
        let tick = t.tick_of(start);
        // Beyond the drift bound or the range (wall_tick + max_drift may pass
        // the range's last tick), or near the mark: the general path.
        if tick > wall_tick.saturating_add(max_drift)
            || tick > t.max_tick()
            || start.saturating_add(1).saturating_add(self.renew_margin) >= self.durable
        {
            return None;
        }
        // What `count` records for a block of one.
        let starts_a_tick = t.sequence_of(start) == 0;
        if starts_a_tick && tick > wall_tick {
            self.stats.ticks_borrowed += 1;
        }
        if starts_a_tick && !self.fresh && start == self.next {
            self.stats.sequence_exhaustions += 1;
        }
        self.stats.ids_issued += 1;
        self.wall_last = now;
        self.wall_high = self.wall_high.max(now);
        self.next = start + 1;
        self.fresh = false;
        Some(t.encode(start, self.clock_back))
    }

    /// [`Generator::reserve_one`] for a clock reading the caller took before
    /// it took the generator's lock, so that the clock's latency overlaps the
    /// lock's. Declines, changing nothing, when a clock step back was
    /// recorded after the reading was taken.
    ///
    /// Readings taken before the lock reach the generator out of the order
    /// they were taken in. One older than a recorded step back may lie above
    /// it and, accepted, undo it: the next reading would count the same step
    /// back a second time, and with a clock_back field open a second era.
    /// A reading accepted here is no lower than the last one recorded
    /// ([`Generator::reserve_one`] declines a lower one), and no reading
    /// taken after it counted a step back, so it undoes none: every step
    /// back is counted once, as when every reading is taken under the lock.
    #[inline(always)]
    pub fn reserve_one_early(&mut self, reading: EarlyReading, max_drift: u64) -> Option<i64> {
        if reading.step_backs_before != self.stats.clock_step_backs {
            return None;
        }
        self.reserve_one(reading.now, max_drift)
    }

    /// Like [`Generator::reserve`], but the block is a *run*: exactly `want`
    /// consecutive positions of one tick, never fewer (a sequence's block for
    /// a pooled allocator, [`super::block`]). The positions left over at the
    /// end of a tick too full for the run are never issued. The caller keeps
    /// `want` within one tick's positions.
    pub fn reserve_run(&mut self, now: i64, want: u64, max_drift: u64) -> Result<Grant, Refusal> {
        debug_assert!(want <= self.template.position(1), "a run fits one tick");
        self.reserve_within::<true>(now, want, max_drift)
    }

    #[inline(always)]
    fn reserve_within<const RUN: bool>(&mut self, now: i64, want: u64, max_drift: u64) -> Result<Grant, Refusal> {
        debug_assert!(want > 0);
        self.observe(now);
        let t = self.template;
        let max_tick = t.max_tick();
        let wall_tick = now.max(0) as u64;
        let wall_pos = t.position(wall_tick.min(max_tick + 1));
        let limit = last_allowed_tick(now, max_drift);

        let mut start = self.next.max(wall_pos);
        if RUN && t.sequence_of(start) + want > t.position(1) {
            start = t.position(t.tick_of(start) + 1);
        }
        // The furthest a new mark may reach: the last position of the tick
        // max_drift and the window's whole ticks past the clock, unless the
        // IDs it must cover lie beyond (they lie within max_drift).
        let reach = wall_tick.saturating_add(max_drift).saturating_add(self.window.ticks).min(max_tick);
        let reach_end = t.position(reach + 1) - 1;
        let mark_above = |covers: u64| covers.max(covers.saturating_add(self.window.positions).min(reach_end));
        let exhausted = t.tick_of(start) > max_tick;
        if exhausted || limit.is_none_or(|l| t.tick_of(start) > l) {
            let clock_went_back = now < self.wall_high;
            let wall_usable = wall_tick <= max_tick && limit.is_some_and(|l| wall_tick <= l);
            if t.max_clock_back().is_some() && clock_went_back && wall_usable {
                if Some(self.clock_back) == t.max_clock_back() {
                    return Err(Refusal::ClockBackExhausted);
                }
                // A new era starts at the wall clock once its mark is durable.
                return Err(Refusal::NeedMark(Mark {
                    position: mark_above(wall_pos).max(wall_pos + 1),
                    clock_back: self.clock_back + 1,
                    wall: Some(now),
                }));
            }
            if limit.is_none() {
                return Err(Refusal::BeforeEpoch);
            }
            // No wait can help a layout whose time range is over.
            if exhausted {
                return Err(Refusal::TimestampExhausted);
            }
            let until = (t.tick_of(start) as i64).saturating_sub(max_drift.min(i64::MAX as u64) as i64);
            return Err(Refusal::Wait { until, at_mark: self.fresh && self.next > wall_pos });
        }
        // `limit` is at least the start's tick here.
        let last_allowed = t.position(limit.unwrap_or(0).min(max_tick) + 1) - 1;
        let wanted_end = start.saturating_add(want - 1).min(last_allowed);
        let next_mark = Mark {
            position: mark_above((wanted_end + 1).max(wall_pos)),
            clock_back: self.clock_back,
            wall: Some(self.wall_high),
        };
        // A run is granted whole or not at all.
        if start >= self.durable || (RUN && wanted_end >= self.durable) {
            return Err(Refusal::NeedMark(next_mark));
        }
        let end = wanted_end.min(self.durable - 1);
        // Near the limit of its reach a renewal may not get past the durable
        // mark until the clock moves on: none is asked for then.
        let renew = (self.requested <= self.durable
            && (end + 1).saturating_add(self.renew_margin) >= self.durable
            && next_mark.position > self.durable)
            .then(|| {
                self.requested = next_mark.position;
                next_mark
            });
        self.count(start, end, now);
        self.next = end + 1;
        self.fresh = false;
        Ok(Grant {
            block: Block { template: t, first: start, len: end - start + 1, clock_back: self.clock_back },
            renew,
        })
    }

    /// Records that `mark` is durable (in WAL and the state file). A mark of
    /// a later era switches to that era.
    pub fn mark_written(&mut self, mark: Mark) {
        self.advance_to(mark);
        self.stats.marks_written += 1;
    }

    /// Records that writing a requested mark failed, so that it is asked for
    /// again. Nothing issued depended on it.
    pub fn mark_failed(&mut self) {
        self.requested = self.durable;
    }

    /// Raises the durable mark to one written by this server's past or its
    /// primary, replayed from WAL: everything below it counts as issued.
    /// Returns whether the mark moved.
    pub fn raise_mark(&mut self, mark: Mark) -> Result<bool, ClockBackOutOfRange> {
        self.check_era(mark.clock_back)?;
        if self.covers(&mark) {
            return Ok(false);
        }
        // Unlike a mark this generator wrote, IDs below a replayed one may
        // all have been issued (by the primary, or before the crash).
        self.advance_to(mark);
        self.skip_below(mark);
        self.stats.marks_replayed += 1;
        Ok(true)
    }

    /// A DBA's floor (`snowflake_raise_floor`): no ID issued from now on lies
    /// below `floor`. Returns `Ok(false)` when the durable mark covers it
    /// already (then only the next position moves, within it), and `Ok(true)`
    /// when `floor` must be made durable first and reported with
    /// [`Generator::floor_written`]; nothing changes then.
    pub fn raise_floor(&mut self, floor: Mark) -> Result<bool, ClockBackOutOfRange> {
        self.check_era(floor.clock_back)?;
        if !self.covers(&floor) {
            return Ok(true);
        }
        self.skip_below(floor);
        Ok(false)
    }

    /// Records a floor made durable: the mark rises to it, and every ID below
    /// it counts as issued.
    pub fn floor_written(&mut self, floor: Mark) {
        self.advance_to(floor);
        self.skip_below(floor);
        self.stats.marks_written += 1;
    }

    /// Counts every position of the current era below `mark` as issued; a
    /// mark of an earlier era says nothing about this one.
    fn skip_below(&mut self, mark: Mark) {
        if mark.clock_back == self.clock_back {
            self.next = self.next.max(mark.position);
        }
    }

    /// Continues from `mark` of a new ID space (replayed from WAL after a DBA
    /// started one on the primary): the old space's marks no longer count,
    /// so the mark may be lower than the current one. Counters are kept.
    pub fn enter_new_space(&mut self, mark: Mark) -> Result<(), ClockBackOutOfRange> {
        let mut g = Generator::new(self.template, self.window, Some(mark))?;
        g.stats = self.stats;
        g.stats.marks_replayed += 1;
        *self = g;
        Ok(())
    }

    /// Continues as the node of `template` from `mark` (the durable mark,
    /// carried to that node), or from no mark when there is none yet: a
    /// claim of a new worker number, or a standby following its primary to
    /// one. Counters are kept.
    pub fn renumber(&mut self, template: IdTemplate, mark: Option<Mark>) -> Result<(), ClockBackOutOfRange> {
        let mut g = Generator::new(template, self.window, mark)?;
        g.stats = self.stats;
        *self = g;
        Ok(())
    }

    /// Whether a durable mark was ever made or raised to.
    pub fn has_mark(&self) -> bool {
        self.durable > 0 || self.clock_back > 0
    }

    fn advance_to(&mut self, mark: Mark) {
        if mark.clock_back > self.clock_back {
            self.clock_back = mark.clock_back;
            // The era is new: nothing of it was issued below the mark's start.
            self.next = mark.position.saturating_sub(self.window.positions);
            self.durable = mark.position;
            self.requested = mark.position;
            self.wall_high = mark.wall.unwrap_or(NO_READING);
            self.fresh = true;
        } else if mark.clock_back == self.clock_back && mark.position > self.durable {
            self.durable = mark.position;
            self.requested = self.requested.max(mark.position);
            if let Some(w) = mark.wall {
                self.wall_high = self.wall_high.max(w);
            }
        }
    }

    /// Whether the durable mark already rules out everything `mark` does.
    pub fn covers(&self, mark: &Mark) -> bool {
        self.mark().covers(mark)
    }

    #[inline]
    fn observe(&mut self, now: i64) {
        if now < self.wall_last {
            let back = now.abs_diff(self.wall_last);
            self.stats.clock_step_backs += 1;
            self.stats.last_step_back = back;
            self.stats.largest_step_back = self.stats.largest_step_back.max(back);
        }
        self.wall_last = now;
        self.wall_high = self.wall_high.max(now);
    }

    fn count(&mut self, start: u64, end: u64, now: i64) {
        let t = self.template;
        let (first_tick, last_tick) = (t.tick_of(start), t.tick_of(end));
        let starts_a_tick = t.sequence_of(start) == 0;
        let entered_from = if starts_a_tick { first_tick } else { first_tick + 1 };
        let ahead_from = entered_from.max(if now < 0 { 0 } else { now as u64 + 1 });
        if last_tick >= ahead_from {
            self.stats.ticks_borrowed += last_tick - ahead_from + 1;
        }
        let ran_out_before = !self.fresh && start == self.next && starts_a_tick;
        self.stats.sequence_exhaustions += last_tick - first_tick + u64::from(ran_out_before);
        self.stats.ids_issued += end - start + 1;
    }

    /// Adds a wait the caller did before a later successful or final attempt.
    pub fn record_wait(&mut self, micros: u64) {
        self.stats.waits += 1;
        self.stats.wait_micros += micros;
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The durable mark (or the one resumed from).
    pub fn mark(&self) -> Mark {
        Mark { position: self.durable, clock_back: self.clock_back, wall: self.wall_reading() }
    }

    /// Where a generator started after a clean shutdown continues without a
    /// gap: the next free position. Only valid once nothing can issue any more.
    pub fn resume_point(&self) -> Mark {
        Mark { position: self.next, clock_back: self.clock_back, wall: self.wall_reading() }
    }

    fn wall_reading(&self) -> Option<i64> {
        (self.wall_high != NO_READING).then_some(self.wall_high)
    }

    pub fn clock_back(&self) -> u64 {
        self.clock_back
    }

    pub fn template(&self) -> &IdTemplate {
        &self.template
    }

    /// How many ticks the last issued ID is ahead of the wall clock tick `now`.
    pub fn drift(&self, now: i64) -> u64 {
        if self.fresh {
            return 0;
        }
        let last = self.template.tick_of(self.next - 1);
        (last as i128 - now as i128).max(0) as u64
    }
}

/// The last tick a call at wall-clock tick `now` may issue; `None` when even
/// tick zero is more than `max_drift` ahead (a clock before the epoch).
#[inline]
fn last_allowed_tick(now: i64, max_drift: u64) -> Option<u64> {
    if now >= 0 {
        Some((now as u64).saturating_add(max_drift))
    } else {
        u64::try_from(now.saturating_add(max_drift.min(i64::MAX as u64) as i64)).ok()
    }
}

#[cfg(test)]
mod tests;
