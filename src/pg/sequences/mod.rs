//! Sequence mode: a sequence a DBA registers (`snowflake_sequence_register`,
//! [`register`]) hands out snowflake IDs on every path that asks it, with no
//! change to the application: explicit nextval, serial and identity
//! defaults, ORMs' pooled allocators (INCREMENT BY n, see
//! [`crate::snowflake::block`]).
//!
//! - [`registry`]: which sequences are registered, read like a catalog and
//!   cached per backend;
//! - [`in_progress`]: a registration made known, and waited through, before
//!   its fence is set;
//! - [`fence`]: the fence itself: set, kept, lifted;
//! - [`register`]: registering, unregistering, the registry's triggers;
//! - [`rewrite`]: the planner hook that puts our functions in place of
//!   native sequence calls and identity defaults;
//! - [`defaults`]: the parameter defaults a call leaves to the planner;
//! - [`inline`]: SQL functions that call sequence functions are not inlined;
//! - [`nextval`]: those functions, with native nextval's checks;
//! - [`checked`]: what those checks found, kept for the transaction;
//! - [`handed`]: what currval and lastval answer where native ones cannot;
//! - [`parameters`]: EXECUTE's parameters and table rewrites call our functions;
//! - [`utility`]: DDL is decided after its lock: what would open a fence is
//!   refused, a TRUNCATE that restarts a sequence gets its fence back;
//! - [`copy`]: COPY FROM fills registered defaults with our functions;
//! - [`alter`]: so do ALTER TABLE's table rewrites;
//! - [`hint`]: the fence's error gets a hint;
//! - [`operators`]: no operator over nextval or setval, which would hide
//!   the call from the checks made by name;
//! - [`names`], [`privileged`], [`statement`]: how relations are named,
//!   work done as superuser, what a utility statement names.
//!
//! Paths no hook reaches (trigger WHEN, CHECK, defaults a logical
//! replication apply worker fills in) meet the fence registration sets, the
//! sequence's MAXVALUE at its current value: an error, never a small number.

mod alter;
mod checked;
mod compat;
mod copy;
mod copy_insert;
mod defaults;
mod fence;
mod handed;
mod hint;
mod hypertable;
mod in_progress;
mod inline;
mod names;
mod nextval;
mod operators;
mod parameters;
mod privileged;
mod register;
mod registry;
mod rewrite;
mod statement;
mod utility;

pgrx::extension_sql_file!(
    "../../../sql/snowflake_sequences.sql",
    name = "sequences",
    requires = ["sequence_nextval", "sequence_register"]
);

pub fn init() {
    registry::init();
    in_progress::init();
    fence::init();
    checked::init();
    defaults::init();
    inline::init();
    hint::init();
    rewrite::init();
    utility::init();
}
