//! Raw expressions that PostgreSQL analyses and evaluates with
//! expression_planner, never the planner: EXECUTE's parameters, and the
//! expressions of a table rewrite ([`super::alter`]). A call among them that
//! parse analysis resolves to native nextval, currval, setval or lastval is
//! renamed to our function of the same arguments, which serves a
//! registered sequence and calls the native function for any other.
//!
//! Which calls those are is decided by their OIDs, not their names: the
//! expression is analysed (a copy, as the statement will analyse it) and
//! the calls it resolves to native sequence functions are found by their
//! place in the statement's text. A user's own function named `nextval`,
//! in any schema, keeps its meaning.

use std::ffi::{c_char, c_void, CStr, CString};

use pgrx::pg_sys::{self, Node, NodeTag};
use pgrx::prelude::*;
use pgrx::{PgLogLevel, PgMemoryContexts};

use super::registry;
use super::rewrite::{self, is_native_sequence_function};
use crate::pg::error::{self, Raise};

/// Renames the native sequence function calls among EXECUTE's `params`, in
/// place (the caller owns the tree).
///
/// # Safety
/// `params` is NULL or a List of raw expressions of `query_string`.
pub unsafe fn rewrite(params: *mut pg_sys::List, query_string: *const c_char) {
    // SAFETY: the caller's contract; analysed as EvaluateParams analyses them.
    unsafe {
        if params.is_null() {
            return;
        }
        let analyse = |node: *mut Node| {
            let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
            (*pstate).p_sourcetext = query_string;
            pg_sys::transformExpr(pstate, node, pg_sys::ParseExprKind::EXPR_KIND_EXECUTE_PARAMETER)
        };
        for i in 0..(*params).length as usize {
            rename_calls((*(*params).elements.add(i)).ptr_value.cast(), &analyse);
        }
    }
}

/// Whether any of EXECUTE's raw `params` calls a function named nextval,
/// currval, setval or lastval: the cheap test before a copy and an analysis.
///
/// # Safety
/// `params` is NULL or a List of raw expressions.
pub unsafe fn names_a_sequence_call(params: *mut pg_sys::List) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        !params.is_null()
            && (0..(*params).length as usize)
                .any(|i| names_a_sequence_function((*(*params).elements.add(i)).ptr_value.cast(), std::ptr::null_mut()))
    }
}

/// Whether a raw expression calls a function named nextval, currval,
/// setval or lastval (COPY's WHERE clause).
///
/// # Safety
/// `node` is NULL or a raw expression tree.
pub unsafe fn names_a_sequence_call_in(node: *mut Node) -> bool {
    // SAFETY: the caller's contract.
    unsafe { !node.is_null() && names_a_sequence_function(node, std::ptr::null_mut()) }
}

/// Renames, in a raw expression, the calls that `analyse` resolves to
/// native sequence functions to ours, in place (the caller owns the tree);
/// whether there was any. Only where sequence calls are routed through ours.
///
/// # Safety
/// `node` is NULL or a raw expression tree; `analyse` gives the analysed
/// form of a copy of it.
pub unsafe fn rename_calls(node: *mut Node, analyse: &dyn Fn(*mut Node) -> *mut Node) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        if node.is_null() || !names_a_sequence_function(node, std::ptr::null_mut()) {
            return false;
        }
    }
    if !rewrite::routing() {
        return false;
    }
    let Some(installed) = registry::installed() else { return false };
    // SAFETY: a catalog lookup of the extension's schema, which exists.
    let schema = unsafe { CStr::from_ptr(pg_sys::get_namespace_name(installed.schema)) }.to_owned();
    // SAFETY: the caller's contract; the copy is analysed, the original renamed.
    unsafe {
        let analysed = analyse(pg_sys::copyObjectImpl(node.cast()).cast());
        if rewrite::defaults_need_ours(analysed) {
            refuse_left_out_default();
        }
        let mut locations: Vec<i32> = Vec::new();
        collect_native_calls(analysed, (&raw mut locations).cast());
        if locations.is_empty() {
            return false;
        }
        let mut renaming = Renaming { schema: schema.as_ptr(), locations, renamed: false };
        rename(node, (&raw mut renaming).cast());
        renaming.renamed
    }
}

/// # Safety
/// `node` is a raw expression tree; `context` is what `walker` expects.
unsafe fn raw_walk(
    node: *mut Node,
    walker: Option<unsafe extern "C-unwind" fn(*mut Node, *mut c_void) -> bool>,
    context: *mut c_void,
) -> bool {
    // SAFETY: the caller's contract.
    unsafe { pg_sys::raw_expression_tree_walker(node, walker, context) }
}

/// A call here leaves a parameter default that calls a registered
/// sequence to be filled in where no hook sees it (the executor's
/// expression planner), and a raw call cannot be given our functions: an
/// error, not a native value.
fn refuse_left_out_default() -> ! {
    error::new(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        "a function called here leaves out a parameter whose default calls a registered sequence",
    )
    .set_detail("Defaults left out are filled in after snowflake_id could put its functions in place of nextval.")
    .set_hint("Pass that argument in the call, or call the function in a query of its own.")
    .raise(PgLogLevel::ERROR)
}

