//! Background compaction and hint files.
//!
//! The compactor thread writes a hint file for each sealed log segment, and
//! rewrites sealed segments whose dead fraction passes the threshold once
//! the files hold more than the live bytes and a segment
//! ([`reclaim_dead_bytes`]), and small ones together ([`merge_small`]):
//! live records are copied into a
//! new segment (origin "compaction"), each key is switched to the copy only
//! if it still points at the old record, and the old segment is removed
//! only after the copy and its hint are durable.
//!
//! Why this is safe at any crash point: until the old file is removed both
//! copies exist with the same seq and recovery picks either; a compaction
//! output without its hint is discarded at open; a tombstone is kept while
//! it is its key's newest record and another segment may still hold an
//! older put of the key (see [`crate::tombstones`]); and the log
//! is synced before old files are removed, so the newer records that made
//! the dropped ones dead are durable first. Removing means renaming to a
//! temporary name, which recovery never reads and deletes at the next
//! open; the file itself is deleted later, a step at a time, once no
//! reader holds its segment ([`release_removed`]).
//!
//! One compaction runs at a time (`Inner::compaction_lock`). It checks and
//! switches keys in batches, grouped by keydir partition: each taking of a
//! partition's lock covers at most [`LOCKED_KEYS_MAX`] keys, whose lookups
//! overlap their waits for memory (see [`Batch`]).

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::fs::{join, remove_in_steps, WriteBack};
use crate::hint::{self, HintWriter};
use crate::keydir::{self, Keydir};
use crate::log::create_segment;
use crate::record::{self, Header, Kind};
use crate::scan::scan_sealed;
use crate::segment::{self, Origin, Segment, SegmentHeader};
use crate::tombstones::{self, Tombstones};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long the compactor sleeps between passes.
const PASS_INTERVAL: Duration = Duration::from_millis(200);
/// Output bytes buffered before they are written and keys switched; also
/// the most record bytes read into a [`Batch`] before it is checked.
const OUTPUT_BUFFER_BYTES: usize = 1 << 20;

/// Past this many bytes of segment files per live byte (and past the live
/// bytes and a segment, see [`space_allowed`]), compaction also takes
/// segments below the dead-ratio threshold, most dead first, until the
/// files are back under it. Without this, data rewritten faster than
/// segments cross the threshold (a freshly loaded set being overwritten)
/// piles up to about twice the live bytes before the first compaction.
const SPACE_AMPLIFICATION_MAX: f64 = 1.5;
/// ... but never a segment less dead than this: copying a mostly live
/// segment frees little for its cost.
const SPACE_DEAD_RATIO_MIN: f64 = 0.25;

/// A compaction group holds at most a segment's size divided by this in
/// live bytes: while its output is written, its inputs are still on disk.
/// With a whole segment's worth, disk use rose by up to half the live data
/// (64 MiB segments, 131 MiB live) at such moments.
const GROUP_SEGMENT_FRACTION: u64 = 4;

/// A sealed segment shorter than the segment size divided by this is
/// small: typically what a run that wrote little left behind, since every
/// open starts a new segment. Well under a group's limits, so that merging
/// [`SMALL_SEGMENTS_MAX`] of them always makes one output.
const SMALL_SEGMENT_FRACTION: u64 = 64;
/// Small segments of one size tier are merged once there are this many.
/// However little is dead in them, each holds a file descriptor and a
/// hint, and a server restarted often after a few writes would gather them
/// without bound.
const SMALL_SEGMENTS_MAX: usize = 8;

/// A removed segment's file is cut by this much at a time before it is
/// deleted (see [`release_removed`]).
const RELEASE_STEP: u64 = 1 << 20;

/// A segment compaction removed: its files renamed to temporary names
/// (which the next open deletes, and recovery never reads), their blocks
/// not yet freed. `segment` is the registry's handle, kept to tell when
/// the last reader that looked the segment up before its removal is done.
pub(crate) struct Removed {
    segment: Arc<Segment>,
    files: Vec<PathBuf>,
}

/// The compactor thread's body; returns at shutdown.
pub fn compactor_loop(inner: &Inner) {
    while !inner.shutdown.load(Ordering::Acquire) {
        if let Err(error) = write_pending_hints(inner) {
            tracing::error!(%error, "writing hint files");
        }
        if let Err(error) = release_removed(inner) {
            tracing::error!(%error, "freeing removed segments (what is left, the next open deletes)");
        }
        let passed = reclaim_dead_bytes(inner);
        // Apart, so that a merge that keeps failing holds up neither the
        // pass nor space relief.
        let merged = merge_small(inner).map_or_else(
            |error| {
                tracing::error!(%error, "merging small segments failed; retrying later");
                0
            },
            |done| done.segments,
        );
        match passed {
            // A pass that freed nothing (its segments held records that must
            // be kept, such as tombstones) is not repeated at once.
            Ok(done) if done.freed_bytes == 0 && merged == 0 => std::thread::sleep(PASS_INTERVAL),
            Ok(_) => {}
            Err(error) => {
                tracing::error!(%error, "compaction failed; retrying later");
                std::thread::sleep(PASS_INTERVAL * 10);
            }
        }
    }
}

/// The background compactor's pass over dead bytes: the dead-ratio pass,
/// then space relief if that freed nothing (segments below the threshold
/// may still hold too much).
///
/// While the files hold no more than the live bytes and a segment, nothing
/// is compacted for its dead bytes: that is within the bounds compaction
/// keeps anyway, and a segment left alone goes on dying, so it costs less
/// to compact later. For a data set smaller than a segment, a segment is
/// still mostly live when sealed: compacting it at half dead copied each
/// byte's newest version about once more (100k keys of 100 bytes
/// overwritten under `always`, in alternating pairs of runs, 32 MiB
/// segments: 0.58 bytes compacted per byte logged before this rule, 0.19
/// after; 64 MiB ones 0.26 and 0.06). The cost: after deletes, up to a
/// segment of dead bytes may stay on disk for good.
fn reclaim_dead_bytes(inner: &Inner) -> Result<Compacted> {
    let ratio = match has_room(inner) {
        // No segment is more than all dead.
        true => f64::INFINITY,
        false => inner.config.compaction_dead_ratio_min,
    };
    compact(inner, ratio).and_then(|done| match done.freed_bytes {
        0 => relieve_space(inner),
        _ => Ok(done),
    })
}

