//! The utility hook: DDL that concerns registered sequences is decided
//! after it has taken the lock its statement takes (which takes in the
//! invalidations of a registration that committed meanwhile), never on what
//! this backend's registry said before.
//!
//! - The DDL that would open a registered sequence's fence is refused with
//!   a hint to unregister first: `ALTER SEQUENCE ... RESTART`, `MAXVALUE`,
//!   `CYCLE`, `AS` or `INCREMENT`, the same through an identity column
//!   (`ALTER TABLE ... ALTER COLUMN ... RESTART | SET ...`, which PostgreSQL
//!   runs as an ALTER SEQUENCE of its own), and `DROP IDENTITY`.
//! - `TRUNCATE ... RESTART IDENTITY` resets the sequences of the tables it
//!   truncates: each registered one among them gets its fence back.
//! - `DROP EXTENSION snowflake_id` while sequences are registered asks for
//!   CASCADE, which leaves them fenced.
//! - `CREATE TABLE ... (LIKE ... INCLUDING IDENTITY)` copies an identity
//!   sequence's options, a registered one's fence among them: the copy gets
//!   the MAXVALUE and CYCLE the fence replaced.
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
use super::{
    alter, copy, copy_insert, fence, handed, in_progress, names, nextval, operators, parameters, registry, rewrite,
};
use crate::pg::error::{self, Raise};

static mut PREVIOUS: pg_sys::ProcessUtility_hook_type = None;

/// LIKE's INCLUDING IDENTITY bit (its enum's integer type differs between versions).
#[allow(clippy::unnecessary_cast)]
const CREATE_TABLE_LIKE_IDENTITY: u32 = pg_sys::TableLikeOption::CREATE_TABLE_LIKE_IDENTITY as u32;

pub fn init() {
    // SAFETY: hooks are chained from _PG_init, in the postmaster, once.
    unsafe {
        PREVIOUS = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(process_utility);
    }
}

/// Whether a library loaded after snowflake_id put its utility hook in
/// front of ours (TimescaleDB's runs a COPY into a hypertable itself, and
/// ours never sees it).
pub fn another_hook_runs_first() -> bool {
    // SAFETY: a global set in _PG_init of each library, read only here.
    unsafe { pg_sys::ProcessUtility_hook }.is_some_and(|hook| {
        !std::ptr::fn_addr_eq(hook, process_utility as unsafe extern "C-unwind" fn(_, _, _, _, _, _, _, _))
    })
}

