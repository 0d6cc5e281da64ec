//! What a utility statement names, as the utility hook, COPY and ALTER
//! TABLE look it up: its relation, and its options (a List of DefElem).

use std::ffi::CStr;

use pgrx::pg_sys::{self, NodeTag, Oid};

/// The DefElems of a list, by name.
///
/// # Safety
/// `list` is NULL or a List of DefElem.
pub unsafe fn option_names(list: *mut pg_sys::List) -> Vec<String> {
    let mut names = Vec::new();
    // SAFETY: the caller's contract.
    unsafe {
        if list.is_null() {
            return names;
        }
        for i in 0..(*list).length as usize {
            let d = (*(*list).elements.add(i)).ptr_value.cast::<pg_sys::DefElem>();
            if !d.is_null() && (*d).type_ == NodeTag::T_DefElem && !(*d).defname.is_null() {
                names.push(CStr::from_ptr((*d).defname).to_string_lossy().into_owned());
            }
        }
    }
    names
}

/// The value of COPY option `name` as text, if given.
///
/// # Safety
/// `options` is NULL or a List of DefElem.
pub unsafe fn option_value(options: *mut pg_sys::List, name: &str) -> Option<String> {
    // SAFETY: the caller's contract; defGetString reads the option as COPY does.
    unsafe {
        if options.is_null() {
            return None;
        }
        (0..(*options).length as usize).find_map(|i| {
            let d = (*(*options).elements.add(i)).ptr_value.cast::<pg_sys::DefElem>();
            let named =
                !d.is_null() && !(*d).defname.is_null() && CStr::from_ptr((*d).defname).to_bytes() == name.as_bytes();
            named.then(|| CStr::from_ptr(pg_sys::defGetString(d)).to_string_lossy().into_owned())
        })
    }
}

/// The relation a statement names, taking `lockmode` on it (`NoLock` for a
/// look only); `None` where there is none by that name (PostgreSQL's own
/// statement then reports it).
///
/// # Safety
/// `relation` is NULL or a RangeVar; in a live transaction.
pub unsafe fn relation_oid(relation: *mut pg_sys::RangeVar, lockmode: u32) -> Option<Oid> {
    if relation.is_null() {
        return None;
    }
    // SAFETY: the caller's contract; a name lookup that retries when the
    // relation changes while it waits for the lock.
    let oid = unsafe {
        pg_sys::RangeVarGetRelidExtended(
            relation,
            lockmode as _,
            pg_sys::RVROption::RVR_MISSING_OK,
            None,
            std::ptr::null_mut(),
        )
    };
    (oid != pg_sys::InvalidOid).then_some(oid)
}
