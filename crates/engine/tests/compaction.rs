//! Compaction under sustained overwrites: space stays bounded by the live
//! data, every key keeps its latest value, and a compaction running on the
//! background thread while writers and readers hammer the same keys loses
//! and reorders nothing, before and after a reopen.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, open, set, value};
use larder_engine::fs::{FaultKind, MemFs};
use larder_engine::{Clock, Durability, Expiry, ReadOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn round_value(key: usize, round: usize) -> Vec<u8> {
    let mut value = format!("{key}:{round}:").into_bytes();
    value.resize(100, b'.');
    value
}

#[test]
fn space_stays_bounded_under_sustained_overwrites() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::None);
    config.segment_bytes_max = 4096;
    let engine = open(&fs, &config, &clock);
    let keys = 50;
    let mut compactions = 0;
    for round in 0..60 {
        for key in 0..keys {
            set(
                &engine,
                format!("key{key}").as_bytes(),
                &round_value(key, round),
            );
        }
        engine
            .compact_now(config.compaction_dead_ratio_min)
            .unwrap();
        let stats = engine.stats();
        let bound = 2 * stats.live_bytes + u64::from(config.segment_bytes_max);
        assert!(
            stats.disk_bytes <= bound,
            "round {round}: {} bytes on disk for {} live (bound {bound})",
            stats.disk_bytes,
            stats.live_bytes
        );
        assert!(stats.compactions >= compactions);
        compactions = stats.compactions;
        for key in 0..keys {
            let found = value(&engine, format!("key{key}").as_bytes()).unwrap();
            assert_eq!(found, round_value(key, round), "round {round}");
        }
    }
    assert!(compactions >= 10, "only {compactions} compactions");
    let written = 60 * keys as u64 * 130;
    assert!(engine.stats().disk_bytes < written / 10);
    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    for key in 0..keys {
        let found = value(&engine, format!("key{key}").as_bytes()).unwrap();
        assert_eq!(found, round_value(key, 59));
    }
}

/// Parses the round out of a value written by `round_value`.
fn round_of(value: &[u8]) -> usize {
    let text = String::from_utf8_lossy(value);
    text.split(':').nth(1).unwrap().parse().unwrap()
}

#[test]
fn background_compaction_keeps_the_latest_writes_of_concurrent_writers() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::Always);
    config.segment_bytes_max = 4096;
    config.background_threads = true;
    config.compaction_dead_ratio_min = 0.3;
    config.cache_bytes_max = 1024; // most reads go to the files
    let engine = Arc::new(open(&fs, &config, &clock));
    let keys_per_writer = 40;
    let stop_writers = Arc::new(AtomicBool::new(false));
    let stop_reader = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|writer| {
            let engine = Arc::clone(&engine);
            let stop = Arc::clone(&stop_writers);
            std::thread::spawn(move || {
                let mut round = 0;
                while round < 20 || !stop.load(Ordering::Relaxed) {
                    for i in 0..keys_per_writer {
                        let key = writer * keys_per_writer + i;
                        set(
                            &engine,
                            format!("key{key}").as_bytes(),
                            &round_value(key, round),
                        );
                    }
                    round += 1;
                }
                round - 1
            })
        })
        .collect();
    // A reader checks that no key ever goes back to an older round, in
    // passes of plain reads and of get-and-touch, whose values are read
    // from the files after the keydir's lock is let go, as plain reads'
    // are, while compaction moves them.
    let reader = {
        let engine = Arc::clone(&engine);
        let stop = Arc::clone(&stop_reader);
        std::thread::spawn(move || {
            let mut seen = vec![0usize; 2 * keys_per_writer];
            let (mut reads, mut touching_reads) = (0u64, 0u64);
            let touch = ReadOptions {
                touch: Some(Expiry::Never),
                ..ReadOptions::default()
            };
            for pass in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let touching = pass % 2 == 1;
                for (key, seen) in seen.iter_mut().enumerate() {
                    let key = format!("key{key}");
                    let found = if touching {
                        let (item, ticket) = engine.get_with(key.as_bytes(), touch).unwrap();
                        engine.commit(ticket).unwrap();
                        item
                    } else {
                        engine.get(key.as_bytes()).unwrap()
                    };
                    if let Some(item) = found {
                        let round = round_of(&item.value);
                        assert!(round >= *seen, "{key} went from {seen} to {round}");
                        *seen = round;
                        reads += 1;
                        touching_reads += u64::from(touching);
                    }
                }
            }
            (reads, touching_reads)
        })
    };
    // Keep writing until the compactor has finished a few passes meanwhile.
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.stats().compactions < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_writers.store(true, Ordering::Relaxed);
    let last_rounds: Vec<usize> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    stop_reader.store(true, Ordering::Relaxed);
    let (reads, touching_reads) = reader.join().unwrap();
    assert!(
        reads > touching_reads && touching_reads > 0,
        "{reads} reads, {touching_reads} touching"
    );
    let stats = engine.stats();
    assert!(stats.compactions >= 3, "{} compactions", stats.compactions);
    assert!(stats.disk_reads > 0, "reads went to the files");

    let check = |engine: &larder_engine::Engine| {
        for (writer, last) in last_rounds.iter().enumerate() {
            for i in 0..keys_per_writer {
                let key = writer * keys_per_writer + i;
                let found = value(engine, format!("key{key}").as_bytes()).unwrap();
                assert_eq!(found, round_value(key, *last), "key{key}");
            }
        }
    };
    check(&engine);
    let engine = Arc::into_inner(engine).unwrap();
    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    check(&engine);
}

