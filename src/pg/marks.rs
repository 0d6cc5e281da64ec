//! Marks: making one durable before any ID beyond the old one is handed out,
//! and replaying one from WAL. Every state file write of a running server
//! goes through here, with its failure policy.
//!
//! # Making a mark durable
//! A mark goes to the state file first, fsynced, then to WAL, flushed; only
//! then may an ID rely on it. The file, because recovery only replays WAL from
//! the last checkpoint and an extension cannot make a checkpoint carry its
//! state (PostgreSQL's relation map is kept the same way: WAL-logged, and its
//! file written and fsynced at once); WAL, so that a standby, a point-in-time
//! restore and crash recovery replay it.
//!
//! Callers hold [`MarkWriter`], so marks reach the file in order, and never
//! hold the state lock while writing.
//!
//! The file comes first because a floor only rises: a file ahead of WAL is
//! harmless (a crash between the two leaves a mark no ID relied on), and the
//! order covers every checkpoint without delaying one. A checkpoint whose redo
//! point lies before the record is followed by recovery that replays it; one
//! whose redo point lies after the record began after the file held the mark,
//! so a base backup taken from it copies that file (or a later one: the file
//! is replaced by rename, never seen half-written), and crash recovery from
//! it starts from that file. (Logging first needed the checkpoint delay of a
//! committing transaction, `DELAY_CHKPT_START`, between the two, and a
//! PostgreSQL internal to set it.)
//!
//! Measured at full speed (docs/bench/marks.md): 1.35 marks a second, each a
//! WAL insert and flush of 0.47 ms and a file write of 0.70 ms. The WAL flush
//! is the cheaper of the two; the file cannot go, for the reason above.
//!
//! Failure policy: a mark that no ID can do without ([`write_needed`]) fails
//! the call, and nothing beyond the old mark was issued. A renewal
//! ([`renew`]), written before the current mark is reached, only warns: the
//! IDs already granted do not depend on it, and it is asked for again.
//!
//! # Replaying a mark
//! Redo runs wherever WAL is replayed: in crash recovery, on a streaming or
//! log-shipping standby, and in point-in-time recovery. It raises the shared
//! generator's mark to the replayed one and writes it to this server's state
//! file before redo moves on, so a standby's `snowflake_status()` follows its
//! primary's mark, a later restartpoint cannot leave the mark behind, and a
//! promoted standby or a restored backup continues above every ID whose mark
//! reached WAL. Any ID stored in a committed row had its mark logged before
//! that row, because the mark is flushed before the ID is handed out.
//!
//! A record names the settings and the ID space its mark was made in. Under
//! the same settings a replayed mark is used as it is; under others it is
//! carried as an ID value ([`crate::snowflake::id_space`]), by the rule a
//! server applies at start. A standby that cannot carry it keeps replaying,
//! but refuses to generate (after promotion) until a mark it can carry
//! arrives. A mark of a later ID space (a DBA started one on the primary)
//! replaces the old space's, lower or not; one of an earlier space is passed
//! over.

use std::time::{Duration, Instant};

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, file_access_code, os_message, ErrorReport, Raise};
use super::shmem::{self, Lineage, MarkWriter, Refused, State, Unknown, WriteTimes};
use super::state_file::{self, WriteError};
use super::timestamp::from_pg_micros;
use super::{clock, control, ffi, new_space, settings, wal};
use crate::snowflake::codec::{Codec, Node};
use crate::snowflake::generator::Mark;
use crate::snowflake::id_space::{self, CarryError};
use crate::snowflake::layout::Layout;
use crate::snowflake::mark_record::MarkRecord;
use crate::snowflake::wal_record::WalMark;

/// The layout of the state file this server started from: the layout of the
/// marks a release before 0.4.0 logged, which do not name it. Set by the
/// postmaster before it starts the startup process; read-only after.
static mut V1_LAYOUT: Option<Layout> = None;

/// Records the state file's layout for replaying old marks. Postmaster only.
pub fn set_v1_layout(layout: Option<Layout>) {
    // SAFETY: written in the postmaster's main thread, before the processes
    // that replay WAL are forked.
    unsafe { V1_LAYOUT = layout };
}

