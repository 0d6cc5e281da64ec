//! Registering and unregistering sequences, and the registry table's
//! triggers, which hold every other route to the table (a restore's COPY, an
//! owner's own INSERT) to what registering does.
//!
//! Registering (`snowflake_sequence_register`, one sequence or several)
//! checks each sequence and its owner, runs the registration protocol
//! ([`super::in_progress`]: every new plan routes sequence calls through our
//! functions, and the transactions that began before are waited for), takes
//! the sequences' locks all at once, raises the server's floor above a
//! sequence's own value where that lies in the ID space, sets the fence as
//! the sequence stands then ([`super::fence`]) and writes the registry row.
//! Unregistering takes the same lock first, which waits for every
//! transaction that took IDs through the sequence, and deletes the row; the
//! row trigger then lifts the fence and sets the sequence above every ID
//! handed out, as it does for a DELETE of one's own. Both queue the
//! invalidations that tell every backend, whatever `session_replication_role`
//! says.

use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::nextval::{self, check_block, resume_value, Check};
use super::registry::{self, Installed};
use super::{fence, names, operators, privileged};
use crate::pg::error::{self, Raise};
use crate::pg::{clock, floor, settings};
use crate::snowflake::time::UnixMillis;

pgrx::extension_sql!(
    "CREATE FUNCTION snowflake_sequence_register(seq regclass, block_mode text DEFAULT 'either') RETURNS void\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_register';\n\
     CREATE FUNCTION snowflake_sequence_register_all(seqs regclass[], block_mode text DEFAULT 'either') RETURNS void\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_register_all';\n\
     CREATE FUNCTION snowflake_sequence_unregister(seq regclass) RETURNS void\n\
     STRICT VOLATILE PARALLEL UNSAFE\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_unregister';\n\
     CREATE FUNCTION snowflake_sequence_registry_check() RETURNS trigger\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_registry_check';\n\
     CREATE FUNCTION snowflake_sequence_registry_changed() RETURNS trigger\n\
     LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_sequence_registry_changed';\n\
     REVOKE EXECUTE ON FUNCTION snowflake_sequence_registry_check() FROM PUBLIC;\n\
     REVOKE EXECUTE ON FUNCTION snowflake_sequence_registry_changed() FROM PUBLIC;\n",
    name = "sequence_register"
);

/// `snowflake_sequence_register(seq, block_mode)`.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_register(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL's fcinfo: regclass and text, STRICT.
    let (seq, mode) = unsafe {
        (
            pgrx::fcinfo::pg_getarg::<Oid>(fcinfo, 0).unwrap_or(pg_sys::InvalidOid),
            pgrx::fcinfo::pg_getarg::<String>(fcinfo, 1).unwrap_or_default(),
        )
    };
    register(&[seq], &mode.to_lowercase());
    pg_sys::Datum::from(0)
}

/// `snowflake_sequence_register_all(seqs regclass[], block_mode)`: several
/// at once, all or none (what `_table` and `_schema` call). Its own name: an
/// overload of `snowflake_sequence_register` would make a call with a
/// quoted name ambiguous.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_register_all(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL's fcinfo: an array of regclass (OIDs) and text, STRICT.
    let (seqs, mode) = unsafe {
        (
            pgrx::fcinfo::pg_getarg::<Vec<Option<Oid>>>(fcinfo, 0).unwrap_or_default(),
            pgrx::fcinfo::pg_getarg::<String>(fcinfo, 1).unwrap_or_default(),
        )
    };
    let mut seqs: Vec<Oid> = seqs.into_iter().flatten().collect();
    seqs.sort_by_key(|s| s.to_u32());
    seqs.dedup();
    register(&seqs, &mode.to_lowercase());
    pg_sys::Datum::from(0)
}

