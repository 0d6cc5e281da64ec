//! The guard: catching two servers that generate with one node number where
//! their IDs meet, in rows applied by logical replication.
//!
//! A clash is two *servers* generating with one number at the same time, not
//! two subscriptions, two databases or two replication origins: one server's
//! rows may arrive along several of those. So each applied ID comes with the
//! [`Server`] it was received from (the caller asks the publisher who it is),
//! and for each node the guard keeps the range of IDs each server delivered
//! ([`Owners`], in shared memory since server start). Two checks, for each
//! applied ID:
//! - the ID carries this server's own node: another live server uses it;
//! - the ID falls among another server's IDs of the same node, or theirs
//!   among this server's: two servers generate with it. Generators that take
//!   a number over one after the other never interleave: a promoted standby,
//!   a restored backup, a pg_upgrade'd cluster or a renumbered server
//!   continue above every ID issued before, so their range starts above the
//!   old one. Two live generators interleave as soon as each has delivered
//!   an ID after the other's first.
//!
//! A server whose system identifier equals another's on an earlier timeline
//! descends from it (a promoted standby, a point-in-time restore) and replays
//! its history, so it may deliver IDs among the earlier timeline's (rows a
//! failover slot had not sent yet); the earlier timeline delivering among
//! the later one's is the old primary generating beside its promoted standby
//! (split brain).
//!
//! Only IDs at or after `judge_from` are judged: keys that are no snowflake
//! IDs (a table's legacy keys, which decode to instants near the epoch) and
//! IDs generated before the guard was armed are no evidence of live
//! generators.
//!
//! A finding is *proof* that two servers generate with one number, or only
//! *evidence*, which has an innocent explanation too; the caller stops the
//! apply only on proof. An ID of this server's own number is proof when this
//! server has not issued it (it lies at or above where this server's IDs end);
//! below, it may be one of this server's own rows coming back (a table
//! re-seeded from a subscriber that had copied it), unless no row of this
//! server can leave it by logical replication and another generator of the
//! number was already proven at or below that ID since the server started:
//! then it is that generator's, held back by a partition while this server
//! issued IDs past it, and the proof stays a proof. Interleaving IDs are
//! proof when both servers answered who they are; a replication origin of
//! another system stands in for a server it does not name, and two of them
//! may be one provider reached through two subscriptions.

use super::codec::{Codec, Node};
use super::generator::Mark;
use super::time::UnixMillis;

/// A server as the guard tells them apart: the system identifier and
/// timeline its publisher reports (`IDENTIFY_SYSTEM`). For rows of a
/// replication origin that is no native subscription's (pglogical, Spock),
/// a stand-in: a hash of the origin's name, with timeline 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Server {
    pub system: u64,
    pub timeline: u32,
}

impl Server {
    /// Whether the publisher answered who it is (a native subscription's),
    /// rather than a replication origin of another system standing in.
    pub fn is_known(&self) -> bool {
        self.timeline != 0
    }

    /// Whether this server replays `other`'s history: the same system, on a
    /// later timeline (a promoted standby or a restored backup of it).
    pub fn descends_from(&self, other: &Server) -> bool {
        self.timeline != 0 && self.system == other.system && self.timeline > other.timeline
    }
}

/// The IDs of one node that one server delivered: their smallest and
/// largest, and the path (the caller's token for a replication origin) they
/// last arrived by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Delivered {
    pub server: Server,
    pub low: i64,
    pub high: i64,
    pub via: u64,
}

impl Delivered {
    fn overlaps(&self, other: &Delivered) -> bool {
        self.low <= other.high && other.low <= self.high
    }
}

/// What the guard found in one applied ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing wrong, no snowflake ID of this layout, or one from before
    /// the guard was armed.
    Fine,
    /// The ID carries this server's own node; `proven` when this server has
    /// not issued it. `past_a_proof`: below this server's IDs, but at or
    /// above an ID of its number proven another generator's since it
    /// started; proof unless its own rows may come back ([`Verdict::settle`]).
    OwnNode { node: Node, proven: bool, past_a_proof: bool },
    /// The ID's node arrives from two servers whose IDs interleave; `other`
    /// is what the other server delivered; `proven` when both are known.
    TwoServers { node: Node, other: Delivered, proven: bool },
    /// The table of nodes is full: a node not seen before is not checked.
    Untracked(Node),
}

