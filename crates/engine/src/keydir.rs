//! The keydir: every key in memory, with where its latest record lies.
//!
//! Split into a power-of-two number of partitions chosen by the key's hash,
//! each a hash table behind its own read-write lock, so readers never wait
//! for each other and writers only for writers of the same partition. No
//! lock is ever held for work that grows with the number of clients; a
//! partition lock covers one key's read-modify-write (and, for a batch, the
//! few partitions it touches, taken in ascending order).
//!
//! Lock order: partition locks (ascending index) before the log's lock.
//!
//! Per-key memory: an [`Entry`] is 56 bytes in the table, plus one control
//! byte, plus the table's spare slots (it grows at 7/8 full, so 1/8 to 9/16
//! of slots are spare), plus one heap block holding the key (and the value
//! while it is cached), rounded up by the allocator.

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use parking_lot::RwLock;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// The value bytes follow the key in `data`.
pub const BIT_CACHED: u8 = 1;
/// The item was marked stale (meta protocol invalidation).
pub const BIT_STALE: u8 = 2;
/// The item has been read since it was written.
pub const BIT_FETCHED: u8 = 4;
/// A client was already told it won the right to recache the item.
pub const BIT_WIN_SENT: u8 = 8;
/// Read since the cache trimmer last passed (its clock hand).
pub const BIT_REFERENCED: u8 = 16;

/// One key's state.
pub struct Entry {
    /// The key, then the value when [`BIT_CACHED`] is set.
    data: Box<[u8]>,
    /// The seq of the put this entry describes: its CAS unique.
    pub cas: u64,
    /// The segment holding the put.
    pub segment_id: u32,
    /// The put record's offset in the segment.
    pub offset: u32,
    /// Value length in bytes.
    pub value_len: u32,
    /// Client flags.
    pub flags: u32,
    /// Absolute expiry, unix seconds, 0 = never.
    pub exptime: u32,
    /// Unix second of the last access (not persisted).
    pub atime: AtomicU32,
    /// `BIT_*` flags; atomic so readers under a shared lock may set
    /// [`BIT_FETCHED`], [`BIT_WIN_SENT`] and [`BIT_REFERENCED`].
    pub bits: AtomicU8,
}

impl Entry {
    /// A new entry; caches `value` when given.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: &[u8],
        value: Option<&[u8]>,
        cas: u64,
        segment_id: u32,
        offset: u32,
        value_len: u32,
        flags: u32,
        exptime: u32,
        now: u32,
    ) -> Entry {
        let mut entry = Entry {
            data: Box::from(key),
            cas,
            segment_id,
            offset,
            value_len,
            flags,
            exptime,
            atime: AtomicU32::new(now),
            bits: AtomicU8::new(0),
        };
        if let Some(value) = value {
            entry.set_value(key.len(), Some(value));
        }
        entry
    }

    /// True when the value is held in memory.
    pub fn is_cached(&self) -> bool {
        self.bits.load(Ordering::Relaxed) & BIT_CACHED != 0
    }

    fn key_len(&self) -> usize {
        if self.is_cached() {
            self.data.len() - self.value_len as usize
        } else {
            self.data.len()
        }
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        self.data.get(..self.key_len()).unwrap_or_default()
    }

    /// The cached value, if any.
    pub fn cached_value(&self) -> Option<&[u8]> {
        if self.is_cached() {
            self.data.get(self.key_len()..)
        } else {
            None
        }
    }

    /// Replaces the cached value (or drops it with `None`). `value_len` must
    /// already describe the new value.
    fn set_value(&mut self, key_len: usize, value: Option<&[u8]>) {
        let mut data = Vec::with_capacity(key_len + value.map_or(0, <[u8]>::len));
        data.extend_from_slice(self.data.get(..key_len).unwrap_or_default());
        match value {
            Some(value) => {
                assert_eq!(value.len(), self.value_len as usize);
                data.extend_from_slice(value);
                self.bits.fetch_or(BIT_CACHED, Ordering::Relaxed);
            }
            None => {
                self.bits.fetch_and(!BIT_CACHED, Ordering::Relaxed);
            }
        }
        self.data = data.into_boxed_slice();
    }

    /// Points the entry at a new put of the same key, caching `value` when
    /// given, and clears the per-version bits.
    #[allow(clippy::too_many_arguments)]
    pub fn replace(
        &mut self,
        value: Option<&[u8]>,
        cas: u64,
        segment_id: u32,
        offset: u32,
        value_len: u32,
        flags: u32,
        exptime: u32,
        stale: bool,
    ) {
        let key_len = self.key_len();
        self.cas = cas;
        self.segment_id = segment_id;
        self.offset = offset;
        self.value_len = value_len;
        self.flags = flags;
        self.exptime = exptime;
        self.bits
            .store(if stale { BIT_STALE } else { 0 }, Ordering::Relaxed);
        self.set_value(key_len, value);
    }

    /// Caches `value` (which must be this entry's current value).
    pub fn cache(&mut self, value: &[u8]) {
        let key_len = self.key_len();
        self.set_value(key_len, Some(value));
    }

    /// Drops the cached value, keeping key and location.
    pub fn uncache(&mut self) {
        let key_len = self.key_len();
        self.set_value(key_len, None);
    }

    /// Record size of the put this entry points at.
    pub fn record_len(&self) -> u64 {
        crate::record::HEADER_BYTES as u64 + self.key_len() as u64 + u64::from(self.value_len)
    }

    /// Bytes of memory the item's key and cached value take (memcached's
    /// `bytes` statistic counts key and value).
    pub fn item_bytes(&self) -> u64 {
        self.key_len() as u64 + u64::from(self.value_len)
    }

    /// True if `bit` is set.
    pub fn has(&self, bit: u8) -> bool {
        self.bits.load(Ordering::Relaxed) & bit != 0
    }
}

