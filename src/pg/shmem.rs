//! The generator in shared memory, behind one LWLock, the lock that
//! serialises writing its marks, and the guard's record of node owners and
//! clashes behind a third.
//!
//! Every backend (parallel workers included) of the server shares one
//! generator, so two backends never issue the same ID. What the segment
//! starts with is decided by [`super::startup`], which owns the shared memory
//! hooks and calls [`request`] and [`create`].
//!
//! # Locking rules
//! - The state lock ([`lock`] for writing, [`read`] for reading) protects
//!   [`State`]. It is held for a
//!   few integer operations: never across I/O, a sleep, or a report to the
//!   client or the log, and no PostgreSQL function that can raise an ERROR is
//!   called while it is held.
//! - The mark writer lock ([`MarkWriter`]) is held while one mark is made
//!   durable (the state file, then WAL), so that marks reach the file in
//!   order; never across a wait for synchronous standbys, nor a report sent
//!   to a client (a LOG for the server log only is fine). It is taken before
//!   the state lock, never while holding it. A renewal takes it only when it
//!   is free ([`MarkWriter::try_acquire`]): it never queues behind a write.
//! - The guard lock ([`guard`]) protects [`GuardState`], for one table lookup
//!   or one clash record at a time; it is never held with either other lock,
//!   nor across a report.
//! - All are released by their guards' `Drop`, also when an error unwinds,
//!   and by PostgreSQL itself when a process exits or aborts a transaction.
//! - The refusal counters ([`count_refusal`]) are atomics, counted without a
//!   lock: refusals are counted on their way to an ERROR, also from the log
//!   hook, where no lock may be taken.
//! - One value is read without a lock: the generator's count of clock step
//!   backs, which an exclusive holder ([`StateGuard`]) publishes before it
//!   releases the lock, when the count changed ([`step_backs_published`]).
//!   The hot path reads it before the clock, so that a reading taken before
//!   the lock is declined if a step back was counted after it was taken. A
//!   release by PostgreSQL on abort publishes nothing: the value lags, which
//!   only makes the hot path decline until the next exclusive holder's release.

use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use pgrx::prelude::*;
use pgrx::PgLogLevel;

use super::clock;
use super::error::{self, Raise};
use super::ffi;
use super::settings;
use crate::snowflake::claims::Claims;
use crate::snowflake::codec::Node;
use crate::snowflake::generator::{EarlyReading, Generator, Mark};
use crate::snowflake::guard::Owners;
use crate::snowflake::time::{TimeBase, UnixMillis};

/// Log a clock step back at most this often.
const WARNING_INTERVAL_MS: u64 = 60_000;

const NAME: &std::ffi::CStr = c"snowflake_id";

/// Why this server does not know a mark it can continue from; generating is
/// refused until it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unknown {
    /// pg_upgrade made the data directory, and the old cluster's state file
    /// was not brought over.
    Upgrade,
    /// The mark was made under other ID settings (layout, epoch, tick or
    /// node) and cannot be carried to this server's; on a standby, a
    /// replayed mark it can carry ends this, and a floor ends it anywhere.
    OtherSettings,
    /// The settings changed, and IDs of the new ones pass those already
    /// issued only from this instant on (less a mark's window): calls
    /// succeed from then on.
    NotBefore(UnixMillis),
    /// The state file could not be read, or contradicts its own layout; a
    /// floor ends this.
    Unreadable,
    /// The state file was not there, in a data directory that issued IDs
    /// before; a replayed mark or a floor ends this.
    Missing,
    /// pg_rewind took away the marks of the IDs this server issued on the
    /// timeline it left (see [`super::rewind`]); `Some` instant it was first
    /// seen, if its note says. The mark it replays is known and kept, but
    /// covers other servers' IDs only: a floor ends this, nothing else.
    Rewound(Option<UnixMillis>),
}

impl Unknown {
    /// Whether this still stops a call at the wall-clock instant `now`.
    pub fn refuses_at(self, now: UnixMillis) -> bool {
        !matches!(self, Unknown::NotBefore(from) if now.0 >= from.0)
    }

