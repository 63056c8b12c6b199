//! Client-side reply parsing for memcached text, memcached binary and RESP,
//! two-phase: first check that a whole reply is buffered, then classify it.
//!
//! Each parser looks at the front of a connection's read buffer and returns
//! [`Parsed::Complete`] with the reply and the bytes it spans, or
//! [`Parsed::Incomplete`] when more bytes are needed, or a [`ReplyError`]
//! when the bytes cannot be a reply to what the load generator sends (which
//! leaves the connection out of step: the caller drops it). Nothing is
//! allocated and no claimed length is trusted: a header line longer than
//! [`REPLY_LINE_BYTES_MAX`] or a value longer than [`VALUE_BYTES_MAX`] is an
//! error before the caller buffers it. Pure functions, callable from any
//! thread.

use crate::limits::{REPLY_LINE_BYTES_MAX, VALUE_BYTES_MAX};
use larder_protocol::binary;
use thiserror::Error;

/// What a reply said, as far as a benchmark cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// A read found its key (memcached `VALUE ... END`, RESP bulk string).
    Hit { value_bytes: usize },
    /// A read missed (memcached `END`, RESP null).
    Miss,
    /// A write was stored (memcached `STORED`, RESP `+OK` or any status).
    Stored,
    /// A write was refused without an error (`NOT_STORED`, `EXISTS`,
    /// `NOT_FOUND`): for a plain `set` this should not happen.
    NotStored,
    /// The server reported an error (`ERROR`, `CLIENT_ERROR ...`,
    /// `SERVER_ERROR ...`, RESP `-...`).
    Error,
}

/// The outcome of looking at the front of a read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A whole reply spanning the first `frame_bytes` bytes.
    Complete { reply: Reply, frame_bytes: usize },
    /// Not enough bytes yet.
    Incomplete,
}

/// Bytes that cannot be a reply to a single-key get or a set.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplyError {
    #[error("reply line longer than {REPLY_LINE_BYTES_MAX} bytes")]
    LineTooLong,
    #[error("unexpected reply line {0:?}")]
    Unexpected(String),
    #[error("malformed length in reply line {0:?}")]
    BadLength(String),
    #[error("reply claims a {0}-byte value, more than {VALUE_BYTES_MAX}")]
    ValueTooLarge(u64),
    #[error("value data not followed by CRLF")]
    BadDataTerminator,
    #[error("VALUE not followed by END (a reply to a single-key get has one value)")]
    MissingEnd,
    #[error("not a binary response: magic {0:#04x}")]
    BadMagic(u8),
    #[error("binary response's extras and key longer than its body")]
    BadBody,
}

/// Parses one memcached text reply to `get <key>` or `set`.
pub fn parse_memcached(buffer: &[u8]) -> Result<Parsed, ReplyError> {
    let Some(line_bytes) = find_line(buffer)? else {
        return Ok(Parsed::Incomplete);
    };
    let line = buffer.get(..line_bytes).unwrap_or(&[]);
    let after_line = line_bytes + 2;
    let simple = |reply| {
        Ok(Parsed::Complete {
            reply,
            frame_bytes: after_line,
        })
    };
    match line {
        b"END" => return simple(Reply::Miss),
        b"STORED" => return simple(Reply::Stored),
        b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => return simple(Reply::NotStored),
        b"ERROR" => return simple(Reply::Error),
        _ => {}
    }
    if line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR") {
        return simple(Reply::Error);
    }
    if !line.starts_with(b"VALUE ") {
        return Err(ReplyError::Unexpected(lossy(line)));
    }
    // VALUE <key> <flags> <bytes> [<cas unique>]
    let value_bytes = line
        .split(|&byte| byte == b' ')
        .filter(|word| !word.is_empty())
        .nth(3)
        .and_then(parse_decimal)
        .ok_or_else(|| ReplyError::BadLength(lossy(line)))?;
    let value_bytes = checked_value_bytes(value_bytes)?;
    let data_end = after_line + value_bytes;
    let frame_bytes = data_end + 2 + b"END\r\n".len();
    let Some(tail) = buffer.get(data_end..frame_bytes) else {
        return Ok(Parsed::Incomplete);
    };
    if tail.get(..2) != Some(b"\r\n") {
        return Err(ReplyError::BadDataTerminator);
    }
    if tail.get(2..) != Some(b"END\r\n") {
        return Err(ReplyError::MissingEnd);
    }
    Ok(Parsed::Complete {
        reply: Reply::Hit { value_bytes },
        frame_bytes,
    })
}

