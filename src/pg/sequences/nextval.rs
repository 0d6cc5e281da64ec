//! The functions registered sequences are served by, which the planner hook
//! ([`super::rewrite`]) calls in place of `nextval`, `currval`, `setval`,
//! `lastval` and identity defaults. Each locks the sequence as native nextval
//! does, then asks the registry: a registered sequence gets snowflake IDs, any
//! other its native function, with native nextval's checks and errors either
//! way. Every function that advances a sequence checks the caller's rights
//! as PostgreSQL does.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::checked::{self, Caller, Served};
use super::{fence, handed, registry};
use crate::pg::error::{self, ErrorReport, Raise};
use crate::pg::{ffi, floor, generate, settings, shmem};
use crate::snowflake::block::{BlockError, BlockPlan, Convention};

pgrx::extension_sql!(
    "CREATE FUNCTION snowflake_sequence_nextval(seq regclass) RETURNS bigint\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_nextval';\n\
     CREATE FUNCTION snowflake_sequence_nextval_identity(seq regclass) RETURNS bigint\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_nextval_identity';\n\
     CREATE FUNCTION snowflake_sequence_currval(seq regclass) RETURNS bigint\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_currval';\n\
     CREATE FUNCTION snowflake_sequence_lastval() RETURNS bigint\n\
     VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_lastval';\n\
     CREATE FUNCTION snowflake_sequence_setval(seq regclass, value bigint) RETURNS bigint\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_setval';\n\
     CREATE FUNCTION snowflake_sequence_setval(seq regclass, value bigint, is_called boolean) RETURNS bigint\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_setval';\n",
    name = "sequence_nextval"
);

/// `nextval(seq)` of a registered sequence: a snowflake ID (for an increment
/// above one, the end of a block the caller's allocator reads, see
/// [`crate::snowflake::block`]), with native nextval's checks and errors. A
/// sequence that is not registered gets native nextval.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_nextval(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL's fcinfo, one regclass argument, STRICT.
    let seq = unsafe { pgrx::fcinfo::pg_getarg::<Oid>(fcinfo, 0) }.unwrap_or(pg_sys::InvalidOid);
    pg_sys::Datum::from(next_value(seq, Caller::Nextval))
}

/// As [`snowflake_sequence_nextval`], for an identity column's default. Native
/// PostgreSQL serves one without a privilege check on the sequence: the
/// statement's right to insert into (or update) the column is checked
/// instead, as the table's (or a view's) owner governs it. Where the planner
/// hook put this call in a statement's plan (it marks it,
/// [`IDENTITY_DEFAULT`]) that check has run; called any other way
/// (any role may call it), it checks the column's right on the table the
/// sequence feeds, or USAGE on the sequence, so it lets no role advance a
/// sequence it could not advance natively.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_nextval_identity(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as above.
    let seq = unsafe { pgrx::fcinfo::pg_getarg::<Oid>(fcinfo, 0) }.unwrap_or(pg_sys::InvalidOid);
    // SAFETY: as above.
    let caller = if unsafe { planned_identity_default(fcinfo) } { Caller::Default } else { Caller::Identity };
    pg_sys::Datum::from(next_value(seq, caller))
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

/// Whether this call is one the planner hook put in place of an identity
/// default: a plain function call (no aggregate's or window's, whose input
/// collation a role chooses) of a constant sequence, marked by
/// [`IDENTITY_DEFAULT`].
///
/// # Safety
/// `fcinfo` is PostgreSQL's.
unsafe fn planned_identity_default(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: the caller's contract; the expression is read as a FuncExpr
    // only when its tag says it is one.
    unsafe {
        if (*fcinfo).fncollation != IDENTITY_DEFAULT || !(*fcinfo).context.is_null() || (*fcinfo).flinfo.is_null() {
            return false;
        }
        let expr = (*(*fcinfo).flinfo).fn_expr;
        if expr.is_null() || (*expr).type_ != pg_sys::NodeTag::T_FuncExpr {
            return false;
        }
        let args = (*expr.cast::<pg_sys::FuncExpr>()).args;
        !args.is_null()
            && (*args).length == 1
            && (*(*(*args).elements).ptr_value.cast::<pg_sys::Node>()).type_ == pg_sys::NodeTag::T_Const
    }
}

/// The input collation an identity default's call carries when the planner
/// hook ([`super::rewrite`]) put it in place of a `NextValueExpr`. Its argument is a regclass, which
/// has no collation, so no SQL a role writes gives such a call one: the
/// function knows from it that the statement's own privilege check (the
/// column's INSERT or UPDATE right, as the table's or a view's owner
/// governs it) has run, and checks none of its own, as native PostgreSQL
/// checks none for an identity default.
pub const IDENTITY_DEFAULT: Oid = pg_sys::C_COLLATION_OID;

