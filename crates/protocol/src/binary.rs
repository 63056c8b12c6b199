//! memcached's binary protocol: request parsing and response encoding.
//!
//! memcached picks a connection's protocol from its first byte: `0x80`, a
//! binary request's magic, which no text command starts with. Larder looks
//! at the same byte. memcached has deprecated the binary protocol in favour
//! of the meta commands, but clients that speak only it are still in use
//! (memjs, libmemcached with its binary behaviour, spymemcached's binary
//! connection factory, python-binary-memcached), so Larder speaks it as
//! memcached 1.6 does: the same statuses, the same messages, the same
//! responses kept back by the quiet commands.
//!
//! Every request is a 24-byte [`Header`] and a body of extras, key and
//! value. [`parse`] reads one from the front of a connection's input and
//! says what it is ([`Parsed::Complete`]), how much more to read
//! ([`Parsed::Incomplete`]), or how memcached refuses it ([`Refusal`]):
//! a malformed request is answered "Invalid arguments" and the connection
//! closes; a value over the item limit is answered "Too large." and its
//! bytes are swallowed as they come, never buffered; an unknown command is
//! answered "Unknown command" and its body swallowed.

use crate::limits::{Limits, KEY_BYTES_MAX};
use bytes::BufMut;

/// The first byte of every binary request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// The first byte of every binary response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Bytes in a binary request's or response's header.
pub const HEADER_BYTES: usize = 24;

/// The opcodes Larder answers, as memcached numbers them.
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// A response's status, as memcached numbers them and words them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Success = 0x0000,
    KeyNotFound = 0x0001,
    KeyExists = 0x0002,
    TooLarge = 0x0003,
    InvalidArguments = 0x0004,
    NotStored = 0x0005,
    NonNumeric = 0x0006,
    UnknownCommand = 0x0081,
    OutOfMemory = 0x0082,
    InternalError = 0x0084,
    TemporaryFailure = 0x0086,
}

impl Status {
    /// The message memcached sends as the body of an error with this
    /// status (empty for success).
    pub const fn message(self) -> &'static [u8] {
        match self {
            Status::Success => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
            Status::InternalError => b"Internal error",
            Status::TemporaryFailure => b"Temporary failure",
        }
    }
}

/// A request's header, the fields Larder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// [`REQUEST_MAGIC`] in a request.
    pub magic: u8,
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub body_len: u32,
    /// Echoed in the response, for the client to match it with the request.
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// The header at the front of `input`, if all of it is there. The magic
    /// is read, not checked.
    pub fn read(input: &[u8]) -> Option<Header> {
        let [magic, opcode, k0, k1, extras_len, _type, _v0, _v1, b0, b1, b2, b3, o0, o1, o2, o3, cas @ ..] =
            *input.first_chunk::<HEADER_BYTES>()?;
        Some(Header {
            magic,
            opcode,
            key_len: u16::from_be_bytes([k0, k1]),
            extras_len,
            body_len: u32::from_be_bytes([b0, b1, b2, b3]),
            opaque: u32::from_be_bytes([o0, o1, o2, o3]),
            cas: u64::from_be_bytes(cas),
        })
    }

    /// The value's bytes: the body after extras and key (0 if those claim
    /// more than the body).
    pub fn value_len(&self) -> u32 {
        self.body_len
            .saturating_sub(u32::from(self.extras_len) + u32::from(self.key_len))
    }
}

/// set, add or replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
}

/// What a request asks for. `quiet` is the opcode's quiet form: its success
/// gets no response (a quiet get's miss neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// get, getq, getk, getkq; with `touch` (an expiration), gat, gatq,
    /// gatk, gatkq.
    Get {
        key: &'a [u8],
        touch: Option<u32>,
        with_key: bool,
        quiet: bool,
    },
    /// set, add, replace and their quiet forms; a non-zero header cas makes
    /// any of them a compare-and-swap.
    Store {
        kind: StoreKind,
        key: &'a [u8],
        value: &'a [u8],
        flags: u32,
        exptime: u32,
        quiet: bool,
    },
    /// append, prepend and their quiet forms.
    Concat {
        append: bool,
        key: &'a [u8],
        value: &'a [u8],
        quiet: bool,
    },
    Delete {
        key: &'a [u8],
        quiet: bool,
    },
    /// increment, decrement and their quiet forms. A miss creates the
    /// counter at `initial` unless `exptime` is `0xffffffff`.
    Arithmetic {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: u32,
        quiet: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: u32,
    },
    /// flush, flushq, with an optional delay.
    Flush {
        delay: Option<u32>,
        quiet: bool,
    },
    /// The statistics group named by the key; empty for the general one.
    Stat {
        group: &'a [u8],
    },
    Noop,
    Version,
    /// quit answers, then closes; quitq closes without answering.
    Quit {
        quiet: bool,
    },
}

