//! Malformed input: what memcached answers, and what the connection must do.
//!
//! A [`ParseError`] is not a failure of the server; it is the parser's verdict
//! on bytes a client sent, carrying everything the caller needs to answer the
//! way memcached 1.6 does: the reply line, how many buffered bytes to drop,
//! how many not-yet-received bytes to swallow, and whether to hang up. Every
//! reply string here was checked against a running memcached 1.6.18.

use crate::request::{KeyBytes, MetaKey};
use thiserror::Error;

/// Which rule the input broke. `Display` gives the reply line memcached sends
/// (without `\r\n`); [`ErrorKind::reply`] gives it with the terminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum ErrorKind {
    /// Unknown command, or a known one with the wrong number of tokens.
    #[error("ERROR")]
    UnknownCommand,
    /// A key longer than [`crate::KEY_BYTES_MAX`], or a number that does not
    /// parse where memcached reports the line format.
    #[error("CLIENT_ERROR bad command line format")]
    BadCommandLineFormat,
    /// A storage command's data block was not followed by `\r\n`.
    #[error("CLIENT_ERROR bad data chunk")]
    BadDataChunk,
    /// `touch`, `gat`, `gats` or `flush_all` with an exptime that is not a
    /// number.
    #[error("CLIENT_ERROR invalid exptime argument")]
    InvalidExptime,
    /// `incr`/`decr` with a delta that is not an unsigned 64-bit number.
    #[error("CLIENT_ERROR invalid numeric delta argument")]
    InvalidDeltaArgument,
    /// `delete` with arguments other than an optional `0` and `noreply`.
    #[error("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]")]
    DeleteUsage,
    /// A data block longer than [`crate::Limits::item_bytes_max`].
    #[error("SERVER_ERROR object too large for cache")]
    ObjectTooLarge,
    /// A command line (not a multiget) outgrew
    /// [`crate::Limits::line_bytes_max`]. memcached closes without a reply.
    #[error("line_bytes_max exceeded")]
    LineTooLong,
    /// A `get`/`gets`/`gat`/`gats` line outgrew
    /// [`crate::Limits::get_line_bytes_max`]. memcached has no such limit
    /// for `get`/`gets`; Larder says so and closes.
    #[error("SERVER_ERROR multiget line exceeds get_line_bytes_max")]
    MultigetLineTooLong,
    /// An unknown command whose last token starts with `HTTP/`: someone is
    /// speaking HTTP to us. memcached closes without a reply.
    #[error("HTTP request on the memcached port")]
    HttpRequest,
    /// `mg`/`ms` with the same flag twice (or a flag byte of 127 or above).
    #[error("CLIENT_ERROR duplicate flag")]
    DuplicateFlag,
    /// `mg`/`ms` with a flag memcached does not know.
    #[error("CLIENT_ERROR invalid flag")]
    InvalidFlag,
    /// A meta `N`, `T`, `R`, `C` or `E` flag whose token is not a number.
    #[error("CLIENT_ERROR bad token in command line format")]
    BadToken,
    /// A meta `b` flag with a key that is not valid base64.
    #[error("CLIENT_ERROR error decoding key")]
    KeyDecoding,
    /// A meta `M` flag not followed by exactly one mode character.
    #[error("CLIENT_ERROR incorrect length for M token")]
    ModeTokenLength,
    /// `ms` with a mode other than `E`, `A`, `P`, `R` or `S`.
    #[error("CLIENT_ERROR invalid mode for ms M token")]
    InvalidSetMode,
    /// `ma` with a mode other than `I`, `+`, `D` or `-`.
    #[error("CLIENT_ERROR invalid mode for ma M token")]
    InvalidArithmeticMode,
    /// `mg`/`ms` with a `J` flag that is not an unsigned 64-bit number.
    #[error("CLIENT_ERROR invalid numeric initial value")]
    InvalidInitialValue,
    /// `mg`/`ms` with a `D` flag that is not an unsigned 64-bit number.
    #[error("CLIENT_ERROR invalid numeric delta value")]
    InvalidDeltaValue,
    /// An opaque token longer than [`crate::limits::META_OPAQUE_BYTES_MAX`].
    #[error("CLIENT_ERROR opaque token too long")]
    OpaqueTooLong,
    /// `mg` with more than 17 flags (memcached's wording differs from the
    /// other meta commands by one word).
    #[error("CLIENT_ERROR options flags are too long")]
    MetaGetFlagsTooLong,
    /// `ms`, `md` or `ma` with more flags than [`crate::limits::META_TOKENS_MAX`]
    /// allows.
    #[error("CLIENT_ERROR options flags too long")]
    MetaFlagsTooLong,
    /// `md`/`ma` with any flag error: memcached reports them all alike.
    #[error("CLIENT_ERROR invalid or duplicate flag")]
    InvalidOrDuplicateFlag,
}