/// Writes a hint file for every sealed segment that lacks one.
pub fn write_pending_hints(inner: &Inner) -> Result<()> {
    // Not while a pass runs: its output is sealed from the start but gets
    // its hint only when finished. Nor for an output whose pass failed
    // (see `recopy_abandoned`): a hint would keep it at the next open, and
    // it may not be durable.
    let _guard = inner.compaction_lock.lock();
    let _ = inner.log.take_sealed();
    let abandoned = inner.abandoned_outputs.lock().clone();
    for segment in inner.segments.all() {
        if segment.sealed.load(Ordering::Acquire)
            && !segment.has_hint.load(Ordering::Acquire)
            && !abandoned.contains_key(&segment.id)
        {
            let mut hint = HintWriter::new();
            let len = segment.len_bytes.load(Ordering::Acquire);
            scan_sealed(&segment, |offset, header, bytes| {
                hint.push_record(header, offset as u32, bytes);
                Ok(())
            })?;
            install_hint(inner, &segment, hint.finish(segment.id, len))?;
        }
    }
    Ok(())
}

/// Installs `bytes` as the hint of `segment` (see [`hint::install`]).
fn install_hint(inner: &Inner, segment: &Segment, bytes: Vec<u8>) -> Result<()> {
    hint::install(&*inner.fs, &inner.config.dir, segment.id, &bytes)?;
    segment.has_hint.store(true, Ordering::Release);
    Ok(())
}

/// What a pass did.
#[derive(Default)]
pub(crate) struct Compacted {
    /// Segments compacted.
    pub(crate) segments: usize,
    /// Bytes of the segments removed less the bytes of their copies.
    freed_bytes: u64,
    /// The first failure to delete a compacted group's files (each is
    /// deleted at once instead, or left to the next open). The pass goes
    /// on; [`Engine::compact_now`](crate::Engine::compact_now) reports it.
    pub(crate) unfreed: Option<Error>,
}

/// One pass: copies abandoned outputs again ([`recopy_abandoned`]), then
/// compacts every sealed segment (with a hint, and not kept for an
/// abandoned output) whose dead ratio is at least `dead_ratio_min`, most
/// dead first (small segments are merged apart: [`merge_small`]). Returns
/// what it compacted; an error if either part failed (a failure to delete
/// a compacted group's files is in [`Compacted::unfreed`] instead).
///
/// The candidates are compacted in groups of at most a quarter segment of
/// live bytes and at most a segment of input (or one whole candidate), and
/// each group's inputs are removed as soon as its output is durable: the
/// extra disk a pass needs is one group's output, which is no larger than
/// its input, not the live data of every candidate at once.
pub(crate) fn compact(inner: &Inner, dead_ratio_min: f64) -> Result<Compacted> {
    let _guard = inner.compaction_lock.lock();
    let recopied = recopy_abandoned(inner);
    let done = compact_groups(inner, candidates(inner, dead_ratio_min))?;
    recopied?;
    Ok(done)
}

/// Merges small sealed segments (see [`SMALL_SEGMENT_FRACTION`]): once
/// [`SMALL_SEGMENTS_MAX`] of them are in one size tier (a factor of 8 in
/// length), they are compacted into one, which lands in a higher tier. So
/// each byte in them is copied about once per eightfold growth of its
/// segment, and at most `SMALL_SEGMENTS_MAX - 1` small segments per tier
/// stay. Segments past the small limit are not merged: a server whose runs
/// each write more than that keeps a segment per run, bounded by its live
/// data rather than by its restarts. Returns what it merged.
pub(crate) fn merge_small(inner: &Inner) -> Result<Compacted> {
    let _guard = inner.compaction_lock.lock();
    let small_max = u64::from(inner.config.segment_bytes_max) / SMALL_SEGMENT_FRACTION;
    let mut tiers: std::collections::BTreeMap<u32, Vec<Arc<Segment>>> = Default::default();
    for segment in compactable(inner) {
        let len = segment.len_bytes.load(Ordering::Relaxed);
        if len < small_max {
            tiers
                .entry(len.max(1).ilog2() / 3)
                .or_default()
                .push(segment);
        }
    }
    let mut merged = Compacted::default();
    for mut tier in tiers.into_values() {
        if tier.len() >= SMALL_SEGMENTS_MAX {
            tier.sort_by_key(|s| s.id);
            let done = compact_groups(inner, tier)?;
            merged.segments += done.segments;
            merged.unfreed = merged.unfreed.or(done.unfreed);
        }
    }
    Ok(merged)
}

/// Copies the live records of abandoned outputs into new outputs, made
/// durable as any, and removes the abandoned ones.
///
/// An output is abandoned when its pass fails after keys were switched to
/// it (a failed write, write-back, sync or hint): it may never reach the
/// disk, so it gets no hint (the next open discards it) and, until its
/// records are copied again, the segments it copied from are kept out of
/// compaction ([`compactable`]): they hold the only durable copy of what
/// was switched, and the next open reads them again. The rest of
/// compaction goes on meanwhile, so a copy that keeps failing (say the
/// abandoned output cannot be read back) does not stop it. An output
/// nothing was switched to is removed at once instead.
pub(crate) fn recopy_abandoned(inner: &Inner) -> Result<()> {
    let abandoned: Vec<Arc<Segment>> = {
        let outputs = inner.abandoned_outputs.lock();
        inner
            .segments
            .all()
            .into_iter()
            .filter(|segment| outputs.contains_key(&segment.id))
            .collect()
    };
    if abandoned.is_empty() {
        return Ok(());
    }
    compact_groups(inner, abandoned).map(|_| ())
}

