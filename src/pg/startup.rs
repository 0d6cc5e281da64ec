//! The generator's lifecycle: where it starts, and what a clean shutdown
//! leaves for the next start. This module owns the shared memory hooks
//! (request and startup) and the postmaster's exit callback; [`super::shmem`]
//! is the mechanism they drive.
//!
//! At server start, and when the postmaster re-initialises shared memory after
//! a backend crash, the generator starts from the state file: the last mark
//! made durable, or the exact point a clean shutdown stopped at. WAL redo then
//! raises it by every mark logged since the last checkpoint ([`super::marks`]).
//!
//! A clean shutdown writes the exact next position, so a restart continues
//! without a gap: the first call after it succeeds at once even with
//! `max_clock_drift = 0`, or with ticks of a minute. After a crash the
//! generator continues above the last mark instead, at most a mark's window
//! ahead of the clock.
//!
//! pg_upgrade carries neither the state file nor WAL to the new cluster. When
//! pg_upgrade first starts its new cluster, this module writes a state file
//! that says the mark is unknown (keeping any file the new cluster had under
//! another name), so that the upgraded server refuses to generate until the
//! DBA brings the old cluster's file over, rather than starting again at the
//! wall clock. The old cluster, started by pg_upgrade too, is left alone.

use std::ffi::CStr;

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::control::{self, LastStop};
use super::error::{self, os_message, ErrorReport, Raise};
use super::marks::{self, carry_failure, changed_settings_hint, describe};
use super::shmem::{self, Lineage, State, Unknown};
use super::{claim, clock, new_space, rewind, settings, state_file};
use crate::snowflake::claims::{Claims, Source};
use crate::snowflake::codec::{Codec, Node};
use crate::snowflake::config::{sentence, Config};
use crate::snowflake::generator::{ClockBackOutOfRange, Generator, Mark, Window, MARK_WINDOW_MS};
use crate::snowflake::id_space::{self, CarryError};
use crate::snowflake::state_file::{StateFile, StateFileError, StateRecord};
use crate::snowflake::time::{span, UnixMillis};

static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// The settings pg_upgrade passes with `-c` on the new cluster's command
/// line, and not on the old one's.
const PG_UPGRADE_NEW_CLUSTER_OPTIONS: [&CStr; 3] = [c"fsync", c"full_page_writes", c"synchronous_commit"];

/// Shared memory was set up before: this is a re-initialisation after a
/// backend crashed. Postmaster memory only.
static mut REINITIALISED: bool = false;

/// The node number of the server whose data directory this one was copied
/// from, when it started as a fresh copy. Postmaster memory only.
static mut COPIED_FROM: Option<Node> = None;

/// Installs the shared memory hooks. Postmaster only, while
/// `shared_preload_libraries` load.
pub fn init() {
    // SAFETY: hooks are chained here, in the postmaster's main thread, before
    // any of them runs.
    unsafe {
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_shmem);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup_shmem);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn request_shmem() {
    // SAFETY: the hook saved in `init`, called as PostgreSQL would.
    if let Some(prev) = unsafe { PREV_SHMEM_REQUEST_HOOK } {
        // SAFETY: as above.
        unsafe { call_previous(prev) };
    }
    shmem::request();
}

/// Runs in the postmaster at start and again when it re-initialises shared
/// memory after a backend crashed.
#[pg_guard]
unsafe extern "C-unwind" fn startup_shmem() {
    // SAFETY: the hook saved in `init`, called as PostgreSQL would.
    if let Some(prev) = unsafe { PREV_SHMEM_STARTUP_HOOK } {
        // SAFETY: as above.
        unsafe { call_previous(prev) };
    }
    // SAFETY: postmaster memory, written only here, in its main thread.
    let first_start = unsafe {
        let first = !REINITIALISED;
        REINITIALISED = true;
        first
    };
    let mut state = initial_state(first_start);
    rewind::at_start(&mut state, first_start);
    shmem::create(state);
    at_postmaster_exit();
}

