//! Taking IDs from the shared generator, and `snowflake_next_ids(n)`; the
//! hot path of `snowflake_next_id()` is [`super::next_id`].

use std::time::{Duration, Instant};

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, Raise};
use super::marks::{changed_settings_hint, OTHER_SETTINGS_HINT, REWOUND_HINT};
use super::shmem::{self, MarkWriter, Refused, StepBackReport, Unknown};
use super::timestamp::{last_instant, timestamptz};
use super::{claim, clock, ffi, marks, settings, state_file};
use crate::snowflake::claims::NoneFree;
use crate::snowflake::config::Config;
use crate::snowflake::generator::{Block, Refusal, Window, MARK_WINDOW_MS};
use crate::snowflake::time::UnixMillis;

/// The most IDs one `snowflake_next_ids` call hands out.
pub const MAX_IDS_PER_CALL: i32 = 100_000_000;

/// How often a bulk call looks for a cancel request while it fills its result:
/// some milliseconds of work.
const INTERRUPT_CHECK_ROWS: usize = 1 << 16;

/// Sleep at most this long between looks at the clock while waiting, so a
/// clock that is corrected forward is noticed quickly.
const MAX_NAP: Duration = Duration::from_millis(100);

/// `n` new IDs in increasing order, taken in blocks with one lock round-trip
/// each and written straight into the result set in one call (materialize
/// mode), which costs a fraction of returning them one call per row.
///
/// Declared by hand (below) rather than with `#[pg_extern]`, whose set-returning
/// functions return a row per call.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_next_ids_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // STRICT: PostgreSQL does not call this with a NULL argument.
    // SAFETY: `fcinfo` is PostgreSQL's, with one integer argument.
    let n = unsafe { pgrx::fcinfo::pg_getarg::<i32>(fcinfo, 0) }.unwrap_or(0);
    if !(0..=MAX_IDS_PER_CALL).contains(&n) {
        error::new(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("number of IDs must be between 0 and {MAX_IDS_PER_CALL}, not {n}"),
        )
        .set_hint("Call snowflake_next_ids() several times for more IDs.")
        .raise(PgLogLevel::ERROR);
    }
    // SAFETY: the function is declared to return a set, so PostgreSQL passes
    // a ReturnSetInfo that InitMaterializedSRF fills with a tuplestore.
    unsafe { pg_sys::InitMaterializedSRF(fcinfo, pg_sys::MAT_SRF_USE_EXPECTED_DESC) };
    // SAFETY: as above.
    let rsinfo = unsafe { &*(*fcinfo).resultinfo.cast::<pg_sys::ReturnSetInfo>() };
    let (store, desc) = (rsinfo.setResult, rsinfo.setDesc);
    let mut remaining = n as u64;
    while remaining > 0 {
        check_for_interrupts!();
        let block = reserve(remaining);
        remaining -= block.len();
        // One error trap per block rather than per row; the loop holds nothing
        // that needs dropping if PostgreSQL raises an error (out of disk, or a
        // cancel request: a block can hold millions of IDs, so look for one
        // every INTERRUPT_CHECK_ROWS rows; the rest of the block is never used).
        // SAFETY: one error trap around the calls that may raise an ERROR (see
        // ffi); `store` and `desc` are the result's, made above.
        unsafe {
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
                for (i, id) in block.enumerate() {
                    if i % INTERRUPT_CHECK_ROWS == INTERRUPT_CHECK_ROWS - 1
                        && std::ptr::read_volatile(&raw const pg_sys::InterruptPending) != 0
                    {
                        ffi::ProcessInterrupts();
                    }
                    let mut value = pg_sys::Datum::from(id);
                    let mut null = false;
                    ffi::tuplestore_putvalues(store, desc, &mut value, &mut null);
                }
            })
        };
    }
    pg_sys::Datum::from(0)
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_next_ids_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

