//! Which sequences of this database are registered, as this backend knows
//! it: a cache of `snowflake_sequence_registry` (sql/snowflake_sequences.sql)
//! with each sequence's increment, and the OIDs of the functions the planner
//! hook puts in place of native calls.
//!
//! The cache is read on first use and dropped by a relcache invalidation of
//! the registry table (its statement trigger sends one on every change, a
//! restore's COPY included), of a registered sequence (ALTER SEQUENCE), or of
//! everything. Where the extension is not installed in this database any
//! relcache invalidation drops it, so that a CREATE EXTENSION is seen.
//!
//! It is read through SPI as the bootstrap superuser, as ri_triggers.c reads
//! a referenced table: a role that may not see the extension's schema still
//! gets its sequences' IDs.

use std::collections::HashMap;

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;

use crate::snowflake::block::Convention;

/// A registered sequence.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub convention: Convention,
    pub increment: i64,
}

/// The functions registered sequences are served by, each in place of a
/// native one (the planner hook swaps them in, [`super::rewrite`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Functions {
    /// `snowflake_sequence_nextval(regclass)`, checked like nextval.
    pub nextval: Oid,
    /// `snowflake_sequence_nextval_identity(regclass)`: an identity column's
    /// default, which needs no privilege on the sequence.
    pub nextval_identity: Oid,
    pub currval: Oid,
    pub lastval: Oid,
    /// `setval(regclass, bigint)` and `setval(regclass, bigint, boolean)`.
    pub setval: Oid,
    pub setval3: Oid,
}

impl Functions {
    fn complete(&self) -> bool {
        [self.nextval, self.nextval_identity, self.currval, self.lastval, self.setval, self.setval3]
            .iter()
            .all(|f| *f != pg_sys::InvalidOid)
    }
}

struct Registry {
    /// `None` where the extension (at a version with sequence mode) is not installed.
    installed: Option<(Oid, Functions)>,
    /// The extension's schema.
    schema: String,
    entries: HashMap<Oid, Entry>,
    /// The registered sequences' names, for messages that name them.
    names: std::collections::HashSet<String>,
}

// SAFETY (for the statics below): a backend runs one thread; the relcache
// callback runs in it too, between statements or at CommandCounterIncrement.
static mut CACHE: Option<Registry> = None;
/// How many times the cache was read: what was found with an older one is stale.
static mut GENERATION: u64 = 0;
/// Relcache invalidations seen: one that arrives while the cache is read
/// may concern what was read, and the result is then used once, not kept.
static mut INVALIDATIONS: u64 = 0;
/// Set while the cache is read: the reading queries are planned too, and
/// must not ask for it again.
static mut LOADING: bool = false;

pub fn init() {
    // SAFETY: registering a callback from _PG_init, in the postmaster, is
    // what the relcache API is for; every backend inherits it.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(invalidate), pg_sys::Datum::from(0)) };
}

#[pg_guard]
unsafe extern "C-unwind" fn invalidate(_arg: pg_sys::Datum, relid: Oid) {
    // SAFETY: see the statics.
    unsafe { INVALIDATIONS += 1 };
    // SAFETY: see the statics.
    let cache = unsafe { &mut *std::ptr::addr_of_mut!(CACHE) };
    let drop_it = match cache {
        None => false,
        Some(Registry { installed: None, .. }) => true,
        Some(r) => {
            relid == pg_sys::InvalidOid
                || r.installed.is_some_and(|(table, _)| table == relid)
                || r.entries.contains_key(&relid)
        }
    };
    if drop_it {
        *cache = None;
    }
}

/// Whether any sequence of this database is registered (false while the
/// cache is being read).
pub fn any() -> bool {
    with(|r| !r.entries.is_empty()).unwrap_or(false)
}

/// Whether the extension, at a version with sequence mode, is installed in
/// this database (false while the cache is being read).
pub fn installed() -> bool {
    with(|r| r.installed.is_some()).unwrap_or(false)
}

/// The registration of `seq`, if any, and the functions that serve it.
pub fn lookup(seq: Oid) -> Option<(Entry, Functions)> {
    with(|r| Some((*r.entries.get(&seq)?, r.installed?.1))).flatten()
}

/// The cache's generation when it is loaded and holds a registered
/// sequence; never reads it (for hooks that run where no query may run).
pub fn loaded_with_entries() -> Option<u64> {
    // SAFETY: see the statics.
    unsafe {
        let loaded = (*std::ptr::addr_of!(CACHE)).as_ref()?;
        (!LOADING && !loaded.entries.is_empty()).then_some(GENERATION)
    }
}

/// The extension's schema, where any sequence is registered.
pub fn schema() -> Option<String> {
    with(|r| (!r.entries.is_empty() && r.installed.is_some()).then(|| r.schema.clone())).flatten()
}

/// Every registered sequence of this database.
pub fn registered() -> Vec<Oid> {
    with(|r| r.entries.keys().copied().collect()).unwrap_or_default()
}

/// Whether a registered sequence has the name `name` (unqualified, as
/// PostgreSQL's messages name it); `None` when this backend has not read the
/// registry. Never reads it (for the log hook).
pub fn registered_name(name: &str) -> Option<bool> {
    // SAFETY: see the statics.
    unsafe {
        let loaded = (*std::ptr::addr_of!(CACHE)).as_ref()?;
        (!LOADING).then(|| loaded.names.contains(name))
    }
}

/// The functions that serve registered sequences, where the extension is installed.
pub fn functions() -> Option<Functions> {
    with(|r| r.installed.map(|(_, f)| f)).flatten()
}

