//! Which server the rows an apply worker applies come from: the guard's
//! [`Server`], asked of the publisher once per process.
//!
//! A native subscription's apply worker runs with the replication origin
//! `pg_<subscription oid>`, and each of its table synchronisation workers
//! with `pg_<subscription oid>_<table oid>`. Their publisher is asked over a
//! short replication connection of its own, made with the subscription's
//! connection string through the walreceiver functions the worker has
//! loaded: `IDENTIFY_SYSTEM` answers its system identifier and timeline.
//! Asking the server, rather than naming the subscription or the origin,
//! is what lets the guard see one publisher behind several publications,
//! subscriptions or databases, and a reused origin number as whoever uses it
//! now. A worker keeps its subscription and connection for its life
//! (`ALTER SUBSCRIPTION` restarts it), so one answer serves it until it exits.
//!
//! Rows of other origins (pglogical, Spock) count as one server per origin
//! name, a stand-in the guard takes for no proof: two such origins may be
//! one provider. When the publisher cannot be reached for the question, the worker's
//! rows are checked against this server's own number only, and a WARNING
//! says so once per process.

use std::ffi::{c_char, CStr};
use std::time::{Duration, Instant};

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error;
use crate::snowflake::guard::Server;

/// A replication origin, as PostgreSQL numbers them (19 renamed the type).
#[cfg(not(feature = "pg19"))]
pub type Origin = pg_sys::RepOriginId;
#[cfg(feature = "pg19")]
pub type Origin = pg_sys::ReplOriginId;

/// The replication origin of this backend's transaction: set in an apply
/// worker (its subscription's), `None` in an ordinary session.
pub fn transaction_origin() -> Option<Origin> {
    // A plain global of this process, which an apply worker sets once its
    // origin session is up; PostgreSQL 19 moved it into a struct.
    #[cfg(not(feature = "pg19"))]
    // SAFETY: read in the process's main thread, as PostgreSQL reads it.
    let (origin, invalid) = (unsafe { pg_sys::replorigin_session_origin }, pg_sys::InvalidRepOriginId);
    #[cfg(feature = "pg19")]
    // SAFETY: as above.
    let (origin, invalid) = (unsafe { pg_sys::replorigin_xact_state.origin }, pg_sys::InvalidReplOriginId);
    (u32::from(origin) != invalid).then_some(origin)
}

/// `SubscriptionRelationId`: pg_subscription's fixed catalog OID, which
/// pgrx does not export.
const PG_SUBSCRIPTION: u32 = 6100;

/// Where a worker's rows come from.
#[derive(Clone, Copy)]
pub struct Source {
    /// The server behind the origin; `None` when it could not be asked (the
    /// caller then checks only for this server's own number).
    pub server: Option<Server>,
    /// The path the rows arrive by, as [`path_exists`] reads it.
    pub path: u64,
    /// The rows are a table synchronisation's copy: old rows, labelled with
    /// the publisher as it is today.
    pub copy: bool,
}

/// This process's origin, what was asked about it, and when.
static mut ASKED: Option<(Origin, Source, Instant)> = None;

/// How long a failed question, or an answer that may have gone stale, stands
/// before the publisher is asked again.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(10);

/// Where the rows arriving under `origin` come from.
pub fn source_of(origin: Origin) -> Source {
    // SAFETY: backend-local, and backends are single-threaded.
    match unsafe { ASKED } {
        Some((asked, source, at)) if asked == origin && (source.server.is_some() || at.elapsed() < ASK_AGAIN_AFTER) => {
            source
        }
        _ => ask_now(origin),
    }
}

/// Asks the publisher again, if the last answer is older than a few
/// seconds: a publisher that was a standby (logical decoding on a standby,
/// 16 and later) may have been promoted to a new timeline since.
pub fn ask_again(origin: Origin) -> Source {
    // SAFETY: as above.
    match unsafe { ASKED } {
        Some((asked, source, at)) if asked == origin && at.elapsed() < ASK_AGAIN_AFTER => source,
        _ => ask_now(origin),
    }
}

