//! The mark as a WAL record: a little-endian body, and the text
//! `pg_walinspect` shows for it.
//!
//! Version 2 (0.4.0): 52 fixed bytes, then the layout as text. The record
//! carries every setting that gives the mark its meaning (layout, epoch,
//! tick), so that a server replaying it under other settings can carry it as
//! an ID value ([`super::id_space`]), and the ID space it belongs to. Version 1
//! (0.3.0): the first 48 bytes, without the layout and the ID space. The node
//! is there so that a DBA reading WAL can tell whose mark it is.

use std::fmt;

use super::codec::{Codec, Node};
use super::layout::Layout;
use super::mark_record::MarkRecord;
use super::time::{TimeBase, UnixMillis};

/// The size of a version 1 body, and of version 2's before the layout.
const LEN_V1: usize = 48;
const FIXED_LEN: usize = 52;

const VERSION: u8 = 2;
const WALL_KNOWN: u8 = 1;

/// A mark as WAL-logged by a server with this node and epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalMark {
    pub mark: MarkRecord,
    pub node: Node,
    pub epoch: UnixMillis,
    /// `None` in a version 1 record.
    pub layout: Option<Layout>,
    pub id_space: u32,
}

/// Why a record body could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalRecordError {
    Length(usize),
    Version(u8),
    Layout(String),
}

impl fmt::Display for WalRecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalRecordError::Length(n) => write!(f, "a snowflake_id mark record of {n} bytes is too short"),
            WalRecordError::Version(v) => write!(f, "snowflake_id mark record version {v} is not 1 or {VERSION}"),
            WalRecordError::Layout(why) => write!(f, "the layout of a snowflake_id mark record is invalid: {why}"),
        }
    }
}

