//! The maintenance thread: delayed `flush_all`, reclaiming flushed and
//! expired items, and keeping cached values within the memory budget.
//!
//! Every pass takes one partition lock at a time, so foreground work waits at
//! most for one partition's walk.

use crate::engine::Inner;
use crate::error::Result;
use crate::keydir::{Table, BIT_REFERENCED};
use crate::log::lsn;
use crate::record::Header;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often the maintenance thread wakes.
const TICK: Duration = Duration::from_millis(100);
/// Partitions walked per tick looking for expired items (all of them every
/// few seconds with the default 256 partitions).
const EXPIRY_PARTITIONS_PER_TICK: usize = 8;
/// Expired items reclaimed per partition per walk (bounds lock hold time).
const EXPIRED_PER_PARTITION_MAX: usize = 1024;

/// The maintenance thread's body; returns at shutdown.
pub fn maintenance_loop(inner: &Inner) {
    while !inner.shutdown.load(Ordering::Acquire) {
        maintain_once(inner);
        std::thread::sleep(TICK);
    }
}

/// One round of all maintenance work.
pub fn maintain_once(inner: &Inner) {
    let _guard = inner.maintenance_lock.lock();
    heal_log(inner);
    activate_due_flush(inner, inner.clock.now());
    sweep_flushed(inner);
    sweep_expired(inner);
    trim_cache(inner);
}

/// Carries out a delayed `flush_all` that has come due by `now`: logs an
/// immediate flush record and raises the flush generation.
pub(crate) fn activate_due_flush(inner: &Inner, now: u32) {
    if !flush_due(inner, now) {
        return;
    }
    // The deadline stays set until the flush is in force, so that every
    // other operation meanwhile waits here rather than reading what it hides.
    let _guard = inner.flush_activation.lock();
    if let Err(error) = activate_due_flush_locked(inner, now) {
        tracing::error!(%error, "recording a delayed flush_all; retrying");
    }
}

/// A delayed flush is pending and due by `now`.
fn flush_due(inner: &Inner, now: u32) -> bool {
    let deadline = inner.flush_deadline.load(Ordering::Acquire);
    deadline != 0 && deadline <= now
}

/// [`activate_due_flush`] for a caller holding `Inner::flush_activation`
/// (also `flush_all`, which runs under it so that flushes are logged and
/// take effect in seq order). On failure the flush stays due.
pub(crate) fn activate_due_flush_locked(inner: &Inner, now: u32) -> Result<()> {
    if !flush_due(inner, now) {
        return Ok(()); // carried out by another thread while this one waited
    }
    let seq = inner.issue_seqs(1)?;
    // Not waited for: every write acknowledged after it makes the log
    // durable past it.
    let _ticket = inner.append_flush_now(seq)?;
    inner.flush_deadline.store(0, Ordering::Release);
    Ok(())
}

/// After a failed sync, tries to resume writes (see [`crate::log::Log::heal`]):
/// the unsynced records are copied to a new segment and the keydir is
/// pointed at the copies before writes are accepted again.
fn heal_log(inner: &Inner) {
    let Some(reason) = inner.log.sync_failure() else {
        return;
    };
    let (moved, synced) = match inner.log.heal() {
        Ok(healed) => healed,
        Err(error) => {
            tracing::warn!(%error, %reason, "writes still refused after a failed sync");
            return;
        }
    };
    for record in &moved {
        let hash = inner.keydir.hash(&record.key);
        let mut table = inner.keydir.partition(hash).write();
        let Some(entry) = table.find_mut(hash, |entry| entry.key() == record.key) else {
            continue;
        };
        if entry.cas() != record.seq || (entry.segment_id(), entry.offset()) != record.from {
            continue;
        }
        entry.set_location(record.to.0, record.to.1);
        if let Some(old) = inner.segments.get(record.from.0) {
            old.sub_live(record.record_len);
        }
        if let Some(new) = inner.segments.get(record.to.0) {
            new.add_live(record.record_len);
        }
    }
    inner.log.resume(synced);
    tracing::warn!(
        records = moved.len(),
        %reason,
        "writes resumed after a failed sync: unsynced records rewritten to a new segment"
    );
}

/// Removes items hidden by a flush from the keydir (their records become
/// dead bytes for compaction).
fn sweep_flushed(inner: &Inner) {
    let flush_seq = inner.flush_seq.load(Ordering::Acquire);
    if inner.flush_swept.load(Ordering::Acquire) >= flush_seq {
        return;
    }
    for index in 0..inner.keydir.len() {
        let mut table = inner.keydir.partition_at(index).write();
        let reclaimed = remove_where(inner, &mut table, |entry| entry.cas() < flush_seq);
        inner
            .counters
            .reclaimed_items
            .fetch_add(reclaimed, Ordering::Relaxed);
    }
    inner.flush_swept.fetch_max(flush_seq, Ordering::AcqRel);
}

fn remove_where(
    inner: &Inner,
    table: &mut Table,
    dead: impl Fn(&crate::keydir::Entry) -> bool,
) -> u64 {
    let mut removed = 0;
    table.retain(|entry| {
        if !dead(entry) {
            return true;
        }
        inner.release_entry(entry);
        removed += 1;
        false
    });
    inner.counters.items.fetch_sub(removed, Ordering::Relaxed);
    removed
}

