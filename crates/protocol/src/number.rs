//! Decimal numbers read exactly as memcached reads them.
//!
//! memcached parses every number with C's `strtol`/`strtoul`/`strtoull`
//! wrapped in its `safe_strto*` helpers (util.c), on a 64-bit `long`. That
//! gives rules a client can observe, which these functions reproduce:
//! leading C whitespace is skipped and one `+` or `-` is accepted; at least
//! one digit is required; after the digits the token must end or continue
//! with a whitespace byte (`\t`, `\r`, ...), whatever follows it; a 64-bit
//! overflow is refused; `safe_strtoul`/`safe_strtol` then *truncate* the
//! 64-bit result to 32 bits (so flags `4294967296` store as 0, exptime
//! `4294967301` means 5); the unsigned parsers refuse a `-` only when the
//! wrapped result would be negative as a signed number, so `-0` is 0.
//! Pure functions; callable from anywhere.

/// C's `isspace` in the "C" locale.
const fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What `strto*` saw: sign, magnitude (None on 64-bit overflow) and whether
/// a conversion happened with an acceptable terminator.
struct Scanned {
    negative: bool,
    /// The digits' value, or `None` if it does not fit in a `u64`.
    magnitude: Option<u64>,
}

/// Scans a token the way `strtoull` does and applies memcached's terminator
/// rule. `None` means "no conversion" or "junk after the digits".
fn scan(token: &[u8]) -> Option<Scanned> {
    let mut bytes = token
        .iter()
        .copied()
        .skip_while(|&b| is_c_space(b))
        .peekable();
    let mut negative = false;
    if let Some(&sign) = bytes.peek() {
        if sign == b'+' || sign == b'-' {
            negative = sign == b'-';
            bytes.next();
        }
    }
    let mut magnitude: Option<u64> = Some(0);
    let mut digits = 0usize;
    let mut terminator = None;
    for byte in bytes {
        if byte.is_ascii_digit() {
            digits += 1;
            magnitude = magnitude
                .and_then(|m| m.checked_mul(10))
                .and_then(|m| m.checked_add(u64::from(byte - b'0')));
        } else {
            terminator = Some(byte);
            break;
        }
    }
    if digits == 0 {
        return None;
    }
    match terminator {
        Some(byte) if !is_c_space(byte) => None,
        _ => Some(Scanned {
            negative,
            magnitude,
        }),
    }
}

/// memcached's `safe_strtoull`: an unsigned 64-bit number.
pub(crate) fn parse_u64(token: &[u8]) -> Option<u64> {
    let scanned = scan(token)?;
    let magnitude = scanned.magnitude?;
    let value = if scanned.negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    // memcached only looks for a '-' when the result is negative as signed.
    // Reinterpreting the bits as signed is the C behaviour being reproduced.
    let negative_as_signed = (value as i64) < 0;
    if negative_as_signed && scanned.negative {
        return None;
    }
    Some(value)
}

/// The number an item's value holds for `incr`, `decr` and `ma`, read as
/// memcached reads it: `safe_strtoull` on the value as a C string (its parse
/// stops at a NUL byte). `None` when it holds none.
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let c_string = value.split(|&byte| byte == 0).next().unwrap_or_default();
    parse_u64(c_string)
}

/// memcached's `safe_strtoul` on a 64-bit `long`: parsed as 64 bits, then
/// truncated to 32.
pub(crate) fn parse_u32(token: &[u8]) -> Option<u32> {
    // memcached stores the 64-bit result into a uint32_t: keep the low bits.
    parse_u64(token).map(|value| value as u32)
}

/// memcached's `safe_strtol` on a 64-bit `long`: a signed 64-bit number,
/// truncated to 32 bits.
pub(crate) fn parse_i32(token: &[u8]) -> Option<i32> {
    let scanned = scan(token)?;
    let magnitude = scanned.magnitude?;
    let value: i64 = if scanned.negative {
        if magnitude > 1u64 << 63 {
            return None;
        }
        0i64.wrapping_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()?
    };
    // memcached stores the 64-bit long into an int32_t: keep the low bits.
    Some(value as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_parse() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483647"), Some(i32::MAX));
    }

    #[test]
    fn overflow_of_64_bits_is_refused() {
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_i32(b"9223372036854775808"), None);
        assert_eq!(parse_i32(b"-9223372036854775809"), None);
        assert_eq!(parse_i32(b"-9223372036854775808"), Some(0));
    }

    #[test]
    fn thirty_two_bit_results_are_truncated_like_memcached() {
        assert_eq!(parse_u32(b"4294967296"), Some(0));
        assert_eq!(parse_i32(b"4294967301"), Some(5));
        assert_eq!(parse_i32(b"2147483648"), Some(i32::MIN));
    }

    #[test]
    fn unsigned_parsers_refuse_negative_numbers_except_minus_zero() {
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u32(b"-5"), None);
        assert_eq!(parse_u64(b"-0"), Some(0));
        // C wraps a huge negative number back to a small positive one.
        assert_eq!(parse_u64(b"-18446744073709551615"), Some(1));
    }

    #[test]
    fn signs_and_surrounding_whitespace_follow_c() {
        assert_eq!(parse_u32(b"+5"), Some(5));
        assert_eq!(parse_i32(b"\t7"), Some(7));
        assert_eq!(parse_i32(b"7\r"), Some(7));
        assert_eq!(parse_i32(b"7\tjunk"), Some(7));
    }

    #[test]
    fn junk_is_refused() {
        for token in [&b""[..], b"abc", b"1x", b"-", b"+", b" ", b"0x10", b"1.5"] {
            assert_eq!(parse_u64(token), None, "{token:?}");
            assert_eq!(parse_i32(token), None, "{token:?}");
        }
    }

    #[test]
    fn counters_read_as_memcached_reads_a_value() {
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"  7 "), Some(7));
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b"12abc"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"abc"), None);
        // strtoull negates what it read, and memcached refuses a '-' only
        // when the result is negative as a signed number.
        assert_eq!(parse_counter(b"-1"), None);
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(
            parse_counter(b"-9223372036854775809"),
            Some(9_223_372_036_854_775_807)
        );
        assert_eq!(parse_counter(b"-18446744073709551615"), Some(1));
        // C's white space includes the vertical tab; the parse stops at a NUL.
        assert_eq!(parse_counter(b"\x0b5\x0b"), Some(5));
        assert_eq!(parse_counter(b"12\0junk"), Some(12));
        assert_eq!(parse_counter(b"\x0012"), None);
    }
}
