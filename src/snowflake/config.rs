//! Turning the server's identity settings into a validated configuration.
//!
//! Every check that decides whether a server may start lives here, without
//! PostgreSQL, so each refusal is unit-tested; the PostgreSQL layer turns an
//! error into a FATAL message with the setting's name.

use std::fmt;

use super::codec::{Codec, Node};
use super::layout::{Field, Layout};
use super::preset::{self, ResolvedLayout};
use super::time::{parse_epoch, TimeBase, UnixMillis, MAX_TICK_MS};

/// The identity settings as the server has them: `None` means not set, so a
/// preset's own epoch and tick apply.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings<'a> {
    pub layout: &'a str,
    pub epoch: Option<&'a str>,
    pub tick_ms: Option<i64>,
    pub datacenter_id: i64,
    pub worker_id: Worker,
}

/// `snowflake_id.worker_id` as written: a number, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Worker {
    Number(i64),
    /// A primary claims a number before its first ID (see [`super::claims`]).
    Auto,
}

impl Default for Worker {
    fn default() -> Worker {
        Worker::Number(0)
    }
}

/// A validated configuration: the codec, and this server's node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub codec: Codec,
    /// The numbers set; with `auto_worker`, the worker is 0 until a claim.
    pub node: Node,
    /// `worker_id = auto`: the worker number is claimed, not set.
    pub auto_worker: bool,
    pub resolved: ResolvedLayout,
}

/// A refused setting, with what to tell the DBA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The setting, such as `snowflake_id.worker_id`.
    pub setting: &'static str,
    /// The offending value as written.
    pub value: String,
    /// Why, as a sentence.
    pub detail: String,
    pub hint: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid value for parameter \"{}\": \"{}\": {}", self.setting, self.value, self.detail)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Validates settings as written. The wall clock has no say: a host may
    /// boot with a wrong clock, and the server must start all the same; the
    /// generator refuses per call while the clock lies before the epoch or
    /// past the layout's range.
    pub fn new(s: Settings<'_>) -> Result<Config, ConfigError> {
        let err = |setting, value: String, detail: String, hint: &str| ConfigError {
            setting,
            value,
            detail: sentence(&detail),
            hint: hint.to_string(),
        };
        check_layout(s.layout)?;
        let resolved = preset::resolve(s.layout).expect("checked");
        let epoch = match s.epoch {
            Some(text) => check_epoch(text)?,
            None => resolved.epoch,
        };
        let tick_ms = s.tick_ms.map_or(i64::from(resolved.tick_ms), |t| t);
        let time = u32::try_from(tick_ms).ok().and_then(|t| TimeBase::new(epoch, t)).ok_or_else(|| {
            err(
                "snowflake_id.tick_ms",
                tick_ms.to_string(),
                format!("a tick lasts from 1 to {MAX_TICK_MS} milliseconds"),
                "Use 1 for millisecond timestamps.",
            )
        })?;
        let codec = Codec::new(resolved.layout, time);
        let worker = match s.worker_id {
            Worker::Number(n) => node_value(&codec, Field::Worker, "snowflake_id.worker_id", n)?,
            Worker::Auto => {
                check_auto(&codec.layout)?;
                0
            }
        };
        let node = Node {
            datacenter: node_value(&codec, Field::Datacenter, "snowflake_id.datacenter_id", s.datacenter_id)?,
            worker,
        };
        Ok(Config { codec, node, auto_worker: s.worker_id == Worker::Auto, resolved })
    }
}

/// Whether `auto` can give a server of `layout` a worker number: the layout
/// needs a worker field to claim one in.
pub fn check_auto(layout: &Layout) -> Result<(), ConfigError> {
    if layout.width(Field::Worker) > 0 {
        return Ok(());
    }
    Err(ConfigError {
        setting: "snowflake_id.worker_id",
        value: "auto".into(),
        detail: sentence("the layout has no worker field, so there is no worker number to claim"),
        hint: "Set snowflake_id.worker_id to 0, or choose a layout with a worker field.".into(),
    })
}

/// Reads `snowflake_id.worker_id` as written: `auto` (in any case), or a
/// number as [`parse_identity_number`] reads it.
pub fn parse_worker(text: &str) -> Result<Worker, ConfigError> {
    if text.trim().eq_ignore_ascii_case("auto") {
        return Ok(Worker::Auto);
    }
    parse_identity_number("snowflake_id.worker_id", text).map(Worker::Number).map_err(|e| ConfigError {
        detail: format!("The value must be auto, or {}", e.detail.replacen("The value must be a", "a", 1)),
        hint: "Write snowflake_id.worker_id in plain decimal digits, such as 7, or auto to have each primary claim \
               one."
            .into(),
        ..e
    })
}

