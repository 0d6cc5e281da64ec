//! Time: the only place that reads the wall clock, and the only one that sleeps.

use std::time::Duration;

use pgrx::pg_sys;

use crate::snowflake::time::UnixMillis;

/// The system's real-time clock (`CLOCK_REALTIME`), in Unix milliseconds
/// (rounded down; negative for a clock set before 1970).
#[inline]
pub fn now() -> UnixMillis {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; clock_gettime cannot fail for
    // CLOCK_REALTIME with a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    // time_t and c_long are i64 on the 64-bit Linux this builds for.
    UnixMillis(ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000)
}

/// Sleeps on the process latch for `d` (at least 1 ms), so that a cancel
/// request, statement_timeout or postmaster death ends the sleep early. The
/// caller serves interrupts afterwards (`check_for_interrupts!`).
pub fn nap(d: Duration) {
    let ms = d.as_millis().clamp(1, i32::MAX as u128) as std::ffi::c_long;
    // SAFETY: MyLatch is this backend's own latch, set up before any SQL runs.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
}

/// A duration in whole microseconds, saturating.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
