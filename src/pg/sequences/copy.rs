//! COPY ... FROM into a table whose omitted key takes a registered
//! sequence's default.
//!
//! COPY evaluates column defaults without the planner: `BeginCopyFrom` builds
//! them with `build_column_default` and `expression_planner`, so the planner
//! hook never sees them and native nextval would meet the fence. Here the
//! utility hook runs such a COPY itself, as `DoCopy` would (the same
//! privilege, row security, read-only and WHERE checks, then `BeginCopyFrom`,
//! `CopyFrom`, `EndCopyFrom`), and between `BeginCopyFrom` and `CopyFrom`
//! puts our functions into the defaults it built. COPY keeps its multi-row
//! inserts: it judged the defaults by the native nextval they started as.
//!
//! Running COPY here skips the utility hooks of the libraries loaded before
//! snowflake_id (they run after ours, and some, pgaudit's for one, must see
//! every statement). So this is done only where snowflake_id's hook is the
//! last before PostgreSQL's own; elsewhere such a COPY is refused before it
//! reads a row, with a hint to list snowflake_id first in
//! shared_preload_libraries. Except into a TimescaleDB hypertable, whose
//! COPY TimescaleDB's hook runs itself, in either order: that one is read
//! here and its rows inserted through an INSERT ([`super::copy_insert`]).

use std::ffi::{c_char, CStr};

use pgrx::pg_sys::{self, Node};
use pgrx::prelude::*;
use pgrx::{PgLogLevel, PgTupleDesc};

use super::statement::{option_names, relation_oid};
use super::{hypertable, parameters, rewrite};
use crate::pg::error::{self, Raise};
use crate::pg::ffi;

/// What the utility hook is to do with a COPY.
pub enum Plan {
    /// Nothing of ours: PostgreSQL runs it.
    Native,
    /// Run it here, into this table (locked): it fills a registered default.
    Serve(pg_sys::Oid),
    /// Read it here and insert the rows through an INSERT, into this table
    /// (locked), whose COPY another library's hook would run itself
    /// ([`super::copy_insert`]).
    Insert(pg_sys::Oid),
}

/// Whether `stmt` is a COPY FROM into a table that fills a default calling
/// a sequence function our functions serve, or whose WHERE clause calls
/// one. Where this hook cannot run it (`last_hook` is false: another
/// library's utility hook runs after ours), PostgreSQL runs it, and it is
/// refused only where the native calls would be wrong (a registered
/// sequence's, [`rewrite::needs_ours`]).
///
/// # Safety
/// `stmt` is a CopyStmt; called in a live transaction.
pub unsafe fn plan(stmt: *mut pg_sys::CopyStmt, last_hook: bool) -> Plan {
    // SAFETY: the caller's contract.
    unsafe {
        if !(*stmt).is_from || (*stmt).relation.is_null() {
            return Plan::Native;
        }
        // What standard_ProcessUtility checks before any COPY FROM.
        if pg_sys::XactReadOnly || ffi::in_parallel_mode() {
            pg_sys::PreventCommandIfParallelMode(c"COPY".as_ptr());
            pg_sys::PreventCommandDuringRecovery(c"COPY".as_ptr());
        }
        // The lock COPY FROM takes, taken a little earlier.
        let Some(table) = relation_oid((*stmt).relation, pg_sys::RowExclusiveLock) else { return Plan::Native };
        let filtered = parameters::names_a_sequence_call_in((*stmt).whereClause) && rewrite::routing();
        let test = if last_hook { rewrite::served } else { rewrite::needs_ours };
        let rel = pg_sys::table_open(table, pg_sys::NoLock as _);
        let column = served_default(rel, (*stmt).attlist, takes_default_option((*stmt).options), test);
        let filter_needs_ours = filtered && !last_hook && {
            // Analysed as run() would, in a parse state of its own.
            let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
            let nsitem = pg_sys::addRangeTableEntryForRelation(
                pstate,
                rel,
                pg_sys::RowExclusiveLock as _,
                std::ptr::null_mut(),
                false,
                false,
            );
            let clause = where_clause(pstate, nsitem, rel, pg_sys::copyObjectImpl((*stmt).whereClause.cast()).cast());
            pg_sys::free_parsestate(pstate);
            rewrite::needs_ours(clause)
        };
        let by_insert = !last_hook && (column.is_some() || filter_needs_ours) && hypertable::is_hypertable(rel);
        pg_sys::table_close(rel, pg_sys::NoLock as _);
        match (column, last_hook) {
            (_, false) if by_insert => Plan::Insert(table),
            (Some(column), false) => refuse(
                table,
                &format!("cannot fill column \"{column}\""),
                ", or name the column in COPY and fill it with snowflake_sequence_nextval()",
            ),
            (None, false) if filter_needs_ours => refuse(table, "cannot filter with a sequence function", ""),
            (None, _) if !filtered => Plan::Native,
            (_, false) => Plan::Native,
            (_, true) => Plan::Serve(table),
        }
    }
}

