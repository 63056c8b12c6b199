//! Regression: a flush record nothing else remembered was compacted away,
//! and the flushed items came back at the next open.
//!
//! Compaction drops a carried-out flush record because every segment the
//! log creates after it carries the flush generation in its header. But
//! `flush_all` (and a delayed flush coming due) raised the generation only
//! after its append had released the log lock: another writer's append
//! that rotated the log in between stamped the new segment with the old
//! generation, and compacting the flush record's segment then lost the
//! flush. The generation is now raised under the log lock, by the append
//! itself.
//!
//! The window was a few instructions between two statements of one
//! function, with no file system call in it, so no test can hold a thread
//! there without a hook in the engine's code. This test races flushes
//! against writers that rotate the log on almost every append (before the
//! fix it found a stale segment in every run tried), and checks the
//! invariant on disk: every log segment newer than the one holding an
//! immediate flush record carries at least its seq in its header.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, open};
use larder_engine::fs::MemFs;
use larder_engine::record::{self, Kind};
use larder_engine::segment::{self, Origin, SegmentHeader};
use larder_engine::{Clock, Durability, Expiry, StoreMode};

/// Flushes while this many threads write.
const WRITERS: usize = 3;
/// Flushes in the race.
const FLUSHES: usize = 10_000;

#[test]
fn every_segment_created_after_a_flush_record_carries_its_flush() {
    let fs = MemFs::new();
    let mut config = config(Durability::EverySec);
    config.segment_bytes_max = 1024;
    let engine = open(&fs, &config, &Clock::system());
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let (engine, done) = (&engine, &done);
            scope.spawn(move || {
                let key = format!("w{writer}");
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let stored = engine.store(
                        StoreMode::Set,
                        key.as_bytes(),
                        &[b'v'; 400],
                        0,
                        Expiry::Never,
                    );
                    let _ = stored.unwrap();
                }
            });
        }
        for _ in 0..FLUSHES {
            let _ = engine.flush_all(0).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    engine.close().unwrap();

    let mut log_segments = Vec::new();
    let mut flushes = Vec::new();
    for name in fs.file_names(&config.dir) {
        let Some(id) = segment::parse_name(&name, "seg") else {
            continue;
        };
        let path = config.dir.join(&name);
        let bytes = fs.read_file(&path).unwrap();
        let header = SegmentHeader::decode(&bytes, &path).unwrap();
        assert_eq!(header.origin, Origin::Log);
        log_segments.push(header);
        let mut at = segment::HEADER_BYTES as usize;
        while at < bytes.len() {
            let record = record::decode(&bytes[at..]).unwrap();
            if record.kind == Kind::Flush && record.exptime == 0 {
                flushes.push((id, record.seq));
            }
            at += record.record_len() as usize;
        }
    }
    assert_eq!(flushes.len(), FLUSHES);
    for (id, seq) in flushes {
        for later in log_segments.iter().filter(|header| header.id > id) {
            assert!(
                later.flush_seq >= seq,
                "segment {} was created after flush {seq} in segment {id}, and carries only {}",
                later.id,
                later.flush_seq
            );
        }
    }
}
