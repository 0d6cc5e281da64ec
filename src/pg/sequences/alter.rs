//! Table rewrites that evaluate a sequence function: `ALTER TABLE ... ADD
//! COLUMN ... DEFAULT nextval(...)` fills the rows already there, and `ALTER
//! COLUMN ... TYPE ... USING nextval(...)` computes each row's new value.
//! ALTER TABLE evaluates both with expression_planner, never the planner, so
//! the utility hook renames such calls in the statement to our functions,
//! which serve a registered sequence and call the native function for any
//! other ([`super::parameters`]). ALTER TABLE also stores a new column's
//! default: the default the DBA wrote is put back once the rows are filled,
//! so the catalog (and `\d`, and pg_dump) keeps `nextval(...)`.

use std::ffi::c_char;

use pgrx::pg_sys::{self, Node, NodeTag, Oid};
use pgrx::PgBox;

use super::parameters;

/// A new column's default to put back after the statement.
pub struct Restore {
    table: Oid,
    column: *mut c_char,
    /// The default as written (a raw expression), before renaming.
    default: *mut Node,
    recurse: bool,
}

/// Renames sequence function calls in the expressions a table rewrite
/// evaluates; returns the defaults to put back after the statement.
///
/// # Safety
/// `stmt` is an AlterTableStmt the caller owns (copied if it was read-only).
pub unsafe fn prepare(stmt: *mut pg_sys::AlterTableStmt) -> Vec<Restore> {
    let mut restores = Vec::new();
    // SAFETY: the caller's contract; the tags say which struct each node is.
    unsafe {
        let cmds = (*stmt).cmds;
        if cmds.is_null() || (*stmt).relation.is_null() {
            return restores;
        }
        let table = pg_sys::RangeVarGetRelidExtended(
            (*stmt).relation,
            pg_sys::NoLock as _,
            pg_sys::RVROption::RVR_MISSING_OK,
            None,
            std::ptr::null_mut(),
        );
        if table == pg_sys::InvalidOid {
            return restores;
        }
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
                    // A column that exists is not added (IF NOT EXISTS), nor its default set.
                    let name = (*column).colname;
                    if name.is_null() || pg_sys::get_attnum(table, name) != pg_sys::InvalidAttrNumber as i16 {
                        continue;
                    }
                    for default in defaults_of(column) {
                        let written = pg_sys::copyObjectImpl((*default).cast()).cast::<Node>();
                        if parameters::rename_calls(*default) {
                            restores.push(Restore { table, column: name, default: written, recurse: (*(*stmt).relation).inh });
                        }
                    }
                }
                _ => {}
            }
        }
    }
    restores
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

/// Puts back the defaults the statement stored renamed, as `ALTER TABLE
/// ... ALTER COLUMN ... SET DEFAULT` would (on the tables it reached).
///
/// # Safety
/// After the statement that [`prepare`] was for, in its transaction.
pub unsafe fn restore(restores: Vec<Restore>) {
    for r in restores {
        // SAFETY: the caller's contract; a node built as the parser builds it.
        unsafe {
            let mut cmd = PgBox::<pg_sys::AlterTableCmd>::alloc_node(NodeTag::T_AlterTableCmd);
            cmd.subtype = pg_sys::AlterTableType::AT_ColumnDefault;
            cmd.name = r.column;
            cmd.def = r.default;
            let cmds = pg_sys::lappend(std::ptr::null_mut(), cmd.into_pg().cast());
            pg_sys::AlterTableInternal(r.table, cmds, r.recurse);
            pg_sys::CommandCounterIncrement();
        }
    }
}
