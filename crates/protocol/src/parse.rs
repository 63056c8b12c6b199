//! The entry point: frame and parse one request from the front of a buffer.
//!
//! Framing is two-phase. First the command line must be complete (a `\n`
//! within the line limit); then, for storage commands, the data block and its
//! `\r\n` must be buffered too. Until then the answer is
//! [`Parsed::Incomplete`], which never consumes anything, so the caller simply
//! reads more bytes and calls [`parse`] again on the grown buffer. Malformed
//! input is a [`ParseError`] that says what to reply and what to skip.
//!
//! Commands are recognised in the order memcached's `process_command_ascii`
//! uses, so the reply to odd input (wrong token counts, unknown names) is the
//! one memcached gives.

use crate::error::{ErrorKind, ParseError};
use crate::limits::{Limits, KEY_BYTES_MAX};
use crate::line::{self, Line, Scan, Words};
use crate::request::{self, Request};

/// The outcome of parsing the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole request occupies the first `frame_bytes` bytes of the buffer.
    /// Act on `request` (it borrows from the buffer), then drop those bytes;
    /// the next request, if any, starts right after.
    Complete {
        /// The request, borrowing keys and values from the buffer.
        request: Request<'a>,
        /// Bytes of the buffer this request occupies, terminators included.
        frame_bytes: usize,
    },
    /// More bytes are needed; nothing was consumed.
    Incomplete {
        /// `None` while the command line itself is incomplete. `Some(n)` once
        /// a storage command line has been accepted: the whole frame (line,
        /// data block and `\r\n`) is exactly `n` bytes, and `n` never exceeds
        /// [`Limits::frame_bytes_max`], so the caller may reserve it.
        frame_bytes: Option<usize>,
    },
}

/// Parses the request at the front of `buf`.
///
/// Pure and allocation-free; safe to call from any thread. Call it again with
/// the same bytes (plus any newly read ones) after `Incomplete`.
///
/// # Errors
/// A [`ParseError`] when the input is malformed: it carries memcached's reply
/// and how many bytes to drop, swallow, and whether to close the connection.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Result<Parsed<'a>, ParseError> {
    let line = match line::scan(buf, limits) {
        Scan::Complete(line) => line,
        Scan::Incomplete => return Ok(Parsed::Incomplete { frame_bytes: None }),
        Scan::TooLong { multiget: false } => {
            return Err(ParseError::new(ErrorKind::LineTooLong, 0));
        }
        Scan::TooLong { multiget: true } => {
            return Err(ParseError::new(ErrorKind::MultigetLineTooLong, 0));
        }
    };
    let command = Command {
        line,
        words: Words::split(line.text),
        buf,
        limits,
    };
    command.dispatch()
}

/// A complete command line being parsed, with what its parser may need.
pub(crate) struct Command<'a, 'l> {
    pub line: Line<'a>,
    pub words: Words<'a>,
    pub buf: &'a [u8],
    pub limits: &'l Limits,
}

/// Where a storage command's data block stands.
pub(crate) enum DataBlock<'a> {
    /// The value, and the frame length (line, value, `\r\n`).
    Ready { value: &'a [u8], frame_bytes: usize },
    /// The frame will be this many bytes; not all are buffered yet.
    Incomplete { frame_bytes: usize },
    /// The value is not followed by `\r\n`; the frame is this long.
    BadChunk { frame_bytes: usize },
}

