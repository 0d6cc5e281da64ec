//! Time: the only place that reads the wall clock, and the only one that sleeps.

use std::time::Duration;

use pgrx::pg_sys;

use crate::snowflake::time::UnixMillis;

/// The system's real-time clock, in Unix milliseconds (rounded down;
/// negative for a clock set before 1970).
///
/// Read with `gettimeofday`, as PostgreSQL's own `GetCurrentTimestamp` does:
/// glibc resolves it straight to the vDSO, where `clock_gettime` goes through
/// a wrapper of its own, a call more on the hot path.
#[inline]
pub fn now() -> UnixMillis {
    let mut tv = libc::timeval { tv_sec: 0, tv_usec: 0 };
    // SAFETY: `tv` is a valid timeval to write; no time zone is asked for.
    unsafe { libc::gettimeofday(&mut tv, std::ptr::null_mut()) };
    // time_t and suseconds_t are i64 on the 64-bit Linux this builds for, and
    // tv_usec lies in 0..1_000_000, so this rounds down before 1970 too.
    UnixMillis(tv.tv_sec * 1000 + tv.tv_usec / 1000)
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
