//! The generator in shared memory, behind one LWLock, and the lock that
//! serialises writing its marks.
//!
//! Every backend (parallel workers included) of the server shares one
//! generator, so two backends never issue the same ID. The shared memory
//! startup hook runs in the postmaster at server start and again after a
//! backend crash, when the postmaster re-initialises shared memory: both times
//! the generator starts from the state file ([`super::startup`]), and WAL redo
//! raises it from there.

use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::OnceLock;

use pgrx::prelude::*;

use super::marks::WriteTimes;
use crate::snowflake::config::Config;
use crate::snowflake::generator::{Generator, Mark};
use crate::snowflake::state_file;
use crate::snowflake::time::UnixMillis;

/// Log a clock step back at most this often.
const WARNING_INTERVAL_MS: u64 = 60_000;

const NAME: &std::ffi::CStr = c"snowflake_id";

/// The generator state every backend shares.
#[derive(Clone, Copy)]
pub struct Shared {
    pub generator: Generator,
    /// The data directory does not know its floor (pg_upgrade made it and the
    /// old cluster's state file was not brought over): generating is refused.
    pub floor_unknown: bool,
    /// Time spent making marks durable, for snowflake_status().
    pub wal_micros: u64,
    pub file_micros: u64,
    /// Step backs already reported in the log, and when the last report was.
    reported_step_backs: u64,
    last_report: UnixMillis,
}

impl Shared {
    pub fn new(generator: Generator, floor_unknown: bool) -> Shared {
        Shared {
            generator,
            floor_unknown,
            wal_micros: 0,
            file_micros: 0,
            reported_step_backs: 0,
            last_report: UnixMillis(i64::MIN),
        }
    }
}

/// What lives in shared memory: the locks and the state they protect.
#[repr(C)]
struct Segment {
    /// Protects `shared`; never held across I/O.
    lock: *mut pg_sys::LWLock,
    /// Held while a mark is written (WAL, then the state file), so that marks
    /// reach the file in order.
    writer: *mut pg_sys::LWLock,
    shared: Shared,
}

/// This process's pointer to the segment; set by the startup hook in the
/// postmaster (and inherited by every backend it forks).
static mut SEGMENT: *mut Segment = ptr::null_mut();

static CONFIG: OnceLock<Config> = OnceLock::new();
static STATE_PATH: OnceLock<PathBuf> = OnceLock::new();
static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

// The hot path calls these directly: pgrx's wrappers set up a sigsetjmp per
// call to turn a PostgreSQL ERROR into a panic, and none of the three raises
// one here (LWLockAcquire only errors past 200 held locks).
mod raw {
    use pgrx::pg_sys::{LWLock, LWLockMode};
    unsafe extern "C" {
        pub fn LWLockAcquire(lock: *mut LWLock, mode: LWLockMode::Type) -> bool;
        pub fn LWLockRelease(lock: *mut LWLock);
        pub fn RecoveryInProgress() -> bool;
    }
}

/// True while the server is a standby or recovering.
#[inline]
pub fn recovery_in_progress() -> bool {
    unsafe { raw::RecoveryInProgress() }
}

/// The shared state, locked, released when dropped.
pub struct Locked {
    segment: *mut Segment,
}

impl Locked {
    #[inline]
    fn acquire(mode: pg_sys::LWLockMode::Type) -> Locked {
        let segment = segment();
        unsafe { raw::LWLockAcquire((*segment).lock, mode) };
        Locked { segment }
    }
}

#[inline]
fn segment() -> *mut Segment {
    let segment = unsafe { SEGMENT };
    assert!(!segment.is_null(), "snowflake_id shared memory is initialised at server start");
    segment
}

impl std::ops::Deref for Locked {
    type Target = Shared;
    #[inline]
    fn deref(&self) -> &Shared {
        unsafe { &(*self.segment).shared }
    }
}

impl std::ops::DerefMut for Locked {
    #[inline]
    fn deref_mut(&mut self) -> &mut Shared {
        unsafe { &mut (*self.segment).shared }
    }
}

impl Drop for Locked {
    #[inline]
    fn drop(&mut self) {
        // Also runs when a Rust panic unwinds out of the locked section; no
        // PostgreSQL function that could longjmp is called while locked.
        unsafe { raw::LWLockRelease((*self.segment).lock) };
    }
}

/// The generator, exclusively.
#[inline]
pub fn exclusive() -> Locked {
    Locked::acquire(pg_sys::LWLockMode::LW_EXCLUSIVE)
}

/// The generator, for reading.
pub fn shared() -> Locked {
    Locked::acquire(pg_sys::LWLockMode::LW_SHARED)
}

/// The right to write a mark; released when dropped, also when an error
/// unwinds through the write (and by PostgreSQL itself at process exit).
pub struct MarkWriter {
    lock: *mut pg_sys::LWLock,
}

impl MarkWriter {
    pub fn acquire() -> MarkWriter {
        let lock = unsafe { (*segment()).writer };
        unsafe { raw::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        MarkWriter { lock }
    }
}

impl Drop for MarkWriter {
    fn drop(&mut self) {
        unsafe { raw::LWLockRelease(self.lock) };
    }
}

/// Keeps the configuration and asks for shared memory. Postmaster only.
pub fn init(config: Config) {
    let data_dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) }.to_string_lossy().into_owned();
    STATE_PATH.get_or_init(|| Path::new(&data_dir).join(state_file::FILE_NAME));
    CONFIG.get_or_init(|| config);
    unsafe {
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_shmem);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup_shmem);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn request_shmem() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Segment>());
        pg_sys::RequestNamedLWLockTranche(NAME.as_ptr(), 2);
    }
}

/// Runs in the postmaster at start and again when it re-initialises shared
/// memory after a backend crashed.
#[pg_guard]
unsafe extern "C-unwind" fn startup_shmem() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let shared = super::startup::initial_state();
        // AddinShmemInitLock, as pgrx's own shared memory uses it.
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let segment =
            pg_sys::ShmemInitStruct(NAME.as_ptr(), std::mem::size_of::<Segment>(), &mut found).cast::<Segment>();
        if !found {
            let locks = pg_sys::GetNamedLWLockTranche(NAME.as_ptr());
            let lock = &raw mut (*locks).lock;
            let writer = &raw mut (*locks.add(1)).lock;
            segment.write(Segment { lock, writer, shared });
        }
        SEGMENT = segment;
        pg_sys::LWLockRelease(init_lock);
        super::startup::at_postmaster_exit();
    }
}

/// The shared state without its lock, for the postmaster once every other
/// process is gone (it holds no PGPROC and cannot take an LWLock).
pub fn unlocked_in_postmaster() -> Option<Shared> {
    let segment = unsafe { SEGMENT };
    (!segment.is_null()).then(|| unsafe { (*segment).shared })
}

/// The server's validated identity; set before any backend starts.
#[inline]
pub fn config() -> &'static Config {
    CONFIG.get().expect("snowflake_id is initialised in shared_preload_libraries")
}

/// The configuration, if this process has one (not while it is being validated).
pub fn try_config() -> Option<&'static Config> {
    CONFIG.get()
}

pub fn state_path() -> &'static Path {
    STATE_PATH.get().expect("snowflake_id is initialised in shared_preload_libraries")
}

/// A clock step back to put in the server log.
pub struct StepBackReport {
    pub step_backs: u64,
    pub last_step_back_ms: u64,
}

impl Shared {
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
            last_step_back_ms: config().codec.time.ms_in(stats.last_step_back),
        };
        self.reported_step_backs = stats.clock_step_backs;
        self.last_report = now;
        Some(report)
    }
}
