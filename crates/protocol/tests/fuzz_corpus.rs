//! The fuzz seed corpora (`fuzz/corpus/protocol_parse`, and
//! `fuzz/corpus/binary_parse` for the binary protocol) hold real requests:
//! each seed must parse into at least one complete request, so the fuzzer
//! starts from inputs that reach deep into every command's parser. Seeds
//! named `error_*` are deliberately malformed and must be refused.

use std::path::Path;

use larder_protocol::{parse, Limits, Parsed};

/// Parses `input` as a pipeline and counts complete requests, stopping at
/// the first error or incomplete frame.
fn complete_requests(mut input: &[u8]) -> usize {
    let mut count = 0;
    while let Ok(Parsed::Complete { frame_bytes, .. }) = parse(input, &Limits::DEFAULT) {
        count += 1;
        input = input.get(frame_bytes..).unwrap_or_default();
    }
    count
}

/// The seeds of the fuzz target `target`: each one's path, its bytes, and
/// whether it is named as one to be refused (`error_*`). At least a dozen.
fn seeds(target: &str) -> Vec<(std::path::PathBuf, Vec<u8>, bool)> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let seeds: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", corpus.display()))
        .filter_map(Result::ok)
        .map(|entry| {
            let seed = entry.path();
            let input = std::fs::read(&seed)
                .unwrap_or_else(|error| panic!("cannot read {}: {error}", seed.display()));
            let is_error_seed = seed
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("error_"));
            (seed, input, is_error_seed)
        })
        .collect();
    assert!(seeds.len() >= 12, "the corpus should hold a dozen seeds");
    seeds
}

#[test]
fn every_seed_holds_a_complete_request() {
    for (seed, input, is_error_seed) in seeds("protocol_parse") {
        if is_error_seed {
            assert!(
                parse(&input, &Limits::DEFAULT).is_err(),
                "{} is accepted",
                seed.display()
            );
        } else {
            assert!(
                complete_requests(&input) >= 1,
                "{} parses to nothing",
                seed.display()
            );
        }
    }
}

/// The binary parser's seeds (`fuzz/corpus/binary_parse`), by the same
/// rule: each holds a complete request, or is named `error_*` and refused.
#[test]
fn every_binary_seed_holds_a_complete_request() {
    use larder_protocol::binary;
    // With the fuzz target's item limit, under which the large seed is
    // refused.
    let limits = Limits::DEFAULT
        .with_item_bytes_max(1024)
        .unwrap_or_default();
    for (seed, input, is_error_seed) in seeds("binary_parse") {
        let parsed = binary::parse(&input, &limits);
        if is_error_seed {
            assert!(parsed.is_err(), "{} is accepted", seed.display());
        } else {
            assert!(
                matches!(parsed, Ok(binary::Parsed::Complete { .. })),
                "{} is not a complete request: {parsed:?}",
                seed.display()
            );
        }
    }
}
