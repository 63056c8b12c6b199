//! `touch <key> <exptime> [noreply]`: replace an item's exptime.

use crate::error::{ErrorKind, ParseError};
use crate::number::parse_i32;
use crate::parse::{Command, Parsed};
use crate::request::Request;

/// A touch request. Reply: `TOUCHED` or `NOT_FOUND`; nothing when
/// `noreply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touch<'a> {
    /// The key, at most 250 bytes.
    pub key: &'a [u8],
    /// The new raw exptime (see [`crate::request`]).
    pub exptime: i32,
    /// The line ended with `noreply`: send no reply.
    pub noreply: bool,
}

/// Parses a `touch` line.
pub(crate) fn parse<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    let ntokens = cmd.words.ntokens();
    if ntokens != 4 && ntokens != 5 {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    let noreply = cmd.words.ends_with_noreply();
    let key = cmd.key(1).map_err(|error| error.quiet_if(noreply))?;
    let Some(exptime) = parse_i32(cmd.word(2)) else {
        return Err(cmd.reject(ErrorKind::InvalidExptime).quiet_if(noreply));
    };
    cmd.complete(Request::Touch(Touch {
        key,
        exptime,
        noreply,
    }))
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, Parsed, Request};

    use super::*;

    fn parsed(input: &[u8]) -> Result<Parsed<'_>, ErrorKind> {
        parse(input, &Limits::DEFAULT).map_err(|error| error.kind)
    }

    #[test]
    fn touch_parses() {
        let expected = Touch {
            key: b"k",
            exptime: -5,
            noreply: true,
        };
        assert_eq!(
            parsed(b"touch k -5 noreply\r\n"),
            Ok(Parsed::Complete {
                request: Request::Touch(expected),
                frame_bytes: 20
            })
        );
    }

    #[test]
    fn touch_errors_match_memcached() {
        assert_eq!(parsed(b"touch a\r\n"), Err(ErrorKind::UnknownCommand));
        assert_eq!(parsed(b"touch a abc\r\n"), Err(ErrorKind::InvalidExptime));
        let silent = parse(b"touch a abc noreply\r\n", &Limits::DEFAULT);
        assert!(matches!(silent, Err(e) if e.reply().is_none()));
    }
}
