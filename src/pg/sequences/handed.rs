//! What this session's sequence calls handed out, for `currval` and
//! `lastval`. PostgreSQL keeps that per session (sequence.c's table of
//! sequences this session used), but a registered sequence's snowflake IDs
//! never pass through it, and the setvals the fence is made of overwrite
//! it. So this module keeps an answer for each sequence whose native one
//! would be wrong, and native currval and lastval answer for the rest.
//!
//! Invariant: once an answer is kept, the session's sequence calls stay
//! routed through our functions ([`kept`]) for the rest of the session, so
//! each later call keeps the answers true: a native nextval or setval
//! through ours hands the answer back to PostgreSQL's table. `DISCARD
//! SEQUENCES` forgets both, as it forgets native ones.

use std::collections::HashMap;

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use pgrx::PgTryBuilder;

use super::privileged;

// SAFETY (for all three): a backend runs one thread.
/// Per sequence, what currval answers: a value, or `None` for "not yet
/// defined in this session" where a fence's setval made native currval
/// defined.
static mut CURRENT: Option<HashMap<Oid, Option<i64>>> = None;
/// What lastval answers: the sequence and its value. Moved into CURRENT
/// only when another sequence's call replaces it, so that a run of calls of
/// one sequence touches no map.
static mut LAST: Option<(Oid, i64)> = None;
/// An answer is kept here (see the invariant).
static mut KEPT: bool = false;

/// Whether this session keeps answers here: its calls must stay routed.
pub fn kept() -> bool {
    // SAFETY: see the statics.
    unsafe { KEPT }
}

/// DISCARD ALL or SEQUENCES.
pub fn forget() {
    // SAFETY: see the statics.
    unsafe {
        CURRENT = None;
        LAST = None;
        KEPT = false;
    }
}

/// A registered sequence's nextval returned `value`.
pub fn handed(seq: Oid, value: i64) {
    // SAFETY: see the statics.
    unsafe {
        retire_last(seq);
        LAST = Some((seq, value));
        KEPT = true;
    }
}

/// Native nextval of `seq` ran through our functions: PostgreSQL's table
/// answers for it now, and lastval is native again.
pub fn handed_natively(seq: Oid) {
    // SAFETY: see the statics.
    unsafe {
        if !KEPT {
            return;
        }
        retire_last(seq);
        LAST = None;
        if let Some(current) = (*std::ptr::addr_of_mut!(CURRENT)).as_mut() {
            current.remove(&seq);
        }
    }
}

/// A setval (`is_called`) of `seq` to `value` ran through our functions,
/// ours or native: currval answers `value`, and so does lastval where the
/// last nextval was `seq`'s, as natively.
pub fn set(seq: Oid, value: i64) {
    // SAFETY: see the statics.
    unsafe {
        match LAST {
            Some((last, _)) if last == seq => LAST = Some((seq, value)),
            _ => {
                (*std::ptr::addr_of_mut!(CURRENT)).get_or_insert_with(HashMap::new).insert(seq, Some(value));
            }
        }
        KEPT = true;
    }
}

/// What currval of `seq` answers, where it is kept here: a value, or `None`
/// for not yet defined.
pub fn currval(seq: Oid) -> Option<Option<i64>> {
    // SAFETY: see the statics.
    unsafe {
        match LAST {
            Some((last, value)) if last == seq => Some(Some(value)),
            _ => (*std::ptr::addr_of!(CURRENT)).as_ref().and_then(|c| c.get(&seq).copied()),
        }
    }
}

/// What lastval answers, where it is kept here.
pub fn lastval() -> Option<(Oid, i64)> {
    // SAFETY: see the statics.
    unsafe { LAST }
}

/// Runs `write`, a setval of the fence's on `seq`, keeping what this
/// session's currval answered before it: PostgreSQL's own setval sets it,
/// as ALTER SEQUENCE (which a registration stands for) does not. What it
/// answered is read from native currval in a subtransaction (it raises an
/// ERROR where nothing is defined); that is a registration's cost, never a
/// call's. Native lastval is not read: it would lock the session's last
/// sequence, whichever that is, to the transaction's end. So where that
/// last sequence is `seq` itself, lastval answers the value the write left.
pub fn preserving(seq: Oid, write: impl FnOnce()) {
    if currval(seq).is_some() {
        write();
        return;
    }
    let before = native_currval(seq);
    write();
    // SAFETY: see the statics.
    unsafe {
        (*std::ptr::addr_of_mut!(CURRENT)).get_or_insert_with(HashMap::new).insert(seq, before);
        KEPT = true;
    }
}

/// Moves LAST into CURRENT where the next answer is another sequence's.
///
/// # Safety
/// See the statics.
unsafe fn retire_last(seq: Oid) {
    // SAFETY: the caller's contract.
    unsafe {
        if let Some((last, value)) = LAST.filter(|(last, _)| *last != seq) {
            (*std::ptr::addr_of_mut!(CURRENT)).get_or_insert_with(HashMap::new).insert(last, Some(value));
        }
    }
}

/// Native currval of `seq`, as the bootstrap superuser, in a subtransaction
/// that is rolled back: `None` where it raises its "not yet defined" ERROR
/// (55000). Any other ERROR (a cancel, a timeout) ends the subtransaction
/// and is raised again. (The lock it takes is on `seq`, which the caller
/// holds already.)
fn native_currval(seq: Oid) -> Option<i64> {
    /// Ends the subtransaction, as PL/pgSQL's exception blocks do: rolled
    /// back, with the memory context and resource owner the abort resets.
    struct Subtransaction(pg_sys::MemoryContext, pg_sys::ResourceOwner);
    impl Subtransaction {
        fn end(&self) {
            // SAFETY: the subtransaction begun below, still the current one.
            unsafe {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                pg_sys::MemoryContextSwitchTo(self.0);
                pg_sys::CurrentResourceOwner = self.1;
            }
        }
    }
    privileged::run(|| {
        // SAFETY: a subtransaction begun here and ended on every branch;
        // native functions of their own argument types.
        unsafe {
            let subtransaction = Subtransaction(pg_sys::CurrentMemoryContext, pg_sys::CurrentResourceOwner);
            pg_sys::BeginInternalSubTransaction(std::ptr::null());
            let value = PgTryBuilder::new(|| {
                let datum = pg_sys::OidFunctionCall1Coll(pg_sys::F_CURRVAL.into(), pg_sys::InvalidOid, seq.into());
                Some(datum.value() as i64)
            })
            .catch_when(PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, |_| None)
            .catch_others(|error| {
                // Rolled back with the ERROR still raised, as PostgreSQL's
                // own abort runs, then raised again as it stands.
                subtransaction.end();
                error.rethrow()
            })
            .execute();
            subtransaction.end();
            value
        }
    })
}