fn register(seqs: &[Oid], mode: &str) {
    let installed = installed();
    // What can be refused before any lock, for each.
    let mut todo = Vec::with_capacity(seqs.len());
    for &seq in seqs {
        check_sequence(seq);
        if registry::lookup(seq).is_some() {
            already(seq);
            continue;
        }
        let options = fence::options(seq).unwrap_or_else(|| not_a_sequence(seq));
        raise(check_type(seq, options.type_oid));
        raise(check_columns(seq));
        raise(check_block(options.increment, mode));
        raise(check_right_to_generate(seq, options.increment, &installed));
        todo.push(seq);
    }
    if todo.is_empty() {
        return;
    }
    raise(operators::check_none(&names::regclass_name(todo[0])));
    fence::lock(&todo, &installed);
    let mut rows = Vec::with_capacity(todo.len());
    for seq in todo {
        // Decided again under the lock: a registration that committed
        // meanwhile is seen now, and the options and value read below
        // cannot move.
        if registry::lookup(seq).is_some() {
            already(seq);
            continue;
        }
        let options = fence::options(seq).unwrap_or_else(|| not_a_sequence(seq));
        raise(check_type(seq, options.type_oid));
        raise(check_block(options.increment, mode));
        raise(floor_above(seq));
        let replaced = fence::set(seq);
        let native_max = if replaced.at_max {
            // Its MAXVALUE is no value native nextval could continue from.
            error::new(
                PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
                format!("sequence \"{}\" is at its MAXVALUE already", names::regclass_name(seq)),
            )
            .set_detail(
                "A fence left by DROP EXTENSION, or a sequence used up: unregistering it will lift its MAXVALUE, \
                 as NO MAXVALUE does.",
            )
            .report(PgLogLevel::NOTICE);
            i64::MAX
        } else {
            replaced.max
        };
        rows.push((seq, native_max, replaced.cycle));
    }
    if rows.is_empty() {
        return;
    }
    // One statement for all: each statement's end drops every backend's
    // registry, which the next one would read whole again.
    let query = format!(
        "INSERT INTO {}.snowflake_sequence_registry (seq, block_mode, native_max, native_cycle) \
         SELECT s::pg_catalog.regclass, $2, m, c \
         FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($3), pg_catalog.unnest($4)) AS r(s, m, c)",
        schema_name(&installed)
    );
    let seqs: Vec<Oid> = rows.iter().map(|r| r.0).collect();
    let maxes: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let cycles: Vec<bool> = rows.iter().map(|r| r.2).collect();
    {
        let _registering = Registering::begin();
        privileged::run(|| {
            Spi::run_with_args(&query, &[seqs.into(), mode.into(), maxes.into(), cycles.into()])
                .unwrap_or_else(|e| pgrx::error!("the registry cannot be written: {e}"))
        });
    }
    registry::changed(installed.table);
}

// SAFETY (for REGISTERING): a backend runs one thread.
/// Set while [`register`] writes the rows it checked and fenced: the row
/// trigger lets them through as they are.
static mut REGISTERING: bool = false;

/// REGISTERING, set for its life, reset on an ERROR too (pgrx unwinds
/// through it).
struct Registering;

impl Registering {
    fn begin() -> Registering {
        // SAFETY: see REGISTERING.
        unsafe { REGISTERING = true };
        Registering
    }
}

impl Drop for Registering {
    fn drop(&mut self) {
        // SAFETY: see REGISTERING.
        unsafe { REGISTERING = false };
    }
}

/// The sequence's own values lie below every ID it serves from now on: a
/// sequence that counted natively into the ID space (after an
/// unregistration, or a setval there) raises the server's floor above its
/// value, and above the block a pooled client took there (one that reads
/// a value as a block's first used the increment's values from it). Up to
/// the clock that waits a tick at most; beyond it, it stops generation for
/// as long, so it needs the right a floor needs.
fn floor_above(seq: Oid) -> Check {
    let (value, called) = fence::value(seq);
    let increment = fence::options(seq).map_or(1, |o| o.increment.max(1));
    let last = value.saturating_add(increment - 1);
    if !called || last < nextval::resume_id() {
        return Ok(());
    }
    let config = settings::config();
    let now = clock::now();
    let ahead = config
        .codec
        .first_id_at(UnixMillis(now.0.saturating_add(i64::from(config.codec.time.tick_ms()))))
        .is_ok_and(|next_tick| last >= next_tick);
    if ahead && !nextval::may_raise_floor() {
        return Err(Box::new(
            error::new(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!(
                    "permission denied to raise the snowflake ID floor to sequence \"{}\"",
                    names::regclass_name(seq)
                ),
            )
            .set_detail(format!(
                "The sequence stands at {last}, ahead of the clock: the IDs it serves must lie above it, and a \
                 floor there raises every ID this server issues."
            ))
            .set_hint("Register it as a role granted EXECUTE on snowflake_raise_floor(bigint)."),
        ));
    }
    floor::try_raise_to(last).map(|_| ())
}

