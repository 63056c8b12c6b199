//! Hint files: a sealed segment's index, so recovery need not read values.
//!
//! File name `{id:010}.hint`, written as `.hint.tmp`, synced, then renamed
//! (and the directory synced), so a hint file is either whole or absent.
//! A damaged hint is never trusted: recovery scans the segment instead.
//!
//! Byte map of the current format, version 2 (little-endian):
//!
//! ```text
//! header (40 bytes)
//! 0   8  magic "LARDHNT1"
//! 8   2  format version (2)
//! 10  2  reserved (0)
//! 12  4  segment id
//! 16  8  segment length in bytes that the entries describe
//! 24  8  entry count
//! 32  4  crc32c of bytes [0, 32)
//! 36  4  crc32c of every entry byte, [40, end of file)
//! entry, one per record of the segment, in file order (varint = LEB128)
//!        1 byte   bits 0-2 record kind (as in the record format);
//!                 bit 3 stale; bit 4 offset follows;
//!                 bit 5 client flags follow; bit 6 exptime follows
//!        varint   key_len
//!        varint   value_len
//!        varint   record offset in the segment, if bit 4; otherwise the
//!                 record starts where the previous one ended (the first at
//!                 the segment header's end)
//!        varint   client flags, if bit 5 (else 0)
//!        varint   exptime, if bit 6 (else 0)
//!        varint   seq minus the previous entry's seq (the first's minus 0),
//!                 zigzag-encoded
//!        varint   for touch records, the seq of the put it touches
//!        key
//! ```
//!
//! An entry of a 100-byte value under a 13-byte key takes 17 bytes,
//! where version 1 took 53 (fixed 40-byte entries with a checksum each, and
//! an offset and a touch target on every entry); version 1 files are still
//! read:
//!
//! ```text
//! header: as above, version 1, bytes 36..40 reserved (0)
//! entry (40 bytes + key)
//! 0   4  crc32c of the entry's bytes [4, 40 + key_len)
//! 4   1  record kind
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
use crate::fs::Fs;
use crate::record::{self, u32_at, u64_at, Header, Kind, SEQ_MAX};
use crate::segment;
use std::path::Path;

const MAGIC: &[u8; 8] = b"LARDHNT1";
const VERSION: u16 = 2;
const HEADER_BYTES: usize = 40;
const V1_ENTRY_HEADER_BYTES: usize = 40;

const KIND_BITS: u8 = 0b0000_0111;
const BIT_STALE: u8 = 1 << 3;
const BIT_OFFSET: u8 = 1 << 4;
const BIT_FLAGS: u8 = 1 << 5;
const BIT_EXPTIME: u8 = 1 << 6;

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
    /// Where the next record starts if it follows the previous one.
    next_offset: u64,
    previous_seq: u64,
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
            next_offset: u64::from(segment::HEADER_BYTES),
            previous_seq: 0,
        }
    }

    /// Adds the entry for one record.
    pub fn push(&mut self, header: &Header, offset: u32, key: &[u8], target_seq: u64) {
        let mut bits = header.kind as u8 & KIND_BITS;
        if header.stale {
            bits |= BIT_STALE;
        }
        let follows = u64::from(offset) == self.next_offset;
        if !follows {
            bits |= BIT_OFFSET;
        }
        if header.flags != 0 {
            bits |= BIT_FLAGS;
        }
        if header.exptime != 0 {
            bits |= BIT_EXPTIME;
        }
        self.bytes.push(bits);
        put_varint(&mut self.bytes, u64::from(header.key_len));
        put_varint(&mut self.bytes, u64::from(header.value_len));
        if !follows {
            put_varint(&mut self.bytes, u64::from(offset));
        }
        if header.flags != 0 {
            put_varint(&mut self.bytes, u64::from(header.flags));
        }
        if header.exptime != 0 {
            put_varint(&mut self.bytes, u64::from(header.exptime));
        }
        put_varint(
            &mut self.bytes,
            zigzag(header.seq.wrapping_sub(self.previous_seq)),
        );
        if header.kind == Kind::Touch {
            put_varint(&mut self.bytes, target_seq);
        }
        self.bytes.extend_from_slice(key);
        self.next_offset = u64::from(offset) + header.record_len();
        self.previous_seq = header.seq;
        self.count += 1;
    }

    /// Adds the entry for a record, given its whole encoded bytes.
    pub fn push_record(&mut self, header: &Header, offset: u32, record: &[u8]) {
        let key = record.get(header.key_range()).unwrap_or_default();
        self.push(header, offset, key, record::touch_target(header, record));
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
        let entries_crc = crc32c::crc32c(self.bytes.get(HEADER_BYTES..).unwrap_or_default());
        header.extend_from_slice(&entries_crc.to_le_bytes());
        if let Some(slot) = self.bytes.get_mut(..HEADER_BYTES) {
            slot.copy_from_slice(&header);
        }
        self.bytes
    }
}