/// Writes `key0..keys` (round 0), then overwrites 60% of them (round 1),
/// spread evenly over the segments.
fn load_then_overwrite_most(engine: &larder_engine::Engine, keys: usize) {
    for key in 0..keys {
        set(engine, format!("key{key}").as_bytes(), &round_value(key, 0));
    }
    for key in (0..keys).filter(|key| key % 10 < 6) {
        set(engine, format!("key{key}").as_bytes(), &round_value(key, 1));
    }
}

/// Every key holds what [`load_then_overwrite_most`] left.
fn assert_loaded_then_overwritten(engine: &larder_engine::Engine, keys: usize) {
    for key in 0..keys {
        let round = usize::from(key % 10 < 6);
        let found = value(engine, format!("key{key}").as_bytes()).unwrap();
        assert_eq!(found, round_value(key, round), "key{key}");
    }
}

/// Data rewritten before any segment reaches the dead-ratio threshold still
/// gets compacted once the files hold 1.5x the live bytes: the background
/// compactor takes the most dead segments below the threshold.
#[test]
fn space_is_reclaimed_below_the_threshold_when_files_reach_one_and_a_half_times_live() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = relief_config();
    let engine = open(&fs, &config, &clock);
    let keys = 2000;
    load_then_overwrite_most(&engine, keys);
    // 60% of every loaded segment is now dead: below the 0.9 threshold.
    assert!(amplification(&engine) > 1.55, "{}", amplification(&engine));
    engine.close().unwrap();

    config.background_threads = true;
    let engine = open(&fs, &config, &clock);
    wait_for_space_relief(&engine);
    assert!(engine.stats().compactions > 0);
    assert_loaded_then_overwritten(&engine, keys);
}

/// Space relief (the background compactor's pass over segments below the
/// dead-ratio threshold) frees each group's files once the group is done,
/// as the ordinary pass does: it used to hold every segment until it ended.
#[test]
fn space_relief_frees_each_groups_files_before_the_next_group() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = relief_config();
    let engine = open(&fs, &config, &clock);
    let keys = 2000;
    let overwritten = |key: usize| key % 10 < 8;
    for round in 0..2 {
        for key in (0..keys).filter(|&key| round == 0 || overwritten(key)) {
            set(
                &engine,
                format!("key{key}").as_bytes(),
                &round_value(key, round),
            );
        }
    }
    // 80% of every loaded segment is dead: below the 0.9 threshold, and the
    // files hold 1.8x the live data, which relief brings down to 1.5x.
    engine.close().unwrap();
    config.background_threads = true;
    let removed_seen = removed_files_seen_at_each_sync(&fs, &config);
    let engine = open(&fs, &config, &clock);
    wait_for_space_relief(&engine);
    let groups = engine.stats().compactions;
    assert!(groups >= 5, "{groups} groups");
    // A segment and its hint, and perhaps those of the group before, held
    // a moment longer by a reader such as `stats`.
    let seen = removed_seen.load(Ordering::Relaxed);
    assert!(seen <= 4, "{seen} removed files at once");
    for key in 0..keys {
        let round = usize::from(overwritten(key));
        let found = value(&engine, format!("key{key}").as_bytes()).unwrap();
        assert_eq!(found, round_value(key, round), "key{key}");
    }
}

