//! The durable state file: the generator's high-water mark, so that IDs issued
//! after a restart or a crash are above every ID issued before it.
//!
//! The file is small text a DBA can read, with a CRC so that a torn or edited
//! file is noticed instead of trusted. It is replaced atomically: written to a
//! temporary file, flushed, renamed over the old one, and the directory flushed.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::codec::{Codec, Node};
use super::generator::Mark;
use super::time::{parse_instant, TimeBase, UnixMillis};

/// The file's name in the data directory.
pub const FILE_NAME: &str = "snowflake_id.state";

const VERSION: &str = "1";

/// What the file records. The mark is kept as an instant rather than a tick, so
/// it stays a valid floor even if the epoch or tick length is changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateRecord {
    /// No ID of era `clock_back` was issued at or after this instant.
    pub mark: UnixMillis,
    pub clock_back: u64,
    /// The settings in force when it was written, to notice a change.
    pub layout: String,
    pub epoch: UnixMillis,
    pub tick_ms: u32,
    pub node: Node,
}

impl StateRecord {
    pub fn new(mark: Mark, codec: &Codec, node: Node) -> Self {
        StateRecord {
            mark: codec.instant_of(mark.tick).unwrap_or(UnixMillis(i64::MAX)),
            clock_back: mark.clock_back,
            layout: codec.layout.to_string(),
            epoch: codec.time.epoch(),
            tick_ms: codec.time.tick_ms(),
            node,
        }
    }

    /// The mark in ticks of `time` (rounded up, so it stays a floor).
    pub fn mark_in(&self, time: &TimeBase) -> Mark {
        Mark { tick: time.tick_at_or_after(self.mark), clock_back: self.clock_back }
    }

    /// Settings that differ between the file and the server, as `name (file → now)`.
    pub fn changed_settings(&self, codec: &Codec, node: Node) -> Vec<String> {
        let mut changed = Vec::new();
        let mut check = |name: &str, was: String, now: String| {
            if was != now {
                changed.push(format!("{name} ({was} → {now})"));
            }
        };
        check("snowflake_id.layout", self.layout.clone(), codec.layout.to_string());
        check("snowflake_id.epoch", self.epoch.to_string(), codec.time.epoch().to_string());
        check("snowflake_id.tick_ms", self.tick_ms.to_string(), codec.time.tick_ms().to_string());
        check("snowflake_id.datacenter_id", self.node.datacenter.to_string(), node.datacenter.to_string());
        check("snowflake_id.worker_id", self.node.worker.to_string(), node.worker.to_string());
        changed
    }

    pub fn render(&self) -> String {
        let mut body = String::with_capacity(512);
        body.push_str("# snowflake_id generator state. Written by the server; do not edit.\n");
        body.push_str("# No ID was issued at or after mark_unix_ms (in era clock_back).\n");
        let _ = writeln!(body, "version={VERSION}");
        let _ = writeln!(body, "mark_unix_ms={}", self.mark.0);
        let _ = writeln!(body, "mark={}", self.mark);
        let _ = writeln!(body, "clock_back={}", self.clock_back);
        let _ = writeln!(body, "layout={}", self.layout);
        let _ = writeln!(body, "epoch_unix_ms={}", self.epoch.0);
        let _ = writeln!(body, "tick_ms={}", self.tick_ms);
        let _ = writeln!(body, "datacenter_id={}", self.node.datacenter);
        let _ = writeln!(body, "worker_id={}", self.node.worker);
        let crc = crc32(body.as_bytes());
        let _ = writeln!(body, "crc32={crc:08x}");
        body
    }

