//! The generator in shared memory, behind one LWLock, and the lock that
//! serialises writing its marks.
//!
//! Every backend (parallel workers included) of the server shares one
//! generator, so two backends never issue the same ID. What the segment
//! starts with is decided by [`super::startup`], which owns the shared memory
//! hooks and calls [`request`] and [`create`].
//!
//! # Locking rules
//! - The state lock ([`lock`] for writing, [`read`] for reading) protects
//!   [`State`]. It is held for a
//!   few integer operations: never across I/O, a sleep, or a report to the
//!   client or the log, and no PostgreSQL function that can raise an ERROR is
//!   called while it is held.
//! - The mark writer lock ([`MarkWriter`]) is held while one mark is made
//!   durable (WAL, then the state file), so that marks reach the file in
//!   order. It is taken before the state lock, never while holding it.
//! - Both are released by their guards' `Drop`, also when an error unwinds,
//!   and by PostgreSQL itself when a process exits or aborts a transaction.

use std::ptr;

use pgrx::prelude::*;

use super::ffi;
use super::settings;
use crate::snowflake::generator::{Generator, Mark};
use crate::snowflake::time::UnixMillis;

/// Log a clock step back at most this often.
const WARNING_INTERVAL_MS: u64 = 60_000;

const NAME: &std::ffi::CStr = c"snowflake_id";

/// The generator state every backend shares.
#[derive(Clone, Copy)]
pub struct State {
    pub generator: Generator,
    /// The data directory does not know its mark (pg_upgrade made it and the
    /// old cluster's state file was not brought over): generating is refused.
    pub mark_unknown: bool,
    /// Time spent making marks durable, for snowflake_status().
    pub wal_micros: u64,
    pub file_micros: u64,
    /// Step backs already reported in the log, and when the last report was.
    reported_step_backs: u64,
    last_report: UnixMillis,
}

/// How long making one mark durable took, in microseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteTimes {
    pub wal_micros: u64,
    pub file_micros: u64,
}

/// A clock step back to put in the server log.
pub struct StepBackReport {
    pub step_backs: u64,
    pub last_step_back_ms: u64,
}

impl State {
    pub fn new(generator: Generator, mark_unknown: bool) -> State {
        State {
            generator,
            mark_unknown,
            wal_micros: 0,
            file_micros: 0,
            reported_step_backs: 0,
            last_report: UnixMillis(i64::MIN),
        }
    }

    /// Records a mark made durable, and how long that took.
    pub fn mark_written(&mut self, mark: Mark, times: WriteTimes) {
        self.generator.mark_written(mark);
        self.wal_micros += times.wal_micros;
        self.file_micros += times.file_micros;
    }

    /// A report when the clock went back since the last one, at most one a minute.
    #[inline]
    pub fn take_step_back_report(&mut self, now: UnixMillis) -> Option<StepBackReport> {
        let stats = self.generator.stats();
        if stats.clock_step_backs == self.reported_step_backs {
            return None;
        }
        if self.last_report.0.abs_diff(now.0) < WARNING_INTERVAL_MS {
            return None;
        }
        let report = StepBackReport {
            step_backs: stats.clock_step_backs - self.reported_step_backs,
            last_step_back_ms: settings::config().codec.time.ms_in(stats.last_step_back),
        };
        self.reported_step_backs = stats.clock_step_backs;
        self.last_report = now;
        Some(report)
    }
}

/// What lives in shared memory: the locks and the state they protect.
#[repr(C)]
struct Segment {
    /// Protects `state`.
    lock: *mut pg_sys::LWLock,
    /// Held while a mark is made durable.
    writer: *mut pg_sys::LWLock,
    state: State,
}

/// This process's pointer to the segment; set by [`create`] in the postmaster
/// (and inherited by every backend it forks). Only the postmaster's main
/// thread writes it, before any backend exists.
static mut SEGMENT: *mut Segment = ptr::null_mut();

#[inline]
fn segment() -> *mut Segment {
    // SAFETY: written only by the postmaster before forking; read-only after.
    let segment = unsafe { SEGMENT };
    assert!(!segment.is_null(), "snowflake_id shared memory is initialised at server start");
    segment
}

/// Asks for the segment and its two locks. From the shmem request hook.
pub fn request() {
    // SAFETY: called from the shmem request hook, where such requests belong.
    unsafe {
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Segment>());
        pg_sys::RequestNamedLWLockTranche(NAME.as_ptr(), 2);
    }
}

