//! The write operations: store, delete, touch, incr/decr, flush_all, batch.
//!
//! Each takes the key's partition write lock, decides with memcached's rules
//! against the live item, appends its record to the log and updates the
//! keydir before releasing the lock, so the log order of one key's records is
//! the order of its writes. The caller then commits the returned [`Ticket`]
//! before acknowledging (see [`Engine::commit`]).

use crate::clock::Expiry;
use crate::engine::{Engine, Inner, OnDisk, ReadOptions};
use crate::error::{Error, Result};
use crate::item::{Arith, ArithOutcome, BatchOp, DeleteOutcome, Item, StoreMode, StoreOutcome};
use crate::keydir::{Entry, Table, BIT_FETCHED, BIT_STALE, BIT_WIN_SENT};
use crate::log::Ticket;
use crate::record::{self, Header, Kind, KEY_BYTES_MAX};
use crate::segment::Segment;
use hashbrown::hash_table::OccupiedEntry;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Where a put landed and what it carries besides key and value.
struct PutMeta {
    seq: u64,
    segment: Arc<Segment>,
    offset: u32,
    flags: u32,
    exptime: u32,
    /// The keydir bits the entry starts with (see [`Inner::put`]).
    bits: u8,
}

/// The keydir bits a put may start its entry with: the stale mark, which
/// its record carries too, and two that live in memory alone.
const PUT_BITS: u8 = BIT_STALE | BIT_WIN_SENT | BIT_FETCHED;

fn put_header(key: &[u8], value: &[u8], flags: u32, exptime: u32, seq: u64, stale: bool) -> Header {
    Header {
        kind: Kind::Put,
        batch_continues: false,
        stale,
        key_len: key.len() as u16,
        value_len: value.len() as u32,
        flags,
        exptime,
        seq,
    }
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(Error::TooLarge(format!(
            "key of {} bytes: keys are 1 to {KEY_BYTES_MAX} bytes",
            key.len()
        )));
    }
    Ok(())
}

fn check_value(value_len: usize) -> Result<()> {
    if u32::try_from(value_len).is_err() {
        return Err(Error::TooLarge(format!(
            "value of {value_len} bytes: values are at most 4 GiB"
        )));
    }
    Ok(())
}

/// Whether a store in `mode` goes ahead on `current` (the key's live
/// entry): the mode to apply (an append or prepend whose CAS unique
/// matched, as a plain one), or the outcome that refuses it.
fn store_precondition(
    mode: StoreMode,
    current: Option<&Entry>,
) -> std::result::Result<StoreMode, StoreOutcome> {
    match (mode, current) {
        (StoreMode::Add, Some(_)) => Err(StoreOutcome::NotStored),
        (
            StoreMode::Replace
            | StoreMode::Append
            | StoreMode::Prepend
            | StoreMode::AppendIfCas(_)
            | StoreMode::PrependIfCas(_),
            None,
        ) => Err(StoreOutcome::NotStored),
        (StoreMode::Cas(_) | StoreMode::CasOrStale(_), None) => Err(StoreOutcome::NotFound),
        (
            StoreMode::Cas(cas) | StoreMode::AppendIfCas(cas) | StoreMode::PrependIfCas(cas),
            Some(entry),
        ) if entry.cas() != cas => Err(StoreOutcome::Exists),
        (StoreMode::CasOrStale(cas), Some(entry)) if cas > entry.cas() => Err(StoreOutcome::Exists),
        (StoreMode::AppendIfCas(_), _) => Ok(StoreMode::Append),
        (StoreMode::PrependIfCas(_), _) => Ok(StoreMode::Prepend),
        (mode, _) => Ok(mode),
    }
}

/// The new counter bytes: memcached rewrites a shorter number in place,
/// padded with spaces to the old length.
fn format_counter(number: u64, old_len: usize) -> Vec<u8> {
    let mut text = number.to_string().into_bytes();
    if text.len() < old_len {
        text.resize(old_len, b' ');
    }
    text
}

