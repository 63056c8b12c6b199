//! Regression: CAS uniques were handed out again after a power cut.
//!
//! A write is visible in the engine before it is durable: a read under
//! `always` returns a ticket to commit before answering (the server does),
//! but a reader may skip it; under `everysec`, a write is acknowledged up
//! to a second before it is durable. Recovery started the next seq
//! at the largest it found plus one, so the CAS unique of a write lost in
//! the cut was issued again to the next write. A client holding the lost
//! write's CAS unique then had its `cas` succeed, overwriting a value it
//! never saw: a lost update. Every open now starts a gap above every seq it
//! finds, and records that start durably before issuing any seq, so no CAS
//! unique seen before a crash is issued again, however many crashes follow.

#![allow(clippy::unwrap_used)]

mod common;

use common::{config, open, set, value};
use larder_engine::fs::MemFs;
use larder_engine::{Clock, Durability, Engine, Expiry, ReadOptions, StoreMode, StoreOutcome};

/// Sets `key` to `value` without committing; returns the CAS unique a
/// read that does not commit its ticket sees meanwhile.
fn set_seen_before_durable(engine: &Engine, key: &[u8], value: &[u8]) -> u64 {
    let (outcome, _ticket) = engine
        .store(StoreMode::Set, key, value, 0, Expiry::Never)
        .unwrap();
    let (item, _ticket) = engine.get_with(key, ReadOptions::default()).unwrap();
    let seen = item.unwrap().cas;
    assert_eq!(outcome, StoreOutcome::Stored { cas: seen });
    seen
}

/// After a cut that lost the write whose CAS unique `seen` a client holds:
/// the next write gets another one, and the client's `cas` fails.
fn check_no_reuse(engine: &Engine, key: &[u8], seen: u64) {
    let cas = set(engine, key, b"written after the cut");
    assert_ne!(cas, seen, "the CAS unique of a lost write was issued again");
    assert!(cas > seen, "CAS uniques go back: {cas} after {seen}");
    let (outcome, ticket) = engine
        .store(StoreMode::Cas(seen), key, b"lost update", 0, Expiry::Never)
        .unwrap();
    engine.commit(ticket).unwrap();
    assert_eq!(outcome, StoreOutcome::Exists);
    assert_eq!(value(engine, key).unwrap(), b"written after the cut");
}

#[test]
fn cas_uniques_seen_before_repeated_power_cuts_are_never_issued_again_under_always() {
    let fs = MemFs::new();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &Clock::system());
    set(&engine, b"k", b"durable");
    let mut seen = set_seen_before_durable(&engine, b"k", b"never durable");
    let mut engine = Some(engine);
    // Each run loses the one write it made visible, so a directory that
    // holds nothing newer than what its open recorded must still move on.
    for cut in 0..3 {
        fs.power_cut(None);
        drop(engine.take());
        let reopened = open(&fs, &config, &Clock::system());
        assert_eq!(value(&reopened, b"k").unwrap(), b"durable", "cut {cut}");
        let next = set_seen_before_durable(&reopened, b"k", b"never durable");
        assert!(next > seen, "cut {cut}: {next} after {seen}");
        seen = next;
        engine = Some(reopened);
    }
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &Clock::system());
    check_no_reuse(&engine, b"k", seen);
}

#[test]
fn an_acknowledged_cas_unique_lost_under_everysec_is_never_issued_again() {
    let fs = MemFs::new();
    let config = config(Durability::EverySec);
    let engine = open(&fs, &config, &Clock::system());
    set(&engine, b"k", b"durable");
    engine.sync().unwrap();
    let seen = set(&engine, b"k", b"acknowledged, not synced");
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &Clock::system());
    assert_eq!(value(&engine, b"k").unwrap(), b"durable");
    check_no_reuse(&engine, b"k", seen);
}

#[test]
fn the_lost_write_under_always_cannot_be_overwritten_by_a_stale_cas() {
    // The review's probe, step by step.
    let fs = MemFs::new();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &Clock::system());
    set(&engine, b"k", b"durable");
    let seen = set_seen_before_durable(&engine, b"k", b"never durable");
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &Clock::system());
    check_no_reuse(&engine, b"k", seen);
}