impl ErrorKind {
    /// The exact bytes memcached writes for this error, `\r\n` included, or
    /// `None` when it hangs up without a word.
    pub const fn reply(self) -> Option<&'static [u8]> {
        Some(match self {
            ErrorKind::UnknownCommand => b"ERROR\r\n",
            ErrorKind::BadCommandLineFormat => b"CLIENT_ERROR bad command line format\r\n",
            ErrorKind::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            ErrorKind::InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            ErrorKind::InvalidDeltaArgument => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            ErrorKind::DeleteUsage => {
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            }
            ErrorKind::ObjectTooLarge => b"SERVER_ERROR object too large for cache\r\n",
            ErrorKind::LineTooLong | ErrorKind::HttpRequest => return None,
            ErrorKind::MultigetLineTooLong => {
                b"SERVER_ERROR multiget line exceeds get_line_bytes_max\r\n"
            }
            ErrorKind::DuplicateFlag => b"CLIENT_ERROR duplicate flag\r\n",
            ErrorKind::InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            ErrorKind::BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            ErrorKind::KeyDecoding => b"CLIENT_ERROR error decoding key\r\n",
            ErrorKind::ModeTokenLength => b"CLIENT_ERROR incorrect length for M token\r\n",
            ErrorKind::InvalidSetMode => b"CLIENT_ERROR invalid mode for ms M token\r\n",
            ErrorKind::InvalidArithmeticMode => b"CLIENT_ERROR invalid mode for ma M token\r\n",
            ErrorKind::InvalidInitialValue => b"CLIENT_ERROR invalid numeric initial value\r\n",
            ErrorKind::InvalidDeltaValue => b"CLIENT_ERROR invalid numeric delta value\r\n",
            ErrorKind::OpaqueTooLong => b"CLIENT_ERROR opaque token too long\r\n",
            ErrorKind::MetaGetFlagsTooLong => b"CLIENT_ERROR options flags are too long\r\n",
            ErrorKind::MetaFlagsTooLong => b"CLIENT_ERROR options flags too long\r\n",
            ErrorKind::InvalidOrDuplicateFlag => b"CLIENT_ERROR invalid or duplicate flag\r\n",
        })
    }

    /// Whether the connection must be closed (after writing any reply).
    pub const fn closes_connection(self) -> bool {
        matches!(
            self,
            ErrorKind::LineTooLong | ErrorKind::MultigetLineTooLong | ErrorKind::HttpRequest
        )
    }
}

