//! The only place that reads the wall clock.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::snowflake::time::UnixMillis;

/// The system's real-time clock (`CLOCK_REALTIME`), in Unix milliseconds.
/// A clock set before 1970 reads as negative.
#[inline]
pub fn now() -> UnixMillis {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => UnixMillis(d.as_millis() as i64),
        Err(e) => UnixMillis(-(e.duration().as_millis() as i64)),
    }
}
