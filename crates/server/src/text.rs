//! The text protocol's commands, each a method of [`Session`].

use crate::limits::WRITE_BUFFER_BYTES_SOFT_MAX;
use crate::session::{Flow, Session};
use bytes::BytesMut;
use larder_engine::{
    Arith, ArithOutcome, DeleteOutcome, Error as EngineError, ReadOptions, StoreMode, StoreOutcome,
    Ticket,
};
use larder_protocol::reply::{self, Reply};
use larder_protocol::request::{
    Arithmetic, Delete, Direction, FlushAll, Retrieval, Stats, Store, StoreCommand, Touch,
};
use larder_protocol::RetrievalCommand;

/// memcached's reply to incr/decr on a value that is not a number.
const NON_NUMERIC: &[u8] = b"cannot increment or decrement non-numeric value";

impl Session {
    /// get, gets, gat, gats. A request for many keys stops once the
    /// replies pass [`WRITE_BUFFER_BYTES_SOFT_MAX`] and returns
    /// [`Flow::Unfinished`]; handed in again after they are sent, it carries
    /// on with the next key, so its replies are never all held at once (one
    /// `get` line can name the same 1 MiB value tens of thousands of times).
    pub(crate) fn retrieval(&mut self, get: &Retrieval<'_>) -> Flow {
        let with_cas = get.command.returns_cas();
        let touch = match get.command {
            RetrievalCommand::Gat | RetrievalCommand::Gats => {
                get.exptime.map(|exptime| self.expiry(exptime))
            }
            RetrievalCommand::Get | RetrievalCommand::Gets => None,
        };
        let options = ReadOptions {
            touch,
            ..ReadOptions::default()
        };
        let done = std::mem::take(&mut self.retrieval_keys_done);
        if std::mem::take(&mut self.retrieval_failed) {
            // Its replies so far became one SERVER_ERROR: that answered it.
            return Flow::Continue;
        }
        let start = self.output.len();
        let mut seen = Ticket::NONE;
        for (index, key) in get.keys.iter().enumerate().skip(done) {
            // Past the soft limit the keys left wait until the replies are
            // sent. Each pass answers its first key whatever the buffer
            // holds, so every pass moves on.
            if index > done && self.output.len() >= WRITE_BUFFER_BYTES_SOFT_MAX {
                self.retrieval_keys_done = index;
                self.retrieval_acked = seen != Ticket::NONE;
                self.ack_seen(start, seen);
                return Flow::Unfinished;
            }
            let found = self.get_one(key, options, with_cas);
            // As in memcached, a gat's keys count as touches, not gets.
            let counts = &self.counts;
            let (asked, hits, misses) = match touch {
                Some(_) => (&counts.cmd_touch, &counts.touch_hits, &counts.touch_misses),
                None => (&counts.cmd_get, &counts.get_hits, &counts.get_misses),
            };
            asked.add(1);
            match found {
                Ok((hit, ticket)) => {
                    if hit { hits } else { misses }.add(1);
                    seen = seen.max(ticket);
                }
                Err(error) => {
                    self.engine_error(&error);
                    self.ack_seen(start, seen);
                    return Flow::Continue;
                }
            }
        }
        reply::write_reply(&mut self.output, Reply::End);
        self.ack_seen(start, seen);
        Flow::Continue
    }

    /// Looks `key` up and appends its `VALUE` reply if it is there; returns
    /// whether it was, and the ticket to commit before the reply is sent (a
    /// `gat`'s touch, or unsynced writes the read saw).
    ///
    /// The value goes straight from where the engine holds it into the
    /// reply, under its partition's read lock, when the reply buffer has
    /// room for it. When it has not, the value is copied out and written
    /// after the lock is released: growing the buffer copies everything
    /// already in it, which must not hold up the partition's writers.
    fn get_one(
        &mut self,
        key: &[u8],
        options: ReadOptions,
        with_cas: bool,
    ) -> Result<(bool, Ticket), EngineError> {
        let output = &mut self.output;
        let mut too_large = None;
        let (found, ticket) = self.shared.engine.get_visit(key, options, |item, value| {
            let cas = with_cas.then_some(item.cas);
            let room = output.capacity() - output.len();
            if key.len() + value.len() + reply::VALUE_REPLY_OVERHEAD_BYTES_MAX <= room {
                reply::write_value(output, key, item.flags, value, cas);
            } else {
                too_large = Some((item.flags, cas, value.to_vec()));
            }
        })?;
        if let Some((flags, cas, value)) = too_large {
            reply::write_value(output, key, flags, &value, cas);
        }
        Ok((found.is_some(), ticket))
    }

