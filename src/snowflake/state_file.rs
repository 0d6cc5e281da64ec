//! The state file, `snowflake_id.state` in the data directory.
//!
//! Marks travel in WAL (see the PostgreSQL layer), but WAL only replays what
//! came after the last checkpoint, and PostgreSQL has no checkpoint hook for an
//! extension. So, as PostgreSQL does for its own relation map, every mark is
//! also written to this file (and fsynced) before it is used, and WAL redo
//! writes the file too. The file is what a server starts from; redo raises it.
//! It also keeps what WAL cannot: the exact point a clean shutdown stopped at,
//! and the note that a cluster made by pg_upgrade does not know its mark.
//!
//! The file is small text a DBA can read, with a CRC so that a torn or edited
//! file is noticed instead of trusted. It is replaced atomically: written to a
//! fresh temporary file, flushed, renamed over the old one, and the directory
//! flushed.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::claims::{Claim, Claims, Host, Source};
use super::codec::{Codec, Node};
use super::generator::Mark;
use super::layout::Layout;
use super::mark_record::MarkRecord;
use super::time::{parse_instant, TimeBase, UnixMillis};

/// The file's name in the data directory.
pub const FILE_NAME: &str = "snowflake_id.state";

const VERSION: &str = "4";

/// What a state file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateFile {
    /// A mark to resume from (with `exact`, the resume point).
    Mark(StateRecord),
    /// This data directory's mark is unknown (it was made by pg_upgrade): the
    /// server must not generate until the DBA supplies the old cluster's file.
    Unknown { reason: String },
}

/// A mark, and the settings in force when it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateRecord {
    pub mark: MarkRecord,
    /// The exact point a clean shutdown stopped at, rather than a mark set ahead.
    pub exact: bool,
    pub layout: String,
    pub epoch: UnixMillis,
    pub node: Node,
    /// The ID space the mark belongs to: 0 at first, one more each time a DBA
    /// started a new one (abandoning every ID issued before it).
    pub id_space: u32,
    /// The node numbers the lineage used (version 4; before, the file's own).
    pub claims: ClaimsRecord,
    /// The server that wrote the file, as host name and data directory
    /// (since 0.11.0, a line that older versions pass over): a file whose
    /// node differs from the server's own came from another server when
    /// this differs too, and from this server renumbered when it does not.
    pub written_by: Option<String>,
}

/// The lineage's node numbers as the file keeps them ([`Claims`] in a form
/// that owns its entries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimsRecord {
    pub entries: Vec<Claim>,
    /// The lineage's number now.
    pub current: Option<Node>,
    /// Whether this data directory claimed it.
    pub own: bool,
}

impl ClaimsRecord {
    pub fn of(claims: &Claims) -> ClaimsRecord {
        ClaimsRecord { entries: claims.entries().to_vec(), current: claims.current(), own: claims.is_own() }
    }

    pub fn to_claims(&self) -> Claims {
        Claims::from_entries(&self.entries, self.current, self.own)
    }

    /// What a file from before version 4 says: its own node, current, with
    /// its mark.
    fn before_claims(node: Node, mark: UnixMillis) -> ClaimsRecord {
        let seen = Claim { last_mark: Some(mark), ..Claim::seen(node, None) };
        ClaimsRecord { entries: vec![seen], current: Some(node), own: false }
    }
}

impl StateRecord {
    pub fn new(mark: &Mark, exact: bool, codec: &Codec, node: Node, id_space: u32, claims: &Claims) -> Self {
        StateRecord {
            mark: MarkRecord::new(mark, codec),
            exact,
            layout: codec.layout.to_string(),
            epoch: codec.time.epoch(),
            node,
            id_space,
            claims: ClaimsRecord::of(claims),
            written_by: None,
        }
    }

    /// The record as the server `writer` writes it (see [`Self::written_by`]).
    pub fn by(self, writer: &str) -> Self {
        StateRecord { written_by: Some(one_line(writer)), ..self }
    }

