//! Opening a data directory: rebuilding the keydir from hint files and
//! segment scans, cutting a torn tail off the active segment, and finding
//! the next CAS unique and the flush generation.
//!
//! Damage is refused (the open fails with [`Error::Corruption`]) wherever
//! it may hold acknowledged records: anywhere in a sealed segment, and in
//! the active segment when an intact record follows it. Only a torn tail,
//! damage running to the end of what was written, is cut.
//!
//! Runs once, on the opening thread, before any other thread sees the
//! engine. Records are resolved by seq, not by file order, because
//! compaction copies old records into newer files: for each key the record
//! with the highest seq wins (a tombstone wins a tie), a touch applies to the
//! put whose seq it names, and a flush removes everything below its seq.

use crate::clock::Clock;
use crate::config::Config;
use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::fs::{join, Fs, FsFile};
use crate::hint;
use crate::keydir::{Entry, Keydir, BIT_STALE};
use crate::log::{create_segment, Log, Segments};
use crate::record::{self, Header, Kind};
use crate::scan::{scan, ScanEnd};
use crate::segment::{self, Origin, Segment, SegmentHeader};
use crate::stats::{Counters, RecoveryReport};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = "LOCK";

/// A touch seen during recovery.
struct Touch {
    seq: u64,
    target: u64,
    exptime: u32,
    stale: bool,
}

/// What the pass over all records accumulates.
struct Resolver<'a> {
    keydir: &'a Keydir,
    tombstones: HashMap<Vec<u8>, u64>,
    touches: HashMap<Vec<u8>, Touch>,
    max_seq: u64,
    flush_seq: u64,
    pending_flush: Option<(u32, u64)>,
    records: u64,
    now: u32,
}

impl Resolver<'_> {
    fn apply(&mut self, segment: &Segment, offset: u32, header: &Header, key: &[u8], aux: u64) {
        self.records += 1;
        self.max_seq = self.max_seq.max(header.seq);
        segment.note_seq(header.seq);
        match header.kind {
            Kind::Put => self.apply_put(segment.id, offset, header, key),
            Kind::Delete => self.apply_delete(header.seq, key),
            Kind::Touch => {
                let newer = self.touches.get(key).is_none_or(|t| t.seq < header.seq);
                if newer {
                    let touch = Touch {
                        seq: header.seq,
                        target: aux,
                        exptime: header.exptime,
                        stale: header.stale,
                    };
                    self.touches.insert(key.to_vec(), touch);
                }
            }
            Kind::Flush if header.exptime == 0 => {
                self.flush_seq = self.flush_seq.max(header.seq);
            }
            Kind::Flush => {
                if self.pending_flush.is_none_or(|(_, seq)| seq < header.seq) {
                    self.pending_flush = Some((header.exptime, header.seq));
                }
            }
        }
    }

    fn apply_put(&mut self, segment_id: u32, offset: u32, header: &Header, key: &[u8]) {
        if self
            .tombstones
            .get(key)
            .is_some_and(|&seq| seq >= header.seq)
        {
            return;
        }
        let hash = self.keydir.hash(key);
        let mut table = self.keydir.partition(hash).write();
        if let Some(entry) = table.find_mut(hash, |entry| entry.key() == key) {
            if entry.cas() >= header.seq {
                return;
            }
            entry.replace(
                None,
                header.seq,
                segment_id,
                offset,
                header.value_len,
                header.flags,
                header.exptime,
                header.stale,
            );
        } else {
            let entry = Entry::new(
                key,
                None,
                header.seq,
                segment_id,
                offset,
                header.value_len,
                header.flags,
                header.exptime,
                self.now,
            );
            if header.stale {
                entry.bits().fetch_or(BIT_STALE, Ordering::Relaxed);
            }
            table.insert_unique(hash, entry, self.keydir.rehasher());
        }
        self.keydir.note_expiry(hash, header.exptime);
        self.tombstones.remove(key);
    }

    fn apply_delete(&mut self, seq: u64, key: &[u8]) {
        let hash = self.keydir.hash(key);
        let mut table = self.keydir.partition(hash).write();
        if let Ok(found) = table.find_entry(hash, |entry| entry.key() == key) {
            if found.get().cas() > seq {
                return;
            }
            found.remove();
        }
        let known = self.tombstones.entry(key.to_vec()).or_insert(seq);
        *known = (*known).max(seq);
    }
}

