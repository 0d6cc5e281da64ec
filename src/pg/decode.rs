//! Reading IDs: `snowflake_decode`, `snowflake_timestamp`, `snowflake_from_timestamp`.

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, Raise, DATETIME_VALUE_OUT_OF_RANGE};
use super::settings;
use super::timestamp::{last_instant, timestamptz, unix_millis};
use crate::snowflake::codec::{Codec, Decoded};
use crate::snowflake::config::{sentence, LAYOUT_HINT};
use crate::snowflake::preset;
use crate::snowflake::time::{parse_epoch, TimeBase, UnixMillis};

/// The fields of an ID under the server's layout; NULL for fields it lacks.
// pgrx reads the column names from the signature, so the row type is spelled out.
#[allow(clippy::type_complexity)]
#[pg_extern(stable, parallel_safe, strict)]
fn snowflake_decode(
    id: i64,
) -> TableIterator<
    'static,
    (
        name!(ts, TimestampWithTimeZone),
        name!(datacenter_id, Option<i32>),
        name!(worker_id, Option<i32>),
        name!(sequence, i32),
        name!(clock_back, Option<i32>),
    ),
> {
    TableIterator::once(decoded_row(&settings::config().codec, id))
}

/// The fields of an ID under any layout (a preset or a field list), to read IDs
/// of other systems. The epoch is read as the setting is: a timestamp (UTC
/// unless it has an offset, never the session's time zone) or Unix
/// milliseconds, so the function is truly IMMUTABLE. A NULL epoch or tick
/// means the preset's own, or for a field list the defaults
/// (2025-01-01 00:00:00+00, 1 ms).
// pgrx reads the column names from the signature, so the row type is spelled out.
#[allow(clippy::type_complexity)]
#[pg_extern(immutable, parallel_safe, name = "snowflake_decode")]
fn snowflake_decode_with_layout(
    id: Option<i64>,
    layout: Option<&str>,
    epoch: default!(Option<&str>, "NULL"),
    tick_ms: default!(Option<i32>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(ts, TimestampWithTimeZone),
        name!(datacenter_id, Option<i32>),
        name!(worker_id, Option<i32>),
        name!(sequence, i32),
        name!(clock_back, Option<i32>),
    ),
> {
    let epoch = epoch.map(|text| {
        parse_epoch(text).unwrap_or_else(|e| {
            invalid(
                "epoch",
                format!("\"{text}\": {e}"),
                "Write a timestamp such as '2025-01-01 00:00:00+00' or Unix milliseconds.",
            )
        })
    });
    decoded_rows(id, layout, epoch, tick_ms)
}

/// The same with the epoch as a `timestamptz` value, an instant whatever the
/// session's time zone. (A literal such as '2025-01-01' goes to the text form.)
// pgrx reads the column names from the signature, so the row type is spelled out.
#[allow(clippy::type_complexity)]
#[pg_extern(immutable, parallel_safe, name = "snowflake_decode")]
fn snowflake_decode_with_epoch_instant(
    id: Option<i64>,
    layout: Option<&str>,
    epoch: Option<TimestampWithTimeZone>,
    tick_ms: default!(Option<i32>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(ts, TimestampWithTimeZone),
        name!(datacenter_id, Option<i32>),
        name!(worker_id, Option<i32>),
        name!(sequence, i32),
        name!(clock_back, Option<i32>),
    ),
> {
    let epoch = epoch.map(|ts| {
        unix_millis(ts).unwrap_or_else(|| invalid("epoch", "the epoch is infinite".into(), "Give a finite timestamp."))
    });
    decoded_rows(id, layout, epoch, tick_ms)
}

/// The row of an ID under a layout given by name or fields; none for a NULL
/// ID or layout (these forms are not STRICT, so that a NULL epoch or tick
/// means the default).
fn decoded_rows(
    id: Option<i64>,
    layout: Option<&str>,
    epoch: Option<UnixMillis>,
    tick_ms: Option<i32>,
) -> TableIterator<'static, DecodedRow> {
    match (id, layout) {
        (Some(id), Some(layout)) => TableIterator::once(decoded_row(&codec_for(layout, epoch, tick_ms), id)),
        _ => TableIterator::new(std::iter::empty()),
    }
}

/// When an ID was generated (the start of its tick).
#[pg_extern(stable, parallel_safe, strict)]
fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
    let codec = &settings::config().codec;
    timestamp_of(codec, id, &decode(codec, id))
}

