//! The `snowflake_id.*` settings, and what they mean once parsed.
//!
//! The identity settings (layout, epoch, tick, datacenter and worker) are
//! `PGC_POSTMASTER`: read once at server start, never changed by `SET`, not
//! even by a superuser, because two sessions claiming different identities
//! would break uniqueness. They are validated together, and a bad value stops
//! the server with a FATAL error naming the setting: PostgreSQL's default for a
//! rejected extension setting is a WARNING and the built-in default, which for
//! a worker number would silently make this server collide with another.
//! For the same reason the numbers a layout has fields for must be written
//! out (an explicit 0 is fine), and a `snowflake_id.` name that is none of
//! ours, such as `snowflake_id.workerid`, stops the server too: PostgreSQL
//! would drop it with a WARNING, and the setting it was meant to be would
//! keep its default.
//!
//! The parsed form is kept for the life of the process: [`config`] (layout,
//! time base and node, validated together) and [`state_path`]. The postmaster
//! sets both while `shared_preload_libraries` load, before any backend starts,
//! and every backend inherits them. The runtime settings are read through
//! typed accessors from the variables PostgreSQL assigns on reload, so the hot
//! path parses nothing.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::clock;
use super::error::{self, ErrorReport, Raise};

mod next_start;
mod written;
use crate::snowflake::config::{self, Config, ConfigError, Worker};
use crate::snowflake::layout::Field;
use crate::snowflake::state_file;
pub use written::Written;

pub const DEFAULT_LAYOUT: &CStr = c"timestamp:41,datacenter:5,worker:5,sequence:12";
pub const DEFAULT_EPOCH: &CStr = c"2025-01-01 00:00:00+00";

/// The WAL resource manager ID snowflake_id uses unless told otherwise. Custom
/// IDs are 128 to 255; 128 is for experiments, and low IDs are taken by other
/// extensions (OrioleDB uses 129, pgEdge's Spock 144).
pub const DEFAULT_RMGR_ID: i32 = 197;

// Private: the rest of the layer reads the parsed forms through the functions
// below, never these.
static LAYOUT: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(DEFAULT_LAYOUT));
static EPOCH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(DEFAULT_EPOCH));
static TICK_MS: GucSetting<i32> = GucSetting::<i32>::new(1);
static DATACENTER_ID: GucSetting<i32> = GucSetting::<i32>::new(0);
static WORKER_ID: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"0"));
static WORKER_REUSE_AFTER: GucSetting<i32> = GucSetting::<i32>::new(7 * 86_400);
static MAX_CLOCK_DRIFT: GucSetting<i32> = GucSetting::<i32>::new(24 * 3_600_000);
static MAX_WAIT: GucSetting<i32> = GucSetting::<i32>::new(10_000);
static WAL_RMGR_ID: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_RMGR_ID);
static GUARD_ACTION: GucSetting<GuardAction> = GucSetting::<GuardAction>::new(GuardAction::Error);

/// What the guard does when an applied row carries a node number another
/// server uses (`snowflake_id.guard_action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PostgresGucEnum)]
pub enum GuardAction {
    /// Fail the apply: the subscription stops and retries, no row is stored.
    #[name = c"error"]
    Error,
    /// Store the row and report it.
    #[name = c"warning"]
    Warning,
}

static CONFIG: OnceLock<Config> = OnceLock::new();
static STATE_PATH: OnceLock<PathBuf> = OnceLock::new();

const LAYOUT_NAME: &CStr = c"snowflake_id.layout";
const EPOCH_NAME: &CStr = c"snowflake_id.epoch";
const TICK_MS_NAME: &CStr = c"snowflake_id.tick_ms";
const DATACENTER_NAME: &CStr = c"snowflake_id.datacenter_id";
const WORKER_NAME: &CStr = c"snowflake_id.worker_id";
const WORKER_REUSE_AFTER_NAME: &CStr = c"snowflake_id.worker_reuse_after";
const MAX_CLOCK_DRIFT_NAME: &CStr = c"snowflake_id.max_clock_drift";
const MAX_WAIT_NAME: &CStr = c"snowflake_id.max_wait";
const WAL_RMGR_ID_NAME: &CStr = c"snowflake_id.wal_rmgr_id";
const GUARD_ACTION_NAME: &CStr = c"snowflake_id.guard_action";

