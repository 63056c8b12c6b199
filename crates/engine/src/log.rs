//! The write-ahead log: appends records to the active segment, rotates
//! segments, and makes writes durable according to the [`Durability`] mode.
//!
//! Threads: any writer thread calls [`Log::append`] (with its partition lock
//! held) and later [`Log::commit`]; one sync thread, started by the engine
//! as a batch thread (see [`run_as_batch`](crate::scheduling::run_as_batch)),
//! runs [`Log::sync_loop`]. Under `Always` it is an ordinary thread while
//! it syncs a group ([`as_ordinary`](crate::scheduling::as_ordinary)).
//! Appends go to an in-memory buffer under the log lock (O(record) work)
//! and are `fdatasync`ed by the sync thread.
//!
//! Handing records to the OS: the sync thread keeps the active segment's
//! blocks reserved up to [`RESERVE_AHEAD`] past its end
//! ([`FsFile::allocate`](crate::fs::FsFile::allocate), which writes zeros:
//! too slow for the append path, and what keeps each later `fdatasync` to
//! the data alone). Under `EverySec` and `None` an append inside the
//! reserved part is copied to the file at once, through a shared mapping
//! with no system call, so it survives `kill -9` before it is even
//! committed; where blocks cannot be reserved, the buffer is written with
//! one `pwrite` by whoever commits first, or by the sync thread. Under
//! `Always` nothing is acknowledged before a sync, so the request path
//! normally writes nothing (only past [`BUFFER_BYTES_SOFT_MAX`] of unwritten
//! records, or to retry a failed write): the sync thread writes each group
//! with one `pwrite` just before its `fdatasync` (having let the group fill
//! while the host's request threads were busy, see [`Log::fill_group`]),
//! and the log is not mapped, since every `fdatasync` would make the
//! mapped pages read-only again (see
//! [`FsFile::map_reserved_writes`](crate::fs::FsFile::map_reserved_writes)).
//! The reserved tail of the active segment is zeros, which recovery tells
//! apart from a torn write; sealing a segment cuts it off.
//!
//! Positions are log sequence numbers: `segment_id << 32 | offset`, so they
//! grow across segments. Invariants: `synced <= written <= end` of the log.
//!
//! Failure: a failed `write` keeps the buffer, so the next commit retries it
//! (a `pwrite` at the same offset is idempotent); under `Always` the sync
//! thread retries it too, every [`WRITE_RETRY_PAUSE`], and still syncs what
//! was written before it. A failed `fdatasync` is
//! sticky: the engine cannot know which pages reached the disk, so every
//! later commit of a write not synced before the failure fails, and the
//! synced position stays where it was, until [`Log::heal`] has rewritten
//! the records since the last good sync, which the buffer keeps until they
//! are synced, to a new segment and cut the old one back (or the engine is
//! reopened). A marker file names the unsure bytes meanwhile, for the next
//! open should the process stop first (see [`crate::unsynced`]).

use crate::config::Durability;
use crate::error::{Error, Result};
use crate::fs::{join, temporary_path, Fs};
use crate::idle::IdleSignal;
use crate::record::{self, Kind};
use crate::segment::{self, Origin, Segment, SegmentHeader};
use crate::stats::Counters;
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Past this many buffered bytes an append writes the buffer out itself.
const BUFFER_BYTES_SOFT_MAX: usize = 1 << 20;
/// Past this many buffered bytes (writes keep failing) appends are refused.
const BUFFER_BYTES_HARD_MAX: usize = 256 << 20;
/// Past this many written but unsynced bytes, an append asks for a sync
/// early, bounding what is kept for [`Log::heal`]: the records since the
/// last good sync, which heal writes again to a new segment after a failed
/// one. Under `none` too, where nothing else would bound it (the marks
/// before the segment's limit, [`PRESYNC_AHEAD`], usually come first: with
/// 64 MiB segments about 48 MiB is kept at most, with the default 32 MiB
/// about 16 MiB); there every append past
/// this asks for the active segment's sync, unless writes are failing.
const UNSYNCED_BYTES_SOFT_MAX: usize = 64 << 20;
/// Address space the buffer reserves when the log opens: what it holds
/// between syncs stays below this in normal running (appends ask for a sync
/// at [`UNSYNCED_BYTES_SOFT_MAX`]), so it never moves. Grown on demand
/// instead, by doubling, each step copied the buffer under the log lock
/// into memory the kernel had to zero first: with 13 MB buffered under
/// 95k sets a second, 70-100 ms during which every append waited (the
/// longest waits of the sustained-write benchmark; see
/// benchmarks/HISTORY.md, "The log buffer's growth"). Reserved address
/// space costs no memory until written, and pages once written are reused
/// from the front after every sync, so the kernel zeroes each page once.
/// Only a sync that falls far behind (a stalling disk) makes it outgrow
/// the reservation, and move, under the lock.
const BUFFER_RESERVED_BYTES: usize = 2 * UNSYNCED_BYTES_SOFT_MAX;
/// How far before the active segment's size limit an append asks for a
/// sync, at each of these distances. The rotation that seals the segment
/// syncs it under the log lock, and every append waits meanwhile: that
/// sync then finds at most the last of these distances' bytes unsynced,
/// instead of whatever was written since the last sync (in `everysec`,
/// up to a second's worth: tens of milliseconds of syncing under
/// sustained writes; under `none`, the whole segment: 30 ms on average and
/// up to 130 ms per rotation measured under pipelined sets). The last
/// mark at 1 MiB rather than 4 cut that sync from 1.4-2.3 ms to 0.6-0.9 ms
/// per rotation under 120k sets of 100 bytes a second, for one more sync
/// per segment off the lock. Under
/// `everysec` the append asks for an ordinary sync; under `none`, where
/// nothing waits for syncs, for a sync of the active segment that only
/// shortens the rotation's ([`Log::flush_and_sync`]).
const PRESYNC_AHEAD: [u64; 3] = [16 << 20, 4 << 20, 1 << 20];
/// How far past the end of the active segment the sync thread reserves
/// blocks; an append asks it to top up once less than half is left.
const RESERVE_AHEAD: u64 = 8 << 20;
/// Blocks reserved per hold of the log lock: the zeros are written under
/// it, so this bounds how long an append can wait behind them (a `pwrite`
/// of 256 KiB to the page cache: usually well under a millisecond, longer
/// when the kernel throttles writers with too many dirty pages).
const RESERVE_STEP: u64 = 256 << 10;
/// How often the sync thread syncs in `everysec` mode.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// Longest a group commit waits for busy request threads to bring more
/// committers (see [`Log::fill_group`]): it waits no longer than the
/// previous round took, and never longer than this.
const GROUP_WAIT_MAX: Duration = Duration::from_millis(2);
/// How long the sync thread waits before it retries a failed write.
const WRITE_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// A position in the log; a write is durable once the log is synced past
/// its ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
#[must_use = "a write is only acknowledged once its ticket is committed"]
pub struct Ticket(pub(crate) u64);

impl Ticket {
    /// The ticket of an operation that wrote nothing.
    pub const NONE: Ticket = Ticket(0);

    /// The later of two tickets: committing it commits both.
    pub fn max(self, other: Ticket) -> Ticket {
        std::cmp::max_by_key(self, other, |ticket| ticket.0)
    }
}

/// Log sequence number of `offset` in segment `id`.
pub fn lsn(id: u32, offset: u64) -> u64 {
    (u64::from(id) << 32) | offset
}

/// Whether a record from `start` to `end` of a segment whose size limit is
/// `limit` reaches one of the [`PRESYNC_AHEAD`] marks before that limit.
fn presync_due(limit: u64, start: u64, end: u64) -> bool {
    PRESYNC_AHEAD.iter().any(|ahead| {
        let mark = limit.saturating_sub(*ahead);
        start < mark && end >= mark
    })
}

/// Segments by id, shared by the log, readers and the compactor.
pub struct Segments {
    map: parking_lot::RwLock<std::collections::BTreeMap<u32, Arc<Segment>>>,
    next_id: std::sync::atomic::AtomicU32,
}

