//! `snowflake_next_id()`: the hot path, a plain C entry point.
//!
//! Most calls need the generator's lock, a clock reading and a few integer
//! operations, nothing that can fail. This entry serves those without pgrx's
//! per-call wrapper (a panic guard with its memory-context bookkeeping, a
//! good share of a call's time). Every other call (a mark to write or near, a
//! wait, an error, recovery, an unknown mark, a clock step back to report)
//! goes to the general path of [`generate`] inside that guard, which raises
//! its errors after the lock is released; a wait for synchronous standbys
//! after a quick ID runs inside the guard too.
//!
//! # Why the quick path runs without a guard
//! PostgreSQL calls this entry through a plain `extern "C"` function, so a
//! Rust panic escaping it would abort the server, and a PostgreSQL ERROR
//! raised inside it would `longjmp` over Rust frames. [`quick`] can do
//! neither:
//! - it calls no PostgreSQL function that raises an ERROR: `RecoveryInProgress`
//!   (reads shared memory), `LWLockAcquire` and `LWLockRelease` on our own
//!   lock (an ERROR only past 200 held LWLocks, see [`ffi`]), and reads of
//!   settings and shared memory ([`wal::wait_mode`]);
//! - it allocates nothing and has no panic path: the configuration and the
//!   segment are looked up as `Option`s (defensively: `_PG_init` refuses to
//!   load the library anywhere but in shared_preload_libraries), and
//!   [`Generator::reserve_one_early`] declines rather than panics.
//!   `scripts/check-hot-path` reads the release build's machine code and
//!   fails if this entry can reach a panic or an unwind outside the guard.
//!
//! The general path runs inside `pgrx_extern_c_guard`, as a `#[pg_guard]`
//! function body does: a panic becomes an ERROR there, and the `longjmp` of
//! an ERROR leaves through this entry's frame, which then holds nothing to drop.
//!
//! [`Generator::reserve_one_early`]: crate::snowflake::generator::Generator::reserve_one_early

use pgrx::pg_sys;

use super::{ffi, generate, marks, settings, shmem, wal};

/// `snowflake_next_id()`. The symbol is the one pgrx gave the function
/// before, so that installations of earlier versions call this entry
/// without an upgrade of their SQL.
///
/// # Safety
/// Called by PostgreSQL's function manager with the call's `fcinfo`.
#[no_mangle]
pub unsafe extern "C" fn snowflake_next_id_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let id = match quick() {
        Quick::Issued(id) => id,
        Quick::AfterStandbys(id, lsn) => after_standbys(id, lsn),
        Quick::Declined => general(),
    };
    // SAFETY: `fcinfo` is the call's own, which PostgreSQL passes valid.
    unsafe { (*fcinfo).isnull = false };
    pg_sys::Datum::from(id)
}

/// The general path, in its own frame so that the quick path's stays small.
#[cold]
#[inline(never)]
fn general() -> i64 {
    // SAFETY: called only from the C entry above, whose frame and this one
    // hold nothing that needs dropping if the guard longjmps out of them.
    unsafe {
        pg_sys::panic::pgrx_extern_c_guard(|| generate::reserve(1).next().expect("a block holds at least one ID"))
    }
}

/// Hands out `id` once the synchronous standbys have WAL up to `lsn`.
#[cold]
#[inline(never)]
fn after_standbys(id: i64, lsn: u64) -> i64 {
    // SAFETY: as in `general`.
    unsafe {
        pg_sys::panic::pgrx_extern_c_guard(|| {
            marks::wait_for_standbys(lsn);
            id
        })
    }
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_next_id_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

pgrx::extension_sql!(
    "CREATE FUNCTION snowflake_next_id() RETURNS bigint\n\
     STRICT VOLATILE PARALLEL SAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_next_id_wrapper';\n",
    name = "snowflake_next_id"
);

/// What the quick path did.
enum Quick {
    /// The ID, ready to hand out.
    Issued(i64),
    /// The ID, to hand out once synchronous standbys have the mark (WAL up to
    /// the LSN) it relies on.
    AfterStandbys(i64, u64),
    /// Nothing taken: the general path decides.
    Declined,
}

/// One ID from the shared generator when nothing but the lock and the clock
/// is needed: not in recovery, the mark known, no claim of a worker number
/// pending, no clock step back to report
/// or counted since the clock was read, and the generator's own quick path
/// granting it. Never raises an ERROR and never panics (see the module
/// header).
#[inline(always)]
fn quick() -> Quick {
    let Some(config) = settings::try_config() else { return Quick::Declined };
    if ffi::recovery_in_progress() {
        return Quick::Declined;
    }
    let time = config.codec.time;
    let drift = time.ticks_in(settings::max_drift_ms());
    // The clock is read before the lock, so that the lock is held for a few
    // integer operations only: with backends contending, a longer hold puts
    // more of them to sleep on it. The generator declines the reading if a
    // step back was counted after it was taken, and the general path reads
    // the clock again under the lock.
    let Some(reading) = shmem::early_reading(time) else { return Quick::Declined };
    let Some(mut state) = shmem::try_lock() else { return Quick::Declined };
    if state.unknown.is_some() || state.claim_pending || state.step_back_unreported() {
        return Quick::Declined;
    }
    let Some(id) = state.generator.reserve_one_early(reading, drift) else { return Quick::Declined };
    let lsn = state.mark_lsn;
    drop(state);
    match wal::wait_mode(lsn) {
        None => Quick::Issued(id),
        Some(_) => Quick::AfterStandbys(id, lsn),
    }
}
