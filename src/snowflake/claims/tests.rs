use proptest::prelude::*;

use super::*;

const NOW: UnixMillis = UnixMillis(1_795_000_000_000);
const DAY: u64 = 86_400_000;

fn node(worker: u64) -> Node {
    Node { datacenter: 1, worker }
}

fn at(ms: i64) -> UnixMillis {
    UnixMillis(NOW.0 + ms)
}

fn host(name: &str) -> Instance<'_> {
    Instance { host: name, data_dir: "/var/lib/postgresql/data", port: 5432 }
}

/// A lineage that claimed `workers` in turn, a day apart, the last one current.
fn lineage(workers: &[u64]) -> Claims {
    let mut claims = Claims::default();
    for (i, &w) in workers.iter().enumerate() {
        let when = at(-(DAY as i64) * (workers.len() - i) as i64);
        claims.note_claim(Claim::auto(node(w), i as u32 + 1, when, Host::new("pg")), false);
        claims.note_mark(node(w), when, when);
    }
    claims
}

#[test]
fn a_first_claim_takes_the_hosts_ordinal() {
    let claims = Claims::default();
    assert_eq!(claims.choose(&host("cluster-example-2"), 1, 5, 1, NOW, DAY), Ok(2));
    assert_eq!(claims.choose(&host("db33"), 1, 5, 1, NOW, DAY), Ok(1), "modulo the field's 32 numbers");
    assert_eq!(host("pg-0").ordinal(), Some(0));
    assert_eq!(host("primary").ordinal(), None);
    assert_eq!(host("").ordinal(), None);
    assert_eq!(host("n1234567890123456789012").ordinal(), Some(567_890_123_456_789_012), "the last 18 digits");
}

#[test]
fn a_claim_never_takes_the_current_number_or_one_still_held() {
    let claims = lineage(&[1, 2]);
    assert_eq!(claims.current(), Some(node(2)));
    // pg-1's ordinal is held by the lineage (superseded a day ago, reused only after a week).
    let chosen = claims.choose(&host("pg-1"), 1, 5, 3, NOW, 7 * DAY).unwrap();
    assert!(![1, 2].contains(&chosen), "{chosen}");
    // pg-2's is the current number: a primary that may still run.
    let chosen = claims.choose(&host("pg-2"), 1, 5, 3, NOW, 0).unwrap();
    assert_ne!(chosen, 2);
    // Another datacenter's numbers are not this one's.
    assert_eq!(claims.choose(&host("pg-2"), 2, 5, 3, NOW, 7 * DAY), Ok(2));
}

#[test]
fn a_number_is_reused_only_after_its_last_mark_and_the_minimum_age() {
    let mut claims = lineage(&[1, 2]);
    let superseded = claims.get(node(1)).unwrap().superseded_at.unwrap();
    assert_eq!(superseded, at(-(DAY as i64)));
    let reuse_after = 2 * DAY;
    assert!(claims.holds(node(1), NOW, reuse_after), "superseded a day ago, two days asked");
    assert!(!claims.holds(node(1), at(DAY as i64), reuse_after), "two days after it was superseded");
    // A mark later than that holds it until the clock passes the mark.
    claims.note_mark(node(1), at(3 * DAY as i64), at(-(DAY as i64)));
    // (A mark of number 1 makes it current again: the lineage's primary
    // generates with it. Supersede it once more.)
    assert_eq!(claims.current(), Some(node(1)));
    claims.note_claim(Claim::auto(node(3), 4, at(-(DAY as i64)), Host::new("pg")), false);
    assert!(claims.holds(node(1), at(2 * DAY as i64), 0), "the clock has not passed the mark");
    assert!(!claims.holds(node(1), at(3 * DAY as i64), 0));
    assert_eq!(claims.get(node(1)).unwrap().reusable_from(0), Some(at(3 * DAY as i64)));
}

