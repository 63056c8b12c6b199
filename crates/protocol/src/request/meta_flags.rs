//! Meta command flags: the structured form of `<flags>*` in `mg`, `ms`,
//! `md` and `ma`, and the key they may re-interpret as base64.
//!
//! memcached runs one "preparse" over the flags of every meta command, so
//! every command accepts every known flag (an `F` on `mg` is parsed and
//! ignored). A flag is one token whose first byte names it; flags taking a
//! value carry it in the rest of the token (`T30`), flags without one ignore
//! the rest (`kk` is `k`). Each flag may appear once. Errors are reported as
//! memcached does, including its quirk that a later error's message replaces
//! an earlier one's and that a bad `F` value, having no message of its own,
//! yields `CLIENT_ERROR bad command line format`.
//!
//! `E` (new cas value) and `x` (`md`: drop the value, keep the item) are from
//! memcached releases after 1.6.18, which answers `CLIENT_ERROR invalid flag`
//! to both; Larder accepts them. Return flags are written in request order,
//! so [`MetaFlags::requested`] keeps that order.

use crate::base64::{decode_key, DecodedKey};
use crate::error::ErrorKind;
use crate::line::Words;
use crate::number::{parse_i32, parse_u32, parse_u64};

/// The key of a meta command, as sent, and whether `b` asked for it to be
/// read as base64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaKey<'a> {
    wire: &'a [u8],
    base64: bool,
}

impl<'a> MetaKey<'a> {
    /// A key as sent; `base64` must only be true once `wire` is known to
    /// decode.
    pub(crate) const fn new(wire: &'a [u8], base64: bool) -> Self {
        MetaKey { wire, base64 }
    }

    /// The key token exactly as sent (base64 text when [`Self::is_base64`]).
    /// This is what the `k` return flag echoes.
    pub fn wire(&self) -> &'a [u8] {
        self.wire
    }

    /// Whether the `b` flag was given. Replies that return the key must then
    /// return it base64-encoded followed by a `b` flag.
    pub fn is_base64(&self) -> bool {
        self.base64
    }

    /// The key's bytes: the wire token, or its base64 decoding (which the
    /// parser has already validated, so this cannot fail).
    pub fn bytes(&self) -> KeyBytes<'a> {
        if !self.base64 {
            return KeyBytes::Plain(self.wire);
        }
        match decode_key(self.wire) {
            Some(decoded) => KeyBytes::Decoded(decoded),
            // Unreachable: preparse refused undecodable keys. An empty key
            // matches nothing rather than aborting the connection.
            None => KeyBytes::Plain(&[]),
        }
    }
}

/// The bytes of a [`MetaKey`]: borrowed, or decoded inline (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a short-lived stack value; decoding inline avoids a heap allocation per binary key"
)]
pub enum KeyBytes<'a> {
    /// A plain key, borrowed from the buffer.
    Plain(&'a [u8]),
    /// A base64 key, decoded into at most 250 inline bytes.
    Decoded(DecodedKey),
}

impl std::ops::Deref for KeyBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            KeyBytes::Plain(bytes) => bytes,
            KeyBytes::Decoded(decoded) => decoded.as_bytes(),
        }
    }
}

