//! The utility hook: the DDL that would open a registered sequence's fence
//! is refused, and a TRUNCATE that restarts it closes the fence again.
//!
//! The fence is the sequence's MAXVALUE at its current value, called, so
//! that native nextval fails ([`super`]). `ALTER SEQUENCE ... RESTART`,
//! `MAXVALUE`, `CYCLE` or `AS`, and the same through an identity column
//! (`ALTER TABLE ... ALTER COLUMN ... RESTART | SET ...`, `DROP IDENTITY`),
//! would let native values out; they are refused with a hint to unregister
//! first. `TRUNCATE ... RESTART IDENTITY` resets owned sequences to their
//! start, so it is let through and the fence set again after it.
//!
//! What PostgreSQL evaluates without the planner gets our functions here:
//! CALL's arguments, EXECUTE's parameters ([`super::parameters`]), the
//! defaults COPY FROM fills ([`super::copy`]), and the expressions of table
//! rewrites ([`super::alter`]).

use std::ffi::c_char;

use pgrx::pg_sys::{self, NodeTag, Oid};
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::statement::{option_names, relation_oid};
use super::{alter, copy, nextval, parameters, registry, rewrite};
use crate::pg::error::{self, Raise};

static mut PREVIOUS: pg_sys::ProcessUtility_hook_type = None;

/// Options of ALTER SEQUENCE that would open the fence.
/// (INCREMENT too: a block's size is the registration's, and a negative one
/// would count native values down below the fence.)
const FENCE_OPTIONS: [&str; 5] = ["restart", "maxvalue", "cycle", "as", "increment"];

pub fn init() {
    // SAFETY: hooks are chained from _PG_init, in the postmaster, once.
    unsafe {
        PREVIOUS = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(process_utility);
    }
}

#[allow(clippy::too_many_arguments)]
#[pg_guard]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    let mut pstmt = pstmt;
    // SAFETY: the statement PostgreSQL is about to run.
    let statement = unsafe { (*pstmt).utilityStmt };
    // SAFETY: as above.
    let kind = unsafe { (*statement).type_ };
    // SAFETY: as above: a DiscardStmt, by its tag.
    let discard =
        (kind == NodeTag::T_DiscardStmt).then(|| unsafe { (*statement.cast::<pg_sys::DiscardStmt>()).target });
    if matches!(discard, Some(pg_sys::DiscardMode::DISCARD_ALL | pg_sys::DiscardMode::DISCARD_SEQUENCES)) {
        nextval::forget_session();
    }
    let mut refence = false;
    // Only the statements looked at below read the registry, and never in
    // a transaction that is aborted (a ROLLBACK) or outside one.
    let concerned = matches!(
        kind,
        NodeTag::T_AlterSeqStmt
            | NodeTag::T_AlterTableStmt
            | NodeTag::T_TruncateStmt
            | NodeTag::T_CallStmt
            | NodeTag::T_ExecuteStmt
            | NodeTag::T_CopyStmt
    );
    // SAFETY: a flag of this backend's transaction state.
    if concerned && unsafe { pg_sys::IsTransactionState() } && registry::any() {
        // SAFETY: as above; the tags say which struct the node is. A
        // statement to change is copied first when the tree is read-only
        // (a cached plan's), as standard_ProcessUtility does.
        unsafe {
            match (*statement).type_ {
                NodeTag::T_AlterSeqStmt => check_alter_sequence(statement.cast()),
                NodeTag::T_AlterTableStmt => {
                    check_alter_table(statement.cast());
                    if read_only_tree {
                        pstmt = pg_sys::copyObjectImpl(pstmt.cast()).cast();
                    }
                    alter::prepare((*pstmt).utilityStmt.cast());
                }
                NodeTag::T_TruncateStmt => refence = (*statement.cast::<pg_sys::TruncateStmt>()).restart_seqs,
                // Run here in place of PostgreSQL's COPY, which it would be
                // next to run only where no other library's hook follows.
                NodeTag::T_CopyStmt => {
                    if let copy::Plan::Serve(table) = copy::plan(statement.cast(), { PREVIOUS }.is_none()) {
                        if read_only_tree {
                            pstmt = pg_sys::copyObjectImpl(pstmt.cast()).cast();
                        }
                        let processed = copy::run((*pstmt).utilityStmt.cast(), table, query_string, query_env);
                        if !qc.is_null() {
                            (*qc).commandTag = pg_sys::CommandTag::CMDTAG_COPY;
                            (*qc).nprocessed = processed;
                        }
                        // As standard_ProcessUtility ends every statement.
                        pg_sys::CommandCounterIncrement();
                        return;
                    }
                }
                NodeTag::T_CallStmt | NodeTag::T_ExecuteStmt => {
                    if read_only_tree {
                        pstmt = pg_sys::copyObjectImpl(pstmt.cast()).cast();
                    }
                    let statement = (*pstmt).utilityStmt;
                    if (*statement).type_ == NodeTag::T_CallStmt {
                        let call = statement.cast::<pg_sys::CallStmt>();
                        (*call).funcexpr = rewrite::rewrite_expression((*call).funcexpr.cast()).cast();
                    } else {
                        parameters::rewrite((*statement.cast::<pg_sys::ExecuteStmt>()).params);
                    }
                }
                _ => {}
            }
        }
    }
    // SAFETY: the next hook in the chain, or PostgreSQL's, with its own arguments.
    unsafe {
        match PREVIOUS {
            Some(previous) => {
                call_previous(previous, (pstmt, query_string, read_only_tree, context, params, query_env, dest, qc))
            }
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        }
    }
    // TRUNCATE ... RESTART IDENTITY resets the sequences of the tables it
    // names, and of those it reaches by CASCADE or inheritance: every
    // registered sequence gets its fence again.
    if refence {
        for seq in registry::registered() {
            nextval::keep_fence(seq);
        }
    }
}