impl Inner {
    /// A delete of the key of `hash` was logged, ending at `ticket`: notes
    /// it for readers ([`Inner::seen`]) and removes the key's entry,
    /// `found`, if it had one. Returns whether it had. The key's partition
    /// write lock is held.
    pub(crate) fn drop_deleted(
        &self,
        hash: u64,
        ticket: Ticket,
        found: Option<OccupiedEntry<'_, Entry>>,
    ) -> bool {
        self.note_change(hash, ticket);
        let Some(found) = found else {
            return false;
        };
        let (entry, _) = found.remove();
        self.release_entry(&entry);
        self.counters.items.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Forgets the bytes an entry's current put accounts for.
    pub(crate) fn release_entry(&self, entry: &Entry) {
        if let Some(segment) = self.segments.get(entry.segment_id()) {
            segment.sub_live(entry.record_len());
        }
        self.counters
            .item_bytes
            .fetch_sub(entry.item_bytes(), Ordering::Relaxed);
        if entry.is_cached() {
            self.counters
                .cached_bytes
                .fetch_sub(u64::from(entry.value_len()), Ordering::Relaxed);
        }
    }

    /// Points the keydir at a put just appended (value cached: it may not
    /// have reached the file yet).
    fn install_put(&self, table: &mut Table, hash: u64, key: &[u8], value: &[u8], meta: &PutMeta) {
        let now = self.clock.now();
        let value_len = value.len() as u32;
        let record_len = record::HEADER_BYTES as u64 + key.len() as u64 + u64::from(value_len);
        meta.segment.add_live(record_len);
        meta.segment.note_seq(meta.seq);
        if let Some(entry) = table.find_mut(hash, |entry| entry.key() == key) {
            self.release_entry(entry);
            entry.replace(
                Some(value),
                meta.seq,
                meta.segment.id,
                meta.offset,
                value_len,
                meta.flags,
                meta.exptime,
                meta.bits & BIT_STALE != 0,
            );
            entry
                .bits()
                .fetch_or(meta.bits & PUT_BITS, Ordering::Relaxed);
            entry.atime().store(now, Ordering::Relaxed);
        } else {
            let entry = Entry::new(
                key,
                Some(value),
                meta.seq,
                meta.segment.id,
                meta.offset,
                value_len,
                meta.flags,
                meta.exptime,
                now,
            );
            entry
                .bits()
                .fetch_or(meta.bits & PUT_BITS, Ordering::Relaxed);
            table.insert_unique(hash, entry, self.keydir.rehasher());
            self.counters.items.fetch_add(1, Ordering::Relaxed);
        }
        self.keydir.note_expiry(hash, meta.exptime);
        self.counters
            .item_bytes
            .fetch_add(key.len() as u64 + u64::from(value_len), Ordering::Relaxed);
        self.counters
            .cached_bytes
            .fetch_add(u64::from(value_len), Ordering::Relaxed);
    }

    /// Appends a put and installs it. The partition lock of `key` is held.
    /// `bits` are the keydir bits its entry starts with, of [`PUT_BITS`]:
    /// [`BIT_STALE`] is logged with the record; [`BIT_WIN_SENT`] and
    /// [`BIT_FETCHED`] are kept in memory only, as memcached keeps them.
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        table: &mut Table,
        hash: u64,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: u32,
        bits: u8,
    ) -> Result<(u64, Ticket)> {
        let seq = self.issue_seqs(1)?;
        let header = put_header(key, value, flags, exptime, seq, bits & BIT_STALE != 0);
        let (segment, offset, ticket) = self.log.append(header.record_len(), |buf, _| {
            record::encode(buf, &header, key, value)
        })?;
        let meta = PutMeta {
            seq,
            segment,
            offset,
            flags,
            exptime,
            bits,
        };
        self.install_put(table, hash, key, value, &meta);
        Ok((seq, ticket))
    }

    /// Logs an immediate flush with `seq` and raises the flush generation to
    /// it, both under the log lock (see [`Log::append`]): every segment the
    /// log creates after the record is stamped with the flush. Compaction
    /// drops a carried-out flush record on that promise; raised after the
    /// append, a rotation by another writer in between would stamp the old
    /// generation, and compacting the record would bring the flushed items
    /// back at the next open.
    ///
    /// [`Log::append`]: crate::log::Log::append
    pub(crate) fn append_flush_now(&self, seq: u64) -> Result<Ticket> {
        let header = Header::flush(seq, 0);
        let (segment, _, ticket) = self.log.append(header.record_len(), |buf, ticket| {
            record::encode(buf, &header, &[], &[]);
            self.flush_lsn.fetch_max(ticket.0, Ordering::SeqCst);
            self.flush_seq.fetch_max(seq, Ordering::SeqCst);
        })?;
        segment.note_seq(seq);
        Ok(ticket)
    }

