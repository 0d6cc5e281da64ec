//! The planner hook: before `standard_planner`, calls of native `nextval`,
//! `currval`, `setval` and `lastval` (as functions or through an operator)
//! and bigint identity defaults (`NextValueExpr`) become calls of
//! [`super::nextval`]'s functions, wherever a sequence of this database is
//! registered or a registration is in progress ([`registry::route_all`]).
//! Ours serve a registered sequence and call the native function for any
//! other, deciding when they run, under the sequence's lock; so every
//! sequence call, registered or not, goes through them, and `lastval()` sees
//! each one. Where nothing is registered, nothing is swapped.
//!
//! The rewriter has filled in column defaults by then, so one place covers
//! explicit calls, serial and identity defaults, multi-row VALUES, INSERT ...
//! SELECT, RETURNING, CTEs, sublinks, rules and views, PREPARE and protocol
//! prepared statements, and PL/pgSQL (all of it goes through the planner).
//! A plan made before a registration is made again: the registration
//! invalidates every relation of the database ([`super::in_progress`]).
//!
//! The planner scribbles on the Query it is given (callers pass a copy), but
//! an identity default is a node of another type than the call that
//! replaces it, so the tree is rebuilt by a mutator. A walker first looks
//! whether there is any sequence call at all, and only then is the registry
//! read: a statement that calls no sequence function pays a walk.

use std::ffi::{c_char, c_int, c_void};

use pgrx::pg_sys::{self, Node, NodeTag, Oid, Query};
use pgrx::prelude::*;

use super::registry::{self, Functions};
use super::{defaults, handed, nextval};

static mut PREVIOUS: pg_sys::planner_hook_type = None;

// SAFETY (for PLANNING): a backend runs one thread.
/// How many planner hook calls are on the stack (a function's statements
/// are planned while its caller's plan is made).
static mut PLANNING: u32 = 0;

/// Marks the time a query is planned, when the registry may be read (for
/// [`super::inline`], whose hook runs elsewhere too); unmarked when
/// dropped, also when an error unwinds.
struct Planning;

impl Planning {
    fn enter() -> Planning {
        // SAFETY: see PLANNING.
        unsafe { PLANNING += 1 };
        Planning
    }
}

impl Drop for Planning {
    fn drop(&mut self) {
        // SAFETY: see PLANNING.
        unsafe { PLANNING -= 1 };
    }
}

/// Whether a query is being planned.
pub fn planning() -> bool {
    // SAFETY: see PLANNING.
    unsafe { PLANNING > 0 }
}

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
    let _planning = Planning::enter();
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
    let _planning = Planning::enter();
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

/// The Query the planner gets: rewritten where sequence calls are routed
/// through our functions.
///
/// # Safety
/// `parse` is the planner's Query; the walk and the rebuild allocate in the
/// current (planner's) memory context.
unsafe fn prepare(parse: *mut Query) -> *mut Query {
    registry::reload_if_wanted();
    // SAFETY: the caller's contract.
    unsafe { rewrite(parse) }
}

/// A native sequence function call or default, as the planner gets it.
#[derive(Clone, Copy)]
enum Native {
    Nextval,
    Currval,
    Setval,
    Setval3,
    Lastval,
    /// A bigint identity column's default, of this sequence.
    Identity(Oid),
}

impl Native {
    fn ours(self, f: &Functions) -> Oid {
        match self {
            Native::Nextval => f.nextval,
            Native::Currval => f.currval,
            Native::Setval => f.setval,
            Native::Setval3 => f.setval3,
            Native::Lastval => f.lastval,
            Native::Identity(_) => f.nextval_identity,
        }
    }
}

fn native_function(function: Oid) -> Option<Native> {
    match function.to_u32() {
        pg_sys::F_NEXTVAL => Some(Native::Nextval),
        pg_sys::F_CURRVAL => Some(Native::Currval),
        pg_sys::F_SETVAL_REGCLASS_INT8 => Some(Native::Setval),
        pg_sys::F_SETVAL_REGCLASS_INT8_BOOL => Some(Native::Setval3),
        pg_sys::F_LASTVAL => Some(Native::Lastval),
        _ => None,
    }
}

