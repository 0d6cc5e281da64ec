//! Which sequences of this database are registered, as this backend knows
//! it: a cache of `snowflake_sequence_registry` (sql/snowflake_sequences.sql),
//! with each sequence's increment and fence, the functions that serve them,
//! and whether a registration is in progress ([`super::in_progress`]).
//!
//! # How it is read
//! As PostgreSQL reads its catalogs: the extension, its schema and its
//! functions through the catalog caches, and the registry table by a heap
//! scan under a snapshot taken for the read (what has committed by then,
//! and this transaction's own writes), never the transaction's snapshot, so
//! REPEATABLE READ and SERIALIZABLE read what READ COMMITTED reads. No
//! query is planned, no SPI, no role switch. It is read on first need only:
//! a backend that plans no sequence function and serves no registered
//! sequence never reads it, so a new connection pays nothing.
//!
//! # When it is dropped
//! By a relcache invalidation of everything, of the registry table (the
//! registration functions and the table's triggers queue one with every
//! change, whatever `session_replication_role` says), or of a registered
//! sequence (ALTER SEQUENCE, GRANT); where the extension is not installed,
//! by any relcache invalidation, so that a CREATE EXTENSION is seen. A cache
//! that served registered sequences is read again by the next planned
//! statement ([`reload_if_wanted`]), so that the fence's hint, which may
//! read nothing, finds it.
//!
//! # Deciding with it
//! A backend takes in invalidations at transaction start and whenever it
//! takes a lock it did not hold. So a decision that must see a registration
//! or unregistration that committed a moment ago takes the lock the
//! registration takes first, then asks: a served nextval locks its sequence
//! ([`super::nextval`]), the utility hook the relation its statement
//! changes ([`super::utility`]). Plans need no lock: the registration
//! protocol ([`super::in_progress`]) waits for every transaction that could
//! run a plan made without it.

use std::collections::HashMap;
use std::ffi::CStr;

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;

use super::{in_progress, names};
use crate::snowflake::block::Convention;

/// A registered sequence.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub convention: Convention,
    pub increment: i64,
    /// Its MAXVALUE while registered, which native nextval has reached.
    pub fence: i64,
    /// The MAXVALUE and CYCLE the fence replaced: they come back on
    /// unregistering, and a copy of the sequence (CREATE TABLE ... LIKE)
    /// gets them.
    pub native_max: i64,
    pub native_cycle: bool,
}

/// The functions registered sequences are served by, each in place of a
/// native one (the planner hook swaps them in, [`super::rewrite`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Functions {
    /// `snowflake_sequence_nextval(regclass)`, checked like nextval.
    pub nextval: Oid,
    /// `snowflake_sequence_nextval_identity(regclass)`: an identity column's
    /// default, checked as the column's INSERT or UPDATE right.
    pub nextval_identity: Oid,
    pub currval: Oid,
    pub lastval: Oid,
    /// `setval(regclass, bigint)` and `setval(regclass, bigint, boolean)`.
    pub setval: Oid,
    pub setval3: Oid,
}

/// The extension in this database, at a version with sequence mode.
#[derive(Clone, Copy, Debug)]
pub struct Installed {
    pub extension: Oid,
    pub schema: Oid,
    /// `snowflake_sequence_registry`.
    pub table: Oid,
    pub functions: Functions,
}

/// What the fence's hint knows of a sequence named in an error.
pub enum Fence {
    /// The registry is not read here (a backend that plans nothing).
    Unknown,
    /// The extension is not installed in this database.
    NotInstalled,
    /// A registered sequence of that name has that fence: its qualified name.
    Registered(String),
    /// No registered sequence has that name and fence.
    NotRegistered,
}

struct Registry {
    /// `None` where the extension (at a version with sequence mode) is not installed.
    installed: Option<Installed>,
    entries: HashMap<Oid, Entry>,
    /// Each registered sequence's name, fence and qualified, quoted name,
    /// for the fence's hint (PostgreSQL's message names a sequence by its
    /// name and value only).
    fences: Vec<(String, i64, String)>,
    /// Another transaction is registering sequences in this database.
    in_progress: bool,
}

