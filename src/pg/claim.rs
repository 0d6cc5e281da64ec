//! `snowflake_id.worker_id = auto`: a primary claims its worker number before
//! its first ID, at its first start and after every promotion, and logs the
//! claim in WAL, so that every standby and base backup of its lineage knows
//! every number the lineage held ([`crate::snowflake::claims`] has the rules).
//!
//! # When a primary claims
//! An auto server starts with a claim pending ([`State::claim_pending`]):
//! no ID is issued (the hot path declines) until [`settle`] has run under
//! the mark writer lock, which a background worker does as soon as the
//! server accepts writes (at start, and once a standby is promoted), and
//! the first call for an ID does otherwise. It keeps the number the state
//! file records as its own claim when that claim was made on the timeline
//! this primary writes WAL on, on this host, in its datacenter and within
//! the layout's worker field: a restart or a crash changes none of that,
//! and pg_upgrade, which starts the new cluster on timeline 1 again, keeps
//! the number and records the claim again there. A promotion moves to a
//! new timeline, and a copy of another server's data directory (a base
//! backup started as a primary, a rewound old primary) never owns the claim
//! it came with ([`super::control::own_claim_at_start`]); each claims anew.
//!
//! # How a claim is made durable
//! As a mark is: the state file first (with the lineage's numbers, the new
//! one current and own, and the generator's mark carried to the new number,
//! so that its IDs lie above every ID of the number before), then a claim
//! record in WAL, flushed. A crash between the two leaves a claim in the file
//! no ID relied on; the next start keeps it, and the first mark record made
//! with the number tells the standbys. The first ID then needs a mark like
//! any first ID, which synchronous standbys confirm before it is handed out.
//!
//! # Replay
//! A standby (or a restore, or crash recovery) notes every claim and release
//! it replays among the lineage's numbers and records them in its state
//! file; an auto server follows a claimed number's node. A claim replayed
//! in crash recovery of the server that made it (the own claim its state
//! file held at start) stays its own; anywhere else it is the lineage's,
//! not this server's.

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, ErrorReport, Raise};
use super::marks::{follow, record_replayed};
use super::shmem::{self, MarkWriter, State, Unknown};
use super::{clock, control, settings, state_file, wal};
use crate::snowflake::claim_record::{WalClaim, WalRelease};
use crate::snowflake::claims::{Claim, Host, Instance, NoneFree, ReleaseError};
use crate::snowflake::codec::Node;
use crate::snowflake::generator::Mark;
use crate::snowflake::id_space;
use crate::snowflake::layout::Field;

/// Whether `node` is a number of this server's datacenter that the layout's
/// worker field holds: a claim of another datacenter, or of a wider field,
/// is not one to generate with (the settings changed since it was made).
pub fn fits(node: Node) -> bool {
    let config = settings::config();
    node.datacenter == config.node.datacenter && config.codec.layout.holds(Field::Worker, node.worker)
}

/// Claims at once, from the background worker, if a claim is pending and
/// may be made now: the server accepts writes and its mark is known (else
/// the first call for an ID settles it, or refuses). False when a claim
/// was due and failed: no number free (logged here), or an ERROR (a state
/// file that could not be written), caught and logged as a WARNING; the
/// worker tries again later, and calls try too.
pub fn settle_eagerly() -> bool {
    // SAFETY: a flag set once at process start.
    if unsafe { pg_sys::IsBinaryUpgrade } || super::ffi::recovery_in_progress() {
        return true;
    }
    {
        let state = shmem::read();
        let refusing = state.unknown.is_some_and(|u| u.refuses_at(clock::now()));
        if !state.claim_pending || refusing {
            return true;
        }
    }
    let settled = PgTryBuilder::new(|| Some(settle_for(false)))
        .catch_others(|e| {
            use pg_sys::panic::CaughtError;
            if let CaughtError::PostgresError(report) | CaughtError::ErrorReport(report) = &e {
                error::new(
                    PgSqlErrorCode::ERRCODE_WARNING,
                    format!("snowflake_id could not claim a worker number now: {}", report.message()),
                )
                .set_detail("The claim is tried again in a minute, and by the first call for an ID.")
                .report(PgLogLevel::WARNING);
                None
            } else {
                e.rethrow()
            }
        })
        .execute();
    let Some(settled) = settled else { return false };
    if let Err(none) = settled {
        error::new(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("snowflake_id found no worker number free to claim among {} numbers", none.numbers),
        )
        .set_detail("Calls to generate IDs try again, and are refused until a number is free.")
        .set_hint(
            "Release numbers no server uses any more with snowflake_release_worker() (snowflake_worker_claims() \
             lists them), widen the layout's worker field, or set snowflake_id.worker_id to a number by hand.",
        )
        .report(PgLogLevel::WARNING);
        return false;
    }
    true
}

