//! What one connection sends: the next key, get or set, and value size,
//! drawn from the run's [`Shared`] settings with the connection's own random
//! number generator, and encoded straight into its write buffer.
//!
//! [`Shared`] is built once per run and read by every connection; a
//! [`Workload`] belongs to one connection and is never shared.

use crate::keys::{Draw, KeyCursor, KeySpace};
use crate::options::{BenchOptions, KeyPattern, Ratio, ValueSize};
use crate::request::{encode_get, encode_set, Op, Protocol};
use crate::stats::{Live, Recorder};
use crate::zipf::Zipf;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Settings and sinks shared by every connection of a run.
pub struct Shared {
    pub protocol: Protocol,
    pub keys: KeySpace,
    pub draw: Draw,
    pub prefix: Vec<u8>,
    pub ratio: Ratio,
    pub value_size: ValueSize,
    /// Filler bytes, `value_size.max_bytes` long; every value is a prefix.
    pub value: Vec<u8>,
    pub connections: usize,
    pub seed: u64,
    pub recorder: Recorder,
    pub live: Live,
}

impl Shared {
    /// Builds the shared state for validated `options` over `keys`.
    pub fn new(options: &BenchOptions, keys: KeySpace, seed: u64, recorder: Recorder) -> Self {
        let draw = match options.key_pattern {
            KeyPattern::Uniform => Draw::Uniform,
            KeyPattern::Zipfian { skew } => Draw::Zipfian(Zipf::new(keys.len(), skew)),
            KeyPattern::Sequential | KeyPattern::File(_) => Draw::Sequential,
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let value = (0..options.value_size.max_bytes)
            .map(|_| {
                let pick = rng.gen_range(0..alphabet.len());
                alphabet.get(pick).copied().unwrap_or(b'x')
            })
            .collect();
        Shared {
            protocol: options.protocol,
            keys,
            draw,
            prefix: options.key_prefix.as_bytes().to_vec(),
            ratio: options.ratio,
            value_size: options.value_size,
            value,
            connections: options.connections(),
            seed,
            recorder,
            live: Live::default(),
        }
    }

    /// The slice of the key space that `connection` preloads:
    /// `[c * n / C, (c + 1) * n / C)`, so that the slices tile the space.
    pub fn preload_range(&self, connection: usize) -> std::ops::Range<u64> {
        let bound = |c: usize| {
            let scaled = u128::from(self.keys.len()) * c as u128 / self.connections.max(1) as u128;
            u64::try_from(scaled).unwrap_or(u64::MAX)
        };
        bound(connection)..bound(connection + 1)
    }
}

/// One connection's request generator.
pub struct Workload {
    cursor: KeyCursor,
    rng: SmallRng,
    key: Vec<u8>,
}

impl Workload {
    /// The generator for connection number `connection`. Its random stream
    /// depends only on the run's seed and `connection`, and sequential
    /// cursors start where its preload slice starts.
    pub fn new(shared: &Shared, connection: usize) -> Self {
        let start = shared.preload_range(connection).start;
        Workload {
            cursor: KeyCursor::new(shared.keys.len(), shared.draw, start),
            rng: SmallRng::seed_from_u64(shared.seed.wrapping_add(1 + connection as u64)),
            key: Vec::with_capacity(64),
        }
    }

    /// Appends the next request to `out` and says what it is.
    pub fn encode_next(&mut self, shared: &Shared, out: &mut Vec<u8>) -> Op {
        let Ratio { gets, sets } = shared.ratio;
        let total = u64::from(gets) + u64::from(sets);
        let op = if self.rng.gen_range(0..total) < u64::from(gets) {
            Op::Get
        } else {
            Op::Set
        };
        let index = self.cursor.next_index(&mut self.rng);
        match op {
            Op::Get => {
                shared.keys.write_key(&shared.prefix, index, &mut self.key);
                encode_get(shared.protocol, &self.key, out);
            }
            Op::Set => self.encode_set(shared, index, out),
        }
        op
    }

    /// Appends a set of the key at `index` with a value of a drawn size.
    pub fn encode_set(&mut self, shared: &Shared, index: u64, out: &mut Vec<u8>) {
        shared.keys.write_key(&shared.prefix, index, &mut self.key);
        let ValueSize {
            min_bytes,
            max_bytes,
        } = shared.value_size;
        let length = self.rng.gen_range(min_bytes..=max_bytes);
        let value = shared.value.get(..length).unwrap_or(&shared.value);
        encode_set(shared.protocol, &self.key, value, out);
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly on purpose"
)]
mod tests {
    use super::*;

    fn shared(options: &BenchOptions) -> Shared {
        let keys = KeySpace::Range {
            count: options.key_count,
        };
        Shared::new(options, keys, 5, Recorder::new(1, false).unwrap())
    }

    #[test]
    fn preload_slices_tile_the_key_space() {
        let options = BenchOptions {
            threads: 1,
            connections_per_thread: 3,
            key_count: 10,
            ..BenchOptions::default()
        };
        let shared = shared(&options);
        let slices: Vec<_> = (0..3).map(|c| shared.preload_range(c)).collect();
        assert_eq!(slices, vec![0..3, 3..6, 6..10]);
    }

    #[test]
    fn ratio_and_value_sizes_are_respected() {
        let options = BenchOptions {
            ratio: Ratio { gets: 0, sets: 1 },
            value_size: ValueSize {
                min_bytes: 3,
                max_bytes: 5,
            },
            key_pattern: KeyPattern::Sequential,
            key_prefix: "p".to_owned(),
            ..BenchOptions::default()
        };
        let shared = shared(&options);
        let mut workload = Workload::new(&shared, 0);
        for expected_key in 0..50 {
            let mut out = Vec::new();
            assert_eq!(workload.encode_next(&shared, &mut out), Op::Set);
            let text = String::from_utf8(out).unwrap();
            let header = format!("set p{expected_key} 0 0 ");
            assert!(text.starts_with(&header), "{text:?}");
            let length: usize = text[header.len()..]
                .split("\r\n")
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!((3..=5).contains(&length), "{text:?}");
        }
        let gets_only = BenchOptions {
            ratio: Ratio { gets: 1, sets: 0 },
            ..options
        };
        let shared = self::shared(&gets_only);
        let mut workload = Workload::new(&shared, 0);
        let mut out = Vec::new();
        assert_eq!(workload.encode_next(&shared, &mut out), Op::Get);
        assert_eq!(out, b"get p0\r\n");
    }
}