/// Small segments, and a dead-ratio threshold (0.9) that leaves segments
/// 60% or 80% dead to space relief.
fn relief_config() -> larder_engine::Config {
    let mut config = config(Durability::None);
    config.segment_bytes_max = 16 << 10;
    config.compaction_dead_ratio_min = 0.9;
    config
}

/// The files' bytes over the live bytes.
fn amplification(engine: &larder_engine::Engine) -> f64 {
    let stats = engine.stats();
    stats.disk_bytes as f64 / stats.live_bytes as f64
}

/// Waits (up to 20 s: a synchronisation, not a speed check) for the
/// background compactor to bring the files down to 1.5x the live bytes.
fn wait_for_space_relief(engine: &larder_engine::Engine) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while amplification(engine) > 1.5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(amplification(engine) <= 1.5, "{}", amplification(engine));
}

/// Records, at each `fdatasync` on `fs`, how many removed segment and hint
/// files are in the data directory; returns the largest number seen.
fn removed_files_seen_at_each_sync(
    fs: &MemFs,
    config: &larder_engine::Config,
) -> Arc<std::sync::atomic::AtomicUsize> {
    let removed_seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (watched, dir, seen) = (fs.clone(), config.dir.clone(), Arc::clone(&removed_seen));
    fs.observe_sync_data(move || {
        let removed = watched
            .file_names(&dir)
            .iter()
            .filter(|name| name.ends_with(".removed.tmp"))
            .count();
        seen.fetch_max(removed, Ordering::Relaxed);
    });
    removed_seen
}

/// One pass over many candidates writes one output segment per group of
/// them, each no larger than a quarter of a segment (or one candidate's
/// live records), and removes each group's inputs before the next: it never
/// holds a copy of all of their live data at once.
#[test]
fn a_pass_over_many_segments_writes_outputs_of_at_most_a_quarter_segment() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::None);
    config.segment_bytes_max = 16 << 10;
    let engine = open(&fs, &config, &clock);
    let keys = 2000;
    load_then_overwrite_most(&engine, keys);
    let before = engine.stats();
    let compacted = engine.compact_now(0.5).unwrap();
    let after = engine.stats();
    assert!(compacted >= 10, "{compacted} segments compacted");
    let runs = after.compactions - before.compactions;
    assert!(runs >= 2, "{runs} runs for {compacted} segments");
    let record = 28 + 7 + 100;
    let quarter = u64::from(config.segment_bytes_max) / 4;
    let largest_candidate_live = before
        .segment_details
        .iter()
        .filter(|segment| segment.live_bytes * 2 <= segment.len_bytes)
        .map(|segment| segment.live_bytes)
        .max()
        .unwrap();
    let newest_before = before.segment_details.iter().map(|s| s.id).max().unwrap();
    let outputs: Vec<_> = after
        .segment_details
        .iter()
        .filter(|segment| segment.id > newest_before && segment.sealed)
        .collect();
    assert!(outputs.len() >= 2, "{outputs:?}");
    for output in outputs {
        assert!(
            output.len_bytes <= quarter.max(largest_candidate_live) + 40 + record,
            "output {} holds {} bytes",
            output.id,
            output.len_bytes
        );
    }
    assert!(after.disk_bytes < before.disk_bytes);
    assert_loaded_then_overwritten(&engine, keys);
}

/// A pass of several groups frees each group's inputs before it writes the
/// next group's output: none of a pass's removed files is left on disk at
/// any sync of a later group (Experiment D sampled each second found 64 MiB
/// of removed segments beside a pass's outputs when they waited for the
/// pass's end).
#[test]
fn a_pass_frees_each_groups_files_before_the_next_group() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::None);
    config.segment_bytes_max = 16 << 10;
    let engine = open(&fs, &config, &clock);
    load_then_overwrite_most(&engine, 2000);
    let removed_seen = removed_files_seen_at_each_sync(&fs, &config);
    let before = engine.stats();
    engine.compact_now(0.5).unwrap();
    let runs = engine.stats().compactions - before.compactions;
    assert!(runs >= 3, "{runs} groups");
    assert_eq!(removed_seen.load(Ordering::Relaxed), 0);
    assert_loaded_then_overwritten(&engine, 2000);
}

