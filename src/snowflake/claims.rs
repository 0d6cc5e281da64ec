//! The worker numbers a lineage has used, and choosing one for a primary with
//! `snowflake_id.worker_id = auto`.
//!
//! # Terms
//! - *Lineage*: a data directory and every server whose WAL it replayed, or
//!   whose state file it started from (its primary, that server's primary,
//!   the backup it was restored from, ...).
//! - *Entry* ([`Claim`]): a node number the lineage used, either claimed by an
//!   auto primary (with the timeline and host it was claimed on) or seen in
//!   the marks of a server that set its number by hand. Each keeps the last
//!   mark the lineage saw made with it: no ID of that number lies at or after
//!   it, as far as the lineage knows.
//! - *Current*: the number the lineage generates with now (its primary's),
//!   and whether this data directory claimed it itself (*own*).
//!
//! # Rules
//! - A claim never takes a number *held* by the lineage: the current one (a
//!   primary that may still run beside a promoted standby, a split brain),
//!   and every number the lineage used, until it may be *reused*: once the
//!   clock has passed its last known mark and either a superuser released it
//!   or `reuse_after` has passed since a later number superseded it. The wait
//!   is for the server that held it and may still run unseen (an old primary
//!   cut off from its standbys keeps generating): a number is only ever
//!   reused on the assumption that no such server outlives `reuse_after`.
//! - Two servers that claim at once from the same history (two standbys of
//!   one primary promoted together, a copy promoted for testing) see the same
//!   held numbers, so what they choose must depend on which server they are:
//!   first the number their host name ends in, if it is free (a StatefulSet's
//!   pod `cluster-2`, a host `db3`), then the free numbers in an order drawn
//!   from a hash of the host name, data directory, port and timeline. Two
//!   servers whose ordinals differ modulo the field's numbers never prefer
//!   the same number first; otherwise they choose the same one with a chance
//!   of one in the free numbers, which the guard catches where their rows meet.
//! - The table has room for [`CAPACITY`] entries; when it is full, the entry
//!   released longest ago makes room first, then the one superseded longest
//!   ago: its number is then no longer known to the lineage.

use std::fmt;

use super::codec::Node;
use super::time::UnixMillis;

/// Entries a table holds: the numbers of a 5-bit worker field in four
/// datacenters, and far more than a lineage's failovers in a year.
pub const CAPACITY: usize = 128;

/// The longest host name kept, in bytes (Linux's `HOST_NAME_MAX`).
pub const HOST_LEN: usize = 64;

/// A host name as kept in a claim: printable ASCII without blanks or commas
/// (anything else becomes `_`), cut at [`HOST_LEN`] bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Host {
    len: u8,
    bytes: [u8; HOST_LEN],
}

impl Host {
    pub const NONE: Host = Host { len: 0, bytes: [0; HOST_LEN] };

    pub fn new(name: &str) -> Host {
        let mut host = Host::NONE;
        for (slot, b) in host.bytes.iter_mut().zip(name.bytes()) {
            *slot = if b.is_ascii_graphic() && b != b',' { b } else { b'_' };
            host.len += 1;
        }
        host
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect("ASCII")
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// How an entry's number came to the lineage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Claimed by a primary with `worker_id = auto`.
    Auto,
    /// Set by hand: seen in the marks of a server configured with it.
    Setting,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Auto => "auto",
            Source::Setting => "setting",
        }
    }

    pub fn from_name(name: &str) -> Option<Source> {
        match name {
            "auto" => Some(Source::Auto),
            "setting" => Some(Source::Setting),
            _ => None,
        }
    }
}

/// A node number the lineage used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub node: Node,
    pub source: Source,
    /// The timeline an auto claim was made on; 0 when not known.
    pub timeline: u32,
    /// When it was claimed (auto) or first seen (a setting).
    pub claimed_at: Option<UnixMillis>,
    /// The host an auto claim was made on.
    pub host: Host,
    /// The highest mark the lineage saw made with this number.
    pub last_mark: Option<UnixMillis>,
    /// When a later number became the lineage's current one.
    pub superseded_at: Option<UnixMillis>,
    /// When a superuser released it.
    pub released_at: Option<UnixMillis>,
}