// Bulk generation is granted, not public: one call can run every ID of the
// server up to snowflake_id.max_clock_drift ahead of the clock in seconds.
// Single calls can too, but only a fraction of the time they run for, and a
// column default needs them public (docs/functions.md shows how to restrict them).
pgrx::extension_sql!(
    "CREATE FUNCTION snowflake_next_ids(n integer) RETURNS SETOF bigint\n\
     STRICT VOLATILE PARALLEL SAFE ROWS 1000\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_next_ids_wrapper';\n\
     REVOKE EXECUTE ON FUNCTION snowflake_next_ids(integer) FROM PUBLIC;\n",
    name = "snowflake_next_ids"
);

/// Takes up to `want` consecutive IDs from the shared generator: waits for
/// the clock when the generator may not run further ahead of it, and makes a
/// new mark durable first when it is needed.
pub fn reserve(want: u64) -> Block {
    take::<false>(want)
}

/// Like [`reserve`], but exactly `want` consecutive IDs of one tick (a
/// sequence's block, [`crate::snowflake::block`]); `want` fits a tick.
pub fn reserve_run(want: u64) -> Block {
    take::<true>(want)
}

#[inline(always)]
fn take<const RUN: bool>(want: u64) -> Block {
    if ffi::recovery_in_progress() {
        refuse_during_recovery();
    }
    let time = settings::config().codec.time;
    let mut wait = WaitClock::default();
    // Held while this call writes a mark; taken before the generator's lock.
    let mut writer: Option<MarkWriter> = None;
    loop {
        let drift = time.ticks_in(settings::max_drift_ms());
        let (result, now_ms, now, step_back, mark_lsn) = {
            let mut state = shmem::lock();
            // Read the clock under the lock, so that this path's readings
            // reach the generator in order and a slow backend is not taken
            // for a step back: only a reading taken here counts one (the
            // quick path's, taken before the lock, are declined when lower
            // than the last, see `Generator::reserve_one_early`).
            let now_ms = clock::now();
            if let Some(why) = state.unknown {
                if why.refuses_at(now_ms) {
                    drop(state);
                    refuse_unknown_mark(why);
                }
                state.unknown = None;
            }
            // worker_id = auto: a number of this server's own first.
            if state.claim_pending {
                drop(state);
                writer = None;
                if let Err(none) = claim::settle() {
                    // Wait for a number that frees within max_wait, as for the clock.
                    let since = wait.start();
                    let left = Duration::from_millis(settings::max_wait_ms()).saturating_sub(since.elapsed());
                    let ahead =
                        none.soonest.map(|at| Duration::from_millis(at.0.saturating_sub(clock::now().0).max(1) as u64));
                    match ahead {
                        Some(ahead) if ahead <= left => nap(ahead.min(MAX_NAP)),
                        _ => refuse_no_worker(none),
                    }
                }
                continue;
            }
            let now = time.tick_of(now_ms);
            let result = if RUN {
                state.generator.reserve_run(now, want, drift)
            } else {
                state.generator.reserve(now, want, drift)
            };
            (result, now_ms, now, state.take_step_back_report(now_ms), state.mark_lsn)
        };
        if let Some(r) = step_back {
            report_step_back(r);
        }
        let refusal = match result {
            Ok(grant) => {
                if let Some(mark) = grant.renew {
                    marks::renew(mark, writer.take());
                }
                drop(writer);
                // The mark the block relies on, known to synchronous standbys
                // before any of it leaves (a promoted one must not issue it again).
                marks::wait_for_standbys(mark_lsn);
                return grant.block;
            }
            Err(refusal) => refusal,
        };
        match refusal {
            Refusal::NeedMark(mark) => match &writer {
                // Someone may have written a mark while this call waited for
                // the lock: look again before writing one.
                None => writer = Some(MarkWriter::acquire()),
                Some(held) => marks::write_needed(mark, held),
            },
            Refusal::Wait { until, at_mark } => {
                writer = None;
                let since = wait.start();
                let max_wait = Duration::from_millis(settings::max_wait_ms());
                let waited = since.elapsed();
                if waited >= max_wait {
                    refuse_clock_behind(until.saturating_sub(now), drift, at_mark);
                }
                let ahead = Duration::from_millis(time.ms_in(until.saturating_sub(now).max(1) as u64));
                nap(ahead.min(max_wait - waited).min(MAX_NAP));
            }
            Refusal::BeforeEpoch => refuse_before_epoch(now_ms),
            Refusal::TimestampExhausted => refuse_timestamp_exhausted(),
            Refusal::ClockBackExhausted => refuse_clock_back_exhausted(),
        }
    }
}

