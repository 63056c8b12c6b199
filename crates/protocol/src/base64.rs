//! Base64 for binary meta keys (the `b` flag), byte-for-byte as memcached.
//!
//! memcached decodes with Jouni Malinen's routine (base64.c): bytes outside
//! the alphabet are skipped, the count of alphabet bytes (`=` included) must
//! be a non-zero multiple of four, decoding stops after the first block that
//! holds padding, and an empty result counts as failure. Encoding is the
//! standard padded alphabet. Pure functions; callable from anywhere.

use crate::limits::KEY_BYTES_MAX;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The 6-bit value of an alphabet byte; `=` decodes as 0, as in memcached.
const fn sextet(byte: u8) -> Option<u8> {
    match byte {
        b'A'..=b'Z' => Some(byte - b'A'),
        b'a'..=b'z' => Some(byte - b'a' + 26),
        b'0'..=b'9' => Some(byte - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// A key decoded from base64, held inline: never longer than the text it
/// came from, which is at most [`KEY_BYTES_MAX`] bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DecodedKey {
    bytes: [u8; KEY_BYTES_MAX],
    len: usize,
}

impl DecodedKey {
    /// The decoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }
}

impl std::fmt::Debug for DecodedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DecodedKey")
            .field(&self.as_bytes().escape_ascii().to_string())
            .finish()
    }
}

/// Decodes `text` (at most [`KEY_BYTES_MAX`] bytes), or `None` where
/// memcached's `base64_decode` returns 0.
pub(crate) fn decode_key(text: &[u8]) -> Option<DecodedKey> {
    if text.len() > KEY_BYTES_MAX {
        return None;
    }
    let count = text.iter().filter(|&&b| sextet(b).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut key = DecodedKey {
        bytes: [0; KEY_BYTES_MAX],
        len: 0,
    };
    let mut block = [0u8; 4];
    let mut filled = 0usize;
    let mut pad = 0usize;
    let mut out = key.bytes.iter_mut();
    for &byte in text {
        let Some(value) = sextet(byte) else { continue };
        if byte == b'=' {
            pad += 1;
        }
        if let Some(slot) = block.get_mut(filled) {
            *slot = value;
        }
        filled += 1;
        if filled < 4 {
            continue;
        }
        filled = 0;
        let [b0, b1, b2, b3] = block;
        let decoded = [(b0 << 2) | (b1 >> 4), (b1 << 4) | (b2 >> 2), (b2 << 6) | b3];
        let keep = match pad {
            0 => 3,
            1 => 2,
            2 => 1,
            _ => return None,
        };
        for &byte in decoded.iter().take(keep) {
            let slot = out.next()?;
            *slot = byte;
            key.len += 1;
        }
        if pad > 0 {
            break;
        }
    }
    if key.len == 0 {
        return None;
    }
    Some(key)
}

/// Appends the padded base64 encoding of `bytes` to `out`.
pub fn encode_into(bytes: &[u8], out: &mut impl bytes::BufMut) {
    let symbol = |index: u8| {
        ALPHABET
            .get(usize::from(index & 0x3f))
            .copied()
            .unwrap_or(b'=')
    };
    for chunk in bytes.chunks(3) {
        let b0 = chunk.first().copied().unwrap_or(0);
        let b1 = chunk.get(1).copied().unwrap_or(0);
        let b2 = chunk.get(2).copied().unwrap_or(0);
        let quad = [
            symbol(b0 >> 2),
            symbol(((b0 & 0x03) << 4) | (b1 >> 4)),
            if chunk.len() > 1 {
                symbol(((b1 & 0x0f) << 2) | (b2 >> 6))
            } else {
                b'='
            },
            if chunk.len() > 2 {
                symbol(b2 & 0x3f)
            } else {
                b'='
            },
        ];
        out.put_slice(&quad);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(text: &[u8]) -> Option<Vec<u8>> {
        decode_key(text).map(|key| key.as_bytes().to_vec())
    }

    fn encode(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_into(bytes, &mut out);
        out
    }

    #[test]
    fn padded_text_decodes() {
        assert_eq!(decode(b"YQ=="), Some(b"a".to_vec()));
        assert_eq!(decode(b"Zm9v"), Some(b"foo".to_vec()));
        assert_eq!(decode(b"Zm9vYg=="), Some(b"foob".to_vec()));
    }

    #[test]
    fn memcached_rejections_are_reproduced() {
        // Each of these got "CLIENT_ERROR error decoding key" from 1.6.18.
        assert_eq!(decode(b"YQ"), None);
        assert_eq!(decode(b"Y"), None);
        assert_eq!(decode(b"!!!!"), None);
        assert_eq!(decode(b"a"), None);
        assert_eq!(decode(b"===="), None);
    }

    #[test]
    fn decoding_stops_after_the_first_padded_block() {
        assert_eq!(decode(b"YQ==YQ=="), Some(b"a".to_vec()));
    }

    #[test]
    fn bytes_outside_the_alphabet_are_skipped() {
        assert_eq!(decode(b"Zm!9v"), Some(b"foo".to_vec()));
    }

    #[test]
    fn encoding_round_trips() {
        for input in [&b"a"[..], b"ab", b"abc", b"\x00\xff\x10binary"] {
            let encoded = encode(input);
            assert_eq!(decode(&encoded), Some(input.to_vec()));
        }
        assert_eq!(encode(b"foob"), b"Zm9vYg==".to_vec());
    }
}
