//! COPY ... FROM into a TimescaleDB hypertable whose omitted key takes a
//! registered sequence's default.
//!
//! TimescaleDB's utility hook runs a COPY into a hypertable itself (its own
//! copy of PostgreSQL's, which routes each row to its chunk) and calls no
//! hook after its own: with snowflake_id listed first in
//! shared_preload_libraries, ours never sees that COPY, whose defaults meet
//! the fence (the log hook's hint says to list snowflake_id after
//! timescaledb). Listed after it, our hook runs first and serves such a
//! COPY here: PostgreSQL's COPY reads and converts the rows
//! ([`super::copy::check`]), and they go into the hypertable through INSERTs
//! of the columns COPY names, [`BATCH`] rows at most each, which TimescaleDB
//! routes to chunks as for any INSERT; the INSERT fills the omitted columns'
//! defaults, the registered key's with our functions as for any INSERT.
//! What differs from a COPY (docs/timescaledb.md): statement-level triggers
//! fire per batch, INSERT rules apply, FREEZE does nothing, the utility
//! hooks of libraries loaded before snowflake_id do not see the COPY, and
//! an error while inserting names the INSERT rather than COPY's line.
//! ON_ERROR and REJECT_LIMIT are refused, and so is a WHERE clause that
//! reads a column the data does not hold (it would see no default there).
//!
//! Other libraries whose hook runs COPY itself (Citus) are not told apart
//! here: such a COPY is refused as [`super::copy`] refuses it.

use std::ffi::{CStr, CString};

use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel, PgTupleDesc};

use super::copy;
use super::statement::{option_names, option_value};
use crate::pg::error::{self, Raise};

/// Rows per INSERT at most: enough that a statement's cost is spread thin.
const BATCH: usize = 1000;

/// Bytes of rows per INSERT at most: far below the 1 GB an array may hold,
/// however wide the rows.
const BATCH_BYTES: usize = 64 << 20;