impl Segments {
    /// An empty registry whose next new segment id is `next_id`.
    pub fn new(next_id: u32) -> Segments {
        Segments {
            map: parking_lot::RwLock::new(Default::default()),
            next_id: std::sync::atomic::AtomicU32::new(next_id),
        }
    }

    /// The segment with this id, if it still exists.
    pub fn get(&self, id: u32) -> Option<Arc<Segment>> {
        self.map.read().get(&id).cloned()
    }

    /// Registers a segment.
    pub fn insert(&self, segment: Arc<Segment>) {
        self.map.write().insert(segment.id, segment);
    }

    /// Forgets a segment (what becomes of its file is up to the caller).
    pub fn remove(&self, id: u32) -> Option<Arc<Segment>> {
        self.map.write().remove(&id)
    }

    /// A snapshot of all segments in id order.
    pub fn all(&self) -> Vec<Arc<Segment>> {
        self.map.read().values().cloned().collect()
    }

    /// Allocates a fresh segment id; fails once every id up to
    /// [`segment::ID_MAX`] is used (ids are never reused).
    pub fn allocate_id(&self) -> Result<u32> {
        self.next_id
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |id| {
                (id <= segment::ID_MAX).then(|| id + 1)
            })
            .map_err(|id| {
                Error::Exhausted(format!(
                    "no segment id left (ids are never reused; the next would be {id})"
                ))
            })
    }
}

/// Creates a new segment file with its header, syncing file and directory
/// in every durability mode: recovery must be able to read the header of
/// every segment whose name survived a power cut. The file is installed
/// whole ([`crate::fs::install`]: made under a temporary name, which
/// recovery deletes, and renamed once its header is synced), so no segment
/// name ever refers to a file without its header, even when another file's
/// directory sync (the compactor's, say) makes a name durable before this
/// creation's own. Segments are created once per `segment_bytes_max`, so
/// the cost is negligible even for `None`.
pub fn create_segment(
    fs: &dyn Fs,
    dir: &std::path::Path,
    header: SegmentHeader,
) -> Result<Arc<Segment>> {
    let name = segment::segment_name(header.id);
    let path = join(dir, &name);
    let installed = crate::fs::install(fs, dir, &name, &header.encode()).and_then(|()| {
        fs.open(&path, true)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))
    });
    let file = match installed {
        Ok(file) => file,
        Err(error) => {
            // Not left for a later directory sync to make durable: under its
            // own name, with its header, it would be the newest log segment
            // at the next open, which would then take the log's real active
            // segment for a sealed one. (If the directory's sync after the
            // rename fails and so does this removal, the disk is failing
            // both ways and the file stays: the next open then takes the
            // log's real active segment for a sealed one and refuses its
            // reserved zeros as damage, rather than lose anything.)
            crate::fs::discard(fs, dir, &[&temporary_path(dir, &name), &path]);
            return Err(error);
        }
    };
    Ok(Arc::new(Segment::new_empty(path, file, header)))
}

struct LogState {
    active: Arc<Segment>,
    /// Logical end of the active segment, buffered bytes included.
    end: u64,
    /// Bytes of the active segment handed to the OS.
    written: u64,
    /// Offset of `buffer[0]` in the active segment: everything before it is
    /// synced.
    base: u64,
    /// Bytes `[base, end)` of the active segment: not yet written, or
    /// written and not yet synced. Kept so that after a failed sync the
    /// records can be written again to a new segment (see [`Log::heal`]).
    buffer: Vec<u8>,
    /// The last write-out error, cleared by the next successful one.
    write_error: Option<String>,
    /// Bytes `[0, reserved)` of the active segment have blocks, and writes
    /// there are cheap, except under `Always`, where they are `pwrite`s
    /// (see the module documentation).
    reserved: u64,
    /// Whether the active segment's file system can reserve blocks at all.
    reservable: bool,
    /// Whether an append has asked the sync thread to reserve more and it
    /// has not yet done so.
    reserve_asked: bool,
    /// Copies a failed [`Log::heal`] could not remove: segment files the
    /// log does not know, whose puts the tombstone check would not see. No
    /// heal succeeds until they are gone.
    stray_copies: Vec<std::path::PathBuf>,
}

struct SyncState {
    /// Highest LSN any committer waits for.
    requested: u64,
    /// Set when an `fdatasync` failed; never cleared.
    failed: Option<String>,
    /// Async committers to wake once `synced` passes their LSN.
    wakers: Vec<(u64, Waker)>,
    /// Committers that started waiting since the last sync began: the size
    /// of the next group commit.
    waiting: u64,
    /// The log asks for blocks reserved ahead ([`Log::reserve_ahead`]).
    reserve_wanted: bool,
    /// Under `None`, the log asks for the active segment to be synced ahead
    /// of its rotation ([`Log::flush_and_sync`]).
    presync_wanted: bool,
    shutdown: bool,
}

/// The log. See the module documentation.
pub struct Log {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    durability: Durability,
    segment_bytes_max: u64,
    segments: Arc<Segments>,
    counters: Arc<Counters>,
    state: Mutex<LogState>,
    written_lsn: AtomicU64,
    /// In a cache line of its own: under `Always` every read loads it (see
    /// [`Log::synced_lsn`]), and the line beside it changes with every
    /// append.
    synced_lsn: CachePadded<AtomicU64>,
    /// The active segment's id, for readers that must not take the log
    /// lock (see [`Log::active_id_now`]). Set under the log lock whenever
    /// the active segment changes, before any record goes to the new one.
    active_id: CachePadded<AtomicU32>,
    sync: Mutex<SyncState>,
    /// Held across each `fdatasync` and the publishing of its result, so
    /// that a failure is recorded before any other sync can publish a
    /// success (see [`Log::sync_and_publish`]).
    sync_io: Mutex<()>,
    /// Mirrors `SyncState::failed.is_some()`, so that the write path can
    /// check it without taking the sync lock.
    sync_failed: AtomicBool,
    /// Mirrors `LogState::write_error.is_some()`, for the same reason.
    write_failing: AtomicBool,
    sync_wanted: Condvar,
    sync_done: Condvar,
    /// Ids of sealed segments that still need a hint file.
    sealed: Mutex<Vec<u32>>,
    /// `flush_seq` to stamp on new segment headers.
    flush_seq: Arc<AtomicU64>,
    /// Next seq to hand out (stamped on new segment headers).
    next_seq: Arc<AtomicU64>,
    /// The host's reports that its request threads ran out of work, if it
    /// gives them ([`Log::attach_idle_signal`]).
    idle: OnceLock<Arc<IdleSignal>>,
}

/// What the sync thread remembers of its previous round.
#[derive(Debug, Clone, Copy)]
struct Round {
    /// The idle signal's reports when it began.
    idle_reports: u64,
    /// When its write and sync began.
    began: Instant,
    /// When it ended.
    ended: Instant,
}

/// Until when a sync for waiting committers waits for the group to fill,
/// if at all ([`Log::fill_group`]): not if a request thread has run out of
/// work since the `previous` round began (the idle signal has more than its
/// `idle_reports` now), otherwise until as long after the previous round
/// as it took, at most [`GROUP_WAIT_MAX`], if that is still ahead of `now`.
fn group_deadline(previous: &Round, idle_reports: u64, now: Instant) -> Option<Instant> {
    if idle_reports != previous.idle_reports {
        return None;
    }
    let took = previous.ended.saturating_duration_since(previous.began);
    let deadline = previous.ended + took.min(GROUP_WAIT_MAX);
    (now < deadline).then_some(deadline)
}

