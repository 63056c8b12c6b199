//! Which key each request uses: the key space and the draw over it.
//!
//! A key space is either a range of ids `0..count` (the key is the prefix
//! followed by the id in decimal) or the ids of a key file, one per line (the
//! key is the prefix followed by the line). Each connection owns a
//! [`KeyCursor`] that draws indices from the space: uniformly, Zipf-skewed
//! (index 0 the most popular), or sequentially from a start point that
//! differs per connection, wrapping at the end. A key file is always read in
//! file order, wrapping, so that a file of random ids replays the same
//! lookups on every run.
//!
//! The space is shared read-only between connections (`Arc`); cursors are
//! per connection and never shared.

use crate::error::BenchError;
use crate::limits::{KEY_FILE_BYTES_MAX, KEY_FILE_IDS_MAX};
use crate::zipf::Zipf;
use larder_protocol::KEY_BYTES_MAX;
use rand::Rng;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The ids of a key file, stored compactly: all ids concatenated, and where
/// each one ends. 200M ids of 8 bytes cost about 2.4 GB this way rather than
/// twice that as separate allocations.
#[derive(Debug)]
pub struct KeyFile {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl KeyFile {
    /// Reads and checks a key file: one id per line, `\n` or `\r\n` line
    /// ends, surrounding spaces ignored, blank lines skipped. Each id must be
    /// printable ASCII without spaces (what memcached accepts in a key) and
    /// fit [`KEY_BYTES_MAX`] after `prefix_bytes` of prefix.
    pub fn load(path: &Path, prefix_bytes: usize) -> Result<Self, BenchError> {
        let read_error = |source| BenchError::KeyFileRead {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let claimed = file.metadata().map_err(read_error)?.len();
        if claimed > KEY_FILE_BYTES_MAX {
            return Err(BenchError::KeyFileLine {
                path: path.to_owned(),
                line: 0,
                reason: format!("file is {claimed} bytes, more than {KEY_FILE_BYTES_MAX}"),
            });
        }
        let mut text = Vec::new();
        // `take` bounds the read even if the file grows meanwhile.
        file.take(KEY_FILE_BYTES_MAX)
            .read_to_end(&mut text)
            .map_err(read_error)?;
        Self::parse(path, &text, prefix_bytes)
    }

    /// Parses the text of a key file; `path` is only for error messages.
    pub fn parse(path: &Path, text: &[u8], prefix_bytes: usize) -> Result<Self, BenchError> {
        let line_error = |line: usize, reason: String| BenchError::KeyFileLine {
            path: PathBuf::from(path),
            line,
            reason,
        };
        let mut bytes = Vec::with_capacity(text.len());
        let mut ends = Vec::new();
        for (index, line) in text.split(|&byte| byte == b'\n').enumerate() {
            let id = line.trim_ascii();
            if id.is_empty() {
                continue;
            }
            if let Some(bad) = id.iter().find(|byte| !byte.is_ascii_graphic()) {
                let reason = format!(
                    "id contains byte {bad:#04x}; ids must be printable ASCII without spaces"
                );
                return Err(line_error(index + 1, reason));
            }
            if prefix_bytes + id.len() > KEY_BYTES_MAX {
                let reason = format!(
                    "prefix and id make a {}-byte key, more than {KEY_BYTES_MAX}",
                    prefix_bytes + id.len()
                );
                return Err(line_error(index + 1, reason));
            }
            if ends.len() == KEY_FILE_IDS_MAX {
                return Err(line_error(
                    index + 1,
                    format!("more than {KEY_FILE_IDS_MAX} ids"),
                ));
            }
            bytes.extend_from_slice(id);
            // The file is at most KEY_FILE_BYTES_MAX (< 4 GiB) long.
            let end = u32::try_from(bytes.len())
                .map_err(|_| line_error(index + 1, "file too large".to_owned()))?;
            ends.push(end);
        }
        if ends.is_empty() {
            return Err(line_error(0, "no ids in the file".to_owned()));
        }
        Ok(KeyFile { bytes, ends })
    }

    /// Number of ids.
    pub fn len(&self) -> u64 {
        self.ends.len() as u64
    }

    /// The id at `index` (taken modulo the count, so any index is valid).
    pub fn id(&self, index: u64) -> &[u8] {
        let index = (index % self.len()) as usize;
        let start = match index.checked_sub(1) {
            Some(before) => self.ends.get(before).copied().unwrap_or(0),
            None => 0,
        };
        let end = self.ends.get(index).copied().unwrap_or(start);
        self.bytes.get(start as usize..end as usize).unwrap_or(&[])
    }
}

/// Where ids come from.
#[derive(Debug, Clone)]
pub enum KeySpace {
    /// Ids `0..count`, written in decimal.
    Range { count: u64 },
    /// The ids of a key file.
    File(Arc<KeyFile>),
}

impl KeySpace {
    /// Number of distinct indices.
    pub fn len(&self) -> u64 {
        match self {
            KeySpace::Range { count } => *count,
            KeySpace::File(file) => file.len(),
        }
    }