    /// Whether another server than `writer` wrote the file; `None` when the
    /// file does not say (written before 0.11.0).
    pub fn written_elsewhere(&self, writer: &str) -> Option<bool> {
        self.written_by.as_deref().map(|w| w != one_line(writer))
    }

    /// The ID settings the mark was made under, or why they cannot be read back.
    pub fn codec(&self) -> Result<Codec, String> {
        let layout = Layout::parse(&self.layout).map_err(|e| format!("its layout is invalid: {e}"))?;
        let time = TimeBase::new(self.epoch, self.mark.tick_ms).ok_or("its tick_ms is out of range")?;
        Ok(Codec::new(layout, time))
    }

    /// The mark under the settings it was made under.
    pub fn to_mark(&self) -> Result<Mark, String> {
        Ok(self.mark.to_mark(&self.codec()?))
    }

    /// The settings that give IDs their meaning (layout, epoch, tick) that
    /// differ between the file and the server, as `name (file → now)`.
    pub fn changed_scale(&self, codec: &Codec) -> Vec<String> {
        [
            changed("snowflake_id.layout", self.layout.clone(), codec.layout.to_string()),
            changed("snowflake_id.epoch", self.epoch.to_string(), codec.time.epoch().to_string()),
            changed("snowflake_id.tick_ms", self.mark.tick_ms.to_string(), codec.time.tick_ms().to_string()),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The node numbers that differ between the file and the server, as
    /// `name (file → now)`.
    pub fn changed_node(&self, node: Node) -> Vec<String> {
        [
            changed("snowflake_id.datacenter_id", self.node.datacenter.to_string(), node.datacenter.to_string()),
            changed("snowflake_id.worker_id", self.node.worker.to_string(), node.worker.to_string()),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    pub fn render(&self) -> String {
        let m = &self.mark;
        let mut body = String::with_capacity(640);
        body.push_str("# snowflake_id generator state. Written by the server; do not edit.\n");
        body.push_str("# No ID was issued at or after (mark, mark_sequence) in era clock_back, nor in a later era.\n");
        let _ = writeln!(body, "version={VERSION}");
        let _ = writeln!(body, "kind={}", if self.exact { "resume" } else { "mark" });
        let _ = writeln!(body, "mark_unix_ms={}", m.instant.0);
        let _ = writeln!(body, "mark={}", m.instant);
        let _ = writeln!(body, "mark_sequence={}", m.sequence);
        let _ = writeln!(body, "clock_back={}", m.clock_back);
        let _ = writeln!(body, "wall_unix_ms={}", m.wall.map_or_else(String::new, |w| w.0.to_string()));
        let _ = writeln!(body, "tick_ms={}", m.tick_ms);
        let _ = writeln!(body, "sequence_bits={}", m.sequence_bits);
        let _ = writeln!(body, "layout={}", self.layout);
        let _ = writeln!(body, "epoch_unix_ms={}", self.epoch.0);
        let _ = writeln!(body, "datacenter_id={}", self.node.datacenter);
        let _ = writeln!(body, "worker_id={}", self.node.worker);
        let _ = writeln!(body, "id_space={}", self.id_space);
        if let Some(writer) = &self.written_by {
            let _ = writeln!(body, "written_by={writer}");
        }
        let claims = &self.claims;
        let _ = writeln!(body, "current={}", claims.current.map_or_else(|| "-".into(), node_text));
        let _ = writeln!(body, "claimed_here={}", if claims.own { "yes" } else { "no" });
        for c in &claims.entries {
            let _ = writeln!(
                body,
                "claim={},{},{},{},{},{},{},{}",
                node_text(c.node),
                c.source.name(),
                c.timeline,
                instant_text(c.claimed_at),
                instant_text(c.last_mark),
                instant_text(c.superseded_at),
                instant_text(c.released_at),
                if c.host.is_empty() { "-" } else { c.host.as_str() }
            );
        }
        seal(body)
    }
}

/// `text` on one line of the file: control characters (a line break in a
/// path) become `?`.
fn one_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

fn node_text(n: Node) -> String {
    format!("{},{}", n.datacenter, n.worker)
}

fn instant_text(t: Option<UnixMillis>) -> String {
    t.map_or_else(|| "-".into(), |t| t.0.to_string())
}

/// A `claim=` line's value: datacenter, worker, source, timeline, claimed
/// at, last mark, superseded at, released at (Unix milliseconds or `-`), host.
fn parse_claim(text: &str) -> Result<Claim, String> {
    let bad = || format!("its claim line {text} is malformed");
    let fields: Vec<&str> = text.split(',').collect();
    let [datacenter, worker, source, timeline, claimed_at, last_mark, superseded_at, released_at, host] = fields[..]
    else {
        return Err(bad());
    };
    let instant = |t: &str| match t {
        "-" => Ok(None),
        _ => t.parse::<i64>().map(|ms| Some(UnixMillis(ms))).map_err(|_| bad()),
    };
    Ok(Claim {
        node: parse_node(&format!("{datacenter},{worker}")).ok_or_else(bad)?,
        source: Source::from_name(source).ok_or_else(bad)?,
        timeline: timeline.parse().map_err(|_| bad())?,
        claimed_at: instant(claimed_at)?,
        host: if host == "-" { Host::NONE } else { Host::new(host) },
        last_mark: instant(last_mark)?,
        superseded_at: instant(superseded_at)?,
        released_at: instant(released_at)?,
    })
}

fn parse_node(text: &str) -> Option<Node> {
    let (datacenter, worker) = text.split_once(',')?;
    Some(Node { datacenter: datacenter.parse().ok()?, worker: worker.parse().ok()? })
}

fn changed(name: &str, was: String, now: String) -> Option<String> {
    (was != now).then(|| format!("{name} ({was} → {now})"))
}

/// The file of a data directory whose mark is unknown.
pub fn render_unknown(reason: &str) -> String {
    let mut body = String::with_capacity(512);
    body.push_str("# snowflake_id generator state: the high-water mark of this data directory is unknown.\n");
    body.push_str("# Replace this file with the snowflake_id.state of the cluster this one was made from,\n");
    body.push_str("# or, if that cluster never generated IDs, remove it. Then start the server.\n");
    let _ = writeln!(body, "version={VERSION}");
    body.push_str("kind=unknown\n");
    let _ = writeln!(body, "reason={}", reason.replace('\n', " "));
    seal(body)
}

/// `body` with the CRC line that [`parse`] checks appended.
pub fn seal(mut body: String) -> String {
    let crc = crc32(body.as_bytes());
    let _ = writeln!(body, "crc32={crc:08x}");
    body
}

/// Reads a state file's text: version 4, 3 (0.4.0 to 0.8.0, without claims),
/// 2 (0.3.0, with ID space 0) or 1 (0.1.0 and 0.2.0).
pub fn parse(text: &str) -> Result<StateFile, String> {
    let crc_at = text.rfind("crc32=").ok_or("it has no crc32 line")?;
    let (body, crc_line) = text.split_at(crc_at);
    let want =
        u32::from_str_radix(crc_line["crc32=".len()..].trim_end(), 16).map_err(|_| "its crc32 line is malformed")?;
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
    let instant = |key: &str| parse_instant(value(key)?).map_err(|e| format!("its {key} is invalid: {e}"));
    let u32_of = |key: &str| -> Result<u32, String> {
        u32::try_from(number(key)?).map_err(|_| format!("its {key} is out of range"))
    };
    let version = value("version")?;
    let (kind, sequence, wall, sequence_bits) = match version {
        "1" => ("mark", 0, None, None),
        "2" | "3" | VERSION => {
            let kind = value("kind")?;
            if kind == "unknown" {
                return Ok(StateFile::Unknown { reason: value("reason")?.to_string() });
            }
            let wall = match value("wall_unix_ms")? {
                "" => None,
                _ => Some(instant("wall_unix_ms")?),
            };
            (kind, number("mark_sequence")?, wall, Some(u32_of("sequence_bits")?))
        }
        other => return Err(format!("its version {other} is not 1, 2, 3 or {VERSION}")),
    };
    if kind != "mark" && kind != "resume" {
        return Err(format!("its kind {kind} is not mark, resume or unknown"));
    }
    let layout = value("layout")?.to_string();
    // Version 1 did not record the sequence width; its marks are whole ticks.
    let sequence_bits = match sequence_bits {
        Some(bits) => bits,
        None => Layout::parse(&layout).map_or(0, |l| l.sequence().width),
    };
    let node = Node { datacenter: number("datacenter_id")?, worker: number("worker_id")? };
    let mark_instant = instant("mark_unix_ms")?;
    let claims = if version == VERSION {
        let current = match value("current")? {
            "-" => None,
            text => Some(parse_node(text).ok_or_else(|| format!("its current line {text} is malformed"))?),
        };
        let own = match value("claimed_here")? {
            "yes" => true,
            "no" => false,
            other => return Err(format!("its claimed_here {other} is not yes or no")),
        };
        let entries =
            body.lines().filter_map(|l| l.strip_prefix("claim=")).map(parse_claim).collect::<Result<_, _>>()?;
        ClaimsRecord { entries, current, own }
    } else {
        ClaimsRecord::before_claims(node, mark_instant)
    };
    Ok(StateFile::Mark(StateRecord {
        mark: MarkRecord {
            instant: mark_instant,
            sequence,
            clock_back: number("clock_back")?,
            wall,
            tick_ms: u32_of("tick_ms")?,
            sequence_bits,
        },
        exact: kind == "resume",
        layout,
        epoch: instant("epoch_unix_ms")?,
        node,
        id_space: if version == "3" || version == VERSION { u32_of("id_space")? } else { 0 },
        claims,
        written_by: value("written_by").ok().map(str::to_string),
    }))
}

/// Why the state file could not be used.
#[derive(Debug)]
pub enum StateFileError {
    Unreadable(io::Error),
    Corrupt(String),
}

/// Reads the state file; `Ok(None)` when there is none.
pub fn read(path: &Path) -> Result<Option<StateFile>, StateFileError> {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| StateFileError::Corrupt("it is not text".into()))?;
            parse(&text).map(Some).map_err(StateFileError::Corrupt)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StateFileError::Unreadable(e)),
    }
}

/// A write that failed: the file or directory it failed on (the temporary
/// file, the state file, or their directory), and why.
#[derive(Debug)]
pub struct WriteFailure {
    pub path: PathBuf,
    pub io: io::Error,
}

/// Replaces the state file atomically and durably, with permissions `mode`
/// (PostgreSQL's, which follow the data directory's group access). When this
/// returns `Ok`, a crash at any point leaves either the old or the new
/// contents on disk. Callers serialise writes.
///
/// The temporary file is created afresh (`O_EXCL`, `O_NOFOLLOW`): whatever was
/// left under its name, a file or a link, is removed, never written through.
pub fn write(path: &Path, contents: &str, mode: u32) -> Result<(), WriteFailure> {
    let tmp = temp_path(path);
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(at(&tmp)(e)),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(mode)
        .open(&tmp)
        .map_err(at(&tmp))?;
    file.write_all(contents.as_bytes()).map_err(at(&tmp))?;
    file.sync_all().map_err(at(&tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(at(path))?;
    let dir = dir_of(path);
    File::open(dir).and_then(|d| d.sync_all()).map_err(at(dir))
}

/// The failure of an operation on `path`.
fn at(path: &Path) -> impl FnOnce(io::Error) -> WriteFailure + '_ {
    move |io| WriteFailure { path: path.to_path_buf(), io }
}

/// The directory that holds `path`, to flush after a rename: `.` for a bare
/// file name, whose parent is the empty path.
fn dir_of(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
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
    use crate::snowflake::time::TimeBase;
    use std::os::unix::fs::PermissionsExt;

    fn codec() -> Codec {
        let r = preset::resolve("twitter").unwrap();
        Codec::new(r.layout, TimeBase::new(r.epoch, r.tick_ms).unwrap())
    }

    fn mark() -> Mark {
        Mark { position: (123_456_789 << 12) | 5, clock_back: 2, wall: Some(123_456_000) }
    }

    fn claims() -> Claims {
        let mut claims = Claims::default();
        let old = Node { datacenter: 3, worker: 2 };
        claims.note_mark(old, UnixMillis(1_700_000_000_000), UnixMillis(1_699_999_999_000));
        let claim =
            Claim::auto(Node { datacenter: 3, worker: 17 }, 4, UnixMillis(1_795_000_000_000), Host::new("pg-17"));
        claims.note_claim(claim, true);
        claims.release(old, UnixMillis(1_795_000_000_500)).unwrap();
        claims
    }

    fn record(exact: bool) -> StateRecord {
        StateRecord::new(&mark(), exact, &codec(), Node { datacenter: 3, worker: 17 }, 4, &claims())
    }

    /// A scratch directory, removed again when the test is done.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("snowflake-state-{}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn file(&self) -> PathBuf {
            self.0.join(FILE_NAME)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn crc_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn render_parse_round_trip() {
        for exact in [false, true] {
            let r = record(exact);
            assert_eq!(parse(&r.render()), Ok(StateFile::Mark(r.clone())));
            assert_eq!(r.claims.to_claims(), claims());
            assert_eq!(r.mark.to_mark(&codec()), mark());
            assert_eq!((r.codec(), r.to_mark()), (Ok(codec()), Ok(mark())));
        }
        let unknown = render_unknown("pg_upgrade made this cluster");
        assert_eq!(parse(&unknown), Ok(StateFile::Unknown { reason: "pg_upgrade made this cluster".into() }));
    }

    #[test]
    fn the_writer_is_kept_and_told_apart() {
        let r = record(true).by("pg-1:/var/lib/postgresql/18/main");
        assert_eq!(parse(&r.render()), Ok(StateFile::Mark(r.clone())));
        assert_eq!(r.written_elsewhere("pg-1:/var/lib/postgresql/18/main"), Some(false));
        assert_eq!(r.written_elsewhere("pg-2:/var/lib/postgresql/18/main"), Some(true));
        assert_eq!(r.written_elsewhere("pg-1:/srv/copy"), Some(true));
        // A file of 0.10.0 or before does not say.
        assert_eq!(record(true).written_elsewhere("pg-1:/x"), None);
        assert!(!record(true).render().contains("written_by"));
        // A line break in a data directory's path cannot end the line early.
        let odd = record(true).by("pg-1:/srv/a\nkind=unknown");
        let StateFile::Mark(back) = parse(&odd.render()).unwrap() else { panic!("still a mark") };
        assert_eq!(back.written_by.as_deref(), Some("pg-1:/srv/a?kind=unknown"));
        assert_eq!(back.written_elsewhere("pg-1:/srv/a\nkind=unknown"), Some(false));
    }

    /// The file as snowflake_id 0.4.0 to 0.8.0 wrote it (version 3): no claims.
    fn version_3() -> String {
        let v4 = record(true).render();
        let body: String = v4
            .lines()
            .filter(|l| !["current=", "claimed_here=", "claim=", "crc32="].iter().any(|k| l.starts_with(k)))
            .map(|l| if l == "version=4" { "version=3\n".to_string() } else { format!("{l}\n") })
            .collect();
        seal(body)
    }

    #[test]
    fn a_version_3_file_reads_as_its_own_number_in_use() {
        let StateFile::Mark(r) = parse(&version_3()).unwrap() else { panic!("a mark") };
        let node = Node { datacenter: 3, worker: 17 };
        let seen = Claim { last_mark: Some(r.mark.instant), ..Claim::seen(node, None) };
        let claims = ClaimsRecord { entries: vec![seen], current: Some(node), own: false };
        assert_eq!(r, StateRecord { claims, ..record(true) });
    }

    #[test]
    fn a_version_2_file_reads_as_id_space_0() {
        // As snowflake_id 0.3.0 wrote it: no id_space line.
        let v3 = version_3();
        let body: String = v3
            .lines()
            .filter(|l| !l.starts_with("id_space=") && !l.starts_with("crc32="))
            .map(|l| if l == "version=3" { "version=2\n".to_string() } else { format!("{l}\n") })
            .collect();
        let StateFile::Mark(r) = parse(&seal(body)).unwrap() else { panic!("a mark") };
        let StateFile::Mark(r3) = parse(&v3).unwrap() else { panic!("a mark") };
        assert_eq!(r, StateRecord { id_space: 0, ..r3 });
        let v4 = record(true).render();
        let future = seal(v4.replace("version=4", "version=5").split("crc32=").next().unwrap().to_string());
        assert_eq!(parse(&future), Err("its version 5 is not 1, 2, 3 or 4".to_string()));
    }

    #[test]
    fn claim_lines_say_what_they_hold_and_bad_ones_are_named() {
        let text = record(false).render();
        assert!(text.contains("current=3,17\nclaimed_here=yes\n"), "{text}");
        assert!(
            text.contains("claim=3,2,setting,0,1699999999000,1700000000000,1795000000000,1795000000500,-\n"),
            "{text}"
        );
        assert!(text.contains("claim=3,17,auto,4,1795000000000,-,-,-,pg-17\n"), "{text}");
        let body = text.split("crc32=").next().unwrap();
        for (from, to, why) in [
            (
                "claim=3,17,auto,4,",
                "claim=3,17,robot,4,",
                "its claim line 3,17,robot,4,1795000000000,-,-,-,pg-17 is malformed",
            ),
            (",-,pg-17", ",pg-17", "its claim line 3,17,auto,4,1795000000000,-,-,pg-17 is malformed"),
            ("claimed_here=yes", "claimed_here=maybe", "its claimed_here maybe is not yes or no"),
            ("current=3,17", "current=3", "its current line 3 is malformed"),
        ] {
            assert_eq!(parse(&seal(body.replace(from, to))), Err(why.to_string()), "{to}");
        }
    }

    #[test]
    fn a_version_1_file_still_reads() {
        // As snowflake_id 0.2.0 wrote it.
        let body = "# snowflake_id generator state. Written by the server; do not edit.\n\
                    # No ID was issued at or after mark_unix_ms (in era clock_back).\n\
                    version=1\nmark_unix_ms=1795338452245\nmark=2026-11-22 09:07:32.245+00\nclock_back=1\n\
                    layout=timestamp:41,datacenter:5,worker:5,sequence:12\nepoch_unix_ms=1735689600000\n\
                    tick_ms=1\ndatacenter_id=3\nworker_id=7\n";
        let text = seal(body.to_string());
        let StateFile::Mark(r) = parse(&text).unwrap() else { panic!("a mark") };
        assert_eq!((r.mark.instant, r.mark.sequence, r.mark.clock_back), (UnixMillis(1_795_338_452_245), 0, 1));
        assert_eq!((r.mark.wall, r.mark.sequence_bits, r.exact), (None, 12, false));
        assert_eq!((r.node, r.id_space), (Node { datacenter: 3, worker: 7 }, 0));
    }

    #[test]
    fn any_edit_is_noticed() {
        let text = record(false).render();
        let edited = text.replace("clock_back=2", "clock_back=0");
        assert_eq!(parse(&edited), Err("its checksum does not match its contents".into()));
        assert!(parse(&text[..text.len() / 2]).is_err(), "a torn file");
        assert!(parse("").is_err());
        for i in 0..text.len() {
            let mut bytes = text.clone().into_bytes();
            bytes[i] ^= 0x01;
            if let Ok(s) = String::from_utf8(bytes) {
                assert!(parse(&s).is_err() || s.trim_end() == text.trim_end(), "flip at {i} went unnoticed");
            }
        }
    }

    #[test]
    fn write_then_read() {
        let dir = Scratch::new("rw");
        let path = dir.file();
        assert!(read(&path).unwrap().is_none(), "no file");
        write(&path, &record(false).render(), 0o600).unwrap();
        assert_eq!(read(&path).unwrap(), Some(StateFile::Mark(record(false))));
        assert!(!temp_path(&path).exists());
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // A cluster with group access (initdb --allow-group-access) gets 0640,
        // as far as the process umask allows.
        write(&path, &record(true).render(), 0o640).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o600, 0o600);
        assert_eq!(mode & 0o137, 0, "never more than group read");
    }

    #[test]
    fn a_link_left_under_the_temporary_name_is_not_followed() {
        let dir = Scratch::new("link");
        let path = dir.file();
        let victim = dir.0.join("victim");
        fs::write(&victim, "untouched").unwrap();
        std::os::unix::fs::symlink(&victim, temp_path(&path)).unwrap();
        write(&path, &record(false).render(), 0o600).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "untouched");
        assert_eq!(read(&path).unwrap(), Some(StateFile::Mark(record(false))));
        // A stale temporary file from a crash is replaced, not appended to.
        fs::write(temp_path(&path), "stale and longer than anything we write ".repeat(40)).unwrap();
        write(&path, &record(true).render(), 0o600).unwrap();
        assert_eq!(read(&path).unwrap(), Some(StateFile::Mark(record(true))));
    }