/// Whether a raw expression calls a function named nextval, currval,
/// setval or lastval (in any schema), or, where sequence calls are routed,
/// a function of any name whose parameter defaults call one: the cheap
/// test before an analysis.
#[pg_guard]
unsafe extern "C-unwind" fn names_a_sequence_function(node: *mut Node, context: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: a node of a raw expression tree.
    unsafe {
        if (*node).type_ == NodeTag::T_FuncCall {
            let names = (*node.cast::<pg_sys::FuncCall>()).funcname;
            if !names.is_null() && (*names).length > 0 {
                let last = (*(*names).elements.add((*names).length as usize - 1)).ptr_value.cast::<pg_sys::String>();
                let name = CStr::from_ptr((*last).sval);
                if ours_for(name).is_some() || (rewrite::routing() && rewrite::defaults_of_named_call_sequences(name)) {
                    return true;
                }
            }
        }
        raw_walk(node, Some(names_a_sequence_function), context)
    }
}

/// Collects the locations of the calls of native sequence functions in an
/// analysed expression; `context` is a `Vec<i32>`.
#[pg_guard]
unsafe extern "C-unwind" fn collect_native_calls(node: *mut Node, context: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: a node of an analysed expression tree; the context is
    // rename_calls' vector.
    unsafe {
        if (*node).type_ == NodeTag::T_FuncExpr {
            let f = node.cast::<pg_sys::FuncExpr>();
            if is_native_sequence_function((*f).funcid) && (*f).location >= 0 {
                (*context.cast::<Vec<i32>>()).push((*f).location);
            }
        }
        pg_sys::expression_tree_walker(node, Some(collect_native_calls), context)
    }
}

struct Renaming {
    schema: *const c_char,
    /// Where the calls analysis resolved to native sequence functions start.
    locations: Vec<i32>,
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
            let names = (*call).funcname;
            let last = (*(*names).elements.add((*names).length as usize - 1)).ptr_value.cast::<pg_sys::String>();
            if let Some(ours) = ours_for(CStr::from_ptr((*last).sval)) {
                if (*renaming).locations.contains(&(*call).location) {
                    let schema = pg_sys::makeString(pg_sys::pstrdup((*renaming).schema));
                    let name = pg_sys::makeString(pg_sys::pstrdup(ours.as_ptr()));
                    (*call).funcname =
                        pg_sys::lappend(pg_sys::lappend(std::ptr::null_mut(), schema.cast()), name.cast());
                    cast_arguments((*call).args);
                    (*renaming).renamed = true;
                }
            }
        }
        raw_walk(node, Some(rename), context)
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

/// Our function for a native one named `name`.
fn ours_for(name: &CStr) -> Option<&'static CStr> {
    match name.to_bytes() {
        b"nextval" => Some(c"snowflake_sequence_nextval"),
        b"currval" => Some(c"snowflake_sequence_currval"),
        b"setval" => Some(c"snowflake_sequence_setval"),
        b"lastval" => Some(c"snowflake_sequence_lastval"),
        _ => None,
    }
}

/// Whether an SQL function's body `text` is one SELECT that calls a
/// function named nextval, currval, setval or lastval, as the parser reads
/// the names (quoted, or spelt with Unicode escapes): PostgreSQL inlines no
/// other body. Text that does not parse (a body created with
/// check_function_bodies off) raises the parser's error, as PostgreSQL's
/// own inlining and every call of the function would.
pub fn sql_names_a_sequence_call(text: &str) -> bool {
    let Ok(text) = CString::new(text) else { return false };
    let mut parsing = PgMemoryContexts::new("snowflake_id: an SQL function's body");
    // SAFETY: the raw parser and a raw tree walk, their allocations in a
    // context of their own (freed when it drops, or with its parent on an
    // ERROR, which they raise through pg_sys as a Rust panic).
    unsafe {
        parsing.switch_to(|_| {
            let parsed = pg_sys::raw_parser(text.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
            if parsed.is_null() || (*parsed).length != 1 {
                return false;
            }
            let statement = (*(*(*parsed).elements).ptr_value.cast::<pg_sys::RawStmt>()).stmt;
            (*statement).type_ == NodeTag::T_SelectStmt
                && raw_walk(statement, Some(names_a_sequence_function), std::ptr::null_mut())
        })
    }
}

/// A raw expression parsed from `text` (a complete SQL expression), for an
/// expression PostgreSQL keeps only analysed (a domain's default).
pub fn parse_expression(text: &str) -> Option<*mut Node> {
    let statement = CString::new(format!("SELECT {text}")).ok()?;
    // SAFETY: the raw parser of a statement we wrote; its tree is walked as
    // the grammar builds a SELECT: one RawStmt, its target list's first entry.
    unsafe {
        let parsed = pg_sys::raw_parser(statement.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        if parsed.is_null() || (*parsed).length != 1 {
            return None;
        }
        let raw = (*(*parsed).elements).ptr_value.cast::<pg_sys::RawStmt>();
        let select = (*raw).stmt.cast::<pg_sys::SelectStmt>();
        if (*select).type_ != NodeTag::T_SelectStmt || (*select).targetList.is_null() {
            return None;
        }
        let target = (*(*(*select).targetList).elements).ptr_value.cast::<pg_sys::ResTarget>();
        Some((*target).val)
    }
}
