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
//! A table with an inheritance child that has the column already is left
//! alone: ADD COLUMN merges into such a child and keeps its default, which
//! a recursing SET DEFAULT would replace. Its rewrite meets the fence.

use std::ffi::{c_char, CStr};

use pgrx::pg_sys::{self, Node, NodeTag, Oid};
use pgrx::PgBox;

use super::parameters;
use super::statement::relation_oid;

/// Renames sequence function calls in the expressions a table rewrite
/// evaluates, and has a new column keep the default written.
///
/// # Safety
/// `stmt` is an AlterTableStmt the caller owns (copied if it was read-only).
pub unsafe fn prepare(stmt: *mut pg_sys::AlterTableStmt) {
    // SAFETY: the caller's contract; the tags say which struct each node is.
    unsafe {
        let cmds = (*stmt).cmds;
        if cmds.is_null() {
            return;
        }
        let Some(table) = relation_oid((*stmt).relation, pg_sys::NoLock) else { return };
        // Our SET DEFAULTs go first: ALTER TABLE runs every SET DEFAULT in a
        // pass after every ADD COLUMN, in the statement's order, so any SET
        // DEFAULT the statement has of its own still has the last word.
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
                    parameters::rename_calls((*column).raw_default);
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
                    for default in defaults_of(column) {
                        let written = pg_sys::copyObjectImpl((*default).cast()).cast::<Node>();
                        if parameters::rename_calls(*default) {
                            set_defaults =
                                pg_sys::lappend(set_defaults, set_default(name, written, (*cmd).recurse).cast());
                        }
                    }
                }
                _ => {}
            }
        }
        let rebuilt = pg_sys::list_concat(set_defaults, cmds);
        (*stmt).cmds = rebuilt;
    }
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