fn ask_now(origin: Origin) -> Source {
    let name = origin_name(origin);
    let path = path_of(origin, name.as_deref().unwrap_or_default());
    let copy = name.as_deref().and_then(|n| n.strip_prefix("pg_")).is_some_and(|rest| rest.contains('_'));
    let server = name.and_then(|name| ask(&name));
    let source = Source { server, path, copy };
    // SAFETY: as above.
    unsafe { ASKED = Some((origin, source, Instant::now())) };
    source
}

/// Whether `server` is this one: rows of a subscription within this cluster
/// (another database) or from its own standby are its own rows.
pub fn is_self(server: &Server) -> bool {
    // SAFETY: the control file's copy in shared memory; an apply worker runs
    // outside recovery, where the insertion timeline is valid.
    let (system, timeline) = unsafe { (pg_sys::GetSystemIdentifier(), pg_sys::GetWALInsertionTimeLine()) };
    server.system == system && server.timeline == timeline
}

/// A path: an origin's number and its name, which PostgreSQL gives a reused
/// number anew.
fn path_of(origin: Origin, name: &str) -> u64 {
    (u64::from(origin) << 48) | (fnv1a(name.as_bytes()) & PATH_NAME_BITS)
}

const PATH_NAME_BITS: u64 = (1 << 48) - 1;

/// Whether the replication origin a path names still exists (a dropped
/// subscription's does not, nor does a number reused by another).
pub fn path_exists(path: u64) -> bool {
    let origin = (path >> 48) as Origin;
    origin_name(origin).is_some_and(|name| path_of(origin, &name) == path)
}

fn ask(name: &str) -> Option<Server> {
    let Some(subscription) = subscription_of(name) else {
        return Some(Server { system: fnv1a(name.as_bytes()), timeline: 0 });
    };
    match identify(subscription) {
        Ok(server) => Some(server),
        Err(why) => {
            error::new(
                PgSqlErrorCode::ERRCODE_CONNECTION_FAILURE,
                format!("snowflake_guard could not ask the publisher of replication origin \"{name}\" who it is"),
            )
            .set_detail(format!(
                "{why}. Meanwhile this worker's rows are checked against this server's own number only."
            ))
            .set_hint(
                "The guard opens one short replication connection to the publisher, with the subscription's \
                 connection string, when a worker starts: it needs a free max_wal_senders slot there. It asks \
                 again after 10 s.",
            )
            .report(PgLogLevel::WARNING);
            None
        }
    }
}

/// An origin's name; `None` when it no longer exists.
pub fn origin_name(origin: Origin) -> Option<String> {
    let mut name: *mut c_char = std::ptr::null_mut();
    // SAFETY: a catalog lookup inside the worker's transaction; with
    // missing_ok it returns false instead of raising.
    let found = unsafe { pg_sys::replorigin_by_oid(origin, true, &mut name) };
    // SAFETY: a palloc'd C string when found.
    (found && !name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
}

/// The native subscription an origin name (`pg_<oid>` or `pg_<oid>_<relid>`)
/// belongs to, if that subscription exists.
pub fn subscription_of(origin_name: &str) -> Option<pg_sys::Oid> {
    let rest = origin_name.strip_prefix("pg_")?;
    let (oid, rel) = rest.split_once('_').unwrap_or((rest, "0"));
    if !rel.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let oid = pg_sys::Oid::from(oid.parse::<u32>().ok()?);
    Subscription::open(oid).map(|_| oid)
}

/// The subscription's catalog row, held from the system cache.
struct Subscription(pg_sys::HeapTuple);

impl Subscription {
    fn open(oid: pg_sys::Oid) -> Option<Subscription> {
        // SAFETY: a system cache lookup inside a transaction.
        let tuple = unsafe {
            pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::SUBSCRIPTIONOID as _, pg_sys::Datum::from(oid))
        };
        (!tuple.is_null()).then_some(Subscription(tuple))
    }

    /// A column of the row by name (so that no version's attribute numbers
    /// are hard-coded); `None` when it is NULL or the version has no such column.
    fn column(&self, name: &CStr) -> Option<pg_sys::Datum> {
        // SAFETY: a catalog lookup of a fixed relation's attribute.
        let attnum = unsafe { pg_sys::get_attnum(pg_sys::Oid::from(PG_SUBSCRIPTION), name.as_ptr()) };
        if attnum <= 0 {
            return None;
        }
        let mut null = false;
        // SAFETY: the tuple is pinned by this value; the column is one of its relation's.
        let value = unsafe {
            pg_sys::SysCacheGetAttr(pg_sys::SysCacheIdentifier::SUBSCRIPTIONOID as _, self.0, attnum, &mut null)
        };
        (!null).then_some(value)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // SAFETY: the tuple this value holds from SearchSysCache1.
        unsafe { pg_sys::ReleaseSysCache(self.0) };
    }
}

