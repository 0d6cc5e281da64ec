//! Named layouts of well-known Snowflake designs, each with its own epoch and tick.

use super::layout::{Layout, LayoutError};
use super::time::{UnixMillis, DEFAULT_EPOCH};

/// A well-known design.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    pub name: &'static str,
    pub spec: &'static str,
    pub epoch: UnixMillis,
    pub tick_ms: u32,
    /// How the design's own field names map onto ours, for the documentation.
    pub note: &'static str,
}

pub const PRESETS: [Preset; 6] = [
    Preset {
        name: "twitter",
        spec: "timestamp:41,datacenter:5,worker:5,sequence:12",
        epoch: UnixMillis(1_288_834_974_657), // 2010-11-04 01:42:54.657+00
        tick_ms: 1,
        note: "Twitter's original split and epoch",
    },
    Preset {
        name: "instagram",
        // Instagram documents 41 + 13 + 10 = 64 bits in a signed bigint: the top
        // time bit is the sign bit and must stay zero, which leaves 40 bits
        // (until 2046-06), exactly the range Instagram's own IDs can use.
        spec: "timestamp:40,worker:13,sequence:10",
        epoch: UnixMillis(1_314_220_021_721), // 2011-08-24 21:07:01.721+00
        tick_ms: 1,
        note: "the 13-bit logical shard is the worker",
    },
    Preset {
        name: "discord",
        // Discord documents a 42-bit timestamp; its top bit stays zero until 2084,
        // so 41 bits read every Discord ID issued so far and keep our sign bit clear.
        spec: "timestamp:41,datacenter:5,worker:5,sequence:12",
        epoch: UnixMillis(1_420_070_400_000), // 2015-01-01 00:00:00+00
        tick_ms: 1,
        note: "internal worker ID is the datacenter, internal process ID the worker, increment the sequence",
    },
    Preset {
        name: "sonyflake",
        spec: "timestamp:39,sequence:8,worker:16",
        epoch: UnixMillis(1_409_529_600_000), // 2014-09-01 00:00:00+00
        tick_ms: 10,
        note: "the 16-bit machine ID is the worker; time counts in 10 ms",
    },
    Preset {
        name: "mastodon",
        // Mastodon documents a 48-bit millisecond timestamp; its top bit stays zero
        // until the year 6429, so 47 bits read every Mastodon ID and keep the sign bit clear.
        spec: "timestamp:47,sequence:16",
        epoch: UnixMillis(0),
        tick_ms: 1,
        note: "no node fields: one generating server per ID space",
    },
    Preset {
        name: "pgedge",
        // pgEdge's snowflake extension: 41 bits of milliseconds since 2023, a
        // 10-bit node number (snowflake.node) and a 12-bit counter.
        spec: "timestamp:41,worker:10,sequence:12",
        epoch: UnixMillis(1_672_531_200_000), // 2023-01-01 00:00:00+00
        tick_ms: 1,
        note: "pgEdge's snowflake extension: its node is the worker, its counter the sequence",
    },
];

/// The default `snowflake_id.layout`: Twitter's split, with our own epoch.
pub const DEFAULT_SPEC: &str = "timestamp:41,datacenter:5,worker:5,sequence:12";

pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name.trim()))
}

/// A layout setting resolved: the layout, and the epoch and tick that come with
/// it unless other settings override them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolvedLayout {
    pub layout: Layout,
    pub epoch: UnixMillis,
    pub tick_ms: u32,
    pub preset: Option<&'static Preset>,
}

/// Reads a preset name or a field specification. A specification brings the
/// default epoch and a 1 ms tick.
pub fn resolve(setting: &str) -> Result<ResolvedLayout, LayoutError> {
    if let Some(p) = find(setting) {
        let layout = Layout::parse(p.spec).expect("presets are valid");
        return Ok(ResolvedLayout { layout, epoch: p.epoch, tick_ms: p.tick_ms, preset: Some(p) });
    }
    Layout::parse(setting).map(|layout| ResolvedLayout { layout, epoch: DEFAULT_EPOCH, tick_ms: 1, preset: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::time::parse_instant;

    #[test]
    fn every_preset_parses_and_names_are_case_insensitive() {
        for p in PRESETS {
            let r = resolve(&p.name.to_uppercase()).unwrap();
            assert_eq!(r.preset, Some(find(p.name).unwrap()));
            assert_eq!(r.layout.to_string(), p.spec);
        }
    }

    #[test]
    fn preset_epochs_are_the_documented_dates() {
        let want = [
            ("twitter", "2010-11-04 01:42:54.657+00"),
            ("instagram", "2011-08-24 21:07:01.721+00"),
            ("discord", "2015-01-01"),
            ("sonyflake", "2014-09-01"),
            ("mastodon", "1970-01-01"),
            ("pgedge", "2023-01-01"),
        ];
        for (name, date) in want {
            assert_eq!(Ok(find(name).unwrap().epoch), parse_instant(date), "{name}");
        }
    }

    #[test]
    fn a_spec_brings_the_default_epoch() {
        let r = resolve(DEFAULT_SPEC).unwrap();
        assert_eq!((r.epoch, r.tick_ms, r.preset), (DEFAULT_EPOCH, 1, None));
    }
}
