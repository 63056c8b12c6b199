//! The log record: the unit of every write.
//!
//! Byte map (all integers little-endian, fixed width):
//!
//! ```text
//! offset  size       field
//! 0       4          crc32c of bytes [4, 28 + key_len + value_len)
//! 4       1          kind: 1 put, 2 delete, 3 touch, 4 flush
//! 5       1          bits: bit 0 = the batch continues in the next record;
//!                    for touch, bit 1 = the item is marked stale
//! 6       2          key_len
//! 8       4          value_len
//! 12      4          client flags (put); 0 otherwise
//! 16      4          exptime: absolute unix seconds, 0 = never (put, touch);
//!                    for flush, the unix second it takes effect, 0 = at once
//! 20      8          seq: the write's sequence number, which is also the CAS
//!                    unique of a put; unique and increasing across
//!                    restarts (never issued twice, even when a crash
//!                    lost it), from 1 to at most SEQ_MAX (2^62)
//! 28      key_len    key
//! 28+k    value_len  value; for touch, the 8-byte seq of the put it touches
//! ```
//!
//! A batch is a run of records written together, every one but the last with
//! the "continues" bit: recovery applies a batch only if its last record is
//! intact, so a batch is all or nothing.
//!
//! Pure functions over byte slices; safe from any thread.

use std::ops::Range;

/// Size of the fixed record header.
pub const HEADER_BYTES: usize = 28;
/// Longest key a record can hold (the field is 16 bits).
pub const KEY_BYTES_MAX: usize = u16::MAX as usize;

/// The largest seq a file may hold. An engine issues seqs one at a time from
/// 1, skipping [`SEQ_GAP_AT_OPEN`] at each open; at ten million writes a
/// second it would take over 14,000 years to get here, and about 2^30
/// opens. A larger seq, even under a good checksum, is damage, and refusing
/// it keeps recovery's next seq from overflowing.
pub const SEQ_MAX: u64 = 1 << 62;

/// How far above every seq it finds an open starts issuing: more than the
/// seqs a crash can lose after they were seen, so none is issued twice
/// (see `recovery::first_seq_of_run`).
pub const SEQ_GAP_AT_OPEN: u64 = 1 << 32;

const _: () = assert!(SEQ_GAP_AT_OPEN < SEQ_MAX >> 16);

const BIT_BATCH_CONTINUES: u8 = 1;
const BIT_STALE: u8 = 2;

/// What a record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Stores `value` under `key`.
    Put = 1,
    /// Removes `key` (a tombstone).
    Delete = 2,
    /// Changes the expiry (and stale mark) of the put whose seq is in the
    /// value, without rewriting its value.
    Touch = 3,
    /// `flush_all`: every item written before it is gone once it takes effect.
    Flush = 4,
}

impl Kind {
    pub(crate) fn from_byte(byte: u8) -> Option<Kind> {
        match byte {
            1 => Some(Kind::Put),
            2 => Some(Kind::Delete),
            3 => Some(Kind::Touch),
            4 => Some(Kind::Flush),
            _ => None,
        }
    }
}

/// The decoded fixed fields of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the record does.
    pub kind: Kind,
    /// More records of the same batch follow.
    pub batch_continues: bool,
    /// For touch records: the item is marked stale.
    pub stale: bool,
    /// Key length in bytes.
    pub key_len: u16,
    /// Value length in bytes.
    pub value_len: u32,
    /// Client flags of a put.
    pub flags: u32,
    /// Absolute expiry (unix seconds, 0 = never), or a flush's deadline.
    pub exptime: u32,
    /// Sequence number (the CAS unique of a put).
    pub seq: u64,
}

impl Header {
    /// A tombstone for a key of `key_len` bytes.
    pub fn delete(key_len: u16, seq: u64) -> Header {
        Header {
            kind: Kind::Delete,
            batch_continues: false,
            stale: false,
            key_len,
            value_len: 0,
            flags: 0,
            exptime: 0,
            seq,
        }
    }

    /// A `flush_all` marker taking effect at `deadline` (0 = at once).
    pub fn flush(seq: u64, deadline: u32) -> Header {
        Header {
            kind: Kind::Flush,
            exptime: deadline,
            ..Header::delete(0, seq)
        }
    }

    /// Total encoded size of the record this header starts.
    pub fn record_len(&self) -> u64 {
        HEADER_BYTES as u64 + u64::from(self.key_len) + u64::from(self.value_len)
    }

    /// Where the key lies within the record's bytes.
    pub fn key_range(&self) -> Range<usize> {
        HEADER_BYTES..HEADER_BYTES + usize::from(self.key_len)
    }

    /// Where the value lies within the record's bytes.
    pub fn value_range(&self) -> Range<usize> {
        let start = HEADER_BYTES + usize::from(self.key_len);
        start..start + self.value_len as usize
    }
}