impl<'a> Command<'a, '_> {
    /// Routes the line to its command parser, in memcached's order.
    fn dispatch(&self) -> Result<Parsed<'a>, ParseError> {
        let Some(name) = self.words.get(0).filter(|name| name.len() >= 2) else {
            return Err(self.reject(ErrorKind::UnknownCommand));
        };
        match name {
            [b'm', kind] => self.dispatch_meta(*kind),
            [b'g', ..] => request::retrieval::parse(self, name),
            b"set" | b"add" | b"append" | b"replace" | b"prepend" | b"cas" => {
                request::storage::parse(self, name)
            }
            b"stats" => request::admin::parse_stats(self),
            b"incr" | b"decr" => request::arithmetic::parse(self, name),
            b"delete" => request::delete::parse(self),
            b"touch" => request::touch::parse(self),
            b"bget" => request::retrieval::parse(self, b"get"),
            b"flush_all" => request::admin::parse_flush_all(self),
            b"version" => self.complete(Request::Version),
            b"quit" => self.complete(Request::Quit),
            b"verbosity" => request::admin::parse_verbosity(self),
            b"lru_crawler" => request::admin::parse_lru_crawler(self),
            b"cache_memlimit" => request::admin::parse_cache_memlimit(self),
            [b's' | b'a' | b'c' | b'i' | b'd' | b't', ..] => {
                Err(self.reject(ErrorKind::UnknownCommand))
            }
            _ => Err(self.reject_unknown()),
        }
    }

    fn dispatch_meta(&self, kind: u8) -> Result<Parsed<'a>, ParseError> {
        match kind {
            b'g' => request::meta_get::parse(self),
            b's' => request::meta_set::parse(self),
            b'd' => request::meta_delete::parse(self),
            b'n' => self.complete(Request::MetaNoop),
            b'a' => request::meta_arithmetic::parse(self),
            b'e' => request::meta_debug::parse(self),
            _ => Err(self.reject(ErrorKind::UnknownCommand)),
        }
    }

    /// An unknown command, unless it looks like HTTP, which memcached drops.
    fn reject_unknown(&self) -> ParseError {
        let is_http = self
            .words
            .last()
            .is_some_and(|last| last.starts_with(b"HTTP/"));
        self.reject(if is_http {
            ErrorKind::HttpRequest
        } else {
            ErrorKind::UnknownCommand
        })
    }

    /// A finished request that is just the command line.
    pub fn complete(&self, request: Request<'a>) -> Result<Parsed<'a>, ParseError> {
        Ok(Parsed::Complete {
            request,
            frame_bytes: self.line.frame_bytes,
        })
    }

    /// An error that consumes the command line.
    pub fn reject(&self, kind: ErrorKind) -> ParseError {
        ParseError::new(kind, self.line.frame_bytes)
    }

    /// Where `word` (a token of this command) starts in the buffer.
    pub fn offset_of(&self, word: &[u8]) -> usize {
        (word.as_ptr() as usize).saturating_sub(self.buf.as_ptr() as usize)
    }

    /// Token `index`, or empty if absent.
    pub fn word(&self, index: usize) -> &'a [u8] {
        self.words.get(index).unwrap_or(&[])
    }

    /// Token `index` as a key: refused with the line-format error if it is
    /// longer than [`KEY_BYTES_MAX`].
    pub fn key(&self, index: usize) -> Result<&'a [u8], ParseError> {
        let key = self.word(index);
        if key.len() > KEY_BYTES_MAX {
            return Err(self.reject(ErrorKind::BadCommandLineFormat));
        }
        Ok(key)
    }

    /// Locates the data block of `value_bytes` bytes after the line.
    pub fn data_block(&self, value_bytes: usize) -> DataBlock<'a> {
        let start = self.line.frame_bytes;
        let frame_bytes = start + value_bytes + 2;
        let Some(block) = self.buf.get(start..frame_bytes) else {
            return DataBlock::Incomplete { frame_bytes };
        };
        match block.split_at_checked(value_bytes) {
            Some((value, b"\r\n")) => DataBlock::Ready { value, frame_bytes },
            _ => DataBlock::BadChunk { frame_bytes },
        }
    }

    /// The data length token of a storage command, checked as memcached does
    /// (`vlen < 0 || vlen > INT_MAX - 2` is a line-format error).
    pub fn value_bytes(&self, token: &[u8]) -> Option<usize> {
        let value_bytes = crate::number::parse_i32(token)?;
        if value_bytes > i32::MAX - 2 {
            return None;
        }
        usize::try_from(value_bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(input: &[u8]) -> ErrorKind {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => error.kind,
            Ok(parsed) => panic!("expected an error for {input:?}, got {parsed:?}"),
        }
    }

    #[test]
    fn empty_and_one_letter_lines_are_unknown() {
        assert_eq!(error_of(b"\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"a\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"   \r\n"), ErrorKind::UnknownCommand);
    }

    #[test]
    fn command_names_are_case_sensitive() {
        assert_eq!(error_of(b"GET a\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"foo\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"mx\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"shutdown\r\n"), ErrorKind::UnknownCommand);
    }

    #[test]
    fn http_requests_close_the_connection_silently() {
        let error = parse(b"GET / HTTP/1.1\r\n", &Limits::DEFAULT);
        assert!(matches!(error, Err(e) if e.kind == ErrorKind::HttpRequest
            && e.closes_connection() && e.reply().is_none()));
    }

    #[test]
    fn an_over_long_line_closes_without_reply() {
        let error = parse(&[b'x'; 3000], &Limits::DEFAULT);
        assert!(matches!(error, Err(e) if e.kind == ErrorKind::LineTooLong
            && e.closes_connection() && e.reply().is_none()));
    }

    #[test]
    fn an_over_long_multiget_is_refused_at_its_own_limit() {
        let limits = Limits::DEFAULT;
        let mut line = b"get ".to_vec();
        line.resize(limits.get_line_bytes_max(), b'k');
        let error = parse(&line, &limits);
        assert!(
            matches!(error, Err(e) if e.kind == ErrorKind::MultigetLineTooLong
            && e.closes_connection() && e.reply().is_some())
        );
    }

    #[test]
    fn an_error_consumes_exactly_its_line() {
        let error = parse(b"foo bar\r\nversion\r\n", &Limits::DEFAULT);
        assert_eq!(error.map_err(|e| e.consumed), Err(9));
    }

    #[test]
    fn version_and_quit_ignore_extra_tokens() {
        let version = parse(b"version foo\r\n", &Limits::DEFAULT);
        assert_eq!(
            version,
            Ok(Parsed::Complete {
                request: Request::Version,
                frame_bytes: 13
            })
        );
        let quit = parse(b" quit now\n", &Limits::DEFAULT);
        assert_eq!(
            quit,
            Ok(Parsed::Complete {
                request: Request::Quit,
                frame_bytes: 10
            })
        );
    }

    #[test]
    fn a_partial_line_is_incomplete() {
        assert_eq!(
            parse(b"versio", &Limits::DEFAULT),
            Ok(Parsed::Incomplete { frame_bytes: None })
        );
        assert_eq!(
            parse(b"", &Limits::DEFAULT),
            Ok(Parsed::Incomplete { frame_bytes: None })
        );
    }
}