/// While the segment files hold more than [`space_allowed`], compacts the
/// most dead segments (down to [`SPACE_DEAD_RATIO_MIN`]) whose dead bytes
/// bring them back under it.
fn relieve_space(inner: &Inner) -> Result<Compacted> {
    let _guard = inner.compaction_lock.lock();
    let allowed = space_allowed(inner);
    let excess = file_bytes(inner).saturating_sub(allowed);
    if excess == 0 {
        return Ok(Compacted::default());
    }
    let mut freed = 0;
    let chosen: Vec<Arc<Segment>> = candidates(inner, SPACE_DEAD_RATIO_MIN)
        .into_iter()
        .take_while(|segment| {
            let take = freed < excess;
            freed += segment.dead_bytes();
            take
        })
        .collect();
    compact_groups(inner, chosen)
}

/// The segment file bytes space relief lets the live bytes (with kept
/// tombstones) take before it steps in: [`SPACE_AMPLIFICATION_MAX`] times
/// them, but never less than the [`room`] the background compactor leaves
/// them. The active segment cannot be compacted, and for a
/// data set smaller than a segment it alone can pass the ratio: relief then
/// ran on every pass and copied each sealed segment as soon as it was a
/// quarter dead, compaction outputs included, again and again (100k keys of
/// 100 bytes overwritten under `always`, 32 MiB segments, single runs with
/// the preload counted: 0.71 bytes compacted per byte logged before this
/// floor, 0.47-0.49 after; 64 MiB ones 0.24 and 0.18-0.19).
fn space_allowed(inner: &Inner) -> u64 {
    let kept = kept_bytes(inner);
    ((kept as f64 * SPACE_AMPLIFICATION_MAX) as u64).max(room(inner, kept))
}

/// The segment file bytes within which the background compactor copies
/// nothing for its dead bytes, for `kept` live bytes (with kept
/// tombstones): them and a segment (see [`reclaim_dead_bytes`]).
fn room(inner: &Inner, kept: u64) -> u64 {
    kept + u64::from(inner.config.segment_bytes_max)
}

/// Whether the segment files are within their [`room`].
fn has_room(inner: &Inner) -> bool {
    file_bytes(inner) <= room(inner, kept_bytes(inner))
}

/// Live bytes and kept tombstones' bytes in every segment.
fn kept_bytes(inner: &Inner) -> u64 {
    // Not kept past the sum: a pass holding every segment would keep the
    // files of each group it compacts until it ends (see `compact_groups`).
    inner
        .segments
        .all()
        .iter()
        .map(|s| {
            s.live_bytes.load(Ordering::Relaxed) + s.tombstone_bytes_kept.load(Ordering::Relaxed)
        })
        .sum()
}

/// Bytes in every segment file.
fn file_bytes(inner: &Inner) -> u64 {
    inner
        .segments
        .all()
        .iter()
        .map(|s| s.len_bytes.load(Ordering::Relaxed))
        .sum()
}

/// Sealed segments with a hint, other than the active one, those kept for
/// an abandoned output (see [`recopy_abandoned`]) and those with an unsure
/// tail ([`Segment::unsure_tail`]).
fn compactable(inner: &Inner) -> impl Iterator<Item = Arc<Segment>> {
    let active_id = inner.log.active_id();
    let kept: Vec<u32> = inner
        .abandoned_outputs
        .lock()
        .values()
        .flatten()
        .copied()
        .collect();
    inner
        .segments
        .all()
        .into_iter()
        .filter(move |s| s.id != active_id && s.sealed.load(Ordering::Acquire))
        .filter(move |s| !kept.contains(&s.id))
        .filter(|s| s.has_hint.load(Ordering::Acquire))
        // Its hint does not describe the tail past its length: compacting
        // it could drop a tombstone a put there needs, and a crash before
        // the file went would bring the put back.
        .filter(|s| !s.unsure_tail.load(Ordering::Acquire))
}

/// Compactable segments at least `dead_ratio_min` dead, most dead first.
fn candidates(inner: &Inner, dead_ratio_min: f64) -> Vec<Arc<Segment>> {
    let mut candidates: Vec<Arc<Segment>> = compactable(inner)
        .filter(|s| s.dead_ratio() >= dead_ratio_min)
        .filter(|s| s.dead_bytes() > u64::from(segment::HEADER_BYTES))
        .collect();
    candidates.sort_by(|a, b| b.dead_ratio().total_cmp(&a.dead_ratio()));
    candidates
}

/// Compacts `candidates` in groups (see [`compact`]). Live bytes
/// alone do not bound a group: kept tombstones are copied too.
fn compact_groups(inner: &Inner, candidates: Vec<Arc<Segment>>) -> Result<Compacted> {
    let mut done = Compacted::default();
    let segment_bytes = u64::from(inner.config.segment_bytes_max);
    let live_max = segment_bytes / GROUP_SEGMENT_FRACTION;
    let mut rest = candidates;
    while !rest.is_empty() {
        let (mut live, mut input) = (0u64, 0u64);
        let size = rest
            .iter()
            .take_while(|segment| {
                live += segment.live_bytes.load(Ordering::Relaxed);
                input += segment.len_bytes.load(Ordering::Relaxed);
                live <= live_max && input <= segment_bytes
            })
            .count()
            .clamp(1, rest.len());
        // Taken out of `rest`, so that once the group is compacted the pass
        // holds no reference to its segments and their files can go.
        let group: Vec<Arc<Segment>> = rest.drain(..size).collect();
        let copied = compact_group(inner, &group)?;
        let removed: u64 = group
            .iter()
            .map(|s| s.len_bytes.load(Ordering::Relaxed))
            .sum();
        done.segments += group.len();
        done.freed_bytes += removed.saturating_sub(copied);
        drop(group);
        // Free the group's files before the next group's output grows:
        // left to the end of the pass, every group's inputs stayed on disk
        // beside the outputs (Experiment D, 2026-11-27: 64 MiB beside a
        // pass's outputs, the disk at 2.03x the live data). A file that
        // cannot be cut is deleted at once; one that cannot be deleted
        // either is left to the next open.
        if let Err(error) = release_removed(inner) {
            tracing::warn!(%error, "freeing the files of compacted segments");
            done.unfreed.get_or_insert(error);
        }
    }
    Ok(done)
}