/// Appends one encoded record to `out`.
///
/// Preconditions (asserted): `key.len() <= KEY_BYTES_MAX` and the value fits
/// in 32 bits; callers check client input against the server's much smaller
/// limits long before this.
pub fn encode(out: &mut Vec<u8>, header: &Header, key: &[u8], value: &[u8]) {
    assert!(key.len() <= KEY_BYTES_MAX);
    assert!(u32::try_from(value.len()).is_ok());
    assert_eq!(key.len(), usize::from(header.key_len));
    assert_eq!(value.len(), header.value_len as usize);
    let start = out.len();
    let mut bits = 0;
    if header.batch_continues {
        bits |= BIT_BATCH_CONTINUES;
    }
    if header.stale {
        bits |= BIT_STALE;
    }
    out.extend_from_slice(&[0; 4]);
    out.push(header.kind as u8);
    out.push(bits);
    out.extend_from_slice(&header.key_len.to_le_bytes());
    out.extend_from_slice(&header.value_len.to_le_bytes());
    out.extend_from_slice(&header.flags.to_le_bytes());
    out.extend_from_slice(&header.exptime.to_le_bytes());
    out.extend_from_slice(&header.seq.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let crc = crc32c::crc32c(out.get(start + 4..).unwrap_or_default());
    if let Some(slot) = out.get_mut(start..start + 4) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
}

/// Appends the whole record `bytes`, decoded (its checksum verified) as
/// `read`, with `header` in place of `read`: the bytes as they are when the
/// two are the same, encoded afresh with a new checksum when they are not.
/// For copying records (compaction), which mostly keep their header.
pub(crate) fn reencode(out: &mut Vec<u8>, header: &Header, read: &Header, bytes: &[u8]) {
    debug_assert_eq!(decode(bytes).as_ref(), Ok(read));
    if header == read && bytes.len() as u64 == header.record_len() {
        out.extend_from_slice(bytes);
        return;
    }
    let key = bytes.get(header.key_range()).unwrap_or_default();
    let value = bytes.get(header.value_range()).unwrap_or_default();
    encode(out, header, key, value);
}

/// Why bytes did not decode as a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the header, or than the header says the record needs.
    /// At the end of the active segment this is a torn write.
    Truncated {
        /// Bytes the record needs.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// The header names no known kind.
    BadKind(u8),
    /// The seq is above [`SEQ_MAX`].
    BadSeq(u64),
    /// The checksum does not match.
    BadChecksum {
        /// The checksum stored in the record.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated { needed, available } => {
                write!(
                    f,
                    "truncated record: needs {needed} bytes, {available} present"
                )
            }
            DecodeError::BadKind(kind) => write!(f, "unknown record kind {kind}"),
            DecodeError::BadSeq(seq) => {
                write!(f, "seq {seq} is above the largest possible, {SEQ_MAX}")
            }
            DecodeError::BadChecksum { stored, computed } => write!(
                f,
                "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
        }
    }
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    let mut raw = [0; 2];
    if let Some(src) = bytes.get(at..at + 2) {
        raw.copy_from_slice(src);
    }
    u16::from_le_bytes(raw)
}

pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut raw = [0; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        raw.copy_from_slice(src);
    }
    u32::from_le_bytes(raw)
}

pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut raw = [0; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        raw.copy_from_slice(src);
    }
    u64::from_le_bytes(raw)
}

/// Decodes the fixed header without checking the checksum (which needs the
/// whole record). `bytes` must hold at least [`HEADER_BYTES`].
pub fn decode_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    if bytes.len() < HEADER_BYTES {
        return Err(DecodeError::Truncated {
            needed: HEADER_BYTES as u64,
            available: bytes.len() as u64,
        });
    }
    let kind_byte = bytes.get(4).copied().unwrap_or_default();
    let kind = Kind::from_byte(kind_byte).ok_or(DecodeError::BadKind(kind_byte))?;
    let bits = bytes.get(5).copied().unwrap_or_default();
    let seq = u64_at(bytes, 20);
    if seq > SEQ_MAX {
        return Err(DecodeError::BadSeq(seq));
    }
    Ok(Header {
        kind,
        batch_continues: bits & BIT_BATCH_CONTINUES != 0,
        stale: bits & BIT_STALE != 0,
        key_len: u16_at(bytes, 6),
        value_len: u32_at(bytes, 8),
        flags: u32_at(bytes, 12),
        exptime: u32_at(bytes, 16),
        seq,
    })
}

/// Decodes and verifies a whole record at the start of `bytes` (which may
/// hold more after it).
pub fn decode(bytes: &[u8]) -> Result<Header, DecodeError> {
    let header = decode_header(bytes)?;
    let len = header.record_len();
    let Some(record) = usize::try_from(len).ok().and_then(|len| bytes.get(..len)) else {
        return Err(DecodeError::Truncated {
            needed: len,
            available: bytes.len() as u64,
        });
    };
    let stored = u32_at(record, 0);
    let computed = crc32c::crc32c(record.get(4..).unwrap_or_default());
    if stored != computed {
        return Err(DecodeError::BadChecksum { stored, computed });
    }
    Ok(header)
}

