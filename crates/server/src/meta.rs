//! The meta protocol's commands (mg, ms, md, ma, me), each a method of
//! [`Session`]. Replies carry the requested return flags in request order,
//! then the markers `W` (you win: recache this item), `X` (stale) and `Z`
//! (another client already won), in memcached's order.

use crate::session::Session;
use larder_engine::{
    Arith, ArithOutcome, DeleteOutcome, Item, ReadOptions, StoreMode, StoreOutcome, Ticket,
};
use larder_protocol::reply::meta::{ItemInfo, MetaDebugLine, MetaLine, MetaStatus};
use larder_protocol::reply::{self, VALUE_TRAILER};
use larder_protocol::request::{
    MetaArithmetic, MetaArithmeticMode, MetaDebug, MetaDelete, MetaFlags, MetaGet, MetaKey,
    MetaSet, MetaSetMode,
};

/// memcached's reply to ma on a value that is not a number.
const NON_NUMERIC: &[u8] = b"cannot increment or decrement non-numeric value";

impl Session {
    /// What an item tells the return flags.
    fn item_info(&self, item: &Item) -> ItemInfo {
        let now = self.now();
        ItemInfo {
            cas: Some(item.cas),
            client_flags: Some(item.flags),
            size: Some(item.value.len() as u64),
            ttl_secs: Some(ttl_secs(item.exptime, now)),
            hit_before: Some(item.fetched_before),
            last_access_secs: Some(u64::from(now.saturating_sub(item.last_access))),
        }
    }

    /// A status line with the return flags that a miss or a write can
    /// answer (`O`, `k`, and `c` when a cas is known).
    fn meta_status(
        &mut self,
        status: MetaStatus,
        key: &MetaKey<'_>,
        flags: &MetaFlags<'_>,
        cas: Option<u64>,
    ) {
        let info = ItemInfo {
            cas,
            ..ItemInfo::default()
        };
        let mut line = MetaLine::status(&mut self.output, status);
        line.return_flags(flags, key, &info);
        line.finish();
    }

    /// The status line of an `ms` or `md` whose engine call returned
    /// `ticket`: an acknowledgement if it stored or deleted (hidden by `q`,
    /// which hides `HD` only), and so is a failure whose ticket is that of
    /// unsynced writes it saw.
    fn meta_write_status(
        &mut self,
        status: MetaStatus,
        key: &MetaKey<'_>,
        flags: &MetaFlags<'_>,
        cas: Option<u64>,
        ticket: Ticket,
    ) {
        if flags.quiet && status == MetaStatus::Header {
            return self.ack_quietly();
        }
        let start = self.output.len();
        self.meta_status(status, key, flags, cas);
        if status == MetaStatus::Header || ticket != Ticket::NONE {
            self.ack_since(start);
        }
    }

    /// mg.
    pub(crate) fn meta_get(&mut self, get: &MetaGet<'_>) {
        self.counts.cmd_meta.add(1);
        let key_bytes = get.key.bytes();
        let key: &[u8] = &key_bytes;
        let flags = &get.flags;
        let options = ReadOptions {
            touch: flags.ttl.map(|ttl| self.expiry(ttl)),
            recache_below_secs: flags.recache_ttl.map(|ttl| ttl.max(0) as u32),
            claim_win: true,
            no_bump: flags.no_lru_bump,
        };
        // The ticket of a touch, or of unsynced writes the read saw: the
        // reply waits for it like an acknowledgement.
        let (found, mut seen) = match self.engine().get_with(key, options) {
            Ok(read) => read,
            Err(error) => return self.engine_error(&error),
        };
        let start = self.output.len();
        let item = match (found, flags.vivify_ttl) {
            (Some(item), _) => Some(item),
            // memcached gives a created item the `T` TTL over the `N` one.
            (None, Some(ttl)) => match self.vivify(key, flags.ttl.unwrap_or(ttl), options) {
                Ok((item, ticket)) => {
                    seen = seen.max(ticket);
                    item
                }
                Err(error) => return self.engine_error(&error),
            },
            (None, None) => None,
        };
        let Some(item) = item else {
            self.counts.cmd_get.add(1);
            self.counts.get_misses.add(1);
            if !flags.quiet {
                self.meta_status(MetaStatus::Miss, &get.key, flags, None);
                self.ack_seen(start, seen);
            } else if seen != Ticket::NONE {
                self.wrote(seen);
                self.ack_quietly();
            }
            return;
        };
        // As in memcached, a hit with `T` counts as a touch, not a get.
        if flags.ttl.is_some() {
            self.counts.cmd_touch.add(1);
            self.counts.touch_hits.add(1);
        } else {
            self.counts.cmd_get.add(1);
            self.counts.get_hits.add(1);
        }
        let info = self.item_info(&item);
        let mut line = if flags.return_value {
            MetaLine::value(&mut self.output, item.value.len())
        } else {
            MetaLine::status(&mut self.output, MetaStatus::Header)
        };
        line.return_flags(flags, &get.key, &info);
        if item.win_already_sent {
            line.flag(b'Z');
        }
        if item.stale {
            line.flag(b'X');
        }
        if item.win {
            line.flag(b'W');
        }
        line.finish();
        if flags.return_value {
            self.output.extend_from_slice(&item.value);
            self.output.extend_from_slice(VALUE_TRAILER);
        }
        self.ack_seen(start, seen);
    }