/// Parses one memcached binary response to a get or a set.
pub fn parse_binary(buffer: &[u8]) -> Result<Parsed, ReplyError> {
    if let Some(&magic) = buffer
        .first()
        .filter(|&&magic| magic != binary::RESPONSE_MAGIC)
    {
        return Err(ReplyError::BadMagic(magic));
    }
    let Some(header) = buffer.first_chunk::<{ binary::HEADER_BYTES }>() else {
        return Ok(Parsed::Incomplete);
    };
    let [_magic, code, k0, k1, extras_len, _, s0, s1, b0, b1, b2, b3, ..] = *header;
    let body_bytes = u64::from(u32::from_be_bytes([b0, b1, b2, b3]));
    let value_bytes = body_bytes
        .checked_sub(u64::from(extras_len) + u64::from(u16::from_be_bytes([k0, k1])))
        .ok_or(ReplyError::BadBody)?;
    let value_bytes = checked_value_bytes(value_bytes)?;
    let frame_bytes = binary::HEADER_BYTES + body_bytes as usize;
    if buffer.len() < frame_bytes {
        return Ok(Parsed::Incomplete);
    }
    let reply = match (u16::from_be_bytes([s0, s1]), code) {
        (0, binary::opcode::GET) => Reply::Hit { value_bytes },
        (0, _) => Reply::Stored,
        (0x0001, binary::opcode::GET) => Reply::Miss,
        (0x0001 | 0x0002 | 0x0005, _) => Reply::NotStored,
        _ => Reply::Error,
    };
    Ok(Parsed::Complete { reply, frame_bytes })
}

/// Parses one RESP (2 or 3) reply to `GET` or `SET`.
pub fn parse_resp(buffer: &[u8]) -> Result<Parsed, ReplyError> {
    let Some(line_bytes) = find_line(buffer)? else {
        return Ok(Parsed::Incomplete);
    };
    let line = buffer.get(..line_bytes).unwrap_or(&[]);
    let after_line = line_bytes + 2;
    let simple = |reply| {
        Ok(Parsed::Complete {
            reply,
            frame_bytes: after_line,
        })
    };
    match line.first() {
        Some(b'+') => simple(Reply::Stored),
        Some(b'-') => simple(Reply::Error),
        // RESP3 null, and the RESP2 null array some servers send.
        Some(b'_') => simple(Reply::Miss),
        Some(b'*') if line == b"*-1" => simple(Reply::Miss),
        Some(b'$') => {
            let length = line.get(1..).unwrap_or(&[]);
            if length == b"-1" {
                return simple(Reply::Miss);
            }
            let value_bytes =
                parse_decimal(length).ok_or_else(|| ReplyError::BadLength(lossy(line)))?;
            let value_bytes = checked_value_bytes(value_bytes)?;
            let frame_bytes = after_line + value_bytes + 2;
            let Some(terminator) = buffer.get(after_line + value_bytes..frame_bytes) else {
                return Ok(Parsed::Incomplete);
            };
            if terminator != b"\r\n" {
                return Err(ReplyError::BadDataTerminator);
            }
            Ok(Parsed::Complete {
                reply: Reply::Hit { value_bytes },
                frame_bytes,
            })
        }
        _ => Err(ReplyError::Unexpected(lossy(line))),
    }
}

/// The length of the first line (without its CRLF), `None` if the CRLF has
/// not arrived yet, or an error once the line has outgrown its bound.
fn find_line(buffer: &[u8]) -> Result<Option<usize>, ReplyError> {
    let window = buffer.get(..REPLY_LINE_BYTES_MAX + 2).unwrap_or(buffer);
    match window.windows(2).position(|pair| pair == b"\r\n") {
        Some(line_bytes) => Ok(Some(line_bytes)),
        None if buffer.len() >= REPLY_LINE_BYTES_MAX + 2 => Err(ReplyError::LineTooLong),
        None => Ok(None),
    }
}

fn checked_value_bytes(claimed: u64) -> Result<usize, ReplyError> {
    usize::try_from(claimed)
        .ok()
        .filter(|&bytes| bytes <= VALUE_BYTES_MAX)
        .ok_or(ReplyError::ValueTooLarge(claimed))
}