/// Custom WAL resource manager IDs.
const RMGR_IDS: std::ops::RangeInclusive<i64> = 128..=255;

/// Defines every setting, validates them and keeps the parsed configuration,
/// or stops the server. Postmaster only, while `shared_preload_libraries` load.
pub fn init() {
    let config = define_and_validate();
    error::new(
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        format!(
            "snowflake_id generates IDs with layout {}, epoch {}, tick {} ms, datacenter {}, worker {}",
            config.codec.layout,
            config.codec.time.epoch(),
            config.codec.time.tick_ms(),
            config.node.datacenter,
            if config.auto_worker {
                "auto (a primary claims one before its first ID)".to_string()
            } else {
                config.node.worker.to_string()
            }
        ),
    )
    .report(PgLogLevel::LOG);
    // SAFETY: DataDir is set before shared_preload_libraries load, and stays.
    let data_dir = unsafe { CStr::from_ptr(pg_sys::DataDir) }.to_string_lossy().into_owned();
    STATE_PATH.get_or_init(|| Path::new(&data_dir).join(state_file::FILE_NAME));
    CONFIG.get_or_init(|| config);
}

/// The server's validated identity; set before any backend starts.
#[inline]
pub fn config() -> &'static Config {
    CONFIG.get().expect("snowflake_id is initialised in shared_preload_libraries")
}

/// The configuration, if this process has one (not while it is being
/// validated, nor in a server that did not preload the library).
pub fn try_config() -> Option<&'static Config> {
    CONFIG.get()
}

/// The state file in this server's data directory.
pub fn state_path() -> &'static Path {
    STATE_PATH.get().expect("snowflake_id is initialised in shared_preload_libraries")
}

fn define_and_validate() -> Config {
    // What the configuration says, read before the definitions replace the
    // placeholders, so that a value PostgreSQL rejects is not silently lost.
    let written = Written::at_start();
    next_start::init();
    let config = written.check().unwrap_or_else(|report| report.raise(PgLogLevel::FATAL));

    // Only valid values reach PostgreSQL's own parsing, which would otherwise
    // warn and fall back to a default.
    define_identity_settings();
    define_wal_setting();
    define_runtime_settings();
    // SAFETY: a static C string; the postmaster defines settings here.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"snowflake_id".as_ptr()) };

    // A preset brings its own epoch and tick: show them in SHOW and pg_settings
    // as the defaults they are (as PostgreSQL does for wal_buffers = -1).
    if written.value(EPOCH_NAME).is_none() {
        set_dynamic_default(EPOCH_NAME, &config.codec.time.epoch().to_string());
    }
    if written.value(TICK_MS_NAME).is_none() {
        set_dynamic_default(TICK_MS_NAME, &config.codec.time.tick_ms().to_string());
    }
    config
}

fn define_identity_settings() {
    // Each is checked on its own when set after start (ALTER SYSTEM, a reload);
    // at start all are checked together, and a bad value stops the server.
    // SAFETY: the check hooks below are #[pg_guard]ed and read only what
    // PostgreSQL hands them.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            LAYOUT_NAME,
            c"Bit layout of snowflake IDs: a preset or a list of fields.",
            c"A preset (twitter, instagram, discord, sonyflake, mastodon, pgedge) or fields from the high bits \
              down, such as timestamp:41,datacenter:5,worker:5,sequence:12. Never change it for an ID space that \
              already has IDs.",
            &LAYOUT,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_layout),
            None,
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            EPOCH_NAME,
            c"Instant the timestamp field counts from.",
            c"A timestamp with time zone (UTC if none is given) or a number of Unix milliseconds. \
              Defaults to the preset's epoch, or 2025-01-01 00:00:00+00.",
            &EPOCH,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_epoch),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        TICK_MS_NAME,
        c"Length of one tick of the timestamp field, in milliseconds.",
        c"Defaults to the preset's tick, or 1.",
        &TICK_MS,
        1,
        crate::snowflake::time::MAX_TICK_MS as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            DATACENTER_NAME,
            c"This server's datacenter number in the ID space.",
            c"Must fit the layout's datacenter field; 0 for a layout without one.",
            &DATACENTER_ID,
            0,
            i32::MAX,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_datacenter),
            None,
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            WORKER_NAME,
            c"This server's worker number in the ID space, or auto.",
            c"A number that fits the layout's worker field and differs from every other server's with the same \
              datacenter, or auto: a primary then claims a number no server of its lineage used, at its first \
              start and at every promotion, and logs the claim in WAL.",
            &WORKER_ID,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_worker),
            None,
            None,
        );
    }
}