/// Copies what `group` still needs into one new segment, makes it durable,
/// then removes the group. Returns the new segment's length (0 if nothing
/// needed copying).
fn compact_group(inner: &Inner, group: &[Arc<Segment>]) -> Result<u64> {
    let output = Output::new(inner)?;
    let written = Arc::clone(&output.segment);
    let copied =
        copy_group(inner, group, output).inspect_err(|_| abandon(inner, &written, group))?;
    // The records left behind are dead because newer records (a later put,
    // a delete, a flush) replaced them; those may still be only in the log's
    // buffer or the page cache. Make them durable before the old records
    // disappear, or a power cut would lose both.
    inner.log.flush_and_sync()?;
    for segment in group {
        remove_segment(inner, segment)?;
    }
    inner.counters.compactions.fetch_add(1, Ordering::Relaxed);
    Ok(copied)
}

/// After a failed pass: an output keys were switched to is abandoned (see
/// [`recopy_abandoned`]); one nothing was switched to is removed.
fn abandon(inner: &Inner, output: &Arc<Segment>, group: &[Arc<Segment>]) {
    if output.live_bytes.load(Ordering::Acquire) == 0 {
        // If this fails too, the file has no hint: the next open drops it.
        let _ = remove_segment(inner, output);
        return;
    }
    inner
        .abandoned_outputs
        .lock()
        .insert(output.id, group.iter().map(|segment| segment.id).collect());
}

/// Copies what `group` still needs into `output` and makes it durable with
/// its hint (see [`Output::finish`]).
fn copy_group(inner: &Inner, group: &[Arc<Segment>], mut output: Output) -> Result<u64> {
    let tombstones = tombstones::gather(inner, group, output.segment.id)?;
    let all = inner.segments.all();
    for segment in group {
        let min_seq_elsewhere = all
            .iter()
            .filter(|other| other.id != segment.id)
            .map(|other| other.min_seq.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        compact_segment(inner, segment, min_seq_elsewhere, &tombstones, &mut output)?;
    }
    output.finish(inner)
}

/// A live put copied into the output, waiting to be switched.
struct Pending {
    key: Vec<u8>,
    hash: u64,
    seq: u64,
    from_segment: u32,
    from_offset: u32,
    to_offset: u32,
    record_len: u64,
}

/// The segment compaction writes into, with its buffered records.
struct Output {
    segment: Arc<Segment>,
    buffer: Vec<u8>,
    written: u64,
    pending: Vec<Pending>,
    groups: ByPartition,
    hint: HintWriter,
    /// Bytes of the tombstones copied, and the segments they were kept for
    /// (see [`Segment::keep_tombstones`]).
    tombstone_bytes_kept: u64,
    kept_for: Vec<u32>,
    /// The output goes to the disk a buffer at a time, not all at its
    /// sync, which would hold up the log's syncs behind it.
    write_back: WriteBack,
}

impl Output {
    fn new(inner: &Inner) -> Result<Output> {
        let header = SegmentHeader {
            origin: Origin::Compaction,
            id: inner.segments.allocate_id()?,
            seq_at_creation: inner.next_seq.load(Ordering::SeqCst),
            flush_seq: inner.flush_seq.load(Ordering::SeqCst),
        };
        let segment = create_segment(&*inner.fs, &inner.config.dir, header)?;
        segment.sealed.store(true, Ordering::Release);
        inner.segments.insert(Arc::clone(&segment));
        Ok(Output {
            segment,
            buffer: Vec::new(),
            written: u64::from(segment::HEADER_BYTES),
            pending: Vec::new(),
            groups: ByPartition::default(),
            hint: HintWriter::new(),
            tombstone_bytes_kept: 0,
            kept_for: Vec::new(),
            write_back: WriteBack::default(),
        })
    }

    fn offset(&self) -> u64 {
        self.written + self.buffer.len() as u64
    }

    /// Appends the record `bytes`, read as `read`, with `header` (see
    /// [`record::reencode`]); returns its offset.
    fn push(&mut self, header: &Header, read: &Header, bytes: &[u8], target: u64) -> Result<u32> {
        let offset = self.offset();
        if offset + header.record_len() > u64::from(u32::MAX) {
            return Err(Error::TooLarge("compaction output past 4 GiB".into()));
        }
        record::reencode(&mut self.buffer, header, read, bytes);
        let key = bytes.get(header.key_range()).unwrap_or_default();
        self.hint.push(header, offset as u32, key, target);
        self.segment.note_seq(header.seq);
        if header.kind == Kind::Delete {
            self.segment.note_tombstone();
        }
        Ok(offset as u32)
    }

    /// Writes the buffer to the file, then switches the keys copied so far.
    fn write_and_switch(&mut self, inner: &Inner) -> Result<()> {
        if !self.buffer.is_empty() {
            let file = &*self.segment.file;
            let len = self.buffer.len() as u64;
            file.write_all_at(&self.buffer, self.written)
                .and_then(|()| self.write_back.wrote(file, self.written, len))
                .map_err(|e| Error::io(format!("writing {}", self.segment.path.display()), e))?;
            inner
                .counters
                .compaction_bytes_written
                .fetch_add(self.buffer.len() as u64, Ordering::Relaxed);
            self.written += self.buffer.len() as u64;
            self.buffer.clear();
            self.segment
                .len_bytes
                .store(self.written, Ordering::Release);
        }
        switch_all(inner, &self.segment, &mut self.pending, &mut self.groups);
        Ok(())
    }

    /// Makes the output durable with its hint, or removes it if nothing
    /// needed copying.
    /// Returns the segment's length, or 0 if it was removed.
    fn finish(mut self, inner: &Inner) -> Result<u64> {
        self.write_and_switch(inner)?;
        if self.written == u64::from(segment::HEADER_BYTES) {
            remove_segment(inner, &self.segment)?;
            return Ok(0);
        }
        self.segment
            .file
            .sync_data()
            .map_err(|e| Error::io(format!("syncing {}", self.segment.path.display()), e))?;
        // Before the hint, which makes the output a candidate.
        self.kept_for.sort_unstable();
        self.kept_for.dedup();
        self.segment.keep_tombstones(
            self.tombstone_bytes_kept,
            std::mem::take(&mut self.kept_for),
        );
        let hint = std::mem::take(&mut self.hint);
        install_hint(
            inner,
            &self.segment,
            hint.finish(self.segment.id, self.written),
        )?;
        Ok(self.written)
    }
}

/// Points each key of `pending` at its copy if it still points at the
/// original, taking each partition's write lock once per run of keys (see
/// [`ByPartition::runs`] and [`Batch`]), and empties `pending`.
fn switch_all(
    inner: &Inner,
    output: &Segment,
    pending: &mut Vec<Pending>,
    groups: &mut ByPartition,
) {
    groups.fill(&inner.keydir, pending.iter().map(|p| p.hash));
    // The segment copied from, looked up once per segment rather than once
    // per key under the partition lock.
    let mut source: Option<Arc<Segment>> = None;
    for (partition, positions) in groups.runs() {
        let mut table = inner.keydir.partition_at(partition).write();
        for &at in positions {
            if let Some(pending) = pending.get(at) {
                keydir::prefetch(&table, pending.hash);
            }
        }
        for &at in positions {
            let Some(pending) = pending.get(at) else {
                continue;
            };
            if source.as_ref().is_none_or(|s| s.id != pending.from_segment) {
                source = inner.segments.get(pending.from_segment);
            }
            switch(&mut table, source.as_deref(), output, pending);
        }
    }
    pending.clear();
}

/// Keys checked or switched under one taking of a partition's lock, at
/// most: with few partitions, a batch's keys would otherwise hold one lock,
/// and stall that partition's requests, for thousands of lookups.
const LOCKED_KEYS_MAX: usize = 64;

/// Positions in a list of keys, grouped by the keydir partition of each
/// key's hash (a counting sort, reusing its memory from one fill to the
/// next), in order within each partition.
#[derive(Default)]
struct ByPartition {
    groups: Vec<Vec<usize>>,
}

impl ByPartition {
    fn fill(&mut self, keydir: &Keydir, hashes: impl Iterator<Item = u64>) {
        let count = keydir.len();
        self.groups.resize_with(count, Vec::new);
        for group in &mut self.groups {
            group.clear();
        }
        for (at, hash) in hashes.enumerate() {
            if let Some(group) = self.groups.get_mut(keydir.partition_index(hash)) {
                group.push(at);
            }
        }
    }

    /// Runs of at most [`LOCKED_KEYS_MAX`] positions of one partition, with
    /// the partition: each run is handled under one taking of its lock.
    fn runs(&self) -> impl Iterator<Item = (usize, &[usize])> {
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(partition, group)| {
                group
                    .chunks(LOCKED_KEYS_MAX)
                    .map(move |run| (partition, run))
            })
    }
}