    /// set, add, replace, append, prepend, cas.
    pub(crate) fn store(&mut self, store: &Store<'_>) {
        self.counts.cmd_set.add(1);
        let mode = match store.command {
            StoreCommand::Set => StoreMode::Set,
            StoreCommand::Add => StoreMode::Add,
            StoreCommand::Replace => StoreMode::Replace,
            StoreCommand::Append => StoreMode::Append,
            StoreCommand::Prepend => StoreMode::Prepend,
            StoreCommand::Cas => StoreMode::Cas(store.cas_unique.unwrap_or_default()),
        };
        let expiry = self.expiry(store.exptime);
        let result = self
            .engine()
            .store(mode, store.key, store.value, store.flags, expiry);
        let outcome = match result {
            Ok((outcome, ticket)) => {
                self.wrote(ticket);
                outcome
            }
            Err(error) => return self.engine_error(&error),
        };
        self.count_store(outcome, mode);
        let answer = match outcome {
            StoreOutcome::Stored { .. } => Reply::Stored,
            StoreOutcome::NotStored => Reply::NotStored,
            StoreOutcome::Exists => Reply::Exists,
            StoreOutcome::NotFound => Reply::NotFound,
        };
        if !store.noreply {
            self.ack(|out| reply::write_reply(out, answer));
        }
    }

    /// delete.
    pub(crate) fn delete(&mut self, delete: &Delete<'_>) {
        let outcome = match self.engine().delete(delete.key, None) {
            Ok((outcome, ticket)) => {
                self.wrote(ticket);
                outcome
            }
            Err(error) => return self.engine_error(&error),
        };
        let answer = if outcome == DeleteOutcome::Deleted {
            self.counts.delete_hits.add(1);
            Reply::Deleted
        } else {
            self.counts.delete_misses.add(1);
            Reply::NotFound
        };
        if !delete.noreply {
            self.ack(|out| reply::write_reply(out, answer));
        }
    }

    /// incr, decr.
    pub(crate) fn arithmetic(&mut self, arith: &Arithmetic<'_>) {
        let incr = arith.direction == Direction::Increment;
        let request = Arith {
            incr,
            delta: arith.delta,
            cas: None,
            initial: None,
            expiry: None,
            read_counter: larder_protocol::parse_counter,
        };
        let outcome = match self.engine().arith(arith.key, request) {
            Ok((outcome, ticket)) => {
                self.wrote(ticket);
                outcome
            }
            Err(error) => return self.engine_error(&error),
        };
        self.count_arith(outcome, incr);
        if arith.noreply {
            return;
        }
        // Every outcome answers the write or the unsynced writes it saw.
        self.ack(|out| match outcome {
            ArithOutcome::Value { value, .. } => reply::write_number(out, value),
            ArithOutcome::NotFound | ArithOutcome::Exists => {
                reply::write_reply(out, Reply::NotFound);
            }
            ArithOutcome::NonNumeric => reply::write_client_error(out, NON_NUMERIC),
        });
    }

    /// touch.
    pub(crate) fn touch(&mut self, touch: &Touch<'_>) {
        self.counts.cmd_touch.add(1);
        let expiry = self.expiry(touch.exptime);
        let found = match self.engine().touch(touch.key, expiry) {
            Ok((found, ticket)) => {
                self.wrote(ticket);
                found
            }
            Err(error) => return self.engine_error(&error),
        };
        if found {
            self.counts.touch_hits.add(1);
        } else {
            self.counts.touch_misses.add(1);
        }
        if !touch.noreply {
            let answer = if found {
                Reply::Touched
            } else {
                Reply::NotFound
            };
            self.ack(|out| reply::write_reply(out, answer));
        }
    }

