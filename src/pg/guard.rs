//! The guard's trigger: each row a logical-replication apply worker writes
//! into a table armed with `snowflake_guard(tbl)` (`sql/snowflake_guard.sql`)
//! has its ID checked ([`crate::snowflake::guard`]) against this server's
//! own number and the IDs of the same number other servers delivered.
//!
//! The trigger is a REPLICA trigger, so it fires only in apply workers, and
//! it checks only rows that carry a replication origin: local inserts never
//! reach it, and restores with `session_replication_role = replica` pass.
//! An UPDATE that keeps the ID (the row was written before) is no new ID.
//! Which server a row comes from is asked of the publisher once per worker
//! ([`super::publisher`]); only IDs generated since the guard was armed
//! (less `max_clock_drift`) are judged, so legacy keys and old rows a table
//! synchronisation copies are no evidence.
//!
//! On a clash it counts it and keeps its report for `snowflake_status()`,
//! then fails the apply or warns, as `snowflake_id.guard_action` says. The
//! server keeps generating either way: both servers share the number, and
//! this one cannot tell which should stop.

use std::ffi::CStr;
use std::time::{Duration, Instant};

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::clock;
use super::error::{self, Raise};
use super::publisher::{self, Origin};
use super::settings::{self, GuardAction};
use super::shmem::{self, Refused};
use super::timestamp::from_pg_micros;
use crate::snowflake::codec::{Codec, Node};
use crate::snowflake::guard::{self, Delivered, Own, Server, Verdict};
use crate::snowflake::time::UnixMillis;

pgrx::extension_sql_file!("../../sql/snowflake_guard.sql", name = "guard");

/// How far before the guard was armed an ID's time may lie and still be
/// judged: the publishers' clocks may lag this server's. A minute, not
/// `max_clock_drift`: keys that are no snowflake IDs decode to instants just
/// after the epoch, which may be a go-live day.
const ARMING_SKEW_MS: i64 = 60_000;

/// The trigger function, `snowflake_guard_check(id_column, armed_at_ms)`.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn snowflake_guard_check(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: `fcinfo` is PostgreSQL's; a trigger call has TriggerData as its context.
    let context = unsafe { (*fcinfo).context };
    // SAFETY: a non-null context is a Node.
    if context.is_null() || unsafe { (*context).type_ } != pg_sys::NodeTag::T_TriggerData {
        error::new(
            PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
            "snowflake_guard_check() must be called as a trigger",
        )
        .set_hint("Arm the check with SELECT snowflake_guard('table').")
        .raise(PgLogLevel::ERROR);
    }
    // SAFETY: checked above.
    let data = unsafe { &*context.cast::<pg_sys::TriggerData>() };
    let update = data.tg_event & pg_sys::TRIGGER_EVENT_OPMASK == pg_sys::TRIGGER_EVENT_UPDATE;
    let row = if update { data.tg_newtuple } else { data.tg_trigtuple };
    let pass = pg_sys::Datum::from(row);
    let Some(origin) = publisher::transaction_origin() else { return pass };
    // SAFETY: the trigger's relation and tuples, valid for this call.
    let Some(id) = (unsafe { id_of(data, row) }) else { return pass };
    // SAFETY: as above.
    if update && unsafe { id_of(data, data.tg_trigtuple) } == Some(id) {
        return pass;
    }
    let mut source = publisher::source_of(origin);
    if source.server.as_ref().is_some_and(publisher::is_self) {
        return pass; // this server's own rows, from another database or its own standby
    }
    let config = settings::config();
    let own = {
        let state = shmem::read();
        let known = state.unknown.is_none_or(|u| matches!(u, shmem::Unknown::NotBefore(_)));
        // An auto server without a claim has no number of its own yet.
        let node = (!state.claim_pending).then_some(state.node);
        Own { node, issued_below: state.generator.resume_point(), known }
    };
    // SAFETY: the trigger of this call.
    let judge_from = UnixMillis(unsafe { armed_at(data) }.0.saturating_sub(ARMING_SKEW_MS));
    let mut asked_again = false;
    let verdict = loop {
        // A copy carries old rows under the publisher's identity of today:
        // checked for this server's own number only.
        let server = source.server.filter(|_| !source.copy);
        let verdict =
            guard::check(&config.codec, own, &mut shmem::guard().owners, id, (server, source.path), judge_from);
        match verdict {
            // The other server's subscription was dropped (its number fixed,
            // or the server removed): it clashes no more.
            Verdict::TwoServers { node, other, .. } if !publisher::path_exists(other.via) => {
                shmem::guard().owners.forget(node, other.server);
            }
            // One system on two timelines: first make sure this worker's
            // answer is not from before its publisher was promoted.
            Verdict::TwoServers { other, .. }
                if !asked_again && server.is_some_and(|s| s.system == other.server.system) =>
            {
                asked_again = true;
                source = publisher::ask_again(origin);
            }
            verdict => break verdict,
        }
    };
    // Outside the guard's lock: a catalog lookup.
    let verdict = verdict.settle(sends_rows);
    let (node, other, proven, past_a_proof) = match verdict {
        Verdict::Fine | Verdict::Untracked(_) => return pass,
        Verdict::OwnNode { node, proven, past_a_proof } => (node, None, proven, past_a_proof),
        Verdict::TwoServers { node, other, proven } => (node, Some(other), proven, false),
    };
    // SAFETY: the trigger's relation.
    let table = unsafe { table_name(data.tg_relation) };
    let finding = Finding { node, id, origin, server: source.server, other, proven, past_a_proof };
    report(&config.codec, finding, &table);
    pass
}