#[test]
fn a_release_frees_a_number_once_the_clock_passes_its_mark() {
    let mut claims = lineage(&[1, 2]);
    assert_eq!(claims.release(node(2), NOW), Err(ReleaseError::Current));
    assert_eq!(claims.release(node(9), NOW), Err(ReleaseError::Unknown));
    let released = claims.release(node(1), NOW).unwrap();
    assert_eq!(released.released_at, Some(NOW));
    assert!(!claims.holds(node(1), NOW, 365 * DAY), "released: the minimum age does not apply");
    assert_eq!(claims.release(node(1), at(5)).unwrap().released_at, Some(NOW), "the first release stands");
    claims.note_mark(node(2), at(1000), NOW);
    claims.note_claim(Claim::auto(node(1), 9, at(2000), Host::new("pg-1")), true);
    let again = claims.get(node(1)).unwrap();
    assert_eq!((again.released_at, again.superseded_at, again.timeline), (None, None, 9), "claimed anew");
    assert_eq!(again.last_mark, Some(at(-2 * DAY as i64)), "keeps the last mark it had");
    assert_eq!(claims.own_claim().map(|c| c.node), Some(node(1)));
}

#[test]
fn with_every_number_held_the_claim_fails_and_says_when_one_frees() {
    let claims = lineage(&[0, 1, 2, 3]);
    let e = claims.choose(&host("pg-9"), 1, 2, 5, NOW, 7 * DAY).unwrap_err();
    assert_eq!(e.numbers, 4);
    // Number 0 was superseded first, three days ago: free four days from now.
    assert_eq!(e.soonest, Some(at(4 * DAY as i64)));
    assert!(claims.choose(&host("pg-9"), 1, 2, 5, at(4 * DAY as i64), 7 * DAY).is_ok());
    let e = lineage(&[0, 1]).choose(&host("x"), 1, 1, 3, NOW, 365 * DAY).unwrap_err();
    assert_eq!(e, NoneFree { numbers: 2, soonest: Some(at(364 * DAY as i64)) });
}

#[test]
fn marks_of_a_number_set_by_hand_make_it_current_and_supersede_the_last() {
    let mut claims = Claims::default();
    claims.note_mark(node(7), at(10), at(0));
    let seen = *claims.get(node(7)).unwrap();
    assert_eq!((seen.source, seen.claimed_at, seen.last_mark), (Source::Setting, Some(at(0)), Some(at(10))));
    claims.note_mark(node(7), at(5), at(1));
    assert_eq!(claims.get(node(7)).unwrap().last_mark, Some(at(10)), "the highest mark stays");
    claims.note_claim(Claim::auto(node(3), 2, at(20), Host::new("pg-3")), true);
    assert_eq!(claims.get(node(7)).unwrap().superseded_at, Some(at(20)));
    assert!(claims.is_own() && claims.own_claim().is_some());
    // The primary is renumbered by hand: its own claim is gone.
    claims.note_mark(node(8), at(40), at(30));
    assert_eq!(claims.current(), Some(node(8)));
    assert!(!claims.is_own() && claims.own_claim().is_none());
    assert_eq!(claims.get(node(3)).unwrap().superseded_at, Some(at(30)));
}

#[test]
fn an_earlier_mark_raises_its_numbers_last_mark_but_leaves_the_own_claim_current() {
    let mut claims = lineage(&[4]);
    claims.note_claim(Claim::auto(node(5), 2, at(0), Host::new("pg-5")), true);
    // Crash recovery replays the old primary's mark with 4, made before the claim.
    claims.note_earlier_mark(node(4), at(-1), at(-1));
    assert_eq!(claims.current(), Some(node(5)));
    assert!(claims.is_own());
    assert_eq!(claims.get(node(4)).unwrap().last_mark, Some(at(-1)));
    assert_eq!(claims.get(node(4)).unwrap().superseded_at, Some(at(0)), "still superseded by the claim");
    // The same mark noted as a current one would have taken the lineage back to 4.
    let mut as_current = claims;
    as_current.note_mark(node(4), at(-1), at(-1));
    assert_eq!(as_current.current(), Some(node(4)));
}

