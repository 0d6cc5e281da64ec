//! Work done on a caller's behalf as the bootstrap superuser (reading the
//! registry, setting a fence back), as PostgreSQL's RI triggers switch user.
//! Nothing of the caller's may take part: search_path is pg_catalog alone,
//! so no operator or function a role put first in its path runs with these
//! rights. An ERROR in between is undone by the (sub)transaction's abort,
//! which restores the user and pops the setting, as for a function's SET.

use pgrx::pg_sys;

/// Runs `f` as the bootstrap superuser with search_path `pg_catalog, pg_temp`.
pub fn run<R>(f: impl FnOnce() -> R) -> R {
    let mut saved = (pg_sys::InvalidOid, 0);
    // SAFETY: the current user, restored below (or by the abort on an ERROR).
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut saved.0, &mut saved.1);
        pg_sys::SetUserIdAndSecContext(
            pg_sys::BOOTSTRAP_SUPERUSERID.into(),
            saved.1 | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
    }
    let result = in_catalog_path(f);
    // SAFETY: as above.
    unsafe { pg_sys::SetUserIdAndSecContext(saved.0, saved.1) };
    result
}

/// Runs `f` (a catalog query made as the caller) with search_path
/// `pg_catalog, pg_temp`, so that no operator a role put first in the
/// caller's path runs in it.
pub fn in_catalog_path<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: a GUC nesting level of our own, popped below (or by the abort
    // on an ERROR).
    let nest = unsafe {
        let nest = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        nest
    };
    let result = f();
    // SAFETY: as above.
    unsafe { pg_sys::AtEOXact_GUC(true, nest) };
    result
}
