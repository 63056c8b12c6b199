//! Connection and server housekeeping: `flush_all`, `stats`, `verbosity`.
//!
//! (`version` and `quit` carry no arguments worth parsing and are recognised
//! directly by the dispatcher.) Which `stats` groups exist, and whether
//! `flush_all` is allowed, are the server's decisions.

use crate::error::{ErrorKind, ParseError};
use crate::line::split_spaces;
use crate::number::{parse_i32, parse_u32, parse_u64};
use crate::parse::{Command, Parsed};
use crate::request::Request;

/// `flush_all [delay] [noreply]`. Reply: `OK`; nothing when `noreply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushAll {
    /// Seconds from now (or an absolute Unix time, as for exptimes) after
    /// which every item present now is invalid. `None` or a value `<= 0`
    /// means now.
    pub delay: Option<i32>,
    /// The line ended with `noreply`: send no reply.
    pub noreply: bool,
}

/// `stats [args...]`. Reply: `STAT <name> <value>` lines and `END`
/// ([`crate::reply::write_stat`]), `RESET` for `stats reset`, or `ERROR` for
/// a group the server does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats<'a> {
    args: &'a [u8],
}

impl<'a> Stats<'a> {
    /// The arguments after `stats`, in order (empty for plain `stats`).
    pub fn args(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        split_spaces(self.args)
    }

    /// The first argument, which names the group (`settings`, `items`,
    /// `slabs`, `reset`, ...); `None` for general-purpose statistics.
    pub fn group(&self) -> Option<&'a [u8]> {
        self.args().next()
    }
}

/// `verbosity <level> [noreply]`. Reply: `OK`; nothing when `noreply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verbosity {
    /// The requested level (memcached clamps it to its maximum).
    pub level: u32,
    /// The line ended with `noreply`: send no reply.
    pub noreply: bool,
}

/// Parses `flush_all`: the first argument is the delay unless it is the
/// final `noreply`, and a third token is ignored, as in memcached.
pub(crate) fn parse_flush_all<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    let ntokens = cmd.words.ntokens();
    if !(2..=4).contains(&ntokens) {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    let noreply = cmd.words.ends_with_noreply();
    let bare_ntokens = if noreply { 3 } else { 2 };
    let delay = if ntokens == bare_ntokens {
        None
    } else {
        let Some(delay) = parse_i32(cmd.word(1)) else {
            return Err(cmd.reject(ErrorKind::InvalidExptime).quiet_if(noreply));
        };
        Some(delay)
    };
    cmd.complete(Request::FlushAll(FlushAll { delay, noreply }))
}

/// Parses `stats`, keeping its arguments for the server.
pub(crate) fn parse_stats<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    cmd.complete(Request::Stats(Stats {
        args: cmd.words.tail_from(1),
    }))
}

/// Parses `verbosity`.
pub(crate) fn parse_verbosity<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    let ntokens = cmd.words.ntokens();
    if ntokens != 3 && ntokens != 4 {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    let noreply = cmd.words.ends_with_noreply();
    let Some(level) = parse_u32(cmd.word(1)) else {
        return Err(cmd
            .reject(ErrorKind::BadCommandLineFormat)
            .quiet_if(noreply));
    };
    cmd.complete(Request::Verbosity(Verbosity { level, noreply }))
}

/// `cache_memlimit <megabytes> [noreply]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheMemlimit {
    /// The new limit, in MiB (memcached reads the number as an unsigned
    /// 32-bit one, so a larger one wraps).
    pub megabytes: u32,
    /// The line ended with `noreply`.
    pub noreply: bool,
}

/// `cache_memlimit <megabytes> [noreply]`, as memcached reads it: a number
/// that is not an unsigned one is an unknown command (silent with
/// `noreply`); tokens past it are ignored, but for a last `noreply`.
pub(crate) fn parse_cache_memlimit<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    let ntokens = cmd.words.ntokens();
    if ntokens != 3 && ntokens != 4 {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    let noreply = cmd.words.ends_with_noreply();
    // memcached's strtoul takes the number modulo 2^32 on a 64-bit build.
    let Some(megabytes) = parse_u64(cmd.word(1)) else {
        return Err(cmd.reject(ErrorKind::UnknownCommand).quiet_if(noreply));
    };
    let megabytes = megabytes as u32;
    cmd.complete(Request::CacheMemlimit(CacheMemlimit { megabytes, noreply }))
}