/// A non-empty run of ASCII digits that fits a u64.
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &byte| {
        let digit = u64::from(byte.checked_sub(b'0').filter(|&digit| digit < 10)?);
        value.checked_mul(10)?.checked_add(digit)
    })
}

fn lossy(line: &[u8]) -> String {
    let shown = line.get(..80).unwrap_or(line);
    String::from_utf8_lossy(shown).into_owned()
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, reason = "tests slice known buffers")]
mod tests {
    use super::*;

    fn complete(reply: Reply, frame_bytes: usize) -> Result<Parsed, ReplyError> {
        Ok(Parsed::Complete { reply, frame_bytes })
    }

    #[test]
    fn memcached_simple_replies_are_classified() {
        assert_eq!(parse_memcached(b"END\r\n"), complete(Reply::Miss, 5));
        assert_eq!(
            parse_memcached(b"STORED\r\nEND\r\n"),
            complete(Reply::Stored, 8)
        );
        assert_eq!(
            parse_memcached(b"NOT_STORED\r\n"),
            complete(Reply::NotStored, 12)
        );
        assert_eq!(parse_memcached(b"ERROR\r\n"), complete(Reply::Error, 7));
        assert_eq!(
            parse_memcached(b"SERVER_ERROR out of memory\r\n"),
            complete(Reply::Error, 28)
        );
        assert_eq!(
            parse_memcached(b"CLIENT_ERROR bad data chunk\r\n"),
            complete(Reply::Error, 29)
        );
    }

    #[test]
    fn memcached_value_block_is_a_hit_spanning_through_end() {
        let reply = b"VALUE k 0 5\r\nhello\r\nEND\r\nSTORED\r\n";
        assert_eq!(
            parse_memcached(reply),
            complete(Reply::Hit { value_bytes: 5 }, 25)
        );
        let with_cas = b"VALUE k 7 2 99\r\nhi\r\nEND\r\n";
        assert_eq!(
            parse_memcached(with_cas),
            complete(Reply::Hit { value_bytes: 2 }, with_cas.len())
        );
    }

    #[test]
    fn memcached_value_data_may_contain_crlf_and_end() {
        let reply = b"VALUE k 0 7\r\nEND\r\nxx\r\nEND\r\n";
        assert_eq!(
            parse_memcached(reply),
            complete(Reply::Hit { value_bytes: 7 }, reply.len())
        );
    }