    /// Appends a record that is not a put (delete, touch, flush); such
    /// records hold no live bytes.
    pub(crate) fn append_other(&self, header: &Header, key: &[u8], value: &[u8]) -> Result<Ticket> {
        let (segment, _, ticket) = self.log.append(header.record_len(), |buf, _| {
            record::encode(buf, header, key, value)
        })?;
        segment.note_seq(header.seq);
        Ok(ticket)
    }

    /// The current value of a live entry: cached, or read from its segment.
    /// The entry's partition lock is held, so compaction cannot move it.
    fn current_value(&self, entry: &Entry) -> Result<Vec<u8>> {
        if let Some(value) = entry.cached_value() {
            return Ok(value.to_vec());
        }
        let value = self.read_value(
            entry.key(),
            entry.cas(),
            entry.segment_id(),
            entry.offset(),
            entry.value_len(),
        )?;
        value
            .map(|value| value.to_vec())
            .ok_or_else(|| Error::Corruption {
                file: self.config.dir.clone(),
                offset: u64::from(entry.offset()),
                reason: format!("segment {} of a live item is missing", entry.segment_id()),
            })
    }

    /// Get-and-touch: sets the expiry of a live item with a touch record
    /// (the value is not rewritten) and returns the item, with its value
    /// if `with_value`.
    ///
    /// A value that is not cached is read from its segment after the
    /// partition's write lock is let go, as a plain read does, so that the
    /// disk read holds up no other key of the partition. Should compaction
    /// have moved it meanwhile, the whole get-and-touch is done again: it
    /// then takes effect at that second touch, on whatever the key holds by
    /// then (a newer value, or none: a miss), and the first touch, of a
    /// value since replaced, changed nothing anyone can read.
    pub fn touch(
        &self,
        key: &[u8],
        options: ReadOptions,
        with_value: bool,
    ) -> Result<(Option<Item>, Ticket)> {
        let mut tickets = Ticket::NONE;
        crate::engine::retrying(|| {
            let (item, ticket, on_disk) = self.touch_once(key, options, with_value)?;
            tickets = tickets.max(ticket);
            let (mut item, at) = match (item, on_disk) {
                (Some(item), Some(at)) => (item, at),
                (item, _) => return Ok(Some((item, tickets))),
            };
            Ok(self.read_uncached(key, item.cas, &at)?.map(|value| {
                item.value = value;
                (Some(item), tickets)
            }))
        })
    }

    /// [`Inner::touch`] under the partition's write lock: the touched item,
    /// with its value if `with_value` and the value is cached, or else
    /// where to read it.
    fn touch_once(
        &self,
        key: &[u8],
        options: ReadOptions,
        with_value: bool,
    ) -> Result<(Option<Item>, Ticket, Option<OnDisk>)> {
        check_key(key)?;
        let expiry = options.touch.unwrap_or(Expiry::Never);
        self.log.check_writable()?;
        let now = self.now();
        let hash = self.keydir.hash(key);
        let index = self.keydir.partition_index(hash);
        let mut table = self.keydir.partition_at(index).write();
        let Some(entry) = table.find_mut(hash, |entry| entry.key() == key) else {
            return Ok((None, self.seen(index, None), None));
        };
        if self.live(Some(entry), now).is_none() {
            return Ok((None, self.seen(index, Some(entry)), None));
        }
        let seq = self.issue_seqs(1)?;
        let target = entry.cas().to_le_bytes();
        let header = Header {
            kind: Kind::Touch,
            batch_continues: false,
            stale: entry.has(BIT_STALE),
            key_len: key.len() as u16,
            value_len: target.len() as u32,
            flags: 0,
            exptime: expiry.stored(),
            seq,
        };
        let ticket = self.append_other(&header, key, &target)?;
        self.note_change(hash, ticket);
        entry.set_exptime(expiry.stored());
        self.keydir.note_expiry(hash, expiry.stored());
        let mut item = self.describe(entry, now, options);
        item.exptime = entry.exptime();
        if !with_value {
            return Ok((Some(item), ticket, None));
        }
        if let Some(value) = entry.cached_value() {
            item.value = bytes::Bytes::copy_from_slice(value);
            return Ok((Some(item), ticket, None));
        }
        Ok((Some(item), ticket, Some(OnDisk::of(entry, hash))))
    }
}