/// A compaction of large segments (tens of thousands of small records, a
/// few near-megabyte ones, its output written and switched a megabyte at a
/// time) keeps exactly the live records: overwrites, deletes and touches
/// all come out right, before and after a reopen.
#[test]
fn segments_of_many_thousands_of_records_keep_exactly_their_live_ones() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::None);
    config.segment_bytes_max = 8 << 20;
    let engine = open(&fs, &config, &clock);
    let keys = 40_000;
    let big = |key: usize| vec![b'0' + (key % 10) as u8; 900_000];
    for key in 0..keys {
        set(
            &engine,
            format!("key{key}").as_bytes(),
            &round_value(key, 0),
        );
        if key % 10_000 == 5 {
            set(&engine, format!("big{key}").as_bytes(), &big(key));
        }
    }
    for key in (0..keys).step_by(2) {
        set(
            &engine,
            format!("key{key}").as_bytes(),
            &round_value(key, 1),
        );
    }
    for key in (1..keys).step_by(6) {
        let (_, ticket) = engine.delete(format!("key{key}").as_bytes(), None).unwrap();
        engine.commit(ticket).unwrap();
    }
    let soon = larder_engine::Expiry::from_memcached(30, clock.now());
    for key in (3..keys).step_by(6) {
        let (touched, ticket) = engine.touch(format!("key{key}").as_bytes(), soon).unwrap();
        engine.commit(ticket).unwrap();
        assert!(touched);
    }
    // Seal the segment being written so that every record can be compacted.
    for filler in 0..(config.segment_bytes_max as usize / 130) {
        set(
            &engine,
            format!("filler{filler}").as_bytes(),
            &round_value(filler, 0),
        );
    }
    let expected = |key: usize| match key % 6 {
        1 => None,
        _ if key.is_multiple_of(2) => Some(round_value(key, 1)),
        _ => Some(round_value(key, 0)),
    };
    let check = |engine: &larder_engine::Engine, when: &str| {
        for key in 0..keys {
            let found = value(engine, format!("key{key}").as_bytes());
            assert_eq!(found, expected(key), "key{key} {when}");
        }
        for key in (5..keys).step_by(10_000) {
            let found = value(engine, format!("big{key}").as_bytes());
            assert_eq!(found, Some(big(key)), "big{key} {when}");
        }
    };
    let before = engine.stats();
    assert!(engine.compact_now(0.0).unwrap() > 0);
    let after = engine.stats();
    assert!(
        after.compaction_bytes_read - before.compaction_bytes_read > 8 << 20,
        "a whole segment was read"
    );
    assert_eq!(after.items, before.items);
    assert_eq!(after.live_bytes, before.live_bytes);
    check(&engine, "after compaction");
    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    check(&engine, "after reopening");
    clock.advance(60);
    for key in (0..keys).step_by(3) {
        let found = value(&engine, format!("key{key}").as_bytes());
        let wanted = if key % 6 == 3 { None } else { expected(key) };
        assert_eq!(found, wanted, "key{key}: the touches' expiry survived");
    }
}

/// Loads `keys` values of 4000 bytes into 8 MiB segments, then overwrites
/// the first 60% of the first segment's keys: that segment's live records
/// make a compaction output of several megabytes, written a megabyte at a
/// time.
fn load_large_values(engine: &larder_engine::Engine, keys: usize) -> Vec<Vec<u8>> {
    let names: Vec<Vec<u8>> = (0..keys)
        .map(|key| format!("k{key}").into_bytes())
        .collect();
    let large = |key: usize, round: usize| {
        let mut value = format!("{key}:{round}:").into_bytes();
        value.resize(4000, b'.');
        value
    };
    for (key, name) in names.iter().enumerate() {
        set(engine, name, &large(key, 0));
    }
    let first_segment = (8 << 20) / 4050;
    for (key, name) in names.iter().enumerate().take(first_segment * 6 / 10) {
        set(engine, name, &large(key, 1));
    }
    names
}

fn large_values_config() -> larder_engine::Config {
    let mut config = config(Durability::Always);
    config.segment_bytes_max = 8 << 20;
    config
}

/// A compaction output of several megabytes goes to the disk a megabyte at
/// a time, each piece waited for once the next is written, rather than all
/// at its sync (where it would hold up the log's small syncs behind it).
#[test]
fn a_large_compaction_output_is_written_back_a_piece_at_a_time() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = large_values_config();
    let engine = open(&fs, &config, &clock);
    let names = load_large_values(&engine, 3000);
    let before = common::contents(&engine, &names);
    let first = engine.stats().segment_details[0].clone();
    assert!(first.sealed && first.live_bytes >= 3 << 20, "{first:?}");
    assert!(engine.compact_now(0.5).unwrap() >= 1);
    let written = engine.stats().compaction_bytes_written;
    let pieces = written / (1 << 20);
    assert!(pieces >= 3, "{written} bytes written by compaction");
    // Every piece but the last is waited for; the hints add their own.
    let waited = fs.write_back_waits();
    assert!(waited + 1 >= pieces, "{waited} waits for {written} bytes");
    assert!(common::contents(&engine, &names) == before, "items changed");
    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    assert!(
        common::contents(&engine, &names) == before,
        "items changed at reopen"
    );
}