/// Every meta flag memcached knows, parsed. Which ones a command acts on is
/// listed per field; the others are accepted and ignored, as in memcached.
/// Exptimes are raw signed seconds, as in [`crate::request`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one field per protocol flag reads better than a bit set"
)]
pub struct MetaFlags<'a> {
    /// `b`: the key is base64; returned keys are encoded and flagged `b`.
    pub base64_key: bool,
    /// `c`: return the item's cas unique (`mg`, `ms` after storing, `ma`).
    pub return_cas: bool,
    /// `f`: return the client flags (`mg`).
    pub return_flags: bool,
    /// `h`: return whether the item was fetched before, `0` or `1` (`mg`).
    pub return_hit: bool,
    /// `k`: return the key (all commands, also on misses).
    pub return_key: bool,
    /// `l`: return seconds since the item was last accessed (`mg`).
    pub return_last_access: bool,
    /// `O<token>`: opaque, echoed verbatim (the `O` included) in the reply,
    /// also on misses; at most 32 bytes.
    pub opaque: Option<&'a [u8]>,
    /// `q`: quiet mode: suppress the nominal reply — `EN` for `mg`; `HD` for
    /// `ms`, `md` and `ma` — while errors and other results are still sent.
    /// Pipelines end with `mn` to learn that all quiet commands are done.
    pub quiet: bool,
    /// `s`: return the value's size in bytes (`mg`).
    pub return_size: bool,
    /// `t`: return the remaining TTL in seconds, `-1` for none (`mg`, `ma`).
    pub return_ttl: bool,
    /// `u`: do not bump the item (`mg`): the read leaves the item's hit
    /// bit and last access as they were.
    pub no_lru_bump: bool,
    /// `v`: return the value in a data block: `VA` instead of `HD` (`mg`,
    /// `ma`).
    pub return_value: bool,
    /// `T<secs>`: set a new TTL — on a hit for `mg` (a touch), the stored
    /// item's TTL for `ms`, the TTL an invalidated item keeps for `md` with
    /// `I`, the TTL after a successful `ma`.
    pub ttl: Option<i32>,
    /// `N<secs>`: vivify on miss — `mg` creates an empty item with this TTL
    /// and tells this client it won (`W`) the right to fill it; `ma` creates
    /// the counter with value [`Self::initial`] and this TTL.
    pub vivify_ttl: Option<i32>,
    /// `R<secs>`: recache — on an `mg` hit whose remaining TTL is below this,
    /// the first client gets `W` (win) and later ones `Z`, so one refreshes.
    pub recache_ttl: Option<i32>,
    /// `F<flags>`: client flags to store (`ms`).
    pub client_flags: Option<u32>,
    /// `C<cas>`: compare: act only if the item's cas unique equals this
    /// (`ms`, `md`, `ma`), else `EX`.
    pub compare_cas: Option<u64>,
    /// `I`: invalidate — `md` marks the item stale (with `T`, keeping it
    /// that long) instead of removing it; `ms` with `C` stores even if the
    /// cas is older, marking the result stale. Stale items return `X` and
    /// hand out one `W`.
    pub invalidate: bool,
    /// `M<c>`: mode switch, the single byte after `M` (`ms`: see
    /// [`crate::MetaSetMode`]; `ma`: see [`crate::MetaArithmeticMode`]).
    pub mode: Option<u8>,
    /// `D<delta>`: amount for `ma` (default 1).
    pub delta: Option<u64>,
    /// `J<initial>`: value `ma` creates a missing counter with when `N` is
    /// given (default 0).
    pub initial: Option<u64>,
    /// `P`/`L`: proxy hints, accepted and ignored.
    pub proxy_hint: bool,
    /// The flag tokens as sent, for [`Self::requested`].
    tokens: &'a [u8],
}

impl<'a> MetaFlags<'a> {
    /// The flag letters in request order (each appears once). Return flags
    /// must be written in this order; the `O` letter stands for the opaque.
    pub fn requested(&self) -> impl Iterator<Item = u8> + Clone + 'a {
        crate::line::split_spaces(self.tokens).filter_map(|token| token.first().copied())
    }
}

/// The outcome of memcached's `_meta_flag_preparse`.
pub(crate) struct Preparsed<'a> {
    pub key: MetaKey<'a>,
    pub flags: MetaFlags<'a>,
}

