//! Encoding meta replies: `HD`, `VA`, `EN`, `NF`, `NS`, `EX`, `MN`, `ME`.
//!
//! A meta reply line is a two-letter status, then (for `VA`) the value
//! length, then return flags in the order the request listed them, then the
//! server's own markers (`W` win, `X` stale, `Z` win already sent). Build one
//! with [`MetaLine`], usually through [`MetaLine::return_flags`], which walks
//! [`MetaFlags::requested`] and writes each flag the caller supplied a value
//! for; then add markers and [`MetaLine::finish`]. A `VA` line is followed by
//! the value and [`super::VALUE_TRAILER`], written by the caller.

use bytes::BufMut;

use super::{put_i64, put_u64, VALUE_TRAILER};
use crate::base64::encode_into;
use crate::request::{MetaFlags, MetaKey};

/// The status of a meta reply line (other than `VA`, see
/// [`MetaLine::value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaStatus {
    /// `HD`: success, no value.
    Header,
    /// `EN`: `mg`/`me` miss.
    Miss,
    /// `NF`: not found (`md`, `ma`, `ms` in append/prepend/replace modes).
    NotFound,
    /// `NS`: not stored.
    NotStored,
    /// `EX`: cas mismatch.
    Exists,
}

impl MetaStatus {
    const fn code(self) -> &'static [u8] {
        match self {
            MetaStatus::Header => b"HD",
            MetaStatus::Miss => b"EN",
            MetaStatus::NotFound => b"NF",
            MetaStatus::NotStored => b"NS",
            MetaStatus::Exists => b"EX",
        }
    }
}

/// What the server knows about the item, for [`MetaLine::return_flags`].
/// Leave a field `None` when the command does not return it (a miss returns
/// only `O` and `k`; `ms` returns only `c`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemInfo {
    /// For `c`: the cas unique.
    pub cas: Option<u64>,
    /// For `f`: the client flags.
    pub client_flags: Option<u32>,
    /// For `s`: the value's size in bytes.
    pub size: Option<u64>,
    /// For `t`: remaining seconds to live, `-1` for never.
    pub ttl_secs: Option<i64>,
    /// For `h`: whether it was fetched before.
    pub hit_before: Option<bool>,
    /// For `l`: seconds since last access.
    pub last_access_secs: Option<u64>,
}

/// One meta reply line being written. Dropping it without
/// [`MetaLine::finish`] leaves an unterminated line: always finish.
#[must_use = "a meta reply line must be finished"]
pub struct MetaLine<'b, B: BufMut> {
    buf: &'b mut B,
}

impl<'b, B: BufMut> MetaLine<'b, B> {
    /// Starts a line with `status`.
    pub fn status(buf: &'b mut B, status: MetaStatus) -> Self {
        buf.put_slice(status.code());
        MetaLine { buf }
    }

    /// Starts `VA <value_bytes>`; after [`Self::finish`], the caller writes
    /// the value and [`VALUE_TRAILER`].
    pub fn value(buf: &'b mut B, value_bytes: usize) -> Self {
        buf.put_slice(b"VA ");
        put_u64(buf, value_bytes as u64);
        MetaLine { buf }
    }

    /// Appends a bare flag such as `W`, `X` or `Z`.
    pub fn flag(&mut self, letter: u8) -> &mut Self {
        self.buf.put_slice(&[b' ', letter]);
        self
    }

    /// Appends a flag with an unsigned number, such as `c123`.
    pub fn flag_u64(&mut self, letter: u8, value: u64) -> &mut Self {
        self.flag(letter);
        put_u64(self.buf, value);
        self
    }

    /// Appends a flag with a signed number, such as `t-1`.
    pub fn flag_i64(&mut self, letter: u8, value: i64) -> &mut Self {
        self.flag(letter);
        put_i64(self.buf, value);
        self
    }

    /// Appends the opaque token exactly as the request sent it (`O` included).
    pub fn opaque(&mut self, token: &[u8]) -> &mut Self {
        self.buf.put_u8(b' ');
        self.buf.put_slice(token);
        self
    }

    /// Appends `k<key>`, or `k<base64 of key> b` for a binary key.
    pub fn key(&mut self, key: &[u8], base64: bool) -> &mut Self {
        self.flag(b'k');
        if base64 {
            encode_into(key, self.buf);
            self.flag(b'b');
        } else {
            self.buf.put_slice(key);
        }
        self
    }

    /// Appends, in request order, every return flag in `flags` that `item`
    /// has a value for, plus `O` and `k` which are always available.
    pub fn return_flags(
        &mut self,
        flags: &MetaFlags<'_>,
        key: &MetaKey<'_>,
        item: &ItemInfo,
    ) -> &mut Self {
        for letter in flags.requested() {
            match letter {
                b'O' => {
                    if let Some(token) = flags.opaque {
                        self.opaque(token);
                    }
                }
                b'k' => {
                    self.key(&key.bytes(), key.is_base64());
                }
                b'c' => self.optional_u64(b'c', item.cas),
                b'f' => self.optional_u64(b'f', item.client_flags.map(u64::from)),
                b's' => self.optional_u64(b's', item.size),
                b'l' => self.optional_u64(b'l', item.last_access_secs),
                b'h' => self.optional_u64(b'h', item.hit_before.map(u64::from)),
                b't' => {
                    if let Some(ttl) = item.ttl_secs {
                        self.flag_i64(b't', ttl);
                    }
                }
                _ => {}
            }
        }
        self
    }

