//! The engine handle: opening, reads, background threads, stats, closing.
//!
//! Threads: an [`Engine`] is `Send + Sync`; share it (e.g. in an `Arc`) with
//! every thread that reads or writes. Opening starts three background
//! threads: the log's sync thread, the compactor (hint files and
//! compaction), and the maintenance thread (delayed flushes, reclaiming
//! flushed items, keeping the value cache within budget). Dropping the
//! engine (or [`Engine::close`]) stops them and syncs the log.

use crate::clock::{is_expired, Clock};
use crate::config::{Config, Durability};
use crate::error::{Error, Result};
use crate::fs::{Fs, OsFs};
use crate::idle::IdleSignal;
use crate::item::Item;
use crate::keydir::{
    self, Entry, Keydir, BIT_DEAD_COUNTED, BIT_FETCHED, BIT_REFERENCED, BIT_STALE, BIT_WIN_SENT,
};
use crate::log::{CommitFuture, Log, Segments, Ticket};
use crate::record;
use crate::stats::{Counters, RecoveryReport, SegmentStats, Stats};
use bytes::Bytes;
use parking_lot::Mutex;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A value as a read finds it.
enum Found<'a> {
    /// Held in memory, borrowed under the partition's read lock.
    InMemory(&'a [u8]),
    /// Just read from its segment file.
    FromDisk(Bytes),
}

impl Found<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            Found::InMemory(value) => value,
            Found::FromDisk(value) => value,
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Found::InMemory(value) => Bytes::copy_from_slice(value),
            Found::FromDisk(value) => value,
        }
    }
}

/// How many times a read retries when compaction moved the value between
/// finding the key and reading the file.
const READ_RETRIES_MAX: usize = 8;

/// Where a value not held in memory is: enough to read it once the keydir
/// lock is let go ([`Inner::read_uncached`]).
pub(crate) struct OnDisk {
    hash: u64,
    segment_id: u32,
    offset: u32,
    value_len: u32,
}

impl OnDisk {
    /// Where `entry`'s value (its key's hash `hash`) is.
    pub(crate) fn of(entry: &Entry, hash: u64) -> OnDisk {
        OnDisk {
            hash,
            segment_id: entry.segment_id(),
            offset: entry.offset(),
            value_len: entry.value_len(),
        }
    }
}

/// `once` until it finds its value where the keydir said (`Some`), at
/// most [`READ_RETRIES_MAX`] times: each `None` is a value compaction
/// moved between the lookup and the read.
pub(crate) fn retrying<T>(mut once: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    for _ in 0..READ_RETRIES_MAX {
        if let Some(found) = once()? {
            return Ok(found);
        }
    }
    Err(Error::Io {
        context: "reading a value that compaction kept moving".into(),
        source: std::io::Error::from(std::io::ErrorKind::Interrupted),
    })
}

/// Options of a read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Also set the item's expiry (get-and-touch), without rewriting it.
    pub touch: Option<crate::clock::Expiry>,
    /// Offer the right to recache ("win") when the item's remaining time to
    /// live is below this many seconds.
    pub recache_below_secs: Option<u32>,
    /// Offer the right to recache stale items, and report whether another
    /// client was offered it already (the meta protocol's W, X, Z flags).
    pub claim_win: bool,
    /// Leave the item's access record as it was: neither mark it fetched
    /// nor note this read as its last access (the meta protocol's `u`).
    pub no_bump: bool,
}