/// Ends a pending claim: keeps this server's own claim of its timeline, or
/// claims a number. `Err` when no number is free to claim now; nothing
/// changed then. Called outside recovery, with the mark known, never while
/// holding the mark writer lock.
pub fn settle() -> Result<(), NoneFree> {
    settle_for(true)
}

/// [`settle`], for a call (`for_a_call`: a failure counts as a refused
/// call) or for the background worker.
fn settle_for(for_a_call: bool) -> Result<(), NoneFree> {
    let _writer = MarkWriter::acquire();
    let state: State = *shmem::read();
    if !state.claim_pending {
        return Ok(()); // another backend settled it meanwhile
    }
    let config = settings::config();
    let timeline = wal::insertion_timeline();
    let host = control::host_name();
    let own = state.claims.own_claim().filter(|c| c.host == Host::new(&host) && c.node == state.node && fits(c.node));
    if own.is_some_and(|c| c.timeline == timeline) {
        shmem::lock().claim_pending = false;
        return Ok(());
    }
    let now = clock::now();
    let datacenter = config.node.datacenter;
    // Timelines only grow along a lineage, but pg_upgrade (and pg_resetwal)
    // start the new cluster on timeline 1 again: an own claim of a later
    // timeline is this server's, upgraded. It keeps its number, claimed
    // again on this timeline, so that the next promotion is told apart.
    let (worker, kept) = match own.filter(|c| c.timeline > timeline) {
        Some(upgraded) => (upgraded.node.worker, Some(upgraded.timeline)),
        None => {
            let data_dir = settings::state_path().parent().map(|d| d.display().to_string()).unwrap_or_default();
            // SAFETY: set from the configuration before libraries load.
            let port = u16::try_from(unsafe { pg_sys::PostPortNumber }).unwrap_or(0);
            let instance = Instance { host: &host, data_dir: &data_dir, port };
            let bits = config.codec.layout.width(Field::Worker);
            let reuse_after = settings::worker_reuse_after_ms();
            (state.claims.choose(&instance, datacenter, bits, timeline, now, reuse_after)?, None)
        }
    };
    let node = Node { datacenter, worker };
    let claim = Claim::auto(node, timeline, now, Host::new(&host));
    let mut lineage = state.lineage();
    lineage.claims.note_claim(claim, true);
    lineage.node = node;
    let codec = &config.codec;
    // The caller refused an unknown mark before this: the generator's mark,
    // if it has one, is a floor to carry.
    let carried = state.generator.has_mark().then(|| {
        id_space::carry(codec, state.node, &state.generator.mark(), codec, node).unwrap_or_else(|_| {
            error::new(
                PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
                format!("could not claim worker {worker}: no ID of it lies above the IDs issued so far"),
            )
            .set_detail("The layout's time range ends before IDs of that number pass those of the number before.")
            .set_hint("IDs are never wrapped. Start a new ID space with a later epoch or a wider timestamp field.")
            .raise(PgLogLevel::ERROR)
        })
    });
    let file_mark = carried.unwrap_or(Mark { position: 0, clock_back: 0, wall: None });
    if let Err(e) = state_file::write_mark(&file_mark, false, &lineage) {
        if for_a_call {
            shmem::count_refusal(shmem::Refused::MarkNotDurable);
        }
        ErrorReport::from(e)
            .set_detail(format!("Worker {worker} was not claimed, and no ID was issued."))
            .raise(PgLogLevel::ERROR);
    }
    let lsn = wal::log_claim(&WalClaim { node, timeline, at: now, host: claim.host });
    {
        let mut state = shmem::lock();
        if state.generator.renumber(codec.template(node), carried).is_err() {
            // The carried mark is in its own layout's era: never here.
            state.unknown.get_or_insert(Unknown::OtherSettings);
        }
        state.node = node;
        state.claims = lineage.claims;
        state.claim_pending = false;
        state.mark_lsn = lsn;
    }
    let of_datacenter = if codec.layout.field(Field::Datacenter).is_some() {
        format!(" of datacenter {datacenter}")
    } else {
        String::new()
    };
    let report = match kept {
        Some(before) => error::new(
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            format!("snowflake_id keeps worker {worker}{of_datacenter}, claimed again on timeline {timeline}"),
        )
        .set_detail(format!(
            "This server claimed it on timeline {before}; the timeline went back, as pg_upgrade makes it."
        )),
        None => error::new(
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            format!("snowflake_id claimed worker {worker}{of_datacenter} on timeline {timeline}"),
        )
        .set_detail(format!(
            "No server of this lineage may still generate with it{}. Its IDs lie above every ID of this server's \
             lineage.",
            if state.claims.get(node).is_some() { " (released, or superseded long enough ago)" } else { "" }
        )),
    };
    report.report(PgLogLevel::LOG_SERVER_ONLY);
    Ok(())
}

