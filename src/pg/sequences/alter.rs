//! Table rewrites that evaluate a sequence function: `ALTER TABLE ... ADD
//! COLUMN ... DEFAULT nextval(...)` fills the rows already there, and `ALTER
//! COLUMN ... TYPE ... USING nextval(...)` computes each row's new value.
//! ALTER TABLE evaluates both with expression_planner, never the planner, so
//! the utility hook renames such calls in the statement to our functions,
//! which serve a registered sequence and call the native function for any
//! other ([`super::parameters`]). ALTER TABLE also stores a new column's
//! default: a `SET DEFAULT` of the default the DBA wrote joins the same
//! statement (ALTER TABLE runs it after the column is added and before the
//! rows are filled with what ADD COLUMN decided), so the catalog (and `\d`,
//! and pg_dump) keeps `nextval(...)`, and a SET DEFAULT of the statement's
//! own still has the last word.
//!
//! A column added with no default of its own, of a domain whose default
//! calls a sequence function, is filled with the domain's default: it is
//! given that default, renamed, for the rewrite, and a `DROP DEFAULT` after
//! the statement ([`drop_defaults`]; within it, ALTER TABLE would drop
//! defaults before it adds columns) leaves the column taking its domain's
//! default, unless the statement sets one of its own.
//!
//! The calls renamed are those parse analysis resolves to native sequence
//! functions ([`super::parameters`]), analysed as ALTER TABLE will analyse
//! them, on the table locked as ALTER TABLE locks it.
//!
//! A table with an inheritance child that has the column already is left
//! alone: ADD COLUMN merges into such a child and keeps its default, which
//! a recursing SET DEFAULT would replace. Its rewrite meets the fence.

use std::ffi::{c_char, CStr};

use pgrx::pg_sys::{self, Node, NodeTag, Oid};
use pgrx::PgBox;

use pgrx::prelude::*;

use super::{names, parameters, privileged, rewrite};

/// Columns given their domain's default for a table rewrite, whose default
/// is to be dropped after the statement.
pub struct DomainDefaults {
    table: Oid,
    /// Each column's name, and whether the statement recursed to children.
    columns: Vec<(String, bool)>,
}

