//! The PostgreSQL layer: settings, shared memory, WAL, SQL functions and
//! errors. Everything that decides what an ID is lives in [`crate::snowflake`].
//!
//! Imports point down, never up; within a layer a module may use another of
//! its layer (`scripts/check-layers` fails on any circle):
//!
//! | layer | modules |
//! |---|---|
//! | lifecycle | [`startup`]: shared memory hooks, where the generator starts, the clean-shutdown write; [`new_space`]: the DBA's "new ID space" step; [`claimer`]: the background worker that claims an auto primary's number; [`rewind`]: a server pg_rewind made a standby |
//! | SQL | [`next_id`]: the hot path of `snowflake_next_id()`; [`generate`], [`status`], [`decode`], `adopt`, [`guard`], [`floor`], [`worker_claims`], [`sequences`]: registered sequences hand out snowflake IDs |
//! | policy | [`redo`]: replaying a record by its kind; [`marks`]: making a mark durable, replaying one; [`claim`]: `worker_id = auto`'s claims |
//! | mechanism | [`wal`], [`shmem`], [`state_file`], [`publisher`]: which server an apply worker's rows come from |
//! | base | [`settings`], [`error`], [`clock`], [`control`], [`timestamp`], [`ffi`] |
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(ffi_unwind_calls)]

mod adopt;
mod claim;
mod claimer;
mod clock;
mod control;
mod decode;
mod error;
mod ffi;
mod floor;
mod generate;
mod guard;
mod marks;
mod new_space;
mod next_id;
mod publisher;
mod redo;
mod rewind;
mod sequences;
mod settings;
mod shmem;
mod startup;
mod state_file;
mod status;
mod time_axis;
mod timestamp;
mod wal;
mod worker_claims;

#[cfg(any(test, feature = "pg_test"))]
mod tests;

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use error::Raise;

/// Runs from `_PG_init` when the library is loaded.
pub fn init() {
    // Shared memory, and PGC_POSTMASTER settings, only exist for a library
    // loaded at server start. Stop any later load with a clear error rather than
    // a FATAL from PostgreSQL or an uninitialised lock on the first call.
    // SAFETY: a flag PostgreSQL sets and clears in this process's main thread.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        error::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "snowflake_id must be loaded via \"shared_preload_libraries\"",
        )
        .set_detail("The ID generator keeps its state in shared memory, which exists only for preloaded libraries.")
        .set_hint("Add snowflake_id to shared_preload_libraries in postgresql.conf and restart the server.")
        .raise(PgLogLevel::ERROR);
    }
    settings::init();
    wal::register(redo::redo);
    startup::init();
    claimer::init();
    sequences::init();
}
