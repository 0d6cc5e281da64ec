//! `snowflake_raise_floor(id)`: a DBA's `setval` for the high-water mark.
//!
//! It serves the cases where the floor a server continues from is lower than
//! IDs that exist elsewhere: a lost or unknown state file (raise to the
//! largest ID of the tables), IDs that reached a subscriber or a client before
//! a point-in-time restore or an asynchronous failover, a pg_upgrade whose old
//! cluster's file is gone. The floor is made durable as a mark (state file,
//! then WAL), so restarts and standbys keep it.

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::error::{self, ErrorReport, Raise};
use super::generate::format_ms;
use super::{claim, clock, ffi, marks, settings, shmem};
use crate::snowflake::id_space::{self, FloorError};

/// Makes every ID this server issues from now on greater than `id`, an ID of
/// this server's settings issued by any node, and returns the smallest ID it
/// may issue next: above `id`, and above every ID it issued before. Not
/// granted to PUBLIC.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_raise_floor(id: i64) -> i64 {
    // A DBA's floor, the one way to say that the IDs a rewind took the
    // marks of lie below it (see `super::rewind`).
    raise(id, true).unwrap_or_else(|refused| refused.raise(PgLogLevel::ERROR))
}

/// [`snowflake_raise_floor`]'s work for a registered sequence's forward
/// `setval` ([`super::sequences`]): a value of a table or sequence, which
/// says nothing of IDs a rewind took the marks of.
pub fn raise_to(id: i64) -> i64 {
    try_raise_to(id).unwrap_or_else(|refused| refused.raise(PgLogLevel::ERROR))
}

/// [`raise_to`], its refusals returned (a restore's registry row that one
/// of them concerns is left out, and the restore goes on).
pub fn try_raise_to(id: i64) -> Result<i64, Box<ErrorReport>> {
    raise(id, false)
}

/// Raises the floor above `id`; `ends_rewind`: a DBA's own floor, which
/// also ends a rewind's refusal.
fn raise(id: i64, ends_rewind: bool) -> Result<i64, Box<ErrorReport>> {
    if ffi::recovery_in_progress() {
        return Err(Box::new(
            error::new(
                PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
                "cannot raise the snowflake ID floor during recovery",
            )
            .set_detail("A standby takes its floor from its primary's WAL.")
            .set_hint("Raise the floor on the primary; its standbys replay it."),
        ));
    }
    let config = settings::config();
    // An auto primary claims its number first when it can (its mark is
    // known): the floor is then one of that number's.
    let (pending, known) = {
        let state = shmem::read();
        (state.claim_pending, state.unknown.is_none_or(|u| !u.refuses_at(clock::now())))
    };
    if config.auto_worker && pending && known {
        let _ = claim::settle();
    }
    loop {
        // The node the generator's IDs carry (an auto server's claim, or the
        // number it follows until it claims one, which carries the floor
        // along); if a claim changes it meanwhile, the floor is computed again.
        let node = shmem::read().node;
        let (floor, decoded) = id_space::floor_above(&config.codec, node, id).map_err(|e| refuse(id, e))?;
        let drift_ms = settings::max_drift_ms();
        let now = clock::now();
        let at = config.codec.instant_of(decoded.tick);
        if at.is_none_or(|at| at.0 > now.0.saturating_add(drift_ms as i64)) {
            return Err(Box::new(
                error::new(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("snowflake ID {id} lies more than snowflake_id.max_clock_drift ahead of the clock"),
                )
                .set_detail(format!(
                    "Its timestamp is {}, the clock says {now}, and IDs may run at most {} ahead of it: a floor \
                     there would stop generation until the clock caught up.",
                    at.map_or_else(|| "past the range of timestamps".to_string(), |at| at.to_string()),
                    format_ms(drift_ms)
                ))
                .set_hint(
                    "Check that the ID is one of this server's settings (snowflake_decode() shows its time). If IDs \
                     really ran this far ahead, raise snowflake_id.max_clock_drift first.",
                ),
            ));
        }
        if let Some((next, node)) = marks::raise_floor(floor, node, ends_rewind) {
            return Ok(config.codec.template(node).encode(next.position, next.clock_back));
        }
    }
}

fn refuse(id: i64, e: FloorError) -> Box<ErrorReport> {
    let (detail, hint) = match e {
        FloorError::Invalid(why) => (
            format!("It is no ID of this server's layout ({}): {why}.", settings::config().codec.layout),
            "Give an ID this server's settings decode, such as max(id) of a table it fills.",
        ),
        FloorError::ErasInterleave => (
            "The layout's clock_back field lies below its timestamp, so IDs of a later era are not all greater and no \
             floor keeps every later ID above this one."
                .to_string(),
            "Such a layout cannot take a floor: wait until the clock passes the ID instead.",
        ),
        FloorError::NodeAbove => (
            "The layout puts a node field above the timestamp, and no ID of this server's node number lies above it."
                .to_string(),
            "Give an ID of this server's own node number.",
        ),
        FloorError::RangeEnd => (
            format!(
                "No ID of this server's layout ({}) lies above it before the layout's time range ends, so nothing \
                 could be issued after such a floor.",
                settings::config().codec.layout
            ),
            "Give the largest ID this server's tables actually hold, such as max(id) of a table it fills.",
        ),
    };
    Box::new(
        error::new(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("cannot raise the snowflake ID floor to {id}"),
        )
        .set_detail(detail)
        .set_hint(hint),
    )
}

// A floor raised too far stops generation for as long, up to
// snowflake_id.max_clock_drift: a DBA's tool, like setval on a sequence.
pgrx::extension_sql!(
    "REVOKE EXECUTE ON FUNCTION snowflake_raise_floor(bigint) FROM PUBLIC;\n",
    name = "snowflake_raise_floor_privileges",
    requires = [snowflake_raise_floor]
);
