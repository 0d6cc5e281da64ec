//! Raw expressions that PostgreSQL analyses and evaluates with
//! expression_planner, never the planner: EXECUTE's parameters, and the
//! expressions of a table rewrite ([`super::alter`]). A call of nextval,
//! currval, setval or lastval among them is renamed to our function of the
//! same arguments, which serves a registered sequence and calls the native
//! function for any other.

use std::ffi::{c_void, CStr, CString};

use pgrx::pg_sys::{self, Node, NodeTag};
use pgrx::prelude::*;

use super::registry;

/// Renames the sequence function calls among `params`, in place (the
/// caller owns the tree).
///
/// # Safety
/// `params` is NULL or a List of raw expressions.
pub unsafe fn rewrite(params: *mut pg_sys::List) {
    // SAFETY: the caller's contract.
    unsafe {
        if params.is_null() {
            return;
        }
        for i in 0..(*params).length as usize {
            rename_calls((*(*params).elements.add(i)).ptr_value.cast());
        }
    }
}

/// Renames the sequence function calls in a raw expression, in place (the
/// caller owns the tree); whether there was any.
///
/// # Safety
/// `node` is NULL or a raw expression tree.
pub unsafe fn rename_calls(node: *mut Node) -> bool {
    let Some(schema) = registry::schema() else { return false };
    let Ok(schema) = CString::new(schema) else { return false };
    let mut renaming = Renaming { schema: schema.as_ptr(), renamed: false };
    // SAFETY: the caller's contract; the context lives through the walk.
    unsafe { rename(node, (&raw mut renaming).cast()) };
    renaming.renamed
}

struct Renaming {
    schema: *const std::ffi::c_char,
    renamed: bool,
}

#[pg_guard]
unsafe extern "C-unwind" fn rename(node: *mut Node, context: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: a raw expression tree; the walker visits every node of it;
    // the context is rename_calls'.
    unsafe {
        let renaming = context.cast::<Renaming>();
        if (*node).type_ == NodeTag::T_FuncCall {
            let call = node.cast::<pg_sys::FuncCall>();
            let args = if (*call).args.is_null() { 0 } else { (*(*call).args).length };
            if let Some(ours) = ours_for((*call).funcname).filter(|ours| arity_fits(ours, args)) {
                let schema = pg_sys::makeString(pg_sys::pstrdup((*renaming).schema));
                let name = pg_sys::makeString(pg_sys::pstrdup(ours.as_ptr()));
                (*call).funcname = pg_sys::lappend(pg_sys::lappend(std::ptr::null_mut(), schema.cast()), name.cast());
                cast_arguments((*call).args);
                (*renaming).renamed = true;
            }
        }
        pg_sys::raw_expression_tree_walker(node, Some(rename), context)
    }
}

/// Casts a renamed call's arguments to our function's types (regclass,
/// bigint, boolean), so that the call resolves to it exactly: a function of
/// the same name taking text, which a role might create in the extension's
/// schema, would otherwise win for an unknown literal.
///
/// # Safety
/// `args` is NULL or the List of a raw FuncCall's arguments.
unsafe fn cast_arguments(args: *mut pg_sys::List) {
    const TYPES: [&CStr; 3] = [c"regclass", c"int8", c"bool"];
    // SAFETY: the caller's contract; nodes built as the parser builds them.
    unsafe {
        if args.is_null() {
            return;
        }
        for (i, type_name) in TYPES.iter().enumerate().take((*args).length as usize) {
            let cell = (*args).elements.add(i);
            let mut cast = pgrx::PgBox::<pg_sys::TypeCast>::alloc_node(NodeTag::T_TypeCast);
            cast.arg = (*cell).ptr_value.cast();
            cast.typeName = pg_sys::SystemTypeName(type_name.as_ptr().cast_mut());
            cast.location = -1;
            (*cell).ptr_value = cast.into_pg().cast();
        }
    }
}

/// Whether a call with `args` arguments is one of the native function's (a
/// user function of the same name and other arguments keeps its name).
fn arity_fits(ours: &CStr, args: i32) -> bool {
    match ours.to_bytes() {
        b"snowflake_sequence_lastval" => args == 0,
        b"snowflake_sequence_setval" => args == 2 || args == 3,
        _ => args == 1,
    }
}

/// Our function for a call named nextval, currval, setval or lastval
/// (alone or in pg_catalog).
///
/// # Safety
/// `names` is a List of String nodes.
unsafe fn ours_for(names: *mut pg_sys::List) -> Option<&'static CStr> {
    // SAFETY: the caller's contract.
    let parts: Vec<String> = unsafe {
        if names.is_null() {
            return None;
        }
        (0..(*names).length as usize)
            .map(|i| {
                let s = (*(*names).elements.add(i)).ptr_value.cast::<pg_sys::String>();
                CStr::from_ptr((*s).sval).to_string_lossy().into_owned()
            })
            .collect()
    };
    let name = match parts.as_slice() {
        [name] => name,
        [schema, name] if schema == "pg_catalog" => name,
        _ => return None,
    };
    match name.as_str() {
        "nextval" => Some(c"snowflake_sequence_nextval"),
        "currval" => Some(c"snowflake_sequence_currval"),
        "setval" => Some(c"snowflake_sequence_setval"),
        "lastval" => Some(c"snowflake_sequence_lastval"),
        _ => None,
    }
}