impl Engine {
    /// Stores a value with memcached's set/add/replace/append/prepend/cas
    /// semantics. Append and prepend keep the item's flags and expiry, and
    /// are [`StoreOutcome::NotStored`] when the value they would make is
    /// longer than [`crate::Config::value_bytes_max`].
    ///
    /// The write is visible to readers at once and acknowledged once
    /// [`Engine::commit`] of the returned ticket returns.
    ///
    /// Errors: [`Error::TooLarge`] for an empty or over-long key or a value
    /// over 4 GiB; [`Error::WritesFailing`] while the log refuses writes;
    /// [`Error::Exhausted`] once sequence numbers or segment ids run out.
    pub fn store(
        &self,
        mode: StoreMode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        expiry: Expiry,
    ) -> Result<(StoreOutcome, Ticket)> {
        let inner = &*self.inner;
        check_key(key)?;
        check_value(value.len())?;
        inner.log.check_writable()?;
        let now = inner.now();
        let hash = inner.keydir.hash(key);
        let index = inner.keydir.partition_index(hash);
        let mut table = inner.keydir.partition_at(index).write();
        let found = crate::keydir::find(&table, hash, key);
        // An outcome that changes nothing still answers what it saw.
        let seen = || inner.seen(index, found);
        let current = inner.live(found, now);
        let mode = match store_precondition(mode, current) {
            Ok(mode) => mode,
            Err(outcome) => return Ok((outcome, seen())),
        };
        let (value, flags, exptime, bits) = match (mode, current) {
            (StoreMode::Append | StoreMode::Prepend, Some(entry))
                if u64::from(entry.value_len()) + value.len() as u64
                    > u64::from(inner.config.value_bytes_max) =>
            {
                return Ok((StoreOutcome::NotStored, seen()))
            }
            (StoreMode::Append, Some(entry)) => {
                let mut combined = inner.current_value(entry)?;
                combined.extend_from_slice(value);
                let combined = std::borrow::Cow::Owned(combined);
                (combined, entry.flags(), entry.exptime(), 0)
            }
            (StoreMode::Prepend, Some(entry)) => {
                let mut combined = value.to_vec();
                combined.extend_from_slice(&inner.current_value(entry)?);
                let combined = std::borrow::Cow::Owned(combined);
                (combined, entry.flags(), entry.exptime(), 0)
            }
            // A late writer's value, kept stale: as memcached, with the
            // item's expiry and whether a client was offered the win.
            (StoreMode::CasOrStale(cas), Some(entry)) if cas < entry.cas() => {
                let won = entry.bits().load(Ordering::Relaxed) & BIT_WIN_SENT;
                let value = std::borrow::Cow::Borrowed(value);
                (value, flags, entry.exptime(), BIT_STALE | won)
            }
            _ => (std::borrow::Cow::Borrowed(value), flags, expiry.stored(), 0),
        };
        check_value(value.len())?;
        let (cas, ticket) = inner.put(&mut table, hash, key, &value, flags, exptime, bits)?;
        Ok((StoreOutcome::Stored { cas }, ticket))
    }

    /// Stores and commits: the convenience form of [`Engine::store`] with
    /// [`StoreMode::Set`]. Returns the new CAS unique.
    pub fn set(&self, key: &[u8], value: &[u8], flags: u32, expiry: Expiry) -> Result<u64> {
        let (outcome, ticket) = self.store(StoreMode::Set, key, value, flags, expiry)?;
        self.commit(ticket)?;
        match outcome {
            StoreOutcome::Stored { cas } => Ok(cas),
            other => unreachable!("set always stores, got {other:?}"),
        }
    }

