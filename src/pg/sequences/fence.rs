//! The fence: a registered sequence's MAXVALUE at its current value,
//! called, NO CYCLE, so that every path no hook reaches (a CHECK
//! constraint, a trigger's WHEN, a default a logical replication apply
//! worker fills) fails at native nextval instead of returning a small
//! number. Set under the sequence's lock, after the registration protocol
//! ([`super::in_progress`]); kept where something resets the sequence (a
//! TRUNCATE ... RESTART IDENTITY, a setval). A restored registration finds
//! its fence in the MAXVALUE its dump gave the sequence.
//!
//! Some resets pass no hook: a logical replication apply worker replays a
//! TRUNCATE ... RESTART IDENTITY with PostgreSQL's own functions. So every
//! transaction checks, before it commits, each registered sequence whose
//! storage it rewrote after the last time this code saw its fence hold (it
//! notes the storage then: [`verified`]): a fence reset before any native
//! value was handed out is set again; one that handed out native values
//! since fails the transaction, as the fence would have failed the call.

use std::collections::HashMap;
use std::ffi::CString;

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::registry::{self, Installed};
use super::{handed, in_progress, names, privileged};
use crate::pg::error::{self, Raise};
use crate::pg::shmem::{self, Refused};

/// What a fence replaces, kept in the registry: the sequence's MAXVALUE and
/// CYCLE before it.
#[derive(Clone, Copy, Debug)]
pub struct Replaced {
    pub max: i64,
    pub cycle: bool,
    /// The sequence had reached its MAXVALUE already: native nextval fails
    /// there without a fence (a fence left by DROP EXTENSION, or a sequence
    /// used up), so its MAXVALUE is no value to come back to.
    pub at_max: bool,
}

/// A sequence's options, from the catalog cache.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub type_oid: Oid,
    pub increment: i64,
    pub start: i64,
    pub min: i64,
    pub max: i64,
    pub cycle: bool,
}

pub fn options(seq: Oid) -> Option<Options> {
    // SAFETY: a syscache lookup, released here.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::SEQRELID as _, seq.into());
        if tuple.is_null() {
            return None;
        }
        let s = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_sequence>(tuple);
        let options = Options {
            type_oid: (*s).seqtypid,
            increment: (*s).seqincrement,
            start: (*s).seqstart,
            min: (*s).seqmin,
            max: (*s).seqmax,
            cycle: (*s).seqcycle,
        };
        pg_sys::ReleaseSysCache(tuple);
        Some(options)
    }
}

/// Runs the registration protocol, then takes the lock ALTER SEQUENCE takes
/// on each of `seqs`, held to the transaction's end: nextval (native, or
/// ours) waits for it, and what is read after it cannot move. All at once:
/// the locks are tried without waiting, and where one is taken, those held
/// are given back and that one is waited for alone, then all tried again.
/// So a registration never holds one sequence while it waits for another,
/// which a client using them in the other order would hold (a deadlock).
pub fn lock(seqs: &[Oid], installed: &Installed) {
    in_progress::begin(installed.extension, installed.table);
    let mode = pg_sys::ShareRowExclusiveLock as pg_sys::LOCKMODE;
    let mut first: Option<usize> = None;
    loop {
        let mut held = Vec::with_capacity(seqs.len());
        // SAFETY: heavyweight locks on relations; one waited for, the
        // others only tried, and those given back were taken here.
        unsafe {
            if let Some(i) = first {
                pg_sys::LockRelationOid(seqs[i], mode);
                held.push(i);
            }
            let mut busy = None;
            for j in (0..seqs.len()).filter(|j| Some(*j) != first) {
                if !pg_sys::ConditionalLockRelationOid(seqs[j], mode) {
                    busy = Some(j);
                    break;
                }
                held.push(j);
            }
            match busy {
                None => return,
                Some(j) => {
                    for i in held {
                        pg_sys::UnlockRelationOid(seqs[i], mode);
                    }
                    first = Some(j);
                }
            }
        }
    }
}

