//! Offline verification of a data directory: every segment header, every
//! record's checksum, every hint file. Used by `larder check`.
//!
//! Reads files only; it takes no lock and changes nothing, so running it on
//! the directory of a live server reports a snapshot that may include a
//! half-written tail of the active segment (reported as such, not as damage).

use crate::error::{Error, Result};
use crate::fs::{join, Fs};
use crate::hint;
use crate::record::{self, HEADER_BYTES as RECORD_HEADER_BYTES};
use crate::segment::{self, Origin, SegmentHeader};
use std::path::{Path, PathBuf};

/// One damaged place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The damaged file.
    pub file: PathBuf,
    /// Byte offset of the damaged record, header or hint entry.
    pub offset: u64,
    /// The record's key, when its header was readable.
    pub key: Option<Vec<u8>>,
    /// What is wrong.
    pub reason: String,
}

/// What a check found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Segment files read.
    pub segments: u64,
    /// Hint files read.
    pub hints: u64,
    /// Intact records.
    pub records: u64,
    /// Damage found. Empty for a healthy directory.
    pub damage: Vec<Damage>,
    /// Damage in the newest log segment from this offset on that no intact
    /// record follows: the next start cuts the segment there, as it does
    /// after a crash mid-write. Damage in that segment with intact records
    /// after it is in `damage` instead: the next start refuses it.
    pub torn_tail: Option<(PathBuf, u64)>,
    /// Segments whose sync failed before the process stopped (see
    /// [`crate::unsynced`]): damage past the mark is not in `damage`, since
    /// the next start cuts the segment there.
    pub unsynced_tails: Vec<UnsyncedTail>,
    /// A newest segment whose creation a crash cut short before its header
    /// reached the disk: it holds no records, and the next start removes it
    /// (see [`segment::creation_cut_short`]).
    pub unfinished: Vec<PathBuf>,
}

/// A segment whose sync failed before the process stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsyncedTail {
    /// The segment file.
    pub file: PathBuf,
    /// Where its unsure bytes begin.
    pub from: u64,
    /// Whether everything from `from` on is in a newer segment: the next
    /// start then cuts the segment at `from`; otherwise at its first damage
    /// past `from`, rewriting what reads see up to there.
    pub copied: bool,
    /// The first damage past `from`, if any.
    pub damaged: Option<u64>,
}

/// Checks every segment and hint file in `dir`.
pub fn check(fs: &dyn Fs, dir: &Path) -> Result<CheckReport> {
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    let mut segment_ids: Vec<u32> = names
        .iter()
        .filter_map(|name| segment::parse_name(name, "seg"))
        .collect();
    segment_ids.sort_unstable();
    let mut hint_ids: Vec<u32> = names
        .iter()
        .filter_map(|name| segment::parse_name(name, "hint"))
        .collect();
    hint_ids.sort_unstable();
    let mut report = CheckReport::default();
    let mut newest_log = None;
    let mut tails = Vec::new();
    let newest_file = segment_ids.last().copied();
    for &id in &segment_ids {
        let path = join(dir, &segment::segment_name(id));
        let bytes = read_all(fs, &path)?;
        let header = match SegmentHeader::decode(&bytes, &path) {
            Ok(header) => header,
            Err(_) if segment::creation_cut_short(bytes.len() as u64, Some(id) == newest_file) => {
                report.unfinished.push(path);
                continue;
            }
            Err(error) => {
                report.segments += 1;
                report
                    .damage
                    .push(damage(&path, 0, None, error.to_string()));
                continue;
            }
        };
        report.segments += 1;
        if header.origin == Origin::Log {
            newest_log = Some(id);
        }
        if header.id != id {
            // Recovery refuses it: the file may be a copy of another
            // segment under the wrong name.
            report.damage.push(damage(
                &path,
                0,
                None,
                format!("header names segment {}, file name {id}", header.id),
            ));
            continue;
        }
        tails.push((id, path.clone(), check_records(&path, &bytes, &mut report)));
    }
    for (id, path, walk) in tails {
        if Some(id) == newest_log {
            // Recovery cuts the newest log segment at damage that runs to
            // the end of what was written (a crash mid-write looks the
            // same); say so rather than call it damage. Damage with intact
            // records after it is reported as damage, as recovery refuses it.
            if let Some(first) = walk.first_damage {
                if !walk.damage_before_intact {
                    report.damage.retain(|damage| damage.file != path);
                    report.torn_tail = Some((path, first));
                }
            }
        } else if let Tail::Zeros(offset) = walk.tail {
            // The log's reserved blocks past its last record; only the
            // active segment has them, sealing cuts them off.
            report.damage.push(damage(
                &path,
                offset,
                None,
                "zeros where records should be, up to the end of the sealed segment".into(),
            ));
        }
    }
    for marker in crate::unsynced::read_markers(fs, dir, &names) {
        let (id, from) = (marker.id, marker.from);
        let path = join(dir, &segment::segment_name(id));
        if !segment_ids.contains(&id) {
            continue;
        }
        let past = |damage: &Damage| damage.file == path && damage.offset >= from;
        let first = report
            .damage
            .iter()
            .filter(|d| past(d))
            .map(|d| d.offset)
            .min();
        report.damage.retain(|damage| !past(damage));
        report.unsynced_tails.push(UnsyncedTail {
            file: path,
            from,
            copied: marker.copied,
            damaged: first,
        });
    }
    for &id in &hint_ids {
        let path = join(dir, &segment::hint_name(id));
        let bytes = read_all(fs, &path)?;
        report.hints += 1;
        if let Err(Error::Corruption { offset, reason, .. }) = hint::decode(&bytes, &path) {
            report.damage.push(damage(&path, offset, None, reason));
        }
    }
    Ok(report)
}