/// The first column this COPY may fill with its default whose default
/// passes `test` ([`rewrite::served`] or [`rewrite::needs_ours`]): a column
/// left out of `attlist`, or any column when the DEFAULT option lets the
/// data ask for its default.
///
/// # Safety
/// `rel` is open; `attlist` is COPY's list of column names, or NULL.
unsafe fn served_default(
    rel: pg_sys::Relation,
    attlist: *mut pg_sys::List,
    any_column: bool,
    test: unsafe fn(*mut Node) -> bool,
) -> Option<String> {
    if attlist.is_null() && !any_column {
        return None;
    }
    // SAFETY: the caller's contract; catalog lookups and the relcache entry.
    unsafe {
        let desc = (*rel).rd_att;
        let listed = if any_column { std::ptr::null_mut() } else { pg_sys::CopyGetAttnums(desc, rel, attlist) };
        for (i, att) in PgTupleDesc::from_pg_unchecked(desc).iter().enumerate() {
            let attnum = (i + 1) as i16;
            if att.attisdropped || att.attgenerated != 0 || pg_sys::list_member_int(listed, attnum.into()) {
                continue;
            }
            // An identity default as built for this table (a partition's
            // is its parent's sequence), or the default stored.
            let default = pg_sys::build_column_default(rel, attnum.into());
            if !default.is_null() && test(default) {
                return Some(CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy().into_owned());
            }
        }
    }
    None
}

/// Whether COPY's options include DEFAULT (PostgreSQL 16 and later): a
/// marker in the data that asks for the column's default.
///
/// # Safety
/// `options` is NULL or a List of DefElem.
unsafe fn takes_default_option(options: *mut pg_sys::List) -> bool {
    // SAFETY: the caller's contract.
    unsafe { option_names(options) }.iter().any(|o| o == "default")
}

fn refuse(table: pg_sys::Oid, what: &str, or: &str) -> ! {
    let table = super::nextval::rel_name(table);
    error::new(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, format!("COPY FROM into table \"{table}\" {what} here"))
        .set_detail(
            "It calls a sequence registered with snowflake_id. snowflake_id runs such a COPY itself, which it \
         does only when no other library's utility hook would run after its own: a library listed before \
         snowflake_id in shared_preload_libraries has one.",
        )
        .set_hint(format!("List snowflake_id first in shared_preload_libraries and restart{or}."))
        .raise(PgLogLevel::ERROR)
}

