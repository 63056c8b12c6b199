//! Replies to bad (and odd) input, as a running memcached 1.6.18 gave them.
//!
//! Each row was sent to `memcached -p <port> -U 0 -l 127.0.0.1` over a fresh
//! connection, and the first reply recorded. The parser must give the same
//! reply, consume the same bytes, swallow the same data, and close the
//! connection when memcached did. (Where memcached's next reply came from the
//! leftover bytes being parsed as a new command, e.g. the `ERROR` after a
//! bad data chunk, the row records how many bytes the first verdict
//! consumed, which is what leaves those bytes behind.)

use larder_protocol::{parse, Limits, ParseError, Parsed};

/// What memcached did with the first request of the input.
#[derive(Debug)]
enum Seen {
    /// Answered with this line (`None`: stayed silent), consumed `consumed`
    /// bytes, then swallowed `discard` more.
    Error {
        reply: Option<&'static [u8]>,
        consumed: usize,
        discard: u64,
    },
    /// Closed the connection.
    Closed,
    /// Accepted it as a request spanning `frame` bytes.
    Accepted { frame: usize },
}

fn error(reply: &'static [u8], consumed: usize) -> Seen {
    Seen::Error {
        reply: Some(reply),
        consumed,
        discard: 0,
    }
}

fn silent(consumed: usize) -> Seen {
    Seen::Error {
        reply: None,
        consumed,
        discard: 0,
    }
}

/// "All of the input": for rows that are one command line.
const WHOLE: usize = usize::MAX;

const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const ERROR: &[u8] = b"ERROR\r\n";

fn check(input: &[u8], seen: &Seen) {
    let outcome = parse(input, &Limits::DEFAULT);
    let shown = input.escape_ascii().to_string();
    match (seen, outcome) {
        (
            Seen::Error {
                reply,
                consumed,
                discard,
            },
            Err(got),
        ) => {
            assert_eq!(got.reply(), *reply, "reply to {shown}");
            let consumed = if *consumed == WHOLE {
                input.len()
            } else {
                *consumed
            };
            assert_eq!(got.consumed, consumed, "bytes consumed by {shown}");
            assert_eq!(got.discard_bytes, *discard, "bytes swallowed after {shown}");
            assert!(!got.closes_connection(), "{shown} must not close");
        }
        (Seen::Closed, Err(ParseError { .. })) => {
            let got = parse(input, &Limits::DEFAULT).err();
            assert!(
                got.is_some_and(|e| e.closes_connection() && e.reply().is_none()),
                "{shown}"
            );
        }
        (Seen::Accepted { frame }, Ok(Parsed::Complete { frame_bytes, .. })) => {
            assert_eq!(frame_bytes, *frame, "frame of {shown}");
        }
        (seen, got) => panic!("{shown}: memcached did {seen:?}, parser gave {got:?}"),
    }
}

fn with_key(prefix: &[u8], key_bytes: usize, suffix: &[u8]) -> Vec<u8> {
    [prefix, &vec![b'k'; key_bytes], suffix].concat()
}