impl Log {
    /// A log appending to `active`, whose first `len` bytes are on disk.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        fs: Arc<dyn Fs>,
        dir: PathBuf,
        durability: Durability,
        segment_bytes_max: u32,
        segments: Arc<Segments>,
        counters: Arc<Counters>,
        active: Arc<Segment>,
        len: u64,
        flush_seq: Arc<AtomicU64>,
        next_seq: Arc<AtomicU64>,
    ) -> Log {
        let position = lsn(active.id, len);
        let active_id = CachePadded::new(AtomicU32::new(active.id));
        Log {
            fs,
            dir,
            durability,
            segment_bytes_max: u64::from(segment_bytes_max),
            segments,
            counters,
            state: Mutex::new(LogState {
                active,
                end: len,
                written: len,
                base: len,
                buffer: reserved_buffer(),
                write_error: None,
                reserved: 0,
                reservable: true,
                reserve_asked: false,
                stray_copies: Vec::new(),
            }),
            written_lsn: AtomicU64::new(position),
            synced_lsn: CachePadded::new(AtomicU64::new(position)),
            active_id,
            sync: Mutex::new(SyncState {
                requested: 0,
                failed: None,
                wakers: Vec::new(),
                waiting: 0,
                reserve_wanted: false,
                presync_wanted: false,
                shutdown: false,
            }),
            sync_io: Mutex::new(()),
            sync_failed: AtomicBool::new(false),
            write_failing: AtomicBool::new(false),
            sync_wanted: Condvar::new(),
            sync_done: Condvar::new(),
            sealed: Mutex::new(Vec::new()),
            flush_seq,
            next_seq,
            idle: OnceLock::new(),
        }
    }

    /// Lets group commits under `Always` wait while `signal` says the
    /// request threads are busy (see [`Log::sync_loop`]). Returns false,
    /// and keeps the first, if a signal is attached already.
    pub fn attach_idle_signal(&self, signal: Arc<IdleSignal>) -> bool {
        self.idle.set(signal).is_ok()
    }

    /// The idle signal attached, if any.
    pub fn idle_signal(&self) -> Option<Arc<IdleSignal>> {
        self.idle.get().cloned()
    }

    fn idle_reports(&self) -> u64 {
        self.idle.get().map_or(0, |signal| signal.reports())
    }

    /// Refuses new writes while the log cannot accept them: after a failed
    /// sync, or while writes keep failing and the buffer is full.
    pub fn check_writable(&self) -> Result<()> {
        if let Some(reason) = self.sync_failure() {
            return Err(Error::WritesFailing(reason));
        }
        if !self.write_failing.load(Ordering::Acquire) {
            return Ok(());
        }
        let state = self.state.lock();
        if state.unwritten().len() > BUFFER_BYTES_HARD_MAX {
            let reason = state.write_error.clone().unwrap_or_default();
            return Err(Error::WritesFailing(format!(
                "write buffer full ({} bytes) because writes fail: {reason}",
                state.unwritten().len()
            )));
        }
        Ok(())
    }

    /// Appends `len` bytes of records produced by `encode` (which must write
    /// exactly `len` bytes). Returns the segment and offset they start at and
    /// the ticket to commit. The records are readable through the keydir's
    /// cached values at once; they reach the OS at once where that is cheap
    /// (a mapped copy), or at the next commit, or under `Always` when the
    /// sync thread writes its group.
    ///
    /// `encode` runs under the log lock, after any rotation this append
    /// makes, and only if the append then succeeds: what it publishes (a
    /// raised flush generation, say) is seen by the header of every segment
    /// the log creates after these records. It is handed the ticket the
    /// append returns, to publish with it.
    pub fn append(
        &self,
        len: u64,
        encode: impl FnOnce(&mut Vec<u8>, Ticket),
    ) -> Result<(Arc<Segment>, u32, Ticket)> {
        let mut state = self.state.lock();
        let header = u64::from(segment::HEADER_BYTES);
        if state.end + len > self.segment_bytes_max && state.end > header {
            self.rotate(&mut state)?;
        }
        if state.end + len > u64::from(u32::MAX) {
            return Err(Error::TooLarge(format!(
                "a record of {len} bytes does not fit a segment (4 GiB at most)"
            )));
        }
        let before = state.buffer.len();
        let ticket = Ticket(lsn(state.active.id, state.end + len));
        encode(&mut state.buffer, ticket);
        assert_eq!((state.buffer.len() - before) as u64, len);
        // Under the lock, so before a rotation can seal the segment.
        if record::may_hold_kind(state.buffer.get(before..).unwrap_or_default(), Kind::Delete) {
            state.active.note_tombstone();
        }
        let offset = state.end as u32;
        state.end += len;
        // Not under `always`, where every commit asks for a sync already.
        let presync = self.durability != Durability::Always
            && presync_due(self.segment_bytes_max, u64::from(offset), state.end);
        let segment = Arc::clone(&state.active);
        segment.len_bytes.store(state.end, Ordering::Relaxed);
        let cheap = state.end <= state.reserved && self.maps_reserved_writes();
        if cheap || state.unwritten().len() > BUFFER_BYTES_SOFT_MAX {
            // A failure here is retried (and reported) by the next commit.
            let _ = self.write_out(&mut state);
        }
        let ask_reserve = state.reservable
            && !state.reserve_asked
            && state.reserved < (state.end + RESERVE_AHEAD / 2).min(self.segment_bytes_max);
        state.reserve_asked |= ask_reserve;
        // Under `none` no committer waits for the synced position, so no
        // append asks for it; the sync thread syncs the active segment
        // instead ([`Log::flush_and_sync`]) at the marks before its limit,
        // and whenever the records kept for a heal are past their bound:
        // every append past it asks again, so that an attempt that failed
        // to write is retried.
        let over_unsynced_max = state.buffer.len() > UNSYNCED_BYTES_SOFT_MAX;
        // Not while writes fail: the append's own write-out retries them.
        let presync_active = self.durability == Durability::None
            && (presync || (over_unsynced_max && !self.write_failing.load(Ordering::Acquire)));
        let wanted = (self.durability != Durability::None && (presync || over_unsynced_max))
            .then(|| lsn(state.active.id, state.end));
        drop(state);
        if ask_reserve || presync_active {
            let mut sync = self.sync.lock();
            sync.reserve_wanted |= ask_reserve;
            sync.presync_wanted |= presync_active;
            self.sync_wanted.notify_one();
        }
        if let Some(wanted) = wanted {
            self.request_sync(wanted);
        }
        Ok((segment, offset, ticket))
    }

    /// Reserves the active segment's blocks up to [`RESERVE_AHEAD`] past its
    /// end (or the segment's size limit), one [`RESERVE_STEP`] per hold of
    /// the log lock, at most `steps` of them. Runs on the sync thread.
    /// Returns whether it is done: the reserve reached its goal or cannot
    /// grow.
    fn reserve_ahead(&self, steps: u64) -> bool {
        for _ in 0..steps {
            let mut state = self.state.lock();
            let from = state.reserved.max(state.end);
            let goal = (state.end + RESERVE_AHEAD).min(self.segment_bytes_max);
            if !state.reservable || goal <= from {
                state.reserve_asked = false;
                return true;
            }
            let target = (from - from % RESERVE_STEP + RESERVE_STEP).min(goal);
            self.reserve(&mut state, target);
        }
        false
    }

    /// Readies the active segment's file for the appends to come, outside
    /// the log lock
    /// ([`FsFile::prepare_writes`](crate::fs::FsFile::prepare_writes)):
    /// with mapped appends, the window of the file they reach next is
    /// mapped, and the ones they left are unmapped, here rather than under
    /// the lock. Runs on the sync thread, around each reservation ahead.
    fn prepare_writes(&self) {
        let (segment, end) = {
            let state = self.state.lock();
            if !state.reservable || !self.maps_reserved_writes() {
                return;
            }
            (Arc::clone(&state.active), state.end)
        };
        segment.file.prepare_writes(end);
    }

    /// Whether appends copy records into the reserved blocks through a
    /// mapping as they come. Not under `Always`, where nothing is
    /// acknowledged before a sync: there the sync thread writes each group
    /// just before its `fdatasync`, and the mapping would only cost a TLB
    /// flush and a page fault per page at every sync (see the module
    /// documentation).
    fn maps_reserved_writes(&self) -> bool {
        self.durability != Durability::Always
    }

    /// Reserves the active segment's blocks up to `target`. A failure (say,
    /// a full disk) leaves the reservation as it was, and the segment
    /// unreserved from then on: writes then go out by `pwrite`, whose own
    /// error is the one reported.
    fn reserve(&self, state: &mut LogState, target: u64) {
        let file = &state.active.file;
        file.map_reserved_writes(self.maps_reserved_writes());
        match file.allocate(target) {
            Ok(true) => state.reserved = target,
            Ok(false) => state.reservable = false,
            Err(error) => {
                // Not retried on this segment: a full disk would otherwise
                // cost an fallocate per append. The next segment tries again.
                tracing::warn!(
                    %error,
                    file = %state.active.path.display(),
                    "cannot reserve blocks ahead of the log; writing with pwrite"
                );
                state.reservable = false;
            }
        }
    }

    /// Cuts the reserved zeros off the end of the active segment; also
    /// whatever a reservation that failed half way added.
    fn release_reservation(&self, state: &mut LogState) -> Result<()> {
        let segment = &state.active;
        let io = |e| {
            Error::io(
                format!("cutting the reserved tail of {}", segment.path.display()),
                e,
            )
        };
        if segment.file.len().map_err(io)? != state.end {
            segment.file.set_len(state.end).map_err(io)?;
        }
        state.reserved = 0;
        Ok(())
    }

    /// Asks the sync thread to sync up to `position` soon.
    fn request_sync(&self, position: u64) {
        let mut sync = self.sync.lock();
        sync.requested = sync.requested.max(position);
        self.sync_wanted.notify_one();
    }

    /// Hands the unwritten part of the buffer to the OS.
    fn write_out(&self, state: &mut LogState) -> Result<()> {
        let unwritten = state.unwritten();
        if unwritten.is_empty() {
            return Ok(());
        }
        let unwritten_len = unwritten.len() as u64;
        let result = state.active.file.write_all_at(unwritten, state.written);
        if let Err(error) = result {
            let error = Error::io(format!("writing to {}", state.active.path.display()), error);
            state.write_error = Some(error.to_string());
            self.write_failing.store(true, Ordering::Release);
            self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
            return Err(error);
        }
        self.counters
            .log_bytes_written
            .fetch_add(unwritten_len, Ordering::Relaxed);
        state.written = state.end;
        if state.write_error.take().is_some() {
            self.write_failing.store(false, Ordering::Release);
        }
        self.written_lsn
            .fetch_max(lsn(state.active.id, state.written), Ordering::Release);
        Ok(())
    }

    /// Seals the active segment and starts a new one. The sealed segment is
    /// synced in every durability mode: recovery cuts a torn tail only off
    /// the active segment and treats damage in a sealed one as corruption,
    /// and its hint file (written and synced later) must describe bytes that
    /// are on disk. Once per segment, so cheap even for `None`.
    fn rotate(&self, state: &mut LogState) -> Result<()> {
        self.write_out(state)?;
        self.release_reservation(state)?;
        let old = Arc::clone(&state.active);
        drop(self.sync_file(&old)?);
        let header = self.next_segment_header()?;
        let new = create_segment(&*self.fs, &self.dir, header)?;
        self.segments.insert(Arc::clone(&new));
        old.sealed.store(true, Ordering::Release);
        self.sealed.lock().push(old.id);
        self.active_id.store(new.id, Ordering::Release);
        state.active = new;
        state.end = u64::from(segment::HEADER_BYTES);
        state.written = state.end;
        state.base = state.end;
        state.buffer.clear();
        state.reservable = true;
        state.reserve_asked = false;
        let start = lsn(state.active.id, state.end);
        self.written_lsn.fetch_max(start, Ordering::Release);
        if self.durability != Durability::None {
            self.mark_synced(start);
        }
        self.counters
            .segments_sealed
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The header of the next log segment: a fresh id, stamped with the
    /// seq and flush generation in force now.
    fn next_segment_header(&self) -> Result<SegmentHeader> {
        Ok(SegmentHeader {
            origin: Origin::Log,
            id: self.segments.allocate_id()?,
            seq_at_creation: self.next_seq.load(Ordering::SeqCst),
            flush_seq: self.flush_seq.load(Ordering::SeqCst),
        })
    }

    /// `fdatasync` of one file, recording a failure as sticky; refused
    /// after any failed sync. Syncs are serialised: the `sync_io` guard it
    /// returns lets the caller publish the result before another sync runs
    /// (see [`Log::sync_and_publish`]).
    fn sync_file(&self, segment: &Segment) -> Result<MutexGuard<'_, ()>> {
        let io = self.sync_io.lock();
        if let Some(reason) = self.sync_failure() {
            return Err(Error::WritesFailing(reason));
        }
        let started = Instant::now();
        let result = segment.file.sync_data();
        self.counters.record_fsync(started.elapsed());
        result.map_err(|error| {
            let error = Error::io(format!("syncing {}", segment.path.display()), error);
            self.mark_unsynced(segment);
            let mut sync = self.sync.lock();
            sync.failed.get_or_insert_with(|| error.to_string());
            self.sync_failed.store(true, Ordering::Release);
            let wakers = std::mem::take(&mut sync.wakers);
            self.sync_done.notify_all();
            drop(sync);
            wake(wakers);
            error
        })?;
        Ok(io)
    }

    /// Marks `segment`'s bytes past its last good sync as unsure after its
    /// sync failed (see [`crate::unsynced`]), as far as a failing disk lets
    /// it: a marker the kernel holds is enough for a killed process's
    /// restart, and [`Log::heal`] makes it durable before anything relies on
    /// it. Called under `sync_io`, so no sync moves the position meanwhile.
    fn mark_unsynced(&self, segment: &Segment) {
        let synced = self.synced_lsn.load(Ordering::Acquire);
        let header = u64::from(segment::HEADER_BYTES);
        // A sealed segment was synced whole when it was sealed, and so was
        // one the synced position has passed: no byte of theirs is unsure.
        let from = match (synced >> 32).cmp(&u64::from(segment.id)) {
            _ if segment.sealed.load(Ordering::Acquire) => return,
            std::cmp::Ordering::Greater => return,
            std::cmp::Ordering::Equal => (synced & u64::from(u32::MAX)).max(header),
            std::cmp::Ordering::Less => header,
        };
        if let Err(error) = crate::unsynced::note_failure(&*self.fs, &self.dir, segment.id, from) {
            tracing::warn!(%error, "marking the segment whose sync failed");
        }
    }

    /// Publishes a sync up to `position` and wakes the committers it
    /// covered. The wakers run after the sync lock is released: a woken task
    /// may preempt this thread, and committers must not find the lock held
    /// meanwhile.
    ///
    /// Does nothing once a sync has failed: after an `EIO`, a later
    /// `fdatasync` of the same file can succeed without the lost pages ever
    /// reaching the disk, so only [`Log::resume`] (after [`Log::heal`]) moves
    /// the synced position again.
    fn mark_synced(&self, position: u64) {
        let mut sync = self.sync.lock();
        if sync.failed.is_some() {
            return;
        }
        self.synced_lsn.fetch_max(position, Ordering::Release);
        let synced = self.synced_lsn.load(Ordering::Acquire);
        let (covered, still_waiting) = std::mem::take(&mut sync.wakers)
            .into_iter()
            .partition(|(wanted, _)| *wanted <= synced);
        sync.wakers = still_waiting;
        self.sync_done.notify_all();
        drop(sync);
        wake(covered);
    }

    /// Takes ids of sealed segments that need hint files.
    pub fn take_sealed(&self) -> Vec<u32> {
        std::mem::take(&mut *self.sealed.lock())
    }

    /// The id of the active segment.
    pub fn active_id(&self) -> u32 {
        self.state.lock().active.id
    }

    /// Everything appended so far has reached the OS (and, for records in
    /// memory only, may be dropped from the cache) up to this LSN.
    pub fn written_lsn(&self) -> u64 {
        self.written_lsn.load(Ordering::Acquire)
    }

    /// Position up to which the log is synced (under `None`, only the
    /// syncs some do anyway).
    pub fn synced_lsn(&self) -> u64 {
        self.synced_lsn.load(Ordering::Acquire)
    }

    /// The id of the active segment, without the log lock. Read under a
    /// keydir partition's lock, it is at least the segment of every record
    /// that partition's entries point at (an append sets it before the
    /// writer installs its entry). A log segment with a smaller id was
    /// synced when it was sealed: sealing syncs it after its last record,
    /// and a failure there leaves it active.
    pub fn active_id_now(&self) -> u32 {
        self.active_id.load(Ordering::Acquire)
    }

    /// Position up to which the log is synced (`written_lsn` with `None`).
    pub fn stable_lsn(&self) -> u64 {
        match self.durability {
            Durability::None => self.written_lsn(),
            _ => self.synced_lsn.load(Ordering::Acquire),
        }
    }

    /// Waits until `ticket` is acknowledged under the durability mode:
    /// written to the OS, and for `Always` synced. Blocks the thread.
    pub fn commit(&self, ticket: Ticket) -> Result<()> {
        if ticket == Ticket::NONE {
            return Ok(());
        }
        if self.durability != Durability::Always {
            return self.ensure_written(ticket);
        }
        let mut counted = false;
        loop {
            match self.await_sync(ticket, &mut counted) {
                SyncWait::Settled(result) => return result,
                SyncWait::Pending(mut sync) => self.sync_done.wait(&mut sync),
            }
        }
    }

    /// One look at a commit under `Always`, for [`Log::commit`] and
    /// [`CommitFuture`]. The sync thread writes the group out, so a
    /// committer writes only to retry a failed write and report its error.
    /// Then the ticket is settled if it is synced (durable, whatever failed
    /// since: after a failed sync the position only moves again once `heal`
    /// has made everything before it durable) or a sync has failed;
    /// otherwise a sync covering it is asked for (the committer counted
    /// once, through `counted`, in the next group) and the sync lock is
    /// returned held, to wait under.
    fn await_sync(&self, ticket: Ticket, counted: &mut bool) -> SyncWait<'_> {
        if self.write_failing.load(Ordering::Acquire) {
            if let Err(error) = self.ensure_written(ticket) {
                return SyncWait::Settled(Err(error));
            }
        }
        if self.synced_lsn.load(Ordering::Acquire) >= ticket.0 {
            return SyncWait::Settled(Ok(()));
        }
        let mut sync = self.sync.lock();
        if self.synced_lsn.load(Ordering::Acquire) >= ticket.0 {
            return SyncWait::Settled(Ok(()));
        }
        if let Some(reason) = &sync.failed {
            return SyncWait::Settled(Err(Error::WritesFailing(reason.clone())));
        }
        if !*counted {
            sync.waiting += 1;
            *counted = true;
        }
        sync.requested = sync.requested.max(ticket.0);
        self.sync_wanted.notify_one();
        SyncWait::Pending(sync)
    }

    /// Writes the buffer out if `ticket` is not yet written. Under `Always`
    /// the sync thread writes; a committer calls this only when the last
    /// write failed, to retry it and report its error.
    fn ensure_written(&self, ticket: Ticket) -> Result<()> {
        if self.written_lsn.load(Ordering::Acquire) >= ticket.0 {
            return Ok(());
        }
        let mut state = self.state.lock();
        if self.written_lsn.load(Ordering::Acquire) >= ticket.0 {
            return Ok(());
        }
        self.write_out(&mut state)
    }

    /// The same as [`Log::commit`] without blocking: the future resolves when
    /// the ticket is acknowledged. Works on any executor.
    pub fn commit_async(self: &Arc<Self>, ticket: Ticket) -> CommitFuture {
        CommitFuture {
            log: Arc::clone(self),
            ticket,
            waiting: false,
        }
    }

    /// The sync thread's body: syncs when asked (`Always`), once a second
    /// (`EverySec`), or only writes buffers out (`None`). Returns at shutdown.
    ///
    /// Under `Always`, with an idle signal attached, a sync for waiting
    /// committers first lets the group fill ([`Log::fill_group`]).
    pub fn sync_loop(&self) {
        let mut last_sync = Instant::now();
        let mut previous = Round {
            idle_reports: self.idle_reports(),
            began: last_sync,
            ended: last_sync,
        };
        loop {
            {
                let mut sync = self.sync.lock();
                if sync.shutdown {
                    return;
                }
                let pending = sync.requested > self.synced_lsn.load(Ordering::Acquire);
                if std::mem::take(&mut sync.reserve_wanted) {
                    // Committers waiting for a sync get it after one step.
                    let committers_wait = pending && self.durability == Durability::Always;
                    let steps = if committers_wait {
                        1
                    } else {
                        2 * RESERVE_AHEAD / RESERVE_STEP
                    };
                    drop(sync);
                    // Before too: a new segment's first reserved blocks make
                    // the appends mapped at once.
                    self.prepare_writes();
                    let done = self.reserve_ahead(steps);
                    self.prepare_writes();
                    if !done {
                        self.sync.lock().reserve_wanted = true;
                        if committers_wait {
                            let _ = self.sync_round();
                        }
                    }
                    continue;
                }
                if std::mem::take(&mut sync.presync_wanted) {
                    drop(sync);
                    // A failed sync is recorded, sticky, as the rotation's
                    // would be, and writes are refused until the log heals.
                    // A failed write is retried by the next append that
                    // asks, after a pause.
                    if let Err(error) = self.flush_and_sync() {
                        tracing::error!(%error, "writing out and syncing the active segment early");
                        if self.write_failing.load(Ordering::Acquire) {
                            self.pause_after_a_failed_write();
                        }
                    }
                    continue;
                }
                if !pending || sync.failed.is_some() {
                    // After a failed sync nothing is synced until the log
                    // heals: wait a whole interval (or a notice), rather
                    // than find the interval over and go round at once.
                    let wait = match sync.failed {
                        Some(_) => SYNC_INTERVAL,
                        None => SYNC_INTERVAL.saturating_sub(last_sync.elapsed()),
                    };
                    if self.durability == Durability::Always || wait > Duration::ZERO {
                        self.sync_wanted
                            .wait_for(&mut sync, wait.max(Duration::from_millis(1)));
                    }
                    if sync.shutdown {
                        return;
                    }
                    let pending = sync.requested > self.synced_lsn.load(Ordering::Acquire);
                    let due = last_sync.elapsed() >= SYNC_INTERVAL;
                    if !(pending || due) || sync.failed.is_some() {
                        continue;
                    }
                }
            }
            // Errors are recorded (sticky for sync) and reported to committers.
            let result = self.group_round(&mut previous);
            last_sync = previous.began;
            if result.is_err() && self.write_failing.load(Ordering::Acquire) {
                // Committers retry the write themselves and get its error;
                // this thread retries too, but not in a tight loop.
                self.pause_after_a_failed_write();
            }
        }
    }

    /// Waits [`WRITE_RETRY_PAUSE`] (or until shutdown) on the sync thread.
    fn pause_after_a_failed_write(&self) {
        let deadline = Instant::now() + WRITE_RETRY_PAUSE;
        let mut sync = self.sync.lock();
        while !sync.shutdown && !self.sync_wanted.wait_until(&mut sync, deadline).timed_out() {}
    }

    /// One round of the sync thread: lets the group fill
    /// ([`Log::fill_group`]), then [`Log::sync_round`]; `previous` becomes
    /// this round.
    fn group_round(&self, previous: &mut Round) -> Result<()> {
        self.fill_group(previous);
        let idle_reports = self.idle_reports();
        let began = Instant::now();
        let result = self.sync_round();
        *previous = Round {
            idle_reports,
            began,
            ended: Instant::now(),
        };
        result
    }

    /// Under `Always` with an idle signal: if no request thread has run out
    /// of work since the `previous` round began, the threads are busy and
    /// may be about to bring more committers, so waits for them to join this
    /// group: until a thread runs out of work, or as long after the
    /// previous round as it took, at most [`GROUP_WAIT_MAX`]
    /// ([`group_deadline`]).
    ///
    /// Under load this makes groups larger and syncs fewer, which saves the
    /// CPU each sync costs, at the price of up to that wait in each write's
    /// latency. A committer whose thread has nothing else to do does not
    /// wait: its thread runs out of work while the previous round syncs. A
    /// committer among busy threads may wait even if no other committer
    /// comes, since any work counts, reads too.
    fn fill_group(&self, previous: &Round) {
        if self.durability != Durability::Always {
            return;
        }
        let Some(signal) = self.idle.get() else {
            return;
        };
        let Some(deadline) = group_deadline(previous, signal.reports(), Instant::now()) else {
            return;
        };
        self.counters
            .group_commits_waited
            .fetch_add(1, Ordering::Relaxed);
        signal.wait_past(previous.idle_reports, deadline);
    }

    /// Writes the buffer out and, unless durability is `None`, syncs the
    /// active segment; then wakes committers the sync covered.
    ///
    /// If the write fails, committers are woken to retry it and get its
    /// error, and what was written before is still synced: its committers
    /// are acknowledged rather than left waiting for the failing write.
    pub fn sync_round(&self) -> Result<()> {
        let (segment, position, written) = {
            let mut state = self.state.lock();
            let written = self.write_out(&mut state);
            (
                Arc::clone(&state.active),
                lsn(state.active.id, state.written),
                written,
            )
        };
        if written.is_err() {
            self.wake_all();
        }
        if self.durability == Durability::None
            || self.synced_lsn.load(Ordering::Acquire) >= position
        {
            return written;
        }
        let waiting = std::mem::take(&mut self.sync.lock().waiting);
        // The group is closed: committers wait on this sync alone, so the
        // thread should not wait for a CPU after it (see `as_ordinary`).
        if self.durability == Durability::Always {
            crate::scheduling::as_ordinary(|| self.sync_and_publish(&segment, position))?;
        } else {
            self.sync_and_publish(&segment, position)?;
        }
        self.counters.record_group_commit(waiting.max(1));
        written
    }

    /// `fdatasync` of `segment`, which holds the log up to `position`, then
    /// marks the log synced to there. Refuses after any failed sync (see
    /// [`Log::mark_synced`]). Syncs are serialised with the recording of
    /// their results, so no success is published while a failure that came
    /// before it is still unrecorded.
    fn sync_and_publish(&self, segment: &Segment, position: u64) -> Result<()> {
        let io = self.sync_file(segment)?;
        self.mark_synced(position);
        drop(io);
        self.forget_synced(segment, position);
        Ok(())
    }

    /// Drops buffered bytes a successful sync of `segment` up to `position`
    /// made durable.
    fn forget_synced(&self, segment: &Segment, position: u64) {
        let mut state = self.state.lock();
        if state.active.id == segment.id {
            state.forget_before(position & u64::from(u32::MAX));
        }
    }

    fn wake_all(&self) {
        let mut sync = self.sync.lock();
        let wakers = std::mem::take(&mut sync.wakers);
        self.sync_done.notify_all();
        drop(sync);
        wake(wakers);
    }

    /// Writes out and syncs everything appended so far (all modes), and
    /// drops the buffered records it made durable. Used at close, by callers
    /// who want a durable point, and under `None` by the sync thread when
    /// appends ask for it: outside the log lock, so that the rotation, which
    /// syncs the segment again under the lock while every append waits,
    /// finds only what came after this (see [`PRESYNC_AHEAD`]), and so that
    /// the records kept for a heal stay bounded (see
    /// [`UNSYNCED_BYTES_SOFT_MAX`]). If the segment was sealed meanwhile, its
    /// rotation synced it and this sync finds it clean.
    ///
    /// Fails with [`Error::WritesFailing`] after any failed sync: the pages
    /// that sync lost are not rewritten by a later one, so a later success
    /// would not make everything written so far durable.
    pub fn flush_and_sync(&self) -> Result<()> {
        if let Some(reason) = self.sync_failure() {
            return Err(Error::WritesFailing(reason));
        }
        // The position is taken with the segment: records appended after
        // the lock is released may go to a newer segment this sync does not
        // cover.
        let (segment, position) = {
            let mut state = self.state.lock();
            self.write_out(&mut state)?;
            (
                Arc::clone(&state.active),
                lsn(state.active.id, state.written),
            )
        };
        self.sync_and_publish(&segment, position)
    }

    /// At a clean close: cuts the reserved zeros off the active segment and
    /// syncs everything, so the directory holds exactly the records.
    pub fn close(&self) -> Result<()> {
        {
            let mut state = self.state.lock();
            self.write_out(&mut state)?;
            self.release_reservation(&mut state)?;
        }
        self.flush_and_sync()
    }

    /// Tries to resume writing after a failed sync. The failed sync may have
    /// lost any page written since the last good one, so: mark the active
    /// segment's bytes from that point as unsure, durably (see
    /// [`crate::unsynced`]); write every record since then (kept in the
    /// buffer) to a new segment and sync it; then settle the old segment
    /// ([`Log::settle_healed`]). On success returns where each put moved and
    /// the position now synced; the caller points the keydir at the copies
    /// and then calls [`Log::resume`] with that position. On failure the old
    /// segment is as it was, marked, the copy is removed, and writes stay
    /// refused; try again later.
    ///
    /// The copy comes before the cut: a process killed in between leaves
    /// every record in one file or the other, and the marker tells the next
    /// open which (see [`crate::recovery`]).
    pub fn heal(&self) -> Result<(Vec<Moved>, u64)> {
        let mut state = self.state.lock();
        let old = Arc::clone(&state.active);
        let base = state.base;
        crate::unsynced::mark(&*self.fs, &self.dir, old.id, base)?;
        self.remove_stray_copies(&mut state)?;
        let header = self.next_segment_header()?;
        let new = create_segment(&*self.fs, &self.dir, header)?;
        let start = u64::from(segment::HEADER_BYTES);
        let copied = new
            .file
            .write_all_at(&state.buffer, start)
            .and_then(|()| new.file.sync_data());
        if let Err(error) = copied {
            state.stray_copies.push(new.path.clone());
            let _ = self.remove_stray_copies(&mut state);
            let what = format!("copying the unsynced records to {}", new.path.display());
            return Err(Error::io(what, error));
        }
        self.settle_healed(&old, base);
        let moved = moved_records(&state.buffer, &old, base, &new, start);
        let end = start + state.buffer.len() as u64;
        old.len_bytes.store(base, Ordering::Release);
        old.sealed.store(true, Ordering::Release);
        self.sealed.lock().push(old.id);
        new.len_bytes.store(end, Ordering::Release);
        self.segments.insert(Arc::clone(&new));
        self.active_id.store(new.id, Ordering::Release);
        state.active = new;
        state.end = end;
        state.written = end;
        state.base = end;
        state.buffer.clear();
        state.write_error = None;
        self.write_failing.store(false, Ordering::Release);
        state.reserved = 0;
        state.reservable = true;
        state.reserve_asked = false;
        let synced = lsn(state.active.id, end);
        self.written_lsn.fetch_max(synced, Ordering::Release);
        Ok((moved, synced))
    }

    /// Removes the copies earlier heals could not (see
    /// [`LogState::stray_copies`]) and syncs the directory; fails, keeping
    /// those left, if either fails.
    fn remove_stray_copies(&self, state: &mut LogState) -> Result<()> {
        if state.stray_copies.is_empty() {
            return Ok(());
        }
        let mut first_error = None;
        state
            .stray_copies
            .retain(|path| match self.fs.remove(path) {
                Ok(()) => false,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
                Err(error) => {
                    let what = format!("removing {}", path.display());
                    first_error.get_or_insert(Error::io(what, error));
                    true
                }
            });
        if let Some(error) = first_error {
            return Err(error);
        }
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| Error::io(format!("syncing directory {}", self.dir.display()), e))
    }

    /// After [`Log::heal`] made the copy of `old`'s records from `base` on
    /// durable: marks `old` copied (the next open cuts it at the mark), cuts
    /// it back to `base`, and removes the marker, as far as the disk
    /// allows. Where neither the mark nor the cut holds, the tail stays on
    /// disk past the segment's length, under a marker that may or may not
    /// say copied, until the next open settles it: `old` is flagged so that
    /// the tombstone check, which its hint cannot serve for the tail, keeps
    /// every tombstone a put there might need.
    fn settle_healed(&self, old: &Segment, base: u64) {
        let marked = crate::unsynced::mark_copied(&*self.fs, &self.dir, old.id, base);
        let cut = old.file.set_len(base).and_then(|()| old.file.sync_data());
        let error = match (cut, marked) {
            (Ok(()), _) => match crate::unsynced::unmark(&*self.fs, &self.dir, old.id) {
                Ok(()) => return,
                Err(error) => error,
            },
            (Err(error), Ok(())) => {
                Error::io(format!("cutting back {}", old.path.display()), error)
            }
            (Err(cut), Err(error)) => {
                old.unsure_tail.store(true, Ordering::Release);
                tracing::warn!(error = %cut, file = %old.path.display(), "cutting back");
                error
            }
        };
        tracing::warn!(%error, file = %old.path.display(), "healed; the next open settles the old segment");
    }

    /// Accepts writes again after [`Log::heal`] succeeded and the keydir
    /// points at the moved records; `synced` is the position heal returned
    /// (not the written position: a writer admitted before the failure may
    /// have appended since, unsynced).
    pub fn resume(&self, synced: u64) {
        let position = synced;
        self.synced_lsn.fetch_max(position, Ordering::Release);
        let mut sync = self.sync.lock();
        sync.failed = None;
        self.sync_failed.store(false, Ordering::Release);
        drop(sync);
        // The sync thread rests a whole interval after a failure; what was
        // asked of it meanwhile is due now.
        self.sync_wanted.notify_one();
        self.mark_synced(position);
    }

    /// Stops the sync thread.
    pub fn shutdown(&self) {
        self.sync.lock().shutdown = true;
        self.sync_wanted.notify_all();
    }

    /// The sticky sync failure, if any.
    pub fn sync_failure(&self) -> Option<String> {
        if !self.sync_failed.load(Ordering::Acquire) {
            return None;
        }
        self.sync.lock().failed.clone()
    }
}