impl WalMark {
    /// A version 2 body.
    pub fn encode(&self) -> Vec<u8> {
        let m = &self.mark;
        let layout = self.layout.map_or_else(String::new, |l| l.to_string());
        let mut b = vec![0u8; FIXED_LEN + layout.len()];
        b[0] = VERSION;
        b[1] = if m.wall.is_some() { WALL_KNOWN } else { 0 };
        b[2] = m.sequence_bits as u8;
        b[4..8].copy_from_slice(&(m.clock_back as u32).to_le_bytes());
        b[8..16].copy_from_slice(&m.instant.0.to_le_bytes());
        b[16..20].copy_from_slice(&(m.sequence as u32).to_le_bytes());
        b[20..24].copy_from_slice(&m.tick_ms.to_le_bytes());
        b[24..32].copy_from_slice(&m.wall.map_or(0, |w| w.0).to_le_bytes());
        b[32..40].copy_from_slice(&self.epoch.0.to_le_bytes());
        b[40..44].copy_from_slice(&(self.node.datacenter as u32).to_le_bytes());
        b[44..48].copy_from_slice(&(self.node.worker as u32).to_le_bytes());
        b[48..52].copy_from_slice(&self.id_space.to_le_bytes());
        b[FIXED_LEN..].copy_from_slice(layout.as_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<WalMark, WalRecordError> {
        let version = *b.first().ok_or(WalRecordError::Length(0))?;
        let fixed = match version {
            1 => LEN_V1,
            VERSION => FIXED_LEN,
            v => return Err(WalRecordError::Version(v)),
        };
        if b.len() < fixed || (version == 1 && b.len() != LEN_V1) {
            return Err(WalRecordError::Length(b.len()));
        }
        let layout = match version {
            1 => None,
            _ => {
                let text = std::str::from_utf8(&b[fixed..]).map_err(|_| WalRecordError::Layout("not text".into()))?;
                Some(Layout::parse(text).map_err(|e| WalRecordError::Layout(e.to_string()))?)
            }
        };
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let i64_at = |i: usize| i64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(WalMark {
            mark: MarkRecord {
                instant: UnixMillis(i64_at(8)),
                sequence: u64::from(u32_at(16)),
                clock_back: u64::from(u32_at(4)),
                wall: (b[1] & WALL_KNOWN != 0).then(|| UnixMillis(i64_at(24))),
                tick_ms: u32_at(20),
                sequence_bits: u32::from(b[2]),
            },
            node: Node { datacenter: u64::from(u32_at(40)), worker: u64::from(u32_at(44)) },
            epoch: UnixMillis(i64_at(32)),
            layout,
            id_space: if version == 1 { 0 } else { u32_at(48) },
        })
    }

    /// The settings the mark was made under. A version 1 record does not
    /// name its layout: it is taken to be `v1_layout` (the layout of the
    /// state file this server started from, in the lineage that logged it)
    /// when its sequence width matches; otherwise `None`.
    pub fn codec(&self, v1_layout: Option<Layout>) -> Option<Codec> {
        let time = TimeBase::new(self.epoch, self.mark.tick_ms)?;
        let layout = match (self.layout, v1_layout) {
            (Some(layout), _) => layout,
            (None, Some(l)) if self.mark.sequence_bits == l.sequence().width => l,
            (None, _) => return None,
        };
        Some(Codec::new(layout, time))
    }
}

impl fmt::Display for WalMark {
    /// `mark 2026-11-22 13:07:32.245+00, clock_back 0, datacenter 3, worker 7, wall clock 2026-11-22 13:07:31.245+00`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.mark;
        write!(f, "mark {}", m.instant)?;
        if m.sequence != 0 {
            write!(f, " sequence {}", m.sequence)?;
        }
        write!(f, ", clock_back {}, datacenter {}, worker {}", m.clock_back, self.node.datacenter, self.node.worker)?;
        if let Some(w) = m.wall {
            write!(f, ", wall clock {w}")?;
        }
        if self.id_space != 0 {
            write!(f, ", ID space {}", self.id_space)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WalMark {
        WalMark {
            mark: MarkRecord {
                instant: UnixMillis(1_795_338_452_245),
                sequence: 0,
                clock_back: 2,
                wall: Some(UnixMillis(1_795_338_451_245)),
                tick_ms: 1,
                sequence_bits: 12,
            },
            node: Node { datacenter: 3, worker: 7 },
            epoch: UnixMillis(1_735_689_600_000),
            layout: Some(Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap()),
            id_space: 0,
        }
    }

    fn own(epoch: i64) -> Codec {
        Codec::new(sample().layout.unwrap(), TimeBase::new(UnixMillis(epoch), 1).unwrap())
    }

    #[test]
    fn encode_decode_round_trip() {
        let w = sample();
        assert_eq!(WalMark::decode(&w.encode()), Ok(w));
        let unknown_wall = WalMark { mark: MarkRecord { wall: None, sequence: 9, ..w.mark }, id_space: 3, ..w };
        assert_eq!(WalMark::decode(&unknown_wall.encode()), Ok(unknown_wall));
    }

    #[test]
    fn a_version_1_record_is_read_under_matching_settings_only() {
        // As 0.3.0 logged it: the first 48 bytes, version 1.
        let mut b = sample().encode();
        b.truncate(LEN_V1);
        b[0] = 1;
        let w = WalMark::decode(&b).unwrap();
        assert_eq!(w, WalMark { layout: None, ..sample() });
        let layout = sample().layout;
        assert_eq!(w.codec(layout), Some(own(1_735_689_600_000)), "the state file's layout");
        assert_eq!(w.codec(None), None, "no state file to take the layout from");
        let narrow = Layout::parse("timestamp:43,worker:10,sequence:10").ok();
        assert_eq!(w.codec(narrow), None, "another sequence width: not the layout it was made under");
        assert_eq!(sample().codec(narrow), Some(own(1_735_689_600_000)), "version 2 names its own");
    }

    #[test]
    fn a_foreign_body_is_refused() {
        assert_eq!(WalMark::decode(&[1u8; 47]), Err(WalRecordError::Length(47)));
        assert_eq!(WalMark::decode(&[2u8; 51]), Err(WalRecordError::Length(51)));
        assert_eq!(WalMark::decode(&[]), Err(WalRecordError::Length(0)));
        let mut b = sample().encode();
        b[0] = 9;
        assert_eq!(WalMark::decode(&b), Err(WalRecordError::Version(9)));
        let mut b = sample().encode();
        b.truncate(FIXED_LEN + 3);
        assert!(matches!(WalMark::decode(&b), Err(WalRecordError::Layout(_))));
    }

    #[test]
    fn the_description_names_mark_era_and_node() {
        assert_eq!(
            sample().to_string(),
            "mark 2026-11-22 09:07:32.245+00, clock_back 2, datacenter 3, worker 7, wall clock 2026-11-22 09:07:31.245+00"
        );
        assert!(WalMark { id_space: 2, ..sample() }.to_string().ends_with(", ID space 2"));
    }
}