impl Registry {
    fn route_all(&self) -> bool {
        self.installed.is_some() && (!self.entries.is_empty() || self.in_progress)
    }
}

// SAFETY (for the statics below): a backend runs one thread; the relcache
// callback runs in it too, when it takes in invalidations.
static mut CACHE: Option<Registry> = None;
/// How many times the cache was read: what was found with an older one is stale.
static mut GENERATION: u64 = 0;
/// Relcache invalidations seen: one that arrives while the cache is read
/// may concern what was read, and the result is then used once, not kept.
static mut INVALIDATIONS: u64 = 0;
/// Set while the cache is read: what it reads takes locks, which may run
/// the callbacks, and must not ask for it again.
static mut LOADING: bool = false;
/// The cache was dropped while it served registered sequences: the next
/// planned statement reads it again.
static mut WANTED: bool = false;
/// The relations whose relcache entries were invalidated in this
/// transaction (a rewrite of a sequence's storage among the causes), for
/// the check at commit that registered sequences' fences hold
/// ([`super::fence`]); whether a relation is a registered sequence is asked
/// then, where catalogs may be read.
static mut TOUCHED: Option<std::collections::HashSet<Oid>> = None;
/// Those of TOUCHED invalidated again since [`take_newly_touched`] last
/// took them.
static mut NEWLY_TOUCHED: Option<std::collections::HashSet<Oid>> = None;

pub fn init() {
    // SAFETY: registering a callback from _PG_init, in the postmaster, is
    // what the relcache API is for; every backend inherits it.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(invalidate), pg_sys::Datum::from(0)) };
}

#[pg_guard]
unsafe extern "C-unwind" fn invalidate(_arg: pg_sys::Datum, relid: Oid) {
    // SAFETY: see the statics.
    unsafe {
        INVALIDATIONS += 1;
        if relid != pg_sys::InvalidOid && pg_sys::IsTransactionState() {
            (*std::ptr::addr_of_mut!(TOUCHED)).get_or_insert_with(Default::default).insert(relid);
            (*std::ptr::addr_of_mut!(NEWLY_TOUCHED)).get_or_insert_with(Default::default).insert(relid);
        }
        let cache = &mut *std::ptr::addr_of_mut!(CACHE);
        let drop_it = match cache {
            None => false,
            Some(Registry { installed: None, .. }) => true,
            Some(r) => {
                relid == pg_sys::InvalidOid
                    || r.installed.is_some_and(|i| i.table == relid)
                    || r.entries.contains_key(&relid)
            }
        };
        if drop_it {
            WANTED |= cache.as_ref().is_some_and(Registry::route_all);
            *cache = None;
        }
    }
}

/// Whether calls of sequence functions are served by ours in this
/// database: some sequence is registered, or a registration is in
/// progress. Then every nextval, currval, setval and lastval goes through
/// our functions, which serve a registered sequence and call the native
/// function for any other (so `lastval()` sees every call).
pub fn route_all() -> bool {
    with(Registry::route_all).unwrap_or(false)
}

/// The registration of `seq`, if any.
pub fn lookup(seq: Oid) -> Option<Entry> {
    with(|r| r.entries.get(&seq).copied()).flatten()
}

/// How many sequences of this database are registered.
pub fn registered() -> usize {
    with(|r| r.entries.len()).unwrap_or(0)
}

/// The extension in this database, if installed with sequence mode.
pub fn installed() -> Option<Installed> {
    with(|r| r.installed).flatten()
}

/// The functions that serve registered sequences, where the extension is installed.
pub fn functions() -> Option<Functions> {
    installed().map(|i| i.functions)
}

/// Whether the registered sequences are served, as the cache says, and its
/// generation; `None` when it is not read. Never reads it (for hooks that
/// run where no catalog may be read).
pub fn loaded() -> Option<(bool, u64)> {
    // SAFETY: see the statics.
    unsafe {
        let loaded = (*std::ptr::addr_of!(CACHE)).as_ref()?;
        (!LOADING).then(|| (loaded.route_all(), GENERATION))
    }
}

