//! The planner hook: before `standard_planner`, calls of native `nextval`,
//! `currval`, `setval` and `lastval` and identity defaults (`NextValueExpr`)
//! of registered sequences become calls of [`super::nextval`]'s functions.
//!
//! The rewriter has filled in column defaults by then, so one place covers
//! explicit calls, serial and identity defaults, multi-row VALUES, INSERT ...
//! SELECT, RETURNING, CTEs, sublinks, rules and views, PREPARE and protocol
//! prepared statements, and PL/pgSQL (all of it goes through the planner).
//! A call whose argument is no constant, and `lastval()`, are sent to our
//! function wherever the extension is installed, registrations or not: it
//! decides at run time (the native one for a sequence not registered), and a
//! plan made before a registration names no relation that would renew it.
//!
//! The planner scribbles on the Query it is given (callers pass a copy), but
//! an identity default is a node of another type than the call that
//! replaces it, so the tree is rebuilt by a mutator; a walker first looks
//! whether there is anything to replace, so plans without nextval pay a walk.

use std::ffi::{c_char, c_int, c_void};

use pgrx::pg_sys::{self, Node, NodeTag, Oid, Query};
use pgrx::prelude::*;

use super::registry::{self, Functions};

static mut PREVIOUS: pg_sys::planner_hook_type = None;

pub fn init() {
    // SAFETY: hooks are chained from _PG_init, in the postmaster, once.
    unsafe {
        PREVIOUS = pg_sys::planner_hook;
        pg_sys::planner_hook = Some(plan);
    }
}

/// Rewrites the query when sequences are registered, then plans it.
///
/// The previous hook's type says it may unwind, as pgrx types every hook; an
/// ERROR it raises is caught by pgrx's boundary and rethrown as a Rust panic.
#[cfg(not(feature = "pg19"))]
#[pg_guard]
#[allow(ffi_unwind_calls)]
unsafe extern "C-unwind" fn plan(
    parse: *mut Query,
    query_string: *const c_char,
    cursor_options: c_int,
    bound_params: pg_sys::ParamListInfo,
) -> *mut pg_sys::PlannedStmt {
    // SAFETY: the planner's Query.
    let parse = unsafe { prepare(parse) };
    // SAFETY: the next planner in the chain, with the planner's arguments.
    unsafe {
        match PREVIOUS {
            Some(previous) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
                previous(parse, query_string, cursor_options, bound_params)
            }),
            None => pg_sys::standard_planner(parse, query_string, cursor_options, bound_params),
        }
    }
}

/// As above; PostgreSQL 19's planner also takes the EXPLAIN in progress.
#[cfg(feature = "pg19")]
#[pg_guard]
#[allow(ffi_unwind_calls)]
unsafe extern "C-unwind" fn plan(
    parse: *mut Query,
    query_string: *const c_char,
    cursor_options: c_int,
    bound_params: pg_sys::ParamListInfo,
    explain: *mut pg_sys::ExplainState,
) -> *mut pg_sys::PlannedStmt {
    // SAFETY: the planner's Query.
    let parse = unsafe { prepare(parse) };
    // SAFETY: the next planner in the chain, with the planner's arguments.
    unsafe {
        match PREVIOUS {
            Some(previous) => pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
                previous(parse, query_string, cursor_options, bound_params, explain)
            }),
            None => pg_sys::standard_planner(parse, query_string, cursor_options, bound_params, explain),
        }
    }
}

/// The Query the planner gets: rewritten where the extension is installed.
///
/// # Safety
/// `parse` is the planner's Query; the walk and the rebuild allocate in the
/// current (planner's) memory context.
unsafe fn prepare(parse: *mut Query) -> *mut Query {
    // Where the extension is installed, even with nothing registered: a
    // lastval() or a nextval($1) planned now may run after a registration,
    // and no relation of theirs would make the plan be made again.
    if registry::installed() {
        // SAFETY: the caller's contract.
        unsafe { rewrite(parse) }
    } else {
        parse
    }
}

