//! Recovery over arbitrary directory contents: the input is cut into up to
//! four files (at each 0xFF 0xFE pair), named as segments and hint files of
//! an in-memory data directory, which is then opened and checked. Opening
//! may fail with an error; it must never panic.

#![no_main]

use larder_engine::fs::MemFs;
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

fuzz_target!(|data: &[u8]| {
    let fs = MemFs::new();
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
