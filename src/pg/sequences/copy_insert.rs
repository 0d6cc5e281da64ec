//! COPY ... FROM into a TimescaleDB hypertable whose omitted key takes a
//! registered sequence's default.
//!
//! TimescaleDB's utility hook runs a COPY into a hypertable itself (its own
//! copy of PostgreSQL's, which routes each row to its chunk) and calls no
//! hook after its own: with snowflake_id listed first in
//! shared_preload_libraries, ours never sees that COPY, whose defaults meet
//! the fence (the log hook's hint says to list snowflake_id after
//! timescaledb). Listed after it, our hook runs first and serves such a
//! COPY here: PostgreSQL's COPY reads and converts the rows, with our
//! functions in the defaults ([`super::copy::open`]), and they go into the
//! hypertable through INSERTs of up to [`BATCH`] rows each, which
//! TimescaleDB routes to chunks as for any INSERT (compressed chunks
//! included). What differs from a COPY: statement-level triggers fire per
//! batch, and an error in a batch names the INSERT rather than the line.
//!
//! Other libraries whose hook runs COPY itself (Citus) are not told apart
//! here: such a COPY is refused as [`super::copy`] refuses it.

use std::ffi::{CStr, CString};

use pgrx::pg_sys;
use pgrx::{PgTupleDesc, Spi};

use super::copy;

/// Rows per INSERT: enough that a statement's cost is spread thin, few
/// enough that a batch's rows stay small in memory.
const BATCH: usize = 1000;

/// Whether `rel` is a TimescaleDB hypertable, whose COPY TimescaleDB's
/// utility hook runs itself: listed in TimescaleDB's catalog, where the
/// extension is installed in this database.
///
/// # Safety
/// `rel` is open; in a live transaction.
pub unsafe fn routed_by_timescaledb(rel: pg_sys::Relation) -> bool {
    // SAFETY: the caller's contract; catalog lookups.
    unsafe {
        let catalog = pg_sys::get_namespace_oid(c"_timescaledb_catalog".as_ptr(), true);
        if catalog == pg_sys::InvalidOid
            || pg_sys::get_relname_relid(c"hypertable".as_ptr(), catalog) == pg_sys::InvalidOid
        {
            return false;
        }
        let form = (*rel).rd_rel;
        let schema = CStr::from_ptr(pg_sys::get_namespace_name((*form).relnamespace)).to_string_lossy().into_owned();
        let table = CStr::from_ptr((*form).relname.data.as_ptr()).to_string_lossy().into_owned();
        Spi::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT FROM _timescaledb_catalog.hypertable WHERE schema_name = $1::name AND table_name = $2::name)",
            &[schema.as_str().into(), table.as_str().into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false)
    }
}

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
        let copy = copy::open(stmt, table, query_string, query_env);
        let desc = (*copy.rel).rd_att;
        let insert = Insert::prepare(copy.rel);
        let estate = pg_sys::CreateExecutorState();
        let econtext = pg_sys::MakePerTupleExprContext(estate);
        // COPY's WHERE clause, which CopyFrom would evaluate.
        let qual = pg_sys::ExecPrepareQual((*copy.cstate).whereClause.cast(), estate);
        let slot = pg_sys::MakeSingleTupleTableSlot(desc, &pg_sys::TTSOpsVirtual);
        let batch_memory = pg_sys::AllocSetContextCreateInternal(
            pg_sys::CurrentMemoryContext,
            c"snowflake_id COPY batch".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let mut rows: Vec<pg_sys::Datum> = Vec::with_capacity(BATCH);
        let mut inserted = 0u64;
        loop {
            pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
            let values = (*slot).tts_values;
            let nulls = (*slot).tts_isnull;
            clear(slot);
            let more = {
                let old = pg_sys::MemoryContextSwitchTo((*econtext).ecxt_per_tuple_memory);
                let more = pg_sys::NextCopyFrom(copy.cstate, econtext, values, nulls);
                pg_sys::MemoryContextSwitchTo(old);
                more
            };
            if more {
                pg_sys::ExecStoreVirtualTuple(slot);
                (*econtext).ecxt_scantuple = slot;
                if passes(qual, econtext) {
                    let old = pg_sys::MemoryContextSwitchTo(batch_memory);
                    let tuple = pg_sys::heap_form_tuple(desc, values, nulls);
                    rows.push(pg_sys::heap_copy_tuple_as_datum(tuple, desc));
                    pg_sys::MemoryContextSwitchTo(old);
                }
            }
            if rows.len() == BATCH || (!more && !rows.is_empty()) {
                inserted += insert.execute(&rows, batch_memory);
                rows.clear();
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

/// The INSERT the rows go in by, prepared through SPI: every column that
/// takes a value (not dropped, not generated) from the rows of an array of
/// the table's row type, with the values COPY read or its defaults made
/// (an identity column's too, as COPY writes them).
struct Insert {
    plan: pg_sys::SPIPlanPtr,
    row_type: pg_sys::Oid,
}

impl Insert {
    /// # Safety
    /// `rel` is open; in a live transaction.
    unsafe fn prepare(rel: pg_sys::Relation) -> Insert {
        // SAFETY: the caller's contract; catalog lookups and SPI.
        unsafe {
            let form = (*rel).rd_rel;
            let schema = pg_sys::get_namespace_name((*form).relnamespace);
            let table = CStr::from_ptr(pg_sys::quote_qualified_identifier(schema, (*form).relname.data.as_ptr()))
                .to_string_lossy()
                .into_owned();
            let columns: Vec<String> = PgTupleDesc::from_pg_unchecked((*rel).rd_att)
                .iter()
                .filter(|att| !att.attisdropped && att.attgenerated == 0)
                .map(|att| {
                    CStr::from_ptr(pg_sys::quote_identifier(att.attname.data.as_ptr())).to_string_lossy().into_owned()
                })
                .collect();
            let columns = columns.join(", ");
            let row_type = (*form).reltype;
            let array_type = pg_sys::get_array_type(row_type);
            let sql = CString::new(format!(
                "INSERT INTO {table} ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM unnest($1)"
            ))
            .expect("names hold no NUL");
            if pg_sys::SPI_connect() != pg_sys::SPI_OK_CONNECT as i32 {
                pgrx::error!("snowflake_id: SPI_connect failed for COPY into {table}");
            }
            let mut arg = array_type;
            if array_type == pg_sys::InvalidOid {
                pgrx::error!("snowflake_id: table {table} has no array type for COPY's rows");
            }
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