/// The connection string the subscription's apply worker connects with.
#[cfg(not(feature = "pg19"))]
fn connection_string(subscription: &Subscription, _oid: pg_sys::Oid) -> Result<*mut c_char, String> {
    let conninfo = subscription.column(c"subconninfo").ok_or("the subscription has no connection string")?;
    // SAFETY: a text datum of the row; the copy is palloc'd.
    Ok(unsafe { pg_sys::text_to_cstring(conninfo.cast_mut_ptr()) })
}

/// The connection string the subscription's apply worker connects with:
/// PostgreSQL 19's `CREATE SUBSCRIPTION ... SERVER` keeps none in the
/// catalog, but a foreign server and a user mapping that PostgreSQL turns
/// into one, as the apply worker does.
#[cfg(feature = "pg19")]
fn connection_string(_subscription: &Subscription, oid: pg_sys::Oid) -> Result<*mut c_char, String> {
    // SAFETY: catalog lookups inside the apply's transaction, as the apply
    // worker makes them; an error (a user mapping gone) fails the apply,
    // which the worker's own connection would do too.
    unsafe {
        let subscription = pg_sys::GetSubscription(oid, true);
        if subscription.is_null() {
            return Err("the subscription is gone".into());
        }
        let conninfo = pg_sys::SubscriptionConninfo(subscription);
        if conninfo.is_null() {
            return Err("the subscription has no connection string".into());
        }
        Ok(conninfo)
    }
}

/// Asks the subscription's publisher for its system identifier and timeline.
fn identify(oid: pg_sys::Oid) -> Result<Server, String> {
    let subscription = Subscription::open(oid).ok_or("the subscription is gone")?;
    let conninfo = connection_string(&subscription, oid)?;
    // As the apply worker does: a password is required unless the
    // subscription says otherwise or its owner is a superuser.
    let owner = subscription.column(c"subowner").map_or(pg_sys::InvalidOid, |d| pg_sys::Oid::from(d.value() as u32));
    let password_required = subscription.column(c"subpasswordrequired").is_none_or(|d| d.value() != 0);
    // SAFETY: a catalog lookup of a role.
    let must_use_password = password_required && !unsafe { pg_sys::superuser_arg(owner) };
    drop(subscription);
    // Apply and table synchronisation workers have loaded libpqwalreceiver;
    // a parallel apply worker has not.
    // SAFETY: a global PostgreSQL sets when the library loads; checked for NULL.
    if unsafe { pg_sys::WalReceiverFunctions.is_null() } {
        // SAFETY: loading a library of the installation, as the apply worker does.
        unsafe { pg_sys::load_file(c"libpqwalreceiver".as_ptr(), false) };
    }
    // SAFETY: as above.
    let functions =
        unsafe { pg_sys::WalReceiverFunctions.as_ref() }.ok_or("the walreceiver functions are not loaded")?;
    let mut err: *mut c_char = std::ptr::null_mut();
    // SAFETY: PostgreSQL's connect function, as the apply worker calls it; it
    // reports a failed connection through `err`. It may also raise an ERROR
    // (an interrupt while it waits, a password the subscription requires
    // and the connection did not use): then the apply fails and is retried,
    // as for any error of the worker, which exits and closes the connection.
    let conn = unsafe { connect(functions, conninfo, must_use_password, &mut err) };
    if conn.is_null() {
        // SAFETY: a palloc'd message when set.
        let why = (!err.is_null()).then(|| unsafe { CStr::from_ptr(err) }.to_string_lossy().trim().to_string());
        return Err(format!("Could not connect: {}", why.unwrap_or_default()));
    }
    let mut timeline: pg_sys::TimeLineID = 0;
    // SAFETY: a connection just made; a failure raises an ERROR, which ends
    // the worker (and its connection) and is retried like any failed apply.
    let system = unsafe { call_identify(functions, conn, &mut timeline) };
    // SAFETY: the connection made above, closed once.
    unsafe { call_disconnect(functions, conn) };
    // SAFETY: a palloc'd C string, or NULL.
    let system = (!system.is_null()).then(|| unsafe { CStr::from_ptr(system) }.to_string_lossy().into_owned());
    let system = system.and_then(|s| s.parse::<u64>().ok()).ok_or("IDENTIFY_SYSTEM gave no system identifier")?;
    Ok(Server { system, timeline })
}