/// Reads an identity number as written in the configuration: plain decimal
/// digits only. PostgreSQL would also take `010` (octal 8), `0x1f` and `7.5`
/// (rounded to 8), and a zero-padded number silently becoming another
/// server's is worse than a server that does not start.
pub fn parse_identity_number(setting: &'static str, text: &str) -> Result<i64, ConfigError> {
    let t = text.trim();
    let digits = t.strip_prefix('-').unwrap_or(t);
    let plain =
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0'));
    let refuse = || ConfigError {
        setting,
        value: text.to_string(),
        detail: "The value must be a whole number written in decimal digits, such as 7: no leading zero, \
                 fraction, exponent, unit or other base."
            .into(),
        hint: format!("Write {setting} in plain decimal digits, such as 7."),
    };
    if !plain {
        return Err(refuse());
    }
    t.parse::<i64>()
        .map_err(|_| ConfigError { detail: "The value is far outside the range of the setting.".into(), ..refuse() })
}

/// Checks a layout setting on its own (a preset, or a field list within 63 bits).
pub fn check_layout(text: &str) -> Result<(), ConfigError> {
    preset::resolve(text).map(|_| ()).map_err(|e| ConfigError {
        setting: "snowflake_id.layout",
        value: text.to_string(),
        detail: sentence(&e.to_string()),
        hint: LAYOUT_HINT.into(),
    })
}

/// Checks an epoch setting on its own: a timestamp or Unix milliseconds,
/// from 1970 on.
pub fn check_epoch(text: &str) -> Result<UnixMillis, ConfigError> {
    let err = |detail: String, hint: &str| ConfigError {
        setting: "snowflake_id.epoch",
        value: text.to_string(),
        detail: sentence(&detail),
        hint: hint.to_string(),
    };
    let epoch = parse_epoch(text)
        .map_err(|e| err(e, "Write a timestamp such as '2025-01-01 00:00:00+00' or a number of Unix milliseconds."))?;
    if epoch.0 < 0 {
        return Err(err("the epoch is before 1970-01-01".into(), "Choose an epoch after 1970."));
    }
    Ok(epoch)
}

/// Checks an epoch a DBA sets on a running server (ALTER SYSTEM, a reload)
/// against its clock, which is then taken to be right: an epoch in the future
/// is a slip caught before the restart that would apply it. At start the
/// clock is not consulted (see [`Config::new`]).
pub fn check_new_epoch(text: &str, now: UnixMillis) -> Result<UnixMillis, ConfigError> {
    let epoch = check_epoch(text)?;
    if epoch > now {
        return Err(ConfigError {
            setting: "snowflake_id.epoch",
            value: text.to_string(),
            detail: sentence(&format!("the epoch is in the future (the server's clock says {now})")),
            hint: "Choose an epoch before the first ID; check the system clock if it should already have passed."
                .into(),
        });
    }
    Ok(epoch)
}

pub const LAYOUT_HINT: &str = "Use a preset (twitter, instagram, discord, sonyflake, mastodon, pgedge) or fields such \
                           as timestamp:41,datacenter:5,worker:5,sequence:12.";

/// Checks that a node number fits its field in the layout.
pub fn node_value(codec: &Codec, field: Field, setting: &'static str, value: i64) -> Result<u64, ConfigError> {
    let width = codec.layout.width(field);
    let fits = u64::try_from(value).ok().filter(|&v| codec.layout.holds(field, v));
    fits.ok_or_else(|| {
        let (detail, hint) = if width == 0 {
            (
                format!("the layout has no {} field, so the only valid value is 0", field.name()),
                format!("Set {setting} to 0, or choose a layout with a {} field.", field.name()),
            )
        } else {
            let max = codec.layout.field(field).map_or(0, |b| b.max());
            (
                format!("the layout's {} field has {width} bits, so the value must be from 0 to {max}", field.name()),
                format!(
                    "Give every server its own {setting} from 0 to {max}, or choose a layout with a wider {} field.",
                    field.name()
                ),
            )
        };
        ConfigError { setting, value: value.to_string(), detail: sentence(&detail), hint }
    })
}

/// PostgreSQL's style for details: a capitalised sentence with a period.
pub fn sentence(fragment: &str) -> String {
    let mut chars = fragment.chars();
    let mut s: String = chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default();
    if !s.ends_with('.') {
        s.push('.');
    }
    s
}

