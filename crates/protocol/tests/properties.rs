//! Property tests of the parser as a whole: it never panics, framing does
//! not depend on how bytes arrive, and pipelined requests parse in turn.
//!
//! The generators produce well-formed requests of every command; values are
//! arbitrary bytes (including `\r\n`) so data blocks are framed by length,
//! never by searching.

use larder_protocol::{parse, Limits, Parsed, Request};
use proptest::prelude::*;

const KEY_BYTES: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:.-";

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(KEY_BYTES), 1..=250)
}

fn short_key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(KEY_BYTES), 1..=16)
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..300)
}

fn noreply() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", " noreply"])
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn storage() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec!["set", "add", "replace", "append", "prepend", "cas"]),
        key(),
        any::<u32>(),
        any::<i32>(),
        value(),
        any::<u64>(),
        noreply(),
    )
        .prop_map(|(name, key, flags, exptime, value, cas, noreply)| {
            let cas = if name == "cas" {
                format!(" {cas}")
            } else {
                String::new()
            };
            let numbers = format!(" {flags} {exptime} {}{cas}{noreply}\r\n", value.len());
            cat(&[
                name.as_bytes(),
                b" ",
                &key,
                numbers.as_bytes(),
                &value,
                b"\r\n",
            ])
        })
}

fn retrieval() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec!["get", "gets", "gat 10", "gats -1"]),
        prop::collection::vec(short_key(), 1..40),
    )
        .prop_map(|(name, keys)| {
            let mut line = name.as_bytes().to_vec();
            for key in keys {
                line.push(b' ');
                line.extend_from_slice(&key);
            }
            line.extend_from_slice(b"\r\n");
            line
        })
}

fn simple() -> impl Strategy<Value = Vec<u8>> {
    (
        key(),
        any::<u64>(),
        any::<i32>(),
        noreply(),
        prop::sample::select(vec![0usize, 1, 2, 3, 4, 5, 6, 7]),
    )
        .prop_map(|(key, number, exptime, noreply, which)| {
            let line = match which {
                0 => format!("delete {}{noreply}\r\n", String::from_utf8_lossy(&key)),
                1 => format!(
                    "incr {} {number}{noreply}\r\n",
                    String::from_utf8_lossy(&key)
                ),
                2 => format!(
                    "decr {} {number}{noreply}\r\n",
                    String::from_utf8_lossy(&key)
                ),
                3 => format!(
                    "touch {} {exptime}{noreply}\r\n",
                    String::from_utf8_lossy(&key)
                ),
                4 => format!("flush_all {exptime}{noreply}\r\n"),
                5 => "stats items\r\n".to_string(),
                6 => format!("verbosity {}{noreply}\r\n", number % 4),
                _ => "version\r\n".to_string(),
            };
            line.into_bytes()
        })
}

fn meta() -> impl Strategy<Value = Vec<u8>> {
    (
        key(),
        value(),
        prop::sample::select(vec![
            "",
            " v",
            " k c f s t",
            " q O123 k",
            " T30 N10 R5 h l u",
            " b",
        ]),
        prop::sample::select(vec!["", " MS", " ME", " MA", " MP", " MR"]),
        prop::sample::select(vec![0usize, 1, 2, 3, 4]),
    )
        .prop_map(|(key, value, flags, mode, which)| {
            // A `b` flag needs a base64 key: "Zm9v" is "foo".
            let key: &[u8] = if flags == " b" { b"Zm9v" } else { &key };
            match which {
                0 => cat(&[b"mg ", key, flags.as_bytes(), b"\r\n"]),
                1 => {
                    let line = format!(" {}{flags}{mode} F3 C9\r\n", value.len());
                    cat(&[b"ms ", key, line.as_bytes(), &value, b"\r\n"])
                }
                2 => cat(&[b"md ", key, flags.as_bytes(), b" I\r\n"]),
                3 => cat(&[b"ma ", key, flags.as_bytes(), b" D7 J1 MD\r\n"]),
                _ => b"mn\r\n".to_vec(),
            }
        })
}

fn request() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![storage(), retrieval(), simple(), meta()]
}

/// Parses a buffer expected to hold exactly one complete request.
fn parse_whole(buf: &[u8]) -> Request<'_> {
    match parse(buf, &Limits::DEFAULT) {
        Ok(Parsed::Complete {
            request,
            frame_bytes,
        }) => {
            assert_eq!(frame_bytes, buf.len(), "frame must span the whole request");
            request
        }
        other => panic!(
            "{:?} did not parse: {other:?}",
            buf.escape_ascii().to_string()
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic_and_stay_in_bounds(buf in prop::collection::vec(any::<u8>(), 0..3000)) {
        let limits = Limits::DEFAULT;
        match parse(&buf, &limits) {
            Ok(Parsed::Complete { frame_bytes, .. }) => {
                prop_assert!(frame_bytes > 0 && frame_bytes <= buf.len());
            }
            Ok(Parsed::Incomplete { frame_bytes: Some(frame_bytes) }) => {
                prop_assert!(frame_bytes > buf.len());
                prop_assert!(frame_bytes <= limits.frame_bytes_max());
            }
            Ok(Parsed::Incomplete { frame_bytes: None }) => {}
            Err(error) => prop_assert!(error.consumed <= buf.len()),
        }
    }

    #[test]
    fn mangled_requests_never_panic(
        request in request(),
        noise in prop::collection::vec(any::<u8>(), 1..8),
        at in any::<prop::sample::Index>(),
    ) {
        let mut buf = request;
        let position = at.index(buf.len());
        buf.splice(position..position, noise);
        let outcome = parse(&buf, &Limits::DEFAULT);
        if let Err(error) = outcome {
            prop_assert!(error.consumed <= buf.len());
        }
    }

    #[test]
    fn a_request_split_anywhere_is_incomplete_until_whole(request in request()) {
        let whole = parse_whole(&request);
        let mut known_frame = None;
        for end in 0..request.len() {
            let prefix = request.get(..end).unwrap_or_default();
            match parse(prefix, &Limits::DEFAULT) {
                Ok(Parsed::Incomplete { frame_bytes }) => {
                    if let Some(frame_bytes) = frame_bytes {
                        prop_assert_eq!(frame_bytes, request.len());
                        known_frame = Some(frame_bytes);
                    } else {
                        // Once known, the frame length stays known.
                        prop_assert_eq!(known_frame, None);
                    }
                }
                other => prop_assert!(false, "prefix of {} bytes gave {:?}", end, other),
            }
        }
        prop_assert_eq!(parse_whole(&request), whole);
    }

    #[test]
    fn pipelined_requests_parse_one_after_another(requests in prop::collection::vec(request(), 1..8)) {
        let pipeline: Vec<u8> = requests.concat();
        let mut rest = &pipeline[..];
        for single in &requests {
            match parse(rest, &Limits::DEFAULT) {
                Ok(Parsed::Complete { request, frame_bytes }) => {
                    prop_assert_eq!(frame_bytes, single.len());
                    prop_assert_eq!(request, parse_whole(single));
                    rest = rest.get(frame_bytes..).unwrap_or_default();
                }
                other => prop_assert!(false, "pipeline step gave {:?}", other),
            }
        }
        prop_assert!(rest.is_empty());
        prop_assert_eq!(parse(rest, &Limits::DEFAULT), Ok(Parsed::Incomplete { frame_bytes: None }));
    }
}