fn v1_layout() -> Option<Layout> {
    // SAFETY: see set_v1_layout.
    unsafe { V1_LAYOUT }
}

/// What a DBA does about a mark made under other settings.
pub const OTHER_SETTINGS_HINT: &str = "Give this server the snowflake_id.layout, epoch and tick_ms its marks were \
     made under (a standby: its primary's) and restart it; on a standby, a replayed mark it can carry ends this \
     too. Or, as a superuser, raise the floor above every ID issued: SELECT snowflake_raise_floor(max(id)) FROM each \
     table that holds them. To abandon the IDs issued so far instead, start a new ID space (see the \
     documentation's settings changes, docs/guarantees.md).";

/// What a DBA does about a server pg_rewind took the marks of its own IDs
/// from (see [`super::rewind`]).
pub const REWOUND_HINT: &str = "Set snowflake_id.worker_id = auto, under which a promoted server claims a number no \
     server of its lineage used; or, on this server once it is a primary, raise the floor above every ID it issued \
     before the rewind (they may be in clients or subscribers only): SELECT \
     snowflake_raise_floor(snowflake_from_timestamp(...)) with a time later than any of them.";

/// The ways out of a settings change the generator cannot continue across
/// yet; `wait_hint` adds waiting where that ends it.
pub fn changed_settings_hint(wait_hint: &str) -> String {
    format!(
        "Set the old values again and restart{wait_hint}. If no table holds IDs of this server from before the \
         change, start a new ID space: stop the server cleanly, create the file \"{}\" and start it.",
        new_space::signal_path().display()
    )
}

/// Makes a mark durable that no ID can do without; on failure nothing was
/// issued beyond the old mark, and the call fails. The caller holds `_writer`
/// (the error unwinds through it, releasing it before the report is sent).
pub fn write_needed(mark: Mark, _writer: &MarkWriter) {
    if let Err(failed) = write(&mark) {
        shmem::count_refusal(Refused::MarkNotDurable);
        ErrorReport::from(failed.error)
            .set_detail("No ID was issued: the generator records its high-water mark before using it.")
            .raise(PgLogLevel::ERROR);
    }
}

/// Makes the next mark durable before the current one is reached, so that
/// other calls never wait for a write. The IDs already granted do not depend
/// on it: a failure is a warning, once for a run of failures, and the write
/// is asked for again by the next call. Another process writing a mark now
/// is left to it: a renewal never queues behind a write that hangs. The
/// warning is sent once the writer lock is released: a client that does not
/// read its socket must not hold up every backend that needs a mark.
pub fn renew(mark: Mark, held: Option<MarkWriter>) {
    let failed = {
        let Some(_writer) = held.or_else(MarkWriter::try_acquire) else {
            shmem::lock().generator.mark_failed();
            return;
        };
        if shmem::read().generator.covers(&mark) {
            return;
        }
        match write(&mark) {
            Err(failed) if failed.first => failed.error,
            _ => return,
        }
    };
    ErrorReport::from(failed)
        .set_detail(
            "IDs continue up to the current high-water mark (about a second of them at full rate); then generating \
             fails until the file can be written. Until a mark is written again, this is not repeated.",
        )
        .report(PgLogLevel::WARNING);
}