/// At a reload, says whether the next start will refuse the files as they are.
fn at_reload(source: pg_sys::GucSource::Type) {
    if next_start::reloading(source) {
        next_start::check();
    }
}

/// True once the server runs: values set now (ALTER SYSTEM, a reload) are
/// checked by the hooks below. At start, `define_and_validate` checks them all
/// together and stops the server on a bad one, which a hook cannot do.
fn set_after_start() -> bool {
    // SAFETY: a flag PostgreSQL sets and clears in this process's main thread.
    !unsafe { pg_sys::process_shared_preload_libraries_in_progress }
}

/// Tells PostgreSQL why a check hook refused a value.
fn refused(e: ConfigError) -> bool {
    let text = |t: &str| CString::new(t).unwrap_or_default();
    let (detail, hint) = (text(&e.detail), text(&e.hint));
    // SAFETY: how a check hook reports its reasons; pstrdup copies the texts
    // into the current memory context, which PostgreSQL frees after reporting.
    unsafe {
        pg_sys::GUC_check_errcode(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE as c_int);
        pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr());
        pg_sys::GUC_check_errhint_string = pg_sys::pstrdup(hint.as_ptr());
    }
    false
}

/// The text of a string setting's new value.
///
/// # Safety
/// `newval` is the pointer PostgreSQL passes a string check hook.
unsafe fn new_text(newval: *mut *mut c_char) -> Option<String> {
    // SAFETY: PostgreSQL passes a valid pointer to a NULL or a C string.
    let value = unsafe { *newval };
    // SAFETY: not NULL, so a C string PostgreSQL owns for the hook's duration.
    (!value.is_null()).then(|| unsafe { CStr::from_ptr(value) }.to_string_lossy().into_owned())
}