fn next_value(seq: Oid, caller: Caller) -> i64 {
    let served = match checked::recent(seq, caller) {
        Some(known) => known,
        None => {
            // The lock first: taking it serves the invalidations that
            // arrived, so a call that waited for a registration's fence or
            // an unregistration sees it.
            lock_sequence(seq);
            let served = match registry::lookup(seq) {
                Some(entry) => {
                    match caller {
                        Caller::Nextval => check_privilege(seq, pg_sys::ACL_USAGE | pg_sys::ACL_UPDATE),
                        Caller::Identity => check_identity_privilege(seq),
                        Caller::Default => {}
                    }
                    // SAFETY: a catalog lookup.
                    let temporary =
                        unsafe { pg_sys::get_rel_persistence(seq) } == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char;
                    Served::Registered(entry, temporary)
                }
                None => {
                    // Native nextval checks a caller's privileges on every
                    // call; an identity default's are this function's.
                    if caller == Caller::Identity {
                        check_identity_privilege(seq);
                    }
                    Served::Native
                }
            };
            checked::keep(seq, caller, served);
            served
        }
    };
    let (entry, temporary) = match served {
        Served::Registered(entry, temporary) => (entry, temporary),
        Served::Native => {
            // SAFETY: native nextval, with its own checks and errors (an
            // identity default's are none).
            let value = unsafe { pg_sys::nextval_internal(seq, caller == Caller::Nextval) };
            handed::handed_natively(seq);
            return value;
        }
    };
    // Native nextval's checks, made by PostgreSQL (which raises their
    // ERRORs) only where they fail: a guarded call per ID is dear.
    // SAFETY: PostgreSQL's own checks, which raise their ERRORs through pgrx's guard.
    unsafe {
        if !temporary && ffi::transaction_read_only() {
            pg_sys::PreventCommandIfReadOnly(c"nextval()".as_ptr());
        }
        if ffi::in_parallel_mode() {
            pg_sys::PreventCommandIfParallelMode(c"nextval()".as_ptr());
        }
    }
    let config = settings::config();
    let template = config.codec.template(config.node);
    let plan = BlockPlan::new(entry.increment, entry.convention, &template)
        .unwrap_or_else(|e| block_report(Some(seq), e).raise(PgLogLevel::ERROR));
    let mut block = generate::reserve_run(plan.run());
    let first = block.next().expect("a run holds at least one ID");
    let value = plan.value(first);
    handed::handed(seq, value);
    value
}

/// An identity default's right, called other than from a planned default:
/// INSERT or UPDATE on its column, or on the table the sequence feeds; or
/// USAGE on the sequence, as `nextval` needs.
fn check_identity_privilege(seq: Oid) {
    // AclMode is 32 bits wide on PostgreSQL 15, 64 from 16.
    #[allow(clippy::useless_conversion)]
    let fill: pg_sys::AclMode = (pg_sys::ACL_INSERT | pg_sys::ACL_UPDATE).into();
    #[allow(clippy::useless_conversion)]
    let usage: pg_sys::AclMode = pg_sys::ACL_USAGE.into();
    // SAFETY: catalog lookups.
    let granted = unsafe {
        let user = pg_sys::GetUserId();
        let (mut table, mut column) = (pg_sys::InvalidOid, 0);
        let internal = pg_sys::DependencyType::DEPENDENCY_INTERNAL as std::ffi::c_char;
        let fills = pg_sys::sequenceIsOwned(seq, internal, &mut table, &mut column)
            && (pg_sys::pg_class_aclcheck(table, user, fill) == pg_sys::AclResult::ACLCHECK_OK
                || pg_sys::pg_attribute_aclcheck(table, column as _, user, fill) == pg_sys::AclResult::ACLCHECK_OK);
        fills || pg_sys::pg_class_aclcheck(seq, user, usage) == pg_sys::AclResult::ACLCHECK_OK
    };
    if !granted {
        permission_denied(seq);
    }
}

/// `currval(seq)`: what this session's last nextval (or setval) of `seq`
/// returned, where [`handed`] keeps it (a snowflake ID, also after an
/// unregistration), with native currval's privilege check and errors;
/// native currval for the rest (it takes the lock this takes first).
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_currval(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL's fcinfo, one regclass argument, STRICT.
    let seq = unsafe { pgrx::fcinfo::pg_getarg::<Oid>(fcinfo, 0) }.unwrap_or(pg_sys::InvalidOid);
    lock_sequence(seq);
    match handed::currval(seq) {
        Some(value) => {
            check_privilege(seq, pg_sys::ACL_SELECT | pg_sys::ACL_USAGE);
            let value = value.unwrap_or_else(|| {
                error::new(
                    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("currval of sequence \"{}\" is not yet defined in this session", rel_name(seq)),
                )
                .raise(PgLogLevel::ERROR)
            });
            pg_sys::Datum::from(value)
        }
        // SAFETY: native currval, with the call's own argument.
        None => unsafe { pg_sys::OidFunctionCall1Coll(pg_sys::F_CURRVAL.into(), pg_sys::InvalidOid, seq.into()) },
    }
}