/// Raises the floor to `floor` at a DBA's request (`snowflake_raise_floor`):
/// made durable like any mark, in the file and in WAL, so that a restart and
/// the standbys keep it, unless the durable mark covers it already. An
/// unknown floor becomes this one, or the mark this server still holds if
/// that is higher: the file never goes below a mark it may have recorded
/// (a standby that started from a good file and then replayed a mark it
/// could not carry). On failure nothing changed, and the call fails. Then,
/// as for IDs, waits for the synchronous standbys if the session asks for them.
///
/// `floor` is a position of `node`'s IDs. When the generator's node is
/// another by the time the writer lock is held (a claim came first),
/// nothing is done and `None` returned: compute the floor again.
/// `ends_rewind`: the DBA's own call, which also ends a rewind's refusal
/// and removes its note; a floor from a sequence's value leaves both.
///
/// Returns where the generator continues, and its node: no ID below it is
/// issued from now on, and none at or above it was issued before.
pub fn raise_floor(floor: Mark, node: Node, ends_rewind: bool) -> Option<(Mark, Node)> {
    let (lsn, next, rewound) = {
        let _writer = MarkWriter::acquire();
        if shmem::read().node != node {
            return None;
        }
        // Read first: a guard in a match's scrutinee would be held through its arms.
        let needed = {
            let mut state = shmem::lock();
            // A settings change waiting for its instant holds a mark it knows.
            let unknown = state.unknown.is_some_and(|u| !matches!(u, Unknown::NotBefore(_)));
            let held = state.generator.mark();
            state.generator.raise_floor(floor).map(|needed| match (needed, unknown) {
                (true, _) => Some(floor),
                (false, true) => Some(held),
                (false, false) => None,
            })
        };
        let floor = match needed {
            Ok(None) => {
                let state = shmem::read();
                return Some((state.generator.resume_point(), state.node));
            }
            Ok(Some(floor)) => floor,
            // The floor is in the era of an ID of this layout: always within it.
            Err(e) => error::new(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!(
                    "snowflake_id cannot raise its floor to clock_back {} of a layout that holds {}",
                    e.recorded, e.max
                ),
            )
            .raise(PgLogLevel::ERROR),
        };
        let lineage = with_own_mark(&shmem::read(), &floor);
        let times = make_durable(&floor, &lineage).unwrap_or_else(|e| {
            ErrorReport::from(e)
                .set_detail("The floor was not raised: IDs continue as before.")
                .raise(PgLogLevel::ERROR)
        });
        let mut state = shmem::lock();
        let rewound = state.floor_written(floor, times, ends_rewind);
        state.claims = lineage.claims;
        (times.lsn, (state.generator.resume_point(), state.node), rewound)
    };
    if rewound {
        forget_rewind();
    }
    if wal::wait_for_synchronous_standbys(lsn).is_err() {
        not_replicated()
            .set_detail("The floor is in force on this server; the synchronous standbys may not have it yet.")
            .raise(PgLogLevel::ERROR);
    }
    Some(next)
}

/// The floor covers the IDs a rewind took the marks of: the note of it goes,
/// or the next start would refuse again.
fn forget_rewind() {
    if let Err(e) = state_file::remove_rewind_note() {
        error::new(
            file_access_code(&e),
            format!("could not remove snowflake_id's note of a pg_rewind: {}", os_message(&e)),
        )
        .set_detail("The floor is raised and IDs continue; after a restart, the note would refuse them again.")
        .set_hint("Remove the file \"snowflake_id.rewound\" from the data directory.")
        .report(PgLogLevel::WARNING);
    }
}

/// Waits until the synchronous standbys know the mark (its WAL record ends at
/// `lsn`) that the IDs about to be handed out rely on, when the session asks
/// for synchronous standbys; a cancelled wait fails the call, and none of
/// those IDs is handed out.
#[inline]
pub fn wait_for_standbys(lsn: u64) {
    if wal::wait_for_synchronous_standbys(lsn).is_err() {
        shmem::count_refusal(Refused::StandbyWait);
        not_replicated()
            .set_detail("No ID was issued: the standbys may not have the high-water mark it relies on.")
            .raise(PgLogLevel::ERROR);
    }
}

fn not_replicated() -> ErrorReport {
    error::new(
        PgSqlErrorCode::ERRCODE_QUERY_CANCELED,
        "canceling the wait for the synchronous standbys to receive a snowflake_id mark",
    )
    .set_hint(
        "A session whose synchronous_commit asks for synchronous standbys takes IDs only once they have the \
         high-water mark, as a commit waits for them. Check that the standbys in synchronous_standby_names are \
         connected, or set synchronous_commit to local for sessions that may take IDs without them.",
    )
}

/// A mark that could not be made durable, and whether it is the first
/// failure since a mark last was.
struct Failed {
    error: WriteError,
    first: bool,
}