thread_local! {
    static COPIES_SEEN: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A COPY this hook saw, for as long as it runs (through the hooks after
/// ours and PostgreSQL's own): the fence's hint tells it from a COPY a
/// library in front of ours ran itself.
struct CopySeen;

impl CopySeen {
    fn begin() -> CopySeen {
        COPIES_SEEN.with(|n| n.set(n.get() + 1));
        CopySeen
    }
}

impl Drop for CopySeen {
    fn drop(&mut self) {
        COPIES_SEEN.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Whether a COPY that this hook saw is under way.
pub fn copy_seen() -> bool {
    COPIES_SEEN.with(std::cell::Cell::get) > 0
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
    let _copy = (kind == NodeTag::T_CopyStmt).then(CopySeen::begin);
    // SAFETY: as above: a DiscardStmt, by its tag.
    let discard =
        (kind == NodeTag::T_DiscardStmt).then(|| unsafe { (*statement.cast::<pg_sys::DiscardStmt>()).target });
    // Forgotten once it ran (DISCARD ALL fails in a transaction block).
    let forgets = matches!(discard, Some(pg_sys::DiscardMode::DISCARD_ALL | pg_sys::DiscardMode::DISCARD_SEQUENCES));
    // What runs after PostgreSQL's own statement.
    let mut after = After::Nothing;
    // SAFETY: a flag of this backend's transaction state.
    if unsafe { pg_sys::IsTransactionState() } {
        // SAFETY: as above; the tags say which struct the node is. A
        // statement to change is copied first when the tree is read-only
        // (a cached plan's), as standard_ProcessUtility does.
        unsafe {
            match kind {
                NodeTag::T_AlterSeqStmt => check_alter_sequence(statement.cast()),
                NodeTag::T_AlterTableStmt => {
                    check_drop_identity(statement.cast());
                    if read_only_tree {
                        pstmt = pg_sys::copyObjectImpl(pstmt.cast()).cast();
                    }
                    if let Some(defaults) = alter::prepare((*pstmt).utilityStmt.cast(), query_string) {
                        after = After::DropDefaults(defaults);
                    }
                }
                NodeTag::T_TruncateStmt if (*statement.cast::<pg_sys::TruncateStmt>()).restart_seqs => {
                    after = After::Refence(statement.cast());
                }
                NodeTag::T_DropStmt => check_drop_extension(statement.cast()),
                NodeTag::T_DropOwnedStmt => check_drop_owned(statement.cast()),
                NodeTag::T_DefineStmt
                    if operators::creates_operator(statement.cast()) && registry::installed().is_some() =>
                {
                    after = After::CheckOperators(operators::over_sequence_functions());
                }
                NodeTag::T_CreateStmt => {
                    let sources = identity_sources(statement.cast());
                    if !sources.is_empty() {
                        after = After::LiftCopied(statement.cast(), sources);
                    }
                }
                // Run here in place of PostgreSQL's COPY, which it would be
                // next to run only where no other library's hook follows.
                NodeTag::T_CopyStmt => {
                    let plan = copy::plan(statement.cast(), { PREVIOUS }.is_none());
                    if let copy::Plan::Serve(table) | copy::Plan::Insert(table) = plan {
                        if read_only_tree {
                            pstmt = pg_sys::copyObjectImpl(pstmt.cast()).cast();
                        }
                        let stmt = (*pstmt).utilityStmt.cast();
                        let processed = match plan {
                            copy::Plan::Insert(_) => copy_insert::run(stmt, table, query_string, query_env),
                            _ => copy::run(stmt, table, query_string, query_env),
                        };
                        if !qc.is_null() {
                            (*qc).commandTag = pg_sys::CommandTag::CMDTAG_COPY;
                            (*qc).nprocessed = processed;
                        }
                        // As standard_ProcessUtility ends every statement.
                        pg_sys::CommandCounterIncrement();
                        return;
                    }
                }
                NodeTag::T_CallStmt if rewrite::served((*statement.cast::<pg_sys::CallStmt>()).funcexpr.cast()) => {
                    if read_only_tree {
                        pstmt = pg_sys::copyObjectImpl(pstmt.cast()).cast();
                    }
                    let call = (*pstmt).utilityStmt.cast::<pg_sys::CallStmt>();
                    (*call).funcexpr = rewrite::rewrite_expression((*call).funcexpr.cast()).cast();
                }
                // EXECUTE, also under EXPLAIN or CREATE TABLE AS.
                NodeTag::T_ExecuteStmt | NodeTag::T_ExplainStmt | NodeTag::T_CreateTableAsStmt
                    if executes(statement).is_some_and(|e| parameters::names_a_sequence_call((*e).params)) =>
                {
                    if read_only_tree {
                        pstmt = pg_sys::copyObjectImpl(pstmt.cast()).cast();
                    }
                    let execute = executes((*pstmt).utilityStmt).expect("an EXECUTE, as above");
                    parameters::rewrite((*execute).params, query_string);
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
    // SAFETY: the statement just run, in the transaction it ran in.
    unsafe {
        match after {
            After::Nothing => {}
            After::Refence(stmt) => refence_truncated(stmt),
            After::LiftCopied(stmt, sources) => lift_copied_fences(stmt, &sources),
            After::DropDefaults(defaults) => alter::drop_defaults(&defaults),
            After::CheckOperators(before) => operators::refuse_new(&before),
        }
        if pg_sys::IsTransactionState() {
            fence::verify_rewritten();
        }
    }
    if forgets {
        handed::forget();
    }
}

/// The EXECUTE a statement runs: itself, or the one an EXPLAIN or a
/// CREATE TABLE AS wraps, or both.
///
/// # Safety
/// `statement` is a utility statement's node.
unsafe fn executes(statement: *mut pg_sys::Node) -> Option<*mut pg_sys::ExecuteStmt> {
    // SAFETY: the caller's contract; the tags say which struct a node is.
    unsafe {
        // Nested as deep as the grammar allows (EXPLAIN CREATE TABLE ... AS
        // EXECUTE); parse analysis wraps each inner statement in a utility
        // Query.
        let mut node = statement;
        while !node.is_null() {
            node = match (*node).type_ {
                NodeTag::T_ExecuteStmt => return Some(node.cast()),
                NodeTag::T_ExplainStmt => (*node.cast::<pg_sys::ExplainStmt>()).query,
                NodeTag::T_CreateTableAsStmt => (*node.cast::<pg_sys::CreateTableAsStmt>()).query,
                NodeTag::T_Query => (*node.cast::<pg_sys::Query>()).utilityStmt,
                _ => return None,
            };
        }
        None
    }
}

/// What the hook does after PostgreSQL's statement.
enum After {
    Nothing,
    /// Gives the registered sequences a TRUNCATE reset their fences back.
    Refence(*mut pg_sys::TruncateStmt),
    /// Gives identity sequences CREATE TABLE ... LIKE copied (from these
    /// tables) the MAXVALUE their source's fence replaced.
    LiftCopied(*mut pg_sys::CreateStmt, Vec<Oid>),
    /// Drops the defaults a table rewrite gave columns of a domain.
    DropDefaults(alter::DomainDefaults),
    /// Refuses an operator CREATE OPERATOR made over nextval or setval.
    CheckOperators(Vec<String>),
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

/// ALTER SEQUENCE with an option that would open the fence, decided with
/// the sequence locked as ALTER SEQUENCE locks it (after PostgreSQL's own
/// owner check, so that no role queues a lock on another's sequence).
///
/// # Safety
/// `stmt` is an AlterSeqStmt; in a live transaction.
unsafe fn check_alter_sequence(stmt: *mut pg_sys::AlterSeqStmt) {
    // SAFETY: the caller's contract.
    let options = unsafe { option_names((*stmt).options) };
    if options.is_empty() || registry::installed().is_none() {
        return;
    }
    // SAFETY: the caller's contract; PostgreSQL's lookup, retried when the
    // name changes while it waits, with its owner check as callback.
    let seq = unsafe {
        pg_sys::RangeVarGetRelidExtended(
            (*stmt).sequence,
            pg_sys::ShareRowExclusiveLock as _,
            if (*stmt).missing_ok { pg_sys::RVROption::RVR_MISSING_OK } else { 0 },
            Some(owns_relation),
            std::ptr::null_mut(),
        )
    };
    if seq == pg_sys::InvalidOid || registry::lookup(seq).is_none() {
        return;
    }
    // SAFETY: as above; the DefElems of the statement, read as ALTER
    // SEQUENCE reads them (an invalid one raises the error it would).
    let opening = unsafe { opening_option(seq, (*stmt).options) };
    // SAFETY: as above.
    let command = if unsafe { (*stmt).for_identity } { "ALTER TABLE" } else { "ALTER SEQUENCE" };
    if let Some(option) = opening {
        refuse_opening(seq, &option, command);
    }
}

/// The first option of an ALTER SEQUENCE that would change what the fence
/// holds: RESTART; NO MAXVALUE or another MAXVALUE; CYCLE; another type
/// than bigint; another INCREMENT. Options that change nothing (NO CYCLE,
/// AS bigint, the same MAXVALUE or INCREMENT, as ORMs' migrations write
/// them) pass. (INCREMENT counts: a block's size is the registration's, and
/// a negative one would count native values down below the fence.)
///
/// # Safety
/// `list` is the statement's List of DefElem; `seq` is locked.
unsafe fn opening_option(seq: Oid, list: *mut pg_sys::List) -> Option<String> {
    let current = fence::options(seq)?;
    // SAFETY: the caller's contract.
    unsafe {
        for i in 0..list_length(list) {
            let d = (*(*list).elements.add(i)).ptr_value.cast::<pg_sys::DefElem>();
            if (*d).type_ != NodeTag::T_DefElem || (*d).defname.is_null() {
                continue;
            }
            let name = std::ffi::CStr::from_ptr((*d).defname).to_string_lossy().into_owned();
            let opens = match name.as_str() {
                "restart" => true,
                "maxvalue" => (*d).arg.is_null() || pg_sys::defGetInt64(d) != current.max,
                "cycle" => pg_sys::defGetBoolean(d),
                "as" => pg_sys::typenameTypeId(std::ptr::null_mut(), pg_sys::defGetTypeName(d)) != pg_sys::INT8OID,
                "increment" => pg_sys::defGetInt64(d) != current.increment,
                _ => false,
            };
            if opens {
                return Some(name);
            }
        }
    }
    None
}

/// PostgreSQL's own owner check of ALTER SEQUENCE, as a lookup's callback.
#[pg_guard]
unsafe extern "C-unwind" fn owns_relation(
    relation: *const pg_sys::RangeVar,
    rel: Oid,
    old_rel: Oid,
    arg: *mut std::ffi::c_void,
) {
    // SAFETY: PostgreSQL's callback with the lookup's own arguments.
    unsafe { pg_sys::RangeVarCallbackOwnsRelation(relation, rel, old_rel, arg) }
}

/// ALTER TABLE ... DROP IDENTITY of a registered identity column (which
/// drops its sequence, where no event trigger sees it), decided with the
/// table locked as ALTER TABLE locks it and the sequence as its drop will.
///
/// # Safety
/// `stmt` is an AlterTableStmt; in a live transaction.
unsafe fn check_drop_identity(stmt: *mut pg_sys::AlterTableStmt) {
    // SAFETY: the caller's contract.
    unsafe {
        let cmds = (*stmt).cmds;
        let drops: Vec<*mut c_char> = (0..list_length(cmds))
            .map(|i| (*(*cmds).elements.add(i)).ptr_value.cast::<pg_sys::AlterTableCmd>())
            .filter(|cmd| (**cmd).subtype == pg_sys::AlterTableType::AT_DropIdentity && !(**cmd).name.is_null())
            .map(|cmd| (*cmd).name)
            .collect();
        if drops.is_empty() || registry::installed().is_none() {
            return;
        }
        let table = pg_sys::AlterTableLookupRelation(stmt, pg_sys::AlterTableGetLockLevel(cmds));
        if table == pg_sys::InvalidOid {
            return;
        }
        for name in drops {
            let column = pg_sys::get_attnum(table, name);
            if column <= 0 {
                continue;
            }
            let seq = identity_sequence(table, column);
            if seq != pg_sys::InvalidOid {
                pg_sys::LockRelationOid(seq, pg_sys::AccessExclusiveLock as _);
                if registry::lookup(seq).is_some() {
                    refuse_opening(seq, "drop identity", "ALTER TABLE");
                }
            }
        }
    }
}

/// DROP OWNED BY the extension's owner, with no CASCADE, drops the
/// extension: refused as DROP EXTENSION is while sequences are registered.
///
/// # Safety
/// `stmt` is a DropOwnedStmt; in a live transaction.
unsafe fn check_drop_owned(stmt: *mut pg_sys::DropOwnedStmt) {
    // SAFETY: the caller's contract.
    if unsafe { (*stmt).behavior } == pg_sys::DropBehavior::DROP_CASCADE {
        return;
    }
    let Some(installed) = registry::installed() else { return };
    let Some(owner) = registry::extension_owner(installed.extension) else { return };
    // PostgreSQL refuses a role without the owner's privileges first; no
    // lock is taken for it.
    // SAFETY: a catalog lookup in a live transaction.
    if !unsafe { pg_sys::has_privs_of_role(pg_sys::GetUserId(), owner) } {
        return;
    }
    // SAFETY: the caller's contract; role specifications resolved as DROP
    // OWNED resolves them (a missing role is its error).
    let drops_it = unsafe {
        let roles = (*stmt).roles;
        (0..list_length(roles)).any(|i| {
            let role = (*(*roles).elements.add(i)).ptr_value.cast::<pg_sys::RoleSpec>();
            pg_sys::get_rolespec_oid(role, false) == owner
        })
    };
    if drops_it {
        refuse_while_registered(installed.extension, "DROP OWNED ... CASCADE");
    }
}

/// DROP EXTENSION snowflake_id, with no CASCADE, while sequences are
/// registered: refused, as for any object others depend on.
///
/// # Safety
/// `stmt` is a DropStmt; in a live transaction.
unsafe fn check_drop_extension(stmt: *mut pg_sys::DropStmt) {
    // SAFETY: the caller's contract; an extension's name is a String node.
    let ours = unsafe {
        (*stmt).removeType == pg_sys::ObjectType::OBJECT_EXTENSION
            && (*stmt).behavior != pg_sys::DropBehavior::DROP_CASCADE
            && (0..list_length((*stmt).objects)).any(|i| {
                let name = (*(*(*stmt).objects).elements.add(i)).ptr_value.cast::<pg_sys::String>();
                (*name).type_ == NodeTag::T_String && std::ffi::CStr::from_ptr((*name).sval) == c"snowflake_id"
            })
    };
    if !ours {
        return;
    }
    if let Some(installed) = registry::installed() {
        refuse_while_registered(installed.extension, "DROP EXTENSION ... CASCADE");
    }
}

/// Refuses to drop the extension while sequences are registered, decided
/// once registrations in progress have ended (and none can begin).
fn refuse_while_registered(extension: Oid, cascade: &str) {
    in_progress::exclude(extension);
    let registered = registry::registered();
    if registered == 0 {
        return;
    }
    error::new(
        PgSqlErrorCode::ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST,
        "cannot drop extension snowflake_id because sequences are registered with it",
    )
    .set_detail(format!(
        "{registered} registered sequence(s) would keep their fences, and their native values could not continue \
         above the snowflake IDs they handed out."
    ))
    .set_hint(format!(
        "Unregister them first: SELECT snowflake_sequence_unregister(sequence) FROM snowflake_sequences; \
         or use {cascade} to drop it and leave them fenced."
    ))
    .raise(PgLogLevel::ERROR);
}

/// The tables a CREATE TABLE copies identity columns from with LIKE
/// (looked up before the statement runs: it replaces its LIKE clauses by
/// the columns they stand for).
///
/// # Safety
/// `stmt` is a CreateStmt; in a live transaction.
unsafe fn identity_sources(stmt: *mut pg_sys::CreateStmt) -> Vec<Oid> {
    // SAFETY: the caller's contract; name lookups that take no lock (the
    // statement takes its own).
    unsafe {
        let elements = (*stmt).tableElts;
        (0..list_length(elements))
            .map(|i| (*(*elements).elements.add(i)).ptr_value.cast::<pg_sys::TableLikeClause>())
            .filter(|e| (**e).type_ == NodeTag::T_TableLikeClause && (**e).options & CREATE_TABLE_LIKE_IDENTITY != 0)
            .filter_map(|e| relation_oid((*e).relation, pg_sys::NoLock))
            .collect()
    }
}

/// The registered sequences among those a TRUNCATE ... RESTART IDENTITY
/// reset (of the tables it names, their inheritance children, and with
/// CASCADE the tables referencing them) get their fences back. The tables
/// and sequences are locked by the TRUNCATE: the registry is read after.
///
/// # Safety
/// `stmt` is the TruncateStmt just run, in its transaction.
unsafe fn refence_truncated(stmt: *mut pg_sys::TruncateStmt) {
    if registry::registered() == 0 {
        return;
    }
    // SAFETY: the caller's contract; lookups of relations it locked.
    unsafe {
        let mut tables: *mut pg_sys::List = std::ptr::null_mut();
        let relations = (*stmt).relations;
        for i in 0..list_length(relations) {
            let rv = (*(*relations).elements.add(i)).ptr_value.cast::<pg_sys::RangeVar>();
            let Some(table) = relation_oid(rv, pg_sys::NoLock) else { continue };
            tables = if (*rv).inh {
                pg_sys::list_concat_unique_oid(
                    tables,
                    pg_sys::find_all_inheritors(table, pg_sys::NoLock as _, std::ptr::null_mut()),
                )
            } else {
                pg_sys::list_append_unique_oid(tables, table)
            };
        }
        if (*stmt).behavior == pg_sys::DropBehavior::DROP_CASCADE {
            loop {
                let before = list_length(tables);
                tables = pg_sys::list_concat_unique_oid(tables, pg_sys::heap_truncate_find_FKs(tables));
                if list_length(tables) == before {
                    break;
                }
            }
        }
        for i in 0..list_length(tables) {
            let owned = pg_sys::getOwnedSequences((*(*tables).elements.add(i)).oid_value);
            for j in 0..list_length(owned) {
                let seq = (*(*owned).elements.add(j)).oid_value;
                if registry::lookup(seq).is_some() {
                    fence::keep(seq);
                }
            }
        }
    }
}

/// The identity sequences a CREATE TABLE ... LIKE copied from a registered
/// sequence, fence and all, get the MAXVALUE and CYCLE the fence replaced:
/// the copy is not registered, and counts natively.
///
/// # Safety
/// `stmt` is the CreateStmt just run, in its transaction.
unsafe fn lift_copied_fences(stmt: *mut pg_sys::CreateStmt, sources: &[Oid]) {
    if registry::registered() == 0 {
        return;
    }
    // SAFETY: the caller's contract; lookups of relations the statement
    // created or locked.
    unsafe {
        pg_sys::CommandCounterIncrement();
        let Some(table) = relation_oid((*stmt).relation, pg_sys::NoLock) else { return };
        let owned = pg_sys::getOwnedSequences(table);
        for i in 0..list_length(owned) {
            let seq = (*(*owned).elements.add(i)).oid_value;
            let (mut t, mut column) = (pg_sys::InvalidOid, 0);
            let internal = pg_sys::DependencyType::DEPENDENCY_INTERNAL as c_char;
            if !pg_sys::sequenceIsOwned(seq, internal, &mut t, &mut column) {
                continue;
            }
            let name = pg_sys::get_attname(table, column as _, false);
            for source in sources {
                let source_column = pg_sys::get_attnum(*source, name);
                if source_column <= 0 {
                    continue;
                }
                let source_seq = identity_sequence(*source, source_column);
                let Some(entry) = registry::lookup(source_seq) else { continue };
                if fence::options(seq).is_some_and(|o| o.max == entry.fence) {
                    fence::lift(seq, entry.native_max, entry.native_cycle);
                }
            }
        }
    }
}

/// # Safety
/// `list` is NULL or a List.
unsafe fn list_length(list: *mut pg_sys::List) -> usize {
    if list.is_null() {
        0
    } else {
        // SAFETY: the caller's contract.
        unsafe { (*list).length as usize }
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
        for i in 0..list_length(owned) {
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

/// Refuses `command` with `option` on registered `seq` (decided after the
/// caller took the statement's lock).
fn refuse_opening(seq: Oid, option: &str, command: &str) -> ! {
    error::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "cannot {} sequence \"{}\" while it is registered with snowflake_id",
            describe(option),
            nextval::rel_name(seq)
        ),
    )
    .set_detail(format!(
        "{command} with {} would let the sequence hand out its own small values again.",
        option.to_uppercase()
    ))
    .set_hint(format!(
        "Unregister it first: SELECT snowflake_sequence_unregister({});",
        names::literal(&names::qualified(seq))
    ))
    .raise(PgLogLevel::ERROR)
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