/// Opens the directory and rebuilds the engine's state.
pub(crate) fn recover(config: Config, fs: Arc<dyn Fs>, clock: Clock) -> Result<Inner> {
    let started = Instant::now();
    let dir = config.dir.clone();
    fs.create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating data directory {}", dir.display()), e))?;
    let lock_path = join(&dir, LOCK_FILE);
    let dir_lock = fs.lock(&lock_path).map_err(|error| {
        if error.kind() == std::io::ErrorKind::WouldBlock {
            Error::Locked {
                dir: dir.clone(),
                lock: lock_path.clone(),
            }
        } else {
            Error::io(format!("locking {}", lock_path.display()), error)
        }
    })?;
    let mut report = RecoveryReport::default();
    let (mut segment_ids, mut hint_ids) = list_files(&*fs, &dir)?;
    if config.salvage {
        crate::salvage::salvage(&*fs, &dir, &segment_ids, &hint_ids, &mut report)?;
        (segment_ids, hint_ids) = list_files(&*fs, &dir)?;
    }
    let mut opened = open_segments(&*fs, &dir, &segment_ids, &hint_ids, &mut report)?;
    rewrite_unsynced_tails(&*fs, &dir, &mut opened, &mut report)?;
    // A killed process may have left the directory unsynced too (a segment
    // renamed into place, say), and the removals above (temporary files,
    // unfinished segments, abandoned outputs) are made durable, all at once.
    fs.sync_dir(&dir)
        .map_err(|e| Error::io(format!("syncing directory {}", dir.display()), e))?;
    let active_id = newest_log_segment(&opened);
    if let Some(active) = active_id.and_then(|id| opened.iter_mut().find(|s| s.id == id)) {
        sync_active(&*fs, &dir, active, &mut report)?;
    }
    let now = clock.now();
    let keydir = Keydir::new(config.partitions);
    let mut resolver = Resolver {
        keydir: &keydir,
        tombstones: HashMap::new(),
        touches: HashMap::new(),
        max_seq: 0,
        flush_seq: 0,
        pending_flush: None,
        records: 0,
        now,
    };
    // Every seq issued before a segment was made is below its
    // `seq_at_creation`, and every record's below the next to issue.
    let mut found_next_seq = 1;
    for segment in &opened {
        found_next_seq = found_next_seq.max(segment.header.seq_at_creation);
        resolver.flush_seq = resolver.flush_seq.max(segment.header.flush_seq);
        let is_active = Some(segment.id) == active_id;
        let len = load_segment(
            &*fs,
            segment,
            is_active,
            &hint_ids,
            &mut resolver,
            &mut report,
        )?;
        segment.len_bytes.store(len, Ordering::Relaxed);
        // The log starts a new segment below, so the one it last wrote (its
        // torn tail cut and synced) is sealed like the rest.
        segment.sealed.store(true, Ordering::Relaxed);
    }
    let found_next_seq = found_next_seq.max(resolver.max_seq + 1);
    let next_seq = first_seq_of_run(found_next_seq, opened.is_empty());
    let flush_seq = resolver.flush_seq;
    // A delayed flush not yet carried out stays pending. If it came due while
    // the engine was down, opening carries it out and logs that (see
    // `Inner::now`): recovery itself writes nothing, so a flush applied
    // here alone would be applied again, to later writes, at the next open.
    let flush_deadline = resolver
        .pending_flush
        .filter(|&(_, seq)| seq > flush_seq)
        .map_or(0, |(deadline, _)| deadline);
    let counters = Arc::new(Counters::default());
    let touches = std::mem::take(&mut resolver.touches);
    let records = resolver.records;
    drop(resolver);
    finish_keydir(&keydir, &opened, &touches, flush_seq, &counters);
    let next_id = match opened.last() {
        None => 1,
        Some(last) if last.id > segment::ID_MAX => {
            return Err(Error::Corruption {
                file: last.path.clone(),
                offset: 0,
                reason: format!(
                    "segment id {} is above the largest, {}",
                    last.id,
                    segment::ID_MAX
                ),
            })
        }
        Some(last) => last.id + 1,
    };
    let segments = Arc::new(Segments::new(next_id));
    let flush_seq = Arc::new(AtomicU64::new(flush_seq));
    let next_seq = Arc::new(AtomicU64::new(next_seq));
    let (active, active_len) = start_log_segment(
        &*fs,
        &dir,
        &segments,
        &opened,
        active_id,
        &next_seq,
        flush_seq.load(Ordering::SeqCst),
    )?;
    if !opened.iter().any(|segment| Arc::ptr_eq(segment, &active)) {
        remove_empty_log_segments(&*fs, &dir, &mut opened)?;
        opened.push(Arc::clone(&active));
    }
    for segment in &opened {
        segments.insert(Arc::clone(segment));
    }
    let log = Arc::new(Log::new(
        Arc::clone(&fs),
        dir.clone(),
        config.durability,
        config.segment_bytes_max,
        Arc::clone(&segments),
        Arc::clone(&counters),
        active,
        active_len,
        Arc::clone(&flush_seq),
        Arc::clone(&next_seq),
    ));
    report.records = records;
    report.items = counters.items.load(Ordering::Relaxed);
    report.duration = started.elapsed();
    tracing::info!(
        segments = report.segments,
        from_hints = report.segments_from_hints,
        scanned = report.segments_scanned,
        items = report.items,
        truncated_bytes = report.truncated_bytes,
        millis = report.duration.as_millis() as u64,
        "recovered data directory {}",
        dir.display()
    );
    let cache_budget = AtomicU64::new(config.cache_bytes_max);
    Ok(Inner {
        config,
        fs,
        keydir,
        log,
        segments,
        counters,
        clock,
        next_seq,
        flush_seq,
        flush_lsn: AtomicU64::new(0),
        flush_deadline: AtomicU32::new(flush_deadline),
        flush_swept: AtomicU64::new(0),
        expiry_hand: AtomicUsize::new(0),
        cache_hand: AtomicUsize::new(0),
        cache_budget,
        compaction_lock: Mutex::new(()),
        removed_segments: Mutex::new(Vec::new()),
        abandoned_outputs: Mutex::new(Default::default()),
        maintenance_lock: Mutex::new(()),
        flush_activation: Mutex::new(()),
        recovery: report,
        shutdown: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        _dir_lock: dir_lock,
    })
}