/// State shared by the handle and the background threads.
pub(crate) struct Inner {
    pub config: Config,
    pub fs: Arc<dyn Fs>,
    pub keydir: Keydir,
    pub log: Arc<Log>,
    pub segments: Arc<Segments>,
    pub counters: Arc<Counters>,
    pub clock: Clock,
    pub next_seq: Arc<AtomicU64>,
    pub flush_seq: Arc<AtomicU64>,
    /// The log position just past the latest immediate flush record,
    /// raised before `flush_seq` (see [`Inner::seen`]).
    pub flush_lsn: AtomicU64,
    /// Unix second a delayed `flush_all` takes effect, 0 = none pending.
    pub flush_deadline: AtomicU32,
    /// Highest flush_seq whose items the maintenance thread has reclaimed.
    pub flush_swept: AtomicU64,
    /// The keydir partition the expiry sweep looks at next.
    pub expiry_hand: AtomicUsize,
    /// The keydir partition the cache trimmer looks at next.
    pub cache_hand: AtomicUsize,
    /// Bytes of values the cache may hold: `config.cache_bytes_max` until
    /// [`Engine::set_cache_bytes_max`] changes it.
    pub cache_budget: AtomicU64,
    /// Serialises compaction with itself (and with tests' `compact_now`).
    pub compaction_lock: Mutex<()>,
    /// Segments compaction has removed whose blocks are not yet freed (see
    /// [`crate::compaction::release_removed`]).
    pub removed_segments: Mutex<Vec<crate::compaction::Removed>>,
    /// Compaction outputs whose pass failed after keys were switched to
    /// them, by id, each with the ids of the segments it copied from (see
    /// [`crate::compaction::recopy_abandoned`]).
    pub abandoned_outputs: Mutex<std::collections::BTreeMap<u32, Vec<u32>>>,
    /// One maintenance round at a time (the maintenance thread's and
    /// `Engine::maintain_now`'s): healing the log and trimming the cache
    /// must not interleave, or a trim could drop a value whose record heal
    /// has cut off the old segment but not yet pointed at its copy.
    pub maintenance_lock: Mutex<()>,
    /// Held while a due delayed flush is carried out: until its record is
    /// logged and the flush generation raised, other operations wait here
    /// instead of reading items it hides.
    pub flush_activation: Mutex<()>,
    pub recovery: RecoveryReport,
    pub shutdown: AtomicBool,
    pub closed: AtomicBool,
    pub _dir_lock: Box<dyn Any + Send + Sync>,
}

