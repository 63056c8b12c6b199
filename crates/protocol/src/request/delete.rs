//! `delete <key> [0] [noreply]`: remove one key.
//!
//! memcached still accepts the long-gone hold time, but only as `0`; anything
//! else gets a usage error. As with other text commands, a final `noreply`
//! also silences that error.

use crate::error::{ErrorKind, ParseError};
use crate::parse::{Command, Parsed};
use crate::request::Request;

/// A delete request. Reply: `DELETED` or `NOT_FOUND`; nothing when
/// `noreply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delete<'a> {
    /// The key, at most 250 bytes.
    pub key: &'a [u8],
    /// The line ended with `noreply`: send no reply.
    pub noreply: bool,
}

/// Parses a `delete` line.
pub(crate) fn parse<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    let ntokens = cmd.words.ntokens();
    if !(3..=5).contains(&ntokens) {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    let mut noreply = false;
    if ntokens > 3 {
        let hold_is_zero = cmd.word(2) == b"0";
        noreply = cmd.words.ends_with_noreply();
        let valid = (ntokens == 4 && (hold_is_zero || noreply))
            || (ntokens == 5 && hold_is_zero && noreply);
        if !valid {
            return Err(cmd.reject(ErrorKind::DeleteUsage).quiet_if(noreply));
        }
    }
    let key = cmd.key(1).map_err(|error| error.quiet_if(noreply))?;
    cmd.complete(Request::Delete(Delete { key, noreply }))
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, Parsed, Request};

    use super::*;

    fn delete(input: &[u8]) -> Delete<'_> {
        match parse(input, &Limits::DEFAULT) {
            Ok(Parsed::Complete {
                request: Request::Delete(delete),
                ..
            }) => delete,
            other => panic!("expected a delete for {input:?}, got {other:?}"),
        }
    }

    fn error_of(input: &[u8]) -> (ErrorKind, bool) {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => (error.kind, error.reply().is_some()),
            other => panic!("expected an error for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn delete_accepts_a_zero_hold_time_and_noreply() {
        assert_eq!(
            delete(b"delete a\r\n"),
            Delete {
                key: b"a",
                noreply: false
            }
        );
        assert_eq!(
            delete(b"delete a 0\r\n"),
            Delete {
                key: b"a",
                noreply: false
            }
        );
        assert_eq!(
            delete(b"delete a noreply\r\n"),
            Delete {
                key: b"a",
                noreply: true
            }
        );
        assert_eq!(
            delete(b"delete a 0 noreply\r\n"),
            Delete {
                key: b"a",
                noreply: true
            }
        );
    }

    #[test]
    fn other_hold_times_get_the_usage_error() {
        assert_eq!(error_of(b"delete a 1\r\n"), (ErrorKind::DeleteUsage, true));
        assert_eq!(
            error_of(b"delete a 0 0\r\n"),
            (ErrorKind::DeleteUsage, true)
        );
        assert_eq!(
            error_of(b"delete a 1 noreply\r\n"),
            (ErrorKind::DeleteUsage, false)
        );
    }

    #[test]
    fn wrong_token_counts_are_unknown_commands() {
        assert_eq!(error_of(b"delete\r\n"), (ErrorKind::UnknownCommand, true));
        assert_eq!(
            error_of(b"delete a b c d\r\n"),
            (ErrorKind::UnknownCommand, true)
        );
    }

    #[test]
    fn a_long_key_is_bad_format() {
        let mut line = b"delete ".to_vec();
        line.extend_from_slice(&[b'k'; 251]);
        line.extend_from_slice(b"\r\n");
        assert_eq!(error_of(&line), (ErrorKind::BadCommandLineFormat, true));
    }
}
