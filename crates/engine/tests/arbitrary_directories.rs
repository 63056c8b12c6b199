//! Opening a data directory never panics, whatever its files hold.
//!
//! Recovery and `check` read bytes written by an earlier run, a crash, a
//! failing disk, or someone else entirely. Whatever those bytes are, opening
//! must either succeed or return an error naming the problem: never panic,
//! never allocate what a damaged length field claims. The inputs are valid
//! directories with random damage (flipped bytes, cut files, swapped hint
//! files) and files of random bytes under segment and hint names.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, set};
use larder_engine::fs::MemFs;
use larder_engine::{unsynced, Clock, Durability, Engine, Error};
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;

/// A directory with a few sealed segments, hint files and an active segment.
fn valid_directory() -> (MemFs, Vec<String>) {
    let fs = MemFs::new();
    let mut config = config(Durability::None);
    config.segment_bytes_max = 1024;
    let engine = Engine::open_with(config, Arc::new(fs.clone()), Clock::system()).unwrap();
    for i in 0..60 {
        set(&engine, format!("key-{}", i % 25).as_bytes(), &[b'v'; 40]);
    }
    engine.compact_now(1.0).unwrap();
    drop(engine);
    fs.crash_process();
    let names = fs
        .file_names(Path::new("/data"))
        .into_iter()
        .filter(|name| name.ends_with(".seg") || name.ends_with(".hint"))
        .collect();
    (fs, names)
}

fn open_must_not_panic(fs: &MemFs) {
    let mut config = config(Durability::None);
    config.segment_bytes_max = 1024;
    match Engine::open_with(config, Arc::new(fs.clone()), Clock::system()) {
        Ok(engine) => {
            // Whatever survived must be readable or fail with a clear error.
            for i in 0..25 {
                let _ = engine.get(format!("key-{i}").as_bytes());
            }
        }
        Err(Error::Corruption { reason, .. }) => assert!(!reason.is_empty()),
        Err(Error::Io { context, .. }) => assert!(!context.is_empty()),
        Err(other) => panic!("unexpected error kind: {other}"),
    }
    let report = larder_engine::check::check(fs, Path::new("/data")).unwrap();
    assert!(report.records < 10_000);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn damaged_files_never_panic_recovery(
        damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), 1u8..=255), 1..6),
        cut in proptest::option::of((any::<prop::sample::Index>(), any::<prop::sample::Index>())),
    ) {
        let (fs, names) = valid_directory();
        for (file, at, mask) in &damage {
            let name = file.get(&names);
            let path = Path::new("/data").join(name);
            let len = fs.read_file(&path).unwrap().len();
            fs.corrupt(&path, at.index(len) as u64, *mask).unwrap();
        }
        if let Some((file, at)) = cut {
            let path = Path::new("/data").join(file.get(&names));
            let bytes = fs.read_file(&path).unwrap();
            let keep = at.index(bytes.len() + 1);
            fs.write_file(&path, &bytes[..keep]).unwrap();
        }
        open_must_not_panic(&fs);
    }

    #[test]
    fn markers_of_failed_syncs_at_any_offset_never_panic_recovery(
        segment in any::<prop::sample::Index>(),
        from in prop_oneof![0u64..2048, any::<u64>()],
        copied in any::<bool>(),
        damaged in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
    ) {
        // A marker as a failed sync leaves it, naming one of the segments
        // there, or bytes under its name that need not decode.
        let (fs, names) = valid_directory();
        let segments: Vec<u32> = names
            .iter()
            .filter_map(|name| name.strip_suffix(".seg")?.parse().ok())
            .collect();
        let id = *segment.get(&segments);
        let bytes = damaged.unwrap_or_else(|| unsynced::encode(from, copied));
        fs.write_file(&Path::new("/data").join(unsynced::marker_name(id)), &bytes).unwrap();
        open_must_not_panic(&fs);
    }

    #[test]
    fn random_bytes_under_segment_and_hint_names_never_panic_recovery(
        files in proptest::collection::vec((1u32..5, any::<bool>(), proptest::collection::vec(any::<u8>(), 0..600)), 1..5),
    ) {
        let fs = MemFs::new();
        for (id, hint, bytes) in &files {
            let name = if *hint { format!("{id:010}.hint") } else { format!("{id:010}.seg") };
            fs.write_file(&Path::new("/data").join(name), bytes).unwrap();
        }
        open_must_not_panic(&fs);
    }
}
