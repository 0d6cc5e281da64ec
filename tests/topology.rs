//! Replication topologies nothing else covers: a base backup taken from a
//! standby, a standby crashed after restartpoints, an old primary rewound with
//! pg_rewind and switched back to, and a cascading standby that follows its
//! upstream onto a new timeline. In each, the server that takes over continues
//! above every ID issued before: the rows it replayed, and the IDs earlier
//! primaries returned to clients by plain SELECTs, which ran ahead of every
//! clock involved, so only the marks it knows keep it above them.

mod common;

use common::{db_error, Cluster};

/// 16 IDs per millisecond, so that a burst of two million IDs runs the
/// generator about two minutes ahead of the clock: far enough that every
/// switch in these tests happens while the old IDs are still ahead of the
/// new primary's clock.
const SETTINGS: [&str; 2] =
    ["snowflake_id.layout = 'timestamp:41,datacenter:5,worker:13,sequence:4'", "snowflake_id.worker_id = 1"];

const TABLE: &str = "CREATE TABLE ids (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), side text)";

/// Rows per insert phase.
const ROWS: i64 = 3000;

/// IDs per burst: about 125 s of the layout above.
const BURST: i32 = 2_000_000;

/// Every ID handed to a client so far, across the servers that were primary
/// one after the other: rows (which must replicate) and IDs of plain SELECTs.
#[derive(Clone, Copy, Debug, Default)]
struct Issued {
    /// Rows stored in `ids`.
    rows: i64,
    /// The largest of them.
    row_max: i64,
    /// The largest ID of any kind a client received.
    max: i64,
}

impl Issued {
    /// Inserts `rows` rows on `c`; returns the smallest and largest new ID.
    /// Each server's IDs, and each new primary's, lie above all before them.
    fn insert(&mut self, c: &Cluster, side: &str, rows: i64) -> (i64, i64) {
        let row = c
            .connect()
            .query_one(
                "WITH n AS (INSERT INTO ids (side) SELECT $1 FROM generate_series(1, $2::bigint) RETURNING id)
                 SELECT count(*), min(id), max(id) FROM n",
                &[&side, &rows],
            )
            .unwrap_or_else(|e| panic!("inserting {side}: {:?}", db_error(&e)));
        let (n, lo, hi): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(n, rows);
        assert!(lo > self.max, "{side}: the new rows start at {lo}, not above {} issued before", self.max);
        self.rows += n;
        self.row_max = hi;
        self.max = hi;
        (lo, hi)
    }

    /// Takes single IDs with plain SELECTs: IDs that leave the database
    /// without a row holding them.
    fn select(&mut self, c: &Cluster) {
        let mut s = c.connect();
        for _ in 0..20 {
            let id: i64 = s.query_one("SELECT snowflake_next_id()", &[]).unwrap().get(0);
            assert!(id > self.max, "a plain SELECT returned {id}, not above {} issued before", self.max);
            self.max = id;
        }
    }

    /// Runs `c`'s generator about two minutes ahead of its clock with one
    /// bulk call, whose IDs go to the client only.
    fn run_ahead(&mut self, c: &Cluster) {
        let mut s = c.connect();
        let row = s
            .query_one("SELECT count(*), min(id), max(id) FROM snowflake_next_ids($1) AS id", &[&BURST])
            .unwrap_or_else(|e| panic!("burst: {:?}", db_error(&e)));
        let (n, lo, hi): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(n, i64::from(BURST));
        assert!(lo > self.max, "the burst starts at {lo}, not above {} issued before", self.max);
        self.max = hi;
        let drift: i64 = s.query_one("SELECT drift_ms FROM snowflake_status()", &[]).unwrap().get(0);
        assert!(drift > 60_000, "the burst ran only {drift} ms ahead of the clock");
    }
}

/// The high-water mark `c` knows (its own, or on a standby its primary's, as
/// replayed), as text.
fn mark(c: &Cluster) -> String {
    let m: Option<String> = c.one("SELECT high_water_mark::text FROM snowflake_status()");
    m.expect("a known high-water mark")
}

fn marks_replayed(c: &Cluster) -> i64 {
    c.one("SELECT marks_replayed FROM snowflake_status()")
}

