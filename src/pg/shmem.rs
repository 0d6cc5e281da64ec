//! The generator in shared memory, behind one LWLock, and its startup.
//!
//! Every backend (parallel workers included) of the server shares one
//! generator, so two backends never issue the same ID. The shared memory
//! startup hook runs in the postmaster at server start and again after a
//! backend crash, when the postmaster re-initialises shared memory: both times
//! the generator resumes above the mark recorded in the state file.

use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::OnceLock;

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{os_message, raise, report};
use crate::snowflake::config::Config;
use crate::snowflake::generator::{Generator, Mark};
use crate::snowflake::state_file::{self, StateFileError, StateRecord};
use crate::snowflake::time::UnixMillis;

/// How far ahead each durable mark reserves: one write per second at most,
/// and after a crash the IDs run at most this far ahead of the clock.
pub const WINDOW_MS: u64 = 1000;

/// Log a clock step back at most this often.
const WARNING_INTERVAL_MS: u64 = 60_000;

const NAME: &std::ffi::CStr = c"snowflake_id";

/// The generator state every backend shares.
#[derive(Clone, Copy)]
pub struct Shared {
    pub generator: Generator,
    /// Step backs already reported in the log, and when the last report was.
    reported_step_backs: u64,
    last_report: UnixMillis,
}

/// What lives in shared memory: the lock and the state it protects.
#[repr(C)]
struct Segment {
    lock: *mut pg_sys::LWLock,
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

/// The shared state, locked in `mode`, released when dropped.
pub struct Locked {
    segment: *mut Segment,
}

impl Locked {
    #[inline]
    fn acquire(mode: pg_sys::LWLockMode::Type) -> Locked {
        let segment = unsafe { SEGMENT };
        assert!(!segment.is_null(), "snowflake_id shared memory is initialised at server start");
        unsafe { raw::LWLockAcquire((*segment).lock, mode) };
        Locked { segment }
    }
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
        pg_sys::RequestNamedLWLockTranche(NAME.as_ptr(), 1);
    }
}

/// Runs in the postmaster at start and again when it re-initialises shared
/// memory after a backend crashed: both times the generator resumes above the
/// recorded mark.
#[pg_guard]
unsafe extern "C-unwind" fn startup_shmem() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let shared = startup_state();
        // AddinShmemInitLock, as pgrx's own shared memory uses it.
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let segment =
            pg_sys::ShmemInitStruct(NAME.as_ptr(), std::mem::size_of::<Segment>(), &mut found).cast::<Segment>();
        if !found {
            let lock = &raw mut (*pg_sys::GetNamedLWLockTranche(NAME.as_ptr())).lock;
            segment.write(Segment { lock, shared });
        }
        SEGMENT = segment;
        pg_sys::LWLockRelease(init_lock);
    }
}

/// The server's validated identity; set before any backend starts.
#[inline]
pub fn config() -> &'static Config {
    CONFIG.get().expect("snowflake_id is initialised in shared_preload_libraries")
}

pub fn state_path() -> &'static Path {
    STATE_PATH.get().expect("snowflake_id is initialised in shared_preload_libraries")
}

/// Makes a new mark durable before the generator issues beyond the old one.
pub fn persist(mark: Mark) -> std::io::Result<()> {
    let c = config();
    state_file::write(state_path(), &StateRecord::new(mark, &c.codec, c.node).render())
}

fn window_ticks(config: &Config) -> u64 {
    config.codec.time.ticks_in(WINDOW_MS).max(1)
}

/// The generator as shared memory starts: above the recorded mark, if any.
fn startup_state() -> Shared {
    let config = config();
    let path = state_path();
    let record = match state_file::read(path) {
        Ok(record) => record,
        Err(e) => refuse_state_file(path, e),
    };
    if let Some(r) = &record {
        let changed = r.changed_settings(&config.codec, config.node);
        if !changed.is_empty() {
            report(
                PgLogLevel::WARNING,
                PgSqlErrorCode::ERRCODE_WARNING,
                "snowflake_id settings changed since the state file was written".into(),
                Some(format!("Changed: {}.", changed.join(", "))),
                Some(
                    "Changing the layout, epoch or node numbers of an ID space that already has IDs can repeat \
                     IDs; new IDs still start above the recorded time."
                        .into(),
                ),
            );
        }
    }
    let resume = record.as_ref().map(|r| r.mark_in(&config.codec.time));
    let template = config.codec.template(config.node);
    let generator = Generator::new(template, window_ticks(config), resume).unwrap_or_else(|e| {
        refuse_state_file(
            path,
            StateFileError::Corrupt(format!(
                "it records clock_back {} but the layout's clock_back field holds at most {}",
                e.recorded, e.max
            )),
        )
    });
    if let Some(r) = &record {
        report(
            PgLogLevel::LOG,
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            format!("snowflake_id resumes above {} (clock_back {})", r.mark, r.clock_back),
            None,
            None,
        );
    }
    Shared { generator, reported_step_backs: 0, last_report: UnixMillis(i64::MIN) }
}

fn refuse_state_file(path: &Path, e: StateFileError) -> ! {
    let shown = path.display();
    let recovery = "The file holds the highest timestamp this server may have issued. Restore it from a backup \
                    of this server if you can. Otherwise move it aside and make sure the system clock is past the \
                    newest ID's timestamp (snowflake_timestamp(max(id)) of your tables) before generating IDs.";
    match e {
        StateFileError::Unreadable(io) => raise(
            PgLogLevel::FATAL,
            super::error::file_access_code(&io),
            format!("could not read snowflake_id state file \"{shown}\": {}", os_message(&io)),
            None,
            Some(format!("Check the file's permissions: it must be readable by the server's user. {recovery}")),
        ),
        StateFileError::Corrupt(why) => raise(
            PgLogLevel::FATAL,
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("snowflake_id state file \"{shown}\" is corrupt"),
            Some(crate::snowflake::config::sentence(&format!("the file is corrupt because {why}"))),
            Some(recovery.into()),
        ),
    }
}

/// A clock step back to put in the server log.
pub struct StepBackReport {
    pub step_backs: u64,
    pub last_step_back_ms: u64,
}

impl Shared {
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
