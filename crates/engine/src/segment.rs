//! Segment files: the log is a sequence of them.
//!
//! File name: `{id:010}.seg` in the data directory. Byte map of the header
//! (little-endian, fixed width; records follow at offset 40):
//!
//! ```text
//! offset  size  field
//! 0       8     magic "LARDSEG1"
//! 8       2     format version (1)
//! 10      1     origin: 1 = written by the log, 2 = written by compaction
//! 11      1     reserved (0)
//! 12      4     segment id
//! 16      8     seq_at_creation: every seq issued before the file was made is
//!               below this; recovery never hands out a seq below it
//! 24      8     flush_seq: items with a seq below it were flushed
//! 32      4     crc32c of bytes [0, 32)
//! 36      4     reserved (0)
//! ```
//!
//! A sealed segment is never modified again; it is removed only after
//! compaction has moved its live records to a durable new segment.
//!
//! `Segment` is shared (`Arc`) between the log writer, readers and the
//! compactor; its counters are atomics, so any thread may update them.

use crate::error::{Error, Result};
use crate::fs::{Fs, FsFile};
use crate::record::{u32_at, u64_at, SEQ_MAX};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Size of the segment header; the first record starts here.
pub const HEADER_BYTES: u32 = 40;
/// The largest segment id. Ids are never reused; recovery starts the next id
/// one past the newest segment's, which this leaves room for in a `u32`.
pub const ID_MAX: u32 = u32::MAX - 1;
const MAGIC: &[u8; 8] = b"LARDSEG1";
const VERSION: u16 = 1;

/// Who wrote a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The log: records in the order they were acknowledged.
    Log = 1,
    /// Compaction: live records copied forward; complete only with its hint.
    Compaction = 2,
}

/// The decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Who wrote the segment.
    pub origin: Origin,
    /// The segment id (also in the file name).
    pub id: u32,
    /// Every seq issued before the file was created is below this.
    pub seq_at_creation: u64,
    /// Items with a seq below this were flushed when the file was created.
    pub flush_seq: u64,
}

impl SegmentHeader {
    /// Encodes the 40-byte header.
    pub fn encode(&self) -> [u8; HEADER_BYTES as usize] {
        let mut out = [0u8; HEADER_BYTES as usize];
        let mut bytes = Vec::with_capacity(HEADER_BYTES as usize);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.push(self.origin as u8);
        bytes.push(0);
        bytes.extend_from_slice(&self.id.to_le_bytes());
        bytes.extend_from_slice(&self.seq_at_creation.to_le_bytes());
        bytes.extend_from_slice(&self.flush_seq.to_le_bytes());
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        out.copy_from_slice(&bytes);
        out
    }