/// The WAL position after everything `c` has written so far.
fn insert_lsn(c: &Cluster) -> String {
    c.one("SELECT pg_current_wal_insert_lsn()::text")
}

fn lsn_at_least(c: &Cluster, lsn: &str, than: &str) -> bool {
    c.connect().query_one("SELECT $1::text::pg_lsn >= $2::text::pg_lsn", &[&lsn, &than]).unwrap().get(0)
}

/// The promoted (or restored) server `c` holds every row issued before and
/// continues above every ID any earlier primary handed out; its new rows go
/// into `issued` as `side`. Returns the smallest new ID.
fn assert_takes_over_above(c: &Cluster, issued: &mut Issued, side: &str) -> i64 {
    let row = c.connect().query_one("SELECT count(*), max(id) FROM ids", &[]).unwrap();
    let (count, row_max): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((count, row_max), (issued.rows, issued.row_max), "every row issued before was replayed");
    // Only the marks this server knows keep it above them: its clock is far behind.
    let ahead: bool = c
        .connect()
        .query_one("SELECT snowflake_timestamp($1) > clock_timestamp() + interval '10 seconds'", &[&issued.max])
        .unwrap()
        .get(0);
    assert!(ahead, "the IDs issued before are no longer ahead of this server's clock: the test proves nothing");
    let before = issued.max;
    let (new_min, _) = issued.insert(c, side, ROWS);
    assert!(new_min > before, "{side}: IDs start at {new_min}, not above {before}");
    issued.select(c);
    let dupes: i64 = c.one("SELECT count(*) - count(DISTINCT id) FROM ids");
    assert_eq!(dupes, 0);
    new_min
}

/// A `primary_conninfo` line for a server that streams from `upstream`.
fn streams_from(upstream: &Cluster, name: &str) -> String {
    format!("primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={name}'", upstream.port)
}

/// A checkpoint on the primary, replayed by `standby`, then a restartpoint on
/// the standby: its redo point lies after every mark logged so far, which the
/// function checks. After it, crash recovery of the standby (or a base backup
/// taken from it) replays none of those marks.
fn restartpoint_after_marks(primary: &Cluster, standby: &Cluster) {
    let after_marks = insert_lsn(primary);
    primary.connect().batch_execute("CHECKPOINT").unwrap();
    standby.wait_for_replay_of(primary);
    standby.connect().batch_execute("CHECKPOINT").unwrap();
    let redo: String = standby.one("SELECT redo_lsn::text FROM pg_control_checkpoint()");
    assert!(lsn_at_least(standby, &redo, &after_marks), "the restartpoint's redo {redo} lies before {after_marks}");
}

#[test]
fn a_base_backup_taken_from_a_standby_restored_and_promoted_continues_above() {
    let primary = Cluster::new("bbprimary", &SETTINGS);
    primary.start();
    primary.session().batch_execute(TABLE).unwrap();
    let standby = Cluster::standby_of(&primary, "bbstandby", &[]);
    standby.start();

    let mut issued = Issued::default();
    issued.insert(&primary, "before the backup", ROWS);
    issued.run_ahead(&primary);
    issued.insert(&primary, "before the backup", ROWS);
    issued.select(&primary);
    let after_marks = insert_lsn(&primary);
    primary.connect().batch_execute("CHECKPOINT").unwrap();
    standby.wait_for_replay_of(&primary);
    assert_eq!(mark(&standby), mark(&primary), "the standby replayed its primary's mark");

    // Two base backups from the standby, before the primary generates again.
    // Their restartpoint lies after every mark: the backups learn the marks
    // from the state file they copied, not from WAL.
    let copy = Cluster::base_backup_of(&standby, "bbcopy");
    let restored = Cluster::standby_of(&standby, "bbrestored", &[&streams_from(&primary, "bbrestored")]);
    for backup in [&copy, &restored] {
        let label = std::fs::read_to_string(backup.data_path("backup_label")).unwrap();
        assert!(label.contains("BACKUP FROM: standby"), "{label}");
        let start = label.lines().find_map(|l| l.strip_prefix("START WAL LOCATION: ")).unwrap();
        let start = start.split_whitespace().next().unwrap();
        assert!(lsn_at_least(&primary, start, &after_marks), "the backup starts at {start}, before {after_marks}");
    }

    // The primary goes on after the backups; they do not have these IDs.
    let at_backup = issued;
    issued.insert(&primary, "after the backup", ROWS);
    issued.run_ahead(&primary);
    issued.insert(&primary, "after the backup", ROWS);
    issued.select(&primary);

    // The backup restored on its own, with only the WAL it holds (no archive):
    // recovery to the end of that WAL, then a new timeline. (pg_basebackup
    // copied the standby's standby.signal.) Above every ID issued before the backup.
    std::fs::remove_file(copy.data_path("standby.signal")).unwrap();
    copy.set("restore_command = 'false'");
    copy.write_data_file("recovery.signal", b"");
    copy.start();
    copy.wait_until_writable();
    assert_eq!(marks_replayed(&copy), 0, "the backup's WAL holds no mark: its floor comes from the state file");
    let mut copy_issued = at_backup;
    assert_takes_over_above(&copy, &mut copy_issued, "restored copy");
    copy.stop_immediate();

    // The backup restored as a standby of the primary, streaming what the
    // primary did after it, then promoted in place of the primary.
    restored.start();
    restored.wait_for_replay_of(&primary);
    assert_eq!(mark(&restored), mark(&primary), "the restored standby replayed the primary's mark");
    primary.stop_immediate();
    restored.promote();
    restored.wait_until_writable();
    assert_takes_over_above(&restored, &mut issued, "promoted restored standby");
    let timeline: Option<i32> = restored.one("SELECT timeline FROM snowflake_status()");
    assert_eq!(timeline, Some(2));
}

