//! IDs as a time axis, for tables partitioned by their key:
//! `snowflake_from_interval` (a span of time in IDs) and `snowflake_now`
//! (the first ID of the transaction's start). A TimescaleDB hypertable
//! partitioned by the ID takes the first as its chunk interval and the
//! second as its `integer_now` function, so that `drop_chunks` ages and
//! `time_bucket` widths can be given as time.

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, Raise, DATETIME_VALUE_OUT_OF_RANGE};
use super::settings;
use super::timestamp::last_instant;

/// How far apart, in IDs, the first IDs of two instants `span` apart lie
/// under this server's layout, epoch and tick (a month counts 30 days and a
/// day 24 hours, as `extract(epoch FROM interval)` counts them; a part of
/// a tick counts for none).
#[pg_extern(stable, parallel_safe, strict)]
fn snowflake_from_interval(span: Interval) -> i64 {
    let codec = &settings::config().codec;
    // Toward zero: a part of a tick counts for none, either way.
    let ms = i64::try_from(span.as_micros() / 1000).ok();
    ms.and_then(|ms| codec.span(ms)).unwrap_or_else(|| {
        error::new(DATETIME_VALUE_OUT_OF_RANGE, "interval out of range for snowflake IDs")
            .set_detail(format!(
                "The timestamp field holds {} ticks of {} ms, from {} to {}.",
                codec.max_tick() + 1,
                codec.time.tick_ms(),
                codec.time.epoch(),
                last_instant(codec)
            ))
            .set_hint("Give an interval shorter than the layout's timestamp range.")
            .raise(PgLogLevel::ERROR)
    })
}

/// The smallest ID of the tick the current transaction started in
/// (`snowflake_from_timestamp(now())`): TimescaleDB's `integer_now`
/// function for a hypertable partitioned by a snowflake key.
#[pg_extern(stable, parallel_safe)]
fn snowflake_now() -> i64 {
    super::decode::first_id_at(pgrx::datum::now())
}