/// # Safety
/// `node` is a valid node tree or NULL.
unsafe fn native(node: *mut Node) -> Option<Native> {
    // SAFETY: the caller's contract; the tags say which struct the node is.
    unsafe {
        match (*node).type_ {
            NodeTag::T_FuncExpr => native_function((*node.cast::<pg_sys::FuncExpr>()).funcid),
            NodeTag::T_OpExpr => {
                let op = node.cast::<pg_sys::OpExpr>();
                // Set by the parser; looked up where something left it unset.
                let function =
                    if (*op).opfuncid == pg_sys::InvalidOid { pg_sys::get_opcode((*op).opno) } else { (*op).opfuncid };
                native_function(function)
            }
            // An identity column of another type is never registered (its
            // sequence must be bigint), and our function returns bigint.
            NodeTag::T_NextValueExpr => {
                let next = node.cast::<pg_sys::NextValueExpr>();
                ((*next).typeId == pg_sys::INT8OID).then(|| Native::Identity((*next).seqid))
            }
            _ => None,
        }
    }
}

/// # Safety
/// `parse` is the planner's Query.
unsafe fn rewrite(parse: *mut Query) -> *mut Query {
    // SAFETY: the caller's contract.
    unsafe {
        if !query_walker(parse, Some(finds), std::ptr::null_mut()) {
            return parse;
        }
        let Some(functions) = routed() else { return parse };
        tree::query_mutator(parse, replaces, &functions)
    }
}

/// The functions that serve sequence calls, where they are routed through
/// ours: where anything is registered or a registration is in progress, and
/// for a session that was handed snowflake values (its currval and lastval
/// know them; native ones never saw them).
fn routed() -> Option<Functions> {
    routing().then(registry::functions).flatten()
}

/// Whether sequence calls are routed through ours (see [`routed`]).
pub fn routing() -> bool {
    handed::kept() || registry::route_all()
}

/// The same replacement for an expression the planner never sees: CALL's
/// arguments, and the defaults COPY FROM fills, which PostgreSQL evaluates
/// with expression_planner.
///
/// # Safety
/// `node` is a valid expression tree.
pub unsafe fn rewrite_expression(node: *mut Node) -> *mut Node {
    // SAFETY: the caller's contract.
    unsafe {
        if !finds(node, std::ptr::null_mut()) {
            return node;
        }
        let Some(functions) = routed() else { return node };
        replaces(node, (&raw const functions).cast_mut().cast())
    }
}

/// Whether an expression calls what our functions serve (the test the
/// rewrite makes before it rebuilds a tree).
///
/// # Safety
/// `node` is a valid expression tree.
pub unsafe fn served(node: *mut Node) -> bool {
    // SAFETY: the caller's contract.
    unsafe { finds(node, std::ptr::null_mut()) && routed().is_some() }
}

/// Whether an expression calls a sequence function whose native form would
/// be wrong: of a registered sequence (or one decided at run time), or a
/// currval or lastval whose answer this session keeps ([`handed`]). Where
/// ours cannot be put in (COPY run by PostgreSQL), such an expression is
/// refused; any other runs natively, as it would with nothing registered
/// (a registration in progress waits for the sequence's lock, which native
/// nextval holds, so it fences the sequence after such a statement).
///
/// # Safety
/// `node` is a valid expression tree.
pub unsafe fn needs_ours(node: *mut Node) -> bool {
    // SAFETY: the caller's contract.
    unsafe { routing() && needs(node, std::ptr::null_mut()) }
}