    /// Decodes and checks a header read from `file`.
    pub fn decode(bytes: &[u8], file: &Path) -> Result<SegmentHeader> {
        let corrupt = |reason: String| Error::Corruption {
            file: file.to_owned(),
            offset: 0,
            reason,
        };
        if bytes.len() < HEADER_BYTES as usize {
            return Err(corrupt(format!(
                "segment header needs {HEADER_BYTES} bytes, file has {}",
                bytes.len()
            )));
        }
        if bytes.get(..8) != Some(&MAGIC[..]) {
            return Err(corrupt("bad segment magic".into()));
        }
        let stored = u32_at(bytes, 32);
        let computed = crc32c::crc32c(bytes.get(..32).unwrap_or_default());
        if stored != computed {
            return Err(corrupt(format!(
                "segment header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            )));
        }
        let version = u16::from_le_bytes([
            bytes.get(8).copied().unwrap_or_default(),
            bytes.get(9).copied().unwrap_or_default(),
        ]);
        if version != VERSION {
            return Err(corrupt(format!(
                "segment format version {version}, this build reads {VERSION}"
            )));
        }
        let origin = match bytes.get(10) {
            Some(1) => Origin::Log,
            Some(2) => Origin::Compaction,
            other => return Err(corrupt(format!("unknown segment origin {other:?}"))),
        };
        let seq_at_creation = u64_at(bytes, 16);
        let flush_seq = u64_at(bytes, 24);
        // seq_at_creation is the next seq to be issued, one past the largest.
        if seq_at_creation > SEQ_MAX + 1 || flush_seq > SEQ_MAX {
            return Err(corrupt(format!(
                "segment header seqs {seq_at_creation} (next) and {flush_seq} (flush): above the largest possible, {SEQ_MAX}"
            )));
        }
        Ok(SegmentHeader {
            origin,
            id: u32_at(bytes, 12),
            seq_at_creation,
            flush_seq,
        })
    }
}

/// Opens the segment file at `path` (for writing if `writable`); returns it
/// with its length and its first bytes, up to a header's length.
pub(crate) fn open_start(
    fs: &dyn Fs,
    path: &Path,
    writable: bool,
) -> Result<(Arc<dyn FsFile>, u64, Vec<u8>)> {
    let file = fs
        .open(path, writable)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let len = file
        .len()
        .map_err(|e| Error::io(format!("reading length of {}", path.display()), e))?;
    let mut bytes = vec![0u8; u64::from(HEADER_BYTES).min(len) as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| Error::io(format!("reading header of {}", path.display()), e))?;
    Ok((file, len, bytes))
}

/// Whether a segment whose header does not decode is what a power cut left
/// of a creation that never finished, rather than damage: the newest file,
/// no longer than a header, so with no room for a record. Larder creates
/// segments under a temporary name and renames them once their header is
/// synced ([`crate::log`]'s `create_segment`), so it no longer leaves such
/// a file; earlier builds created them under their own name, and a
/// directory they wrote may still hold one. Anything else that does not
/// decode is damage, and open refuses it.
pub(crate) fn creation_cut_short(len: u64, newest_file: bool) -> bool {
    newest_file && no_room_for_a_record(len)
}

/// Whether a segment file of `len` bytes is too short to hold a record
/// after its header: empty, or a header's length at most.
pub(crate) fn no_room_for_a_record(len: u64) -> bool {
    len <= u64::from(HEADER_BYTES)
}

/// The file name of segment `id`.
pub fn segment_name(id: u32) -> String {
    format!("{id:010}.seg")
}

/// The file name of the hint file of segment `id`.
pub fn hint_name(id: u32) -> String {
    format!("{id:010}.hint")
}

/// Parses `0000000042.seg` (or `.hint`) into 42.
pub fn parse_name(name: &str, extension: &str) -> Option<u32> {
    let stem = name.strip_suffix(extension)?.strip_suffix('.')?;
    if stem.len() != 10 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// A segment file open for reading (and, while active, for appending by the
/// log), with the byte accounting that drives compaction.
pub struct Segment {
    /// The segment id.
    pub id: u32,
    /// Its path, for error messages.
    pub path: PathBuf,
    /// The open file.
    pub file: Arc<dyn FsFile>,
    /// The header as written.
    pub header: SegmentHeader,
    /// Bytes in the file (header included); grows while active.
    pub len_bytes: AtomicU64,
    /// Bytes of records the keydir still points at.
    pub live_bytes: AtomicU64,
    /// The smallest seq of any record in the file (u64::MAX when empty).
    pub min_seq: AtomicU64,
    /// Sealed: no more appends.
    pub sealed: AtomicBool,
    /// A hint file describes it.
    pub has_hint: AtomicBool,
    /// Past its length, the file may still hold records a failed sync left
    /// unsure, which the next open settles (see [`crate::unsynced`]): its
    /// hint does not describe them, so the tombstone check counts it as
    /// unread.
    pub unsure_tail: AtomicBool,
    /// Bytes of the tombstones compaction copied here because an older put
    /// of their key was still on disk (see [`crate::tombstones`]): neither
    /// live nor dead, so that a segment of such tombstones is not compacted
    /// again only to keep them again. 0 when any segment that held those
    /// puts is removed, and less each tombstone a newer one replaces.
    pub tombstone_bytes_kept: AtomicU64,
    /// What compaction learnt about this segment's tombstones.
    pub(crate) tombstones: Mutex<KeptTombstones>,
    /// The file may hold a tombstone (a delete record). False only for a
    /// segment this process created empty and has written no tombstone to
    /// since: compaction then need not read its records to find the
    /// tombstones it must keep (see [`crate::tombstones::gather`]). Raised
    /// before the segment can be compacted: for a log segment under the log
    /// lock that seals it, for a compaction output before the tombstone's
    /// bytes are written (a failed pass's output is compacted again
    /// without a hint).
    may_hold_tombstones: AtomicBool,
}

/// What compaction learnt about a segment's tombstones (see
/// [`crate::tombstones`]).
#[derive(Default)]
pub(crate) struct KeptTombstones {
    /// The segments whose older puts the kept tombstones hide.
    pub kept_for: Vec<u32>,
    /// Keys with a newer tombstone in another segment, with the newest such
    /// seq: a tombstone of the key here below it is not needed.
    pub replaced: HashMap<Vec<u8>, u64>,
}

impl Segment {
    /// Wraps an open segment file.
    pub fn new(path: PathBuf, file: Arc<dyn FsFile>, header: SegmentHeader, len: u64) -> Segment {
        // Unknown for a file already on disk.
        Segment::with_tombstones(path, file, header, len, true)
    }

    /// Wraps a segment file just created, which holds its header alone.
    pub(crate) fn new_empty(
        path: PathBuf,
        file: Arc<dyn FsFile>,
        header: SegmentHeader,
    ) -> Segment {
        Segment::with_tombstones(path, file, header, u64::from(HEADER_BYTES), false)
    }

    fn with_tombstones(
        path: PathBuf,
        file: Arc<dyn FsFile>,
        header: SegmentHeader,
        len: u64,
        may_hold_tombstones: bool,
    ) -> Segment {
        Segment {
            id: header.id,
            path,
            file,
            header,
            len_bytes: AtomicU64::new(len),
            live_bytes: AtomicU64::new(0),
            min_seq: AtomicU64::new(u64::MAX),
            sealed: AtomicBool::new(false),
            has_hint: AtomicBool::new(false),
            unsure_tail: AtomicBool::new(false),
            tombstone_bytes_kept: AtomicU64::new(0),
            tombstones: Mutex::new(KeptTombstones::default()),
            may_hold_tombstones: AtomicBool::new(may_hold_tombstones),
        }
    }

    /// Records that a tombstone was written to the file.
    pub(crate) fn note_tombstone(&self) {
        self.may_hold_tombstones.store(true, Ordering::Release);
    }

    /// Whether the file may hold a tombstone; false only if it surely holds
    /// none.
    pub(crate) fn may_hold_tombstones(&self) -> bool {
        self.may_hold_tombstones.load(Ordering::Acquire)
    }

    /// Bytes of records the keydir no longer points at (plus the header),
    /// less the tombstones kept here ([`Segment::tombstone_bytes_kept`]).
    pub fn dead_bytes(&self) -> u64 {
        self.len_bytes
            .load(Ordering::Relaxed)
            .saturating_sub(self.live_bytes.load(Ordering::Relaxed))
            .saturating_sub(self.tombstone_bytes_kept.load(Ordering::Relaxed))
    }

    /// Dead bytes as a fraction of the file.
    pub fn dead_ratio(&self) -> f64 {
        let len = self.len_bytes.load(Ordering::Relaxed);
        if len == 0 {
            return 0.0;
        }
        self.dead_bytes() as f64 / len as f64
    }

    /// Records that a record of `seq` lives in this segment.
    pub fn note_seq(&self, seq: u64) {
        self.min_seq.fetch_min(seq, Ordering::Relaxed);
    }

    /// Adds live bytes (a record the keydir now points at).
    pub fn add_live(&self, bytes: u64) {
        self.live_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records that compaction kept `bytes` of tombstones here, to hide the
    /// older puts of their keys that segments `kept_for` hold.
    pub(crate) fn keep_tombstones(&self, bytes: u64, kept_for: Vec<u32>) {
        let mut tombstones = self.tombstones.lock();
        tombstones.kept_for = kept_for;
        self.tombstone_bytes_kept.store(bytes, Ordering::Release);
    }

    /// After segment `removed_id` is removed: if the tombstones kept here
    /// hid puts it held, they count as dead again, to be checked anew.
    pub(crate) fn forget_removed(&self, removed_id: u32) {
        let mut tombstones = self.tombstones.lock();
        if tombstones.kept_for.contains(&removed_id) {
            tombstones.kept_for.clear();
            self.tombstone_bytes_kept.store(0, Ordering::Release);
        }
    }

    /// Records that the tombstones of `key` here (of `bytes`, if it is one
    /// compaction kept) are older than a tombstone of seq `newer_seq` in
    /// another segment, so no longer needed.
    pub(crate) fn replace_tombstone(&self, key: &[u8], newer_seq: u64, bytes: u64) {
        let mut tombstones = self.tombstones.lock();
        match tombstones.replaced.get_mut(key) {
            Some(seq) => *seq = (*seq).max(newer_seq),
            None => {
                tombstones.replaced.insert(key.to_vec(), newer_seq);
                // A compaction output holds at most one tombstone per key,
                // so its kept bytes lose each tombstone once.
                let kept = self.tombstone_bytes_kept.load(Ordering::Acquire);
                self.tombstone_bytes_kept
                    .store(kept.saturating_sub(bytes), Ordering::Release);
            }
        }
    }

    /// Whether a tombstone of `key` and `seq` here is older than one in
    /// another segment.
    pub(crate) fn tombstone_replaced(&self, key: &[u8], seq: u64) -> bool {
        self.tombstones
            .lock()
            .replaced
            .get(key)
            .is_some_and(|&newer| newer > seq)
    }

    /// Removes live bytes (a record the keydir no longer points at).
    pub fn sub_live(&self, bytes: u64) {
        let previous = self.live_bytes.fetch_sub(bytes, Ordering::Relaxed);
        debug_assert!(
            previous >= bytes,
            "live bytes underflow in segment {}",
            self.id
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_detects_damage() {
        let header = SegmentHeader {
            origin: Origin::Compaction,
            id: 77,
            seq_at_creation: 1234,
            flush_seq: 99,
        };
        let bytes = header.encode();
        let path = Path::new("x.seg");
        assert_eq!(SegmentHeader::decode(&bytes, path).expect("valid"), header);
        let mut damaged = bytes;
        damaged[20] ^= 1;
        assert!(SegmentHeader::decode(&damaged, path).is_err());
    }

    #[test]
    fn a_seq_above_the_largest_possible_is_damage() {
        let path = Path::new("x.seg");
        let header = |seq_at_creation, flush_seq| SegmentHeader {
            origin: Origin::Log,
            id: 1,
            seq_at_creation,
            flush_seq,
        };
        assert!(SegmentHeader::decode(&header(SEQ_MAX + 1, SEQ_MAX).encode(), path).is_ok());
        for (at_creation, flush) in [(SEQ_MAX + 2, 0), (1, SEQ_MAX + 1), (u64::MAX, 1)] {
            let error = SegmentHeader::decode(&header(at_creation, flush).encode(), path)
                .expect_err("an impossible seq");
            assert!(error.to_string().contains("largest possible"), "{error}");
        }
    }

    #[test]
    fn names_parse_back_to_ids() {
        assert_eq!(parse_name(&segment_name(42), "seg"), Some(42));
        assert_eq!(parse_name(&hint_name(7), "hint"), Some(7));
        assert_eq!(parse_name("42.seg", "seg"), None);
        assert_eq!(parse_name("0000000042.hint.tmp", "hint"), None);
    }
}
