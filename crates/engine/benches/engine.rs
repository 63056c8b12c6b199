//! Engine micro-benchmarks on the real file system (`OsFs`, a temporary
//! directory under Cargo's target directory, so on the build disk):
//!
//! - `get/hit_in_memory`: a read whose value is cached;
//! - `set/none`: store + commit with `Durability::None` (a `write(2)` at
//!   most, no sync);
//! - `set_always/threads_{1,64}`: store + commit with `Durability::Always`
//!   from 1 and from 64 threads; throughput is per write, so the ratio shows
//!   what group commit buys (one `fdatasync` covers every waiting writer);
//! - `reopen/{keys}`: opening a directory holding `LARDER_BENCH_KEYS` items
//!   (default 100,000; the design target is 1,000,000 in seconds), mostly
//!   from hint files plus a scanned active segment.
//! - `compact/{keys}`: one compaction pass (segments at least 30% dead)
//!   after a random half of `LARDER_BENCH_KEYS` items (default 100,000)
//!   was overwritten, a different half each time, so that the segments
//!   mix live and dead records; the overwrites and the hint files of the
//!   segments they sealed are not timed. Throughput is per item.
//!
//! Run: `cargo bench -p larder-engine -- --quick` for a short pass.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use larder_engine::{Config, Durability, Engine, Expiry, StoreMode};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const VALUE: &[u8] = &[b'v'; 100];

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn engine(dir: &Path, durability: Durability) -> Engine {
    let mut config = Config::new(dir);
    config.durability = durability;
    Engine::open(config).unwrap()
}

fn key(i: u64) -> Vec<u8> {
    format!("key:{i:012}").into_bytes()
}

fn set(engine: &Engine, key: &[u8]) {
    let (_, ticket) = engine
        .store(StoreMode::Set, key, VALUE, 0, Expiry::Never)
        .unwrap();
    engine.commit(ticket).unwrap();
}

fn get_hit(c: &mut Criterion) {
    let dir = temp_dir();
    let engine = engine(dir.path(), Durability::None);
    let keys: Vec<Vec<u8>> = (0..10_000).map(key).collect();
    for key in &keys {
        set(&engine, key);
    }
    let mut group = c.benchmark_group("get");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("hit_in_memory", |b| {
        b.iter(|| {
            i = (i + 7919) % keys.len();
            engine.get(&keys[i]).unwrap().unwrap()
        })
    });
    group.finish();
}

fn set_none(c: &mut Criterion) {
    let dir = temp_dir();
    let engine = engine(dir.path(), Durability::None);
    let mut group = c.benchmark_group("set");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("none", |b| {
        b.iter(|| {
            i = (i + 1) % 100_000;
            set(&engine, &key(i));
        })
    });
    group.finish();
}

/// `iters` sets spread over `threads` threads; returns the wall time.
fn concurrent_sets(engine: &Arc<Engine>, threads: u64, iters: u64) -> Duration {
    let per_thread = iters.div_ceil(threads);
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let engine = Arc::clone(engine);
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    set(&engine, &key(thread * 1_000_000 + i % 1000));
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    started.elapsed()
}

fn set_always(c: &mut Criterion) {
    let dir = temp_dir();
    let engine = Arc::new(engine(dir.path(), Durability::Always));
    let mut group = c.benchmark_group("set_always");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for threads in [1u64, 64] {
        group.bench_with_input(
            BenchmarkId::new("threads", threads),
            &threads,
            |b, &threads| b.iter_custom(|iters| concurrent_sets(&engine, threads, iters)),
        );
    }
    group.finish();
    let stats = engine.stats();
    eprintln!(
        "set_always: {} fsyncs, {} group commits covering {} writers (at most {} at once), \
         mean fsync {} us",
        stats.fsyncs,
        stats.group_commits,
        stats.group_commit_writers,
        stats.group_commit_writers_max,
        stats.fsync_micros_total / stats.fsyncs.max(1)
    );
}

/// `LARDER_BENCH_KEYS`, default 100,000: the item count of the benchmarks
/// over many keys.
fn bench_keys() -> u64 {
    std::env::var("LARDER_BENCH_KEYS")
        .ok()
        .and_then(|keys| keys.parse().ok())
        .unwrap_or(100_000)
}

/// The config of the benchmarks over many keys: no syncs, 4 MiB segments.
fn many_keys_config(dir: &Path) -> Config {
    let mut config = Config::new(dir);
    config.durability = Durability::None;
    config.segment_bytes_max = 4 << 20;
    config
}

fn reopen(c: &mut Criterion) {
    let keys = bench_keys();
    let dir = temp_dir();
    let config = many_keys_config(dir.path());
    {
        let engine = Engine::open(config.clone()).unwrap();
        for i in 0..keys {
            let (_, ticket) = engine
                .store(StoreMode::Set, &key(i), VALUE, 0, Expiry::Never)
                .unwrap();
            if i % 1024 == 0 {
                engine.commit(ticket).unwrap();
            }
        }
        engine.compact_now(2.0).unwrap(); // hint files for sealed segments
        engine.close().unwrap();
    }
    let mut group = c.benchmark_group("reopen");
    group.sample_size(10);
    group.throughput(Throughput::Elements(keys));
    group.bench_with_input(BenchmarkId::from_parameter(keys), &keys, |b, &keys| {
        // Only the open is timed; closing happens between measurements.
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let started = Instant::now();
                let engine = Engine::open(config.clone()).unwrap();
                total += started.elapsed();
                assert_eq!(engine.stats().items, keys);
                engine.close().unwrap();
            }
            total
        })
    });
    group.finish();
    let engine = Engine::open(config).unwrap();
    let report = engine.recovery_report();
    eprintln!(
        "reopen: {} segments ({} from hints, {} scanned), {} records, {:?}",
        report.segments,
        report.segments_from_hints,
        report.segments_scanned,
        report.records,
        report.duration
    );
}

fn compact(c: &mut Criterion) {
    let keys = bench_keys();
    let dir = temp_dir();
    let mut config = many_keys_config(dir.path());
    config.background_threads = false;
    let engine = Engine::open(config).unwrap();
    // Every key when `round` is None, else a pseudo-random half that
    // differs from round to round.
    let overwrite = |round: Option<u64>| {
        for i in 0..keys {
            let chosen = round.is_none_or(|round| {
                ((i ^ round.wrapping_mul(0x9e37_79b9)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 63)
                    == 1
            });
            if !chosen {
                continue;
            }
            let (_, ticket) = engine
                .store(StoreMode::Set, &key(i), VALUE, 0, Expiry::Never)
                .unwrap();
            if i % 1024 == 0 {
                engine.commit(ticket).unwrap();
            }
        }
    };
    overwrite(None);
    let mut group = c.benchmark_group("compact");
    group.sample_size(10);
    group.throughput(Throughput::Elements(keys));
    let mut round = 0;
    group.bench_with_input(BenchmarkId::from_parameter(keys), &keys, |b, _| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                round += 1;
                overwrite(Some(round));
                engine.compact_now(2.0).unwrap(); // hint files only
                let started = Instant::now();
                let compacted = engine.compact_now(0.3).unwrap();
                total += started.elapsed();
                assert!(compacted > 0);
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, get_hit, set_none, set_always, reopen, compact);
criterion_main!(benches);
