//! `ms <key> <datalen> <flags>*`: meta set, then the data block.
//!
//! Checks run in memcached's order. Without swallowing the data: at least a
//! key (`ERROR`), key length, a data length token, at most 16 flags, a valid
//! data length (all `CLIENT_ERROR bad command line format` or
//! `... options flags too long`). Then, swallowing the data block: the flags,
//! the mode, the opaque length, the size limit. Last, the data block must end
//! in `\r\n`. Meta errors are always answered, even with `q`. There is no
//! `S` flag: memcached 1.6 takes the data length as a token (`S` is
//! `CLIENT_ERROR invalid flag`).

use crate::error::{ErrorKind, ParseError};
use crate::limits::META_TOKENS_MAX;
use crate::parse::{Command, DataBlock, Parsed};
use crate::request::meta_flags::{opaque_fits, preparse, MetaFlags, MetaKey};
use crate::request::Request;

/// How `ms` stores, from its `M` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaSetMode {
    /// `MS` or no `M`: store unconditionally (a cas compare if `C` is given).
    Set,
    /// `ME`: store only if absent ("add").
    Add,
    /// `MA`: append to an existing value.
    Append,
    /// `MP`: prepend to an existing value.
    Prepend,
    /// `MR`: store only if present ("replace").
    Replace,
}

/// A meta set. Reply: `HD` (stored; nothing if [`MetaFlags::quiet`]), `NS`
/// (not stored), `EX` (cas mismatch) or `NF` (not found), followed by the
/// requested `O`, `k`, `c` flags in request order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaSet<'a> {
    /// The key.
    pub key: MetaKey<'a>,
    /// The storage mode.
    pub mode: MetaSetMode,
    /// The data block, borrowed from the input buffer.
    pub value: &'a [u8],
    /// The flags; `ms` acts on b c C E F I k O q T (and M, read into
    /// [`Self::mode`]).
    pub flags: MetaFlags<'a>,
}

