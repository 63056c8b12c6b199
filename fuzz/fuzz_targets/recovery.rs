//! Recovery over arbitrary directory contents: the input, up to its first
//! 0xFF 0xFD pair, is cut into up to four files (at each 0xFF 0xFE pair),
//! named as segments and hint files of an in-memory data directory, which
//! is then opened and checked. Opening may fail with an error; it must
//! never panic.
//!
//! What follows the first 0xFF 0xFD pair, if any, is a marker of an
//! unsynced tail (the file a failed `fdatasync` leaves, which open acts on
//! by cutting or rewriting the segment it names): its first byte picks the
//! segment (1 to 3) and whether the marker says *copied* (bit 7); the next
//! eight are the offset where the unsure bytes begin, little-endian. The
//! marker is written whole, checksum included, so that open takes the
//! offset at its word. With bit 6 of the first byte set, the bytes after it
//! are the marker file as they are instead, most of them a marker that does
//! not decode.

#![no_main]

use larder_engine::fs::MemFs;
use larder_engine::unsynced;
use larder_engine::{Clock, Config, Durability, Engine};
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::Arc;

const NAMES: [&str; 4] = [
    "0000000001.seg",
    "0000000001.hint",
    "0000000002.seg",
    "0000000003.seg",
];

/// The marker file `spec` describes: its name and its bytes.
fn marker(spec: &[u8]) -> Option<(String, Vec<u8>)> {
    let (&first, rest) = spec.split_first()?;
    let name = unsynced::marker_name(u32::from((first & 0x3F) % 3 + 1));
    if first & 0x40 != 0 {
        return Some((name, rest.to_vec()));
    }
    let mut offset = [0u8; 8];
    for (to, from) in offset.iter_mut().zip(rest) {
        *to = *from;
    }
    Some((name, unsynced::encode(u64::from_le_bytes(offset), first & 0x80 != 0)))
}

fuzz_target!(|data: &[u8]| {
    let fs = MemFs::new();
    let (data, spec) = match data.windows(2).position(|pair| pair == [0xFF, 0xFD]) {
        Some(at) => {
            let (files, spec) = data.split_at(at);
            (files, spec.get(2..))
        }
        None => (data, None),
    };
    let mut rest = data;
    for name in NAMES {
        let end = rest
            .windows(2)
            .position(|pair| pair == [0xFF, 0xFE])
            .unwrap_or(rest.len());
        let (file, tail) = rest.split_at(end);
        let _ = fs.write_file(&Path::new("/data").join(name), file);
        rest = tail.get(2..).unwrap_or_default();
        if rest.is_empty() {
            break;
        }
    }
    if let Some((name, bytes)) = spec.and_then(marker) {
        let _ = fs.write_file(&Path::new("/data").join(name), &bytes);
    }
    let mut config = Config::new("/data");
    config.durability = Durability::None;
    config.background_threads = false;
    config.partitions = 4;
    let _ = larder_engine::check::check(&fs, Path::new("/data"));
    if let Ok(engine) = Engine::open_with(config, Arc::new(fs), Clock::system()) {
        let _ = engine.get(b"key");
        let _ = engine.compact_now(0.0);
    }
});