    /// Removes a live item, only if its CAS unique is `cas` when given.
    pub fn delete(&self, key: &[u8], cas: Option<u64>) -> Result<(DeleteOutcome, Ticket)> {
        let inner = &*self.inner;
        check_key(key)?;
        inner.log.check_writable()?;
        let now = inner.now();
        let hash = inner.keydir.hash(key);
        let index = inner.keydir.partition_index(hash);
        let mut table = inner.keydir.partition_at(index).write();
        let Ok(found) = table.find_entry(hash, |entry| entry.key() == key) else {
            return Ok((DeleteOutcome::NotFound, inner.seen(index, None)));
        };
        if inner.live(Some(found.get()), now).is_none() {
            return Ok((
                DeleteOutcome::NotFound,
                inner.seen(index, Some(found.get())),
            ));
        }
        if cas.is_some_and(|cas| cas != found.get().cas()) {
            return Ok((DeleteOutcome::Exists, inner.seen(index, Some(found.get()))));
        }
        let seq = inner.issue_seqs(1)?;
        let header = Header::delete(key.len() as u16, seq);
        let ticket = inner.append_other(&header, key, &[])?;
        inner.drop_deleted(hash, ticket, Some(found));
        Ok((DeleteOutcome::Deleted, ticket))
    }

    /// Marks a live item stale instead of removing it (the meta protocol's
    /// `md <key> I`): it gets a new CAS unique, and the next reader asking
    /// for it is told to recache it. `expiry` optionally replaces its expiry.
    pub fn invalidate(
        &self,
        key: &[u8],
        cas: Option<u64>,
        expiry: Option<Expiry>,
    ) -> Result<(DeleteOutcome, Ticket)> {
        let inner = &*self.inner;
        check_key(key)?;
        inner.log.check_writable()?;
        let now = inner.now();
        let hash = inner.keydir.hash(key);
        let index = inner.keydir.partition_index(hash);
        let mut table = inner.keydir.partition_at(index).write();
        let found = crate::keydir::find(&table, hash, key);
        let Some(entry) = inner.live(found, now) else {
            return Ok((DeleteOutcome::NotFound, inner.seen(index, found)));
        };
        if cas.is_some_and(|cas| cas != entry.cas()) {
            return Ok((DeleteOutcome::Exists, inner.seen(index, found)));
        }
        let value = inner.current_value(entry)?;
        let flags = entry.flags();
        let exptime = expiry.map_or(entry.exptime(), Expiry::stored);
        // As memcached's `md … I`: stale, and the next read may win again.
        let (_, ticket) = inner.put(&mut table, hash, key, &value, flags, exptime, BIT_STALE)?;
        Ok((DeleteOutcome::Deleted, ticket))
    }

    /// Sets the expiry of a live item without rewriting its value. Returns
    /// whether the item existed.
    pub fn touch(&self, key: &[u8], expiry: Expiry) -> Result<(bool, Ticket)> {
        let (item, ticket) = self.touch_item(key, expiry)?;
        Ok((item.is_some(), ticket))
    }

    /// [`Engine::touch`], returning the item touched (its flags and CAS
    /// unique; not its value, which is neither read nor copied).
    pub fn touch_item(&self, key: &[u8], expiry: Expiry) -> Result<(Option<Item>, Ticket)> {
        let options = ReadOptions {
            touch: Some(expiry),
            ..ReadOptions::default()
        };
        self.inner.touch(key, options, false)
    }

    /// Creates an empty item if the key has no live one, marking the caller
    /// as the client that should fill it (the meta protocol's `N` flag).
    /// Returns the item it created, offered the win, as it was created: an
    /// expiry already past (memcached's `N-1`) makes one that no later read
    /// finds, and it is still the creator's to fill. The creating read marks
    /// the item fetched unless `options.no_bump` (memcached's `u`); no other
    /// option applies. `None` when the key has a live item.
    pub fn vivify(
        &self,
        key: &[u8],
        expiry: Expiry,
        options: ReadOptions,
    ) -> Result<(Option<Item>, Ticket)> {
        let inner = &*self.inner;
        check_key(key)?;
        inner.log.check_writable()?;
        let now = inner.now();
        let hash = inner.keydir.hash(key);
        let index = inner.keydir.partition_index(hash);
        let mut table = inner.keydir.partition_at(index).write();
        let found = crate::keydir::find(&table, hash, key);
        if inner.live(found, now).is_some() {
            return Ok((None, inner.seen(index, found)));
        }
        let exptime = expiry.stored();
        let fetched = if options.no_bump { 0 } else { BIT_FETCHED };
        let bits = BIT_WIN_SENT | fetched;
        let (cas, ticket) = inner.put(&mut table, hash, key, &[], 0, exptime, bits)?;
        let item = Item {
            value: bytes::Bytes::new(),
            flags: 0,
            exptime,
            cas,
            last_access: now,
            fetched_before: false,
            stale: false,
            win: true,
            win_already_sent: false,
        };
        Ok((Some(item), ticket))
    }

