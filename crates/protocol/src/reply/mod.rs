//! Encoding replies: text-protocol lines here, meta replies in [`meta`].
//!
//! Every function appends to any [`BufMut`] (a `BytesMut`, a `Vec<u8>`) and
//! never fails; the caller owns the buffer and decides when to flush it.
//! Large values need not be copied into the buffer: write the header with
//! [`write_value_header`], send the value bytes from wherever they live, then
//! [`VALUE_TRAILER`]. Messages passed to the error writers must be a single
//! line; a line break in one is a bug in the caller and panics.

pub mod meta;

use bytes::BufMut;

/// The `\r\n` that ends every line and every data block.
pub const VALUE_TRAILER: &[u8] = b"\r\n";

/// The reply memcached gives to incr/decr on a value that is not a number.
pub const NON_NUMERIC_VALUE: &[u8] =
    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";

/// The fixed one-line replies of the text protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    /// `STORED`: a storage command succeeded.
    Stored,
    /// `NOT_STORED`: `add`/`replace`/`append`/`prepend` condition unmet.
    NotStored,
    /// `EXISTS`: `cas` found a different cas unique.
    Exists,
    /// `NOT_FOUND`: the key is absent (`cas`, `delete`, `incr`, `touch`).
    NotFound,
    /// `DELETED`: `delete` succeeded.
    Deleted,
    /// `TOUCHED`: `touch` succeeded.
    Touched,
    /// `OK`: `flush_all`, `verbosity`.
    Ok,
    /// `END`: closes a retrieval or `stats` reply.
    End,
    /// `RESET`: `stats reset` succeeded.
    Reset,
    /// `ERROR`: unknown command (or an unknown `stats` group).
    Error,
}

impl Reply {
    /// The reply's bytes, `\r\n` included.
    pub const fn as_bytes(self) -> &'static [u8] {
        match self {
            Reply::Stored => b"STORED\r\n",
            Reply::NotStored => b"NOT_STORED\r\n",
            Reply::Exists => b"EXISTS\r\n",
            Reply::NotFound => b"NOT_FOUND\r\n",
            Reply::Deleted => b"DELETED\r\n",
            Reply::Touched => b"TOUCHED\r\n",
            Reply::Ok => b"OK\r\n",
            Reply::End => b"END\r\n",
            Reply::Reset => b"RESET\r\n",
            Reply::Error => b"ERROR\r\n",
        }
    }
}