/// Notes a replayed claim among the lineage's numbers, and records it in
/// the state file before redo moves on (as a replayed mark is recorded). An
/// auto server follows the claimed number (its marks come next); a server
/// with its number set keeps its own.
pub fn replay_claim(claim: &WalClaim) {
    let replayed = Claim::auto(claim.node, claim.timeline, claim.at, claim.host);
    let own = control::is_own_claim(&replayed);
    let _writer = MarkWriter::acquire();
    let recorded = {
        let mut state = shmem::lock();
        state.claims.note_claim(replayed, own);
        if settings::config().auto_worker && state.node != claim.node && follow(&mut state, claim.node).is_err() {
            let before = state.set_unknown(Unknown::OtherSettings);
            if before != Some(Unknown::OtherSettings) {
                drop(state);
                report_cannot_follow(claim);
                return;
            }
        }
        recordable(&state)
    };
    if let Some((mark, lineage)) = recorded {
        record_replayed(&mark, &lineage);
    }
}

/// A standby that cannot carry its mark to the number its primary claimed
/// (the layout's time range ends before IDs of it pass the old ones).
fn report_cannot_follow(claim: &WalClaim) {
    error::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        "snowflake_id cannot carry its mark to the worker number its primary claimed: it will not generate IDs",
    )
    .set_detail(format!(
        "The record ({claim}) names a number whose IDs do not pass those of the number before within the layout's \
         time range."
    ))
    .set_hint("Start a new ID space with a later epoch or a wider timestamp field.")
    .report(PgLogLevel::WARNING);
}

/// Notes a replayed release, and records it likewise.
pub fn replay_release(release: &WalRelease) {
    let _writer = MarkWriter::acquire();
    let recorded = {
        let mut state = shmem::lock();
        // A number this lineage does not know (its table was full) stays unknown.
        let _ = state.claims.release(release.node, release.at);
        recordable(&state)
    };
    if let Some((mark, lineage)) = recorded {
        record_replayed(&mark, &lineage);
    }
}

/// The mark and lineage to write to the state file, when the file may be
/// written: not while the mark is unknown, whose file must not say more than
/// the server knows (a server that knows it has none writes mark zero).
fn recordable(state: &State) -> Option<(Mark, shmem::Lineage)> {
    let known = state.unknown.is_none_or(Unknown::keeps_mark);
    known.then(|| (known_mark(state), state.lineage()))
}

/// The generator's mark, or mark zero when it has none yet.
fn known_mark(state: &State) -> Mark {
    if state.generator.has_mark() {
        state.generator.mark()
    } else {
        Mark { position: 0, clock_back: 0, wall: None }
    }
}

/// Releases worker `worker` of datacenter `datacenter` at a superuser's
/// request: the lineage's primaries may claim it again once the clock has
/// passed its last mark. Logged in WAL, so that the standbys know it too.
pub fn release(datacenter: u64, worker: u64) -> Claim {
    let node = Node { datacenter, worker };
    let _writer = MarkWriter::acquire();
    let state: State = *shmem::read();
    if state.unknown.is_some_and(|u| !u.keeps_mark()) {
        error::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "cannot release a worker number while the high-water mark of this data directory is unknown",
        )
        .set_hint("snowflake_status() and the server log say why the mark is unknown; release once it is known.")
        .raise(PgLogLevel::ERROR);
    }
    let mut lineage = state.lineage();
    let now = clock::now();
    let released = lineage.claims.release(node, now).unwrap_or_else(|e| {
        let text = settings::config().codec.node_text(node);
        let (code, message, hint) = match e {
            ReleaseError::Unknown => (
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                format!("{text} was never used by this server's lineage"),
                "snowflake_worker_claims() lists the numbers it used.",
            ),
            ReleaseError::Current => (
                PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
                format!("cannot release {text}: this server's lineage generates with it"),
                "Only numbers of servers that no longer generate may be released.",
            ),
        };
        error::new(code, message).set_hint(hint).raise(PgLogLevel::ERROR)
    });
    if let Err(e) = state_file::write_mark(&known_mark(&state), false, &lineage) {
        ErrorReport::from(e).set_detail("The number was not released.").raise(PgLogLevel::ERROR);
    }
    let at = released.released_at.unwrap_or(now);
    wal::log_release(&WalRelease { node, at });
    shmem::lock().claims = lineage.claims;
    released
}