/// When a call started waiting for the clock; the wait is counted when the
/// call ends, also when a cancel request or statement_timeout ends it.
#[derive(Default)]
struct WaitClock(Option<Instant>);

impl WaitClock {
    fn start(&mut self) -> Instant {
        *self.0.get_or_insert_with(Instant::now)
    }
}

impl Drop for WaitClock {
    fn drop(&mut self) {
        if let Some(since) = self.0 {
            shmem::lock().generator.record_wait(clock::micros(since.elapsed()));
        }
    }
}

/// Sleeps, ended early by a cancel request, statement_timeout or postmaster
/// death, which are then served.
fn nap(d: Duration) {
    clock::nap(d);
    check_for_interrupts!();
}

/// Tells the log and the client (a WARNING reaches both) that the clock went
/// back, and what the generator does about it.
fn report_step_back(r: StepBackReport) {
    let drift_ms = settings::max_drift_ms();
    let clock_back_mode = settings::config().codec.layout.max_clock_back().is_some();
    let what = if clock_back_mode && r.last_step_back_ms > drift_ms {
        format!(
            "The step is larger than snowflake_id.max_clock_drift ({}), so snowflake_id counts it in the clock_back \
             field and continues with the clock's time.",
            format_ms(drift_ms)
        )
    } else {
        format!(
            "snowflake_id keeps issuing increasing IDs with timestamps up to snowflake_id.max_clock_drift ({}) ahead \
             of the clock until it catches up.",
            format_ms(drift_ms)
        )
    };
    error::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!("system clock went back by {}", format_ms(r.last_step_back_ms)),
    )
    .set_detail(format!("{what} Step backs since the last warning: {}.", r.step_backs))
    .set_hint("Check this server's time synchronisation; snowflake_status() shows the current drift.")
    .report(PgLogLevel::WARNING);
}

fn refuse_during_recovery() -> ! {
    shmem::count_refusal(Refused::Recovery);
    let refused =
        error::new(PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION, "cannot generate snowflake IDs during recovery");
    if settings::config().auto_worker {
        refused
            .set_detail("A standby has no worker number of its own: with snowflake_id.worker_id = auto, it claims one when promoted.")
            .set_hint("Generate IDs on the primary.")
            .raise(PgLogLevel::ERROR)
    }
    refused
        .set_detail("A standby may share its primary's snowflake_id.worker_id and must not issue IDs.")
        .set_hint(
            "Generate IDs on the primary. Before promoting this server, give it a snowflake_id.worker_id that no \
             other server uses, or set snowflake_id.worker_id = auto on every server.",
        )
        .raise(PgLogLevel::ERROR)
}

/// `worker_id = auto` found no number its lineage does not hold.
fn refuse_no_worker(none: NoneFree) -> ! {
    shmem::count_refusal(Refused::NoWorker);
    let config = settings::config();
    let datacenter = if config.codec.layout.field(crate::snowflake::layout::Field::Datacenter).is_some() {
        format!(" of datacenter {}", config.node.datacenter)
    } else {
        String::new()
    };
    let free = none.soonest.map_or_else(
        || "None will become free by itself: every one is held for good.".into(),
        |at| format!("The first is free from {at}."),
    );
    error::new(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!("could not claim a worker number: all {} numbers{datacenter} are held", none.numbers),
    )
    .set_detail(format!(
        "With snowflake_id.worker_id = auto, a primary claims a number no server of its lineage may still generate \
         with: a number is reused once the clock has passed its last mark and snowflake_id.worker_reuse_after ({}) \
         has passed since another superseded it, or once a superuser released it. {free}",
        format_ms(settings::worker_reuse_after_ms())
    ))
    .set_hint(
        "Release numbers no server uses any more with snowflake_release_worker() (snowflake_worker_claims() lists \
         them), lower snowflake_id.worker_reuse_after, widen the layout's worker field, or set \
         snowflake_id.worker_id to a number by hand.",
    )
    .raise(PgLogLevel::ERROR)
}