/// Whether rows of this server may leave it by logical replication, and so
/// come back to it: a publication in this database, or a logical slot. An
/// answer that cannot be had is yes, which leaves a finding evidence.
fn sends_rows() -> bool {
    Spi::get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_publication) \
         OR EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_type = 'logical')",
    )
    .ok()
    .flatten()
    .unwrap_or(true)
}

#[no_mangle]
pub extern "C" fn pg_finfo_snowflake_guard_check() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// When the guard on this trigger's table was armed: its second argument,
/// in Unix milliseconds. A trigger armed by 0.4.0 has none (its update
/// re-arms every guard); then the server's start stands in.
///
/// # Safety
/// `data` is the current trigger call's.
unsafe fn armed_at(data: &pg_sys::TriggerData) -> UnixMillis {
    // SAFETY: the caller's contract: the trigger is valid; tgargs holds tgnargs C strings.
    let armed = unsafe {
        let trigger = &*data.tg_trigger;
        (trigger.tgnargs >= 2)
            .then(|| CStr::from_ptr(*trigger.tgargs.add(1)).to_str().ok()?.parse::<i64>().ok())
            .flatten()
    };
    // SAFETY: set once when the postmaster starts.
    armed.map_or_else(|| from_pg_micros(unsafe { pg_sys::PgStartTime }), UnixMillis)
}

