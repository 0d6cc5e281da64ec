//! A mark as it is kept outside the generator, in the state file and in WAL.
//!
//! The generator counts positions (tick, sequence) of one layout and time base;
//! a record keeps the mark as an instant and a sequence, with the scale it was
//! written in. It is read back under the settings it was made under (the state
//! file and WAL records name them), exactly; a record whose instant or
//! sequence width does not fit those (a hand-made file) is rounded up to a
//! whole tick, which only rules out more. Carrying a mark to other settings is
//! [`super::id_space`]'s: as an ID value, never as an instant.

use super::codec::{Codec, Node};
use super::generator::Mark;
use super::time::UnixMillis;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkRecord {
    /// The start of the mark's tick.
    pub instant: UnixMillis,
    /// The mark's sequence within that tick: zero for a mark set ahead, the
    /// next free one for the exact point a clean shutdown stopped at.
    pub sequence: u64,
    pub clock_back: u64,
    /// The wall clock's highest reading in the era when the mark was set.
    pub wall: Option<UnixMillis>,
    /// The scale the mark was written in.
    pub tick_ms: u32,
    pub sequence_bits: u32,
}

impl MarkRecord {
    pub fn new(mark: &Mark, codec: &Codec) -> MarkRecord {
        let t = codec.template(Node::default());
        let tick = t.tick_of(mark.position);
        MarkRecord {
            instant: codec.instant_of(tick).unwrap_or(UnixMillis(i64::MAX)),
            sequence: t.sequence_of(mark.position),
            clock_back: mark.clock_back,
            wall: mark.wall.map(|w| codec.time.start_of(w.max(0) as u64).unwrap_or(UnixMillis(i64::MAX))),
            tick_ms: codec.time.tick_ms(),
            sequence_bits: t.sequence_bits(),
        }
    }

    /// The mark under `codec`: exact when the scale is the same, otherwise
    /// rounded up to the next tick boundary that is not below it.
    pub fn to_mark(&self, codec: &Codec) -> Mark {
        let t = codec.template(Node::default());
        let time = codec.time;
        let tick = time.tick_at_or_after(self.instant);
        let same_scale = self.tick_ms == time.tick_ms()
            && self.sequence_bits == t.sequence_bits()
            && time.start_of(tick) == Some(self.instant);
        let position = if same_scale || self.sequence == 0 {
            t.position(tick).saturating_add(if same_scale { self.sequence } else { 0 })
        } else {
            // Somewhere inside the old tick: the whole of it counts as used.
            let end = UnixMillis(self.instant.0.saturating_add(i64::from(self.tick_ms)));
            t.position(time.tick_at_or_after(end))
        };
        Mark { position, clock_back: self.clock_back, wall: self.wall.map(|w| time.tick_of(w)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::layout::Layout;
    use crate::snowflake::time::TimeBase;

    fn codec(spec: &str, epoch: i64, tick_ms: u32) -> Codec {
        Codec::new(Layout::parse(spec).unwrap(), TimeBase::new(UnixMillis(epoch), tick_ms).unwrap())
    }

    #[test]
    fn a_mark_round_trips_under_the_same_settings() {
        let c = codec("timestamp:41,worker:10,sequence:12", 1_000, 1);
        let m = Mark { position: (5_000 << 12) | 17, clock_back: 0, wall: Some(4_990) };
        let r = MarkRecord::new(&m, &c);
        assert_eq!((r.instant, r.sequence, r.wall), (UnixMillis(6_000), 17, Some(UnixMillis(5_990))));
        assert_eq!(r.to_mark(&c), m);
    }

    #[test]
    fn under_other_settings_a_mark_rounds_up_to_a_whole_tick() {
        let old = codec("timestamp:41,worker:10,sequence:12", 0, 10);
        let m = Mark { position: (100 << 12) | 5, clock_back: 1, wall: None };
        let r = MarkRecord::new(&m, &old); // 1000 ms, sequence 5 of a 10 ms tick

        // Millisecond ticks: the old tick 1000..1010 ms counts as used.
        let new = codec("timestamp:41,worker:10,sequence:12", 0, 1);
        assert_eq!(r.to_mark(&new).position, 1010 << 12);
        // Another sequence width, same tick: the next tick.
        let narrow = codec("timestamp:43,worker:10,sequence:10", 0, 10);
        assert_eq!(r.to_mark(&narrow).position, 101 << 10);
        // Another epoch, not aligned with the old ticks: rounded up.
        let shifted = codec("timestamp:41,worker:10,sequence:12", 3, 10);
        assert_eq!(r.to_mark(&shifted).position, 101 << 12);
        // A mark at the start of a tick stays there.
        let whole = MarkRecord { sequence: 0, ..r };
        assert_eq!(whole.to_mark(&new).position, 1000 << 12);
    }
}
