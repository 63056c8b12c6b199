//! Client-side request encoding: memcached text `get`/`set`, memcached
//! binary get/set, and RESP `GET`/`SET`, appended to a write buffer.
//!
//! Pure functions; the caller guarantees keys are valid for the protocol
//! (option validation checks prefixes and key files against memcached's key
//! rules, which are stricter than RESP's).

use crate::keys::write_decimal;
use larder_protocol::binary;
use serde::Serialize;

/// The wire protocol spoken to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// memcached text protocol: `get` and `set`.
    Memcached,
    /// memcached binary protocol: get (0x00) and set (0x01).
    Binary,
    /// Redis RESP: `GET` and `SET` (any RESP2 or RESP3 server).
    #[value(alias = "resp")]
    Redis,
}

impl Protocol {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Memcached => "memcached",
            Protocol::Binary => "binary",
            Protocol::Redis => "redis",
        }
    }
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Get,
    Set,
}

/// Appends a single-key read of `key`.
pub fn encode_get(protocol: Protocol, key: &[u8], out: &mut Vec<u8>) {
    match protocol {
        Protocol::Memcached => {
            out.extend_from_slice(b"get ");
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Binary => binary::write_request(out, binary::opcode::GET, 0, 0, &[], key, &[]),
        Protocol::Redis => {
            out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
            encode_bulk(key, out);
        }
    }
}

/// Appends an unconditional write of `value` under `key` (flags 0, no
/// expiry).
pub fn encode_set(protocol: Protocol, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match protocol {
        Protocol::Memcached => {
            out.extend_from_slice(b"set ");
            out.extend_from_slice(key);
            out.extend_from_slice(b" 0 0 ");
            write_decimal(value.len() as u64, out);
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Binary => {
            // Flags 0 and expiration 0, then the key and the value.
            let extras = [0; 8];
            binary::write_request(out, binary::opcode::SET, 0, 0, &extras, key, value);
        }
        Protocol::Redis => {
            out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
            encode_bulk(key, out);
            encode_bulk(value, out);
        }
    }
}

fn encode_bulk(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'$');
    write_decimal(bytes.len() as u64, out);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, reason = "tests slice known buffers")]
mod tests {
    use super::*;

    #[test]
    fn memcached_requests_are_text_commands() {
        let mut out = Vec::new();
        encode_get(Protocol::Memcached, b"k1", &mut out);
        encode_set(Protocol::Memcached, b"k2", b"hello", &mut out);
        assert_eq!(out, b"get k1\r\nset k2 0 0 5\r\nhello\r\n");
    }

    #[test]
    fn binary_requests_are_a_header_extras_key_and_value() {
        let mut out = Vec::new();
        encode_get(Protocol::Binary, b"k1", &mut out);
        encode_set(Protocol::Binary, b"k2", b"hey", &mut out);
        let (get, set) = out.split_at(24 + 2);
        assert_eq!(get[..2], [0x80, 0x00]);
        assert_eq!(get[2..4], 2u16.to_be_bytes());
        assert_eq!(get[8..12], 2u32.to_be_bytes());
        assert_eq!(&get[24..], b"k1");
        assert_eq!(set[..2], [0x80, 0x01]);
        assert_eq!(set[4], 8);
        assert_eq!(set[8..12], 13u32.to_be_bytes());
        assert_eq!(&set[24..], b"\0\0\0\0\0\0\0\0k2hey");
    }

    #[test]
    fn redis_requests_are_resp_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_get(Protocol::Redis, b"k1", &mut out);
        encode_set(Protocol::Redis, b"k2", b"", &mut out);
        assert_eq!(
            out,
            b"*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n*3\r\n$3\r\nSET\r\n$2\r\nk2\r\n$0\r\n\r\n"
        );
    }
}