/// `lastval()`: the value of this session's last nextval, where [`handed`]
/// keeps it, else native lastval's.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_lastval(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    if let Some((seq, value)) = handed::lastval() {
        // SAFETY: a catalog lookup.
        if unsafe { pg_sys::get_rel_relkind(seq) } == 0 {
            // Native lastval's error where its sequence was dropped since.
            error::new(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "lastval is not yet defined in this session",
            )
            .raise(PgLogLevel::ERROR);
        }
        lock_sequence(seq);
        check_privilege(seq, pg_sys::ACL_SELECT | pg_sys::ACL_USAGE);
        return pg_sys::Datum::from(value);
    }
    // SAFETY: native lastval, which takes no arguments.
    unsafe { pg_sys::OidFunctionCall0Coll(pg_sys::F_LASTVAL.into(), pg_sys::InvalidOid) }
}

/// `setval(seq, value [, is_called])` of a registered sequence: never moves
/// the generator back; a value above the IDs this server handed out raises
/// its floor (as `snowflake_raise_floor`), so the next ID lies above it. The
/// sequence itself keeps its fence (a restore's SEQUENCE SET puts it back).
/// Native setval for a sequence not registered.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_setval(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL's fcinfo: regclass, bigint and maybe boolean, STRICT.
    let (seq, value, three) = unsafe {
        (
            pgrx::fcinfo::pg_getarg::<Oid>(fcinfo, 0).unwrap_or(pg_sys::InvalidOid),
            pgrx::fcinfo::pg_getarg::<i64>(fcinfo, 1).unwrap_or(0),
            (*fcinfo).nargs >= 3,
        )
    };
    // SAFETY: as above.
    let is_called = !three || unsafe { pgrx::fcinfo::pg_getarg::<bool>(fcinfo, 2) }.unwrap_or(true);
    // The lock first, as for nextval: an unregistration that committed is seen.
    lock_sequence(seq);
    let Some(entry) = registry::lookup(seq) else {
        // SAFETY: native setval with the call's own arguments.
        let datum = unsafe {
            if three {
                pg_sys::OidFunctionCall3Coll(
                    pg_sys::F_SETVAL_REGCLASS_INT8_BOOL.into(),
                    pg_sys::InvalidOid,
                    seq.into(),
                    value.into(),
                    is_called.into(),
                )
            } else {
                pg_sys::OidFunctionCall2Coll(
                    pg_sys::F_SETVAL_REGCLASS_INT8.into(),
                    pg_sys::InvalidOid,
                    seq.into(),
                    value.into(),
                )
            }
        };
        // Native setval set native currval; an answer kept here follows it.
        if is_called && handed::kept() {
            handed::set(seq, value);
        }
        return datum;
    };
    check_privilege(seq, pg_sys::ACL_UPDATE);
    // SAFETY: PostgreSQL's own checks, raising their ERRORs.
    unsafe {
        if pg_sys::get_rel_persistence(seq) != pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char {
            pg_sys::PreventCommandIfReadOnly(c"setval()".as_ptr());
        }
        pg_sys::PreventCommandIfParallelMode(c"setval()".as_ptr());
    }
    // Native setval's bounds, those of the sequence before its fence.
    let min = fence::options(seq).map_or(1, |o| o.min);
    if value < min || value > entry.native_max {
        error::new(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "setval: value {value} is out of bounds for sequence \"{}\" ({min}..{})",
                rel_name(seq),
                entry.native_max
            ),
        )
        .raise(PgLogLevel::ERROR);
    }
    // Values of the past (a restore's SEQUENCE SET of the fence, an empty
    // table's reset) are no floor, even on a server that issued nothing yet.
    let now_id = settings::config().codec.first_id_at(crate::pg::clock::now()).unwrap_or(i64::MAX);
    if value >= resume_id().max(now_id) {
        // A floor is server-wide: the right to raise it is snowflake_raise_floor's.
        if !may_raise_floor() {
            error::new(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("permission denied to raise the snowflake ID floor through sequence \"{}\"", rel_name(seq)),
            )
            .set_detail("A setval above the IDs this server handed out raises the floor of every ID it issues.")
            .set_hint("Run it as a role granted EXECUTE on snowflake_raise_floor(bigint).")
            .raise(PgLogLevel::ERROR);
        }
        floor::raise_to(value);
    }
    // The sequence stays at its fence (a value above it lies below the
    // IDs that unregistering continues above).
    fence::keep(seq);
    if is_called {
        handed::set(seq, value);
    }
    pg_sys::Datum::from(value)
}