/// Points a key at its copy if it still points at the original, which
/// lies in `source` (if that is still registered).
fn switch(
    table: &mut keydir::Table,
    source: Option<&Segment>,
    output: &Segment,
    pending: &Pending,
) {
    let Some(entry) = table.find_mut(pending.hash, |entry| entry.key() == pending.key) else {
        return;
    };
    if entry.cas() != pending.seq
        || entry.segment_id() != pending.from_segment
        || entry.offset() != pending.from_offset
    {
        return;
    }
    if let Some(source) = source {
        source.sub_live(pending.record_len);
    }
    output.add_live(pending.record_len);
    entry.set_location(output.id, pending.to_offset);
}

/// Copies the records of `segment` that are still needed into `output`.
fn compact_segment(
    inner: &Inner,
    segment: &Arc<Segment>,
    min_seq_elsewhere: u64,
    tombstones: &Tombstones,
    output: &mut Output,
) -> Result<()> {
    let len = segment.len_bytes.load(Ordering::Acquire);
    inner
        .counters
        .compaction_bytes_read
        .fetch_add(len, Ordering::Relaxed);
    let mut batch = Batch {
        segment,
        min_seq_elsewhere,
        tombstones,
        flush_seq: inner.flush_seq.load(Ordering::Acquire),
        bytes: Vec::new(),
        records: Vec::new(),
        groups: ByPartition::default(),
    };
    scan_sealed(segment, |offset, header, bytes| {
        batch.add(inner, offset as u32, header, bytes);
        if batch.records.len() >= BATCH_RECORDS || batch.bytes.len() >= OUTPUT_BUFFER_BYTES {
            batch.copy_needed(inner, output)?;
        }
        Ok(())
    })?;
    batch.copy_needed(inner, output)?;
    output.write_and_switch(inner)
}

/// Records checked together: at most this many.
const BATCH_RECORDS: usize = 8192;

/// Records read from a segment and not yet checked.
///
/// A check is a keydir lookup, and a lookup of a key not recently used
/// mostly waits for memory: the table's slot, then the entry it points to.
/// One by one, each behind its own taking of a lock (an atomic write to a
/// line the request threads write too), those waits come one after the
/// other; compaction spent most of its time in them. So the records are
/// checked together, grouped by partition: under one taking of a lock,
/// every key's entry is first asked for ([`keydir::prefetch`]), then each
/// is checked while the rest are still arriving.
struct Batch<'s> {
    segment: &'s Segment,
    min_seq_elsewhere: u64,
    tombstones: &'s Tombstones,
    flush_seq: u64,
    /// The records' bytes, back to back.
    bytes: Vec<u8>,
    records: Vec<Read>,
    groups: ByPartition,
}

/// One record of a [`Batch`].
struct Read {
    /// Where it lies in the segment.
    offset: u32,
    header: Header,
    /// Where its bytes start in [`Batch::bytes`].
    start: usize,
    /// Its key's hash.
    hash: u64,
    /// What to copy it with, once checked; `None` if it is not needed.
    keep: Option<Header>,
}

