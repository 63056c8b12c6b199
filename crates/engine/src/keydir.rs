//! The keydir: every key in memory, with where its latest record lies.
//!
//! Split into a power-of-two number of partitions chosen by the key's hash,
//! each a hash table behind its own read-write lock, so readers never wait
//! for each other and writers only for writers of the same partition. No
//! lock is ever held for work that grows with the number of clients; a
//! partition lock covers one key's read-modify-write (for a batch, the few
//! partitions it touches, taken in ascending order; for compaction, the
//! checks or switches of at most 64 keys).
//!
//! Lock order: partition locks (ascending index) before the log's lock.
//!
//! Per-key memory: an [`Entry`] is an 8-byte pointer in the table, plus one
//! control byte, for each slot (the table grows at 7/8 full, so 1/8 to 9/16
//! of slots are spare), plus one heap block of 40 bytes of metadata, the key
//! and (while cached) the value, rounded up by the allocator.

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use parking_lot::RwLock;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::hash::BuildHasher;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

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
/// A request found the item expired or flushed and counted it (see
/// [`crate::engine::Inner::found_dead`]).
pub const BIT_DEAD_COUNTED: u8 = 32;

/// The fixed part of an entry's heap block; the key follows it, then the
/// value while it is cached.
#[repr(C)]
struct Head {
    cas: u64,
    segment_id: u32,
    offset: u32,
    value_len: u32,
    flags: u32,
    exptime: u32,
    atime: AtomicU32,
    bits: AtomicU8,
    key_len: u16,
}

/// The persisted fields of a head: which put an entry describes.
struct Location {
    cas: u64,
    segment_id: u32,
    offset: u32,
    value_len: u32,
    flags: u32,
    exptime: u32,
}

impl Location {
    fn head(self, atime: u32, bits: u8, key_len: u16) -> Head {
        Head {
            cas: self.cas,
            segment_id: self.segment_id,
            offset: self.offset,
            value_len: self.value_len,
            flags: self.flags,
            exptime: self.exptime,
            atime: AtomicU32::new(atime),
            bits: AtomicU8::new(bits),
            key_len,
        }
    }
}

/// Bytes of the fixed part; the key starts here.
const HEAD_BYTES: usize = std::mem::size_of::<Head>();
const _: () = assert!(HEAD_BYTES == 40);

/// The memory layout of a block holding a key of `key_len` bytes and
/// `value_len` cached value bytes.
fn block_layout(key_len: usize, value_len: usize) -> Layout {
    match Layout::from_size_align(
        HEAD_BYTES + key_len + value_len,
        std::mem::align_of::<Head>(),
    ) {
        Ok(layout) => layout,
        Err(_) => panic!("an entry of {key_len} + {value_len} bytes overflows the address space"),
    }
}

/// One key's state: a single heap block holding the metadata, the key and
/// (while cached) the value, owned like a `Box`. The table stores only the
/// 8-byte pointer, so its spare slots cost little.
pub struct Entry {
    block: NonNull<Head>,
}

// SAFETY: an Entry owns its block exclusively, like a Box<Head>; it is moved
// between threads only as a whole.
unsafe impl Send for Entry {}
// SAFETY: through &Entry the block's plain fields are only read; the fields
// changed through &Entry (atime, bits) are atomics.
unsafe impl Sync for Entry {}

impl Drop for Entry {
    fn drop(&mut self) {
        let layout = block_layout(self.key_len(), self.cached_len());
        // SAFETY: the block was allocated by `allocate` with exactly this
        // layout: the key length never changes, and the cached length
        // changes only together with a new block (see `rebuild`).
        unsafe { dealloc(self.block.as_ptr().cast::<u8>(), layout) }
    }
}