    /// flush_all [delay].
    pub(crate) fn flush_all(&mut self, flush: &FlushAll) {
        self.counts.cmd_flush.add(1);
        let delay_secs = flush_delay_secs(flush.delay.map(i64::from), self.now());
        match self.engine().flush_all(delay_secs) {
            Ok(ticket) => self.wrote(ticket),
            Err(error) => return self.engine_error(&error),
        }
        if !flush.noreply {
            self.ack(|out| reply::write_reply(out, Reply::Ok));
        }
    }

    /// stats [group].
    pub(crate) fn stats(&mut self, stats: &Stats<'_>) {
        let mut out = std::mem::take(&mut self.output);
        let known = self.write_stats_group(stats.group(), &mut out);
        self.output = out;
        let end = match stats.group() {
            _ if !known => Reply::Error,
            Some(b"reset") => Reply::Reset,
            _ => Reply::End,
        };
        reply::write_reply(&mut self.output, end);
    }

    /// Writes the `STAT` lines of `group` (the general figures for none),
    /// without the `END`; `reset` resets the counters and writes nothing.
    /// Returns `false` for a group there is none of.
    pub(crate) fn write_stats_group(&self, group: Option<&[u8]>, out: &mut BytesMut) -> bool {
        let shared = &self.shared;
        match group {
            None => shared
                .stats
                .write_general(&shared.config, &shared.engine, out),
            Some(b"settings") => shared
                .stats
                .write_settings(&shared.config, &shared.engine, out),
            Some(b"items") => shared.stats.write_items(&shared.engine.stats(), out),
            Some(b"segments") => shared.stats.write_segments(&shared.engine.stats(), out),
            Some(b"reset") => {
                let engine = &shared.engine;
                shared
                    .stats
                    .counts
                    .reset(|| crate::stats::EngineCounts::of(engine));
            }
            // memcached keeps item sizes only when started with them on.
            Some(b"sizes") => reply::write_stat(out, b"sizes_status", b"disabled"),
            Some(b"conns") => shared.stats.conns.write(self.now(), out),
            Some(b"slabs") => {}
            Some(_) => return false,
        }
        true
    }
}