type Arguments = (
    *mut pg_sys::PlannedStmt,
    *const c_char,
    bool,
    pg_sys::ProcessUtilityContext::Type,
    pg_sys::ParamListInfo,
    *mut pg_sys::QueryEnvironment,
    *mut pg_sys::DestReceiver,
    *mut pg_sys::QueryCompletion,
);

/// Calls the utility hook another library installed before ours. Its type
/// says it may unwind, as pgrx types every hook; an ERROR it raises is
/// caught by pgrx's boundary and rethrown as a Rust panic.
///
/// # Safety
/// `previous` is the hook saved in `init`, called with PostgreSQL's arguments.
#[allow(ffi_unwind_calls)]
unsafe fn call_previous(
    previous: unsafe extern "C-unwind" fn(
        *mut pg_sys::PlannedStmt,
        *const c_char,
        bool,
        pg_sys::ProcessUtilityContext::Type,
        pg_sys::ParamListInfo,
        *mut pg_sys::QueryEnvironment,
        *mut pg_sys::DestReceiver,
        *mut pg_sys::QueryCompletion,
    ),
    (a, b, c, d, e, f, g, h): Arguments,
) {
    // SAFETY: the caller's contract.
    unsafe { pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| previous(a, b, c, d, e, f, g, h)) }
}

/// # Safety
/// `stmt` is an AlterSeqStmt.
unsafe fn check_alter_sequence(stmt: *mut pg_sys::AlterSeqStmt) {
    // SAFETY: the caller's contract; a name lookup that takes no lock.
    let seq = unsafe { relation_oid((*stmt).sequence, pg_sys::NoLock) }.unwrap_or(pg_sys::InvalidOid);
    // SAFETY: as above.
    let options = unsafe { option_names((*stmt).options) };
    refuse_opening(seq, &options, "ALTER SEQUENCE");
}

/// # Safety
/// `stmt` is an AlterTableStmt.
unsafe fn check_alter_table(stmt: *mut pg_sys::AlterTableStmt) {
    // SAFETY: the caller's contract.
    unsafe {
        let cmds = (*stmt).cmds;
        let Some(table) = relation_oid((*stmt).relation, pg_sys::NoLock) else { return };
        if cmds.is_null() {
            return;
        }
        for i in 0..(*cmds).length as usize {
            let cmd = (*(*cmds).elements.add(i)).ptr_value.cast::<pg_sys::AlterTableCmd>();
            let subtype = (*cmd).subtype;
            let options = match subtype {
                pg_sys::AlterTableType::AT_SetIdentity => option_names((*cmd).def.cast()),
                pg_sys::AlterTableType::AT_DropIdentity => vec!["drop identity".to_string()],
                _ => continue,
            };
            if (*cmd).name.is_null() {
                continue;
            }
            let column = pg_sys::get_attnum(table, (*cmd).name);
            if column <= 0 {
                continue;
            }
            let seq = identity_sequence(table, column);
            refuse_opening(seq, &options, "ALTER TABLE");
        }
    }
}

/// The identity sequence of a column, if any.
///
/// # Safety
/// `table` is a relation's OID.
unsafe fn identity_sequence(table: Oid, column: i16) -> Oid {
    // SAFETY: the caller's contract; catalog lookups.
    unsafe {
        let owned = pg_sys::getOwnedSequences(table);
        if owned.is_null() {
            return pg_sys::InvalidOid;
        }
        for i in 0..(*owned).length as usize {
            let seq = (*(*owned).elements.add(i)).oid_value;
            let (mut t, mut c) = (pg_sys::InvalidOid, 0);
            let internal = pg_sys::DependencyType::DEPENDENCY_INTERNAL as c_char;
            if pg_sys::sequenceIsOwned(seq, internal, &mut t, &mut c) && c == i32::from(column) {
                return seq;
            }
        }
    }
    pg_sys::InvalidOid
}

fn refuse_opening(seq: Oid, options: &[String], command: &str) {
    if seq == pg_sys::InvalidOid || registry::lookup(seq).is_none() {
        return;
    }
    let Some(option) = options.iter().find(|o| FENCE_OPTIONS.contains(&o.as_str()) || *o == "drop identity") else {
        return;
    };
    let name = nextval::rel_name(seq);
    error::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("cannot {} sequence \"{name}\" while it is registered with snowflake_id", describe(option)),
    )
    .set_detail(format!(
        "{command} with {} would let the sequence hand out its own small values again.",
        option.to_uppercase()
    ))
    .set_hint(format!("Unregister it first: SELECT snowflake_sequence_unregister('{name}');"))
    .raise(PgLogLevel::ERROR);
}

fn describe(option: &str) -> &'static str {
    match option {
        "restart" => "restart",
        "drop identity" => "drop the identity of",
        "as" => "change the type of",
        "increment" => "change the increment of",
        _ => "change the limits of",
    }
}