/// A Larder storage engine over one data directory. See the crate docs.
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Engine {
    /// Opens (creating if needed) the data directory on the real file
    /// system, recovers its contents and starts the background threads.
    ///
    /// Errors: [`Error::Locked`] if another process holds the directory;
    /// [`Error::Corruption`] for damage in sealed data (the tail of the active
    /// segment is instead cut and reported in [`Stats::recovery`]);
    /// [`Error::Io`] if files cannot be read or created.
    pub fn open(config: Config) -> Result<Engine> {
        Engine::open_with(config, Arc::new(OsFs), Clock::system())
    }

    /// Opens with an explicit file system and clock (tests inject faults and
    /// move time with these).
    pub fn open_with(config: Config, fs: Arc<dyn Fs>, clock: Clock) -> Result<Engine> {
        let background = config.background_threads;
        let inner = Arc::new(crate::recovery::recover(config, fs, clock)?);
        // A delayed flush that came due while the engine was down is carried
        // out (and logged) before anyone reads.
        let _ = inner.now();
        let engine = Engine {
            inner,
            threads: Mutex::new(Vec::new()),
        };
        engine.start_threads(background)?;
        Ok(engine)
    }

    /// Starts the sync thread, and unless `background` is off, the
    /// compactor and maintenance threads.
    fn start_threads(&self, background: bool) -> Result<()> {
        let mut threads = self.threads.lock();
        let spawn = |name: &str, body: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(body)
                .map_err(|e| Error::io(format!("starting thread {name}"), e))
        };
        let log = Arc::clone(&self.inner.log);
        threads.push(spawn(
            "larder-sync",
            Box::new(move || {
                if !crate::scheduling::run_as_batch() {
                    tracing::debug!("the sync thread runs with the default scheduling policy");
                }
                log.sync_loop();
            }),
        )?);
        if !background {
            return Ok(());
        }
        let inner = Arc::clone(&self.inner);
        threads.push(spawn(
            "larder-compact",
            Box::new(move || crate::compaction::compactor_loop(&inner)),
        )?);
        let inner = Arc::clone(&self.inner);
        threads.push(spawn(
            "larder-maint",
            Box::new(move || crate::maintenance::maintenance_loop(&inner)),
        )?);
        Ok(())
    }

    /// Reads `key`. `Ok(None)` when absent, expired or flushed. Under
    /// `Always` it first waits for the unsynced writes it saw to be synced
    /// (see [`Engine::get_with`]).
    ///
    /// Errors: [`Error::Corruption`] if the value had to be read from a
    /// segment file and failed its checksum; [`Error::Io`] if that read
    /// failed; a commit's errors (see [`Engine::commit`]).
    pub fn get(&self, key: &[u8]) -> Result<Option<Item>> {
        let (item, ticket) = self.get_with(key, ReadOptions::default())?;
        self.commit(ticket)?;
        Ok(item)
    }

    /// Reads `key` with options; returns the item and the ticket to commit
    /// before the answer is acted on: a touch's, and under `Always` that of
    /// every write the read may have seen that is not yet synced (another
    /// client's value, delete or flush), so that nobody acts on a write a
    /// power cut could still take back. Under the other modes a read's
    /// ticket is [`Ticket::NONE`].
    pub fn get_with(&self, key: &[u8], options: ReadOptions) -> Result<(Option<Item>, Ticket)> {
        if options.touch.is_some() {
            return self.inner.touch(key, options, true);
        }
        let mut take = |mut item: Item, value: Found<'_>| {
            item.value = value.into_bytes();
            item
        };
        self.read_retrying(key, options, &mut take)
    }

    /// Reads `key` as [`Engine::get_with`] does and hands the item to
    /// `visit` with its value as a separate slice (`item.value` is always
    /// empty): a value held in memory is not copied out first, so a caller
    /// that only copies it on (into a reply) copies it once. `visit` runs at
    /// most once; for a value held in memory it runs under the read lock of
    /// the key's keydir partition, so it must be brief (no allocation that
    /// grows with anything but the value) and must not call into the
    /// engine. `Ok((None, _))` when the key is absent, expired or flushed.
    /// Errors as [`Engine::get_with`].
    pub fn get_visit<R>(
        &self,
        key: &[u8],
        options: ReadOptions,
        mut visit: impl FnMut(&Item, &[u8]) -> R,
    ) -> Result<(Option<R>, Ticket)> {
        if options.touch.is_some() {
            let (item, ticket) = self.inner.touch(key, options, true)?;
            let visited = item.map(|mut item| {
                let value = std::mem::take(&mut item.value);
                visit(&item, &value)
            });
            return Ok((visited, ticket));
        }
        let mut take = |item: Item, value: Found<'_>| visit(&item, value.as_slice());
        self.read_retrying(key, options, &mut take)
    }

    /// [`Inner::read_once`] until the value stays where the keydir said.
    fn read_retrying<R>(
        &self,
        key: &[u8],
        options: ReadOptions,
        take: &mut impl FnMut(Item, Found<'_>) -> R,
    ) -> Result<(Option<R>, Ticket)> {
        retrying(|| self.inner.read_once(key, options, take))
    }

    /// Asks the processor to start loading the keydir entries of `keys`
    /// without waiting for them, for a caller about to handle the keys one
    /// after another (a pipeline's requests): their loads then overlap,
    /// instead of each request waiting for its own. Changes nothing. Finding
    /// each entry still waits on the table itself, under the partition's
    /// read lock; what overlaps is the load of the entries.
    pub fn prefetch<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        for key in keys {
            let hash = self.inner.keydir.hash(key);
            let table = self.inner.keydir.partition(hash).read();
            crate::keydir::prefetch(&table, hash);
        }
    }

    /// Waits until the writes up to `ticket` are acknowledged under the
    /// configured durability (see [`crate::Durability`]). Blocks the thread.
    ///
    /// Errors: [`Error::Io`] if the write to the OS failed (retried by the
    /// next commit), [`Error::WritesFailing`] after a failed sync.
    pub fn commit(&self, ticket: Ticket) -> Result<()> {
        self.inner.log.commit(ticket)
    }

    /// [`Engine::commit`] as a future usable on any executor; it never blocks
    /// longer than one `write(2)`.
    pub fn commit_async(&self, ticket: Ticket) -> CommitFuture {
        self.inner.log.commit_async(ticket)
    }

    /// Lets group commits under `Always` wait for more committers while the
    /// threads that run them are busy, which the host tells through
    /// `signal` (see [`IdleSignal`]). The threads that report must be the
    /// ones that commit: a committer elsewhere, with no thread reporting,
    /// may wait as long as the previous sync took (at most 2 ms) for its
    /// group to fill. Returns false, and keeps the first, if a signal is
    /// attached already.
    pub fn attach_idle_signal(&self, signal: Arc<IdleSignal>) -> bool {
        self.inner.log.attach_idle_signal(signal)
    }

    /// The idle signal attached with [`Engine::attach_idle_signal`], for
    /// further threads that run committers to report to.
    pub fn idle_signal(&self) -> Option<Arc<IdleSignal>> {
        self.inner.log.idle_signal()
    }

    /// How many items requests have found expired, and flushed, before
    /// they were reclaimed ([`Stats::found_expired`], [`Stats::found_flushed`]),
    /// without gathering the other figures.
    pub fn found_dead(&self) -> (u64, u64) {
        let counters = &self.inner.counters;
        (
            counters.found_expired.load(Ordering::Relaxed),
            counters.found_flushed.load(Ordering::Relaxed),
        )
    }

    /// Writes out and `fdatasync`s everything written so far, whatever the
    /// durability mode.
    ///
    /// Errors: [`Error::Io`] if the write or the sync failed;
    /// [`Error::WritesFailing`] once any sync has failed (until reopened).
    pub fn sync(&self) -> Result<()> {
        self.inner.log.flush_and_sync()
    }

    /// The clock the engine uses.
    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// What opening the directory found.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// A snapshot of the engine's figures.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Runs one compaction pass now on segments whose dead fraction is at
    /// least `dead_ratio_min`, and writes missing hint files; merges small
    /// segments as the compactor does; then deletes the files of removed
    /// segments that no reader holds. Returns the number of segments
    /// compacted or merged; an error if any step failed, including only
    /// that deletion (the pass is then done, and the next open deletes
    /// what is left).
    pub fn compact_now(&self, dead_ratio_min: f64) -> Result<usize> {
        crate::compaction::write_pending_hints(&self.inner)?;
        let compacted = crate::compaction::compact(&self.inner, dead_ratio_min);
        let merged = crate::compaction::merge_small(&self.inner);
        let released = crate::compaction::release_removed(&self.inner);
        let (compacted, merged) = (compacted?, merged?);
        if let Some(unfreed) = compacted.unfreed.or(merged.unfreed) {
            return Err(unfreed);
        }
        released?;
        Ok(compacted.segments + merged.segments)
    }

    /// Changes how many bytes of values the cache may hold (memcached's
    /// `cache_memlimit`). Lowered, the cache is trimmed to it by the
    /// maintenance thread's passes, every tenth of a second; values whose
    /// writes are not yet synced stay cached until they are.
    pub fn set_cache_bytes_max(&self, bytes: u64) {
        self.inner.cache_budget.store(bytes, Ordering::Relaxed);
    }

    /// How many bytes of values the cache may hold now.
    pub fn cache_bytes_max(&self) -> u64 {
        self.inner.cache_budget.load(Ordering::Relaxed)
    }

    /// How many keydir partitions there are (see [`Engine::walk_partition`]).
    pub fn partitions(&self) -> usize {
        self.inner.keydir.len()
    }

    /// Hands each live item of keydir partition `index` to `visit`: its
    /// key, the item without its value (not marked fetched), and the bytes
    /// its record takes on disk. Runs under the partition's read lock, so
    /// `visit` must be brief and must not call into the engine. Past the
    /// last partition there is nothing to walk. Returns the ticket to
    /// commit before what the walk saw is told to anyone, as a read's
    /// (under `Always`, the sync of the writes it saw; see
    /// [`Engine::get_with`]).
    pub fn walk_partition(&self, index: usize, mut visit: impl FnMut(&[u8], &Item, u64)) -> Ticket {
        let inner = &*self.inner;
        if index >= self.partitions() {
            return Ticket::NONE;
        }
        let options = ReadOptions {
            no_bump: true,
            ..ReadOptions::default()
        };
        let now = inner.now();
        let table = inner.keydir.partition_at(index).read();
        // Of the entries in the active segment (the others are synced), the
        // one whose record ends furthest: its sync covers the others'.
        let active = inner.log.active_id_now();
        let mut latest: Option<&crate::keydir::Entry> = None;
        for entry in table.iter().filter(|entry| inner.is_live(entry, now)) {
            let item = inner.describe(entry, now, options);
            visit(entry.key(), &item, entry.record_len());
            if entry.segment_id() == active
                && latest.is_none_or(|latest| entry.offset() > latest.offset())
            {
                latest = Some(entry);
            }
        }
        inner.seen(index, latest)
    }

    /// Hands every live item to `visit`, with its key and value, one
    /// keydir partition at a time, and returns how many it handed. Reads
    /// do not mark the items fetched. The keys of one partition are
    /// gathered under its read lock and their items read after it is let
    /// go, so an item written or removed meanwhile is handed as it is
    /// then, or not at all; an item present throughout is handed once.
    /// Stops at `visit`'s first error, or a read's.
    pub fn for_each_live<E: From<Error>>(
        &self,
        mut visit: impl FnMut(&[u8], Item) -> std::result::Result<(), E>,
    ) -> std::result::Result<u64, E> {
        let options = ReadOptions {
            no_bump: true,
            ..ReadOptions::default()
        };
        let mut handed = 0;
        let mut keys = Vec::new();
        for index in 0..self.partitions() {
            // As for each read's ticket below.
            let _ticket = self.walk_partition(index, |key, _, _| keys.push(key.to_vec()));
            for key in keys.drain(..) {
                // The ticket matters to a caller that acts on what it read
                // while others write (see `get_with`); a caller that wants
                // the items durable syncs first.
                if let (Some(item), _) = self.get_with(&key, options)? {
                    visit(&key, item)?;
                    handed += 1;
                }
            }
        }
        Ok(handed)
    }

    /// Runs the maintenance work (delayed flushes, reclaiming flushed and
    /// expired items, cache trimming) once now; the expiry sweep looks at
    /// one tick's share of the keydir partitions (8).
    pub fn maintain_now(&self) {
        crate::maintenance::maintain_once(&self.inner);
    }

    /// Stops the background threads and syncs the log. Further calls fail
    /// with [`Error::Closed`]... or simply drop the engine.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.inner.shutdown.store(true, Ordering::SeqCst);
        self.inner.log.shutdown();
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
        }
        if let Err(error) = crate::compaction::release_removed(&self.inner) {
            tracing::error!(%error, "freeing removed segments (what is left, the next open deletes)");
        }
        if self.inner.log.sync_failure().is_some() {
            return Ok(());
        }
        self.inner.log.close()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown() {
            tracing::error!(%error, "closing the engine");
        }
    }
}

