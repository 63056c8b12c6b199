//! The memcached semantics of every engine operation, on one open engine.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, decimal, incr_by_one, open, set, value};
use larder_engine::fs::MemFs;
use larder_engine::{
    Arith, ArithOutcome, BatchOp, Clock, DeleteOutcome, Durability, Expiry, ReadOptions, StoreMode,
    StoreOutcome,
};

fn store(engine: &larder_engine::Engine, mode: StoreMode, key: &[u8], v: &[u8]) -> StoreOutcome {
    let (outcome, ticket) = engine.store(mode, key, v, 7, Expiry::Never).unwrap();
    engine.commit(ticket).unwrap();
    outcome
}

#[test]
fn add_replace_append_prepend_follow_memcached() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::Always), &Clock::system());
    assert_eq!(
        store(&engine, StoreMode::Replace, b"k", b"x"),
        StoreOutcome::NotStored
    );
    assert_eq!(
        store(&engine, StoreMode::Append, b"k", b"x"),
        StoreOutcome::NotStored
    );
    assert!(matches!(
        store(&engine, StoreMode::Add, b"k", b"mid"),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(
        store(&engine, StoreMode::Add, b"k", b"again"),
        StoreOutcome::NotStored
    );
    assert!(matches!(
        store(&engine, StoreMode::Append, b"k", b">"),
        StoreOutcome::Stored { .. }
    ));
    assert!(matches!(
        store(&engine, StoreMode::Prepend, b"k", b"<"),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(value(&engine, b"k").unwrap(), b"<mid>");
    assert!(matches!(
        store(&engine, StoreMode::Replace, b"k", b"new"),
        StoreOutcome::Stored { .. }
    ));
    let item = engine.get(b"k").unwrap().unwrap();
    assert_eq!(item.value.as_ref(), b"new");
    assert_eq!(item.flags, 7);
}

#[test]
fn append_and_prepend_never_grow_a_value_past_the_limit() {
    let fs = MemFs::new();
    let mut config = config(Durability::Always);
    config.value_bytes_max = 8;
    let engine = open(&fs, &config, &Clock::system());
    assert!(matches!(
        store(&engine, StoreMode::Set, b"k", b"12345"),
        StoreOutcome::Stored { .. }
    ));
    // Up to the limit exactly...
    assert!(matches!(
        store(&engine, StoreMode::Append, b"k", b"67"),
        StoreOutcome::Stored { .. }
    ));
    assert!(matches!(
        store(&engine, StoreMode::Prepend, b"k", b"0"),
        StoreOutcome::Stored { .. }
    ));
    // ... and not one byte past it, either way round.
    assert_eq!(
        store(&engine, StoreMode::Append, b"k", b"8"),
        StoreOutcome::NotStored
    );
    assert_eq!(
        store(&engine, StoreMode::Prepend, b"k", b"x"),
        StoreOutcome::NotStored
    );
    assert_eq!(value(&engine, b"k").unwrap(), b"01234567");
}

#[test]
fn cas_succeeds_only_with_the_current_unique() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::None), &Clock::system());
    assert_eq!(
        store(&engine, StoreMode::Cas(1), b"k", b"v"),
        StoreOutcome::NotFound
    );
    let cas = set(&engine, b"k", b"v1");
    assert_eq!(
        store(&engine, StoreMode::Cas(cas + 100), b"k", b"v2"),
        StoreOutcome::Exists
    );
    let StoreOutcome::Stored { cas: next } = store(&engine, StoreMode::Cas(cas), b"k", b"v2")
    else {
        panic!("cas with the current unique must store");
    };
    assert!(next > cas);
    assert_eq!(engine.get(b"k").unwrap().unwrap().cas, next);
}

#[test]
fn delete_removes_and_honours_cas() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::None), &Clock::system());
    assert_eq!(
        engine.delete(b"k", None).unwrap().0,
        DeleteOutcome::NotFound
    );
    let cas = set(&engine, b"k", b"v");
    assert_eq!(
        engine.delete(b"k", Some(cas + 1)).unwrap().0,
        DeleteOutcome::Exists
    );
    assert_eq!(
        engine.delete(b"k", Some(cas)).unwrap().0,
        DeleteOutcome::Deleted
    );
    assert_eq!(value(&engine, b"k"), None);
    assert_eq!(engine.stats().items, 0);
}

