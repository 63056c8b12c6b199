//! What reads return and what writes report.

use bytes::Bytes;

/// An item as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The value bytes.
    pub value: Bytes,
    /// Client flags.
    pub flags: u32,
    /// Absolute expiry in unix seconds, 0 = never.
    pub exptime: u32,
    /// The CAS unique: the seq of the write that stored this value.
    pub cas: u64,
    /// Unix second of the access before this one (the write counts).
    pub last_access: u32,
    /// The item had been read before this read.
    pub fetched_before: bool,
    /// The item is marked stale (meta protocol invalidation).
    pub stale: bool,
    /// This read was the first to be offered the right to recache the item
    /// (meta protocol "win"), because the item is stale or about to expire.
    pub win: bool,
    /// Another client was already offered that right.
    pub win_already_sent: bool,
}

/// How a store (set, add, replace, append, prepend, cas) works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if the key holds no live item.
    Add,
    /// Store only if the key holds a live item.
    Replace,
    /// Add the bytes after the live item's value (flags and expiry kept).
    Append,
    /// Add the bytes before the live item's value (flags and expiry kept).
    Prepend,
    /// Store only if the live item's CAS unique equals this one.
    Cas(u64),
    /// As `Cas`, but a CAS unique older than the item's stores the value
    /// marked stale instead of failing (the meta protocol's `ms … I C<cas>`:
    /// a late writer's value is kept, flagged for recaching).
    CasOrStale(u64),
    /// As `Append`, only if the live item's CAS unique equals this one (the
    /// meta protocol's `ms … MA C<cas>`).
    AppendIfCas(u64),
    /// As `Prepend`, only if the live item's CAS unique equals this one
    /// (`ms … MP C<cas>`).
    PrependIfCas(u64),
}

/// What a store did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Stored; the new item's CAS unique.
    Stored {
        /// The new CAS unique.
        cas: u64,
    },
    /// The mode's condition failed (add on an existing key, replace/append/
    /// prepend on a missing one).
    NotStored,
    /// `Cas`: the item changed since the client read it.
    Exists,
    /// `Cas`: there is no such item.
    NotFound,
}

/// What a delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Removed (or, with `stale`, marked stale).
    Deleted,
    /// There is no such item.
    NotFound,
    /// The CAS unique given did not match.
    Exists,
}

/// What incr/decr did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    /// The new value and the item's new CAS unique.
    Value {
        /// The counter after the operation.
        value: u64,
        /// The new CAS unique.
        cas: u64,
        /// The item did not exist and was created with the initial value.
        created: bool,
        /// The number needed more digits than the old value held (memcached
        /// then stores a new item rather than rewrite it in place, which
        /// counts in its `total_items`).
        grew: bool,
        /// The item's absolute expiry after the operation, 0 = never.
        exptime: u32,
    },
    /// There is no such item (and no initial value was given).
    NotFound,
    /// The item's value is not a decimal number that fits 64 bits.
    NonNumeric,
    /// The CAS unique given did not match.
    Exists,
}

/// Parameters of incr/decr.
#[derive(Debug, Clone, Copy)]
pub struct Arith {
    /// Add (`true`) or subtract.
    pub incr: bool,
    /// The amount.
    pub delta: u64,
    /// Only if the item's CAS unique equals this.
    pub cas: Option<u64>,
    /// On a miss, create the counter with this value and expiry instead of
    /// failing (meta `N`/`J`); [`Arith::expiry`] overrides the expiry.
    pub initial: Option<(u64, crate::clock::Expiry)>,
    /// On success, give the item this expiry in the same write (meta `T`),
    /// a created one too; `None` keeps an existing item's expiry.
    pub expiry: Option<crate::clock::Expiry>,
    /// Reads an item's value as a counter, `None` when it holds no number:
    /// the protocol's rule (memcached's is C's `strtoull`).
    pub read_counter: fn(&[u8]) -> Option<u64>,
}

/// One write of a batch: all of a batch's writes are applied, or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp<'a> {
    /// Store unconditionally.
    Set {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
        /// Client flags.
        flags: u32,
        /// Expiry.
        expiry: crate::clock::Expiry,
    },
    /// Remove the key (no error if absent).
    Delete {
        /// The key.
        key: &'a [u8],
    },
}
