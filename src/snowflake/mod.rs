//! The pure Rust core of snowflake_id: no PostgreSQL in here.
//!
//! - [`layout`]: which fields an ID has and where their bits are;
//! - [`claims`]: the worker numbers a lineage used, and choosing one for `worker_id = auto`;
//! - [`block`]: what a sequence incrementing by more than one reserves for a pooled allocator;
//! - [`preset`]: named layouts of well-known designs;
//! - [`time`]: instants, epochs and ticks;
//! - [`codec`]: fields to IDs and back;
//! - [`config`]: validating a server's identity settings;
//! - [`generator`]: the state machine that hands out IDs against a clock it is given;
//! - [`guard`]: catching two servers that share a node number, in replicated rows;
//! - [`id_space`]: carrying a mark to other settings as an ID value, so IDs never repeat;
//! - [`mark_record`]: a mark as kept outside the generator, in instants;
//! - [`state_file`]: the state file's format;
//! - [`rewind_note`]: the note a server with a number set by hand keeps after pg_rewind;
//! - [`wal_record`]: the mark as a WAL record;
//! - [`claim_record`]: a claim and a release as WAL records.

pub mod block;
pub mod claim_record;
pub mod claims;
pub mod codec;
pub mod config;
pub mod generator;
pub mod guard;
pub mod id_space;
pub mod layout;
pub mod mark_record;
pub mod preset;
pub mod rewind_note;
pub mod state_file;
pub mod time;
pub mod wal_record;
