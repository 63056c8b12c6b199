//! `ma <key> <flags>*`: meta arithmetic (incr/decr with options).
//!
//! Flag problems are all `CLIENT_ERROR invalid or duplicate flag`; an
//! unknown mode is `CLIENT_ERROR invalid mode for ma M token`. (memcached
//! checks the opaque length only after doing the arithmetic; Larder refuses
//! before.)

use crate::error::{ErrorKind, ParseError};
use crate::limits::META_TOKENS_MAX;
use crate::parse::{Command, Parsed};
use crate::request::meta_flags::{opaque_fits, preparse, MetaFlags, MetaKey};
use crate::request::Request;

/// Direction of `ma`, from its `M` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaArithmeticMode {
    /// `MI`, `M+` or no `M`: add, wrapping at 2^64.
    Increment,
    /// `MD` or `M-`: subtract, stopping at 0.
    Decrement,
}

/// A meta arithmetic. Reply: `HD` (nothing if [`MetaFlags::quiet`]) or, with
/// [`MetaFlags::return_value`], `VA <len>` and the new value as a data block;
/// `NF` if missing (and not vivified with `N`), `NS` if vivifying failed, `EX`
/// on a cas mismatch. Return flags: `c`, `t`, `O`, `k` in request order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaArithmetic<'a> {
    /// The key.
    pub key: MetaKey<'a>,
    /// Increment or decrement.
    pub mode: MetaArithmeticMode,
    /// The amount: [`MetaFlags::delta`] or 1.
    pub delta: u64,
    /// The flags; `ma` acts on b c C D E J k N O q t T v.
    pub flags: MetaFlags<'a>,
}

/// Parses an `ma` line.
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
    let mode = match parsed.flags.mode {
        None | Some(b'I' | b'+') => MetaArithmeticMode::Increment,
        Some(b'D' | b'-') => MetaArithmeticMode::Decrement,
        Some(_) => return Err(cmd.reject(ErrorKind::InvalidArithmeticMode)),
    };
    if !opaque_fits(&parsed.flags) {
        return Err(cmd.reject(ErrorKind::OpaqueTooLong));
    }
    cmd.complete(Request::MetaArithmetic(MetaArithmetic {
        key: parsed.key,
        mode,
        delta: parsed.flags.delta.unwrap_or(1),
        flags: parsed.flags,
    }))
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, Limits, Parsed, Request};

    use super::*;

    fn meta_arithmetic(input: &[u8]) -> MetaArithmetic<'_> {
        match parse(input, &Limits::DEFAULT) {
            Ok(Parsed::Complete {
                request: Request::MetaArithmetic(arithmetic),
                ..
            }) => arithmetic,
            other => panic!("expected ma for {input:?}, got {other:?}"),
        }
    }

    fn error_of(input: &[u8]) -> ErrorKind {
        match parse(input, &Limits::DEFAULT) {
            Err(error) => error.kind,
            other => panic!("expected an error for {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn ma_defaults_to_increment_by_one() {
        let ma = meta_arithmetic(b"ma n\r\n");
        assert_eq!((ma.mode, ma.delta), (MetaArithmeticMode::Increment, 1));
    }

    #[test]
    fn ma_modes_and_options() {
        let ma = meta_arithmetic(b"ma n v D5 MD t c k O7 N0 J3\r\n");
        assert_eq!((ma.mode, ma.delta), (MetaArithmeticMode::Decrement, 5));
        assert_eq!((ma.flags.vivify_ttl, ma.flags.initial), (Some(0), Some(3)));
        for flag in ["MI", "M+"] {
            let input = format!("ma n {flag}\r\n");
            assert_eq!(
                meta_arithmetic(input.as_bytes()).mode,
                MetaArithmeticMode::Increment
            );
        }
        assert_eq!(
            meta_arithmetic(b"ma n M-\r\n").mode,
            MetaArithmeticMode::Decrement
        );
    }

    #[test]
    fn ma_errors_match_memcached() {
        assert_eq!(error_of(b"ma\r\n"), ErrorKind::UnknownCommand);
        assert_eq!(
            error_of(b"ma n Dabc\r\n"),
            ErrorKind::InvalidOrDuplicateFlag
        );
        assert_eq!(error_of(b"ma n D-1\r\n"), ErrorKind::InvalidOrDuplicateFlag);
        assert_eq!(
            error_of(b"ma n Jabc\r\n"),
            ErrorKind::InvalidOrDuplicateFlag
        );
        assert_eq!(error_of(b"ma n zz\r\n"), ErrorKind::InvalidOrDuplicateFlag);
        assert_eq!(error_of(b"ma n Mx\r\n"), ErrorKind::InvalidArithmeticMode);
        assert_eq!(error_of(b"ma n Mi\r\n"), ErrorKind::InvalidArithmeticMode);
        assert_eq!(
            error_of(b"ma n k c f s t h l O1 T1 R1 N1 P L D1 J1 u v F1\r\n"),
            ErrorKind::MetaFlagsTooLong
        );
    }
}