/// Appends a fixed reply line.
pub fn write_reply(buf: &mut impl BufMut, reply: Reply) {
    buf.put_slice(reply.as_bytes());
}

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n`, the header of one
/// retrieval hit. The caller then sends exactly `value_bytes` bytes of value
/// and [`VALUE_TRAILER`]. `cas` is `Some` for `gets`/`gats`.
pub fn write_value_header(
    buf: &mut impl BufMut,
    key: &[u8],
    flags: u32,
    value_bytes: usize,
    cas: Option<u64>,
) {
    buf.put_slice(b"VALUE ");
    buf.put_slice(key);
    buf.put_u8(b' ');
    put_u64(buf, u64::from(flags));
    buf.put_u8(b' ');
    put_u64(buf, value_bytes as u64);
    if let Some(cas) = cas {
        buf.put_u8(b' ');
        put_u64(buf, cas);
    }
    buf.put_slice(VALUE_TRAILER);
}

/// The most bytes [`write_value`] appends besides the key and the value:
/// `VALUE `, the flags (a `u32`, at most 10 digits), the length and the
/// cas (at most 20 digits each), each after a space, and two line ends.
pub const VALUE_REPLY_OVERHEAD_BYTES_MAX: usize =
    b"VALUE ".len() + (1 + 10) + (1 + 20) + (1 + 20) + 2 * VALUE_TRAILER.len();

/// Appends a whole retrieval hit: header, value and trailer.
pub fn write_value(buf: &mut impl BufMut, key: &[u8], flags: u32, value: &[u8], cas: Option<u64>) {
    write_value_header(buf, key, flags, value.len(), cas);
    buf.put_slice(value);
    buf.put_slice(VALUE_TRAILER);
}

/// Appends the result of `incr`/`decr`: the new value as a decimal line.
pub fn write_number(buf: &mut impl BufMut, value: u64) {
    put_u64(buf, value);
    buf.put_slice(VALUE_TRAILER);
}

/// Appends `VERSION <version>\r\n`.
pub fn write_version(buf: &mut impl BufMut, version: &[u8]) {
    assert_single_line(version);
    buf.put_slice(b"VERSION ");
    buf.put_slice(version);
    buf.put_slice(VALUE_TRAILER);
}

/// Appends `STAT <name> <value>\r\n`; end the list with [`Reply::End`].
pub fn write_stat(buf: &mut impl BufMut, name: &[u8], value: &[u8]) {
    assert_single_line(name);
    assert_single_line(value);
    buf.put_slice(b"STAT ");
    buf.put_slice(name);
    buf.put_u8(b' ');
    buf.put_slice(value);
    buf.put_slice(VALUE_TRAILER);
}

/// Appends `STAT <name> <value>\r\n` for a numeric statistic.
pub fn write_stat_u64(buf: &mut impl BufMut, name: &[u8], value: u64) {
    assert_single_line(name);
    buf.put_slice(b"STAT ");
    buf.put_slice(name);
    buf.put_u8(b' ');
    put_u64(buf, value);
    buf.put_slice(VALUE_TRAILER);
}

/// Appends `CLIENT_ERROR <message>\r\n`: the request was at fault.
pub fn write_client_error(buf: &mut impl BufMut, message: &[u8]) {
    assert_single_line(message);
    buf.put_slice(b"CLIENT_ERROR ");
    buf.put_slice(message);
    buf.put_slice(VALUE_TRAILER);
}

/// Appends `SERVER_ERROR <message>\r\n`: the server could not serve a valid
/// request. The message should say whether retrying may help.
pub fn write_server_error(buf: &mut impl BufMut, message: &[u8]) {
    assert_single_line(message);
    buf.put_slice(b"SERVER_ERROR ");
    buf.put_slice(message);
    buf.put_slice(VALUE_TRAILER);
}

/// A reply line must not contain a line break, or the client would read two
/// replies: that is a bug in the caller, not bad input.
fn assert_single_line(text: &[u8]) {
    assert!(
        !text.iter().any(|&b| b == b'\r' || b == b'\n'),
        "reply text must be one line: {:?}",
        text.escape_ascii().to_string()
    );
}

/// Appends `value` in decimal without allocating.
pub(crate) fn put_u64(buf: &mut impl BufMut, value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = value;
    for slot in digits.iter_mut().rev() {
        // A value below 10 always fits in a u8.
        let digit = (rest % 10) as u8;
        *slot = b'0' + digit;
        start -= 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    buf.put_slice(digits.get(start..).unwrap_or(b"0"));
}

/// Appends `value` in decimal, with a `-` when negative.
pub(crate) fn put_i64(buf: &mut impl BufMut, value: i64) {
    if value < 0 {
        buf.put_u8(b'-');
    }
    put_u64(buf, value.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut buf = Vec::new();
        write(&mut buf);
        buf
    }

    #[test]
    fn fixed_replies() {
        assert_eq!(written(|b| write_reply(b, Reply::Stored)), b"STORED\r\n");
        assert_eq!(
            written(|b| write_reply(b, Reply::NotStored)),
            b"NOT_STORED\r\n"
        );
        assert_eq!(Reply::Exists.as_bytes(), b"EXISTS\r\n");
        assert_eq!(Reply::NotFound.as_bytes(), b"NOT_FOUND\r\n");
        assert_eq!(Reply::Deleted.as_bytes(), b"DELETED\r\n");
        assert_eq!(Reply::Touched.as_bytes(), b"TOUCHED\r\n");
        assert_eq!(Reply::Ok.as_bytes(), b"OK\r\n");
        assert_eq!(Reply::End.as_bytes(), b"END\r\n");
        assert_eq!(Reply::Reset.as_bytes(), b"RESET\r\n");
        assert_eq!(Reply::Error.as_bytes(), b"ERROR\r\n");
    }

    #[test]
    fn value_lines_match_memcached() {
        assert_eq!(
            written(|b| write_value(b, b"a", 0, b"x", None)),
            b"VALUE a 0 1\r\nx\r\n"
        );
        assert_eq!(
            written(|b| write_value(b, b"a", u32::MAX, b"x", Some(5))),
            b"VALUE a 4294967295 1 5\r\nx\r\n"
        );
    }

    #[test]
    fn the_widest_value_reply_is_exactly_the_overhead_bound() {
        let (key, value) = (b"k".as_slice(), b"v".as_slice());
        let mut widest =
            written(|b| write_value_header(b, key, u32::MAX, usize::MAX, Some(u64::MAX)));
        widest.extend_from_slice(value);
        widest.extend_from_slice(VALUE_TRAILER);
        assert_eq!(
            widest.len(),
            key.len() + value.len() + VALUE_REPLY_OVERHEAD_BYTES_MAX
        );
    }

    #[test]
    fn a_value_header_lets_the_caller_send_the_value() {
        let mut buf = bytes::BytesMut::new();
        write_value_header(&mut buf, b"big", 7, 1_048_576, Some(u64::MAX));
        assert_eq!(&buf[..], b"VALUE big 7 1048576 18446744073709551615\r\n");
    }

    #[test]
    fn numbers_and_version() {
        assert_eq!(written(|b| write_number(b, 0)), b"0\r\n");
        assert_eq!(
            written(|b| write_number(b, u64::MAX)),
            b"18446744073709551615\r\n"
        );
        assert_eq!(
            written(|b| write_version(b, b"1.6.18")),
            b"VERSION 1.6.18\r\n"
        );
        assert_eq!(written(|b| put_i64(b, -1)), b"-1");
        assert_eq!(written(|b| put_i64(b, i64::MIN)), b"-9223372036854775808");
    }

    #[test]
    fn stat_lines() {
        assert_eq!(
            written(|b| write_stat(b, b"version", b"1.0")),
            b"STAT version 1.0\r\n"
        );
        assert_eq!(
            written(|b| write_stat_u64(b, b"curr_items", 42)),
            b"STAT curr_items 42\r\n"
        );
    }

    #[test]
    fn error_lines() {
        assert_eq!(
            written(|b| write_client_error(b, b"bad data chunk")),
            b"CLIENT_ERROR bad data chunk\r\n"
        );
        assert_eq!(
            written(|b| write_server_error(b, b"out of memory")),
            b"SERVER_ERROR out of memory\r\n"
        );
        assert!(NON_NUMERIC_VALUE.ends_with(b"non-numeric value\r\n"));
    }

    #[test]
    #[should_panic(expected = "one line")]
    fn a_multi_line_message_is_a_caller_bug() {
        write_client_error(&mut Vec::new(), b"two\r\nlines");
    }
}