/// The one way a running server writes a mark: durably, then recorded in the
/// generator, or recorded as failed so that it is asked for again. The
/// caller holds the writer lock.
fn write(mark: &Mark) -> Result<(), Failed> {
    // Read first: a guard in a match's scrutinee would be held through its
    // arms. The lineage changes only under the writer lock, which the caller holds.
    let lineage = with_own_mark(&shmem::read(), mark);
    let result = make_durable(mark, &lineage);
    let mut state = shmem::lock();
    match result {
        Ok(times) => {
            state.mark_written(*mark, times);
            state.claims = lineage.claims;
            let recovered = std::mem::replace(&mut state.failing, false);
            drop(state);
            // Server log only: never sent to a client, so never held up by one.
            if recovered {
                error::new(
                    PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
                    "snowflake_id wrote its state file again: IDs continue",
                )
                .report(PgLogLevel::LOG_SERVER_ONLY);
            }
            Ok(())
        }
        Err(error) => {
            state.generator.mark_failed();
            state.mark_write_failures += 1;
            let first = !std::mem::replace(&mut state.failing, true);
            Err(Failed { error, first })
        }
    }
}

/// The lineage of `state` with `mark`, made with its node, noted as that
/// number's last mark: the state file that records the mark records that
/// too. Not while an auto server has no number of its own yet (a floor
/// raised before its claim): its node is only the one it follows.
pub fn with_own_mark(state: &State, mark: &Mark) -> Lineage {
    let mut lineage = state.lineage();
    if !(settings::config().auto_worker && state.claim_pending) {
        let instant = MarkRecord::new(mark, &settings::config().codec).instant;
        lineage.claims.note_mark(lineage.node, instant, clock::now());
    }
    lineage
}

/// Writes `mark` to the state file with `lineage`, then logs it in WAL
/// (flushed). A file error is returned before anything is logged, and then
/// no ID may rely on the mark; a WAL error is raised as a PostgreSQL error.
fn make_durable(mark: &Mark, lineage: &Lineage) -> Result<WriteTimes, WriteError> {
    let started = Instant::now();
    state_file::write_mark(mark, false, lineage)?;
    let written = Instant::now();
    let lsn = wal::log_mark(mark, lineage.id_space, lineage.node);
    Ok(WriteTimes { file_micros: clock::micros(written - started), wal_micros: clock::micros(written.elapsed()), lsn })
}