/// The ID in the column the trigger checks, `None` when it is NULL. The
/// column is the trigger's `UPDATE OF` column, by number, so it follows a
/// rename (a coordinated rename on publisher and subscriber is valid for
/// logical replication); a trigger without one falls back to the name it was
/// armed with. A column no longer a bigint fails the apply: the check would
/// read something else as an ID.
///
/// # Safety
/// `data` is the current trigger call's, `row` one of its tuples.
unsafe fn id_of(data: &pg_sys::TriggerData, row: pg_sys::HeapTuple) -> Option<i64> {
    // SAFETY: the caller's contract: the trigger and relation are valid.
    let (trigger, rel) = unsafe { (&*data.tg_trigger, data.tg_relation) };
    if trigger.tgnargs < 1 || row.is_null() {
        return None;
    }
    // SAFETY: tgattr holds tgnattr column numbers, tgargs tgnargs C strings;
    // the relation is open.
    let attnum = unsafe {
        if trigger.tgnattr >= 1 {
            i32::from(*trigger.tgattr)
        } else {
            pg_sys::attnameAttNum(rel, *trigger.tgargs, false)
        }
    };
    // SAFETY: the open relation's descriptor.
    let natts = unsafe { (*(*rel).rd_att).natts };
    // SAFETY: attnumTypeId reads the relation's descriptor; a dropped column has no type.
    if attnum <= 0 || attnum > natts || unsafe { pg_sys::attnumTypeId(rel, attnum) } != pg_sys::INT8OID {
        // SAFETY: the open relation, and a C string of the trigger's.
        let (column, table) = unsafe {
            let name = pg_sys::get_attname((*rel).rd_id, attnum as i16, true);
            let name = if name.is_null() { *trigger.tgargs } else { name };
            (CStr::from_ptr(name).to_string_lossy().into_owned(), table_name(rel))
        };
        error::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("column \"{column}\" checked by snowflake_id_guard is no bigint column of table \"{table}\""),
        )
        .set_detail("The column was dropped or its type changed after snowflake_guard() armed the check.")
        .set_hint(format!("Arm the check again: SELECT snowflake_guard('{table}', 'column holding the IDs')."))
        .raise(PgLogLevel::ERROR);
    }
    let mut null = false;
    // SAFETY: `row` is a tuple of `rel`, whose descriptor describes it.
    let value = unsafe { pg_sys::heap_getattr(row, attnum, (*rel).rd_att, &mut null) };
    // A bigint is passed by value.
    (!null).then(|| value.value() as i64)
}

