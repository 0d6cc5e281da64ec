//! Moving a data directory to other ID settings (layout, epoch, tick) without
//! repeating an ID.
//!
//! IDs are bit patterns, not instants: with the epoch moved Δ later, the new ID
//! at instant I is the old ID of instant I − Δ, and with ticks ten times longer
//! new IDs are ten times smaller. So an old mark is carried across as an ID
//! value, never as an instant: the *ceiling*, a value above every ID the old
//! mark covers (computed under the old settings, for any node), and the first
//! position under the new settings whose ID reaches it. From there on a data
//! directory's IDs keep increasing, whatever the settings.
//!
//! Eras need one more rule. Under the same layout the clock_back field keeps
//! its bits, so IDs of different eras never meet and only the mark's own era
//! has to be carried. Across layouts, a value order is all that holds: the old
//! layout must put clock_back above the timestamp for its earlier eras to lie
//! below the ceiling, and the new one must for its later eras (a clock step
//! back after the change) to stay above it.

use super::codec::{Codec, DecodeError, Decoded, IdTemplate, Node};
use super::generator::Mark;
use super::layout::{Field, Layout};

/// An ID value no ID of the new settings can reach: above every 63-bit ID.
pub const NO_ID_REACHES: u64 = 1 << 63;

/// Why a mark cannot be carried to other settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CarryError {
    /// The mark is of a later clock_back era, and the old layout does not put
    /// clock_back above the timestamp: IDs of earlier eras may lie above this
    /// era's, and a mark does not say how far.
    EarlierEras,
    /// The new layout has a clock_back field below its timestamp: after a
    /// clock step back, its next era would start below the old IDs.
    LaterEras,
    /// No ID of the new settings reaches the old ones before the new time
    /// range ends.
    Unreachable,
}

/// The mark a data directory continues from under `new` as `node`, when its
/// last mark `mark` was made under `old` as `old_node`: the mark itself when
/// the settings and the node are the same, otherwise the first position (and
/// era) whose IDs lie above every ID issued under `old` below `mark`, by any
/// node.
///
/// A node change alone is carried too: a position is no ID, and the node
/// fields lie above the sequence, so a lower number at the mark's position
/// would issue IDs below those the old number issued in the same tick (after
/// a clean shutdown, or a bulk call that ran ahead, up to the mark itself).
///
/// # Examples
///
/// ```
/// use snowflake_id::snowflake::codec::{Codec, Node};
/// use snowflake_id::snowflake::generator::Mark;
/// use snowflake_id::snowflake::id_space::carry;
/// use snowflake_id::snowflake::layout::Layout;
/// use snowflake_id::snowflake::time::{TimeBase, UnixMillis};
///
/// let layout = Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap();
/// let old = Codec::new(layout, TimeBase::new(UnixMillis(1_735_689_600_000), 1).unwrap());
/// // The epoch moved 3 seconds later: the old IDs of a tick are the new IDs of 3000 ticks later.
/// let new = Codec::new(layout, TimeBase::new(UnixMillis(1_735_689_603_000), 1).unwrap());
/// let node = Node { datacenter: 1, worker: 2 };
/// let mark = Mark { position: old.template(node).position(10_000), clock_back: 0, wall: None };
/// let carried = carry(&old, node, &mark, &new, node).unwrap();
/// // Tick 10,000 has the same bits under both epochs, 3 seconds later under
/// // the new one; the old IDs of that tick, from any node, lie below the
/// // new IDs of the next.
/// assert_eq!(carried.position, new.template(node).position(10_001));
/// assert_eq!(carry(&old, node, &mark, &old, node), Ok(mark));
/// ```
pub fn carry(old: &Codec, old_node: Node, mark: &Mark, new: &Codec, node: Node) -> Result<Mark, CarryError> {
    if old == new && old_node == node {
        return Ok(*mark);
    }
    let same_layout = old.layout == new.layout;
    if !same_layout {
        if mark.clock_back > 0 && !eras_on_top(&old.layout) {
            return Err(CarryError::EarlierEras);
        }
        if new.layout.field(Field::ClockBack).is_some() && !eras_on_top(&new.layout) {
            return Err(CarryError::LaterEras);
        }
    }
    let ceiling = ceiling(old, mark);
    let t = new.template(node);
    let (position, clock_back) = if same_layout {
        // The era's bits stay where they were: only this era's IDs can meet.
        (first_position_from(&t, mark.clock_back, ceiling).ok_or(CarryError::Unreachable)?, mark.clock_back)
    } else {
        first_in_any_era(&t, ceiling).ok_or(CarryError::Unreachable)?
    };
    let wall =
        mark.wall.and_then(|w| old.time.start_of(u64::try_from(w).ok()?)).map(|instant| new.time.tick_of(instant));
    Ok(Mark { position, clock_back, wall })
}

