//! The functions registered sequences are served by, which the planner hook
//! ([`super::rewrite`]) calls in place of `nextval`, and the checks and
//! values `sql/snowflake_sequences.sql` asks of the generator.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::registry;
use crate::pg::error::{self, Raise};
use crate::pg::{generate, settings, shmem};
use crate::snowflake::block::{BlockError, BlockPlan, Convention};

pgrx::extension_sql!(
    "CREATE FUNCTION snowflake_sequence_nextval(seq regclass) RETURNS bigint\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_nextval';\n\
     CREATE FUNCTION snowflake_sequence_nextval_identity(seq regclass) RETURNS bigint\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_nextval_identity';\n",
    name = "sequence_nextval"
);

/// `nextval(seq)` of a registered sequence: a snowflake ID (for an increment
/// above one, the end of a block the caller's allocator reads, see
/// [`crate::snowflake::block`]), with native nextval's checks and errors. A
/// sequence that is no longer registered (a plan made before it was
/// unregistered, or a run-time argument) gets native nextval.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_nextval(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL's fcinfo, one regclass argument, STRICT.
    let seq = unsafe { pgrx::fcinfo::pg_getarg::<Oid>(fcinfo, 0) }.unwrap_or(pg_sys::InvalidOid);
    pg_sys::Datum::from(next_value(seq, true))
}

/// As [`snowflake_sequence_nextval`], for an identity column's default, which
/// native PostgreSQL serves without a privilege check on the sequence.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_nextval_identity(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as above.
    let seq = unsafe { pgrx::fcinfo::pg_getarg::<Oid>(fcinfo, 0) }.unwrap_or(pg_sys::InvalidOid);
    pg_sys::Datum::from(next_value(seq, false))
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_sequence_nextval() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_sequence_nextval_identity() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

fn next_value(seq: Oid, check_permissions: bool) -> i64 {
    let Some((entry, _)) = registry::lookup(seq) else {
        // SAFETY: native nextval, with its own checks and errors.
        return unsafe { pg_sys::nextval_internal(seq, check_permissions) };
    };
    check_like_nextval(seq, check_permissions);
    let config = settings::config();
    let template = config.codec.template(config.node);
    let plan = BlockPlan::new(entry.increment, entry.convention, &template)
        .unwrap_or_else(|e| refuse_block(Some(seq), entry.increment, e));
    let mut block = generate::reserve_run(plan.run());
    let first = block.next().expect("a run holds at least one ID");
    plan.value(first)
}

/// The checks native nextval makes before it hands out a value, with its errors.
fn check_like_nextval(seq: Oid, check_permissions: bool) {
    // SAFETY: plain catalog lookups and PostgreSQL's own checks, which raise
    // their ERRORs through pgrx's guard.
    unsafe {
        if check_permissions
            && pg_sys::pg_class_aclcheck(seq, pg_sys::GetUserId(), (pg_sys::ACL_USAGE | pg_sys::ACL_UPDATE).into())
                != pg_sys::AclResult::ACLCHECK_OK
        {
            let name = pg_sys::get_rel_name(seq);
            let name = if name.is_null() {
                seq.to_u32().to_string()
            } else {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            };
            error::new(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("permission denied for sequence {name}"),
            )
            .raise(PgLogLevel::ERROR);
        }
        if pg_sys::get_rel_persistence(seq) != pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char {
            pg_sys::PreventCommandIfReadOnly(c"nextval()".as_ptr());
        }
        pg_sys::PreventCommandIfParallelMode(c"nextval()".as_ptr());
    }
}

fn refuse_block(seq: Option<Oid>, increment: i64, e: BlockError) -> ! {
    let hint = match e {
        BlockError::NotAscending { .. } => "Register an ascending sequence.".to_string(),
        BlockError::TooLarge { max, .. } if max > 1 => format!(
            "Use INCREMENT BY {max} or less (with block_mode 'either', at most half a tick's IDs; name the \
             allocator's convention with block_mode 'high' or 'low' for twice as many)."
        ),
        BlockError::TooLarge { .. } => {
            "Use INCREMENT BY 1, or a layout whose sequence field holds the lowest bits.".to_string()
        }
    };
    let name = seq.map(|s| {
        // SAFETY: a catalog lookup; NULL for a sequence that is gone.
        let n = unsafe { pg_sys::get_rel_name(s) };
        if n.is_null() {
            s.to_u32().to_string()
        } else {
            unsafe { CStr::from_ptr(n) }.to_string_lossy().into_owned()
        }
    });
    let message = match name {
        Some(n) => format!("sequence \"{n}\" cannot hand out snowflake IDs: {e}"),
        None => format!("a sequence that increments by {increment} cannot hand out snowflake IDs: {e}"),
    };
    error::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, message).set_hint(hint).raise(PgLogLevel::ERROR)
}

/// Refuses a block mode or an increment this server's layout cannot serve
/// (for `snowflake_sequence_register`).
#[pg_extern(volatile, parallel_safe)]
pub fn snowflake_sequence_check_block(increment: i64, block_mode: &str) {
    let Some(convention) = Convention::from_name(block_mode) else {
        error::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("unknown block mode \"{block_mode}\""))
            .set_hint("Use 'either' (the default: safe whichever end of a block the client reads), 'high' (Hibernate's pooled optimizer) or 'low' (pooled-lo, Npgsql HiLo).")
            .raise(PgLogLevel::ERROR);
    };
    let config = settings::config();
    if let Err(e) = BlockPlan::new(increment, convention, &config.codec.template(config.node)) {
        refuse_block(None, increment, e);
    }
}

/// An ID above every ID this server has handed out: where a sequence that
/// is unregistered continues natively.
#[pg_extern(volatile, parallel_unsafe)]
pub fn snowflake_sequence_resume_value() -> i64 {
    let state = shmem::read();
    let next = state.generator.resume_point();
    let template = state.generator.template();
    template.encode(next.position, next.clock_back)
}

/// The registry's statement trigger: every backend reads the registry again.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_registry_changed(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: called as a trigger (the SQL declares it RETURNS trigger),
    // whose context is a TriggerData with the registry table.
    unsafe {
        let data = (*fcinfo).context.cast::<pg_sys::TriggerData>();
        registry::changed((*(*data).tg_relation).rd_id);
    }
    pg_sys::Datum::from(0)
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_sequence_registry_changed() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}
