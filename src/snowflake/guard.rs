//! The guard: catching two servers that generate with one node number where
//! their IDs meet, in rows applied by logical replication.
//!
//! Two checks, for each applied ID:
//! - the ID carries this server's own node: another live server uses it;
//! - the ID's node arrived earlier from another replication origin: two
//!   servers upstream share it (at an aggregator).
//!
//! The first origin seen for a node owns it ([`Owners`], kept in shared memory
//! since server start). The caller names a subscription's origin, not its
//! table synchronisation workers' (each has an origin of its own), and hands a
//! node over when the origin that owned it is gone ([`Owners::reassign`]). A server's rows that reach this one along two paths
//! (forwarded by a subscriber that publishes what it applied) arrive from two
//! origins too, and are reported the same way: the check cannot tell a
//! forwarded row from another server's. Such a topology also applies every
//! forwarded row twice, which the primary key refuses.

use super::codec::{Codec, Node};

/// A replication origin, as PostgreSQL numbers them (`RepOriginId`).
pub type Origin = u16;

/// What the guard found in one applied ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing wrong, or no snowflake ID of this layout.
    Fine,
    /// The ID carries this server's own node.
    OwnNode(Node),
    /// The node arrived first from another origin.
    TwoOrigins { node: Node, first: Origin },
    /// The table of owners is full: a node not seen before is not checked.
    Untracked(Node),
}

/// How many nodes the guard tracks: every node of a layout with up to 12
/// bits of node fields (the default layout has 10).
pub const CAPACITY: usize = 4096;

/// The first origin each node arrived from: a fixed open-addressing table,
/// plain data for shared memory.
#[derive(Clone, Copy)]
pub struct Owners {
    /// Node keys (`datacenter << 32 | worker`, plus one; zero is free).
    keys: [u64; CAPACITY],
    origins: [Origin; CAPACITY],
    len: usize,
}

impl Default for Owners {
    fn default() -> Self {
        Owners { keys: [0; CAPACITY], origins: [0; CAPACITY], len: 0 }
    }
}

/// What [`Owners::claim`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    Owned,
    Other(Origin),
    Full,
}

impl Owners {
    /// Records `origin` as the node's owner unless it has one; says whether
    /// `origin` owns it.
    fn claim(&mut self, node: Node, origin: Origin) -> Claim {
        let key = key_of(node);
        for slot in self.slots(key) {
            match self.keys[slot] {
                0 => {
                    self.keys[slot] = key;
                    self.origins[slot] = origin;
                    self.len += 1;
                    return Claim::Owned;
                }
                k if k == key => {
                    return if self.origins[slot] == origin { Claim::Owned } else { Claim::Other(self.origins[slot]) };
                }
                _ => {}
            }
        }
        Claim::Full
    }

    /// Makes `origin` the node's owner: the one that owned it is gone (its
    /// subscription was dropped).
    pub fn reassign(&mut self, node: Node, origin: Origin) {
        let key = key_of(node);
        if let Some(slot) = self.slots(key).find(|&slot| self.keys[slot] == key) {
            self.origins[slot] = origin;
        }
    }

    /// The slots a key may sit in, in probing order.
    fn slots(&self, key: u64) -> impl Iterator<Item = usize> {
        let start = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % CAPACITY;
        (0..CAPACITY).map(move |i| (start + i) % CAPACITY)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A node as a table key: never zero, which marks a free slot.
fn key_of(node: Node) -> u64 {
    ((node.datacenter << 32) | node.worker).wrapping_add(1)
}

/// Checks one ID applied from `origin` at a server with node `own` and the
/// ID settings `codec`, recording the node's owner.
pub fn check(codec: &Codec, own: Node, owners: &mut Owners, id: i64, origin: Origin) -> Verdict {
    let Ok(d) = codec.decode(id) else { return Verdict::Fine };
    let node = Node { datacenter: d.datacenter.unwrap_or(0), worker: d.worker.unwrap_or(0) };
    if node == own {
        return Verdict::OwnNode(node);
    }
    match owners.claim(node, origin) {
        Claim::Owned => Verdict::Fine,
        Claim::Other(first) => Verdict::TwoOrigins { node, first },
        Claim::Full => Verdict::Untracked(node),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::layout::Layout;
    use crate::snowflake::time::{TimeBase, UnixMillis};

    fn codec() -> Codec {
        Codec::new(
            Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap(),
            TimeBase::new(UnixMillis(0), 1).unwrap(),
        )
    }

    fn id_of(node: Node, tick: u64) -> i64 {
        let t = codec().template(node);
        t.encode(t.position(tick), 0)
    }

    const OWN: Node = Node { datacenter: 1, worker: 1 };
    const A: Node = Node { datacenter: 2, worker: 5 };

    #[test]
    fn an_id_with_our_own_node_is_caught_from_any_origin() {
        let mut owners = Owners::default();
        assert_eq!(check(&codec(), OWN, &mut owners, id_of(OWN, 10), 1), Verdict::OwnNode(OWN));
        assert!(owners.is_empty(), "our own node is never owned by an origin");
    }

    #[test]
    fn one_node_from_two_origins_is_caught_naming_the_first() {
        let mut owners = Owners::default();
        assert_eq!(check(&codec(), OWN, &mut owners, id_of(A, 10), 7), Verdict::Fine);
        assert_eq!(check(&codec(), OWN, &mut owners, id_of(A, 11), 7), Verdict::Fine, "the same origin again");
        assert_eq!(check(&codec(), OWN, &mut owners, id_of(A, 12), 9), Verdict::TwoOrigins { node: A, first: 7 });
        let b = Node { datacenter: 2, worker: 6 };
        assert_eq!(check(&codec(), OWN, &mut owners, id_of(b, 12), 9), Verdict::Fine, "another node");
        assert_eq!(owners.len(), 2);
        // Origin 7 is gone: 9 takes its node over, and 7 would now be the second.
        owners.reassign(A, 9);
        assert_eq!(check(&codec(), OWN, &mut owners, id_of(A, 13), 9), Verdict::Fine);
        assert_eq!(check(&codec(), OWN, &mut owners, id_of(A, 14), 7), Verdict::TwoOrigins { node: A, first: 9 });
    }

    #[test]
    fn what_is_no_id_of_this_layout_passes() {
        let mut owners = Owners::default();
        assert_eq!(check(&codec(), OWN, &mut owners, -5, 1), Verdict::Fine);
        assert_eq!(check(&codec(), OWN, &mut owners, i64::MAX, 1), Verdict::Fine, "stray bits");
    }

    #[test]
    fn a_full_table_leaves_new_nodes_unchecked_and_old_ones_checked() {
        let wide = Codec::new(Layout::parse("timestamp:30,worker:20,sequence:12").unwrap(), codec().time);
        let mut owners = Owners::default();
        let node = |w: u64| Node { datacenter: 0, worker: w };
        let id = |w: u64| {
            let t = wide.template(node(w));
            t.encode(t.position(1), 0)
        };
        for w in 1..=CAPACITY as u64 {
            assert_eq!(check(&wide, node(0), &mut owners, id(w), 1), Verdict::Fine);
        }
        assert_eq!(owners.len(), CAPACITY);
        let extra = CAPACITY as u64 + 1;
        assert_eq!(check(&wide, node(0), &mut owners, id(extra), 1), Verdict::Untracked(node(extra)));
        assert_eq!(check(&wide, node(0), &mut owners, id(17), 2), Verdict::TwoOrigins { node: node(17), first: 1 });
    }
}