/// Parses an `ms` line and, once buffered, its data block.
pub(crate) fn parse<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    let ntokens = cmd.words.ntokens();
    if ntokens < 3 {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    cmd.key(1)?;
    if ntokens == 3 {
        return Err(cmd.reject(ErrorKind::BadCommandLineFormat));
    }
    if ntokens > META_TOKENS_MAX {
        return Err(cmd.reject(ErrorKind::MetaFlagsTooLong));
    }
    let Some(value_bytes) = cmd.value_bytes(cmd.word(2)) else {
        return Err(cmd.reject(ErrorKind::BadCommandLineFormat));
    };
    let swallow = |kind| {
        let discard = u64::try_from(value_bytes)
            .unwrap_or(u64::MAX)
            .saturating_add(2);
        cmd.reject(kind).swallowing(discard)
    };
    let parsed = preparse(&cmd.words, 3).map_err(swallow)?;
    let mode = match parsed.flags.mode {
        None | Some(b'S') => MetaSetMode::Set,
        Some(b'E') => MetaSetMode::Add,
        Some(b'A') => MetaSetMode::Append,
        Some(b'P') => MetaSetMode::Prepend,
        Some(b'R') => MetaSetMode::Replace,
        Some(_) => return Err(swallow(ErrorKind::InvalidSetMode)),
    };
    if !opaque_fits(&parsed.flags) {
        return Err(swallow(ErrorKind::OpaqueTooLong));
    }
    if value_bytes > cmd.limits.item_bytes_max() {
        // memcached removes the old value after a refused `ms` in any mode.
        let key = parsed.key.wire();
        return Err(swallow(ErrorKind::ObjectTooLarge).with_key_span(
            cmd.offset_of(key),
            key.len(),
            parsed.key.is_base64(),
        ));
    }
    match cmd.data_block(value_bytes) {
        DataBlock::Incomplete { frame_bytes } => Ok(Parsed::Incomplete {
            frame_bytes: Some(frame_bytes),
        }),
        DataBlock::BadChunk { frame_bytes } => {
            Err(ParseError::new(ErrorKind::BadDataChunk, frame_bytes))
        }
        DataBlock::Ready { value, frame_bytes } => Ok(Parsed::Complete {
            request: Request::MetaSet(MetaSet {
                key: parsed.key,
                mode,
                value,
                flags: parsed.flags,
            }),
            frame_bytes,
        }),
    }
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, ParseError, Parsed, Request};

    use super::*;

    fn meta_set(input: &[u8]) -> (MetaSet<'_>, usize) {
        match parse(input, &Limits::DEFAULT) {
            Ok(Parsed::Complete {
                request: Request::MetaSet(set),
                frame_bytes,
            }) => (set, frame_bytes),
            other => panic!("expected ms for {input:?}, got {other:?}"),
        }
    }

    fn error(input: &[u8]) -> ParseError {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => error,
            other => panic!("expected an error for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn ms_parses_value_and_flags() {
        let (set, frame_bytes) = meta_set(b"ms a 2 T0 F5 c k O9\r\nhi\r\n");
        assert_eq!(set.key.wire(), b"a");
        assert_eq!(set.value, b"hi");
        assert_eq!(set.mode, MetaSetMode::Set);
        assert_eq!(set.flags.client_flags, Some(5));
        assert_eq!(set.flags.requested().collect::<Vec<_>>(), b"TFckO".to_vec());
        assert_eq!(frame_bytes, 25);
    }

    #[test]
    fn ms_modes() {
        for (flag, mode) in [
            ("MS", MetaSetMode::Set),
            ("ME", MetaSetMode::Add),
            ("MA", MetaSetMode::Append),
            ("MP", MetaSetMode::Prepend),
            ("MR", MetaSetMode::Replace),
        ] {
            let input = format!("ms a 1 {flag}\r\nx\r\n");
            assert_eq!(meta_set(input.as_bytes()).0.mode, mode);
        }
    }

    #[test]
    fn line_errors_do_not_swallow_the_data() {
        for (input, kind) in [
            (&b"ms\r\n"[..], ErrorKind::UnknownCommand),
            (b"ms a\r\n", ErrorKind::BadCommandLineFormat),
            (b"ms a abc\r\n", ErrorKind::BadCommandLineFormat),
            (b"ms a -1\r\n", ErrorKind::BadCommandLineFormat),
            (b"ms a S1\r\n", ErrorKind::BadCommandLineFormat),
            (
                b"ms zz 1 k c f s t h l O1 T1 R1 N1 P L D1 J1 u v\r\n",
                ErrorKind::MetaFlagsTooLong,
            ),
        ] {
            let refused = error(input);
            assert_eq!(refused.kind, kind, "{input:?}");
            assert_eq!(refused.discard_bytes, 0, "{input:?}");
        }
    }

    #[test]
    fn flag_errors_swallow_the_data() {
        for (input, kind) in [
            (&b"ms a 1 Mx\r\n"[..], ErrorKind::InvalidSetMode),
            (b"ms a 1 Me\r\n", ErrorKind::InvalidSetMode),
            (b"ms a 1 MEE\r\n", ErrorKind::ModeTokenLength),
            (b"ms a 1 T1 T1\r\n", ErrorKind::DuplicateFlag),
            (b"ms a 1 zz\r\n", ErrorKind::InvalidFlag),
            (b"ms a 1 S1\r\n", ErrorKind::InvalidFlag),
            (b"ms a 1 Fabc\r\n", ErrorKind::BadCommandLineFormat),
            (b"ms a 1 F-1\r\n", ErrorKind::BadCommandLineFormat),
            (b"ms a 1 Cabc\r\n", ErrorKind::BadToken),
            (b"ms a 1 b\r\n", ErrorKind::KeyDecoding),
            (
                b"ms a 1 O999999999999999999999999999999999\r\n",
                ErrorKind::OpaqueTooLong,
            ),
        ] {
            let refused = error(input);
            assert_eq!(refused.kind, kind, "{input:?}");
            assert_eq!(refused.consumed, input.len(), "{input:?}");
            assert_eq!(refused.discard_bytes, 3, "{input:?}");
        }
    }

    #[test]
    fn a_refused_ms_names_its_key_for_removal_in_every_mode() {
        for mode in ["", " MS", " ME", " MA", " MP", " MR"] {
            let buf = format!("ms key 2000000{mode}\r\n");
            let refused = error(buf.as_bytes());
            assert_eq!(refused.kind, ErrorKind::ObjectTooLarge, "{mode}");
            assert_eq!(
                refused.rejected_key(buf.as_bytes()).as_deref(),
                Some(&b"key"[..]),
                "{mode}"
            );
        }
        // A base64 key is named decoded: "a2V5" is "key".
        let buf = b"ms a2V5 2000000 b\r\n";
        assert_eq!(error(buf).rejected_key(buf).as_deref(), Some(&b"key"[..]));
    }

    #[test]
    fn a_too_large_value_is_refused_even_in_quiet_mode() {
        let refused = error(b"ms a 2000000 q\r\n");
        assert_eq!(refused.kind, ErrorKind::ObjectTooLarge);
        assert_eq!(refused.discard_bytes, 2_000_002);
        assert!(refused.reply().is_some());
    }

    #[test]
    fn a_bad_data_chunk_is_answered_even_in_quiet_mode() {
        let refused = error(b"ms a 1 q\r\nabc\r\n");
        assert_eq!(refused.kind, ErrorKind::BadDataChunk);
        assert_eq!(refused.consumed, 13);
        assert!(refused.reply().is_some());
    }

    #[test]
    fn sixteen_flags_are_accepted() {
        let (set, _) = meta_set(b"ms zz 1 k c f s t h l O1 T1 R1 N1 P L D1 J1 u\r\nx\r\n");
        assert_eq!(set.flags.requested().count(), 16);
    }
}
