//! Turning fields into IDs and IDs back into fields.

use std::fmt;

use super::layout::{BitField, Field, Layout};
use super::time::{TimeBase, UnixMillis};

/// A server's place in the ID space: the values of its datacenter and worker fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Node {
    pub datacenter: u64,
    pub worker: u64,
}

/// The fields of one ID. Optional fields are `None` when the layout lacks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub tick: u64,
    pub datacenter: Option<u64>,
    pub worker: Option<u64>,
    pub sequence: u64,
    pub clock_back: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    Negative,
    /// Bits are set outside every field, or in the reserved field.
    StrayBits,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Negative => f.write_str("a snowflake ID is never negative"),
            DecodeError::StrayBits => {
                f.write_str("the ID has bits set outside the layout's fields or in its reserved field")
            }
        }
    }
}

/// An instant the layout cannot express as a timestamp field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeError {
    BeforeEpoch {
        epoch: UnixMillis,
    },
    /// Past the last tick; `last` is the start of the last representable tick.
    PastRange {
        last: UnixMillis,
    },
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RangeError::BeforeEpoch { epoch } => {
                write!(f, "the timestamp is before the epoch {epoch}")
            }
            RangeError::PastRange { last } => {
                write!(f, "the timestamp is past the layout's last tick, which starts at {last}")
            }
        }
    }
}

/// A layout with its time base: everything needed to read and write IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codec {
    pub layout: Layout,
    pub time: TimeBase,
}

impl Codec {
    pub fn new(layout: Layout, time: TimeBase) -> Self {
        Codec { layout, time }
    }

    /// A node as messages name it under this layout: `datacenter 1, worker
    /// 2`, or `worker 2` when the layout has no datacenter field.
    pub fn node_text(&self, node: Node) -> String {
        match self.layout.field(Field::Datacenter) {
            Some(_) => format!("datacenter {}, worker {}", node.datacenter, node.worker),
            None => format!("worker {}", node.worker),
        }
    }

    /// The fields of an ID, checking that it has no bit set outside them.
    ///
    /// # Examples
    ///
    /// ```
    /// use snowflake_id::snowflake::codec::{Codec, DecodeError};
    /// use snowflake_id::snowflake::layout::Layout;
    /// use snowflake_id::snowflake::time::{TimeBase, UnixMillis};
    ///
    /// // Discord's layout and epoch, and the ID from its documentation.
    /// let layout = Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap();
    /// let codec = Codec::new(layout, TimeBase::new(UnixMillis(1_420_070_400_000), 1).unwrap());
    /// let d = codec.decode(175_928_847_299_117_063)?;
    /// assert_eq!(codec.instant_of(d.tick).unwrap().to_string(), "2016-04-30 11:18:25.796+00");
    /// assert_eq!((d.datacenter, d.worker, d.sequence, d.clock_back), (Some(1), Some(0), 7, None));
    ///
    /// assert_eq!(codec.decode(-1), Err(DecodeError::Negative));
    /// # Ok::<(), DecodeError>(())
    /// ```
    pub fn decode(&self, id: i64) -> Result<Decoded, DecodeError> {
        let raw = u64::try_from(id).map_err(|_| DecodeError::Negative)?;
        let mut covered = 0u64;
        for (field, bits) in self.layout.fields() {
            if field != Field::Reserved {
                covered |= bits.place(bits.max());
            }
        }
        if raw & !covered != 0 {
            return Err(DecodeError::StrayBits);
        }
        let get = |f: Field| self.layout.field(f).map(|b| b.extract(raw));
        Ok(Decoded {
            tick: self.layout.timestamp().extract(raw),
            datacenter: get(Field::Datacenter),
            worker: get(Field::Worker),
            sequence: self.layout.sequence().extract(raw),
            clock_back: get(Field::ClockBack),
        })
    }

    /// The instant a tick starts, or `None` if it does not fit in `i64` milliseconds.
    pub fn instant_of(&self, tick: u64) -> Option<UnixMillis> {
        self.time.start_of(tick)
    }

