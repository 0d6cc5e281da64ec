//! Parameter defaults: a function's `DEFAULT nextval(...)` reaches the plan
//! after our planner hook, since PostgreSQL fills in the arguments a call
//! leaves out inside `standard_planner` (expand_function_arguments). Here
//! the catalog side: which defaults a call leaves to the planner, the call
//! with them filled in as PostgreSQL would fill them, and the defaults of
//! every function of a name (for a raw tree, not yet resolved). Whether a
//! default calls a sequence function is [`super::rewrite`]'s walk.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Node, NodeTag};

/// pg_proc's syscaches, as the syscache functions take them (an enum of
/// another integer type before PostgreSQL 19).
#[allow(clippy::unnecessary_cast)]
const PROCOID: i32 = pg_sys::SysCacheIdentifier::PROCOID as i32;
#[allow(clippy::unnecessary_cast)]
const PROCNAMEARGSNSP: i32 = pg_sys::SysCacheIdentifier::PROCNAMEARGSNSP as i32;

/// The default expressions (a List) of the function `call` calls, if the
/// call leaves any argument to its default; None for most calls, after one
/// syscache lookup.
///
/// # Safety
/// `call` is a FuncExpr; in a transaction.
pub unsafe fn left_to_the_planner(call: *mut pg_sys::FuncExpr) -> Option<*mut Node> {
    // SAFETY: the caller's contract; a syscache reference released below.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(PROCOID, (*call).funcid.into());
        if tuple.is_null() {
            return None;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_proc>(tuple);
        let given = if (*call).args.is_null() { 0 } else { (*(*call).args).length };
        let defaults = ((*form).pronargdefaults > 0 && given < i32::from((*form).pronargs))
            .then(|| stored_defaults(tuple))
            .flatten();
        pg_sys::ReleaseSysCache(tuple);
        defaults
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

/// Calls `check` on the defaults of every function named `name` (in any
/// schema) that has some, until it answers true.
///
/// # Safety
/// In a transaction.
pub unsafe fn any_named(name: &CStr, check: &dyn Fn(*mut Node) -> bool) -> bool {
    // SAFETY: the caller's contract; a syscache list released below.
    unsafe {
        let list =
            pg_sys::SearchSysCacheList(PROCNAMEARGSNSP, 1, pg_sys::Datum::from(name.as_ptr()), 0.into(), 0.into());
        let mut found = false;
        for i in 0..(*list).n_members as usize {
            let tuple = &raw mut (**(*list).members.as_mut_ptr().add(i)).tuple;
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_proc>(tuple);
            if (*form).pronargdefaults > 0 && stored_defaults(tuple).is_some_and(check) {
                found = true;
                break;
            }
        }
        pg_sys::ReleaseCatCacheList(list);
        found
    }
}

/// The analysed default expressions a pg_proc row stores.
///
/// # Safety
/// `tuple` is a pg_proc syscache tuple.
unsafe fn stored_defaults(tuple: pg_sys::HeapTuple) -> Option<*mut Node> {
    // SAFETY: the caller's contract; the text is the planner's own node dump.
    unsafe {
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
