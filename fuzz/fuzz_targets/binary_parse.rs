//! Fuzzes `larder_protocol::binary::parse` the way a connection in the
//! binary protocol drives it.
//!
//! The input is a stream of bytes arriving on one connection: the target
//! parses, consumes complete requests, applies each refusal's
//! consume/discard/close recipe, and stops when more bytes are needed. It
//! also re-parses every prefix of the first frame, to check that framing
//! does not depend on how bytes arrive. A small item limit makes the size
//! check reachable.
#![no_main]

use larder_protocol::binary::{parse, Parsed};
use larder_protocol::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::DEFAULT
        .with_item_bytes_max(1024)
        .unwrap_or_default();
    check_prefixes(data, &limits);
    let mut rest = data;
    // Every step consumes at least one byte or stops, so this terminates.
    loop {
        match parse(rest, &limits) {
            Ok(Parsed::Complete { frame_bytes, .. }) => {
                assert!(frame_bytes >= 24 && frame_bytes <= rest.len());
                rest = rest.get(frame_bytes..).unwrap_or_default();
            }
            Ok(Parsed::Incomplete { frame_bytes }) => {
                if let Some(frame_bytes) = frame_bytes {
                    assert!(frame_bytes > rest.len());
                    // Nothing over the item limit (and its key and extras)
                    // is ever buffered.
                    assert!(frame_bytes <= 24 + 20 + 250 + limits.item_bytes_max());
                }
                break;
            }
            Err(refusal) => {
                assert!(refusal.consumed <= rest.len());
                if refusal.close {
                    break;
                }
                assert!(refusal.consumed > 0, "a refusal that keeps the connection must make progress");
                if let Some(key) = &refusal.set_key {
                    assert!(key.end <= refusal.consumed);
                }
                let discard = usize::try_from(refusal.discard_bytes).unwrap_or(usize::MAX);
                let skip = refusal.consumed.saturating_add(discard).min(rest.len());
                rest = rest.get(skip..).unwrap_or_default();
            }
        }
    }
});

/// A complete first request must look incomplete at every shorter prefix.
fn check_prefixes(data: &[u8], limits: &Limits) {
    let Ok(Parsed::Complete { frame_bytes, request }) = parse(data, limits) else {
        return;
    };
    for end in 0..frame_bytes {
        let prefix = data.get(..end).unwrap_or_default();
        assert!(
            matches!(parse(prefix, limits), Ok(Parsed::Incomplete { .. })),
            "prefix of {end} bytes of a {frame_bytes}-byte frame was not incomplete"
        );
    }
    let whole = data.get(..frame_bytes).unwrap_or_default();
    assert_eq!(parse(whole, limits), Ok(Parsed::Complete { request, frame_bytes }));
}