#[test]
fn text_protocol_errors_match_memcached() {
    let rows: Vec<(Vec<u8>, Seen)> = vec![
        (
            b"set a 0 0 1\r\nabc\r\n".to_vec(),
            error(b"CLIENT_ERROR bad data chunk\r\n", 16),
        ),
        (b"set a 0 0 1 noreply\r\nabc\r\n".to_vec(), silent(24)),
        (b"set a 0 0 -1\r\n".to_vec(), error(BAD_FORMAT, 14)),
        (b"set a 0 0 abc\r\n".to_vec(), error(BAD_FORMAT, 15)),
        (b"set a 0 0 abc noreply\r\n".to_vec(), silent(23)),
        (b"set a 0 0\r\n".to_vec(), error(ERROR, 11)),
        (b"set a 0 0 1 noreply extra\r\n".to_vec(), error(ERROR, 27)),
        (
            with_key(b"set ", 251, b" 0 0 1\r\n"),
            error(BAD_FORMAT, 263),
        ),
        (
            with_key(b"set ", 250, b" 0 0 1\r\nx\r\n"),
            Seen::Accepted { frame: 265 },
        ),
        (
            b"set a 0 0 2000000\r\n".to_vec(),
            Seen::Error {
                reply: Some(b"SERVER_ERROR object too large for cache\r\n"),
                consumed: 19,
                discard: 2_000_002,
            },
        ),
        (
            b"set a 0 0 2000000 noreply\r\n".to_vec(),
            Seen::Error {
                reply: None,
                consumed: 27,
                discard: 2_000_002,
            },
        ),
        (b"set a -1 0 1\r\n".to_vec(), error(BAD_FORMAT, 14)),
        (b"set a 0 0 2147483648\r\n".to_vec(), error(BAD_FORMAT, 22)),
        (
            b"set a 0 2147483648 1\r\nx\r\n".to_vec(),
            Seen::Accepted { frame: 25 },
        ),
        (
            b"set a 0 0 4294967297\r\nx\r\n".to_vec(),
            Seen::Accepted { frame: 25 },
        ),
        (
            b"set a +5 0 1\r\nx\r\n".to_vec(),
            Seen::Accepted { frame: 17 },
        ),
        (b"set a 0 0 1\nx\r\n".to_vec(), Seen::Accepted { frame: 15 }),
        (
            b"set a 0 0 1\r\nx\nv".to_vec(),
            error(b"CLIENT_ERROR bad data chunk\r\n", 16),
        ),
        (b"set\ta 0 0 1\r\n".to_vec(), error(ERROR, 13)),
        (
            b"set a 0\t 0 1\r\nx\r\n".to_vec(),
            Seen::Accepted { frame: 17 },
        ),
        (
            b"set a 0 0 1\r\r\nx\r\n".to_vec(),
            Seen::Accepted { frame: 17 },
        ),
        (b"cas a 0 0 1\r\n".to_vec(), error(ERROR, 13)),
        (b"cas a 0 0 1 abc\r\n".to_vec(), error(BAD_FORMAT, 17)),
        (b"cas a 0 0 1 -1\r\n".to_vec(), error(BAD_FORMAT, 16)),
        (
            b"cas a 0 0 1 18446744073709551616\r\n".to_vec(),
            error(BAD_FORMAT, 34),
        ),
        (b"get\r\n".to_vec(), error(ERROR, 5)),
        (b"get \r\n".to_vec(), error(ERROR, 6)),
        (b"gets\r\n".to_vec(), error(ERROR, 6)),
        (with_key(b"get a ", 251, b"\r\n"), error(BAD_FORMAT, 259)),
        (b"gat\r\n".to_vec(), error(ERROR, 5)),
        (b"gat 10\r\n".to_vec(), Seen::Accepted { frame: 8 }),
        (
            b"gat abc a\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid exptime argument\r\n", 11),
        ),
        (b"delete\r\n".to_vec(), error(ERROR, 8)),
        (b"delete a 0\r\n".to_vec(), Seen::Accepted { frame: 12 }),
        (
            b"delete a 1\r\n".to_vec(),
            error(
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
                12,
            ),
        ),
        (
            b"delete a 0 0\r\n".to_vec(),
            error(
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
                14,
            ),
        ),
        (b"delete a b c d\r\n".to_vec(), error(ERROR, 16)),
        (b"incr\r\n".to_vec(), error(ERROR, 6)),
        (b"incr a\r\n".to_vec(), error(ERROR, 8)),
        (
            b"incr a abc\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid numeric delta argument\r\n", 12),
        ),
        (
            b"incr a -1\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid numeric delta argument\r\n", 11),
        ),
        (
            b"incr a 18446744073709551616\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid numeric delta argument\r\n", 29),
        ),
        (b"incr a abc noreply\r\n".to_vec(), silent(20)),
        (b"touch a\r\n".to_vec(), error(ERROR, 9)),
        (
            b"touch a abc\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid exptime argument\r\n", 13),
        ),
        (
            b"flush_all abc\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid exptime argument\r\n", 15),
        ),
        (b"flush_all 0 0\r\n".to_vec(), Seen::Accepted { frame: 15 }),
        (b"flush_all 1 2 3\r\n".to_vec(), error(ERROR, 17)),
        (b"version foo\r\n".to_vec(), Seen::Accepted { frame: 13 }),
        (b"verbosity\r\n".to_vec(), error(ERROR, 11)),
        (b"verbosity abc\r\n".to_vec(), error(BAD_FORMAT, 15)),
        (b"verbosity 1 2 3\r\n".to_vec(), error(ERROR, 17)),
        (b"quit foo\r\n".to_vec(), Seen::Accepted { frame: 10 }),
        (b"foo\r\n".to_vec(), error(ERROR, 5)),
        (b"\r\n".to_vec(), error(ERROR, 2)),
        (b"a\r\n".to_vec(), error(ERROR, 3)),
        (b"GET a\r\n".to_vec(), error(ERROR, 7)),
        (b"GET / HTTP/1.1\r\n".to_vec(), Seen::Closed),
        (vec![b'x'; 3000], Seen::Closed),
        (b" version\r\n".to_vec(), Seen::Accepted { frame: 10 }),
    ];
    for (input, seen) in &rows {
        check(input, seen);
    }
}