fn damage(file: &Path, offset: u64, key: Option<Vec<u8>>, reason: String) -> Damage {
    Damage {
        file: file.to_owned(),
        offset,
        key,
        reason,
    }
}

fn read_all(fs: &dyn Fs, path: &Path) -> Result<Vec<u8>> {
    crate::fs::read_all(fs, path).map_err(|e| Error::io(format!("reading {}", path.display()), e))
}

/// How a segment's records end.
pub(crate) enum Tail {
    /// With the last record.
    Clean,
    /// With zeros from this offset to the end of the file.
    Zeros(u64),
    /// With damage that no intact record follows.
    Damaged,
}

/// What walking one segment found, besides the damage it reported.
struct SegmentWalk {
    tail: Tail,
    first_damage: Option<u64>,
    /// The first damage is not a torn write (see [`FirstDamage::refused`]).
    damage_before_intact: bool,
}

/// Walks the records of one segment, reporting each damaged one and
/// resuming at the next intact record.
fn check_records(path: &Path, bytes: &[u8], report: &mut CheckReport) -> SegmentWalk {
    let mut first = FirstDamage::default();
    let tail = walk_records(bytes, |event| {
        first.note(&event);
        match event {
            Walked::Intact { .. } => report.records += 1,
            Walked::Damaged {
                offset,
                key,
                reason,
            } => {
                let key = key.map(<[u8]>::to_vec);
                report.damage.push(damage(path, offset, key, reason));
            }
        }
    });
    SegmentWalk {
        tail,
        first_damage: first.damaged,
        damage_before_intact: first.refused(bytes).is_some(),
    }
}

/// One step of [`walk_records`].
pub(crate) enum Walked<'a> {
    /// An intact record: its offset and bytes.
    Intact { offset: u64, record: &'a [u8] },
    /// A damaged record: its offset, its key if its header is readable, and
    /// what is wrong.
    Damaged {
        offset: u64,
        key: Option<&'a [u8]>,
        reason: String,
    },
}