/// Calls the hook another library installed before ours. Its type says it may
/// unwind, as pgrx types every hook; PostgreSQL code raises errors by
/// `longjmp` instead, and this frame holds nothing to drop.
///
/// # Safety
/// `hook` is a shared memory hook saved in `init`.
#[allow(ffi_unwind_calls)]
unsafe fn call_previous(hook: unsafe extern "C-unwind" fn()) {
    // SAFETY: the caller's contract; called where PostgreSQL would call it.
    unsafe { hook() }
}

/// The generator as shared memory starts. Postmaster only.
fn initial_state(first_start: bool) -> State {
    let config = settings::config();
    let path = settings::state_path();
    if is_pg_upgrades_new_cluster() {
        note_pg_upgrade();
    }
    if first_start {
        control::note_start();
    }
    // No own claim until a state file says so (below): a start that finds
    // none must not keep the last start's.
    control::own_claim_at_start(None, first_start);
    let fresh = |unknown, id_space| {
        let lineage = Lineage { id_space, node: config.node, claims: Claims::default() };
        State::new(fresh_generator(config, config.node), unknown, lineage)
    };
    let file = match state_file::read() {
        Ok(file) => file,
        Err(e) => {
            ErrorReport::from(e).report(PgLogLevel::WARNING);
            if first_start && new_space::requested() {
                new_space::report_not_carried_out();
            }
            // The space the file recorded is the last one a new-space step
            // kept a file for: marks and floors must go on carrying it, or
            // standbys in that space would pass over them.
            return fresh(Some(Unknown::Unreadable), state_file::last_space_kept());
        }
    };
    marks::set_v1_layout(None);
    // Only when the server starts: after a backend crash the step is no one's request.
    if first_start && new_space::requested() {
        let lineage = match &file {
            Some(StateFile::Mark(record)) => lineage_of(record, first_start),
            _ => Lineage { id_space: 0, node: config.node, claims: Claims::default() },
        };
        let number = new_space::start(file.as_ref(), &lineage);
        let lineage = Lineage { id_space: number, ..lineage };
        return State::new(fresh_generator(config, lineage.node), None, lineage);
    }
    let record = match file {
        // The note says the file was there: its floor is lost, not never made.
        None if state_file::issued_before() => {
            state_file::missing(path).report(PgLogLevel::WARNING);
            return fresh(Some(Unknown::Missing), state_file::last_space_kept());
        }
        None => {
            error::new(
                PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
                format!("snowflake_id has no state file \"{}\": it starts at the system clock", path.display()),
            )
            .report(PgLogLevel::LOG);
            return fresh(None, 0);
        }
        Some(StateFile::Unknown { reason }) => {
            error::new(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "snowflake_id will not generate IDs: the high-water mark of this data directory is unknown",
            )
            .set_detail(sentence(&reason))
            .set_hint(state_file::unknown_mark_hint(path))
            .report(PgLogLevel::WARNING);
            return fresh(Some(Unknown::Upgrade), 0);
        }
        Some(StateFile::Mark(record)) => {
            // A data directory that generated before the note existed gets it now.
            if let Err(e) = state_file::note_ids_issued() {
                ErrorReport::from(e)
                    .set_detail("Without the note, a later start could not tell a lost state file from no file.")
                    .report(PgLogLevel::WARNING);
            }
            record
        }
    };
    let lineage = lineage_of(&record, first_start);
    if record.claims.own && !lineage.claims.is_own() {
        disown_on_disk(&record);
    }
    // What the generator's IDs carry: an auto server goes on with the node
    // of its file (its claim, or the primary it follows) until it claims.
    let node = lineage.node;
    let (made_under, recorded) = match record.codec() {
        Ok(codec) => {
            marks::set_v1_layout(Some(codec.layout));
            (codec, record.mark.to_mark(&codec))
        }
        Err(why) => {
            ErrorReport::from(state_file::ReadError { path, error: StateFileError::Corrupt(why) })
                .report(PgLogLevel::WARNING);
            return State::new(fresh_generator(config, node), Some(Unknown::Unreadable), lineage);
        }
    };
    let mut changed = record.changed_scale(&config.codec);
    // A node change alone has its own warning when it is carried at once.
    let only_node = changed.is_empty();
    let node_changed = record.changed_node(node);
    if !node_changed.is_empty() {
        // An auto server's number changes at its claim, which says so.
        if !config.auto_worker {
            if is_a_copy_of(record.node, first_start) {
                report_copied_file(record.node, node, "the server this data directory was copied from");
            } else if let Some(writer) = record
                .written_by
                .as_deref()
                .filter(|_| written_elsewhere(&record) && control::starts_as_standby())
                .filter(|_| claimed_by_auto(&lineage.claims, node).is_empty())
            {
                // A standby given its primary's file by hand (the documented
                // remedy for one without). Elsewhere a different writer may
                // be this server moved, renamed or upgraded: a renumbering.
                report_copied_file(record.node, node, &format!("the server that wrote its state file ({writer})"));
            } else {
                report_new_node(&node_changed, record.node, node, &lineage.claims);
            }
        }
        changed.extend(node_changed);
    }
    // Generator state never stops the server (nor its re-initialisation after
    // a crash): what cannot be carried now is refused per call instead.
    let mut unknown = None;
    let mark = if changed.is_empty() {
        recorded
    } else {
        match carry_to_new_settings(&made_under, record.node, &recorded, node, &changed, only_node) {
            Ok(mark) => mark,
            // A standby follows its primary: a replayed mark it can carry ends this.
            Err((_, refusal)) if control::starts_as_standby() => {
                refusal.report(PgLogLevel::WARNING);
                return State::new(fresh_generator(config, node), Some(Unknown::OtherSettings), lineage);
            }
            Err((Some((mark, from)), refusal)) => {
                refusal.report(PgLogLevel::WARNING);
                unknown = Some(Unknown::NotBefore(from));
                mark
            }
            Err((None, refusal)) => {
                refusal.report(PgLogLevel::WARNING);
                return State::new(fresh_generator(config, node), Some(Unknown::OtherSettings), lineage);
            }
        }
    };
    let resumed = generator_for(config, node, Some(mark));
    let generator = match resumed {
        Ok(generator) => generator,
        Err(e) => {
            // A mark is carried to these settings within their clock_back
            // field: only a file that breaks its own layout gets here.
            let why = format!("it records clock_back {} under a layout that holds at most {}", e.recorded, e.max);
            ErrorReport::from(state_file::ReadError { path, error: StateFileError::Corrupt(why) })
                .report(PgLogLevel::WARNING);
            return State::new(fresh_generator(config, node), Some(Unknown::Unreadable), lineage);
        }
    };
    error::new(
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        format!(
            "snowflake_id resumes {} {} (clock_back {}){}",
            if record.exact { "exactly after its clean shutdown at" } else { "above its mark" },
            record.mark.instant,
            record.mark.clock_back,
            resumed_claim(&lineage.claims)
        ),
    )
    .report(PgLogLevel::LOG);
    State::new(generator, unknown, lineage)
}