/// Creates the segment holding `state`, or attaches to it if it exists. From
/// the shmem startup hook, in the postmaster: at server start and after every
/// crash re-initialisation, when shared memory is new again.
pub fn create(state: State) {
    // SAFETY: the startup hook runs in the postmaster with shared memory
    // being set up. AddinShmemInitLock is a macro in C (MainLWLockArray[21],
    // the same slot in every supported version), taken as pgrx's own shared
    // memory takes it; ShmemInitStruct returns memory of the requested size,
    // and the tranche has the two locks requested in `request`.
    unsafe {
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let segment =
            pg_sys::ShmemInitStruct(NAME.as_ptr(), std::mem::size_of::<Segment>(), &mut found).cast::<Segment>();
        if !found {
            let locks = pg_sys::GetNamedLWLockTranche(NAME.as_ptr());
            let lock = &raw mut (*locks).lock;
            let writer = &raw mut (*locks.add(1)).lock;
            segment.write(Segment { lock, writer, state });
        }
        SEGMENT = segment;
        pg_sys::LWLockRelease(init_lock);
    }
}

/// The state without its lock, for the postmaster once every other process
/// is gone (it holds no PGPROC and cannot take an LWLock).
pub fn unlocked_in_postmaster() -> Option<State> {
    // SAFETY: see `segment`.
    let segment = unsafe { SEGMENT };
    // SAFETY: not null, so the segment `create` set up; no process but the
    // postmaster is left to write it.
    (!segment.is_null()).then(|| unsafe { (*segment).state })
}

/// The state lock, held in some mode; released when dropped.
struct Held {
    segment: *mut Segment,
}

impl Held {
    #[inline]
    fn acquire(mode: pg_sys::LWLockMode::Type) -> Held {
        let segment = segment();
        // SAFETY: the lock was initialised with the segment; backends have a
        // PGPROC; the layer holds at most two LWLocks.
        unsafe { ffi::lwlock_acquire((*segment).lock, mode) };
        Held { segment }
    }

    #[inline]
    fn state(&self) -> *mut State {
        // SAFETY: the segment is initialised; taking the field's address reads nothing.
        unsafe { &raw mut (*self.segment).state }
    }
}

impl Drop for Held {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock. Also runs when a Rust panic
        // unwinds out of the locked section.
        unsafe { ffi::lwlock_release((*self.segment).lock) };
    }
}

/// The shared state, locked exclusively; released when dropped.
pub struct StateGuard(Held);

/// The shared state, locked for reading; released when dropped.
pub struct ReadGuard(Held);

impl std::ops::Deref for StateGuard {
    type Target = State;
    #[inline]
    fn deref(&self) -> &State {
        // SAFETY: this guard holds the state lock.
        unsafe { &*self.0.state() }
    }
}

impl std::ops::DerefMut for StateGuard {
    #[inline]
    fn deref_mut(&mut self) -> &mut State {
        // SAFETY: this guard holds the state lock exclusively.
        unsafe { &mut *self.0.state() }
    }
}

impl std::ops::Deref for ReadGuard {
    type Target = State;
    #[inline]
    fn deref(&self) -> &State {
        // SAFETY: this guard holds the state lock (shared: others only read too).
        unsafe { &*self.0.state() }
    }
}

/// The state, exclusively.
#[inline]
pub fn lock() -> StateGuard {
    StateGuard(Held::acquire(pg_sys::LWLockMode::LW_EXCLUSIVE))
}

/// The state, to read.
pub fn read() -> ReadGuard {
    ReadGuard(Held::acquire(pg_sys::LWLockMode::LW_SHARED))
}

/// The right to make a mark durable; released when dropped, also when an
/// error unwinds through the write (and by PostgreSQL itself at process exit).
pub struct MarkWriter {
    lock: *mut pg_sys::LWLock,
}

impl MarkWriter {
    pub fn acquire() -> MarkWriter {
        // SAFETY: the segment is initialised (see `segment`).
        let lock = unsafe { (*segment()).writer };
        // SAFETY: as for the state lock; taken before it, never while holding it.
        unsafe { ffi::lwlock_acquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        MarkWriter { lock }
    }
}

impl Drop for MarkWriter {
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock.
        unsafe { ffi::lwlock_release(self.lock) };
    }
}