/// Runs COPY FROM into `table` through INSERTs of the rows it reads.
/// Returns the number of rows inserted.
///
/// # Safety
/// As for [`copy::run`], for a table [`copy::plan`] said to insert into.
pub unsafe fn run(
    stmt: *mut pg_sys::CopyStmt,
    table: pg_sys::Oid,
    query_string: *const std::ffi::c_char,
    query_env: *mut pg_sys::QueryEnvironment,
) -> u64 {
    // SAFETY: the caller's contract; PostgreSQL's executor and SPI steps.
    unsafe {
        // Refusals come before BeginCopyFrom tells the client to send.
        refuse_options(stmt, table);
        let checked = copy::check(stmt, table, query_string, query_env);
        // The columns the data holds; the INSERT fills the others' defaults.
        let listed = pg_sys::CopyGetAttnums((*checked.rel).rd_att, checked.rel, (*stmt).attlist);
        refuse_filter_on_defaults(checked.where_clause, listed, table);
        let copy = checked.begin(stmt);
        let cstate = copy.cstate;
        let desc = (*copy.rel).rd_att;
        (*cstate).num_defaults = 0;
        let insert = Insert::prepare(copy.rel, listed);
        let estate = pg_sys::CreateExecutorState();
        let econtext = pg_sys::MakePerTupleExprContext(estate);
        // COPY's WHERE clause, which CopyFrom would evaluate.
        let qual = pg_sys::ExecPrepareQual((*cstate).whereClause.cast(), estate);
        let slot = pg_sys::MakeSingleTupleTableSlot(desc, &pg_sys::TTSOpsVirtual);
        let batch_memory = pg_sys::AllocSetContextCreateInternal(
            pg_sys::CurrentMemoryContext,
            c"snowflake_id COPY batch".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let mut rows: Vec<pg_sys::Datum> = Vec::with_capacity(BATCH);
        let (mut bytes, mut inserted, mut batches) = (0usize, 0u64, 0u64);
        loop {
            pg_sys::check_for_interrupts!();
            pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
            let values = (*slot).tts_values;
            let nulls = (*slot).tts_isnull;
            clear(slot);
            let more = read_row(cstate, econtext, values, nulls);
            if more {
                pg_sys::ExecStoreVirtualTuple(slot);
                (*econtext).ecxt_scantuple = slot;
                if passes(qual, econtext) {
                    let old = pg_sys::MemoryContextSwitchTo(batch_memory);
                    let tuple = pg_sys::heap_form_tuple(desc, values, nulls);
                    bytes += (*tuple).t_len as usize;
                    rows.push(pg_sys::heap_copy_tuple_as_datum(tuple, desc));
                    pg_sys::heap_freetuple(tuple);
                    pg_sys::MemoryContextSwitchTo(old);
                }
            }
            // A COPY of no row still runs one INSERT, for its statement triggers.
            if rows.len() == BATCH || bytes >= BATCH_BYTES || (!more && (!rows.is_empty() || batches == 0)) {
                inserted += insert.execute(&rows, batch_memory);
                batches += 1;
                rows.clear();
                bytes = 0;
                pg_sys::MemoryContextReset(batch_memory);
            }
            if !more {
                break;
            }
        }
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::FreeExecutorState(estate);
        pg_sys::MemoryContextDelete(batch_memory);
        insert.finish();
        copy.close();
        inserted
    }
}

/// The next row of the COPY, as `NextCopyFrom` reads it, with COPY's own
/// error context ("COPY h, line 7, column at"); false at its end.
///
/// # Safety
/// `cstate` is begun; `values` and `nulls` hold a value per column.
unsafe fn read_row(
    cstate: pg_sys::CopyFromState,
    econtext: *mut pg_sys::ExprContext,
    values: *mut pg_sys::Datum,
    nulls: *mut bool,
) -> bool {
    // SAFETY: the caller's contract; CopyFrom's callback around its reads.
    // An error unwinds past the callback, which PostgreSQL's error recovery
    // forgets as it does CopyFrom's.
    unsafe {
        let mut callback = pg_sys::ErrorContextCallback {
            previous: pg_sys::error_context_stack,
            callback: Some(copy_error_context),
            arg: cstate.cast(),
        };
        pg_sys::error_context_stack = &mut callback;
        let old = pg_sys::MemoryContextSwitchTo((*econtext).ecxt_per_tuple_memory);
        let more = pg_sys::NextCopyFrom(cstate, econtext, values, nulls);
        pg_sys::MemoryContextSwitchTo(old);
        pg_sys::error_context_stack = callback.previous;
        more
    }
}

/// COPY's own error context, "COPY h, line 7, column at": the callback
/// CopyFrom pushes.
#[pg_guard]
unsafe extern "C-unwind" fn copy_error_context(cstate: *mut std::ffi::c_void) {
    // SAFETY: PostgreSQL calls it with the CopyFromState pushed above.
    unsafe { pg_sys::CopyFromErrorCallback(cstate) }
}

/// ON_ERROR (other than stop) and REJECT_LIMIT skip rows in CopyFrom,
/// which this path does not run: refused before a row is read.
///
/// # Safety
/// `stmt` is a CopyStmt.
unsafe fn refuse_options(stmt: *mut pg_sys::CopyStmt, table: pg_sys::Oid) {
    // SAFETY: the caller's contract; the statement's option list.
    let (names, on_error) = unsafe { (option_names((*stmt).options), option_value((*stmt).options, "on_error")) };
    let skips = names.iter().any(|n| n == "reject_limit") || on_error.is_some_and(|v| !v.eq_ignore_ascii_case("stop"));
    if skips {
        refuse(table, "with ON_ERROR or REJECT_LIMIT", "Load it without them, or into a staging table first.");
    }
}

/// A WHERE clause that reads a column the data does not hold (or the
/// whole row) would see no default there: refused.
///
/// # Safety
/// `clause` is NULL or COPY's analysed WHERE clause; `listed` the attnums COPY fills.
unsafe fn refuse_filter_on_defaults(clause: *mut pg_sys::Node, listed: *mut pg_sys::List, table: pg_sys::Oid) {
    if clause.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        let mut read: *mut pg_sys::Bitmapset = std::ptr::null_mut();
        pg_sys::pull_varattnos(clause, 1, &mut read);
        let offset = pg_sys::FirstLowInvalidHeapAttributeNumber;
        let mut member = -1;
        loop {
            member = pg_sys::bms_next_member(read, member);
            if member < 0 {
                break;
            }
            let attnum = member + offset;
            if attnum <= 0 || !pg_sys::list_member_int(listed, attnum) {
                refuse(
                    table,
                    "with a WHERE clause on a column its data does not hold",
                    "Filter on the columns the data holds, or load into a staging table first.",
                );
            }
        }
    }
}

fn refuse(table: pg_sys::Oid, what: &str, hint: &str) -> ! {
    let table = super::nextval::rel_name(table);
    error::new(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("COPY FROM into hypertable \"{table}\" {what} is not supported here"),
    )
    .set_detail(
        "Its key takes a registered sequence's default, and TimescaleDB runs a hypertable's COPY itself: \
         snowflake_id reads such a COPY and inserts its rows through INSERTs, which skip no row and fill the \
         defaults of the columns the data does not hold.",
    )
    .set_hint(hint)
    .raise(PgLogLevel::ERROR)
}

/// Empties `slot`, as `ExecClearTuple` does.
///
/// # Safety
/// `slot` is a valid slot.
#[allow(ffi_unwind_calls)]
unsafe fn clear(slot: *mut pg_sys::TupleTableSlot) {
    // SAFETY: the caller's contract; the slot's own operation, whose ERROR
    // pgrx's boundary catches and rethrows.
    unsafe {
        let clear = (*(*slot).tts_ops).clear.expect("a slot clears");
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| clear(slot));
    }
}

