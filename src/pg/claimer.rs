//! The background worker that claims an auto primary's worker number as
//! soon as the server accepts writes: at start, and once a standby is
//! promoted (`BgWorkerStart_RecoveryFinished`), so that the claim reaches
//! WAL, and the standbys, at the promotion rather than at the first ID,
//! which may come much later. It claims and exits (code 0: the postmaster
//! forgets it); when it could not (no number free, a state file it could
//! not write) it exits with code 1 and is started again after
//! [`RETRY`]. A restart interval also keeps it registered through a crash
//! re-initialisation, which drops workers that never restart. It holds one
//! `max_worker_processes` slot while registered (on a standby, until the
//! promotion); where none is free, the first call for an ID claims.

use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::prelude::*;

use super::{claim, settings};

/// Registers the worker when `snowflake_id.worker_id = auto`. Postmaster
/// only, while `shared_preload_libraries` load.
pub fn init() {
    if !settings::config().auto_worker {
        return;
    }
    BackgroundWorkerBuilder::new("snowflake_id worker number claim")
        .set_type("snowflake_id claim")
        .set_library("snowflake_id")
        .set_function("snowflake_id_claim_main")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(RETRY))
        .load();
}

/// How long after a failed claim the worker tries again.
pub const RETRY: Duration = Duration::from_secs(60);

/// The worker's entry point.
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn snowflake_id_claim_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    if !claim::settle_eagerly() {
        // SAFETY: ends this process as PostgreSQL's own code does; the
        // postmaster starts the worker again after RETRY.
        unsafe { pg_sys::proc_exit(1) };
    }
}
