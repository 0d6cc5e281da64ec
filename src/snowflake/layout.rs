//! The bit layout of an ID: which fields it has, how wide each is, in which order.
//!
//! An ID is a non-negative `i64`: fields are packed from the high bits down,
//! in the order written, and the sign bit is always zero.

use std::fmt;

/// A field of an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// Ticks since the epoch.
    Timestamp,
    Datacenter,
    Worker,
    /// Count of IDs within one tick.
    Sequence,
    /// Count of clock step-backs the generator has worked around (optional).
    ClockBack,
    /// Always zero (optional), for designs that keep bits for later.
    Reserved,
}

impl Field {
    pub const ALL: [Field; 6] =
        [Field::Timestamp, Field::Datacenter, Field::Worker, Field::Sequence, Field::ClockBack, Field::Reserved];

    pub fn name(self) -> &'static str {
        match self {
            Field::Timestamp => "timestamp",
            Field::Datacenter => "datacenter",
            Field::Worker => "worker",
            Field::Sequence => "sequence",
            Field::ClockBack => "clock_back",
            Field::Reserved => "reserved",
        }
    }

    fn from_name(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name().eq_ignore_ascii_case(name))
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The widest the field may be. Node, sequence and clock_back values are
    /// reported as SQL `integer`s, so they get at most 31 bits.
    pub fn max_width(self) -> u32 {
        match self {
            Field::Timestamp | Field::Reserved => MAX_BITS,
            _ => 31,
        }
    }
}

/// Where a field sits in an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BitField {
    pub shift: u32,
    pub width: u32,
}

impl BitField {
    /// The largest value the field holds.
    #[inline]
    pub fn max(self) -> u64 {
        if self.width == 0 {
            0
        } else {
            u64::MAX >> (64 - self.width)
        }
    }

    #[inline]
    pub fn extract(self, id: u64) -> u64 {
        (id >> self.shift) & self.max()
    }

    #[inline]
    pub fn place(self, value: u64) -> u64 {
        value << self.shift
    }
}

/// The total width an ID may use: 63 bits, so the sign bit stays zero.
pub const MAX_BITS: u32 = 63;

/// A validated layout.
///
/// Invariants: `timestamp` and `sequence` are present, `timestamp` comes before
/// (above) `sequence`, every present field is at least one bit wide, no field
/// appears twice, and the widths sum to at most [`MAX_BITS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Indexed by `Field as usize`; `None` for a field the layout lacks.
    fields: [Option<BitField>; 6],
    /// Fields from the high bits down, `order[..len]`.
    order: [Field; 6],
    len: usize,
}

/// Why a layout specification was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutError {
    Empty,
    Malformed(String),
    UnknownField(String),
    BadWidth { field: &'static str, width: String, max: u32 },
    Duplicate(&'static str),
    Missing(&'static str),
    SequenceAboveTimestamp,
    TooWide(u32),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Empty => write!(f, "the layout is empty"),
            LayoutError::Malformed(item) => write!(f, "\"{item}\" is not of the form name:bits"),
            LayoutError::UnknownField(name) => write!(
                f,
                "\"{name}\" is neither a field (timestamp, datacenter, worker, sequence, clock_back, reserved) nor a preset"
            ),
            LayoutError::BadWidth { field, width, max } => {
                write!(f, "the width of field \"{field}\" must be a number of bits from 1 to {max}, not \"{width}\"")
            }
            LayoutError::Duplicate(field) => write!(f, "field \"{field}\" appears more than once"),
            LayoutError::Missing(field) => write!(f, "the layout has no \"{field}\" field"),
            LayoutError::SequenceAboveTimestamp => {
                write!(f, "field \"sequence\" must come after \"timestamp\" so that IDs increase with time")
            }
            LayoutError::TooWide(bits) => {
                write!(f, "the fields add up to {bits} bits, more than the {MAX_BITS} a non-negative bigint holds")
            }
        }
    }
}

impl std::error::Error for LayoutError {}

