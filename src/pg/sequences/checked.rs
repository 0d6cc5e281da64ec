//! What a served nextval checks once a transaction, kept: the sequence's
//! lock (held to the transaction's end, as native nextval holds it), its
//! registration, the caller's privilege on it where this function checks
//! it, and whether it is temporary. Kept for one sequence, since calls come
//! in runs.
//!
//! What is kept is dropped when the transaction or the current role
//! changes, when the registry cache is read again (a relcache invalidation
//! of the sequence drops that cache: GRANT, REVOKE and ALTER SEQUENCE send
//! one), and when role memberships or roles change. A REVOKE is seen at the
//! same moment native nextval's per-call check sees it: when this backend
//! takes in the invalidation. A registration or unregistration cannot
//! change what is kept: both take a lock on the sequence that waits for
//! this transaction's.

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;

use super::in_progress::local_transaction;
use super::registry::{self, Entry};
use crate::pg::ffi;

/// Who asks for a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// `nextval(seq)`: USAGE or UPDATE on the sequence.
    Nextval,
    /// An identity column's default, called directly: INSERT or UPDATE on
    /// its column, or USAGE on the sequence.
    Identity,
    /// An identity column's default in a planned statement: the statement's
    /// own check has run (none of the sequence's, as natively).
    Default,
}

/// How a sequence is served in this transaction.
#[derive(Clone, Copy, Debug)]
pub enum Served {
    /// Registered: snowflake IDs; and whether the sequence is temporary.
    Registered(Entry, bool),
    /// Not registered: native nextval.
    Native,
}

struct Recent {
    seq: Oid,
    caller: Caller,
    transaction: pg_sys::LocalTransactionId,
    user: Oid,
    registry: u64,
    roles: u64,
    served: Served,
}

// SAFETY (for the statics): a backend runs one thread; the syscache
// callback runs in it too, when it takes in invalidations.
static mut RECENT: Option<Recent> = None;
/// Changes of roles and role memberships seen.
static mut ROLES: u64 = 0;

pub fn init() {
    // SAFETY: registering callbacks from _PG_init, in the postmaster, is
    // what the syscache API is for; every backend inherits them.
    unsafe {
        for cache in [pg_sys::SysCacheIdentifier::AUTHMEMROLEMEM, pg_sys::SysCacheIdentifier::AUTHOID] {
            pg_sys::CacheRegisterSyscacheCallback(cache as _, Some(roles_changed), pg_sys::Datum::from(0));
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn roles_changed(_arg: pg_sys::Datum, _cache: std::ffi::c_int, _hash: u32) {
    // SAFETY: see the statics.
    unsafe { ROLES += 1 };
}

/// How `seq` is served, when this transaction checked it already for `caller`.
pub fn recent(seq: Oid, caller: Caller) -> Option<Served> {
    let (_, registry) = registry::loaded()?;
    // SAFETY: see the statics.
    unsafe {
        let r = (*std::ptr::addr_of!(RECENT)).as_ref()?;
        (r.seq == seq
            && r.caller == caller
            && r.transaction == local_transaction()
            && r.registry == registry
            && r.roles == ROLES
            && r.user == ffi::current_user())
        .then_some(r.served)
    }
}

/// Keeps what a call checked: `seq`'s lock is held, it is served as
/// `served`, and `caller`'s privilege was checked where this function checks it.
pub fn keep(seq: Oid, caller: Caller, served: Served) {
    let Some((_, registry)) = registry::loaded() else { return };
    // SAFETY: see the statics.
    unsafe {
        RECENT = Some(Recent {
            seq,
            caller,
            transaction: local_transaction(),
            user: ffi::current_user(),
            registry,
            roles: ROLES,
            served,
        });
    }
}
