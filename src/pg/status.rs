//! `snowflake_status()`: the settings in force and the generator's counters.

use pgrx::prelude::*;
use pgrx::PgTupleDesc;

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
///
/// Declared by hand (below): its columns are more than pgrx's tuples hold.
/// Each column is filled by its name, so an installation whose SQL is older
/// than the library (before `ALTER EXTENSION snowflake_id UPDATE`) gets the
/// columns it declares.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_status_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let row = row();
    // SAFETY: the function is declared to return a set, so PostgreSQL passes
    // a ReturnSetInfo that InitMaterializedSRF fills with a tuplestore and
    // the declared columns.
    unsafe {
        pg_sys::InitMaterializedSRF(fcinfo, pg_sys::MAT_SRF_USE_EXPECTED_DESC);
        let rsinfo = &*(*fcinfo).resultinfo.cast::<pg_sys::ReturnSetInfo>();
        let desc = PgTupleDesc::from_pg_unchecked(rsinfo.setDesc);
        let (mut values, mut nulls): (Vec<_>, Vec<_>) = desc
            .iter()
            .map(|column| {
                let value = row.iter().find(|(name, _)| *name == column.name()).and_then(|(_, value)| *value);
                (value.unwrap_or(pg_sys::Datum::from(0)), value.is_none())
            })
            .unzip();
        // An ERROR here (out of memory) leaves through pgrx's trap, which
        // drops the vectors first.
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
            ffi::tuplestore_putvalues(rsinfo.setResult, rsinfo.setDesc, values.as_mut_ptr(), nulls.as_mut_ptr())
        });
    }
    pg_sys::Datum::from(0)
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_status_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

pgrx::extension_sql!(
    "CREATE FUNCTION snowflake_status() RETURNS TABLE (\n\
     \tlayout text,\n\
     \tepoch timestamp with time zone,\n\
     \ttick_ms integer,\n\
     \tdatacenter_id integer,\n\
     \tworker_id integer,\n\
     \tsystem_identifier bigint,\n\
     \ttimeline integer,\n\
     \tmax_clock_drift_ms bigint,\n\
     \tmax_wait_ms bigint,\n\
     \tids_issued bigint,\n\
     \tticks_borrowed bigint,\n\
     \tsequence_exhaustions bigint,\n\
     \tclock_step_backs bigint,\n\
     \tlargest_step_back_ms bigint,\n\
     \twaits bigint,\n\
     \twait_time_ms double precision,\n\
     \tdrift_ms bigint,\n\
     \thigh_water_mark timestamp with time zone,\n\
     \tclock_back integer,\n\
     \tmarks_written bigint,\n\
     \tmarks_replayed bigint,\n\
     \tmark_wal_time_ms double precision,\n\
     \tmark_file_time_ms double precision,\n\
     \tstate_file text,\n\
     \tid_space bigint,\n\
     \tguard_clashes bigint,\n\
     \tlast_clash text,\n\
     \tlast_clash_at timestamp with time zone,\n\
     \tguard_evidence bigint,\n\
     \tmark_write_failures bigint,\n\
     \trefused_max_wait bigint,\n\
     \trefused_mark_not_durable bigint,\n\
     \trefused_unknown_mark bigint,\n\
     \trefused_in_recovery bigint,\n\
     \trefused_standby_wait bigint,\n\
     \trefused_before_epoch bigint,\n\
     \trefused_exhausted bigint,\n\
     \trefused_by_guard bigint,\n\
     \trefused_sequence_fence bigint,\n\
     \tworker_id_source text,\n\
     \trefused_no_worker bigint,\n\
     \tmark_unknown text,\n\
     \tclock_back_left integer,\n\
     \ttimestamp_range_end timestamp with time zone,\n\
     \tids_per_tick bigint\n\
     )\n\
     STRICT VOLATILE PARALLEL SAFE ROWS 1\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';\n",
    name = "snowflake_status"
);