/// The relation's schema-qualified, quoted name.
///
/// # Safety
/// `rel` is an open relation.
unsafe fn table_name(rel: pg_sys::Relation) -> String {
    // SAFETY: the caller's contract; the lookups return palloc'd strings.
    unsafe {
        let form = &*(*rel).rd_rel;
        let schema = pg_sys::get_namespace_name(form.relnamespace);
        let name = pg_sys::quote_qualified_identifier(schema, form.relname.data.as_ptr());
        CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}

/// Where rows of `origin` come from: the subscription (a native one's
/// origin is named `pg_<subscription oid>`, or `pg_<oid>_<table oid>` for
/// its table synchronisation), otherwise the origin's own name.
fn source(origin: Origin) -> String {
    let Some(name) = publisher::origin_name(origin) else { return format!("replication origin {origin}") };
    let subscription = publisher::subscription_of(&name).and_then(|oid| {
        Spi::get_one_with_args::<String>(
            "SELECT subname::text FROM pg_catalog.pg_subscription WHERE oid = $1",
            &[oid.into()],
        )
        .ok()
        .flatten()
    });
    match subscription {
        Some(sub) => format!("subscription \"{sub}\""),
        None => format!("replication origin \"{name}\""),
    }
}

/// A server as a report names it.
fn server_text(server: &Server) -> String {
    if server.timeline == 0 {
        format!(
            "the sender behind a replication origin of another replication system (name hash {:016x})",
            server.system
        )
    } else {
        format!("the server with system identifier {} (timeline {})", server.system, server.timeline)
    }
}

/// What the guard found in one applied ID, for its report.
struct Finding {
    node: Node,
    id: i64,
    origin: Origin,
    /// Who sent it, when known.
    server: Option<Server>,
    /// What another server of the same number delivered, if that is the finding.
    other: Option<Delivered>,
    /// Proof that two servers generate with the number, rather than evidence.
    proven: bool,
    /// An ID of this server's number below its IDs, at or above one proven
    /// another server's (see [`Verdict::OwnNode`]).
    past_a_proof: bool,
}

fn report(codec: &Codec, f: Finding, table: &str) {
    let (number, id) = (codec.node_text(f.node), f.id);
    let from = source(f.origin);
    let (message, detail) = match (f.server, f.other) {
        (Some(server), Some(other)) => (
            format!("snowflake_id number ({number}) arrives from two servers in table \"{table}\""),
            format!(
                "The applied ID {id} arrives through {from} from {}, among IDs of that number from {} to {} that \
                 arrived from {} (since this server started){}",
                server_text(&server),
                other.low,
                other.high,
                server_text(&other.server),
                if !f.proven {
                    ". Another replication system's origins do not say which server sent their rows, so the two \
                     may be one provider reached through two subscriptions (pglogical or Spock replication sets \
                     split over subscriptions): no proof of a clash, so the row is stored and counted."
                } else if server.system == other.server.system {
                    ": two servers generate with it at once, and their IDs can repeat. Both are one system on two \
                     timelines: the old primary of a failover still generates beside the promoted standby (split \
                     brain)."
                } else {
                    ": two servers generate with it at once, and their IDs can repeat."
                }
            ),
        ),
        _ => (
            format!("snowflake_id number ({number}) of this server arrives from {from} in table \"{table}\""),
            if f.proven && f.past_a_proof {
                format!(
                    "The applied ID {id} carries this server's own snowflake_id number. It lies below the IDs this \
                     server has issued, but at or above an ID of that number already proven another server's since \
                     this server started, and no row of this server can come back to it (it has no publication in \
                     this database and no logical replication slot): another server generates with it, its rows \
                     held back (by a network partition, say) while this server issued IDs past them, and IDs of \
                     the two can repeat."
                )
            } else if f.proven {
                format!(
                    "The applied ID {id} carries this server's own snowflake_id number, and this server has not \
                     issued it: another server generates with it, and IDs of the two can repeat."
                )
            } else {
                format!(
                    "The applied ID {id} carries this server's own snowflake_id number and lies below the IDs this \
                     server has issued: it may be one of this server's own rows coming back (a table re-seeded \
                     from a subscriber that had copied it), or another server's with its number. No proof of a \
                     clash, so the row is stored and counted."
                )
            },
        ),
    };
    shmem::guard().record(&format!("{message}. {detail}"), clock::now(), f.proven);
    let hint = "Give every generating server its own snowflake_id.datacenter_id and worker_id (compare \
                snowflake_status() across servers). snowflake_id.guard_action says whether rows that prove a clash \
                stop the apply (error) or are stored (warning); rows that are no proof are always stored.";
    match settings::guard_action() {
        GuardAction::Error if f.proven => {
            shmem::count_refusal(Refused::Guard);
            error::new(PgSqlErrorCode::ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION, message)
                .set_detail(detail)
                .set_hint(hint)
                .raise(PgLogLevel::ERROR)
        }
        _ => {
            let Some(unlogged) = warning_due() else { return };
            let detail = match unlogged {
                0 => detail,
                n => format!("{detail} ({n} more such rows applied by this worker since its last warning.)"),
            };
            error::new(PgSqlErrorCode::ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION, message)
                .set_detail(detail)
                .set_hint(hint)
                .report(PgLogLevel::WARNING);
        }
    }
}

/// How often one worker logs a stored clash. Every clash is counted in
/// snowflake_status(); a warning per row would flood the log, and a parallel
/// apply worker sends its warnings through a queue its leader does not read
/// while it waits for the transaction, so a flood stalls the apply.
const WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// This process's last clash warning, and the clashes since then it did not log.
static mut WARNED: Option<(Instant, u64)> = None;

/// Whether a warning is due now, and how many clashes went unlogged since
/// the last; `None` counts this one as unlogged.
fn warning_due() -> Option<u64> {
    // SAFETY: backend-local, and backends are single-threaded.
    let (due, next) = match unsafe { WARNED } {
        Some((at, unlogged)) if at.elapsed() < WARNING_INTERVAL => (None, (at, unlogged + 1)),
        last => (Some(last.map_or(0, |(_, unlogged)| unlogged)), (Instant::now(), 0)),
    };
    // SAFETY: as above.
    unsafe { WARNED = Some(next) };
    due
}
