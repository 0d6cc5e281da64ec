//! SQL functions that call sequence functions are not inlined while
//! sequence calls are routed through ours ([`super::registry::route_all`]).
//!
//! The planner inlines a simple `LANGUAGE sql` function (or a `BEGIN ATOMIC`
//! one) inside `standard_planner`, after our planner hook has looked at the
//! query: a `nextval` in its body would reach the plan unseen. PostgreSQL
//! does not inline a function that `needs_fmgr_hook` claims, so this hook
//! claims every SQL function whose body names nextval, currval, setval or
//! lastval, or a function whose parameter defaults call one (which the
//! planner fills in after inlining, see [`super::defaults`]); it then runs
//! as a function, whose statements go through the planner and our hook. The
//! registry is read here only while a query is planned
//! ([`super::rewrite::planning`]): this hook also runs where no catalog may
//! be read (a relcache build), and there asks the cache as it is.

use std::collections::HashMap;

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;

use super::{handed, parameters, registry, rewrite};

static mut PREVIOUS: pg_sys::needs_fmgr_hook_type = None;

/// pg_proc's syscache, as the syscache functions take it (an enum of
/// another integer type before PostgreSQL 19).
#[allow(clippy::unnecessary_cast)]
const PROCOID: i32 = pg_sys::SysCacheIdentifier::PROCOID as i32;

// SAFETY (for the statics): a backend runs one thread.
/// Per function, whether its body names a sequence function; dropped when
/// any function changes.
static mut SEEN: Option<HashMap<Oid, bool>> = None;

pub fn init() {
    // SAFETY: hooks are chained from _PG_init, in the postmaster, once; the
    // syscache callback is registered there too.
    unsafe {
        PREVIOUS = pg_sys::needs_fmgr_hook;
        pg_sys::needs_fmgr_hook = Some(needs_hook);
        pg_sys::CacheRegisterSyscacheCallback(PROCOID, Some(function_changed), pg_sys::Datum::from(0));
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn function_changed(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    // SAFETY: see the statics.
    unsafe { SEEN = None };
}

#[pg_guard]
unsafe extern "C-unwind" fn needs_hook(function: Oid) -> bool {
    // SAFETY: the hook saved in init (see the statics), called as PostgreSQL would.
    if let Some(previous) = unsafe { PREVIOUS } {
        // SAFETY: as above.
        if unsafe { call_previous(previous, function) } {
            return true;
        }
    }
    // What the registry says first: where nothing is routed, nothing is looked up.
    let routed = registry::loaded().map(|(routed, _)| routed || handed::kept());
    if routed == Some(false) || (routed.is_none() && !rewrite::planning()) {
        return false;
    }
    // SAFETY: see the statics; no reference into SEEN is held across the
    // syscache lookup, which may run function_changed.
    let names = unsafe {
        match (*std::ptr::addr_of!(SEEN)).as_ref().and_then(|map| map.get(&function).copied()) {
            Some(known) => known,
            None => {
                let names = names_sequence_function(function);
                (*std::ptr::addr_of_mut!(SEEN)).get_or_insert_with(HashMap::new).insert(function, names);
                names
            }
        }
    };
    names && (routed == Some(true) || handed::kept() || registry::route_all())
}

/// Calls the needs_fmgr_hook another library installed before ours.
///
/// # Safety
/// `previous` is the hook saved in `init`.
#[allow(ffi_unwind_calls)]
unsafe fn call_previous(previous: unsafe extern "C-unwind" fn(Oid) -> bool, function: Oid) -> bool {
    // SAFETY: the caller's contract.
    unsafe { pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(function)) }
}

/// Whether `function` is an SQL function whose body names nextval, currval,
/// setval or lastval, or a function whose parameter defaults call one (as
/// the parser reads its text, or in a BEGIN ATOMIC body's node tree).
///
/// # Safety
/// Called in a backend with catalog access.
unsafe fn names_sequence_function(function: Oid) -> bool {
    // SAFETY: a syscache lookup, released below.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(PROCOID, function.into());
        if tuple.is_null() {
            return false;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_proc>(tuple);
        let mut found = false;
        if (*form).prolang == Oid::from(pg_sys::SQLlanguageId) {
            let mut null = true;
            let body = pg_sys::SysCacheGetAttr(PROCOID, tuple, pg_sys::Anum_pg_proc_prosqlbody as i16, &mut null);
            match (!null).then(|| pg_sys::text_to_cstring(body.cast_mut_ptr())) {
                Some(tree) => {
                    let mut reading = pgrx::PgMemoryContexts::new("snowflake_id: a BEGIN ATOMIC body");
                    found = reading.switch_to(|_| rewrite::calls_sequence_function(pg_sys::stringToNode(tree).cast()));
                }
                None => {
                    let source = pg_sys::SysCacheGetAttr(PROCOID, tuple, pg_sys::Anum_pg_proc_prosrc as i16, &mut null);
                    found = String::from_datum(source, null)
                        .is_some_and(|text| parameters::sql_names_a_sequence_call(&text));
                }
            }
        }
        pg_sys::ReleaseSysCache(tuple);
        found
    }
}