/// What to put in place of a native call or default, if anything.
#[derive(Clone, Copy)]
enum Swap {
    /// A call of a native sequence function, served by ours instead (which
    /// checks as the native one does, and calls it for a sequence not
    /// registered): nextval, currval, setval, lastval.
    Call(Oid),
    /// An identity default of a registered sequence.
    Identity(Functions, Oid),
}

/// # Safety
/// `node` is a valid node tree or NULL.
unsafe fn swap_for(node: *mut Node) -> Option<Swap> {
    // SAFETY: the caller's contract; the tags say which struct the node is.
    unsafe {
        match (*node).type_ {
            NodeTag::T_FuncExpr => {
                let f = node.cast::<pg_sys::FuncExpr>();
                let ours: fn(&Functions) -> Oid = match (*f).funcid.to_u32() {
                    pg_sys::F_NEXTVAL => |f| f.nextval,
                    pg_sys::F_CURRVAL => |f| f.currval,
                    pg_sys::F_SETVAL_REGCLASS_INT8 => |f| f.setval,
                    pg_sys::F_SETVAL_REGCLASS_INT8_BOOL => |f| f.setval3,
                    // The session's last value may be a registered sequence's.
                    pg_sys::F_LASTVAL => return registry::functions().map(|f| Swap::Call(f.lastval)),
                    _ => return None,
                };
                let args = (*f).args;
                if args.is_null() || (*args).length < 1 {
                    return None;
                }
                let arg = (*(*args).elements).ptr_value.cast::<Node>();
                match const_oid(arg) {
                    Some(seq) => registry::lookup(seq).map(|(_, functions)| Swap::Call(ours(&functions))),
                    // Decided at run time.
                    None => registry::functions().map(|functions| Swap::Call(ours(&functions))),
                }
            }
            NodeTag::T_NextValueExpr => {
                let seq = (*node.cast::<pg_sys::NextValueExpr>()).seqid;
                registry::lookup(seq).map(|(_, functions)| Swap::Identity(functions, seq))
            }
            _ => None,
        }
    }
}

/// The OID in a non-null regclass or oid constant.
unsafe fn const_oid(node: *mut Node) -> Option<Oid> {
    // SAFETY: as for swap_for.
    unsafe {
        if node.is_null() || (*node).type_ != NodeTag::T_Const {
            return None;
        }
        let c = node.cast::<pg_sys::Const>();
        ((*c).consttype == pg_sys::REGCLASSOID || (*c).consttype == pg_sys::OIDOID) && !(*c).constisnull
    }
    .then(|| {
        // SAFETY: checked above: a non-null oid datum.
        unsafe { Oid::from((*node.cast::<pg_sys::Const>()).constvalue.value() as u32) }
    })
}

/// # Safety
/// `parse` is the planner's Query.
unsafe fn rewrite(parse: *mut Query) -> *mut Query {
    // SAFETY: the caller's contract.
    unsafe {
        if !query_walker(parse, Some(finds), std::ptr::null_mut()) {
            return parse;
        }
        tree::query_mutator(parse, replaces)
    }
}

/// The same replacement for an expression the planner never sees: CALL's
/// arguments, which PostgreSQL evaluates with expression_planner.
///
/// # Safety
/// `node` is a valid expression tree.
pub unsafe fn rewrite_expression(node: *mut Node) -> *mut Node {
    // SAFETY: the caller's contract.
    unsafe {
        if !finds(node, std::ptr::null_mut()) {
            return node;
        }
        replaces(node, std::ptr::null_mut())
    }
}

/// Whether an expression calls what our functions serve (the test the
/// rewrite makes before it rebuilds a tree).
///
/// # Safety
/// `node` is a valid expression tree.
pub unsafe fn served(node: *mut Node) -> bool {
    // SAFETY: the caller's contract.
    unsafe { finds(node, std::ptr::null_mut()) }
}

