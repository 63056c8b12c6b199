//! `get`, `gets`, `gat`, `gats`: fetch (and optionally touch) many keys.
//!
//! Syntax: `get <key>*`, `gets <key>*`, `gat <exptime> <key>*`,
//! `gats <exptime> <key>*`. memcached needs at least one token after the
//! command name, so `gat 10` (an exptime and no key) is valid and answered
//! with a bare `END`. A key longer than 250 bytes anywhere in the list fails
//! the whole request with `CLIENT_ERROR bad command line format`. There is no
//! `noreply` for retrievals (memcached treats the word as a key).

use crate::error::{ErrorKind, ParseError};
use crate::limits::KEY_BYTES_MAX;
use crate::line::split_spaces;
use crate::number::parse_i32;
use crate::parse::{Command, Parsed};
use crate::request::Request;

/// Which retrieval command was sent; it decides the reply's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetrievalCommand {
    /// `get`: `VALUE <key> <flags> <bytes>` per hit.
    Get,
    /// `gets`: as `get`, plus the cas unique on each `VALUE` line.
    Gets,
    /// `gat`: as `get`, and each hit's exptime is replaced.
    Gat,
    /// `gats`: as `gets`, and each hit's exptime is replaced.
    Gats,
}

impl RetrievalCommand {
    /// Whether `VALUE` lines carry the cas unique.
    pub const fn returns_cas(self) -> bool {
        matches!(self, RetrievalCommand::Gets | RetrievalCommand::Gats)
    }
}

/// A retrieval request. Reply: for each key found, in request order, a
/// `VALUE` line and data block (see [`crate::reply::write_value_header`]),
/// then `END`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retrieval<'a> {
    /// The command sent.
    pub command: RetrievalCommand,
    /// For `gat`/`gats`: the new exptime for every hit (raw seconds from the
    /// wire, see [`crate::request`]). `None` for `get`/`gets`.
    pub exptime: Option<i32>,
    /// The keys, in request order, each at most 250 bytes. May be empty only
    /// for `gat`/`gats`. Duplicates are kept: memcached answers each.
    pub keys: Keys<'a>,
}

/// The key list of a retrieval, borrowed from the command line. Iterating
/// splits it on spaces; it allocates nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Keys<'a> {
    list: &'a [u8],
}

impl<'a> Keys<'a> {
    /// The keys, in request order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        split_spaces(self.list)
    }

    /// How many keys there are (counted by walking the list).
    pub fn count(&self) -> usize {
        self.iter().count()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

impl std::fmt::Debug for Keys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|key| key.escape_ascii().to_string()))
            .finish()
    }
}