/// Parses the flags in tokens `first..` of `words`, for the key in token 1.
/// The error is the message `mg`/`ms` would send; `md`/`ma` replace it.
pub(crate) fn preparse<'a>(words: &Words<'a>, first: usize) -> Result<Preparsed<'a>, ErrorKind> {
    let wire = words.get(1).unwrap_or(&[]);
    let mut flags = MetaFlags {
        tokens: words.tail_from(first),
        ..MetaFlags::default()
    };
    let mut seen = [false; 127];
    // memcached keeps scanning after a bad value, and a later message wins.
    let mut failure: Option<ErrorKind> = None;
    for token in (first..words.len()).filter_map(|index| words.get(index)) {
        let (&letter, value) = token.split_first().unwrap_or((&0, &[]));
        match seen.get_mut(usize::from(letter)) {
            Some(slot) if !*slot => *slot = true,
            _ => return Err(ErrorKind::DuplicateFlag),
        }
        if let Err(kind) = apply(&mut flags, letter, value, wire, token) {
            if kind == ErrorKind::InvalidFlag {
                return Err(kind);
            }
            failure = Some(match (kind, failure) {
                (ErrorKind::BadCommandLineFormat, Some(earlier)) => earlier,
                _ => kind,
            });
        }
    }
    if let Some(kind) = failure {
        return Err(kind);
    }
    Ok(Preparsed {
        key: MetaKey {
            wire,
            base64: flags.base64_key,
        },
        flags,
    })
}

/// Records one flag. `BadCommandLineFormat` stands for "failed without a
/// message of its own" (memcached's `F`).
fn apply<'a>(
    flags: &mut MetaFlags<'a>,
    letter: u8,
    value: &[u8],
    key: &[u8],
    token: &'a [u8],
) -> Result<(), ErrorKind> {
    let number = |parsed: Option<i32>| parsed.ok_or(ErrorKind::BadToken).map(Some);
    match letter {
        b'b' => {
            flags.base64_key = true;
            decode_key(key).ok_or(ErrorKind::KeyDecoding)?;
        }
        b'N' => flags.vivify_ttl = number(parse_i32(value))?,
        b'T' => flags.ttl = number(parse_i32(value))?,
        b'R' => flags.recache_ttl = number(parse_i32(value))?,
        b'l' => flags.return_last_access = true,
        b'O' => flags.opaque = Some(token),
        b'P' | b'L' => flags.proxy_hint = true,
        b'k' => flags.return_key = true,
        b's' => flags.return_size = true,
        b't' => flags.return_ttl = true,
        b'c' => flags.return_cas = true,
        b'f' => flags.return_flags = true,
        b'v' => flags.return_value = true,
        b'h' => flags.return_hit = true,
        b'u' => flags.no_lru_bump = true,
        b'q' => flags.quiet = true,
        b'F' => flags.client_flags = Some(parse_u32(value).ok_or(ErrorKind::BadCommandLineFormat)?),
        b'C' => flags.compare_cas = Some(parse_u64(value).ok_or(ErrorKind::BadToken)?),
        b'M' => match value {
            [mode] => flags.mode = Some(*mode),
            _ => return Err(ErrorKind::ModeTokenLength),
        },
        b'J' => flags.initial = Some(parse_u64(value).ok_or(ErrorKind::InvalidInitialValue)?),
        b'D' => flags.delta = Some(parse_u64(value).ok_or(ErrorKind::InvalidDeltaValue)?),
        b'I' => flags.invalidate = true,
        // `E` (set the cas unique) and `x` (empty the value, keep the item)
        // came after memcached 1.6.18, which refuses them as unknown, as
        // Larder does rather than accept and ignore them.
        _ => return Err(ErrorKind::InvalidFlag),
    }
    Ok(())
}