/// `lru_crawler metadump <all|hash|1>`; any other `lru_crawler` line is an
/// unknown command.
pub(crate) fn parse_lru_crawler<'a>(cmd: &Command<'a, '_>) -> Result<Parsed<'a>, ParseError> {
    let dump = cmd.words.ntokens() == 4
        && cmd.word(1) == b"metadump"
        && matches!(cmd.word(2), b"all" | b"hash" | b"1");
    if !dump {
        return Err(cmd.reject(ErrorKind::UnknownCommand));
    }
    cmd.complete(Request::MetaDump)
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, Parsed, Request};

    use super::*;

    fn request(input: &[u8]) -> Request<'_> {
        match parse(input, &Limits::DEFAULT) {
            Ok(Parsed::Complete { request, .. }) => request,
            other => panic!("expected a request for {input:?}, got {other:?}"),
        }
    }

    fn error_of(input: &[u8]) -> (ErrorKind, bool) {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => (error.kind, error.reply().is_some()),
            other => panic!("expected an error for {input:?}, got {other:?}"),
        }
    }

    fn flush(delay: Option<i32>, noreply: bool) -> Request<'static> {
        Request::FlushAll(FlushAll { delay, noreply })
    }

    #[test]
    fn flush_all_forms() {
        assert_eq!(request(b"flush_all\r\n"), flush(None, false));
        assert_eq!(request(b"flush_all 10\r\n"), flush(Some(10), false));
        assert_eq!(request(b"flush_all noreply\r\n"), flush(None, true));
        assert_eq!(request(b"flush_all 10 noreply\r\n"), flush(Some(10), true));
        assert_eq!(request(b"flush_all -1\r\n"), flush(Some(-1), false));
        assert_eq!(request(b"flush_all 0 0\r\n"), flush(Some(0), false));
    }

    #[test]
    fn flush_all_errors_match_memcached() {
        assert_eq!(
            error_of(b"flush_all abc\r\n"),
            (ErrorKind::InvalidExptime, true)
        );
        assert_eq!(
            error_of(b"flush_all noreply 5\r\n"),
            (ErrorKind::InvalidExptime, true)
        );
        assert_eq!(
            error_of(b"flush_all 1 2 3\r\n"),
            (ErrorKind::UnknownCommand, true)
        );
    }

    #[test]
    fn stats_keeps_its_arguments() {
        let Request::Stats(plain) = request(b"stats\r\n") else {
            panic!("stats expected");
        };
        assert_eq!(plain.group(), None);
        let Request::Stats(detail) = request(b"stats detail  on\r\n") else {
            panic!("stats expected");
        };
        assert_eq!(detail.group(), Some(&b"detail"[..]));
        assert_eq!(
            detail.args().collect::<Vec<_>>(),
            vec![&b"detail"[..], b"on"]
        );
    }

    #[test]
    fn cache_memlimit_reads_its_number_as_memcached_does() {
        let limit =
            |megabytes, noreply| Request::CacheMemlimit(CacheMemlimit { megabytes, noreply });
        assert_eq!(request(b"cache_memlimit 100\r\n"), limit(100, false));
        assert_eq!(request(b"cache_memlimit 100 noreply\r\n"), limit(100, true));
        assert_eq!(request(b"cache_memlimit 100 200\r\n"), limit(100, false));
        // Wrapped to 32 bits, as memcached's strtoul result is stored.
        assert_eq!(request(b"cache_memlimit 4294967296\r\n"), limit(0, false));
        for line in [
            &b"cache_memlimit\r\n"[..],
            b"cache_memlimit abc\r\n",
            b"cache_memlimit -5\r\n",
            b"cache_memlimit 1 2 3\r\n",
        ] {
            assert_eq!(
                error_of(line),
                (ErrorKind::UnknownCommand, true),
                "{line:?}"
            );
        }
        for line in [
            &b"cache_memlimit abc noreply\r\n"[..],
            b"cache_memlimit noreply\r\n",
        ] {
            assert_eq!(
                error_of(line),
                (ErrorKind::UnknownCommand, false),
                "{line:?}"
            );
        }
    }

    #[test]
    fn only_the_metadump_of_lru_crawler_is_known() {
        for line in [&b"all"[..], b"hash", b"1"] {
            let mut input = b"lru_crawler metadump ".to_vec();
            input.extend_from_slice(line);
            input.extend_from_slice(b"\r\n");
            assert_eq!(request(&input), Request::MetaDump);
        }
        for line in [
            &b"lru_crawler metadump 2\r\n"[..],
            b"lru_crawler metadump\r\n",
            b"lru_crawler metadump all extra\r\n",
            b"lru_crawler crawl all\r\n",
            b"lru_crawler\r\n",
        ] {
            assert_eq!(
                error_of(line),
                (ErrorKind::UnknownCommand, true),
                "{line:?}"
            );
        }
    }

    #[test]
    fn verbosity_forms() {
        let level = |level, noreply| Request::Verbosity(Verbosity { level, noreply });
        assert_eq!(request(b"verbosity 1\r\n"), level(1, false));
        assert_eq!(request(b"verbosity 1 noreply\r\n"), level(1, true));
        assert_eq!(request(b"verbosity 1 2\r\n"), level(1, false));
    }

    #[test]
    fn verbosity_errors_match_memcached() {
        assert_eq!(
            error_of(b"verbosity\r\n"),
            (ErrorKind::UnknownCommand, true)
        );
        assert_eq!(
            error_of(b"verbosity 1 2 3\r\n"),
            (ErrorKind::UnknownCommand, true)
        );
        assert_eq!(
            error_of(b"verbosity abc\r\n"),
            (ErrorKind::BadCommandLineFormat, true)
        );
        assert_eq!(
            error_of(b"verbosity noreply\r\n"),
            (ErrorKind::BadCommandLineFormat, false)
        );
    }
}