/// Walks the records of a segment file's bytes, resuming after damage at
/// the next intact record (see [`resume_after`]). Stops at a tail of zeros.
pub(crate) fn walk_records(bytes: &[u8], visit: impl FnMut(Walked<'_>)) -> Tail {
    walk_records_from(bytes, segment::HEADER_BYTES as usize, visit)
}

/// [`walk_records`] from byte `start` of `bytes`, which must be where a
/// record starts (or was meant to).
fn walk_records_from(bytes: &[u8], start: usize, mut visit: impl FnMut(Walked<'_>)) -> Tail {
    let written_end = written_end(bytes);
    let mut offset = start;
    while offset < bytes.len() {
        if offset >= written_end {
            return Tail::Zeros(offset as u64);
        }
        let rest = bytes.get(offset..).unwrap_or_default();
        match record::decode(rest) {
            Ok(header) => {
                let len = header.record_len() as usize;
                visit(Walked::Intact {
                    offset: offset as u64,
                    record: rest.get(..len).unwrap_or_default(),
                });
                offset += len;
            }
            Err(error) => {
                let header = record::decode_header(rest).ok();
                let key = header.and_then(|header| rest.get(header.key_range()));
                visit(Walked::Damaged {
                    offset: offset as u64,
                    key,
                    reason: error.to_string(),
                });
                match resume_after(bytes, offset, written_end) {
                    Some(next) => offset = next,
                    None => return Tail::Damaged,
                }
            }
        }
    }
    Tail::Clean
}

/// Where the next intact record after the damaged one at `offset` starts,
/// if any does before `written_end`: where the damaged record's own header
/// says it ends, if an intact record starts there, else the first offset
/// past `offset` where one does. A record claiming to run past the end of
/// the file (its length field may be what is damaged) is searched past
/// like any other damage.
fn resume_after(bytes: &[u8], offset: usize, written_end: usize) -> Option<usize> {
    let header = bytes
        .get(offset..)
        .and_then(|rest| record::decode_header(rest).ok());
    // Resyncing at the claimed end first keeps a value that happens to hold
    // a record's encoding from being read as one.
    let claimed_end = header.map(|header| offset.saturating_add(header.record_len() as usize));
    let resumes_at_claimed_end = claimed_end.filter(|&end| {
        end > offset
            && end < written_end
            && bytes
                .get(end..)
                .is_some_and(|rest| record::decode(rest).is_ok())
    });
    resumes_at_claimed_end.or_else(|| next_intact(bytes, offset + 1, written_end))
}

/// One past the last byte of `bytes` that is not zero: no record starts at
/// or after it, since every record's kind byte is nonzero.
fn written_end(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |at| at + 1)
}

/// The first offset in `[from, written_end)` where an intact record starts.
fn next_intact(bytes: &[u8], from: usize, written_end: usize) -> Option<usize> {
    let last_start = written_end.min(bytes.len().saturating_sub(RECORD_HEADER_BYTES - 1));
    (from..last_start).find(|&at| {
        bytes
            .get(at..)
            .is_some_and(|rest| record::decode(rest).is_ok())
    })
}

/// Damage in a log segment that intact records follow, so that it is not
/// the tail of a write a crash cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DamageBeforeIntact {
    /// Offset of the first damaged record.
    pub damaged: u64,
    /// Offset of the first intact record after it.
    pub intact: u64,
}

/// Walks the records of a segment file's bytes from `start` (where a record
/// starts, or was meant to) and finds the first damaged record that an
/// intact record follows, by the same test as [`walk_records`]. `None` if
/// the records from `start` are intact, or their first damage is a torn
/// write: it runs to the end of what was written (followed by zeros or the
/// end of the file only), or it may be an unwritten hole (see
/// [`FirstDamage::refused`]). A batch left open at the end is not damage
/// here.
pub(crate) fn damage_before_intact(bytes: &[u8], start: usize) -> Option<DamageBeforeIntact> {
    let mut first = FirstDamage::default();
    walk_records_from(bytes, start, |event| first.note(&event));
    first.refused(bytes)
}

/// The first damaged record of a walk, and the first intact record after
/// it.
#[derive(Debug, Default, Clone, Copy)]
struct FirstDamage {
    damaged: Option<u64>,
    intact_after: Option<u64>,
}

impl FirstDamage {
    fn note(&mut self, event: &Walked<'_>) {
        match *event {
            Walked::Damaged { offset, .. } => {
                self.damaged.get_or_insert(offset);
            }
            Walked::Intact { offset, .. } => {
                if self.damaged.is_some() {
                    self.intact_after.get_or_insert(offset);
                }
            }
        }
    }