/// Sets the fence on `seq`, locked by [`lock`]; returns what it replaces.
/// A sequence at its MAXVALUE already is left as it is.
pub fn set(seq: Oid) -> Replaced {
    let options = options(seq).unwrap_or_else(|| gone(seq));
    let (last, called) = value(seq);
    let at_max = called && last == options.max && !options.cycle;
    let replaced = Replaced { max: options.max, cycle: options.cycle, at_max };
    if at_max {
        verified(seq);
        return replaced;
    }
    // MAXVALUE must lie above MINVALUE, at a value nextval handed out: a
    // sequence not called yet, or at its MINVALUE, gives up one value. It
    // may not lie below START either (a setval below it): the values
    // between are given up.
    let fence = if !called || last <= options.min { last.max(options.min + 1) } else { last }.max(options.start);
    if fence != last || !called {
        setval(seq, fence);
    }
    alter(seq, fence, false);
    invalidate(seq);
    verified(seq);
    replaced
}

pub fn init() {
    // SAFETY: registering a callback from _PG_init, in the postmaster; every
    // backend inherits it.
    unsafe { pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE => check_rewritten(),
        XACT_EVENT_ABORT
        | XACT_EVENT_PARALLEL_ABORT
        | XACT_EVENT_COMMIT
        | XACT_EVENT_PARALLEL_COMMIT
        | XACT_EVENT_PREPARE => {
            registry::take_touched();
            // SAFETY: see VERIFIED.
            unsafe { VERIFIED = None };
        }
        _ => {}
    }
}

// SAFETY (for VERIFIED): a backend runs one thread.
/// The storages (relfilenodes) each registered sequence had when this
/// transaction saw its fence hold, by setting it or by a statement the
/// utility hook let through: all of them, since a ROLLBACK TO SAVEPOINT
/// gives a sequence back a storage it had before.
static mut VERIFIED: Option<HashMap<Oid, Vec<Oid>>> = None;

/// Notes that `seq`'s fence holds with the storage it has now.
pub fn verified(seq: Oid) {
    let Some(storage) = storage(seq) else { return };
    // SAFETY: see VERIFIED.
    let seen = unsafe { (*std::ptr::addr_of_mut!(VERIFIED)).get_or_insert_with(HashMap::new).entry(seq).or_default() };
    if !seen.contains(&storage) {
        seen.push(storage);
    }
}

/// Whether `seq`'s fence was seen to hold with the storage it has now.
fn holds_as_verified(seq: Oid) -> bool {
    // SAFETY: see VERIFIED.
    let seen = unsafe { (*std::ptr::addr_of!(VERIFIED)).as_ref().and_then(|v| v.get(&seq)) };
    seen.is_some_and(|storages| storage(seq).is_some_and(|now| storages.contains(&now)))
}

/// After a statement the utility hook let through: a registered sequence
/// it rewrote (ALTER SEQUENCE of options the fence does not hold, SET
/// LOGGED or UNLOGGED) and left at its fence keeps it. Such a statement
/// hands out no native value (sequence calls in it are ours), unlike the
/// transaction a logical replication apply worker replays, which no hook
/// sees and [`check_rewritten`] judges.
pub fn verify_rewritten() {
    // SAFETY: in a live transaction; the statement's own invalidations are
    // taken in (a no-op where it wrote nothing), so that the relations it
    // rewrote are among those touched.
    unsafe { pg_sys::CommandCounterIncrement() };
    // SAFETY: a catalog lookup.
    let sequence = |rel: Oid| unsafe { pg_sys::get_rel_relkind(rel) } == pg_sys::RELKIND_SEQUENCE as std::ffi::c_char;
    // The registry is read last: most statements rewrite no sequence.
    for seq in registry::take_newly_touched() {
        if sequence(seq) && rewritten_here(seq) && !holds_as_verified(seq) && registry::lookup(seq).is_some() {
            verified_if_at_fence(seq);
        }
    }
}