    /// Increments or decrements a decimal counter as memcached does: 64-bit
    /// unsigned, incr wraps, decr stops at 0; a shorter result is padded
    /// with spaces to the old length. Flags are kept, and the expiry unless
    /// [`Arith::expiry`] gives one. A result that fits the old length keeps
    /// the item's stale mark, whether a client was offered the win and
    /// whether it was read, as memcached's rewrite in place does; a longer
    /// one is a new item without them, as memcached's is.
    pub fn arith(&self, key: &[u8], arith: Arith) -> Result<(ArithOutcome, Ticket)> {
        let inner = &*self.inner;
        check_key(key)?;
        inner.log.check_writable()?;
        let now = inner.now();
        let hash = inner.keydir.hash(key);
        let index = inner.keydir.partition_index(hash);
        let mut table = inner.keydir.partition_at(index).write();
        let found = crate::keydir::find(&table, hash, key);
        let seen = || inner.seen(index, found);
        let Some(entry) = inner.live(found, now) else {
            let Some((initial, expiry)) = arith.initial else {
                return Ok((ArithOutcome::NotFound, seen()));
            };
            let text = initial.to_string();
            let exptime = arith.expiry.unwrap_or(expiry).stored();
            let (cas, ticket) = inner.put(&mut table, hash, key, text.as_bytes(), 0, exptime, 0)?;
            return Ok((
                ArithOutcome::Value {
                    value: initial,
                    cas,
                    created: true,
                    grew: false,
                    exptime,
                },
                ticket,
            ));
        };
        // In memcached's order: an empty value is no number whatever the
        // CAS unique, then the CAS unique, then the digits.
        if entry.value_len() == 0 {
            return Ok((ArithOutcome::NonNumeric, seen()));
        }
        if arith.cas.is_some_and(|cas| cas != entry.cas()) {
            return Ok((ArithOutcome::Exists, seen()));
        }
        let old = inner.current_value(entry)?;
        let Some(number) = (arith.read_counter)(&old) else {
            return Ok((ArithOutcome::NonNumeric, seen()));
        };
        let number = if arith.incr {
            number.wrapping_add(arith.delta)
        } else {
            number.saturating_sub(arith.delta)
        };
        let text = format_counter(number, old.len());
        let grew = text.len() > old.len();
        let bits = if grew {
            0
        } else {
            entry.bits().load(Ordering::Relaxed) & PUT_BITS
        };
        let flags = entry.flags();
        let exptime = arith.expiry.map_or(entry.exptime(), Expiry::stored);
        let (cas, ticket) = inner.put(&mut table, hash, key, &text, flags, exptime, bits)?;
        let outcome = ArithOutcome::Value {
            value: number,
            cas,
            created: false,
            grew,
            exptime,
        };
        Ok((outcome, ticket))
    }

    /// Invalidates every item, now or after `delay_secs` seconds, in O(1):
    /// a marker record and a generation number; the space is reclaimed in
    /// the background.
    pub fn flush_all(&self, delay_secs: u32) -> Result<Ticket> {
        let inner = &*self.inner;
        inner.log.check_writable()?;
        // One flush at a time, so that the deadline in memory is always the
        // one of the flush record with the largest seq, as recovery and
        // compaction find it; a due delayed flush is carried out first,
        // before this one replaces its deadline.
        let _guard = inner.flush_activation.lock();
        // If the due one cannot be logged, neither can this one: fail rather
        // than replace a deadline whose flush never took effect.
        let now = inner.clock.now();
        crate::maintenance::activate_due_flush_locked(inner, now)?;
        let seq = inner.issue_seqs(1)?;
        let deadline = if delay_secs == 0 {
            0
        } else {
            now.saturating_add(delay_secs)
        };
        if deadline == 0 {
            let ticket = inner.append_flush_now(seq)?;
            inner.flush_deadline.store(0, Ordering::SeqCst);
            return Ok(ticket);
        }
        let ticket = inner.append_other(&Header::flush(seq, deadline), &[], &[])?;
        inner.flush_deadline.store(deadline, Ordering::SeqCst);
        Ok(ticket)
    }

