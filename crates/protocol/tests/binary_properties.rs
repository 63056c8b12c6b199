//! Property tests of the binary protocol's parser: it never panics, a
//! request is incomplete until its last byte and whole with it, pipelined
//! requests parse in turn, and what comes out is what went in.

use larder_protocol::binary::{
    opcode, parse, write_request, Command, Parsed, HEADER_BYTES, REQUEST_MAGIC,
};
use larder_protocol::Limits;
use proptest::prelude::*;

/// A well-formed request's parts.
#[derive(Debug, Clone)]
struct Sent {
    opcode: u8,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
    opaque: u32,
    cas: u64,
}

impl Sent {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let (extras, key, value) = (&self.extras, &self.key, &self.value);
        write_request(
            &mut out,
            self.opcode,
            self.opaque,
            self.cas,
            extras,
            key,
            value,
        );
        out
    }
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // Any bytes: the binary protocol's keys are counted, not delimited.
    prop::collection::vec(any::<u8>(), 1..=250)
}

fn sent() -> impl Strategy<Value = Sent> {
    let keyed = prop::sample::select(vec![
        (opcode::GET, 0usize, false),
        (opcode::GETKQ, 0, false),
        (opcode::SET, 8, true),
        (opcode::ADDQ, 8, true),
        (opcode::APPEND, 0, true),
        (opcode::DELETE, 0, false),
        (opcode::INCREMENT, 20, false),
        (opcode::DECREMENTQ, 20, false),
        (opcode::TOUCH, 4, false),
        (opcode::GATKQ, 4, false),
    ]);
    (
        keyed,
        key(),
        prop::collection::vec(any::<u8>(), 20),
        prop::collection::vec(any::<u8>(), 0..400),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(
            |((code, extras_len, has_value), key, extras, value, opaque, cas)| Sent {
                opcode: code,
                extras: extras.get(..extras_len).unwrap_or_default().to_vec(),
                key,
                value: if has_value { value } else { Vec::new() },
                opaque,
                cas,
            },
        )
}

/// The key and value a command carries.
fn key_and_value<'a>(command: &Command<'a>) -> (&'a [u8], &'a [u8]) {
    match *command {
        Command::Get { key, .. }
        | Command::Delete { key, .. }
        | Command::Arithmetic { key, .. }
        | Command::Touch { key, .. } => (key, &[]),
        Command::Store { key, value, .. } | Command::Concat { key, value, .. } => (key, value),
        other => panic!("a keyed request parsed as {other:?}"),
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse(&input, &Limits::DEFAULT);
        let mut magic = input.clone();
        if let Some(first) = magic.first_mut() {
            *first = REQUEST_MAGIC;
        }
        let _ = parse(&magic, &Limits::DEFAULT);
    }

    #[test]
    fn a_request_is_whole_only_with_its_last_byte(sent in sent()) {
        let bytes = sent.bytes();
        for cut in 0..bytes.len() {
            let expected = (cut >= HEADER_BYTES).then_some(bytes.len());
            prop_assert_eq!(
                parse(bytes.get(..cut).unwrap_or_default(), &Limits::DEFAULT),
                Ok(Parsed::Incomplete { frame_bytes: expected })
            );
        }
        let Ok(Parsed::Complete { request, frame_bytes }) = parse(&bytes, &Limits::DEFAULT) else {
            panic!("not whole: {sent:?}");
        };
        prop_assert_eq!(frame_bytes, bytes.len());
        prop_assert_eq!(request.header.opcode, sent.opcode);
        prop_assert_eq!(request.header.opaque, sent.opaque);
        prop_assert_eq!(request.header.cas, sent.cas);
        let (key, value) = key_and_value(&request.command);
        prop_assert_eq!(key, &sent.key[..]);
        prop_assert_eq!(value, &sent.value[..]);
    }

    #[test]
    fn pipelined_requests_parse_in_turn(requests in prop::collection::vec(sent(), 1..8)) {
        let input: Vec<u8> = requests.iter().flat_map(Sent::bytes).collect();
        let mut at = 0;
        for sent in &requests {
            let Ok(Parsed::Complete { request, frame_bytes }) =
                parse(input.get(at..).unwrap_or_default(), &Limits::DEFAULT)
            else {
                panic!("request {sent:?} is not whole in the pipeline");
            };
            prop_assert_eq!(request.header.opaque, sent.opaque);
            prop_assert_eq!(key_and_value(&request.command).0, &sent.key[..]);
            at += frame_bytes;
        }
        prop_assert_eq!(at, input.len());
    }
}