/// Whether the row in `econtext`'s scan slot passes COPY's WHERE clause
/// (no clause passes every row), as `ExecQual` decides.
///
/// # Safety
/// `qual` is NULL or prepared for `econtext`'s executor state.
#[allow(ffi_unwind_calls)]
unsafe fn passes(qual: *mut pg_sys::ExprState, econtext: *mut pg_sys::ExprContext) -> bool {
    if qual.is_null() {
        return true;
    }
    // SAFETY: the caller's contract; ExecEvalExprSwitchContext's steps.
    unsafe {
        let old = pg_sys::MemoryContextSwitchTo((*econtext).ecxt_per_tuple_memory);
        let mut is_null = false;
        let evaluate = (*qual).evalfunc.expect("a prepared qual evaluates");
        let result = pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| evaluate(qual, econtext, &mut is_null));
        pg_sys::MemoryContextSwitchTo(old);
        !is_null && result.value() != 0
    }
}

/// The INSERT the rows go in by, prepared through SPI: the columns COPY
/// names (all but dropped and generated ones when it names none), from the
/// rows of an array of the table's row type, with the values COPY read (an
/// identity column's too, as COPY writes them).
struct Insert {
    plan: pg_sys::SPIPlanPtr,
    row_type: pg_sys::Oid,
}

impl Insert {
    /// # Safety
    /// `rel` is open; in a live transaction.
    unsafe fn prepare(rel: pg_sys::Relation, listed: *mut pg_sys::List) -> Insert {
        // SAFETY: the caller's contract; catalog lookups and SPI.
        unsafe {
            let form = (*rel).rd_rel;
            let schema = pg_sys::get_namespace_name((*form).relnamespace);
            let table = CStr::from_ptr(pg_sys::quote_qualified_identifier(schema, (*form).relname.data.as_ptr()))
                .to_string_lossy()
                .into_owned();
            let desc = PgTupleDesc::from_pg_unchecked((*rel).rd_att);
            let columns: Vec<String> = (0..(*listed).length as usize)
                .filter_map(|i| desc.get(((*(*listed).elements.add(i)).int_value - 1) as usize))
                .map(|att| {
                    CStr::from_ptr(pg_sys::quote_identifier(att.attname.data.as_ptr())).to_string_lossy().into_owned()
                })
                .collect();
            let columns = columns.join(", ");
            let row_type = (*form).reltype;
            let array_type = pg_sys::get_array_type(row_type);
            let sql = CString::new(format!(
                "INSERT INTO {table} ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM pg_catalog.unnest($1)"
            ))
            .expect("names hold no NUL");
            if array_type == pg_sys::InvalidOid {
                pgrx::error!("snowflake_id: table {table} has no array type for COPY's rows");
            }
            if pg_sys::SPI_connect() != pg_sys::SPI_OK_CONNECT as i32 {
                pgrx::error!("snowflake_id: SPI_connect failed for COPY into {table}");
            }
            let mut arg = array_type;
            let plan = pg_sys::SPI_prepare(sql.as_ptr(), 1, &mut arg);
            if plan.is_null() {
                pgrx::error!("snowflake_id: could not prepare the INSERT for COPY into {table}");
            }
            Insert { plan, row_type }
        }
    }

    /// Inserts `rows` (row-type datums in `memory`); returns how many.
    ///
    /// # Safety
    /// Between [`Insert::prepare`] and [`Insert::finish`].
    unsafe fn execute(&self, rows: &[pg_sys::Datum], memory: pg_sys::MemoryContext) -> u64 {
        // SAFETY: the caller's contract; an array of the row type, then SPI.
        unsafe {
            let old = pg_sys::MemoryContextSwitchTo(memory);
            let (mut typlen, mut typbyval, mut typalign) = (0i16, false, 0 as std::ffi::c_char);
            pg_sys::get_typlenbyvalalign(self.row_type, &mut typlen, &mut typbyval, &mut typalign);
            let array = pg_sys::construct_array(
                rows.as_ptr().cast_mut(),
                rows.len() as i32,
                self.row_type,
                typlen.into(),
                typbyval,
                typalign,
            );
            pg_sys::MemoryContextSwitchTo(old);
            let mut args = [pg_sys::Datum::from(array)];
            let status = pg_sys::SPI_execute_plan(self.plan, args.as_mut_ptr(), c" ".as_ptr(), false, 0);
            if status != pg_sys::SPI_OK_INSERT as i32 {
                pgrx::error!("snowflake_id: the INSERT of a COPY batch returned SPI status {status}");
            }
            pg_sys::SPI_processed
        }
    }

    /// # Safety
    /// After [`Insert::prepare`].
    unsafe fn finish(self) {
        // SAFETY: the caller's contract.
        unsafe {
            pg_sys::SPI_finish();
        }
    }
}