/// The segment the log appends to, and its length. The seq at which this
/// run starts issuing, `next_seq`, is made durable in the header of a new
/// segment before any seq is issued: the next open then starts above it,
/// even if every write of this run is lost (see `first_seq_of_run`).
///
/// Where no segment id is left for it, the log goes on in the segment it
/// last wrote (unsealed again) and issues no seq: writes fail with
/// [`Error::Exhausted`], as they would at its next rotation anyway.
fn start_log_segment(
    fs: &dyn Fs,
    dir: &Path,
    segments: &Segments,
    opened: &[Arc<Segment>],
    last_active: Option<u32>,
    next_seq: &AtomicU64,
    flush_seq: u64,
) -> Result<(Arc<Segment>, u64)> {
    let last_active = last_active.and_then(|id| opened.iter().find(|s| s.id == id));
    let id = match (segments.allocate_id(), last_active) {
        (Ok(id), _) => id,
        (Err(error), Some(last)) => {
            tracing::error!(%error, "no segment id left to start this run in: writes will fail");
            next_seq.store(record::SEQ_MAX + 1, Ordering::SeqCst);
            last.sealed.store(false, Ordering::Relaxed);
            return Ok((Arc::clone(last), last.len_bytes.load(Ordering::Relaxed)));
        }
        (Err(error), None) => return Err(error),
    };
    let header = SegmentHeader {
        origin: Origin::Log,
        id,
        seq_at_creation: next_seq.load(Ordering::SeqCst),
        flush_seq,
    };
    let created = create_segment(fs, dir, header)?;
    Ok((created, u64::from(segment::HEADER_BYTES)))
}