impl Session {
    /// `cache_memlimit`: the value cache's limit, as `-m` sets it at start.
    /// As memcached, Larder refuses less than 8 MiB, and more than a
    /// billion, which is likely a number of bytes sent by mistake.
    pub(crate) fn cache_memlimit(&mut self, limit: larder_protocol::CacheMemlimit) {
        let refusal: Option<&[u8]> = if limit.megabytes > CACHE_MEMLIMIT_MAX_MB {
            Some(b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n")
        } else if limit.megabytes < CACHE_MEMLIMIT_MIN_MB {
            Some(b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n")
        } else {
            None
        };
        if let Some(refusal) = refusal {
            if !limit.noreply {
                self.output.extend_from_slice(refusal);
            }
            return;
        }
        let bytes = u64::from(limit.megabytes) << 20;
        self.shared.engine.set_cache_bytes_max(bytes);
        if !limit.noreply {
            reply::write_reply(&mut self.output, Reply::Ok);
        }
    }

    /// `lru_crawler metadump`: memcached's line for each live item, one
    /// keydir partition (1/256 of the keys) at a time, sent in parts once
    /// the replies pass [`WRITE_BUFFER_BYTES_SOFT_MAX`] (as a `get` of many
    /// keys is answered), so that a part holds that and one partition's
    /// lines at most. Under a partition's read lock its items are only
    /// copied out; the lines are written after it is let go. An item
    /// written while the listing runs may be listed or not; one that lives
    /// throughout is listed once. As a read's answer, each part waits under
    /// `always` for the sync of the writes it lists, and should that sync
    /// fail, becomes a `SERVER_ERROR` that ends the listing.
    pub(crate) fn metadump(&mut self) -> Flow {
        let engine = std::sync::Arc::clone(&self.shared.engine);
        let done = std::mem::take(&mut self.dump_partitions_done);
        if std::mem::take(&mut self.dump_failed) {
            // Its lines so far became one SERVER_ERROR: that answered it.
            return Flow::Continue;
        }
        let start = self.output.len();
        let mut seen = Ticket::NONE;
        let (mut keys, mut items) = (Vec::new(), Vec::new());
        for index in done..engine.partitions() {
            // Each pass lists its first partition whatever the buffer
            // holds, so every pass moves on.
            if index > done && self.output.len() >= WRITE_BUFFER_BYTES_SOFT_MAX {
                self.dump_partitions_done = index;
                self.dump_acked = seen != Ticket::NONE;
                self.ack_seen(start, seen);
                return Flow::Unfinished;
            }
            keys.clear();
            items.clear();
            let ticket = engine.walk_partition(index, |key, item, size| {
                items.push((keys.len(), key.len(), item.clone(), size));
                keys.extend_from_slice(key);
            });
            seen = seen.max(ticket);
            for (at, len, item, size) in &items {
                let key = keys.get(*at..at + len).unwrap_or_default();
                write_metadump_line(&mut self.output, key, item, *size);
            }
        }
        reply::write_reply(&mut self.output, Reply::End);
        self.ack_seen(start, seen);
        Flow::Continue
    }
}

/// The smallest `cache_memlimit` taken, in MiB (memcached's).
const CACHE_MEMLIMIT_MIN_MB: u32 = 8;
/// The largest `cache_memlimit` taken, in MiB (memcached's).
const CACHE_MEMLIMIT_MAX_MB: u32 = 1_000_000_000;

/// One item's `lru_crawler metadump` line, as memcached writes it: the key
/// percent-encoded (all but letters, digits and `-._~`), the expiry and
/// last access as unix times (`exp=-1` for none), whether it was fetched,
/// its class (Larder has one) and its size (Larder's: its record's bytes
/// on disk).
fn write_metadump_line(
    out: &mut bytes::BytesMut,
    key: &[u8],
    item: &larder_engine::Item,
    size: u64,
) {
    use std::fmt::Write;
    // Writing to memory cannot fail.
    let _ = out.write_str("key=");
    for &byte in key {
        let _ = if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.write_char(char::from(byte))
        } else {
            write!(out, "%{byte:02X}")
        };
    }
    let exp = match item.exptime {
        0 => -1,
        at => i64::from(at),
    };
    let fetch = if item.fetched_before { "yes" } else { "no" };
    let (la, cas) = (item.last_access, item.cas);
    let _ = writeln!(
        out,
        " exp={exp} la={la} cas={cas} fetch={fetch} cls=1 size={size}"
    );
}

/// The seconds from `now` until a `flush_all` with `delay` (relative
/// seconds, or a unix time past 30 days, as an exptime) takes effect, 0 for
/// at once. memcached flushes what was stored up to and including the second
/// before the delay ends (its `oldest_live` is that second minus one), so
/// `flush_all 1` acts at once and `flush_all 2` at the next second's turn:
/// one second less than the delay.
pub(crate) fn flush_delay_secs(delay: Option<i64>, now: u32) -> u32 {
    match delay {
        Some(delay) if delay > 0 => match larder_engine::Expiry::from_memcached(delay, now) {
            larder_engine::Expiry::At(at) => at.saturating_sub(now).saturating_sub(1),
            _ => 0,
        },
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::flush_delay_secs;

    #[test]
    fn a_flush_delay_takes_effect_a_second_sooner_as_in_memcached() {
        let now = 1_800_000_000;
        assert_eq!(flush_delay_secs(None, now), 0);
        assert_eq!(flush_delay_secs(Some(0), now), 0);
        assert_eq!(flush_delay_secs(Some(-5), now), 0);
        assert_eq!(flush_delay_secs(Some(1), now), 0);
        assert_eq!(flush_delay_secs(Some(2), now), 1);
        assert_eq!(flush_delay_secs(Some(60), now), 59);
        // A unix time: seconds until it, less one; one already past is now.
        let at = i64::from(now + 10);
        assert_eq!(flush_delay_secs(Some(at), now), 9);
        let past = i64::from(now - 10);
        assert_eq!(flush_delay_secs(Some(past), now), 0);
        // The binary protocol's delay is unsigned: past 2038 is later still.
        let late = i64::from(u32::MAX);
        assert_eq!(flush_delay_secs(Some(late), now), u32::MAX - now - 1);
    }
}
