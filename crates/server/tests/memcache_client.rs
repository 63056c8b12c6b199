#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! Larder as a real client library sees it: the `memcache` crate (written
//! against memcached by others) drives every text-protocol command it
//! offers, with binary values, values at the 1 MiB item limit and many keys,
//! under each durability mode. If the crate can talk to Larder, so can the
//! applications built on it.

mod common;

use common::{Flagged, TestServer};
use larder_engine::Durability;
use memcache::{Client, CommandError, MemcacheError};
use std::collections::HashMap;

/// What `gets` hands back per key: value, flags, CAS unique.
type WithCas = (Vec<u8>, u32, Option<u64>);

fn get_string(client: &Client, key: &str) -> Option<String> {
    client.get(key).unwrap()
}

fn storage_commands_behave_as_on_memcached(client: &Client) {
    client.set("fruit", "apple", 0).unwrap();
    assert_eq!(get_string(client, "fruit").as_deref(), Some("apple"));
    assert_eq!(get_string(client, "no-such-key"), None);

    // add and replace answer NOT_STORED, which the crate maps to Ok(()):
    // the stored values show whether they took effect.
    client.add("fruit", "banana", 0).unwrap();
    assert_eq!(get_string(client, "fruit").as_deref(), Some("apple"));
    client.add("vegetable", "leek", 0).unwrap();
    assert_eq!(get_string(client, "vegetable").as_deref(), Some("leek"));
    client.replace("fruit", "cherry", 0).unwrap();
    assert_eq!(get_string(client, "fruit").as_deref(), Some("cherry"));
    client.replace("grain", "rye", 0).unwrap();
    assert_eq!(get_string(client, "grain"), None);

    client.append("fruit", "-pie").unwrap();
    client.prepend("fruit", "sour-").unwrap();
    assert_eq!(
        get_string(client, "fruit").as_deref(),
        Some("sour-cherry-pie")
    );
    client.append("grain", "x").unwrap();
    assert_eq!(get_string(client, "grain"), None);
}

fn cas_succeeds_only_with_the_current_unique(client: &Client) {
    client.set("cas-key", "one", 0).unwrap();
    let found: HashMap<String, WithCas> = client.gets(&["cas-key"]).unwrap();
    let unique = found["cas-key"].2.unwrap();
    assert!(client.cas("cas-key", "two", 0, unique).unwrap());
    assert_eq!(get_string(client, "cas-key").as_deref(), Some("two"));
    assert!(!client.cas("cas-key", "three", 0, unique).unwrap());
    assert_eq!(get_string(client, "cas-key").as_deref(), Some("two"));
    let found: HashMap<String, WithCas> = client.gets(&["cas-key"]).unwrap();
    assert!(found["cas-key"].2.unwrap() > unique);
    assert!(!client.cas("cas-missing", "x", 0, unique).unwrap());
    assert_eq!(get_string(client, "cas-missing"), None);
}

fn delete_touch_and_arithmetic_work(client: &Client) {
    client.set("gone", "soon", 0).unwrap();
    assert!(client.delete("gone").unwrap());
    assert!(!client.delete("gone").unwrap());
    assert_eq!(get_string(client, "gone"), None);

    client.set("counter", 40u64, 0).unwrap();
    assert_eq!(client.increment("counter", 2).unwrap(), 42);
    assert_eq!(client.decrement("counter", 2).unwrap(), 40);
    assert_eq!(client.decrement("counter", 100).unwrap(), 0);
    assert_eq!(client.increment("counter", u64::MAX).unwrap(), u64::MAX);
    assert_eq!(client.increment("counter", 1).unwrap(), 0);
    let missing = client.increment("no-counter", 1).unwrap_err();
    assert!(matches!(
        missing,
        MemcacheError::CommandError(CommandError::KeyNotFound)
    ));
    client.set("word", "abc", 0).unwrap();
    let non_numeric = client.increment("word", 1).unwrap_err();
    assert!(matches!(non_numeric, MemcacheError::ClientError(_)));

    assert!(client.touch("word", 3600).unwrap());
    assert!(!client.touch("no-word", 3600).unwrap());
    assert_eq!(get_string(client, "word").as_deref(), Some("abc"));
}

