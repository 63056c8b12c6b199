//! `incr`/`decr <key> <delta> [noreply]`: 64-bit unsigned arithmetic.
//!
//! The delta is an unsigned 64-bit decimal (`+5` is accepted, `-1` is not).
//! What happens to the value (wrap on incr, floor at 0 on decr, refusal of a
//! non-numeric value) is the server's business.

use crate::error::{ErrorKind, ParseError};
use crate::number::parse_u64;
use crate::parse::{Command, Parsed};
use crate::request::Request;

/// Increment or decrement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `incr`: add, wrapping at 2^64.
    Increment,
    /// `decr`: subtract, stopping at 0.
    Decrement,
}

/// An incr/decr request. Reply: the new value as a decimal line
/// ([`crate::reply::write_number`]), `NOT_FOUND`, or
/// `CLIENT_ERROR cannot increment or decrement non-numeric value`; nothing
/// when `noreply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arithmetic<'a> {
    /// Which way.
    pub direction: Direction,
    /// The key, at most 250 bytes.
    pub key: &'a [u8],
    /// The amount to add or subtract.
    pub delta: u64,
    /// The line ended with `noreply`: send no reply.
    pub noreply: bool,
}

/// Parses an `incr` or `decr` line.
pub(crate) fn parse<'a>(cmd: &Command<'a, '_>, name: &[u8]) -> Result<Parsed<'a>, ParseError> {
    let ntokens = cmd.words.ntokens();
    if ntokens != 4 && ntokens != 5 {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    let direction = if name == b"incr" {
        Direction::Increment
    } else {
        Direction::Decrement
    };
    let noreply = cmd.words.ends_with_noreply();
    let key = cmd.key(1).map_err(|error| error.quiet_if(noreply))?;
    let Some(delta) = parse_u64(cmd.word(2)) else {
        return Err(cmd
            .reject(ErrorKind::InvalidDeltaArgument)
            .quiet_if(noreply));
    };
    cmd.complete(Request::Arithmetic(Arithmetic {
        direction,
        key,
        delta,
        noreply,
    }))
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, Parsed, Request};

    use super::*;

    fn arithmetic(input: &[u8]) -> Arithmetic<'_> {
        match parse(input, &Limits::DEFAULT) {
            Ok(Parsed::Complete {
                request: Request::Arithmetic(arithmetic),
                ..
            }) => arithmetic,
            other => panic!("expected incr/decr for {input:?}, got {other:?}"),
        }
    }

    fn error_of(input: &[u8]) -> (ErrorKind, bool) {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => (error.kind, error.reply().is_some()),
            other => panic!("expected an error for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn incr_and_decr_parse() {
        let incr = arithmetic(b"incr n 5\r\n");
        assert_eq!(incr.direction, Direction::Increment);
        assert_eq!((incr.key, incr.delta, incr.noreply), (&b"n"[..], 5, false));
        let decr = arithmetic(b"decr n 18446744073709551615 noreply\r\n");
        assert_eq!(decr.direction, Direction::Decrement);
        assert_eq!((decr.delta, decr.noreply), (u64::MAX, true));
        assert_eq!(arithmetic(b"incr n +1\r\n").delta, 1);
    }

    #[test]
    fn bad_deltas_are_refused() {
        for input in [
            &b"incr a abc\r\n"[..],
            b"incr a -1\r\n",
            b"decr a 18446744073709551616\r\n",
        ] {
            assert_eq!(error_of(input), (ErrorKind::InvalidDeltaArgument, true));
        }
        assert_eq!(
            error_of(b"incr a abc noreply\r\n"),
            (ErrorKind::InvalidDeltaArgument, false)
        );
    }

    #[test]
    fn wrong_token_counts_are_unknown_commands() {
        assert_eq!(error_of(b"incr\r\n"), (ErrorKind::UnknownCommand, true));
        assert_eq!(error_of(b"incr a\r\n"), (ErrorKind::UnknownCommand, true));
        assert_eq!(
            error_of(b"decr a 1 2 3\r\n"),
            (ErrorKind::UnknownCommand, true)
        );
    }
}