    /// Creates an empty item on a miss (`mg … N<ttl>`); the creator wins.
    /// Returns the item and the ticket its reply waits for.
    fn vivify(
        &mut self,
        key: &[u8],
        ttl: i32,
        options: ReadOptions,
    ) -> Result<(Option<Item>, Ticket), larder_engine::Error> {
        let expiry = self.expiry(ttl);
        let (created, ticket) = self.engine().vivify(key, expiry, options)?;
        if let Some(item) = created {
            self.counts.total_items.add(1);
            return Ok((Some(item), ticket));
        }
        // Another client made it since this one missed: read it as the hit
        // the request would have had.
        let (item, seen) = self.engine().get_with(key, options)?;
        Ok((item, ticket.max(seen)))
    }

    /// ms.
    pub(crate) fn meta_set(&mut self, set: &MetaSet<'_>) {
        self.counts.cmd_meta.add(1);
        self.counts.cmd_set.add(1);
        let key_bytes = set.key.bytes();
        let key: &[u8] = &key_bytes;
        let flags = &set.flags;
        // As memcached: a CAS unique makes a set or a replace a `cas`; an
        // append or a prepend compares one that is not 0; an add ignores it.
        let mode = match (set.mode, flags.compare_cas) {
            (MetaSetMode::Set | MetaSetMode::Replace, Some(cas)) if flags.invalidate => {
                StoreMode::CasOrStale(cas)
            }
            (MetaSetMode::Set | MetaSetMode::Replace, Some(cas)) => StoreMode::Cas(cas),
            (MetaSetMode::Set, None) => StoreMode::Set,
            (MetaSetMode::Replace, None) => StoreMode::Replace,
            (MetaSetMode::Add, _) => StoreMode::Add,
            (MetaSetMode::Append, Some(cas)) if cas != 0 => StoreMode::AppendIfCas(cas),
            (MetaSetMode::Append, _) => StoreMode::Append,
            (MetaSetMode::Prepend, Some(cas)) if cas != 0 => StoreMode::PrependIfCas(cas),
            (MetaSetMode::Prepend, _) => StoreMode::Prepend,
        };
        let expiry = self.expiry(flags.ttl.unwrap_or(0));
        let client_flags = flags.client_flags.unwrap_or(0);
        let (outcome, ticket) =
            match self
                .engine()
                .store(mode, key, set.value, client_flags, expiry)
            {
                Ok(done) => done,
                Err(error) => return self.engine_error(&error),
            };
        self.wrote(ticket);
        self.count_store(outcome, mode);
        // memcached's `c` on a store that failed gives the CAS unique of the
        // item it did not store: 0.
        let (status, cas) = match outcome {
            StoreOutcome::Stored { cas } => (MetaStatus::Header, Some(cas)),
            StoreOutcome::NotStored => (MetaStatus::NotStored, Some(0)),
            StoreOutcome::Exists => (MetaStatus::Exists, Some(0)),
            StoreOutcome::NotFound => (MetaStatus::NotFound, Some(0)),
        };
        self.meta_write_status(status, &set.key, flags, cas, ticket);
    }

    /// md.
    pub(crate) fn meta_delete(&mut self, delete: &MetaDelete<'_>) {
        self.counts.cmd_meta.add(1);
        let key_bytes = delete.key.bytes();
        let key: &[u8] = &key_bytes;
        let flags = &delete.flags;
        let result = if flags.invalidate {
            let expiry = flags.ttl.map(|ttl| self.expiry(ttl));
            self.engine().invalidate(key, flags.compare_cas, expiry)
        } else {
            self.engine().delete(key, flags.compare_cas)
        };
        let (outcome, ticket) = match result {
            Ok(done) => done,
            Err(error) => return self.engine_error(&error),
        };
        self.wrote(ticket);
        let status = match outcome {
            DeleteOutcome::Deleted => {
                self.counts.delete_hits.add(1);
                MetaStatus::Header
            }
            DeleteOutcome::NotFound => {
                self.counts.delete_misses.add(1);
                MetaStatus::NotFound
            }
            DeleteOutcome::Exists => MetaStatus::Exists,
        };
        self.meta_write_status(status, &delete.key, flags, None, ticket);
    }