/// Parses a line whose command name starts with `g` (or `bget`, passed as
/// `get`).
pub(crate) fn parse<'a>(cmd: &Command<'a, '_>, name: &[u8]) -> Result<Parsed<'a>, ParseError> {
    if cmd.words.ntokens() < 3 {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    let command = match name {
        b"get" => RetrievalCommand::Get,
        b"gets" => RetrievalCommand::Gets,
        b"gat" => RetrievalCommand::Gat,
        b"gats" => RetrievalCommand::Gats,
        _ => return Err(cmd.reject(ErrorKind::UnknownCommand)),
    };
    let (exptime, first_key) = match command {
        RetrievalCommand::Get | RetrievalCommand::Gets => (None, 1),
        RetrievalCommand::Gat | RetrievalCommand::Gats => {
            let Some(exptime) = parse_i32(cmd.word(1)) else {
                return Err(cmd.reject(ErrorKind::InvalidExptime));
            };
            (Some(exptime), 2)
        }
    };
    let keys = Keys {
        list: cmd.words.tail_from(first_key),
    };
    if keys.iter().any(|key| key.len() > KEY_BYTES_MAX) {
        return Err(cmd.reject(ErrorKind::BadCommandLineFormat));
    }
    cmd.complete(Request::Retrieval(Retrieval {
        command,
        exptime,
        keys,
    }))
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, Parsed, Request};

    use super::*;

    fn retrieval(input: &[u8]) -> (Retrieval<'_>, usize) {
        match parse(input, &Limits::DEFAULT) {
            Ok(Parsed::Complete {
                request: Request::Retrieval(retrieval),
                frame_bytes,
            }) => (retrieval, frame_bytes),
            other => panic!("expected a retrieval for {input:?}, got {other:?}"),
        }
    }

    fn keys<'a>(retrieval: &Retrieval<'a>) -> Vec<&'a [u8]> {
        retrieval.keys.iter().collect()
    }

    fn error_of(input: &[u8]) -> ErrorKind {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => error.kind,
            other => panic!("expected an error for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn get_takes_many_keys() {
        let (get, frame_bytes) = retrieval(b"get a bb  ccc\r\n");
        assert_eq!(get.command, RetrievalCommand::Get);
        assert_eq!(get.exptime, None);
        assert_eq!(keys(&get), vec![&b"a"[..], b"bb", b"ccc"]);
        assert_eq!(frame_bytes, 15);
    }

    #[test]
    fn gets_returns_cas() {
        let (gets, _) = retrieval(b"gets k\r\n");
        assert_eq!(gets.command, RetrievalCommand::Gets);
        assert!(gets.command.returns_cas());
        assert!(!RetrievalCommand::Get.returns_cas());
    }

    #[test]
    fn gat_and_gats_take_an_exptime_first() {
        let (gat, _) = retrieval(b"gat -1 a b\r\n");
        assert_eq!(gat.command, RetrievalCommand::Gat);
        assert_eq!(gat.exptime, Some(-1));
        assert_eq!(keys(&gat), vec![&b"a"[..], b"b"]);
        let (gats, _) = retrieval(b"gats 100 a\r\n");
        assert_eq!(gats.command, RetrievalCommand::Gats);
        assert!(gats.command.returns_cas());
    }

    #[test]
    fn gat_without_keys_is_valid_as_in_memcached() {
        let (gat, _) = retrieval(b"gat 10\r\n");
        assert!(gat.keys.is_empty());
    }

    #[test]
    fn get_without_keys_is_an_unknown_command() {
        assert_eq!(error_of(b"get\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"get \r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"gat\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(error_of(b"gimme a\r\n"), ErrorKind::UnknownCommand);
    }

    #[test]
    fn gat_with_a_bad_exptime_is_refused() {
        assert_eq!(error_of(b"gat abc a\r\n"), ErrorKind::InvalidExptime);
    }

    #[test]
    fn one_long_key_fails_the_whole_get() {
        let mut line = b"get a ".to_vec();
        line.extend_from_slice(&[b'k'; 251]);
        line.extend_from_slice(b"\r\n");
        assert_eq!(error_of(&line), ErrorKind::BadCommandLineFormat);
    }

    #[test]
    fn a_250_byte_key_is_accepted() {
        let mut line = b"get ".to_vec();
        line.extend_from_slice(&[b'k'; 250]);
        line.extend_from_slice(b"\r\n");
        let (get, _) = retrieval(&line);
        assert_eq!(get.keys.count(), 1);
    }

    #[test]
    fn more_keys_than_one_tokenizer_pass_are_all_kept() {
        let mut line = b"get".to_vec();
        for i in 0..100 {
            line.extend_from_slice(format!(" key{i}").as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        let (get, _) = retrieval(&line);
        assert_eq!(get.keys.count(), 100);
        assert_eq!(get.keys.iter().last(), Some(&b"key99"[..]));
    }

    #[test]
    fn bget_is_get() {
        let (get, _) = retrieval(b"bget a\r\n");
        assert_eq!(get.command, RetrievalCommand::Get);
        assert_eq!(error_of(b"bget\r\n"), ErrorKind::UnknownCommand);
    }

    #[test]
    fn noreply_is_just_a_key_for_get() {
        let (get, _) = retrieval(b"get a noreply\r\n");
        assert_eq!(keys(&get), vec![&b"a"[..], b"noreply"]);
    }
}