/// `snowflake_sequence_unregister(seq)`.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_unregister(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL's fcinfo: one regclass, STRICT.
    let seq = unsafe { pgrx::fcinfo::pg_getarg::<Oid>(fcinfo, 0) }.unwrap_or(pg_sys::InvalidOid);
    unregister(seq);
    pg_sys::Datum::from(0)
}

fn unregister(seq: Oid) {
    let installed = installed();
    raise(check_owner(seq));
    // The lock ALTER SEQUENCE takes: it waits for every transaction that
    // took snowflake IDs through the sequence (our nextval holds a lock that
    // conflicts with it), and keeps new ones waiting until this one ends.
    // SAFETY: a heavyweight lock on a relation, released at transaction end.
    unsafe { pg_sys::LockRelationOid(seq, pg_sys::ShareRowExclusiveLock as _) };
    if registry::lookup(seq).is_none() {
        error::new(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("sequence \"{}\" is not registered", names::regclass_name(seq)),
        )
        .set_hint("SELECT * FROM snowflake_sequences lists the registered sequences.")
        .raise(PgLogLevel::ERROR);
    }
    // The row trigger does the rest, as for a DELETE of one's own.
    let query = format!("DELETE FROM {}.snowflake_sequence_registry WHERE seq = $1", schema_name(&installed));
    privileged::run(|| {
        // SAFETY: an OID datum, given as a regclass (the column's type).
        let seq = unsafe { pgrx::datum::DatumWithOid::new(seq, pg_sys::REGCLASSOID) };
        Spi::run_with_args(&query, &[seq]).unwrap_or_else(|e| pgrx::error!("the registry cannot be written: {e}"))
    });
    registry::changed(installed.table);
}

/// What a registration's end does to its sequence, by any route (an
/// unregistration, a DELETE of the registry row): under the lock ALTER
/// SEQUENCE takes, the fence is lifted to the MAXVALUE and CYCLE it
/// replaced, and native values continue above every ID this server handed
/// out and above the sequence's own values (a fence from a registration
/// that did not raise the floor above them, as 0.6.0's did not).
fn continue_natively(seq: Oid, native_max: i64, native_cycle: bool) {
    // SAFETY: a heavyweight lock on a relation, released at transaction end.
    unsafe { pg_sys::LockRelationOid(seq, pg_sys::ShareRowExclusiveLock as _) };
    let (fence_value, _) = fence::value(seq);
    let above = resume_value().max(fence_value);
    if above > native_max {
        error::new(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("sequence \"{}\" cannot continue above the snowflake IDs it handed out", names::regclass_name(seq)),
        )
        .set_detail(format!("Its MAXVALUE before registering was {native_max}; the IDs reach {above}."))
        .set_hint("Keep the sequence registered, or raise its MAXVALUE in the registry first.")
        .raise(PgLogLevel::ERROR);
    }
    fence::lift(seq, native_max, native_cycle);
    fence::continue_above(seq, above);
}