/// A put that [`Log::heal`] copied to a new segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The key.
    pub key: Vec<u8>,
    /// The put's seq (CAS unique).
    pub seq: u64,
    /// Segment and offset it was at.
    pub from: (u32, u32),
    /// Segment and offset it is at now.
    pub to: (u32, u32),
    /// Record length.
    pub record_len: u64,
}

/// The puts among `records` (written at `base` in `old`, copied to `start`
/// in `new`); notes every record's seq in `new`, and its tombstones.
fn moved_records(
    records: &[u8],
    old: &Segment,
    base: u64,
    new: &Segment,
    start: u64,
) -> Vec<Moved> {
    let mut moved = Vec::new();
    let mut at = 0usize;
    while let Some(rest) = records.get(at..).filter(|rest| !rest.is_empty()) {
        let Ok(header) = record::decode(rest) else {
            break;
        };
        new.note_seq(header.seq);
        if header.kind == Kind::Delete {
            new.note_tombstone();
        }
        if header.kind == Kind::Put {
            moved.push(Moved {
                key: rest.get(header.key_range()).unwrap_or_default().to_vec(),
                seq: header.seq,
                from: (old.id, (base + at as u64) as u32),
                to: (new.id, (start + at as u64) as u32),
                record_len: header.record_len(),
            });
        }
        at += header.record_len() as usize;
    }
    moved
}

