//! Decoders of on-disk formats over arbitrary bytes: a log record, a segment
//! header, a hint file. None may panic or allocate what a length field
//! merely claims.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = larder_engine::record::decode(data) {
        assert!(header.record_len() <= data.len() as u64);
    }
    let _ = larder_engine::record::decode_header(data);
    let _ = larder_engine::segment::SegmentHeader::decode(data, Path::new("fuzz.seg"));
    if let Ok(hint) = larder_engine::hint::decode(data, Path::new("fuzz.hint")) {
        assert!(hint.entries.len() <= data.len());
    }
});
