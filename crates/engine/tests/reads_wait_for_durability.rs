//! Under `always`, nothing a client is told may be taken back by a power
//! cut: not its own write's acknowledgement, and not what it read of
//! another client's write either. A write is visible as soon as it is in
//! the log's buffer, before its sync, so a read, and a write that changed
//! nothing because of what it found (`add` of a key that exists, `incr` of
//! a key just deleted), returns the ticket of every unsynced record it may
//! have seen; committing it before answering makes what the answer says
//! durable. Under the other modes writes are acknowledged before they are
//! synced, and a read's ticket is always `NONE`.

#![allow(clippy::unwrap_used)]

mod common;

use common::{config, incr_by_one, open, set, value};
use larder_engine::fs::MemFs;
use larder_engine::{
    ArithOutcome, Clock, DeleteOutcome, Durability, Engine, Expiry, ReadOptions, StoreMode,
    StoreOutcome, Ticket,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};

/// Stores without committing; returns the write's ticket.
fn store_unsynced(engine: &Engine, mode: StoreMode, key: &[u8], value: &[u8]) -> Ticket {
    let (outcome, ticket) = engine.store(mode, key, value, 0, Expiry::Never).unwrap();
    assert!(
        matches!(outcome, StoreOutcome::Stored { .. }),
        "{outcome:?}"
    );
    assert_ne!(ticket, Ticket::NONE);
    ticket
}

/// A read without touch: the value found, and the read's ticket.
fn read(engine: &Engine, key: &[u8]) -> (Option<Vec<u8>>, Ticket) {
    let (item, ticket) = engine.get_with(key, ReadOptions::default()).unwrap();
    (item.map(|item| item.value.to_vec()), ticket)
}

/// `ticket` covers the write whose ticket is `write`.
#[track_caller]
fn covers(ticket: Ticket, write: Ticket) {
    assert_ne!(
        ticket,
        Ticket::NONE,
        "an answer that saw an unsynced write does not wait for it"
    );
    assert!(ticket >= write, "{ticket:?} does not cover {write:?}");
}

#[test]
fn a_value_read_before_its_sync_is_durable_once_the_read_commits_its_ticket() {
    let fs = MemFs::new();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &Clock::system());
    set(&engine, b"k", b"durable");

    let write = store_unsynced(&engine, StoreMode::Set, b"k", b"read by another client");
    let (found, ticket) = read(&engine, b"k");
    assert_eq!(found.unwrap(), b"read by another client");
    covers(ticket, write);
    engine.commit(ticket).unwrap();
    // What the reader was told survives a power cut, though its writer
    // never committed.
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &Clock::system());
    assert_eq!(value(&engine, b"k").unwrap(), b"read by another client");

    // Without the read's commit the same cut takes the value back: the
    // ticket was what stood between the reader and a value that never was.
    let _ = store_unsynced(&engine, StoreMode::Set, b"k", b"never durable");
    let (found, _ticket) = read(&engine, b"k");
    assert_eq!(found.unwrap(), b"never durable");
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &Clock::system());
    assert_eq!(value(&engine, b"k").unwrap(), b"read by another client");
}