impl LogState {
    /// The bytes appended but not yet handed to the OS.
    fn unwritten(&self) -> &[u8] {
        let from = (self.written - self.base) as usize;
        self.buffer.get(from..).unwrap_or_default()
    }

    /// Drops buffered bytes before `offset` (now durable).
    fn forget_before(&mut self, offset: u64) {
        let offset = offset.min(self.written);
        if offset <= self.base {
            return;
        }
        self.buffer.drain(..(offset - self.base) as usize);
        self.base = offset;
    }
}

/// An empty buffer with [`BUFFER_RESERVED_BYTES`] of room, or without
/// where the system refuses the reservation (strict overcommit, a small
/// address-space limit): it then grows as it needs.
fn reserved_buffer() -> Vec<u8> {
    let mut buffer = Vec::new();
    if buffer.try_reserve_exact(BUFFER_RESERVED_BYTES).is_err() {
        tracing::warn!(
            bytes = BUFFER_RESERVED_BYTES,
            "cannot reserve room for the log buffer; it grows as it needs"
        );
    }
    buffer
}

fn wake(wakers: Vec<(u64, Waker)>) {
    wakers.into_iter().for_each(|(_, waker)| waker.wake());
}

/// Resolves when a ticket is acknowledged; see [`Log::commit_async`].
pub struct CommitFuture {
    log: Arc<Log>,
    ticket: Ticket,
    waiting: bool,
}

