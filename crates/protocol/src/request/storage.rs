//! `set`, `add`, `replace`, `append`, `prepend`, `cas`: a line, then data.
//!
//! Syntax: `<cmd> <key> <flags> <exptime> <bytes> [noreply]\r\n` or
//! `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]\r\n`, followed
//! by `<bytes>` bytes of data and `\r\n`. Checks run in memcached's order:
//! token count (`ERROR`), key length, the numbers, the size limit, and only
//! then the data block. A too-large value is refused as soon as the line is
//! in, and the caller swallows its data as it arrives. Like memcached, a
//! final `noreply` token silences the error replies too, and any other sixth
//! (seventh for `cas`) token is ignored.

use crate::error::{ErrorKind, ParseError};
use crate::number::{parse_i32, parse_u32, parse_u64};
use crate::parse::{Command, DataBlock, Parsed};
use crate::request::Request;

/// Which storage command was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreCommand {
    /// Store unconditionally.
    Set,
    /// Store only if the key is absent (`NOT_STORED` otherwise).
    Add,
    /// Store only if the key is present (`NOT_STORED` otherwise).
    Replace,
    /// Append the data to an existing value; flags and exptime are ignored.
    Append,
    /// Prepend the data to an existing value; flags and exptime are ignored.
    Prepend,
    /// Store only if the item's cas unique equals [`Store::cas_unique`]
    /// (`EXISTS` if it differs, `NOT_FOUND` if the key is absent).
    Cas,
}

/// A storage request. Reply: `STORED`, `NOT_STORED`, `EXISTS` or
/// `NOT_FOUND`; nothing at all when `noreply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store<'a> {
    /// The command sent.
    pub command: StoreCommand,
    /// The key, at most 250 bytes.
    pub key: &'a [u8],
    /// Opaque client flags stored with the value (32 bits; memcached
    /// truncates larger numbers to their low 32 bits, and so do we).
    pub flags: u32,
    /// Raw exptime in seconds (see [`crate::request`]).
    pub exptime: i32,
    /// The data block, borrowed from the input buffer, at most
    /// [`crate::Limits::item_bytes_max`] bytes.
    pub value: &'a [u8],
    /// The cas unique to compare against: `Some` exactly for
    /// [`StoreCommand::Cas`].
    pub cas_unique: Option<u64>,
    /// The line ended with `noreply`: send no reply.
    pub noreply: bool,
}