/// The row's values by column name; `None` is NULL.
fn row() -> Vec<(&'static str, Option<pg_sys::Datum>)> {
    let config = settings::config();
    let time = config.codec.time;
    let state = *shmem::read();
    let generator = state.generator;
    let now = time.tick_of(clock::now());
    let stats = *generator.stats();
    let mark = generator.mark();
    let ms = |ticks: u64| i64::try_from(time.ms_in(ticks)).unwrap_or(i64::MAX);
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let (clashes, evidence, last_clash) = {
        let guard = shmem::guard();
        (guard.clashes, guard.evidence, guard.last())
    };
    let details = may_see_server_details();
    let (last_clash, last_clash_at) = match last_clash {
        Some((text, at)) => (details.then_some(text), timestamptz(at)),
        None => (None, None),
    };
    // As pg_control_system() shows it: a bigint, negative above 2^63.
    // SAFETY: reads the control file's copy in shared memory.
    let system_identifier = unsafe { pg_sys::GetSystemIdentifier() } as i64;
    // A promoted standby or a restored backup moves to a new timeline; NULL
    // while this server is in recovery.
    let timeline = (!ffi::recovery_in_progress()).then(|| {
        // SAFETY: valid outside recovery, which is checked first.
        (unsafe { pg_sys::GetWALInsertionTimeLine() }) as i32
    });
    let [max_wait, not_durable, unknown_mark, in_recovery, standby_wait, before_epoch, exhausted, by_guard, fence, no_worker] =
        shmem::refusals().map(count);
    // An auto server's number once it claimed one (NULL on a standby, and on
    // a primary before its first ID).
    let worker = (!(config.auto_worker && state.claim_pending)).then_some(state.node.worker as i32);
    vec![
        ("layout", config.codec.layout.to_string().into_datum()),
        ("epoch", timestamptz(time.epoch()).into_datum()),
        ("tick_ms", (time.tick_ms() as i32).into_datum()),
        ("datacenter_id", (config.node.datacenter as i32).into_datum()),
        ("worker_id", worker.into_datum()),
        ("system_identifier", system_identifier.into_datum()),
        ("timeline", timeline.into_datum()),
        ("max_clock_drift_ms", count(settings::max_drift_ms()).into_datum()),
        ("max_wait_ms", count(settings::max_wait_ms()).into_datum()),
        ("ids_issued", count(stats.ids_issued).into_datum()),
        ("ticks_borrowed", count(stats.ticks_borrowed).into_datum()),
        ("sequence_exhaustions", count(stats.sequence_exhaustions).into_datum()),
        ("clock_step_backs", count(stats.clock_step_backs).into_datum()),
        ("largest_step_back_ms", ms(stats.largest_step_back).into_datum()),
        ("waits", count(stats.waits).into_datum()),
        ("wait_time_ms", (stats.wait_micros as f64 / 1000.0).into_datum()),
        ("drift_ms", ms(generator.drift(now)).into_datum()),
        // NULL before the first mark, and while the mark is unknown: the
        // epoch would say something false. A rewound server's mark is known
        // (what it lost lies beside it, and mark_unknown says so).
        (
            "high_water_mark",
            (state.unknown.is_none_or(shmem::Unknown::keeps_mark) && mark.position > 0)
                .then(|| config.codec.instant_of(generator.template().tick_of(mark.position)))
                .flatten()
                .and_then(timestamptz)
                .into_datum(),
        ),
        ("clock_back", (mark.clock_back as i32).into_datum()),
        ("marks_written", count(stats.marks_written).into_datum()),
        ("marks_replayed", count(stats.marks_replayed).into_datum()),
        ("mark_wal_time_ms", (state.wal_micros as f64 / 1000.0).into_datum()),
        ("mark_file_time_ms", (state.file_micros as f64 / 1000.0).into_datum()),
        ("state_file", details.then(|| settings::state_path().display().to_string()).into_datum()),
        ("id_space", i64::from(state.id_space).into_datum()),
        ("guard_clashes", count(clashes).into_datum()),
        ("last_clash", last_clash.into_datum()),
        ("last_clash_at", last_clash_at.into_datum()),
        ("guard_evidence", count(evidence).into_datum()),
        ("mark_write_failures", count(state.mark_write_failures).into_datum()),
        ("refused_max_wait", max_wait.into_datum()),
        ("refused_mark_not_durable", not_durable.into_datum()),
        ("refused_unknown_mark", unknown_mark.into_datum()),
        ("refused_in_recovery", in_recovery.into_datum()),
        ("refused_standby_wait", standby_wait.into_datum()),
        ("refused_before_epoch", before_epoch.into_datum()),
        ("refused_exhausted", exhausted.into_datum()),
        ("refused_by_guard", by_guard.into_datum()),
        ("refused_sequence_fence", fence.into_datum()),
        ("worker_id_source", (if config.auto_worker { "auto" } else { "setting" }).into_datum()),
        ("refused_no_worker", no_worker.into_datum()),
        // Why calls are refused now, or would be once promoted; NULL while
        // the mark is known.
        ("mark_unknown", state.unknown.filter(|u| u.refuses_at(clock::now())).map(|u| u.name()).into_datum()),
        // NULL for a layout without a clock_back field, where a step back
        // past max_clock_drift is refused instead.
        (
            "clock_back_left",
            config.codec.layout.max_clock_back().map(|max| max.saturating_sub(mark.clock_back) as i32).into_datum(),
        ),
        ("timestamp_range_end", config.codec.last_instant().and_then(timestamptz).into_datum()),
        ("ids_per_tick", count(config.codec.layout.sequence().max().saturating_add(1)).into_datum()),
    ]
}