/// Removes the log segments that hold nothing but their header (a run that
/// wrote nothing), with their hints, once the run's new segment is durable:
/// its header carries a higher seq and the same flush generation, so they
/// tell recovery nothing, and without this every start would leave one
/// more file that no compaction ever takes.
fn remove_empty_log_segments(
    fs: &dyn Fs,
    dir: &Path,
    opened: &mut Vec<Arc<Segment>>,
) -> Result<()> {
    let header_only = |segment: &Arc<Segment>| {
        segment.header.origin == Origin::Log
            && segment.len_bytes.load(Ordering::Relaxed) == u64::from(segment::HEADER_BYTES)
    };
    let (empty, kept): (Vec<_>, Vec<_>) = opened.drain(..).partition(header_only);
    *opened = kept;
    if empty.is_empty() {
        return Ok(());
    }
    for segment in &empty {
        let hint = segment.path.with_extension("hint");
        match fs.remove(&hint) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(format!("removing {}", hint.display()), error));
            }
            _ => {}
        }
        remove_file(fs, &segment.path)?;
    }
    fs.sync_dir(dir)
        .map_err(|e| Error::io(format!("syncing {}", dir.display()), e))
}

/// The first seq a run may issue, given `found`: one past every seq the
/// directory holds, in records and segment headers; `fresh` when it holds
/// no segment, so no seq was ever issued.
///
/// Invariant: no seq that anyone saw before a crash is ever issued again,
/// so a `cas` can never match an item its client never saw. A seq is
/// visible before it is durable (under `always`, a read that does not
/// commit its ticket sees a write before its sync; under `everysec` and
/// `none`, an acknowledged write may be lost), so `found` may be below seqs
/// that were seen. Those lost seqs are the records of the unsynced tail of the
/// active segment and of the log's buffer: fewer than
/// [`record::SEQ_GAP_AT_OPEN`], since every record takes at least 29
/// bytes, a segment at most 4 GiB and the buffer at most 256 MiB. So a run
/// starts that gap above `found`, and records its start durably before it
/// issues anything (the header of its first segment), which the next open
/// counts in `found`. Nothing needs seqs to be dense: recovery, compaction
/// and hint files only compare them.
///
/// Each open uses up one gap of the 2^62 seqs, so about 2^30 opens. Where
/// the gap no longer fits, the run issues nothing: writes fail with
/// [`Error::Exhausted`] and reads go on.
fn first_seq_of_run(found: u64, fresh: bool) -> u64 {
    if fresh {
        return found;
    }
    let exhausted = record::SEQ_MAX + 1;
    match found.checked_add(record::SEQ_GAP_AT_OPEN) {
        Some(first) if first <= exhausted => first,
        _ => {
            tracing::error!(
                found,
                largest = record::SEQ_MAX,
                gap = record::SEQ_GAP_AT_OPEN,
                "no sequence numbers left for this run: writes will fail"
            );
            exhausted
        }
    }
}

