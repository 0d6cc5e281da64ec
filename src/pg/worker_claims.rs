//! `snowflake_worker_claims()` and `snowflake_release_worker()`: the worker
//! numbers this server's lineage used, and a superuser's release of one
//! ([`super::claim`] claims them).

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, Raise};
use super::timestamp::timestamptz;
use super::{claim, settings, shmem};
use crate::snowflake::claims::Claim;
use crate::snowflake::codec::Node;
use crate::snowflake::config;
use crate::snowflake::layout::Field;

type ClaimRow = (
    name!(datacenter_id, i32),
    name!(worker_id, i32),
    name!(source, String),
    name!(is_current, bool),
    name!(claimed_here, bool),
    name!(timeline, Option<i64>),
    name!(claimed_at, Option<TimestampWithTimeZone>),
    name!(host, Option<String>),
    name!(last_mark, Option<TimestampWithTimeZone>),
    name!(superseded_at, Option<TimestampWithTimeZone>),
    name!(released_at, Option<TimestampWithTimeZone>),
    name!(reusable_from, Option<TimestampWithTimeZone>),
);

/// Every node number this server's lineage used (claimed by a primary with
/// `worker_id = auto`, or set by hand and seen in its marks), oldest first,
/// with when each may be claimed again (`reusable_from`, NULL for the number
/// in use). Granted to pg_monitor.
// pgrx reads the columns from the signature: no type alias there.
#[allow(clippy::type_complexity)]
#[pg_extern(stable, parallel_safe)]
fn snowflake_worker_claims() -> TableIterator<
    'static,
    (
        name!(datacenter_id, i32),
        name!(worker_id, i32),
        name!(source, String),
        name!(is_current, bool),
        name!(claimed_here, bool),
        name!(timeline, Option<i64>),
        name!(claimed_at, Option<TimestampWithTimeZone>),
        name!(host, Option<String>),
        name!(last_mark, Option<TimestampWithTimeZone>),
        name!(superseded_at, Option<TimestampWithTimeZone>),
        name!(released_at, Option<TimestampWithTimeZone>),
        name!(reusable_from, Option<TimestampWithTimeZone>),
    ),
> {
    let claims = shmem::read().claims;
    let reuse_after = settings::worker_reuse_after_ms();
    let own = claims.own_claim().map(|c| c.node);
    let rows: Vec<ClaimRow> = claims
        .entries()
        .iter()
        .map(|c| row(c, claims.current() == Some(c.node), own == Some(c.node), reuse_after))
        .collect();
    TableIterator::new(rows)
}

fn row(c: &Claim, current: bool, own: bool, reuse_after: u64) -> ClaimRow {
    let at = |t: Option<_>| t.and_then(timestamptz);
    (
        c.node.datacenter as i32,
        c.node.worker as i32,
        c.source.name().to_string(),
        current,
        own,
        (c.timeline > 0).then_some(i64::from(c.timeline)),
        at(c.claimed_at),
        (!c.host.is_empty()).then(|| c.host.to_string()),
        at(c.last_mark),
        at(c.superseded_at),
        at(c.released_at),
        if current { None } else { at(c.reusable_from(reuse_after)) },
    )
}

/// Releases a worker number no server of the lineage generates with any
/// more (a removed server, an old primary that is gone for good): a primary
/// with `worker_id = auto` may claim it again once the clock passes its last
/// mark, without waiting for `snowflake_id.worker_reuse_after`. The
/// datacenter is this server's unless given. Returns when the number may be
/// claimed again. Not granted to PUBLIC.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_release_worker(
    worker_id: Option<i32>,
    datacenter_id: default!(Option<i32>, "NULL"),
) -> Option<TimestampWithTimeZone> {
    if super::ffi::recovery_in_progress() {
        error::new(PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION, "cannot release a worker number during recovery")
            .set_hint("Release it on the primary; its standbys replay the release.")
            .raise(PgLogLevel::ERROR);
    }
    let Some(worker_id) = worker_id else {
        error::new(PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED, "worker_id must not be null")
            .set_hint("snowflake_worker_claims() lists the numbers this server's lineage used.")
            .raise(PgLogLevel::ERROR)
    };
    let config = settings::config();
    // A number the lineage used is released as it is listed, also one an
    // earlier, wider layout held; any other must fit this layout.
    let listed = |datacenter: i32, worker: i32| {
        let node = u64::try_from(datacenter).ok().zip(u64::try_from(worker).ok());
        node.is_some_and(|(datacenter, worker)| shmem::read().claims.get(Node { datacenter, worker }).is_some())
    };
    let number = |field: Field, name: &'static str, value: i32| {
        config::node_value(&config.codec, field, name, i64::from(value)).unwrap_or_else(|e| {
            error::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("{name} {value} is out of range"))
                .set_detail(e.detail)
                .set_hint("snowflake_worker_claims() lists the numbers this server's lineage used.")
                .raise(PgLogLevel::ERROR)
        })
    };
    let datacenter_id = datacenter_id.unwrap_or(config.node.datacenter as i32);
    let (datacenter, worker) = if listed(datacenter_id, worker_id) {
        (datacenter_id as u64, worker_id as u64)
    } else {
        (number(Field::Datacenter, "datacenter_id", datacenter_id), number(Field::Worker, "worker_id", worker_id))
    };
    let released = claim::release(datacenter, worker);
    released.reusable_from(settings::worker_reuse_after_ms()).and_then(timestamptz)
}

pgrx::extension_sql!(
    "REVOKE EXECUTE ON FUNCTION snowflake_worker_claims() FROM PUBLIC;\n\
     GRANT EXECUTE ON FUNCTION snowflake_worker_claims() TO pg_monitor;\n\
     REVOKE EXECUTE ON FUNCTION snowflake_release_worker(integer, integer) FROM PUBLIC;\n",
    name = "worker_claims",
    requires = [snowflake_worker_claims, snowflake_release_worker]
);
