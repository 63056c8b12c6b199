//! `me <key> [b]`: meta debug, a human-readable dump of one item.
//!
//! Only the token right after the key is looked at, and only to see whether
//! it is exactly `b`; a key that fails to decode is
//! `CLIENT_ERROR bad command line format` here (not "error decoding key").

use crate::base64::decode_key;
use crate::error::{ErrorKind, ParseError};
use crate::parse::{Command, Parsed};
use crate::request::meta_flags::MetaKey;
use crate::request::Request;

/// A meta debug request. Reply: `ME <key> <name>=<value>*`
/// ([`crate::reply::meta::MetaDebugLine`]) or `EN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaDebug<'a> {
    /// The key.
    pub key: MetaKey<'a>,
}

/// Parses an `me` line.
pub(crate) fn parse<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    if cmd.words.ntokens() < 3 {
        return Err(cmd.reject(ErrorKind::BadCommandLineFormat));
    }
    let wire = cmd.key(1)?;
    let base64 = cmd.words.get(2) == Some(b"b");
    if base64 && decode_key(wire).is_none() {
        return Err(cmd.reject(ErrorKind::BadCommandLineFormat));
    }
    cmd.complete(Request::MetaDebug(MetaDebug {
        key: MetaKey::new(wire, base64),
    }))
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, Parsed, Request};

    fn parsed(input: &[u8]) -> Result<Parsed<'_>, ErrorKind> {
        parse(input, &Limits::DEFAULT).map_err(|error| error.kind)
    }

    #[test]
    fn me_parses_plain_and_base64_keys() {
        let Ok(Parsed::Complete {
            request: Request::MetaDebug(plain),
            ..
        }) = parsed(b"me foo\r\n")
        else {
            panic!("expected me");
        };
        assert!(!plain.key.is_base64());
        let Ok(Parsed::Complete {
            request: Request::MetaDebug(binary),
            ..
        }) = parsed(b"me Zm9v b\r\n")
        else {
            panic!("expected me");
        };
        assert_eq!(binary.key.bytes().to_vec(), b"foo".to_vec());
    }

    #[test]
    fn me_errors_match_memcached() {
        assert_eq!(parsed(b"me\r\n"), Err(ErrorKind::BadCommandLineFormat));
        assert_eq!(parsed(b"me YQ b\r\n"), Err(ErrorKind::BadCommandLineFormat));
        let mut long_key = b"me ".to_vec();
        long_key.extend_from_slice(&[b'k'; 251]);
        long_key.extend_from_slice(b"\r\n");
        assert_eq!(parsed(&long_key), Err(ErrorKind::BadCommandLineFormat));
    }
}
