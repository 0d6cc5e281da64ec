//! The settings as a configuration writes them, and the checks a server start
//! makes of them: names that are old or none of ours, numbers written as
//! plain digits, a layout, epoch, tick and node that fit together, the node
//! numbers a layout needs, and the WAL resource manager ID.
//!
//! A start reads them from what PostgreSQL has gathered ([`Written::at_start`])
//! and stops on the first failure; a reload reads them from the files the next
//! start will read ([`Written::from_entries`], see `next_start`), and warns.

use std::ffi::CStr;

use pgrx::prelude::*;

use super::{
    placeholders, raw_setting, static_name, DATACENTER_NAME, DEFAULT_LAYOUT, EPOCH_NAME, LAYOUT_NAME,
    MAX_CLOCK_DRIFT_NAME, MAX_WAIT_NAME, NAMES, RMGR_IDS, TICK_MS_NAME, WAL_RMGR_ID_NAME, WORKER_NAME,
};
use crate::pg::error::{self, ErrorReport};
use crate::snowflake::config::{self, Config, ConfigError, Settings};
use crate::snowflake::layout::Layout;

/// Our settings' names before 0.3.0, and their names now. They are not aliases:
/// the `snowflake.` prefix belongs to pgEdge's snowflake extension, whose
/// `snowflake.node` must keep working beside us, so we neither reserve that
/// prefix nor read settings from it. A configuration that still uses an old
/// name stops the server with the new name rather than being ignored.
const OLD_NAMES: [(&CStr, &CStr); 7] = [
    (c"snowflake.layout", LAYOUT_NAME),
    (c"snowflake.epoch", EPOCH_NAME),
    (c"snowflake.tick_ms", TICK_MS_NAME),
    (c"snowflake.datacenter_id", DATACENTER_NAME),
    (c"snowflake.worker_id", WORKER_NAME),
    (c"snowflake.max_clock_drift", MAX_CLOCK_DRIFT_NAME),
    (c"snowflake.max_wait", MAX_WAIT_NAME),
];

/// Where the configuration sets a value: a file and line.
pub type Place = Option<(String, i32)>;

/// Every `snowflake_id.` setting a configuration writes, and our old names,
/// with the value as written and where.
pub struct Written {
    /// Lower-case name, value, place; a later entry wins.
    entries: Vec<(String, String, Place)>,
}

impl Written {
    /// What the server read at start (files and command line), while the
    /// libraries load: our settings are still placeholders then.
    pub fn at_start() -> Written {
        let mut entries = Vec::new();
        for (name, place) in placeholders() {
            let lower = name.to_ascii_lowercase();
            if !is_ours_or_old(&lower) {
                continue;
            }
            let Ok(cname) = std::ffi::CString::new(name) else { continue };
            if let Some(value) = raw_setting(&cname) {
                entries.push((lower, value, place));
            }
        }
        Written { entries }
    }

    /// The settings among `entries` (name, value, place), as a configuration
    /// file lists them, later ones winning.
    pub fn from_entries(entries: impl IntoIterator<Item = (String, String, Place)>) -> Written {
        let entries = entries
            .into_iter()
            .map(|(name, value, place)| (name.to_ascii_lowercase(), value, place))
            .filter(|(name, _, _)| is_ours_or_old(name))
            .collect();
        Written { entries }
    }

    /// The value written for `name`, if any.
    pub fn value(&self, name: &CStr) -> Option<String> {
        let name = static_name_of(name);
        self.entries.iter().rev().find(|(n, _, _)| n == name).map(|(_, v, _)| v.clone())
    }

    /// Replaces (or adds) the value of `name`: one the command line sets,
    /// which a file cannot override.
    pub fn set(&mut self, name: &CStr, value: String) {
        self.entries.push((static_name_of(name).to_string(), value, None));
    }