    /// The damage, if it is not a torn write: an intact record follows it,
    /// and it holds no hole. A power cut while the page cache writes a file
    /// back out of order leaves sectors that never reached the disk, which
    /// read as zeros (the log's blocks past its synced end hold zeros),
    /// before sectors that did. Such a hole runs from the first record not
    /// synced, or from a sector boundary, to a sector boundary: all zeros
    /// from the damaged record's start, or a whole sector of zeros in it.
    /// The hole and the intact but never synced records after it are cut
    /// as a torn tail. Records after a hole cannot have been acknowledged
    /// under `always`, since their sync would have written the hole too. A
    /// flipped bit in written data leaves no such zeros, unless its record
    /// holds a whole sector of them (a large value of zeros, say); then it
    /// is cut as a torn tail too.
    fn refused(self, bytes: &[u8]) -> Option<DamageBeforeIntact> {
        let (damaged, intact) = (self.damaged?, self.intact_after?);
        let (from, to) = (damaged as usize, intact as usize);
        let first_boundary = (from / SECTOR_BYTES + 1) * SECTOR_BYTES;
        let hole = (first_boundary..=to).step_by(SECTOR_BYTES).any(|boundary| {
            bytes
                .get(from.max(boundary - SECTOR_BYTES)..boundary)
                .is_some_and(|run| run.iter().all(|&byte| byte == 0))
        });
        (!hole).then_some(DamageBeforeIntact { damaged, intact })
    }
}

