//! What a registered nextval checks once a transaction, kept: the
//! sequence's lock (held to the transaction's end, as native nextval holds
//! it), its registration, the caller's privilege on it, and whether it is
//! temporary. Kept for one sequence, since calls come in runs.
//!
//! What is kept is dropped when the transaction or the current role
//! changes, when the registry cache is read again (a relcache invalidation
//! of the sequence drops that cache: GRANT, REVOKE and ALTER SEQUENCE send
//! one), and when role memberships or roles change. A REVOKE is seen at the
//! same moment native nextval's per-call check sees it: when this backend
//! takes in the invalidation.

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;

use super::registry::{self, Entry};
use crate::pg::ffi;

struct Recent {
    seq: Oid,
    transaction: pg_sys::LocalTransactionId,
    user: Oid,
    registry: u64,
    roles: u64,
    /// Whether the privilege was checked (an identity default needs none).
    privileged: bool,
    entry: Entry,
    temporary: bool,
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

/// The registration of `seq` and whether it is temporary, when this
/// transaction checked it already (with the privilege, if `privileged`).
pub fn recent(seq: Oid, privileged: bool) -> Option<(Entry, bool)> {
    let registry = registry::loaded_with_entries()?;
    // SAFETY: see the statics.
    unsafe {
        let r = (*std::ptr::addr_of!(RECENT)).as_ref()?;
        (r.seq == seq
            && r.transaction == transaction()
            && r.registry == registry
            && r.roles == ROLES
            && (r.privileged || !privileged)
            && r.user == ffi::current_user())
        .then_some((r.entry, r.temporary))
    }
}

/// Keeps what a call checked: `seq`'s lock is held, it is registered as
/// `entry`, and the privilege was checked if `privileged`.
pub fn keep(seq: Oid, privileged: bool, entry: Entry, temporary: bool) {
    let Some(registry) = registry::loaded_with_entries() else { return };
    // SAFETY: see the statics.
    unsafe {
        RECENT = Some(Recent {
            seq,
            transaction: transaction(),
            user: ffi::current_user(),
            registry,
            roles: ROLES,
            privileged,
            entry,
            temporary,
        });
    }
}

/// This backend's local transaction ID, new for every transaction.
fn transaction() -> pg_sys::LocalTransactionId {
    // SAFETY: MyProc is this backend's own PGPROC, set before any query runs.
    unsafe {
        #[cfg(any(feature = "pg15", feature = "pg16"))]
        {
            (*pg_sys::MyProc).lxid
        }
        #[cfg(not(any(feature = "pg15", feature = "pg16")))]
        {
            (*pg_sys::MyProc).vxid.lxid
        }
    }
}