    pub fn parse(text: &str) -> Result<StateRecord, String> {
        let crc_at = text.rfind("crc32=").ok_or("it has no crc32 line")?;
        let (body, crc_line) = text.split_at(crc_at);
        let want = u32::from_str_radix(crc_line["crc32=".len()..].trim_end(), 16)
            .map_err(|_| "its crc32 line is malformed")?;
        if crc32(body.as_bytes()) != want {
            return Err("its checksum does not match its contents".into());
        }
        let value = |key: &str| -> Result<&str, String> {
            body.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
                .ok_or_else(|| format!("it has no {key} line"))
        };
        let number = |key: &str| -> Result<u64, String> {
            value(key)?.parse::<u64>().map_err(|_| format!("its {key} is not a number"))
        };
        if value("version")? != VERSION {
            return Err(format!("its version {} is not {VERSION}", value("version")?));
        }
        let instant = |key: &str| parse_instant(value(key)?).map_err(|e| format!("its {key} is invalid: {e}"));
        Ok(StateRecord {
            mark: instant("mark_unix_ms")?,
            clock_back: number("clock_back")?,
            layout: value("layout")?.to_string(),
            epoch: instant("epoch_unix_ms")?,
            tick_ms: u32::try_from(number("tick_ms")?).map_err(|_| "its tick_ms is out of range")?,
            node: Node { datacenter: number("datacenter_id")?, worker: number("worker_id")? },
        })
    }
}

/// Why the state file could not be used.
#[derive(Debug)]
pub enum StateFileError {
    Unreadable(io::Error),
    Corrupt(String),
}

/// Reads the state file; `Ok(None)` when there is none (a first start).
pub fn read(path: &Path) -> Result<Option<StateRecord>, StateFileError> {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| StateFileError::Corrupt("it is not text".into()))?;
            StateRecord::parse(&text).map(Some).map_err(StateFileError::Corrupt)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StateFileError::Unreadable(e)),
    }
}

/// Replaces the state file atomically and durably: when this returns `Ok`, a
/// crash at any point leaves either the old or the new contents on disk.
pub fn write(path: &Path, contents: &str) -> io::Result<()> {
    let tmp = temp_path(path);
    let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// CRC-32 (IEEE 802.3), bit by bit: the file is tiny and rarely written.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::preset;
    use std::os::unix::fs::PermissionsExt;

    fn codec() -> Codec {
        let r = preset::resolve("twitter").unwrap();
        Codec::new(r.layout, TimeBase::new(r.epoch, r.tick_ms).unwrap())
    }

    fn record() -> StateRecord {
        StateRecord::new(Mark { tick: 123_456_789, clock_back: 2 }, &codec(), Node { datacenter: 3, worker: 17 })
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("snowflake-state-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir.join(FILE_NAME)
    }

    #[test]
    fn crc_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn render_parse_round_trip() {
        let r = record();
        assert_eq!(StateRecord::parse(&r.render()), Ok(r.clone()));
        assert_eq!(r.mark_in(&codec().time), Mark { tick: 123_456_789, clock_back: 2 });
    }

    #[test]
    fn any_edit_is_noticed() {
        let text = record().render();
        let edited = text.replace("clock_back=2", "clock_back=0");
        assert_eq!(StateRecord::parse(&edited), Err("its checksum does not match its contents".into()));
        assert!(StateRecord::parse(&text[..text.len() / 2]).is_err(), "a torn file");
        assert!(StateRecord::parse("").is_err());
        for i in 0..text.len() {
            let mut bytes = text.clone().into_bytes();
            bytes[i] ^= 0x01;
            if let Ok(s) = String::from_utf8(bytes) {
                assert!(
                    StateRecord::parse(&s).is_err() || s.trim_end() == text.trim_end(),
                    "flip at {i} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn write_then_read() {
        let path = scratch("rw");
        assert!(read(&path).unwrap().is_none(), "no file is a first start");
        write(&path, &record().render()).unwrap();
        assert_eq!(read(&path).unwrap(), Some(record()));
        assert!(!temp_path(&path).exists());
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn corrupt_and_unreadable_files_are_errors() {
        let path = scratch("bad");
        fs::write(&path, "garbage").unwrap();
        assert!(matches!(read(&path), Err(StateFileError::Corrupt(_))));
        fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(read(&path), Err(StateFileError::Corrupt(_))));
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap(); // a directory cannot be read as a file
        assert!(matches!(read(&path), Err(StateFileError::Unreadable(_))));
    }

    #[test]
    fn a_changed_setting_is_named() {
        let r = record();
        assert!(r.changed_settings(&codec(), r.node).is_empty());
        let moved = r.changed_settings(&codec(), Node { datacenter: 3, worker: 18 });
        assert_eq!(moved, vec!["snowflake_id.worker_id (17 → 18)".to_string()]);
    }
}
