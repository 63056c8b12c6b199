//! Salvage: opening a data directory whose sealed segments are damaged,
//! when the operator asks for it (`larder serve --salvage`).
//!
//! Without salvage, damage in a sealed segment stops the engine from opening
//! (see [`crate::recovery`]): the records there were acknowledged, and
//! quietly dropping them is not the engine's call. With salvage, each sealed
//! segment with damage is rewritten with its intact records only: the
//! original is first copied to `damaged/` inside the data directory (kept
//! for inspection; nothing removes it), its hint file is removed (offsets
//! change), and the cleaned copy replaces it with an atomic rename. Every
//! skipped record is logged with file, offset and key (when readable).
//!
//! What salvage cannot know: a skipped record may have been a delete or an
//! overwrite, so an older value of its key can come back. The log line of
//! each skipped record names the key so the operator can check it.
//!
//! Crash safety: at every point either the original or the complete cleaned
//! segment is in place, and running salvage again finishes the job. The
//! active (newest log) segment is left to recovery, which cuts a torn tail.

use crate::check::{walk_records, Tail};
use crate::error::{Error, Result};
use crate::fs::{join, read_all, Fs};
use crate::segment::{self, Origin, SegmentHeader};
use crate::stats::RecoveryReport;
use std::path::{Path, PathBuf};

/// Subdirectory of the data directory that keeps the original of every
/// segment salvage rewrote.
pub const DAMAGED_DIR: &str = "damaged";

/// Rewrites every damaged sealed segment in `dir` (segment ids `ids`, hint
/// ids `hint_ids`, both sorted) with its intact records only.
pub(crate) fn salvage(
    fs: &dyn Fs,
    dir: &Path,
    ids: &[u32],
    hint_ids: &[u32],
    report: &mut RecoveryReport,
) -> Result<()> {
    let mut segments = Vec::new();
    for &id in ids {
        let path = join(dir, &segment::segment_name(id));
        let bytes =
            read_all(fs, &path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        segments.push((id, path, bytes));
    }
    let headers: Vec<Option<SegmentHeader>> = segments
        .iter()
        .map(|(_, path, bytes)| SegmentHeader::decode(bytes, path).ok())
        .collect();
    let active = segments
        .iter()
        .zip(&headers)
        .rev()
        .find(|(_, header)| header.is_some_and(|h| h.origin == Origin::Log))
        .map(|((id, _, _), _)| *id);
    for ((id, path, bytes), header) in segments.iter().zip(&headers) {
        if Some(*id) == active {
            continue;
        }
        let Some(header) = header else {
            // Without a readable header none of its records can be placed
            // in seq order; recovery refuses it and the operator decides.
            tracing::error!(
                file = %path.display(),
                "salvage: the segment header is damaged; cannot salvage this file"
            );
            continue;
        };
        let has_hint = hint_ids.binary_search(id).is_ok();
        if header.origin == Origin::Compaction && !has_hint {
            continue; // an unfinished compaction output; recovery removes it
        }
        salvage_segment(fs, dir, path, bytes, has_hint, report)?;
    }
    Ok(())
}

/// Rewrites one segment without its damaged records, if it has any.
fn salvage_segment(
    fs: &dyn Fs,
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    has_hint: bool,
    report: &mut RecoveryReport,
) -> Result<()> {
    let header_len = segment::HEADER_BYTES as usize;
    let mut cleaned = bytes.get(..header_len).unwrap_or_default().to_vec();
    let mut skipped = 0u64;
    let tail = walk_records(
        bytes,
        |_, record| cleaned.extend_from_slice(record),
        |offset, key, reason| {
            skipped += 1;
            tracing::warn!(
                file = %path.display(),
                offset,
                key = %key.map_or_else(|| "(unreadable)".to_owned(), |k| String::from_utf8_lossy(k).into_owned()),
                %reason,
                "salvage: skipping a damaged record"
            );
        },
    );
    if let Tail::Zeros(offset) = tail {
        skipped += 1;
        tracing::warn!(
            file = %path.display(),
            offset,
            "salvage: skipping zeros at the end of a sealed segment"
        );
    }
    if skipped == 0 {
        return Ok(());
    }
    let io = |what: &str, path: &Path, e| Error::io(format!("{what} {}", path.display()), e);
    if has_hint {
        let hint = path.with_extension("hint");
        fs.remove(&hint).map_err(|e| io("removing", &hint, e))?;
        fs.sync_dir(dir).map_err(|e| io("syncing", dir, e))?;
    }
    let kept = keep_original(fs, dir, path, bytes)?;
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    let _ = fs.remove(&tmp);
    let file = fs.create(&tmp).map_err(|e| io("creating", &tmp, e))?;
    file.write_all_at(&cleaned, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| io("writing", &tmp, e))?;
    drop(file);
    fs.rename(&tmp, path)
        .map_err(|e| io("replacing", path, e))?;
    fs.sync_dir(dir).map_err(|e| io("syncing", dir, e))?;
    tracing::warn!(
        file = %path.display(),
        skipped,
        original = %kept.display(),
        "salvage: rewrote the segment with its intact records"
    );
    report.salvaged_segments += 1;
    report.salvaged_records_skipped += skipped;
    Ok(())
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
    let file = fs.create(&copy).map_err(|e| io("creating", &copy, e))?;
    file.write_all_at(bytes, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| io("writing", &copy, e))?;
    fs.sync_dir(&damaged)
        .map_err(|e| io("syncing", &damaged, e))?;
    fs.sync_dir(dir).map_err(|e| io("syncing", dir, e))?;
    Ok(copy)
}