/// Segment and hint ids in the directory; leftover temporary files removed.
fn list_files(fs: &dyn Fs, dir: &Path) -> Result<(Vec<u32>, Vec<u32>)> {
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    let mut segment_ids = Vec::new();
    let mut hint_ids = Vec::new();
    for name in names {
        if let Some(id) = segment::parse_name(&name, "seg") {
            segment_ids.push(id);
        } else if let Some(id) = segment::parse_name(&name, "hint") {
            hint_ids.push(id);
        } else if name.ends_with(".tmp") {
            let path = join(dir, &name);
            fs.remove(&path)
                .map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
        }
    }
    segment_ids.sort_unstable();
    hint_ids.sort_unstable();
    Ok((segment_ids, hint_ids))
}

/// Opens every segment and checks its header. Removes compaction outputs
/// that never got their hint file (a compaction cut short: its sources are
/// all still there) and a newest segment whose header never made it to
/// disk ([`segment::creation_cut_short`]).
fn open_segments(
    fs: &dyn Fs,
    dir: &Path,
    ids: &[u32],
    hint_ids: &[u32],
    report: &mut RecoveryReport,
) -> Result<Vec<Arc<Segment>>> {
    let newest_file = ids.last().copied();
    let mut opened = Vec::new();
    for &id in ids {
        let path = join(dir, &segment::segment_name(id));
        let (file, len, bytes) = segment::open_start(fs, &path, Some(id) == newest_file)?;
        let header = match SegmentHeader::decode(&bytes, &path) {
            Ok(header) => header,
            Err(error) if segment::creation_cut_short(len, Some(id) == newest_file) => {
                tracing::warn!(%error, "removing a segment whose creation was cut short");
                remove_file(fs, &path)?;
                report.unfinished_segments += 1;
                continue;
            }
            Err(error) => return Err(error),
        };
        if header.id != id {
            return Err(Error::Corruption {
                file: path,
                offset: 0,
                reason: format!("header names segment {}, file name {id}", header.id),
            });
        }
        if header.origin == Origin::Compaction && hint_ids.binary_search(&id).is_err() {
            tracing::warn!("removing unfinished compaction output {}", path.display());
            remove_file(fs, &path)?;
            report.abandoned_compactions += 1;
            continue;
        }
        report.segments += 1;
        let segment = Segment::new(path, file, header, len);
        opened.push(Arc::new(segment));
    }
    reopen_active_writable(fs, &mut opened, newest_file)?;
    Ok(opened)
}

/// The log appends to (and recovery may truncate) the newest segment the log
/// wrote, which is not the newest file when a compaction output came after
/// it: that one was opened read-only above, so open it again for writing.
fn reopen_active_writable(
    fs: &dyn Fs,
    opened: &mut [Arc<Segment>],
    newest: Option<u32>,
) -> Result<()> {
    let Some(active) = opened
        .iter_mut()
        .rev()
        .find(|segment| segment.header.origin == Origin::Log)
    else {
        return Ok(());
    };
    if Some(active.id) == newest {
        return Ok(());
    }
    let file = fs
        .open(&active.path, true)
        .map_err(|e| Error::io(format!("opening {}", active.path.display()), e))?;
    let len = active.len_bytes.load(Ordering::Relaxed);
    *active = Arc::new(Segment::new(active.path.clone(), file, active.header, len));
    Ok(())
}

/// The id of the newest segment the log wrote (its active one when it
/// stopped): not the newest file when a compaction output came after it.
fn newest_log_segment(opened: &[Arc<Segment>]) -> Option<u32> {
    opened
        .iter()
        .rev()
        .find(|segment| segment.header.origin == Origin::Log)
        .map(|segment| segment.id)
}

/// Removes a file; [`recover`] syncs the directory once every removal at
/// open is made.
fn remove_file(fs: &dyn Fs, path: &Path) -> Result<()> {
    fs.remove(path)
        .map_err(|e| Error::io(format!("removing {}", path.display()), e))
}