    #[test]
    fn every_strict_prefix_of_a_reply_is_incomplete() {
        let memcached = b"VALUE key 0 5\r\nhello\r\nEND\r\n";
        for cut in 0..memcached.len() {
            assert_eq!(
                parse_memcached(&memcached[..cut]),
                Ok(Parsed::Incomplete),
                "cut {cut}"
            );
        }
        let resp = b"$5\r\nhello\r\n";
        for cut in 0..resp.len() {
            assert_eq!(
                parse_resp(&resp[..cut]),
                Ok(Parsed::Incomplete),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn memcached_malformed_replies_are_errors() {
        assert!(matches!(
            parse_memcached(b"HELLO\r\n"),
            Err(ReplyError::Unexpected(_))
        ));
        assert!(matches!(
            parse_memcached(b"VALUE k 0 x\r\n"),
            Err(ReplyError::BadLength(_))
        ));
        assert!(matches!(
            parse_memcached(b"VALUE k 0\r\n"),
            Err(ReplyError::BadLength(_))
        ));
        assert_eq!(
            parse_memcached(b"VALUE k 0 2\r\nhiXXEND\r\n"),
            Err(ReplyError::BadDataTerminator)
        );
        assert_eq!(
            parse_memcached(b"VALUE k 0 2\r\nhi\r\nVALUE k2 0 2\r\nhi\r\nEND\r\n"),
            Err(ReplyError::MissingEnd)
        );
    }

    #[test]
    fn claimed_lengths_beyond_the_limit_are_refused_before_buffering() {
        let claim = format!("VALUE k 0 {}\r\n", VALUE_BYTES_MAX + 1);
        assert_eq!(
            parse_memcached(claim.as_bytes()),
            Err(ReplyError::ValueTooLarge(VALUE_BYTES_MAX as u64 + 1))
        );
        assert!(matches!(
            parse_memcached(b"VALUE k 0 99999999999999999999999\r\n"),
            Err(ReplyError::BadLength(_))
        ));
        let claim = format!("${}\r\n", VALUE_BYTES_MAX + 1);
        assert!(matches!(
            parse_resp(claim.as_bytes()),
            Err(ReplyError::ValueTooLarge(_))
        ));
    }

    #[test]
    fn a_line_without_crlf_is_bounded() {
        let long = vec![b'a'; REPLY_LINE_BYTES_MAX + 1];
        assert_eq!(parse_memcached(&long), Ok(Parsed::Incomplete));
        let longer = vec![b'a'; REPLY_LINE_BYTES_MAX + 2];
        assert_eq!(parse_memcached(&longer), Err(ReplyError::LineTooLong));
        assert_eq!(parse_resp(&longer), Err(ReplyError::LineTooLong));
    }

    fn binary_response(code: u8, status: u16, extras: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = vec![0x81, code, 0, 0, extras.len() as u8, 0];
        out.extend_from_slice(&status.to_be_bytes());
        out.extend_from_slice(&((extras.len() + value.len()) as u32).to_be_bytes());
        out.extend_from_slice(&[0; 12]);
        out.extend_from_slice(extras);
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn binary_responses_are_classified_and_framed_by_their_length() {
        let hit = binary_response(0x00, 0, &[0; 4], b"value");
        assert_eq!(
            parse_binary(&hit),
            complete(Reply::Hit { value_bytes: 5 }, 33)
        );
        for cut in 0..hit.len() {
            assert_eq!(
                parse_binary(&hit[..cut]),
                Ok(Parsed::Incomplete),
                "cut at {cut}"
            );
        }
        let miss = binary_response(0x00, 1, &[], b"Not found");
        assert_eq!(parse_binary(&miss), complete(Reply::Miss, 33));
        let stored = binary_response(0x01, 0, &[], b"");
        assert_eq!(parse_binary(&stored), complete(Reply::Stored, 24));
        let exists = binary_response(0x01, 2, &[], b"Data exists for key.");
        assert_eq!(parse_binary(&exists), complete(Reply::NotStored, 44));
        let too_large = binary_response(0x01, 3, &[], b"Too large.");
        assert_eq!(parse_binary(&too_large), complete(Reply::Error, 34));
        assert_eq!(
            parse_binary(b"VALUE k 0 1\r\nv\r\nEND\r\n"),
            Err(ReplyError::BadMagic(b'V'))
        );
        let mut short_body = binary_response(0x00, 0, &[0; 4], b"");
        short_body[11] = 2;
        assert_eq!(parse_binary(&short_body), Err(ReplyError::BadBody));
        let mut huge = binary_response(0x00, 0, &[], b"");
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            parse_binary(&huge),
            Err(ReplyError::ValueTooLarge(_))
        ));
    }

    #[test]
    fn resp_replies_are_classified() {
        assert_eq!(parse_resp(b"+OK\r\n"), complete(Reply::Stored, 5));
        assert_eq!(parse_resp(b"-ERR wrong\r\n"), complete(Reply::Error, 12));
        assert_eq!(parse_resp(b"$-1\r\n"), complete(Reply::Miss, 5));
        assert_eq!(parse_resp(b"_\r\n"), complete(Reply::Miss, 3));
        assert_eq!(
            parse_resp(b"$0\r\n\r\n"),
            complete(Reply::Hit { value_bytes: 0 }, 6)
        );
        assert_eq!(
            parse_resp(b"$5\r\nhe\r\no\r\n+OK\r\n"),
            complete(Reply::Hit { value_bytes: 5 }, 11)
        );
    }

    #[test]
    fn resp_malformed_replies_are_errors() {
        assert!(matches!(
            parse_resp(b":1\r\n"),
            Err(ReplyError::Unexpected(_))
        ));
        assert!(matches!(
            parse_resp(b"$x\r\n"),
            Err(ReplyError::BadLength(_))
        ));
        assert!(matches!(
            parse_resp(b"$\r\n"),
            Err(ReplyError::BadLength(_))
        ));
        assert_eq!(
            parse_resp(b"$2\r\nhiX\n"),
            Err(ReplyError::BadDataTerminator)
        );
    }
}