/// The relations invalidated since this was last asked (they stay in
/// TOUCHED for [`take_touched`]).
pub fn take_newly_touched() -> Vec<Oid> {
    // SAFETY: see the statics.
    unsafe { (*std::ptr::addr_of_mut!(NEWLY_TOUCHED)).take().map(|t| t.into_iter().collect()).unwrap_or_default() }
}

/// The relations whose relcache entries were invalidated since this was
/// last asked (see TOUCHED).
pub fn take_touched() -> Vec<Oid> {
    // SAFETY: see the statics.
    unsafe {
        *std::ptr::addr_of_mut!(NEWLY_TOUCHED) = None;
        (*std::ptr::addr_of_mut!(TOUCHED)).take().map(|t| t.into_iter().collect()).unwrap_or_default()
    }
}

/// Reads the registry again if it was dropped while it served registered
/// sequences (for the planner hook, where catalogs may be read).
pub fn reload_if_wanted() {
    // SAFETY: see the statics.
    if unsafe { WANTED } {
        with(|_| ());
    }
}

/// What the registry knows of the sequence named `name` in PostgreSQL's
/// "reached maximum value" error, whose value is `value`. Never reads it
/// (for the log hook).
pub fn fence(name: &str, value: i64) -> Fence {
    // SAFETY: see the statics.
    unsafe {
        let Some(loaded) = (*std::ptr::addr_of!(CACHE)).as_ref().filter(|_| !LOADING) else {
            return Fence::Unknown;
        };
        if loaded.installed.is_none() {
            return Fence::NotInstalled;
        }
        match loaded.fences.iter().find(|(n, v, _)| n == name && *v == value) {
            Some((_, _, qualified)) => Fence::Registered(qualified.clone()),
            None => Fence::NotRegistered,
        }
    }
}

fn with<R>(f: impl FnOnce(&Registry) -> R) -> Option<R> {
    // SAFETY: see the statics; a flag of this backend's transaction state.
    unsafe {
        if LOADING || !pg_sys::IsTransactionState() {
            return None;
        }
        if (*std::ptr::addr_of!(CACHE)).is_none() {
            LOADING = true;
            let before = INVALIDATIONS;
            let loaded = std::panic::catch_unwind(load);
            LOADING = false;
            let loaded = loaded.unwrap_or_else(|e| std::panic::resume_unwind(e));
            GENERATION += 1;
            WANTED = false;
            // A parallel worker's empty registry is no answer to keep.
            if INVALIDATIONS != before || pg_sys::IsInParallelMode() {
                return Some(f(&loaded));
            }
            CACHE = Some(loaded);
        }
        (*std::ptr::addr_of!(CACHE)).as_ref().map(f)
    }
}

fn empty() -> Registry {
    Registry { installed: None, entries: HashMap::new(), fences: Vec::new(), in_progress: false }
}

fn load() -> Registry {
    // In parallel mode no new snapshot may be taken. A parallel worker runs
    // no nextval (sequence functions are PARALLEL UNSAFE), so it needs no
    // registry; what is read so is used once, never kept ([`with`]).
    // SAFETY: a flag of this backend's transaction state.
    if unsafe { pg_sys::IsInParallelMode() } {
        return empty();
    }
    // SAFETY: catalog lookups.
    let Some(installed) = (unsafe { find_installed() }) else { return empty() };
    let mut registry = empty();
    registry.in_progress = in_progress::seen(installed.extension);
    // SAFETY: the registry table exists (found above); read under a
    // snapshot of our own.
    unsafe { read_entries(installed.table, &mut registry) };
    registry.installed = Some(installed);
    registry
}