/// Allocates a block with `head`, the key and the optional value.
fn allocate(head: Head, key: &[u8], value: Option<&[u8]>) -> NonNull<Head> {
    let value = value.unwrap_or_default();
    let layout = block_layout(key.len(), value.len());
    // SAFETY: the layout has a non-zero size (HEAD_BYTES > 0).
    let raw = unsafe { alloc(layout) };
    let Some(block) = NonNull::new(raw.cast::<Head>()) else {
        handle_alloc_error(layout);
    };
    // SAFETY: the block is valid for writes of layout.size() bytes and
    // aligned for Head; key and value fit after the head by construction of
    // the layout, and do not overlap the new allocation.
    unsafe {
        block.as_ptr().write(head);
        let bytes = block.as_ptr().cast::<u8>().add(HEAD_BYTES);
        std::ptr::copy_nonoverlapping(key.as_ptr(), bytes, key.len());
        std::ptr::copy_nonoverlapping(value.as_ptr(), bytes.add(key.len()), value.len());
    }
    block
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
        assert!(key.len() <= usize::from(u16::MAX));
        if let Some(value) = value {
            assert_eq!(value.len(), value_len as usize);
        }
        let bits = if value.is_some() { BIT_CACHED } else { 0 };
        let location = Location {
            cas,
            segment_id,
            offset,
            value_len,
            flags,
            exptime,
        };
        let head = location.head(now, bits, key.len() as u16);
        Entry {
            block: allocate(head, key, value),
        }
    }

    fn head(&self) -> &Head {
        // SAFETY: the block is valid and initialised for as long as self.
        unsafe { self.block.as_ref() }
    }

    fn head_mut(&mut self) -> &mut Head {
        // SAFETY: as in `head`, and &mut self gives exclusive access.
        unsafe { self.block.as_mut() }
    }

    fn bytes(&self) -> &[u8] {
        let len = self.key_len() + self.cached_len();
        // SAFETY: the block holds HEAD_BYTES + key + cached value bytes,
        // all initialised by `allocate`.
        unsafe { std::slice::from_raw_parts(self.block.as_ptr().cast::<u8>().add(HEAD_BYTES), len) }
    }

    fn key_len(&self) -> usize {
        usize::from(self.head().key_len)
    }

    fn cached_len(&self) -> usize {
        if self.is_cached() {
            self.head().value_len as usize
        } else {
            0
        }
    }

    /// The seq of the put this entry describes: its CAS unique.
    pub fn cas(&self) -> u64 {
        self.head().cas
    }

    /// The segment holding the put.
    pub fn segment_id(&self) -> u32 {
        self.head().segment_id
    }

    /// The put record's offset in the segment.
    pub fn offset(&self) -> u32 {
        self.head().offset
    }

    /// Value length in bytes.
    pub fn value_len(&self) -> u32 {
        self.head().value_len
    }

    /// Client flags.
    pub fn flags(&self) -> u32 {
        self.head().flags
    }

    /// Absolute expiry, unix seconds, 0 = never.
    pub fn exptime(&self) -> u32 {
        self.head().exptime
    }

    /// Unix second of the last access (not persisted).
    pub fn atime(&self) -> &AtomicU32 {
        &self.head().atime
    }

    /// `BIT_*` flags; atomic so readers under a shared lock may set
    /// [`BIT_FETCHED`], [`BIT_WIN_SENT`] and [`BIT_REFERENCED`]. Never change
    /// [`BIT_CACHED`] through this: it describes the block's size.
    pub fn bits(&self) -> &AtomicU8 {
        &self.head().bits
    }

    /// Sets the expiry (a touch). An item found expired before (possible
    /// when the clock steps back) may be found so again.
    pub fn set_exptime(&mut self, exptime: u32) {
        let head = self.head_mut();
        head.exptime = exptime;
        *head.bits.get_mut() &= !BIT_DEAD_COUNTED;
    }

    /// Points the entry at a copy of the same put (compaction).
    pub fn set_location(&mut self, segment_id: u32, offset: u32) {
        let head = self.head_mut();
        head.segment_id = segment_id;
        head.offset = offset;
    }

    /// True when the value is held in memory.
    pub fn is_cached(&self) -> bool {
        self.head().bits.load(Ordering::Relaxed) & BIT_CACHED != 0
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        self.bytes().get(..self.key_len()).unwrap_or_default()
    }

    /// Asks the processor to start loading the block's first two cache
    /// lines (the head and, for most keys, the key) without waiting.
    fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let start = self.block.as_ptr().cast::<i8>();
            // SAFETY: a prefetch is only a hint: it never faults and reads
            // nothing into the program, whatever the address.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(start);
                _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(64));
            }
        }
    }

    /// The cached value, if any.
    pub fn cached_value(&self) -> Option<&[u8]> {
        if self.is_cached() {
            self.bytes().get(self.key_len()..)
        } else {
            None
        }
    }

    /// Replaces the block with one holding `head`, the same key and
    /// `value`; the old block is freed.
    fn rebuild(&mut self, head: Head, value: Option<&[u8]>) {
        let block = allocate(head, self.key(), value);
        let old = std::mem::replace(self, Entry { block });
        drop(old);
    }

    fn head_copy(&self, cached: bool) -> Head {
        let head = self.head();
        let bits = head.bits.load(Ordering::Relaxed);
        let bits = if cached {
            bits | BIT_CACHED
        } else {
            bits & !BIT_CACHED
        };
        Head {
            cas: head.cas,
            segment_id: head.segment_id,
            offset: head.offset,
            value_len: head.value_len,
            flags: head.flags,
            exptime: head.exptime,
            atime: AtomicU32::new(head.atime.load(Ordering::Relaxed)),
            bits: AtomicU8::new(bits),
            key_len: head.key_len,
        }
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
        if let Some(value) = value {
            assert_eq!(value.len(), value_len as usize);
        }
        let mut bits = if stale { BIT_STALE } else { 0 };
        if value.is_some() {
            bits |= BIT_CACHED;
        }
        if let Some(value) = value.filter(|_| self.is_cached() && value_len == self.value_len()) {
            // Same block size (an overwrite with a value of the same length,
            // the common case): reuse the block instead of reallocating.
            let key_len = self.key_len();
            let head = self.head_mut();
            head.cas = cas;
            head.segment_id = segment_id;
            head.offset = offset;
            head.flags = flags;
            head.exptime = exptime;
            *head.bits.get_mut() = bits;
            // SAFETY: the block holds HEAD_BYTES + key + value_len bytes
            // (it is cached with the same value length), &mut self gives
            // exclusive access, and `value` lies outside the block.
            unsafe {
                let target = self.block.as_ptr().cast::<u8>().add(HEAD_BYTES + key_len);
                std::ptr::copy_nonoverlapping(value.as_ptr(), target, value.len());
            }
            return;
        }
        let location = Location {
            cas,
            segment_id,
            offset,
            value_len,
            flags,
            exptime,
        };
        let atime = self.head().atime.load(Ordering::Relaxed);
        let head = location.head(atime, bits, self.head().key_len);
        self.rebuild(head, value);
    }

    /// Caches `value` (which must be this entry's current value).
    pub fn cache(&mut self, value: &[u8]) {
        assert_eq!(value.len(), self.value_len() as usize);
        let head = self.head_copy(true);
        self.rebuild(head, Some(value));
    }

    /// Drops the cached value, keeping key and location.
    pub fn uncache(&mut self) {
        let head = self.head_copy(false);
        self.rebuild(head, None);
    }

    /// Record size of the put this entry points at.
    pub fn record_len(&self) -> u64 {
        crate::record::HEADER_BYTES as u64 + self.key_len() as u64 + u64::from(self.value_len())
    }

    /// Bytes of the item's key and value (memcached's `bytes` statistic).
    pub fn item_bytes(&self) -> u64 {
        self.key_len() as u64 + u64::from(self.value_len())
    }

    /// True if `bit` is set.
    pub fn has(&self, bit: u8) -> bool {
        self.bits().load(Ordering::Relaxed) & bit != 0
    }
}