    /// What a server start makes of these settings: the configuration, or
    /// the report it stops with.
    pub fn check(&self) -> Result<Config, Box<ErrorReport>> {
        self.old_name()?;
        self.unknown_name()?;
        // Numbers are read as written before PostgreSQL parses them, which would
        // accept 010 (octal 8) or 0x1f, and warn about 7ms before our refusal.
        let int = |name: &'static CStr| {
            self.value(name)
                .map(|text| config::parse_identity_number(static_name(name), &text))
                .transpose()
                .map_err(|e| Box::new(ErrorReport::from(e)))
        };
        let tick_ms = int(TICK_MS_NAME)?;
        let datacenter_id = int(DATACENTER_NAME)?;
        let worker_id = self
            .value(WORKER_NAME)
            .map(|text| config::parse_worker(&text))
            .transpose()
            .map_err(|e| Box::new(ErrorReport::from(e)))?;
        let rmgr_id = int(WAL_RMGR_ID_NAME)?;
        let layout = self.value(LAYOUT_NAME);
        let epoch = self.value(EPOCH_NAME);
        let settings = Settings {
            layout: layout.as_deref().unwrap_or(DEFAULT_LAYOUT.to_str().expect("ASCII")),
            epoch: epoch.as_deref(),
            tick_ms,
            datacenter_id: datacenter_id.unwrap_or(0),
            worker_id: worker_id.unwrap_or_default(),
        };
        let config = Config::new(settings).map_err(|e| Box::new(ErrorReport::from(e)))?;
        missing_identity(&config.codec.layout, datacenter_id.is_some(), worker_id.is_some())?;
        let rmgr_id = rmgr_id.unwrap_or(i64::from(super::DEFAULT_RMGR_ID));
        if !RMGR_IDS.contains(&rmgr_id) {
            return Err(Box::new(ErrorReport::from(ConfigError {
                setting: static_name(WAL_RMGR_ID_NAME),
                value: rmgr_id.to_string(),
                detail: "Custom WAL resource manager IDs are 128 to 255.".into(),
                hint: "Choose an ID from 128 to 255 that no other library in shared_preload_libraries uses.".into(),
            })));
        }
        Ok(config)
    }

    fn old_name(&self) -> Result<(), Box<ErrorReport>> {
        for (old, new) in OLD_NAMES {
            if self.value(old).is_none() {
                continue;
            }
            let (old, new) = (static_name_of(old), static_name_of(new));
            return Err(Box::new(
                error::new(
                    PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                    format!("configuration parameter \"{old}\" was renamed to \"{new}\""),
                )
                .set_detail(
                    "The settings of snowflake_id are named after the extension, snowflake_id.*; the \"snowflake.\" \
                 prefix belongs to pgEdge's snowflake extension.",
                )
                .set_hint(format!(
                    "Rename {old} to {new} in postgresql.conf or postgresql.auto.conf (under Patroni, with patronictl \
                 edit-config) and start the server again."
                )),
            ));
        }
        Ok(())
    }

    /// A `snowflake_id.` setting that is none of ours, naming the one it
    /// probably meant.
    fn unknown_name(&self) -> Result<(), Box<ErrorReport>> {
        let ours = NAMES.map(static_name);
        for (name, _, place) in &self.entries {
            if !name.starts_with("snowflake_id.") || ours.contains(&name.as_str()) {
                continue;
            }
            let meant = config::nearest(name, &ours).expect("snowflake_id has settings");
            let set_in = place
                .as_ref()
                .map_or_else(String::new, |(file, line)| format!("It is set in file \"{file}\" line {line}. "));
            return Err(Box::new(
                error::new(
                    PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                    format!("unrecognized configuration parameter \"{name}\""),
                )
                .set_detail(format!(
                "{set_in}snowflake_id has no setting of that name. Ignoring it would leave the setting it was meant \
                 to be at its default."
            ))
                .set_hint(format!(
                    "Did you mean \"{meant}\"? Correct the name in postgresql.conf or postgresql.auto.conf (under \
                 Patroni, with patronictl edit-config) and start the server again."
                )),
            ));
        }
        Ok(())
    }
}

fn is_ours_or_old(lower: &str) -> bool {
    lower.starts_with("snowflake_id.") || OLD_NAMES.iter().any(|(old, _)| static_name_of(old) == lower)
}

fn static_name_of(name: &CStr) -> &str {
    name.to_str().expect("setting names are ASCII")
}

/// The node numbers a layout has fields for must be written out: left to the
/// default, a number would be 0, the number of every other server nobody
/// configured either.
fn missing_identity(layout: &Layout, datacenter_set: bool, worker_set: bool) -> Result<(), Box<ErrorReport>> {
    let missing = config::missing_identity(layout, datacenter_set, worker_set);
    if missing.is_empty() {
        return Ok(());
    }
    let quoted: Vec<String> = missing.iter().map(|n| format!("\"{n}\"")).collect();
    let fields: Vec<&str> =
        missing.iter().map(|n| if *n == static_name(DATACENTER_NAME) { "datacenter" } else { "worker" }).collect();
    let (parameters, fields) = match fields.len() {
        1 => (format!("parameter {}", quoted[0]), format!("a {} field", fields[0])),
        _ => (format!("parameters {}", quoted.join(" and ")), format!("{} fields", fields.join(" and "))),
    };
    Err(Box::new(
        error::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("{parameters} must be set"))
            .set_detail(format!(
                "The layout {layout} has {fields}, and every server generating IDs into one ID space needs its own \
             numbers. Left unset they would be 0, the numbers of every other server nobody configured either."
            ))
            .set_hint(format!(
                "Set {} in postgresql.conf to this server's own numbers (0 is fine when no other server uses it) and \
             start the server again.",
                missing.join(" and ")
            )),
    ))
}
