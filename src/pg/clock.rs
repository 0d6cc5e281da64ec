//! The only place that reads the wall clock.

use crate::snowflake::time::UnixMillis;

/// The system's real-time clock (`CLOCK_REALTIME`), in Unix milliseconds
/// (rounded down; negative for a clock set before 1970).
#[inline]
pub fn now() -> UnixMillis {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Cannot fail for CLOCK_REALTIME with a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    // time_t and c_long are i64 on the 64-bit Linux this builds for.
    UnixMillis(ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000)
}