#[test]
fn a_standby_crashed_after_restartpoints_then_promoted_continues_above() {
    let primary = Cluster::new("rpprimary", &SETTINGS);
    primary.start();
    primary.session().batch_execute(TABLE).unwrap();
    let standby = Cluster::standby_of(&primary, "rpstandby", &[]);
    standby.start();

    // Each phase runs further ahead; a restartpoint after each puts every mark
    // so far before the standby's redo point.
    let mut issued = Issued::default();
    for phase in 0..3 {
        let side = format!("phase {phase}");
        issued.insert(&primary, &side, ROWS);
        issued.run_ahead(&primary);
        issued.insert(&primary, &side, ROWS);
        issued.select(&primary);
        restartpoint_after_marks(&primary, &standby);
        assert_eq!(mark(&standby), mark(&primary), "the standby follows its primary's mark");
    }

    // The standby crashes; its crash recovery starts at the last restartpoint,
    // after every mark: it knows them from its state file only.
    let primary_mark = mark(&primary);
    standby.stop_immediate();
    standby.start();
    standby.wait_for_replay_of(&primary);
    assert_eq!(marks_replayed(&standby), 0, "no mark after the restartpoint: the floor comes from the state file");
    assert_eq!(mark(&standby), primary_mark, "the restarted standby knows its primary's mark");

    primary.stop_immediate();
    standby.promote();
    standby.wait_until_writable();
    assert_takes_over_above(&standby, &mut issued, "promoted standby");
}

