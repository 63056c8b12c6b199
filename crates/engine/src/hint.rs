//! Hint files: a sealed segment's index, so recovery need not read values.
//!
//! File name `{id:010}.hint`, written as `.hint.tmp`, synced, then renamed
//! (and the directory synced), so a hint file is either whole or absent.
//! A damaged hint is never trusted: recovery scans the segment instead.
//!
//! Byte map (little-endian, fixed width):
//!
//! ```text
//! header (40 bytes)
//! 0   8  magic "LARDHNT1"
//! 8   2  format version (1)
//! 10  2  reserved (0)
//! 12  4  segment id
//! 16  8  segment length in bytes that the entries describe
//! 24  8  entry count
//! 32  4  crc32c of bytes [0, 32)
//! 36  4  reserved (0)
//! entry (40 bytes + key), one per record of the segment, in file order
//! 0   4  crc32c of the entry's bytes [4, 40 + key_len)
//! 4   1  record kind (as in the record format)
//! 5   1  bits: bit 1 = stale (touch records)
//! 6   2  key_len
//! 8   4  record offset in the segment
//! 12  4  value_len
//! 16  4  client flags
//! 20  4  exptime
//! 24  8  seq
//! 32  8  for touch records, the seq of the put it touches; else 0
//! 40  key
//! ```

use crate::error::{Error, Result};
use crate::record::{u32_at, u64_at, Header, Kind};
use std::path::Path;

const MAGIC: &[u8; 8] = b"LARDHNT1";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 40;
const ENTRY_HEADER_BYTES: usize = 40;

/// One record as a hint file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintEntry {
    /// The record's header fields.
    pub header: Header,
    /// Offset of the record in its segment.
    pub offset: u32,
    /// The key.
    pub key: Vec<u8>,
    /// For touch records, the seq of the put touched.
    pub target_seq: u64,
}

/// Builds a hint file in memory.
pub struct HintWriter {
    bytes: Vec<u8>,
    count: u64,
}

impl Default for HintWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl HintWriter {
    /// An empty hint (header written by [`HintWriter::finish`]).
    pub fn new() -> HintWriter {
        HintWriter {
            bytes: vec![0; HEADER_BYTES],
            count: 0,
        }
    }

    /// Adds the entry for one record.
    pub fn push(&mut self, header: &Header, offset: u32, key: &[u8], target_seq: u64) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&[0; 4]);
        self.bytes.push(header.kind as u8);
        self.bytes.push(if header.stale { 2 } else { 0 });
        self.bytes.extend_from_slice(&header.key_len.to_le_bytes());
        self.bytes.extend_from_slice(&offset.to_le_bytes());
        self.bytes
            .extend_from_slice(&header.value_len.to_le_bytes());
        self.bytes.extend_from_slice(&header.flags.to_le_bytes());
        self.bytes.extend_from_slice(&header.exptime.to_le_bytes());
        self.bytes.extend_from_slice(&header.seq.to_le_bytes());
        self.bytes.extend_from_slice(&target_seq.to_le_bytes());
        self.bytes.extend_from_slice(key);
        let crc = crc32c::crc32c(self.bytes.get(start + 4..).unwrap_or_default());
        if let Some(slot) = self.bytes.get_mut(start..start + 4) {
            slot.copy_from_slice(&crc.to_le_bytes());
        }
        self.count += 1;
    }

    /// The finished file contents for segment `id` of `segment_len` bytes.
    pub fn finish(mut self, id: u32, segment_len: u64) -> Vec<u8> {
        let mut header = Vec::with_capacity(HEADER_BYTES);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&[0; 2]);
        header.extend_from_slice(&id.to_le_bytes());
        header.extend_from_slice(&segment_len.to_le_bytes());
        header.extend_from_slice(&self.count.to_le_bytes());
        let crc = crc32c::crc32c(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        header.extend_from_slice(&[0; 4]);
        if let Some(slot) = self.bytes.get_mut(..HEADER_BYTES) {
            slot.copy_from_slice(&header);
        }
        self.bytes
    }
}

/// A decoded hint file.
pub struct Hint {
    /// The segment it describes.
    pub segment_id: u32,
    /// The segment length the entries cover.
    pub segment_len: u64,
    /// The entries, in file order.
    pub entries: Vec<HintEntry>,
}