/// Renames sequence function calls in the expressions a table rewrite
/// evaluates, and has a new column keep the default written; returns the
/// defaults to drop after the statement.
///
/// # Safety
/// `stmt` is an AlterTableStmt the caller owns (copied if it was read-only),
/// of `query_string`; in a live transaction.
pub unsafe fn prepare(stmt: *mut pg_sys::AlterTableStmt, query_string: *const c_char) -> Option<DomainDefaults> {
    // SAFETY: the caller's contract; the tags say which struct each node is.
    unsafe {
        let cmds = (*stmt).cmds;
        if cmds.is_null() || !evaluates_expressions(cmds) || !rewrite::routing() {
            return None;
        }
        // PostgreSQL's own lookup and lock, with its checks; taken again by
        // ALTER TABLE, which then holds it already.
        let table = pg_sys::AlterTableLookupRelation(stmt, pg_sys::AlterTableGetLockLevel(cmds));
        if table == pg_sys::InvalidOid {
            return None;
        }
        let mut domain_defaults = DomainDefaults { table, columns: Vec::new() };
        let rel = pg_sys::table_open(table, pg_sys::NoLock as _);
        // As ALTER TABLE analyses a new column's default, and a USING clause.
        let default = |node: *mut Node| {
            let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
            (*pstate).p_sourcetext = query_string;
            pg_sys::transformExpr(pstate, node, pg_sys::ParseExprKind::EXPR_KIND_COLUMN_DEFAULT)
        };
        let using = |node: *mut Node| {
            let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
            (*pstate).p_sourcetext = query_string;
            let nsitem = pg_sys::addRangeTableEntryForRelation(
                pstate,
                rel,
                pg_sys::AccessShareLock as _,
                std::ptr::null_mut(),
                false,
                true,
            );
            pg_sys::addNSItemToQuery(pstate, nsitem, false, true, true);
            pg_sys::transformExpr(pstate, node, pg_sys::ParseExprKind::EXPR_KIND_ALTER_COL_TRANSFORM)
        };
        // Our SET and DROP DEFAULTs go first: ALTER TABLE runs every one in
        // a pass after every ADD COLUMN, in the statement's order, so any of
        // the statement's own still has the last word.
        let mut set_defaults: *mut pg_sys::List = std::ptr::null_mut();
        // A column an earlier ADD COLUMN of this statement adds: a second one
        // fails or (IF NOT EXISTS) is skipped, natively, and is left so.
        let mut added: Vec<&CStr> = Vec::new();
        for i in 0..(*cmds).length as usize {
            let cmd = (*(*cmds).elements.add(i)).ptr_value.cast::<pg_sys::AlterTableCmd>();
            let def = (*cmd).def;
            if def.is_null() || (*def).type_ != NodeTag::T_ColumnDef {
                continue;
            }
            let column = def.cast::<pg_sys::ColumnDef>();
            match (*cmd).subtype {
                pg_sys::AlterTableType::AT_AlterColumnType => {
                    parameters::rename_calls((*column).raw_default, &using);
                }
                pg_sys::AlterTableType::AT_AddColumn => {
                    let name = (*column).colname;
                    if name.is_null() {
                        continue;
                    }
                    let first = !added.contains(&CStr::from_ptr(name));
                    added.push(CStr::from_ptr(name));
                    if !first || !added_everywhere(table, name) {
                        continue;
                    }
                    let defaults = defaults_of(column);
                    for default_slot in &defaults {
                        let written = pg_sys::copyObjectImpl((**default_slot).cast()).cast::<Node>();
                        if parameters::rename_calls(**default_slot, &default) {
                            set_defaults =
                                pg_sys::lappend(set_defaults, set_default(name, written, (*cmd).recurse).cast());
                        }
                    }
                    if defaults.is_empty() {
                        if let Some(raw) = domain_default(column) {
                            if parameters::rename_calls(raw, &default) {
                                add_default(column, raw);
                                if !sets_default(cmds, CStr::from_ptr(name)) {
                                    let name = CStr::from_ptr(name).to_string_lossy().into_owned();
                                    domain_defaults.columns.push((name, (*cmd).recurse));
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        pg_sys::table_close(rel, pg_sys::NoLock as _);
        let rebuilt = pg_sys::list_concat(set_defaults, cmds);
        (*stmt).cmds = rebuilt;
        (!domain_defaults.columns.is_empty()).then_some(domain_defaults)
    }
}

/// Drops the defaults [`prepare`] gave columns of a domain, after the
/// statement: an ALTER TABLE of the current user's, as the one it follows.
pub fn drop_defaults(defaults: &DomainDefaults) {
    let table = names::qualified(defaults.table);
    for (column, recurse) in &defaults.columns {
        let only = if *recurse { "" } else { "ONLY " };
        let Ok(column_c) = std::ffi::CString::new(column.as_str()) else { continue };
        // SAFETY: quote_identifier returns its argument or a palloc'd copy.
        let quoted = unsafe { CStr::from_ptr(pg_sys::quote_identifier(column_c.as_ptr())) }.to_string_lossy();
        Spi::run(&format!("ALTER TABLE {only}{table} ALTER COLUMN {quoted} DROP DEFAULT"))
            .unwrap_or_else(|e| pgrx::error!("the default of column {quoted} cannot be dropped: {e}"));
    }
}

/// Whether the statement sets or drops column `name`'s default itself.
///
/// # Safety
/// `cmds` is a List of AlterTableCmd.
unsafe fn sets_default(cmds: *mut pg_sys::List, name: &CStr) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        (0..(*cmds).length as usize).any(|i| {
            let cmd = (*(*cmds).elements.add(i)).ptr_value.cast::<pg_sys::AlterTableCmd>();
            (*cmd).subtype == pg_sys::AlterTableType::AT_ColumnDefault
                && !(*cmd).name.is_null()
                && CStr::from_ptr((*cmd).name) == name
        })
    }
}

/// Whether any subcommand evaluates an expression for the rows: ADD COLUMN
/// (with a default, its own or its domain's) or ALTER COLUMN ... TYPE.
///
/// # Safety
/// `cmds` is a List of AlterTableCmd.
unsafe fn evaluates_expressions(cmds: *mut pg_sys::List) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        (0..(*cmds).length as usize).any(|i| {
            let cmd = (*(*cmds).elements.add(i)).ptr_value.cast::<pg_sys::AlterTableCmd>();
            matches!((*cmd).subtype, pg_sys::AlterTableType::AT_AddColumn | pg_sys::AlterTableType::AT_AlterColumnType)
        })
    }
}

/// The default of the domain a new column is declared with, as a raw
/// expression, where that default calls a sequence function our functions
/// serve. Deparsed with only pg_catalog on the search path, so that every
/// name in it is qualified and resolves as it did.
///
/// # Safety
/// `column` is a ColumnDef; in a live transaction.
unsafe fn domain_default(column: *mut pg_sys::ColumnDef) -> Option<*mut Node> {
    // SAFETY: the caller's contract; catalog lookups (an unknown type is
    // the error ALTER TABLE would give).
    unsafe {
        if (*column).typeName.is_null() {
            return None;
        }
        let type_oid = pg_sys::typenameTypeId(std::ptr::null_mut(), (*column).typeName);
        if pg_sys::get_typtype(type_oid) != pg_sys::TYPTYPE_DOMAIN as c_char {
            return None;
        }
        let cooked = pg_sys::get_typdefault(type_oid);
        if cooked.is_null() || !rewrite::served(cooked) {
            return None;
        }
        let text = privileged::run(|| {
            CStr::from_ptr(pg_sys::deparse_expression(cooked, std::ptr::null_mut(), false, false))
                .to_string_lossy()
                .into_owned()
        });
        parameters::parse_expression(&text)
    }
}

/// Gives a new column `raw` as its default, as the parser gives one.
///
/// # Safety
/// `column` is a ColumnDef; `raw` a raw expression.
unsafe fn add_default(column: *mut pg_sys::ColumnDef, raw: *mut Node) {
    let mut constraint = PgBox::<pg_sys::Constraint>::alloc_node(NodeTag::T_Constraint);
    constraint.contype = pg_sys::ConstrType::CONSTR_DEFAULT;
    constraint.raw_expr = raw;
    constraint.location = -1;
    // SAFETY: the caller's contract.
    unsafe { (*column).constraints = pg_sys::lappend((*column).constraints, constraint.into_pg().cast()) };
}

/// Whether ADD COLUMN `name` adds a column to `table` and to each of its
/// inheritance children, none of which has it yet (IF NOT EXISTS skips a
/// column that exists; a child's own is merged, with its default).
///
/// # Safety
/// In a live transaction; `name` is a C string.
unsafe fn added_everywhere(table: Oid, name: *mut c_char) -> bool {
    // SAFETY: the caller's contract; catalog lookups (no locks: ALTER TABLE
    // takes its own, and a child added meanwhile only meets the fence).
    unsafe {
        let tables = pg_sys::find_all_inheritors(table, pg_sys::NoLock as _, std::ptr::null_mut());
        (0..(*tables).length as usize).all(|i| {
            let t = (*(*tables).elements.add(i)).oid_value;
            pg_sys::get_attnum(t, name) == pg_sys::InvalidAttrNumber as i16
        })
    }
}

/// `ALTER COLUMN name SET DEFAULT default`, as the parser builds it.
///
/// # Safety
/// `name` is a C string and `default` a raw expression, both living through the statement.
unsafe fn set_default(name: *mut c_char, default: *mut Node, recurse: bool) -> *mut pg_sys::AlterTableCmd {
    let mut cmd = PgBox::<pg_sys::AlterTableCmd>::alloc_node(NodeTag::T_AlterTableCmd);
    cmd.subtype = pg_sys::AlterTableType::AT_ColumnDefault;
    cmd.name = name;
    cmd.def = default;
    cmd.recurse = recurse;
    cmd.behavior = pg_sys::DropBehavior::DROP_RESTRICT;
    cmd.into_pg()
}

/// Where a new column's default may be, raw: its own field, or (as the
/// parser leaves it) a DEFAULT constraint among its constraints.
///
/// # Safety
/// `column` is a ColumnDef.
unsafe fn defaults_of(column: *mut pg_sys::ColumnDef) -> Vec<*mut *mut Node> {
    // SAFETY: the caller's contract.
    unsafe {
        let mut found = Vec::new();
        if !(*column).raw_default.is_null() {
            found.push(&raw mut (*column).raw_default);
        }
        let constraints = (*column).constraints;
        if !constraints.is_null() {
            for i in 0..(*constraints).length as usize {
                let c = (*(*constraints).elements.add(i)).ptr_value.cast::<pg_sys::Constraint>();
                if (*c).type_ == NodeTag::T_Constraint
                    && (*c).contype == pg_sys::ConstrType::CONSTR_DEFAULT
                    && !(*c).raw_expr.is_null()
                {
                    found.push(&raw mut (*c).raw_expr);
                }
            }
        }
        found
    }
}