#[test]
fn pg_rewind_of_an_old_primary_that_ran_ahead_rejoined_and_switched_back() {
    // pg_rewind needs hint bits WAL-logged, and A's WAL back to the last
    // checkpoint the two servers share, past A's end-of-recovery checkpoint.
    let a = Cluster::new("rwa", &[SETTINGS[0], SETTINGS[1], "wal_log_hints = on", "wal_keep_size = '1GB'"]);
    a.start();
    a.session().batch_execute(TABLE).unwrap();
    let b = Cluster::standby_of(&a, "rwb", &[]);
    b.start();

    let mut issued = Issued::default();
    issued.insert(&a, "a", ROWS);
    issued.select(&a);
    // The burst's mark reaches a second past its block: the few IDs A issues
    // below, which B never receives, need no new mark.
    issued.run_ahead(&a);
    b.wait_for_replay_of(&a);
    let replicated_mark = mark(&b);
    assert_eq!(replicated_mark, mark(&a));

    // A goes on alone: rows and IDs B never gets, and changes to replicated
    // rows that pg_rewind must undo. Then it crashes.
    b.stop();
    let mut lost = issued;
    lost.insert(&a, "a, never replicated", 1000);
    lost.select(&a);
    a.connect().batch_execute("UPDATE ids SET side = 'a, changed' WHERE id IN (SELECT id FROM ids LIMIT 500)").unwrap();
    assert_eq!(mark(&a), replicated_mark, "A's unreplicated IDs lie below the mark B replayed");
    a.stop_immediate();

    // B takes over, runs further ahead, and checkpoints so that its control
    // file shows the new timeline to pg_rewind.
    b.start();
    b.promote();
    b.wait_until_writable();
    let b_min = assert_takes_over_above(&b, &mut issued, "b");
    assert!(b_min > lost.max, "B's IDs start at {b_min}, not above {} that A issued unreplicated", lost.max);
    issued.run_ahead(&b);
    issued.insert(&b, "b", ROWS);
    issued.select(&b);
    b.connect().batch_execute("CHECKPOINT").unwrap();

    // A rejoins as B's standby.
    rewind_onto(&a, &b, "rwa");
    let rewound: i64 = a.one("SELECT count(*) FROM ids WHERE side IN ('a, never replicated', 'a, changed')");
    assert_eq!(rewound, 0, "pg_rewind undid A's unreplicated changes");
    assert!(a.log().contains("snowflake_id was rewound by pg_rewind"), "{}", a.log());
    assert!(a.data.join("snowflake_id.rewound").exists(), "the rewind is noted");

    // Switch back: B stops cleanly, A takes over again, and refuses until a
    // DBA raises the floor above what it issued before the rewind (which
    // here lies below the mark B replayed).
    b.stop();
    a.promote();
    a.wait_until_writable();
    assert_refuses_as_rewound(&a);
    raise_floor(&a, lost.max);
    let a_min = assert_takes_over_above(&a, &mut issued, "a again");
    assert!(a_min > lost.max, "A's IDs start at {a_min}, not above {} it issued before the rewind", lost.max);
    let timeline: Option<i32> = a.one("SELECT timeline FROM snowflake_status()");
    assert_eq!(timeline, Some(3));
}

/// pg_rewind of `a` onto `b` (as the server user; it first runs crash
/// recovery of `a` in single-user mode), then `a` started as `b`'s standby
/// and caught up. pg_rewind copies `b`'s configuration over `a`'s: `a` gets
/// back its own port and socket directory.
fn rewind_onto(a: &Cluster, b: &Cluster, name: &str) {
    let source = format!("host=127.0.0.1 port={} user=postgres dbname=postgres", b.port);
    let out = a.run("pg_rewind", &["--target-pgdata", a.data.to_str().unwrap(), "--source-server", &source]);
    assert!(
        out.status.success(),
        "pg_rewind: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    a.append_conf(&format!(
        "\n# {name} after pg_rewind\nport = {}\nunix_socket_directories = '{}'\n{}\n",
        a.port,
        a.dir.display(),
        streams_from(b, name)
    ));
    a.write_data_file("standby.signal", b"");
    a.start();
    a.wait_for_replay_of(b);
}

/// A call for an ID on `c` fails as a rewound server's must: 55000, and a
/// detail that names pg_rewind.
fn assert_refuses_as_rewound(c: &Cluster) {
    let e = c.connect().query_one("SELECT snowflake_next_id()", &[]).expect_err("a rewound server issued an ID");
    let e = e.as_db_error().unwrap_or_else(|| panic!("not a server error: {e}"));
    assert_eq!(e.code().code(), "55000", "{e:?}");
    assert!(e.detail().is_some_and(|d| d.contains("pg_rewind")), "{e:?}");
    assert!(e.hint().is_some_and(|h| h.contains("snowflake_raise_floor")), "{e:?}");
    let refused: i64 = c.one("SELECT refused_unknown_mark FROM snowflake_status()");
    assert!(refused >= 1);
}

/// A DBA's floor above `id`; the note of the rewind goes with it.
fn raise_floor(c: &Cluster, id: i64) {
    c.connect().query_one("SELECT snowflake_raise_floor($1)", &[&id]).unwrap_or_else(|e| panic!("{:?}", db_error(&e)));
    assert!(!c.data.join("snowflake_id.rewound").exists(), "the floor covers the rewind: its note is gone");
}