/// The extension, where it is installed with sequence mode.
///
/// # Safety
/// In a transaction.
unsafe fn find_installed() -> Option<Installed> {
    // SAFETY: the caller's contract; index scans of pg_extension and
    // syscache lookups.
    unsafe {
        let extension = pg_sys::get_extension_oid(c"snowflake_id".as_ptr(), true);
        if extension == pg_sys::InvalidOid {
            return None;
        }
        let schema = extension_schema(extension)?;
        let table = pg_sys::get_relname_relid(c"snowflake_sequence_registry".as_ptr(), schema);
        if table == pg_sys::InvalidOid {
            return None;
        }
        let schema_name = CStr::from_ptr(pg_sys::get_namespace_name(schema)).to_owned();
        let function = |name: &CStr, args: &[Oid]| -> Option<Oid> {
            let names = pg_sys::lappend(
                pg_sys::lappend(std::ptr::null_mut(), pg_sys::makeString(pg_sys::pstrdup(schema_name.as_ptr())).cast()),
                pg_sys::makeString(pg_sys::pstrdup(name.as_ptr())).cast(),
            );
            let oid = pg_sys::LookupFuncName(names, args.len() as _, args.as_ptr(), true);
            // Members of the extension only: a function of that name and
            // those arguments another role made is never called.
            (oid != pg_sys::InvalidOid && pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, oid) == extension)
                .then_some(oid)
        };
        let regclass = pg_sys::REGCLASSOID;
        let functions = Functions {
            nextval: function(c"snowflake_sequence_nextval", &[regclass])?,
            nextval_identity: function(c"snowflake_sequence_nextval_identity", &[regclass])?,
            currval: function(c"snowflake_sequence_currval", &[regclass])?,
            lastval: function(c"snowflake_sequence_lastval", &[])?,
            setval: function(c"snowflake_sequence_setval", &[regclass, pg_sys::INT8OID])?,
            setval3: function(c"snowflake_sequence_setval", &[regclass, pg_sys::INT8OID, pg_sys::BOOLOID])?,
        };
        Some(Installed { extension, schema, table, functions })
    }
}

/// The schema of extension `extension` (PostgreSQL 15 exports no function
/// for it).
///
/// # Safety
/// In a transaction.
unsafe fn extension_schema(extension: Oid) -> Option<Oid> {
    // SAFETY: the caller's contract.
    unsafe { extension_field(extension, |e| e.extnamespace) }
}

/// The role that owns extension `extension`, if it exists.
pub fn extension_owner(extension: Oid) -> Option<Oid> {
    // SAFETY: the utility hook asks in a live transaction.
    unsafe { extension_field(extension, |e| e.extowner) }
}

/// A field of extension `extension`'s pg_extension row, by an index scan
/// (PostgreSQL 15 and 17 have no syscache for it).
///
/// # Safety
/// In a transaction.
unsafe fn extension_field<T>(extension: Oid, field: impl Fn(&pg_sys::FormData_pg_extension) -> T) -> Option<T> {
    // SAFETY: the caller's contract; a catalog scan opened and closed here.
    unsafe {
        let rel = pg_sys::table_open(pg_sys::ExtensionRelationId, pg_sys::AccessShareLock as _);
        let mut key = pg_sys::ScanKeyData::default();
        pg_sys::ScanKeyInit(
            &mut key,
            pg_sys::Anum_pg_extension_oid as _,
            pg_sys::BTEqualStrategyNumber as _,
            pg_sys::F_OIDEQ.into(),
            pg_sys::Datum::from(extension),
        );
        let scan = pg_sys::systable_beginscan(
            rel,
            pg_sys::Oid::from(pg_sys::ExtensionOidIndexId),
            true,
            std::ptr::null_mut(),
            1,
            &mut key,
        );
        let tuple = pg_sys::systable_getnext(scan);
        let value =
            (!tuple.is_null()).then(|| field(&*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_extension>(tuple)));
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as _);
        value
    }
}

