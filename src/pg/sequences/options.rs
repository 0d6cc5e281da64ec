//! The options of a utility statement (a List of DefElem), by name: what
//! the utility hook and COPY look at.

use std::ffi::CStr;

use pgrx::pg_sys::{self, NodeTag};

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
