//! Fuzzes `larder_protocol::parse` the way a connection drives it.
//!
//! The input is treated as a stream of bytes arriving on one connection: the
//! target parses, consumes complete requests, applies each error's
//! consume/discard/close recipe, and stops when more bytes are needed. It
//! also re-parses every prefix of the first frame to check that framing does
//! not depend on how bytes arrive. Small limits make the size checks
//! reachable; inputs are bounded by libFuzzer's `-max_len`.
#![no_main]

use larder_protocol::{parse, Limits, Parsed};
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
                assert!(frame_bytes > 0 && frame_bytes <= rest.len());
                rest = rest.get(frame_bytes..).unwrap_or_default();
            }
            Ok(Parsed::Incomplete { frame_bytes }) => {
                if let Some(frame_bytes) = frame_bytes {
                    assert!(frame_bytes > rest.len());
                    assert!(frame_bytes <= limits.frame_bytes_max());
                }
                break;
            }
            Err(error) => {
                assert!(error.consumed <= rest.len());
                if error.closes_connection() {
                    break;
                }
                assert!(error.consumed > 0, "a non-closing error must make progress");
                let discard = usize::try_from(error.discard_bytes).unwrap_or(usize::MAX);
                let skip = error.consumed.saturating_add(discard).min(rest.len());
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
    assert_eq!(
        parse(whole, limits),
        Ok(Parsed::Complete { request, frame_bytes })
    );
}