/// Feeds one segment's records to the resolver, from its hint if it has a
/// valid one. Returns the segment's length (after cutting a torn tail).
fn load_segment(
    fs: &dyn Fs,
    segment: &Segment,
    is_active: bool,
    hint_ids: &[u32],
    resolver: &mut Resolver<'_>,
    report: &mut RecoveryReport,
) -> Result<u64> {
    let len = segment.len_bytes.load(Ordering::Relaxed);
    if !is_active && hint_ids.binary_search(&segment.id).is_ok() {
        let hint_path = segment.path.with_extension("hint");
        match read_hint(fs, &hint_path, segment.id, len) {
            Ok(hint) => {
                for entry in &hint.entries {
                    resolver.apply(
                        segment,
                        entry.offset,
                        &entry.header,
                        &entry.key,
                        entry.target_seq,
                    );
                }
                segment.has_hint.store(true, Ordering::Relaxed);
                report.segments_from_hints += 1;
                return Ok(len);
            }
            Err(error) => {
                tracing::warn!(%error, "ignoring a damaged hint file; scanning the segment");
            }
        }
    }
    report.segments_scanned += 1;
    let start = u64::from(segment::HEADER_BYTES);
    let io_error = |e| Error::io(format!("scanning {}", segment.path.display()), e);
    let (end, visited) = scan(&*segment.file, start, len, |offset, header, bytes| {
        let key = bytes.get(header.key_range()).unwrap_or_default();
        let aux = crate::record::touch_target(header, bytes);
        resolver.apply(segment, offset as u32, header, key, aux);
        Ok(())
    })
    .map_err(io_error)?;
    visited?;
    match end {
        ScanEnd::Clean => Ok(len),
        ScanEnd::Damaged { offset, .. }
            if is_active && zeros_only(&*segment.file, offset, len).map_err(io_error)? =>
        {
            // The log's reserved blocks past its last record: not a torn
            // write. Cut them off; the log reserves afresh.
            tracing::info!(
                file = %segment.path.display(),
                offset,
                bytes = len - offset,
                "cutting the reserved zeros off the active segment"
            );
            cut_at(segment, offset)?;
            Ok(offset)
        }
        ScanEnd::Damaged { offset, error } if is_active => {
            refuse_damage_before_intact(segment, offset, len, &error)?;
            tracing::warn!(
                file = %segment.path.display(),
                offset,
                cut_bytes = len - offset,
                %error,
                "cutting a torn tail off the active segment"
            );
            cut_at(segment, offset)?;
            report.truncated_bytes += len - offset;
            report.truncated_file = Some(segment.path.clone());
            report.truncated_reason = Some(error.to_string());
            Ok(offset)
        }
        ScanEnd::Damaged { offset, error } => Err(Error::Corruption {
            file: segment.path.clone(),
            offset,
            reason: error.to_string(),
        }),
    }
}

/// Settles every segment a marker names (see [`crate::unsynced`]) and
/// removes the marker. One marked copied is cut at the mark: everything
/// past it is durable in a newer segment. One not copied is rewritten
/// whole, as reads see it now, up to its first damage past the mark: a
/// killed process's failed sync left those bytes readable, but no sync
/// would ever write them, so the copy writes them anew; a power cut left
/// them torn instead, perhaps in a segment no longer the newest, so the
/// copy ends before the damage, even with intact records after it (they
/// were never synced).
///
/// Damage before the mark is in bytes that were synced: such a segment is
/// left as it is, marker and all, for [`load_segment`] to judge as any
/// segment (and `larder check` to report).
fn rewrite_unsynced_tails(
    fs: &dyn Fs,
    dir: &Path,
    opened: &mut [Arc<Segment>],
    report: &mut RecoveryReport,
) -> Result<()> {
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    let active = newest_log_segment(opened);
    for marker in crate::unsynced::read_markers(fs, dir, &names) {
        let id = marker.id;
        if let Some(segment) = opened.iter_mut().find(|segment| segment.id == id) {
            let len = segment.len_bytes.load(Ordering::Relaxed);
            let start = u64::from(segment::HEADER_BYTES);
            let io_error = |e| Error::io(format!("scanning {}", segment.path.display()), e);
            let (end, visited) =
                scan(&*segment.file, start, len, |_, _, _| Ok(())).map_err(io_error)?;
            visited?;
            let keep = match end {
                ScanEnd::Damaged { offset, .. } if offset < marker.from.min(len) => continue,
                _ if marker.copied => marker.from.min(len),
                ScanEnd::Clean => len,
                ScanEnd::Damaged { offset, .. } => offset,
            };
            tracing::warn!(
                file = %segment.path.display(),
                from = marker.from,
                copied = marker.copied,
                kept = keep,
                cut = len - keep,
                "settling a segment whose sync failed before the process stopped"
            );
            replace_with_copy(fs, dir, segment, keep, Some(id) == active)?;
            report.rewritten_segments += 1;
        }
        crate::unsynced::unmark(fs, dir, id)?;
    }
    Ok(())
}

