//! The mark as a WAL record: a fixed 48-byte little-endian body, and the text
//! `pg_walinspect` shows for it.
//!
//! The record carries the node and the epoch so that a DBA reading WAL can tell
//! whose mark it is; redo only uses the mark itself.

use std::fmt;

use super::codec::Node;
use super::mark_record::MarkRecord;
use super::time::UnixMillis;

/// The size of a record body.
pub const LEN: usize = 48;

const VERSION: u8 = 1;
const WALL_KNOWN: u8 = 1;

/// A mark as WAL-logged by a server with this node and epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalMark {
    pub mark: MarkRecord,
    pub node: Node,
    pub epoch: UnixMillis,
}

/// Why a record body could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalRecordError {
    Length(usize),
    Version(u8),
}

impl fmt::Display for WalRecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalRecordError::Length(n) => write!(f, "a snowflake_id mark record has {LEN} bytes, not {n}"),
            WalRecordError::Version(v) => write!(f, "snowflake_id mark record version {v} is not {VERSION}"),
        }
    }
}

impl WalMark {
    pub fn encode(&self) -> [u8; LEN] {
        let m = &self.mark;
        let mut b = [0u8; LEN];
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
        b
    }

    pub fn decode(b: &[u8]) -> Result<WalMark, WalRecordError> {
        if b.len() != LEN {
            return Err(WalRecordError::Length(b.len()));
        }
        if b[0] != VERSION {
            return Err(WalRecordError::Version(b[0]));
        }
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
        })
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
        match m.wall {
            Some(w) => write!(f, ", wall clock {w}"),
            None => Ok(()),
        }
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
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let w = sample();
        assert_eq!(WalMark::decode(&w.encode()), Ok(w));
        let unknown_wall = WalMark { mark: MarkRecord { wall: None, sequence: 9, ..w.mark }, ..w };
        assert_eq!(WalMark::decode(&unknown_wall.encode()), Ok(unknown_wall));
    }

    #[test]
    fn a_foreign_body_is_refused() {
        assert_eq!(WalMark::decode(&[1u8; 47]), Err(WalRecordError::Length(47)));
        let mut b = sample().encode();
        b[0] = 9;
        assert_eq!(WalMark::decode(&b), Err(WalRecordError::Version(9)));
    }

    #[test]
    fn the_description_names_mark_era_and_node() {
        assert_eq!(
            sample().to_string(),
            "mark 2026-11-22 09:07:32.245+00, clock_back 2, datacenter 3, worker 7, wall clock 2026-11-22 09:07:31.245+00"
        );
    }
}
