//! The PostgreSQL layer: settings, shared memory, SQL functions and errors.
//! Everything that decides what an ID is lives in [`crate::snowflake`].

mod adopt;
mod clock;
mod decode;
mod error;
mod generate;
mod guc;
mod marks;
mod shmem;
mod startup;
mod status;
mod wal;
#[cfg(any(test, feature = "pg_test"))]
mod test_sql;

use pgrx::prelude::*;
use pgrx::PgLogLevel;

/// Runs from `_PG_init` when the library is loaded.
pub fn init() {
    // Shared memory, and PGC_POSTMASTER settings, only exist for a library
    // loaded at server start. Stop any later load with a clear error rather than
    // a FATAL from PostgreSQL or an uninitialised lock on the first call.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        error::raise(
            PgLogLevel::ERROR,
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "snowflake_id must be loaded via \"shared_preload_libraries\"".into(),
            Some(
                "The ID generator keeps its state in shared memory, which exists only for preloaded libraries.".into(),
            ),
            Some("Add snowflake_id to shared_preload_libraries in postgresql.conf and restart the server.".into()),
        );
    }
    let config = guc::define_and_validate(clock::now());
    error::report(
        PgLogLevel::LOG,
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        format!(
            "snowflake_id generates IDs with layout {}, epoch {}, tick {} ms, datacenter {}, worker {}",
            config.codec.layout,
            config.codec.time.epoch(),
            config.codec.time.tick_ms(),
            config.node.datacenter,
            config.node.worker
        ),
        None,
        None,
    );
    wal::register(guc::wal_rmgr_id());
    shmem::init(config);
}