/// Rewrites `segment` as its first `len` bytes read now, under a temporary
/// name, synced and renamed over the original, and opens it afresh
/// (writable if `writable`). On failure the temporary file is removed and
/// the original left as it was.
fn replace_with_copy(
    fs: &dyn Fs,
    dir: &Path,
    segment: &mut Arc<Segment>,
    len: u64,
    writable: bool,
) -> Result<()> {
    let name = segment::segment_name(segment.id);
    if let Err(error) = crate::fs::install_copy(fs, dir, &name, &*segment.file, len) {
        crate::fs::discard(fs, dir, &[&crate::fs::temporary_path(dir, &name)]);
        return Err(error);
    }
    let (file, len, _) = segment::open_start(fs, &segment.path, writable)?;
    *segment = Arc::new(Segment::new(
        segment.path.clone(),
        file,
        segment.header,
        len,
    ));
    Ok(())
}

/// Syncs the active segment before anything is read from it.
///
/// A killed process may have left the segment's last records in the page
/// cache only. The log takes everything before the end open finds as
/// synced: a failed sync later could drop those pages, and heal, which
/// rewrites only what came after the last good sync, would not know.
///
/// Should this sync fail, the kernel has dropped the pages' dirty state
/// (their bytes still read back while they stay cached) and no later sync
/// of the file would write them: a restart would find the sync succeeding
/// and the records gone at the next power cut. So the segment is rewritten
/// whole, as reads see it now, under a temporary name, synced and renamed
/// over the original, and opened afresh. Should reads already find the
/// pages evicted, the copy holds what the disk has, as the original would.
///
/// If the copy fails too, open fails with the sync's error, and a restart
/// after that syncs the original "successfully", which this cannot prevent
/// without writing somewhere that is failing. Once the copy is renamed and
/// the directory synced, the records are safe whatever comes after.
fn sync_active(
    fs: &dyn Fs,
    dir: &Path,
    active: &mut Arc<Segment>,
    report: &mut RecoveryReport,
) -> Result<()> {
    let path = active.path.clone();
    let error = match active.file.sync_data() {
        Ok(()) => return Ok(()),
        Err(error) => Error::io(format!("syncing {}", path.display()), error),
    };
    tracing::warn!(
        file = %path.display(),
        %error,
        "syncing the active segment failed; rewriting it from what reads still see"
    );
    let copied = active
        .file
        .len()
        .map_err(|e| Error::io(format!("reading length of {}", path.display()), e))
        .and_then(|len| replace_with_copy(fs, dir, active, len, true));
    if let Err(copy) = copied {
        tracing::error!(%copy, "rewriting the active segment failed");
        return Err(error);
    }
    report.rewritten_segments += 1;
    tracing::info!(
        file = %active.path.display(),
        len = active.len_bytes.load(Ordering::Relaxed),
        "rewrote the active segment"
    );
    Ok(())
}