#[pg_guard]
unsafe extern "C-unwind" fn needs(node: *mut Node, context: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: a node of the tree the walk was started on; the tags say
    // which struct a node is.
    unsafe {
        if (*node).type_ == NodeTag::T_Query {
            return query_walker(node.cast(), Some(needs), context);
        }
        let args = match (*node).type_ {
            NodeTag::T_FuncExpr => (*node.cast::<pg_sys::FuncExpr>()).args,
            NodeTag::T_OpExpr => (*node.cast::<pg_sys::OpExpr>()).args,
            _ => std::ptr::null_mut(),
        };
        let first = (!args.is_null() && (*args).length > 0).then(|| (*(*args).elements).ptr_value.cast::<Node>());
        let constant = first.filter(|a| (**a).type_ == NodeTag::T_Const).map(|a| a.cast::<pg_sys::Const>());
        let sequence = constant.filter(|c| !(**c).constisnull).map(|c| Oid::from((*c).constvalue.value() as u32));
        let needed = match native(node) {
            None => false,
            Some(Native::Identity(seq)) => registry::lookup(seq).is_some(),
            Some(Native::Lastval) => handed::lastval().is_some(),
            Some(Native::Currval) => {
                sequence.is_none_or(|s| registry::lookup(s).is_some() || handed::currval(s).is_some())
            }
            Some(Native::Nextval | Native::Setval | Native::Setval3) => {
                sequence.is_none_or(|s| registry::lookup(s).is_some())
            }
        };
        needed
            || left_defaults(node).is_some_and(|d| needs(d, context))
            || pg_sys::expression_tree_walker(node, Some(needs), context)
    }
}

/// Whether `function` is a native sequence function (nextval, currval,
/// setval, lastval), by OID.
pub fn is_native_sequence_function(function: Oid) -> bool {
    native_function(function).is_some()
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
        if native(node).is_some() || left_defaults(node).is_some_and(|d| finds(d, context)) {
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(finds), context)
    }
}

/// The defaults `node` leaves to the planner, if it is a call that leaves
/// some (the planner fills them in after this hook).
///
/// # Safety
/// `node` is a valid node; in a transaction.
unsafe fn left_defaults(node: *mut Node) -> Option<*mut Node> {
    // SAFETY: the caller's contract; the tag says which struct the node is.
    unsafe {
        ((*node).type_ == NodeTag::T_FuncExpr)
            .then(|| defaults::left_to_the_planner(node.cast(), &|d| finds(d, std::ptr::null_mut())))
            .flatten()
    }
}

/// Whether an analysed expression calls a function that leaves out a
/// parameter whose default calls what our functions must serve (see
/// [`needs_ours`]).
///
/// # Safety
/// `node` is NULL or a valid expression tree; in a transaction.
pub unsafe fn defaults_need_ours(node: *mut Node) -> bool {
    // SAFETY: the caller's contract.
    unsafe { routing() && defaulted_needs(node, std::ptr::null_mut()) }
}

#[pg_guard]
unsafe extern "C-unwind" fn defaulted_needs(node: *mut Node, context: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: a node of the tree the walk was started on.
    unsafe {
        if (*node).type_ == NodeTag::T_Query {
            return query_walker(node.cast(), Some(defaulted_needs), context);
        }
        left_defaults(node).is_some_and(|d| needs(d, std::ptr::null_mut()))
            || pg_sys::expression_tree_walker(node, Some(defaulted_needs), context)
    }
}

/// Whether an expression tree (analysed: a function's defaults or a BEGIN
/// ATOMIC body) calls a native sequence function, also through the
/// defaults of a function it calls.
///
/// # Safety
/// `node` is NULL or a valid node tree; in a transaction.
pub unsafe fn calls_sequence_function(node: *mut Node) -> bool {
    // SAFETY: the caller's contract.
    unsafe { finds(node, std::ptr::null_mut()) }
}

/// Whether a function named `name` (in any schema) has parameter defaults
/// that call a native sequence function: a raw tree's call of it may.
///
/// # Safety
/// In a transaction.
pub unsafe fn defaults_of_named_call_sequences(name: &std::ffi::CStr) -> bool {
    // SAFETY: the caller's contract.
    unsafe { defaults::any_named(name, &|d| finds(d, std::ptr::null_mut())) }
}

unsafe fn query_walker(
    query: *mut Query,
    walker: Option<unsafe extern "C-unwind" fn(*mut Node, *mut c_void) -> bool>,
    context: *mut c_void,
) -> bool {
    // SAFETY: the caller's Query; range table subqueries and CTEs are walked too.
    unsafe { pg_sys::query_tree_walker(query, walker, context, 0) }
}