/// The application name the publisher shows for the question.
const APPLICATION: &CStr = c"snowflake_id guard";

/// Opens a logical replication connection (`replication=database`), with
/// the arguments each version's walreceiver takes.
///
/// # Safety
/// `functions` is PostgreSQL's table; `conninfo` a C string.
#[allow(ffi_unwind_calls)]
unsafe fn connect(
    functions: &pg_sys::WalReceiverFunctionsType,
    conninfo: *const c_char,
    must_use_password: bool,
    err: *mut *mut c_char,
) -> *mut pg_sys::WalReceiverConn {
    let Some(f) = functions.walrcv_connect else { return std::ptr::null_mut() };
    let app = APPLICATION.as_ptr();
    // SAFETY: the caller's contract; the function reports failure through `err`.
    unsafe {
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
            #[cfg(feature = "pg15")]
            let conn = {
                let _ = must_use_password;
                f(conninfo, true, app, err)
            };
            #[cfg(feature = "pg16")]
            let conn = f(conninfo, true, must_use_password, app, err);
            #[cfg(any(feature = "pg17", feature = "pg18", feature = "pg19"))]
            let conn = f(conninfo, true, true, must_use_password, app, err);
            conn
        })
    }
}

/// `IDENTIFY_SYSTEM`: the system identifier as text, and the timeline.
///
/// # Safety
/// `conn` is an open connection of `functions`.
#[allow(ffi_unwind_calls)]
unsafe fn call_identify(
    functions: &pg_sys::WalReceiverFunctionsType,
    conn: *mut pg_sys::WalReceiverConn,
    timeline: *mut pg_sys::TimeLineID,
) -> *mut c_char {
    let Some(f) = functions.walrcv_identify_system else { return std::ptr::null_mut() };
    // SAFETY: the caller's contract; an ERROR becomes a Rust panic here, and
    // PostgreSQL's again at the trigger's boundary.
    unsafe {
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
            // 19 can also report the sender's flush position; not needed here.
            #[cfg(feature = "pg19")]
            let system = f(conn, timeline, std::ptr::null_mut());
            #[cfg(not(feature = "pg19"))]
            let system = f(conn, timeline);
            system
        })
    }
}

/// # Safety
/// `conn` is an open connection of `functions`, not used again.
#[allow(ffi_unwind_calls)]
unsafe fn call_disconnect(functions: &pg_sys::WalReceiverFunctionsType, conn: *mut pg_sys::WalReceiverConn) {
    if let Some(f) = functions.walrcv_disconnect {
        // SAFETY: the caller's contract.
        unsafe { pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| f(conn)) }
    }
}

/// FNV-1a: a stand-in system identifier for a replication origin's name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
