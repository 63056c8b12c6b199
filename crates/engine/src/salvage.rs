//! Salvage: opening a data directory whose segments are damaged, when the
//! operator asks for it (`larder serve --salvage`).
//!
//! Without salvage, damage in a sealed segment, or in the active (newest
//! log) segment with intact records after it, stops the engine from opening
//! (see [`crate::recovery`]): the records there were acknowledged, and
//! quietly dropping them is not the engine's call. With salvage, each such
//! segment with damaged records is rewritten with its intact records only,
//! one segment at a time: the original is first copied to `damaged/` inside
//! the data directory (kept for inspection; nothing removes it), the cleaned
//! copy is written and synced, a hint file describing the cleaned copy
//! replaces the old one (if the segment had one), and the cleaned copy
//! replaces the original with an atomic rename. Every skipped record is
//! logged with file, offset and key (when readable).
//!
//! Batches stay atomic on the side salvage can see: the intact records of a
//! batch that a damaged record interrupts are dropped with it. Records after
//! the damage that belonged to the same batch cannot be told apart from a
//! new batch and are kept.
//!
//! What salvage cannot know: a skipped record may have been a delete or an
//! overwrite, so an older value of its key can come back. The log line of
//! each skipped record names the key so the operator can check it.
//!
//! Crash safety: until the final rename the original segment is in place,
//! and a hint that already describes the cleaned copy does not match it (a
//! hint names its segment's length), so recovery scans the original, finds
//! the damage and refuses again; running salvage again finishes the job.
//! Leftover `.tmp` files are removed at the next start.
//!
//! A segment whose header does not decode and that is too short to hold a
//! record (empty, or a header's length of zeros, which a power cut could
//! leave where earlier builds created a segment) is moved to `damaged/`
//! whole; if it has a hint, the hint is copied there too and every record
//! it names is logged and counted as skipped. A damaged header in front of
//! records is not salvage's business, nor is a torn tail of the active
//! segment (damage that no intact record follows, by the test of
//! [`crate::check::damage_before_intact`]): recovery refuses the former and
//! cuts the latter. The active segment's zeros past its last record are the
//! log's reserved blocks, neither kept nor counted as skipped.

use crate::check::{damage_before_intact, walk_records, Tail, Walked};
use crate::error::{Error, Result};
use crate::fs::{join, read_all, temporary_path, write_synced, Fs};
use crate::hint::{self, HintWriter};
use crate::record;
use crate::segment::{self, Origin, SegmentHeader};
use crate::stats::RecoveryReport;
use std::path::{Path, PathBuf};

/// Subdirectory of the data directory that keeps the original of every
/// segment salvage rewrote.
pub const DAMAGED_DIR: &str = "damaged";

