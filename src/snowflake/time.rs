//! Wall-clock instants and the tick scale that turns them into timestamp fields.
//!
//! The core never reads a clock: every instant comes in as a [`UnixMillis`]
//! from the caller, so clock faults can be replayed deterministically in tests.

use std::fmt;

/// Milliseconds since 1970-01-01 00:00:00 UTC; the unit of every wall-clock reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixMillis(pub i64);

/// The default epoch, `2025-01-01 00:00:00+00`.
pub const DEFAULT_EPOCH: UnixMillis = UnixMillis(1_735_689_600_000);

/// The longest tick accepted: one day. Longer ticks make no sense for IDs.
pub const MAX_TICK_MS: u32 = 86_400_000;

const MS_PER_DAY: i64 = 86_400_000;

/// How a timestamp field counts time: ticks of `tick_ms` milliseconds since `epoch`.
///
/// Invariant: `1 <= tick_ms <= MAX_TICK_MS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeBase {
    epoch: UnixMillis,
    tick_ms: u32,
}

impl TimeBase {
    /// Returns `None` when `tick_ms` is outside `1..=MAX_TICK_MS`.
    pub fn new(epoch: UnixMillis, tick_ms: u32) -> Option<Self> {
        (1..=MAX_TICK_MS).contains(&tick_ms).then_some(Self { epoch, tick_ms })
    }

    pub fn epoch(&self) -> UnixMillis {
        self.epoch
    }

    pub fn tick_ms(&self) -> u32 {
        self.tick_ms
    }

    /// The tick an instant falls in (rounded down); negative before the epoch.
    #[inline]
    pub fn tick_of(&self, t: UnixMillis) -> i64 {
        let since = t.0.saturating_sub(self.epoch.0);
        if self.tick_ms == 1 {
            since
        } else {
            // Checked only to leave no panic path in the hot path: tick_ms is
            // at least 1, so this neither divides by zero nor overflows.
            since.checked_div_euclid(i64::from(self.tick_ms)).unwrap_or(since)
        }
    }

    /// The first instant of `tick`, or `None` past the range of `i64` milliseconds.
    pub fn start_of(&self, tick: u64) -> Option<UnixMillis> {
        let offset = i64::try_from(tick).ok()?.checked_mul(i64::from(self.tick_ms))?;
        self.epoch.0.checked_add(offset).map(UnixMillis)
    }

    /// The first tick starting at or after `t` (rounded up), never below zero.
    pub fn tick_at_or_after(&self, t: UnixMillis) -> u64 {
        let since = t.0.saturating_sub(self.epoch.0).max(0);
        let tick = i64::from(self.tick_ms);
        (since / tick + i64::from(since % tick != 0)) as u64
    }

    /// A duration in milliseconds as whole ticks (rounded down).
    #[inline]
    pub fn ticks_in(&self, ms: u64) -> u64 {
        if self.tick_ms == 1 {
            ms
        } else {
            // Checked for the same reason as in tick_of.
            ms.checked_div(u64::from(self.tick_ms)).unwrap_or(ms)
        }
    }

    /// A number of ticks in milliseconds, saturating.
    pub fn ms_in(&self, ticks: u64) -> u64 {
        ticks.saturating_mul(u64::from(self.tick_ms))
    }
}