    /// ma.
    pub(crate) fn meta_arithmetic(&mut self, arith: &MetaArithmetic<'_>) {
        self.counts.cmd_meta.add(1);
        let key_bytes = arith.key.bytes();
        let key: &[u8] = &key_bytes;
        let flags = &arith.flags;
        let incr = arith.mode == MetaArithmeticMode::Increment;
        let request = Arith {
            incr,
            delta: arith.delta,
            // memcached's `ma` compares a CAS unique only when it is not 0.
            cas: flags.compare_cas.filter(|&cas| cas != 0),
            initial: flags
                .vivify_ttl
                .map(|ttl| (flags.initial.unwrap_or(0), self.expiry(ttl))),
            expiry: flags.ttl.map(|ttl| self.expiry(ttl)),
            read_counter: larder_protocol::parse_counter,
        };
        let (outcome, ticket) = match self.engine().arith(key, request) {
            Ok(done) => done,
            Err(error) => return self.engine_error(&error),
        };
        self.wrote(ticket);
        self.count_arith(outcome, incr);
        let start = self.output.len();
        match outcome {
            ArithOutcome::Value {
                value,
                cas,
                created,
                exptime,
                ..
            } => return self.meta_arith_value(arith, value, cas, created, exptime),
            ArithOutcome::NotFound => {
                self.meta_status(MetaStatus::NotFound, &arith.key, flags, None)
            }
            ArithOutcome::Exists => self.meta_status(MetaStatus::Exists, &arith.key, flags, None),
            ArithOutcome::NonNumeric => reply::write_client_error(&mut self.output, NON_NUMERIC),
        }
        // The ticket of unsynced writes the failure saw.
        self.ack_seen(start, ticket);
    }

    /// The reply to an `ma` that changed or created the counter: `t` gives
    /// the expiry after the operation (its `T` included, whatever the order
    /// of the flags).
    fn meta_arith_value(
        &mut self,
        arith: &MetaArithmetic<'_>,
        value: u64,
        cas: u64,
        created: bool,
        exptime: u32,
    ) {
        let flags = &arith.flags;
        // As memcached, a quiet `ma` hides a success on an existing item,
        // its value too, but answers one that created the counter.
        if flags.quiet && !created {
            return self.ack_quietly();
        }
        let mut info = ItemInfo {
            cas: Some(cas),
            ..ItemInfo::default()
        };
        if flags.return_ttl {
            info.ttl_secs = Some(ttl_secs(exptime, self.now()));
        }
        let text = value.to_string();
        let start = self.output.len();
        let mut line = if flags.return_value {
            MetaLine::value(&mut self.output, text.len())
        } else {
            MetaLine::status(&mut self.output, MetaStatus::Header)
        };
        line.return_flags(flags, &arith.key, &info);
        line.finish();
        if flags.return_value {
            self.output.extend_from_slice(text.as_bytes());
            self.output.extend_from_slice(VALUE_TRAILER);
        }
        self.ack_since(start);
    }

    /// me: a debug line about an item.
    pub(crate) fn meta_debug(&mut self, debug: &MetaDebug<'_>) {
        self.counts.cmd_meta.add(1);
        let key_bytes = debug.key.bytes();
        let key: &[u8] = &key_bytes;
        // A look that leaves the item as it was, as memcached's `me` does: not
        // marked fetched, its last access kept.
        let options = ReadOptions {
            no_bump: true,
            ..ReadOptions::default()
        };
        let (item, seen) = match self.engine().get_with(key, options) {
            Ok(read) => read,
            Err(error) => return self.engine_error(&error),
        };
        let start = self.output.len();
        let Some(item) = item else {
            MetaLine::status(&mut self.output, MetaStatus::Miss).finish();
            return self.ack_seen(start, seen);
        };
        let info = self.item_info(&item);
        let mut line = MetaDebugLine::start(&mut self.output, key, debug.key.is_base64());
        line.field_i64(b"exp", info.ttl_secs.unwrap_or(-1));
        line.field_i64(b"la", info.last_access_secs.unwrap_or(0) as i64);
        line.field_i64(b"cas", item.cas as i64);
        line.field(b"fetch", if item.fetched_before { b"yes" } else { b"no" });
        line.field_i64(b"cls", 1);
        line.field_i64(b"size", (key.len() + item.value.len()) as i64);
        line.finish();
        self.ack_seen(start, seen);
    }
}

/// The seconds an item with absolute expiry `exptime` has left at `now`, as
/// the `t` flag gives them: -1 for never, 0 once past.
fn ttl_secs(exptime: u32, now: u32) -> i64 {
    if exptime == 0 {
        -1
    } else {
        i64::from(exptime.saturating_sub(now))
    }
}
