//! The generator: a logical clock over (tick, sequence) positions with a durable
//! high-water mark.
//!
//! # Invariants
//! - Positions are handed out in strictly increasing order within one
//!   clock_back era, so one node never issues the same ID twice and its IDs
//!   increase (across eras too when the layout puts clock_back above timestamp).
//! - No ID is issued at a tick at or above the durable mark. Before issuing
//!   beyond it, the generator hands a new mark to the caller's `persist` and
//!   only issues once that succeeded; a generator resumed from the last durable
//!   mark therefore continues above everything issued before the restart or
//!   crash, whatever the wall clock did meanwhile.
//! - An issued tick is at most `max_drift` ticks ahead of the wall clock
//!   reading it was issued against. When that would be broken the generator
//!   asks the caller to wait, or with a clock_back field and a clock that went
//!   back, starts a new era at the wall clock.
//!
//! The generator never reads a clock or touches a file: the caller passes the
//! wall-clock tick and a `persist` callback, so every fault can be replayed.

use super::codec::IdTemplate;

/// A durable high-water mark: every ID issued in era `clock_back` has a tick
/// below `tick`, and no ID was issued in a later era.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub tick: u64,
    pub clock_back: u64,
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
    pub marks_written: u64,
}

/// Why no block was handed out. Nothing was issued and no state changed
/// beyond the clock observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal<E> {
    /// Issuing now would run more than `max_drift` ahead of the wall clock;
    /// try again once the wall clock reaches tick `until`.
    Wait { until: i64 },
    /// The timestamp field has no tick left: the layout's time range is over.
    TimestampExhausted,
    /// The clock went back again but the clock_back field is at its maximum.
    ClockBackExhausted,
    /// The new mark could not be made durable.
    Persist(E),
}

/// A mark from a state file that does not fit the layout.
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

    /// The tick of the last ID in the block.
    pub fn last_tick(&self) -> u64 {
        self.template.tick_of(self.first + self.len.saturating_sub(1))
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
#[derive(Clone, Copy, Debug)]
pub struct Generator {
    template: IdTemplate,
    /// Ticks reserved ahead with every durable mark.
    window: u64,
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
    /// The durable mark's tick; see [`Mark`].
    mark: u64,
    stats: Stats,
}

impl Generator {
    /// A generator for a node, continuing above `resume` (the last durable mark)
    /// if there is one. `window` is how many ticks each durable mark reserves
    /// ahead; at least one.
    pub fn new(template: IdTemplate, window: u64, resume: Option<Mark>) -> Result<Self, ClockBackOutOfRange> {
        let window = window.max(1);
        let mut g = Generator {
            template,
            window,
            next: 0,
            fresh: true,
            clock_back: 0,
            wall_last: i64::MIN,
            wall_high: i64::MIN,
            mark: 0,
            stats: Stats::default(),
        };
        if let Some(m) = resume {
            let max = template.max_clock_back().unwrap_or(0);
            if m.clock_back > max {
                return Err(ClockBackOutOfRange { recorded: m.clock_back, max });
            }
            g.next = template.position(m.tick.min(template.max_tick() + 1));
            g.mark = m.tick;
            g.clock_back = m.clock_back;
            // The wall clock read at least this much before the mark was written.
            let seen = i64::try_from(m.tick.saturating_sub(window)).unwrap_or(i64::MAX);
            g.wall_last = seen;
            g.wall_high = seen;
        }
        Ok(g)
    }

    /// Hands out up to `want` (at least one) consecutive IDs against the wall
    /// clock tick `now`, never more than `max_drift` ticks ahead of it.
    /// Calls `persist` with a new mark first when the block reaches the durable
    /// mark; if that fails nothing is issued.
    #[inline]
    pub fn reserve<E>(
        &mut self,
        now: i64,
        want: u64,
        max_drift: u64,
        persist: impl FnOnce(Mark) -> Result<(), E>,
    ) -> Result<Block, Refusal<E>> {
        debug_assert!(want > 0);
        self.observe(now);
        let t = self.template;
        let max_tick = t.max_tick();
        let wall_tick = now.max(0) as u64;
        let wall_pos = t.position(wall_tick.min(max_tick + 1));
        let limit = last_allowed_tick(now, max_drift);

        let mut start = self.next.max(wall_pos);
        let mut new_era = false;
        if limit.is_none_or(|l| t.tick_of(start) > l) {
            let clock_went_back = now < self.wall_high;
            if t.max_clock_back().is_some() && clock_went_back && limit.is_some_and(|l| wall_tick <= l) {
                if Some(self.clock_back) == t.max_clock_back() {
                    return Err(Refusal::ClockBackExhausted);
                }
                new_era = true;
                start = wall_pos;
            } else {
                let until = (t.tick_of(start) as i64).saturating_sub(max_drift.min(i64::MAX as u64) as i64);
                return Err(Refusal::Wait { until });
            }
        }
        if t.tick_of(start) > max_tick {
            return Err(Refusal::TimestampExhausted);
        }
        // `limit` is at least the start's tick here.
        let last_allowed = t.position(limit.unwrap_or(0).min(max_tick) + 1) - 1;
        let end = start.saturating_add(want - 1).min(last_allowed);

        let era = self.clock_back + u64::from(new_era);
        if new_era || t.tick_of(end) >= self.mark {
            let mark = Mark { tick: t.tick_of(end).max(wall_tick).saturating_add(self.window), clock_back: era };
            persist(mark).map_err(Refusal::Persist)?;
            self.mark = mark.tick;
            self.stats.marks_written += 1;
        }
        if new_era {
            self.clock_back = era;
            self.wall_high = now;
        }
        self.count(start, end, now, new_era);
        self.next = end + 1;
        self.fresh = false;
        Ok(Block { template: t, first: start, len: end - start + 1, clock_back: era })
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

    fn count(&mut self, start: u64, end: u64, now: i64, new_era: bool) {
        let t = self.template;
        let (first_tick, last_tick) = (t.tick_of(start), t.tick_of(end));
        let starts_a_tick = t.sequence_of(start) == 0;
        let entered_from = if starts_a_tick { first_tick } else { first_tick + 1 };
        let ahead_from = entered_from.max(if now < 0 { 0 } else { now as u64 + 1 });
        if last_tick >= ahead_from {
            self.stats.ticks_borrowed += last_tick - ahead_from + 1;
        }
        let ran_out_before = !self.fresh && !new_era && start == self.next && starts_a_tick;
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

    /// The last durable mark (or the one resumed from).
    pub fn mark(&self) -> Mark {
        Mark { tick: self.mark, clock_back: self.clock_back }
    }

    pub fn clock_back(&self) -> u64 {
        self.clock_back
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