/// Runs COPY FROM as `DoCopy` does, with our functions in the defaults.
/// Returns the number of rows copied.
///
/// # Safety
/// `stmt` is a CopyStmt that [`plan`] said to serve into `table`, owned by the caller
/// (copied if the statement tree was read-only); a live transaction.
pub unsafe fn run(
    stmt: *mut pg_sys::CopyStmt,
    table: pg_sys::Oid,
    query_string: *const c_char,
    query_env: *mut pg_sys::QueryEnvironment,
) -> u64 {
    // SAFETY: the caller's contract; PostgreSQL's own COPY steps, in DoCopy's order.
    unsafe {
        let copy = check(stmt, table, query_string, query_env).begin(stmt);
        let processed = pg_sys::CopyFrom(copy.cstate);
        copy.close();
        processed
    }
}

/// A COPY FROM begun as `DoCopy` begins it, with our functions in the defaults.
pub struct Open {
    pub pstate: *mut pg_sys::ParseState,
    pub rel: pg_sys::Relation,
    pub cstate: pg_sys::CopyFromState,
}

impl Open {
    /// # Safety
    /// As for [`open`], once the rows are read.
    pub unsafe fn close(self) {
        // SAFETY: the caller's contract.
        unsafe {
            pg_sys::EndCopyFrom(self.cstate);
            pg_sys::table_close(self.rel, pg_sys::NoLock as _);
            pg_sys::free_parsestate(self.pstate);
        }
    }
}

/// A COPY FROM that passed DoCopy's checks, not begun: nothing has been
/// said to the client yet, so an error here is a plain one.
pub struct Checked {
    pub pstate: *mut pg_sys::ParseState,
    pub rel: pg_sys::Relation,
    /// The analysed WHERE clause (an implicit-AND list), or NULL.
    pub where_clause: *mut Node,
}

impl Checked {
    /// `BeginCopyFrom` (which tells a client sending the data to start),
    /// and our functions put into the defaults it built.
    ///
    /// # Safety
    /// `stmt` is the CopyStmt [`check`] checked.
    pub unsafe fn begin(self, stmt: *mut pg_sys::CopyStmt) -> Open {
        // SAFETY: the caller's contract.
        unsafe {
            let cstate = begin(self.pstate, self.rel, self.where_clause, stmt);
            serve_defaults(cstate);
            Open { pstate: self.pstate, rel: self.rel, cstate }
        }
    }
}

/// DoCopy's checks (privileges, row security, read-only), and the WHERE
/// clause analysed.
///
/// # Safety
/// As for [`run`].
pub unsafe fn check(
    stmt: *mut pg_sys::CopyStmt,
    table: pg_sys::Oid,
    query_string: *const c_char,
    query_env: *mut pg_sys::QueryEnvironment,
) -> Checked {
    // SAFETY: the caller's contract; PostgreSQL's own COPY steps, in DoCopy's order.
    unsafe {
        let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
        (*pstate).p_sourcetext = query_string;
        (*pstate).p_queryEnv = query_env;

        if !(*stmt).filename.is_null() {
            check_file_privilege((*stmt).is_program);
        }
        let lockmode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
        // The table plan() judged, by its OID: no second name lookup.
        let rel = pg_sys::table_open(table, lockmode);
        let nsitem = pg_sys::addRangeTableEntryForRelation(pstate, rel, lockmode, std::ptr::null_mut(), false, false);
        // INSERT in place of the SELECT a range table entry starts with; the
        // WHERE clause adds SELECT on the columns it reads.
        require_insert(nsitem);
        let where_clause = if (*stmt).whereClause.is_null() {
            std::ptr::null_mut()
        } else {
            rewrite::rewrite_expression(where_clause(pstate, nsitem, rel, (*stmt).whereClause))
        };
        check_insert_privilege(pstate, nsitem, rel, (*stmt).attlist);
        if pg_sys::check_enable_rls((*rel).rd_id, pg_sys::InvalidOid, false)
            == pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32
        {
            error::new(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "COPY FROM not supported with row-level security",
            )
            .set_hint("Use INSERT statements instead.")
            .raise(PgLogLevel::ERROR);
        }
        if pg_sys::XactReadOnly && !is_local_temp(rel) {
            pg_sys::PreventCommandIfReadOnly(c"COPY FROM".as_ptr());
        }
        Checked { pstate, rel, where_clause }
    }
}