/// Notes that `seq`'s fence holds where it stands at it (set by other code:
/// 0.6.0's SQL, until the update).
pub fn verified_if_at_fence(seq: Oid) {
    let Some(options) = options(seq) else { return };
    if !options.cycle && value(seq) == (options.max, true) {
        verified(seq);
    }
}

/// A relation's relfilenode, from the catalog cache.
fn storage(rel: Oid) -> Option<Oid> {
    // SAFETY: a syscache lookup, released here.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::RELOID as _, rel.into());
        if tuple.is_null() {
            return None;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tuple);
        let storage = (*form).relfilenode;
        pg_sys::ReleaseSysCache(tuple);
        Some(storage)
    }
}

/// Before a commit: each registered sequence whose storage this transaction
/// rewrote after its fence was last seen to hold keeps its fence, or the
/// transaction fails.
fn check_rewritten() {
    for seq in registry::take_touched() {
        // SAFETY: catalog lookups.
        if unsafe { pg_sys::get_rel_relkind(seq) } != pg_sys::RELKIND_SEQUENCE as std::ffi::c_char
            || !rewritten_here(seq)
            || holds_as_verified(seq)
            || registry::lookup(seq).is_none()
        {
            continue;
        }
        let Some(options) = options(seq) else { continue };
        let (last, called) = value(seq);
        if !called && !options.cycle {
            // Reset, and nothing handed out since: the fence again.
            native_setval(seq, options.max);
            continue;
        }
        shmem::count_refusal(Refused::SequenceFence);
        error::new(
            PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
            format!(
                "sequence \"{}\" registered with snowflake_id handed out native values after it was reset",
                names::regclass_name(seq)
            ),
        )
        .set_detail(format!(
            "Something rewrote it with no hook of snowflake_id's seeing it (such as a TRUNCATE ... RESTART \
             IDENTITY that logical replication replays), and this transaction took values from it after; it is at \
             {last}, its fence at {}.",
            options.max
        ))
        .set_hint(
            "Replicate TRUNCATE without RESTART IDENTITY to this server, or unregister the sequence here; a \
             transaction that takes no value between the reset and its commit gets the fence back by itself.",
        )
        .raise(PgLogLevel::ERROR);
    }
}

/// Whether this transaction gave `seq` new storage (a rewrite: ALTER
/// SEQUENCE, a reset).
fn rewritten_here(seq: Oid) -> bool {
    // SAFETY: a relcache entry opened and closed here; the field says in
    // which subtransaction the relation first got new storage, if in this
    // transaction.
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(seq);
        if rel.is_null() {
            return false;
        }
        #[cfg(feature = "pg15")]
        let first = (*rel).rd_firstRelfilenodeSubid;
        #[cfg(not(feature = "pg15"))]
        let first = (*rel).rd_firstRelfilelocatorSubid;
        pg_sys::RelationClose(rel);
        // InvalidSubTransactionId is 0.
        first != 0
    }
}

/// Sets a registered sequence's value back to its fence where something
/// reset it.
pub fn keep(seq: Oid) {
    // SAFETY: a catalog lookup.
    if unsafe { pg_sys::get_rel_persistence(seq) } == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char {
        return;
    }
    let Some(options) = options(seq) else { return };
    let (last, called) = value(seq);
    if !called || last != options.max {
        setval(seq, options.max);
    }
    verified(seq);
}

/// Lifts the fence of `seq`: its MAXVALUE and CYCLE back to `replaced`'s.
pub fn lift(seq: Oid, max: i64, cycle: bool) {
    alter(seq, max, cycle);
    invalidate(seq);
}

/// Sets a sequence whose fence was lifted to count on natively above
/// `value` (which it hands out as taken).
pub fn continue_above(seq: Oid, value: i64) {
    setval(seq, value);
}