/// One whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    pub header: Header,
    pub command: Command<'a>,
}

/// What [`parse`] found at the front of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'a> {
    Complete {
        request: Request<'a>,
        /// The request's bytes, header included.
        frame_bytes: usize,
    },
    /// More bytes are needed; `frame_bytes` is the whole request's size
    /// once the header is in.
    Incomplete { frame_bytes: Option<usize> },
}

/// How a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The request's header; `None` for a first byte that is not the
    /// request magic, which memcached answers by closing at once.
    pub header: Option<Header>,
    /// The status to answer with (none without a header).
    pub status: Status,
    /// Bytes of the input to drop now.
    pub consumed: usize,
    /// Bytes to swallow as they arrive, after those.
    pub discard_bytes: u64,
    /// Close the connection once the answer is sent.
    pub close: bool,
    /// For a `set` refused as too large: the range of its key in the input,
    /// whose old value memcached removes so that no client reads it as if
    /// the update had won.
    pub set_key: Option<std::ops::Range<usize>>,
}

impl Refusal {
    fn invalid(header: Header) -> Refusal {
        Refusal {
            header: Some(header),
            status: Status::InvalidArguments,
            consumed: HEADER_BYTES,
            discard_bytes: 0,
            close: true,
            set_key: None,
        }
    }
}

/// Reads the binary request at the front of `input`.
pub fn parse<'a>(input: &'a [u8], limits: &Limits) -> Result<Parsed<'a>, Refusal> {
    let Some(header) = Header::read(input) else {
        if input.first().is_some_and(|&magic| magic != REQUEST_MAGIC) {
            return Err(bad_magic());
        }
        return Ok(Parsed::Incomplete { frame_bytes: None });
    };
    if header.magic != REQUEST_MAGIC {
        return Err(bad_magic());
    }
    let (extras_len, key_len) = (usize::from(header.extras_len), usize::from(header.key_len));
    let body_len = header.body_len as usize;
    if extras_len + key_len > body_len {
        // memcached's answer, odd as it is.
        return Err(Refusal {
            status: Status::UnknownCommand,
            ..Refusal::invalid(header)
        });
    }
    if key_len > KEY_BYTES_MAX {
        return Err(Refusal::invalid(header));
    }
    let Some(shape) = Shape::of(header.opcode) else {
        // Unknown, or one Larder does not offer (SASL, and verbosity,
        // which memcached does not either): answered and its body
        // swallowed. (memcached swallows the extras' and key's bytes twice
        // over, losing its place in the stream; Larder swallows the body
        // once.)
        return Err(Refusal {
            header: Some(header),
            status: Status::UnknownCommand,
            consumed: HEADER_BYTES,
            discard_bytes: u64::from(header.body_len),
            close: false,
            set_key: None,
        });
    };
    if !shape.fits(&header) {
        return Err(Refusal::invalid(header));
    }
    let value_len = body_len - extras_len - key_len;
    if shape.value == Value::Any && value_len > limits.item_bytes_max() {
        // Answered once the key is in, without buffering the value.
        let before_value = HEADER_BYTES + extras_len + key_len;
        if input.len() < before_value {
            return Ok(Parsed::Incomplete {
                frame_bytes: Some(before_value),
            });
        }
        let is_set = matches!(header.opcode, opcode::SET | opcode::SETQ);
        return Err(Refusal {
            header: Some(header),
            status: Status::TooLarge,
            consumed: before_value,
            discard_bytes: value_len as u64,
            close: false,
            set_key: is_set.then_some(HEADER_BYTES + extras_len..before_value),
        });
    }
    let frame_bytes = HEADER_BYTES + body_len;
    let Some(body) = input.get(HEADER_BYTES..frame_bytes) else {
        return Ok(Parsed::Incomplete {
            frame_bytes: Some(frame_bytes),
        });
    };
    let (extras, rest) = body.split_at(extras_len);
    let (key, value) = rest.split_at(key_len);
    let command = command(&header, extras, key, value);
    Ok(Parsed::Complete {
        request: Request { header, command },
        frame_bytes,
    })
}

fn bad_magic() -> Refusal {
    Refusal {
        header: None,
        status: Status::InvalidArguments,
        consumed: 0,
        discard_bytes: 0,
        close: true,
        set_key: None,
    }
}

/// Whether a part of the body must be there, must not, or may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Required,
    None,
    Optional,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    Any,
    None,
}