/// A partition's table.
pub type Table = HashTable<Entry>;

/// The partitioned keydir.
pub struct Keydir {
    partitions: Box<[RwLock<Table>]>,
    /// Per partition: whether it may hold an entry with an expiry time. Set
    /// whenever one is stored there, cleared by the expiry sweep once a walk
    /// of the partition finds none (both under the partition's write lock),
    /// so the sweep passes over partitions of items that never expire
    /// without walking them.
    may_expire: Box<[AtomicBool]>,
    /// Per partition: the log position just past its latest delete or
    /// touch, raised under its write lock (only under `Always`, the one
    /// mode that reads it; see [`crate::engine::Inner::seen`]). A read that
    /// misses, or finds an item's expiry, may be answering such a record,
    /// which no entry points at.
    changed: Box<[AtomicU64]>,
    /// Partition count less one.
    mask: usize,
    hasher: RandomState,
}

/// Where in a key's hash its partition is read: from bit 32 up. Each table
/// takes a key's slot from the low bits of its hash and the slot's control
/// byte (compared before any entry is read) from its top 7. A partition
/// read from either end would make every key in it share those bits: read
/// from the top, as it once was, every key of a partition had the same
/// control byte, so a lookup read the entry of each occupied slot it probed
/// (a wait for memory each) until it came to the key's own.
const PARTITION_BITS_ROTATION: u32 = 32;

/// Most partitions a keydir has: its partition bits then stay clear of the
/// tables' control bytes (the top 7 bits; see [`PARTITION_BITS_ROTATION`]).
pub(crate) const PARTITIONS_MAX: usize = 1 << 16;

impl Keydir {
    /// A keydir with `partitions` partitions, rounded up to a power of two,
    /// at least 1 and at most [`PARTITIONS_MAX`].
    pub fn new(partitions: usize) -> Keydir {
        let count = partitions.clamp(1, PARTITIONS_MAX).next_power_of_two();
        Keydir {
            partitions: (0..count).map(|_| RwLock::new(Table::new())).collect(),
            may_expire: (0..count).map(|_| AtomicBool::new(false)).collect(),
            changed: (0..count).map(|_| AtomicU64::new(0)).collect(),
            mask: count - 1,
            hasher: RandomState::default(),
        }
    }

