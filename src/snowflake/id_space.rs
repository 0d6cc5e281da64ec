//! Moving a data directory to other ID settings (layout, epoch, tick) without
//! repeating an ID.
//!
//! IDs are bit patterns, not instants: with the epoch moved Δ later, the new ID
//! at instant I is the old ID of instant I − Δ, and with ticks ten times longer
//! new IDs are ten times smaller. So an old mark is carried across as an ID
//! value, never as an instant: the *ceiling*, a value above every ID the old
//! mark covers, computed under the old settings; and the first position under
//! the new settings whose ID reaches it. From there on a data directory's IDs
//! keep increasing, whatever the settings.
//!
//! Not used by the server yet: the rule it implements is the one issue 17 asks
//! for at start and in WAL redo.

use super::codec::{Codec, IdTemplate, Node};
use super::generator::Mark;
use super::layout::Field;

/// An ID value no ID of the new settings can reach: above every 63-bit ID.
pub const NO_ID_REACHES: u64 = 1 << 63;

/// Why no ceiling can be given for an old mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoCeiling {
    /// The mark is of a later clock_back era, and the old layout does not put
    /// clock_back above the timestamp: IDs of earlier eras may lie above this
    /// era's, and a mark does not say how far.
    EarlierEras,
}

/// A value above every ID that `node` issued under `old` below `mark`, in the
/// mark's era and every earlier one. [`NO_ID_REACHES`] when the old time range
/// is used up.
pub fn ceiling(old: &Codec, node: Node, mark: &Mark) -> Result<u64, NoCeiling> {
    if mark.clock_back > 0 {
        let timestamp = old.layout.timestamp();
        let eras_on_top = old.layout.field(Field::ClockBack).is_some_and(|c| c.shift > timestamp.shift);
        if !eras_on_top {
            return Err(NoCeiling::EarlierEras);
        }
    }
    let t = old.template(node);
    if t.tick_of(mark.position) > t.max_tick() {
        return Ok(NO_ID_REACHES);
    }
    // For a fixed node and era an ID grows with its position, so the ID at the
    // mark is above every ID before it; earlier eras have smaller clock_back
    // bits above the timestamp, so their IDs are smaller still.
    Ok(t.encode(mark.position, mark.clock_back) as u64)
}