/// What memcached requires of an opcode's body; anything else is "Invalid
/// arguments" and closes the connection.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// The extras' lengths allowed.
    extras: &'static [u8],
    key: Key,
    value: Value,
}

impl Shape {
    fn of(code: u8) -> Option<Shape> {
        use opcode::*;
        let shape = |extras, key, value| Some(Shape { extras, key, value });
        match code {
            GET | GETQ | GETK | GETKQ | DELETE | DELETEQ => shape(&[0], Key::Required, Value::None),
            SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => shape(&[8], Key::Required, Value::Any),
            APPEND | APPENDQ | PREPEND | PREPENDQ => shape(&[0], Key::Required, Value::Any),
            INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => {
                shape(&[20], Key::Required, Value::None)
            }
            TOUCH | GAT | GATQ | GATK | GATKQ => shape(&[4], Key::Required, Value::None),
            FLUSH | FLUSHQ => shape(&[0, 4], Key::None, Value::None),
            STAT => shape(&[0], Key::Optional, Value::None),
            NOOP | VERSION | QUIT | QUITQ => shape(&[0], Key::None, Value::None),
            _ => None,
        }
    }

    fn fits(&self, header: &Header) -> bool {
        let key_fits = match self.key {
            Key::Required => header.key_len > 0,
            Key::None => header.key_len == 0,
            Key::Optional => true,
        };
        let value_fits = self.value == Value::Any || header.value_len() == 0;
        self.extras.contains(&header.extras_len) && key_fits && value_fits
    }
}

/// The command of a request whose body is split into its parts, and whose
/// shape [`Shape::fits`].
fn command<'a>(header: &Header, extras: &[u8], key: &'a [u8], value: &'a [u8]) -> Command<'a> {
    use opcode::*;
    let be32 = |at: usize| {
        extras
            .get(at..at + 4)
            .and_then(|bytes| bytes.try_into().ok())
            .map_or(0, u32::from_be_bytes)
    };
    let be64 = |at: usize| {
        extras
            .get(at..at + 8)
            .and_then(|bytes| bytes.try_into().ok())
            .map_or(0, u64::from_be_bytes)
    };
    let code = header.opcode;
    match code {
        GET | GETQ | GETK | GETKQ => Command::Get {
            key,
            touch: None,
            with_key: matches!(code, GETK | GETKQ),
            quiet: matches!(code, GETQ | GETKQ),
        },
        GAT | GATQ | GATK | GATKQ => Command::Get {
            key,
            touch: Some(be32(0)),
            with_key: matches!(code, GATK | GATKQ),
            quiet: matches!(code, GATQ | GATKQ),
        },
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => Command::Store {
            kind: match code {
                SET | SETQ => StoreKind::Set,
                ADD | ADDQ => StoreKind::Add,
                _ => StoreKind::Replace,
            },
            key,
            value,
            flags: be32(0),
            exptime: be32(4),
            quiet: matches!(code, SETQ | ADDQ | REPLACEQ),
        },
        APPEND | APPENDQ | PREPEND | PREPENDQ => Command::Concat {
            append: matches!(code, APPEND | APPENDQ),
            key,
            value,
            quiet: matches!(code, APPENDQ | PREPENDQ),
        },
        DELETE | DELETEQ => Command::Delete {
            key,
            quiet: code == DELETEQ,
        },
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => Command::Arithmetic {
            incr: matches!(code, INCREMENT | INCREMENTQ),
            key,
            delta: be64(0),
            initial: be64(8),
            exptime: be32(16),
            quiet: matches!(code, INCREMENTQ | DECREMENTQ),
        },
        TOUCH => Command::Touch {
            key,
            exptime: be32(0),
        },
        FLUSH | FLUSHQ => Command::Flush {
            delay: (extras.len() == 4).then(|| be32(0)),
            quiet: code == FLUSHQ,
        },
        STAT => Command::Stat { group: key },
        VERSION => Command::Version,
        QUIT | QUITQ => Command::Quit {
            quiet: code == QUITQ,
        },
        _ => Command::Noop,
    }
}

/// Appends a request: the form a client sends, for tools and tests that
/// speak to a server in the binary protocol.
pub fn write_request(
    out: &mut impl BufMut,
    code: u8,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    let body_len = extras.len() + key.len() + value.len();
    out.put_u8(REQUEST_MAGIC);
    out.put_u8(code);
    out.put_u16(u16::try_from(key.len()).unwrap_or(u16::MAX));
    out.put_u8(u8::try_from(extras.len()).unwrap_or(u8::MAX));
    out.put_u8(0); // data type: raw bytes
    out.put_u16(0); // vbucket
    out.put_u32(u32::try_from(body_len).unwrap_or(u32::MAX));
    out.put_u32(opaque);
    out.put_u64(cas);
    out.put_slice(extras);
    out.put_slice(key);
    out.put_slice(value);
}