/// Fails with [`Error::Corruption`] if the damage the scan of the active
/// segment found at `offset` (of its `len` bytes) is followed by an intact
/// record and is no torn write (see [`crate::check::damage_before_intact`]):
/// the records after it may have been acknowledged, so cutting there is not
/// recovery's call (salvage keeps them; see [`crate::salvage`]). Only runs
/// on damage; reads the segment once (whole: whether the damage may be a
/// hole of unwritten sectors depends on where the sector boundaries are).
fn refuse_damage_before_intact(
    segment: &Segment,
    offset: u64,
    len: u64,
    error: &crate::record::DecodeError,
) -> Result<()> {
    // Segment offsets fit in 32 bits (records name them so).
    let mut bytes = vec![0u8; len as usize];
    segment
        .file
        .read_exact_at(&mut bytes, 0)
        .map_err(|e| Error::io(format!("reading {}", segment.path.display()), e))?;
    let Some(found) = crate::check::damage_before_intact(&bytes, offset as usize) else {
        return Ok(());
    };
    Err(Error::Corruption {
        file: segment.path.clone(),
        offset: found.damaged,
        reason: format!(
            "{error}; an intact record follows at offset {}, so this is damage in the \
             active segment, not a torn write",
            found.intact
        ),
    })
}

/// Truncates the active segment to `offset` and syncs the new length.
fn cut_at(segment: &Segment, offset: u64) -> Result<()> {
    segment
        .file
        .set_len(offset)
        .and_then(|()| segment.file.sync_data())
        .map_err(|e| Error::io(format!("truncating {}", segment.path.display()), e))
}

/// Whether bytes `[from, to)` of `file` are all zero.
fn zeros_only(file: &dyn FsFile, from: u64, to: u64) -> std::io::Result<bool> {
    let mut chunk = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let count = (to - at).min(chunk.len() as u64) as usize;
        let part = chunk.get_mut(..count).unwrap_or_default();
        file.read_exact_at(part, at)?;
        if part.iter().any(|&byte| byte != 0) {
            return Ok(false);
        }
        at += count as u64;
    }
    Ok(true)
}

/// Reads and checks the hint of segment `id`, `segment_len` bytes long.
pub(crate) fn read_hint(fs: &dyn Fs, path: &Path, id: u32, segment_len: u64) -> Result<hint::Hint> {
    let bytes = crate::fs::read_all(fs, path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let hint = hint::decode(&bytes, path)?;
    if hint.segment_id != id || hint.segment_len != segment_len {
        return Err(Error::Corruption {
            file: path.to_owned(),
            offset: 0,
            reason: format!(
                "hint describes segment {} of {} bytes; the segment is {id} of {segment_len} bytes",
                hint.segment_id, hint.segment_len
            ),
        });
    }
    Ok(hint)
}

/// Drops flushed items, applies touches, and sums up live bytes and items.
fn finish_keydir(
    keydir: &Keydir,
    segments: &[Arc<Segment>],
    touches: &HashMap<Vec<u8>, Touch>,
    flush_seq: u64,
    counters: &Counters,
) {
    let by_id: HashMap<u32, &Arc<Segment>> = segments.iter().map(|s| (s.id, s)).collect();
    for index in 0..keydir.len() {
        let mut table = keydir.partition_at(index).write();
        table.retain(|entry| entry.cas() >= flush_seq);
        for entry in table.iter_mut() {
            if let Some(touch) = touches.get(entry.key()) {
                if touch.target == entry.cas() && touch.seq > entry.cas() {
                    entry.set_exptime(touch.exptime);
                    keydir.note_expiry_at(index, touch.exptime);
                    if touch.stale {
                        entry.bits().fetch_or(BIT_STALE, Ordering::Relaxed);
                    }
                }
            }
            if let Some(segment) = by_id.get(&entry.segment_id()) {
                segment.add_live(entry.record_len());
            }
            counters.items.fetch_add(1, Ordering::Relaxed);
            counters
                .item_bytes
                .fetch_add(entry.item_bytes(), Ordering::Relaxed);
        }
    }
}
