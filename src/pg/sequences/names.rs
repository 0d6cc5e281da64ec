//! How messages and hints name relations: so that what they propose can be
//! pasted back into SQL as it stands.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Oid};

/// A relation's name as it can be pasted into SQL anywhere: qualified with
/// its schema, each part quoted where it needs to be. Its OID when it is gone.
pub fn qualified(rel: Oid) -> String {
    // SAFETY: catalog lookups; NULL for a relation or schema that is gone.
    unsafe {
        let name = pg_sys::get_rel_name(rel);
        let schema = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(rel));
        if name.is_null() || schema.is_null() {
            return rel.to_u32().to_string();
        }
        CStr::from_ptr(pg_sys::quote_qualified_identifier(schema, name)).to_string_lossy().into_owned()
    }
}

/// `text` as an SQL string literal.
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A name for messages: PostgreSQL's `regclass` output of `rel` (qualified
/// where the search path does not find it).
pub fn regclass_name(rel: Oid) -> String {
    // SAFETY: regclassout of an OID: a palloc'd C string (the OID itself for
    // a relation that is gone).
    unsafe {
        let text = pg_sys::OidOutputFunctionCall(pg_sys::F_REGCLASSOUT.into(), pg_sys::Datum::from(rel));
        CStr::from_ptr(text).to_string_lossy().into_owned()
    }
}