fn refuse_clock_back_exhausted() -> ! {
    shmem::count_refusal(Refused::Exhausted);
    error::new(
        PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
        "the clock_back field of snowflake IDs is used up",
    )
    .set_detail(format!(
        "The system clock went back beyond snowflake_id.max_clock_drift more often than the clock_back field can \
             count ({} times).",
        settings::config().codec.layout.max_clock_back().unwrap_or(0)
    ))
    .set_hint(
        "Raise snowflake_id.max_clock_drift to ride out step backs, or wait until the clock passes the high-water \
             mark; fix the clock's synchronisation.",
    )
    .raise(PgLogLevel::ERROR)
}

fn refuse_clock_behind(ahead_ticks: i64, drift_ticks: u64, at_mark: bool) -> ! {
    shmem::count_refusal(Refused::MaxWait);
    let time = settings::config().codec.time;
    let ahead_ms = time.ms_in(ahead_ticks.max(0) as u64 + drift_ticks);
    let (what, why) = if at_mark {
        // Where the mark lies, by this server's clock: the refusal says
        // which mark, as snowflake_status() would.
        let mark = UnixMillis(clock::now().0.saturating_add(ahead_ms as i64));
        (
            format!("the high-water mark this server resumed from ({mark})"),
            format!(
                "After a restart, a crash, a failover or pg_upgrade, the generator continues above the last mark \
                 recorded in WAL or its state file. {} ",
                describe_mark_reach(settings::config())
            ),
        )
    } else {
        ("the last ID".to_owned(), String::new())
    };
    error::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("could not generate a snowflake ID: the system clock is {} behind {what}", format_ms(ahead_ms)),
    )
    .set_detail(format!(
        "{why}IDs may run at most snowflake_id.max_clock_drift ({}) ahead of the clock, and snowflake_id.max_wait \
         ({}) passed waiting for it.",
        format_ms(settings::max_drift_ms()),
        format_ms(settings::max_wait_ms())
    ))
    .set_hint(
        "Check the system clock. Raising snowflake_id.max_clock_drift lets IDs continue with timestamps ahead of the \
         clock.",
    )
    .raise(PgLogLevel::ERROR)
}

fn refuse_unknown_mark(why: Unknown) -> ! {
    shmem::count_refusal(Refused::UnknownMark);
    let refused = error::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "cannot generate snowflake IDs: the high-water mark of this data directory is unknown",
    );
    match why {
        Unknown::Upgrade => refused
            .set_detail(
                "pg_upgrade made this cluster without the state file of the cluster it was upgraded from, which may \
                 have issued IDs ahead of the clock.",
            )
            .set_hint(state_file::unknown_mark_hint(settings::state_path())),
        Unknown::OtherSettings => refused
            .set_detail(
                "The last mark this server replayed or resumed from was made under other snowflake_id settings \
                 (layout, epoch or tick_ms), and cannot be carried to this server's.",
            )
            .set_hint(OTHER_SETTINGS_HINT),
        Unknown::NotBefore(from) => error::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "cannot generate snowflake IDs before {}: the settings changed since the state file was written",
                UnixMillis(from.0.saturating_add(MARK_WINDOW_MS as i64))
            ),
        )
        .set_detail(
            "Under the new snowflake_id settings, IDs pass those already issued only from that instant; earlier \
             ones would fall below them.",
        )
        .set_hint(changed_settings_hint(", or wait: calls succeed from that instant on, without a restart")),
        Unknown::Missing => refused
            .set_detail(
                "The state file was missing when the server started, in a data directory that issued IDs before (the \
                 server log says more).",
            )
            .set_hint(
                "Put the state file back and restart (an older copy from a backup is no floor), or, as a superuser, \
                 raise the floor above every ID this server, or the primary it was a standby of, issued: SELECT \
                 snowflake_raise_floor(max(id)) FROM each table that holds them.",
            ),
        Unknown::Rewound(seen_at) => refused
            .set_detail(match seen_at.and_then(timestamptz) {
                Some(at) => format!(
                    "pg_rewind, or a rebuild from a copy of another server, took away the marks of the IDs this \
                     server issued before (it first started after that at {at}); the note \"snowflake_id.rewound\" \
                     in the data directory keeps this."
                ),
                None => {
                    "A note in the data directory (\"snowflake_id.rewound\") says pg_rewind took away the marks of \
                         the IDs this server issued before."
                        .to_owned()
                }
            })
            .set_hint(REWOUND_HINT),
        Unknown::Unreadable => refused
            .set_detail("The state file could not be read when the server started (the server log says why).")
            .set_hint(
                "Repair the state file and restart (an older copy from a backup is no floor), or, as a superuser, \
                 raise the floor above every ID this server, or the primary it was a standby of, issued: SELECT \
                 snowflake_raise_floor(max(id)) FROM each table that holds them.",
            ),
    }
    .raise(PgLogLevel::ERROR)
}