/// The registry row trigger (BEFORE, each row, whatever the replication
/// role): a row written by any route but [`register`] is held to what it
/// checks, and an inserted row's sequence gets its fence, as a restore
/// needs (its rows come before the sequences' values). A row whose sequence
/// does not exist, or is temporary, is left out with a WARNING, so that one
/// row never fails a whole restore.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_registry_check(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: checked to be called as a trigger, then its data.
    let data = unsafe { trigger_data(fcinfo, "snowflake_sequence_registry_check") };
    // SAFETY: the trigger's data: its event, relation and tuples.
    let (event, rel, old, new) = unsafe {
        let event = (*data).tg_event;
        let op = event & pg_sys::TRIGGER_EVENT_OPMASK;
        let old = (op != pg_sys::TRIGGER_EVENT_INSERT).then(|| (*data).tg_trigtuple);
        let new = match op {
            pg_sys::TRIGGER_EVENT_INSERT => Some((*data).tg_trigtuple),
            pg_sys::TRIGGER_EVENT_UPDATE => Some((*data).tg_newtuple),
            _ => None,
        };
        (op, (*data).tg_relation, old, new)
    };
    let installed = installed();
    // SAFETY: tuples of the registry table, read by its descriptor.
    let row = |tuple: *mut pg_sys::HeapTupleData| unsafe { Row::read(rel, tuple) };
    // SAFETY: a flag of the current role.
    let superuser = unsafe { pg_sys::superuser() };
    match event {
        // SAFETY: see REGISTERING.
        pg_sys::TRIGGER_EVENT_INSERT if unsafe { REGISTERING } => {}
        pg_sys::TRIGGER_EVENT_INSERT => {
            let new_row = row(new.expect("an INSERT has a new row"));
            // SAFETY: a catalog lookup.
            let kind = unsafe { pg_sys::get_rel_relkind(new_row.seq) };
            // SAFETY: a catalog lookup, of a relation that exists.
            let persistence = (kind != 0).then(|| unsafe { pg_sys::get_rel_persistence(new_row.seq) });
            let temporary = persistence == Some(pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char);
            if kind != pg_sys::RELKIND_SEQUENCE as std::ffi::c_char || temporary {
                error::new(
                    PgSqlErrorCode::ERRCODE_WARNING,
                    format!(
                        "registry row of relation \"{}\" left out: it is no {}sequence",
                        names::regclass_name(new_row.seq),
                        if temporary { "permanent " } else { "" }
                    ),
                )
                .set_detail("A dump made by snowflake_id 0.6.0 may name sequences that were dropped since.")
                .report(PgLogLevel::WARNING);
                return pg_sys::Datum::from(0);
            }
            let seq = new_row.seq;
            let options = fence::options(seq).unwrap_or_else(|| not_a_sequence(seq));
            let owner_checks = || {
                if superuser {
                    return Ok(());
                }
                check_owner(seq).and_then(|()| check_right_to_generate(seq, options.increment, &installed))
            };
            let checked = owner_checks()
                .and_then(|()| check_type(seq, options.type_oid))
                .and_then(|()| check_block(options.increment, &new_row.block_mode))
                .and_then(|()| check_columns(seq))
                .and_then(|()| operators::check_none(&names::regclass_name(seq)))
                .and_then(|()| {
                    fence::lock(&[seq], &installed);
                    floor_above(seq)
                });
            // One row the registry cannot take never fails a whole restore:
            // it is left out (its sequence keeps the fence its dump gave it).
            if let Err(refused) = checked {
                let mut warning = error::new(
                    PgSqlErrorCode::ERRCODE_WARNING,
                    format!(
                        "registry row of sequence \"{}\" left out: {}",
                        names::regclass_name(seq),
                        refused.message()
                    ),
                );
                if let Some(hint) = refused.hint() {
                    warning = warning.set_hint(hint.to_string());
                }
                warning.report(PgLogLevel::WARNING);
                return pg_sys::Datum::from(0);
            }
            // A dump's sequence arrives with its fence as MAXVALUE (below
            // the row's native one), its value set after the rows: the
            // fence stays where the dump has it.
            let options = fence::options(seq).unwrap_or_else(|| not_a_sequence(seq));
            if options.max < new_row.native_max && !options.cycle {
                fence::keep(seq);
            } else {
                fence::set(seq);
            }
        }
        pg_sys::TRIGGER_EVENT_UPDATE => {
            let (old_row, new_row) = (row(old.expect("an UPDATE has an old row")), row(new.expect("and a new one")));
            if old_row.seq != new_row.seq {
                error::new(
                    PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    "the sequence of a registration cannot be changed",
                )
                .set_hint("Unregister the one sequence and register the other.")
                .raise(PgLogLevel::ERROR);
            }
            if !superuser && exists(old_row.seq) {
                raise(check_owner(old_row.seq));
            }
            if let Some(options) = fence::options(new_row.seq) {
                raise(check_block(options.increment, &new_row.block_mode));
            }
        }
        _ => {
            // A row of a sequence that is gone may go by anyone.
            let old_row = row(old.expect("a DELETE has an old row"));
            // A temporary sequence (registered by 0.6.0) ends with its
            // session, and another session's cannot be read.
            if exists(old_row.seq) && !temporary(old_row.seq) {
                if !superuser {
                    raise(check_owner(old_row.seq));
                }
                continue_natively(old_row.seq, old_row.native_max, old_row.native_cycle);
            }
        }
    }
    for tuple in [old, new].into_iter().flatten() {
        fence::invalidate(row(tuple).seq);
    }
    // The statement trigger tells every backend, once a statement (a
    // restore's COPY of many rows).
    // SAFETY: the row PostgreSQL goes on with: the new one, or the one deleted.
    pg_sys::Datum::from(new.or(old).unwrap_or(std::ptr::null_mut()))
}