    /// The reason as `snowflake_status().mark_unknown` and the exporter's
    /// `reason` label show it.
    pub fn name(self) -> &'static str {
        match self {
            Unknown::Upgrade => "pg_upgrade",
            Unknown::OtherSettings => "other_settings",
            Unknown::NotBefore(_) => "settings_changed",
            Unknown::Unreadable => "unreadable",
            Unknown::Missing => "missing",
            Unknown::Rewound(_) => "pg_rewind",
        }
    }

    /// Whether the mark is known all the same, and recorded and raised as
    /// usual: what is unknown lies beside it (a settings change waiting for
    /// its instant, IDs a rewind took the marks of).
    pub fn keeps_mark(self) -> bool {
        matches!(self, Unknown::NotBefore(_) | Unknown::Rewound(_))
    }
}

/// The generator state every backend shares.
#[derive(Clone, Copy)]
pub struct State {
    pub generator: Generator,
    pub unknown: Option<Unknown>,
    /// With `worker_id = auto`, no ID may be issued before this server
    /// checks that it holds a claim of its own on its timeline, or claims a
    /// number ([`super::super::claim`]): true from start (and on a standby,
    /// until a claim after its promotion).
    pub claim_pending: bool,
    /// The node the generator's IDs and marks carry: the number set, the one
    /// claimed, or on an auto server that has no claim yet, the one of the
    /// lineage's marks it follows.
    pub node: Node,
    /// The node numbers this server's lineage used.
    pub claims: Claims,
    /// The ID space the generator's mark belongs to (see the state file).
    pub id_space: u32,
    /// The end of the WAL record of the durable mark this server wrote last
    /// (0 when it resumed or replayed one since): what a session waits for
    /// synchronous standbys to confirm before it hands out IDs below the mark.
    pub mark_lsn: u64,
    /// Time spent making marks durable, for snowflake_status().
    pub wal_micros: u64,
    pub file_micros: u64,
    /// Whether the last mark this server tried to make durable failed: a
    /// run of failures is reported once.
    pub failing: bool,
    /// Marks this server failed to make durable, for snowflake_status().
    pub mark_write_failures: u64,
    /// Step backs already reported in the log, and when the last report was.
    reported_step_backs: u64,
    last_report: UnixMillis,
}

/// What a state file records besides its mark: the ID space, the node its
/// mark is made with, and the lineage's node numbers.
#[derive(Clone, Copy)]
pub struct Lineage {
    pub id_space: u32,
    pub node: Node,
    pub claims: Claims,
}

/// A mark made durable: how long that took, in microseconds, and where its
/// WAL record ends.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteTimes {
    pub wal_micros: u64,
    pub file_micros: u64,
    pub lsn: u64,
}

/// A clock step back to put in the server log.
pub struct StepBackReport {
    pub step_backs: u64,
    pub last_step_back_ms: u64,
}

impl State {
    pub fn new(generator: Generator, unknown: Option<Unknown>, lineage: Lineage) -> State {
        State {
            generator,
            unknown,
            claim_pending: settings::config().auto_worker,
            node: lineage.node,
            claims: lineage.claims,
            id_space: lineage.id_space,
            mark_lsn: 0,
            wal_micros: 0,
            file_micros: 0,
            failing: false,
            mark_write_failures: 0,
            reported_step_backs: 0,
            last_report: UnixMillis(i64::MIN),
        }
    }

    /// What the state file records besides the mark.
    pub fn lineage(&self) -> Lineage {
        Lineage { id_space: self.id_space, node: self.node, claims: self.claims }
    }

    /// Records a mark made durable, and how long that took.
    pub fn mark_written(&mut self, mark: Mark, times: WriteTimes) {
        self.generator.mark_written(mark);
        self.mark_lsn = times.lsn;
        self.wal_micros += times.wal_micros;
        self.file_micros += times.file_micros;
    }

    /// Notes that the mark cannot be used, and returns what was unknown
    /// before; a rewind's refusal stays, since only a floor ends it.
    pub fn set_unknown(&mut self, why: Unknown) -> Option<Unknown> {
        match self.unknown {
            Some(Unknown::Rewound(_)) => self.unknown,
            before => {
                self.unknown = Some(why);
                before
            }
        }
    }