/// The lineage a state file records, as this server starts from it: the
/// node its marks carry, and its numbers. An auto server goes on with the
/// file's node (its claim, or the primary it follows) until it claims, as
/// long as that node is one of its datacenter that fits the layout; else
/// with worker 0 of its datacenter, its mark carried there (a datacenter
/// changed, a narrower worker field: it claims anew). A server with its
/// number set goes on with that number. A claim is this server's own only
/// where this server made it: not in a copy (the claim is its source's,
/// see [`control::own_claim_at_start`]), nor in recovery (a standby has no
/// number of its own; promoted, it claims one).
fn lineage_of(record: &StateRecord, first_start: bool) -> Lineage {
    let config = settings::config();
    let mut claims = record.claims.to_claims();
    if !control::own_claim_at_start(claims.own_claim().copied(), first_start) {
        claims.disown();
    }
    let node = if !config.auto_worker {
        config.node
    } else if claim::fits(record.node) {
        record.node
    } else {
        Node { datacenter: config.node.datacenter, worker: 0 }
    };
    Lineage { id_space: record.id_space, node, claims }
}

/// A copy of another server's data directory (or a standby) that claimed a
/// number there: the file says so no more before anything else runs, or a
/// crash before its first claim would bring the source's claim back as its
/// own once the backup_label is gone.
fn disown_on_disk(record: &StateRecord) {
    let mut disowned = record.clone();
    disowned.claims.own = false;
    if let Err(e) = state_file::write_record(&disowned) {
        ErrorReport::from(e)
            .set_detail(
                "The state file says this server claimed its worker number, and it is a copy of the server that did \
                 (or a standby): that must be recorded before it may generate.",
            )
            .raise(PgLogLevel::FATAL);
    }
}

