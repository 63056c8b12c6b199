//! Counters the engine keeps while it runs, and the snapshot it reports.
//!
//! Counters are relaxed atomics updated by any thread; a [`Stats`] snapshot
//! is consistent per field, not across fields.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Live counters, shared by the engine's threads.
#[derive(Debug, Default)]
pub struct Counters {
    /// Items in the keydir (expired ones included until reclaimed).
    pub items: AtomicU64,
    /// Key plus value bytes of those items.
    pub item_bytes: AtomicU64,
    /// Value bytes held in memory.
    pub cached_bytes: AtomicU64,
    /// Reads served from segment files because the value was not cached.
    pub disk_reads: AtomicU64,
    /// Under `always`: reads, and writes that changed nothing, that saw an
    /// unsynced write and returned its ticket (see `Inner::seen`).
    pub unsynced_seen: AtomicU64,
    /// Bytes handed to the OS by the log.
    pub log_bytes_written: AtomicU64,
    /// Failed writes to the log (retried by the next commit, and under
    /// `always` by the sync thread, every 20 ms).
    pub write_errors: AtomicU64,
    /// `fdatasync` calls on the log, and their total and worst latency.
    pub fsyncs: AtomicU64,
    /// Total `fdatasync` time in microseconds.
    pub fsync_micros_total: AtomicU64,
    /// Longest `fdatasync` in microseconds.
    pub fsync_micros_max: AtomicU64,
    /// Group commits (syncs that had committers waiting) and the committers
    /// they covered.
    pub group_commits: AtomicU64,
    /// Committers covered by group commits.
    pub group_commit_writers: AtomicU64,
    /// Largest number of committers one sync covered.
    pub group_commit_writers_max: AtomicU64,
    /// Syncs for waiting committers that first waited for busy request
    /// threads to bring more (`Always` with an idle signal attached).
    pub group_commits_waited: AtomicU64,
    /// Segments sealed by the log.
    pub segments_sealed: AtomicU64,
    /// Compaction runs finished (one per output segment), bytes they read
    /// and wrote, and segments they removed.
    pub compactions: AtomicU64,
    /// Bytes of segments compaction read.
    pub compaction_bytes_read: AtomicU64,
    /// Bytes compaction wrote.
    pub compaction_bytes_written: AtomicU64,
    /// Items removed in the background because they expired or were flushed.
    pub reclaimed_items: AtomicU64,
    /// Items a request found expired before they were reclaimed; each
    /// counted once.
    pub found_expired: AtomicU64,
    /// The same for items found flushed.
    pub found_flushed: AtomicU64,
    /// Keydir partitions the expiry sweep walked (it passes over those that
    /// hold no item with an expiry time).
    pub expiry_walks: AtomicU64,
    /// Values dropped from memory to stay within the cache budget.
    pub cache_evictions: AtomicU64,
}

impl Counters {
    /// Records one `fdatasync` and how long it took.
    pub fn record_fsync(&self, took: Duration) {
        let micros = took.as_micros().min(u128::from(u64::MAX)) as u64;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.fsync_micros_total.fetch_add(micros, Ordering::Relaxed);
        self.fsync_micros_max.fetch_max(micros, Ordering::Relaxed);
    }

    /// Records a group commit that covered `writers` committers.
    pub fn record_group_commit(&self, writers: u64) {
        self.group_commits.fetch_add(1, Ordering::Relaxed);
        self.group_commit_writers
            .fetch_add(writers, Ordering::Relaxed);
        self.group_commit_writers_max
            .fetch_max(writers, Ordering::Relaxed);
    }
}

