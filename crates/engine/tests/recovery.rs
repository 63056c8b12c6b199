//! Reopening a data directory: what a restart brings back, what damage it
//! repairs (a torn tail of the active segment), what damage it refuses (a
//! bad record in a sealed segment, or in the active segment before an
//! intact record), and how it falls back when hint files are missing or
//! damaged or a compaction was cut short.
//!
//! Every test runs on a [`MemFs`]; "reopen" is `close` then `open` on the
//! same file system, unless the test says it crashes or cuts the power.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{
    compact_into_a_power_cut, config, contents, failure_points, keys, open, set, value, wait_until,
    Stored,
};
use larder_engine::fs::{FaultKind, Fs, MemFs};
use larder_engine::record::{self, Header, Kind, SEQ_GAP_AT_OPEN, SEQ_MAX};
use larder_engine::segment::{self, Origin, SegmentHeader};
use larder_engine::{
    BatchOp, Clock, Config, Durability, Engine, Error, Expiry, ReadOptions, StoreMode,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DIR: &str = "/data";

/// A config whose segments seal after about `bytes`.
fn small_segments(bytes: u32) -> Config {
    let mut config = config(Durability::Always);
    config.segment_bytes_max = bytes;
    config
}

fn reopen(engine: Engine, fs: &MemFs, config: &Config, clock: &Clock) -> Engine {
    engine.close().unwrap();
    open(fs, config, clock)
}

/// Stores `count` items with distinct values, flags and expiry times.
fn fill(engine: &Engine, clock: &Clock, count: usize, value_len: usize) {
    let now = clock.now();
    for i in 0..count {
        let mut value = format!("value-{i}-").into_bytes();
        value.resize(value_len.max(value.len()), b'.');
        let expiry = if i % 3 == 0 {
            Expiry::Never
        } else {
            Expiry::At(now + 10_000 + i as u32)
        };
        let key = format!("k{i}");
        let (_, ticket) = engine
            .store(StoreMode::Set, key.as_bytes(), &value, i as u32, expiry)
            .unwrap();
        engine.commit(ticket).unwrap();
    }
}

fn path(name: &str) -> PathBuf {
    Path::new(DIR).join(name)
}

/// Segment ids in the directory, in order.
fn segment_ids(fs: &MemFs) -> Vec<u32> {
    fs.file_names(Path::new(DIR))
        .iter()
        .filter_map(|name| segment::parse_name(name, "seg"))
        .collect()
}

fn hint_ids(fs: &MemFs) -> Vec<u32> {
    fs.file_names(Path::new(DIR))
        .iter()
        .filter_map(|name| segment::parse_name(name, "hint"))
        .collect()
}

fn segment_path(id: u32) -> PathBuf {
    path(&segment::segment_name(id))
}

/// Writes segment `header.id` holding only its header and the log's reserved
/// zeros (longer than a creation cut short, which open removes); returns
/// its path.
fn header_only_segment(fs: &MemFs, header: SegmentHeader) -> PathBuf {
    let path = segment_path(header.id);
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(&[0; 64]);
    fs.write_file(&path, &bytes).unwrap();
    path
}

/// Opens a directory that must fail with a corruption error; returns the
/// file, offset and reason it names.
fn corruption_at_open(fs: &MemFs, config: &Config, clock: &Clock) -> (PathBuf, u64, String) {
    match Engine::open_with(
        config.clone(),
        std::sync::Arc::new(fs.clone()),
        clock.clone(),
    ) {
        Err(Error::Corruption {
            file,
            offset,
            reason,
        }) => (file, offset, reason),
        Err(other) => panic!("expected a corruption error, got {other}"),
        Ok(_) => panic!("opened a damaged directory"),
    }
}

#[test]
fn reopening_after_a_clean_close_restores_every_item_exactly() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 300, 50);
    engine.compact_now(2.0).unwrap(); // hint files for the sealed segments
    fill(&engine, &clock, 20, 10); // overwrites, in the active segment
    let keys = keys(300);
    let before = contents(&engine, &keys);
    assert_eq!(before.len(), 300);
    let engine = reopen(engine, &fs, &config, &clock);
    let report = engine.recovery_report();
    assert!(report.segments_from_hints > 0, "{report:?}");
    assert_eq!(report.truncated_bytes, 0);
    assert_eq!(contents(&engine, &keys), before);
    assert_eq!(engine.stats().items, 300);
}

#[test]
fn cas_uniques_keep_increasing_across_reopens() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::Always);
    let mut engine = open(&fs, &config, &clock);
    let mut last = 0;
    for round in 0..4 {
        let cas = set(&engine, b"k", b"v");
        assert!(cas > last, "round {round}: cas {cas} after {last}");
        // The newest records before the restart are not puts: a delete, a
        // touch and a flush take CAS uniques too, and none may come back.
        set(&engine, b"other", b"v");
        let (_, ticket) = engine.delete(b"other", None).unwrap();
        engine.commit(ticket).unwrap();
        let (_, ticket) = engine.touch(b"k", Expiry::Never).unwrap();
        engine.commit(ticket).unwrap();
        if round == 2 {
            engine.commit(engine.flush_all(0).unwrap()).unwrap();
        }
        last = engine.stats().next_cas - 1;
        engine = reopen(engine, &fs, &config, &clock);
        assert!(engine.stats().next_cas > last, "round {round}");
    }
}

#[test]
fn garbage_after_the_last_record_is_cut_and_reported() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 10, 20);
    let before = contents(&engine, &keys(10));
    engine.close().unwrap();
    let active = segment_path(*segment_ids(&fs).last().unwrap());
    let mut bytes = fs.read_file(&active).unwrap();
    let clean_len = bytes.len() as u64;
    bytes.extend_from_slice(&[0xA5; 77]);
    fs.write_file(&active, &bytes).unwrap();

    let engine = open(&fs, &config, &clock);
    let report = engine.recovery_report().clone();
    assert_eq!(report.truncated_bytes, 77);
    assert_eq!(report.truncated_file.as_deref(), Some(active.as_path()));
    assert!(report.truncated_reason.is_some());
    assert_eq!(contents(&engine, &keys(10)), before);
    assert_eq!(fs.read_file(&active).unwrap().len() as u64, clean_len);
    set(&engine, b"after", b"the cut");
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(engine.recovery_report().truncated_bytes, 0);
    assert_eq!(value(&engine, b"after").unwrap(), b"the cut");
    assert_eq!(contents(&engine, &keys(10)), before);
}

#[test]
fn a_record_cut_short_at_the_end_of_the_active_segment_is_dropped() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &clock);
    set(&engine, b"first", b"kept");
    set(&engine, b"last", b"0123456789");
    engine.close().unwrap();
    let active = segment_path(*segment_ids(&fs).last().unwrap());
    let bytes = fs.read_file(&active).unwrap();
    let cut = 5;
    fs.write_file(&active, &bytes[..bytes.len() - cut]).unwrap();

    let engine = open(&fs, &config, &clock);
    let record_len = record::HEADER_BYTES + b"last".len() + b"0123456789".len();
    let report = engine.recovery_report();
    assert_eq!(report.truncated_bytes, (record_len - cut) as u64);
    assert_eq!(report.truncated_file.as_deref(), Some(active.as_path()));
    assert_eq!(value(&engine, b"first").unwrap(), b"kept");
    assert_eq!(value(&engine, b"last"), None);
}