    /// The last tick the timestamp field holds.
    pub fn max_tick(&self) -> u64 {
        self.layout.timestamp().max()
    }

    /// The start of the last tick the timestamp field holds, if it fits in `i64` milliseconds.
    pub fn last_instant(&self) -> Option<UnixMillis> {
        self.instant_of(self.max_tick())
    }

    /// The tick an instant falls in, if the timestamp field can hold it.
    pub fn tick_in_range(&self, t: UnixMillis) -> Result<u64, RangeError> {
        let tick = self.time.tick_of(t);
        if tick < 0 {
            return Err(RangeError::BeforeEpoch { epoch: self.time.epoch() });
        }
        if tick as u64 > self.max_tick() {
            let last = self.last_instant().unwrap_or(UnixMillis(i64::MAX));
            return Err(RangeError::PastRange { last });
        }
        Ok(tick as u64)
    }

    /// The smallest ID of the tick `t` falls in: every other field zero. For
    /// `id >= first_id_at(a) AND id < first_id_at(b)` range scans.
    pub fn first_id_at(&self, t: UnixMillis) -> Result<i64, RangeError> {
        let tick = self.tick_in_range(t)?;
        Ok(self.layout.timestamp().place(tick) as i64)
    }

    /// How far apart, in IDs, the first IDs of two instants `ms`
    /// milliseconds apart lie: whole ticks of the span (a part of a tick
    /// counts for none), placed where the timestamp field lies. Negative
    /// for a negative span. `None` when the field cannot hold so many ticks.
    /// A TimescaleDB chunk interval or retention age on an ID key.
    pub fn span(&self, ms: i64) -> Option<i64> {
        let ticks = ms.unsigned_abs() / u64::from(self.time.tick_ms());
        if ticks > self.max_tick() {
            return None;
        }
        let ids = self.layout.timestamp().place(ticks) as i64;
        Some(if ms < 0 { -ids } else { ids })
    }

    /// The constant parts of every ID a node generates, for the generator.
    pub fn template(&self, node: Node) -> IdTemplate {
        let l = &self.layout;
        let place = |f: Field, v: u64| l.field(f).map_or(0, |b| b.place(v));
        IdTemplate::new(
            place(Field::Datacenter, node.datacenter) | place(Field::Worker, node.worker),
            l.timestamp(),
            l.sequence(),
            l.field(Field::ClockBack),
        )
    }
}

/// Builds the IDs of one node from a position and a clock_back value.
///
/// A *position* numbers the (tick, sequence) pairs in order:
/// `position = tick << sequence.width | sequence`. Consecutive positions are
/// consecutive IDs of the node, so the generator can hand out a block of them
/// with one addition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdTemplate {
    node_bits: u64,
    // The layout's positions, unpacked so that the hot path does no branching.
    timestamp_shift: u32,
    sequence_shift: u32,
    sequence_bits: u32,
    sequence_mask: u64,
    max_tick: u64,
    clock_back_shift: u32,
    /// Zero when the layout has no clock_back field.
    max_clock_back: u64,
}

impl IdTemplate {
    fn new(node_bits: u64, timestamp: BitField, sequence: BitField, clock_back: Option<BitField>) -> Self {
        IdTemplate {
            node_bits,
            timestamp_shift: timestamp.shift,
            sequence_shift: sequence.shift,
            sequence_bits: sequence.width,
            sequence_mask: sequence.max(),
            max_tick: timestamp.max(),
            clock_back_shift: clock_back.map_or(0, |b| b.shift),
            max_clock_back: clock_back.map_or(0, BitField::max),
        }
    }

    #[inline]
    pub fn sequence_bits(&self) -> u32 {
        self.sequence_bits
    }

    /// How many consecutive integers one tick's IDs hold: all its positions
    /// when the sequence field holds the lowest bits, otherwise 1.
    pub fn consecutive_in_tick(&self) -> u64 {
        if self.sequence_shift == 0 {
            self.position(1)
        } else {
            1
        }
    }

    #[inline]
    pub fn tick_of(&self, position: u64) -> u64 {
        position >> self.sequence_bits
    }