impl Claim {
    /// A claim made by an auto primary.
    pub fn auto(node: Node, timeline: u32, at: UnixMillis, host: Host) -> Claim {
        Claim { source: Source::Auto, timeline, claimed_at: Some(at), host, ..Claim::seen(node, None) }
    }

    /// Whether `other` is this very claim: the same number, claimed on the
    /// same timeline at the same instant.
    pub fn is(&self, other: &Claim) -> bool {
        self.node == other.node && self.timeline == other.timeline && self.claimed_at == other.claimed_at
    }

    /// A number seen in use, set by hand.
    pub fn seen(node: Node, at: Option<UnixMillis>) -> Claim {
        Claim {
            node,
            source: Source::Setting,
            timeline: 0,
            claimed_at: at,
            host: Host::NONE,
            last_mark: None,
            superseded_at: None,
            released_at: None,
        }
    }

    /// From when the number may be claimed again, once it is no longer the
    /// lineage's current one: the clock past its last mark, and released or
    /// superseded `reuse_after_ms` ago. `None` while it is held for good (it
    /// is the current number).
    pub fn reusable_from(&self, reuse_after_ms: u64) -> Option<UnixMillis> {
        let freed = match (self.released_at, self.superseded_at) {
            (Some(released), _) => released,
            (None, Some(superseded)) => {
                UnixMillis(superseded.0.saturating_add(i64::try_from(reuse_after_ms).unwrap_or(i64::MAX)))
            }
            (None, None) => return None,
        };
        Some(self.last_mark.map_or(freed, |mark| freed.max(mark)))
    }
}

/// The server a claim is chosen for: what tells two servers with one
/// configuration apart.
#[derive(Clone, Copy, Debug)]
pub struct Instance<'a> {
    pub host: &'a str,
    pub data_dir: &'a str,
    pub port: u16,
}

impl Instance<'_> {
    /// The number the host name ends in (`cluster-example-2`, `db3`): the
    /// ordinal a StatefulSet gives its pods, or an operator its hosts.
    pub fn ordinal(&self) -> Option<u64> {
        let digits = self.host.len() - self.host.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let tail = &self.host[self.host.len() - digits.min(18)..];
        tail.parse().ok()
    }

    /// A hash of the instance and the timeline, the seed of its order of numbers.
    fn seed(&self, timeline: u32) -> u64 {
        let mut h = Fnv::default();
        h.write(self.host.as_bytes());
        h.write(&[0]);
        h.write(self.data_dir.as_bytes());
        h.write(&[0]);
        h.write(&self.port.to_le_bytes());
        h.write(&timeline.to_le_bytes());
        h.0
    }

    /// The order in which this instance prefers the numbers of a field of
    /// `bits` bits (up to 63) on `timeline`: its ordinal first, then every
    /// number in an order of its own, a permutation drawn from its seed (so
    /// two instances rarely put the same number first). Lazy: a wide field
    /// is never listed whole.
    pub fn preference(&self, bits: u32, timeline: u32) -> impl Iterator<Item = u64> {
        let count = 1u64 << bits;
        let seed = self.seed(timeline);
        let first = self.ordinal().map(|o| o % count);
        first.into_iter().chain((0..count).map(move |i| permute(i, bits, seed)))
    }
}

/// A bijection of the numbers below `2^bits` chosen by `seed`: each step (an
/// addition, a multiplication by an odd number, an xorshift, all modulo
/// `2^bits`) maps them one to one.
fn permute(i: u64, bits: u32, seed: u64) -> u64 {
    let mask = (1u64 << bits) - 1;
    let shift = bits.div_ceil(2);
    let (add, mul1, mul2) = (mix(seed), mix(seed ^ 1) | 1, mix(seed ^ 2) | 1);
    let mut x = i.wrapping_add(add) & mask;
    x = x.wrapping_mul(mul1) & mask;
    x ^= x >> shift;
    x = x.wrapping_mul(mul2) & mask;
    x ^= x >> shift;
    x
}

