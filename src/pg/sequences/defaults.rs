//! Parameter defaults: a function's `DEFAULT nextval(...)` reaches the plan
//! after our planner hook, since PostgreSQL fills in the arguments a call
//! leaves out inside `standard_planner` (expand_function_arguments). Here
//! the catalog side: which defaults a call leaves to the planner (exactly
//! those PostgreSQL fills in), the call with them filled in as PostgreSQL
//! would fill them, and the defaults of every function of a name (for a raw
//! tree, not yet resolved). Whether a default calls a sequence function is
//! [`super::rewrite`]'s walk, passed in as `calls`.
//!
//! Every planned statement asks this of each function call it makes, so
//! the answer "no default of this function calls a sequence function" is
//! kept per function (most have no defaults at all) until any function
//! changes.

use std::collections::HashMap;
use std::ffi::CStr;

use pgrx::pg_sys::{self, Node, NodeTag, Oid};
use pgrx::prelude::*;

/// pg_proc's syscaches, as the syscache functions take them (an enum of
/// another integer type before PostgreSQL 19).
#[allow(clippy::unnecessary_cast)]
const PROCOID: i32 = pg_sys::SysCacheIdentifier::PROCOID as i32;
#[allow(clippy::unnecessary_cast)]
const PROCNAMEARGSNSP: i32 = pg_sys::SysCacheIdentifier::PROCNAMEARGSNSP as i32;

// SAFETY (for the statics): a backend runs one thread; the callbacks run in it.
/// Per function, whether any of its parameter defaults calls a sequence
/// function; dropped when any function changes.
static mut CALLING: Option<HashMap<Oid, bool>> = None;
/// The functions whose defaults are being looked into, outermost first: a
/// default that calls one of them again ends the walk there (its defaults
/// are being looked into already). Emptied by an abort, which an ERROR in
/// the walk leaves it to.
static mut LOOKING: Vec<Oid> = Vec::new();
/// Counts the changes of functions: an answer worked out across one (its
/// catalog lookups take in invalidations) is not kept.
static mut CHANGES: u64 = 0;