#[test]
fn misses_and_refusals_wait_for_the_unsynced_writes_that_caused_them() {
    let fs = MemFs::new();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &Clock::system());
    for key in [&b"gone"[..], b"new", b"text", b"expiring", b"flushed"] {
        set(&engine, key, b"1");
    }

    // A delete not yet synced: everything that finds the key missing.
    let (outcome, delete) = engine.delete(b"gone", None).unwrap();
    assert_eq!(outcome, DeleteOutcome::Deleted);
    assert_eq!(read(&engine, b"gone").0, None);
    covers(read(&engine, b"gone").1, delete);
    let missing = |mode| {
        let (outcome, ticket) = engine.store(mode, b"gone", b"x", 0, Expiry::Never).unwrap();
        assert!(
            matches!(outcome, StoreOutcome::NotStored | StoreOutcome::NotFound),
            "{outcome:?}"
        );
        ticket
    };
    covers(missing(StoreMode::Replace), delete);
    covers(missing(StoreMode::Append), delete);
    covers(missing(StoreMode::Cas(1)), delete);
    let (outcome, ticket) = engine.arith(b"gone", incr_by_one()).unwrap();
    assert_eq!(outcome, ArithOutcome::NotFound);
    covers(ticket, delete);
    let (touched, ticket) = engine.touch(b"gone", Expiry::Never).unwrap();
    assert!(!touched);
    covers(ticket, delete);
    let (outcome, ticket) = engine.delete(b"gone", None).unwrap();
    assert_eq!(outcome, DeleteOutcome::NotFound);
    covers(ticket, delete);
    let (outcome, ticket) = engine.invalidate(b"gone", None, None).unwrap();
    assert_eq!(outcome, DeleteOutcome::NotFound);
    covers(ticket, delete);

    // A put not yet synced: everything refused because the key is there.
    let put = store_unsynced(&engine, StoreMode::Set, b"new", b"2");
    let (outcome, ticket) = engine
        .store(StoreMode::Add, b"new", b"x", 0, Expiry::Never)
        .unwrap();
    assert_eq!(outcome, StoreOutcome::NotStored);
    covers(ticket, put);
    let (outcome, ticket) = engine
        .store(StoreMode::Cas(1), b"new", b"x", 0, Expiry::Never)
        .unwrap();
    assert_eq!(outcome, StoreOutcome::Exists);
    covers(ticket, put);
    let (outcome, ticket) = engine.delete(b"new", Some(1)).unwrap();
    assert_eq!(outcome, DeleteOutcome::Exists);
    covers(ticket, put);
    let (created, ticket) = engine
        .vivify(b"new", Expiry::Never, ReadOptions::default())
        .unwrap();
    assert!(created.is_none());
    covers(ticket, put);
    let put = store_unsynced(&engine, StoreMode::Set, b"text", b"not a number");
    let (outcome, ticket) = engine.arith(b"text", incr_by_one()).unwrap();
    assert_eq!(outcome, ArithOutcome::NonNumeric);
    covers(ticket, put);

    // A touch that expired the item: the entry is there, not live.
    let (touched, touch) = engine.touch(b"expiring", Expiry::At(1)).unwrap();
    assert!(touched);
    assert_eq!(read(&engine, b"expiring").0, None);
    covers(read(&engine, b"expiring").1, touch);

    // A flush: every key of every partition.
    let flush = engine.flush_all(0).unwrap();
    assert_eq!(read(&engine, b"flushed").0, None);
    covers(read(&engine, b"flushed").1, flush);
    covers(read(&engine, b"never stored").1, flush);

    // Every one of those 19 answers is counted, once.
    assert_eq!(engine.stats().unsynced_seen, 19);

    // Once synced there is nothing to wait for.
    engine.sync().unwrap();
    let counted = engine.stats().unsynced_seen;
    for key in [&b"gone"[..], b"new", b"text", b"expiring", b"flushed"] {
        assert_eq!(read(&engine, key).1, Ticket::NONE);
    }
    let (outcome, ticket) = engine
        .store(StoreMode::Replace, b"gone", b"x", 0, Expiry::Never)
        .unwrap();
    assert_eq!((outcome, ticket), (StoreOutcome::NotStored, Ticket::NONE));
    assert_eq!(engine.stats().unsynced_seen, counted);
}

#[test]
fn a_value_in_a_sealed_segment_or_a_compaction_output_has_nothing_to_wait_for() {
    let fs = MemFs::new();
    let mut config = config(Durability::Always);
    config.segment_bytes_max = 4096;
    let engine = open(&fs, &config, &Clock::system());
    let keys = common::keys(200);
    for round in 0..3u8 {
        for key in &keys {
            let _ = store_unsynced(&engine, StoreMode::Set, key, &[round; 40]);
        }
    }
    engine.sync().unwrap();
    engine.compact_now(0.0).unwrap();
    // Compaction outputs have ids above the active segment's: a ticket
    // into one would wait for a sync that never covers it.
    for key in &keys {
        let (found, ticket) = read(&engine, key);
        assert_eq!(found.unwrap(), [2u8; 40]);
        assert_eq!(ticket, Ticket::NONE);
    }
    // An unsynced write in the active segment is covered; once a rotation
    // has sealed (and so synced) its segment, there is nothing to wait for.
    let write = store_unsynced(&engine, StoreMode::Set, b"late", b"v");
    covers(read(&engine, b"late").1, write);
    for key in &keys {
        let _ = store_unsynced(&engine, StoreMode::Set, key, &[3u8; 40]);
    }
    assert_eq!(read(&engine, b"late").1, Ticket::NONE, "sealed, so synced");
}