/// The identity settings a layout needs written out: the datacenter and
/// worker numbers it has a field for, where the configuration does not set
/// them. Left unset they would be 0, the numbers every other server that was
/// not configured has too, so the server refuses to start instead.
pub fn missing_identity(layout: &Layout, datacenter_set: bool, worker_set: bool) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if layout.field(Field::Datacenter).is_some() && !datacenter_set {
        missing.push("snowflake_id.datacenter_id");
    }
    if layout.field(Field::Worker).is_some() && !worker_set {
        missing.push("snowflake_id.worker_id");
    }
    missing
}

/// The name among `names` closest to `name`: the fewest single-character
/// insertions, deletions and substitutions (ties go to the earlier name). For
/// suggesting what a misspelled setting meant.
pub fn nearest<'a>(name: &str, names: &[&'a str]) -> Option<&'a str> {
    names.iter().copied().min_by_key(|candidate| edit_distance(name, candidate))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::preset::DEFAULT_SPEC;
    use crate::snowflake::time::DEFAULT_EPOCH;

    const NOW: UnixMillis = UnixMillis(1_795_000_000_000); // 2026-11-18

    fn defaults() -> Settings<'static> {
        Settings { layout: DEFAULT_SPEC, ..Settings::default() }
    }

    #[test]
    fn defaults_are_valid() {
        let c = Config::new(defaults()).unwrap();
        assert_eq!(c.codec.time.epoch(), DEFAULT_EPOCH);
        assert_eq!(c.codec.time.tick_ms(), 1);
        assert_eq!(c.node, Node::default());
    }

    #[test]
    fn a_preset_brings_its_epoch_and_tick_unless_overridden() {
        let c = Config::new(Settings { layout: "sonyflake", ..defaults() }).unwrap();
        assert_eq!((c.codec.time.epoch(), c.codec.time.tick_ms()), (UnixMillis(1_409_529_600_000), 10));
        let c =
            Config::new(Settings { layout: "sonyflake", epoch: Some("2020-01-01"), tick_ms: Some(1), ..defaults() })
                .unwrap();
        assert_eq!((c.codec.time.epoch(), c.codec.time.tick_ms()), (UnixMillis(1_577_836_800_000), 1));
    }

    #[test]
    fn node_ids_must_fit_their_fields() {
        let ok = Config::new(Settings { datacenter_id: 31, worker_id: Worker::Number(31), ..defaults() }).unwrap();
        assert_eq!(ok.node, Node { datacenter: 31, worker: 31 });
        let e = Config::new(Settings { worker_id: Worker::Number(32), ..defaults() }).unwrap_err();
        assert_eq!((e.setting, e.value.as_str()), ("snowflake_id.worker_id", "32"));
        assert!(e.detail.contains("from 0 to 31"), "{}", e.detail);
        let e = Config::new(Settings { datacenter_id: -1, ..defaults() }).unwrap_err();
        assert_eq!(e.setting, "snowflake_id.datacenter_id");
        let e = Config::new(Settings { layout: "instagram", datacenter_id: 1, ..defaults() }).unwrap_err();
        assert!(e.detail.contains("no datacenter field"), "{}", e.detail);
        assert!(Config::new(Settings { layout: "instagram", worker_id: Worker::Number(8191), ..defaults() }).is_ok());
    }

    #[test]
    fn auto_needs_a_worker_field() {
        for layout in ["twitter", "instagram", "sonyflake", "pgedge", "timestamp:41,worker:1,sequence:21"] {
            let c = Config::new(Settings { layout, worker_id: Worker::Auto, ..defaults() }).unwrap();
            assert!(c.auto_worker, "{layout}");
            assert_eq!(c.node.worker, 0, "{layout}: no number until a claim");
        }
        let fixed = Config::new(Settings { worker_id: Worker::Number(3), ..defaults() }).unwrap();
        assert!(!fixed.auto_worker);
        for layout in ["mastodon", "timestamp:41,datacenter:10,sequence:12"] {
            let e = Config::new(Settings { layout, worker_id: Worker::Auto, ..defaults() }).unwrap_err();
            assert_eq!((e.setting, e.value.as_str()), ("snowflake_id.worker_id", "auto"));
            assert_eq!(e.detail, "The layout has no worker field, so there is no worker number to claim.");
        }
    }

    #[test]
    fn the_worker_setting_is_auto_or_a_plain_number() {
        assert_eq!(parse_worker("auto"), Ok(Worker::Auto));
        assert_eq!(parse_worker(" AUTO "), Ok(Worker::Auto));
        assert_eq!(parse_worker("7"), Ok(Worker::Number(7)));
        let e = parse_worker("automatic").unwrap_err();
        assert_eq!((e.setting, e.value.as_str()), ("snowflake_id.worker_id", "automatic"));
        assert!(e.hint.contains("or auto"), "{}", e.hint);
        assert!(
            e.detail.starts_with("The value must be auto, or a whole number written in decimal digits"),
            "{}",
            e.detail
        );
        assert!(parse_worker("07").is_err());
    }

    #[test]
    fn identity_numbers_are_plain_decimal() {
        let w = "snowflake_id.worker_id";
        for (text, want) in [("7", 7), ("0", 0), ("31", 31), (" 12 ", 12), ("-1", -1), ("99999999999", 99_999_999_999)]
        {
            assert_eq!(parse_identity_number(w, text).map_err(|e| e.detail), Ok(want), "{text:?}");
        }
        for text in ["010", "0x1f", "7.5", "7ms", "+7", "1e2", "", "-", "-07", "٣", "７"] {
            let e = parse_identity_number(w, text).expect_err(text);
            assert_eq!((e.setting, e.value.as_str()), (w, text));
            assert!(e.detail.contains("decimal digits") && e.hint.contains("plain decimal digits"), "{e:?}");
            assert!(!e.hint.contains("fraction"), "the hint must not suggest other forms: {}", e.hint);
        }
    }

    #[test]
    fn identity_number_refusals_say_why_and_how_to_fix_it() {
        let w = "snowflake_id.worker_id";
        let how = "The value must be a whole number written in decimal digits, such as 7: no leading zero, \
                   fraction, exponent, unit or other base.";
        let range = "The value is far outside the range of the setting.";
        let hint = "Write snowflake_id.worker_id in plain decimal digits, such as 7.";
        for (text, detail) in [
            ("010", how),
            ("", how),
            ("-", how),
            ("0x1f", how),
            ("9223372036854775808", range),
            ("-9223372036854775809", range),
            ("99999999999999999999999", range),
        ] {
            let e = parse_identity_number(w, text).expect_err(text);
            assert_eq!(e, ConfigError { setting: w, value: text.into(), detail: detail.into(), hint: hint.into() });
        }
        // The ends of the range, and zero however it is signed, are numbers.
        assert_eq!(parse_identity_number(w, "9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_identity_number(w, "-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(parse_identity_number(w, "-0"), Ok(0));
        let d = parse_identity_number("snowflake_id.datacenter_id", "1.0").unwrap_err();
        assert_eq!(d.hint, "Write snowflake_id.datacenter_id in plain decimal digits, such as 7.");
    }

    #[test]
    fn the_epoch_may_be_1970_or_now_but_not_a_millisecond_outside() {
        let before_1970 = ConfigError {
            setting: "snowflake_id.epoch",
            value: "-1".into(),
            detail: "The epoch is before 1970-01-01.".into(),
            hint: "Choose an epoch after 1970.".into(),
        };
        assert_eq!(check_epoch("-1"), Err(before_1970));
        assert_eq!(check_epoch("0"), Ok(UnixMillis(0)));
        assert_eq!(check_epoch("1"), Ok(UnixMillis(1)));
        assert_eq!(check_epoch("1970-01-01"), Ok(UnixMillis(0)));

        let at = |ms: i64| check_new_epoch(&ms.to_string(), NOW);
        assert_eq!(at(NOW.0 - 1), Ok(UnixMillis(NOW.0 - 1)));
        assert_eq!(at(NOW.0), Ok(NOW), "an epoch of now is not in the future");
        let e = at(NOW.0 + 1).unwrap_err();
        assert_eq!(e.setting, "snowflake_id.epoch");
        assert_eq!(e.value, (NOW.0 + 1).to_string());
        assert_eq!(e.detail, "The epoch is in the future (the server's clock says 2026-11-18 11:06:40+00).");
        assert_eq!(
            e.hint,
            "Choose an epoch before the first ID; check the system clock if it should already have passed."
        );
        // At the very start of 1970 both checks meet: an epoch of now is fine.
        assert_eq!(check_new_epoch("0", UnixMillis(0)), Ok(UnixMillis(0)));
        assert!(check_new_epoch("1", UnixMillis(0)).unwrap_err().detail.starts_with("The epoch is in the future"));
        assert_eq!(check_new_epoch("-1", NOW).unwrap_err().detail, "The epoch is before 1970-01-01.");
        // At start the clock has no say: a host may boot with a wrong one.
        assert_eq!(check_epoch(&(NOW.0 + 1).to_string()), Ok(UnixMillis(NOW.0 + 1)));
    }

    #[test]
    fn layout_and_epoch_are_checked_on_their_own() {
        assert!(check_layout("instagram").is_ok());
        assert!(check_layout("timestamp:41,worker:10,sequence:12").is_ok());
        let e = check_layout("bogus").unwrap_err();
        assert_eq!((e.setting, e.value.as_str()), ("snowflake_id.layout", "bogus"));
        assert!(check_layout("timestamp:42,datacenter:5,worker:5,sequence:12").is_err(), "64 bits");
        assert_eq!(check_epoch("2025-01-01"), Ok(DEFAULT_EPOCH));
        for bad in ["-5", "last tuesday", "1735689600"] {
            assert_eq!(check_epoch(bad).unwrap_err().setting, "snowflake_id.epoch", "{bad}");
        }
    }

    #[test]
    fn refusals_name_the_setting() {
        let cases: [(Settings<'static>, &str); 5] = [
            (Settings { layout: "timestamp:41,shard:13,sequence:10", ..defaults() }, "snowflake_id.layout"),
            (Settings { epoch: Some("tomorrow"), ..defaults() }, "snowflake_id.epoch"),
            (Settings { epoch: Some("-5"), ..defaults() }, "snowflake_id.epoch"),
            (Settings { tick_ms: Some(0), ..defaults() }, "snowflake_id.tick_ms"),
            (Settings { tick_ms: Some(i64::from(MAX_TICK_MS) + 1), ..defaults() }, "snowflake_id.tick_ms"),
        ];
        for (settings, setting) in cases {
            let e = Config::new(settings).unwrap_err();
            assert_eq!(e.setting, setting, "{e}");
            assert!(!e.hint.is_empty());
        }
    }

    #[test]
    fn the_clock_has_no_say_in_whether_settings_are_valid() {
        // An epoch in the future (or a clock that boots in the past), and a
        // 28-bit field of seconds from 2010, which ran out in 2018: the
        // generator refuses per call, the server starts.
        let future = Config::new(Settings { epoch: Some("2999-01-01"), ..defaults() }).unwrap();
        assert_eq!(future.codec.time.epoch().to_string(), "2999-01-01 00:00:00+00");
        let over = Settings {
            layout: "timestamp:28,sequence:10",
            epoch: Some("2010-01-01"),
            tick_ms: Some(1000),
            ..defaults()
        };
        let over = Config::new(over).unwrap();
        assert!(over.codec.tick_in_range(NOW).is_err());
    }

    #[test]
    fn a_layout_with_node_fields_needs_them_written_out() {
        let default = Layout::parse(DEFAULT_SPEC).unwrap();
        let both = vec!["snowflake_id.datacenter_id", "snowflake_id.worker_id"];
        assert_eq!(missing_identity(&default, false, false), both);
        assert_eq!(missing_identity(&default, true, false), vec!["snowflake_id.worker_id"]);
        assert_eq!(missing_identity(&default, false, true), vec!["snowflake_id.datacenter_id"]);
        assert!(missing_identity(&default, true, true).is_empty());
        let instagram = preset::resolve("instagram").unwrap().layout;
        assert_eq!(missing_identity(&instagram, false, false), vec!["snowflake_id.worker_id"]);
        assert!(missing_identity(&instagram, false, true).is_empty(), "no datacenter field, nothing to set");
        let mastodon = preset::resolve("mastodon").unwrap().layout;
        assert!(missing_identity(&mastodon, false, false).is_empty(), "no node fields");
    }

    #[test]
    fn a_misspelled_name_is_matched_to_the_nearest_setting() {
        let names =
            ["snowflake_id.layout", "snowflake_id.datacenter_id", "snowflake_id.worker_id", "snowflake_id.max_wait"];
        assert_eq!(nearest("snowflake_id.workerid", &names), Some("snowflake_id.worker_id"));
        assert_eq!(nearest("snowflake_id.worker", &names), Some("snowflake_id.worker_id"));
        assert_eq!(nearest("snowflake_id.datacentre_id", &names), Some("snowflake_id.datacenter_id"));
        assert_eq!(nearest("snowflake_id.lay_out", &names), Some("snowflake_id.layout"));
        assert_eq!(nearest("snowflake_id.maxwait", &names), Some("snowflake_id.max_wait"));
        assert_eq!(nearest("anything", &[]), None);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