#[test]
fn a_torn_power_cut_of_unsynced_writes_is_cut_and_reported() {
    // Under `None`, nothing is synced until close: a torn cut leaves part of
    // the log, ending in the middle of a record for most seeds.
    let mut reported = 0;
    for seed in 0..40 {
        let fs = MemFs::new();
        let clock = Clock::system();
        let config = config(Durability::Always);
        let engine = open(&fs, &config, &clock);
        set(&engine, b"synced", b"before the cut");
        engine.close().unwrap();
        let config = Config {
            durability: Durability::None,
            ..config
        };
        let engine = open(&fs, &config, &clock);
        fill(&engine, &clock, 50, 40);
        let active = segment_path(*segment_ids(&fs).last().unwrap());
        fs.power_cut(Some(seed));
        drop(engine);
        let engine = open(&fs, &config, &clock);
        let report = engine.recovery_report();
        if report.truncated_bytes > 0 {
            reported += 1;
            assert_eq!(report.truncated_file.as_deref(), Some(active.as_path()));
        }
        assert_eq!(value(&engine, b"synced").unwrap(), b"before the cut");
        let survivors = contents(&engine, &keys(50)).len();
        let expected: Vec<usize> = (0..survivors).collect();
        let found: Vec<usize> = (0..50)
            .filter(|i| engine.get(format!("k{i}").as_bytes()).unwrap().is_some())
            .collect();
        assert_eq!(found, expected, "seed {seed}: survivors are a prefix");
    }
    assert!(reported > 20, "only {reported} of 40 cuts tore a record");
}

/// The offsets of the records in a segment file's bytes (up to the zeros
/// of a reserved tail).
fn record_offsets(bytes: &[u8]) -> Vec<u64> {
    let mut offsets = Vec::new();
    let mut at = segment::HEADER_BYTES as usize;
    while bytes[at..].iter().any(|&byte| byte != 0) {
        offsets.push(at as u64);
        at += record::decode(&bytes[at..]).unwrap().record_len() as usize;
    }
    offsets
}

/// A record whose seq no engine could have issued, under a good checksum:
/// damage like any other. At the active segment's end it is cut off; the
/// seqs issued after the open carry on from the last good record (past the
/// gap every open leaves).
#[test]
fn a_record_with_an_impossible_seq_is_cut_off_the_active_segment() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &clock);
    set(&engine, b"first", b"kept");
    let next_cas = engine.stats().next_cas;
    engine.close().unwrap();
    let active = segment_path(*segment_ids(&fs).last().unwrap());
    let mut bytes = fs.read_file(&active).unwrap();
    let clean_len = bytes.len() as u64;
    let put = Header {
        kind: Kind::Put,
        batch_continues: false,
        stale: false,
        key_len: 5,
        value_len: 5,
        flags: 0,
        exptime: 0,
        seq: u64::MAX,
    };
    record::encode(&mut bytes, &put, b"ghost", b"value");
    fs.write_file(&active, &bytes).unwrap();

    let engine = open(&fs, &config, &clock);
    let report = engine.recovery_report().clone();
    assert_eq!(report.truncated_file.as_deref(), Some(active.as_path()));
    assert_eq!(report.truncated_bytes, bytes.len() as u64 - clean_len);
    assert!(
        report.truncated_reason.as_deref().unwrap().contains("seq"),
        "{report:?}"
    );
    assert_eq!(value(&engine, b"ghost"), None);
    assert_eq!(value(&engine, b"first").unwrap(), b"kept");
    assert_eq!(engine.stats().next_cas, next_cas + SEQ_GAP_AT_OPEN);
    set(&engine, b"after", b"the cut");
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(value(&engine, b"after").unwrap(), b"the cut");
}

/// When a directory starts close to the largest seq a file may hold, the
/// writes past it fail with an error: none is acknowledged and then lost
/// because the next open refuses its seq. Where the gap an open leaves does
/// not fit, the open issues no seq at all. A header claiming more than the
/// largest fails the open, naming the file.
#[test]
fn seqs_run_out_with_an_error_and_never_past_what_an_open_reads_back() {
    let config = config(Durability::Always);
    for next in [SEQ_MAX + 2, u64::MAX] {
        let fs = MemFs::new();
        let only = header_only_segment(&fs, log_header(1, next));
        let (file, _, reason) = corruption_at_open(&fs, &config, &Clock::system());
        assert_eq!(file, only);
        assert!(reason.contains("largest possible"), "{reason}");
    }
    let last_fits = SEQ_MAX - SEQ_GAP_AT_OPEN;
    for next in [last_fits, last_fits + 1, SEQ_MAX, SEQ_MAX + 1] {
        let fs = MemFs::new();
        let clock = Clock::system();
        header_only_segment(&fs, log_header(1, next));
        let engine = open(&fs, &config, &clock);
        if next == last_fits {
            // A batch of two needs one seq more than is left: none is issued.
            let two = [("a", "1"), ("b", "2")].map(|(key, value)| BatchOp::Set {
                key: key.as_bytes(),
                value: value.as_bytes(),
                flags: 0,
                expiry: Expiry::Never,
            });
            let error = engine.batch(&two).expect_err("a batch past the last seq");
            assert!(matches!(error, Error::Exhausted(_)), "{error}");
            assert_eq!(set(&engine, b"last", b"fits"), SEQ_MAX);
        }
        let refused = engine.store(StoreMode::Set, b"more", b"x", 0, Expiry::Never);
        let error = refused.expect_err("no seq left for a write");
        assert!(matches!(error, Error::Exhausted(_)), "{error}");
        assert!(
            error.to_string().contains("no sequence number left"),
            "{error}"
        );
        let engine = reopen(engine, &fs, &config, &clock);
        assert_eq!(value(&engine, b"more"), None);
        assert_eq!(value(&engine, b"a"), None);
        if next == last_fits {
            assert_eq!(value(&engine, b"last").unwrap(), b"fits");
        }
        assert!(engine
            .store(StoreMode::Set, b"more", b"x", 0, Expiry::Never)
            .is_err());
    }
}

/// Whether segment file `id` is gone, or is a log segment (each open starts
/// a new one, which may take the id of a file it removed).
fn is_log_segment_or_gone(fs: &MemFs, id: u32) -> bool {
    fs.read_file(&segment_path(id)).is_none_or(|bytes| {
        SegmentHeader::decode(&bytes, &segment_path(id))
            .is_ok_and(|header| header.origin == Origin::Log)
    })
}

/// The header of log segment `id` whose next seq to issue is `next_seq`.
fn log_header(id: u32, next_seq: u64) -> SegmentHeader {
    SegmentHeader {
        origin: Origin::Log,
        id,
        seq_at_creation: next_seq,
        flush_seq: 0,
    }
}

/// Segment ids stop at `segment::ID_MAX`: a directory whose newest segment
/// has it opens, but with no id left for the segment an open starts (where
/// it records the seqs it may issue), writes fail with an error while what
/// was written stays; a segment named above it fails the open, naming the
/// file.
/// Each open starts a new log segment, to record where its seqs start; the
/// segments of runs that wrote nothing go at the next open, so restarts
/// leave no trail of empty files, and nothing they held is lost.
#[test]
fn restarts_without_writes_leave_no_empty_segments_behind() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &clock);
    let first_cas = set(&engine, b"kept", b"value");
    engine.close().unwrap();
    let mut last_cas = first_cas;
    for restart in 0..5 {
        let engine = open(&fs, &config, &clock);
        assert_eq!(value(&engine, b"kept").as_deref(), Some(&b"value"[..]));
        assert!(engine.stats().next_cas > last_cas, "restart {restart}");
        last_cas = engine.stats().next_cas;
        engine.close().unwrap();
        // The segment with the record, and this run's empty one.
        assert_eq!(
            segment_ids(&fs).len(),
            2,
            "restart {restart}: {:?}",
            fs.file_names(Path::new(DIR))
        );
    }
    fs.power_cut(None);
    let engine = open(&fs, &config, &clock);
    assert_eq!(value(&engine, b"kept").as_deref(), Some(&b"value"[..]));
    assert!(set(&engine, b"new", b"v") > last_cas);
}