/// Raises the generator to a replayed mark, carried to this server's
/// settings, and records it in this server's state file before redo moves on.
/// A server with `worker_id = auto` follows the node of its primary's marks
/// (it has no number of its own until it claims one); the mark's number is
/// noted among the lineage's numbers either way.
pub fn replay(wal_mark: &WalMark) {
    let config = settings::config();
    if !config.auto_worker && wal_mark.node == config.node && control::starts_as_standby() && made_since_start(wal_mark)
    {
        report_shared_number(&config.codec, config.node);
    }
    let _writer = MarkWriter::acquire();
    let (own_space, node) = {
        let state = shmem::read();
        (state.id_space, state.node)
    };
    if wal_mark.id_space < own_space {
        return; // a mark of an ID space this server has left
    }
    // Crash recovery of the server that claimed a number replays its old
    // primary's marks from before the claim: they neither make that number
    // current again nor move the generator off the claim.
    let at = wal_mark.mark.wall.unwrap_or(wal_mark.mark.instant);
    let before_own_claim = control::own_claim()
        .is_some_and(|own| own.node != wal_mark.node && own.claimed_at.is_some_and(|claimed| at <= claimed));
    let target = if config.auto_worker && !before_own_claim { wal_mark.node } else { node };
    // `Err(None)`: a 0.3.0 record whose layout this server does not know.
    let carried = wal_mark.codec(v1_layout()).ok_or(None).and_then(|made_under| {
        let mark = wal_mark.mark.to_mark(&made_under);
        id_space::carry(&made_under, wal_mark.node, &mark, &config.codec, target).map_err(Some)
    });
    let (outcome, why) = {
        let mut state = shmem::lock();
        let claims_before = state.claims;
        if before_own_claim {
            state.claims.note_earlier_mark(wal_mark.node, wal_mark.mark.instant, at);
        } else {
            state.claims.note_mark(wal_mark.node, wal_mark.mark.instant, at);
        }
        let claims_changed = state.claims != claims_before;
        let followed = if target == state.node { Ok(()) } else { follow(&mut state, target) };
        let carried = followed.and(carried);
        let outcome = match carried {
            Ok(mark) => {
                let moved = if wal_mark.id_space > state.id_space {
                    state.generator.enter_new_space(mark).map(|()| true)
                } else {
                    state.generator.raise_mark(mark)
                };
                match moved {
                    Ok(moved) => {
                        // A replayed mark is a floor this server can continue
                        // from; a settings change still waits for its instant.
                        if !state.unknown.is_some_and(Unknown::keeps_mark) {
                            state.unknown = None;
                        }
                        state.id_space = wal_mark.id_space;
                        Ok((moved || claims_changed).then(|| (state.generator.mark(), state.lineage())))
                    }
                    Err(_) => Err(state.set_unknown(Unknown::OtherSettings)),
                }
            }
            Err(_) => Err(state.set_unknown(Unknown::OtherSettings)),
        };
        (outcome, carried.err().flatten())
    };
    match outcome {
        Ok(Some((mark, lineage))) => record_replayed(&mark, &lineage),
        Ok(None) => {}
        // Reported once, when this server stops knowing a mark it can use.
        Err(before) if !matches!(before, Some(Unknown::OtherSettings | Unknown::Rewound(_))) => {
            report_cannot_carry(wal_mark, &config.codec, why);
        }
        Err(_) => {}
    }
}

/// An auto server that has no number of its own goes on with `node`, the
/// number its primary's marks now carry: its mark is carried to it, so that
/// its IDs, once it claims a number, lie above those of every number before.
/// Nothing changes when the mark cannot be carried there (the caller
/// refuses and reports it).
pub fn follow(state: &mut State, node: Node) -> Result<(), Option<CarryError>> {
    let codec = &settings::config().codec;
    let mark = state.generator.has_mark().then(|| state.generator.mark());
    let carried = mark.map(|m| id_space::carry(codec, state.node, &m, codec, node)).transpose().map_err(Some)?;
    state.generator.renumber(codec.template(node), carried).map_err(|_| None)?;
    state.node = node;
    Ok(())
}

/// Whether a replayed mark was made while this server runs (less a minute
/// for clocks apart): an old primary that rejoins as a standby replays marks
/// it made itself before, under its own number, which say nothing of its
/// primary now.
fn made_since_start(wal_mark: &WalMark) -> bool {
    // SAFETY: set once by the postmaster before this process was forked.
    let started = from_pg_micros(unsafe { pg_sys::PgStartTime });
    let made = wal_mark.mark.wall.unwrap_or(wal_mark.mark.instant);
    made.0 >= started.0.saturating_sub(60_000)
}

/// Whether this process said that the standby shares its primary's number.
static mut SHARED_NUMBER_REPORTED: bool = false;

/// A standby whose primary's marks carry this standby's own number: once
/// promoted while the primary still generates (split brain, a switchover that
/// leaves it running), the two repeat each other's IDs. Said once per start.
fn report_shared_number(codec: &Codec, node: Node) {
    // SAFETY: a flag of the startup process, which replays WAL in one thread.
    if unsafe { SHARED_NUMBER_REPORTED } {
        return;
    }
    // SAFETY: as above.
    unsafe { SHARED_NUMBER_REPORTED = true };
    let number = codec.node_text(node);
    error::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!("snowflake_id standby has the number its primary generates with ({number})"),
    )
    .set_detail(
        "The marks it replays were made with this server's own number. Promoted while the primary still runs (a \
         split brain, a copy promoted for testing), both would generate with one number and could repeat IDs. \
         ALTER SYSTEM on a primary reaches the standbys pg_basebackup (or a Patroni reinit) copies, in \
         postgresql.auto.conf.",
    )
    .set_hint(
        "Give every server its own number in its own configuration (under Patroni, in each node's patroni.yml, \
         postgresql.parameters) and restart it.",
    )
    .report(PgLogLevel::WARNING);
}