impl fmt::Display for UnixMillis {
    /// ISO 8601 in UTC as PostgreSQL prints a `timestamptz` with `TimeZone = UTC`:
    /// `2025-01-01 00:00:00+00`, with `.mmm` when the milliseconds are not zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.0.div_euclid(MS_PER_DAY);
        let ms_of_day = self.0.rem_euclid(MS_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        let (secs, ms) = (ms_of_day / 1000, ms_of_day % 1000);
        write!(f, "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)?;
        if ms != 0 {
            write!(f, ".{ms:03}")?;
        }
        f.write_str("+00")
    }
}

/// A duration for a message: `2.5 s`, `12 min`, `5 h`, `400 days`.
pub fn span(ms: u64) -> String {
    const MIN: u64 = 60_000;
    const HOUR: u64 = 60 * MIN;
    const DAY: u64 = 24 * HOUR;
    if ms < 2 * MIN {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else if ms <= 2 * HOUR {
        format!("{} min", ms.div_ceil(MIN))
    } else if ms <= 2 * DAY {
        format!("{} h", ms.div_ceil(HOUR))
    } else {
        format!("{} days", ms.div_ceil(DAY))
    }
}

/// Bare numbers from here up to [`SECONDS_END`] are read as Unix seconds
/// taken for milliseconds: as milliseconds they fall between 1970-01-12 and
/// 1973-03-03, which no real epoch does; as seconds, 2001 to 5138.
const SECONDS_START: i64 = 1_000_000_000;
const SECONDS_END: i64 = 100_000_000_000;

/// Parses an epoch as [`parse_instant`] does, refusing a number of Unix
/// seconds written where milliseconds belong (`1735689600` for 2025-01-01),
/// and a date typed without dashes (`20250101`): as milliseconds both fall
/// in 1970 to 1973, where no real epoch lies.
pub fn parse_epoch(text: &str) -> Result<UnixMillis, String> {
    let epoch = parse_instant(text)?;
    let bare = text.trim().bytes().all(|b| b.is_ascii_digit());
    if bare && text.trim().len() == 8 {
        let dashed = format!("{}-{}-{}", &text.trim()[..4], &text.trim()[4..6], &text.trim()[6..]);
        if parse_instant(&dashed).is_ok() {
            return Err(format!(
                "{} looks like the date {dashed} typed without dashes, but a number is read as Unix milliseconds \
                 ({epoch}); write '{dashed}'",
                text.trim()
            ));
        }
    }
    if bare && (SECONDS_START..SECONDS_END).contains(&epoch.0) {
        return Err(format!(
            "{} looks like Unix seconds ({}), but a number is read as milliseconds ({epoch}); write {}000",
            epoch.0,
            UnixMillis(epoch.0 * 1000),
            epoch.0
        ));
    }
    Ok(epoch)
}

/// Parses an epoch setting: either an integer of Unix milliseconds, or an ISO 8601
/// date or timestamp such as `2025-01-01`, `2025-01-01 00:00:00+00`,
/// `2015-01-01T00:00:00.000Z` or `2025-06-01 12:00:00+05:30`.
/// A timestamp without an offset is read as UTC, never in a session time zone,
/// because the epoch is part of every server's identity.
pub fn parse_instant(text: &str) -> Result<UnixMillis, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("it is empty".into());
    }
    if s.bytes().all(|b| b.is_ascii_digit())
        || (s.starts_with('-') && s.len() > 1 && s[1..].bytes().all(|b| b.is_ascii_digit()))
    {
        return s.parse::<i64>().map(UnixMillis).map_err(|_| "the number of milliseconds is out of range".into());
    }
    let mut p = Cursor { s: s.as_bytes(), i: 0 };
    let year = p.digits(4, "a four-digit year")?;
    p.expect(b'-')?;
    let month = p.digits(2, "a two-digit month")?;
    p.expect(b'-')?;
    let day = p.digits(2, "a two-digit day")?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(format!("{year:04}-{month:02}-{day:02} is not a date"));
    }
    let mut ms_of_day = 0i64;
    let mut offset_min = 0i64;
    if p.peek().is_some_and(|b| b == b' ' || b == b'T' || b == b't') {
        p.i += 1;
        let h = p.digits(2, "a two-digit hour")?;
        p.expect(b':')?;
        let mi = p.digits(2, "two-digit minutes")?;
        let sec = if p.peek() == Some(b':') {
            p.i += 1;
            p.digits(2, "two-digit seconds")?
        } else {
            0
        };
        if h > 23 || mi > 59 || sec > 59 {
            return Err(format!("{h:02}:{mi:02}:{sec:02} is not a time of day"));
        }
        let mut frac_ms = 0i64;
        if p.peek() == Some(b'.') {
            p.i += 1;
            let start = p.i;
            while p.peek().is_some_and(|b| b.is_ascii_digit()) {
                p.i += 1;
            }
            let frac = &s[start..p.i];
            if frac.is_empty() {
                return Err("a decimal point must be followed by digits".into());
            }
            if frac.len() > 3 && frac[3..].bytes().any(|b| b != b'0') {
                return Err("the epoch has a precision of one millisecond".into());
            }
            frac_ms = format!("{:0<3}", &frac[..frac.len().min(3)]).parse::<i64>().unwrap_or(0);
        }
        ms_of_day = ((h * 60 + mi) * 60 + sec) * 1000 + frac_ms;
        while p.peek() == Some(b' ') {
            p.i += 1;
        }
        match p.peek() {
            None => {}
            Some(b'Z' | b'z') => p.i += 1,
            Some(sign @ (b'+' | b'-')) => {
                p.i += 1;
                let oh = p.digits(2, "a two-digit offset hour")?;
                let om = match p.peek() {
                    Some(b':') => {
                        p.i += 1;
                        p.digits(2, "two-digit offset minutes")?
                    }
                    Some(b) if b.is_ascii_digit() => p.digits(2, "two-digit offset minutes")?,
                    _ => 0,
                };
                if oh > 15 || om > 59 {
                    return Err("the time zone offset is out of range".into());
                }
                offset_min = (oh * 60 + om) * if sign == b'-' { -1 } else { 1 };
            }
            Some(_) => return Err(format!("unexpected text \"{}\"", &s[p.i..])),
        }
    }
    if p.i != s.len() {
        return Err(format!("unexpected text \"{}\"", &s[p.i..]));
    }
    let ms = days_from_civil(year, month, day) * MS_PER_DAY + ms_of_day - offset_min * 60_000;
    Ok(UnixMillis(ms))
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, b: u8) -> Result<(), String> {
        if self.peek() == Some(b) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected \"{}\" at position {}", b as char, self.i + 1))
        }
    }

    fn digits(&mut self, n: usize, what: &str) -> Result<i64, String> {
        let end = self.i + n;
        match self.s.get(self.i..end) {
            Some(d) if d.iter().all(u8::is_ascii_digit) => {
                self.i = end;
                Ok(d.iter().fold(0, |acc, b| acc * 10 + i64::from(b - b'0')))
            }
            _ => Err(format!("expected {what} at position {}", self.i + 1)),
        }
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's algorithms for the proleptic Gregorian calendar.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_in_seconds_is_refused_naming_milliseconds() {
        assert_eq!(
            parse_epoch("1735689600"),
            Err("1735689600 looks like Unix seconds (2025-01-01 00:00:00+00), but a number is read as \
                 milliseconds (1970-01-21 02:08:09.600+00); write 1735689600000"
                .into())
        );
        assert_eq!(parse_epoch("1735689600000"), Ok(UnixMillis(1_735_689_600_000)));
        assert_eq!(parse_epoch("0"), Ok(UnixMillis(0)), "mastodon's epoch");
        assert_eq!(parse_epoch("999999999"), Ok(UnixMillis(999_999_999)));
        assert!(parse_epoch("99999999999").is_err());
        assert_eq!(parse_epoch("100000000000"), Ok(UnixMillis(100_000_000_000)));
        assert_eq!(parse_epoch("2025-01-01"), Ok(UnixMillis(1_735_689_600_000)));
    }

    #[test]
    fn an_epoch_date_without_dashes_is_refused_naming_the_date() {
        // Issue 30: 20250101 was read as 1970-01-01 05:37 and the range ended in 2039.
        assert_eq!(
            parse_epoch("20250101"),
            Err("20250101 looks like the date 2025-01-01 typed without dashes, but a number is read as Unix \
                 milliseconds (1970-01-01 05:37:30.101+00); write '2025-01-01'"
                .into())
        );
        assert!(parse_epoch(" 19700101 ").is_err());
        // Eight digits that are no date stay milliseconds.
        assert_eq!(parse_epoch("20251301"), Ok(UnixMillis(20_251_301)));
        assert_eq!(parse_epoch("2025010"), Ok(UnixMillis(2_025_010)));
    }

    #[test]
    fn spans_read_in_the_largest_fitting_unit() {
        assert_eq!(span(0), "0.0 s");
        assert_eq!(span(3_001), "3.0 s");
        assert_eq!(span(119_999), "120.0 s");
        assert_eq!(span(120_000), "2 min");
        assert_eq!(span(7_200_001), "3 h");
        assert_eq!(span(86_400_000 * 400), "400 days");
    }
    use proptest::prelude::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_instant("2025-01-01 00:00:00+00"), Ok(DEFAULT_EPOCH));
        assert_eq!(parse_instant("2025-01-01"), Ok(DEFAULT_EPOCH));
        assert_eq!(parse_instant("1735689600000"), Ok(DEFAULT_EPOCH));
        assert_eq!(parse_instant("2015-01-01T00:00:00.000Z"), Ok(UnixMillis(1_420_070_400_000)));
        assert_eq!(parse_instant("2010-11-04 01:42:54.657+00"), Ok(UnixMillis(1_288_834_974_657)));
        assert_eq!(parse_instant("2025-01-01 05:30:00+05:30"), Ok(DEFAULT_EPOCH));
        assert_eq!(parse_instant("2024-12-31 19:00:00-0500"), Ok(DEFAULT_EPOCH));
        assert_eq!(parse_instant(" 2025-01-01 00:00 "), Ok(DEFAULT_EPOCH));
    }

    #[test]
    fn rejects_what_is_not_an_instant() {
        for bad in [
            "",
            "yesterday",
            "2025-13-01",
            "2025-02-29",
            "2025-01-01 24:00:00",
            "2025-01-01 00:00:00+00 junk",
            "2025-01-01 00:00:00.0001",
            "99999999999999999999",
            "2025-1-1",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn formats_like_postgres_in_utc() {
        assert_eq!(DEFAULT_EPOCH.to_string(), "2025-01-01 00:00:00+00");
        assert_eq!(UnixMillis(1_462_015_105_796).to_string(), "2016-04-30 11:18:25.796+00");
        assert_eq!(UnixMillis(-1).to_string(), "1969-12-31 23:59:59.999+00");
    }

    #[test]
    fn ticks_round_down_and_up() {
        let tb = TimeBase::new(UnixMillis(1000), 10).unwrap();
        assert_eq!(tb.tick_of(UnixMillis(1000)), 0);
        assert_eq!(tb.tick_of(UnixMillis(1019)), 1);
        assert_eq!(tb.tick_of(UnixMillis(999)), -1);
        assert_eq!(tb.tick_at_or_after(UnixMillis(1011)), 2);
        assert_eq!(tb.tick_at_or_after(UnixMillis(1010)), 1);
        assert_eq!(tb.tick_at_or_after(UnixMillis(0)), 0);
        assert_eq!(tb.start_of(2), Some(UnixMillis(1020)));
        assert_eq!(tb.start_of(u64::MAX), None);
        assert!(TimeBase::new(UnixMillis(0), 0).is_none());
        assert!(TimeBase::new(UnixMillis(0), MAX_TICK_MS + 1).is_none());
    }

    proptest! {
        #[test]
        fn display_and_parse_round_trip(ms in -62_000_000_000_000i64..250_000_000_000_000) {
            prop_assert_eq!(parse_instant(&UnixMillis(ms).to_string()), Ok(UnixMillis(ms)));
        }

        #[test]
        fn a_tick_contains_its_start(ms in 0i64..4_000_000_000_000, tick_ms in 1u32..100_000) {
            let tb = TimeBase::new(UnixMillis(0), tick_ms).unwrap();
            let tick = tb.tick_of(UnixMillis(ms));
            let start = tb.start_of(tick as u64).unwrap();
            prop_assert!(start.0 <= ms && ms < start.0 + i64::from(tick_ms));
            prop_assert!(tb.tick_at_or_after(UnixMillis(ms)) as i64 - tick <= 1);
        }
    }
}
