//! A server that pg_rewind made a standby of the primary that replaced it.
//! pg_rewind copies every file of its source over the data directory, the
//! state file and the note among them, and removes the WAL of the timeline
//! the server left: the marks of the IDs it issued there are gone, and so
//! are the rows (they may live on in clients and subscribers). Nothing in a
//! data directory survives pg_rewind; PostgreSQL's own files are the source's
//! too. So the first start after a rewind (its `backup_label` says
//! `BACKUP METHOD: pg_rewind`) writes a note of it (`snowflake_id.rewound`,
//! [`crate::snowflake::rewind_note`]), and while the note is there a server
//! with its number set by hand issues no ID, promoted or not, until a DBA
//! raises the floor above the IDs it issued before ([`super::marks::raise_floor`]
//! removes the note; a floor from a sequence's value does not). With
//! `worker_id = auto` the note is kept but not applied: promoted, the server
//! claims a number its lineage does not hold, and its old claim is held
//! while the source knew it (a claim it made on the timeline it left, the
//! source never saw: docs/guarantees.md says what is not covered).
//!
//! A replica that pg_rewind rewound (it had replayed past the switch point)
//! never issued IDs there, but nothing in the data directory tells it from a
//! rewound primary: it refuses too, once promoted, until a floor.

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::control;
use super::error;
use super::marks::REWOUND_HINT;
use super::shmem::{State, Unknown};
use super::{clock, settings, state_file};
use crate::snowflake::codec::Node;
use crate::snowflake::rewind_note::RewindNote;

/// Notes a rewind at the first start after it, and applies the note to the
/// state shared memory starts with. Postmaster only.
pub fn at_start(state: &mut State, first_start: bool) {
    let config = settings::config();
    // A copy (a new base backup, a restore) that starts with a number its
    // lineage used and left: the server that used it, rebuilt rather than
    // rewound (Patroni's reinit), has lost the marks of its last IDs just
    // as a rewound one has.
    let rebuilt = first_start
        && control::started_from_copy()
        && !control::started_from_rewind()
        && !config.auto_worker
        && state.claims.left(config.node);
    if first_start && (control::started_from_rewind() || rebuilt) {
        let note = RewindNote { node: config.node, seen_at: clock::now() };
        if let Err(e) = state_file::write_rewind_note(&note) {
            error::ErrorReport::from(e)
                .set_detail("This start refuses IDs all the same; a restart without the note would not.")
                .report(PgLogLevel::WARNING);
        }
        if rebuilt {
            report_rebuilt(config.node);
        } else {
            report_rewind(state, config.auto_worker);
        }
        if !config.auto_worker {
            state.unknown = Some(Unknown::Rewound(Some(note.seen_at)));
        }
        return;
    }
    if config.auto_worker {
        return;
    }
    match state_file::rewind_note() {
        None => {}
        Some(Ok(note)) => state.unknown = Some(Unknown::Rewound(Some(note.seen_at))),
        Some(Err(why)) => {
            error::new(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                format!("snowflake_id could not read the note of a pg_rewind {why}"),
            )
            .set_detail("It is taken as a rewind of this server: it issues no ID until a floor is raised.")
            .set_hint(REWOUND_HINT)
            .report(PgLogLevel::WARNING);
            state.unknown = Some(Unknown::Rewound(None));
        }
    }
}

fn report_rebuilt(own: Node) {
    error::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!(
            "snowflake_id started from a copy with a number its lineage used and left (datacenter {}, worker {}): the \
             last IDs of that number are unknown to it",
            own.datacenter, own.worker
        ),
    )
    .set_detail(
        "Another number became the lineage's after that one: this is most likely the server that used it, rebuilt \
         from a copy of the new primary (a Patroni reinit), and the IDs it issued last may lie past any mark the \
         lineage saw. It issues no ID until a floor is raised, also once promoted.",
    )
    .set_hint(REWOUND_HINT)
    .report(PgLogLevel::WARNING);
}

fn report_rewind(state: &State, auto: bool) {
    if auto {
        error::new(
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            "snowflake_id was rewound by pg_rewind: promoted, it claims a number no server of its lineage used",
        )
        .set_detail(
            "pg_rewind removed the marks of the IDs it issued on the timeline it left; a number of its own keeps new \
             IDs apart from those.",
        )
        .report(PgLogLevel::LOG);
        return;
    }
    let own = settings::config().node;
    let mut detail = format!(
        "pg_rewind replaced the state file with that of the server it rewound from, and removed the WAL that held the \
         marks of the IDs this server issued on the timeline it left. With datacenter {}, worker {}, it issues no ID \
         until a floor is raised, also once promoted.",
        own.datacenter, own.worker
    );
    // The number the lineage generates with now: pg_rewind's source's.
    if state.claims.current() == Some(own) {
        detail.push_str(
            " That is the number of the server it was rewound from: pg_rewind copies postgresql.conf and \
             postgresql.auto.conf too, and their snowflake_id.worker_id replaced this server's own.",
        );
    }
    error::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        "snowflake_id was rewound by pg_rewind: the IDs it issued before are unknown to it",
    )
    .set_detail(detail)
    .set_hint(REWOUND_HINT)
    .report(PgLogLevel::WARNING);
}
