//! Measures the engine's memory per key: inserts N keys (default 1,000,000)
//! with values kept out of memory, then reports the growth of the resident
//! set divided by N, with and without the key bytes.
//!
//! `cargo run --release -p larder-engine --example memory_per_key [N] [key_len]`

use larder_engine::{Config, Durability, Engine, Expiry, StoreMode};

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let count: u64 = args.next().map_or(Ok(1_000_000), |n| n.parse())?;
    let key_len: usize = args.next().map_or(Ok(16), |n| n.parse())?;
    let dir = std::env::temp_dir().join(format!("larder-memory-{}", std::process::id()));
    let mut config = Config::new(&dir);
    config.durability = Durability::None;
    config.cache_bytes_max = 0;
    config.background_threads = false;
    let engine = Engine::open(config)?;
    let before = resident_bytes();
    let value = [b'v'; 100];
    for i in 0..count {
        let key = format!("{i:0>width$}", width = key_len);
        let (_, ticket) = engine.store(StoreMode::Set, key.as_bytes(), &value, 0, Expiry::Never)?;
        if i % 10_000 == 0 {
            engine.commit(ticket)?;
            engine.maintain_now();
        }
    }
    engine.sync()?;
    engine.maintain_now();
    let stats = engine.stats();
    let after = resident_bytes();
    let per_key = (after.saturating_sub(before)) as f64 / count as f64;
    println!(
        "{count} keys of {key_len} bytes: {per_key:.1} bytes per key resident \
         ({:.1} besides the key); values cached: {} bytes",
        per_key - key_len as f64,
        stats.cached_bytes
    );
    drop(engine);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