/// The registry's statement trigger (after every statement, TRUNCATE
/// included, whatever the replication role): every backend reads it again.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_sequence_registry_changed(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: checked to be called as a trigger, then its relation.
    unsafe {
        let data = trigger_data(fcinfo, "snowflake_sequence_registry_changed");
        registry::changed((*(*data).tg_relation).rd_id);
    }
    pg_sys::Datum::from(0)
}

/// The trigger data of a trigger function's call; an error for a direct call.
///
/// # Safety
/// `fcinfo` is PostgreSQL's.
unsafe fn trigger_data(fcinfo: pg_sys::FunctionCallInfo, name: &str) -> *mut pg_sys::TriggerData {
    // SAFETY: the caller's contract; the context is read as a TriggerData
    // only when its tag says it is one.
    unsafe {
        let context = (*fcinfo).context;
        if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_TriggerData {
            error::new(
                PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
                format!("{name}() is a trigger function"),
            )
            .set_hint("It is called by the registry's triggers, not directly.")
            .raise(PgLogLevel::ERROR);
        }
        context.cast()
    }
}

/// A row of the registry table.
struct Row {
    seq: Oid,
    block_mode: String,
    native_max: i64,
    native_cycle: bool,
}

impl Row {
    /// # Safety
    /// `tuple` is a tuple of `rel`, the registry table.
    unsafe fn read(rel: pg_sys::Relation, tuple: *mut pg_sys::HeapTupleData) -> Row {
        // SAFETY: the caller's contract.
        unsafe {
            let desc = (*rel).rd_att;
            let attnum = |name: &std::ffi::CStr| pg_sys::get_attnum((*rel).rd_id, name.as_ptr());
            let mut null = true;
            let seq = pg_sys::heap_getattr(tuple, attnum(c"seq").into(), desc, &mut null);
            let seq = Oid::from_datum(seq, null).unwrap_or(pg_sys::InvalidOid);
            let mode = pg_sys::heap_getattr(tuple, attnum(c"block_mode").into(), desc, &mut null);
            let block_mode = String::from_datum(mode, null).unwrap_or_default();
            let max = pg_sys::heap_getattr(tuple, attnum(c"native_max").into(), desc, &mut null);
            let native_max = i64::from_datum(max, null).unwrap_or(i64::MAX);
            let cycle = pg_sys::heap_getattr(tuple, attnum(c"native_cycle").into(), desc, &mut null);
            let native_cycle = bool::from_datum(cycle, null).unwrap_or(false);
            Row { seq, block_mode, native_max, native_cycle }
        }
    }
}

fn installed() -> Installed {
    registry::installed().unwrap_or_else(|| {
        error::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "snowflake_id's sequence mode is not installed in this database",
        )
        .set_hint("ALTER EXTENSION snowflake_id UPDATE installs it.")
        .raise(PgLogLevel::ERROR)
    })
}