/// The mutator; its context is the [`Functions`] that serve sequence calls.
#[pg_guard]
unsafe extern "C-unwind" fn replaces(node: *mut Node, context: *mut c_void) -> *mut Node {
    if node.is_null() {
        return node;
    }
    // SAFETY: a node of the tree being rebuilt, and the context the walk was
    // started with; new nodes are made in the current memory context, as
    // the mutator's copies are.
    unsafe {
        if (*node).type_ == NodeTag::T_Query {
            return tree::query_mutator(node.cast(), replaces, &*context.cast::<Functions>()).cast();
        }
        let functions = &*context.cast::<Functions>();
        let Some(native) = native(node) else {
            if left_defaults(node).is_some_and(|d| finds(d, std::ptr::null_mut())) {
                // Filled in here, so that the calls in them are replaced too.
                let call = pg_sys::copyObjectImpl(node.cast()).cast::<pg_sys::FuncExpr>();
                defaults::fill_in(call);
                return tree::expression_mutator(call.cast(), replaces, functions);
            }
            return tree::expression_mutator(node, replaces, functions);
        };
        let ours = native.ours(functions);
        match (*node).type_ {
            NodeTag::T_NextValueExpr => {
                let Native::Identity(seq) = native else { unreachable!("an identity default") };
                let arg = pg_sys::makeConst(
                    pg_sys::REGCLASSOID,
                    -1,
                    pg_sys::InvalidOid,
                    4,
                    pg_sys::Datum::from(seq),
                    false,
                    true,
                );
                // Marked as planned here: see IDENTITY_DEFAULT.
                call(ours, pg_sys::lappend(std::ptr::null_mut(), arg.cast()), nextval::IDENTITY_DEFAULT)
            }
            NodeTag::T_OpExpr => {
                let copy = tree::expression_mutator(node, replaces, functions).cast::<pg_sys::OpExpr>();
                call(ours, (*copy).args, (*copy).inputcollid)
            }
            _ => {
                let copy = tree::expression_mutator(node, replaces, functions);
                (*copy.cast::<pg_sys::FuncExpr>()).funcid = ours;
                copy
            }
        }
    }
}

/// A call of our function `function` (all return bigint) with `args`.
///
/// # Safety
/// `args` is a List of expressions of the function's argument types.
unsafe fn call(function: Oid, args: *mut pg_sys::List, input_collation: Oid) -> *mut Node {
    // SAFETY: the caller's contract; a node made in the current memory context.
    unsafe {
        pg_sys::makeFuncExpr(
            function,
            pg_sys::INT8OID,
            args,
            pg_sys::InvalidOid,
            input_collation,
            pg_sys::CoercionForm::COERCE_EXPLICIT_CALL,
        )
        .cast()
    }
}

/// query_tree_mutator and expression_tree_mutator, whose C names and
/// callback types differ between versions.
mod tree {
    use super::*;

    type Mutator = unsafe extern "C-unwind" fn(*mut Node, *mut c_void) -> *mut Node;

    /// # Safety
    /// `query` is a valid Query; `functions` lives through the walk.
    pub unsafe fn query_mutator(query: *mut Query, mutator: Mutator, functions: &Functions) -> *mut Query {
        let context = (functions as *const Functions).cast_mut().cast::<c_void>();
        // SAFETY: PostgreSQL's mutator with a callback of the signature it calls.
        unsafe {
            #[cfg(feature = "pg15")]
            {
                let callback = std::mem::transmute::<Mutator, unsafe extern "C-unwind" fn() -> *mut Node>(mutator);
                pg_sys::query_tree_mutator(query, Some(callback), context, 0)
            }
            #[cfg(not(feature = "pg15"))]
            {
                pg_sys::query_tree_mutator_impl(query, Some(mutator), context, 0)
            }
        }
    }

    /// # Safety
    /// `node` is a valid node tree (no Query at its top); `functions` lives through the walk.
    pub unsafe fn expression_mutator(node: *mut Node, mutator: Mutator, functions: &Functions) -> *mut Node {
        let context = (functions as *const Functions).cast_mut().cast::<c_void>();
        // SAFETY: as above.
        unsafe {
            #[cfg(feature = "pg15")]
            {
                let callback = std::mem::transmute::<Mutator, unsafe extern "C-unwind" fn() -> *mut Node>(mutator);
                pg_sys::expression_tree_mutator(node, Some(callback), context)
            }
            #[cfg(not(feature = "pg15"))]
            {
                pg_sys::expression_tree_mutator_impl(node, Some(mutator), context)
            }
        }
    }
}