    /// Replaces `out` with the key at `index`: `prefix` then the id.
    pub fn write_key(&self, prefix: &[u8], index: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(prefix);
        match self {
            KeySpace::Range { .. } => write_decimal(index, out),
            KeySpace::File(file) => out.extend_from_slice(file.id(index)),
        }
    }
}

/// Appends `value` in decimal without going through `fmt`.
pub fn write_decimal(mut value: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        if let Some(slot) = digits.get_mut(start) {
            *slot = b'0' + (value % 10) as u8;
        }
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(start..).unwrap_or(&[]));
}

/// How indices are drawn.
#[derive(Debug, Clone, Copy)]
pub enum Draw {
    Uniform,
    Zipfian(Zipf),
    Sequential,
}

/// One connection's position in the key space.
#[derive(Debug, Clone)]
pub struct KeyCursor {
    count: u64,
    draw: Draw,
    next_sequential: u64,
}

impl KeyCursor {
    /// A cursor over `count` indices (at least one). Sequential cursors
    /// start at `start % count`, so connections can begin at different
    /// places.
    pub fn new(count: u64, draw: Draw, start: u64) -> Self {
        assert!(count > 0, "a key space has at least one key");
        KeyCursor {
            count,
            draw,
            next_sequential: start % count,
        }
    }

    /// The next index, in `0..count`.
    pub fn next_index<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        match self.draw {
            Draw::Uniform => rng.gen_range(0..self.count),
            Draw::Zipfian(zipf) => zipf.sample(rng) - 1,
            Draw::Sequential => {
                let index = self.next_sequential;
                self.next_sequential = (index + 1) % self.count;
                index
            }
        }
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
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn key(space: &KeySpace, index: u64) -> String {
        let mut out = Vec::new();
        space.write_key(b"k:", index, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn range_keys_are_prefix_and_decimal_id() {
        let space = KeySpace::Range { count: 100 };
        assert_eq!(key(&space, 0), "k:0");
        assert_eq!(key(&space, 42), "k:42");
        let mut out = Vec::new();
        write_decimal(u64::MAX, &mut out);
        assert_eq!(out, u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn sequential_cursor_wraps_at_the_end() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut cursor = KeyCursor::new(3, Draw::Sequential, 1);
        let drawn: Vec<u64> = (0..7).map(|_| cursor.next_index(&mut rng)).collect();
        assert_eq!(drawn, vec![1, 2, 0, 1, 2, 0, 1]);
    }

    #[test]
    fn uniform_cursor_stays_in_range_and_covers_it() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut cursor = KeyCursor::new(10, Draw::Uniform, 0);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            seen[cursor.next_index(&mut rng) as usize] = true;
        }
        assert!(seen.iter().all(|&hit| hit));
    }

    #[test]
    fn zipfian_cursor_favours_index_zero() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut cursor = KeyCursor::new(1000, Draw::Zipfian(Zipf::new(1000, 0.99)), 0);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[cursor.next_index(&mut rng) as usize] += 1;
        }
        assert!(counts[0] > 100 * counts[500].max(1));
    }

    #[test]
    fn key_file_ids_are_loaded_in_order() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, b"17\r\n  3 \n\nabc-9\n").unwrap();
        let keys = KeyFile::load(file.path(), 2).unwrap();
        assert_eq!(keys.len(), 3);
        let space = KeySpace::File(Arc::new(keys));
        assert_eq!(key(&space, 0), "k:17");
        assert_eq!(key(&space, 1), "k:3");
        assert_eq!(key(&space, 2), "k:abc-9");
        assert_eq!(key(&space, 3), "k:17", "indices wrap");
    }

    #[test]
    fn key_file_with_spaces_inside_an_id_is_refused() {
        let error = KeyFile::parse(Path::new("ids"), b"1\n2 3\n", 0).unwrap_err();
        assert!(
            matches!(error, BenchError::KeyFileLine { line: 2, .. }),
            "{error}"
        );
    }

    #[test]
    fn key_file_ids_too_long_for_the_prefix_are_refused() {
        let id = vec![b'x'; 240];
        assert!(KeyFile::parse(Path::new("ids"), &id, 10).is_ok());
        assert!(KeyFile::parse(Path::new("ids"), &id, 11).is_err());
    }

    #[test]
    fn empty_key_file_is_refused() {
        assert!(KeyFile::parse(Path::new("ids"), b"\n \n", 0).is_err());
    }

    #[test]
    fn missing_key_file_is_a_read_error() {
        let error = KeyFile::load(Path::new("/nonexistent/ids.txt"), 0).unwrap_err();
        assert!(matches!(error, BenchError::KeyFileRead { .. }));
    }
}