#[test]
fn under_everysec_and_none_reads_have_nothing_to_wait_for() {
    for durability in [Durability::EverySec, Durability::None] {
        let fs = MemFs::new();
        let engine = open(&fs, &config(durability), &Clock::system());
        set(&engine, b"gone", b"1");
        let (_, delete) = engine.delete(b"gone", None).unwrap();
        assert_ne!(delete, Ticket::NONE);
        let _ = store_unsynced(&engine, StoreMode::Set, b"k", b"v");
        assert_eq!(read(&engine, b"k"), (Some(b"v".to_vec()), Ticket::NONE));
        assert_eq!(read(&engine, b"gone"), (None, Ticket::NONE));
        let (outcome, ticket) = engine
            .store(StoreMode::Add, b"k", b"x", 0, Expiry::Never)
            .unwrap();
        assert_eq!((outcome, ticket), (StoreOutcome::NotStored, Ticket::NONE));
        assert_eq!(engine.stats().unsynced_seen, 0);
    }
}

#[test]
fn a_miss_after_the_expiry_sweep_removed_an_unsynced_expired_put_still_waits_for_it() {
    let fs = MemFs::new();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &Clock::system());
    set(&engine, b"k", b"old");

    // memcached's `set k 0 -1 new`: a put that is expired at once.
    let (_, put) = engine
        .store(StoreMode::Set, b"k", b"new", 0, Expiry::Immediately)
        .unwrap();
    let (found, ticket) = read(&engine, b"k");
    assert_eq!(found, None);
    covers(ticket, put);
    // The sweep removes the entry that pointed at the put.
    engine.maintain_now();
    let (found, ticket) = read(&engine, b"k");
    assert_eq!(found, None);
    covers(ticket, put);
    engine.commit(ticket).unwrap();
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &Clock::system());
    assert_eq!(value(&engine, b"k"), None, "the miss was taken back");
}

#[test]
fn a_miss_caused_by_a_concurrent_flush_waits_for_the_flush() {
    let fs = MemFs::new();
    let config = config(Durability::Always);
    let engine = Arc::new(open(&fs, &config, &Clock::system()));
    const ROUNDS: usize = 5_000;
    // Per round: the writer stores `k`, the reader reads it until it
    // misses, while the writer flushes as soon as the reader has seen it.
    let flush = Arc::new(Mutex::new(Ticket::NONE));
    let barrier = Arc::new(Barrier::new(2));
    let reading = Arc::new(AtomicBool::new(false));
    let reader = {
        let (engine, flush, barrier, reading) = (
            Arc::clone(&engine),
            Arc::clone(&flush),
            Arc::clone(&barrier),
            Arc::clone(&reading),
        );
        std::thread::spawn(move || {
            let mut uncovered = 0;
            for _ in 0..ROUNDS {
                barrier.wait();
                let ticket = loop {
                    match read(&engine, b"k") {
                        (None, ticket) => break ticket,
                        (Some(_), _) => reading.store(true, Ordering::Release),
                    }
                };
                // The flush's ticket is known once the writer is here.
                barrier.wait();
                if ticket < *flush.lock().unwrap() {
                    uncovered += 1;
                }
            }
            uncovered
        })
    };
    for _ in 0..ROUNDS {
        let _ = store_unsynced(&engine, StoreMode::Set, b"k", b"v");
        reading.store(false, Ordering::Release);
        barrier.wait();
        while !reading.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        *flush.lock().unwrap() = engine.flush_all(0).unwrap();
        barrier.wait();
    }
    let uncovered = reader.join().unwrap();
    assert_eq!(
        uncovered, 0,
        "{uncovered} of {ROUNDS} misses did not wait for their flush"
    );
}