fn schema_name(installed: &Installed) -> String {
    // SAFETY: a catalog lookup of the extension's schema, which exists.
    let name = unsafe { std::ffi::CStr::from_ptr(pg_sys::get_namespace_name(installed.schema)) };
    // SAFETY: quote_identifier returns its argument or a palloc'd copy.
    unsafe { std::ffi::CStr::from_ptr(pg_sys::quote_identifier(name.as_ptr())) }.to_string_lossy().into_owned()
}

fn temporary(rel: Oid) -> bool {
    // SAFETY: a catalog lookup of a relation that exists.
    unsafe { pg_sys::get_rel_persistence(rel) == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char }
}

fn exists(rel: Oid) -> bool {
    // SAFETY: a catalog lookup.
    unsafe { pg_sys::get_rel_relkind(rel) != 0 }
}

fn already(seq: Oid) {
    error::new(
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        format!("sequence \"{}\" is registered already, skipping", names::regclass_name(seq)),
    )
    .report(PgLogLevel::NOTICE);
}

fn not_a_sequence(seq: Oid) -> ! {
    error::new(
        PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
        format!("\"{}\" is not a sequence", names::regclass_name(seq)),
    )
    .set_hint(
        "Name the sequence a column takes its values from, as pg_get_serial_sequence('table', 'column') gives it, \
             or register a whole table with snowflake_sequence_register_table().",
    )
    .raise(PgLogLevel::ERROR)
}

/// A permanent sequence the current role owns.
fn check_sequence(seq: Oid) {
    // SAFETY: a catalog lookup (0 for a relation that does not exist).
    let kind = unsafe { pg_sys::get_rel_relkind(seq) };
    if kind == 0 {
        error::new(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {} does not exist", seq.to_u32()),
        )
        .raise(PgLogLevel::ERROR);
    }
    if kind != pg_sys::RELKIND_SEQUENCE as std::ffi::c_char {
        not_a_sequence(seq);
    }
    // SAFETY: a catalog lookup of a relation that exists.
    let persistence = unsafe { pg_sys::get_rel_persistence(seq) };
    raise(check_owner(seq));
    if persistence == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char {
        error::new(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("temporary sequence \"{}\" cannot be registered", names::regclass_name(seq)),
        )
        .set_detail("A registration outlives the session that a temporary sequence ends with.")
        .set_hint("Register a permanent sequence.")
        .raise(PgLogLevel::ERROR);
    }
}

/// Raises a refused check's report as an ERROR.
fn raise(check: Check) {
    if let Err(report) = check {
        (*report).raise(PgLogLevel::ERROR);
    }
}

fn check_owner(seq: Oid) -> Check {
    // SAFETY: catalog lookups of the relation's owner and the current role.
    let owns = unsafe {
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::RELOID as _, seq.into());
        if tuple.is_null() {
            false
        } else {
            let owner = (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tuple)).relowner;
            pg_sys::ReleaseSysCache(tuple);
            pg_sys::has_privs_of_role(pg_sys::GetUserId(), owner)
        }
    };
    if owns {
        Ok(())
    } else {
        Err(Box::new(error::new(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("must be owner of sequence {}", names::regclass_name(seq)),
        )))
    }
}

fn check_type(seq: Oid, type_oid: Oid) -> Check {
    if type_oid == pg_sys::INT8OID {
        return Ok(());
    }
    let name = names::regclass_name(seq);
    Err(Box::new(
        error::new(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!("sequence \"{name}\" is of type {}, which cannot hold a snowflake ID", type_name(type_oid)),
        )
        .set_hint(format!("Make it bigint first: ALTER SEQUENCE {} AS bigint.", names::qualified(seq))),
    ))
}