    /// Records a floor made durable: it is the floor now, whatever was
    /// unknown before, but for a settings change waiting for its instant
    /// (the floor does not bring it nearer) and a rewind's refusal unless
    /// `ends_rewind` (a DBA's own floor: a sequence's value says nothing of
    /// the IDs a rewind took the marks of). Returns whether it ended a
    /// rewind's refusal.
    pub fn floor_written(&mut self, floor: Mark, times: WriteTimes, ends_rewind: bool) -> bool {
        self.generator.floor_written(floor);
        self.mark_lsn = times.lsn;
        let rewound = matches!(self.unknown, Some(Unknown::Rewound(_)));
        let stays = match self.unknown {
            Some(Unknown::NotBefore(_)) => true,
            Some(Unknown::Rewound(_)) => !ends_rewind,
            _ => false,
        };
        if !stays {
            self.unknown = None;
        }
        self.failing = false;
        self.wal_micros += times.wal_micros;
        self.file_micros += times.file_micros;
        rewound && ends_rewind
    }

    /// Whether a clock step back awaits its report (then every call takes
    /// the general path, which makes it when a minute has passed since the last).
    #[inline]
    pub fn step_back_unreported(&self) -> bool {
        self.generator.stats().clock_step_backs != self.reported_step_backs
    }

    /// A report when the clock went back since the last one, at most one a minute.
    #[inline]
    pub fn take_step_back_report(&mut self, now: UnixMillis) -> Option<StepBackReport> {
        if !self.step_back_unreported() {
            return None;
        }
        let stats = self.generator.stats();
        if self.last_report.0.abs_diff(now.0) < WARNING_INTERVAL_MS {
            return None;
        }
        let report = StepBackReport {
            step_backs: stats.clock_step_backs - self.reported_step_backs,
            last_step_back_ms: settings::config().codec.time.ms_in(stats.last_step_back),
        };
        self.reported_step_backs = stats.clock_step_backs;
        self.last_report = now;
        Some(report)
    }
}

/// Why a call was refused, for snowflake_status()'s counters (docs/monitoring.md
/// gives each one's SQLSTATE); in the order of its columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `snowflake_id.max_wait` passed waiting for the clock.
    MaxWait,
    /// The mark an ID needed could not be made durable.
    MarkNotDurable,
    /// The high-water mark is unknown (pg_upgrade, a lost state file,
    /// other settings).
    UnknownMark,
    /// The server is in recovery.
    Recovery,
    /// The wait for synchronous standbys to have the mark was cancelled.
    StandbyWait,
    /// The clock is before the epoch.
    BeforeEpoch,
    /// The layout's time range or clock_back field is used up.
    Exhausted,
    /// The guard stopped an applied row that proves a clash.
    Guard,
    /// A registered sequence's fence stopped a native value.
    SequenceFence,
    /// `worker_id = auto` found no worker number free to claim.
    NoWorker,
}

impl Refused {
    pub const ALL: [Refused; 10] = [
        Refused::MaxWait,
        Refused::MarkNotDurable,
        Refused::UnknownMark,
        Refused::Recovery,
        Refused::StandbyWait,
        Refused::BeforeEpoch,
        Refused::Exhausted,
        Refused::Guard,
        Refused::SequenceFence,
        Refused::NoWorker,
    ];
}

/// The longest clash report kept for snowflake_status(), in bytes.
const LAST_CLASH_LEN: usize = 1024;

/// What the guard keeps: the first origin of each node, and the clashes.
pub struct GuardState {
    pub owners: Owners,
    /// Rows that proved a clash since the server started: what pages.
    pub clashes: u64,
    /// Rows stored as evidence without proof (a table re-seeded from its own
    /// rows, a provider reached through two subscriptions): counted apart,
    /// since a healthy server has them.
    pub evidence: u64,
    last_clash: [u8; LAST_CLASH_LEN],
    last_clash_len: usize,
    last_clash_at: UnixMillis,
}

impl GuardState {
    fn new() -> GuardState {
        GuardState {
            owners: Owners::default(),
            clashes: 0,
            evidence: 0,
            last_clash: [0; LAST_CLASH_LEN],
            last_clash_len: 0,
            last_clash_at: UnixMillis(0),
        }
    }

    /// Counts a finding; a proven clash's report is kept (cut at a character
    /// boundary), evidence's goes to the log only.
    pub fn record(&mut self, report: &str, at: UnixMillis, proven: bool) {
        if !proven {
            self.evidence += 1;
            return;
        }
        let mut len = report.len().min(LAST_CLASH_LEN);
        while !report.is_char_boundary(len) {
            len -= 1;
        }
        self.last_clash[..len].copy_from_slice(&report.as_bytes()[..len]);
        self.last_clash_len = len;
        self.last_clash_at = at;
        self.clashes += 1;
    }