impl Verdict {
    /// The verdict on an ID of this server's own number past a proof:
    /// proof when no row of this server can leave it by logical replication
    /// (`sends_rows` is asked then only), so that none can come back.
    pub fn settle(self, sends_rows: impl FnOnce() -> bool) -> Verdict {
        match self {
            Verdict::OwnNode { node, proven: false, past_a_proof: true } => {
                Verdict::OwnNode { node, proven: !sends_rows(), past_a_proof: true }
            }
            verdict => verdict,
        }
    }
}

/// How many nodes the guard tracks: every node of a layout with up to 12
/// bits of node fields (the default layout has 10).
pub const CAPACITY: usize = 4096;

/// How many servers the guard remembers for one node. A node has one server
/// at a time, or a few in a row (failovers, an upgrade); when a fifth
/// arrives, the one whose IDs ended lowest is forgotten.
pub const SERVERS_PER_NODE: usize = 4;

/// The servers a node arrived from, with the IDs each delivered.
#[derive(Clone, Copy, Default)]
struct Senders {
    delivered: [Delivered; SERVERS_PER_NODE],
    len: usize,
}

impl Senders {
    /// Records `id` from `server` by `via`, and returns what another server
    /// delivered that it interleaves with.
    fn record(&mut self, server: Server, via: u64, id: i64) -> Option<Delivered> {
        let at = match self.delivered[..self.len].iter().position(|d| d.server == server) {
            Some(at) => at,
            None => {
                let at = if self.len < SERVERS_PER_NODE {
                    self.len += 1;
                    self.len - 1
                } else {
                    (0..self.len).min_by_key(|&i| self.delivered[i].high).unwrap_or(0)
                };
                self.delivered[at] = Delivered { server, low: id, high: id, via };
                at
            }
        };
        let d = &mut self.delivered[at];
        d.via = via;
        d.low = d.low.min(id);
        d.high = d.high.max(id);
        let mine = *d;
        self.delivered[..self.len]
            .iter()
            .find(|other| other.server != server && !server.descends_from(&other.server) && mine.overlaps(other))
            .copied()
    }

    /// Forgets `server`: the path its IDs arrived by is gone.
    fn forget(&mut self, server: Server) {
        if let Some(at) = self.delivered[..self.len].iter().position(|d| d.server == server) {
            self.delivered.copy_within(at + 1..self.len, at);
            self.len -= 1;
        }
    }
}

/// The servers each node arrived from: a fixed open-addressing table, plain
/// data for shared memory.
#[derive(Clone, Copy)]
pub struct Owners {
    /// Node keys (`datacenter << 32 | worker`, plus one; zero is free).
    keys: [u64; CAPACITY],
    senders: [Senders; CAPACITY],
    len: usize,
    /// The lowest ID of this server's own number proven to be another
    /// generator's, as (era, position).
    own_foreign_from: Option<(u64, u64)>,
}

impl Default for Owners {
    fn default() -> Self {
        Owners { keys: [0; CAPACITY], senders: [Senders::default(); CAPACITY], len: 0, own_foreign_from: None }
    }
}

impl Owners {
    /// The senders of `node`, made an entry if it has none; `None` when the
    /// table is full.
    fn entry(&mut self, node: Node) -> Option<&mut Senders> {
        let key = key_of(node);
        let start = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % CAPACITY;
        let slot = (0..CAPACITY).map(|i| (start + i) % CAPACITY).find(|&s| self.keys[s] == key || self.keys[s] == 0)?;
        if self.keys[slot] == 0 {
            self.keys[slot] = key;
            self.len += 1;
        }
        Some(&mut self.senders[slot])
    }

