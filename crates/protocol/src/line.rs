//! First phase of framing: find one command line and split it into tokens.
//!
//! A line ends at `\n`; one `\r` before it is dropped if the line has at
//! least one other byte (so a bare `\n` also ends a line, as in memcached).
//! The line's text stops at its first NUL byte, because memcached hands it to
//! C string functions. Tokens are separated by spaces only (a tab is part of
//! a token). The search for `\n` looks no further than the applicable line
//! limit, so whether a line is "too long" never depends on how the bytes
//! were split into reads.

use crate::limits::{Limits, ITEM_BYTES_MAX_CEILING, LINE_TOKENS_MAX, MULTIGET_LEADING_SPACES_MAX};

/// A complete command line at the front of the buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line<'a> {
    /// The line without its terminator, cut at the first NUL.
    pub text: &'a [u8],
    /// Bytes the line occupies in the buffer, `\n` included.
    pub frame_bytes: usize,
}

/// What the front of the buffer holds.
pub(crate) enum Scan<'a> {
    Complete(Line<'a>),
    Incomplete,
    /// No `\n` within the limit; `multiget` says which limit applied.
    TooLong {
        multiget: bool,
    },
}

/// memcached lets an over-long line continue only if it is a `get`/`gets`
/// after at most 100 spaces. `gat`/`gats` take keys as `get` does, and
/// memcached serves a long one whole when it arrives in one read (its read
/// buffer holds 16 KiB), which over loopback is how a client's one write
/// arrives: Larder lets them grow as `get` lines do, whatever the reads.
fn is_multiget(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = buf.get(spaces..).unwrap_or(&[]);
    spaces <= MULTIGET_LEADING_SPACES_MAX
        && [&b"get "[..], b"gets ", b"gat ", b"gats "]
            .iter()
            .any(|command| rest.starts_with(command))
}

/// Finds the first command line in `buf`.
pub(crate) fn scan<'a>(buf: &'a [u8], limits: &Limits) -> Scan<'a> {
    let multiget = is_multiget(buf);
    let window_bytes = if multiget {
        limits.get_line_bytes_max()
    } else {
        limits.line_bytes_max()
    };
    let window = buf.get(..window_bytes).unwrap_or(buf);
    let Some(newline_at) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= window_bytes {
            Scan::TooLong { multiget }
        } else {
            Scan::Incomplete
        };
    };
    let mut text = window.get(..newline_at).unwrap_or(&[]);
    if text.len() > 1 {
        if let Some(stripped) = text.strip_suffix(b"\r") {
            text = stripped;
        }
    }
    if let Some(nul_at) = text.iter().position(|&b| b == 0) {
        text = text.get(..nul_at).unwrap_or(&[]);
    }
    Scan::Complete(Line {
        text,
        frame_bytes: newline_at + 1,
    })
}

/// The real tokens memcached sees in one pass: at most `LINE_TOKENS_MAX - 1`.
const WORDS_MAX: usize = LINE_TOKENS_MAX - 1;

/// A command line split on spaces, as memcached's `tokenize_command` does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Words<'a> {
    text: &'a [u8],
    /// `(start, end)` of each token in `text`. A line is never longer than
    /// [`ITEM_BYTES_MAX_CEILING`], so its offsets fit in 32 bits, which
    /// halves what every parse zeroes and copies.
    spans: [(u32, u32); WORDS_MAX],
    len: usize,
}

const _: () = assert!(ITEM_BYTES_MAX_CEILING < u32::MAX as usize);

impl<'a> Words<'a> {
    /// Splits `text`, keeping the first `WORDS_MAX` tokens. `text` is a
    /// line the framing let through, so no longer than the line limit, which
    /// never exceeds [`ITEM_BYTES_MAX_CEILING`].
    pub fn split(text: &'a [u8]) -> Self {
        assert!(text.len() <= ITEM_BYTES_MAX_CEILING);
        let mut words = Words {
            text,
            spans: [(0, 0); WORDS_MAX],
            len: 0,
        };
        let mut start = None;
        for (at, &byte) in text
            .iter()
            .enumerate()
            .chain(std::iter::once((text.len(), &b' ')))
        {
            match (byte == b' ', start) {
                (false, None) => start = Some(at),
                (true, Some(from)) => {
                    start = None;
                    if let Some(span) = words.spans.get_mut(words.len) {
                        *span = (from as u32, at as u32);
                        words.len += 1;
                    } else {
                        break;
                    }
                }
                _ => {}
            }
        }
        words
    }