#[test]
fn append_and_prepend_with_a_cas_unique_store_only_on_a_match() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::None), &Clock::system());
    assert_eq!(
        store(&engine, StoreMode::AppendIfCas(1), b"k", b"x"),
        StoreOutcome::NotStored
    );
    let cas = set(&engine, b"k", b"mid");
    assert_eq!(
        store(&engine, StoreMode::AppendIfCas(cas + 1), b"k", b"x"),
        StoreOutcome::Exists
    );
    assert_eq!(
        store(&engine, StoreMode::PrependIfCas(cas + 1), b"k", b"x"),
        StoreOutcome::Exists
    );
    assert_eq!(value(&engine, b"k").unwrap(), b"mid");
    let StoreOutcome::Stored { cas } = store(&engine, StoreMode::AppendIfCas(cas), b"k", b">")
    else {
        panic!("append with the item's CAS unique must store");
    };
    assert!(matches!(
        store(&engine, StoreMode::PrependIfCas(cas), b"k", b"<"),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(value(&engine, b"k").unwrap(), b"<mid>");
}

#[test]
fn counters_wrap_on_incr_and_stop_at_zero_on_decr() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::None), &Clock::system());
    let arith = |incr, delta| Arith {
        incr,
        delta,
        cas: None,
        initial: None,
        expiry: None,
        read_counter: decimal,
    };
    assert_eq!(
        engine.arith(b"n", arith(true, 1)).unwrap().0,
        ArithOutcome::NotFound
    );
    set(&engine, b"n", b"10");
    let (outcome, _) = engine.arith(b"n", arith(false, 1)).unwrap();
    assert!(matches!(outcome, ArithOutcome::Value { value: 9, .. }));
    assert_eq!(
        value(&engine, b"n").unwrap(),
        b"9 ",
        "memcached pads in place"
    );
    let (outcome, _) = engine.arith(b"n", arith(false, 100)).unwrap();
    assert!(matches!(outcome, ArithOutcome::Value { value: 0, .. }));
    set(&engine, b"n", b"18446744073709551615");
    let (outcome, _) = engine.arith(b"n", arith(true, 2)).unwrap();
    assert!(matches!(outcome, ArithOutcome::Value { value: 1, .. }));
    set(&engine, b"s", b"abc");
    assert_eq!(
        engine.arith(b"s", arith(true, 1)).unwrap().0,
        ArithOutcome::NonNumeric
    );
}

#[test]
fn items_expire_by_the_clock_and_touch_extends_them() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::None), &clock);
    let now = clock.now();
    let (_, ticket) = engine
        .store(
            StoreMode::Set,
            b"short",
            b"v",
            0,
            Expiry::from_memcached(10, now),
        )
        .unwrap();
    engine.commit(ticket).unwrap();
    let (_, ticket) = engine
        .store(
            StoreMode::Set,
            b"gone",
            b"v",
            0,
            Expiry::from_memcached(-1, now),
        )
        .unwrap();
    engine.commit(ticket).unwrap();
    assert_eq!(value(&engine, b"gone"), None);
    assert!(value(&engine, b"short").is_some());
    let (touched, ticket) = engine
        .touch(b"short", Expiry::from_memcached(100, now))
        .unwrap();
    engine.commit(ticket).unwrap();
    assert!(touched);
    clock.advance(50);
    assert!(
        value(&engine, b"short").is_some(),
        "touch extended the expiry"
    );
    clock.advance(100);
    assert_eq!(value(&engine, b"short"), None);
    engine.maintain_now();
    assert_eq!(engine.stats().items, 0, "the expired item was reclaimed");
}

#[test]
fn flush_all_hides_everything_at_once_and_after_a_delay() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::None), &clock);
    for i in 0..100 {
        set(&engine, format!("k{i}").as_bytes(), b"v");
    }
    engine.commit(engine.flush_all(0).unwrap()).unwrap();
    assert_eq!(value(&engine, b"k1"), None);
    set(&engine, b"after", b"v");
    assert!(value(&engine, b"after").is_some());
    engine.commit(engine.flush_all(30).unwrap()).unwrap();
    assert!(value(&engine, b"after").is_some(), "a delayed flush waits");
    clock.advance(31);
    engine.maintain_now();
    assert_eq!(value(&engine, b"after"), None);
    assert_eq!(engine.stats().items, 0);
}

#[test]
fn gat_returns_the_value_and_sets_the_expiry() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::None), &clock);
    set(&engine, b"k", b"v");
    let options = ReadOptions {
        touch: Some(Expiry::from_memcached(5, clock.now())),
        ..ReadOptions::default()
    };
    let (item, ticket) = engine.get_with(b"k", options).unwrap();
    engine.commit(ticket).unwrap();
    assert_eq!(item.unwrap().value.as_ref(), b"v");
    clock.advance(6);
    assert_eq!(value(&engine, b"k"), None);
}