/// memcached's opaque check: the token, `O` included, may be 32 bytes.
pub(crate) fn opaque_fits(flags: &MetaFlags<'_>) -> bool {
    !matches!(flags.opaque, Some(token) if token.len() > crate::limits::META_OPAQUE_BYTES_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags_of(line: &[u8]) -> Result<Preparsed<'_>, ErrorKind> {
        preparse(&Words::split(line), 2)
    }

    #[test]
    fn every_flag_is_recorded() {
        // More flags than one command may carry, so in two lines.
        let parsed = flags_of(b"mg Zm9v b c f h k l O123 q s t u v T30 N-1 R5");
        let Ok(Preparsed { key, flags: f }) = parsed else {
            panic!("unexpected error");
        };
        assert!(key.is_base64());
        assert!(f.base64_key && f.return_cas && f.return_flags && f.return_hit);
        assert!(f.return_key && f.return_last_access && f.quiet && f.return_size);
        assert!(f.return_ttl && f.no_lru_bump && f.return_value);
        assert_eq!(f.opaque, Some(&b"O123"[..]));
        assert_eq!(
            (f.ttl, f.vivify_ttl, f.recache_ttl),
            (Some(30), Some(-1), Some(5))
        );
        let parsed = flags_of(b"ms a F7 C9 I MS D2 J3 P");
        let Ok(Preparsed { flags: f, .. }) = parsed else {
            panic!("unexpected error");
        };
        assert!(f.invalidate && f.proxy_hint);
        assert_eq!((f.client_flags, f.compare_cas), (Some(7), Some(9)));
        assert_eq!((f.mode, f.delta, f.initial), (Some(b'S'), Some(2), Some(3)));
    }

    #[test]
    fn requested_keeps_request_order() {
        let parsed = flags_of(b"mg a v t O9 kk c");
        let order: Vec<u8> = parsed
            .map(|p| p.flags.requested().collect())
            .unwrap_or_default();
        assert_eq!(order, b"vtOkc".to_vec());
    }

    #[test]
    fn base64_keys_decode_lazily() {
        let parsed = flags_of(b"mg Zm9v b");
        let key = parsed.map(|p| p.key);
        assert_eq!(key.map(|k| k.bytes().to_vec()), Ok(b"foo".to_vec()));
        assert_eq!(key.map(|k| k.wire()), Ok(&b"Zm9v"[..]));
    }

    #[test]
    fn errors_match_memcached() {
        let kind = |line: &'static [u8]| flags_of(line).err();
        assert_eq!(kind(b"mg a v v"), Some(ErrorKind::DuplicateFlag));
        assert_eq!(kind(b"mg a \x80"), Some(ErrorKind::DuplicateFlag));
        assert_eq!(kind(b"mg a zz"), Some(ErrorKind::InvalidFlag));
        assert_eq!(kind(b"mg a T"), Some(ErrorKind::BadToken));
        assert_eq!(kind(b"mg a R5x"), Some(ErrorKind::BadToken));
        assert_eq!(kind(b"mg a Fy"), Some(ErrorKind::BadCommandLineFormat));
        assert_eq!(kind(b"mg a Tx Fy"), Some(ErrorKind::BadToken));
        assert_eq!(kind(b"mg a Fy Tx"), Some(ErrorKind::BadToken));
        assert_eq!(kind(b"mg a Tx zz"), Some(ErrorKind::InvalidFlag));
        assert_eq!(kind(b"ms a 1 E5"), Some(ErrorKind::InvalidFlag));
        assert_eq!(kind(b"md a x"), Some(ErrorKind::InvalidFlag));
        assert_eq!(kind(b"mg a Fabc b"), Some(ErrorKind::KeyDecoding));
        assert_eq!(kind(b"mg a M"), Some(ErrorKind::ModeTokenLength));
        assert_eq!(kind(b"mg a MEE"), Some(ErrorKind::ModeTokenLength));
        assert_eq!(kind(b"mg a Dabc"), Some(ErrorKind::InvalidDeltaValue));
        assert_eq!(kind(b"mg a Jabc"), Some(ErrorKind::InvalidInitialValue));
        assert_eq!(kind(b"mg YQ b b"), Some(ErrorKind::DuplicateFlag));
        assert_eq!(kind(b"mg YQ b"), Some(ErrorKind::KeyDecoding));
    }

    #[test]
    fn opaque_is_limited_to_32_bytes_with_its_letter() {
        let fits = |line: &'static [u8]| flags_of(line).map(|p| opaque_fits(&p.flags));
        let mut long = b"mg a O".to_vec();
        long.extend_from_slice(&[b'9'; 31]);
        assert_eq!(
            preparse(&Words::split(&long), 2).map(|p| opaque_fits(&p.flags)),
            Ok(true)
        );
        long.push(b'9');
        assert_eq!(
            preparse(&Words::split(&long), 2).map(|p| opaque_fits(&p.flags)),
            Ok(false)
        );
        assert_eq!(fits(b"mg a"), Ok(true));
    }
}