    /// Applies several sets and deletes as one record group: after a crash
    /// either all of them are there or none. Partition locks are taken in
    /// ascending order, so readers see all of the batch or none of it.
    pub fn batch(&self, ops: &[BatchOp<'_>]) -> Result<Ticket> {
        let inner = &*self.inner;
        for op in ops {
            match op {
                BatchOp::Set { key, value, .. } => {
                    check_key(key)?;
                    check_value(value.len())?;
                }
                BatchOp::Delete { key } => check_key(key)?,
            }
        }
        let Some(last) = ops.len().checked_sub(1) else {
            return Ok(Ticket::NONE);
        };
        inner.log.check_writable()?;
        // A due delayed flush hides what came before the batch, not the batch.
        let _ = inner.now();
        let hashes: Vec<u64> = ops.iter().map(|op| inner.keydir.hash(op_key(op))).collect();
        let mut indexes: Vec<usize> = hashes
            .iter()
            .map(|&hash| inner.keydir.partition_index(hash))
            .collect();
        indexes.sort_unstable();
        indexes.dedup();
        let mut guards: Vec<_> = indexes
            .iter()
            .map(|&index| inner.keydir.partition_at(index).write())
            .collect();
        let first_seq = inner.issue_seqs(ops.len() as u64)?;
        let headers: Vec<Header> = ops
            .iter()
            .enumerate()
            .map(|(at, op)| batch_header(op, first_seq + at as u64, at != last))
            .collect();
        let total: u64 = headers.iter().map(Header::record_len).sum();
        let (segment, start, ticket) = inner.log.append(total, |buf, _| {
            for (op, header) in ops.iter().zip(&headers) {
                record::encode(buf, header, op_key(op), op_value(op));
            }
        })?;
        let mut offset = start;
        for ((op, header), hash) in ops.iter().zip(&headers).zip(&hashes) {
            let index = inner.keydir.partition_index(*hash);
            let slot = indexes.binary_search(&index).unwrap_or_default();
            let Some(table) = guards.get_mut(slot) else {
                unreachable!("a lock was taken for every partition of the batch");
            };
            segment.note_seq(header.seq);
            match op {
                BatchOp::Set { key, value, .. } => {
                    let meta = PutMeta {
                        seq: header.seq,
                        segment: Arc::clone(&segment),
                        offset,
                        flags: header.flags,
                        exptime: header.exptime,
                        bits: 0,
                    };
                    inner.install_put(table, *hash, key, value, &meta);
                }
                BatchOp::Delete { key } => {
                    let found = table.find_entry(*hash, |entry| entry.key() == *key).ok();
                    inner.drop_deleted(*hash, ticket, found);
                }
            }
            offset += header.record_len() as u32;
        }
        Ok(ticket)
    }
}

fn op_key<'a>(op: &BatchOp<'a>) -> &'a [u8] {
    match op {
        BatchOp::Set { key, .. } | BatchOp::Delete { key } => key,
    }
}

fn op_value<'a>(op: &BatchOp<'a>) -> &'a [u8] {
    match op {
        BatchOp::Set { value, .. } => value,
        BatchOp::Delete { .. } => &[],
    }
}

fn batch_header(op: &BatchOp<'_>, seq: u64, continues: bool) -> Header {
    match op {
        BatchOp::Set {
            key,
            value,
            flags,
            expiry,
        } => Header {
            batch_continues: continues,
            ..put_header(key, value, *flags, expiry.stored(), seq, false)
        },
        BatchOp::Delete { key } => Header {
            batch_continues: continues,
            ..Header::delete(key.len() as u16, seq)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorter_counters_are_padded_to_the_old_length() {
        assert_eq!(format_counter(9, 2), b"9 ".to_vec());
        assert_eq!(format_counter(100, 2), b"100".to_vec());
    }
}
