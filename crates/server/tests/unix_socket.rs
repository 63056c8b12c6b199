//! Serving on a Unix domain socket (`-s`, as memcached): a real client
//! over the socket, the socket file's permissions, what happens to a file
//! already at the path, and the file's removal at shutdown.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, TestServer, REPLY_TIMEOUT};
use larder_engine::Durability;
use larder_server::{Address, ServerConfig, ServerError};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

fn unix_config(dir: &Path, socket: &Path) -> ServerConfig {
    ServerConfig {
        unix_socket: Some(socket.to_owned()),
        ..config(&dir.join("data"), Durability::Always)
    }
}

/// A `memcache` crate client over the socket at `path`, text protocol.
fn client(path: &Path) -> memcache::Client {
    let url = format!(
        "memcache://{}?protocol=ascii&timeout={}",
        path.display(),
        REPLY_TIMEOUT.as_secs()
    );
    memcache::Client::connect(url.as_str()).unwrap()
}

/// `stats settings` over a raw connection to the socket at `path`.
fn settings(path: &Path) -> Vec<(String, String)> {
    let mut stream = UnixStream::connect(path).unwrap();
    stream.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    stream.write_all(b"stats settings\r\n").unwrap();
    let mut settings = Vec::new();
    for line in BufReader::new(stream).lines() {
        let line = line.unwrap();
        if line == "END" {
            break;
        }
        let mut words = line.splitn(3, ' ');
        assert_eq!(words.next(), Some("STAT"), "{line}");
        settings.push((
            words.next().unwrap().to_owned(),
            words.next().unwrap_or("").to_owned(),
        ));
    }
    settings
}

fn setting(settings: &[(String, String)], name: &str) -> String {
    let found = settings.iter().find(|(key, _)| key == name);
    found
        .unwrap_or_else(|| panic!("no setting {name}"))
        .1
        .clone()
}

/// Starts a server that is expected to fail before it listens; returns the
/// error.
fn start_failing(config: ServerConfig) -> ServerError {
    let result = larder_server::serve_until(
        config,
        |address| panic!("started on {address}"),
        std::future::pending(),
    );
    result.unwrap_err()
}

#[test]
fn a_client_reads_and_writes_over_the_socket_and_its_file_goes_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("larder.sock");
    let server = TestServer::start_with(unix_config(dir.path(), &path));
    assert_eq!(server.address, Address::Unix(path.clone()));
    let metadata = std::fs::symlink_metadata(&path).unwrap();
    assert!(metadata.file_type().is_socket());
    assert_eq!(metadata.permissions().mode() & 0o777, 0o700);

    let client = client(&path);
    client.set("greeting", "hello", 0).unwrap();
    assert_eq!(
        client.get::<String>("greeting").unwrap().as_deref(),
        Some("hello")
    );
    // Larger than a socket buffer: the reply is written in several parts.
    let large = "v".repeat(900 * 1024);
    client.set("large", large.as_str(), 0).unwrap();
    assert_eq!(client.get::<String>("large").unwrap(), Some(large));
    assert_eq!(client.increment("counter", 1).ok(), None);
    client.set("counter", 41u64, 0).unwrap();
    assert_eq!(client.increment("counter", 1).unwrap(), 42);

    let settings = settings(&path);
    assert_eq!(
        setting(&settings, "domain_socket"),
        path.display().to_string()
    );
    assert_eq!(setting(&settings, "umask"), "700");
    assert_eq!(setting(&settings, "tcpport"), "0");
    drop(client);
    server.stop().unwrap();
    assert!(!path.exists(), "the socket file is left after shutdown");

    // What was acknowledged over the socket is there after a restart.
    let server = TestServer::start_with(unix_config(dir.path(), &path));
    let client = self::client(&path);
    assert_eq!(
        client.get::<String>("greeting").unwrap().as_deref(),
        Some("hello")
    );
    assert_eq!(client.get::<u64>("counter").unwrap(), Some(42));
    drop(client);
    server.stop().unwrap();
}

#[test]
fn the_socket_file_gets_the_mode_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.sock");
    let server = TestServer::start_with(ServerConfig {
        unix_socket_mode: 0o660,
        ..unix_config(dir.path(), &path)
    });
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o660);
    assert_eq!(setting(&settings(&path), "umask"), "660");
    server.stop().unwrap();
}

#[test]
fn a_socket_file_left_by_a_server_that_has_gone_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stale.sock");
    // Bound, then closed without removing its file, as after a kill -9.
    drop(UnixListener::bind(&path).unwrap());
    assert!(UnixStream::connect(&path).is_err());
    let server = TestServer::start_with(unix_config(dir.path(), &path));
    client(&path).set("after", "stale", 0).unwrap();
    server.stop().unwrap();
}

#[test]
fn a_socket_a_live_server_answers_on_is_left_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.sock");
    let first = TestServer::start_with(unix_config(&dir.path().join("first"), &path));
    let error = start_failing(unix_config(&dir.path().join("second"), &path));
    let message = error.to_string();
    assert!(
        matches!(error, ServerError::Listen { .. }) && message.contains("already"),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");
    // The first server still has its socket.
    client(&path).set("still", "here", 0).unwrap();
    first.stop().unwrap();
}

#[test]
fn a_path_that_is_not_a_socket_is_not_touched() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("notes.txt");
    std::fs::write(&path, b"keep me").unwrap();
    let error = start_failing(unix_config(dir.path(), &path));
    assert!(error.to_string().contains("not a socket"), "{error}");
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
}

#[test]
fn a_socket_in_a_missing_directory_fails_the_start_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("larder.sock");
    let error = start_failing(unix_config(dir.path(), &path));
    let message = error.to_string();
    assert!(
        message.contains("cannot listen on unix socket"),
        "{message}"
    );
    assert!(message.contains("no-such-dir"), "{message}");
}