/// Appends a response to the request whose header is `request`: the same
/// opcode and opaque, `status`, `cas`, and a body of `extras`, `key` and
/// `value`.
pub fn write_response(
    out: &mut impl BufMut,
    request: &Header,
    status: Status,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    // A key is at most 250 bytes, extras at most 20, and a value at most
    // the item limit, 1 GiB: every length fits its field.
    let body_len = extras.len() + key.len() + value.len();
    out.put_u8(RESPONSE_MAGIC);
    out.put_u8(request.opcode);
    out.put_u16(u16::try_from(key.len()).unwrap_or(u16::MAX));
    out.put_u8(u8::try_from(extras.len()).unwrap_or(u8::MAX));
    out.put_u8(0); // data type: raw bytes
    out.put_u16(status as u16);
    out.put_u32(u32::try_from(body_len).unwrap_or(u32::MAX));
    out.put_u32(request.opaque);
    out.put_u64(cas);
    out.put_slice(extras);
    out.put_slice(key);
    out.put_slice(value);
}

/// Bytes a response adds to its body: the header and the 4-byte flags.
pub const VALUE_RESPONSE_OVERHEAD_BYTES: usize = HEADER_BYTES + 4;

/// Appends an error response with the status's own message.
pub fn write_error(out: &mut impl BufMut, request: &Header, status: Status) {
    write_response(out, request, status, 0, &[], &[], status.message());
}