#[test]
fn segment_ids_run_out_with_an_error_and_never_wrap() {
    let fs = MemFs::new();
    let above = header_only_segment(&fs, log_header(u32::MAX, 1));
    let (file, _, reason) = corruption_at_open(&fs, &config(Durability::Always), &Clock::system());
    assert_eq!(file, above);
    assert!(reason.contains("above the largest"), "{reason}");

    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    // The open takes the last id for the segment it starts.
    header_only_segment(&fs, log_header(segment::ID_MAX - 1, 1));
    let engine = open(&fs, &config, &clock);
    let mut stored = 0;
    let error = loop {
        let key = format!("k{stored}");
        match engine.store(
            StoreMode::Set,
            key.as_bytes(),
            &[b'v'; 100],
            0,
            Expiry::Never,
        ) {
            Ok((_, ticket)) => engine.commit(ticket).unwrap(),
            Err(error) => break error,
        }
        stored += 1;
        assert!(stored < 1000, "the log never needed a new segment");
    };
    assert!(matches!(error, Error::Exhausted(_)), "{error}");
    assert!(stored > 0);
    let engine = reopen(engine, &fs, &config, &clock);
    let refused = engine.store(StoreMode::Set, b"more", b"x", 0, Expiry::Never);
    let error = refused.expect_err("no id left to start a segment in");
    assert!(matches!(error, Error::Exhausted(_)), "{error}");
    for i in 0..stored {
        assert!(value(&engine, format!("k{i}").as_bytes()).is_some(), "k{i}");
    }
}

#[test]
fn a_flipped_bit_in_a_sealed_segment_fails_open_naming_file_and_offset() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let engine = open(&fs, &config, &clock);
    // Equal-sized records, so the damaged record's offset is computable.
    fill(&engine, &clock, 200, 60);
    engine.close().unwrap();
    let ids = segment_ids(&fs);
    assert!(ids.len() >= 3, "segments: {ids:?}");
    let sealed = segment_path(ids[1]);
    let fourth_record = record_offsets(&fs.read_file(&sealed).unwrap())[3];
    fs.corrupt(&sealed, fourth_record + 17, 0x04).unwrap();

    let (file, offset, _) = corruption_at_open(&fs, &config, &clock);
    assert_eq!(file, sealed);
    assert_eq!(offset, fourth_record);
}

#[test]
fn a_flipped_bit_behind_a_hint_file_is_reported_on_read() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = small_segments(4096);
    config.cache_bytes_max = 0; // every read goes to the file
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 200, 60);
    engine.compact_now(2.0).unwrap();
    engine.close().unwrap();
    let first = segment_ids(&fs)[0];
    assert!(hint_ids(&fs).contains(&first));
    let header = u64::from(segment::HEADER_BYTES);
    fs.corrupt(&segment_path(first), header + 40, 0x80).unwrap();

    let engine = open(&fs, &config, &clock);
    match engine.get(b"k0") {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, segment_path(first));
            assert_eq!(offset, header);
        }
        other => panic!("expected a corruption error, got {other:?}"),
    }
    assert!(value(&engine, b"k1").is_some(), "other records still read");
}

/// Writes several segments with hint files and closes; returns the
/// contents and the keys.
fn sealed_with_hints(fs: &MemFs, config: &Config, clock: &Clock) -> BTreeMap<Vec<u8>, Stored> {
    let engine = open(fs, config, clock);
    fill(&engine, clock, 200, 60);
    fill(&engine, clock, 50, 30); // overwrites, so hints and scans resolve
    let (_, ticket) = engine.delete(b"k7", None).unwrap();
    engine.commit(ticket).unwrap();
    let (_, ticket) = engine.touch(b"k8", Expiry::At(clock.now() + 999)).unwrap();
    engine.commit(ticket).unwrap();
    fill(&engine, clock, 5, 300); // seal the segment holding those
    engine.compact_now(2.0).unwrap();
    let before = contents(&engine, &keys(200));
    engine.close().unwrap();
    assert!(hint_ids(fs).len() >= 3, "hints: {:?}", hint_ids(fs));
    before
}

#[test]
fn missing_hint_files_fall_back_to_scanning_with_the_same_result() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let before = sealed_with_hints(&fs, &config, &clock);
    let engine = open(&fs, &config, &clock);
    assert_eq!(contents(&engine, &keys(200)), before);
    let from_hints = engine.recovery_report().segments_from_hints;
    assert!(from_hints >= 3);
    engine.close().unwrap();

    for id in hint_ids(&fs) {
        fs.remove(&path(&segment::hint_name(id))).unwrap();
    }
    fs.sync_dir(Path::new(DIR)).unwrap();
    let engine = open(&fs, &config, &clock);
    let report = engine.recovery_report();
    assert_eq!(report.segments_from_hints, 0);
    assert_eq!(report.segments_scanned, report.segments);
    assert_eq!(contents(&engine, &keys(200)), before);
}

#[test]
fn damaged_hint_files_fall_back_to_scanning_with_the_same_result() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let before = sealed_with_hints(&fs, &config, &clock);
    let hints = hint_ids(&fs);
    // One with a flipped bit in an entry, one cut short, one replaced by
    // the hint of another segment.
    let damaged = path(&segment::hint_name(hints[0]));
    fs.corrupt(&damaged, 100, 0x01).unwrap();
    let cut = path(&segment::hint_name(hints[1]));
    let bytes = fs.read_file(&cut).unwrap();
    fs.write_file(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let other = fs.read_file(&path(&segment::hint_name(hints[0]))).unwrap();
    fs.write_file(&path(&segment::hint_name(hints[2])), &other)
        .unwrap();

    let engine = open(&fs, &config, &clock);
    let report = engine.recovery_report();
    assert_eq!(report.segments_from_hints, hints.len() as u64 - 3);
    assert_eq!(
        report.segments_scanned,
        report.segments - report.segments_from_hints
    );
    assert_eq!(contents(&engine, &keys(200)), before);
}

#[test]
fn a_second_open_of_an_open_directory_fails_with_locked() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &clock);
    set(&engine, b"k", b"v");
    let second = Engine::open_with(
        config.clone(),
        std::sync::Arc::new(fs.clone()),
        clock.clone(),
    );
    match second {
        Err(Error::Locked { dir, lock }) => {
            assert_eq!(dir, Path::new(DIR));
            assert_eq!(lock, path(larder_engine::LOCK_FILE));
        }
        Err(other) => panic!("expected Locked, got {other}"),
        Ok(_) => panic!("two engines opened one directory"),
    }
    assert_eq!(value(&engine, b"k").unwrap(), b"v", "the first is unharmed");
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(value(&engine, b"k").unwrap(), b"v");
}

/// Touches one item and gets-and-touches another; optionally seals and
/// compacts the segments holding the puts and touches; reopens; checks
/// the expiry times came back and act.
fn touch_expiry_survives_reopen(compact: bool) {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(2048);
    let engine = open(&fs, &config, &clock);
    let now = clock.now();
    set(&engine, b"touched", b"t");
    set(&engine, b"gat", b"g");
    set(&engine, b"untouched", b"u");
    let (found, ticket) = engine.touch(b"touched", Expiry::At(now + 100)).unwrap();
    engine.commit(ticket).unwrap();
    assert!(found);
    let options = ReadOptions {
        touch: Some(Expiry::At(now + 300)),
        ..ReadOptions::default()
    };
    let (item, ticket) = engine.get_with(b"gat", options).unwrap();
    engine.commit(ticket).unwrap();
    assert_eq!(item.unwrap().exptime, now + 300);
    if compact {
        fill(&engine, &clock, 40, 100);
        fill(&engine, &clock, 40, 100);
        assert!(engine.compact_now(0.0).unwrap() > 0);
    }
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(engine.get(b"touched").unwrap().unwrap().exptime, now + 100);
    assert_eq!(engine.get(b"gat").unwrap().unwrap().exptime, now + 300);
    assert_eq!(engine.get(b"untouched").unwrap().unwrap().exptime, 0);
    clock.advance(200);
    assert_eq!(value(&engine, b"touched"), None);
    assert_eq!(value(&engine, b"gat").unwrap(), b"g");
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(value(&engine, b"touched"), None);
    assert_eq!(value(&engine, b"gat").unwrap(), b"g");
    clock.advance(200);
    assert_eq!(value(&engine, b"gat"), None);
    assert_eq!(value(&engine, b"untouched").unwrap(), b"u");
}

#[test]
fn touch_and_gat_expiry_survives_reopen() {
    touch_expiry_survives_reopen(false);
}

#[test]
fn touch_and_gat_expiry_survives_compaction_and_reopen() {
    touch_expiry_survives_reopen(true);
}