#[test]
fn an_old_primary_that_ran_ahead_alone_then_was_rewound_issues_nothing_below_until_a_floor_covers_it() {
    // The operational review's case: A, cut off, hands out IDs far ahead of
    // every clock (a clock running ahead does the same), B never hears of
    // them, and pg_rewind takes their marks away with A's timeline. A and B
    // have numbers of their own.
    let a = Cluster::new("rwra", &[SETTINGS[0], SETTINGS[1], "wal_log_hints = on", "wal_keep_size = '1GB'"]);
    a.start();
    a.session().batch_execute(TABLE).unwrap();
    let b = Cluster::standby_of(&a, "rwrb", &["snowflake_id.worker_id = 2"]);
    b.start();
    let mut issued = Issued::default();
    issued.insert(&a, "a", ROWS);
    b.wait_for_replay_of(&a);

    b.stop();
    let mut lost = issued;
    lost.insert(&a, "a alone", 100);
    lost.run_ahead(&a);
    a.stop_immediate();

    b.start();
    b.promote();
    b.wait_until_writable();
    // B's own number: its IDs need not pass A's lost ones, only its lineage's.
    let b_ids: i64 = b.one("SELECT count(*) FROM (SELECT snowflake_next_id() FROM generate_series(1, 1000)) AS n");
    assert_eq!(b_ids, 1000);
    b.connect().batch_execute("CHECKPOINT").unwrap();

    // pg_rewind copied B's configuration, worker 2 among it: the start says
    // so. A gets its own number back only after.
    rewind_onto(&a, &b, "rwra");
    assert!(a.log().contains("That is the number of the server it was rewound from"), "{}", a.log());
    a.append_conf("snowflake_id.worker_id = 1\n");
    // The note outlives restarts (and the standby's own state file writes).
    a.stop();
    a.start();
    a.wait_for_replay_of(&b);
    let status: String =
        a.one("SELECT format('%s %s', high_water_mark IS NOT NULL, mark_unknown) FROM snowflake_status()");
    assert_eq!(status, "t pg_rewind", "a rewound standby shows why it would refuse, and its primary's mark");

    b.stop();
    a.promote();
    a.wait_until_writable();
    assert_refuses_as_rewound(&a);
    // A sequence registered now raises the floor to its own value, which
    // says nothing of the IDs A issued alone: the refusal stays.
    // (Its value lies ahead of the clock, so that registering raises the floor.)
    a.connect()
        .batch_execute(
            "CREATE SEQUENCE s; SELECT setval('s', snowflake_from_timestamp(clock_timestamp() + interval '5 s'));
             SELECT snowflake_sequence_register('s')",
        )
        .unwrap();
    let floored: i64 = a.one("SELECT marks_written FROM snowflake_status()");
    assert!(floored >= 1, "registering raised the floor");
    assert_refuses_as_rewound(&a);
    assert!(a.data.join("snowflake_id.rewound").exists());
    // The DBA finds the largest ID A handed out before (a client, a
    // subscriber) and raises the floor above it.
    raise_floor(&a, lost.max);
    let before = lost.max;
    let (min, _) = lost.insert(&a, "a again", ROWS);
    assert!(min > before, "IDs start at {min}, not above {before} that A issued before the rewind");
    a.stop();
    a.start();
    let after: i64 = a.one("SELECT snowflake_next_id()");
    assert!(after > lost.max, "the floor holds across a restart, and the note no longer refuses");
}