#[test]
fn a_number_the_lineage_left_is_told_from_the_current_one_a_released_one_and_a_new_one() {
    let mut claims = lineage(&[4, 5]);
    assert!(claims.left(node(4)), "superseded by 5");
    assert!(!claims.left(node(5)), "current");
    assert!(!claims.left(node(6)), "never used");
    claims.release(node(4), NOW).unwrap();
    assert!(!claims.left(node(4)), "released");
}

#[test]
fn a_claim_not_made_here_is_not_own() {
    let mut claims = lineage(&[4]);
    assert!(claims.own_claim().is_none(), "replayed, not made here");
    claims.note_claim(Claim::auto(node(5), 2, NOW, Host::new("pg-5")), true);
    assert!(claims.own_claim().is_some());
    claims.disown();
    assert!(claims.own_claim().is_none());
    assert_eq!(claims.current(), Some(node(5)), "still the lineage's current number");
}

#[test]
fn a_full_table_drops_the_entry_superseded_longest_ago_never_the_current_one() {
    let mut claims = Claims::default();
    for w in 0..CAPACITY as u64 + 10 {
        claims.note_claim(Claim::auto(Node { datacenter: w / 1000, worker: w }, 1, at(w as i64), Host::NONE), false);
    }
    assert_eq!(claims.entries().len(), CAPACITY);
    let last = Node { datacenter: 0, worker: CAPACITY as u64 + 9 };
    assert_eq!(claims.current(), Some(last));
    assert!(claims.get(last).is_some());
    assert!(claims.get(node_of(0)).is_none(), "the oldest went first");
    assert!(claims.get(node_of(10)).is_some());
    let round_trip = Claims::from_entries(claims.entries(), claims.current(), claims.is_own());
    assert_eq!(round_trip, claims);
}

fn node_of(worker: u64) -> Node {
    Node { datacenter: 0, worker }
}

#[test]
fn a_full_table_drops_a_released_number_before_a_superseded_one() {
    let mut claims = Claims::default();
    for w in 0..CAPACITY as u64 {
        claims.note_claim(Claim::auto(Node { datacenter: 9, worker: w }, 1, at(w as i64), Host::NONE), false);
    }
    let released = Node { datacenter: 9, worker: 100 };
    claims.release(released, at(5000)).unwrap();
    claims.note_claim(Claim::auto(Node { datacenter: 9, worker: 500 }, 2, at(6000), Host::NONE), false);
    assert!(claims.get(released).is_none(), "the released number made room");
    assert!(claims.get(Node { datacenter: 9, worker: 0 }).is_some(), "before the oldest superseded one");
    let claim = Claim::auto(node(3), 2, NOW, Host::new("h"));
    assert!(claim.is(&claim));
    assert!(!claim.is(&Claim { timeline: 3, ..claim }));
    assert!(!claim.is(&Claim { claimed_at: Some(at(1)), ..claim }));
}

#[test]
fn host_names_are_kept_printable_and_short() {
    assert_eq!(Host::new("pg-1.example.com").as_str(), "pg-1.example.com");
    assert_eq!(Host::new("a b,c\nd").as_str(), "a_b_c_d");
    assert_eq!(Host::new("ü").as_str(), "__", "each byte of another character");
    assert_eq!(Host::new(&"x".repeat(100)).as_str().len(), HOST_LEN);
    assert!(Host::NONE.is_empty());
}

#[test]
fn the_order_of_numbers_is_a_permutation() {
    for bits in 1..=12 {
        for seed in [0, 1, 0xdead_beef, u64::MAX] {
            let mut seen = vec![false; 1 << bits];
            for i in 0..(1u64 << bits) {
                let n = permute(i, bits, seed) as usize;
                assert!(!seen[n], "bits {bits} seed {seed}: {n} twice");
                seen[n] = true;
            }
        }
    }
    // A field of 63 bits is never listed whole.
    let first: Vec<u64> = host("h").preference(63, 1).take(3).collect();
    assert_eq!(first.len(), 3);
    assert!(first.iter().all(|&n| n < 1 << 63));
}