#[test]
fn flush_all_survives_reopen() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(2048);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 30, 50);
    engine.commit(engine.flush_all(0).unwrap()).unwrap();
    set(&engine, b"after", b"kept");
    let engine = reopen(engine, &fs, &config, &clock);
    assert!(contents(&engine, &keys(30)).is_empty());
    assert_eq!(value(&engine, b"after").unwrap(), b"kept");
    // Once the flush record's segment is compacted away, the flush lives on
    // in the newer segments' headers.
    fill(&engine, &clock, 30, 50);
    engine.commit(engine.flush_all(0).unwrap()).unwrap();
    fill(&engine, &clock, 10, 200);
    engine.maintain_now();
    assert!(engine.compact_now(0.0).unwrap() > 0);
    let engine = reopen(engine, &fs, &config, &clock);
    let found = contents(&engine, &keys(30));
    let survivors: Vec<&Vec<u8>> = found.keys().collect();
    assert_eq!(
        survivors,
        keys(10).iter().collect::<Vec<_>>(),
        "rewritten after the flush"
    );
    assert_eq!(value(&engine, b"after"), None);
}

#[test]
fn a_delayed_flush_survives_reopen_before_and_after_its_deadline() {
    // Regression: a delayed flush that came due while the engine was down
    // was applied by recovery in memory only. The next open applied it
    // again, at a later point, and wiped writes acknowledged in between.
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &clock);
    set(&engine, b"before", b"v");
    engine.commit(engine.flush_all(100).unwrap()).unwrap();
    set(&engine, b"during", b"v");
    let engine = reopen(engine, &fs, &config, &clock);
    assert!(
        value(&engine, b"before").is_some(),
        "the flush is not due yet"
    );
    assert!(value(&engine, b"during").is_some());
    // Due while the engine is down: everything written before it is gone.
    engine.close().unwrap();
    clock.advance(101);
    let engine = open(&fs, &config, &clock);
    assert_eq!(value(&engine, b"before"), None);
    assert_eq!(value(&engine, b"during"), None);
    set(&engine, b"later", b"v");
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(value(&engine, b"before"), None);
    assert_eq!(value(&engine, b"later").unwrap(), b"v");
}

#[test]
fn a_delayed_flush_hides_items_as_soon_as_it_is_due() {
    // Regression: only the maintenance thread carried out a due flush, so
    // reads in between saw flushed items, and writes in between were
    // flushed although they came after the deadline.
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::Always);
    let engine = open(&fs, &config, &clock);
    set(&engine, b"before", b"v");
    engine.commit(engine.flush_all(100).unwrap()).unwrap();
    clock.advance(101);
    // No maintenance pass has run: memcached hides the items all the same.
    assert_eq!(value(&engine, b"before"), None);
    set(&engine, b"after", b"v");
    assert!(value(&engine, b"after").is_some());
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(value(&engine, b"before"), None);
    assert_eq!(value(&engine, b"after").unwrap(), b"v");
}

/// Readers racing the thread that carries out a due flush wait for it:
/// none sees an item the flush hides, however they interleave.
#[test]
fn no_reader_sees_a_flushed_item_while_another_carries_the_flush_out() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::None);
    let engine = std::sync::Arc::new(open(&fs, &config, &clock));
    let readers = 4;
    for round in 0..300 {
        set(&engine, b"k", format!("{round}").as_bytes());
        engine.commit(engine.flush_all(1).unwrap()).unwrap();
        clock.advance(1);
        let start = std::sync::Arc::new(std::sync::Barrier::new(readers));
        let seen: Vec<_> = (0..readers)
            .map(|_| {
                let (engine, start) = (
                    std::sync::Arc::clone(&engine),
                    std::sync::Arc::clone(&start),
                );
                std::thread::spawn(move || {
                    start.wait();
                    value(&engine, b"k")
                })
            })
            .collect();
        for reader in seen {
            assert_eq!(reader.join().unwrap(), None, "round {round}");
        }
    }
}

/// A `flush_all` racing a due delayed flush being carried out, and another
/// `flush_all`: whatever the order, the flush left pending in memory is the
/// one recovery finds in the log.
#[test]
fn racing_flushes_leave_the_pending_one_that_recovery_finds() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::None);
    let mut engine = open(&fs, &config, &clock);
    for round in 0..100u32 {
        set(&engine, b"k", b"v");
        engine.commit(engine.flush_all(1).unwrap()).unwrap();
        let shared = std::sync::Arc::new(engine);
        let start = std::sync::Arc::new(std::sync::Barrier::new(4));
        let racers: Vec<_> = (0..3u32)
            .map(|racer| {
                let (engine, start) = (
                    std::sync::Arc::clone(&shared),
                    std::sync::Arc::clone(&start),
                );
                std::thread::spawn(move || {
                    start.wait();
                    match racer {
                        0 => drop(value(&engine, b"k")),
                        _ => engine
                            .commit(engine.flush_all(100 + racer + round % 7).unwrap())
                            .unwrap(),
                    }
                })
            })
            .collect();
        start.wait();
        clock.advance(1);
        for racer in racers {
            racer.join().unwrap();
        }
        engine = std::sync::Arc::into_inner(shared).unwrap();
        let in_memory = engine.stats().flush_deadline;
        assert_ne!(in_memory, 0, "round {round}: a delayed flush is pending");
        engine = reopen(engine, &fs, &config, &clock);
        assert_eq!(engine.stats().flush_deadline, in_memory, "round {round}");
        // Carry it out so the next round starts from no pending flush.
        clock.advance(200);
        assert_eq!(value(&engine, b"k"), None);
        assert_eq!(engine.stats().flush_deadline, 0, "round {round}");
    }
}

#[test]
fn a_due_delayed_flush_survives_compaction_of_its_segment_and_reopen() {
    // Regression: compaction dropped a delayed flush record once its
    // deadline had passed, even if nothing had carried it out yet; after a
    // restart the flushed items were back.
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(2048);
    let engine = open(&fs, &config, &clock);
    set(&engine, b"before", b"v");
    engine.commit(engine.flush_all(100).unwrap()).unwrap();
    fill(&engine, &clock, 40, 100); // seals the flush record's segment
    fill(&engine, &clock, 40, 100);
    clock.advance(101);
    assert!(engine.compact_now(0.0).unwrap() > 0);
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(value(&engine, b"before"), None);
    assert!(contents(&engine, &keys(40)).is_empty());
}

#[test]
fn a_delete_survives_compaction_of_its_segment_while_an_older_put_remains() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let engine = open(&fs, &config, &clock);
    // Segment 1: the put of "victim" among long-lived items.
    set(&engine, b"victim", b"must stay deleted");
    fill(&engine, &clock, 40, 60);
    // Later segments: the delete, among overwrites of one scratch key.
    let (_, ticket) = engine.delete(b"victim", None).unwrap();
    engine.commit(ticket).unwrap();
    for i in 0..200 {
        set(&engine, b"scratch", format!("{i:060}").as_bytes());
    }
    let first = segment_ids(&fs)[0];
    let compacted = engine.compact_now(0.5).unwrap();
    assert!(compacted > 0);
    let ids = segment_ids(&fs);
    assert!(
        ids.contains(&first),
        "the put's segment is mostly live: kept"
    );
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(value(&engine, b"victim"), None);
    assert_eq!(contents(&engine, &keys(40)).len(), 40);
    // Compacting everything leaves nothing to bring the put back either.
    fill(&engine, &clock, 40, 61);
    engine.compact_now(0.0).unwrap();
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(value(&engine, b"victim"), None);
}