/// A pass that fails after keys were switched to its output (a failed
/// write-back or sync: the output may never reach the disk) leaves that
/// output out of every later open, and the next pass copies its records
/// again before removing anything, so no item is lost, even to a power cut
/// right after that next pass.
#[test]
fn an_output_whose_pass_failed_is_copied_again_before_its_sources_go() {
    let clock = Clock::system();
    let config = large_values_config();
    let mut failed_passes = 0;
    for n in 1..40 {
        let fs = MemFs::new();
        let engine = open(&fs, &config, &clock);
        let names = load_large_values(&engine, 3000);
        let before = common::contents(&engine, &names);
        fs.inject_nth(FaultKind::EioOnSync, n);
        let failed = engine.compact_now(0.5);
        fs.clear_faults();
        if failed.is_ok() {
            break;
        }
        failed_passes += 1;
        let same = |engine: &larder_engine::Engine| common::contents(engine, &names) == before;
        assert!(same(&engine), "fault {n}: items changed");
        // A failed sync of the log itself waits for maintenance to heal it.
        engine.maintain_now();
        engine.compact_now(0.5).unwrap();
        assert!(same(&engine), "fault {n}: items changed by the next pass");
        fs.power_cut(None);
        drop(engine);
        let engine = open(&fs, &config, &clock);
        assert!(
            same(&engine),
            "fault {n}: items lost to a power cut after the next pass"
        );
    }
    assert!(failed_passes >= 8, "only {failed_passes} failure points");
}

/// A segment compaction removed is renamed out of the way, durably, and
/// its file deleted afterwards, cut a step at a time; where cutting it
/// fails, it is deleted at once and the error reported, with nothing lost
/// and nothing left behind. (A removed segment's file left by a crash is
/// deleted at the next open: see the unit tests in `compaction.rs`.)
#[test]
fn a_removed_segment_is_deleted_after_compaction_even_when_cutting_it_fails() {
    let leftovers = |fs: &MemFs| -> Vec<String> {
        fs.file_names(std::path::Path::new("/data"))
            .into_iter()
            .filter(|name| name.ends_with(".tmp"))
            .collect()
    };
    let clock = Clock::system();
    let mut config = config(Durability::Always);
    config.segment_bytes_max = 4096;
    let keys = 200;

    let fs = MemFs::new();
    let engine = open(&fs, &config, &clock);
    load_then_overwrite_most(&engine, keys);
    let before = engine.stats().disk_bytes;
    assert!(engine.compact_now(0.5).unwrap() >= 2);
    assert!(engine.stats().disk_bytes < before);
    assert_eq!(leftovers(&fs), Vec::<String>::new());
    assert_loaded_then_overwritten(&engine, keys);

    let mut cuts_failed = 0;
    for n in 1..200 {
        let fs = MemFs::new();
        let engine = open(&fs, &config, &clock);
        load_then_overwrite_most(&engine, keys);
        fs.inject_nth(FaultKind::Eio, n);
        let result = engine.compact_now(0.5);
        fs.clear_faults();
        let Err(error) = result else { break };
        assert_loaded_then_overwritten(&engine, keys);
        if !error.to_string().contains("deleting") {
            continue;
        }
        cuts_failed += 1;
        assert_eq!(leftovers(&fs), Vec::<String>::new(), "{error}");
        drop(engine);
        let engine = open(&fs, &config, &clock);
        assert_loaded_then_overwritten(&engine, keys);
    }
    assert!(cuts_failed >= 1, "no failure point fell in a cut");
}

