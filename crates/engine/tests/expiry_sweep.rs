//! The background expiry sweep: it reclaims every item whose expiry time
//! passed, whichever write gave it that time, and it does not walk the
//! keydir partitions of items that never expire.

#![allow(clippy::unwrap_used)]

mod common;

use common::{config, decimal, open, set};
use larder_engine::fs::MemFs;
use larder_engine::{Arith, BatchOp, Clock, Durability, Engine, Expiry, ReadOptions, StoreMode};

/// Seconds of life every expiring item in these tests gets.
const TTL: i64 = 10;

fn expiry(clock: &Clock) -> Expiry {
    Expiry::from_memcached(TTL, clock.now())
}

/// Runs the sweep once over every partition (the test config has 8, one
/// tick's worth) and returns how many partitions it walked.
fn sweep(engine: &Engine) -> u64 {
    let before = engine.stats().expiry_walks;
    engine.maintain_now();
    engine.stats().expiry_walks - before
}

#[test]
fn items_that_never_expire_are_not_walked() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::None), &clock);
    for i in 0..200 {
        set(&engine, format!("k{i}").as_bytes(), b"v");
    }
    assert_eq!(sweep(&engine), 0);
    assert_eq!(sweep(&engine), 0);
    assert_eq!(engine.stats().items, 200);
}

#[test]
fn a_partition_is_walked_while_it_holds_an_item_with_an_expiry_and_not_after() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::None), &clock);
    for i in 0..200 {
        set(&engine, format!("k{i}").as_bytes(), b"v");
    }
    let (_, ticket) = engine
        .store(StoreMode::Set, b"short", b"v", 0, expiry(&clock))
        .unwrap();
    engine.commit(ticket).unwrap();
    assert_eq!(sweep(&engine), 1, "only the partition of the expiring item");
    assert_eq!(sweep(&engine), 1, "it has not expired yet: walked again");
    assert_eq!(engine.stats().items, 201);
    clock.advance(TTL + 1);
    assert_eq!(sweep(&engine), 1);
    assert_eq!(engine.stats().items, 200, "the expired item was reclaimed");
    assert_eq!(engine.stats().reclaimed_items, 1);
    assert_eq!(sweep(&engine), 0, "nothing left to expire there");
}

#[test]
fn an_item_given_an_expiry_later_is_walked_and_one_whose_expiry_is_removed_is_not() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::None), &clock);
    let (_, ticket) = engine
        .store(StoreMode::Set, b"k", b"v", 0, expiry(&clock))
        .unwrap();
    engine.commit(ticket).unwrap();
    set(&engine, b"k", b"forever");
    assert_eq!(
        sweep(&engine),
        1,
        "the flag outlives the expiry until a walk"
    );
    assert_eq!(sweep(&engine), 0);
    let (_, ticket) = engine.touch(b"k", expiry(&clock)).unwrap();
    engine.commit(ticket).unwrap();
    assert_eq!(sweep(&engine), 1);
}

/// One way of giving the single item `k` an expiry time.
#[derive(Debug, Clone, Copy)]
enum Write {
    Set,
    Touch,
    GetAndTouch,
    Batch,
    /// `incr` with an initial value (meta arithmetic's `N`) on a miss.
    CounterCreated,
    /// A read that creates the item it missed (meta get's `N`).
    Vivify,
}

const WRITES: [Write; 6] = [
    Write::Set,
    Write::Touch,
    Write::GetAndTouch,
    Write::Batch,
    Write::CounterCreated,
    Write::Vivify,
];

fn give_expiry(engine: &Engine, clock: &Clock, write: Write) {
    let ticket = match write {
        Write::Set => {
            engine
                .store(StoreMode::Set, b"k", b"1", 0, expiry(clock))
                .unwrap()
                .1
        }
        Write::Touch => {
            set(engine, b"k", b"1");
            engine.touch(b"k", expiry(clock)).unwrap().1
        }
        Write::GetAndTouch => {
            set(engine, b"k", b"1");
            let options = ReadOptions {
                touch: Some(expiry(clock)),
                ..ReadOptions::default()
            };
            engine.get_with(b"k", options).unwrap().1
        }
        Write::Batch => engine
            .batch(&[BatchOp::Set {
                key: b"k",
                value: b"1",
                flags: 0,
                expiry: expiry(clock),
            }])
            .unwrap(),
        Write::CounterCreated => {
            let arith = Arith {
                incr: true,
                delta: 1,
                cas: None,
                initial: Some((5, expiry(clock))),
                expiry: None,
                read_counter: decimal,
            };
            engine.arith(b"k", arith).unwrap().1
        }
        Write::Vivify => {
            engine
                .vivify(b"k", expiry(clock), ReadOptions::default())
                .unwrap()
                .1
        }
    };
    engine.commit(ticket).unwrap();
}

#[test]
fn every_write_that_sets_an_expiry_gets_its_item_reclaimed() {
    for write in WRITES {
        let fs = MemFs::new();
        let clock = Clock::system();
        let engine = open(&fs, &config(Durability::None), &clock);
        give_expiry(&engine, &clock, write);
        clock.advance(TTL + 1);
        sweep(&engine);
        assert_eq!(engine.stats().items, 0, "{write:?}: reclaimed");
    }
}

#[test]
fn every_expiry_survives_a_restart_into_the_sweep() {
    for write in WRITES {
        let fs = MemFs::new();
        let clock = Clock::system();
        let config = config(Durability::Always);
        let engine = open(&fs, &config, &clock);
        give_expiry(&engine, &clock, write);
        engine.close().unwrap();
        let engine = open(&fs, &config, &clock);
        assert_eq!(engine.stats().items, 1, "{write:?}: recovered");
        clock.advance(TTL + 1);
        sweep(&engine);
        assert_eq!(
            engine.stats().items,
            0,
            "{write:?}: reclaimed after reopening"
        );
    }
}

#[test]
fn a_partition_s_expired_items_are_logged_in_one_append_that_survives_a_power_cut() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::Always);
    config.partitions = 1;
    // Each delete record fills a good part of a segment: logged one at a
    // time, the sweep would seal dozens of segments while it holds the
    // partition's lock.
    config.segment_bytes_max = 1024;
    let engine = open(&fs, &config, &clock);
    let keys: Vec<String> = (0..300).map(|i| format!("{i:0>200}")).collect();
    for key in &keys {
        let (_, ticket) = engine
            .store(StoreMode::Set, key.as_bytes(), b"v", 0, expiry(&clock))
            .unwrap();
        engine.commit(ticket).unwrap();
    }
    set(&engine, b"stays", b"v");
    clock.advance(TTL + 1);
    let segments = engine.stats().segments;
    assert_eq!(sweep(&engine), 1);
    assert_eq!(engine.stats().reclaimed_items, 300);
    assert!(
        engine.stats().segments <= segments + 1,
        "{} segments more after one sweep",
        engine.stats().segments - segments
    );
    engine.sync().unwrap();
    fs.power_cut(None);
    drop(engine);
    // Back in time: only the logged deletes can keep the items away.
    let clock = Clock::system();
    let engine = open(&fs, &config, &clock);
    assert_eq!(engine.stats().items, 1);
    assert!(engine.get(b"stays").unwrap().is_some());
}