    /// The last clash's report and when it was found.
    pub fn last(&self) -> Option<(String, UnixMillis)> {
        (self.clashes > 0).then(|| {
            (String::from_utf8_lossy(&self.last_clash[..self.last_clash_len]).into_owned(), self.last_clash_at)
        })
    }
}

/// What lives in shared memory: the locks and the state they protect.
#[repr(C)]
struct Segment {
    /// Protects `state`.
    lock: *mut pg_sys::LWLock,
    /// Held while a mark is made durable.
    writer: *mut pg_sys::LWLock,
    /// Protects `guard`.
    guard_lock: *mut pg_sys::LWLock,
    /// `state.generator.stats().clock_step_backs` as of the last release of
    /// the state lock by a [`StateGuard`] (see the locking rules): written
    /// only under the lock, read without it. Never above the count, which
    /// only grows while the segment lives.
    step_backs: AtomicU64,
    /// Refused calls by [`Refused`] reason; only ever incremented.
    refusals: [AtomicU64; Refused::ALL.len()],
    state: State,
    guard: GuardState,
}

/// This process's pointer to the segment; set by [`create`] in the postmaster
/// (and inherited by every backend it forks). Only the postmaster's main
/// thread writes it, before any backend exists.
static mut SEGMENT: *mut Segment = ptr::null_mut();

#[inline]
fn segment() -> *mut Segment {
    // SAFETY: written only by the postmaster before forking; read-only after.
    let segment = unsafe { SEGMENT };
    assert!(!segment.is_null(), "snowflake_id shared memory is initialised at server start");
    segment
}

/// Asks for the segment and its three locks. From the shmem request hook.
pub fn request() {
    // SAFETY: called from the shmem request hook, where such requests belong.
    unsafe {
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Segment>());
        pg_sys::RequestNamedLWLockTranche(NAME.as_ptr(), 3);
    }
}

/// Creates the segment holding `state`, or attaches to it if it exists. From
/// the shmem startup hook, in the postmaster: at server start and after every
/// crash re-initialisation, when shared memory is new again.
pub fn create(state: State) {
    let init_lock = addin_shmem_init_lock();
    // SAFETY: the startup hook runs in the postmaster with shared memory
    // being set up; ShmemInitStruct returns memory of the requested size,
    // and the tranche has the three locks requested in `request`.
    unsafe {
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let segment =
            pg_sys::ShmemInitStruct(NAME.as_ptr(), std::mem::size_of::<Segment>(), &mut found).cast::<Segment>();
        if !found {
            let locks = pg_sys::GetNamedLWLockTranche(NAME.as_ptr());
            let lock = &raw mut (*locks).lock;
            let writer = &raw mut (*locks.add(1)).lock;
            let guard_lock = &raw mut (*locks.add(2)).lock;
            let step_backs = AtomicU64::new(state.generator.stats().clock_step_backs);
            segment.write(Segment {
                lock,
                writer,
                guard_lock,
                step_backs,
                refusals: Default::default(),
                state,
                guard: GuardState::new(),
            });
        }
        SEGMENT = segment;
        pg_sys::LWLockRelease(init_lock);
    }
}

/// `AddinShmemInitLock`'s slot among PostgreSQL's individual LWLocks. It is
/// a C macro (`&MainLWLockArray[21].lock`), so bindings do not have it.
const ADDIN_SHMEM_INIT_LOCK: u16 = 21;

/// `AddinShmemInitLock`, after checking by its name that the slot is the
/// one this build of PostgreSQL gives it: a version that moved it stops the
/// server here rather than taking another lock.
fn addin_shmem_init_lock() -> *mut pg_sys::LWLock {
    // SAFETY: looks the name up in a static table; no shared memory needed.
    let name = unsafe { pg_sys::GetLWLockIdentifier(pg_sys::PG_WAIT_LWLOCK, ADDIN_SHMEM_INIT_LOCK) };
    // SAFETY: a static C string, or NULL.
    let name = (!name.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(name) });
    if name != Some(c"AddinShmemInit") {
        error::new(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("snowflake_id expects AddinShmemInitLock at LWLock {ADDIN_SHMEM_INIT_LOCK}, where this server has {name:?}"),
        )
        .set_hint("This build of snowflake_id does not fit this PostgreSQL version: install the one built for it.")
        .raise(PgLogLevel::FATAL);
    }
    // SAFETY: the individual LWLocks are set up before any shmem startup hook runs.
    unsafe { &raw mut (*pg_sys::MainLWLockArray.add(usize::from(ADDIN_SHMEM_INIT_LOCK))).lock }
}