/// An abandoned output (its pass failed after keys were switched to it)
/// that cannot be copied again, here because its file is damaged, keeps
/// the segment it copied from on disk, and does not stop the rest of
/// compaction; a power cut then loses nothing.
#[test]
fn an_abandoned_output_that_cannot_be_copied_again_keeps_its_source_and_stops_nothing_else() {
    let clock = Clock::system();
    let config = large_values_config();
    let dir = std::path::Path::new("/data");
    for n in 1..40 {
        let fs = MemFs::new();
        let engine = open(&fs, &config, &clock);
        let names = load_large_values(&engine, 3000);
        let before = common::contents(&engine, &names);
        let newest_log = engine
            .stats()
            .segment_details
            .iter()
            .map(|s| s.id)
            .max()
            .unwrap();
        fs.inject_nth(FaultKind::EioOnSync, n);
        let failed = engine.compact_now(0.5);
        fs.clear_faults();
        assert!(failed.is_err(), "no fault point left an abandoned output");
        engine.maintain_now();
        assert!(
            common::contents(&engine, &names) == before,
            "fault {n}: items changed"
        );
        let files = fs.file_names(dir);
        let abandoned = engine.stats().segment_details.into_iter().find(|s| {
            s.id > newest_log && s.live_bytes > 0 && !files.contains(&format!("{:010}.hint", s.id))
        });
        let Some(abandoned) = abandoned else { continue };
        let source = "0000000001.seg".to_owned();
        assert!(files.contains(&source), "{files:?}");
        fs.corrupt(&dir.join(format!("{:010}.seg", abandoned.id)), 100, 0xff)
            .unwrap();
        // Dead records elsewhere: the second log segment's own keys again.
        for key in 2200..2700 {
            let mut value = format!("{key}:2:").into_bytes();
            value.resize(4000, b'.');
            set(&engine, format!("k{key}").as_bytes(), &value);
        }
        let before = common::contents(&engine, &names);
        let compactions = engine.stats().compactions;
        let again = engine.compact_now(0.0);
        assert!(again.is_err(), "the damaged output was copied: {again:?}");
        assert!(
            engine.stats().compactions > compactions,
            "nothing else was compacted"
        );
        assert!(
            fs.file_names(dir).contains(&source),
            "the source was removed"
        );
        fs.power_cut(None);
        drop(engine);
        let engine = open(&fs, &config, &clock);
        assert!(
            common::contents(&engine, &names) == before,
            "fault {n}: items lost"
        );
        return;
    }
    panic!("no fault point left an abandoned output");
}

#[test]
fn the_small_segments_that_restarts_leave_behind_are_merged() {
    // Every open starts a new segment: a server restarted after a few
    // writes each time leaves one small, mostly live segment per run.
    let fs = MemFs::new();
    let config = config(Durability::EverySec);
    for run in 0..12 {
        let engine = open(&fs, &config, &Clock::system());
        set(&engine, format!("k{run}").as_bytes(), b"v");
        engine.close().unwrap();
    }
    let engine = open(&fs, &config, &Clock::system());
    assert_eq!(
        engine.stats().segments,
        13,
        "12 runs' segments and the active one"
    );
    // Nothing is dead enough for compaction's usual choice.
    assert_eq!(engine.compact_now(1.0).unwrap(), 12);
    assert_eq!(engine.stats().segments, 2, "one merged, and the active one");
    let check = |engine: &larder_engine::Engine| {
        for run in 0..12 {
            assert_eq!(value(engine, format!("k{run}").as_bytes()).unwrap(), b"v");
        }
    };
    check(&engine);
    assert_eq!(
        engine.compact_now(1.0).unwrap(),
        0,
        "fewer than 8 small ones now"
    );
    drop(engine);
    let engine = open(&fs, &config, &Clock::system());
    check(&engine);
}

#[test]
fn merging_small_segments_copies_each_byte_a_few_times_not_once_per_merge() {
    // Merged into one output that stays small, the same bytes would be
    // copied again with every few new runs: quadratic in the runs.
    let fs = MemFs::new();
    let config = config(Durability::EverySec);
    let runs = 200;
    let (mut written, mut copied, mut segments) = (0, 0, 0);
    for run in 0..runs {
        let engine = open(&fs, &config, &Clock::system());
        set(&engine, format!("k{run}").as_bytes(), &[b'v'; 1000]);
        written += 1000;
        engine.compact_now(1.0).unwrap();
        // Each run's engine counts its own compactions.
        copied += engine.stats().compaction_bytes_written;
        segments = engine.stats().segments;
        engine.close().unwrap();
    }
    assert!(
        copied < 4 * written,
        "{copied} bytes copied for {written} written"
    );
    assert!(segments < 30, "{segments} segments");
    let engine = open(&fs, &config, &Clock::system());
    for run in 0..runs {
        assert_eq!(
            value(&engine, format!("k{run}").as_bytes()).unwrap().len(),
            1000
        );
    }
}
