//! Blocks for pooled and hi/lo allocators: what one `nextval` of a registered
//! sequence with `INCREMENT BY n` must reserve, and which ID it returns.
//!
//! An ORM that allocates IDs in blocks asks the sequence once per `n` IDs and
//! computes the rest itself: Hibernate's `pooled` optimizer takes the value
//! `v` as the high end of its block (since Hibernate 4 it uses `v-n+1 ..= v`;
//! Hibernate 3's uses `v-n ..= v-1`), its `pooled-lo` and Npgsql's HiLo as the
//! low end (`v ..= v+n-1`). Every integer of the
//! block the client will use must be an ID no one else ever gets, so a block
//! is a *run*: consecutive positions of one tick, which are consecutive
//! integers when the sequence field holds the lowest bits.
//!
//! Invariants (tested below):
//! - the integers a client of the plan's [`Convention`] computes from the
//!   returned ID all lie in the reserved run;
//! - a run fits one tick's sequence space, or the plan is refused with the
//!   largest increment that fits;
//! - [`Convention::High`] serves both readings of the high end: it reserves
//!   `n+1` IDs and returns the last;
//! - [`Convention::Either`] serves a client of any of these readings from the
//!   same value: it reserves `2n` IDs and returns the one after the first `n`.

use std::fmt;

use super::codec::IdTemplate;

/// How a client reads the value of a sequence that increments by more than one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Convention {
    /// The value is the block's high end (Hibernate `pooled`): `v-n+1 ..= v`,
    /// or `v-n ..= v-1` as Hibernate 3 reads it.
    High,
    /// The value is the block's low end (Hibernate `pooled-lo`, Npgsql HiLo): `v ..= v+n-1`.
    Low,
    /// Not known: safe for all, at the cost of `2n` IDs a call.
    Either,
}

impl Convention {
    pub const ALL: [Convention; 3] = [Convention::Either, Convention::High, Convention::Low];

    /// The name a DBA writes: `either`, `high` or `low`.
    pub fn name(self) -> &'static str {
        match self {
            Convention::High => "high",
            Convention::Low => "low",
            Convention::Either => "either",
        }
    }

    pub fn from_name(name: &str) -> Option<Convention> {
        Convention::ALL.into_iter().find(|c| c.name().eq_ignore_ascii_case(name.trim()))
    }
}

impl fmt::Display for Convention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a sequence's increment cannot be served as snowflake IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// A descending sequence: snowflake IDs only grow.
    NotAscending { increment: i64 },
    /// The run does not fit one tick: `max` is the largest increment that does
    /// under this convention and layout (0 when none above 1 does).
    TooLarge { increment: i64, convention: Convention, max: u64 },
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BlockError::NotAscending { increment } => {
                write!(f, "a sequence that increments by {increment} cannot hand out snowflake IDs, which only grow")
            }
            BlockError::TooLarge { increment, convention, max } if max > 1 => write!(
                f,
                "an increment of {increment} needs more consecutive IDs than one tick of the ID layout holds: \
                 block_mode '{convention}' serves increments up to {max}"
            ),
            BlockError::TooLarge { increment, .. } => write!(
                f,
                "an increment of {increment} needs consecutive IDs, and IDs of one tick of the ID layout are not \
                 consecutive integers (the sequence field does not hold the lowest bits) or a tick holds too few"
            ),
        }
    }
}

impl std::error::Error for BlockError {}

/// What one call of a registered sequence reserves and returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPlan {
    /// Consecutive IDs to reserve in one tick.
    run: u64,
    /// Which of them is returned, counted from the first.
    returned: u64,
}

impl BlockPlan {
    /// The plan for a sequence incrementing by `increment`, read by clients
    /// of `convention`, under the layout of `template`.
    ///
    /// # Examples
    ///
    /// ```
    /// use snowflake_id::snowflake::block::{BlockError, BlockPlan, Convention};
    /// use snowflake_id::snowflake::codec::{Codec, Node};
    /// use snowflake_id::snowflake::layout::Layout;
    /// use snowflake_id::snowflake::time::{TimeBase, UnixMillis};
    ///
    /// let layout = Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap();
    /// let codec = Codec::new(layout, TimeBase::new(UnixMillis(1_735_689_600_000), 1).unwrap());
    /// let template = codec.template(Node { datacenter: 1, worker: 7 });
    ///
    /// // Hibernate's pooled optimizer with allocationSize = 50, convention unknown:
    /// let plan = BlockPlan::new(50, Convention::Either, &template).unwrap();
    /// assert_eq!(plan.run(), 100);
    /// // The run starting at ID 1000 returns 1050: a pooled client uses
    /// // 1001..=1050 (Hibernate 3: 1000..=1049), a pooled-lo client
    /// // 1050..=1099, all within the run.
    /// assert_eq!(plan.value(1000), 1050);
    ///
    /// // A tick holds 4096 IDs: no block of 10000 fits.
    /// assert_eq!(
    ///     BlockPlan::new(10_000, Convention::High, &template),
    ///     Err(BlockError::TooLarge { increment: 10_000, convention: Convention::High, max: 4095 })
    /// );
    /// ```
    pub fn new(increment: i64, convention: Convention, template: &IdTemplate) -> Result<BlockPlan, BlockError> {
        if increment < 1 {
            return Err(BlockError::NotAscending { increment });
        }
        let n = increment as u64;
        if n == 1 {
            return Ok(BlockPlan { run: 1, returned: 0 });
        }
        let capacity = template.consecutive_in_tick();
        let (run, returned, max) = match convention {
            Convention::High => (n + 1, n, capacity.saturating_sub(1).max(1)),
            Convention::Low => (n, 0, capacity),
            Convention::Either => (2 * n, n, (capacity / 2).max(1)),
        };
        if run > capacity {
            return Err(BlockError::TooLarge { increment, convention, max });
        }
        Ok(BlockPlan { run, returned })
    }