    /// Real tokens seen (at most `LINE_TOKENS_MAX - 1`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// memcached's `ntokens`: the real tokens plus its terminal token.
    pub fn ntokens(&self) -> usize {
        self.len + 1
    }

    /// Token `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&'a [u8]> {
        let &(start, end) = self.spans.get(..self.len)?.get(index)?;
        self.text.get(start as usize..end as usize)
    }

    /// The last real token (memcached's `tokens[ntokens - 2]`).
    pub fn last(&self) -> Option<&'a [u8]> {
        self.len.checked_sub(1).and_then(|index| self.get(index))
    }

    /// The line from token `index` to its end, or empty if there is no such
    /// token. Used for key lists, which may hold more tokens than one pass.
    pub fn tail_from(&self, index: usize) -> &'a [u8] {
        self.spans
            .get(..self.len)
            .and_then(|spans| spans.get(index))
            .and_then(|&(start, _)| self.text.get(start as usize..))
            .unwrap_or(&[])
    }

    /// Whether memcached's `set_noreply_maybe` would set noreply.
    pub fn ends_with_noreply(&self) -> bool {
        self.last() == Some(b"noreply")
    }
}

/// Splits a space-separated list into its non-empty tokens.
pub(crate) fn split_spaces(list: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    list.split(|&b| b == b' ').filter(|token| !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
        match scan(buf, &Limits::DEFAULT) {
            Scan::Complete(line) => Some((line.text.to_vec(), line.frame_bytes)),
            _ => None,
        }
    }

    #[test]
    fn crlf_and_bare_lf_both_end_a_line() {
        assert_eq!(line(b"version\r\nrest"), Some((b"version".to_vec(), 9)));
        assert_eq!(line(b"version\nrest"), Some((b"version".to_vec(), 8)));
    }

    #[test]
    fn a_lone_cr_before_lf_is_kept_as_memcached_keeps_it() {
        assert_eq!(line(b"\r\n"), Some((b"\r".to_vec(), 2)));
        assert_eq!(line(b"a\r\r\n"), Some((b"a\r".to_vec(), 4)));
    }

    #[test]
    fn text_stops_at_nul() {
        assert_eq!(line(b"get a\x00b\r\n"), Some((b"get a".to_vec(), 9)));
    }

    #[test]
    fn line_without_newline_is_incomplete_until_the_limit() {
        assert!(matches!(scan(b"get a", &Limits::DEFAULT), Scan::Incomplete));
        let mut long = vec![b'x'; 2048];
        assert!(matches!(
            scan(&long, &Limits::DEFAULT),
            Scan::TooLong { multiget: false }
        ));
        long.pop();
        assert!(matches!(scan(&long, &Limits::DEFAULT), Scan::Incomplete));
    }

    #[test]
    fn multiget_lines_may_grow_past_the_line_limit() {
        for command in [&b"get "[..], b"gets ", b"gat 10 ", b"gats 10 "] {
            let mut long = command.to_vec();
            long.resize(5000, b'k');
            assert!(matches!(scan(&long, &Limits::DEFAULT), Scan::Incomplete));
            long.extend_from_slice(b"\r\n");
            assert_eq!(line(&long).map(|(_, bytes)| bytes), Some(5002));
        }
        // Up to the multiget limit, for `gat` as for `get`.
        let mut too_long = b"gat 10 ".to_vec();
        too_long.resize(Limits::DEFAULT.get_line_bytes_max(), b'k');
        assert!(matches!(
            scan(&too_long, &Limits::DEFAULT),
            Scan::TooLong { multiget: true }
        ));
        let mut touch = b"touch ".to_vec();
        touch.resize(5000, b'k');
        assert!(matches!(
            scan(&touch, &Limits::DEFAULT),
            Scan::TooLong { multiget: false }
        ));
    }

    #[test]
    fn tokens_split_on_spaces_only() {
        let words = Words::split(b"  set\ta  b ");
        assert_eq!(words.len(), 2);
        assert_eq!(words.get(0), Some(&b"set\ta"[..]));
        assert_eq!(words.get(1), Some(&b"b"[..]));
        assert_eq!(words.get(2), None);
        assert_eq!(words.tail_from(1), b"b ");
    }

    #[test]
    fn one_pass_keeps_twenty_three_tokens() {
        let text: Vec<u8> = (0..30)
            .flat_map(|i| format!("t{i} ").into_bytes())
            .collect();
        let words = Words::split(&text);
        assert_eq!(words.len(), 23);
        assert_eq!(words.ntokens(), 24);
        assert_eq!(words.last(), Some(&b"t22"[..]));
        assert!(words.tail_from(22).starts_with(b"t22 t23"));
    }
}
