//! The generator in shared memory, behind one LWLock, and its startup.
//!
//! Every backend (parallel workers included) of the server shares one
//! generator, so two backends never issue the same ID. The shared memory
//! startup hook runs in the postmaster at server start and again after a
//! backend crash, when the postmaster re-initialises shared memory: both times
//! the generator resumes above the mark recorded in the state file.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use pgrx::{pg_shmem_init, PgLogLevel};

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

#[derive(Clone, Copy)]
pub struct Shared {
    pub generator: Generator,
    /// Step backs already reported in the log, and when the last report was.
    reported_step_backs: u64,
    last_report: UnixMillis,
}

unsafe impl PGRXSharedMemory for Shared {}

pub static GENERATOR: PgLwLock<Shared> = unsafe { PgLwLock::new(c"snowflake_id") };

static CONFIG: OnceLock<Config> = OnceLock::new();
static STATE_PATH: OnceLock<PathBuf> = OnceLock::new();

/// Keeps the configuration and asks for shared memory. Postmaster only.
pub fn init(config: Config) {
    let data_dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) }.to_string_lossy().into_owned();
    STATE_PATH.get_or_init(|| Path::new(&data_dir).join(state_file::FILE_NAME));
    CONFIG.get_or_init(|| config);
    pg_shmem_init!(GENERATOR = startup_state());
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