    /// The hash of a key; the same for lookups and table growth.
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Which partition holds a key of this hash.
    pub fn partition_index(&self, hash: u64) -> usize {
        hash.rotate_right(PARTITION_BITS_ROTATION) as usize & self.mask
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

    /// Notes that the partition of keys of this hash holds an entry with
    /// stored expiry `exptime` (nothing to note for 0, never). Call it with
    /// that partition's write lock held, wherever an entry's expiry is set.
    pub fn note_expiry(&self, hash: u64, exptime: u32) {
        if exptime != 0 {
            self.note_expiry_at(self.partition_index(hash), exptime);
        }
    }

    /// [`Keydir::note_expiry`] by partition index.
    pub fn note_expiry_at(&self, index: usize, exptime: u32) {
        if exptime == 0 {
            return;
        }
        let flag = self.may_expire_flag(index);
        if !flag.load(Ordering::Relaxed) {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Whether partition `index` may hold an entry with an expiry time
    /// (false only if none was stored since a walk found none).
    pub fn may_expire(&self, index: usize) -> bool {
        self.may_expire_flag(index).load(Ordering::Relaxed)
    }

    /// Records that partition `index` holds no entry with an expiry time: a
    /// walk under its write lock found none but expired ones, and removed
    /// those.
    pub fn none_expire(&self, index: usize) {
        self.may_expire_flag(index).store(false, Ordering::Relaxed);
    }

    fn may_expire_flag(&self, index: usize) -> &AtomicBool {
        #[expect(
            clippy::indexing_slicing,
            reason = "index comes from partition_index or a loop below len()"
        )]
        &self.may_expire[index]
    }

    /// Notes that partition `index` holds a delete or touch ending at log
    /// position `lsn`. Call it under the partition's write lock.
    pub fn note_change(&self, index: usize, lsn: u64) {
        self.changed_at(index).fetch_max(lsn, Ordering::Relaxed);
    }

    /// The log position just past partition `index`'s latest delete or
    /// touch (0 if none was noted). Read under the partition's lock, it
    /// covers every such record whose effect the reader can see.
    pub fn changed(&self, index: usize) -> u64 {
        self.changed_at(index).load(Ordering::Relaxed)
    }

    fn changed_at(&self, index: usize) -> &AtomicU64 {
        #[expect(
            clippy::indexing_slicing,
            reason = "index comes from partition_index or a loop below len()"
        )]
        &self.changed[index]
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

/// Starts loading into the cache the entry a lookup of `hash` will read,
/// without waiting for it to arrive. The slot is found from the hash alone
/// (by its control byte), so a loop can issue this for many keys and then
/// look each up while their entries arrive together, instead of one after
/// the other. (The slot is the first in the key's probe whose control byte
/// matches: the key's own, unless another key shares those 7 bits, when
/// the hint is wasted.)
pub fn prefetch(table: &Table, hash: u64) {
    if let Some(entry) = table.find(hash, |_| true) {
        entry.prefetch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_one_pointer() {
        assert_eq!(std::mem::size_of::<Entry>(), 8);
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
        // Same length: the block is reused; every field still changes.
        entry.replace(Some(b"zw"), 10, 4, 120, 2, 6, 77, false);
        assert_eq!(entry.key(), b"key");
        assert_eq!(entry.cached_value(), Some(&b"zw"[..]));
        assert_eq!(
            (entry.cas(), entry.segment_id(), entry.offset()),
            (10, 4, 120)
        );
        assert_eq!((entry.flags(), entry.exptime()), (6, 77));
        assert!(!entry.has(BIT_STALE));
        entry.replace(None, 11, 4, 160, 5, 0, 0, false);
        assert_eq!(entry.cached_value(), None);
        assert_eq!(entry.value_len(), 5);
    }

    #[test]
    fn the_partition_count_is_a_power_of_two_within_bounds() {
        assert_eq!(Keydir::new(0).len(), 1);
        assert_eq!(Keydir::new(200).len(), 256);
        assert_eq!(Keydir::new(usize::MAX).len(), PARTITIONS_MAX);
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

    /// The keys of one partition differ in the bits a table compares before
    /// reading an entry (the top 7 of the hash), and in the low bits that
    /// place them in the table.
    #[test]
    fn keys_of_a_partition_differ_in_the_bits_their_table_uses() {
        let keydir = Keydir::new(256);
        let hashes: Vec<u64> = (0..100_000)
            .map(|i| keydir.hash(format!("k{i}").as_bytes()))
            .filter(|&hash| keydir.partition_index(hash) == 7)
            .collect();
        assert!(hashes.len() > 200, "{} keys in the partition", hashes.len());
        let distinct = |bits: fn(u64) -> u64| {
            hashes
                .iter()
                .map(|&hash| bits(hash))
                .collect::<std::collections::HashSet<_>>()
                .len()
        };
        assert!(distinct(|hash| hash >> 57) > 100, "control bytes");
        assert!(distinct(|hash| hash & 0x3f) > 60, "low bits");
    }
}
