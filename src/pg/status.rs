//! `snowflake_status()`: the settings in force and the generator's counters.

use pgrx::prelude::*;

use super::timestamp::timestamptz;
use super::{clock, ffi, settings, shmem};

/// Whether the current role may see where the data directory is, as with
/// `SHOW data_directory`: a superuser or a member of pg_read_all_settings.
/// The last clash's text (table, subscription and other servers' system
/// identifiers) is kept from other roles under the same rule.
fn may_see_server_details() -> bool {
    // SAFETY: catalog lookups in a backend inside a transaction, as any SQL
    // function runs; pgrx's guards turn their errors into Rust panics.
    unsafe {
        pg_sys::superuser()
            || pg_sys::has_privs_of_role(pg_sys::GetUserId(), pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_SETTINGS))
    }
}

/// One row for monitoring. Counters start at zero when the server starts.
/// The identity columns (datacenter, worker, system identifier, timeline) let
/// a check across servers flag two servers claiming one worker number.
// pgrx reads the column names from the signature, so the row type is spelled out.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe)]
fn snowflake_status() -> TableIterator<
    'static,
    (
        name!(layout, String),
        name!(epoch, Option<TimestampWithTimeZone>),
        name!(tick_ms, i32),
        name!(datacenter_id, i32),
        name!(worker_id, i32),
        name!(system_identifier, i64),
        name!(timeline, Option<i32>),
        name!(max_clock_drift_ms, i64),
        name!(max_wait_ms, i64),
        name!(ids_issued, i64),
        name!(ticks_borrowed, i64),
        name!(sequence_exhaustions, i64),
        name!(clock_step_backs, i64),
        name!(largest_step_back_ms, i64),
        name!(waits, i64),
        name!(wait_time_ms, f64),
        name!(drift_ms, i64),
        name!(high_water_mark, Option<TimestampWithTimeZone>),
        name!(clock_back, i32),
        name!(marks_written, i64),
        name!(marks_replayed, i64),
        name!(mark_wal_time_ms, f64),
        name!(mark_file_time_ms, f64),
        name!(state_file, Option<String>),
        name!(id_space, i64),
        name!(guard_clashes, i64),
        name!(last_clash, Option<String>),
        name!(last_clash_at, Option<TimestampWithTimeZone>),
    ),
> {
    let config = settings::config();
    let time = config.codec.time;
    let state = *shmem::read();
    let generator = state.generator;
    let now = time.tick_of(clock::now());
    let stats = *generator.stats();
    let mark = generator.mark();
    let ms = |ticks: u64| i64::try_from(time.ms_in(ticks)).unwrap_or(i64::MAX);
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let (clashes, last_clash) = {
        let guard = shmem::guard();
        (guard.clashes, guard.last())
    };
    let details = may_see_server_details();
    let (last_clash, last_clash_at) = match last_clash {
        Some((text, at)) => (details.then_some(text), timestamptz(at)),
        None => (None, None),
    };
    TableIterator::once((
        config.codec.layout.to_string(),
        timestamptz(time.epoch()),
        time.tick_ms() as i32,
        config.node.datacenter as i32,
        config.node.worker as i32,
        // As pg_control_system() shows it: a bigint, negative above 2^63.
        // SAFETY: reads the control file's copy in shared memory.
        unsafe { pg_sys::GetSystemIdentifier() } as i64,
        // A promoted standby or a restored backup moves to a new timeline;
        // NULL while this server is in recovery.
        // SAFETY: valid outside recovery, which is checked first.
        (!ffi::recovery_in_progress()).then(|| unsafe { pg_sys::GetWALInsertionTimeLine() } as i32),
        count(settings::max_drift_ms()),
        count(settings::max_wait_ms()),
        count(stats.ids_issued),
        count(stats.ticks_borrowed),
        count(stats.sequence_exhaustions),
        count(stats.clock_step_backs),
        ms(stats.largest_step_back),
        count(stats.waits),
        stats.wait_micros as f64 / 1000.0,
        ms(generator.drift(now)),
        // NULL before the first mark, and while the mark is unknown: the epoch would say something false.
        (state.unknown.is_none_or(|u| matches!(u, shmem::Unknown::NotBefore(_))) && mark.position > 0)
            .then(|| config.codec.instant_of(generator.template().tick_of(mark.position)))
            .flatten()
            .and_then(timestamptz),
        mark.clock_back as i32,
        count(stats.marks_written),
        count(stats.marks_replayed),
        state.wal_micros as f64 / 1000.0,
        state.file_micros as f64 / 1000.0,
        details.then(|| settings::state_path().display().to_string()),
        i64::from(state.id_space),
        count(clashes),
        last_clash,
        last_clash_at,
    ))
}