#[test]
fn a_compaction_output_without_its_hint_is_discarded_at_open() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 100, 60);
    let before = contents(&engine, &keys(100));
    let next_cas = engine.stats().next_cas;
    engine.close().unwrap();
    // What a compaction cut short before its hint leaves: an output segment
    // whose records (with newer seqs than anything else) must not count.
    let id = segment_ids(&fs).last().unwrap() + 1;
    let header = SegmentHeader {
        origin: Origin::Compaction,
        id,
        seq_at_creation: next_cas,
        flush_seq: 0,
    };
    let mut bytes = header.encode().to_vec();
    let put = Header {
        kind: Kind::Put,
        batch_continues: false,
        stale: false,
        key_len: 2,
        value_len: 5,
        flags: 0,
        exptime: 0,
        seq: next_cas + 10,
    };
    record::encode(&mut bytes, &put, b"k1", b"ghost");
    fs.write_file(&segment_path(id), &bytes).unwrap();

    let engine = open(&fs, &config, &clock);
    assert_eq!(engine.recovery_report().abandoned_compactions, 1);
    assert!(is_log_segment_or_gone(&fs, id), "the output was removed");
    assert_eq!(contents(&engine, &keys(100)), before);
}

/// A closed directory whose log segments and compaction output have
/// freed ids below them: returns the items, a freed id and the newest
/// segment's id.
fn directory_with_a_freed_id(
    fs: &MemFs,
    config: &Config,
    clock: &Clock,
) -> (BTreeMap<Vec<u8>, Stored>, u32, u32) {
    let engine = open(fs, config, clock);
    fill(&engine, clock, 200, 60);
    fill(&engine, clock, 100, 60); // overwrites, so compaction has work
    engine.compact_now(0.0).unwrap();
    let before = contents(&engine, &keys(200));
    engine.close().unwrap();
    let ids = segment_ids(fs);
    let newest = *ids.last().unwrap();
    let origins: Vec<Origin> = ids
        .iter()
        .map(|&id| {
            let bytes = fs.read_file(&segment_path(id)).unwrap();
            SegmentHeader::decode(&bytes, &segment_path(id))
                .unwrap()
                .origin
        })
        .collect();
    assert!(origins.contains(&Origin::Log) && origins.contains(&Origin::Compaction));
    let freed = (1..newest)
        .find(|id| !ids.contains(id))
        .expect("compaction freed an id");
    (before, freed, newest)
}

/// A compaction output `id` that a power cut left without its hint.
fn output_without_hint(fs: &MemFs, id: u32) {
    let header = SegmentHeader {
        origin: Origin::Compaction,
        id,
        seq_at_creation: 1,
        flush_seq: 0,
    };
    fs.write_file(&segment_path(id), &header.encode()).unwrap();
}

#[test]
fn a_segment_left_under_its_temporary_name_is_removed_even_below_a_later_output() {
    // A new log segment's name made durable by the compactor's directory
    // sync before its header was synced, and a compaction output created
    // after it, durable: segments are made under a temporary name and
    // renamed once their header is synced, so the power cut leaves the
    // temporary name, which open deletes.
    for leftover in [Vec::new(), vec![0; segment::HEADER_BYTES as usize]] {
        let fs = MemFs::new();
        let clock = Clock::system();
        let config = small_segments(4096);
        let (before, _, newest) = directory_with_a_freed_id(&fs, &config, &clock);
        let tmp = path(&format!("{}.tmp", segment::segment_name(newest + 1)));
        fs.write_file(&tmp, &leftover).unwrap();
        output_without_hint(&fs, newest + 2);

        let engine = open(&fs, &config, &clock);
        let what = format!("{} bytes", leftover.len());
        assert!(fs.read_file(&tmp).is_none(), "{what}: the leftover stayed");
        assert_eq!(engine.recovery_report().abandoned_compactions, 1, "{what}");
        assert!(
            contents(&engine, &keys(200)) == before,
            "{what}: items differ"
        );
        set(&engine, b"after", b"reopen");
        let engine = reopen(engine, &fs, &config, &clock);
        assert_eq!(value(&engine, b"after").as_deref(), Some(&b"reopen"[..]));
    }
}

#[test]
fn an_emptied_or_damaged_segment_header_before_the_newest_file_fails_open_and_salvage_sets_it_aside(
) {
    // No creation leaves a segment name without its header, so wherever
    // one is found before the newest file, it is damage: one older than
    // both kinds of segment, or one newer than every log segment with a
    // compaction output after it.
    let mut damaged = vec![0; segment::HEADER_BYTES as usize];
    damaged[3] = 0x5a;
    for leftover in [Vec::new(), vec![0; segment::HEADER_BYTES as usize], damaged] {
        for where_ in ["freed id", "after the log"] {
            let fs = MemFs::new();
            let clock = Clock::system();
            let config = small_segments(4096);
            let (before, freed, newest) = directory_with_a_freed_id(&fs, &config, &clock);
            let id = if where_ == "freed id" {
                freed
            } else {
                output_without_hint(&fs, newest + 2);
                newest + 1
            };
            fs.write_file(&segment_path(id), &leftover).unwrap();

            let what = format!("{} bytes at the {where_}", leftover.len());
            let (file, offset, _) = corruption_at_open(&fs, &config, &clock);
            assert_eq!(file, segment_path(id), "{what}");
            assert_eq!(offset, 0, "{what}");
            assert_eq!(fs.read_file(&segment_path(id)).unwrap(), leftover, "{what}");

            // Too short to hold a record: salvage moves it aside whole.
            let salvage = Config {
                salvage: true,
                ..config.clone()
            };
            let engine = open(&fs, &salvage, &clock);
            assert_eq!(engine.recovery_report().salvaged_segments, 1, "{what}");
            assert!(
                contents(&engine, &keys(200)) == before,
                "{what}: items differ"
            );
            assert!(is_log_segment_or_gone(&fs, id), "{what}");
            let aside = path(&format!("damaged/{}", segment::segment_name(id)));
            assert_eq!(fs.read_file(&aside).unwrap(), leftover, "{what}");
            fs.power_cut(None);
            drop(engine);
            let engine = open(&fs, &config, &clock);
            assert!(
                contents(&engine, &keys(200)) == before,
                "{what}: after a power cut"
            );
        }
    }
}

#[test]
fn a_newest_segment_without_its_header_is_removed_and_counted() {
    // What a Larder that created segments under their own name could leave.
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let (before, _, newest) = directory_with_a_freed_id(&fs, &config, &clock);
    fs.write_file(&segment_path(newest + 1), &[]).unwrap();

    let engine = open(&fs, &config, &clock);
    assert!(is_log_segment_or_gone(&fs, newest + 1));
    assert_eq!(engine.recovery_report().unfinished_segments, 1);
    assert!(contents(&engine, &keys(200)) == before);
}

#[test]
fn a_newest_segment_with_a_damaged_header_and_bytes_after_it_fails_open() {
    // Room for a record after the header: whatever it holds, the file is
    // not an unfinished creation (no creation writes past the header
    // before the header is synced), and open leaves it to the operator.
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let (_, _, newest) = directory_with_a_freed_id(&fs, &config, &clock);
    let mut leftover = vec![0; segment::HEADER_BYTES as usize];
    leftover.extend_from_slice(&[0x5a; 20]);
    fs.write_file(&segment_path(newest + 1), &leftover).unwrap();
    let (file, offset, _) = corruption_at_open(&fs, &config, &clock);
    assert_eq!(file, segment_path(newest + 1));
    assert_eq!(offset, 0);
    assert_eq!(fs.read_file(&segment_path(newest + 1)).unwrap(), leftover);
}