/// The sequence's `last_value` and `is_called`, read as its owner would,
/// also where no query runs (a commit): with a snapshot of its own (a
/// sequence's tuple is no MVCC data: any snapshot reads its latest state).
pub fn value(seq: Oid) -> (i64, bool) {
    let query = format!("SELECT last_value, is_called FROM {}", names::qualified(seq));
    // SAFETY: a snapshot pushed here and popped below (or by the abort on
    // an ERROR), in a live transaction.
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
    let read =
        privileged::run(|| Spi::get_two::<i64, bool>(&query).ok().and_then(|(last, called)| Some((last?, called?))));
    // SAFETY: as above.
    unsafe { pg_sys::PopActiveSnapshot() };
    read.unwrap_or_else(|| gone(seq))
}

/// Native `setval(seq, value, true)`, as the bootstrap superuser: the
/// registration decided already who may do this. It keeps what this
/// session's currval and lastval answered ([`handed::preserving`]).
fn setval(seq: Oid, value: i64) {
    handed::preserving(seq, || native_setval(seq, value));
}

/// [`setval`], where this session's currval no longer matters (a commit:
/// no subtransaction may begin there).
fn native_setval(seq: Oid, value: i64) {
    privileged::run(|| {
        // SAFETY: native setval with arguments of its types.
        unsafe {
            pg_sys::OidFunctionCall3Coll(
                pg_sys::F_SETVAL_REGCLASS_INT8_BOOL.into(),
                pg_sys::InvalidOid,
                seq.into(),
                value.into(),
                true.into(),
            )
        };
    });
}

/// `ALTER SEQUENCE seq MAXVALUE max [NO] CYCLE`, run by PostgreSQL's own
/// AlterSequence as the current user (whose ownership it checks), not
/// through the utility hook, which would judge it as a user's.
fn alter(seq: Oid, max: i64, cycle: bool) {
    // SAFETY: nodes built as the parser builds them, in the current memory
    // context; AlterSequence locks the sequence (held already) and checks
    // its owner; the command counter makes the change visible to what follows.
    unsafe {
        let schema = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(seq));
        let name = pg_sys::get_rel_name(seq);
        if schema.is_null() || name.is_null() {
            gone(seq);
        }
        let mut stmt = pgrx::PgBox::<pg_sys::AlterSeqStmt>::alloc_node(pg_sys::NodeTag::T_AlterSeqStmt);
        stmt.sequence = pg_sys::makeRangeVar(schema, name, -1);
        let max = CString::new(max.to_string()).expect("digits");
        let options = [
            (c"maxvalue", pg_sys::makeFloat(pg_sys::pstrdup(max.as_ptr())).cast::<pg_sys::Node>()),
            (c"cycle", pg_sys::makeBoolean(cycle).cast::<pg_sys::Node>()),
        ];
        let mut list = std::ptr::null_mut();
        for (option, value) in options {
            list = pg_sys::lappend(list, pg_sys::makeDefElem(pg_sys::pstrdup(option.as_ptr()), value, -1).cast());
        }
        stmt.options = list;
        let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
        pg_sys::AlterSequence(pstate, stmt.into_pg());
        pg_sys::free_parsestate(pstate);
        pg_sys::CommandCounterIncrement();
    }
}

/// Makes every backend plan again what uses `seq` or the table whose column
/// it feeds (a plan cached before holds an identity default that names no
/// sequence, only its table), at this transaction's end.
pub fn invalidate(seq: Oid) {
    // SAFETY: catalog lookups; the invalidations are queued for this
    // transaction's end, and only for relations that exist.
    unsafe {
        if pg_sys::get_rel_relkind(seq) == 0 {
            return;
        }
        pg_sys::CacheInvalidateRelcacheByRelid(seq);
        for deptype in [pg_sys::DependencyType::DEPENDENCY_AUTO, pg_sys::DependencyType::DEPENDENCY_INTERNAL] {
            let (mut table, mut column) = (pg_sys::InvalidOid, 0);
            if pg_sys::sequenceIsOwned(seq, deptype as std::ffi::c_char, &mut table, &mut column) {
                pg_sys::CacheInvalidateRelcacheByRelid(table);
            }
        }
    }
}

fn gone(seq: Oid) -> ! {
    error::new(PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE, format!("sequence with OID {} does not exist", seq.to_u32()))
        .raise(PgLogLevel::ERROR)
}
