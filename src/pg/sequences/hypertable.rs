//! Whether a table is a TimescaleDB hypertable, whose COPY TimescaleDB's
//! utility hook runs itself (see [`super::copy_insert`]).

use std::ffi::CStr;

use pgrx::{pg_sys, Spi};

/// Whether `rel` is a TimescaleDB hypertable: the extension is installed
/// in this database and its catalog lists the table. Asked only of a COPY
/// that fills a registered default where another library's utility hook
/// follows ours.
///
/// # Safety
/// `rel` is open; in a live transaction.
pub unsafe fn is_hypertable(rel: pg_sys::Relation) -> bool {
    // SAFETY: the caller's contract; catalog lookups.
    unsafe {
        if pg_sys::get_extension_oid(c"timescaledb".as_ptr(), true) == pg_sys::InvalidOid {
            return false;
        }
        let form = (*rel).rd_rel;
        let schema = CStr::from_ptr(pg_sys::get_namespace_name((*form).relnamespace)).to_string_lossy().into_owned();
        let table = CStr::from_ptr((*form).relname.data.as_ptr()).to_string_lossy().into_owned();
        // Every name qualified: nothing on the caller's search_path decides.
        Spi::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT FROM _timescaledb_catalog.hypertable
                             WHERE schema_name OPERATOR(pg_catalog.=) $1::pg_catalog.name
                               AND table_name OPERATOR(pg_catalog.=) $2::pg_catalog.name)",
            &[schema.as_str().into(), table.as_str().into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false)
    }
}