/// Reads the registry table's rows into `registry`: each sequence that
/// still exists, with its sequence's increment and MAXVALUE (the fence).
///
/// # Safety
/// `table` is the registry table; in a transaction, not in parallel mode.
unsafe fn read_entries(table: Oid, registry: &mut Registry) {
    // SAFETY: the caller's contract. The snapshot is registered with the
    // current resource owner, and the scan and relation are closed here (an
    // ERROR in between releases both with the transaction).
    unsafe {
        let column = |name: &CStr| pg_sys::get_attnum(table, name.as_ptr());
        let (seq, mode, native_max, native_cycle) =
            (column(c"seq"), column(c"block_mode"), column(c"native_max"), column(c"native_cycle"));
        let rel = pg_sys::table_open(table, pg_sys::AccessShareLock as _);
        let desc = (*rel).rd_att;
        let width = (*desc).natts as usize;
        let (mut values, mut nulls) = (vec![pg_sys::Datum::from(0); width], vec![true; width]);
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        #[cfg(not(feature = "pg19"))]
        let scan = pg_sys::table_beginscan(rel, snapshot, 0, std::ptr::null_mut());
        // PostgreSQL 19 takes scan options of the caller's too: none.
        #[cfg(feature = "pg19")]
        let scan = pg_sys::table_beginscan(rel, snapshot, 0, std::ptr::null_mut(), pg_sys::ScanOptions::SO_NONE);
        let mut rows = Vec::new();
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            pg_sys::heap_deform_tuple(tuple, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
            let at = |attnum: i16| (values[attnum as usize - 1], nulls[attnum as usize - 1]);
            let (Some(seq), Some(mode), Some(native_max), Some(native_cycle)) = (
                Oid::from_datum(at(seq).0, at(seq).1),
                String::from_datum(at(mode).0, at(mode).1),
                i64::from_datum(at(native_max).0, at(native_max).1),
                bool::from_datum(at(native_cycle).0, at(native_cycle).1),
            ) else {
                continue;
            };
            rows.push((seq, mode, native_max, native_cycle));
        }
        pg_sys::table_endscan(scan);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as _);
        for (seq, mode, native_max, native_cycle) in rows {
            // A row whose sequence is gone (dropped in a way no event
            // trigger reports) or temporary registers nothing.
            let Some((increment, fence)) = sequence_limits(seq) else { continue };
            if pg_sys::get_rel_persistence(seq) == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char {
                continue;
            }
            let convention = Convention::from_name(&mode).unwrap_or(Convention::Either);
            registry.entries.insert(seq, Entry { convention, increment, fence, native_max, native_cycle });
            let name = pg_sys::get_rel_name(seq);
            if !name.is_null() {
                registry.fences.push((
                    CStr::from_ptr(name).to_string_lossy().into_owned(),
                    fence,
                    names::qualified(seq),
                ));
            }
        }
    }
}

/// A sequence's increment and MAXVALUE, from the catalog cache.
fn sequence_limits(seq: Oid) -> Option<(i64, i64)> {
    // SAFETY: a syscache lookup, released here.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::SEQRELID as _, seq.into());
        if tuple.is_null() {
            return None;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_sequence>(tuple);
        let limits = ((*form).seqincrement, (*form).seqmax);
        pg_sys::ReleaseSysCache(tuple);
        Some(limits)
    }
}

/// Drops this backend's cache, and has every backend read the registry
/// again and plan everything again when this transaction commits: a plan
/// made before may call a sequence function natively, and registrations are
/// rare. The registry table's invalidation is queued as any is; the one of
/// every relation is sent by the commit ([`in_progress::replan_at_commit`]):
/// queued, it would be taken in at this backend's next command counter
/// increment, where PostgreSQL's rewrite of a sequence's storage expects the
/// invalidation of that sequence alone, and merged into it, that sequence's
/// relcache entry would keep its old storage.
pub fn changed(table: Oid) {
    // SAFETY: see the statics; the invalidation is queued, not sent.
    unsafe {
        CACHE = None;
        WANTED = true;
        pg_sys::CacheInvalidateRelcacheByRelid(table);
    }
    in_progress::replan_at_commit();
}
