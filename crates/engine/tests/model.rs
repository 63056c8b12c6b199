//! The engine against a model: random sequences of memcached operations
//! (set, add, replace, append, prepend, cas, delete, incr, decr, touch,
//! gat, flush_all with and without delay, batches), interleaved with
//! compaction passes, maintenance passes, clock jumps, clean reopens and
//! process crashes, run both on the engine and on a plain `HashMap` that
//! follows memcached's rules. Every read is compared with the model, and
//! the whole key space after every reopen, crash, compaction and
//! maintenance pass.
//!
//! Small segments (2 KiB) make rotation, hint files and compaction happen
//! within a few operations. Every write is committed under `Always` before
//! the next operation, so a crash (`kill -9`) may lose nothing. CAS uniques
//! come from the engine; the model checks that each one is above every one
//! before it, across reopens and crashes too.
//!
//! Expiry times and flush delays are 50, 150 or 250 seconds from now and
//! the clock jumps by 100 or 200 seconds, so no comparison happens within
//! 50 seconds of a deadline: the wall clock ticking during a case cannot
//! change an outcome.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, decimal, open};
use larder_engine::fs::MemFs;
use larder_engine::{
    Arith, ArithOutcome, BatchOp, Clock, Config, DeleteOutcome, Durability, Engine, Expiry, Item,
    ReadOptions, StoreMode, StoreOutcome,
};
use proptest::prelude::*;
use std::collections::HashMap;

const KEYS: [&[u8]; 5] = [b"a", b"b", b"c", b"dd", b"eee"];

/// An expiry as generated: never, one of three distances, or already past.
#[derive(Debug, Clone, Copy)]
enum Ttl {
    Never,
    Secs(u32),
    Past,
}

impl Ttl {
    fn expiry(self, now: u32) -> Expiry {
        match self {
            Ttl::Never => Expiry::Never,
            Ttl::Secs(secs) => Expiry::At(now + secs),
            Ttl::Past => Expiry::Immediately,
        }
    }
}

/// A value as generated: a counter (for incr/decr) or text.
#[derive(Debug, Clone, Copy)]
enum Val {
    Number(u64),
    Text(usize),
}