impl Batch<'_> {
    fn add(&mut self, inner: &Inner, offset: u32, header: &Header, bytes: &[u8]) {
        let key = bytes.get(header.key_range()).unwrap_or_default();
        self.records.push(Read {
            offset,
            header: *header,
            start: self.bytes.len(),
            hash: inner.keydir.hash(key),
            keep: None,
        });
        self.bytes.extend_from_slice(bytes);
    }

    fn record_bytes(&self, read: &Read) -> &[u8] {
        let len = read.header.record_len() as usize;
        self.bytes
            .get(read.start..read.start + len)
            .unwrap_or_default()
    }

    /// Checks every record, copies those still needed into `output` in
    /// their order in the segment, and empties the batch.
    fn copy_needed(&mut self, inner: &Inner, output: &mut Output) -> Result<()> {
        self.check(inner);
        for read in &self.records {
            let Some(header) = read.keep else {
                continue;
            };
            let bytes = self.record_bytes(read);
            let key = bytes.get(header.key_range()).unwrap_or_default();
            let target = record::touch_target(&header, bytes);
            let to_offset = output.push(&header, &read.header, bytes, target)?;
            if header.kind == Kind::Put {
                output.pending.push(Pending {
                    key: key.to_vec(),
                    hash: read.hash,
                    seq: header.seq,
                    from_segment: self.segment.id,
                    from_offset: read.offset,
                    to_offset,
                    record_len: header.record_len(),
                });
            }
            if header.kind == Kind::Delete {
                output.tombstone_bytes_kept += header.record_len();
                let kept_for = self.tombstones.kept_for(self.segment, key, header.seq);
                output.kept_for.extend(kept_for);
            }
            if output.buffer.len() >= OUTPUT_BUFFER_BYTES {
                output.write_and_switch(inner)?;
            }
        }
        self.records.clear();
        self.bytes.clear();
        Ok(())
    }

    /// Sets each record's `keep`, taking each partition's lock once per run
    /// of keys (see [`ByPartition::runs`]).
    fn check(&mut self, inner: &Inner) {
        let mut groups = std::mem::take(&mut self.groups);
        groups.fill(&inner.keydir, self.records.iter().map(|read| read.hash));
        for (partition, positions) in groups.runs() {
            let table = inner.keydir.partition_at(partition).read();
            for &at in positions {
                if let Some(read) = self.records.get(at).filter(|read| self.looks_up(read)) {
                    keydir::prefetch(&table, read.hash);
                }
            }
            for &at in positions {
                let keep = self.needed(&table, at);
                if let Some(read) = self.records.get_mut(at) {
                    read.keep = keep;
                }
            }
        }
        self.groups = groups;
    }

    /// Whether checking `read` needs its key's entry.
    fn looks_up(&self, read: &Read) -> bool {
        match read.header.kind {
            Kind::Put | Kind::Touch => true,
            Kind::Delete => self.min_seq_elsewhere < read.header.seq,
            Kind::Flush => false,
        }
    }

    /// Whether record `at` is still needed, and with what header.
    fn needed(&self, table: &keydir::Table, at: usize) -> Option<Header> {
        let read = self.records.get(at)?;
        let header = &read.header;
        let bytes = self.record_bytes(read);
        let key = bytes.get(header.key_range()).unwrap_or_default();
        let entry = || keydir::find(table, read.hash, key);
        match header.kind {
            Kind::Put => live_put(entry()?, self.segment.id, read.offset, header),
            Kind::Delete => tombstone_needed(entry, header, self.min_seq_elsewhere).filter(|_| {
                self.tombstones
                    .kept_for(self.segment, key, header.seq)
                    .next()
                    .is_some()
            }),
            Kind::Touch => touch_needed(entry()?, header, record::touch_target(header, bytes)),
            Kind::Flush => pending_flush(header, self.flush_seq),
        }
    }
}

/// A put is copied if the keydir still points at it; it is copied with the
/// item's current expiry and stale mark (touches may have changed them).
fn live_put(
    entry: &keydir::Entry,
    segment_id: u32,
    offset: u32,
    header: &Header,
) -> Option<Header> {
    if entry.segment_id() != segment_id || entry.offset() != offset || entry.cas() != header.seq {
        return None;
    }
    Some(Header {
        exptime: entry.exptime(),
        stale: entry.has(keydir::BIT_STALE),
        batch_continues: false,
        ..*header
    })
}

/// The first checks of whether a tombstone is kept (the rest are
/// [`Tombstones::kept_for`]): not if the keydir holds a newer put of its key,
/// nor if no other segment holds a record older than it.
fn tombstone_needed<'t>(
    entry: impl FnOnce() -> Option<&'t keydir::Entry>,
    header: &Header,
    min_seq_elsewhere: u64,
) -> Option<Header> {
    if min_seq_elsewhere >= header.seq || entry().is_some_and(|entry| entry.cas() > header.seq) {
        return None;
    }
    Some(Header {
        batch_continues: false,
        ..*header
    })
}

/// A touch is kept while it describes the item's current expiry.
fn touch_needed(entry: &keydir::Entry, header: &Header, target: u64) -> Option<Header> {
    let current = entry.cas() == target
        && entry.exptime() == header.exptime
        && entry.has(keydir::BIT_STALE) == header.stale;
    current.then_some(Header {
        batch_continues: false,
        ..*header
    })
}

/// A flush record is kept only while it is a delayed flush not yet carried
/// out (due or not: a due one is carried out by the next operation, which
/// logs it). Once carried out, its effect lives in the flush generation of
/// every newer segment's header and in the newer flush record.
fn pending_flush(header: &Header, flush_seq: u64) -> Option<Header> {
    let pending = header.exptime != 0 && header.seq > flush_seq;
    pending.then_some(Header {
        batch_continues: false,
        ..*header
    })
}