/// The parser's verdict on malformed input, and the recipe for answering it.
///
/// The caller must, in order:
/// 1. write [`ParseError::reply`] if it is `Some`;
/// 2. drop the first [`ParseError::consumed`] bytes of the buffer it parsed
///    (always at most that buffer's length);
/// 3. discard the next [`ParseError::discard_bytes`] bytes of input as they
///    arrive (some may already be buffered), without parsing them — this is a
///    rejected data block, which memcached swallows;
/// 4. close the connection if [`ParseError::closes_connection`], otherwise
///    carry on parsing what follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{kind} (consumed {consumed} bytes, {discard_bytes} more to discard)")]
pub struct ParseError {
    /// The rule that was broken.
    pub kind: ErrorKind,
    /// Bytes at the front of the parsed buffer that this verdict covers.
    pub consumed: usize,
    /// Bytes after `consumed` that belong to the rejected request (its data
    /// block and `\r\n`) and must be swallowed. Zero for most errors.
    pub discard_bytes: u64,
    /// The request asked for `noreply`, and memcached honours that even for
    /// errors of the text protocol, so no reply is written.
    pub noreply: bool,
    /// For a `set` or `ms` refused as too large: where its key lies in the
    /// parsed buffer (start, length). memcached removes the key's old value
    /// then, so a client never reads a stale value after a failed update;
    /// see [`ParseError::rejected_key`]. Not for `add`, `replace`, `append`,
    /// `prepend` or `cas`, whose refusal leaves the old value as it is.
    pub key_span: Option<(usize, usize)>,
    /// Whether the key at [`ParseError::key_span`] is base64 (`ms ... b`).
    pub key_base64: bool,
}

impl ParseError {
    /// An error covering `consumed` bytes, with nothing to swallow.
    pub(crate) const fn new(kind: ErrorKind, consumed: usize) -> Self {
        ParseError {
            kind,
            consumed,
            discard_bytes: 0,
            noreply: false,
            key_span: None,
            key_base64: false,
        }
    }

    /// The same error, naming the refused request's key: `len` bytes at
    /// `start`, base64 text if `base64` (already known to decode).
    pub(crate) const fn with_key_span(self, start: usize, len: usize, base64: bool) -> Self {
        ParseError {
            key_span: Some((start, len)),
            key_base64: base64,
            ..self
        }
    }

    /// The key whose old value a refusal as too large removes, read from
    /// the buffer that was parsed (before dropping [`ParseError::consumed`]).
    pub fn rejected_key<'a>(&self, buf: &'a [u8]) -> Option<KeyBytes<'a>> {
        let (start, len) = self.key_span?;
        let wire = buf.get(start..start.checked_add(len)?)?;
        Some(MetaKey::new(wire, self.key_base64).bytes())
    }

    /// The same error, answered only if `noreply` is false.
    pub(crate) const fn quiet_if(self, noreply: bool) -> Self {
        ParseError { noreply, ..self }
    }

    /// The same error, also swallowing `bytes` after `consumed`.
    pub(crate) const fn swallowing(self, bytes: u64) -> Self {
        ParseError {
            discard_bytes: bytes,
            ..self
        }
    }

    /// The bytes to write back, `\r\n` included; `None` when memcached would
    /// stay silent (a `noreply` request, or a connection being dropped).
    pub const fn reply(&self) -> Option<&'static [u8]> {
        if self.noreply {
            None
        } else {
            self.kind.reply()
        }
    }

    /// Whether the connection must be closed after the reply is written.
    pub const fn closes_connection(&self) -> bool {
        self.kind.closes_connection()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_the_reply_without_terminator() {
        for kind in [
            ErrorKind::UnknownCommand,
            ErrorKind::BadDataChunk,
            ErrorKind::DeleteUsage,
            ErrorKind::MetaGetFlagsTooLong,
        ] {
            let mut expected = kind.to_string().into_bytes();
            expected.extend_from_slice(b"\r\n");
            assert_eq!(kind.reply(), Some(expected.as_slice()));
        }
    }

    #[test]
    fn noreply_silences_the_reply_but_not_the_swallow() {
        let error = ParseError::new(ErrorKind::ObjectTooLarge, 20)
            .swallowing(7)
            .quiet_if(true);
        assert_eq!(error.reply(), None);
        assert_eq!(error.discard_bytes, 7);
        assert!(!error.closes_connection());
    }

    #[test]
    fn over_long_lines_close_the_connection() {
        assert!(ParseError::new(ErrorKind::LineTooLong, 0).closes_connection());
        assert_eq!(ParseError::new(ErrorKind::LineTooLong, 0).reply(), None);
        assert!(ErrorKind::MultigetLineTooLong.closes_connection());
        assert!(ErrorKind::MultigetLineTooLong.reply().is_some());
    }
}