#[test]
fn meta_protocol_errors_match_memcached() {
    let opaque_33 = [&b"mg a O"[..], &[b'9'; 32], b"\r\n"].concat();
    let rows: Vec<(Vec<u8>, Seen)> = vec![
        (b"mn foo\r\n".to_vec(), Seen::Accepted { frame: 8 }),
        (b"mx\r\n".to_vec(), error(ERROR, 4)),
        (b"mg\r\n".to_vec(), error(ERROR, 4)),
        (
            b"mg a v v\r\n".to_vec(),
            error(b"CLIENT_ERROR duplicate flag\r\n", 10),
        ),
        (
            b"mg a zz\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid flag\r\n", 9),
        ),
        (
            opaque_33,
            error(b"CLIENT_ERROR opaque token too long\r\n", 40),
        ),
        (
            b"mg a T\r\n".to_vec(),
            error(b"CLIENT_ERROR bad token in command line format\r\n", 8),
        ),
        (
            b"mg a v k c f s t h l q u O1 T1 R1 N1 P L I D1\r\n".to_vec(),
            error(b"CLIENT_ERROR options flags are too long\r\n", WHOLE),
        ),
        (
            b"mg a v k c f s t h l q u O1 T1 R1 N1 M\r\n".to_vec(),
            error(b"CLIENT_ERROR incorrect length for M token\r\n", 40),
        ),
        (with_key(b"mg ", 251, b" v\r\n"), error(BAD_FORMAT, 258)),
        (
            b"mg YQ b v\r\n".to_vec(),
            error(b"CLIENT_ERROR error decoding key\r\n", 11),
        ),
        (b"mg a Fy\r\n".to_vec(), error(BAD_FORMAT, 9)),
        (
            b"mg a Dabc\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid numeric delta value\r\n", 11),
        ),
        (
            b"mg a Jabc\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid numeric initial value\r\n", 11),
        ),
        (
            b"mg a \x80\r\n".to_vec(),
            error(b"CLIENT_ERROR duplicate flag\r\n", 8),
        ),
        (b"ms a\r\n".to_vec(), error(BAD_FORMAT, 6)),
        (b"ms a abc\r\n".to_vec(), error(BAD_FORMAT, 10)),
        (b"ms a S1\r\n".to_vec(), error(BAD_FORMAT, 9)),
        (
            b"ms a 1 S1\r\n".to_vec(),
            Seen::Error {
                reply: Some(b"CLIENT_ERROR invalid flag\r\n"),
                consumed: 11,
                discard: 3,
            },
        ),
        (
            b"ms a 1 Mx\r\n".to_vec(),
            Seen::Error {
                reply: Some(b"CLIENT_ERROR invalid mode for ms M token\r\n"),
                consumed: 11,
                discard: 3,
            },
        ),
        (
            b"ms a 1 Fabc\r\n".to_vec(),
            Seen::Error {
                reply: Some(BAD_FORMAT),
                consumed: 13,
                discard: 3,
            },
        ),
        (
            b"ms a 1 q\r\nabc\r\n".to_vec(),
            error(b"CLIENT_ERROR bad data chunk\r\n", 13),
        ),
        (
            b"ms a 2000000 q\r\n".to_vec(),
            Seen::Error {
                reply: Some(b"SERVER_ERROR object too large for cache\r\n"),
                consumed: 16,
                discard: 2_000_002,
            },
        ),
        (
            b"ms zz 1 k c f s t h l O1 T1 R1 N1 P L D1 J1 u v\r\n".to_vec(),
            error(b"CLIENT_ERROR options flags too long\r\n", WHOLE),
        ),
        (b"md\r\n".to_vec(), error(ERROR, 4)),
        (
            b"md a zz\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid or duplicate flag\r\n", 9),
        ),
        (
            b"md a Cabc\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid or duplicate flag\r\n", 11),
        ),
        (b"ma\r\n".to_vec(), error(ERROR, 4)),
        (
            b"ma n Dabc\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid or duplicate flag\r\n", 11),
        ),
        (
            b"ma n Mx\r\n".to_vec(),
            error(b"CLIENT_ERROR invalid mode for ma M token\r\n", 9),
        ),
        (
            b"ma n k c f s t h l O1 T1 R1 N1 P L D1 J1 u v F1\r\n".to_vec(),
            error(b"CLIENT_ERROR options flags too long\r\n", WHOLE),
        ),
        (b"me\r\n".to_vec(), error(BAD_FORMAT, 4)),
        (with_key(b"me ", 251, b"\r\n"), error(BAD_FORMAT, 256)),
    ];
    for (input, seen) in &rows {
        check(input, seen);
    }
}

#[test]
fn flags_of_later_memcached_releases_are_refused_as_1_6_18_refuses_them() {
    // Later 1.6 releases accept E (set the new cas) everywhere and x (drop
    // the value, keep the item) on md. Larder does neither, and refusing
    // them beats storing a cas or deleting an item the client did not ask
    // for.
    check(
        b"mg a E5\r\n",
        &error(b"CLIENT_ERROR invalid flag\r\n", WHOLE),
    );
    check(
        b"md a x\r\n",
        &error(b"CLIENT_ERROR invalid or duplicate flag\r\n", WHOLE),
    );
}