/// The smallest ID of the tick `ts` falls in (every other field zero), for
/// `WHERE id >= snowflake_from_timestamp(a) AND id < snowflake_from_timestamp(b)`.
#[pg_extern(stable, parallel_safe, strict)]
fn snowflake_from_timestamp(ts: TimestampWithTimeZone) -> i64 {
    first_id_at(ts)
}

/// See [`snowflake_from_timestamp`].
pub fn first_id_at(ts: TimestampWithTimeZone) -> i64 {
    let codec = &settings::config().codec;
    let out_of_range = |detail: String| -> ! {
        error::new(DATETIME_VALUE_OUT_OF_RANGE, "timestamp out of range for snowflake IDs")
            .set_detail(sentence(&detail))
            .set_hint(format!("Snowflake IDs cover {} to {}.", codec.time.epoch(), last_instant(codec)))
            .raise(PgLogLevel::ERROR)
    };
    let Some(t) = unix_millis(ts) else { out_of_range("the timestamp is infinite".into()) };
    codec.first_id_at(t).unwrap_or_else(|e| out_of_range(e.to_string()))
}

/// A row of `snowflake_decode`. (The row type is written out in each function
/// because pgrx reads the column names from the signature.)
type DecodedRow = (TimestampWithTimeZone, Option<i32>, Option<i32>, i32, Option<i32>);

fn decoded_row(codec: &Codec, id: i64) -> DecodedRow {
    let d = decode(codec, id);
    // Layouts keep node, sequence and clock_back fields within 31 bits.
    let int = |v: Option<u64>| v.map(|v| v as i32);
    (timestamp_of(codec, id, &d), int(d.datacenter), int(d.worker), d.sequence as i32, int(d.clock_back))
}

fn decode(codec: &Codec, id: i64) -> Decoded {
    codec.decode(id).unwrap_or_else(|e| {
        error::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("invalid snowflake ID: {id}"))
            .set_detail(sentence(&e.to_string()))
            .set_hint(format!("The layout is {}; check that the ID was generated with it.", codec.layout))
            .raise(PgLogLevel::ERROR)
    })
}

fn timestamp_of(codec: &Codec, id: i64, d: &Decoded) -> TimestampWithTimeZone {
    codec.instant_of(d.tick).and_then(timestamptz).unwrap_or_else(|| {
        error::new(DATETIME_VALUE_OUT_OF_RANGE, format!("timestamp of snowflake ID {id} is out of range"))
            .set_detail(format!("Its tick {} is beyond the range of timestamp with time zone.", d.tick))
            .raise(PgLogLevel::ERROR)
    })
}

fn invalid(what: &str, detail: String, hint: &str) -> ! {
    error::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("invalid snowflake {what}"))
        .set_detail(sentence(&detail))
        .set_hint(hint)
        .raise(PgLogLevel::ERROR)
}

fn codec_for(layout: &str, epoch: Option<UnixMillis>, tick_ms: Option<i32>) -> Codec {
    let resolved =
        preset::resolve(layout).unwrap_or_else(|e| invalid("layout", format!("\"{layout}\": {e}"), LAYOUT_HINT));
    let epoch = epoch.unwrap_or(resolved.epoch);
    let tick = tick_ms.map_or(resolved.tick_ms as i64, i64::from);
    let time = u32::try_from(tick).ok().and_then(|t| TimeBase::new(epoch, t)).unwrap_or_else(|| {
        invalid(
            "tick",
            format!("a tick of {tick} ms is not between 1 and {} ms", crate::snowflake::time::MAX_TICK_MS),
            "Use 1 for millisecond timestamps.",
        )
    });
    Codec::new(resolved.layout, time)
}

// Each of these returns exactly one row; tell the planner so instead of its
// default guess of 1000 rows for a set-returning function.
pgrx::extension_sql!(
    "ALTER FUNCTION snowflake_decode(bigint) ROWS 1;\n\
     ALTER FUNCTION snowflake_decode(bigint, text, text, integer) ROWS 1;\n\
     ALTER FUNCTION snowflake_decode(bigint, text, timestamptz, integer) ROWS 1;\n",
    name = "one_row_estimates",
    finalize
);