/// The state without its lock, for the postmaster once every other process
/// is gone (it holds no PGPROC and cannot take an LWLock).
pub fn unlocked_in_postmaster() -> Option<State> {
    // SAFETY: see `segment`.
    let segment = unsafe { SEGMENT };
    // SAFETY: not null, so the segment `create` set up; no process but the
    // postmaster is left to write it.
    (!segment.is_null()).then(|| unsafe { (*segment).state })
}

/// The state lock, held in some mode; released when dropped.
struct Held {
    segment: *mut Segment,
}

impl Held {
    #[inline]
    fn acquire(mode: pg_sys::LWLockMode::Type) -> Held {
        Held::try_acquire(mode).expect("snowflake_id shared memory is initialised at server start")
    }

    /// The lock, or `None` in a process without the segment. Never panics.
    #[inline]
    fn try_acquire(mode: pg_sys::LWLockMode::Type) -> Option<Held> {
        // SAFETY: see `segment`.
        let segment = unsafe { SEGMENT };
        if segment.is_null() {
            return None;
        }
        // SAFETY: the lock was initialised with the segment; backends have a
        // PGPROC; the layer holds at most two LWLocks.
        unsafe { ffi::lwlock_acquire((*segment).lock, mode) };
        Some(Held { segment })
    }

    #[inline]
    fn state(&self) -> *mut State {
        // SAFETY: the segment is initialised; taking the field's address reads nothing.
        unsafe { &raw mut (*self.segment).state }
    }
}

impl Drop for Held {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock. Also runs when a Rust panic
        // unwinds out of the locked section.
        unsafe { ffi::lwlock_release((*self.segment).lock) };
    }
}

/// The shared state, locked exclusively; released when dropped.
pub struct StateGuard(Held);

impl Drop for StateGuard {
    /// Publishes the count of clock step backs if it changed, before the lock
    /// is released (the field `Held` drops after this).
    #[inline]
    fn drop(&mut self) {
        let count = self.generator.stats().clock_step_backs;
        // SAFETY: the segment is initialised; this guard holds the state lock.
        let published = unsafe { &(*self.0.segment).step_backs };
        // Written only when it changed, so that the line it lies on is not
        // written at every release: every call reads it, on every core.
        if published.load(Ordering::Relaxed) != count {
            published.store(count, Ordering::Release);
        }
    }
}

/// The shared state, locked for reading; released when dropped.
pub struct ReadGuard(Held);

impl std::ops::Deref for StateGuard {
    type Target = State;
    #[inline]
    fn deref(&self) -> &State {
        // SAFETY: this guard holds the state lock.
        unsafe { &*self.0.state() }
    }
}

impl std::ops::DerefMut for StateGuard {
    #[inline]
    fn deref_mut(&mut self) -> &mut State {
        // SAFETY: this guard holds the state lock exclusively.
        unsafe { &mut *self.0.state() }
    }
}

impl std::ops::Deref for ReadGuard {
    type Target = State;
    #[inline]
    fn deref(&self) -> &State {
        // SAFETY: this guard holds the state lock (shared: others only read too).
        unsafe { &*self.0.state() }
    }
}

/// The state, exclusively.
#[inline]
pub fn lock() -> StateGuard {
    StateGuard(Held::acquire(pg_sys::LWLockMode::LW_EXCLUSIVE))
}

/// The state, exclusively, or `None` in a process without the segment (the
/// library was not preloaded): [`lock`] without its assertion, for the hot
/// path, which runs outside a panic guard.
#[inline]
pub fn try_lock() -> Option<StateGuard> {
    Held::try_acquire(pg_sys::LWLockMode::LW_EXCLUSIVE).map(StateGuard)
}

