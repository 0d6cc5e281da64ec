//! The pure Rust core of snowflake_id: no PostgreSQL in here.
//!
//! - [`layout`]: which fields an ID has and where their bits are;
//! - [`preset`]: named layouts of well-known designs;
//! - [`time`]: instants, epochs and ticks;
//! - [`codec`]: fields to IDs and back;
//! - [`config`]: validating a server's identity settings;
//! - [`generator`]: the state machine that hands out IDs against a clock it is given;
//! - [`state_file`]: the durable high-water mark.

pub mod codec;
pub mod config;
pub mod generator;
pub mod layout;
pub mod preset;
pub mod state_file;
pub mod time;
