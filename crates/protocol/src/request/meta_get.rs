//! `mg <key> <flags>*`: meta get, the flexible retrieval.
//!
//! Checks run in memcached's order: at least a key (`ERROR`), key length,
//! at most 17 flags (`CLIENT_ERROR options flags are too long`), the flags
//! themselves, then the opaque length. (memcached checks the opaque only
//! while writing the reply, after a `T` or `N` took effect; Larder refuses
//! the request before anything happens.)

use crate::error::{ErrorKind, ParseError};
use crate::limits::META_TOKENS_MAX;
use crate::parse::{Command, Parsed};
use crate::request::meta_flags::{opaque_fits, preparse, MetaFlags, MetaKey};
use crate::request::Request;

/// A meta get. Reply on a hit: `VA <size> <flags>*` and the data block if
/// [`MetaFlags::return_value`], else `HD <flags>*`; on a miss `EN` (nothing
/// if [`MetaFlags::quiet`]), with only the `O` and `k` flags. Return flags
/// follow [`MetaFlags::requested`], then `W`, `X`, `Z` as they apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaGet<'a> {
    /// The key.
    pub key: MetaKey<'a>,
    /// The flags; `mg` acts on b c f h k l O q s t u v E N R T.
    pub flags: MetaFlags<'a>,
}

/// Parses an `mg` line.
pub(crate) fn parse<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    if cmd.words.ntokens() < 3 {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    cmd.key(1)?;
    if cmd.words.ntokens() > META_TOKENS_MAX {
        return Err(cmd.reject(ErrorKind::MetaGetFlagsTooLong));
    }
    let parsed = preparse(&cmd.words, 2).map_err(|kind| cmd.reject(kind))?;
    if !opaque_fits(&parsed.flags) {
        return Err(cmd.reject(ErrorKind::OpaqueTooLong));
    }
    cmd.complete(Request::MetaGet(MetaGet {
        key: parsed.key,
        flags: parsed.flags,
    }))
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, Parsed, Request};

    use super::*;

    fn meta_get(input: &[u8]) -> MetaGet<'_> {
        match parse(input, &Limits::DEFAULT) {
            Ok(Parsed::Complete {
                request: Request::MetaGet(get),
                ..
            }) => get,
            other => panic!("expected mg for {input:?}, got {other:?}"),
        }
    }

    fn error_of(input: &[u8]) -> ErrorKind {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => error.kind,
            other => panic!("expected an error for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn mg_with_and_without_flags() {
        let bare = meta_get(b"mg foo\r\n");
        assert_eq!(bare.key.wire(), b"foo");
        assert_eq!(bare.flags.requested().count(), 0);
        let full = meta_get(b"mg foo v k c f s t h l O123 q u T10 N20 R5\r\n");
        assert!(full.flags.return_value && full.flags.quiet);
        assert_eq!(full.flags.opaque, Some(&b"O123"[..]));
        assert_eq!(full.flags.vivify_ttl, Some(20));
    }

    #[test]
    fn mg_accepts_flags_of_other_meta_commands() {
        let get = meta_get(b"mg a D5 J5 F1 C1 I P L Mz\r\n");
        assert_eq!(get.flags.mode, Some(b'z'));
    }

    #[test]
    fn mg_takes_at_most_seventeen_flags() {
        let seventeen = b"mg a v k c f s t h l q u O1 T1 R1 N1 P L I\r\n";
        assert_eq!(meta_get(seventeen).flags.requested().count(), 17);
        let eighteen = b"mg a v k c f s t h l q u O1 T1 R1 N1 P L I D1\r\n";
        assert_eq!(error_of(eighteen), ErrorKind::MetaGetFlagsTooLong);
    }

    #[test]
    fn mg_errors_match_memcached() {
        assert_eq!(error_of(b"mg\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"mg a v v\r\n"), ErrorKind::DuplicateFlag);
        assert_eq!(error_of(b"mg a zz\r\n"), ErrorKind::InvalidFlag);
        assert_eq!(error_of(b"mg a Tabc\r\n"), ErrorKind::BadToken);
        let mut long_key = b"mg ".to_vec();
        long_key.extend_from_slice(&[b'k'; 251]);
        long_key.extend_from_slice(b" v\r\n");
        assert_eq!(error_of(&long_key), ErrorKind::BadCommandLineFormat);
        let mut opaque = b"mg a O".to_vec();
        opaque.extend_from_slice(&[b'9'; 32]);
        opaque.extend_from_slice(b"\r\n");
        assert_eq!(error_of(&opaque), ErrorKind::OpaqueTooLong);
        opaque.truncate(opaque.len() - 2);
        opaque.extend_from_slice(b" zz\r\n");
        assert_eq!(error_of(&opaque), ErrorKind::InvalidFlag);
    }

    #[test]
    fn meta_errors_are_sent_even_in_quiet_mode() {
        let error = parse(b"mg a q zz\r\n", &Limits::DEFAULT);
        assert!(matches!(error, Err(e) if e.reply().is_some()));
    }
}