impl Inner {
    /// Issues `count` consecutive seqs and returns the first. Fails, issuing
    /// none, if any would pass [`record::SEQ_MAX`], the largest a file may
    /// hold: a record with a larger one would be refused as damage at the
    /// next open. (No engine gets there by writing: 2^62 writes take over
    /// 14,000 years at ten million a second; a damaged or crafted directory
    /// can start it close.)
    pub(crate) fn issue_seqs(&self, count: u64) -> Result<u64> {
        self.next_seq
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |next| {
                next.checked_add(count)
                    .filter(|&after| after <= record::SEQ_MAX + 1)
            })
            .map_err(|next| {
                Error::Exhausted(format!(
                    "no sequence number left for this write: the next is {next}, the largest {}",
                    record::SEQ_MAX
                ))
            })
    }

    /// The current unix second, after carrying out a delayed `flush_all`
    /// that has come due: as in memcached, no operation may see an item the
    /// flush hides, whether or not the maintenance thread has run yet.
    /// Call it before taking any partition lock (it may append to the log).
    pub fn now(&self) -> u32 {
        let now = self.clock.now();
        crate::maintenance::activate_due_flush(self, now);
        now
    }

    /// What a read or a write that changed nothing must commit before it is
    /// answered (call it after any `is_live` check of the answer, so that it
    /// loads `flush_lsn` after `flush_seq`): under `Always`, the log position of every unsynced record
    /// whose effect it may have seen, so that no client acts on a write a
    /// power cut can still take back (B reads what A wrote and is waiting
    /// to sync); [`Ticket::NONE`] when that is synced, and in the other
    /// modes, which acknowledge before syncing anyway. Call it under the
    /// read or write lock of partition `index`; `entry` is the key's entry
    /// if it has one, live or not.
    ///
    /// It covers the entry's own record when that is in the active log
    /// segment (a sealed segment was synced when sealed, and a compaction
    /// output holds copies of records in sealed segments, which stay until
    /// the output is synced), the partition's latest
    /// delete or touch (which no entry points at), and the latest
    /// immediate flush. A read of a recently written key or partition then
    /// waits for the group commit its writer waits for; one that finds
    /// everything synced pays three loads.
    #[inline]
    pub fn seen(&self, index: usize, entry: Option<&Entry>) -> Ticket {
        if self.config.durability != Durability::Always {
            return Ticket::NONE;
        }
        let mut position = self
            .keydir
            .changed(index)
            .max(self.flush_lsn.load(Ordering::Acquire));
        // An entry in another segment than the active one is durable (see
        // `Log::active_id_now`).
        let active = self.log.active_id_now();
        if let Some(entry) = entry.filter(|entry| entry.segment_id() == active) {
            let end = u64::from(entry.offset()) + entry.record_len();
            position = position.max(crate::log::lsn(active, end));
        }
        // Loaded last: a sync that covered all of the above has published
        // its position by now.
        if position > self.log.synced_lsn() {
            self.counters.unsynced_seen.fetch_add(1, Ordering::Relaxed);
            Ticket(position)
        } else {
            Ticket::NONE
        }
    }

    /// Notes a delete or touch of a key in the partition of `hash`, whose
    /// write lock is held, for [`Inner::seen`].
    pub(crate) fn note_change(&self, hash: u64, ticket: Ticket) {
        if self.config.durability == Durability::Always {
            self.keydir
                .note_change(self.keydir.partition_index(hash), ticket.0);
        }
    }

    /// Counts an entry a request found that is not live, as flushed or as
    /// expired, once per item: memcached counts an item it finds so in
    /// `get_flushed` or `get_expired` and unlinks it, so the next request
    /// is a plain miss; here the entry stays until it is reclaimed, and a
    /// bit marks it counted (a new put clears it).
    #[cold]
    pub(crate) fn found_dead(&self, entry: &Entry) {
        if entry.bits().fetch_or(BIT_DEAD_COUNTED, Ordering::Relaxed) & BIT_DEAD_COUNTED != 0 {
            return;
        }
        let counter = if entry.cas() < self.flush_seq.load(Ordering::Acquire) {
            &self.counters.found_flushed
        } else {
            &self.counters.found_expired
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// `found` if it holds a live item at `now`; an entry that does not is
    /// counted ([`Inner::found_dead`]).
    #[inline]
    pub(crate) fn live<'e>(&self, found: Option<&'e Entry>, now: u32) -> Option<&'e Entry> {
        let entry = found?;
        if self.is_live(entry, now) {
            return Some(entry);
        }
        self.found_dead(entry);
        None
    }

    /// True when `entry` holds a live item at `now`.
    pub fn is_live(&self, entry: &Entry, now: u32) -> bool {
        !is_expired(entry.exptime(), now) && entry.cas() >= self.flush_seq.load(Ordering::Acquire)
    }

    /// One attempt at a read without touch, handing what it found to `take`
    /// (at most once). `Ok(None)` means retry (the value moved);
    /// `Ok(Some((None, _)))` is a miss. The ticket is what the answer must
    /// wait for ([`Inner::seen`]).
    fn read_once<R>(
        &self,
        key: &[u8],
        options: ReadOptions,
        take: &mut impl FnMut(Item, Found<'_>) -> R,
    ) -> Result<Option<(Option<R>, Ticket)>> {
        let now = self.now();
        let hash = self.keydir.hash(key);
        let index = self.keydir.partition_index(hash);
        let table = self.keydir.partition_at(index).read();
        let Some(entry) = keydir::find(&table, hash, key) else {
            return Ok(Some((None, self.seen(index, None))));
        };
        // `is_live` loads the flush generation first: a flush raises it
        // after `flush_lsn`, which `seen` then loads.
        let live = self.live(Some(entry), now).is_some();
        let seen = self.seen(index, Some(entry));
        if !live {
            return Ok(Some((None, seen)));
        }
        let item = self.describe(entry, now, options);
        if let Some(value) = entry.cached_value() {
            return Ok(Some((Some(take(item, Found::InMemory(value))), seen)));
        }
        let at = OnDisk::of(entry, hash);
        drop(table);
        let Some(value) = self.read_uncached(key, item.cas, &at)? else {
            return Ok(None);
        };
        Ok(Some((Some(take(item, Found::FromDisk(value))), seen)))
    }

    /// Reads the value of `key` (seq `cas`) that is not held in memory from
    /// where `at` says, with the keydir lock let go, and caches it if the
    /// budget allows. `Ok(None)` when compaction moved it meanwhile: look
    /// the key up again.
    pub(crate) fn read_uncached(&self, key: &[u8], cas: u64, at: &OnDisk) -> Result<Option<Bytes>> {
        let read = self.read_value(key, cas, at.segment_id, at.offset, at.value_len)?;
        if let Some(value) = &read {
            self.maybe_cache(key, at.hash, cas, value);
        }
        Ok(read)
    }

    /// The item's metadata (value left empty), updating access bits.
    ///
    /// Inlined: it is on every read's path, and out of line it cost a get
    /// about 40 instructions (measured with `benchmarks/instructions.sh`).
    #[inline]
    pub fn describe(&self, entry: &Entry, now: u32, options: ReadOptions) -> Item {
        let (before, last_access) = if options.no_bump {
            (
                entry.bits().load(Ordering::Relaxed),
                entry.atime().load(Ordering::Relaxed),
            )
        } else {
            (
                entry
                    .bits()
                    .fetch_or(BIT_FETCHED | BIT_REFERENCED, Ordering::Relaxed),
                entry.atime().swap(now, Ordering::Relaxed),
            )
        };
        let stale = before & BIT_STALE != 0;
        let expiring = match options.recache_below_secs {
            Some(secs) => entry.exptime() != 0 && entry.exptime().saturating_sub(now) < secs,
            None => false,
        };
        let mut win = false;
        let mut win_already_sent = false;
        if options.claim_win && (stale || expiring) {
            let previous = entry.bits().fetch_or(BIT_WIN_SENT, Ordering::Relaxed);
            win = previous & BIT_WIN_SENT == 0;
            win_already_sent = !win;
        } else if options.claim_win && before & BIT_WIN_SENT != 0 {
            win_already_sent = true;
        }
        Item {
            value: Bytes::new(),
            flags: entry.flags(),
            exptime: entry.exptime(),
            cas: entry.cas(),
            last_access,
            fetched_before: before & BIT_FETCHED != 0,
            stale,
            win,
            win_already_sent,
        }
    }

    /// Reads a value from its segment file and checks it. `Ok(None)` when the
    /// segment is gone (compaction moved the value: retry the lookup).
    pub fn read_value(
        &self,
        key: &[u8],
        cas: u64,
        segment_id: u32,
        offset: u32,
        value_len: u32,
    ) -> Result<Option<Bytes>> {
        let Some(segment) = self.segments.get(segment_id) else {
            return Ok(None);
        };
        self.counters.disk_reads.fetch_add(1, Ordering::Relaxed);
        let len = record::HEADER_BYTES + key.len() + value_len as usize;
        let mut bytes = vec![0u8; len];
        segment
            .file
            .read_exact_at(&mut bytes, u64::from(offset))
            .map_err(|e| Error::io(format!("reading {} at {offset}", segment.path.display()), e))?;
        let corrupt = |reason: String| Error::Corruption {
            file: segment.path.clone(),
            offset: u64::from(offset),
            reason,
        };
        let header = record::decode(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if bytes.get(header.key_range()) != Some(key) || header.seq != cas {
            return Err(corrupt(format!(
                "record is not the expected put (seq {}, expected {cas})",
                header.seq
            )));
        }
        let value = Bytes::from(bytes).slice(header.value_range());
        Ok(Some(value))
    }

    /// Caches a value read from disk if the budget allows and the entry is
    /// unchanged.
    fn maybe_cache(&self, key: &[u8], hash: u64, cas: u64, value: &[u8]) {
        let budget = self.cache_budget.load(Ordering::Relaxed);
        let cached = self.counters.cached_bytes.load(Ordering::Relaxed);
        if cached + value.len() as u64 > budget {
            return;
        }
        let mut table = self.keydir.partition(hash).write();
        if let Some(entry) = table.find_mut(hash, |entry| entry.key() == key) {
            if entry.cas() == cas && !entry.is_cached() {
                entry.cache(value);
                self.counters
                    .cached_bytes
                    .fetch_add(value.len() as u64, Ordering::Relaxed);
            }
        }
    }

    fn stats(&self) -> Stats {
        let counters = &self.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let segments = self.segments.all();
        let segment_details: Vec<SegmentStats> = segments
            .iter()
            .map(|segment| SegmentStats {
                id: segment.id,
                len_bytes: segment.len_bytes.load(Ordering::Relaxed),
                live_bytes: segment.live_bytes.load(Ordering::Relaxed),
                sealed: segment.sealed.load(Ordering::Relaxed),
            })
            .collect();
        let disk_bytes = segment_details.iter().map(|s| s.len_bytes).sum();
        let live_bytes = segment_details.iter().map(|s| s.live_bytes).sum();
        Stats {
            items: load(&counters.items),
            item_bytes: load(&counters.item_bytes),
            cached_bytes: load(&counters.cached_bytes),
            cache_bytes_max: self.cache_budget.load(Ordering::Relaxed),
            disk_reads: load(&counters.disk_reads),
            unsynced_seen: load(&counters.unsynced_seen),
            segments: segment_details.len() as u64,
            disk_bytes,
            live_bytes,
            dead_bytes: disk_bytes - live_bytes.min(disk_bytes),
            segment_details,
            log_bytes_written: load(&counters.log_bytes_written),
            write_errors: load(&counters.write_errors),
            sync_failure: self.log.sync_failure(),
            fsyncs: load(&counters.fsyncs),
            fsync_micros_total: load(&counters.fsync_micros_total),
            fsync_micros_max: load(&counters.fsync_micros_max),
            group_commits: load(&counters.group_commits),
            group_commit_writers: load(&counters.group_commit_writers),
            group_commit_writers_max: load(&counters.group_commit_writers_max),
            group_commits_waited: load(&counters.group_commits_waited),
            compactions: load(&counters.compactions),
            compaction_bytes_read: load(&counters.compaction_bytes_read),
            compaction_bytes_written: load(&counters.compaction_bytes_written),
            reclaimed_items: load(&counters.reclaimed_items),
            found_expired: load(&counters.found_expired),
            found_flushed: load(&counters.found_flushed),
            expiry_walks: load(&counters.expiry_walks),
            cache_evictions: load(&counters.cache_evictions),
            next_cas: self.next_seq.load(Ordering::Relaxed),
            flush_deadline: self.flush_deadline.load(Ordering::Acquire),
            recovery: self.recovery.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Expiry;
    use crate::fs::MemFs;

    #[test]
    fn a_retried_read_runs_until_it_finds_its_value_and_gives_up_after_the_bound() {
        let mut calls = 0;
        let found = retrying(|| {
            calls += 1;
            Ok((calls == 3).then_some("value"))
        });
        assert_eq!((found.ok(), calls), (Some("value"), 3));

        let mut calls = 0;
        let error = retrying::<()>(|| {
            calls += 1;
            Ok(None)
        })
        .expect_err("a value that keeps moving is an error");
        assert_eq!(calls, READ_RETRIES_MAX);
        assert!(
            error.to_string().contains("compaction kept moving"),
            "{error}"
        );
    }

    #[test]
    fn a_location_whose_segment_compaction_removed_reads_as_moved_and_a_new_lookup_finds_the_value()
    {
        let fs = MemFs::new();
        let mut config = Config::new("/data");
        config.durability = Durability::None;
        config.background_threads = false;
        config.segment_bytes_max = 4096;
        config.cache_bytes_max = 0;
        let engine = Engine::open_with(config, Arc::new(fs), Clock::system()).unwrap();
        let cas = engine.set(b"k", b"the value", 7, Expiry::Never).unwrap();
        // Where the value is now: what a read or a get-and-touch holds once
        // it lets the keydir lock go.
        let inner = &*engine.inner;
        let hash = inner.keydir.hash(b"k");
        let at = {
            let table = inner.keydir.partition(hash).read();
            let entry = crate::keydir::find(&table, hash, b"k").unwrap();
            OnDisk::of(entry, hash)
        };
        assert_eq!(
            inner.read_uncached(b"k", cas, &at).unwrap().as_deref(),
            Some(&b"the value"[..])
        );
        // Overwrites fill and seal the segment, and compaction copies `k`
        // elsewhere and removes it.
        for round in 0..200u32 {
            engine
                .set(b"filler", &round.to_be_bytes().repeat(25), 0, Expiry::Never)
                .unwrap();
        }
        engine.compact_now(0.0).unwrap();
        assert!(inner.segments.get(at.segment_id).is_none(), "not removed");

        // The old location reads as moved: the caller looks the key up again.
        assert_eq!(inner.read_uncached(b"k", cas, &at).unwrap(), None);
        // A get, and a get-and-touch, find it where it went.
        let (item, _) = engine.get_with(b"k", ReadOptions::default()).unwrap();
        let item = item.expect("k is still there");
        assert_eq!(
            (&item.value[..], item.flags, item.cas),
            (&b"the value"[..], 7, cas)
        );
        let touch = ReadOptions {
            touch: Some(Expiry::Never),
            ..ReadOptions::default()
        };
        let (item, _) = engine.get_with(b"k", touch).unwrap();
        assert_eq!(item.expect("k is still there").value, &b"the value"[..]);
    }
}
