//! The only place that reads the wall clock.

use crate::snowflake::time::UnixMillis;

/// The system's real-time clock (`CLOCK_REALTIME`), in Unix milliseconds
/// (rounded down; negative for a clock set before 1970).
#[inline]
pub fn now() -> UnixMillis {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Cannot fail for CLOCK_REALTIME with a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    UnixMillis(ts.tv_sec as i64 * 1000 + ts.tv_nsec as i64 / 1_000_000)
}