/// What the start's LOG line says of an auto server's claim.
fn resumed_claim(claims: &Claims) -> String {
    if !settings::config().auto_worker {
        return String::new();
    }
    match claims.own_claim() {
        Some(c) => {
            format!("; worker {} is its claim of timeline {}, checked before its first ID", c.node.worker, c.timeline)
        }
        None => "; it claims a worker number before its first ID".into(),
    }
}

/// Why a data directory whose settings changed cannot continue at once: the
/// mark carried to the new settings and the instant from which calls may use
/// it (`None` when no mark of the new settings lies above the old IDs), and
/// the report that says so.
type NotNow = (Option<(Mark, UnixMillis)>, Box<ErrorReport>);

/// The mark a data directory continues from after its layout, epoch, tick or
/// node number changed (`changed` names them): above every ID issued under
/// the old settings, and within a mark's window of the clock, as after a
/// crash. Otherwise the carried mark, if any, with the instant calls may use
/// it from, and the report that says how far off that is and the ways out.
fn carry_to_new_settings(
    made_under: &Codec,
    old_node: Node,
    recorded: &Mark,
    node: Node,
    changed: &[String],
    only_node: bool,
) -> Result<Mark, NotNow> {
    let config = settings::config();
    let changed = changed.join(", ");
    let carried = id_space::carry(made_under, old_node, recorded, &config.codec, node);
    let starts = carried.ok().and_then(|m| config.codec.instant_of(config.codec.template(node).tick_of(m.position)));
    let now = clock::now();
    let window = MARK_WINDOW_MS as i64;
    // Where the old IDs had got to: a restart continues there (a bulk call
    // may have run them ahead of the clock), so only the distance the change
    // itself adds counts, as much as a mark's window or one new tick.
    let resumed = made_under.instant_of(made_under.template(old_node).tick_of(recorded.position));
    let base = resumed.map_or(now.0, |r| r.0.max(now.0));
    let slack = window.max(i64::from(config.codec.time.tick_ms()));
    let (detail, later, wait_hint) = match (carried, starts) {
        (Ok(mark), Some(starts)) if starts.0 <= base.saturating_add(slack) => {
            if !only_node {
                error::new(
                    PgSqlErrorCode::ERRCODE_WARNING,
                    "snowflake_id settings changed since the state file was written",
                )
                .set_detail(format!(
                    "Changed: {changed}. IDs continue above every ID issued under the old settings, from {starts}."
                ))
                .report(PgLogLevel::WARNING);
            }
            return Ok(mark);
        }
        (Ok(mark), Some(starts)) => (
            format!(
                "Changed: {changed}. Under the new settings IDs pass those already issued only from {starts}, {} \
                 from now; calls to generate IDs fail until then.",
                span(starts.0.abs_diff(now.0))
            ),
            Some((mark, UnixMillis(starts.0.saturating_sub(window)))),
            format!(", or wait: calls succeed from {starts} on, without a restart"),
        ),
        (Ok(_), None) => {
            (format!("Changed: {changed}. {}", carry_failure(CarryError::Unreachable)), None, String::new())
        }
        (Err(e), _) => (format!("Changed: {changed}. {}", carry_failure(e)), None, String::new()),
    };
    let report = error::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake_id settings changed since the state file was written: new IDs would fall below IDs already issued",
    )
    .set_detail(format!("{detail} The state file's settings were {}.", describe(made_under)))
    .set_hint(changed_settings_hint(&wait_hint));
    Err((later, Box::new(report)))
}

