#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! Export and import over real data directories: what an export writes
//! comes back whole through an import (keys, values of any bytes and
//! sizes, flags, expiry times), dead items stay out, and a dump that is
//! not a stream of well-formed `set` commands is refused, naming the
//! request and its byte, before anything is stored.

use larder_engine::{Durability, Engine, Expiry, StoreMode};
use larder_server::dump::{self, DumpError, Summary};
use larder_server::ServerConfig;
use std::path::Path;

fn config(dir: &Path) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_path_buf(),
        max_item_size: 4 << 20,
        memory_limit_mb: 16,
        ..ServerConfig::default()
    }
}

fn open(dir: &Path) -> Engine {
    let mut engine_config = config(dir).engine_config();
    engine_config.durability = Durability::Always;
    Engine::open(engine_config).unwrap()
}

fn store(engine: &Engine, key: &[u8], value: &[u8], flags: u32, expiry: Expiry) {
    let (_, ticket) = engine
        .store(StoreMode::Set, key, value, flags, expiry)
        .unwrap();
    engine.commit(ticket).unwrap();
}

/// Every live item of the data directory: key, value, flags, expiry.
fn items(dir: &Path) -> Vec<(Vec<u8>, Vec<u8>, u32, u32)> {
    let engine = open(dir);
    let mut found = Vec::new();
    engine
        .for_each_live(|key, item| {
            found.push((key.to_vec(), item.value.to_vec(), item.flags, item.exptime));
            Ok::<(), larder_engine::Error>(())
        })
        .unwrap();
    engine.close().unwrap();
    found.sort();
    found
}

fn export_to(dir: &Path, file: &Path) -> Summary {
    let mut out = std::fs::File::create(file).unwrap();
    dump::export(&config(dir), &mut out).unwrap()
}

#[test]
fn an_exported_directory_comes_back_whole_through_an_import() {
    let root = tempfile::tempdir().unwrap();
    let (source, target) = (root.path().join("source"), root.path().join("target"));
    let engine = open(&source);
    let now = engine.clock().now();
    let large: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    store(&engine, b"plain", b"value", 0, Expiry::Never);
    store(&engine, b"flagged", b"x", u32::MAX, Expiry::At(now + 3600));
    store(
        &engine,
        b"crlf",
        b"a\r\nset b 0 0 1\r\nc\r\n",
        7,
        Expiry::Never,
    );
    store(&engine, b"empty", b"", 1, Expiry::Never);
    store(&engine, b"large", &large, 2, Expiry::Never);
    store(&engine, b"deleted", b"gone", 0, Expiry::Never);
    let (_, ticket) = engine.delete(b"deleted", None).unwrap();
    engine.commit(ticket).unwrap();
    store(&engine, b"expired", b"gone", 0, Expiry::Immediately);
    store(&engine, b"plain", b"newer", 3, Expiry::Never);
    // Keys the text protocol cannot carry (stored through the meta
    // protocol in base64), the longest such a key can be too: 186 bytes,
    // whose base64 fits the 250 bytes of a key on the wire.
    let injected = b"a\r\nflush_all noreply\r\nset b".to_vec();
    let long: Vec<u8> = (0..186).map(|i| [b' ', 0, 0xff, b'k'][i % 4]).collect();
    store(&engine, &injected, b"kept apart", 9, Expiry::At(now + 60));
    store(&engine, &long, b"long", 0, Expiry::Never);
    // The longest key a text client can send, in UTF-8: it goes as a `set`.
    store(
        &engine,
        "ü".repeat(125).as_bytes(),
        b"utf-8",
        0,
        Expiry::Never,
    );
    engine.close().unwrap();
    let want = items(&source);
    assert_eq!(
        want.len(),
        8,
        "{:?}",
        want.iter().map(|item| &item.0).collect::<Vec<_>>()
    );

    let file = root.path().join("dump");
    let exported = export_to(&source, &file);
    let value_bytes = want.iter().map(|item| item.1.len() as u64).sum();
    assert_eq!(
        exported,
        Summary {
            items: 8,
            value_bytes
        }
    );
    let text = std::fs::read(&file).unwrap();
    let count = |needle: &[u8]| {
        text.windows(needle.len())
            .filter(|window| *window == needle)
            .count()
    };
    // Two items as `ms` with base64 keys, none of whose bytes leaked out.
    let at_start = usize::from(text.starts_with(b"ms "));
    assert_eq!(at_start + count(b"\nms "), 2);
    assert_eq!(count(b"flush_all"), 0);
    let imported = dump::import(&config(&target), &file).unwrap();
    assert_eq!(imported, exported);
    assert_eq!(items(&target), want);
    // The export left its source as it was.
    assert_eq!(items(&source), want);
}

#[test]
fn an_import_sets_the_dumps_keys_and_leaves_the_others() {
    let root = tempfile::tempdir().unwrap();
    let target = root.path().join("target");
    let engine = open(&target);
    store(&engine, b"kept", b"mine", 0, Expiry::Never);
    store(&engine, b"replaced", b"old", 0, Expiry::Never);
    engine.close().unwrap();
    let file = root.path().join("dump");
    std::fs::write(
        &file,
        "set replaced 4 0 3\r\nnew\r\nset added 0 0 2 noreply\r\nhi\r\n",
    )
    .unwrap();
    assert_eq!(
        dump::import(&config(&target), &file).unwrap(),
        Summary {
            items: 2,
            value_bytes: 5
        }
    );
    let names: Vec<(Vec<u8>, Vec<u8>, u32)> = items(&target)
        .into_iter()
        .map(|(key, value, flags, _)| (key, value, flags))
        .collect();
    assert_eq!(
        names,
        [
            (b"added".to_vec(), b"hi".to_vec(), 0),
            (b"kept".to_vec(), b"mine".to_vec(), 0),
            (b"replaced".to_vec(), b"new".to_vec(), 4),
        ]
    );
}