    fn optional_u64(&mut self, letter: u8, value: Option<u64>) {
        if let Some(value) = value {
            self.flag_u64(letter, value);
        }
    }

    /// Ends the line with `\r\n`.
    pub fn finish(self) {
        self.buf.put_slice(VALUE_TRAILER);
    }
}

/// Appends `MN\r\n`, the reply to `mn`.
pub fn write_meta_noop(buf: &mut impl BufMut) {
    buf.put_slice(b"MN\r\n");
}

/// An `ME <key> <name>=<value>...` debug line being written.
#[must_use = "a meta debug line must be finished"]
pub struct MetaDebugLine<'b, B: BufMut> {
    buf: &'b mut B,
}

impl<'b, B: BufMut> MetaDebugLine<'b, B> {
    /// Starts the line; a binary key is written base64-encoded.
    pub fn start(buf: &'b mut B, key: &[u8], base64: bool) -> Self {
        buf.put_slice(b"ME ");
        if base64 {
            encode_into(key, buf);
        } else {
            buf.put_slice(key);
        }
        MetaDebugLine { buf }
    }

    /// Appends ` name=value`. memcached's fields are `exp`, `la`, `cas`,
    /// `fetch` (`yes`/`no`), `cls` and `size`.
    pub fn field(&mut self, name: &[u8], value: &[u8]) -> &mut Self {
        self.buf.put_u8(b' ');
        self.buf.put_slice(name);
        self.buf.put_u8(b'=');
        self.buf.put_slice(value);
        self
    }

    /// Appends ` name=<number>`.
    pub fn field_i64(&mut self, name: &[u8], value: i64) -> &mut Self {
        self.buf.put_u8(b' ');
        self.buf.put_slice(name);
        self.buf.put_u8(b'=');
        put_i64(self.buf, value);
        self
    }

    /// Ends the line with `\r\n`.
    pub fn finish(self) {
        self.buf.put_slice(VALUE_TRAILER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, Limits, Parsed, Request};

    fn meta_get(input: &[u8]) -> crate::MetaGet<'_> {
        match parse(input, &Limits::DEFAULT) {
            Ok(Parsed::Complete {
                request: Request::MetaGet(get),
                ..
            }) => get,
            other => panic!("expected mg, got {other:?}"),
        }
    }

    #[test]
    fn a_hit_lists_flags_in_request_order_like_memcached() {
        // memcached 1.6.18 answered this request with exactly these bytes.
        let get = meta_get(b"mg a v k c f s t h l q u O1 T1 R1 N1\r\n");
        let item = ItemInfo {
            cas: Some(29),
            client_flags: Some(0),
            size: Some(0),
            ttl_secs: Some(-1),
            hit_before: Some(false),
            last_access_secs: Some(0),
        };
        let mut buf = Vec::new();
        let mut line = MetaLine::value(&mut buf, 0);
        line.return_flags(&get.flags, &get.key, &item).flag(b'W');
        line.finish();
        buf.extend_from_slice(VALUE_TRAILER);
        assert_eq!(buf, b"VA 0 ka c29 f0 s0 t-1 h0 l0 O1 W\r\n\r\n");
    }

    #[test]
    fn a_miss_returns_only_opaque_and_key() {
        let get = meta_get(b"mg missing k O1 v\r\n");
        let mut buf = Vec::new();
        let mut line = MetaLine::status(&mut buf, MetaStatus::Miss);
        line.return_flags(&get.flags, &get.key, &ItemInfo::default());
        line.finish();
        assert_eq!(buf, b"EN kmissing O1\r\n");
    }

    #[test]
    fn a_binary_key_is_returned_encoded_and_flagged() {
        let get = meta_get(b"mg YQ==YQ== b k\r\n");
        let mut buf = Vec::new();
        let mut line = MetaLine::status(&mut buf, MetaStatus::Miss);
        line.return_flags(&get.flags, &get.key, &ItemInfo::default());
        line.finish();
        assert_eq!(buf, b"EN kYQ== b\r\n");
    }

    #[test]
    fn every_status_code() {
        for (status, code) in [
            (MetaStatus::Header, &b"HD\r\n"[..]),
            (MetaStatus::Miss, b"EN\r\n"),
            (MetaStatus::NotFound, b"NF\r\n"),
            (MetaStatus::NotStored, b"NS\r\n"),
            (MetaStatus::Exists, b"EX\r\n"),
        ] {
            let mut buf = Vec::new();
            MetaLine::status(&mut buf, status).finish();
            assert_eq!(buf, code);
        }
        let mut buf = Vec::new();
        write_meta_noop(&mut buf);
        assert_eq!(buf, b"MN\r\n");
    }

    #[test]
    fn debug_line() {
        let mut buf = bytes::BytesMut::new();
        let mut line = MetaDebugLine::start(&mut buf, b"foo", false);
        line.field_i64(b"exp", -1)
            .field_i64(b"la", 3)
            .field(b"fetch", b"no");
        line.finish();
        assert_eq!(&buf[..], b"ME foo exp=-1 la=3 fetch=no\r\n");
    }
}
