//! The background worker that claims an auto primary's worker number as
//! soon as the server accepts writes: at start, and once a standby is
//! promoted (`BgWorkerStart_RecoveryFinished`), so that the claim reaches
//! WAL, and the standbys, at the promotion rather than at the first ID,
//! which may come much later. It claims and exits; it is not started again
//! after a crash re-initialisation (the first call for an ID claims then),
//! nor where no background worker slot is free (`max_worker_processes`).

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
        .set_restart_time(None)
        .load();
}

/// The worker's entry point.
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn snowflake_id_claim_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    claim::settle_eagerly();
}