#[test]
fn an_old_primary_rebuilt_from_a_copy_of_the_new_one_issues_nothing_below_until_a_floor_covers_it() {
    // Patroni's reinit instead of pg_rewind: A's data directory replaced by
    // a base backup of B, A's own number set again. B's lineage left that
    // number when B took over.
    let a = Cluster::new("rba", &SETTINGS);
    a.start();
    a.session().batch_execute(TABLE).unwrap();
    let b = Cluster::standby_of(&a, "rbb", &["snowflake_id.worker_id = 2"]);
    b.start();
    let mut issued = Issued::default();
    issued.insert(&a, "a", ROWS);
    b.wait_for_replay_of(&a);
    b.stop();
    let mut lost = issued;
    lost.run_ahead(&a);
    a.stop_immediate();
    b.start();
    b.promote();
    b.wait_until_writable();
    issued.insert(&b, "b", ROWS);
    b.connect().batch_execute("CHECKPOINT").unwrap();

    let rebuilt = Cluster::standby_of(&b, "rba2", &[SETTINGS[1]]);
    rebuilt.start();
    rebuilt.wait_for_replay_of(&b);
    assert!(rebuilt.log().contains("with a number its lineage used and left"), "{}", rebuilt.log());
    let unknown: Option<String> = rebuilt.one("SELECT mark_unknown FROM snowflake_status()");
    assert_eq!(unknown.as_deref(), Some("pg_rewind"));
    // A copy given a number of its own is no rebuild: it may generate.
    let fresh = Cluster::standby_of(&b, "rbc", &["snowflake_id.worker_id = 3"]);
    fresh.start();
    fresh.wait_for_replay_of(&b);
    let unknown: Option<String> = fresh.one("SELECT mark_unknown FROM snowflake_status()");
    assert_eq!(unknown, None);

    b.stop();
    rebuilt.promote();
    rebuilt.wait_until_writable();
    assert_refuses_as_rewound(&rebuilt);
    raise_floor(&rebuilt, lost.max);
    let before = lost.max;
    let (min, _) = lost.insert(&rebuilt, "a rebuilt", ROWS);
    assert!(min > before, "IDs start at {min}, not above {before} that A issued before it was rebuilt");
}

#[test]
fn a_standby_whose_copy_left_out_the_state_file_shows_it_before_a_failover() {
    // A base backup without snowflake_id.state (a backup tool's exclusion),
    // the note kept: the standby would refuse once promoted, and says so
    // while the primary is idle; the primary's next mark ends it.
    let a = Cluster::new("nostatea", &SETTINGS);
    a.start();
    a.session().batch_execute(TABLE).unwrap();
    let mut issued = Issued::default();
    issued.insert(&a, "a", ROWS);
    let b = Cluster::base_backup_of(&a, "nostateb");
    assert!(b.remove_data_file_if_there("snowflake_id.state"));
    b.append_conf(&format!("snowflake_id.worker_id = 2\n{}\n", streams_from(&a, "nostateb")));
    b.write_data_file("standby.signal", b"");
    b.start();
    b.wait_for_replay_of(&a);
    let unknown: Option<String> = b.one("SELECT mark_unknown FROM snowflake_status()");
    assert_eq!(unknown.as_deref(), Some("missing"), "{}", b.log());
    issued.run_ahead(&a);
    b.wait_for_replay_of(&a);
    let unknown: Option<String> = b.one("SELECT mark_unknown FROM snowflake_status()");
    assert_eq!(unknown, None, "a replayed mark ends it");
}

#[test]
fn a_cascading_standby_follows_across_a_timeline_switch() {
    let a = Cluster::new("cascadea", &SETTINGS);
    a.start();
    a.session().batch_execute(TABLE).unwrap();
    let b = Cluster::standby_of(&a, "cascadeb", &[]);
    b.start();
    // C's base backup comes from B, and C streams from B.
    let c = Cluster::standby_of(&b, "cascadec", &[]);
    c.start();

    let mut issued = Issued::default();
    issued.insert(&a, "a", ROWS);
    issued.run_ahead(&a);
    issued.insert(&a, "a", ROWS);
    issued.select(&a);
    c.wait_for_replay_of(&a);
    assert_eq!(mark(&c), mark(&a), "the cascading standby replayed A's mark through B");

    // A fails; B takes over on timeline 2 and runs further ahead.
    a.stop_immediate();
    b.promote();
    b.wait_until_writable();
    assert_takes_over_above(&b, &mut issued, "b");
    issued.run_ahead(&b);
    issued.insert(&b, "b", ROWS);
    issued.select(&b);

    // C follows B onto the new timeline and replays B's marks.
    c.wait_for_replay_of(&b);
    assert_eq!(mark(&c), mark(&b), "the cascading standby replayed B's mark");
    let on_timeline_2: i32 = c.one("SELECT received_tli FROM pg_stat_wal_receiver");
    assert_eq!(on_timeline_2, 2);

    // B fails too; C takes over on timeline 3.
    b.stop_immediate();
    c.promote();
    c.wait_until_writable();
    assert_takes_over_above(&c, &mut issued, "c");
    let timeline: Option<i32> = c.one("SELECT timeline FROM snowflake_status()");
    assert_eq!(timeline, Some(3));
}