/// Whether the records encoded back to back in `records` may include one
/// of `kind`, reading their headers only: false only if every byte
/// decodes as a record of another kind. For records this process just
/// encoded, which always do; bytes that do not (a bug) count as holding
/// one, the answer that loses nothing.
pub(crate) fn may_hold_kind(records: &[u8], kind: Kind) -> bool {
    let mut rest = records;
    while !rest.is_empty() {
        let Ok(header) = decode_header(rest) else {
            return true;
        };
        let next = usize::try_from(header.record_len())
            .ok()
            .and_then(|len| rest.get(len..));
        match next {
            Some(next) if header.kind != kind => rest = next,
            _ => return true,
        }
    }
    false
}

/// The seq a touch record's value names (0 for other kinds); `bytes` is
/// the whole record.
pub(crate) fn touch_target(header: &Header, bytes: &[u8]) -> u64 {
    if header.kind != Kind::Touch {
        return 0;
    }
    bytes
        .get(header.value_range())
        .and_then(|value| <[u8; 8]>::try_from(value).ok())
        .map_or(0, u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(seq: u64) -> Header {
        Header {
            kind: Kind::Put,
            batch_continues: false,
            stale: false,
            key_len: 3,
            value_len: 5,
            flags: 42,
            exptime: 1_700_000_000,
            seq,
        }
    }

    #[test]
    fn encoded_record_decodes_to_the_same_fields() {
        let mut out = Vec::new();
        encode(&mut out, &put(7), b"key", b"value");
        assert_eq!(out.len() as u64, put(7).record_len());
        let header = decode(&out).expect("valid record");
        assert_eq!(header, put(7));
        assert_eq!(out.get(header.key_range()), Some(&b"key"[..]));
        assert_eq!(out.get(header.value_range()), Some(&b"value"[..]));
    }

    #[test]
    fn flipped_bit_anywhere_fails_the_checksum() {
        let mut out = Vec::new();
        encode(&mut out, &put(9), b"key", b"value");
        for at in 4..out.len() {
            let mut damaged = out.clone();
            if let Some(byte) = damaged.get_mut(at) {
                *byte ^= 0x10;
            }
            assert!(decode(&damaged).is_err(), "flip at {at} went unnoticed");
        }
    }

    #[test]
    fn a_seq_above_the_largest_possible_fails_to_decode() {
        let mut out = Vec::new();
        encode(&mut out, &put(SEQ_MAX), b"key", b"value");
        assert_eq!(decode(&out).expect("the largest seq").seq, SEQ_MAX);
        for seq in [SEQ_MAX + 1, u64::MAX] {
            let mut out = Vec::new();
            encode(&mut out, &put(seq), b"key", b"value");
            assert!(matches!(decode(&out), Err(DecodeError::BadSeq(s)) if s == seq));
            assert!(matches!(decode_header(&out), Err(DecodeError::BadSeq(_))));
        }
    }

    #[test]
    fn truncated_tail_record_is_reported_as_truncated() {
        let mut out = Vec::new();
        encode(&mut out, &put(1), b"key", b"value");
        let cut = out.get(..out.len() - 1).expect("non-empty");
        assert!(matches!(decode(cut), Err(DecodeError::Truncated { .. })));
        assert!(matches!(
            decode(&out[..10]),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn a_delete_among_records_is_found_and_puts_alone_are_not() {
        let mut records = Vec::new();
        encode(&mut records, &put(1), b"key", b"value");
        encode(&mut records, &Header::flush(2, 0), b"", b"");
        assert!(!may_hold_kind(&records, Kind::Delete));
        assert!(may_hold_kind(&records, Kind::Flush));
        encode(&mut records, &Header::delete(3, 3), b"key", b"");
        assert!(may_hold_kind(&records, Kind::Delete));
        assert!(!may_hold_kind(&[], Kind::Delete));
        // Bytes that are no record, or a record cut short, may hold one.
        let mut puts = Vec::new();
        encode(&mut puts, &put(4), b"key", b"value");
        assert!(!may_hold_kind(&puts, Kind::Delete));
        assert!(may_hold_kind(&[7u8; 64], Kind::Delete));
        assert!(may_hold_kind(&puts[..puts.len() - 1], Kind::Delete));
        puts.push(0);
        assert!(may_hold_kind(&puts, Kind::Delete));
    }

    #[test]
    fn a_record_keeping_its_header_is_copied_as_it_is_and_one_changing_it_is_encoded_afresh() {
        let mut bytes = Vec::new();
        encode(&mut bytes, &put(5), b"key", b"value");
        let read = decode(&bytes).unwrap();
        let mut copied = Vec::new();
        reencode(&mut copied, &read, &read, &bytes);
        assert_eq!(copied, bytes);
        let changed = Header {
            exptime: 0,
            stale: true,
            ..read
        };
        let mut rewritten = vec![1, 2, 3];
        reencode(&mut rewritten, &changed, &read, &bytes);
        let record = rewritten.get(3..).unwrap();
        assert_eq!(decode(record), Ok(changed));
        assert_eq!(record.get(changed.key_range()), Some(&b"key"[..]));
        assert_eq!(record.get(changed.value_range()), Some(&b"value"[..]));
    }
}