/// # Safety
/// In a live transaction.
unsafe fn check_file_privilege(program: bool) {
    let (role, what) = if program {
        (pg_sys::ROLE_PG_EXECUTE_SERVER_PROGRAM, "to or from an external program")
    } else {
        (pg_sys::ROLE_PG_READ_SERVER_FILES, "from a file")
    };
    // SAFETY: the caller's contract; a catalog lookup.
    if unsafe { pg_sys::has_privs_of_role(pg_sys::GetUserId(), pg_sys::Oid::from(role)) } {
        return;
    }
    let role_name = if program { "pg_execute_server_program" } else { "pg_read_server_files" };
    error::new(PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE, format!("permission denied to COPY {what}"))
        .set_detail(format!("Only roles with privileges of the \"{role_name}\" role may COPY {what}."))
        .set_hint("Anyone can COPY to stdout or from stdin. psql's \\copy command also works for anyone.")
        .raise(PgLogLevel::ERROR);
}

/// COPY's WHERE clause, analysed as DoCopy analyses it.
///
/// # Safety
/// `pstate` and `nsitem` are this COPY's; `rel` is open; `raw` a raw expression.
unsafe fn where_clause(
    pstate: *mut pg_sys::ParseState,
    nsitem: *mut pg_sys::ParseNamespaceItem,
    rel: pg_sys::Relation,
    raw: *mut Node,
) -> *mut Node {
    // SAFETY: the caller's contract; the parser's and optimizer's own steps.
    unsafe {
        pg_sys::addNSItemToQuery(pstate, nsitem, false, true, true);
        let mut clause = pg_sys::transformExpr(pstate, raw, pg_sys::ParseExprKind::EXPR_KIND_COPY_WHERE);
        clause = pg_sys::coerce_to_boolean(pstate, clause, c"WHERE".as_ptr());
        pg_sys::assign_expr_collations(pstate, clause);
        let mut attrs: *mut pg_sys::Bitmapset = std::ptr::null_mut();
        pg_sys::pull_varattnos(clause, 1, &mut attrs);
        let offset = pg_sys::FirstLowInvalidHeapAttributeNumber;
        let whole_row = pg_sys::bms_is_member(-offset, attrs);
        for (i, att) in PgTupleDesc::from_pg_unchecked((*rel).rd_att).iter().enumerate() {
            let attnum = i as i32 + 1;
            if att.attgenerated != 0 && (whole_row || pg_sys::bms_is_member(attnum - offset, attrs)) {
                let name = CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy();
                error::new(
                    PgSqlErrorCode::ERRCODE_INVALID_COLUMN_REFERENCE,
                    "generated columns are not supported in COPY FROM WHERE conditions",
                )
                .set_detail(format!("Column \"{name}\" is a generated column."))
                .raise(PgLogLevel::ERROR);
            }
        }
        clause = pg_sys::eval_const_expressions(std::ptr::null_mut(), clause);
        clause = pg_sys::canonicalize_qual(clause.cast(), false).cast();
        pg_sys::make_ands_implicit(clause.cast()).cast()
    }
}