pub fn init() {
    // SAFETY: callbacks registered from _PG_init, in the postmaster.
    unsafe {
        pg_sys::CacheRegisterSyscacheCallback(PROCOID, Some(function_changed), pg_sys::Datum::from(0));
        pg_sys::RegisterXactCallback(Some(at_abort), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(at_subtransaction_abort), std::ptr::null_mut());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn function_changed(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    // SAFETY: see the statics.
    unsafe {
        CALLING = None;
        CHANGES += 1;
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_abort(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    if matches!(event, pg_sys::XactEvent::XACT_EVENT_ABORT | pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT) {
        // SAFETY: see the statics.
        unsafe { (*std::ptr::addr_of_mut!(LOOKING)).clear() };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_subtransaction_abort(
    event: pg_sys::SubXactEvent::Type,
    _mine: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        // SAFETY: see the statics.
        unsafe { (*std::ptr::addr_of_mut!(LOOKING)).clear() };
    }
}

/// The default expressions (a List) that `call` leaves to the planner, if
/// any of the function's defaults calls a sequence function (as `calls`
/// finds in them: always the same walk, its answers are kept per
/// function); None for most calls, after one hash lookup.
///
/// # Safety
/// `call` is a FuncExpr; in a transaction.
pub unsafe fn left_to_the_planner(call: *mut pg_sys::FuncExpr, calls: &dyn Fn(*mut Node) -> bool) -> Option<*mut Node> {
    // SAFETY: the caller's contract; see CALLING (no reference into it is
    // held across a catalog lookup, which may run function_changed).
    unsafe {
        let function = (*call).funcid;
        let known = known(function);
        if known == Some(false) {
            return None;
        }
        let tuple = pg_sys::SearchSysCache1(PROCOID, function.into());
        if tuple.is_null() {
            return None;
        }
        let all = stored_defaults(tuple);
        if known.is_none() && !work_out(function, all, calls) {
            pg_sys::ReleaseSysCache(tuple);
            return None;
        }
        let left = all.and_then(|defaults| left_out(call, tuple, defaults));
        pg_sys::ReleaseSysCache(tuple);
        left
    }
}

/// Whether `function`'s stored `defaults` call a sequence function, as
/// `calls` finds. Kept for the next time when true, or when found by the
/// outermost walk (an inner one that met a function being looked into
/// answers for its own part only), and no function changed meanwhile.
fn work_out(function: Oid, defaults: Option<*mut Node>, calls: &dyn Fn(*mut Node) -> bool) -> bool {
    // SAFETY: see the statics; no reference into LOOKING is held across
    // the walk, which pushes and pops it.
    let (outermost, changes) = unsafe {
        let looking = &mut *std::ptr::addr_of_mut!(LOOKING);
        if looking.contains(&function) {
            return false;
        }
        looking.push(function);
        (looking.len() == 1, CHANGES)
    };
    let calling = defaults.is_some_and(calls);
    // SAFETY: as above.
    let unchanged = unsafe {
        (*std::ptr::addr_of_mut!(LOOKING)).pop();
        CHANGES == changes
    };
    if (calling || outermost) && unchanged {
        remember(function, calling);
    }
    calling
}

/// What [`work_out`] found for `function`, if it is kept.
fn known(function: Oid) -> Option<bool> {
    // SAFETY: see CALLING.
    unsafe { (*std::ptr::addr_of!(CALLING)).as_ref().and_then(|m| m.get(&function).copied()) }
}

fn remember(function: Oid, calling: bool) {
    // SAFETY: see CALLING.
    unsafe { (*std::ptr::addr_of_mut!(CALLING)).get_or_insert_with(HashMap::new).insert(function, calling) };
}

/// Of a function's `defaults` (for its last parameters), those for the
/// parameters `call` gives no argument to, by position or by name, as
/// PostgreSQL fills them in.
///
/// # Safety
/// `call` is a FuncExpr, `tuple` its function's pg_proc row, `defaults`
/// the List of its stored defaults.
unsafe fn left_out(call: *mut pg_sys::FuncExpr, tuple: pg_sys::HeapTuple, defaults: *mut Node) -> Option<*mut Node> {
    // SAFETY: the caller's contract; the tags say which struct a node is.
    unsafe {
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_proc>(tuple);
        let parameters = usize::try_from((*form).pronargs).unwrap_or(0);
        let defaults = defaults.cast::<pg_sys::List>();
        let count = (*defaults).length as usize;
        let first_default = parameters.checked_sub(count)?;
        let mut given = vec![false; parameters];
        let args = (*call).args;
        for i in 0..if args.is_null() { 0 } else { (*args).length as usize } {
            let arg = (*(*args).elements.add(i)).ptr_value.cast::<Node>();
            let position = if (*arg).type_ == NodeTag::T_NamedArgExpr {
                usize::try_from((*arg.cast::<pg_sys::NamedArgExpr>()).argnumber).unwrap_or(usize::MAX)
            } else {
                i
            };
            if let Some(slot) = given.get_mut(position) {
                *slot = true;
            }
        }
        let mut left: *mut pg_sys::List = std::ptr::null_mut();
        for j in 0..count {
            if !given[first_default + j] {
                left = pg_sys::lappend(left, (*(*defaults).elements.add(j)).ptr_value);
            }
        }
        (!left.is_null()).then_some(left.cast())
    }
}

/// `call`'s arguments with the left-out ones filled in from the function's
/// defaults (and named ones put in order), as the planner would fill them.
///
/// # Safety
/// `call` is a FuncExpr the caller owns; in a transaction.
pub unsafe fn fill_in(call: *mut pg_sys::FuncExpr) {
    // SAFETY: the caller's contract; a syscache reference released below.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(PROCOID, (*call).funcid.into());
        if tuple.is_null() {
            return;
        }
        (*call).args = pg_sys::expand_function_arguments((*call).args, false, (*call).funcresulttype, tuple);
        pg_sys::ReleaseSysCache(tuple);
    }
}

/// Whether any function named `name` (in any schema) has parameter
/// defaults in which `calls` finds a sequence call (kept per function, as
/// for [`left_to_the_planner`]: `calls` is always the same walk).
///
/// # Safety
/// In a transaction.
pub unsafe fn any_named(name: &CStr, calls: &dyn Fn(*mut Node) -> bool) -> bool {
    // SAFETY: the caller's contract; a syscache list released below (or by
    // the resource owner on an ERROR).
    unsafe {
        let list = pg_sys::SearchSysCacheList(
            PROCNAMEARGSNSP,
            1,
            pg_sys::Datum::from(name.as_ptr().cast_mut()),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        );
        let mut found = false;
        for i in 0..(*list).n_members as usize {
            let tuple = &raw mut (**(*list).members.as_mut_ptr().add(i)).tuple;
            let function = (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_proc>(tuple)).oid;
            if known(function).unwrap_or_else(|| work_out(function, stored_defaults(tuple), calls)) {
                found = true;
                break;
            }
        }
        pg_sys::ReleaseCatCacheList(list);
        found
    }
}

/// The analysed default expressions a pg_proc row stores, a List.
///
/// # Safety
/// `tuple` is a pg_proc syscache tuple.
unsafe fn stored_defaults(tuple: pg_sys::HeapTuple) -> Option<*mut Node> {
    // SAFETY: the caller's contract; the text is the planner's own node dump.
    unsafe {
        if (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_proc>(tuple)).pronargdefaults == 0 {
            return None;
        }
        let mut null = true;
        let datum = pg_sys::SysCacheGetAttr(PROCOID, tuple, pg_sys::Anum_pg_proc_proargdefaults as _, &mut null);
        if null {
            return None;
        }
        let text = pg_sys::text_to_cstring(datum.cast_mut_ptr());
        let node = pg_sys::stringToNode(text).cast::<Node>();
        (!node.is_null() && (*node).type_ == NodeTag::T_List).then_some(node)
    }
}