impl Layout {
    /// Parses a specification such as `timestamp:41,datacenter:5,worker:5,sequence:12`.
    /// Names are case-insensitive; spaces around items are ignored.
    ///
    /// # Examples
    ///
    /// ```
    /// use snowflake_id::snowflake::layout::{BitField, Field, Layout, LayoutError};
    ///
    /// let layout = Layout::parse("timestamp:41, datacenter:5, worker:5, sequence:12")?;
    /// assert_eq!(layout.timestamp(), BitField { shift: 22, width: 41 });
    /// assert_eq!(layout.field(Field::Worker), Some(BitField { shift: 12, width: 5 }));
    /// assert_eq!(layout.max_clock_back(), None);
    /// assert_eq!(layout.bits(), 63);
    /// assert_eq!(layout.to_string(), "timestamp:41,datacenter:5,worker:5,sequence:12");
    ///
    /// // IDs must increase with time, and fit a non-negative bigint.
    /// assert_eq!(Layout::parse("sequence:12,timestamp:41"), Err(LayoutError::SequenceAboveTimestamp));
    /// assert_eq!(Layout::parse("timestamp:52,sequence:12"), Err(LayoutError::TooWide(64)));
    /// # Ok::<(), LayoutError>(())
    /// ```
    pub fn parse(spec: &str) -> Result<Layout, LayoutError> {
        let mut fields = [None; 6];
        let mut order = [Field::Reserved; 6];
        let mut len = 0;
        let mut total = 0u32;
        if spec.trim().is_empty() {
            return Err(LayoutError::Empty);
        }
        let mut widths = [0u32; 6];
        for item in spec.split(',') {
            let item = item.trim();
            let (name, width) = item.split_once(':').ok_or_else(|| LayoutError::Malformed(item.to_string()))?;
            let field =
                Field::from_name(name.trim()).ok_or_else(|| LayoutError::UnknownField(name.trim().to_string()))?;
            let width_text = width.trim();
            let width =
                width_text.parse::<u32>().ok().filter(|w| (1..=field.max_width()).contains(w)).ok_or_else(|| {
                    LayoutError::BadWidth { field: field.name(), width: width_text.to_string(), max: field.max_width() }
                })?;
            if widths[field.index()] != 0 {
                return Err(LayoutError::Duplicate(field.name()));
            }
            widths[field.index()] = width;
            order[len] = field;
            len += 1;
            total += width;
        }
        for required in [Field::Timestamp, Field::Sequence] {
            if widths[required.index()] == 0 {
                return Err(LayoutError::Missing(required.name()));
            }
        }
        let position = |f: Field| order[..len].iter().position(|&o| o == f);
        if position(Field::Sequence) < position(Field::Timestamp) {
            return Err(LayoutError::SequenceAboveTimestamp);
        }
        if total > MAX_BITS {
            return Err(LayoutError::TooWide(total));
        }
        let mut shift = total;
        for &field in &order[..len] {
            let width = widths[field.index()];
            shift -= width;
            fields[field.index()] = Some(BitField { shift, width });
        }
        Ok(Layout { fields, order, len })
    }

    /// The field's position, or `None` when the layout lacks it.
    #[inline]
    pub fn field(&self, field: Field) -> Option<BitField> {
        self.fields[field.index()]
    }

    /// The largest value of the clock_back field; `None` when the layout has
    /// no clock_back field (it then never counts clock step backs).
    pub fn max_clock_back(&self) -> Option<u64> {
        self.field(Field::ClockBack).map(|b| b.max())
    }

    /// The width of a field, zero when the layout lacks it.
    pub fn width(&self, field: Field) -> u32 {
        self.field(field).map_or(0, |b| b.width)
    }

    pub fn timestamp(&self) -> BitField {
        self.fields[Field::Timestamp.index()].expect("a layout always has a timestamp")
    }

    pub fn sequence(&self) -> BitField {
        self.fields[Field::Sequence.index()].expect("a layout always has a sequence")
    }

    /// Fields from the high bits down.
    pub fn fields(&self) -> impl Iterator<Item = (Field, BitField)> + '_ {
        self.order[..self.len].iter().map(|&f| (f, self.fields[f.index()].expect("ordered fields are present")))
    }

    /// The number of bits used.
    pub fn bits(&self) -> u32 {
        self.fields().map(|(_, b)| b.width).sum()
    }

    /// True when the layout can hold any value of a field (absent fields hold only zero).
    pub fn holds(&self, field: Field, value: u64) -> bool {
        value <= self.field(field).map_or(0, BitField::max)
    }
}