/// Whether the current role may call snowflake_raise_floor(bigint).
pub(super) fn may_raise_floor() -> bool {
    Spi::get_one::<bool>(
        "SELECT pg_catalog.has_function_privilege(p.oid, 'EXECUTE') FROM pg_catalog.pg_proc p \
         JOIN pg_catalog.pg_extension e ON e.extnamespace OPERATOR(pg_catalog.=) p.pronamespace \
         WHERE e.extname OPERATOR(pg_catalog.=) 'snowflake_id' AND p.proname OPERATOR(pg_catalog.=) 'snowflake_raise_floor'",
    )
    .ok()
    .flatten()
    .unwrap_or(false)
}

fn check_privilege(seq: Oid, mode: u32) {
    // AclMode is 32 bits wide on PostgreSQL 15, 64 from 16.
    #[allow(clippy::useless_conversion)]
    let mode: pg_sys::AclMode = mode.into();
    // SAFETY: a catalog lookup.
    let granted = unsafe { pg_sys::pg_class_aclcheck(seq, pg_sys::GetUserId(), mode) };
    if granted != pg_sys::AclResult::ACLCHECK_OK {
        permission_denied(seq);
    }
}

/// Native nextval's error for a missing privilege.
fn permission_denied(seq: Oid) -> ! {
    error::new(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("permission denied for sequence {}", rel_name(seq)),
    )
    .raise(PgLogLevel::ERROR)
}

pub(super) fn rel_name(seq: Oid) -> String {
    // SAFETY: a catalog lookup; NULL for a relation that is gone.
    let name = unsafe { pg_sys::get_rel_name(seq) };
    if name.is_null() {
        seq.to_u32().to_string()
    } else {
        // SAFETY: a palloc'd C string.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    }
}

/// Takes the lock native nextval takes on a sequence, as native nextval
/// takes it: once a transaction, owned by the top transaction (so that a
/// subtransaction's end keeps it). An unregistration, whose ALTER SEQUENCE
/// conflicts with it, waits for every transaction that took snowflake IDs
/// through the sequence.
fn lock_sequence(seq: Oid) {
    /// Gives the statement's resource owner back, on an ERROR too.
    struct Restore(pg_sys::ResourceOwner);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: puts back the owner this backend had.
            unsafe { pg_sys::CurrentResourceOwner = self.0 };
        }
    }
    // SAFETY: a heavyweight lock on a relation, released at transaction end.
    unsafe {
        let _restore = Restore(pg_sys::CurrentResourceOwner);
        pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
        pg_sys::LockRelationOid(seq, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
    }
}

fn block_report(seq: Option<Oid>, e: BlockError) -> ErrorReport {
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
    let message = match seq.map(rel_name) {
        Some(n) => format!("sequence \"{n}\" cannot hand out snowflake IDs: {e}"),
        None => e.to_string(),
    };
    error::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, message).set_hint(hint)
}

/// A check's refusal, its report kept for the caller to raise or warn with.
pub(super) type Check = Result<(), Box<ErrorReport>>;

/// A block mode or an increment this server's layout cannot serve.
pub(super) fn check_block(increment: i64, block_mode: &str) -> Check {
    let Some(convention) = Convention::from_name(block_mode) else {
        return Err(Box::new(error::new(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("unknown block mode \"{block_mode}\""),
        )
        .set_hint("Use 'either' (the default: safe whichever end of a block the client reads), 'high' (Hibernate's pooled optimizer) or 'low' (pooled-lo, Npgsql HiLo).")));
    };
    let config = settings::config();
    BlockPlan::new(increment, convention, &config.codec.template(config.node))
        .map(|_| ())
        .map_err(|e| Box::new(block_report(None, e)))
}

/// An ID above every ID this server has handed out.
pub(super) fn resume_id() -> i64 {
    let state = shmem::read();
    let next = state.generator.resume_point();
    state.generator.template().encode(next.position, next.clock_back)
}

/// Where a sequence that is unregistered continues natively: the last ID
/// this server may issue in the tick of its next ID. Every ID it handed out
/// lies at or below it, and none it issues later lies among the values the
/// native sequence counts through next (they belong to the node numbers
/// above this one in that tick). A read: nothing of the generator moves.
pub(super) fn resume_value() -> i64 {
    let state = shmem::read();
    let next = state.generator.resume_point();
    let template = state.generator.template();
    template.encode(template.position(template.tick_of(next.position) + 1) - 1, next.clock_back)
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_sequence_currval() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_sequence_lastval() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_sequence_setval() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}