/// FNV-1a, 64 bits: a hash that stays the same across releases and builds.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// SplitMix64's finaliser: spreads every bit of its input over the output.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// No number of the field may be claimed now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoneFree {
    /// Numbers in the field.
    pub numbers: u64,
    /// When the first held number may be reused, if any will be.
    pub soonest: Option<UnixMillis>,
}

/// Why a number could not be released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseError {
    /// The lineage never used it.
    Unknown,
    /// The lineage generates with it now.
    Current,
}

/// The numbers a lineage used, its current one, and whether this data
/// directory claimed that itself. Plain data (`Copy`), to live in shared memory.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Claims {
    entries: [Claim; CAPACITY],
    len: usize,
    current: Option<Node>,
    own: bool,
}

impl fmt::Debug for Claims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claims")
            .field("entries", &self.entries())
            .field("current", &self.current)
            .field("own", &self.own)
            .finish()
    }
}

impl Default for Claims {
    fn default() -> Claims {
        Claims { entries: [Claim::seen(Node::default(), None); CAPACITY], len: 0, current: None, own: false }
    }
}

impl Claims {
    /// A table of `entries` (the first [`CAPACITY`] kept), with `current`
    /// the lineage's number now, and `own` whether this data directory
    /// claimed it.
    pub fn from_entries(entries: &[Claim], current: Option<Node>, own: bool) -> Claims {
        let mut claims = Claims { current, own, ..Claims::default() };
        for claim in entries.iter().take(CAPACITY) {
            claims.entries[claims.len] = *claim;
            claims.len += 1;
        }
        claims
    }

    pub fn entries(&self) -> &[Claim] {
        &self.entries[..self.len]
    }

    pub fn get(&self, node: Node) -> Option<&Claim> {
        self.entries().iter().find(|c| c.node == node)
    }

    /// The lineage's number now.
    pub fn current(&self) -> Option<Node> {
        self.current
    }

    /// Whether the lineage used `node` and then left it: another number
    /// became current after it, and no superuser released it. A copy that
    /// starts with such a number is most likely the server that used it,
    /// rebuilt (a Patroni reinit of an old primary), whose last IDs may lie
    /// past anything the lineage saw of them.
    pub fn left(&self, node: Node) -> bool {
        self.current != Some(node)
            && self.get(node).is_some_and(|c| c.superseded_at.is_some() && c.released_at.is_none())
    }

    /// The auto claim this data directory made and generates with, if any.
    pub fn own_claim(&self) -> Option<&Claim> {
        let current = self.current?;
        self.get(current).filter(|c| self.own && c.source == Source::Auto)
    }

    /// Whether this data directory claimed the current number itself.
    pub fn is_own(&self) -> bool {
        self.own
    }

    /// The current claim is not this data directory's (it is a copy of
    /// another server's, or a standby's): a primary claims anew.
    pub fn disown(&mut self) {
        self.own = false;
    }

    /// Records a mark made with `node`, whose tick starts at `mark`, at the
    /// wall-clock instant `at`: its entry (a number set by hand when it has
    /// none) keeps the highest mark, and a mark of another number than the
    /// current one makes it current (a primary given another number by hand,
    /// or a standby's primary that did).
    pub fn note_mark(&mut self, node: Node, mark: UnixMillis, at: UnixMillis) {
        if self.current != Some(node) {
            self.supersede(at);
            self.current = Some(node);
            self.own = false;
        }
        let entry = self.entry(node, at);
        entry.last_mark = Some(entry.last_mark.map_or(mark, |m| m.max(mark)));
    }

    /// Records a mark made with `node` before the lineage's current claim
    /// (crash recovery of the server that made the claim replays its
    /// primary's marks from before it): the number's last mark only, as
    /// [`Claims::note_mark`] keeps it, without making it current again.
    pub fn note_earlier_mark(&mut self, node: Node, mark: UnixMillis, at: UnixMillis) {
        let entry = self.entry(node, at);
        entry.last_mark = Some(entry.last_mark.map_or(mark, |m| m.max(mark)));
    }