    /// Forgets what `server` delivered of `node`: the subscription it came
    /// through was dropped, so a server that clashed with it is no longer
    /// reported (until its IDs arrive again).
    pub fn forget(&mut self, node: Node, server: Server) {
        if let Some(senders) = self.entry(node) {
            senders.forget(server);
        }
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

/// This server, as the guard judges IDs against it.
#[derive(Clone, Copy, Debug)]
pub struct Own {
    /// `None` for a server with `worker_id = auto` that has not claimed a
    /// number yet: no ID is its own.
    pub node: Option<Node>,
    /// Where this server's own IDs end: none it issued lies at or after this
    /// mark's position in its era, nor in a later era (the generator's next
    /// position).
    pub issued_below: Mark,
    /// Whether `issued_below` is known: not while the server's mark is
    /// unknown (a lost state file, pg_upgrade), when it is the start of the
    /// ID space. A proof made then is not remembered for later rows.
    pub known: bool,
}

/// Checks one ID applied from `server` (by the path `via`) at the server
/// `own` with the ID settings `codec`, judging only IDs of `judge_from` or
/// later, and records what `server` delivered. With no `server` (the
/// publisher could not be asked, or the rows are a table synchronisation's
/// copy), only the own-number check is made. An ID of this server's own
/// number below its IDs that lies past a proof is settled by the caller
/// ([`Verdict::settle`]), outside any lock: whether rows of this server may
/// leave it takes a catalog lookup.
pub fn check(
    codec: &Codec,
    own: Own,
    owners: &mut Owners,
    id: i64,
    (server, via): (Option<Server>, u64),
    judge_from: UnixMillis,
) -> Verdict {
    let Ok(d) = codec.decode(id) else { return Verdict::Fine };
    if codec.instant_of(d.tick).is_none_or(|at| at.0 < judge_from.0) {
        return Verdict::Fine;
    }
    let node = Node { datacenter: d.datacenter.unwrap_or(0), worker: d.worker.unwrap_or(0) };
    if own.node == Some(node) {
        let here = (d.clock_back.unwrap_or(0), codec.template(node).position(d.tick) + d.sequence);
        let mine = own.issued_below;
        if here >= (mine.clock_back, mine.position) {
            // Never issued here: another generator's, and so are the IDs of
            // the number from here up that no row of this server explains.
            if own.known {
                owners.own_foreign_from = Some(owners.own_foreign_from.map_or(here, |from| from.min(here)));
            }
            return Verdict::OwnNode { node, proven: true, past_a_proof: false };
        }
        let past_a_proof = owners.own_foreign_from.is_some_and(|from| here >= from);
        return Verdict::OwnNode { node, proven: false, past_a_proof };
    }
    let Some(server) = server else { return Verdict::Fine };
    match owners.entry(node) {
        None => Verdict::Untracked(node),
        Some(senders) => match senders.record(server, via, id) {
            None => Verdict::Fine,
            Some(other) => Verdict::TwoServers { node, other, proven: server.is_known() && other.server.is_known() },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::layout::Layout;
    use crate::snowflake::time::TimeBase;

    const EPOCH: i64 = 1_735_689_600_000;

    fn codec() -> Codec {
        Codec::new(
            Layout::parse("timestamp:41,datacenter:5,worker:5,sequence:12").unwrap(),
            TimeBase::new(UnixMillis(EPOCH), 1).unwrap(),
        )
    }

    fn id_of(node: Node, tick: u64) -> i64 {
        let t = codec().template(node);
        t.encode(t.position(tick), 0)
    }

    const OWN: Node = Node { datacenter: 1, worker: 1 };

    /// A server with `node` that has issued IDs below `tick`.
    fn own_up_to(node: Node, tick: u64) -> Own {
        Own {
            node: Some(node),
            issued_below: Mark { position: codec().template(node).position(tick), clock_back: 0, wall: None },
            known: true,
        }
    }

    /// A server with `node` that has issued no ID.
    fn fresh(node: Node) -> Own {
        own_up_to(node, 0)
    }
    const A: Node = Node { datacenter: 2, worker: 5 };
    const ARMED: UnixMillis = UnixMillis(EPOCH + 1_000);
    const P: Server = Server { system: 7001, timeline: 1 };
    const Q: Server = Server { system: 7002, timeline: 1 };

    /// Runs `test` with a fresh table, on a thread with room for it (the
    /// table is meant for shared memory, and is larger than a test thread's
    /// stack takes in a debug build).
    fn with_owners(test: impl FnOnce(&mut Owners) + Send + 'static) {
        std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(move || test(&mut Owners::default()))
            .unwrap()
            .join()
            .unwrap();
    }

    fn check_at(owners: &mut Owners, node: Node, tick: u64, server: Server) -> Verdict {
        check(&codec(), fresh(OWN), owners, id_of(node, tick), (Some(server), 0), ARMED)
    }

    #[test]
    fn an_id_with_our_own_node_is_caught_from_any_server() {
        with_owners(|owners| {
            assert_eq!(
                check_at(owners, OWN, 5_000, P),
                Verdict::OwnNode { node: OWN, proven: true, past_a_proof: false }
            );
            assert!(owners.is_empty(), "our own node is never recorded");
        });
    }

    #[test]
    fn our_own_number_below_our_own_ids_may_be_our_rows_coming_back() {
        with_owners(|owners| {
            // This server issued IDs up to tick 6 000: a row of tick 5 000 with its
            // number may be one of its own (re-seeded from a subscriber), not proof.
            let own = own_up_to(OWN, 6_000);
            let at = |owners: &mut Owners, tick| check(&codec(), own, owners, id_of(OWN, tick), (Some(P), 0), ARMED);
            assert_eq!(at(owners, 5_000), Verdict::OwnNode { node: OWN, proven: false, past_a_proof: false });
            let never = Verdict::OwnNode { node: OWN, proven: true, past_a_proof: false };
            assert_eq!(at(owners, 6_000), never, "never issued here");
            // So is a copy's row, whose sender is unknown.
            let copied = check(&codec(), own, owners, id_of(OWN, 5_999), (None, 0), ARMED);
            assert_eq!(copied, Verdict::OwnNode { node: OWN, proven: false, past_a_proof: false });
        });
    }

    #[test]
    fn a_proven_clash_stays_proven_after_this_server_issued_past_it() {
        with_owners(|owners| {
            // The publisher's row of tick 5 000 arrives while this server's IDs end
            // at 4 000: proof. A partition holds the publisher's later rows back
            // while this server issues IDs up to tick 9 000; then they arrive.
            let before = own_up_to(OWN, 4_000);
            let after = own_up_to(OWN, 9_000);
            let at = |owners: &mut Owners, own: Own, tick, sends_rows: bool| {
                check(&codec(), own, owners, id_of(OWN, tick), (Some(P), 0), ARMED).settle(|| sends_rows)
            };
            let proof = |past_a_proof| Verdict::OwnNode { node: OWN, proven: true, past_a_proof };
            let evidence = |past_a_proof| Verdict::OwnNode { node: OWN, proven: false, past_a_proof };
            assert_eq!(at(owners, before, 5_000, false), proof(false));
            // Rows of this server never leave it: the backlog at or above the
            // proven ID stays proof, the refused row itself included.
            for tick in [5_000, 5_001, 8_999] {
                assert_eq!(at(owners, after, tick, false), proof(true), "{tick}");
            }
            // Below the first proven ID it may be this server's own row copied
            // back some other way: evidence.
            assert_eq!(at(owners, after, 4_999, false), evidence(false));
            // A server whose rows may leave it may see its own rows come back.
            assert_eq!(at(owners, after, 6_000, true), evidence(true));
            // A later proof lower down moves the line down.
            assert_eq!(at(owners, own_up_to(OWN, 3_000), 3_500, false), proof(false));
            assert_eq!(at(owners, after, 3_600, false), proof(true));
        });
    }

    #[test]
    fn a_server_without_a_number_of_its_own_judges_no_id_its_own() {
        let mut owners = Owners::default();
        let unclaimed = Own { node: None, ..fresh(OWN) };
        let verdict = check(&codec(), unclaimed, &mut owners, id_of(OWN, 5_000), (None, 0), ARMED);
        assert_eq!(verdict, Verdict::Fine);
        let claimed = check(&codec(), fresh(OWN), &mut owners, id_of(OWN, 5_000), (None, 0), ARMED);
        assert!(matches!(claimed, Verdict::OwnNode { proven: true, .. }), "{claimed:?}");
    }

    #[test]
    fn a_proof_while_our_mark_is_unknown_is_not_remembered() {
        with_owners(|owners| {
            let unknown = Own { known: false, ..fresh(OWN) };
            let verdict = check(&codec(), unknown, owners, id_of(OWN, 5_000), (Some(P), 0), ARMED);
            assert_eq!(verdict, Verdict::OwnNode { node: OWN, proven: true, past_a_proof: false });
            // The floor raised, this server's own older rows coming back are evidence.
            let own = own_up_to(OWN, 9_000);
            let verdict = check(&codec(), own, owners, id_of(OWN, 6_000), (Some(P), 0), ARMED).settle(|| false);
            assert_eq!(verdict, Verdict::OwnNode { node: OWN, proven: false, past_a_proof: false });
        });
    }

    #[test]
    fn without_a_proof_our_own_number_below_our_ids_is_never_proof() {
        with_owners(|owners| {
            let own = own_up_to(OWN, 6_000);
            let mut asked = false;
            let verdict = check(&codec(), own, owners, id_of(OWN, 5_000), (Some(P), 0), ARMED).settle(|| {
                asked = true;
                false
            });
            assert_eq!(verdict, Verdict::OwnNode { node: OWN, proven: false, past_a_proof: false });
            assert!(!asked, "whether rows leave is asked only past a proof");
        });
    }

    #[test]
    fn origins_of_another_system_interleaving_are_no_proof() {
        with_owners(|owners| {
            // A pglogical provider reached through two subscriptions: two origin names.
            let one = Server { system: 0xaaaa, timeline: 0 };
            let two = Server { system: 0xbbbb, timeline: 0 };
            check_at(owners, A, 5_000, one);
            check_at(owners, A, 5_100, two);
            let verdict = check_at(owners, A, 5_200, one);
            assert!(matches!(verdict, Verdict::TwoServers { proven: false, .. }), "{verdict:?}");
            // Nor is one of them against a known server.
            check_at(owners, A, 5_300, P);
            assert!(matches!(check_at(owners, A, 5_250, two), Verdict::TwoServers { proven: false, .. }));
        });
    }

    #[test]
    fn one_server_through_any_number_of_paths_is_one_server() {
        with_owners(|owners| {
            for tick in [5_000, 5_010, 5_005, 5_020, 5_001] {
                assert_eq!(check_at(owners, A, tick, P), Verdict::Fine);
            }
            assert_eq!(owners.len(), 1);
        });
    }

    #[test]
    fn two_live_servers_are_caught_once_their_ids_interleave() {
        with_owners(|owners| {
            assert_eq!(check_at(owners, A, 5_000, P), Verdict::Fine);
            // Q's first IDs above all of P's: a server that took the number over, so far.
            assert_eq!(check_at(owners, A, 5_100, Q), Verdict::Fine);
            // P again: the two generate at once.
            let Verdict::TwoServers { node, other, proven: true } = check_at(owners, A, 5_200, P) else {
                panic!("not caught")
            };
            assert_eq!((node, other.server, other.low, other.high), (A, Q, id_of(A, 5_100), id_of(A, 5_100)));
            // And Q's next ID, among P's, is caught from its side too.
            *owners = Owners::default();
            check_at(owners, A, 5_000, P);
            check_at(owners, A, 5_200, P);
            assert!(matches!(check_at(owners, A, 5_100, Q), Verdict::TwoServers { other, .. } if other.server == P));
        });
    }

    #[test]
    fn servers_that_take_a_number_over_one_after_the_other_never_clash() {
        with_owners(|owners| {
            let upgraded = Server { system: 9_999, timeline: 1 };
            let promoted = Server { system: 9_999, timeline: 2 };
            for (server, ticks) in [(P, 5_000..5_050), (upgraded, 6_000..6_050), (promoted, 7_000..7_050)] {
                for tick in ticks {
                    assert_eq!(check_at(owners, A, tick, server), Verdict::Fine, "{server:?} at {tick}");
                }
            }
            // Late rows of a server already replaced, below its successor's IDs: no new generator.
            assert_eq!(check_at(owners, A, 5_049, P), Verdict::Fine);
        });
    }

    #[test]
    fn a_promoted_standby_may_resend_its_primarys_rows_but_the_old_primary_may_not_go_on() {
        with_owners(|owners| {
            let old = Server { system: 4242, timeline: 1 };
            let new = Server { system: 4242, timeline: 2 };
            assert_eq!(check_at(owners, A, 5_000, old), Verdict::Fine);
            assert_eq!(check_at(owners, A, 5_100, old), Verdict::Fine);
            // The failover slot's rows the old primary had not sent: among its IDs, from the new timeline.
            assert_eq!(check_at(owners, A, 5_050, new), Verdict::Fine);
            assert_eq!(check_at(owners, A, 6_000, new), Verdict::Fine);
            // Split brain: the old primary still generates.
            let Verdict::TwoServers { other, .. } = check_at(owners, A, 6_100, old) else { panic!("not caught") };
            assert_eq!(other.server, new);
        });
    }

    #[test]
    fn keys_from_before_the_guard_was_armed_are_not_judged() {
        with_owners(|owners| {
            // Legacy keys 1, 3, 5, ... and 2, 4, 6, ...: node (0, 0) at the epoch.
            for key in (1..200).step_by(2) {
                assert_eq!(check(&codec(), fresh(Node::default()), owners, key, (Some(P), 0), ARMED), Verdict::Fine);
            }
            for key in (2..200).step_by(2) {
                assert_eq!(check(&codec(), fresh(Node::default()), owners, key, (Some(Q), 0), ARMED), Verdict::Fine);
            }
            assert!(owners.is_empty());
            // The same IDs generated after arming are judged.
            assert_eq!(
                check_at(owners, OWN, 1_000, P),
                Verdict::OwnNode { node: OWN, proven: true, past_a_proof: false }
            );
            assert_eq!(check_at(owners, OWN, 999, P), Verdict::Fine);
        });
    }

    #[test]
    fn what_is_no_id_of_this_layout_passes() {
        with_owners(|owners| {
            assert_eq!(check(&codec(), fresh(OWN), owners, -5, (Some(P), 0), UnixMillis(i64::MIN)), Verdict::Fine);
            let narrow = Codec::new(Layout::parse("timestamp:40,worker:10,sequence:12").unwrap(), codec().time);
            assert_eq!(
                check(&narrow, fresh(OWN), owners, 1 << 62, (Some(P), 0), UnixMillis(i64::MIN)),
                Verdict::Fine,
                "stray bits"
            );
            assert!(owners.is_empty());
        });
    }

    #[test]
    fn a_forgotten_server_clashes_no_more() {
        with_owners(|owners| {
            check_at(owners, A, 5_000, P);
            check_at(owners, A, 5_100, Q);
            assert!(matches!(check_at(owners, A, 5_200, P), Verdict::TwoServers { .. }));
            assert!(matches!(check_at(owners, A, 5_300, P), Verdict::TwoServers { .. }), "still both");
            owners.forget(A, Q);
            assert_eq!(check_at(owners, A, 5_400, P), Verdict::Fine);
        });
    }

    #[test]
    fn a_fifth_server_of_a_node_replaces_the_one_whose_ids_ended_lowest() {
        with_owners(|owners| {
            let server = |n: u64| Server { system: n, timeline: 1 };
            for n in 0..SERVERS_PER_NODE as u64 + 1 {
                assert_eq!(check_at(owners, A, 5_000 + 100 * n, server(n)), Verdict::Fine);
            }
            // Server 1 is still remembered: its IDs interleaving with a newer one's are caught.
            assert!(matches!(check_at(owners, A, 5_450, server(1)), Verdict::TwoServers { .. }));
        });
    }

    #[test]
    fn a_full_table_leaves_new_nodes_unchecked_and_old_ones_checked() {
        with_owners(|owners| {
            let wide = Codec::new(Layout::parse("timestamp:30,worker:20,sequence:12").unwrap(), codec().time);
            let node = |w: u64| Node { datacenter: 0, worker: w };
            let id = |w: u64, tick: u64| {
                let t = wide.template(node(w));
                t.encode(t.position(tick), 0)
            };
            for w in 1..=CAPACITY as u64 {
                assert_eq!(check(&wide, fresh(node(0)), owners, id(w, 5_000), (Some(P), 0), ARMED), Verdict::Fine);
            }
            assert_eq!(owners.len(), CAPACITY);
            let extra = CAPACITY as u64 + 1;
            assert_eq!(
                check(&wide, fresh(node(0)), owners, id(extra, 5_000), (Some(P), 0), ARMED),
                Verdict::Untracked(node(extra))
            );
            check(&wide, fresh(node(0)), owners, id(17, 5_100), (Some(Q), 0), ARMED);
            assert!(matches!(
                check(&wide, fresh(node(0)), owners, id(17, 5_200), (Some(P), 0), ARMED),
                Verdict::TwoServers { .. }
            ));
        });
    }
}