fn binary_values_and_flags_round_trip(client: &Client) {
    let every_byte: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    client.set("binary", every_byte.as_slice(), 0).unwrap();
    let back: Vec<u8> = client.get("binary").unwrap().unwrap();
    assert_eq!(back, every_byte);

    let line_breaks = b"\r\n\r\nEND\r\nVALUE x 0 1\r\n";
    client.set("tricky", &line_breaks[..], 0).unwrap();
    let back: Vec<u8> = client.get("tricky").unwrap().unwrap();
    assert_eq!(back, line_breaks);

    let flagged = Flagged {
        bytes: b"flagged",
        flags: 0xdead_beef,
    };
    client.set("flagged", flagged, 0).unwrap();
    let (value, flags): (Vec<u8>, u32) = client.get("flagged").unwrap().unwrap();
    assert_eq!(value, b"flagged");
    assert_eq!(flags, 0xdead_beef);

    client.set("empty", "", 0).unwrap();
    assert_eq!(get_string(client, "empty").as_deref(), Some(""));
}

fn values_up_to_the_item_limit_are_stored_and_larger_refused(client: &Client) {
    let item_bytes_max = larder_protocol::limits::ITEM_BYTES_MAX_DEFAULT;
    let largest: Vec<u8> = (0..item_bytes_max).map(|i| (i % 251) as u8).collect();
    client.set("largest", largest.as_slice(), 0).unwrap();
    let back: Vec<u8> = client.get("largest").unwrap().unwrap();
    assert_eq!(back.len(), item_bytes_max);
    assert!(back == largest, "the 1 MiB value came back different");

    let near: Vec<u8> = largest[..item_bytes_max - 1000].to_vec();
    client.set("near", near.as_slice(), 0).unwrap();
    let back: Vec<u8> = client.get("near").unwrap().unwrap();
    assert!(
        back == near,
        "the value just under 1 MiB came back different"
    );

    // One byte too many: refused, and like memcached the old value goes.
    let too_large = vec![b'x'; item_bytes_max + 1];
    let refused = client.set("largest", too_large.as_slice(), 0).unwrap_err();
    match refused {
        MemcacheError::ServerError(error) => {
            assert!(error.to_string().contains("object too large for cache"));
        }
        other => panic!("expected SERVER_ERROR, got {other:?}"),
    }
    assert_eq!(get_string(client, "largest"), None);
    // The connection is still in step after the refused data block.
    assert_eq!(
        get_string(client, "fruit").as_deref(),
        Some("sour-cherry-pie")
    );
}

fn many_keys_are_all_readable_by_multiget(client: &Client, count: usize) {
    for i in 0..count {
        client
            .set(&format!("many:{i}"), format!("value-{i}").as_str(), 0)
            .unwrap();
    }
    let keys: Vec<String> = (0..count).map(|i| format!("many:{i}")).collect();
    for chunk in keys.chunks(100) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let found: HashMap<String, String> = client.gets(&refs).unwrap();
        assert_eq!(found.len(), chunk.len());
        for key in chunk {
            let index = key.trim_start_matches("many:");
            assert_eq!(found[key], format!("value-{index}"));
        }
    }
}

fn flush_empties_the_cache(client: &Client) {
    client.flush().unwrap();
    assert_eq!(get_string(client, "fruit"), None);
    assert_eq!(get_string(client, "many:0"), None);
    client.set("after-flush", "fresh", 0).unwrap();
    assert_eq!(get_string(client, "after-flush").as_deref(), Some("fresh"));
}

fn every_command_works(durability: Durability, key_count: usize) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), durability);
    let client = server.client();
    let version = client.version().unwrap();
    assert!(version[0].1.starts_with("1.6"), "version {version:?}");
    storage_commands_behave_as_on_memcached(&client);
    cas_succeeds_only_with_the_current_unique(&client);
    delete_touch_and_arithmetic_work(&client);
    binary_values_and_flags_round_trip(&client);
    values_up_to_the_item_limit_are_stored_and_larger_refused(&client);
    many_keys_are_all_readable_by_multiget(&client, key_count);
    flush_empties_the_cache(&client);
    drop(client);
    server.stop().unwrap();
}

#[test]
fn every_client_command_works_with_durability_always() {
    every_command_works(Durability::Always, 2000);
}

#[test]
fn every_client_command_works_with_durability_everysec() {
    every_command_works(Durability::EverySec, 2000);
}

#[test]
fn every_client_command_works_with_durability_none() {
    every_command_works(Durability::None, 2000);
}

#[test]
fn items_set_with_a_ttl_expire_for_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::EverySec);
    let client = server.client();
    // Two seconds, not one: expiry counts whole seconds, so a 1 s item may
    // expire at once if a second boundary falls right after the set.
    client.set("short", "lived", 2).unwrap();
    client.set("touched", "lived", 2).unwrap();
    assert!(client.touch("touched", 3600).unwrap());
    client.set("forever", "lived", 0).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2200));
    assert_eq!(get_string(&client, "short"), None);
    assert_eq!(get_string(&client, "touched").as_deref(), Some("lived"));
    assert_eq!(get_string(&client, "forever").as_deref(), Some("lived"));
}