/// Whether the state file came with a copy of another server's data
/// directory ([`control::started_from_copy`]) rather than from this server
/// under another number. A re-initialisation after a crash remembers it.
fn is_a_copy_of(file_node: Node, first_start: bool) -> bool {
    // SAFETY: postmaster memory, written only here, in its main thread.
    unsafe {
        if first_start && control::started_from_copy() {
            COPIED_FROM = Some(file_node);
        }
        COPIED_FROM == Some(file_node)
    }
}

/// Whether another server wrote the state file: its host name or data
/// directory differs from this server's. A file of 0.10.0 or before does
/// not say, and counts as this server's. Taken for a copy only on a
/// standby: a primary whose writer differs may be this server moved to
/// another directory or host, or pg_upgrade's new cluster.
fn written_elsewhere(record: &StateRecord) -> bool {
    record.written_elsewhere(control::writer()) == Some(true)
}

/// A replica, a restored backup or a rewound server starts with the state
/// file of the server it was copied `from`, written under that server's
/// number (or a DBA put that server's file in): nothing to check, so no
/// warning.
fn report_copied_file(old: Node, new: Node, from: &str) {
    error::new(
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        format!(
            "snowflake_id continues above the marks of {from} (datacenter {}, worker {}), with its own number \
             (datacenter {}, worker {})",
            old.datacenter, old.worker, new.datacenter, new.worker
        ),
    )
    .set_hint(format!(
        "A copy that runs beside its source needs a number of its own: check that no other server generates with \
         datacenter {}, worker {} (compare snowflake_status() across servers).",
        new.datacenter, new.worker
    ))
    .report(PgLogLevel::LOG);
}

/// A sentence saying that `new`, set by hand here, is a number an auto
/// primary of this lineage claimed and may still generate with; empty when
/// it is not.
fn claimed_by_auto(claims: &Claims, new: Node) -> String {
    claims
        .get(new)
        .filter(|c| c.source == Source::Auto && claims.holds(new, clock::now(), settings::worker_reuse_after_ms()))
        .map_or_else(String::new, |c| {
            format!(
                " This lineage's worker_id = auto claims list that number as claimed by {} on timeline {}: that \
                 server may still generate with it.",
                if c.host.is_empty() { "another server" } else { c.host.as_str() },
                c.timeline
            )
        })
}

/// A server renumbered (the deployment guide's standby before promotion, or
/// a copy given its own number) continues above every ID it issued under the
/// old number (see [`carry_to_new_settings`]); what is left to check lies
/// outside this server.
fn report_new_node(changed: &[String], old: Node, new: Node, claims: &Claims) {
    let claimed = claimed_by_auto(claims, new);
    error::new(PgSqlErrorCode::ERRCODE_WARNING, "snowflake_id node number changed since the state file was written")
        .set_detail(format!(
            "Changed: {}. New IDs, with datacenter {}, worker {}, lie above every ID issued under the old \
             number.{claimed}",
            changed.join(", "),
            new.datacenter,
            new.worker
        ))
        .set_hint(format!(
            "Check that no other server generates with datacenter {}, worker {} (compare snowflake_status() across \
             servers; the deployment guide has a query). IDs of the old number (datacenter {}, worker {}) may run \
             up to snowflake_id.max_clock_drift ahead of the clock: give it to another server only once that \
             server's clock has passed this one's high_water_mark in snowflake_status(), or after raising that \
             server's floor above it with snowflake_raise_floor().",
            new.datacenter, new.worker, old.datacenter, old.worker
        ))
        .report(PgLogLevel::WARNING);
}

/// This server's generator with `node`, continuing above `resume` if given.
fn generator_for(config: &Config, node: Node, resume: Option<Mark>) -> Result<Generator, ClockBackOutOfRange> {
    let template = config.codec.template(node);
    Generator::new(template, Window::of(&template, &config.codec.time), resume)
}

/// A generator that continues from no mark: a first mark is made before it
/// issues an ID, unless it is told of one (a replayed mark, a floor).
fn fresh_generator(config: &Config, node: Node) -> Generator {
    generator_for(config, node, None).expect("without a mark there is no era to check")
}