/// Every column the sequence fills must hold a snowflake ID: those it is
/// owned by (serial, identity) and those whose default calls it, of type
/// bigint or a domain over it.
fn check_columns(seq: Oid) -> Check {
    // In pg_catalog's path: the caller's own operators take no part.
    let columns = privileged::in_catalog_path(|| {
        Spi::connect(|client| {
            client
                .select(
                    "SELECT c.oid, a.attname::text, a.atttypid
                 FROM pg_catalog.pg_depend d
                 JOIN pg_catalog.pg_class c ON c.oid = d.refobjid
                 JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                 WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = $1
                   AND d.deptype IN ('a', 'i') AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
                 UNION
                 SELECT c.oid, a.attname::text, a.atttypid
                 FROM pg_catalog.pg_depend d
                 JOIN pg_catalog.pg_attrdef ad ON ad.oid = d.objid
                 JOIN pg_catalog.pg_class c ON c.oid = ad.adrelid
                 JOIN pg_catalog.pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
                 WHERE d.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass
                   AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.refobjid = $1
                 ORDER BY 1, 2",
                    None,
                    &[seq.into()],
                )
                .map(|rows| {
                    rows.filter_map(|r| {
                        Some((r.get::<Oid>(1).ok()??, r.get::<String>(2).ok()??, r.get::<Oid>(3).ok()??))
                    })
                    .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
    });
    for (table, column, type_oid) in columns {
        // SAFETY: a catalog lookup.
        if unsafe { pg_sys::getBaseType(type_oid) } != pg_sys::INT8OID {
            let table_name = names::regclass_name(table);
            return Err(Box::new(
                error::new(
                    PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                    format!(
                        "column \"{column}\" of relation \"{table_name}\" is of type {}, which cannot hold a snowflake ID",
                        type_name(type_oid)
                    ),
                )
                .set_hint(format!(
                    "Make it bigint first: ALTER TABLE {} ALTER COLUMN {} TYPE bigint.",
                    names::qualified(table),
                    quote_identifier(&column)
                )),
            ));
        }
    }
    Ok(())
}

/// The sequence's owner generates for whoever may call nextval on it: it
/// must have the rights the extension grants to generate, and for blocks
/// (INCREMENT BY more than 1) those of snowflake_next_ids().
fn check_right_to_generate(seq: Oid, increment: i64, installed: &Installed) -> Check {
    let schema = schema_name(installed);
    let may = |function: &str| {
        privileged::in_catalog_path(|| {
            Spi::get_one::<bool>(&format!("SELECT pg_catalog.has_function_privilege('{schema}.{function}', 'EXECUTE')"))
        })
        .ok()
        .flatten()
        .unwrap_or(false)
    };
    if !may("snowflake_next_id()") {
        return Err(Box::new(
            error::new(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!(
                    "permission denied to register sequence \"{}\": no right to generate snowflake IDs",
                    names::regclass_name(seq)
                ),
            )
            .set_hint("GRANT EXECUTE ON FUNCTION snowflake_next_id() TO the role that registers it."),
        ));
    }
    if increment > 1 && !may("snowflake_next_ids(integer)") {
        return Err(Box::new(error::new(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "permission denied to register sequence \"{}\" of increment {increment}: blocks need the right to generate in bulk",
                names::regclass_name(seq)
            ),
        )
        .set_hint("GRANT EXECUTE ON FUNCTION snowflake_next_ids(integer) TO the role that registers it.")));
    }
    Ok(())
}

fn type_name(type_oid: Oid) -> String {
    // SAFETY: format_type_be returns a palloc'd C string.
    unsafe { std::ffi::CStr::from_ptr(pg_sys::format_type_be(type_oid)) }.to_string_lossy().into_owned()
}

fn quote_identifier(name: &str) -> String {
    let Ok(c) = std::ffi::CString::new(name) else { return name.to_string() };
    // SAFETY: quote_identifier returns its argument or a palloc'd copy.
    unsafe { std::ffi::CStr::from_ptr(pg_sys::quote_identifier(c.as_ptr())) }.to_string_lossy().into_owned()
}

/// The version-1 calling convention records of the functions above.
macro_rules! finfo_v1 {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    )*};
}

finfo_v1!(
    pg_finfo_snowflake_sequence_register,
    pg_finfo_snowflake_sequence_register_all,
    pg_finfo_snowflake_sequence_unregister,
    pg_finfo_snowflake_sequence_registry_check,
    pg_finfo_snowflake_sequence_registry_changed
);
