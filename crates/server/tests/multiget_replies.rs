#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! A `get` of many keys is answered in parts, every key once and in order.
//!
//! The story: a connection stopped handling requests once its replies
//! passed `WRITE_BUFFER_BYTES_SOFT_MAX`, but only between requests. One
//! `get` line naming a 1 MiB value fifty thousand times (its 256 KiB line
//! limit allows that) was answered into one buffer: 50 GiB, or the
//! server's death by out-of-memory. Now such a request stops once its
//! replies pass the limit, they are sent, and the same request carries on
//! with its next key. These tests check that the parts add up to exactly
//! what one pass would have answered; `tests/python/test_hostile_memory.py`
//! checks the memory.

mod common;

use common::{Raw, TestServer};
use larder_engine::Durability;

/// Big enough that a few of them pass the 4 MiB soft limit of replies.
const BIG_VALUE_BYTES: usize = 512 * 1024;

fn big_value(seed: u8) -> Vec<u8> {
    (0..BIG_VALUE_BYTES)
        .map(|at| (at as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn set(raw: &mut Raw, key: &str, flags: u32, value: &[u8]) {
    let mut request = format!("set {key} {flags} 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(value);
    request.extend_from_slice(b"\r\n");
    raw.call(&request, b"STORED\r\n");
}

fn value_reply(key: &str, flags: u32, value: &[u8], cas: Option<u64>) -> Vec<u8> {
    let cas = cas.map(|cas| format!(" {cas}")).unwrap_or_default();
    let mut reply = format!("VALUE {key} {flags} {}{cas}\r\n", value.len()).into_bytes();
    reply.extend_from_slice(value);
    reply.extend_from_slice(b"\r\n");
    reply
}

#[test]
fn a_get_naming_a_large_value_many_times_gets_every_value_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::EverySec);
    let mut raw = server.raw();
    let big = big_value(7);
    set(&mut raw, "big", 3, &big);
    set(&mut raw, "small", 5, b"tiny");
    let (_, _, big_cas) = raw.gets("big").unwrap();
    let (_, _, small_cas) = raw.gets("small").unwrap();
    let gets_before = server.stat("cmd_get");

    // 40 x 512 KiB = 20 MiB of replies, five times the soft limit; a miss
    // and a small value in between, and requests pipelined after it.
    let keys: Vec<&str> = (0..40)
        .map(|index| match index % 10 {
            3 => "small",
            6 => "absent",
            _ => "big",
        })
        .collect();
    for command in ["get", "gets"] {
        let mut request = format!("{command} {}\r\n", keys.join(" ")).into_bytes();
        request.extend_from_slice(b"get small\r\nversion\r\n");
        raw.send(&request);
        let mut expected = Vec::new();
        for key in &keys {
            let with_cas = command == "gets";
            match *key {
                "big" => expected.extend(value_reply("big", 3, &big, with_cas.then_some(big_cas))),
                "small" => expected.extend(value_reply(
                    "small",
                    5,
                    b"tiny",
                    with_cas.then_some(small_cas),
                )),
                _ => {}
            }
        }
        expected.extend_from_slice(b"END\r\n");
        expected.extend(value_reply("small", 5, b"tiny", None));
        expected.extend_from_slice(b"END\r\n");
        let got = raw.read_bytes(expected.len());
        assert!(
            got == expected,
            "{command}: the reply differs from byte {}",
            got.iter()
                .zip(&expected)
                .take_while(|(a, b)| a == b)
                .count()
        );
        assert!(raw.read_line().starts_with("VERSION "));
    }
    // Each key of each request counted once: 2 x 40, plus the 2 `get small`.
    let gets_after = server.stat("cmd_get");
    assert_eq!(gets_after - gets_before, 2 * 40 + 2);
}

#[test]
fn a_gat_of_many_large_values_touches_each_key_once_across_its_parts() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::Always);
    let mut raw = server.raw();
    let keys: Vec<String> = (0..12).map(|index| format!("k{index}")).collect();
    let values: Vec<Vec<u8>> = (0..12).map(big_value).collect();
    for (key, value) in keys.iter().zip(&values) {
        set(&mut raw, key, 0, value);
    }
    let touches_before = server.stat("cmd_touch");

    // 12 x 512 KiB = 6 MiB: at least two parts.
    raw.send(format!("gat 1000 {}\r\n", keys.join(" ")).as_bytes());
    let mut expected = Vec::new();
    for (key, value) in keys.iter().zip(&values) {
        expected.extend(value_reply(key, 0, value, None));
    }
    expected.extend_from_slice(b"END\r\n");
    assert!(raw.read_bytes(expected.len()) == expected);

    let stats = server.stats();
    let touches = stats["cmd_touch"].parse::<u64>().unwrap() - touches_before;
    assert_eq!(touches, 12, "every key touched once");
    assert_eq!(stats["touch_hits"], "12");
    for key in &keys {
        let ttl = raw.ttl(key).unwrap();
        assert!((990..=1000).contains(&ttl), "{key}: ttl {ttl}");
    }
}

/// `lru_crawler metadump all` is answered in parts as well: a line per
/// live item, each once, then `END`, and the requests pipelined after it
/// are answered after that.
#[test]
fn a_metadump_of_more_lines_than_the_soft_limit_lists_every_item_once() {
    // About 60k lines of some 120 bytes: 7 MB, past the 4 MiB soft limit.
    const KEYS: usize = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::EverySec);
    let mut raw = server.raw();
    let key = |index: usize| format!("metadump-key-{index:08}-{}", "k".repeat(20));
    let mut batch = Vec::new();
    for index in 0..KEYS {
        batch.extend_from_slice(format!("set {} 0 0 1 noreply\r\nv\r\n", key(index)).as_bytes());
    }
    batch.extend_from_slice(b"delete gone\r\n");
    raw.call(&batch, b"NOT_FOUND\r\n");
    raw.send(b"lru_crawler metadump all\r\nget metadump-key-00000007-kkkkkkkkkkkkkkkkkkkk\r\n");
    let mut listed = std::collections::BTreeSet::new();
    loop {
        let line = raw.read_line();
        if line == "END\r\n" {
            break;
        }
        // As memcached's: a bare newline after each item.
        let line = line
            .strip_suffix('\n')
            .filter(|line| !line.ends_with('\r'))
            .unwrap_or_else(|| panic!("not ended by a bare newline: {line:?}"));
        let (name, rest) = line
            .strip_prefix("key=")
            .and_then(|line| line.split_once(' '))
            .unwrap_or_else(|| panic!("not a metadump line: {line:?}"));
        assert!(rest.starts_with("exp=-1 la="), "{line}");
        assert!(rest.contains(" fetch=no cls=1 size="), "{line}");
        assert!(listed.insert(name.to_owned()), "{name} listed twice");
    }
    assert_eq!(listed.len(), KEYS);
    assert!(listed.iter().eq((0..KEYS)
        .map(key)
        .collect::<std::collections::BTreeSet<_>>()
        .iter()));
    raw.expect(format!("VALUE {} 0 1\r\nv\r\nEND\r\n", key(7)).as_bytes());
}