    /// How many consecutive IDs of one tick a call reserves.
    pub fn run(&self) -> u64 {
        self.run
    }

    /// The ID a call returns when its run starts at `first`.
    pub fn value(&self, first: i64) -> i64 {
        first + self.returned as i64
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::snowflake::codec::{Codec, Node};
    use crate::snowflake::layout::Layout;
    use crate::snowflake::time::{TimeBase, UnixMillis};

    fn template(spec: &str) -> IdTemplate {
        let codec = Codec::new(Layout::parse(spec).unwrap(), TimeBase::new(UnixMillis(0), 1).unwrap());
        codec.template(Node { datacenter: 1, worker: 2 })
    }

    /// How clients read a value `v` of a sequence incrementing by `n`.
    #[derive(Clone, Copy, Debug)]
    enum Reader {
        /// Hibernate 4 and later, `pooled`: `v-n+1 ..= v`.
        Pooled,
        /// Hibernate 3, `pooled`: `v-n ..= v-1`.
        PooledHibernate3,
        /// `pooled-lo`, Npgsql HiLo: `v ..= v+n-1`.
        Low,
    }

    fn readers(c: Convention) -> &'static [Reader] {
        match c {
            Convention::High => &[Reader::Pooled, Reader::PooledHibernate3],
            Convention::Low => &[Reader::Low],
            Convention::Either => &[Reader::Pooled, Reader::PooledHibernate3, Reader::Low],
        }
    }

    /// The integers a client takes as its block from `value`.
    fn client_block(reader: Reader, value: i64, n: i64) -> std::ops::RangeInclusive<i64> {
        match reader {
            Reader::Pooled => value - n + 1..=value,
            Reader::PooledHibernate3 => value - n..=value - 1,
            Reader::Low => value..=value + n - 1,
        }
    }

    #[test]
    fn increment_one_is_one_id_whatever_the_convention_or_layout() {
        for spec in ["timestamp:41,datacenter:5,worker:5,sequence:12", "timestamp:41,sequence:12,worker:10"] {
            for c in Convention::ALL {
                let plan = BlockPlan::new(1, c, &template(spec)).unwrap();
                assert_eq!((plan.run(), plan.value(77)), (1, 77));
            }
        }
    }

    #[test]
    fn descending_and_zero_increments_are_refused() {
        let t = template("timestamp:41,datacenter:5,worker:5,sequence:12");
        for increment in [0, -1, -50, i64::MIN] {
            assert_eq!(BlockPlan::new(increment, Convention::Either, &t), Err(BlockError::NotAscending { increment }));
        }
    }

    #[test]
    fn the_largest_block_fits_and_the_next_is_refused_naming_it() {
        let t = template("timestamp:41,datacenter:5,worker:5,sequence:12");
        for (c, max) in [(Convention::High, 4095), (Convention::Low, 4096), (Convention::Either, 2048)] {
            assert!(BlockPlan::new(max, c, &t).is_ok());
            let e = BlockPlan::new(max + 1, c, &t).unwrap_err();
            assert_eq!(e, BlockError::TooLarge { increment: max + 1, convention: c, max: max as u64 });
            assert!(e.to_string().contains(&format!("increments up to {max}")), "{e}");
        }
    }

    #[test]
    fn a_layout_without_consecutive_ids_serves_no_block() {
        let t = template("timestamp:41,sequence:12,worker:10");
        let e = BlockPlan::new(2, Convention::High, &t).unwrap_err();
        assert!(matches!(e, BlockError::TooLarge { max: 1, .. }), "{e:?}");
        assert!(e.to_string().contains("not consecutive"), "{e}");
    }

    proptest! {
        /// Whatever the client's convention, the IDs it computes lie in the
        /// run. (A block is an increment of 2 or more: with 1 an allocator
        /// reads the value itself, tested above.)
        #[test]
        fn clients_use_only_reserved_ids(n in 2i64..3000, first in 0i64..1 << 40, seq_bits in 1u32..16) {
            let t = template(&format!("timestamp:41,worker:5,sequence:{seq_bits}"));
            let run = |plan: &BlockPlan| first..=first + plan.run() as i64 - 1;
            for c in Convention::ALL {
                let Ok(plan) = BlockPlan::new(n, c, &t) else {
                    // Refused only when the run cannot fit a tick.
                    let need = match c { Convention::High => n + 1, Convention::Low => n, Convention::Either => 2 * n };
                    prop_assert!(need as u64 > 1 << seq_bits);
                    continue;
                };
                prop_assert!(plan.run() <= 1 << seq_bits);
                let v = plan.value(first);
                for &reader in readers(c) {
                    let used = client_block(reader, v, n);
                    prop_assert!(run(&plan).contains(used.start()) && run(&plan).contains(used.end()));
                }
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for c in Convention::ALL {
            assert_eq!(Convention::from_name(&c.name().to_uppercase()), Some(c));
        }
        assert_eq!(Convention::from_name("pooled"), None);
    }
}