/// Why a floor cannot be raised to an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorError {
    /// The value is no ID of these settings.
    Invalid(DecodeError),
    /// No ID of this node, in the ID's era, lies above it: the layout puts a
    /// node field above the timestamp, and the ID's number there is higher.
    NodeAbove,
    /// No ID of this node, in the ID's era, lies above it before the time
    /// range ends (the ID is at the end of the range).
    RangeEnd,
    /// The layout's clock_back field lies below its timestamp: IDs of a
    /// later era are not all greater, so no era keeps every later ID above.
    ErasInterleave,
}

/// The mark from which `node` issues only IDs greater than `id`, an ID of
/// `codec` issued by any node (a DBA's floor: `snowflake_raise_floor`), with
/// `id` decoded. The mark is in `id`'s era, at the first position whose ID
/// exceeds it, as a same-layout carry keeps the era.
///
/// ```
/// use snowflake_id::snowflake::codec::{Codec, Node};
/// use snowflake_id::snowflake::id_space::floor_above;
/// use snowflake_id::snowflake::layout::Layout;
/// use snowflake_id::snowflake::time::{TimeBase, UnixMillis};
///
/// let layout = Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap();
/// let codec = Codec::new(layout, TimeBase::new(UnixMillis(1_735_689_600_000), 1).unwrap());
/// let (us, them) = (Node { datacenter: 0, worker: 1 }, Node { datacenter: 9, worker: 9 });
/// let theirs = codec.template(them).encode(codec.template(them).position(5_000) + 7, 0);
/// let (floor, _) = floor_above(&codec, us, theirs).unwrap();
/// // Our IDs of tick 5000 lie below theirs (a lower node number): we continue at tick 5001.
/// assert_eq!(floor.position, codec.template(us).position(5_001));
/// assert!(codec.template(us).encode(floor.position, 0) > theirs);
/// ```
pub fn floor_above(codec: &Codec, node: Node, id: i64) -> Result<(Mark, Decoded), FloorError> {
    let decoded = codec.decode(id).map_err(FloorError::Invalid)?;
    if codec.layout.field(Field::ClockBack).is_some() && !eras_on_top(&codec.layout) {
        return Err(FloorError::ErasInterleave);
    }
    let clock_back = decoded.clock_back.unwrap_or(0);
    let t = codec.template(node);
    // `id` is not negative: one more fits in u64.
    let position = first_position_from(&t, clock_back, id as u64 + 1).ok_or_else(|| {
        // The last ID of this node in the era is no higher: either a node
        // field above the timestamp holds more in `id`, or `id` ends the range.
        let node_above =
            [(Field::Datacenter, node.datacenter, decoded.datacenter), (Field::Worker, node.worker, decoded.worker)]
                .into_iter()
                .any(|(f, ours, theirs)| {
                    codec.layout.field(f).is_some_and(|b| b.shift > codec.layout.timestamp().shift)
                        && theirs.unwrap_or(0) > ours
                });
        if node_above {
            FloorError::NodeAbove
        } else {
            FloorError::RangeEnd
        }
    })?;
    Ok((Mark { position, clock_back, wall: None }, decoded))
}

/// Whether a later era's IDs lie above every ID of an earlier one, for any
/// one node: the clock_back field is above the timestamp (and so above the
/// sequence), with only node or reserved fields above it.
fn eras_on_top(layout: &Layout) -> bool {
    layout.field(Field::ClockBack).is_some_and(|c| c.shift > layout.timestamp().shift)
}

/// A value above every ID issued under `old` below `mark`, in the mark's era,
/// by any node; with clock_back above the timestamp, in earlier eras too.
/// [`NO_ID_REACHES`] when the old time range is used up.
pub fn ceiling(old: &Codec, mark: &Mark) -> u64 {
    // Every node field at its largest: compared field by field from the top,
    // this ID is above an ID of any node at an earlier position (the
    // timestamp, then the sequence below it, tell them apart) or an earlier
    // era with clock_back on top.
    let max = |f: Field| old.layout.field(f).map_or(0, |b| b.max());
    let t = old.template(Node { datacenter: max(Field::Datacenter), worker: max(Field::Worker) });
    if t.tick_of(mark.position) > t.max_tick() {
        return NO_ID_REACHES;
    }
    t.encode(mark.position, mark.clock_back) as u64
}