#[test]
fn a_batch_applies_every_write() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::Always), &Clock::system());
    set(&engine, b"old", b"v");
    let ticket = engine
        .batch(&[
            BatchOp::Set {
                key: b"a",
                value: b"1",
                flags: 0,
                expiry: Expiry::Never,
            },
            BatchOp::Set {
                key: b"b",
                value: b"2",
                flags: 3,
                expiry: Expiry::Never,
            },
            BatchOp::Delete { key: b"old" },
        ])
        .unwrap();
    engine.commit(ticket).unwrap();
    assert_eq!(value(&engine, b"a").unwrap(), b"1");
    assert_eq!(engine.get(b"b").unwrap().unwrap().flags, 3);
    assert_eq!(value(&engine, b"old"), None);
}

#[test]
fn invalidated_items_are_stale_and_offer_one_win() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::None), &Clock::system());
    let cas = set(&engine, b"k", b"v");
    let (outcome, ticket) = engine.invalidate(b"k", None, None).unwrap();
    engine.commit(ticket).unwrap();
    assert_eq!(outcome, DeleteOutcome::Deleted);
    let options = ReadOptions {
        claim_win: true,
        ..ReadOptions::default()
    };
    let (first, _) = engine.get_with(b"k", options).unwrap();
    let first = first.unwrap();
    assert!(first.stale && first.win && first.cas > cas);
    let (second, _) = engine.get_with(b"k", options).unwrap();
    let second = second.unwrap();
    assert!(second.stale && !second.win && second.win_already_sent);
}

#[test]
fn a_counter_rewritten_in_its_length_keeps_its_stale_mark_and_win_and_a_longer_one_does_not() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::None), &Clock::system());
    let incr = incr_by_one();
    let claim = ReadOptions {
        claim_win: true,
        ..ReadOptions::default()
    };
    for (start, grows) in [(&b"1"[..], false), (&b"9"[..], true)] {
        set(&engine, b"n", start);
        let (_, ticket) = engine.invalidate(b"n", None, None).unwrap();
        engine.commit(ticket).unwrap();
        let (won, _) = engine.get_with(b"n", claim).unwrap();
        assert!(won.unwrap().win);
        let (outcome, _) = engine.arith(b"n", incr).unwrap();
        assert!(matches!(outcome, ArithOutcome::Value { grew, .. } if grew == grows));
        let (after, _) = engine.get_with(b"n", claim).unwrap();
        let after = after.unwrap();
        // memcached rewrites a counter that fits in place, marks and all; a
        // longer one is a new item.
        assert_eq!(after.stale, !grows, "from {start:?}");
        assert_eq!(after.win_already_sent, !grows, "from {start:?}");
        assert_eq!(after.fetched_before, !grows, "from {start:?}");
        assert!(!after.win, "from {start:?}");
    }
    // The stale mark is in the rewritten record: it survives a restart (the
    // win token, in memory alone, does not, so the first read wins again).
    let (outcome, ticket) = engine.arith(b"n", incr).unwrap();
    assert!(matches!(outcome, ArithOutcome::Value { value: 11, .. }));
    let (_, ticket_stale) = engine.invalidate(b"n", None, None).unwrap();
    let (outcome, ticket_kept) = engine.arith(b"n", incr).unwrap();
    assert!(matches!(
        outcome,
        ArithOutcome::Value {
            value: 12,
            grew: false,
            ..
        }
    ));
    engine
        .commit(ticket.max(ticket_stale).max(ticket_kept))
        .unwrap();
    drop(engine);
    let engine = open(&fs, &config(Durability::None), &Clock::system());
    let (reopened, _) = engine.get_with(b"n", claim).unwrap();
    let reopened = reopened.unwrap();
    assert_eq!(reopened.value.as_ref(), b"12");
    assert!(reopened.stale && reopened.win);
}

#[test]
fn a_counter_takes_a_new_expiry_in_the_same_write_and_reports_it() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::None), &Clock::system());
    let now = Clock::system().now();
    let with_expiry = |initial, expiry| Arith {
        incr: true,
        delta: 1,
        cas: None,
        initial,
        expiry,
        read_counter: decimal,
    };
    set(&engine, b"n", b"5");
    let (outcome, _) = engine
        .arith(b"n", with_expiry(None, Some(Expiry::At(now + 50))))
        .unwrap();
    assert!(matches!(
        outcome,
        ArithOutcome::Value { value: 6, exptime, .. } if exptime == now + 50
    ));
    assert_eq!(engine.get(b"n").unwrap().unwrap().exptime, now + 50);
    // Without one the expiry is kept.
    let (outcome, _) = engine.arith(b"n", with_expiry(None, None)).unwrap();
    assert!(matches!(outcome, ArithOutcome::Value { exptime, .. } if exptime == now + 50));
    // A created counter takes the new expiry over its creation's.
    let created = Some((7, Expiry::At(now + 30)));
    let (outcome, _) = engine
        .arith(b"c", with_expiry(created, Some(Expiry::Never)))
        .unwrap();
    assert!(matches!(
        outcome,
        ArithOutcome::Value {
            value: 7,
            created: true,
            exptime: 0,
            ..
        }
    ));
}