/// INSERT on the columns this COPY fills (and SELECT on those its WHERE
/// clause reads), checked as DoCopy checks it.
///
/// # Safety
/// As for [`where_clause`]; `attlist` is COPY's list of column names.
unsafe fn check_insert_privilege(
    pstate: *mut pg_sys::ParseState,
    nsitem: *mut pg_sys::ParseNamespaceItem,
    rel: pg_sys::Relation,
    attlist: *mut pg_sys::List,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let attnums = pg_sys::CopyGetAttnums((*rel).rd_att, rel, attlist);
        let offset = pg_sys::FirstLowInvalidHeapAttributeNumber;
        #[cfg(feature = "pg15")]
        {
            let rte = (*nsitem).p_rte;
            for i in 0..list_length(attnums) {
                let attno = (*(*attnums).elements.add(i)).int_value - offset;
                (*rte).insertedCols = pg_sys::bms_add_member((*rte).insertedCols, attno);
            }
            pg_sys::ExecCheckRTPerms((*pstate).p_rtable, true);
        }
        #[cfg(not(feature = "pg15"))]
        {
            let perminfo = (*nsitem).p_perminfo;
            for i in 0..list_length(attnums) {
                let attno = (*(*attnums).elements.add(i)).int_value - offset;
                (*perminfo).insertedCols = pg_sys::bms_add_member((*perminfo).insertedCols, attno);
            }
            let infos = pg_sys::lappend(std::ptr::null_mut(), perminfo.cast());
            pg_sys::ExecCheckPermissions((*pstate).p_rtable, infos, true);
        }
    }
}

/// # Safety
/// `nsitem` is this COPY's range table entry.
unsafe fn require_insert(nsitem: *mut pg_sys::ParseNamespaceItem) {
    // SAFETY: the caller's contract.
    unsafe {
        #[cfg(feature = "pg15")]
        {
            (*(*nsitem).p_rte).requiredPerms = pg_sys::ACL_INSERT as _;
        }
        #[cfg(not(feature = "pg15"))]
        {
            (*(*nsitem).p_perminfo).requiredPerms = pg_sys::ACL_INSERT as _;
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

/// # Safety
/// `rel` is open.
unsafe fn is_local_temp(rel: pg_sys::Relation) -> bool {
    // SAFETY: the caller's contract.
    unsafe { (*rel).rd_islocaltemp }
}

/// # Safety
/// As for [`run`].
unsafe fn begin(
    pstate: *mut pg_sys::ParseState,
    rel: pg_sys::Relation,
    where_clause: *mut Node,
    stmt: *mut pg_sys::CopyStmt,
) -> pg_sys::CopyFromState {
    // SAFETY: the caller's contract.
    unsafe {
        pg_sys::BeginCopyFrom(
            pstate,
            rel,
            where_clause,
            (*stmt).filename,
            (*stmt).is_program,
            None,
            (*stmt).attlist,
            (*stmt).options,
        )
    }
}

/// Puts our functions into the defaults `BeginCopyFrom` built: each default
/// whose expression calls a registered sequence is built again from the
/// rewritten expression, in COPY's own memory context. COPY decided on
/// multi-row inserts by the native nextval these started as; ours, like
/// it, only hands out IDs and reads no table, so that decision holds.
///
/// # Safety
/// `cstate` is what BeginCopyFrom returned, before CopyFrom.
unsafe fn serve_defaults(cstate: pg_sys::CopyFromState) {
    // SAFETY: the caller's contract. Before PostgreSQL 16 the defaults are
    // kept in the order of defmap, one per default to fill; since, one slot
    // per column, NULL where there is none and unset for dropped columns.
    unsafe {
        let old = pg_sys::MemoryContextSwitchTo((*cstate).copycontext);
        #[cfg(feature = "pg15")]
        let slots: Vec<usize> = (0..(*cstate).num_defaults as usize).collect();
        #[cfg(not(feature = "pg15"))]
        let slots: Vec<usize> = PgTupleDesc::from_pg_unchecked((*(*cstate).rel).rd_att)
            .iter()
            .enumerate()
            .filter_map(|(i, att)| (!att.attisdropped).then_some(i))
            .collect();
        for i in slots {
            let state = (*cstate).defexprs.add(i);
            if (*state).is_null() {
                continue;
            }
            let expr = (**state).expr;
            let served = rewrite::rewrite_expression(expr.cast());
            if served != expr.cast() {
                *state = pg_sys::ExecInitExpr(served.cast(), std::ptr::null_mut());
            }
        }
        pg_sys::MemoryContextSwitchTo(old);
    }
}