fn refuse_before_epoch(now: UnixMillis) -> ! {
    shmem::count_refusal(Refused::BeforeEpoch);
    let time = settings::config().codec.time;
    error::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "could not generate a snowflake ID: the system clock is before snowflake_id.epoch",
    )
    .set_detail(format!(
        "The clock says {now}; IDs count time from the epoch, {}, and may run at most snowflake_id.max_clock_drift \
         ({}) ahead of the clock.",
        time.epoch(),
        format_ms(settings::max_drift_ms())
    ))
    .set_hint(
        "Check the system clock and its synchronisation: calls succeed once it is right, without a restart. If the \
         epoch was set in the future by mistake, see the documentation's settings changes (docs/guarantees.md) \
         before changing it.",
    )
    .raise(PgLogLevel::ERROR)
}

fn refuse_timestamp_exhausted() -> ! {
    shmem::count_refusal(Refused::Exhausted);
    let codec = settings::config().codec;
    let last = last_instant(&codec);
    error::new(
        PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
        "the snowflake layout's time range is used up",
    )
    .set_detail(format!(
        "The {}-bit timestamp field counts {} ms ticks from {} and its last tick starts at {last}.",
        codec.layout.timestamp().width,
        codec.time.tick_ms(),
        codec.time.epoch()
    ))
    .set_hint("IDs are never wrapped. Start a new ID space with a later epoch or a wider timestamp field.")
    .raise(PgLogLevel::ERROR)
}

/// How far a mark lies past the IDs it covers and ahead of the clock, in
/// this server's ticks: what a crash can leave the generator ahead by.
pub fn describe_mark_reach(config: &Config) -> String {
    let template = config.codec.template(config.node);
    let time = &config.codec.time;
    let window = Window::of(&template, time);
    let tick = format_ms(u64::from(time.tick_ms()));
    match window.whole_ticks() {
        0 => format!(
            "A mark lies at most {} of the {} positions of a {tick} tick past the IDs it covered, and no further \
             ahead of the clock of its time than snowflake_id.max_clock_drift.",
            window.positions(),
            template.position(1)
        ),
        n => format!(
            "A mark lies at most {n} ticks of {tick} ({}) past the IDs it covered, and no further ahead of the clock \
             of its time than snowflake_id.max_clock_drift and those {n} ticks together.",
            format_ms(time.ms_in(n))
        ),
    }
}

/// A duration as PostgreSQL shows a millisecond setting: `250ms`, `2s`, `1h`, `1d`.
pub fn format_ms(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")];
    UNITS
        .iter()
        .find(|(size, _)| ms >= *size && ms.is_multiple_of(*size))
        .map_or_else(|| format!("{ms}ms"), |(size, unit)| format!("{}{unit}", ms / size))
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_read_like_show() {
        use super::format_ms;
        assert_eq!(format_ms(0), "0ms");
        assert_eq!(format_ms(250), "250ms");
        assert_eq!(format_ms(2000), "2s");
        assert_eq!(format_ms(3_600_000), "1h");
        assert_eq!(format_ms(86_400_000), "1d");
        assert_eq!(format_ms(90_000), "90s");
    }
}