#[test]
fn salvage_sets_aside_an_emptied_sealed_segment_with_its_hint_and_counts_what_the_hint_named() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let (before, _, _) = directory_with_a_freed_id(&fs, &config, &clock);
    let hinted = fs
        .file_names(Path::new(DIR))
        .iter()
        .find_map(|name| segment::parse_name(name, "hint"))
        .expect("a sealed segment with a hint");
    let hint_path = path(&segment::hint_name(hinted));
    let hint = fs.read_file(&hint_path).unwrap();
    let named = larder_engine::hint::decode(&hint, &hint_path)
        .unwrap()
        .entries
        .len() as u64;
    assert!(named > 0);
    // Damage empties the segment; its hint still names what it held.
    fs.write_file(&segment_path(hinted), &[]).unwrap();
    let (file, _, _) = corruption_at_open(&fs, &config, &clock);
    assert_eq!(file, segment_path(hinted));

    let salvage = Config {
        salvage: true,
        ..config.clone()
    };
    let engine = open(&fs, &salvage, &clock);
    let report = engine.recovery_report();
    assert_eq!(report.salvaged_segments, 1);
    assert_eq!(report.salvaged_records_skipped, named);
    assert!(fs.read_file(&hint_path).is_none(), "the hint stayed");
    let aside = |name: String| fs.read_file(&path(&format!("damaged/{name}")));
    assert_eq!(aside(segment::hint_name(hinted)).unwrap(), hint);
    assert_eq!(aside(segment::segment_name(hinted)).unwrap(), b"");
    // What the other segments hold is all there: each item is as before,
    // or gone with the emptied segment (compaction left no older copy of
    // any key here that an emptied record could uncover).
    let after = contents(&engine, &keys(200));
    assert!(after.len() < before.len());
    for (key, item) in &after {
        assert_eq!(before.get(key), Some(item));
    }
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &clock);
    assert!(contents(&engine, &keys(200)) == after);
}

/// Fails the `n`th operation of `fault`'s kind during a compaction pass,
/// then checks every item is there: at once, after a reopen, and after a
/// power cut.
fn interrupted_compaction_loses_nothing(fault: FaultKind, n: u64) -> bool {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(2048);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 60, 40);
    fill(&engine, &clock, 30, 45);
    let (_, ticket) = engine.delete(b"k50", None).unwrap();
    engine.commit(ticket).unwrap();
    fill(&engine, &clock, 10, 50);
    let keys = keys(60);
    let before = contents(&engine, &keys);
    fs.inject_nth(fault, n);
    let result = engine.compact_now(0.0);
    fs.clear_faults();
    let what = format!("{fault:?} at operation {n}: {result:?}");
    assert_eq!(contents(&engine, &keys), before, "{what}");
    drop(engine);
    let engine = open(&fs, &config, &clock);
    assert_eq!(contents(&engine, &keys), before, "{what}, reopened");
    // Compaction finishes cleanly afterwards.
    engine.compact_now(0.0).unwrap();
    assert_eq!(contents(&engine, &keys), before, "{what}, compacted again");
    fs.power_cut(Some(n));
    drop(engine);
    let engine = open(&fs, &config, &clock);
    assert_eq!(
        contents(&engine, &keys),
        before,
        "{what}, after a power cut"
    );
    result.is_err()
}

#[test]
fn a_compaction_that_fails_part_way_loses_nothing_at_reopen() {
    for fault in [FaultKind::Eio, FaultKind::NoSpace, FaultKind::EioOnSync] {
        let failed = failure_points(|n| interrupted_compaction_loses_nothing(fault, n));
        assert!(failed >= 3, "{fault:?}: only {failed} failure points");
    }
}

#[test]
fn a_compaction_interrupted_by_a_power_cut_at_any_step_loses_nothing() {
    // A failed step stops the pass where it is; cutting the power right
    // then leaves the files as a crash at that step would.
    for fault in [FaultKind::Eio, FaultKind::EioOnSync] {
        for n in 1..30 {
            let fs = MemFs::new();
            let clock = Clock::system();
            let config = small_segments(2048);
            let engine = open(&fs, &config, &clock);
            fill(&engine, &clock, 60, 40);
            fill(&engine, &clock, 30, 45);
            let keys = keys(60);
            let before = contents(&engine, &keys);
            let (result, engine) = compact_into_a_power_cut(&fs, engine, &config, &clock, fault, n);
            assert_eq!(
                contents(&engine, &keys),
                before,
                "{fault:?} at operation {n}: {result:?}"
            );
            if result.is_ok() {
                break;
            }
        }
    }
}

#[test]
fn restart_after_compaction_keeps_the_log_writable() {
    // Regression: recovery opened only the newest file for writing. After a
    // compaction the newest file is the compaction output, so the active log
    // segment was opened read-only and every write after the restart failed
    // (and a torn tail could not be cut).
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(2048);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 40, 60);
    fill(&engine, &clock, 40, 60);
    assert!(engine.compact_now(0.0).unwrap() > 0);
    let engine = reopen(engine, &fs, &config, &clock);
    set(&engine, b"after", b"restart");
    let engine = reopen(engine, &fs, &config, &clock);
    assert_eq!(value(&engine, b"after").unwrap(), b"restart");
    assert_eq!(contents(&engine, &keys(40)).len(), 40);
}

#[test]
fn the_reserved_tail_of_the_active_segment_is_not_a_torn_write() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::EverySec);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 20, 30);
    let active = segment_path(*segment_ids(&fs).last().unwrap());
    // The sync thread reserves blocks ahead of the records: zeros at the end.
    wait_until("blocks reserved ahead of the log", || {
        fs.read_file(&active).unwrap().len() >= 1 << 20
    });
    assert_eq!(*fs.read_file(&active).unwrap().last().unwrap(), 0);
    fs.crash_process();
    drop(engine);

    let engine = open(&fs, &config, &clock);
    let report = engine.recovery_report();
    assert_eq!(report.truncated_bytes, 0, "{report:?}");
    assert_eq!(report.truncated_file, None);
    assert_eq!(contents(&engine, &keys(20)).len(), 20);
    // The log goes on appending after the last record, not after the zeros.
    set(&engine, b"after", b"restart");
    engine.close().unwrap();
    let closed = fs.read_file(&active).unwrap();
    assert_ne!(
        *closed.last().unwrap(),
        0,
        "a clean close cuts the reserved tail"
    );
    let engine = open(&fs, &config, &clock);
    assert_eq!(value(&engine, b"after").unwrap(), b"restart");
    assert_eq!(contents(&engine, &keys(20)).len(), 20);
}

#[test]
fn a_torn_record_before_the_reserved_zeros_is_cut_and_reported() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::EverySec);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 10, 30);
    fs.crash_process();
    drop(engine);
    let active = segment_path(*segment_ids(&fs).last().unwrap());
    let bytes = fs.read_file(&active).unwrap();
    let last = *record_offsets(&bytes).last().unwrap();
    // Zero the second half of the last record, as a lost page would.
    let record_end = bytes.iter().rposition(|&byte| byte != 0).unwrap() as u64 + 1;
    let mut torn = bytes.clone();
    for byte in &mut torn[(last + (record_end - last) / 2) as usize..record_end as usize] {
        *byte = 0;
    }
    fs.write_file(&active, &torn).unwrap();

    let engine = open(&fs, &config, &clock);
    let report = engine.recovery_report();
    assert_eq!(report.truncated_file.as_deref(), Some(active.as_path()));
    assert_eq!(report.truncated_bytes, bytes.len() as u64 - last);
    assert_eq!(contents(&engine, &keys(10)).len(), 9);
}

#[test]
fn salvage_rewrites_a_damaged_sealed_segment_keeping_every_intact_record() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 200, 60);
    engine.compact_now(2.0).unwrap(); // hint files for the sealed segments
    let before = contents(&engine, &keys(200));
    engine.close().unwrap();
    let ids = segment_ids(&fs);
    let sealed = segment_path(ids[1]);
    assert!(hint_ids(&fs).contains(&ids[1]));
    let bytes = fs.read_file(&sealed).unwrap();
    let offsets = record_offsets(&bytes);
    // Two damaged records: a flipped bit, and a header whose lengths lie.
    fs.corrupt(&sealed, offsets[3] + 30, 0x04).unwrap();
    fs.corrupt(&sealed, offsets[6] + 12, 0x40).unwrap();
    let damaged = fs.read_file(&sealed).unwrap();
    let damaged_keys: Vec<Vec<u8>> = [3, 6]
        .iter()
        .map(|&i| {
            let at = offsets[i] as usize;
            let header = record::decode_header(&bytes[at..]).unwrap();
            bytes[at..][header.key_range()].to_vec()
        })
        .collect();

    let salvaging = Config {
        salvage: true,
        ..config.clone()
    };
    let engine = open(&fs, &salvaging, &clock);
    let report = engine.recovery_report();
    assert_eq!(report.salvaged_segments, 1, "{report:?}");
    assert_eq!(report.salvaged_records_skipped, 2, "{report:?}");
    let after = contents(&engine, &keys(200));
    for (key, stored) in &before {
        if damaged_keys.contains(key) {
            assert!(
                !after.contains_key(key),
                "{key:?} came back from a damaged record"
            );
        } else {
            assert_eq!(after.get(key), Some(stored), "{key:?}");
        }
    }
    assert_eq!(after.len(), before.len() - 2);
    // The original is kept, byte for byte; the hint now describes the
    // cleaned copy.
    let kept = Path::new(DIR)
        .join("damaged")
        .join(segment::segment_name(ids[1]));
    assert_eq!(fs.read_file(&kept).unwrap(), damaged);
    assert!(hint_ids(&fs).contains(&ids[1]));
    drop(engine);

    // The directory is whole again: it opens without salvage, even after a
    // power cut right after salvaging.
    fs.power_cut(None);
    let engine = open(&fs, &config, &clock);
    assert_eq!(contents(&engine, &keys(200)), after);
    assert_eq!(engine.recovery_report().salvaged_segments, 0);
}

