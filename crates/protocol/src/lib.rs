//! The memcached text and meta protocols: request parsing and reply
//! encoding, with no I/O. The binary protocol, which a connection's first
//! byte chooses, has its own parser and responses in [`binary`].
//!
//! This crate knows bytes, not sockets or storage. [`parse`] looks at the
//! front of a connection's read buffer and says one of three things: a whole
//! [`Request`] is there (and how many bytes it spans), more bytes are needed,
//! or the input is malformed ([`ParseError`], carrying memcached's exact
//! reply and what to skip). The [`reply`] module appends replies to a
//! [`bytes::BufMut`]. Everything is pure, allocation-free and `Send + Sync`;
//! call it from any thread. Behaviour follows memcached 1.6 byte for byte
//! (checked against a running 1.6.18), including its odd corners, so that
//! any memcached client sees the answers it expects.
//!
//! A connection loop built on this crate looks like:
//!
//! ```
//! use larder_protocol::{parse, Limits, Parsed, Request, reply};
//!
//! let limits = Limits::default();
//! let mut input: &[u8] = b"set k 0 0 2\r\nhi\r\nget k\r\n";
//! let mut output = Vec::new();
//! loop {
//!     match parse(input, &limits) {
//!         Ok(Parsed::Complete { request, frame_bytes }) => {
//!             match request {
//!                 Request::Store(_) => reply::write_reply(&mut output, reply::Reply::Stored),
//!                 Request::Retrieval(get) => {
//!                     for key in get.keys.iter() {
//!                         reply::write_value(&mut output, key, 0, b"hi", None);
//!                     }
//!                     reply::write_reply(&mut output, reply::Reply::End);
//!                 }
//!                 _ => {}
//!             }
//!             input = &input[frame_bytes..];
//!         }
//!         // Read more bytes (at most `frame_bytes` in total, when known).
//!         Ok(Parsed::Incomplete { .. }) => break,
//!         Err(error) => {
//!             if let Some(text) = error.reply() {
//!                 output.extend_from_slice(text);
//!             }
//!             // Then drop `error.consumed` bytes, swallow `error.discard_bytes`
//!             // more as they arrive, and hang up if `error.closes_connection()`.
//!             break;
//!         }
//!     }
//! }
//! assert_eq!(output, b"STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n");
//! ```

#![forbid(unsafe_code)]

mod base64;
pub mod binary;
pub mod error;
pub mod limits;
mod line;
mod number;
mod parse;
pub mod reply;
pub mod request;

pub use base64::{encode_into as encode_base64, DecodedKey};
pub use error::{ErrorKind, ParseError};
pub use limits::{Limits, LimitsError, KEY_BYTES_MAX};
pub use number::parse_counter;
pub use parse::{parse, Parsed};
pub use request::{
    Arithmetic, CacheMemlimit, Delete, Direction, FlushAll, KeyBytes, Keys, MetaArithmetic,
    MetaArithmeticMode, MetaDebug, MetaDelete, MetaFlags, MetaGet, MetaKey, MetaSet, MetaSetMode,
    Request, Retrieval, RetrievalCommand, Stats, Store, StoreCommand, Touch, Verbosity,
};
