#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! A graceful restart loses nothing: keys written through the `memcache`
//! client and retouched over raw sockets (`gat`, `touch`) are read back after
//! the server is stopped and a new one is started on the same data directory
//! with the same value, flags and CAS unique, their TTLs still counting down
//! from where they were, deleted keys still gone, and new writes get CAS
//! uniques larger than any handed out before the restart. The data spans
//! more than one segment, so sealed segments (and their hint files) are
//! recovered as well as the active one.

mod common;

use common::{Flagged, Raw, TestServer};
use larder_engine::Durability;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const KEYS: usize = 1500;
const LARGE_KEYS: usize = 60;
const LARGE_VALUE_BYTES: usize = 300 * 1024;

/// What a key held before the restart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    value: Vec<u8>,
    flags: u32,
    cas: u64,
    ttl: i64,
}

fn value_of(index: usize, length: usize) -> Vec<u8> {
    (0..length)
        .map(|at| (at.wrapping_mul(31) ^ index.wrapping_mul(7)) as u8)
        .collect()
}

fn key_of(index: usize) -> String {
    format!("restart:{index}")
}

fn large_key_of(index: usize) -> String {
    format!("large:{index}")
}

/// Writes every key through the client: values of varied length (some
/// empty), distinct flags, no TTL or one of an hour or two; then retouches
/// some with `gat` and `touch` and deletes others.
fn write_everything(server: &TestServer) {
    let client = server.client();
    for index in 0..KEYS {
        let value = value_of(index, index % 3000);
        let flagged = Flagged {
            bytes: &value,
            flags: (index as u32).wrapping_mul(2_654_435_761),
        };
        let exptime = [0, 3600, 7200][index % 3];
        client.set(&key_of(index), flagged, exptime).unwrap();
    }
    for index in 0..LARGE_KEYS {
        let value = value_of(index, LARGE_VALUE_BYTES);
        client
            .set(&large_key_of(index), value.as_slice(), 0)
            .unwrap();
    }
    client.set("counter", 10u64, 0).unwrap();
    assert_eq!(client.increment("counter", 5).unwrap(), 15);
    for index in (9..KEYS).step_by(10) {
        assert!(client.delete(&key_of(index)).unwrap());
    }
    let mut raw = server.raw();
    for index in (0..KEYS).step_by(10) {
        let key = key_of(index);
        raw.send(format!("gat 100000 {key}\r\n").as_bytes());
        let header = raw.read_line();
        assert!(header.starts_with(&format!("VALUE {key} ")), "{header:?}");
        raw.read_bytes(index % 3000 + 2);
        raw.expect(b"END\r\n");
    }
    for index in (5..KEYS).step_by(10) {
        raw.call(
            format!("touch {} 50000\r\n", key_of(index)).as_bytes(),
            b"TOUCHED\r\n",
        );
    }
}

/// Reads back what every live key holds, and its remaining TTL.
fn observe(raw: &mut Raw) -> BTreeMap<String, Seen> {
    let mut seen = BTreeMap::new();
    let keys = (0..KEYS)
        .map(key_of)
        .chain((0..LARGE_KEYS).map(large_key_of))
        .chain(["counter".to_owned()]);
    for key in keys {
        let Some((value, flags, cas)) = raw.gets(&key) else {
            continue;
        };
        let ttl = raw.ttl(&key).unwrap();
        seen.insert(
            key,
            Seen {
                value,
                flags,
                cas,
                ttl,
            },
        );
    }
    seen
}

#[test]
fn a_restarted_server_serves_every_key_exactly_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::EverySec);
    write_everything(&server);
    let before = observe(&mut server.raw());
    assert_eq!(before.len(), KEYS - KEYS / 10 + LARGE_KEYS + 1);
    assert!(server.stat("larder_segments") >= 2, "data fits one segment");
    server.stop().unwrap();

    let server = TestServer::start(dir.path(), Durability::EverySec);
    assert!(server.stat("larder_recovery_records") > 0);
    // Open's sync of the active segment succeeded: nothing was rewritten
    // (the rewrite after a failed one is in the engine's disk_faults.rs).
    assert_eq!(server.stat("larder_recovery_rewritten_segments"), 0);
    let mut raw = server.raw();
    let after = observe(&mut raw);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    for (key, was) in &before {
        let now = &after[key];
        assert!(now.value == was.value, "{key}: value changed");
        assert_eq!(now.flags, was.flags, "{key}: flags changed");
        assert_eq!(now.cas, was.cas, "{key}: CAS unique changed");
        if was.ttl == -1 {
            assert_eq!(now.ttl, -1, "{key}: gained a TTL");
        } else {
            // Still counting down from where it was: not reset, not lost.
            assert!(now.ttl <= was.ttl, "{key}: TTL {} -> {}", was.ttl, now.ttl);
            assert!(
                now.ttl >= was.ttl - 30,
                "{key}: TTL {} -> {}",
                was.ttl,
                now.ttl
            );
        }
    }
    assert_eq!(after["counter"].value, b"15");
    let gat_ttl = after[&key_of(0)].ttl;
    assert!(
        (99_970..=100_000).contains(&gat_ttl),
        "gat's TTL became {gat_ttl}"
    );
    let touch_ttl = after[&key_of(5)].ttl;
    assert!(
        (49_970..=50_000).contains(&touch_ttl),
        "touch's TTL became {touch_ttl}"
    );
    for index in (9..KEYS).step_by(10) {
        assert_eq!(raw.gets(&key_of(index)), None, "deleted key came back");
    }
}

#[test]
fn cas_uniques_after_a_restart_are_larger_than_any_before() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::Always);
    let mut raw = server.raw();
    let mut largest = 0;
    for index in 0..200 {
        raw.call(
            format!("set c{index} 0 0 1\r\nx\r\n").as_bytes(),
            b"STORED\r\n",
        );
        largest = largest.max(raw.gets(&format!("c{index}")).unwrap().2);
    }
    raw.call(b"delete c0\r\n", b"DELETED\r\n");
    drop(raw);
    server.stop().unwrap();

    for round in 0..2 {
        let server = TestServer::start(dir.path(), Durability::Always);
        let mut raw = server.raw();
        raw.call(
            format!("set fresh{round} 0 0 1\r\ny\r\n").as_bytes(),
            b"STORED\r\n",
        );
        let fresh = raw.gets(&format!("fresh{round}")).unwrap().2;
        assert!(
            fresh > largest,
            "round {round}: CAS {fresh} after {largest}"
        );
        largest = fresh;
        drop(raw);
        server.stop().unwrap();
    }
}

#[test]
fn ttls_keep_running_while_the_server_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::EverySec);
    let mut raw = server.raw();
    let set_at = Instant::now();
    raw.call(b"set brief 0 2 3\r\nabc\r\n", b"STORED\r\n");
    raw.call(b"set lasting 0 3600 3\r\nabc\r\n", b"STORED\r\n");
    drop(raw);
    server.stop().unwrap();
    // Down for longer than the item had to live.
    std::thread::sleep(Duration::from_millis(3100).saturating_sub(set_at.elapsed()));

    let server = TestServer::start(dir.path(), Durability::EverySec);
    let mut raw = server.raw();
    assert_eq!(raw.gets("brief"), None);
    assert_eq!(raw.gets("lasting").unwrap().0, b"abc");
    let ttl = raw.ttl("lasting").unwrap();
    assert!((3590..=3598).contains(&ttl), "TTL {ttl}");
}
