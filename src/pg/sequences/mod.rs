//! Sequence mode: a sequence a DBA registers (`snowflake_sequence_register`,
//! sql/snowflake_sequences.sql) hands out snowflake IDs on every path that
//! asks it, with no change to the application: explicit nextval, serial and
//! identity defaults, ORMs' pooled allocators (INCREMENT BY n, see
//! [`crate::snowflake::block`]).
//!
//! - [`registry`]: which sequences are registered, cached per backend;
//! - [`fence`]: the fence's error gets a hint naming the way out;
//! - [`inline`]: SQL functions that call sequence functions are not inlined;
//! - [`rewrite`]: the planner hook that puts our functions in place of
//!   native nextval and identity defaults;
//! - [`nextval`]: those functions, with native nextval's checks;
//! - [`checked`]: what those checks found, kept for the transaction;
//! - [`parameters`]: EXECUTE's parameters call our functions;
//! - [`privileged`]: work on a caller's behalf as superuser, with search_path pinned;
//! - [`utility`]: the DDL that would open a registered sequence's fence is refused;
//! - [`copy`]: COPY FROM fills registered defaults with our functions;
//! - [`alter`]: so do ALTER TABLE's table rewrites.
//!
//! Paths no hook reaches (trigger WHEN, CHECK, defaults a logical
//! replication apply worker fills in) meet the fence registration sets, the
//! sequence's MAXVALUE at its current value: an error, never a small number.

mod alter;
mod checked;
mod copy;
mod fence;
mod inline;
mod nextval;
mod parameters;
mod privileged;
mod registry;
mod rewrite;
mod statement;
mod utility;

pgrx::extension_sql_file!(
    "../../../sql/snowflake_sequences.sql",
    name = "sequences",
    requires = [
        "sequence_nextval",
        snowflake_sequence_check_block,
        snowflake_sequence_resume_value,
        snowflake_sequence_invalidate
    ]
);

pub fn init() {
    registry::init();
    checked::init();
    inline::init();
    fence::init();
    rewrite::init();
    utility::init();
}