fn with<R>(f: impl FnOnce(&Registry) -> R) -> Option<R> {
    // SAFETY: see the statics.
    unsafe {
        if LOADING {
            return None;
        }
        if (*std::ptr::addr_of!(CACHE)).is_none() {
            LOADING = true;
            let before = INVALIDATIONS;
            let loaded = std::panic::catch_unwind(load);
            LOADING = false;
            let loaded = loaded.unwrap_or_else(|e| std::panic::resume_unwind(e));
            GENERATION += 1;
            // A transaction of REPEATABLE READ or SERIALIZABLE that has
            // written reads through SPI with its own snapshot, which may
            // predate a registration: what it read is used, never kept.
            let xact_snapshot = pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32
                && pg_sys::GetCurrentTransactionIdIfAny() != pg_sys::InvalidTransactionId;
            if INVALIDATIONS != before || xact_snapshot {
                return Some(f(&loaded));
            }
            CACHE = Some(loaded);
        }
        (*std::ptr::addr_of!(CACHE)).as_ref().map(f)
    }
}

fn empty() -> Registry {
    Registry { installed: None, schema: String::new(), entries: HashMap::new(), names: Default::default() }
}

fn load() -> Registry {
    // A parallel worker may take no new snapshot; it runs no nextval either
    // (sequence functions are PARALLEL UNSAFE), so it needs no registry.
    // SAFETY: a flag of this backend's transaction state.
    if unsafe { pg_sys::IsInParallelMode() } {
        return empty();
    }
    // Where the extension is not installed, a catalog lookup says so, with
    // no query (this runs again after any relcache invalidation there).
    // SAFETY: an index scan of pg_extension.
    if unsafe { pg_sys::get_extension_oid(c"snowflake_id".as_ptr(), true) } == pg_sys::InvalidOid {
        return empty();
    }
    // The reads run as the bootstrap superuser (a role that may not see the
    // extension's schema still gets its sequences' IDs), and see the latest
    // committed registry, not the statement's snapshot.
    // SAFETY: a snapshot of our own, popped below (or by the abort on an ERROR).
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
    let registry = super::privileged::run(read);
    // SAFETY: as above.
    unsafe { pg_sys::PopActiveSnapshot() };
    registry
}

fn read() -> Registry {
    Spi::connect(|client| {
        let mut registry = empty();
        let found = client
            .select(
                "SELECT n.nspname::text, c.oid \
                 FROM pg_catalog.pg_extension e \
                 JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace \
                 JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = 'snowflake_sequence_registry' \
                 WHERE e.extname = 'snowflake_id'",
                None,
                &[],
            )
            .expect("the catalogs can be read");
        let Some(row) = found.into_iter().next() else { return registry };
        let (Ok(Some(schema)), Ok(Some(table))) = (row.get::<String>(1), row.get::<Oid>(2)) else {
            return registry;
        };
        let mut functions = Functions::default();
        let procs = client
            .select(
                // Members of the extension only: a function of the same
                // name another role made in its schema is never called.
                "SELECT p.proname::text, p.pronargs::int, p.oid FROM pg_catalog.pg_proc p \
                 JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass \
                      AND d.objid = p.oid AND d.deptype = 'e' \
                 JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id' \
                 WHERE p.pronamespace = (SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid = $1) \
                   AND p.proname LIKE 'snowflake\\_sequence\\_%'",
                None,
                &[table.into()],
            )
            .expect("the catalogs can be read");
        for p in procs {
            let (Ok(Some(name)), Ok(Some(args)), Ok(Some(oid))) =
                (p.get::<String>(1), p.get::<i32>(2), p.get::<Oid>(3))
            else {
                continue;
            };
            let slot = match (name.as_str(), args) {
                ("snowflake_sequence_nextval", 1) => &mut functions.nextval,
                ("snowflake_sequence_nextval_identity", 1) => &mut functions.nextval_identity,
                ("snowflake_sequence_currval", 1) => &mut functions.currval,
                ("snowflake_sequence_lastval", 0) => &mut functions.lastval,
                ("snowflake_sequence_setval", 2) => &mut functions.setval,
                ("snowflake_sequence_setval", 3) => &mut functions.setval3,
                _ => continue,
            };
            *slot = oid;
        }
        if !functions.complete() {
            return registry;
        }
        registry.installed = Some((table, functions));
        registry.schema = schema.clone();
        let rows = client
            .select(
                &format!(
                    "SELECT r.seq::pg_catalog.oid, r.block_mode, s.seqincrement, c.relname::text \
                     FROM {}.snowflake_sequence_registry r \
                     JOIN pg_catalog.pg_sequence s ON s.seqrelid = r.seq \
                     JOIN pg_catalog.pg_class c ON c.oid = r.seq",
                    spi::quote_identifier(&schema)
                ),
                None,
                &[],
            )
            .expect("the registry can be read");
        for row in rows {
            let (Ok(Some(seq)), Ok(Some(mode)), Ok(Some(increment))) =
                (row.get::<Oid>(1), row.get::<String>(2), row.get::<i64>(3))
            else {
                continue;
            };
            let convention = Convention::from_name(&mode).unwrap_or(Convention::Either);
            registry.entries.insert(seq, Entry { convention, increment });
            if let Ok(Some(name)) = row.get::<String>(4) {
                registry.names.insert(name);
            }
        }
        registry
    })
}

/// Drops this backend's cache and tells every backend to drop theirs at
/// the end of this transaction, and to plan everything again: a plan made
/// before may hold a native `lastval()` or a `nextval($1)` that names no
/// relation, and registrations are rare.
pub fn changed(table: Oid) {
    // SAFETY: see the statics; the invalidations are queued for this
    // transaction's end (and this backend's next CommandCounterIncrement).
    unsafe {
        CACHE = None;
        pg_sys::CacheInvalidateRelcacheByRelid(table);
        pg_sys::CacheInvalidateRelcacheAll();
    }
}