#[pg_guard]
unsafe extern "C-unwind" fn finds(node: *mut Node, context: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: a node of the tree the walk was started on.
    unsafe {
        if (*node).type_ == NodeTag::T_Query {
            return query_walker(node.cast(), Some(finds), context);
        }
        if swap_for(node).is_some() {
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(finds), context)
    }
}

unsafe fn query_walker(
    query: *mut Query,
    walker: Option<unsafe extern "C-unwind" fn(*mut Node, *mut c_void) -> bool>,
    context: *mut c_void,
) -> bool {
    // SAFETY: the caller's Query; range table subqueries and CTEs are walked too.
    unsafe { pg_sys::query_tree_walker(query, walker, context, 0) }
}

#[pg_guard]
unsafe extern "C-unwind" fn replaces(node: *mut Node, _context: *mut c_void) -> *mut Node {
    if node.is_null() {
        return node;
    }
    // SAFETY: a node of the tree being rebuilt; new nodes are made in the
    // planner's memory context, as the mutator's copies are.
    unsafe {
        if (*node).type_ == NodeTag::T_Query {
            return tree::query_mutator(node.cast(), replaces).cast();
        }
        let swap = swap_for(node);
        if let Some(Swap::Identity(functions, seq)) = swap {
            let arg = pg_sys::makeConst(
                pg_sys::REGCLASSOID,
                -1,
                pg_sys::InvalidOid,
                4,
                pg_sys::Datum::from(seq),
                false,
                true,
            );
            let args = pg_sys::lappend(std::ptr::null_mut(), arg.cast());
            return pg_sys::makeFuncExpr(
                functions.nextval_identity,
                pg_sys::INT8OID,
                args,
                pg_sys::InvalidOid,
                pg_sys::InvalidOid,
                pg_sys::CoercionForm::COERCE_EXPLICIT_CALL,
            )
            .cast();
        }
        let copy = tree::expression_mutator(node, replaces);
        if let Some(Swap::Call(function)) = swap {
            (*copy.cast::<pg_sys::FuncExpr>()).funcid = function;
        }
        copy
    }
}

/// query_tree_mutator and expression_tree_mutator, whose C names and
/// callback types differ between versions.
mod tree {
    use super::*;

    type Mutator = unsafe extern "C-unwind" fn(*mut Node, *mut c_void) -> *mut Node;

    /// # Safety
    /// `query` is a valid Query.
    pub unsafe fn query_mutator(query: *mut Query, mutator: Mutator) -> *mut Query {
        // SAFETY: PostgreSQL's mutator with a callback of the signature it calls.
        unsafe {
            #[cfg(feature = "pg15")]
            {
                let callback = std::mem::transmute::<Mutator, unsafe extern "C-unwind" fn() -> *mut Node>(mutator);
                pg_sys::query_tree_mutator(query, Some(callback), std::ptr::null_mut(), 0)
            }
            #[cfg(not(feature = "pg15"))]
            {
                pg_sys::query_tree_mutator_impl(query, Some(mutator), std::ptr::null_mut(), 0)
            }
        }
    }

    /// # Safety
    /// `node` is a valid node tree (no Query at its top).
    pub unsafe fn expression_mutator(node: *mut Node, mutator: Mutator) -> *mut Node {
        // SAFETY: as above.
        unsafe {
            #[cfg(feature = "pg15")]
            {
                let callback = std::mem::transmute::<Mutator, unsafe extern "C-unwind" fn() -> *mut Node>(mutator);
                pg_sys::expression_tree_mutator(node, Some(callback), std::ptr::null_mut())
            }
            #[cfg(not(feature = "pg15"))]
            {
                pg_sys::expression_tree_mutator_impl(node, Some(mutator), std::ptr::null_mut())
            }
        }
    }
}