#[pg_guard]
unsafe extern "C-unwind" fn check_layout(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    at_reload(source);
    // SAFETY: PostgreSQL calls this hook with its own `newval`.
    match unsafe { new_text(newval) } {
        Some(text) if set_after_start() => config::check_layout(&text).map_or_else(refused, |_| true),
        _ => true,
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn check_epoch(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    at_reload(source);
    // SAFETY: PostgreSQL calls this hook with its own `newval`.
    match unsafe { new_text(newval) } {
        Some(text) if set_after_start() => config::check_new_epoch(&text, clock::now()).map_or_else(refused, |_| true),
        _ => true,
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn check_datacenter(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    at_reload(source);
    // SAFETY: PostgreSQL passes a valid pointer to the new value.
    check_node(Field::Datacenter, DATACENTER_NAME, i64::from(unsafe { *newval }))
}

#[pg_guard]
unsafe extern "C-unwind" fn check_worker(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    at_reload(source);
    // SAFETY: PostgreSQL calls this hook with its own `newval`.
    let Some(text) = (unsafe { new_text(newval) }) else { return true };
    if !altered_by_sql() {
        return true;
    }
    match config::parse_worker(&text) {
        Err(e) => refused(e),
        Ok(Worker::Number(n)) => check_node(Field::Worker, WORKER_NAME, n),
        Ok(Worker::Auto) => match try_config() {
            Some(config) => config::check_auto(&config.codec.layout).map_or_else(refused, |()| true),
            None => true,
        },
    }
}

/// Whether a check hook runs for ALTER SYSTEM, the only place a postmaster
/// setting is set inside a transaction. A reload is not checked: the file
/// may change the layout too, and the restart checks both.
fn altered_by_sql() -> bool {
    // SAFETY: reads this backend's transaction state; raises no error.
    set_after_start() && unsafe { pg_sys::IsTransactionState() }
}

/// At ALTER SYSTEM, a node number must fit the layout in force.
fn check_node(field: Field, name: &'static CStr, value: i64) -> bool {
    if !altered_by_sql() {
        return true;
    }
    let Some(config) = try_config() else { return true };
    config::node_value(&config.codec, field, static_name(name), value).map_or_else(
        |e| {
            refused(ConfigError {
                hint: format!(
                    "{} It is checked against the layout in force, {}; to change the layout at the same restart, \
                     set both in postgresql.conf, where they are checked together when the server starts.",
                    e.hint, config.codec.layout
                ),
                ..e
            })
        },
        |_| true,
    )
}

fn define_wal_setting() {
    GucRegistry::define_int_guc(
        WAL_RMGR_ID_NAME,
        c"ID of snowflake_id's WAL resource manager.",
        c"Custom resource manager IDs are 128 to 255. It must be the same on a primary and its standbys, and \
          change only after a clean shutdown: WAL written under the old ID can no longer be replayed.",
        &WAL_RMGR_ID,
        *RMGR_IDS.start() as i32,
        *RMGR_IDS.end() as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// `snowflake_id.wal_rmgr_id`, validated at start.
pub fn wal_rmgr_id() -> u8 {
    u8::try_from(WAL_RMGR_ID.get()).expect("validated at start")
}

fn define_runtime_settings() {
    GucRegistry::define_int_guc(
        MAX_CLOCK_DRIFT_NAME,
        c"How far generated timestamps may run ahead of the system clock.",
        c"When the clock steps back or a tick's sequence is used up, the generator keeps going on borrowed \
          ticks up to this far ahead of the clock; beyond it, it waits (see snowflake_id.max_wait).",
        &MAX_CLOCK_DRIFT,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        MAX_WAIT_NAME,
        c"How long a call waits for the system clock before it fails.",
        c"Waiting happens only when generating would run more than snowflake_id.max_clock_drift ahead of the clock.",
        &MAX_WAIT,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        WORKER_REUSE_AFTER_NAME,
        c"How long a worker number no longer in use waits before worker_id = auto claims it again.",
        c"Counted from when another number superseded it, and only once the clock has passed its last mark: \
          the longest an old primary cut off from the others (a split brain) may go on generating with it. \
          A number released with snowflake_release_worker() waits only for the clock.",
        &WORKER_REUSE_AFTER,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_enum_guc(
        GUARD_ACTION_NAME,
        c"What snowflake_guard() does when an applied row carries a node number another server uses.",
        c"error fails the apply, so that the subscription stops and retries and no such row is stored; warning \
          stores the row and reports it.",
        &GUARD_ACTION,
        GucContext::Sighup,
        GucFlags::default(),
    );
}

/// Every setting snowflake_id defines.
const NAMES: [&CStr; 10] = [
    LAYOUT_NAME,
    EPOCH_NAME,
    TICK_MS_NAME,
    DATACENTER_NAME,
    WORKER_NAME,
    WORKER_REUSE_AFTER_NAME,
    MAX_CLOCK_DRIFT_NAME,
    MAX_WAIT_NAME,
    WAL_RMGR_ID_NAME,
    GUARD_ACTION_NAME,
];

/// The settings PostgreSQL has read from the configuration that no library
/// has defined (yet), with the file and line that set each, when known.
fn placeholders() -> Vec<(String, Option<(String, i32)>)> {
    let flag = pg_sys::GUC_CUSTOM_PLACEHOLDER as c_int;
    // SAFETY: the postmaster's own table of settings, read while libraries
    // load, before any other process exists; each entry is a valid
    // config_generic with a name, and a file name when it has a source file.
    unsafe {
        guc_variables()
            .into_iter()
            .map(|v| &*v)
            .filter(|v| v.flags & flag != 0)
            .map(|v| {
                let name = CStr::from_ptr(v.name).to_string_lossy().into_owned();
                let file =
                    (!v.sourcefile.is_null()).then(|| CStr::from_ptr(v.sourcefile).to_string_lossy().into_owned());
                (name, file.map(|f| (f, v.sourceline)))
            })
            .collect()
    }
}

/// Whether the setting `name` has its value from the server's command line
/// (`postgres -c`, or `pg_ctl -o`), which a configuration file cannot
/// override. Postmaster only, once the configuration is read.
pub fn set_on_command_line(name: &CStr) -> bool {
    let name = name.to_bytes();
    // SAFETY: the postmaster's own table of settings, read in its main thread;
    // each entry is a valid config_generic with a name.
    unsafe {
        guc_variables()
            .into_iter()
            .map(|v| &*v)
            .find(|v| CStr::from_ptr(v.name).to_bytes().eq_ignore_ascii_case(name))
            .is_some_and(|v| v.source == pg_sys::GucSource::PGC_S_ARGV)
    }
}

/// Every setting PostgreSQL knows, defined or placeholder.
///
/// # Safety
/// In a process that has built its table of settings.
#[cfg(feature = "pg15")]
unsafe fn guc_variables() -> Vec<*mut pg_sys::config_generic> {
    // SAFETY: the table and its length, as PostgreSQL 15 exposes them.
    unsafe {
        let n = usize::try_from(pg_sys::GetNumConfigOptions()).unwrap_or(0);
        std::slice::from_raw_parts(pg_sys::get_guc_variables(), n).to_vec()
    }
}

/// Every setting PostgreSQL knows, defined or placeholder.
///
/// # Safety
/// In a process that has built its table of settings.
#[cfg(not(feature = "pg15"))]
unsafe fn guc_variables() -> Vec<*mut pg_sys::config_generic> {
    let mut n: c_int = 0;
    // SAFETY: PostgreSQL 16 and later return a palloc'd array of `n` entries.
    unsafe {
        let vars = pg_sys::get_guc_variables(&mut n);
        std::slice::from_raw_parts(vars, usize::try_from(n).unwrap_or(0)).to_vec()
    }
}

/// The setting as the configuration wrote it, or `None` if not set anywhere.
fn raw_setting(name: &CStr) -> Option<String> {
    // SAFETY: `missing_ok` is true, so an unknown name gives NULL, not an ERROR.
    let value = unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) };
    // SAFETY: not NULL, so the value's C string, which PostgreSQL keeps.
    (!value.is_null()).then(|| unsafe { CStr::from_ptr(value) }.to_string_lossy().into_owned())
}

fn static_name(name: &'static CStr) -> &'static str {
    name.to_str().expect("setting names are ASCII")
}

fn set_dynamic_default(name: &CStr, value: &str) {
    let value = CString::new(value).expect("no NUL in a formatted value");
    // SAFETY: the setting is defined, and the value is valid for it.
    unsafe {
        pg_sys::SetConfigOption(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_POSTMASTER,
            pg_sys::GucSource::PGC_S_DYNAMIC_DEFAULT,
        )
    };
}

impl From<ConfigError> for ErrorReport {
    #[track_caller]
    fn from(e: ConfigError) -> ErrorReport {
        error::new(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"{}\": \"{}\"", e.setting, e.value),
        )
        .set_detail(e.detail)
        .set_hint(e.hint)
    }
}

/// `snowflake_id.max_clock_drift` in milliseconds, read from the variable
/// PostgreSQL assigns on reload: no parsing on the hot path.
#[inline]
pub fn max_drift_ms() -> u64 {
    // SAFETY: an int PostgreSQL assigns in this process's main thread.
    u64::try_from(unsafe { *MAX_CLOCK_DRIFT.as_ptr() }).unwrap_or(0)
}

/// `snowflake_id.guard_action`, as PostgreSQL last assigned it.
pub fn guard_action() -> GuardAction {
    GUARD_ACTION.get()
}

/// `snowflake_id.worker_reuse_after` in milliseconds.
pub fn worker_reuse_after_ms() -> u64 {
    u64::try_from(WORKER_REUSE_AFTER.get()).unwrap_or(0).saturating_mul(1000)
}

/// `snowflake_id.max_wait` in milliseconds, read likewise.
#[inline]
pub fn max_wait_ms() -> u64 {
    // SAFETY: as for max_drift_ms.
    u64::try_from(unsafe { *MAX_WAIT.as_ptr() }).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_core() {
        assert_eq!(DEFAULT_LAYOUT.to_str(), Ok(crate::snowflake::preset::DEFAULT_SPEC));
        let epoch = crate::snowflake::time::parse_instant(DEFAULT_EPOCH.to_str().unwrap());
        assert_eq!(epoch, Ok(crate::snowflake::time::DEFAULT_EPOCH));
    }
}