/// Makes `bytes` the hint file of segment `id` in `dir`, whole or not at
/// all ([`crate::fs::install`]).
pub(crate) fn install(fs: &dyn Fs, dir: &Path, id: u32, bytes: &[u8]) -> Result<()> {
    crate::fs::install(fs, dir, &segment::hint_name(id), bytes)
}

/// A decoded hint file.
#[derive(Debug)]
pub struct Hint {
    /// The segment it describes.
    pub segment_id: u32,
    /// The segment length the entries cover.
    pub segment_len: u64,
    /// The entries, in file order.
    pub entries: Vec<HintEntry>,
}

/// Decodes and verifies a whole hint file (either version).
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
    let version = u16::from_le_bytes([
        header.get(8).copied().unwrap_or_default(),
        header.get(9).copied().unwrap_or_default(),
    ]);
    let segment_id = u32_at(header, 12);
    let segment_len = u64_at(header, 16);
    let count = u64_at(header, 24);
    let entries = match version {
        1 => decode_v1_entries(bytes, segment_len, &corrupt)?,
        2 => {
            let stored = u32_at(header, 36);
            let entry_bytes = bytes.get(HEADER_BYTES..).unwrap_or_default();
            if stored != crc32c::crc32c(entry_bytes) {
                return Err(corrupt(
                    HEADER_BYTES,
                    "hint entries checksum mismatch".into(),
                ));
            }
            decode_v2_entries(entry_bytes, segment_len, &corrupt)?
        }
        other => return Err(corrupt(8, format!("unknown hint format version {other}"))),
    };
    if entries.len() as u64 != count {
        return Err(corrupt(
            bytes.len(),
            format!("hint says {count} entries, holds {}", entries.len()),
        ));
    }
    Ok(Hint {
        segment_id,
        segment_len,
        entries,
    })
}