#[test]
fn the_choice_is_the_same_every_time_and_moves_with_the_timeline() {
    let claims = lineage(&[1]);
    let i = Instance { host: "db", data_dir: "/srv/pg/a", port: 5433 };
    let choices: Vec<u64> = (2..40).map(|tl| claims.choose(&i, 1, 5, tl, NOW, DAY).unwrap()).collect();
    let again: Vec<u64> = (2..40).map(|tl| claims.choose(&i, 1, 5, tl, NOW, DAY).unwrap()).collect();
    assert_eq!(choices, again);
    let distinct: std::collections::BTreeSet<u64> = choices.iter().copied().collect();
    assert!(distinct.len() > 10, "the timeline takes part in the order: {choices:?}");
}

proptest! {
    #[test]
    fn the_chosen_number_is_never_held(
        workers in proptest::collection::vec(0u64..32, 0..40),
        released in proptest::collection::vec(0u64..32, 0..5),
        host_name in "[a-z]{1,8}(-[0-9]{1,3})?",
        timeline in 1u32..100,
        later_days in 0i64..20,
        reuse_days in 0u64..10,
    ) {
        let mut claims = lineage(&workers);
        for w in released {
            let _ = claims.release(node(w), NOW);
        }
        let now = at(later_days * DAY as i64);
        let i = Instance { host: &host_name, data_dir: "/d", port: 1 };
        match claims.choose(&i, 1, 5, timeline, now, reuse_days * DAY) {
            Ok(w) => {
                prop_assert!(w < 32);
                prop_assert!(!claims.holds(node(w), now, reuse_days * DAY));
                prop_assert_ne!(Some(node(w)), claims.current());
            }
            Err(e) => {
                prop_assert!((0..32).all(|w| claims.holds(node(w), now, reuse_days * DAY)));
                if let Some(soonest) = e.soonest {
                    prop_assert!(soonest > now);
                    prop_assert!(claims.choose(&i, 1, 5, timeline, soonest, reuse_days * DAY).is_ok());
                }
            }
        }
    }

    #[test]
    fn servers_with_different_ordinals_choose_apart_while_their_ordinals_are_free(
        a in 0u64..32, b in 0u64..32, workers in proptest::collection::vec(0u64..32, 1..6),
    ) {
        prop_assume!(a != b && !workers.contains(&a) && !workers.contains(&b));
        let claims = lineage(&workers);
        let (ha, hb) = (format!("cluster-{a}"), format!("cluster-{b}"));
        let ca = claims.choose(&host(&ha), 1, 5, 7, NOW, 365 * DAY).unwrap();
        let cb = claims.choose(&host(&hb), 1, 5, 7, NOW, 365 * DAY).unwrap();
        prop_assert_eq!((ca, cb), (a, b));
    }
}

#[test]
fn servers_on_one_host_seldom_choose_the_same_number() {
    // Two data directories of one host, promoted together from one primary:
    // they meet with a chance of about one in the free numbers (31 here).
    let claims = lineage(&[0]);
    let trials = 2000;
    let same = (0..trials)
        .filter(|t| {
            let (a, b) = (format!("/srv/a{t}"), format!("/srv/b{t}"));
            let ia = Instance { host: "db", data_dir: &a, port: 5432 };
            let ib = Instance { host: "db", data_dir: &b, port: 5432 };
            claims.choose(&ia, 1, 5, 2, NOW, DAY) == claims.choose(&ib, 1, 5, 2, NOW, DAY)
        })
        .count();
    assert!(same < trials / 31 * 2, "{same} of {trials} pairs chose the same number");
}