/// Rewrites every damaged sealed segment in `dir` (segment ids `ids`, hint
/// ids `hint_ids`, both sorted), and the active one if intact records
/// follow its damage, with its intact records only.
pub(crate) fn salvage(
    fs: &dyn Fs,
    dir: &Path,
    ids: &[u32],
    hint_ids: &[u32],
    report: &mut RecoveryReport,
) -> Result<()> {
    let newest_file = ids.last().copied();
    let mut headers = Vec::new();
    for &id in ids {
        let path = join(dir, &segment::segment_name(id));
        let (_, len, bytes) = segment::open_start(fs, &path, false)?;
        let header = match SegmentHeader::decode(&bytes, &path) {
            Ok(header) => Some(header),
            // Recovery removes it.
            Err(_) if segment::creation_cut_short(len, Some(id) == newest_file) => continue,
            Err(_) => None,
        };
        headers.push((id, header, path, len));
    }
    let active = headers
        .iter()
        .rev()
        .find(|(_, header, _, _)| header.is_some_and(|h| h.origin == Origin::Log))
        .map(|(id, _, _, _)| *id);
    for (id, header, path, len) in &headers {
        let is_active = Some(*id) == active;
        let Some(header) = header else {
            if segment::no_room_for_a_record(*len) {
                // No room for a record: empty, or a header's length of
                // something else (zeros, where an earlier build's creation
                // was cut short by a power cut).
                let has_hint = hint_ids.binary_search(id).is_ok();
                report.salvaged_records_skipped += set_aside(fs, dir, *id, path, has_hint)?;
                report.salvaged_segments += 1;
                continue;
            }
            tracing::error!(
                file = %path.display(),
                "salvage: the segment header is damaged; this file cannot be salvaged"
            );
            continue;
        };
        let has_hint = hint_ids.binary_search(id).is_ok();
        if header.origin == Origin::Compaction && !has_hint {
            continue; // an unfinished compaction output; recovery removes it
        }
        let bytes =
            read_all(fs, path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let header_len = segment::HEADER_BYTES as usize;
        if is_active && damage_before_intact(&bytes, header_len).is_none() {
            continue; // intact, or a torn tail that recovery cuts
        }
        let cleaned = clean(path, &bytes, is_active);
        if cleaned.skipped == 0 {
            continue;
        }
        replace(fs, dir, *id, path, &bytes, &cleaned, has_hint)?;
        report.salvaged_segments += 1;
        report.salvaged_records_skipped += cleaned.skipped;
    }
    Ok(())
}

/// A segment's bytes without its damaged records.
struct Cleaned {
    /// Header and intact records.
    bytes: Vec<u8>,
    /// Damaged records, records of interrupted batches, and a tail of zeros.
    skipped: u64,
}

/// Keeps the intact records of a segment, dropping damaged ones and the
/// records of any batch a damaged record interrupts. Zeros at the end are
/// skipped, and counted unless the segment is the `active` one, where they
/// are the log's reserved blocks.
fn clean(path: &Path, bytes: &[u8], active: bool) -> Cleaned {
    let header_len = segment::HEADER_BYTES as usize;
    let mut kept = bytes.get(..header_len).unwrap_or_default().to_vec();
    let mut skipped = 0u64;
    // Where the open batch's records start in `kept`, and how many there are.
    let mut open_batch: Option<(usize, u64)> = None;
    let tail = walk_records(bytes, |event| match event {
        Walked::Intact { record, .. } => {
            let continues = record::decode_header(record).is_ok_and(|h| h.batch_continues);
            let start = kept.len();
            kept.extend_from_slice(record);
            open_batch = match (open_batch, continues) {
                (Some((at, count)), true) => Some((at, count + 1)),
                (None, true) => Some((start, 1)),
                (_, false) => None,
            };
        }
        Walked::Damaged {
            offset,
            key,
            reason,
        } => {
            skipped += 1;
            let key = key.map_or_else(
                || "(unreadable)".to_owned(),
                |k| String::from_utf8_lossy(k).into_owned(),
            );
            tracing::warn!(
                file = %path.display(),
                offset,
                %key,
                %reason,
                "salvage: skipping a damaged record"
            );
            drop_open_batch(path, &mut kept, &mut open_batch, &mut skipped);
        }
    });
    drop_open_batch(path, &mut kept, &mut open_batch, &mut skipped);
    if let (Tail::Zeros(offset), false) = (tail, active) {
        skipped += 1;
        tracing::warn!(
            file = %path.display(),
            offset,
            "salvage: skipping zeros at the end of a sealed segment"
        );
    }
    Cleaned {
        bytes: kept,
        skipped,
    }
}

/// Drops the records of a batch that damage (or the segment's end)
/// interrupted.
fn drop_open_batch(
    path: &Path,
    kept: &mut Vec<u8>,
    open_batch: &mut Option<(usize, u64)>,
    skipped: &mut u64,
) {
    if let Some((start, count)) = open_batch.take() {
        kept.truncate(start);
        *skipped += count;
        tracing::warn!(
            file = %path.display(),
            records = count,
            "salvage: dropping the intact records of a batch that damage interrupted"
        );
    }
}

/// Puts the cleaned copy of segment `id` in place of the original (see the
/// module documentation for the order and why it is safe).
fn replace(
    fs: &dyn Fs,
    dir: &Path,
    id: u32,
    path: &Path,
    original: &[u8],
    cleaned: &Cleaned,
    has_hint: bool,
) -> Result<()> {
    let io = |what: &str, path: &Path, e| Error::io(format!("{what} {}", path.display()), e);
    let kept = keep_original(fs, dir, path, original)?;
    let tmp = temporary_path(dir, &segment::segment_name(id));
    write_synced(fs, &tmp, &cleaned.bytes).map_err(|e| io("writing", &tmp, e))?;
    if has_hint {
        hint::install(fs, dir, id, &hint_of(id, &cleaned.bytes))?;
    }
    fs.rename(&tmp, path)
        .map_err(|e| io("replacing", path, e))?;
    fs.sync_dir(dir).map_err(|e| io("syncing", dir, e))?;
    tracing::warn!(
        file = %path.display(),
        skipped = cleaned.skipped,
        original = %kept.display(),
        "salvage: rewrote the segment with its intact records"
    );
    Ok(())
}

/// Moves segment `id`, which has no header and no room for a record, to
/// `damaged/` (a durable copy, then the removal). Its hint, if it has one,
/// is copied there too and removed first: it names the records the
/// segment held once (a sealed segment emptied by damage), each logged
/// with its key and counted as skipped. Returns how many.
fn set_aside(fs: &dyn Fs, dir: &Path, id: u32, path: &Path, has_hint: bool) -> Result<u64> {
    let io = |what: &str, path: &Path, e| Error::io(format!("{what} {}", path.display()), e);
    let mut skipped = 0;
    if has_hint {
        let hint_path = join(dir, &segment::hint_name(id));
        let hint_bytes = read_all(fs, &hint_path).map_err(|e| io("reading", &hint_path, e))?;
        let kept = keep_original(fs, dir, &hint_path, &hint_bytes)?;
        match hint::decode(&hint_bytes, &hint_path) {
            Ok(hint) => {
                for entry in &hint.entries {
                    skipped += 1;
                    tracing::warn!(
                        file = %path.display(),
                        offset = entry.offset,
                        key = %String::from_utf8_lossy(&entry.key),
                        "salvage: skipping a record the hint names in a segment without a header"
                    );
                }
            }
            Err(error) => tracing::error!(
                %error,
                hint = %kept.display(),
                "salvage: the hint of a segment without a header is damaged too; \
                 the keys it named are unknown"
            ),
        }
        // First, and durably: a hint left without its segment could be
        // taken up by a later segment of the same id.
        fs.remove(&hint_path)
            .map_err(|e| io("removing", &hint_path, e))?;
        fs.sync_dir(dir).map_err(|e| io("syncing", dir, e))?;
    }
    let bytes = read_all(fs, path).map_err(|e| io("reading", path, e))?;
    let kept = keep_original(fs, dir, path, &bytes)?;
    fs.remove(path).map_err(|e| io("removing", path, e))?;
    fs.sync_dir(dir).map_err(|e| io("syncing", dir, e))?;
    tracing::warn!(
        file = %path.display(),
        bytes = bytes.len(),
        original = %kept.display(),
        skipped,
        "salvage: moved aside a segment without a header, too short to hold a record"
    );
    Ok(skipped)
}

/// The hint file of a cleaned segment (every record in it is intact).
fn hint_of(id: u32, segment_bytes: &[u8]) -> Vec<u8> {
    let mut hint = HintWriter::new();
    walk_records(segment_bytes, |event| {
        if let Walked::Intact { offset, record } = event {
            if let Ok(header) = record::decode_header(record) {
                hint.push_record(&header, offset as u32, record);
            }
        }
    });
    hint.finish(id, segment_bytes.len() as u64)
}

/// Copies a damaged segment into `damaged/` under the first free name and
/// makes the copy durable. Returns its path.
fn keep_original(fs: &dyn Fs, dir: &Path, path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let damaged = join(dir, DAMAGED_DIR);
    let io = |what: &str, path: &Path, e| Error::io(format!("{what} {}", path.display()), e);
    fs.create_dir_all(&damaged)
        .map_err(|e| io("creating", &damaged, e))?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let taken = fs.list(&damaged).map_err(|e| io("listing", &damaged, e))?;
    let free = (0u32..)
        .map(|n| {
            if n == 0 {
                name.clone()
            } else {
                format!("{name}.{n}")
            }
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or(name);
    let copy = join(&damaged, &free);
    write_synced(fs, &copy, bytes).map_err(|e| io("writing", &copy, e))?;
    fs.sync_dir(&damaged)
        .map_err(|e| io("syncing", &damaged, e))?;
    fs.sync_dir(dir).map_err(|e| io("syncing", dir, e))?;
    Ok(copy)
}