#[test]
fn a_vivified_item_already_expired_is_still_handed_to_its_creator() {
    let fs = MemFs::new();
    let engine = open(&fs, &config(Durability::None), &Clock::system());
    let (created, _) = engine
        .vivify(b"v", Expiry::Immediately, ReadOptions::default())
        .unwrap();
    let created = created.unwrap();
    assert!(created.win && !created.win_already_sent && created.value.is_empty());
    assert_eq!(engine.get(b"v").unwrap(), None);
    let (again, _) = engine
        .vivify(b"v", Expiry::Immediately, ReadOptions::default())
        .unwrap();
    assert!(again.unwrap().win);
    let (live, _) = engine
        .vivify(b"w", Expiry::Never, ReadOptions::default())
        .unwrap();
    assert!(live.is_some());
    let (existing, _) = engine
        .vivify(b"w", Expiry::Never, ReadOptions::default())
        .unwrap();
    assert!(existing.is_none());
}

#[test]
fn a_visiting_read_sees_what_get_returns_from_memory_and_from_the_files() {
    // A value held in memory since its write; then, after a reopen with no
    // memory for values, one read from its segment file every time.
    for from_files in [false, true] {
        let fs = MemFs::new();
        let mut config = config(Durability::Always);
        let mut engine = open(&fs, &config, &Clock::system());
        let cas = set(&engine, b"k", b"value");
        if from_files {
            engine.close().unwrap();
            config.cache_bytes_max = 0;
            engine = open(&fs, &config, &Clock::system());
        }
        let disk_reads = if from_files { 2 } else { 0 };

        let expected = engine.get(b"k").unwrap().unwrap();
        let (seen, ticket) = engine
            .get_visit(b"k", ReadOptions::default(), |item, value| {
                (item.clone(), value.to_vec())
            })
            .unwrap();
        let (item, bytes) = seen.expect("a hit");
        assert_eq!(bytes, b"value");
        assert!(item.value.is_empty(), "the value comes as the slice only");
        assert_eq!((item.flags, item.exptime, item.cas), (0, 0, cas));
        assert_eq!(expected.cas, cas);
        assert_eq!(ticket, larder_engine::Ticket::NONE);
        assert_eq!(
            engine.stats().disk_reads,
            disk_reads,
            "from files: {from_files}"
        );

        let mut calls = 0;
        let (miss, _) = engine
            .get_visit(b"absent", ReadOptions::default(), |_, _| calls += 1)
            .unwrap();
        assert!(miss.is_none());
        assert_eq!(calls, 0, "a miss visits nothing");
    }
}

#[test]
fn a_visiting_read_with_a_touch_sets_the_expiry_and_sees_the_value() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::Always), &clock);
    set(&engine, b"k", b"value");
    let at = clock.now() + 100;
    let options = ReadOptions {
        touch: Some(Expiry::At(at)),
        ..ReadOptions::default()
    };
    let (seen, ticket) = engine
        .get_visit(b"k", options, |item, value| {
            (item.exptime, item.value.is_empty(), value.to_vec())
        })
        .unwrap();
    engine.commit(ticket).unwrap();
    // As without a touch, the value comes as the slice only.
    assert_eq!(seen, Some((at, true, b"value".to_vec())));
    assert_eq!(engine.get(b"k").unwrap().unwrap().exptime, at);
}

#[test]
fn every_live_item_is_handed_once_without_being_marked_fetched() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::EverySec), &clock);
    for index in 0..500 {
        set(&engine, format!("k{index}").as_bytes(), b"v");
    }
    let (_, ticket) = engine.delete(b"k7", None).unwrap();
    engine.commit(ticket).unwrap();
    let (_, ticket) = engine
        .store(StoreMode::Set, b"k8", b"gone", 0, Expiry::Immediately)
        .unwrap();
    engine.commit(ticket).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let handed = engine
        .for_each_live(|key, item| {
            assert_eq!(&item.value[..], b"v");
            assert!(seen.insert(key.to_vec()), "{key:?} handed twice");
            Ok::<(), larder_engine::Error>(())
        })
        .unwrap();
    assert_eq!((handed, seen.len()), (498, 498));
    assert!(!seen.contains(b"k7".as_slice()) && !seen.contains(b"k8".as_slice()));
    let (item, _) = engine.get_with(b"k1", ReadOptions::default()).unwrap();
    assert!(!item.unwrap().fetched_before, "the walk marked k1 fetched");
    // A visitor's error stops the walk and comes back.
    let mut calls = 0;
    let stopped = engine.for_each_live(|_, _| {
        calls += 1;
        Err(larder_engine::Error::Closed)
    });
    assert!(matches!(stopped, Err(larder_engine::Error::Closed)));
    assert_eq!(calls, 1);
}