/// Figures from opening the data directory.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Segments found.
    pub segments: u64,
    /// Segments loaded from their hint files.
    pub segments_from_hints: u64,
    /// Segments scanned record by record.
    pub segments_scanned: u64,
    /// Records read (from hints or scans).
    pub records: u64,
    /// Live items after recovery.
    pub items: u64,
    /// Bytes cut from the end of the active segment: a torn tail, damage
    /// that no intact record follows (damage that one does fails the open).
    pub truncated_bytes: u64,
    /// The file the tail was cut from, if any.
    pub truncated_file: Option<std::path::PathBuf>,
    /// Why the tail was cut.
    pub truncated_reason: Option<String>,
    /// Unfinished compaction outputs removed.
    pub abandoned_compactions: u64,
    /// Segment files removed because a power cut interrupted their creation
    /// before their header reached the disk: they held no records.
    pub unfinished_segments: u64,
    /// Active segments rewritten because syncing them at open failed (see
    /// the README's durability section): 0 or 1.
    pub rewritten_segments: u64,
    /// Damaged segments salvage rewrote (sealed ones, and the active one
    /// when intact records follow its damage), or moved aside whole when
    /// they had no header and no room for a record (only when asked for,
    /// see [`crate::Config::salvage`]).
    pub salvaged_segments: u64,
    /// Damaged records salvage skipped (for a segment moved aside, the
    /// records its hint named).
    pub salvaged_records_skipped: u64,
    /// Time it took.
    pub duration: Duration,
}

/// A point-in-time view of the engine for `stats`.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Items in the keydir.
    pub items: u64,
    /// Key plus value bytes of those items.
    pub item_bytes: u64,
    /// Value bytes cached in memory.
    pub cached_bytes: u64,
    /// The value cache's budget.
    pub cache_bytes_max: u64,
    /// Reads that went to segment files.
    pub disk_reads: u64,
    /// Under `always`: reads, and writes that changed nothing, that saw an
    /// unsynced write, so their answer waited for its sync.
    pub unsynced_seen: u64,
    /// Segment files and their total size.
    pub segments: u64,
    /// Total bytes of all segment files.
    pub disk_bytes: u64,
    /// Bytes of records the keydir points at.
    pub live_bytes: u64,
    /// Bytes compaction can reclaim.
    pub dead_bytes: u64,
    /// Per segment: id, length, live bytes.
    pub segment_details: Vec<SegmentStats>,
    /// Log bytes handed to the OS.
    pub log_bytes_written: u64,
    /// Failed log writes.
    pub write_errors: u64,
    /// The sticky sync failure, if writes are refused.
    pub sync_failure: Option<String>,
    /// `fdatasync` calls, total and max latency in microseconds.
    pub fsyncs: u64,
    /// Total fsync time in microseconds.
    pub fsync_micros_total: u64,
    /// Longest fsync in microseconds.
    pub fsync_micros_max: u64,
    /// Group commits and the committers they covered.
    pub group_commits: u64,
    /// Committers covered.
    pub group_commit_writers: u64,
    /// Largest group.
    pub group_commit_writers_max: u64,
    /// Group commits that waited for busy request threads.
    pub group_commits_waited: u64,
    /// Compaction runs (one per output segment), bytes read and written.
    pub compactions: u64,
    /// Bytes compaction read.
    pub compaction_bytes_read: u64,
    /// Bytes compaction wrote.
    pub compaction_bytes_written: u64,
    /// Items reclaimed after expiry or flush.
    pub reclaimed_items: u64,
    /// Items a request found expired before they were reclaimed, each
    /// counted once (memcached's `get_expired`).
    pub found_expired: u64,
    /// Items a request found flushed before they were reclaimed, each
    /// counted once (memcached's `get_flushed`).
    pub found_flushed: u64,
    /// Keydir partitions the expiry sweep walked.
    pub expiry_walks: u64,
    /// Values dropped from memory for the cache budget.
    pub cache_evictions: u64,
    /// The next CAS unique to be handed out.
    pub next_cas: u64,
    /// The unix second a delayed `flush_all` takes effect; 0 when none is
    /// pending.
    pub flush_deadline: u32,
    /// What opening found.
    pub recovery: RecoveryReport,
}

/// One segment's figures.
#[derive(Debug, Clone, Default)]
pub struct SegmentStats {
    /// Segment id.
    pub id: u32,
    /// File length.
    pub len_bytes: u64,
    /// Live bytes.
    pub live_bytes: u64,
    /// Sealed (no longer appended to).
    pub sealed: bool,
}
