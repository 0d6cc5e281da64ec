//! A registration in progress, made known before the fence is set, as
//! CREATE INDEX CONCURRENTLY makes its index known before it builds it.
//!
//! A plan made while a sequence was not registered calls its native nextval,
//! which the fence makes fail. So before a transaction fences a sequence
//! ([`super::fence::set`]) it runs three steps, once per transaction:
//!
//! 1. **Signal**: a share lock on an object lock of the extension's own
//!    (this database, the extension, sub-ID 1), held to the transaction's
//!    end (by the top transaction: a subtransaction's abort keeps it), and
//!    an access share lock on the extension itself, which DROP EXTENSION
//!    waits for ([`exclude`]).
//! 2. **Publish**: a relcache invalidation of every relation of this
//!    database and a reset of every cached plan, sent at once, not at
//!    commit. Each backend takes them in at its next transaction start (or
//!    lock): it drops its cached plans and its registry cache, and reading
//!    the registry again sees the signal
//!    ([`seen`]). While a registration is in progress every call of a
//!    sequence function is planned through our functions, which serve a
//!    sequence natively until its registration has committed (their lock on
//!    the sequence waits for the fence's).
//! 3. **Wait** for every transaction of this database that was running at
//!    step 2: each may hold a plan made without the signal. Other
//!    registrations are not waited for (two would wait for each other); nor
//!    are VACUUM and autovacuum, which call no sequence function.
//!
//! A transaction that started after step 2 took in the invalidation when it
//! started (PostgreSQL sends it before this backend reads the list of
//! running transactions, and a transaction registers itself in that list
//! before it takes in invalidations), so it plans with the signal. After
//! step 3 no plan made without it can run, and the fence fails no statement
//! but those no plan covers (a CHECK constraint, a trigger's WHEN, a default
//! a logical replication apply worker fills), which the fence is for.
//!
//! The wait is a wait on each transaction's virtual transaction ID lock:
//! `pg_stat_activity` shows it as a `Lock` wait on `virtualxid`,
//! `lock_timeout` and `statement_timeout` end it, and a transaction waiting
//! for a lock the registering one holds is a deadlock PostgreSQL detects.
//! A transaction that registered cannot be prepared (PREPARE TRANSACTION):
//! its signal would outlive its session's view of it.

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use crate::pg::error::{self, Raise};

/// The signal's sub-ID beside the extension's OID.
const SUB_ID: u16 = 1;
/// The sub-ID of the lock DROP EXTENSION takes on the extension itself.
const EXTENSION_ITSELF: u16 = 0;

// SAFETY (for the statics): a backend runs one thread; the transaction
// callback runs in it too.
/// The transaction (this backend's local ID) that ran the three steps, and
/// the registry table to invalidate if it aborts.
static mut BEGUN: Option<(pg_sys::LocalTransactionId, Oid)> = None;
/// The transaction (this backend's local ID) whose commit invalidates every
/// relation of this database.
static mut REPLAN: Option<pg_sys::LocalTransactionId> = None;

pub fn init() {
    // SAFETY: registering a callback from _PG_init, in the postmaster; every
    // backend inherits it.
    unsafe { pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut()) };
}

fn tag(extension: Oid) -> pg_sys::LOCKTAG {
    object_tag(extension, SUB_ID)
}

fn object_tag(extension: Oid, sub_id: u16) -> pg_sys::LOCKTAG {
    // SAFETY: MyDatabaseId is this backend's database, set at connection.
    let database = unsafe { pg_sys::MyDatabaseId };
    // As SET_LOCKTAG_OBJECT builds it.
    pg_sys::LOCKTAG {
        locktag_field1: database.to_u32(),
        locktag_field2: pg_sys::ExtensionRelationId.to_u32(),
        locktag_field3: extension.to_u32(),
        locktag_field4: sub_id,
        locktag_type: pg_sys::LockTagType::LOCKTAG_OBJECT as u8,
        locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
    }
}