#[test]
fn a_get_and_touch_of_a_value_held_only_in_its_file_reads_it_from_there() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::Always);
    let engine = open(&fs, &config, &clock);
    let cas = set(&engine, b"k", b"on disk");
    engine.close().unwrap();
    config.cache_bytes_max = 0;
    let engine = open(&fs, &config, &clock);
    let at = clock.now() + 100;
    let options = ReadOptions {
        touch: Some(Expiry::At(at)),
        ..ReadOptions::default()
    };
    let (item, ticket) = engine.get_with(b"k", options).unwrap();
    engine.commit(ticket).unwrap();
    let item = item.expect("a hit");
    assert_eq!(
        (&item.value[..], item.cas, item.exptime),
        (&b"on disk"[..], cas, at)
    );
    assert_eq!(engine.stats().disk_reads, 1);
    // The touch is durable with the value where it was, and a miss is one.
    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    let item = engine.get(b"k").unwrap().expect("still there");
    assert_eq!((&item.value[..], item.exptime), (&b"on disk"[..], at));
    let (missed, _) = engine.get_with(b"absent", options).unwrap();
    assert!(missed.is_none());
}

#[test]
fn items_found_expired_or_flushed_are_counted_once_each_as_memcached_counts_them() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::EverySec), &clock);
    let found = |engine: &larder_engine::Engine| {
        let stats = engine.stats();
        (stats.found_expired, stats.found_flushed)
    };
    let now = clock.now();
    for key in [&b"a"[..], b"b", b"c"] {
        let (_, ticket) = engine
            .store(StoreMode::Set, key, b"1", 0, Expiry::At(now + 10))
            .unwrap();
        engine.commit(ticket).unwrap();
    }
    clock.advance(11);
    assert_eq!(engine.get(b"a").unwrap(), None);
    assert_eq!(engine.get(b"a").unwrap(), None, "counted once");
    let (outcome, _) = engine.delete(b"b", None).unwrap();
    assert_eq!(outcome, DeleteOutcome::NotFound);
    assert_eq!(found(&engine), (2, 0));
    // A new put of an expired key can be found expired again.
    let (outcome, _) = engine
        .store(StoreMode::Add, b"a", b"2", 0, Expiry::At(clock.now() + 10))
        .unwrap();
    assert!(matches!(outcome, StoreOutcome::Stored { .. }));
    clock.advance(11);
    assert_eq!(engine.get(b"a").unwrap(), None);
    assert_eq!(found(&engine), (3, 0));

    set(&engine, b"d", b"1");
    let _ = engine.flush_all(0).unwrap();
    let incr = incr_by_one();
    let (outcome, _) = engine.arith(b"d", incr).unwrap();
    assert_eq!(outcome, ArithOutcome::NotFound);
    assert_eq!(engine.get(b"d").unwrap(), None);
    // c expired before the flush: memcached checks for a flush first.
    assert_eq!(engine.get(b"c").unwrap(), None);
    assert_eq!(found(&engine), (3, 2));
}

#[test]
fn an_item_found_expired_then_touched_while_live_again_counts_when_it_expires_again() {
    // The real-time clock can step back: the item counted as expired is
    // live again, a touch extends it, and its next expiry counts too.
    let fs = MemFs::new();
    let clock = Clock::system();
    let engine = open(&fs, &config(Durability::EverySec), &clock);
    let now = clock.now();
    let (_, ticket) = engine
        .store(StoreMode::Set, b"k", b"1", 0, Expiry::At(now + 10))
        .unwrap();
    engine.commit(ticket).unwrap();
    clock.advance(11);
    assert_eq!(engine.get(b"k").unwrap(), None);
    assert_eq!(engine.stats().found_expired, 1);
    clock.advance(-11);
    let (touched, _) = engine.touch(b"k", Expiry::At(clock.now() + 20)).unwrap();
    assert!(touched);
    clock.advance(21);
    assert_eq!(engine.get(b"k").unwrap(), None);
    assert_eq!(engine.stats().found_expired, 2);
}