    /// Records a claim: it becomes current, and the number current before is
    /// superseded. `own` says whether this data directory made it. A number
    /// claimed again keeps its last mark.
    pub fn note_claim(&mut self, claim: Claim, own: bool) {
        let at = claim.claimed_at.unwrap_or(UnixMillis(0));
        if self.current != Some(claim.node) {
            self.supersede(at);
        }
        let entry = self.entry(claim.node, at);
        *entry = Claim { last_mark: entry.last_mark, ..claim };
        self.current = Some(claim.node);
        self.own = own;
    }

    /// Releases `node` at `at`: it may be reused once the clock passes its
    /// last mark. A release stands: releasing again keeps the first instant.
    pub fn release(&mut self, node: Node, at: UnixMillis) -> Result<Claim, ReleaseError> {
        if self.current == Some(node) {
            return Err(ReleaseError::Current);
        }
        let entry = self.entries[..self.len].iter_mut().find(|c| c.node == node).ok_or(ReleaseError::Unknown)?;
        entry.released_at.get_or_insert(at);
        Ok(*entry)
    }

    /// Whether `node` may not be claimed at `now`.
    pub fn holds(&self, node: Node, now: UnixMillis, reuse_after_ms: u64) -> bool {
        self.current == Some(node)
            || self.get(node).is_some_and(|c| c.reusable_from(reuse_after_ms).is_none_or(|from| from > now))
    }

    /// The worker number `instance` claims in `datacenter`, from a field of
    /// `bits` bits, on `timeline` at `now`: the first in its
    /// [`Instance::preference`] that the lineage does not hold.
    pub fn choose(
        &self,
        instance: &Instance<'_>,
        datacenter: u64,
        bits: u32,
        timeline: u32,
        now: UnixMillis,
        reuse_after_ms: u64,
    ) -> Result<u64, NoneFree> {
        let node = |worker| Node { datacenter, worker };
        if let Some(worker) = instance.preference(bits, timeline).find(|&w| !self.holds(node(w), now, reuse_after_ms)) {
            return Ok(worker);
        }
        let soonest = self
            .entries()
            .iter()
            .filter(|c| c.node.datacenter == datacenter && self.current != Some(c.node))
            .filter_map(|c| c.reusable_from(reuse_after_ms))
            .min();
        Err(NoneFree { numbers: 1u64 << bits, soonest })
    }

    /// The lineage's current number is superseded at `at`.
    fn supersede(&mut self, at: UnixMillis) {
        if let Some(current) = self.current {
            if let Some(entry) = self.entries[..self.len].iter_mut().find(|c| c.node == current) {
                entry.superseded_at = Some(at);
            }
        }
    }

    /// The entry of `node`, made (as a number seen, first at `at`) when
    /// there is none. A full table makes room first.
    fn entry(&mut self, node: Node, at: UnixMillis) -> &mut Claim {
        let index = match self.entries().iter().position(|c| c.node == node) {
            Some(i) => i,
            None => {
                if self.len == CAPACITY {
                    self.evict();
                }
                self.entries[self.len] = Claim::seen(node, Some(at));
                self.len += 1;
                self.len - 1
            }
        };
        &mut self.entries[index]
    }

    /// Drops one entry of a full table: the one released longest ago, else
    /// the one superseded longest ago; never the current one, and one that
    /// was neither only when nothing else is left.
    fn evict(&mut self) {
        let current = self.current;
        let oldest = self
            .entries()
            .iter()
            .enumerate()
            .filter(|(_, c)| Some(c.node) != current)
            .min_by_key(|(_, c)| match (c.released_at, c.superseded_at) {
                (Some(released), _) => (0, released),
                (None, Some(superseded)) => (1, superseded),
                (None, None) => (2, UnixMillis(0)),
            })
            .map(|(i, _)| i);
        if let Some(i) = oldest {
            self.entries.copy_within(i + 1..self.len, i);
            self.len -= 1;
        }
    }
}

#[cfg(test)]
mod tests;