impl Val {
    /// The bytes; text carries the operation's index, so it is unique.
    fn bytes(self, op_index: usize) -> Vec<u8> {
        match self {
            Val::Number(number) => number.to_string().into_bytes(),
            Val::Text(len) => {
                let mut text = format!("t{op_index}-").into_bytes();
                text.resize(text.len() + len, b'x');
                text
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Store {
        mode: u8,
        key: usize,
        value: Val,
        flags: u32,
        ttl: Ttl,
    },
    Cas {
        key: usize,
        value: Val,
        right: bool,
    },
    Delete {
        key: usize,
    },
    Arith {
        key: usize,
        incr: bool,
        delta: u64,
    },
    Touch {
        key: usize,
        ttl: Ttl,
    },
    Gat {
        key: usize,
        ttl: Ttl,
    },
    Get {
        key: usize,
    },
    FlushAll {
        delay: u32,
    },
    Batch(Vec<(usize, Option<Val>)>),
    Compact,
    Maintain,
    Advance(i64),
    Reopen,
    Crash,
}

fn ttl() -> impl Strategy<Value = Ttl> {
    prop_oneof![
        4 => Just(Ttl::Never),
        4 => prop_oneof![Just(50), Just(150), Just(250)].prop_map(Ttl::Secs),
        1 => Just(Ttl::Past),
    ]
}

fn val() -> impl Strategy<Value = Val> {
    prop_oneof![
        2 => (0u64..1000).prop_map(Val::Number),
        1 => (u64::MAX - 3..=u64::MAX).prop_map(Val::Number),
        3 => (0usize..120).prop_map(Val::Text),
    ]
}

fn key() -> impl Strategy<Value = usize> {
    0..KEYS.len()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0u8..5, key(), val(), 0u32..4, ttl()).prop_map(|(mode, key, value, flags, ttl)| {
            Op::Store { mode, key, value, flags, ttl }
        }),
        3 => (key(), val(), any::<bool>()).prop_map(|(key, value, right)| Op::Cas { key, value, right }),
        3 => key().prop_map(|key| Op::Delete { key }),
        3 => (key(), any::<bool>(), prop_oneof![0u64..10, Just(u64::MAX)])
            .prop_map(|(key, incr, delta)| Op::Arith { key, incr, delta }),
        2 => (key(), ttl()).prop_map(|(key, ttl)| Op::Touch { key, ttl }),
        2 => (key(), ttl()).prop_map(|(key, ttl)| Op::Gat { key, ttl }),
        4 => key().prop_map(|key| Op::Get { key }),
        1 => prop_oneof![Just(0), Just(50), Just(150)].prop_map(|delay| Op::FlushAll { delay }),
        2 => prop::collection::vec((key(), prop::option::of(val())), 1..4).prop_map(Op::Batch),
        2 => Just(Op::Compact),
        1 => Just(Op::Maintain),
        2 => prop_oneof![Just(100), Just(200)].prop_map(Op::Advance),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

/// An item as the model keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    value: Vec<u8>,
    flags: u32,
    exptime: u32,
    cas: u64,
}

impl Stored {
    fn of(item: &Item) -> Stored {
        Stored {
            value: item.value.to_vec(),
            flags: item.flags,
            exptime: item.exptime,
            cas: item.cas,
        }
    }
}

/// memcached's rules over a map.
#[derive(Default)]
struct Model {
    items: HashMap<Vec<u8>, Stored>,
    flush_deadline: Option<u32>,
    cas_max: u64,
}

impl Model {
    /// Carries out a due delayed flush, then drops expired items.
    fn tick(&mut self, now: u32) {
        if self.flush_deadline.is_some_and(|deadline| deadline <= now) {
            self.items.clear();
            self.flush_deadline = None;
        }
        self.items
            .retain(|_, item| item.exptime == 0 || item.exptime > now);
    }

    fn get(&self, key: &[u8]) -> Option<&Stored> {
        self.items.get(key)
    }

    /// Records a new CAS unique, which must be above every earlier one.
    fn note_cas(&mut self, cas: u64) {
        assert!(cas > self.cas_max, "CAS {cas} after {}", self.cas_max);
        self.cas_max = cas;
    }

    fn put(&mut self, key: &[u8], value: Vec<u8>, flags: u32, exptime: u32, cas: u64) {
        self.note_cas(cas);
        self.items.insert(
            key.to_vec(),
            Stored {
                value,
                flags,
                exptime,
                cas,
            },
        );
    }
}

struct Harness {
    fs: MemFs,
    clock: Clock,
    config: Config,
    engine: Option<Engine>,
    model: Model,
}

impl Harness {
    fn new() -> Harness {
        let fs = MemFs::new();
        let clock = Clock::system();
        let mut config = config(Durability::Always);
        config.segment_bytes_max = 2048;
        let engine = open(&fs, &config, &clock);
        Harness {
            fs,
            clock,
            config,
            engine: Some(engine),
            model: Model::default(),
        }
    }

    fn engine(&self) -> &Engine {
        self.engine.as_ref().unwrap()
    }

    /// Compares every key with the model.
    fn compare_all(&mut self, after: &str) {
        let now = self.clock.now();
        self.model.tick(now);
        for key in KEYS {
            let found = self
                .engine()
                .get(key)
                .unwrap()
                .map(|item| Stored::of(&item));
            assert_eq!(
                found.as_ref(),
                self.model.get(key),
                "key {:?} after {after}",
                String::from_utf8_lossy(key)
            );
        }
    }

    fn store(&mut self, index: usize, mode: u8, key: usize, value: Val, flags: u32, ttl: Ttl) {
        let key = KEYS[key];
        let now = self.clock.now();
        let bytes = value.bytes(index);
        let expiry = ttl.expiry(now);
        let mode = match mode {
            0 => StoreMode::Set,
            1 => StoreMode::Add,
            2 => StoreMode::Replace,
            3 => StoreMode::Append,
            _ => StoreMode::Prepend,
        };
        let (outcome, ticket) = self
            .engine()
            .store(mode, key, &bytes, flags, expiry)
            .unwrap();
        self.engine().commit(ticket).unwrap();
        let current = self.model.get(key).cloned();
        let expected = match (mode, &current) {
            (StoreMode::Add, Some(_)) => None,
            (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => None,
            (StoreMode::Append, Some(item)) => {
                Some(([&item.value[..], &bytes].concat(), item.flags, item.exptime))
            }
            (StoreMode::Prepend, Some(item)) => {
                Some(([&bytes[..], &item.value].concat(), item.flags, item.exptime))
            }
            _ => Some((bytes, flags, expiry.stored())),
        };
        match (outcome, expected) {
            (StoreOutcome::Stored { cas }, Some((value, flags, exptime))) => {
                self.model.put(key, value, flags, exptime, cas);
            }
            (StoreOutcome::NotStored, None) => {}
            (outcome, expected) => panic!("{mode:?}: engine {outcome:?}, model {expected:?}"),
        }
    }

    fn cas(&mut self, index: usize, key: usize, value: Val, right: bool) {
        let key = KEYS[key];
        let current = self.model.get(key).cloned();
        let unique = match (&current, right) {
            (Some(item), true) => item.cas,
            (Some(item), false) => item.cas + 1,
            (None, _) => self.model.cas_max,
        };
        let bytes = value.bytes(index);
        let (outcome, ticket) = self
            .engine()
            .store(StoreMode::Cas(unique), key, &bytes, 5, Expiry::Never)
            .unwrap();
        self.engine().commit(ticket).unwrap();
        match (outcome, current, right) {
            (StoreOutcome::Stored { cas }, Some(_), true) => self.model.put(key, bytes, 5, 0, cas),
            (StoreOutcome::Exists, Some(_), false) | (StoreOutcome::NotFound, None, _) => {}
            (outcome, current, _) => panic!("cas: engine {outcome:?}, model {current:?}"),
        }
    }

    fn delete(&mut self, key: usize) {
        let key = KEYS[key];
        let (outcome, ticket) = self.engine().delete(key, None).unwrap();
        self.engine().commit(ticket).unwrap();
        let expected = match self.model.items.remove(key) {
            Some(_) => DeleteOutcome::Deleted,
            None => DeleteOutcome::NotFound,
        };
        assert_eq!(outcome, expected);
    }

    fn arith(&mut self, key: usize, incr: bool, delta: u64) {
        let key = KEYS[key];
        let arith = Arith {
            incr,
            delta,
            cas: None,
            initial: None,
            expiry: None,
            read_counter: decimal,
        };
        let (outcome, ticket) = self.engine().arith(key, arith).unwrap();
        self.engine().commit(ticket).unwrap();
        let Some(item) = self.model.get(key).cloned() else {
            assert_eq!(outcome, ArithOutcome::NotFound);
            return;
        };
        let Some(number) = decimal(&item.value) else {
            assert_eq!(outcome, ArithOutcome::NonNumeric);
            return;
        };
        let number = if incr {
            number.wrapping_add(delta)
        } else {
            number.saturating_sub(delta)
        };
        let ArithOutcome::Value { value, cas, .. } = outcome else {
            panic!("arith on {item:?}: engine {outcome:?}, model {number}");
        };
        assert_eq!(value, number);
        let mut text = number.to_string().into_bytes();
        if text.len() < item.value.len() {
            text.resize(item.value.len(), b' ');
        }
        self.model.put(key, text, item.flags, item.exptime, cas);
    }

    fn touch(&mut self, key: usize, ttl: Ttl, gat: bool) {
        let key = KEYS[key];
        let expiry = ttl.expiry(self.clock.now());
        let found = if gat {
            let options = ReadOptions {
                touch: Some(expiry),
                ..ReadOptions::default()
            };
            let (item, ticket) = self.engine().get_with(key, options).unwrap();
            self.engine().commit(ticket).unwrap();
            item.map(|item| Stored::of(&item))
        } else {
            let (found, ticket) = self.engine().touch(key, expiry).unwrap();
            self.engine().commit(ticket).unwrap();
            let item = self
                .engine()
                .get(key)
                .unwrap()
                .map(|item| Stored::of(&item));
            match (found, expiry) {
                (true, Expiry::Immediately) => assert_eq!(item, None, "touched to expire"),
                (true, _) => assert!(item.is_some(), "touched but gone"),
                (false, _) => assert_eq!(item, None, "touch missed a live item"),
            }
            found.then_some(item).flatten()
        };
        let expected = self.model.items.get_mut(key).map(|item| {
            item.exptime = expiry.stored();
            item.clone()
        });
        let expected = expected.filter(|_| gat || expiry != Expiry::Immediately);
        assert_eq!(found, expected, "touch (gat: {gat})");
    }

    fn batch(&mut self, index: usize, writes: &[(usize, Option<Val>)]) {
        let values: Vec<Option<Vec<u8>>> = writes
            .iter()
            .enumerate()
            .map(|(at, (_, value))| value.map(|value| value.bytes(index * 10 + at)))
            .collect();
        let ops: Vec<BatchOp<'_>> = writes
            .iter()
            .zip(&values)
            .map(|((key, _), value)| match value {
                Some(value) => BatchOp::Set {
                    key: KEYS[*key],
                    value,
                    flags: 2,
                    expiry: Expiry::Never,
                },
                None => BatchOp::Delete { key: KEYS[*key] },
            })
            .collect();
        let ticket = self.engine().batch(&ops).unwrap();
        self.engine().commit(ticket).unwrap();
        // The engine numbers a batch's writes in order; the model learns
        // the CAS uniques of the keys the batch left set by reading them.
        let mut last: HashMap<usize, Option<Vec<u8>>> = HashMap::new();
        for ((key, _), value) in writes.iter().zip(values) {
            last.insert(*key, value);
        }
        let mut set: Vec<(u64, usize, Vec<u8>)> = Vec::new();
        for (key, value) in last {
            match value {
                Some(value) => {
                    let item = self.engine().get(KEYS[key]).unwrap().unwrap();
                    set.push((item.cas, key, value));
                }
                None => {
                    self.model.items.remove(KEYS[key]);
                }
            }
        }
        set.sort();
        for (cas, key, value) in set {
            self.model.put(KEYS[key], value, 2, 0, cas);
        }
    }

    fn reopen(&mut self, crash: bool) {
        let engine = self.engine.take().unwrap();
        if crash {
            self.fs.crash_process();
            drop(engine);
        } else {
            engine.close().unwrap();
        }
        self.engine = Some(open(&self.fs, &self.config, &self.clock));
    }

    fn apply(&mut self, index: usize, op: &Op) {
        let now = self.clock.now();
        self.model.tick(now);
        match op {
            Op::Store {
                mode,
                key,
                value,
                flags,
                ttl,
            } => self.store(index, *mode, *key, *value, *flags, *ttl),
            Op::Cas { key, value, right } => self.cas(index, *key, *value, *right),
            Op::Delete { key } => self.delete(*key),
            Op::Arith { key, incr, delta } => self.arith(*key, *incr, *delta),
            Op::Touch { key, ttl } => self.touch(*key, *ttl, false),
            Op::Gat { key, ttl } => self.touch(*key, *ttl, true),
            Op::Get { key } => {
                let found = self.engine().get(KEYS[*key]).unwrap();
                let found = found.map(|item| Stored::of(&item));
                assert_eq!(found.as_ref(), self.model.get(KEYS[*key]));
            }
            Op::FlushAll { delay } => {
                let ticket = self.engine().flush_all(*delay).unwrap();
                self.engine().commit(ticket).unwrap();
                if *delay == 0 {
                    self.model.items.clear();
                    self.model.flush_deadline = None;
                } else {
                    self.model.flush_deadline = Some(now + delay);
                }
            }
            Op::Batch(writes) => self.batch(index, writes),
            Op::Compact => {
                self.engine().compact_now(0.0).unwrap();
                self.compare_all("compaction");
            }
            Op::Maintain => {
                self.engine().maintain_now();
                self.compare_all("maintenance");
            }
            Op::Advance(secs) => self.clock.advance(*secs),
            Op::Reopen => {
                self.reopen(false);
                self.compare_all("reopen");
            }
            Op::Crash => {
                self.reopen(true);
                self.compare_all("crash");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_engine_behaves_like_a_memcached_model_across_reopens_and_crashes(
        ops in prop::collection::vec(op(), 1..200)
    ) {
        let mut harness = Harness::new();
        for (index, op) in ops.iter().enumerate() {
            harness.apply(index, op);
        }
        harness.reopen(false);
        harness.compare_all("the final reopen");
    }
}