/// The first position under `new`, in era `clock_back` (which the caller keeps
/// within the new layout), whose ID is at least `ceiling`: every later
/// position's ID is larger still. `None` when even the last tick stays below.
pub fn first_position_from(new: &IdTemplate, clock_back: u64, ceiling: u64) -> Option<u64> {
    let end = new.position(new.max_tick() + 1);
    // For a fixed node and era, IDs grow with positions.
    first_reaching(0, end, |position| new.encode(position, clock_back) as u64 >= ceiling)
}

/// The first era, and its first position, whose IDs reach `ceiling`, for a
/// layout without a clock_back field or with one above the timestamp (where
/// a later era's IDs are all larger).
fn first_in_any_era(new: &IdTemplate, ceiling: u64) -> Option<(u64, u64)> {
    let last = new.position(new.max_tick() + 1) - 1;
    let eras = new.max_clock_back().unwrap_or(0) + 1;
    let era = first_reaching(0, eras, |era| new.encode(last, era) as u64 >= ceiling)?;
    Some((first_position_from(new, era, ceiling)?, era))
}

/// The first value in `low..high` for which `reaches` holds, when it holds
/// for every value after it too.
fn first_reaching(mut low: u64, end: u64, reaches: impl Fn(u64) -> bool) -> Option<u64> {
    let mut high = end;
    while low < high {
        let middle = low + (high - low) / 2;
        if reaches(middle) {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    (low < end).then_some(low)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::layout::Layout;
    use crate::snowflake::time::{TimeBase, UnixMillis};
    use proptest::prelude::*;

    const EPOCH: i64 = 1_735_689_600_000;

    fn codec(spec: &str, epoch: i64, tick_ms: u32) -> Codec {
        Codec::new(Layout::parse(spec).unwrap(), TimeBase::new(UnixMillis(epoch), tick_ms).unwrap())
    }

    const NODE: Node = Node { datacenter: 3, worker: 7 };
    const DEFAULT: &str = "timestamp:41,datacenter:5,worker:5,sequence:12";

    /// Where new settings start after a mark made under old ones, as an instant.
    fn resume_instant(old: &Codec, new: &Codec, mark: &Mark) -> Option<UnixMillis> {
        let carried = carry(old, NODE, mark, new, NODE).ok()?;
        new.time.start_of(new.template(NODE).tick_of(carried.position))
    }

    fn mark_at(c: &Codec, instant: i64, sequence: u64) -> Mark {
        let t = c.template(NODE);
        let tick = c.time.tick_of(UnixMillis(instant)) as u64;
        Mark { position: t.position(tick) + sequence, clock_back: 0, wall: Some(tick as i64) }
    }

    fn max_of(c: &Codec, f: Field) -> u64 {
        c.layout.field(f).map_or(0, |b| b.max())
    }

    /// The review's case: minute ticks, worker 9 renumbered to 3 after a clean
    /// shutdown in the middle of a tick. Worker 3's IDs of that tick lie below
    /// worker 9's, so the carried mark is the next tick; worker 12 may stay.
    #[test]
    fn a_node_change_alone_is_carried_above_the_old_numbers_ids() {
        let c = codec(DEFAULT, EPOCH, 60_000);
        let (nine, three, twelve) =
            (Node { datacenter: 0, worker: 9 }, Node { datacenter: 0, worker: 3 }, Node { datacenter: 0, worker: 12 });
        let old = c.template(nine);
        let resume = Mark { position: old.position(1_000) + 100, clock_back: 0, wall: None };
        let last_issued = old.encode(resume.position - 1, 0);
        assert_eq!(carry(&c, nine, &resume, &c, nine), Ok(resume), "no change, no carry");
        let carried = carry(&c, nine, &resume, &c, three).unwrap();
        assert_eq!(carried.position, c.template(three).position(1_001));
        assert!(c.template(three).encode(carried.position, 0) > last_issued);
        assert!(c.template(three).encode(resume.position, 0) < last_issued, "the mark as it was would go down");
        let carried = carry(&c, nine, &resume, &c, twelve).unwrap();
        assert!(c.template(twelve).encode(carried.position, 0) > last_issued);
        assert!(carried.position <= c.template(twelve).position(1_001));
    }

    #[test]
    fn under_the_same_settings_the_mark_is_kept() {
        let c = codec(DEFAULT, EPOCH, 1);
        let mark = mark_at(&c, EPOCH + 86_400_000, 17);
        assert_eq!(carry(&c, NODE, &mark, &c, NODE), Ok(mark));
    }

    #[test]
    fn an_epoch_moved_later_starts_that_much_later() {
        let old = codec(DEFAULT, EPOCH, 1);
        let new = codec(DEFAULT, EPOCH + 3000, 1);
        let at = EPOCH + 86_400_000;
        let mark = mark_at(&old, at, 0);
        // The next tick: the old IDs of the mark's tick, from nodes above ours, lie above ours.
        assert_eq!(resume_instant(&old, &new, &mark), Some(UnixMillis(at + 3001)));
        // Moved earlier, the new settings are already past the old IDs.
        let earlier = codec(DEFAULT, EPOCH - 3000, 1);
        assert_eq!(resume_instant(&old, &earlier, &mark), Some(UnixMillis(at - 2999)));
    }

    #[test]
    fn the_wall_clock_reading_is_carried_as_an_instant() {
        let old = codec(DEFAULT, EPOCH, 1);
        let new = codec(DEFAULT, EPOCH + 3000, 10);
        let mark = mark_at(&old, EPOCH + 50_000, 0);
        let carried = carry(&old, NODE, &mark, &new, NODE).unwrap();
        assert_eq!(carried.wall, Some(4_700), "47 s after the new epoch, in 10 ms ticks");
        let unknown = Mark { wall: None, ..mark };
        assert_eq!(carry(&old, NODE, &unknown, &new, NODE).unwrap().wall, None);
    }

    #[test]
    fn longer_ticks_start_far_later() {
        let old = codec(DEFAULT, EPOCH, 1);
        let new = codec(DEFAULT, EPOCH, 10);
        let at = EPOCH + 1_000_000;
        let mark = mark_at(&old, at, 5);
        // Tick 1,000,000 again, now 10 ms long: ten times as far from the epoch.
        assert_eq!(resume_instant(&old, &new, &mark), Some(UnixMillis(EPOCH + 10_000_010)));
    }

    #[test]
    fn a_timestamp_field_one_bit_higher_reaches_the_old_ids_sooner() {
        let old = codec(DEFAULT, EPOCH, 1);
        let new = codec("timestamp:40,datacenter:5,worker:5,sequence:13", EPOCH, 1);
        let mark = mark_at(&old, EPOCH + 5_000, 0);
        let ceiling = ceiling(&old, &mark);
        let t = new.template(NODE);
        let p = carry(&old, NODE, &mark, &new, NODE).unwrap().position;
        assert!(t.encode(p, 0) as u64 >= ceiling && (t.encode(p - 1, 0) as u64) < ceiling);
        // The timestamp moved one bit up: half the ticks reach the same values
        // (the next one, above the old tick's nodes).
        assert_eq!(resume_instant(&old, &new, &mark), Some(UnixMillis(EPOCH + 2_501)));
    }

    #[test]
    fn the_ceiling_is_above_every_node_at_the_mark() {
        // A layout with the worker above the timestamp: the ceiling takes the largest worker.
        let old = codec("worker:4,timestamp:40,sequence:12", EPOCH, 1);
        let mark = mark_at(&old, EPOCH + 5_000, 0);
        let c = ceiling(&old, &mark);
        let top = old.template(Node { datacenter: 0, worker: 15 });
        assert!(c > top.encode(mark.position - 1, 0) as u64);
        // Our own worker (7) never reaches a ceiling set by worker 15 under the same layout.
        let moved = codec("worker:4,timestamp:40,sequence:12", EPOCH + 1000, 1);
        assert_eq!(carry(&old, NODE, &mark, &moved, NODE), Err(CarryError::Unreachable));
    }

    #[test]
    fn the_same_layout_carries_only_the_marks_era() {
        // clock_back below the timestamp: earlier eras keep their own bits.
        let spec = "timestamp:41,clock_back:2,worker:8,sequence:12";
        let old = codec(spec, EPOCH, 1);
        let mut mark = mark_at(&old, EPOCH + 5_000, 0);
        mark.clock_back = 2;
        let carried = carry(&old, NODE, &mark, &codec(spec, EPOCH + 1000, 1), NODE).unwrap();
        assert_eq!(carried.clock_back, 2);
        assert!(old.template(NODE).tick_of(carried.position) > 5_000);
    }

    #[test]
    fn across_layouts_eras_must_be_on_top() {
        let below = codec("timestamp:41,clock_back:2,worker:8,sequence:12", EPOCH, 1);
        let above = codec("clock_back:2,timestamp:41,worker:8,sequence:12", EPOCH, 1);
        let plain = codec("timestamp:41,worker:8,sequence:12", EPOCH, 1);
        let mut mark = mark_at(&below, EPOCH + 5_000, 0);
        assert!(carry(&below, NODE, &mark, &plain, NODE).is_ok(), "era 0 has no earlier era");
        mark.clock_back = 1;
        assert_eq!(carry(&below, NODE, &mark, &plain, NODE), Err(CarryError::EarlierEras));
        assert_eq!(carry(&plain, NODE, &mark_at(&plain, EPOCH, 0), &below, NODE), Err(CarryError::LaterEras));

        // With clock_back on top, a mark of era 1 lies above all of era 0, and
        // a new layout with it on top too continues in the first era that reaches it.
        let other = codec("clock_back:2,timestamp:42,worker:7,sequence:12", EPOCH, 1);
        let carried = carry(&above, NODE, &mark, &other, NODE).unwrap();
        assert_eq!(carried.clock_back, 1);
        let t = above.template(NODE);
        let last_of_era_zero = t.position(t.max_tick()) + (t.position(1) - 1);
        assert!(ceiling(&above, &mark) > t.encode(last_of_era_zero, 0) as u64);
        // Without a clock_back field the new layout cannot reach era 1 of the old.
        assert_eq!(carry(&above, NODE, &mark, &plain, NODE), Err(CarryError::Unreachable));
    }

    #[test]
    fn a_used_up_old_range_leaves_no_room() {
        let old = codec("timestamp:20,sequence:4", EPOCH, 1);
        let t = old.template(Node::default());
        let mark = Mark { position: t.position(t.max_tick() + 1), clock_back: 0, wall: None };
        assert_eq!(ceiling(&old, &mark), NO_ID_REACHES);
        assert_eq!(carry(&old, NODE, &mark, &codec(DEFAULT, EPOCH, 1), NODE), Err(CarryError::Unreachable));
    }

    #[test]
    fn a_floor_is_refused_for_what_is_no_id_of_the_layout_or_lies_out_of_reach() {
        let c = codec(DEFAULT, EPOCH, 1);
        assert_eq!(floor_above(&c, NODE, -1).unwrap_err(), FloorError::Invalid(DecodeError::Negative));
        // 62 bits of fields: the top bit is no field's.
        let narrow = codec("timestamp:40,worker:10,sequence:12", EPOCH, 1);
        assert_eq!(floor_above(&narrow, NODE, 1 << 62).unwrap_err(), FloorError::Invalid(DecodeError::StrayBits));
        // The worker above the timestamp: worker 7 never passes worker 8's IDs.
        let node_on_top = codec("worker:4,timestamp:40,sequence:19", EPOCH, 1);
        let theirs = node_on_top.template(Node { datacenter: 0, worker: 8 }).encode(5, 0);
        assert_eq!(floor_above(&node_on_top, NODE, theirs).unwrap_err(), FloorError::NodeAbove);
        // The largest ID of the layout: the range ends, whatever the node.
        assert_eq!(floor_above(&c, NODE, i64::MAX).unwrap_err(), FloorError::RangeEnd);
        assert_eq!(floor_above(&node_on_top, NODE, i64::MAX).unwrap_err(), FloorError::NodeAbove);
        let ours_last =
            node_on_top.template(NODE).encode(node_on_top.template(NODE).position(node_on_top.max_tick() + 1) - 1, 0);
        assert_eq!(floor_above(&node_on_top, NODE, ours_last).unwrap_err(), FloorError::RangeEnd);
        // Eras below the timestamp: no era keeps later IDs above.
        let below = codec("timestamp:39,clock_back:2,datacenter:5,worker:5,sequence:12", EPOCH, 1);
        assert_eq!(floor_above(&below, NODE, 1 << 40).unwrap_err(), FloorError::ErasInterleave);
        // The era of the ID is kept.
        let with_cb = codec("clock_back:2,timestamp:39,datacenter:5,worker:5,sequence:12", EPOCH, 1);
        let id = with_cb.template(NODE).encode(1 << 20, 2);
        let (floor, decoded) = floor_above(&with_cb, NODE, id).unwrap();
        assert_eq!((floor.clock_back, decoded.clock_back), (2, Some(2)));
        assert_eq!(floor.position, (1 << 20) + 1);
    }

    proptest! {
        /// Whatever the settings on either side: every ID issued below the old
        /// mark, by any node, lies below the first ID of the carried mark, and
        /// the position before it does not reach them.
        #[test]
        fn the_first_new_id_is_above_every_old_one(
            old_spec in prop::sample::select(vec![DEFAULT, "timestamp:40,worker:13,sequence:10", "worker:6,timestamp:39,sequence:8,datacenter:10"]),
            new_spec in prop::sample::select(vec![DEFAULT, "timestamp:42,worker:9,sequence:12", "timestamp:39,sequence:8,worker:16"]),
            old_tick_ms in 1u32..20,
            new_tick_ms in 1u32..20,
            shift in -100_000i64..100_000,
            at in 0i64..10_000_000_000,
            sequence in 0u64..256,
            earlier in 1u64..1_000_000,
            old_worker in 0u64..64,
            old_datacenter in 0u64..1024,
        ) {
            let old = codec(old_spec, EPOCH, old_tick_ms);
            let new = codec(new_spec, EPOCH + shift, new_tick_ms);
            let node = Node { datacenter: 0, worker: 5 };
            let old_node = Node { datacenter: 0, worker: old_worker.min(max_of(&old, Field::Worker)) };
            let t_old = old.template(old_node);
            let tick = old.time.tick_of(UnixMillis(EPOCH + at)) as u64;
            let position = t_old.position(tick) + sequence.min(t_old.position(1) - 1);
            let mark = Mark { position, clock_back: 0, wall: None };
            let Ok(carried) = carry(&old, old_node, &mark, &new, node) else {
                // Only a layout with a node above the timestamp may leave no room.
                prop_assert!(old_spec.starts_with("worker") || new_spec.starts_with("worker"));
                return Ok(());
            };
            let t_new = new.template(node);
            let first = t_new.encode(carried.position, carried.clock_back) as u64;
            let other = old.template(Node {
                datacenter: old_datacenter.min(max_of(&old, Field::Datacenter)),
                worker: old_worker.min(max_of(&old, Field::Worker)),
            });
            for issued in [position.saturating_sub(earlier), position.saturating_sub(1)] {
                if issued < position {
                    prop_assert!((t_old.encode(issued, 0) as u64) < first);
                    prop_assert!((other.encode(issued, 0) as u64) < first);
                }
            }
            prop_assert!(carried.position == 0 || (t_new.encode(carried.position - 1, 0) as u64) < ceiling(&old, &mark));
        }

        /// Every ID of this node from the floor on lies above the given ID,
        /// whichever node issued it, and the position before the floor does not.
        #[test]
        fn every_id_from_a_floor_on_is_above_it(
            spec in prop::sample::select(vec![DEFAULT, "timestamp:40,worker:13,sequence:10", "clock_back:1,timestamp:38,datacenter:4,worker:8,sequence:12"]),
            tick in 0u64..1_000_000_000,
            sequence in 0u64..1024,
            their_node in (0u64..16, 0u64..256),
            our_node in (0u64..16, 0u64..256),
            era in 0u64..2,
            later in 0u64..100_000,
        ) {
            let c = codec(spec, EPOCH, 1);
            let fit = |(d, w): (u64, u64)| {
                let max = |f: Field| c.layout.field(f).map_or(0, |b| b.max());
                Node { datacenter: d.min(max(Field::Datacenter)), worker: w.min(max(Field::Worker)) }
            };
            let era = era.min(c.layout.field(Field::ClockBack).map_or(0, |b| b.max()));
            let theirs = c.template(fit(their_node));
            let id = theirs.encode(theirs.position(tick) + sequence.min(theirs.position(1) - 1), era);
            let ours = c.template(fit(our_node));
            let (floor, _) = floor_above(&c, fit(our_node), id).unwrap();
            prop_assert_eq!(floor.clock_back, era);
            prop_assert!(ours.encode(floor.position, era) > id);
            prop_assert!(ours.encode(floor.position + later, era) > id);
            prop_assert!(floor.position == 0 || ours.encode(floor.position - 1, era) <= id);
        }
    }
}
