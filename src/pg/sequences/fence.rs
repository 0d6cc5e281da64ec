//! The fence: a registered sequence's MAXVALUE at its current value,
//! called, NO CYCLE, so that every path no hook reaches (a CHECK
//! constraint, a trigger's WHEN, a default a logical replication apply
//! worker fills) fails at native nextval instead of returning a small
//! number. Set under the sequence's lock, after the registration protocol
//! ([`super::in_progress`]); kept where something resets the sequence (a
//! TRUNCATE ... RESTART IDENTITY, a restore's SEQUENCE SET).

use std::ffi::CString;

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::registry::Installed;
use super::{in_progress, names, privileged};
use crate::pg::error::{self, Raise};

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
/// on `seq`, held to the transaction's end: nextval (native, or ours) waits
/// for it, and what is read after it cannot move.
pub fn lock(seq: Oid, installed: &Installed) {
    in_progress::begin(installed.extension, installed.table);
    // SAFETY: a heavyweight lock on a relation, released at transaction end.
    unsafe { pg_sys::LockRelationOid(seq, pg_sys::ShareRowExclusiveLock as _) };
}

/// Sets the fence on `seq`, locked by [`lock`]; returns what it replaces.
/// A sequence at its MAXVALUE already is left as it is.
pub fn set(seq: Oid) -> Replaced {
    let options = options(seq).unwrap_or_else(|| gone(seq));
    let (last, called) = value(seq);
    let at_max = called && last == options.max && !options.cycle;
    let replaced = Replaced { max: options.max, cycle: options.cycle, at_max };
    if at_max {
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
    replaced
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
}

/// Lifts the fence of `seq`: its MAXVALUE and CYCLE back to `replaced`'s.
pub fn lift(seq: Oid, max: i64, cycle: bool) {
    alter(seq, max, cycle);
    invalidate(seq);
}

/// The sequence's `last_value` and `is_called`, read as its owner would.
fn value(seq: Oid) -> (i64, bool) {
    let query = format!("SELECT last_value, is_called FROM {}", names::qualified(seq));
    privileged::run(|| {
        Spi::get_two::<i64, bool>(&query)
            .ok()
            .and_then(|(last, called)| Some((last?, called?)))
            .unwrap_or_else(|| gone(seq))
    })
}

/// Native `setval(seq, value, true)`, as the bootstrap superuser: the
/// registration decided already who may do this.
fn setval(seq: Oid, value: i64) {
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