#[test]
fn salvage_leaves_a_healthy_directory_as_it_is() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = Config {
        salvage: true,
        ..small_segments(4096)
    };
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 100, 60);
    engine.close().unwrap();
    let files: BTreeMap<String, Vec<u8>> = fs
        .file_names(Path::new(DIR))
        .into_iter()
        .map(|name| {
            let bytes = fs.read_file(&path(&name)).unwrap_or_default();
            (name, bytes)
        })
        .collect();
    let engine = open(&fs, &config, &clock);
    assert_eq!(engine.recovery_report().salvaged_segments, 0);
    assert_eq!(contents(&engine, &keys(100)).len(), 100);
    drop(engine);
    for (name, bytes) in &files {
        if name.ends_with(".seg") {
            assert_eq!(&fs.read_file(&path(name)).unwrap(), bytes, "{name} changed");
        }
    }
    assert!(!fs
        .file_names(Path::new(DIR))
        .contains(&"damaged".to_owned()));
}

/// Flips a bit in the value of the `index`th record of a segment file.
fn damage_record(fs: &MemFs, path: &Path, index: usize) -> Vec<u8> {
    let bytes = fs.read_file(path).unwrap();
    let at = record_offsets(&bytes)[index];
    let header = record::decode_header(&bytes[at as usize..]).unwrap();
    fs.corrupt(
        path,
        at + record::HEADER_BYTES as u64 + u64::from(header.key_len),
        0x10,
    )
    .unwrap();
    bytes[at as usize..][header.key_range()].to_vec()
}

#[test]
fn salvage_keeps_a_damaged_compaction_output_and_its_records() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 200, 60);
    // Overwrite half the keys so compaction has something to drop, then
    // compact everything sealed into compaction outputs.
    for i in (0..200).step_by(2) {
        set(&engine, format!("k{i}").as_bytes(), b"second");
    }
    engine.compact_now(0.0).unwrap();
    let before = contents(&engine, &keys(200));
    engine.close().unwrap();
    let output = segment_ids(&fs)
        .into_iter()
        .find(|&id| {
            let bytes = fs.read_file(&segment_path(id)).unwrap();
            let header = SegmentHeader::decode(&bytes, Path::new("x")).unwrap();
            header.origin == Origin::Compaction && record_offsets(&bytes).len() > 3
        })
        .expect("a compaction output with a few records");
    assert!(hint_ids(&fs).contains(&output));
    let lost = damage_record(&fs, &segment_path(output), 1);

    let salvaging = Config {
        salvage: true,
        ..config.clone()
    };
    let engine = open(&fs, &salvaging, &clock);
    assert_eq!(engine.recovery_report().salvaged_segments, 1);
    assert!(
        segment_ids(&fs).contains(&output),
        "the cleaned output was removed"
    );
    assert!(
        hint_ids(&fs).contains(&output),
        "the cleaned output has no hint"
    );
    let after = contents(&engine, &keys(200));
    let mut expected = before.clone();
    expected.remove(&lost);
    // The damaged record's key may fall back to an older value only if one
    // survives elsewhere; every other key is exactly as before.
    for (key, stored) in &expected {
        assert_eq!(after.get(key), Some(stored), "{key:?}");
    }
    drop(engine);
    let engine = open(&fs, &config, &clock);
    for (key, stored) in &expected {
        assert_eq!(contents(&engine, [key]).get(key), Some(stored), "{key:?}");
    }
}

#[test]
fn salvage_drops_a_whole_batch_that_a_damaged_record_interrupts() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments(4096);
    let engine = open(&fs, &config, &clock);
    set(&engine, b"before", b"b");
    let ops: Vec<larder_engine::BatchOp<'_>> = [&b"x1"[..], b"x2", b"x3"]
        .iter()
        .map(|key| larder_engine::BatchOp::Set {
            key,
            value: b"batched",
            flags: 0,
            expiry: Expiry::Never,
        })
        .collect();
    let ticket = engine.batch(&ops).unwrap();
    engine.commit(ticket).unwrap();
    set(&engine, b"after", b"a");
    fill(&engine, &clock, 120, 60); // seals the segment holding the batch
    engine.close().unwrap();
    let first = segment_path(segment_ids(&fs)[0]);
    // Records: before, x1, x2, x3, after, ... Damage x3, the batch's last.
    assert_eq!(damage_record(&fs, &first, 3), b"x3");

    let salvaging = Config {
        salvage: true,
        ..config.clone()
    };
    let engine = open(&fs, &salvaging, &clock);
    assert_eq!(engine.recovery_report().salvaged_records_skipped, 3);
    for key in [&b"x1"[..], b"x2", b"x3"] {
        assert_eq!(value(&engine, key), None, "{key:?} of a broken batch");
    }
    assert_eq!(value(&engine, b"before").unwrap(), b"b");
    assert_eq!(value(&engine, b"after").unwrap(), b"a");
    drop(engine);
    assert!(open(&fs, &config, &clock).get(b"after").unwrap().is_some());
}

#[test]
fn salvage_cut_short_at_any_step_leaves_a_directory_that_salvage_finishes() {
    // Each file salvage creates (the kept original, the cleaned copy, its
    // hint) fails in turn, then the power goes.
    for failing_create in 1..=3 {
        let fs = MemFs::new();
        let clock = Clock::system();
        let config = small_segments(4096);
        let engine = open(&fs, &config, &clock);
        fill(&engine, &clock, 200, 60);
        engine.compact_now(2.0).unwrap();
        let before = contents(&engine, &keys(200));
        engine.close().unwrap();
        let sealed = segment_path(segment_ids(&fs)[1]);
        let lost = damage_record(&fs, &sealed, 2);
        let damaged = fs.read_file(&sealed).unwrap();
        let salvaging = Config {
            salvage: true,
            ..config.clone()
        };

        fs.inject_nth(FaultKind::NoSpace, failing_create);
        let failed = Engine::open_with(
            salvaging.clone(),
            std::sync::Arc::new(fs.clone()),
            clock.clone(),
        );
        assert!(
            failed.is_err(),
            "step {failing_create}: salvage did not fail"
        );
        drop(failed);
        fs.clear_faults();
        fs.power_cut(Some(failing_create));

        // Nothing changed yet: the damaged original is still in place.
        assert_eq!(
            fs.read_file(&sealed).unwrap(),
            damaged,
            "step {failing_create}"
        );
        let engine = open(&fs, &salvaging, &clock);
        let after = contents(&engine, &keys(200));
        let mut expected = before.clone();
        expected.remove(&lost);
        assert_eq!(after, expected, "step {failing_create}");
    }
}

/// How a test damages one record of a segment file.
#[derive(Debug, Clone, Copy)]
enum RecordDamage {
    /// A flipped bit in the value: the checksum fails.
    Value,
    /// A flipped bit in the top byte of the value length: the record claims
    /// to run 16 MiB further, past the end of the file.
    Length,
}

