//! Offline verification of a data directory: every segment header, every
//! record's checksum, every hint file. Used by `larder check`.
//!
//! Reads files only; it takes no lock and changes nothing, so running it on
//! the directory of a live server reports a snapshot that may include a
//! half-written tail of the active segment (reported as such, not as damage).

use crate::error::{Error, Result};
use crate::fs::{join, Fs};
use crate::hint;
use crate::record::{self, DecodeError, HEADER_BYTES as RECORD_HEADER_BYTES};
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
    /// A cut-short tail of the newest log segment (a crash mid-write): it is
    /// cut off at the next start, losing only unacknowledged writes.
    pub torn_tail: Option<(PathBuf, u64)>,
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
    for &id in &segment_ids {
        let path = join(dir, &segment::segment_name(id));
        let bytes = read_all(fs, &path)?;
        report.segments += 1;
        let header = match SegmentHeader::decode(&bytes, &path) {
            Ok(header) => header,
            Err(error) => {
                report
                    .damage
                    .push(damage(&path, 0, None, error.to_string()));
                continue;
            }
        };
        if header.origin == Origin::Log {
            newest_log = Some(id);
        }
        check_records(&path, &bytes, &mut report);
    }
    // Damage at the very end of the newest log segment is a torn write.
    if let Some(id) = newest_log {
        let path = join(dir, &segment::segment_name(id));
        if let Some(last) = report.damage.last() {
            if last.file == path && last.reason.starts_with("truncated") {
                report.torn_tail = Some((path, last.offset));
                report.damage.pop();
            }
        }
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

/// Walks the records of one segment, reporting each damaged one and
/// resuming at the next intact record.
fn check_records(path: &Path, bytes: &[u8], report: &mut CheckReport) {
    let mut offset = segment::HEADER_BYTES as usize;
    while offset < bytes.len() {
        let rest = bytes.get(offset..).unwrap_or_default();
        match record::decode(rest) {
            Ok(header) => {
                report.records += 1;
                offset += header.record_len() as usize;
            }
            Err(error) => {
                let key = record::decode_header(rest)
                    .ok()
                    .and_then(|header| rest.get(header.key_range()))
                    .map(<[u8]>::to_vec);
                let truncated = matches!(error, DecodeError::Truncated { .. });
                report
                    .damage
                    .push(damage(path, offset as u64, key, error.to_string()));
                if truncated {
                    return;
                }
                match next_intact(bytes, offset + 1) {
                    Some(next) => offset = next,
                    None => return,
                }
            }
        }
    }
}

/// The first offset at or after `from` where an intact record starts.
fn next_intact(bytes: &[u8], from: usize) -> Option<usize> {
    (from..bytes.len().saturating_sub(RECORD_HEADER_BYTES - 1)).find(|&at| {
        bytes
            .get(at..)
            .is_some_and(|rest| record::decode(rest).is_ok())
    })
}

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
        let record_len = (RECORD_HEADER_BYTES + 3 + 4) as u64;
        let first_damaged = u64::from(segment::HEADER_BYTES) + 2 * record_len;
        fs.corrupt(path, first_damaged + 33, 0x01).unwrap();
        fs.corrupt(path, first_damaged + 4 * record_len + 33, 0x01)
            .unwrap();
        let report = check(&fs, Path::new("/d")).unwrap();
        assert_eq!(report.damage.len(), 2);
        assert_eq!(report.damage[0].offset, first_damaged);
        assert_eq!(report.damage[0].key.as_deref(), Some(&b"key"[..]));
        assert_eq!(report.records, 8);
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