/// The count of clock step backs last published by a holder of the state
/// lock, or `None` in a process without the segment. Never higher than the
/// generator's count at the time of the read (the count only grows while the
/// segment lives), and read before what follows it: a clock read after it is
/// later than every step back counted in it.
#[inline]
pub fn step_backs_published() -> Option<u64> {
    // SAFETY: see `segment`.
    let segment = unsafe { SEGMENT };
    // SAFETY: not null, so initialised by `create`; the field is atomic.
    (!segment.is_null()).then(|| unsafe { (*segment).step_backs.load(Ordering::Acquire) })
}

/// A clock reading, in ticks of `time`, for the generator's quick path to
/// take before its lock ([`Generator::reserve_one_early`]); `None` in a
/// process without the shared segment.
///
/// The order is what makes it safe: the count of step backs is loaded
/// (Acquire) before the clock is read, so every step back counted after the
/// reading was taken is missing from it, and the generator declines it. The
/// load cannot move past the call; that the vDSO's reading of the clock
/// does not come before the load is the kernel's to keep (an ordered TSC
/// read on x86-64, an `isb` on arm64).
///
/// [`Generator::reserve_one_early`]: crate::snowflake::generator::Generator::reserve_one_early
#[inline(always)]
pub fn early_reading(time: TimeBase) -> Option<EarlyReading> {
    let step_backs_before = step_backs_published()?;
    Some(EarlyReading { now: time.tick_of(clock::now()), step_backs_before })
}

/// Counts a refused call, on its way to its ERROR; nothing in a process
/// without the segment. Takes no lock and never raises.
pub fn count_refusal(why: Refused) {
    // SAFETY: see `segment`.
    let segment = unsafe { SEGMENT };
    if !segment.is_null() {
        // SAFETY: initialised by `create`; the counters are atomic.
        unsafe { (*segment).refusals[why as usize].fetch_add(1, Ordering::Relaxed) };
    }
}

/// The refusal counters, in the order of [`Refused::ALL`].
pub fn refusals() -> [u64; Refused::ALL.len()] {
    // SAFETY: the segment is initialised (see `segment`); the counters are atomic.
    let counters = unsafe { &(*segment()).refusals };
    std::array::from_fn(|i| counters[i].load(Ordering::Relaxed))
}

/// The state, to read.
pub fn read() -> ReadGuard {
    ReadGuard(Held::acquire(pg_sys::LWLockMode::LW_SHARED))
}

/// The right to make a mark durable; released when dropped, also when an
/// error unwinds through the write (and by PostgreSQL itself at process exit).
pub struct MarkWriter {
    lock: *mut pg_sys::LWLock,
}

impl MarkWriter {
    pub fn acquire() -> MarkWriter {
        // SAFETY: the segment is initialised (see `segment`).
        let lock = unsafe { (*segment()).writer };
        // SAFETY: as for the state lock; taken before it, never while holding it.
        unsafe { ffi::lwlock_acquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        MarkWriter { lock }
    }

    /// The right to write, if no other process is writing a mark now.
    pub fn try_acquire() -> Option<MarkWriter> {
        // SAFETY: the segment is initialised (see `segment`).
        let lock = unsafe { (*segment()).writer };
        // SAFETY: as in `acquire`.
        unsafe { ffi::lwlock_try_acquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE) }.then_some(MarkWriter { lock })
    }
}

impl Drop for MarkWriter {
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock.
        unsafe { ffi::lwlock_release(self.lock) };
    }
}

/// The guard's state, exclusively; released when dropped.
pub struct GuardLock {
    segment: *mut Segment,
}

/// The guard's state, locked.
pub fn guard() -> GuardLock {
    let segment = segment();
    // SAFETY: as for the state lock; never taken with another of ours.
    unsafe { ffi::lwlock_acquire((*segment).guard_lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
    GuardLock { segment }
}

impl std::ops::Deref for GuardLock {
    type Target = GuardState;
    fn deref(&self) -> &GuardState {
        // SAFETY: this guard holds the guard lock.
        unsafe { &(*self.segment).guard }
    }
}

impl std::ops::DerefMut for GuardLock {
    fn deref_mut(&mut self) -> &mut GuardState {
        // SAFETY: this guard holds the guard lock exclusively.
        unsafe { &mut (*self.segment).guard }
    }
}

impl Drop for GuardLock {
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock.
        unsafe { ffi::lwlock_release((*self.segment).guard_lock) };
    }
}
