//! `md <key> <flags>*`: meta delete (or invalidate).
//!
//! Same shape as `mg`, but memcached reports every flag problem as
//! `CLIENT_ERROR invalid or duplicate flag`, and more than 17 flags as
//! `CLIENT_ERROR options flags too long`.

use crate::error::{ErrorKind, ParseError};
use crate::limits::META_TOKENS_MAX;
use crate::parse::{Command, Parsed};
use crate::request::meta_flags::{opaque_fits, preparse, MetaFlags, MetaKey};
use crate::request::Request;

/// A meta delete. Reply: `HD` (deleted or invalidated; nothing if
/// [`MetaFlags::quiet`]), `NF` (not found) or `EX` (cas mismatch), followed
/// by the requested `O` and `k` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaDelete<'a> {
    /// The key.
    pub key: MetaKey<'a>,
    /// The flags; `md` acts on b C E I k O q T x.
    pub flags: MetaFlags<'a>,
}

/// Parses an `md` line.
pub(crate) fn parse<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    if cmd.words.ntokens() < 3 {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    cmd.key(1)?;
    if cmd.words.ntokens() > META_TOKENS_MAX {
        return Err(cmd.reject(ErrorKind::MetaFlagsTooLong));
    }
    let parsed =
        preparse(&cmd.words, 2).map_err(|_| cmd.reject(ErrorKind::InvalidOrDuplicateFlag))?;
    if !opaque_fits(&parsed.flags) {
        return Err(cmd.reject(ErrorKind::OpaqueTooLong));
    }
    cmd.complete(Request::MetaDelete(MetaDelete {
        key: parsed.key,
        flags: parsed.flags,
    }))
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, Parsed, Request};

    fn error_of(input: &[u8]) -> ErrorKind {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => error.kind,
            other => panic!("expected an error for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn md_parses_invalidation() {
        let parsed = parse(b"md a I T30 k O5 q\r\n", &Limits::DEFAULT);
        let Ok(Parsed::Complete {
            request: Request::MetaDelete(delete),
            frame_bytes: 19,
        }) = parsed
        else {
            panic!("expected md, got {parsed:?}");
        };
        assert_eq!(delete.key.wire(), b"a");
        assert!(delete.flags.invalidate && delete.flags.quiet && delete.flags.return_key);
        assert_eq!(delete.flags.ttl, Some(30));
    }

    #[test]
    fn md_errors_match_memcached() {
        assert_eq!(error_of(b"md\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"md a zz\r\n"), ErrorKind::InvalidOrDuplicateFlag);
        assert_eq!(
            error_of(b"md a Cabc\r\n"),
            ErrorKind::InvalidOrDuplicateFlag
        );
        assert_eq!(error_of(b"md a q q\r\n"), ErrorKind::InvalidOrDuplicateFlag);
        assert_eq!(
            error_of(b"md a k c f s t h l O1 T1 R1 N1 P L D1 J1 u v F1\r\n"),
            ErrorKind::MetaFlagsTooLong
        );
    }
}