/// Takes `segment` out of the engine: out of the registry, and its files
/// (its hint, then the segment) renamed to temporary names, durably, so no
/// later open reads them. Their blocks are freed later, by
/// [`release_removed`].
///
/// The hint goes first: a crash between the two renames then leaves a
/// segment without a hint, which the next open rescans (or, for a
/// compaction output, discards; this one's records are all copied or
/// dead), never a hint without its segment, which a later segment of the
/// same id (ids restart past the highest segment file) could pick up.
fn remove_segment(inner: &Inner, segment: &Arc<Segment>) -> Result<()> {
    let dir = &inner.config.dir;
    let doomed = |name: &str| join(dir, &format!("{name}.removed.tmp"));
    let mut files = Vec::with_capacity(2);
    let hint_name = segment::hint_name(segment.id);
    let hint = join(dir, &hint_name);
    let hint_renamed = doomed(&hint_name);
    match inner.fs.rename(&hint, &hint_renamed) {
        Ok(()) => files.push(hint_renamed),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(Error::io(format!("removing {}", hint.display()), error)),
    }
    let renamed = doomed(&segment::segment_name(segment.id));
    inner
        .fs
        .rename(&segment.path, &renamed)
        .map_err(|e| Error::io(format!("removing {}", segment.path.display()), e))?;
    files.push(renamed);
    // Out of the registry only now: a segment whose rename failed is still
    // there, and still counts for the tombstones other segments keep.
    inner.segments.remove(segment.id);
    inner.abandoned_outputs.lock().remove(&segment.id);
    for other in inner.segments.all() {
        other.forget_removed(segment.id);
    }
    inner
        .fs
        .sync_dir(dir)
        .map_err(|e| Error::io(format!("syncing directory {}", dir.display()), e))?;
    inner.removed_segments.lock().push(Removed {
        segment: Arc::clone(segment),
        files,
    });
    Ok(())
}