    #[test]
    fn a_write_with_no_temporary_file_left_succeeds() {
        let dir = Scratch::new("fresh");
        let path = dir.file();
        assert!(!temp_path(&path).exists());
        write(&path, &record(false).render(), 0o600).expect("nothing to remove is no error");
        assert_eq!(read(&path).unwrap(), Some(StateFile::Mark(record(false))));
        assert!(!temp_path(&path).exists());
    }

    #[test]
    fn a_temporary_name_that_cannot_be_removed_fails_the_write_and_keeps_the_old_file() {
        let dir = Scratch::new("stuck");
        let path = dir.file();
        write(&path, &record(false).render(), 0o600).unwrap();
        // A non-empty directory under the temporary name: unlink refuses it.
        fs::create_dir(temp_path(&path)).unwrap();
        fs::write(temp_path(&path).join("inside"), "x").unwrap();
        let e = write(&path, &record(true).render(), 0o600).unwrap_err();
        // The removal's own error, not the one creating the file would give.
        assert_eq!(e.io.raw_os_error(), Some(libc::EISDIR), "{e:?}");
        assert_eq!(e.path, temp_path(&path), "the failure names the path it failed on");
        assert_eq!(read(&path).unwrap(), Some(StateFile::Mark(record(false))), "the old file is intact");
        assert!(temp_path(&path).join("inside").exists(), "nothing under the temporary name was touched");
    }