/// Appends an error response with `message` as its body (an engine's
/// error, say).
pub fn write_error_message(
    out: &mut impl BufMut,
    request: &Header,
    status: Status,
    message: &[u8],
) {
    write_response(out, request, status, 0, &[], &[], message);
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn request(code: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_request(&mut out, code, 0xdead_beef, 7, extras, key, value);
        out
    }

    fn complete(input: &[u8]) -> (Request<'_>, usize) {
        match parse(input, &Limits::default()) {
            Ok(Parsed::Complete {
                request,
                frame_bytes,
            }) => (request, frame_bytes),
            other => panic!("not a whole request: {other:?}"),
        }
    }

    #[test]
    fn a_set_is_read_with_its_flags_expiration_and_cas() {
        let mut extras = 0xfeed_u32.to_be_bytes().to_vec();
        extras.extend_from_slice(&300u32.to_be_bytes());
        let bytes = request(opcode::SETQ, &extras, b"key", b"value");
        let (request, frame) = complete(&bytes);
        assert_eq!(frame, bytes.len());
        assert_eq!(request.header.opaque, 0xdead_beef);
        assert_eq!(request.header.cas, 7);
        assert_eq!(
            request.command,
            Command::Store {
                kind: StoreKind::Set,
                key: b"key",
                value: b"value",
                flags: 0xfeed,
                exptime: 300,
                quiet: true,
            }
        );
    }

    #[test]
    fn a_request_is_incomplete_until_its_whole_body_is_in() {
        let bytes = request(opcode::GETK, &[], b"some-key", &[]);
        for cut in 0..bytes.len() {
            let expected = if cut < HEADER_BYTES {
                None
            } else {
                Some(bytes.len())
            };
            assert_eq!(
                parse(&bytes[..cut], &Limits::default()),
                Ok(Parsed::Incomplete {
                    frame_bytes: expected
                }),
                "cut at {cut}"
            );
        }
        let (request, _) = complete(&bytes);
        assert_eq!(
            request.command,
            Command::Get {
                key: b"some-key",
                touch: None,
                with_key: true,
                quiet: false
            }
        );
    }

    #[test]
    fn an_increment_reads_delta_initial_and_expiration() {
        let mut extras = 5u64.to_be_bytes().to_vec();
        extras.extend_from_slice(&u64::MAX.to_be_bytes());
        extras.extend_from_slice(&u32::MAX.to_be_bytes());
        let bytes = request(opcode::DECREMENTQ, &extras, b"n", &[]);
        let (request, _) = complete(&bytes);
        assert_eq!(
            request.command,
            Command::Arithmetic {
                incr: false,
                key: b"n",
                delta: 5,
                initial: u64::MAX,
                exptime: u32::MAX,
                quiet: true,
            }
        );
    }

    #[test]
    fn malformed_requests_are_invalid_arguments_and_close() {
        let long_key = [b'k'; KEY_BYTES_MAX + 1];
        let cases: [(&str, Vec<u8>); 7] = [
            ("get with extras", request(opcode::GET, &[0; 4], b"k", &[])),
            ("get without a key", request(opcode::GET, &[], b"", &[])),
            ("get with a value", request(opcode::GET, &[], b"k", b"v")),
            ("set without extras", request(opcode::SET, &[], b"k", b"v")),
            ("noop with a key", request(opcode::NOOP, &[], b"k", &[])),
            (
                "flush with 3 extras",
                request(opcode::FLUSH, &[0; 3], b"", &[]),
            ),
            (
                "a key over 250 bytes",
                request(opcode::GET, &[], &long_key, &[]),
            ),
        ];
        for (name, bytes) in cases {
            let refusal = parse(&bytes, &Limits::default()).expect_err(name);
            assert_eq!(refusal.status, Status::InvalidArguments, "{name}");
            assert!(refusal.close, "{name}");
        }
        // Extras and key longer than the body: memcached says "Unknown
        // command", and closes.
        let mut bytes = request(opcode::GET, &[], b"key", &[]);
        bytes[11] = 2;
        let refusal = parse(&bytes, &Limits::default()).expect_err("refused");
        assert_eq!(refusal.status, Status::UnknownCommand);
        assert!(refusal.close);
    }

    #[test]
    fn a_first_byte_that_is_not_the_magic_closes_without_an_answer() {
        for input in [&b"g"[..], b"get key\r\n", &[0x81; 24]] {
            let refusal = parse(input, &Limits::default()).expect_err("refused");
            assert_eq!(refusal.header, None);
            assert!(refusal.close);
        }
    }

    #[test]
    fn an_unknown_opcode_is_answered_and_its_body_swallowed() {
        let bytes = request(0x50, &[1, 2], b"key", b"body");
        let refusal = parse(&bytes[..HEADER_BYTES], &Limits::default()).expect_err("refused");
        assert_eq!(refusal.status, Status::UnknownCommand);
        assert_eq!(refusal.consumed, HEADER_BYTES);
        assert_eq!(refusal.discard_bytes, 9);
        assert!(!refusal.close);
    }

    #[test]
    fn a_value_over_the_limit_is_refused_once_its_key_is_in_and_never_buffered() {
        let limits = Limits::default()
            .with_item_bytes_max(1024)
            .expect("a valid limit");
        let mut bytes = request(opcode::SET, &[0; 8], b"big", &[b'v'; 1025]);
        bytes.truncate(HEADER_BYTES + 8 + 2);
        assert_eq!(
            parse(&bytes, &limits),
            Ok(Parsed::Incomplete {
                frame_bytes: Some(HEADER_BYTES + 11)
            })
        );
        bytes.push(b'g');
        let refusal = parse(&bytes, &limits).expect_err("refused");
        assert_eq!(refusal.status, Status::TooLarge);
        assert_eq!(refusal.consumed, HEADER_BYTES + 11);
        assert_eq!(refusal.discard_bytes, 1025);
        assert_eq!(refusal.set_key, Some(HEADER_BYTES + 8..HEADER_BYTES + 11));
        assert!(!refusal.close);
        // At the limit it is a request like any other.
        let at_limit = request(opcode::APPEND, &[], b"big", &[b'v'; 1024]);
        assert!(matches!(
            parse(&at_limit, &limits),
            Ok(Parsed::Complete { .. })
        ));
    }

    #[test]
    fn a_response_echoes_the_opcode_and_opaque_and_counts_its_body() {
        let bytes = request(opcode::GETK, &[], b"key", &[]);
        let (request, _) = complete(&bytes);
        let mut out = Vec::new();
        write_response(
            &mut out,
            &request.header,
            Status::Success,
            42,
            &[0, 0, 0, 9],
            b"key",
            b"value",
        );
        assert_eq!(out.len(), HEADER_BYTES + 4 + 3 + 5);
        assert_eq!(out[0], RESPONSE_MAGIC);
        assert_eq!(out[1], opcode::GETK);
        assert_eq!(&out[2..4], &3u16.to_be_bytes());
        assert_eq!(out[4], 4);
        assert_eq!(&out[6..8], &[0, 0]);
        assert_eq!(&out[8..12], &12u32.to_be_bytes());
        assert_eq!(&out[12..16], &0xdead_beef_u32.to_be_bytes());
        assert_eq!(&out[16..24], &42u64.to_be_bytes());
        assert_eq!(&out[24..], b"\0\0\0\x09keyvalue");

        let mut out = Vec::new();
        write_error(&mut out, &request.header, Status::KeyNotFound);
        assert_eq!(&out[6..8], &[0, 1]);
        assert_eq!(&out[HEADER_BYTES..], b"Not found");
    }
}