/// Damages the `index`th record of a segment file; returns its offset and
/// key.
fn damage_record_by(fs: &MemFs, path: &Path, index: usize, how: RecordDamage) -> (u64, Vec<u8>) {
    let bytes = fs.read_file(path).unwrap();
    let at = record_offsets(&bytes)[index];
    let header = record::decode_header(&bytes[at as usize..]).unwrap();
    let key = bytes[at as usize..][header.key_range()].to_vec();
    match how {
        RecordDamage::Value => {
            damage_record(fs, path, index);
        }
        RecordDamage::Length => fs.corrupt(path, at + 11, 0x01).unwrap(),
    }
    (at, key)
}

/// Ten items acknowledged under `always`, then the process killed (the
/// log's reserved zeros stay after the last record). Returns the active
/// segment's path and the items.
fn ten_synced_items_in_the_active_segment(
    fs: &MemFs,
    config: &Config,
    clock: &Clock,
) -> (PathBuf, BTreeMap<Vec<u8>, Stored>) {
    let engine = open(fs, config, clock);
    fill(&engine, clock, 10, 20);
    let before = contents(&engine, &keys(10));
    fs.crash_process();
    drop(engine);
    let active = segment_path(*segment_ids(fs).last().unwrap());
    assert_eq!(record_offsets(&fs.read_file(&active).unwrap()).len(), 10);
    (active, before)
}

/// The bug: recovery cut the active segment at its first bad record
/// whatever followed, and synced the cut. One flipped bit in record 2 of
/// 10, under `always`, gave a successful open that had dropped 9
/// acknowledged, synced records, with only a warning and
/// `truncated_bytes` to show for it. Damage with intact records after it
/// is not a torn write: the open refuses it, as it refuses damage in a
/// sealed segment, and leaves the file as it found it.
#[test]
fn damage_before_intact_records_of_the_active_segment_fails_open_and_changes_nothing() {
    for how in [RecordDamage::Value, RecordDamage::Length] {
        let fs = MemFs::new();
        let clock = Clock::system();
        let config = config(Durability::Always);
        let (active, _) = ten_synced_items_in_the_active_segment(&fs, &config, &clock);
        let (damaged_at, _) = damage_record_by(&fs, &active, 1, how);
        let files = fs.file_names(Path::new(DIR));
        let damaged = fs.read_file(&active).unwrap();

        let (file, offset, reason) = corruption_at_open(&fs, &config, &clock);
        assert_eq!(file, active, "{how:?}");
        assert_eq!(offset, damaged_at, "{how:?}");
        assert!(
            reason.contains("intact record follows"),
            "{how:?}: {reason}"
        );
        assert_eq!(fs.read_file(&active).unwrap(), damaged, "{how:?}: cut");
        assert_eq!(fs.file_names(Path::new(DIR)), files, "{how:?}");
    }
}

/// With salvage, the active segment's damage is treated as a sealed
/// segment's: every intact record, before and after it, is kept, and the
/// original is kept under `damaged/`.
#[test]
fn salvage_keeps_every_intact_record_around_damage_in_the_active_segment() {
    for how in [RecordDamage::Value, RecordDamage::Length] {
        let fs = MemFs::new();
        let clock = Clock::system();
        let config = config(Durability::Always);
        let (active, before) = ten_synced_items_in_the_active_segment(&fs, &config, &clock);
        let (_, lost) = damage_record_by(&fs, &active, 1, how);
        let damaged = fs.read_file(&active).unwrap();
        let salvaging = Config {
            salvage: true,
            ..config.clone()
        };

        let engine = open(&fs, &salvaging, &clock);
        let report = engine.recovery_report().clone();
        assert_eq!(report.salvaged_segments, 1, "{how:?}: {report:?}");
        assert_eq!(report.salvaged_records_skipped, 1, "{how:?}: {report:?}");
        assert_eq!(report.truncated_bytes, 0, "{how:?}: {report:?}");
        let mut expected = before.clone();
        expected.remove(&lost);
        assert_eq!(expected.len(), 9);
        assert_eq!(contents(&engine, &keys(10)), expected, "{how:?}");
        let kept = Path::new(DIR)
            .join("damaged")
            .join(active.file_name().unwrap());
        assert_eq!(fs.read_file(&kept).unwrap(), damaged, "{how:?}");
        drop(engine);

        // The directory is whole again, even after a power cut.
        fs.power_cut(None);
        let engine = open(&fs, &config, &clock);
        assert_eq!(contents(&engine, &keys(10)), expected, "{how:?}");
    }
}

/// A power cut while the page cache writes the segment back out of order:
/// the sectors up to a sector boundary never reached the disk (zeros, as
/// the log's blocks past its synced end hold), later ones did. The records
/// after such a hole were never synced, so it is cut as a torn tail, not
/// refused, though intact records follow it.
#[test]
fn a_hole_of_unwritten_sectors_before_intact_records_is_cut_as_a_torn_tail() {
    const SECTOR: u64 = 512;
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(Durability::EverySec);
    let engine = open(&fs, &config, &clock);
    fill(&engine, &clock, 40, 20);
    let before = contents(&engine, &keys(40));
    fs.crash_process();
    drop(engine);
    let active = segment_path(*segment_ids(&fs).last().unwrap());
    let bytes = fs.read_file(&active).unwrap();
    let offsets = record_offsets(&bytes);
    // The record that crosses the second sector boundary, with records after.
    let boundary = 2 * SECTOR;
    let torn = offsets.iter().rposition(|&at| at < boundary).unwrap();
    assert!(torn + 1 < offsets.len() && torn > 0, "{offsets:?}");
    let mut holed = bytes.clone();
    holed[offsets[torn] as usize..boundary as usize].fill(0);
    fs.write_file(&active, &holed).unwrap();

    let engine = open(&fs, &config, &clock);
    let report = engine.recovery_report().clone();
    assert_eq!(report.truncated_file.as_deref(), Some(active.as_path()));
    assert_eq!(report.truncated_bytes, holed.len() as u64 - offsets[torn]);
    let kept: BTreeMap<_, _> = before
        .into_iter()
        .filter(|(key, _)| keys(torn).contains(key))
        .collect();
    assert_eq!(kept.len(), torn);
    assert_eq!(contents(&engine, &keys(40)), kept);
}

/// A torn tail (the last record cut short, with the log's reserved zeros
/// after it or the end of the file) is still cut, and only it, with or
/// without salvage; nothing goes to `damaged/`.
#[test]
fn a_torn_last_record_of_the_active_segment_is_still_cut_alone() {
    for (zeros_after, salvage) in [(true, false), (false, false), (true, true), (false, true)] {
        let fs = MemFs::new();
        let clock = Clock::system();
        let config = Config {
            salvage,
            ..config(Durability::Always)
        };
        let (active, before) = ten_synced_items_in_the_active_segment(&fs, &config, &clock);
        let bytes = fs.read_file(&active).unwrap();
        let last = *record_offsets(&bytes).last().unwrap() as usize;
        let end = last + record::decode(&bytes[last..]).unwrap().record_len() as usize;
        // The last record's second half never reached the disk.
        let torn_at = last + (end - last) / 2;
        let mut torn = bytes[..torn_at].to_vec();
        if zeros_after {
            torn.resize(bytes.len().max(end + 4096), 0);
        }
        fs.write_file(&active, &torn).unwrap();

        let engine = open(&fs, &config, &clock);
        let case = format!("zeros after: {zeros_after}, salvage: {salvage}");
        let report = engine.recovery_report().clone();
        assert_eq!(
            report.truncated_file.as_deref(),
            Some(active.as_path()),
            "{case}"
        );
        assert_eq!(report.truncated_bytes, (torn.len() - last) as u64, "{case}");
        assert_eq!(report.salvaged_segments, 0, "{case}");
        let mut expected = before.clone();
        expected.remove(&b"k9"[..]);
        assert_eq!(contents(&engine, &keys(10)), expected, "{case}");
        assert_eq!(fs.read_file(&active).unwrap(), &bytes[..last], "{case}");
        assert!(!fs
            .file_names(Path::new(DIR))
            .contains(&"damaged".to_owned()));
    }
}
