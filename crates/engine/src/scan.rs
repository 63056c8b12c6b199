//! Sequential reading of a segment's records, in large chunks.
//!
//! Used by recovery (to rebuild the keydir from a segment without a hint),
//! by the hint writer and by compaction. Runs on the calling thread; reads
//! the file through [`FsFile`] only.

use crate::fs::FsFile;
use crate::record::{self, DecodeError, Header, HEADER_BYTES};

/// Bytes read from the file at a time (records larger than this are read
/// whole).
const CHUNK_BYTES: usize = 1 << 20;

/// How a scan ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte up to `end` was a valid record.
    Clean,
    /// The record at `offset` is damaged or cut short: `error` says how.
    /// Everything before `offset` was valid.
    Damaged {
        /// Offset of the first bad record.
        offset: u64,
        /// What was wrong with it.
        error: DecodeError,
    },
}

/// Reads the records in `[start, end)` of `file` in order and calls `visit`
/// with each record's offset, header and whole encoded bytes. Stops at the
/// first damaged or truncated record. An I/O error is returned as `Err`.
///
/// Only whole batches are delivered: records of a batch are held back until
/// the batch's last record is read, so a batch cut short by a torn write is
/// reported as damage at the batch's first record.
pub fn scan(
    file: &dyn FsFile,
    start: u64,
    end: u64,
    mut visit: impl FnMut(u64, &Header, &[u8]) -> crate::Result<()>,
) -> std::io::Result<(ScanEnd, crate::Result<()>)> {
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_offset = start; // file offset of buf[0]
    let mut offset = start;
    let mut batch: Vec<(u64, Header, Vec<u8>)> = Vec::new();
    let mut batch_start = start;
    while offset < end {
        let available = end - offset;
        let header_len = (HEADER_BYTES as u64).min(available) as usize;
        fill(file, &mut buf, &mut buf_offset, offset, header_len)?;
        let at = (offset - buf_offset) as usize;
        let header = match record::decode_header(buf.get(at..).unwrap_or_default()) {
            Ok(header) => header,
            Err(error) => return Ok((damaged(&batch, batch_start, offset, error), Ok(()))),
        };
        let record_len = header.record_len();
        if record_len > available {
            let error = DecodeError::Truncated {
                needed: record_len,
                available,
            };
            return Ok((damaged(&batch, batch_start, offset, error), Ok(())));
        }
        fill(file, &mut buf, &mut buf_offset, offset, record_len as usize)?;
        let at = (offset - buf_offset) as usize;
        let bytes = buf.get(at..at + record_len as usize).unwrap_or_default();
        if let Err(error) = record::decode(bytes) {
            return Ok((damaged(&batch, batch_start, offset, error), Ok(())));
        }
        if header.batch_continues || !batch.is_empty() {
            if batch.is_empty() {
                batch_start = offset;
            }
            batch.push((offset, header, bytes.to_vec()));
            if !header.batch_continues {
                for (at, header, bytes) in batch.drain(..) {
                    if let Err(error) = visit(at, &header, &bytes) {
                        return Ok((ScanEnd::Clean, Err(error)));
                    }
                }
            }
        } else if let Err(error) = visit(offset, &header, bytes) {
            return Ok((ScanEnd::Clean, Err(error)));
        }
        offset += record_len;
    }
    if !batch.is_empty() {
        let error = DecodeError::Truncated {
            needed: 1,
            available: 0,
        };
        return Ok((damaged(&batch, batch_start, end, error), Ok(())));
    }
    Ok((ScanEnd::Clean, Ok(())))
}

/// Scans all records of a sealed segment, where any damage is corruption
/// (unlike the active segment's torn tail).
pub fn scan_sealed(
    segment: &crate::segment::Segment,
    visit: impl FnMut(u64, &Header, &[u8]) -> crate::Result<()>,
) -> crate::Result<()> {
    let start = u64::from(crate::segment::HEADER_BYTES);
    let len = segment.len_bytes.load(std::sync::atomic::Ordering::Acquire);
    let (end, visited) = scan(&*segment.file, start, len, visit)
        .map_err(|e| crate::Error::io(format!("scanning {}", segment.path.display()), e))?;
    visited?;
    match end {
        ScanEnd::Clean => Ok(()),
        ScanEnd::Damaged { offset, error } => Err(crate::Error::Corruption {
            file: segment.path.clone(),
            offset,
            reason: error.to_string(),
        }),
    }
}

fn damaged(
    batch: &[(u64, Header, Vec<u8>)],
    batch_start: u64,
    offset: u64,
    error: DecodeError,
) -> ScanEnd {
    let offset = if batch.is_empty() {
        offset
    } else {
        batch_start
    };
    ScanEnd::Damaged { offset, error }
}

/// Makes `buf` hold at least `len` bytes starting at file offset `offset`.
fn fill(
    file: &dyn FsFile,
    buf: &mut Vec<u8>,
    buf_offset: &mut u64,
    offset: u64,
    len: usize,
) -> std::io::Result<()> {
    let buf_end = *buf_offset + buf.len() as u64;
    if offset >= *buf_offset && offset + len as u64 <= buf_end {
        return Ok(());
    }
    // Keep the unread tail, then read a fresh chunk after it.
    let keep_from = offset.saturating_sub(*buf_offset).min(buf.len() as u64) as usize;
    buf.drain(..keep_from);
    *buf_offset = offset;
    let have = buf.len();
    let want = len.max(CHUNK_BYTES);
    let file_len = file.len()?;
    let readable = file_len.saturating_sub(offset + have as u64) as usize;
    let extra = (want.saturating_sub(have)).min(readable);
    if extra == 0 {
        return Ok(());
    }
    buf.resize(have + extra, 0);
    let target = buf.get_mut(have..).unwrap_or_default();
    file.read_exact_at(target, offset + have as u64)
}