/// Whether this is pg_upgrade's new cluster. pg_upgrade starts both clusters
/// in binary-upgrade mode (`-b`), the old one to read its catalog (also for
/// `--check`), and gives only the new one `fsync`, `full_page_writes` and
/// `synchronous_commit` on its command line (PostgreSQL 15 to 18). Where the
/// settings come from tells the clusters apart, not their values: an old
/// cluster's postgresql.conf may turn all three off, and `pg_upgrade -O`
/// options come after pg_upgrade's own on the new cluster's command line.
/// A `pg_upgrade_output.d` directory tells nothing: `--retain`, and any
/// failed run or `--check`, leave one behind in a cluster that may later be
/// upgraded from.
///
/// An old cluster without a state file is left alone too, as at any other
/// start (it never generated, or its file is gone): a file saying its mark
/// is unknown would make it refuse IDs after a mere `pg_upgrade --check`.
fn is_pg_upgrades_new_cluster() -> bool {
    // SAFETY: set from the command line before libraries load, then only read.
    let binary_upgrade = unsafe { pg_sys::IsBinaryUpgrade };
    binary_upgrade && PG_UPGRADE_NEW_CLUSTER_OPTIONS.into_iter().all(settings::set_on_command_line)
}

/// In pg_upgrade's new cluster, the old cluster's state file has not been
/// brought over yet: the DBA copies it once pg_upgrade has finished. Record
/// that the mark is unknown. A file already there (the new cluster's own from
/// a start before pg_upgrade, or one copied too early) is set aside under a
/// name the report gives, never destroyed.
fn note_pg_upgrade() {
    let reason = match state_file::read() {
        Ok(Some(StateFile::Unknown { .. })) => return, // an earlier start of this pg_upgrade run
        Ok(None) => "pg_upgrade created this cluster, and the state file of the cluster it was upgraded from was not \
                     copied into it; that cluster may have issued IDs ahead of the clock"
            .to_string(),
        Ok(Some(StateFile::Mark(_))) | Err(_) => {
            // The file was just read; were it gone now, there would be nothing to keep.
            let kept = state_file::keep_copy("before-pg_upgrade").unwrap_or_default();
            format!(
                "pg_upgrade created this cluster, and a state file was already here when pg_upgrade first started \
                 it, kept as \"{}\"; it may be this cluster's own from before the upgrade, which is no floor for \
                 the IDs of the cluster it was upgraded from (if it is that cluster's file, copied early, copy it \
                 back)",
                kept.display()
            )
        }
    };
    if let Err(e) = state_file::write_unknown(&reason) {
        ErrorReport::from(e).raise(PgLogLevel::FATAL);
    }
}

/// Asks the postmaster to record the exact resume point when it exits after a
/// clean shutdown. Registered again after every re-initialisation, because
/// PostgreSQL forgets exit callbacks when it runs them.
fn at_postmaster_exit() {
    // SAFETY: registers a #[pg_guard]ed callback; PostgreSQL keeps the pointer.
    unsafe { pg_sys::on_shmem_exit(Some(record_clean_shutdown), pg_sys::Datum::from(0)) };
}

#[pg_guard]
unsafe extern "C-unwind" fn record_clean_shutdown(code: std::ffi::c_int, _arg: pg_sys::Datum) {
    // A non-zero code is a crash re-initialisation or a failed start.
    // SAFETY: a flag set once at process start.
    if code != 0 || unsafe { pg_sys::IsUnderPostmaster } {
        return;
    }
    let Some(state) = shmem::unlocked_in_postmaster() else { return };
    if state.unknown.is_some() || control::last_stop() == LastStop::Unclean {
        return;
    }
    // Every backend has exited normally (none between two statements of the
    // generator) and the shutdown checkpoint is written: the shared state is
    // final, and nothing was issued at or after its next position.
    let resume = state.generator.resume_point();
    if resume.position == 0 && state.generator.mark().position == 0 {
        return; // never generated: leave no file
    }
    if let Err(e) = state_file::write_mark(&resume, true, &state.lineage()) {
        error::new(
            error::file_access_code(&e.io),
            format!(
                "could not record snowflake_id's exact position in \"{}\": {}",
                e.path.display(),
                os_message(&e.io)
            ),
        )
        .set_detail("The last mark stays in force: the next start continues above it, up to a second later.")
        .report(PgLogLevel::LOG);
    }
}