/// The first position under `new`, in era `clock_back` (which the caller keeps
/// within the new layout), whose ID is at least `ceiling`: every later
/// position's ID is larger still. `None` when even the last tick stays below.
pub fn first_position_from(new: &IdTemplate, clock_back: u64, ceiling: u64) -> Option<u64> {
    let end = new.position(new.max_tick() + 1);
    let reaches = |position: u64| new.encode(position, clock_back) as u64 >= ceiling;
    // IDs grow with positions (fixed node and era): search for the first that reaches.
    let (mut low, mut high) = (0, end);
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
        let t = new.template(NODE);
        let position = first_position_from(&t, mark.clock_back, ceiling(old, NODE, mark).ok()?)?;
        new.time.start_of(t.tick_of(position))
    }

    fn mark_at(c: &Codec, instant: i64, sequence: u64) -> Mark {
        let t = c.template(NODE);
        let tick = c.time.tick_of(UnixMillis(instant)) as u64;
        Mark { position: t.position(tick) + sequence, clock_back: 0, wall: None }
    }

    #[test]
    fn under_the_same_settings_the_mark_is_where_it_was() {
        let c = codec(DEFAULT, EPOCH, 1);
        let mark = mark_at(&c, EPOCH + 86_400_000, 17);
        let t = c.template(NODE);
        assert_eq!(first_position_from(&t, 0, ceiling(&c, NODE, &mark).unwrap()), Some(mark.position));
    }

    #[test]
    fn an_epoch_moved_later_starts_that_much_later() {
        let old = codec(DEFAULT, EPOCH, 1);
        let new = codec(DEFAULT, EPOCH + 3000, 1);
        let at = EPOCH + 86_400_000;
        let mark = mark_at(&old, at, 0);
        assert_eq!(resume_instant(&old, &new, &mark), Some(UnixMillis(at + 3000)));
        // Moved earlier, the new settings are already past the old IDs.
        let earlier = codec(DEFAULT, EPOCH - 3000, 1);
        assert_eq!(resume_instant(&old, &earlier, &mark), Some(UnixMillis(at - 3000)));
    }

    #[test]
    fn longer_ticks_start_far_later() {
        let old = codec(DEFAULT, EPOCH, 1);
        let new = codec(DEFAULT, EPOCH, 10);
        let at = EPOCH + 1_000_000;
        let mark = mark_at(&old, at, 5);
        // Tick 1,000,000 sequence 5 under 10 ms ticks: tick 1,000,000 again, 10 times later.
        assert_eq!(resume_instant(&old, &new, &mark), Some(UnixMillis(EPOCH + 10_000_000)));
    }

    #[test]
    fn a_timestamp_field_one_bit_higher_reaches_the_old_ids_sooner() {
        let old = codec(DEFAULT, EPOCH, 1);
        let new = codec("timestamp:40,datacenter:5,worker:5,sequence:13", EPOCH, 1);
        let mark = mark_at(&old, EPOCH + 5_000, 0);
        let ceiling = ceiling(&old, NODE, &mark).unwrap();
        let t = new.template(NODE);
        let p = first_position_from(&t, 0, ceiling).unwrap();
        assert!(t.encode(p, 0) as u64 >= ceiling && (t.encode(p - 1, 0) as u64) < ceiling);
        // The timestamp moved one bit up: half the ticks reach the same values.
        assert_eq!(resume_instant(&old, &new, &mark), Some(UnixMillis(EPOCH + 2_500)));
    }

    #[test]
    fn later_eras_need_clock_back_above_the_timestamp() {
        let below = codec("timestamp:41,clock_back:2,worker:8,sequence:12", EPOCH, 1);
        let mut mark = mark_at(&below, EPOCH + 5_000, 0);
        assert!(ceiling(&below, NODE, &mark).is_ok(), "era 0 has no earlier era");
        mark.clock_back = 1;
        assert_eq!(ceiling(&below, NODE, &mark), Err(NoCeiling::EarlierEras));
        let above = codec("clock_back:2,timestamp:41,worker:8,sequence:12", EPOCH, 1);
        let era_one = ceiling(&above, NODE, &mark).unwrap();
        let t = above.template(NODE);
        let last_of_era_zero = t.position(t.max_tick()) + (t.position(1) - 1);
        assert!(era_one > t.encode(last_of_era_zero, 0) as u64, "every ID of era 0 lies below era 1");
    }

    #[test]
    fn a_used_up_old_range_leaves_no_room() {
        let old = codec("timestamp:20,sequence:4", EPOCH, 1);
        let t = old.template(Node::default());
        let mark = Mark { position: t.position(t.max_tick() + 1), clock_back: 0, wall: None };
        assert_eq!(ceiling(&old, Node::default(), &mark), Ok(NO_ID_REACHES));
        let new = codec(DEFAULT, EPOCH, 1).template(NODE);
        assert_eq!(first_position_from(&new, 0, NO_ID_REACHES), None);
    }

    proptest! {
        /// Whatever the settings on either side: every ID issued below the old
        /// mark lies below the ceiling, and the first new position reaches it
        /// while the one before does not.
        #[test]
        fn the_first_new_id_is_above_every_old_one(
            old_spec in prop::sample::select(vec![DEFAULT, "timestamp:40,worker:13,sequence:10", "timestamp:39,sequence:8,worker:16"]),
            new_spec in prop::sample::select(vec![DEFAULT, "timestamp:42,worker:9,sequence:12", "timestamp:39,sequence:8,worker:16"]),
            old_tick_ms in 1u32..20,
            new_tick_ms in 1u32..20,
            shift in -100_000i64..100_000,
            at in 0i64..10_000_000_000,
            sequence in 0u64..256,
            earlier in 1u64..1_000_000,
        ) {
            let old = codec(old_spec, EPOCH, old_tick_ms);
            let new = codec(new_spec, EPOCH + shift, new_tick_ms);
            let node = Node { datacenter: 0, worker: 5 };
            let t_old = old.template(node);
            let tick = old.time.tick_of(UnixMillis(EPOCH + at)) as u64;
            let position = t_old.position(tick) + sequence.min(t_old.position(1) - 1);
            let mark = Mark { position, clock_back: 0, wall: None };
            let c = ceiling(&old, node, &mark).unwrap();
            let issued = position.saturating_sub(earlier);
            prop_assert!(position == 0 || (t_old.encode(position - 1, 0) as u64) < c);
            prop_assert!((t_old.encode(issued, 0) as u64) < c || issued == position);
            let t_new = new.template(node);
            let p = first_position_from(&t_new, 0, c).unwrap();
            prop_assert!(t_new.encode(p, 0) as u64 >= c);
            prop_assert!(p == 0 || (t_new.encode(p - 1, 0) as u64) < c);
        }
    }
}
