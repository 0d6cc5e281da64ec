//! Every PostgreSQL symbol this layer declares by hand rather than through
//! pgrx's bindings, in one place.
//!
//! pgrx wraps each binding in `pg_guard_ffi_boundary`: a `sigsetjmp` per call
//! that turns a PostgreSQL ERROR into a Rust panic. These symbols are declared
//! here because that wrapper is too dear where they are called (the
//! generator's lock on the hot path; one tuple per generated row; a
//! registered sequence's checks per call), or because
//! the binding's types differ between versions where the ABI does not
//! (`XLogRegisterData`), or because pgrx does not export them.
//!
//! # ABI
//! All of them are `extern "C"`. PostgreSQL reports an error by `longjmp`,
//! never by unwinding, so no unwind ever crosses these calls, and `"C"` makes
//! the process abort if one did. (`#![deny(ffi_unwind_calls)]` on this layer
//! keeps "C-unwind" declarations out.) A `longjmp` is no unwind either way,
//! and the ABI cannot stop one: so, by the rule each declaration states, a
//! function here that may raise an ERROR is called only inside
//! `pg_guard_ffi_boundary`, and the others only where they cannot raise one.

use std::ffi::c_int;

use pgrx::pg_sys::{Datum, LWLock, LWLockMode, Oid, TupleDesc, Tuplestorestate};

mod raw {
    use super::*;

    unsafe extern "C" {
        pub fn LWLockAcquire(lock: *mut LWLock, mode: LWLockMode::Type) -> bool;
        pub fn LWLockConditionalAcquire(lock: *mut LWLock, mode: LWLockMode::Type) -> bool;
        pub fn LWLockRelease(lock: *mut LWLock);
        pub fn RecoveryInProgress() -> bool;
        pub fn GetUserId() -> Oid;
        pub fn IsInParallelMode() -> bool;
        #[cfg_attr(any(feature = "pg18", feature = "pg19"), link_name = "ProcessStartupProcInterrupts")]
        pub fn HandleStartupProcInterrupts();
        pub static pg_file_create_mode: c_int;
    }
}

unsafe extern "C" {
    /// Adds a tuple to a tuplestore. May raise an ERROR (out of memory or
    /// disk): call only inside `pg_guard_ffi_boundary`.
    pub fn tuplestore_putvalues(state: *mut Tuplestorestate, tdesc: TupleDesc, values: *mut Datum, isnull: *mut bool);
    /// Serves a pending interrupt (cancel, timeout, termination) by raising
    /// its ERROR or FATAL: call only inside `pg_guard_ffi_boundary`.
    pub fn ProcessInterrupts();
    /// Adds data to the WAL record being built. Its pointer and length types
    /// differ between PostgreSQL versions in pgrx's bindings; the ABI does not.
    /// Raises an ERROR past the registered buffers: call only inside
    /// `pg_guard_ffi_boundary`, between `XLogBeginInsert` and `XLogInsert`.
    pub fn XLogRegisterData(data: *const std::ffi::c_void, len: u32);
}

/// Acquires `lock` in `mode`, waiting as long as it takes (cancel requests
/// are held off meanwhile, as for every LWLock).
///
/// # Safety
/// `lock` points to an initialised LWLock in shared memory, and this process
/// has a PGPROC (any backend; not the postmaster). LWLockAcquire raises an
/// ERROR only when a process holds more than 200 LWLocks; this layer holds at
/// most two.
#[inline]
pub unsafe fn lwlock_acquire(lock: *mut LWLock, mode: LWLockMode::Type) {
    // SAFETY: the caller's contract above.
    unsafe { raw::LWLockAcquire(lock, mode) };
}

/// Acquires `lock` in `mode` if no other process holds it in a conflicting
/// mode, without waiting; returns whether it did.
///
/// # Safety
/// As for [`lwlock_acquire`].
#[inline]
pub unsafe fn lwlock_try_acquire(lock: *mut LWLock, mode: LWLockMode::Type) -> bool {
    // SAFETY: the caller's contract above.
    unsafe { raw::LWLockConditionalAcquire(lock, mode) }
}

/// Releases `lock`.
///
/// # Safety
/// This process holds `lock` (releasing a lock not held is an ERROR).
#[inline]
pub unsafe fn lwlock_release(lock: *mut LWLock) {
    // SAFETY: the caller's contract above.
    unsafe { raw::LWLockRelease(lock) };
}

/// Serves the startup process's interrupts, as its own waits do: a
/// shutdown request exits the process, a reload rereads the configuration.
/// (PostgreSQL 18 renamed the function `ProcessStartupProcInterrupts`.)
///
/// # Safety
/// Called in the startup process (WAL redo), outside any critical section.
pub unsafe fn serve_startup_interrupts() {
    // SAFETY: the caller's contract; an ERROR it might raise (rereading the
    // configuration logs instead) is trapped.
    unsafe { pgrx::pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| raw::HandleStartupProcInterrupts()) };
}

/// True while the server is a standby or recovering.
#[inline]
pub fn recovery_in_progress() -> bool {
    // SAFETY: reads shared state under a spinlock at most; never raises an
    // ERROR, in any process.
    unsafe { raw::RecoveryInProgress() }
}

/// The role whose privileges apply now (SET ROLE and SECURITY DEFINER
/// functions change it).
#[inline]
pub fn current_user() -> Oid {
    // SAFETY: returns a backend variable; never raises an ERROR.
    unsafe { raw::GetUserId() }
}

/// True in a parallel operation, where a PARALLEL UNSAFE call must fail.
#[inline]
pub fn in_parallel_mode() -> bool {
    // SAFETY: reads this backend's transaction state; never raises an ERROR.
    unsafe { raw::IsInParallelMode() }
}

/// True in a read-only transaction (and on a standby).
#[inline]
pub fn transaction_read_only() -> bool {
    // SAFETY: a backend variable, set by SET TRANSACTION and at transaction start.
    unsafe { pgrx::pg_sys::XactReadOnly }
}

/// The mode PostgreSQL gives files in the data directory: 0600, or 0640 for a
/// cluster initialised with `--allow-group-access`.
pub fn file_create_mode() -> u32 {
    // SAFETY: set once at process start from the data directory's mode, then
    // only read.
    (unsafe { raw::pg_file_create_mode } as u32) & 0o777
}