/// The smallest unit a disk writes whole.
const SECTOR_BYTES: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use crate::record::{Header, Kind};

    fn segment_with_records(count: u64) -> Vec<u8> {
        let header = SegmentHeader {
            origin: Origin::Log,
            id: 1,
            seq_at_creation: 1,
            flush_seq: 0,
        };
        let mut bytes = header.encode().to_vec();
        for seq in 1..=count {
            let record = Header {
                kind: Kind::Put,
                batch_continues: false,
                stale: false,
                key_len: 3,
                value_len: 4,
                flags: 0,
                exptime: 0,
                seq,
            };
            record::encode(&mut bytes, &record, b"key", b"vvvv");
        }
        bytes
    }

    #[test]
    fn a_healthy_directory_has_no_damage() {
        let fs = MemFs::new();
        fs.write_file(Path::new("/d/0000000001.seg"), &segment_with_records(10))
            .unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert_eq!(report.records, 10);
        assert!(report.damage.is_empty());
        assert!(report.torn_tail.is_none());
    }

    #[test]
    fn each_flipped_record_is_reported_with_its_key_and_the_rest_is_read() {
        let fs = MemFs::new();
        let path = Path::new("/d/0000000001.seg");
        fs.write_file(path, &segment_with_records(10)).unwrap();
        // A newer segment, so that the damaged one is sealed.
        fs.write_file(
            Path::new("/d/0000000002.seg"),
            &reencode_header(segment_with_records(1), 2),
        )
        .unwrap();
        let record_len = (RECORD_HEADER_BYTES + 3 + 4) as u64;
        let first_damaged = u64::from(segment::HEADER_BYTES) + 2 * record_len;
        fs.corrupt(path, first_damaged + 33, 0x01).unwrap();
        fs.corrupt(path, first_damaged + 4 * record_len + 33, 0x01)
            .unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert_eq!(report.damage.len(), 2);
        assert_eq!(report.damage[0].offset, first_damaged);
        assert_eq!(report.damage[0].key.as_deref(), Some(&b"key"[..]));
        assert_eq!(report.records, 8 + 1);
    }

    #[test]
    fn damage_in_the_newest_log_segment_with_intact_records_after_it_is_damage() {
        let fs = MemFs::new();
        let path = Path::new("/d/0000000001.seg");
        let mut bytes = segment_with_records(10);
        bytes.resize(bytes.len() + 4096, 0); // the log's reserved zeros
        fs.write_file(path, &bytes).unwrap();
        let record_len = (RECORD_HEADER_BYTES + 3 + 4) as u64;
        let damaged = u64::from(segment::HEADER_BYTES) + 4 * record_len;
        fs.corrupt(path, damaged + 30, 0x01).unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
        assert_eq!(report.damage[0].file, path);
        assert_eq!(report.damage[0].offset, damaged);
        assert!(report.torn_tail.is_none());
        assert_eq!(report.records, 9);
    }

    #[test]
    fn a_record_claiming_to_run_past_the_end_is_searched_past() {
        let fs = MemFs::new();
        let path = Path::new("/d/0000000001.seg");
        fs.write_file(path, &segment_with_records(10)).unwrap();
        let record_len = (RECORD_HEADER_BYTES + 3 + 4) as u64;
        let damaged = u64::from(segment::HEADER_BYTES) + 2 * record_len;
        // The top byte of value_len: the record claims 16 MiB more.
        fs.corrupt(path, damaged + 11, 0x01).unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
        assert_eq!(report.damage[0].offset, damaged);
        assert_eq!(report.records, 9);
        let bytes = fs.read_file(path).unwrap();
        let found = damage_before_intact(&bytes, segment::HEADER_BYTES as usize);
        assert_eq!(
            found,
            Some(DamageBeforeIntact {
                damaged,
                intact: damaged + record_len,
            })
        );
    }

    #[test]
    fn damage_running_to_the_zeros_is_no_damage_before_intact_records() {
        let mut bytes = segment_with_records(3);
        let len = bytes.len();
        bytes[len - 10] ^= 0x01;
        bytes.resize(len + 4096, 0);
        assert_eq!(
            damage_before_intact(&bytes, segment::HEADER_BYTES as usize),
            None
        );
        bytes.truncate(len - 5);
        assert_eq!(
            damage_before_intact(&bytes, segment::HEADER_BYTES as usize),
            None
        );
    }

    #[test]
    fn a_hole_of_zeros_to_a_sector_boundary_is_torn_but_a_flipped_bit_beside_a_zero_is_damage() {
        let bytes = segment_with_records(40);
        let start = segment::HEADER_BYTES as usize;
        let record_len = RECORD_HEADER_BYTES + 3 + 4;
        // The record that crosses the first sector boundary, and the next.
        let crossing = start + (512 - start) / record_len * record_len;
        let after = crossing + record_len;
        assert!(crossing < 512 && after > 512);

        // Zeros from the crossing record's start to the boundary: sectors
        // that never reached the disk.
        let mut holed = bytes.clone();
        holed[crossing..512].fill(0);
        assert_eq!(damage_before_intact(&holed, start), None);

        // A whole sector of zeros inside damage that starts earlier.
        let mut big = segment_with_records(80);
        big[1024..1536].fill(0);
        assert_eq!(damage_before_intact(&big, start), None);

        // A flipped bit in the crossing record is damage, though one of its
        // zero bytes sits just before the boundary: the records after it
        // were written, and may have been acknowledged.
        let mut flipped = bytes;
        assert_eq!(flipped[511], 0);
        flipped[crossing + 4] ^= 0x01;
        assert_eq!(
            damage_before_intact(&flipped, start),
            Some(DamageBeforeIntact {
                damaged: crossing as u64,
                intact: after as u64,
            })
        );
    }

    #[test]
    fn the_reserved_zeros_of_the_newest_segment_are_neither_damage_nor_torn() {
        let fs = MemFs::new();
        let mut bytes = segment_with_records(3);
        bytes.resize(bytes.len() + 4096, 0);
        fs.write_file(Path::new("/d/0000000001.seg"), &bytes)
            .unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert!(report.damage.is_empty(), "{:?}", report.damage);
        assert!(report.torn_tail.is_none());
        assert_eq!(report.records, 3);
    }

    #[test]
    fn a_half_zeroed_last_record_of_the_newest_segment_is_a_torn_write() {
        let fs = MemFs::new();
        let mut bytes = segment_with_records(3);
        let len = bytes.len();
        bytes[len - 10..].fill(0);
        bytes.resize(len + 4096, 0);
        fs.write_file(Path::new("/d/0000000001.seg"), &bytes)
            .unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert!(report.damage.is_empty(), "{:?}", report.damage);
        let record_len = (RECORD_HEADER_BYTES + 3 + 4) as u64;
        let torn_at = (len as u64) - record_len;
        assert_eq!(
            report.torn_tail,
            Some((PathBuf::from("/d/0000000001.seg"), torn_at))
        );
        assert_eq!(report.records, 2);
    }

    #[test]
    fn zeros_at_the_end_of_a_sealed_segment_are_damage() {
        let fs = MemFs::new();
        let mut bytes = segment_with_records(3);
        let len = bytes.len();
        bytes.resize(len + 100, 0);
        fs.write_file(Path::new("/d/0000000001.seg"), &bytes)
            .unwrap();
        let newer = reencode_header(segment_with_records(1), 2);
        fs.write_file(Path::new("/d/0000000002.seg"), &newer)
            .unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
        assert_eq!(report.damage[0].offset, len as u64);
        assert!(report.torn_tail.is_none());
    }

    /// A sealed segment whose sync failed before the process stopped: the
    /// damage past the marked offset is the next start's to cut, and is
    /// reported as such; damage before it is still damage.
    #[test]
    fn damage_past_an_unsynced_mark_is_an_unsynced_tail_and_before_it_damage() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        let path = Path::new("/d/0000000001.seg");
        fs.write_file(path, &segment_with_records(10)).unwrap();
        let newer = reencode_header(segment_with_records(1), 2);
        fs.write_file(Path::new("/d/0000000002.seg"), &newer)
            .unwrap();
        let record_len = (RECORD_HEADER_BYTES + 3 + 4) as u64;
        let mark = u64::from(segment::HEADER_BYTES) + 6 * record_len;
        crate::unsynced::mark(&fs, dir, 1, mark).unwrap();
        fs.corrupt(path, mark + record_len + 33, 0x01).unwrap();
        let report = check(&fs, dir).unwrap();
        assert!(report.damage.is_empty(), "{:?}", report.damage);
        let tail = UnsyncedTail {
            file: path.to_owned(),
            from: mark,
            copied: false,
            damaged: Some(mark + record_len),
        };
        assert_eq!(report.unsynced_tails, vec![tail]);
        fs.corrupt(path, mark - record_len + 33, 0x01).unwrap();
        let report = check(&fs, dir).unwrap();
        assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
        assert_eq!(report.damage[0].offset, mark - record_len);
    }

    /// `bytes` with its segment header rewritten to name segment `id`.
    fn reencode_header(mut bytes: Vec<u8>, id: u32) -> Vec<u8> {
        let header = SegmentHeader {
            origin: Origin::Log,
            id,
            seq_at_creation: 1,
            flush_seq: 0,
        };
        let encoded = header.encode();
        bytes[..encoded.len()].copy_from_slice(&encoded);
        bytes
    }

    #[test]
    fn a_newest_segment_without_its_header_is_unfinished_and_an_older_one_damage() {
        let fs = MemFs::new();
        let seg = |id: u32| PathBuf::from(format!("/d/{id:010}.seg"));
        fs.write_file(&seg(1), &segment_with_records(3)).unwrap();
        fs.write_file(&seg(2), &[0; 40]).unwrap();
        fs.write_file(&seg(3), &[]).unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert_eq!(report.unfinished, [seg(3)]);
        let damaged: Vec<PathBuf> = report.damage.iter().map(|d| d.file.clone()).collect();
        assert_eq!(damaged, [seg(2)]);
        assert_eq!(report.segments, 2);
        assert_eq!(report.records, 3);
    }

    #[test]
    fn a_segment_whose_header_names_another_is_damage_as_recovery_refuses_it() {
        let fs = MemFs::new();
        let seg = |id: u32| PathBuf::from(format!("/d/{id:010}.seg"));
        let first = segment_with_records(3);
        fs.write_file(&seg(1), &first).unwrap();
        // A copy of segment 1 under the name of segment 2.
        fs.write_file(&seg(2), &first).unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
        assert_eq!(report.damage[0].file, seg(2));
        assert_eq!(
            report.damage[0].reason,
            "header names segment 1, file name 2"
        );
        assert_eq!(report.segments, 2);
        // Its records are not counted as if they were a segment's own.
        assert_eq!(report.records, 3);
    }

    #[test]
    fn a_cut_tail_of_the_newest_segment_is_a_torn_write_not_damage() {
        let fs = MemFs::new();
        let mut bytes = segment_with_records(3);
        bytes.truncate(bytes.len() - 5);
        fs.write_file(Path::new("/d/0000000001.seg"), &bytes)
            .unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert!(report.damage.is_empty());
        assert!(report.torn_tail.is_some());
        assert_eq!(report.records, 2);
    }
}
