//! Instants as PostgreSQL holds them: `timestamptz` (microseconds since
//! 2000-01-01) to and from the core's Unix milliseconds.

use pgrx::prelude::*;

use crate::snowflake::codec::Codec;
use crate::snowflake::time::UnixMillis;

/// Milliseconds from the Unix epoch to PostgreSQL's, 2000-01-01.
const PG_EPOCH_UNIX_MS: i64 = 946_684_800_000;

/// A finite instant as a `timestamptz`, if PostgreSQL can hold it.
pub fn timestamptz(t: UnixMillis) -> Option<TimestampWithTimeZone> {
    let micros = t.0.checked_sub(PG_EPOCH_UNIX_MS)?.checked_mul(1000)?;
    let ts = TimestampWithTimeZone::try_from(micros).ok()?;
    ts.is_finite().then_some(ts)
}

/// A `timestamptz` in Unix milliseconds (rounded down); `None` for infinities.
pub fn unix_millis(ts: TimestampWithTimeZone) -> Option<UnixMillis> {
    if !ts.is_finite() {
        return None;
    }
    Some(from_pg_micros(ts.into_inner()))
}

/// PostgreSQL's `TimestampTz` (microseconds since 2000-01-01) in Unix
/// milliseconds, rounded down.
pub fn from_pg_micros(micros: i64) -> UnixMillis {
    UnixMillis(micros.div_euclid(1000) + PG_EPOCH_UNIX_MS)
}

/// When the last tick of `codec`'s timestamp field starts, as messages show it.
pub fn last_instant(codec: &Codec) -> String {
    codec.last_instant().map_or_else(|| "the end of time".into(), |t| t.to_string())
}