/// How often replay that waits for the state file says so.
const WAIT_REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// Records a replayed mark in the state file before redo moves on: a
/// restartpoint past the record, with a file that does not hold the mark,
/// would lose the mark for the standby's next start. When the file cannot be
/// written, replay waits and tries again each second, as it waits for other
/// resources, rather than stopping the server: a hot standby keeps serving
/// reads, and a shutdown request ends the wait. A promotion waits too (it
/// ends recovery with this record replayed, and a crash after it would
/// restart from the file).
pub fn record_replayed(mark: &Mark, lineage: &Lineage) {
    let mut reported: Option<Instant> = None;
    while let Err(e) = state_file::write_mark(mark, false, lineage) {
        // Single-user mode (and pg_rewind's recovery in it) cannot be asked
        // to stop while waiting: fail there, as before.
        // SAFETY: a flag set once at process start.
        if !unsafe { pg_sys::IsUnderPostmaster } {
            ErrorReport::from(e)
                .set_detail("The replayed high-water mark must be recorded before recovery continues.")
                .raise(PgLogLevel::ERROR);
        }
        if reported.is_none_or(|at| at.elapsed() >= WAIT_REPORT_INTERVAL) {
            let meanwhile = if control::starts_in_recovery() {
                "a hot standby keeps serving reads meanwhile, and a promotion waits too"
            } else {
                "this is crash recovery, so the server accepts no connections until then (pg_ctl -w may give up \
                 waiting; the server goes on)"
            };
            let hint = format!("{} Replay then continues by itself.", error::file_hint(&e.io));
            ErrorReport::from(e)
                .set_detail(format!(
                    "WAL replay waits until the replayed high-water mark is recorded, and tries again every second: \
                     {meanwhile}."
                ))
                .set_hint(hint)
                .report(PgLogLevel::WARNING);
            reported = Some(Instant::now());
        }
        // SAFETY: redo runs in the startup process, outside a critical section.
        unsafe { ffi::serve_startup_interrupts() };
        clock::nap(Duration::from_secs(1));
    }
    if reported.is_some() {
        error::new(
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            "snowflake_id recorded the replayed high-water mark: WAL replay continues",
        )
        .report(PgLogLevel::LOG);
    }
}

fn report_cannot_carry(wal_mark: &WalMark, own: &Codec, why: Option<CarryError>) {
    let made_under = match wal_mark.codec(v1_layout()) {
        Some(codec) => describe(&codec),
        None => format!(
            "epoch {}, tick_ms {} and a layout a record of 0.3.0 does not name",
            wal_mark.epoch, wal_mark.mark.tick_ms
        ),
    };
    error::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        "snowflake_id cannot carry a replayed mark to this server's settings: it will not generate IDs",
    )
    .set_detail(format!(
        "The record ({wal_mark}) was made under {made_under}; this server has {}.{}",
        describe(own),
        why.map_or(String::new(), |e| format!(" {}", carry_failure(e)))
    ))
    .set_hint(OTHER_SETTINGS_HINT)
    .report(PgLogLevel::WARNING);
}

/// The settings that give an ID its meaning, as a DBA writes them.
pub fn describe(codec: &Codec) -> String {
    format!("layout {}, epoch {}, tick_ms {}", codec.layout, codec.time.epoch(), codec.time.tick_ms())
}

/// Why a mark could not be carried, as a sentence.
pub fn carry_failure(e: CarryError) -> &'static str {
    match e {
        CarryError::EarlierEras => {
            "The mark is of a later clock_back era, and the old layout does not put clock_back above its timestamp: \
             IDs of earlier eras may lie above it."
        }
        CarryError::LaterEras => {
            "The new layout has its clock_back field below its timestamp: after a clock step back its IDs would fall \
             below the old ones."
        }
        CarryError::Unreachable => "No ID of these settings reaches the IDs already issued before their range ends.",
    }
}
