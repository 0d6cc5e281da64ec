//! Structure-aware inputs: layouts, codecs and nodes built from fuzzer bytes,
//! valid by construction, so that a target spends its time past the parsers.

use arbitrary::{Arbitrary, Unstructured};

use crate::snowflake::codec::{Codec, Node};
use crate::snowflake::layout::{Field, Layout};
use crate::snowflake::time::{TimeBase, UnixMillis, MAX_TICK_MS};

/// A layout specification: the fields in an order the fuzzer picks, with
/// widths it picks, rendered as a DBA writes it. May still be refused (too
/// wide, sequence above timestamp): that is the parser's business.
#[derive(Debug)]
pub struct Spec(pub String);

impl<'a> Arbitrary<'a> for Spec {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut fields: Vec<Field> = Field::ALL.into_iter().filter(|_| u.arbitrary::<bool>().unwrap_or(true)).collect();
        for required in [Field::Timestamp, Field::Sequence] {
            if !fields.contains(&required) {
                fields.push(required);
            }
        }
        // A permutation the fuzzer picks.
        for i in (1..fields.len()).rev() {
            let j = u.int_in_range(0..=i)?;
            fields.swap(i, j);
        }
        let items: Vec<String> = fields
            .iter()
            .map(|f| Ok(format!("{}:{}", f.name(), u.int_in_range(1..=f.max_width())?)))
            .collect::<arbitrary::Result<_>>()?;
        Ok(Spec(items.join(",")))
    }
}

/// A codec of a valid layout, any epoch and any valid tick.
#[derive(Debug)]
pub struct AnyCodec(pub Codec);

impl<'a> Arbitrary<'a> for AnyCodec {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let layout = loop {
            if let Ok(layout) = Layout::parse(&Spec::arbitrary(u)?.0) {
                break layout;
            }
            if u.is_empty() {
                return Err(arbitrary::Error::NotEnoughData);
            }
        };
        let tick_ms = if u.arbitrary()? { 1 } else { u.int_in_range(1..=MAX_TICK_MS)? };
        let time = TimeBase::new(UnixMillis(u.arbitrary()?), tick_ms).expect("a tick in range");
        Ok(AnyCodec(Codec::new(layout, time)))
    }
}

/// A node that the codec's fields hold.
pub fn node(u: &mut Unstructured<'_>, codec: &Codec) -> arbitrary::Result<Node> {
    let mut value = |field: Field| -> arbitrary::Result<u64> {
        codec.layout.field(field).map_or(Ok(0), |b| u.int_in_range(0..=b.max()))
    };
    Ok(Node { datacenter: value(Field::Datacenter)?, worker: value(Field::Worker)? })
}