impl fmt::Display for Layout {
    /// The canonical specification, which [`Layout::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (field, bits)) in self.fields().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}:{}", field.name(), bits.width)?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn twitter_split() {
        let l = Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap();
        assert_eq!(l.timestamp(), BitField { shift: 22, width: 41 });
        assert_eq!(l.field(Field::Datacenter), Some(BitField { shift: 17, width: 5 }));
        assert_eq!(l.field(Field::Worker), Some(BitField { shift: 12, width: 5 }));
        assert_eq!(l.sequence(), BitField { shift: 0, width: 12 });
        assert_eq!(l.field(Field::ClockBack), None);
        assert_eq!(l.bits(), 63);
        assert_eq!(l.to_string(), "timestamp:41,datacenter:5,worker:5,sequence:12");
    }

    #[test]
    fn spaces_and_case_are_forgiven() {
        let l = Layout::parse(" Timestamp : 39 , SEQUENCE:8, worker:16 ").unwrap();
        assert_eq!(l.to_string(), "timestamp:39,sequence:8,worker:16");
        assert_eq!(l.field(Field::Worker), Some(BitField { shift: 0, width: 16 }));
    }

    #[test]
    fn a_short_layout_leaves_high_bits_zero() {
        let l = Layout::parse("timestamp:20,sequence:4").unwrap();
        assert_eq!(l.timestamp().shift, 4);
        assert_eq!(l.bits(), 24);
    }

    #[test]
    fn refusals_say_why() {
        use LayoutError::*;
        let cases: [(&str, LayoutError); 11] = [
            ("", Empty),
            ("timestamp", Malformed("timestamp".into())),
            ("timestamp:41,shard:10,sequence:12", UnknownField("shard".into())),
            ("timestamp:0,sequence:12", BadWidth { field: "timestamp", width: "0".into(), max: 63 }),
            ("timestamp:x,sequence:12", BadWidth { field: "timestamp", width: "x".into(), max: 63 }),
            ("timestamp:20,sequence:32", BadWidth { field: "sequence", width: "32".into(), max: 31 }),
            ("timestamp:41,worker:5,worker:5,sequence:12", Duplicate("worker")),
            ("worker:10,sequence:12", Missing("timestamp")),
            ("timestamp:41,worker:10", Missing("sequence")),
            ("sequence:12,timestamp:41", SequenceAboveTimestamp),
            ("timestamp:42,datacenter:5,worker:5,sequence:12", TooWide(64)),
        ];
        for (spec, want) in cases {
            assert_eq!(Layout::parse(spec), Err(want), "{spec:?}");
        }
    }

    #[test]
    fn absent_fields_hold_only_zero() {
        let l = Layout::parse("timestamp:47,sequence:16").unwrap();
        assert!(l.holds(Field::Worker, 0));
        assert!(!l.holds(Field::Worker, 1));
        assert!(l.holds(Field::Sequence, 65_535));
        assert!(!l.holds(Field::Sequence, 65_536));
    }

    #[test]
    fn max_clock_back_is_the_fields_largest_value() {
        let max = |spec| Layout::parse(spec).unwrap().max_clock_back();
        assert_eq!(max("timestamp:41,datacenter:5,worker:5,sequence:12"), None);
        assert_eq!(max("clock_back:1,timestamp:40,sequence:12"), Some(1));
        assert_eq!(max("clock_back:2,timestamp:30,worker:3,sequence:2"), Some(3));
        assert_eq!(max("timestamp:20,sequence:4,clock_back:31"), Some(i32::MAX as u64));
    }

    pub(crate) fn arb_layout() -> impl Strategy<Value = Layout> {
        // Random optional fields with random widths, in a random order that keeps
        // timestamp above sequence, trimmed to fit 63 bits.
        (proptest::collection::vec((0usize..4, 1u32..20), 0..4), 1u32..45, 1u32..20, any::<u64>()).prop_filter_map(
            "must fit",
            |(extras, ts, seq, shuffle)| {
                let mut items: Vec<(Field, u32)> = vec![(Field::Timestamp, ts), (Field::Sequence, seq)];
                let optional = [Field::Datacenter, Field::Worker, Field::ClockBack, Field::Reserved];
                for (i, w) in extras {
                    if !items.iter().any(|(f, _)| *f == optional[i]) {
                        let at = (shuffle as usize >> (i * 3)) % (items.len() + 1);
                        items.insert(at, (optional[i], w));
                    }
                }
                let spec: Vec<String> = items.iter().map(|(f, w)| format!("{}:{w}", f.name())).collect();
                Layout::parse(&spec.join(",")).ok()
            },
        )
    }

    proptest! {
        #[test]
        fn display_round_trips(l in arb_layout()) {
            prop_assert_eq!(Layout::parse(&l.to_string()), Ok(l));
        }

        #[test]
        fn fields_tile_the_low_bits(l in arb_layout()) {
            let mut next_shift = l.bits();
            for (_, b) in l.fields() {
                next_shift -= b.width;
                prop_assert_eq!(b.shift, next_shift);
            }
            prop_assert_eq!(next_shift, 0);
        }
    }
}