/// Deletes the files of removed segments that no reader holds any more,
/// each cut [`RELEASE_STEP`] at a time from its end first
/// ([`remove_in_steps`]): on the benchmark machine's disk (mounted with
/// `discard`) deleting a 64 MiB segment at once held a 4 KiB `fdatasync`
/// next to it for 26 ms, the log's sync under `always` that every write
/// waits on; cut a megabyte at a time, 2 ms at worst. Not while a reader
/// that looked the segment up before its removal may still be reading it.
pub(crate) fn release_removed(inner: &Inner) -> Result<()> {
    let unshared: Vec<Removed> = {
        let mut removed = inner.removed_segments.lock();
        let (unshared, shared) = std::mem::take(&mut *removed)
            .into_iter()
            .partition(|removed| Arc::strong_count(&removed.segment) == 1);
        *removed = shared;
        unshared
    };
    let mut first_error = Ok(());
    for Removed { segment, files } in unshared {
        drop(segment);
        for path in files {
            // Failing that, deleted at once; failing both, left to the
            // next open. Either way, on to the rest.
            if let Err(error) = remove_in_steps(&*inner.fs, &path, RELEASE_STEP) {
                let _ = inner.fs.remove(&path);
                if first_error.is_ok() {
                    first_error = Err(Error::io(format!("deleting {}", path.display()), error));
                }
            }
        }
    }
    first_error
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, Config, Durability, Engine, Expiry, StoreMode};

    /// An engine over `fs` in /data, without syncs or background threads,
    /// with segments of `segment_bytes`.
    fn open_quiet(fs: &crate::fs::MemFs, segment_bytes: u32) -> Engine {
        let mut config = Config::new("/data");
        config.durability = Durability::None;
        config.background_threads = false;
        config.segment_bytes_max = segment_bytes;
        Engine::open_with(config, Arc::new(fs.clone()), Clock::system()).unwrap()
    }

    /// Sets `key{n}` for each n of `keys` to 100 bytes with `flags`,
    /// committed.
    fn write(engine: &Engine, keys: std::ops::Range<usize>, flags: u32) {
        for key in keys {
            let key = format!("key{key}");
            let (_, ticket) = engine
                .store(
                    StoreMode::Set,
                    key.as_bytes(),
                    &[b'v'; 100],
                    flags,
                    Expiry::Never,
                )
                .unwrap();
            engine.commit(ticket).unwrap();
        }
    }

    /// A segment a reader still holds keeps its file, under its temporary
    /// name, until the reader lets go: cutting it would cut the reader's
    /// value.
    #[test]
    fn a_removed_segment_a_reader_holds_is_deleted_only_after_the_reader_is_done() {
        let fs = crate::fs::MemFs::new();
        let engine = open_quiet(&fs, 4096);
        for round in 0..2 {
            write(&engine, 0..100, round);
        }
        let inner = &engine.inner;
        let first = inner.segments.all().first().map(Arc::clone).unwrap();
        let removed_name = format!("{}.removed.tmp", segment::segment_name(first.id));
        let names = || fs.file_names(std::path::Path::new("/data"));
        assert!(engine.compact_now(0.5).unwrap() >= 1);
        assert!(inner.segments.get(first.id).is_none(), "compacted");
        assert!(names().contains(&removed_name), "{:?}", names());
        assert!(!names().contains(&segment::segment_name(first.id)));
        // A crash now leaves the file under its temporary name (the
        // engine's shutdown frees nothing a reader still holds); the next
        // open deletes it and reads nothing from it.
        fs.crash_process();
        drop(engine);
        assert!(names().contains(&removed_name), "{:?}", names());
        drop(first);
        let mut config = Config::new("/data");
        config.background_threads = false;
        config.segment_bytes_max = 4096;
        let engine = Engine::open_with(config, Arc::new(fs.clone()), Clock::system()).unwrap();
        assert!(!names().contains(&removed_name), "{:?}", names());
        for key in 0..100 {
            let item = engine.get(format!("key{key}").as_bytes()).unwrap().unwrap();
            assert_eq!(item.flags, 1);
        }

        // Without a crash, the file goes once the reader lets go.
        let held = engine.inner.segments.all().first().map(Arc::clone).unwrap();
        write(&engine, 0..100, 2);
        let removed_name = format!("{}.removed.tmp", segment::segment_name(held.id));
        assert!(engine.compact_now(0.5).unwrap() >= 1);
        assert!(names().contains(&removed_name), "{:?}", names());
        drop(held);
        engine.compact_now(0.5).unwrap();
        assert!(!names().contains(&removed_name), "{:?}", names());
    }

    /// The background compactor leaves a data set smaller than a segment a
    /// segment's worth of room past its live bytes, though that is more
    /// than [`SPACE_AMPLIFICATION_MAX`] times them and a segment is more
    /// than half dead; past it, it compacts.
    #[test]
    fn a_small_data_set_gets_a_segment_of_room() {
        let fs = crate::fs::MemFs::new();
        let segment_bytes = 16 << 10;
        let open = || open_quiet(&fs, segment_bytes);
        let engine = open();
        write(&engine, 0..40, 0);
        write(&engine, 0..24, 1);
        write(&engine, 0..24, 2);
        // Reopened, so that the segment is sealed (every open starts one).
        engine.close().unwrap();
        let engine = open();
        let inner = &engine.inner;
        write_pending_hints(inner).unwrap();
        let (live, files) = (kept_bytes(inner), file_bytes(inner));
        assert!(
            files as f64 > live as f64 * SPACE_AMPLIFICATION_MAX,
            "{files} {live}"
        );
        assert!(files < live + u64::from(segment_bytes), "{files} {live}");
        // The sealed segment is a candidate for the dead-ratio pass and for
        // space relief, were it not for the room left.
        let threshold = inner.config.compaction_dead_ratio_min;
        assert_eq!(candidates(inner, threshold).len(), 1);
        assert_eq!(candidates(inner, SPACE_DEAD_RATIO_MIN).len(), 1);
        assert_eq!(reclaim_dead_bytes(inner).unwrap().segments, 0);
        assert_eq!(file_bytes(inner), files);

        let mut round = 3;
        while file_bytes(inner) <= kept_bytes(inner) + u64::from(segment_bytes) {
            write(&engine, 0..24, round);
            round += 1;
        }
        write_pending_hints(inner).unwrap();
        assert!(reclaim_dead_bytes(inner).unwrap().segments > 0);
        assert!(file_bytes(inner) <= kept_bytes(inner) + u64::from(segment_bytes));
        for key in 0..40 {
            let item = engine.get(format!("key{key}").as_bytes()).unwrap().unwrap();
            assert_eq!(item.flags, if key < 24 { round - 1 } else { 0 }, "key{key}");
        }
    }

    /// Compaction reads a group's records for tombstones only where a
    /// segment may hold one: a segment says it holds none only if it does
    /// (checked against its records after deletes, compactions that keep
    /// tombstones, and a reopen), and a segment this process wrote puts
    /// alone to says so.
    #[test]
    fn a_segment_says_it_holds_no_tombstone_only_if_it_holds_none() {
        let fs = crate::fs::MemFs::new();
        let open = || open_quiet(&fs, 4096);
        let delete = |engine: &Engine, key: usize| {
            let (_, ticket) = engine.delete(format!("key{key}").as_bytes(), None).unwrap();
            engine.commit(ticket).unwrap();
        };
        // (segments that say they hold none, segments that hold one,
        // compaction outputs that hold one)
        let check = |engine: &Engine| {
            let (mut sure, mut holding, mut outputs) = (0, 0, 0);
            for segment in engine.inner.segments.all() {
                let len = segment.len_bytes.load(Ordering::Acquire);
                let start = u64::from(segment::HEADER_BYTES);
                let mut deletes = 0;
                let (end, visited) =
                    crate::scan::scan(&*segment.file, start, len, |_, header, _| {
                        deletes += usize::from(header.kind == Kind::Delete);
                        Ok(())
                    })
                    .unwrap();
                visited.unwrap();
                assert!(
                    matches!(end, crate::scan::ScanEnd::Clean),
                    "segment {}",
                    segment.id
                );
                assert!(
                    deletes == 0 || segment.may_hold_tombstones(),
                    "segment {} holds {deletes} tombstones",
                    segment.id
                );
                sure += usize::from(!segment.may_hold_tombstones());
                holding += usize::from(deletes > 0);
                outputs += usize::from(deletes > 0 && segment.header.origin == Origin::Compaction);
            }
            (sure, holding, outputs)
        };
        let engine = open();
        write(&engine, 0..100, 0);
        let (sure, holding, _) = check(&engine);
        assert_eq!(holding, 0);
        assert_eq!(sure, engine.inner.segments.all().len());
        // Tombstones of keys whose puts lie in the first segment, among
        // overwrites of one key: their segment is soon mostly dead, the
        // first mostly live.
        for key in 0..3 {
            delete(&engine, key);
        }
        for _ in 0..100 {
            write(&engine, 50..51, 0);
        }
        assert!(check(&engine).1 > 0);
        // Compacted while the puts they hide are still on disk: kept, and
        // the output keeping them says so.
        assert!(engine.compact_now(0.5).unwrap() > 0);
        let (sure, _, outputs) = check(&engine);
        assert!(sure > 0);
        assert!(outputs > 0, "a compaction output kept the tombstones");
        write(&engine, 3..100, 0);
        engine.compact_now(0.0).unwrap();
        check(&engine);
        // What the open finds on disk may hold tombstones; what it writes
        // after is known again.
        engine.close().unwrap();
        let engine = open();
        assert_eq!(check(&engine).0, 1, "the new active segment alone");
        write(&engine, 3..100, 0);
        assert!(check(&engine).0 > 1);
        for key in 0..100 {
            let found = engine.get(format!("key{key}").as_bytes()).unwrap();
            assert_eq!(found.is_some(), key >= 3, "key{key}");
        }
    }

    #[test]
    fn keys_are_grouped_by_partition_in_runs_of_bounded_length() {
        for partitions in [1, 8, 256] {
            let keydir = Keydir::new(partitions);
            let hashes: Vec<u64> = (0..5000)
                .map(|i| keydir.hash(format!("key{i}").as_bytes()))
                .collect();
            let mut groups = ByPartition::default();
            // Twice: the second fill must forget the first.
            for _ in 0..2 {
                groups.fill(&keydir, hashes.iter().copied());
                let mut seen = vec![0; hashes.len()];
                let mut last: Option<(usize, usize)> = None;
                for (partition, run) in groups.runs() {
                    assert!(!run.is_empty() && run.len() <= LOCKED_KEYS_MAX);
                    for &at in run {
                        assert_eq!(keydir.partition_index(hashes[at]), partition);
                        // Partitions ascend; within one, positions do.
                        assert!(last.is_none_or(|last| last < (partition, at)));
                        last = Some((partition, at));
                        seen[at] += 1;
                    }
                }
                assert!(seen.iter().all(|&n| n == 1), "every key exactly once");
            }
        }
    }
}