    #[test]
    fn the_directory_flushed_is_the_files_own_or_the_current_one() {
        assert_eq!(dir_of(Path::new(FILE_NAME)), Path::new("."), "a bare name's parent is empty");
        assert_eq!(dir_of(Path::new("./snowflake_id.state")), Path::new("."));
        assert_eq!(dir_of(Path::new("pgdata/snowflake_id.state")), Path::new("pgdata"));
        assert_eq!(dir_of(Path::new("/var/lib/pgdata/snowflake_id.state")), Path::new("/var/lib/pgdata"));
        assert_eq!(dir_of(Path::new("/snowflake_id.state")), Path::new("/"));
        let dir = Scratch::new("dir");
        assert_eq!(dir_of(&dir.file()), dir.0.as_path());
    }

    #[test]
    fn corrupt_and_unreadable_files_are_errors() {
        let dir = Scratch::new("bad");
        let path = dir.file();
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
        let r = record(false);
        assert!(r.changed_node(r.node).is_empty() && r.changed_scale(&codec()).is_empty());
        let moved = r.changed_node(Node { datacenter: 4, worker: 18 });
        assert_eq!(moved, ["snowflake_id.datacenter_id (3 → 4)", "snowflake_id.worker_id (17 → 18)"]);
        let later = Codec::new(codec().layout, TimeBase::new(UnixMillis(codec().time.epoch().0 + 3000), 10).unwrap());
        let epoch = |t: &TimeBase| t.epoch().to_string();
        assert_eq!(
            r.changed_scale(&later),
            [
                format!("snowflake_id.epoch ({} → {})", epoch(&codec().time), epoch(&later.time)),
                "snowflake_id.tick_ms (1 → 10)".to_string()
            ]
        );
    }
}