/// Reclaims expired items: each gets a tombstone in the log (so no older
/// put of the key can come back at recovery) and leaves the keydir.
/// Partitions that hold no item with an expiry time are passed over without
/// a walk ([`Keydir::may_expire`](crate::keydir::Keydir::may_expire)): a walk
/// costs a cache miss per item, which for a million items that never expire
/// kept about 1.3% of a CPU busy on an idle server.
fn sweep_expired(inner: &Inner) {
    let now = inner.clock.now();
    let partitions = inner.keydir.len();
    for _ in 0..EXPIRY_PARTITIONS_PER_TICK.min(partitions) {
        let index = inner.expiry_hand.fetch_add(1, Ordering::Relaxed) % partitions;
        if !inner.keydir.may_expire(index) {
            continue;
        }
        let mut table = inner.keydir.partition_at(index).write();
        inner.counters.expiry_walks.fetch_add(1, Ordering::Relaxed);
        let mut unexpired = 0usize;
        let expired: Vec<Vec<u8>> = table
            .iter()
            .filter(|entry| match entry.exptime() {
                0 => false,
                exptime if crate::clock::is_expired(exptime, now) => true,
                _ => {
                    unexpired += 1;
                    false
                }
            })
            .take(EXPIRED_PER_PARTITION_MAX)
            .map(|entry| entry.key().to_vec())
            .collect();
        // Only a whole walk (not cut off by the cap) counts every entry.
        let none_left = unexpired == 0 && expired.len() < EXPIRED_PER_PARTITION_MAX;
        if !expired.is_empty() && !remove_expired(inner, &mut table, &expired) {
            return;
        }
        if none_left {
            inner.keydir.none_expire(index);
        }
    }
}

/// Logs a delete for each of `keys`, all in one append (so the sweep takes
/// the log lock once per partition, not once per key, while it holds the
/// partition's write lock), and removes their entries from `table`.
/// Returns false if the log refuses the append, having changed nothing
/// but the seqs it issued (a gap in them is harmless).
fn remove_expired(inner: &Inner, table: &mut Table, keys: &[Vec<u8>]) -> bool {
    if inner.log.check_writable().is_err() {
        return false;
    }
    let Ok(first_seq) = inner.issue_seqs(keys.len() as u64) else {
        return false;
    };
    let headers: Vec<Header> = keys
        .iter()
        .zip(first_seq..)
        .map(|(key, seq)| Header::delete(key.len() as u16, seq))
        .collect();
    let total = headers.iter().map(Header::record_len).sum();
    let appended = inner.log.append(total, |buf, _| {
        for (header, key) in headers.iter().zip(keys) {
            crate::record::encode(buf, header, key, &[]);
        }
    });
    let Ok((segment, _, ticket)) = appended else {
        return false;
    };
    for (header, key) in headers.iter().zip(keys) {
        segment.note_seq(header.seq);
        let hash = inner.keydir.hash(key);
        let found = table.find_entry(hash, |entry| entry.key() == &key[..]).ok();
        // Noted for readers too: the entry may be an unsynced put of an
        // expired value, which a miss after this removal still answers.
        if inner.drop_deleted(hash, ticket, found) {
            inner
                .counters
                .reclaimed_items
                .fetch_add(1, Ordering::Relaxed);
        }
    }
    true
}

/// Drops cached values (keys and locations stay) until the cache is under
/// budget, sparing values read since the last pass (a clock sweep) and
/// values whose record may not yet be on disk.
fn trim_cache(inner: &Inner) {
    let budget = inner.cache_budget.load(Ordering::Relaxed);
    if inner.counters.cached_bytes.load(Ordering::Relaxed) <= budget {
        return;
    }
    let target = budget - budget / 10;
    let partitions = inner.keydir.len();
    for _ in 0..partitions * 2 {
        if inner.counters.cached_bytes.load(Ordering::Relaxed) <= target {
            return;
        }
        let index = inner.cache_hand.fetch_add(1, Ordering::Relaxed) % partitions;
        let mut table = inner.keydir.partition_at(index).write();
        // Read under the partition lock: a put is appended before it is
        // installed under this lock, so no entry here points past the log's
        // active segment as it is now. Read before the lock, a rotation in
        // between would make a new active segment look sealed and written,
        // and a value not yet in its file would be dropped.
        let active_id = inner.log.active_id();
        let stable = inner.log.stable_lsn();
        for entry in table.iter_mut() {
            if !entry.is_cached() {
                continue;
            }
            if entry.bits().fetch_and(!BIT_REFERENCED, Ordering::Relaxed) & BIT_REFERENCED != 0 {
                continue;
            }
            let end = u64::from(entry.offset()) + entry.record_len();
            if entry.segment_id() == active_id && lsn(active_id, end) > stable {
                continue;
            }
            entry.uncache();
            inner
                .counters
                .cached_bytes
                .fetch_sub(u64::from(entry.value_len()), Ordering::Relaxed);
            inner
                .counters
                .cache_evictions
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}