    #[inline]
    pub fn sequence_of(&self, position: u64) -> u64 {
        position & self.sequence_mask
    }

    /// The first position of a tick.
    #[inline]
    pub fn position(&self, tick: u64) -> u64 {
        tick << self.sequence_bits
    }

    #[inline]
    pub fn max_tick(&self) -> u64 {
        self.max_tick
    }

    /// The largest value of the clock_back field, `None` when the layout lacks
    /// it: [`Layout::max_clock_back`], kept unpacked with the other fields.
    #[inline]
    pub fn max_clock_back(&self) -> Option<u64> {
        (self.max_clock_back > 0).then_some(self.max_clock_back)
    }

    /// The ID at `position`. The caller keeps the tick within the timestamp field
    /// and `clock_back` within its field (zero without one).
    ///
    /// # Examples
    ///
    /// ```
    /// use snowflake_id::snowflake::codec::{Codec, Node};
    /// use snowflake_id::snowflake::layout::Layout;
    /// use snowflake_id::snowflake::time::{TimeBase, UnixMillis};
    ///
    /// let layout = Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap();
    /// let codec = Codec::new(layout, TimeBase::new(UnixMillis(1_735_689_600_000), 1).unwrap());
    /// let template = codec.template(Node { datacenter: 3, worker: 7 });
    ///
    /// // Sequence 5 of the tick 1000 ms after the epoch.
    /// let id = template.encode(template.position(1000) + 5, 0);
    /// assert_eq!(id, (1000 << 22) | (3 << 17) | (7 << 12) | 5);
    /// let d = codec.decode(id).unwrap();
    /// assert_eq!((d.tick, d.datacenter, d.worker, d.sequence), (1000, Some(3), Some(7), 5));
    ///
    /// // The next position is the next ID.
    /// assert_eq!(template.encode(template.position(1000) + 6, 0), id + 1);
    /// ```
    #[inline]
    pub fn encode(&self, position: u64, clock_back: u64) -> i64 {
        let id = self.node_bits
            | (self.tick_of(position) << self.timestamp_shift)
            | (self.sequence_of(position) << self.sequence_shift)
            | (clock_back << self.clock_back_shift);
        id as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::layout::tests::arb_layout;
    use crate::snowflake::preset;
    use proptest::prelude::*;

    fn codec(name: &str) -> Codec {
        let r = preset::resolve(name).unwrap();
        Codec::new(r.layout, TimeBase::new(r.epoch, r.tick_ms).unwrap())
    }

    #[test]
    fn discords_documented_example() {
        // https://discord.com/developers/docs/reference#snowflakes
        let c = codec("discord");
        let d = c.decode(175_928_847_299_117_063).unwrap();
        assert_eq!(c.instant_of(d.tick).unwrap().to_string(), "2016-04-30 11:18:25.796+00");
        assert_eq!((d.datacenter, d.worker, d.sequence, d.clock_back), (Some(1), Some(0), 7, None));
    }

    #[test]
    fn a_pgedge_id_from_a_running_server() {
        // snowflake.nextval() of pgEdge's extension on node 3.
        let c = codec("pgedge");
        let d = c.decode(515_151_347_297_825_490).unwrap();
        assert_eq!(c.instant_of(d.tick).unwrap().to_string(), "2026-11-22 13:07:32.245+00");
        assert_eq!((d.datacenter, d.worker, d.sequence, d.clock_back), (None, Some(3), 722, None));
    }

    #[test]
    fn stray_bits_and_negatives_are_refused() {
        let c = codec("timestamp:20,sequence:4");
        assert_eq!(c.decode(-1), Err(DecodeError::Negative));
        assert_eq!(c.decode(1 << 24), Err(DecodeError::StrayBits));
        assert!(c.decode((1 << 24) - 1).is_ok());
        let r = codec("reserved:1,timestamp:40,sequence:10");
        assert_eq!(r.decode(1 << 50), Err(DecodeError::StrayBits));
    }

    #[test]
    fn a_span_is_the_distance_of_first_ids() {
        let c = codec("twitter");
        let day = 86_400_000;
        let from = |ms: i64| c.first_id_at(UnixMillis(c.time.epoch().0 + ms)).unwrap();
        assert_eq!(c.span(day), Some(from(3 * day) - from(2 * day)));
        assert_eq!(c.span(-day), Some(-(from(day) - from(0))));
        assert_eq!(c.span(0), Some(0));
        // Whole ticks only: 15 ms on a 10 ms tick is one tick.
        let coarse = codec("timestamp:40,sequence:8");
        let tens = Codec::new(coarse.layout, TimeBase::new(coarse.time.epoch(), 10).unwrap());
        assert_eq!(tens.span(15), Some(1 << 8));
        // More ticks than the field holds.
        let narrow = codec("timestamp:10,sequence:4");
        assert_eq!(narrow.span(1023), Some(1023 << 4));
        assert_eq!(narrow.span(1024), None);
        assert_eq!(narrow.span(i64::MIN), None);
    }

    proptest! {
        #[test]
        fn spans_add_up_like_first_ids(a in 0i64..1_000_000_000_000, b in 0i64..1_000_000_000_000) {
            let c = codec("twitter");
            let at = |ms: i64| c.first_id_at(UnixMillis(c.time.epoch().0 + ms)).unwrap();
            prop_assert_eq!(at(a) + c.span(b).unwrap(), at(a + b));
        }
    }

    #[test]
    fn first_id_at_checks_the_range() {
        let c = codec("timestamp:10,sequence:4");
        let epoch = c.time.epoch();
        assert_eq!(c.first_id_at(epoch), Ok(0));
        assert_eq!(c.first_id_at(UnixMillis(epoch.0 + 5)), Ok(5 << 4));
        assert_eq!(c.first_id_at(UnixMillis(epoch.0 - 1)), Err(RangeError::BeforeEpoch { epoch }));
        assert_eq!(c.first_id_at(UnixMillis(epoch.0 + 1023)), Ok(1023 << 4));
        assert_eq!(
            c.first_id_at(UnixMillis(epoch.0 + 1024)),
            Err(RangeError::PastRange { last: UnixMillis(epoch.0 + 1023) })
        );
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(layout in arb_layout(), tick in any::<u64>(), seq in any::<u64>(),
                                    dc in any::<u64>(), worker in any::<u64>(), cb in any::<u64>()) {
            let c = Codec::new(layout, TimeBase::new(UnixMillis(0), 1).unwrap());
            let fit = |f: Field, v: u64| layout.field(f).map_or(0, |b| v & b.max());
            let node = Node { datacenter: fit(Field::Datacenter, dc), worker: fit(Field::Worker, worker) };
            let t = c.template(node);
            let (tick, seq, cb) = (tick & t.max_tick(), fit(Field::Sequence, seq), fit(Field::ClockBack, cb));
            let id = t.encode(t.position(tick) | seq, cb);
            prop_assert!(id >= 0);
            let d = c.decode(id).unwrap();
            prop_assert_eq!(d.tick, tick);
            prop_assert_eq!(d.sequence, seq);
            prop_assert_eq!(d.datacenter, layout.field(Field::Datacenter).map(|_| node.datacenter));
            prop_assert_eq!(d.worker, layout.field(Field::Worker).map(|_| node.worker));
            prop_assert_eq!(d.clock_back, layout.field(Field::ClockBack).map(|_| cb));
        }

        #[test]
        fn the_template_and_its_layout_agree_on_max_clock_back(layout in arb_layout()) {
            let t = Codec::new(layout, TimeBase::new(UnixMillis(0), 1).unwrap()).template(Node::default());
            prop_assert_eq!(t.max_clock_back(), layout.max_clock_back());
        }

        #[test]
        fn consecutive_positions_give_increasing_ids(layout in arb_layout(), pos in any::<u64>()) {
            let t = Codec::new(layout, TimeBase::new(UnixMillis(0), 1).unwrap()).template(Node::default());
            let last = t.position(t.max_tick()) | t.sequence_of(u64::MAX);
            let pos = pos % last;
            prop_assert!(t.encode(pos, 0) < t.encode(pos + 1, 0));
        }
    }
}