/// Whether another transaction is registering sequences in this database.
pub fn seen(extension: Oid) -> bool {
    let mut count = 0;
    // SAFETY: a look at the lock table; the result is palloc'd (or static in
    // hot standby), read here only for its count. Our own transaction is
    // never counted.
    unsafe { pg_sys::GetLockConflicts(&tag(extension), pg_sys::ExclusiveLock as _, &mut count) };
    count > 0
}

/// Waits for the registrations in progress in this database to end, and
/// keeps new ones from beginning while the lock is held: the lock DROP
/// EXTENSION takes on the extension (as PostgreSQL takes it, before its
/// ownership check, for the (sub)transaction), taken before the registry
/// is read, which then shows what they left.
pub fn exclude(extension: Oid) {
    // SAFETY: a heavyweight lock in a live transaction; then the
    // invalidations the registrations sent are taken in.
    unsafe {
        pg_sys::LockDatabaseObject(
            pg_sys::ExtensionRelationId,
            extension,
            EXTENSION_ITSELF,
            pg_sys::AccessExclusiveLock as _,
        );
        pg_sys::AcceptInvalidationMessages();
    }
}

/// Takes `mode` on `tag` for the top transaction (released at its end,
/// whichever subtransaction asks); the resource owner is restored whatever
/// happens.
fn lock_for_transaction(tag: &pg_sys::LOCKTAG, mode: u32) {
    // SAFETY: a heavyweight lock in a live transaction, owned by its top
    // resource owner.
    unsafe {
        let saved = pg_sys::CurrentResourceOwner;
        pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
        let acquired = std::panic::catch_unwind(|| pg_sys::LockAcquire(tag, mode as _, false, false));
        pg_sys::CurrentResourceOwner = saved;
        if let Err(e) = acquired {
            std::panic::resume_unwind(e);
        }
    }
}

/// Runs the signal, the publication and the wait, unless this transaction
/// ran them already.
pub fn begin(extension: Oid, registry_table: Oid) {
    let transaction = local_transaction();
    // SAFETY: see the statics.
    if unsafe { BEGUN }.is_some_and(|(t, _)| t == transaction) {
        return;
    }
    let tag = tag(extension);
    lock_for_transaction(&tag, pg_sys::ShareLock);
    // What keeps DROP EXTENSION waiting for this registration to end.
    lock_for_transaction(&object_tag(extension, EXTENSION_ITSELF), pg_sys::AccessShareLock);
    // SAFETY: see the statics; in a live transaction.
    unsafe {
        BEGUN = Some((transaction, registry_table));
        publish(pg_sys::InvalidOid);
    }
    wait_for_older_transactions(&tag);
}

/// Has this transaction's commit invalidate every relation of this
/// database, so that every backend plans again. Sent as the commit becomes
/// visible, before its locks are released, as a queued invalidation would be.
pub fn replan_at_commit() {
    // SAFETY: see the statics.
    unsafe { REPLAN = Some(local_transaction()) };
}

/// Sends a relcache invalidation of `relation` at once, not at commit, to
/// every backend of this database. For every relation (an invalid OID) it
/// also resets every cached plan: a plan that names no relation (`nextval($1)`
/// in a generic plan, or a PL/pgSQL function's dynamic call) is not dropped
/// by any relcache invalidation, so a flush of pg_namespace's catalog cache
/// goes with it, which PostgreSQL answers by dropping every cached plan.
fn publish(relation: Oid) {
    // SAFETY: messages built as PostgreSQL's inval.c builds them, put into
    // the shared invalidation queue; MyDatabaseId is this backend's database.
    unsafe {
        let mut relcache = pg_sys::SharedInvalidationMessage { id: 0 };
        relcache.rc = pg_sys::SharedInvalRelcacheMsg {
            id: pg_sys::SHAREDINVALRELCACHE_ID as _,
            dbId: pg_sys::MyDatabaseId,
            relId: relation,
        };
        let mut plans = pg_sys::SharedInvalidationMessage { id: 0 };
        plans.cat = pg_sys::SharedInvalCatalogMsg {
            id: pg_sys::SHAREDINVALCATALOG_ID as _,
            dbId: pg_sys::MyDatabaseId,
            catId: pg_sys::NamespaceRelationId,
        };
        let messages = [relcache, plans];
        let count = if relation == pg_sys::InvalidOid { 2 } else { 1 };
        pg_sys::SendSharedInvalidMessages(messages.as_ptr(), count);
    }
}