/// A partition's table.
pub type Table = HashTable<Entry>;

/// The partitioned keydir.
pub struct Keydir {
    partitions: Box<[RwLock<Table>]>,
    shift: u32,
    hasher: RandomState,
}

impl Keydir {
    /// A keydir with `partitions` (rounded up to a power of two) partitions.
    pub fn new(partitions: usize) -> Keydir {
        let count = partitions.max(1).next_power_of_two();
        let bits = count.trailing_zeros();
        Keydir {
            partitions: (0..count).map(|_| RwLock::new(Table::new())).collect(),
            shift: 64 - bits,
            hasher: RandomState::default(),
        }
    }

    /// The hash of a key; the same for lookups and table growth.
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Which partition holds a key of this hash.
    pub fn partition_index(&self, hash: u64) -> usize {
        if self.shift == 64 {
            0
        } else {
            (hash >> self.shift) as usize
        }
    }

    /// The partition holding keys of this hash.
    pub fn partition(&self, hash: u64) -> &RwLock<Table> {
        self.partition_at(self.partition_index(hash))
    }

    /// Partition by index.
    pub fn partition_at(&self, index: usize) -> &RwLock<Table> {
        #[expect(
            clippy::indexing_slicing,
            reason = "index comes from partition_index or a loop below len()"
        )]
        &self.partitions[index]
    }

    /// Number of partitions (never zero).
    pub fn len(&self) -> usize {
        self.partitions.len()
    }

    /// Rehashes an entry when a table grows.
    pub fn rehasher(&self) -> impl Fn(&Entry) -> u64 + '_ {
        move |entry| self.hash(entry.key())
    }
}

/// Finds `key` in `table`.
pub fn find<'t>(table: &'t Table, hash: u64, key: &[u8]) -> Option<&'t Entry> {
    table.find(hash, |entry| entry.key() == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_is_56_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 56);
    }

    #[test]
    fn caching_and_uncaching_keeps_the_key() {
        let mut entry = Entry::new(b"key", Some(b"value"), 1, 2, 40, 5, 0, 0, 0);
        assert_eq!(entry.key(), b"key");
        assert_eq!(entry.cached_value(), Some(&b"value"[..]));
        entry.uncache();
        assert_eq!(entry.key(), b"key");
        assert_eq!(entry.cached_value(), None);
        entry.cache(b"value");
        assert_eq!(entry.cached_value(), Some(&b"value"[..]));
        entry.replace(Some(b"xy"), 9, 3, 80, 2, 1, 0, true);
        assert_eq!(entry.key(), b"key");
        assert_eq!(entry.cached_value(), Some(&b"xy"[..]));
        assert!(entry.has(BIT_STALE));
    }

    #[test]
    fn keys_spread_over_partitions() {
        let keydir = Keydir::new(16);
        let mut used = std::collections::HashSet::new();
        for i in 0..1000 {
            used.insert(keydir.partition_index(keydir.hash(format!("k{i}").as_bytes())));
        }
        assert_eq!(used.len(), 16);
    }
}
