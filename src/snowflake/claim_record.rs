//! Claims and releases of worker numbers as WAL records, and the text
//! `pg_walinspect` shows for them.
//!
//! A claim record: version, the node, the timeline the claim was made on,
//! when (Unix milliseconds) and the host name; a release record: version,
//! the node and when. Little-endian, fixed fields first.

use std::fmt;

use super::claims::{Host, HOST_LEN};
use super::codec::Node;
use super::time::UnixMillis;

const VERSION: u8 = 1;
/// A claim's fixed bytes, before the host name.
const CLAIM_FIXED: usize = 24;
const RELEASE_LEN: usize = 20;

/// A worker number an auto primary claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalClaim {
    pub node: Node,
    pub timeline: u32,
    pub at: UnixMillis,
    pub host: Host,
}

/// A worker number a superuser released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalRelease {
    pub node: Node,
    pub at: UnixMillis,
}

/// Why a record body could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimRecordError {
    Length(usize),
    Version(u8),
}

impl fmt::Display for ClaimRecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimRecordError::Length(n) => write!(f, "a snowflake_id claim record of {n} bytes has the wrong length"),
            ClaimRecordError::Version(v) => write!(f, "snowflake_id claim record version {v} is not {VERSION}"),
        }
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn i64_at(b: &[u8], i: usize) -> i64 {
    i64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

fn check(b: &[u8], len_ok: impl Fn(usize) -> bool) -> Result<(), ClaimRecordError> {
    match b.first() {
        None => Err(ClaimRecordError::Length(0)),
        Some(&v) if v != VERSION => Err(ClaimRecordError::Version(v)),
        Some(_) if !len_ok(b.len()) => Err(ClaimRecordError::Length(b.len())),
        Some(_) => Ok(()),
    }
}

impl WalClaim {
    pub fn encode(&self) -> Vec<u8> {
        let host = self.host.as_str().as_bytes();
        let mut b = vec![0u8; CLAIM_FIXED + host.len()];
        b[0] = VERSION;
        b[1] = host.len() as u8;
        b[4..8].copy_from_slice(&(self.node.datacenter as u32).to_le_bytes());
        b[8..12].copy_from_slice(&(self.node.worker as u32).to_le_bytes());
        b[12..16].copy_from_slice(&self.timeline.to_le_bytes());
        b[16..24].copy_from_slice(&self.at.0.to_le_bytes());
        b[CLAIM_FIXED..].copy_from_slice(host);
        b
    }

    pub fn decode(b: &[u8]) -> Result<WalClaim, ClaimRecordError> {
        check(b, |len| (CLAIM_FIXED..=CLAIM_FIXED + HOST_LEN).contains(&len))?;
        if usize::from(b[1]) != b.len() - CLAIM_FIXED {
            return Err(ClaimRecordError::Length(b.len()));
        }
        Ok(WalClaim {
            node: Node { datacenter: u64::from(u32_at(b, 4)), worker: u64::from(u32_at(b, 8)) },
            timeline: u32_at(b, 12),
            at: UnixMillis(i64_at(b, 16)),
            host: Host::new(&String::from_utf8_lossy(&b[CLAIM_FIXED..])),
        })
    }
}

impl WalRelease {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; RELEASE_LEN];
        b[0] = VERSION;
        b[4..8].copy_from_slice(&(self.node.datacenter as u32).to_le_bytes());
        b[8..12].copy_from_slice(&(self.node.worker as u32).to_le_bytes());
        b[12..20].copy_from_slice(&self.at.0.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<WalRelease, ClaimRecordError> {
        check(b, |len| len == RELEASE_LEN)?;
        Ok(WalRelease {
            node: Node { datacenter: u64::from(u32_at(b, 4)), worker: u64::from(u32_at(b, 8)) },
            at: UnixMillis(i64_at(b, 12)),
        })
    }
}

impl fmt::Display for WalClaim {
    /// `datacenter 1, worker 3 claimed on timeline 2 by pg-3 at 2026-11-28 10:00:00+00`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "datacenter {}, worker {} claimed on timeline {} by {} at {}",
            self.node.datacenter,
            self.node.worker,
            self.timeline,
            if self.host.is_empty() { "an unnamed host" } else { self.host.as_str() },
            self.at
        )
    }
}

impl fmt::Display for WalRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "datacenter {}, worker {} released at {}", self.node.datacenter, self.node.worker, self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn records_round_trip_and_read_as_text() {
        let claim = WalClaim {
            node: Node { datacenter: 1, worker: 3 },
            timeline: 2,
            at: UnixMillis(1_795_000_000_000),
            host: Host::new("pg-3"),
        };
        assert_eq!(WalClaim::decode(&claim.encode()), Ok(claim));
        assert_eq!(claim.to_string(), "datacenter 1, worker 3 claimed on timeline 2 by pg-3 at 2026-11-18 11:06:40+00");
        let release = WalRelease { node: Node { datacenter: 0, worker: 8191 }, at: UnixMillis(5) };
        assert_eq!(WalRelease::decode(&release.encode()), Ok(release));
        assert_eq!(release.to_string(), "datacenter 0, worker 8191 released at 1970-01-01 00:00:00.005+00");
    }

    #[test]
    fn damaged_records_are_refused() {
        let claim = WalClaim { node: Node::default(), timeline: 1, at: UnixMillis(0), host: Host::new("h") }.encode();
        assert_eq!(WalClaim::decode(&[]), Err(ClaimRecordError::Length(0)));
        assert_eq!(WalClaim::decode(&claim[..claim.len() - 1]), Err(ClaimRecordError::Length(claim.len() - 1)));
        let mut v2 = claim.clone();
        v2[0] = 2;
        assert_eq!(WalClaim::decode(&v2), Err(ClaimRecordError::Version(2)));
        assert_eq!(WalRelease::decode(&claim), Err(ClaimRecordError::Length(claim.len())));
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(c) = WalClaim::decode(&bytes) {
                prop_assert_eq!(WalClaim::decode(&c.encode()), Ok(c));
            }
            if let Ok(r) = WalRelease::decode(&bytes) {
                prop_assert_eq!(r.encode(), bytes);
            }
        }
    }
}