impl Future for CommitFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let ticket = self.ticket;
        if ticket == Ticket::NONE {
            return Poll::Ready(Ok(()));
        }
        let this = &mut *self;
        if this.log.durability != Durability::Always {
            // A write(2) to the page cache: short enough to do inline.
            return Poll::Ready(this.log.ensure_written(ticket));
        }
        match this.log.await_sync(ticket, &mut this.waiting) {
            SyncWait::Settled(result) => Poll::Ready(result),
            SyncWait::Pending(mut sync) => {
                sync.wakers.push((ticket.0, cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}

/// What [`Log::await_sync`] found.
enum SyncWait<'a> {
    /// The commit's outcome.
    Settled(Result<()>),
    /// Not yet synced: a sync is asked for; wait under this lock.
    Pending(MutexGuard<'a, SyncState>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(idle_reports: u64, began: Instant, took: Duration) -> Round {
        Round {
            idle_reports,
            began,
            ended: began + took,
        }
    }

    #[test]
    fn a_sync_is_asked_for_once_per_mark_before_the_segment_fills() {
        let limit = 64 << 20;
        let asked = |record: u64| {
            (0..limit)
                .step_by(record as usize)
                .filter(|&start| presync_due(limit, start, start + record))
                .map(|start| limit - start - record)
                .collect::<Vec<_>>()
        };
        // 100-byte records: one ask as each mark is reached, the last one
        // leaving less than 1 MiB to sync at the rotation.
        let left = asked(100);
        assert_eq!(left.len(), PRESYNC_AHEAD.len(), "{left:?}");
        assert!(left.iter().all(|&left| left < 16 << 20));
        assert!(left.last().is_some_and(|&left| left < 1 << 20), "{left:?}");
        // A record spanning both marks asks once.
        assert!(presync_due(limit, limit - (20 << 20), limit - (1 << 20)));
        assert!(!presync_due(limit, 0, limit - (17 << 20)));
        // Segments no larger than a mark never ask at it: the rotation's
        // sync is small anyway.
        assert!(!presync_due(1 << 20, 0, 1 << 20));
        assert!(!presync_due(4 << 20, 0, (3 << 20) - 1));
        assert!(presync_due(4 << 20, 0, 4 << 20));
    }

    /// A log of 64 MiB segments on a `MemFs`, with no sync thread.
    fn memory_log(durability: Durability) -> Log {
        memory_log_of(durability, 64 << 20)
    }

    /// A log of `segment_bytes_max` segments on a `MemFs`, no sync thread.
    fn memory_log_of(durability: Durability, segment_bytes_max: u32) -> Log {
        let fs: Arc<dyn Fs> = Arc::new(crate::fs::MemFs::new());
        let dir = PathBuf::from("/data");
        fs.create_dir_all(&dir).unwrap();
        let header = SegmentHeader {
            origin: segment::Origin::Log,
            id: 1,
            seq_at_creation: 1,
            flush_seq: 0,
        };
        let active = create_segment(&*fs, &dir, header).unwrap();
        let segments = Arc::new(Segments::new(2));
        segments.insert(Arc::clone(&active));
        let len = u64::from(segment::HEADER_BYTES);
        Log::new(
            fs,
            dir,
            durability,
            segment_bytes_max,
            segments,
            Arc::new(Counters::default()),
            active,
            len,
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(1)),
        )
    }

    /// Appends 1 MiB records up to `end` of the active segment.
    fn append_up_to(log: &Log, end: u64) {
        let record = 1 << 20;
        while log.state.lock().end + record <= end {
            // Not committed: what matters is what the append asks for.
            let (_, _, _ticket) = log
                .append(record, |out, _| out.resize(out.len() + record as usize, 7))
                .unwrap();
        }
    }

    /// [`append_up_to`] `end`; returns whether a sync is asked for that
    /// the log has not had.
    fn sync_asked_after_appending_to(log: &Log, end: u64) -> bool {
        append_up_to(log, end);
        log.sync.lock().requested > log.synced_lsn.load(Ordering::Acquire)
    }

    #[test]
    fn the_buffer_stays_where_it_is_as_records_accumulate_and_are_synced() {
        // Moving it would copy everything buffered, under the log lock.
        let log = memory_log(Durability::EverySec);
        let place = || {
            let state = log.state.lock();
            (state.buffer.as_ptr(), state.buffer.capacity())
        };
        let (start, room) = place();
        assert!(room >= BUFFER_RESERVED_BYTES);
        for _ in 0..2 {
            let end = log.state.lock().end + (24 << 20);
            append_up_to(&log, end);
            assert_eq!(place(), (start, room));
            log.flush_and_sync().unwrap();
            assert!(log.state.lock().buffer.is_empty());
            assert_eq!(place(), (start, room));
        }
    }

    #[test]
    fn everysec_asks_for_a_sync_before_the_segment_fills() {
        let limit = 64 << 20;
        let log = memory_log(Durability::EverySec);
        assert!(!sync_asked_after_appending_to(&log, limit - (17 << 20)));
        assert!(sync_asked_after_appending_to(&log, limit - (15 << 20)));
        assert!(!log.sync.lock().presync_wanted);
    }

    #[test]
    fn none_asks_for_the_active_segment_synced_without_waiting_for_the_synced_position() {
        let limit = 64 << 20;
        let log = memory_log(Durability::None);
        assert!(!sync_asked_after_appending_to(&log, limit - (17 << 20)));
        assert!(!log.sync.lock().presync_wanted);
        // Nothing would meet a request for the synced position under
        // `none`: the sync thread would go round without rest.
        assert!(!sync_asked_after_appending_to(&log, limit - (15 << 20)));
        assert!(std::mem::take(&mut log.sync.lock().presync_wanted));
        let fsyncs = || log.counters.fsyncs.load(Ordering::Relaxed);
        let before = fsyncs();
        log.flush_and_sync().unwrap();
        assert_eq!(fsyncs(), before + 1);
        // What it made durable is no longer kept for a heal.
        let state = log.state.lock();
        assert!(state.buffer.is_empty(), "{} bytes kept", state.buffer.len());
        assert_eq!(
            log.synced_lsn.load(Ordering::Acquire),
            lsn(state.active.id, state.end)
        );
        drop(state);
        assert!(!sync_asked_after_appending_to(&log, limit - (5 << 20)));
        assert!(!log.sync.lock().presync_wanted);
        assert!(!sync_asked_after_appending_to(&log, limit - (3 << 20)));
        assert!(log.sync.lock().presync_wanted);
    }

    #[test]
    fn none_asks_for_a_sync_while_the_records_kept_for_a_heal_are_past_their_bound() {
        // Segments large enough that the marks before the limit come late.
        let log = memory_log_of(Durability::None, 256 << 20);
        let asked = || std::mem::take(&mut log.sync.lock().presync_wanted);
        let header = u64::from(segment::HEADER_BYTES);
        let bound = header + UNSYNCED_BYTES_SOFT_MAX as u64;
        assert!(!sync_asked_after_appending_to(&log, bound));
        assert!(!asked());
        assert!(!sync_asked_after_appending_to(&log, bound + (1 << 20)));
        assert!(asked());
        // Every append past the bound asks again (an attempt may fail).
        assert!(!sync_asked_after_appending_to(&log, bound + (2 << 20)));
        assert!(asked());
        log.flush_and_sync().unwrap();
        assert!(log.state.lock().buffer.is_empty());
        // Below the bound again, nothing asks until it is passed again.
        let end = log.state.lock().end;
        let again = end + UNSYNCED_BYTES_SOFT_MAX as u64;
        assert!(!sync_asked_after_appending_to(&log, again));
        assert!(!asked());
        assert!(!sync_asked_after_appending_to(&log, again + (1 << 20)));
        assert!(asked());
    }

    #[test]
    fn a_segment_is_named_only_once_its_header_is_synced_and_a_failed_creation_leaves_nothing() {
        use crate::fs::{FaultKind, MemFs};
        let dir = PathBuf::from("/data");
        let header = SegmentHeader {
            origin: segment::Origin::Log,
            id: 7,
            seq_at_creation: 1,
            flush_seq: 0,
        };
        // Fail the header's write-back, its sync, then the directory's
        // (after the rename).
        for (nth, step) in [(1, "writing"), (2, "writing"), (3, "syncing directory")] {
            let fs = MemFs::new();
            fs.create_dir_all(&dir).unwrap();
            fs.inject_nth(FaultKind::EioOnSync, nth);
            let Err(error) = create_segment(&fs, &dir, header) else {
                panic!("sync {nth}: created");
            };
            let error = error.to_string();
            assert!(error.starts_with(step), "sync {nth}: {error}");
            fs.clear_faults();
            assert!(
                fs.file_names(&dir).is_empty(),
                "sync {nth}: {:?}",
                fs.file_names(&dir)
            );
            fs.power_cut(None);
            assert!(fs.file_names(&dir).is_empty(), "sync {nth}, power cut");
        }
        // The header's sync fails and so does the removal after it (or the
        // process dies there); another file's directory sync (the
        // compactor's, say) then makes whatever name the file has durable.
        // It is a temporary name, which open deletes, never a segment's.
        let fs = MemFs::new();
        fs.create_dir_all(&dir).unwrap();
        fs.inject_nth(FaultKind::EioOnSync, 1);
        fs.inject(FaultKind::EioOnRemove);
        assert!(create_segment(&fs, &dir, header).is_err());
        fs.clear_faults();
        fs.sync_dir(&dir).unwrap();
        fs.power_cut(None);
        let names = fs.file_names(&dir);
        assert_eq!(names, [format!("{}.tmp", segment::segment_name(7))]);

        let fs = MemFs::new();
        fs.create_dir_all(&dir).unwrap();
        create_segment(&fs, &dir, header).unwrap();
        fs.power_cut(None);
        assert_eq!(fs.file_names(&dir), [segment::segment_name(7)]);
        let bytes = fs.read_file(&dir.join(segment::segment_name(7))).unwrap();
        assert_eq!(bytes, header.encode());
    }

    #[test]
    fn segment_ids_run_out_with_an_error_instead_of_wrapping() {
        let segments = Segments::new(segment::ID_MAX - 1);
        assert_eq!(segments.allocate_id().unwrap(), segment::ID_MAX - 1);
        assert_eq!(segments.allocate_id().unwrap(), segment::ID_MAX);
        for _ in 0..2 {
            let error = segments.allocate_id().unwrap_err();
            assert!(error.to_string().contains("no segment id left"), "{error}");
        }
    }

    #[test]
    fn busy_threads_make_the_sync_wait_as_long_as_the_previous_round_took() {
        let began = Instant::now();
        let previous = round(7, began, Duration::from_micros(900));
        let ended = previous.ended;
        assert_eq!(
            group_deadline(&previous, 7, ended),
            Some(ended + Duration::from_micros(900))
        );
        // Part of the wait already passed: the same deadline.
        assert_eq!(
            group_deadline(&previous, 7, ended + Duration::from_micros(500)),
            Some(ended + Duration::from_micros(900))
        );
    }

    #[test]
    fn the_wait_never_exceeds_its_cap() {
        let previous = round(0, Instant::now(), Duration::from_secs(3));
        assert_eq!(
            group_deadline(&previous, 0, previous.ended),
            Some(previous.ended + GROUP_WAIT_MAX)
        );
    }

    #[test]
    fn no_wait_once_a_thread_ran_out_of_work_or_the_deadline_passed() {
        let previous = round(7, Instant::now(), Duration::from_millis(1));
        assert_eq!(group_deadline(&previous, 8, previous.ended), None);
        let deadline = previous.ended + Duration::from_millis(1);
        assert_eq!(group_deadline(&previous, 7, deadline), None);
        assert_eq!(
            group_deadline(&previous, 7, deadline + Duration::from_secs(1)),
            None
        );
        // The first round (nothing before it took any time) never waits.
        let first = round(0, Instant::now(), Duration::ZERO);
        assert_eq!(group_deadline(&first, 0, first.ended), None);
    }
}