/// Parses a storage command line and, once buffered, its data block.
pub(crate) fn parse<'a>(cmd: &Command<'a, '_>, name: &[u8]) -> Result<Parsed<'a>, ParseError> {
    let command = match name {
        b"set" => StoreCommand::Set,
        b"add" => StoreCommand::Add,
        b"replace" => StoreCommand::Replace,
        b"append" => StoreCommand::Append,
        b"prepend" => StoreCommand::Prepend,
        _ => StoreCommand::Cas,
    };
    let is_cas = command == StoreCommand::Cas;
    let arguments = if is_cas { 6 } else { 5 };
    let ntokens = cmd.words.ntokens();
    if ntokens != arguments + 1 && ntokens != arguments + 2 {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    let noreply = cmd.words.ends_with_noreply();
    let bad_format = || {
        cmd.reject(ErrorKind::BadCommandLineFormat)
            .quiet_if(noreply)
    };
    let key = cmd.key(1).map_err(|error| error.quiet_if(noreply))?;
    let (Some(flags), Some(exptime), Some(_)) = (
        parse_u32(cmd.word(2)),
        parse_i32(cmd.word(3)),
        parse_i32(cmd.word(4)),
    ) else {
        return Err(bad_format());
    };
    let cas_unique = if is_cas {
        Some(parse_u64(cmd.word(5)).ok_or_else(bad_format)?)
    } else {
        None
    };
    let value_bytes = cmd.value_bytes(cmd.word(4)).ok_or_else(bad_format)?;
    if value_bytes > cmd.limits.item_bytes_max() {
        let swallow = u64::try_from(value_bytes)
            .unwrap_or(u64::MAX)
            .saturating_add(2);
        let refused = cmd
            .reject(ErrorKind::ObjectTooLarge)
            .swallowing(swallow)
            .quiet_if(noreply);
        // memcached removes the old value after a refused `set` only: the
        // other commands promise to leave it unless they succeed.
        if command != StoreCommand::Set {
            return Err(refused);
        }
        let key = cmd.word(1);
        return Err(refused.with_key_span(cmd.offset_of(key), key.len(), false));
    }
    match cmd.data_block(value_bytes) {
        DataBlock::Incomplete { frame_bytes } => Ok(Parsed::Incomplete {
            frame_bytes: Some(frame_bytes),
        }),
        DataBlock::BadChunk { frame_bytes } => {
            Err(ParseError::new(ErrorKind::BadDataChunk, frame_bytes).quiet_if(noreply))
        }
        DataBlock::Ready { value, frame_bytes } => Ok(Parsed::Complete {
            request: Request::Store(Store {
                command,
                key,
                flags,
                exptime,
                value,
                cas_unique,
                noreply,
            }),
            frame_bytes,
        }),
    }
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, ParseError, Parsed, Request};

    use super::*;

    fn store(input: &[u8]) -> (Store<'_>, usize) {
        match parse(input, &Limits::DEFAULT) {
            Ok(Parsed::Complete {
                request: Request::Store(store),
                frame_bytes,
            }) => (store, frame_bytes),
            other => panic!("expected a store for {input:?}, got {other:?}"),
        }
    }

    fn error(input: &[u8]) -> ParseError {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => error,
            other => panic!("expected an error for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn set_borrows_its_value_from_the_buffer() {
        let input = b"set k 5 100 3\r\nabc\r\nget k\r\n";
        let (set, frame_bytes) = store(input);
        assert_eq!(set.command, StoreCommand::Set);
        assert_eq!(set.key, b"k");
        assert_eq!(set.flags, 5);
        assert_eq!(set.exptime, 100);
        assert_eq!(set.value, b"abc");
        assert!(std::ptr::eq(
            set.value.as_ptr(),
            input.as_ptr().wrapping_add(15)
        ));
        assert_eq!(set.cas_unique, None);
        assert!(!set.noreply);
        assert_eq!(frame_bytes, 20);
    }

    #[test]
    fn every_storage_command_is_recognised() {
        for (name, command) in [
            ("add", StoreCommand::Add),
            ("replace", StoreCommand::Replace),
            ("append", StoreCommand::Append),
            ("prepend", StoreCommand::Prepend),
        ] {
            let input = format!("{name} k 0 0 1 noreply\r\nx\r\n");
            let (request, _) = store(input.as_bytes());
            assert_eq!(request.command, command);
            assert!(request.noreply);
        }
    }

    #[test]
    fn cas_carries_its_unique() {
        let (cas, _) = store(b"cas k 0 0 1 18446744073709551615\r\nx\r\n");
        assert_eq!(cas.command, StoreCommand::Cas);
        assert_eq!(cas.cas_unique, Some(u64::MAX));
    }

    #[test]
    fn data_may_contain_crlf_and_be_empty() {
        let (set, _) = store(b"set k 0 0 4\r\n\r\n\r\n\r\n");
        assert_eq!(set.value, b"\r\n\r\n");
        let (empty, frame_bytes) = store(b"set k 0 0 0\r\n\r\n");
        assert_eq!(empty.value, b"");
        assert_eq!(frame_bytes, 15);
    }

    #[test]
    fn the_frame_length_is_known_once_the_line_is_in() {
        assert_eq!(
            parse(b"set k 0 0 10\r\nabc", &Limits::DEFAULT),
            Ok(Parsed::Incomplete {
                frame_bytes: Some(26)
            })
        );
        assert_eq!(
            parse(b"set k 0 0 10", &Limits::DEFAULT),
            Ok(Parsed::Incomplete { frame_bytes: None })
        );
    }

    #[test]
    fn a_data_block_without_crlf_is_a_bad_data_chunk() {
        let refused = error(b"set a 0 0 1\r\nabc\r\n");
        assert_eq!(refused.kind, ErrorKind::BadDataChunk);
        assert_eq!(refused.consumed, 16);
        assert_eq!(refused.discard_bytes, 0);
        assert_eq!(error(b"set a 0 0 1\r\nx\nv").kind, ErrorKind::BadDataChunk);
    }

    #[test]
    fn a_bad_data_chunk_is_silent_with_noreply() {
        let refused = error(b"set a 0 0 1 noreply\r\nabc\r\n");
        assert_eq!(refused.kind, ErrorKind::BadDataChunk);
        assert_eq!(refused.reply(), None);
    }

    #[test]
    fn only_a_refused_set_names_its_key_for_removal() {
        for command in ["add", "replace", "append", "prepend"] {
            let buf = format!("{command} a 0 0 2000000\r\n");
            let refused = error(buf.as_bytes());
            assert_eq!(refused.kind, ErrorKind::ObjectTooLarge, "{command}");
            assert!(refused.rejected_key(buf.as_bytes()).is_none(), "{command}");
        }
        let buf = b"cas a 0 0 2000000 7\r\n";
        assert!(error(buf).rejected_key(buf).is_none());
    }

    #[test]
    fn a_too_large_value_is_refused_before_it_arrives() {
        let buf = b"set a 0 0 2000000\r\n";
        let refused = error(buf);
        assert_eq!(refused.kind, ErrorKind::ObjectTooLarge);
        assert_eq!(refused.rejected_key(buf).as_deref(), Some(&b"a"[..]));
        assert_eq!(refused.consumed, 19);
        assert_eq!(refused.discard_bytes, 2_000_002);
        assert_eq!(
            refused.reply(),
            Some(&b"SERVER_ERROR object too large for cache\r\n"[..])
        );
    }

    #[test]
    fn the_item_limit_is_inclusive_and_configurable() {
        let limits = Limits::DEFAULT
            .with_item_bytes_max(1024)
            .unwrap_or_default();
        let mut at_limit = b"set a 0 0 1024\r\n".to_vec();
        at_limit.extend_from_slice(&[b'v'; 1024]);
        at_limit.extend_from_slice(b"\r\n");
        assert!(matches!(
            parse(&at_limit, &limits),
            Ok(Parsed::Complete { .. })
        ));
        let over = parse(b"set a 0 0 1025\r\n", &limits);
        assert!(
            matches!(over, Err(e) if e.kind == ErrorKind::ObjectTooLarge && e.discard_bytes == 1027)
        );
    }

    #[test]
    fn wrong_token_counts_are_unknown_commands() {
        assert_eq!(error(b"set a 0 0\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(
            error(b"set a 0 0 1 noreply extra\r\n").kind,
            ErrorKind::UnknownCommand
        );
        assert_eq!(error(b"cas a 0 0 1\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(error(b"set\ta 0 0 1\r\n").kind, ErrorKind::UnknownCommand);
    }

    #[test]
    fn an_extra_token_that_is_not_noreply_is_ignored() {
        let (set, _) = store(b"set a 0 0 1 foo\r\nx\r\n");
        assert!(!set.noreply);
    }

    #[test]
    fn bad_numbers_and_long_keys_are_bad_format_without_swallowing() {
        for input in [
            &b"set a 0 0 -1\r\n"[..],
            b"set a 0 0 abc\r\n",
            b"set a -1 0 1\r\n",
            b"set a 0 0 2147483648\r\n",
            b"set a 0 0 2147483646\r\n",
            b"cas a 0 0 1 abc\r\n",
            b"cas a 0 0 1 -1\r\n",
            b"cas a 0 0 1 18446744073709551616\r\n",
        ] {
            let refused = error(input);
            assert_eq!(refused.kind, ErrorKind::BadCommandLineFormat, "{input:?}");
            assert_eq!(refused.discard_bytes, 0);
            assert_eq!(refused.consumed, input.len());
        }
        let mut long_key = b"set ".to_vec();
        long_key.extend_from_slice(&[b'k'; 251]);
        long_key.extend_from_slice(b" 0 0 1\r\n");
        assert_eq!(error(&long_key).kind, ErrorKind::BadCommandLineFormat);
    }

    #[test]
    fn noreply_silences_format_errors() {
        let refused = error(b"set a 0 0 abc noreply\r\n");
        assert_eq!(refused.kind, ErrorKind::BadCommandLineFormat);
        assert_eq!(refused.reply(), None);
    }

    #[test]
    fn numbers_follow_memcached_quirks() {
        let (set, _) = store(b"set a 4294967296 4294967301 +1\r\nx\r\n");
        assert_eq!(set.flags, 0);
        assert_eq!(set.exptime, 5);
        let (truncated, _) = store(b"set a 0 0 4294967297\r\nx\r\n");
        assert_eq!(truncated.value, b"x");
        let (tabbed, _) = store(b"set a 0\t 0 \t1\r\r\nx\r\n");
        assert_eq!(tabbed.value, b"x");
    }
}