#[test]
fn a_dump_that_is_not_all_well_formed_sets_changes_nothing() {
    let good = "set a 0 0 1\r\nx\r\n";
    let cases: [(&str, String, u64, u64, &str); 6] = [
        (
            "another command",
            format!("{good}get a\r\n"),
            2,
            16,
            "`get` is not a plain store",
        ),
        (
            "an add",
            format!("{good}add b 0 0 1\r\ny\r\n"),
            2,
            16,
            "`add` is not a plain store",
        ),
        (
            "cut short",
            format!("{good}set b 0 0 5\r\nab"),
            2,
            16,
            "ends inside",
        ),
        (
            "a bad data chunk",
            format!("{good}set b 0 0 1\r\nxyz\r\n"),
            2,
            16,
            "bad data chunk",
        ),
        (
            "a bad line",
            format!("{good}{good}set b zero 0 1\r\nx\r\n"),
            3,
            32,
            "bad command line",
        ),
        (
            "a value over -I",
            format!("set big 0 0 {}\r\n", 5 << 20),
            1,
            0,
            "too large",
        ),
    ];
    for (what, text, request, offset, reason) in cases {
        let root = tempfile::tempdir().unwrap();
        let (file, target) = (root.path().join("dump"), root.path().join("target"));
        std::fs::write(&file, text).unwrap();
        let error = dump::import(&config(&target), &file).unwrap_err();
        match &error {
            DumpError::Input {
                request: at,
                offset: byte,
                reason: why,
                ..
            } => {
                assert_eq!((*at, *byte), (request, offset), "{what}: {error}");
                assert!(why.contains(reason), "{what}: {error}");
            }
            other => panic!("{what}: {other}"),
        }
        assert!(error.is_bad_input());
        assert!(!target.exists(), "{what}: the data directory was made");
    }
}

#[test]
fn only_plain_meta_sets_are_taken_besides_set() {
    let root = tempfile::tempdir().unwrap();
    let target = root.path().join("target");
    let file = root.path().join("dump");
    // `a b` in base64, with flags and an expiry; and a plain key.
    std::fs::write(&file, "ms YSBi 2 b F5 T0 q\r\nhi\r\nms plain 1 F1\r\nx\r\n").unwrap();
    let imported = dump::import(&config(&target), &file).unwrap();
    assert_eq!(imported.items, 2);
    let got = items(&target);
    assert_eq!(
        got,
        [
            (b"a b".to_vec(), b"hi".to_vec(), 5, 0),
            (b"plain".to_vec(), b"x".to_vec(), 1, 0)
        ]
    );
    let refused = ["C5", "MA", "MS", "I", "c", "k", "Oab", "N30"];
    for refused in refused.map(|flag| format!("ms k 1 {flag}\r\nx\r\n")) {
        let other = root.path().join("other");
        std::fs::write(&file, &refused).unwrap();
        let error = dump::import(&config(&other), &file).unwrap_err();
        assert!(
            error.to_string().contains("not a plain store"),
            "{refused:?}: {error}"
        );
        assert!(!other.exists());
    }
}

#[test]
fn a_dump_that_is_not_a_regular_file_is_refused_before_it_is_read() {
    let root = tempfile::tempdir().unwrap();
    let target = root.path().join("target");
    let error = dump::import(&config(&target), root.path()).unwrap_err();
    assert!(error.to_string().contains("not a regular file"), "{error}");
    assert!(error.is_bad_input());
    assert!(!target.exists());
}

#[test]
fn an_empty_dump_imports_nothing_and_a_missing_one_is_an_error() {
    let root = tempfile::tempdir().unwrap();
    let (file, target) = (root.path().join("dump"), root.path().join("target"));
    std::fs::write(&file, "").unwrap();
    assert_eq!(
        dump::import(&config(&target), &file).unwrap(),
        Summary::default()
    );
    let missing = dump::import(&config(&target), &root.path().join("nothing")).unwrap_err();
    assert!(matches!(missing, DumpError::Io { .. }), "{missing}");
    assert!(!missing.is_bad_input());
    // Nor is a data directory that is not there exported (as empty).
    let nowhere = root.path().join("nowhere");
    let error = dump::export(&config(&nowhere), &mut Vec::new()).unwrap_err();
    assert!(error.is_bad_input(), "{error}");
    assert!(!nowhere.exists());
}

#[test]
fn a_directory_in_use_is_neither_exported_nor_imported() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("dir");
    let engine = open(&dir);
    let error = dump::export(&config(&dir), &mut Vec::new()).unwrap_err();
    assert!(error.to_string().contains("in use"), "{error}");
    let file = root.path().join("dump");
    std::fs::write(&file, "set a 0 0 1\r\nx\r\n").unwrap();
    let error = dump::import(&config(&dir), &file).unwrap_err();
    assert!(error.to_string().contains("in use"), "{error}");
    engine.close().unwrap();
}