/// Decodes version 2 entries (`bytes` starts after the header).
fn decode_v2_entries(
    bytes: &[u8],
    segment_len: u64,
    corrupt: &dyn Fn(usize, String) -> Error,
) -> Result<Vec<HintEntry>> {
    let mut entries = Vec::new();
    let mut next_offset = u64::from(segment::HEADER_BYTES);
    let mut previous_seq = 0u64;
    let mut reader = Reader { bytes, at: 0 };
    while reader.at < bytes.len() {
        let start = HEADER_BYTES + reader.at;
        let bad = |what: &str| corrupt(start, format!("hint entry with a bad {what}"));
        let bits = reader.byte().ok_or_else(|| bad("first byte"))?;
        let kind = Kind::from_byte(bits & KIND_BITS).ok_or_else(|| bad("record kind"))?;
        let key_len = reader
            .varint_max(u64::from(u16::MAX))
            .ok_or_else(|| bad("key length"))?;
        let value_len = reader
            .varint_max(u64::from(u32::MAX))
            .ok_or_else(|| bad("value length"))?;
        let offset = if bits & BIT_OFFSET != 0 {
            reader
                .varint_max(u64::from(u32::MAX))
                .ok_or_else(|| bad("offset"))?
        } else {
            next_offset
        };
        let mut optional = |bit: u8, what: &str| -> Result<u32> {
            if bits & bit == 0 {
                return Ok(0);
            }
            let value = reader
                .varint_max(u64::from(u32::MAX))
                .ok_or_else(|| bad(what))?;
            Ok(value as u32)
        };
        let flags = optional(BIT_FLAGS, "client flags")?;
        let exptime = optional(BIT_EXPTIME, "exptime")?;
        let seq_delta = reader.varint_max(u64::MAX).ok_or_else(|| bad("seq"))?;
        let seq = previous_seq.wrapping_add(unzigzag(seq_delta));
        let target_seq = if kind == Kind::Touch {
            reader
                .varint_max(u64::MAX)
                .ok_or_else(|| bad("touch target"))?
        } else {
            0
        };
        let key = reader
            .take(key_len as usize)
            .ok_or_else(|| bad("key (cut short)"))?;
        let header = Header {
            kind,
            batch_continues: false,
            stale: bits & BIT_STALE != 0,
            key_len: key_len as u16,
            value_len: value_len as u32,
            flags,
            exptime,
            seq,
        };
        check_entry(offset, &header, segment_len, start, corrupt)?;
        entries.push(HintEntry {
            header,
            offset: offset as u32,
            key: key.to_vec(),
            target_seq,
        });
        next_offset = offset + header.record_len();
        previous_seq = seq;
    }
    Ok(entries)
}

/// Decodes version 1 entries (`bytes` is the whole file).
fn decode_v1_entries(
    bytes: &[u8],
    segment_len: u64,
    corrupt: &dyn Fn(usize, String) -> Error,
) -> Result<Vec<HintEntry>> {
    let mut entries = Vec::new();
    let mut at = HEADER_BYTES;
    while at < bytes.len() {
        let entry = bytes.get(at..).unwrap_or_default();
        if entry.len() < V1_ENTRY_HEADER_BYTES {
            return Err(corrupt(at, "hint entry cut short".into()));
        }
        let key_len = usize::from(u16::from_le_bytes([
            entry.get(6).copied().unwrap_or_default(),
            entry.get(7).copied().unwrap_or_default(),
        ]));
        let whole = entry
            .get(..V1_ENTRY_HEADER_BYTES + key_len)
            .ok_or_else(|| corrupt(at, "hint entry key cut short".into()))?;
        let stored = u32_at(whole, 0);
        let computed = crc32c::crc32c(whole.get(4..).unwrap_or_default());
        if stored != computed {
            return Err(corrupt(at, "hint entry checksum mismatch".into()));
        }
        let kind = whole
            .get(4)
            .and_then(|&byte| Kind::from_byte(byte))
            .ok_or_else(|| corrupt(at, format!("unknown kind {:?} in hint", whole.get(4))))?;
        let header = Header {
            kind,
            batch_continues: false,
            stale: whole.get(5).copied().unwrap_or_default() & 2 != 0,
            key_len: key_len as u16,
            value_len: u32_at(whole, 12),
            flags: u32_at(whole, 16),
            exptime: u32_at(whole, 20),
            seq: u64_at(whole, 24),
        };
        let offset = u32_at(whole, 8);
        check_entry(u64::from(offset), &header, segment_len, at, corrupt)?;
        entries.push(HintEntry {
            header,
            offset,
            key: whole
                .get(V1_ENTRY_HEADER_BYTES..)
                .unwrap_or_default()
                .to_vec(),
            target_seq: u64_at(whole, 32),
        });
        at += V1_ENTRY_HEADER_BYTES + key_len;
    }
    Ok(entries)
}

/// The checks every entry passes, in either format: a seq a file may hold,
/// and a record within the segment (at an offset a `u32` holds).
fn check_entry(
    offset: u64,
    header: &Header,
    segment_len: u64,
    at: usize,
    corrupt: &dyn Fn(usize, String) -> Error,
) -> Result<()> {
    if header.seq > SEQ_MAX {
        return Err(corrupt(
            at,
            format!("hint entry with seq {} above {SEQ_MAX}", header.seq),
        ));
    }
    if offset + header.record_len() > segment_len || offset > u64::from(u32::MAX) {
        return Err(corrupt(
            at,
            format!("hint entry for a record at {offset} past the segment's {segment_len} bytes"),
        ));
    }
    Ok(())
}