/// Decodes and verifies a whole hint file.
pub fn decode(bytes: &[u8], path: &Path) -> Result<Hint> {
    let corrupt = |offset: usize, reason: String| Error::Corruption {
        file: path.to_owned(),
        offset: offset as u64,
        reason,
    };
    let header = bytes
        .get(..HEADER_BYTES)
        .ok_or_else(|| corrupt(0, "hint file shorter than its header".into()))?;
    if header.get(..8) != Some(&MAGIC[..]) {
        return Err(corrupt(0, "bad hint magic".into()));
    }
    let stored = u32_at(header, 32);
    let computed = crc32c::crc32c(header.get(..32).unwrap_or_default());
    if stored != computed {
        return Err(corrupt(0, "hint header checksum mismatch".into()));
    }
    let segment_id = u32_at(header, 12);
    let segment_len = u64_at(header, 16);
    let count = u64_at(header, 24);
    let mut entries = Vec::new();
    let mut at = HEADER_BYTES;
    while at < bytes.len() {
        let entry = bytes.get(at..).unwrap_or_default();
        if entry.len() < ENTRY_HEADER_BYTES {
            return Err(corrupt(at, "hint entry cut short".into()));
        }
        let key_len = usize::from(u16::from_le_bytes([
            entry.get(6).copied().unwrap_or_default(),
            entry.get(7).copied().unwrap_or_default(),
        ]));
        let whole = entry
            .get(..ENTRY_HEADER_BYTES + key_len)
            .ok_or_else(|| corrupt(at, "hint entry key cut short".into()))?;
        let stored = u32_at(whole, 0);
        let computed = crc32c::crc32c(whole.get(4..).unwrap_or_default());
        if stored != computed {
            return Err(corrupt(at, "hint entry checksum mismatch".into()));
        }
        let kind = match whole.get(4) {
            Some(1) => Kind::Put,
            Some(2) => Kind::Delete,
            Some(3) => Kind::Touch,
            Some(4) => Kind::Flush,
            other => return Err(corrupt(at, format!("unknown kind {other:?} in hint"))),
        };
        entries.push(HintEntry {
            header: Header {
                kind,
                batch_continues: false,
                stale: whole.get(5).copied().unwrap_or_default() & 2 != 0,
                key_len: key_len as u16,
                value_len: u32_at(whole, 12),
                flags: u32_at(whole, 16),
                exptime: u32_at(whole, 20),
                seq: u64_at(whole, 24),
            },
            offset: u32_at(whole, 8),
            key: whole.get(ENTRY_HEADER_BYTES..).unwrap_or_default().to_vec(),
            target_seq: u64_at(whole, 32),
        });
        at += ENTRY_HEADER_BYTES + key_len;
    }
    if entries.len() as u64 != count {
        return Err(corrupt(
            at,
            format!("hint says {count} entries, holds {}", entries.len()),
        ));
    }
    Ok(Hint {
        segment_id,
        segment_len,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hint_round_trips_and_rejects_damage() {
        let header = Header {
            kind: Kind::Put,
            batch_continues: false,
            stale: false,
            key_len: 2,
            value_len: 10,
            flags: 5,
            exptime: 0,
            seq: 3,
        };
        let mut writer = HintWriter::new();
        writer.push(&header, 40, b"ab", 0);
        writer.push(&Header { seq: 4, ..header }, 80, b"ab", 0);
        let bytes = writer.finish(9, 120);
        let hint = decode(&bytes, Path::new("h")).expect("valid hint");
        assert_eq!(hint.segment_id, 9);
        assert_eq!(hint.segment_len, 120);
        assert_eq!(hint.entries.len(), 2);
        assert_eq!(hint.entries[1].offset, 80);
        assert_eq!(hint.entries[1].key, b"ab");
        for at in (0..bytes.len()).filter(|at| !(36..40).contains(at)) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert!(
                decode(&damaged, Path::new("h")).is_err(),
                "damage at {at} went unnoticed"
            );
        }
        assert!(decode(&bytes[..bytes.len() - 1], Path::new("h")).is_err());
    }
}