/// Waits for every transaction of this database running now, but those
/// registering (which hold `tag`), VACUUM, prepared transactions (which run
/// no statement any more; one that called nextval holds a lock the fence's
/// waits for) and this one.
fn wait_for_older_transactions(tag: &pg_sys::LOCKTAG) {
    // SAFETY: looks at the proc array and the lock table; both results are
    // palloc'd arrays of `count` entries. Each wait is a heavyweight lock
    // wait: interruptible, timed by lock_timeout, seen by the deadlock detector.
    unsafe {
        let mut running = 0;
        let vxids = pg_sys::GetCurrentVirtualXIDs(
            pg_sys::InvalidTransactionId,
            false,
            false,
            (pg_sys::PROC_IN_VACUUM | pg_sys::PROC_IS_AUTOVACUUM) as _,
            &mut running,
        );
        let mut registering = 0;
        let others = pg_sys::GetLockConflicts(tag, pg_sys::ExclusiveLock as _, &mut registering);
        let others: Vec<(i32, u32)> = (0..registering as usize).map(|i| vxid_parts(&*others.add(i))).collect();
        for i in 0..running as usize {
            let vxid = *vxids.add(i);
            let mut more = false;
            let prepared = pg_sys::TwoPhaseGetXidByVirtualXID(vxid, &mut more) != pg_sys::InvalidTransactionId;
            if !prepared && !others.contains(&vxid_parts(&vxid)) {
                pg_sys::VirtualXactLock(vxid, true);
            }
        }
    }
}

/// A virtual transaction ID's two parts: its backend (its proc number since
/// PostgreSQL 17) and its local transaction.
fn vxid_parts(vxid: &pg_sys::VirtualTransactionId) -> (i32, u32) {
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    {
        (vxid.backendId, vxid.localTransactionId)
    }
    #[cfg(not(any(feature = "pg15", feature = "pg16")))]
    {
        (vxid.procNumber, vxid.localTransactionId)
    }
}

/// This backend's local transaction ID, new for every transaction.
pub fn local_transaction() -> pg_sys::LocalTransactionId {
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

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    // SAFETY: see the statics.
    let (begun, replan) = unsafe { (BEGUN, REPLAN) };
    match event {
        XACT_EVENT_PRE_PREPARE if begun.is_some() => error::new(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "cannot PREPARE a transaction that registered a sequence with snowflake_id",
        )
        .set_hint("Register sequences in a transaction of their own, and commit it.")
        .raise(PgLogLevel::ERROR),
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PREPARE => {
            // A prepared transaction's own invalidations (the registry's,
            // its sequences') go out with COMMIT PREPARED: no registration
            // is among them, and our functions decide at run time.
            if replan.is_some() && event != XACT_EVENT_PREPARE {
                publish(pg_sys::InvalidOid);
            }
            // SAFETY: see the statics.
            unsafe { (BEGUN, REPLAN) = (None, None) };
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            if let Some((_, registry_table)) = begun {
                // The other backends read the registry again and find no
                // registration in progress (this one's lock goes with the abort).
                publish(registry_table);
            }
            // SAFETY: see the statics.
            unsafe { (BEGUN, REPLAN) = (None, None) };
        }
        _ => {}
    }
}