fn zigzag(value: u64) -> u64 {
    let signed = value as i64;
    ((signed << 1) ^ (signed >> 63)) as u64
}

fn unzigzag(value: u64) -> u64 {
    (value >> 1) ^ (value & 1).wrapping_neg()
}

/// Appends `value` as a LEB128 varint (1 to 10 bytes).
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads a hint's entries; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let taken = self.bytes.get(self.at..self.at.checked_add(len)?)?;
        self.at += len;
        Some(taken)
    }

    /// A LEB128 varint no greater than `max`, in its shortest form.
    fn varint_max(&mut self, max: u64) -> Option<u64> {
        let mut value = 0u64;
        for index in 0..10 {
            let byte = self.byte()?;
            let bits = u64::from(byte & 0x7f);
            if index == 9 && bits > 1 {
                return None;
            }
            value |= bits << (7 * index);
            if byte & 0x80 == 0 {
                if index > 0 && bits == 0 {
                    return None;
                }
                return (value <= max).then_some(value);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(seq: u64) -> Header {
        Header {
            kind: Kind::Put,
            batch_continues: false,
            stale: false,
            key_len: 2,
            value_len: 10,
            flags: 0,
            exptime: 0,
            seq,
        }
    }

    /// Entries of every kind and shape: records that follow each other and
    /// one that does not, flags and exptime, seqs that go down, a touch.
    fn sample() -> Vec<HintEntry> {
        let first = segment::HEADER_BYTES;
        let touch = Header {
            kind: Kind::Touch,
            stale: true,
            exptime: 1_900_000_000,
            value_len: 8,
            ..put(7)
        };
        vec![
            HintEntry {
                header: put(3),
                offset: first,
                key: b"ab".to_vec(),
                target_seq: 0,
            },
            HintEntry {
                header: Header {
                    flags: 0xdead_beef,
                    exptime: 12,
                    ..put(1 << 40)
                },
                offset: first + 40,
                key: b"cd".to_vec(),
                target_seq: 0,
            },
            HintEntry {
                header: put(2),
                offset: first + 200,
                key: b"ef".to_vec(),
                target_seq: 0,
            },
            HintEntry {
                header: touch,
                offset: first + 240,
                key: b"ab".to_vec(),
                target_seq: 3,
            },
            HintEntry {
                header: Header {
                    kind: Kind::Delete,
                    value_len: 0,
                    ..put(9)
                },
                offset: first + 278,
                key: b"cd".to_vec(),
                target_seq: 0,
            },
        ]
    }

    fn write(entries: &[HintEntry], id: u32, len: u64) -> Vec<u8> {
        let mut writer = HintWriter::new();
        for entry in entries {
            writer.push(&entry.header, entry.offset, &entry.key, entry.target_seq);
        }
        writer.finish(id, len)
    }

    #[test]
    fn hint_round_trips_and_rejects_damage() {
        let entries = sample();
        let bytes = write(&entries, 9, 400);
        let hint = decode(&bytes, Path::new("h")).expect("valid hint");
        assert_eq!(hint.segment_id, 9);
        assert_eq!(hint.segment_len, 400);
        assert_eq!(hint.entries, entries);
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert!(
                decode(&damaged, Path::new("h")).is_err(),
                "damage at {at} went unnoticed"
            );
        }
        assert!(decode(&bytes[..bytes.len() - 1], Path::new("h")).is_err());
    }

    #[test]
    fn entries_are_small() {
        let first = segment::HEADER_BYTES;
        let mut writer = HintWriter::new();
        let mut offset = first;
        for seq in 1..=1000u64 {
            let header = Header {
                key_len: 13,
                value_len: 100,
                seq,
                ..put(0)
            };
            writer.push(&header, offset, b"key:000000001", 0);
            offset += header.record_len() as u32;
        }
        let bytes = writer.finish(1, u64::from(offset));
        let per_entry = (bytes.len() - HEADER_BYTES) / 1000;
        assert_eq!(per_entry, 1 + 1 + 1 + 1 + 13, "{per_entry} bytes an entry");
        assert_eq!(decode(&bytes, Path::new("h")).unwrap().entries.len(), 1000);
    }

    #[test]
    fn an_entry_past_the_segment_end_is_rejected() {
        for bytes in [write(&sample(), 9, 300), v1_file(&sample(), 9, 300)] {
            let error = decode(&bytes, Path::new("h")).unwrap_err();
            assert!(error.to_string().contains("past the segment"), "{error}");
        }
    }

    /// A version 1 file, as the previous format wrote it.
    fn v1_file(entries: &[HintEntry], id: u32, len: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&1u16.to_le_bytes());
        bytes.extend_from_slice(&[0; 2]);
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        for entry in entries {
            let mut body = vec![
                entry.header.kind as u8,
                if entry.header.stale { 2 } else { 0 },
            ];
            body.extend_from_slice(&entry.header.key_len.to_le_bytes());
            body.extend_from_slice(&entry.offset.to_le_bytes());
            body.extend_from_slice(&entry.header.value_len.to_le_bytes());
            body.extend_from_slice(&entry.header.flags.to_le_bytes());
            body.extend_from_slice(&entry.header.exptime.to_le_bytes());
            body.extend_from_slice(&entry.header.seq.to_le_bytes());
            body.extend_from_slice(&entry.target_seq.to_le_bytes());
            body.extend_from_slice(&entry.key);
            bytes.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
            bytes.extend_from_slice(&body);
        }
        bytes
    }

    #[test]
    fn version_1_files_are_still_read() {
        let entries = sample();
        let bytes = v1_file(&entries, 4, 400);
        let hint = decode(&bytes, Path::new("h")).expect("valid version 1 hint");
        assert_eq!(hint.segment_id, 4);
        assert_eq!(hint.entries, entries);
        for at in (0..bytes.len()).filter(|at| !(36..40).contains(at)) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert!(decode(&damaged, Path::new("h")).is_err(), "damage at {at}");
        }
    }

    #[test]
    fn an_entry_seq_above_the_largest_possible_is_rejected() {
        let mut entries = sample();
        entries[1].header.seq = SEQ_MAX;
        assert!(decode(&write(&entries, 9, 400), Path::new("h")).is_ok());
        assert!(decode(&v1_file(&entries, 9, 400), Path::new("h")).is_ok());
        for seq in [SEQ_MAX + 1, u64::MAX] {
            entries[1].header.seq = seq;
            for bytes in [write(&entries, 9, 400), v1_file(&entries, 9, 400)] {
                let error = decode(&bytes, Path::new("h")).unwrap_err();
                assert!(error.to_string().contains("above"), "{error}");
            }
        }
    }

    #[test]
    fn varints_round_trip_and_reject_overlong_forms() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut bytes = Vec::new();
            put_varint(&mut bytes, value);
            let mut reader = Reader {
                bytes: &bytes,
                at: 0,
            };
            assert_eq!(reader.varint_max(u64::MAX), Some(value));
            assert_eq!(reader.at, bytes.len());
        }
        for bad in [&[0x80, 0x00][..], &[0xff; 10][..], &[0x80][..], &[][..]] {
            assert_eq!(
                Reader { bytes: bad, at: 0 }.varint_max(u64::MAX),
                None,
                "{bad:?}"
            );
        }
        assert_eq!(
            Reader {
                bytes: &[0x80, 0x02],
                at: 0
            }
            .varint_max(255),
            None
        );
        for delta in [0u64, 1, 5u64.wrapping_neg(), u64::MAX, 1 << 63] {
            assert_eq!(unzigzag(zigzag(delta)), delta);
        }
        assert!(
            zigzag(1u64.wrapping_neg()) < 4,
            "small negative deltas stay small"
        );
    }
}
