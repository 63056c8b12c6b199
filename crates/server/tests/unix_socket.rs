//! Serving on a Unix domain socket (`-s`, as memcached): a real client
//! over the socket, the socket file's permissions, what happens to a file
//! already at the path, the lock file beside it (`PATH.lock`), and the
//! files' removal at shutdown (only while they are still the server's).

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, Raw, TestServer, REPLY_TIMEOUT};
use larder_engine::Durability;
use larder_server::{Address, ServerConfig, ServerError};
use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The lock file a server holds for the socket at `path`.
fn lock_path(path: &Path) -> PathBuf {
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    PathBuf::from(lock)
}

/// Opens and locks `path` as another server would; the lock lasts as long
/// as the file is open.
fn hold_lock(path: &Path) -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap();
    larder_engine::fs::try_lock_exclusive(&file).unwrap();
    file
}

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
fn settings(path: &Path) -> HashMap<String, String> {
    Raw::connect_unix(path).stats_of("settings")
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
    assert!(lock_path(&path).is_file(), "the lock file is beside it");
    let lock_mode = std::fs::metadata(lock_path(&path))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        lock_mode & 0o777,
        0o600,
        "the socket's bits without execute"
    );

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
    assert_eq!(settings["domain_socket"], path.display().to_string());
    assert_eq!(settings["umask"], "700");
    drop(client);
    server.stop().unwrap();
    assert!(!path.exists(), "the socket file is left after shutdown");
    assert!(
        !lock_path(&path).exists(),
        "the lock file is left after shutdown"
    );

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
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o660);
    assert_eq!(
        mode(&lock_path(&path)),
        0o660,
        "whoever may connect may lock"
    );
    assert_eq!(settings(&path)["umask"], "660");
    server.stop().unwrap();
}

#[test]
fn a_socket_file_left_by_a_server_that_has_gone_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stale.sock");
    // Bound, then closed without removing its file, as after a kill -9,
    // which leaves the lock file too, no longer locked.
    drop(UnixListener::bind(&path).unwrap());
    drop(hold_lock(&lock_path(&path)));
    assert!(UnixStream::connect(&path).is_err());
    assert!(std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_socket());
    let server = TestServer::start_with(unix_config(dir.path(), &path));
    client(&path).set("after", "stale", 0).unwrap();
    server.stop().unwrap();
}

#[test]
fn a_socket_file_another_has_taken_is_left_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("taken.sock");
    let server = TestServer::start_with(unix_config(dir.path(), &path));
    std::fs::remove_file(&path).unwrap();
    let other = UnixListener::bind(&path).unwrap();
    server.stop().unwrap();
    assert!(
        path.exists(),
        "the server removed a socket file that was not its own"
    );
    UnixStream::connect(&path).unwrap();
    drop(other);
}

#[test]
fn a_second_server_on_the_path_of_a_running_one_fails_on_its_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.sock");
    let first = TestServer::start_with(unix_config(&dir.path().join("first"), &path));
    let error = start_failing(unix_config(&dir.path().join("second"), &path));
    let message = error.to_string();
    assert!(
        matches!(error, ServerError::Listen { .. })
            && message.contains(&format!(
                "the lock file {} is held by another process",
                lock_path(&path).display()
            )),
        "{message}"
    );
    assert!(
        !dir.path().join("second").exists(),
        "the lock is taken before the data directory is made"
    );
    // The first server still has its socket, and its lock file.
    client(&path).set("still", "here", 0).unwrap();
    assert!(lock_path(&path).is_file());
    first.stop().unwrap();
}

#[test]
fn a_socket_another_program_listens_on_is_left_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.sock");
    let other = UnixListener::bind(&path).unwrap();
    let error = start_failing(unix_config(dir.path(), &path));
    let message = error.to_string();
    assert!(
        matches!(error, ServerError::Listen { .. }) && message.contains("already"),
        "{message}"
    );
    UnixStream::connect(&path).unwrap();
    assert!(
        !lock_path(&path).exists(),
        "the failed start removes the lock file it made"
    );
    drop(other);
}

#[test]
fn a_path_whose_lock_another_server_holds_is_left_alone() {
    // Another server that holds the lock may have bound its socket and not
    // yet called listen(): its file then refuses connections like a stale
    // one, and must not be taken for one.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("starting.sock");
    let lock = hold_lock(&lock_path(&path));
    drop(UnixListener::bind(&path).unwrap());
    let inode = |path: &Path| std::fs::symlink_metadata(path).unwrap().ino();
    let (socket_before, lock_before) = (inode(&path), inode(&lock_path(&path)));
    let error = start_failing(unix_config(dir.path(), &path));
    assert!(
        error.to_string().contains("is held by another process"),
        "{error}"
    );
    assert_eq!(inode(&path), socket_before, "the socket file was replaced");
    assert_eq!(
        inode(&lock_path(&path)),
        lock_before,
        "the lock file was replaced"
    );
    drop(lock);

    // Once it lets go, the file is stale and is replaced.
    let server = TestServer::start_with(unix_config(dir.path(), &path));
    client(&path).set("after", "lock", 0).unwrap();
    server.stop().unwrap();
}

#[test]
fn a_lock_file_path_holding_something_else_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("larder.sock");
    let kind = |path: &Path| std::fs::symlink_metadata(path).unwrap().file_type();

    // A link is not followed.
    let elsewhere = dir.path().join("elsewhere");
    std::os::unix::fs::symlink(&elsewhere, lock_path(&path)).unwrap();
    let error = start_failing(unix_config(dir.path(), &path));
    assert!(error.to_string().contains("is a symbolic link"), "{error}");
    assert!(kind(&lock_path(&path)).is_symlink());
    assert!(!elsewhere.exists(), "the link was followed");
    assert!(!path.exists());
    std::fs::remove_file(lock_path(&path)).unwrap();

    // Larder never writes to its lock files: one with data is not one.
    std::fs::write(lock_path(&path), b"someone's notes").unwrap();
    let error = start_failing(unix_config(dir.path(), &path));
    assert!(error.to_string().contains("not a lock file"), "{error}");
    assert_eq!(std::fs::read(lock_path(&path)).unwrap(), b"someone's notes");
    std::fs::remove_file(lock_path(&path)).unwrap();

    std::fs::create_dir(lock_path(&path)).unwrap();
    let error = start_failing(unix_config(dir.path(), &path));
    assert!(error.to_string().contains("not a lock file"), "{error}");
    assert!(lock_path(&path).is_dir());
}

#[test]
fn a_lock_file_another_has_taken_is_left_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("larder.sock");
    let server = TestServer::start_with(unix_config(dir.path(), &path));
    std::fs::remove_file(lock_path(&path)).unwrap();
    std::fs::write(lock_path(&path), b"").unwrap();
    server.stop().unwrap();
    assert!(
        lock_path(&path).is_file(),
        "the server removed a lock file that was not its own"
    );
}

#[test]
fn a_path_that_is_not_a_socket_is_not_touched() {
    let dir = tempfile::tempdir().unwrap();
    let file: PathBuf = dir.path().join("notes.txt");
    std::fs::write(&file, b"keep me").unwrap();
    let error = start_failing(unix_config(dir.path(), &file));
    assert!(error.to_string().contains("not a socket"), "{error}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");

    let directory = dir.path().join("a-directory");
    std::fs::create_dir(&directory).unwrap();
    let error = start_failing(unix_config(dir.path(), &directory));
    assert!(error.to_string().contains("not a socket"), "{error}");
    assert!(directory.is_dir());

    // A link is not followed, even to a stale socket.
    let stale = dir.path().join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&stale, &link).unwrap();
    let error = start_failing(unix_config(dir.path(), &link));
    assert!(error.to_string().contains("not a socket"), "{error}");
    let kind = |path: &Path| std::fs::symlink_metadata(path).unwrap().file_type();
    assert!(kind(&link).is_symlink());
    assert!(kind(&stale).is_socket());
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

#[test]
fn replies_larger_than_the_socket_buffer_wait_for_a_slow_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("larder.sock");
    let server = TestServer::start_with(unix_config(dir.path(), &path));
    let keys = ["a", "b", "c", "d"];
    let client = client(&path);
    for (i, key) in keys.iter().enumerate() {
        let value = vec![b'a' + i as u8; 1000 * 1024];
        client.set(key, value.as_slice(), 0).unwrap();
    }
    // 4 MB of replies, many times what the socket holds: the server's
    // writes find it full until the client reads.
    let mut raw = Raw::connect_unix(&path);
    raw.send(b"get a b c d\r\n");
    std::thread::sleep(std::time::Duration::from_millis(300));
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            raw.read_line(),
            format!("VALUE {key} 0 {}\r\n", 1000 * 1024)
        );
        let value = raw.read_bytes(1000 * 1024);
        assert!(value.iter().all(|&b| b == b'a' + i as u8), "value of {key}");
        raw.expect(b"\r\n");
    }
    raw.expect(b"END\r\n");
    // And the connection goes on as before.
    raw.call(b"set small 0 0 2\r\nok\r\n", b"STORED\r\n");
    raw.call(b"get small\r\n", b"VALUE small 0 2\r\nok\r\nEND\r\n");
    drop(raw);

    // A client that leaves in the middle of its replies costs the server
    // only that connection.
    let mut leaving = Raw::connect_unix(&path);
    leaving.send(b"get a b c d\r\n");
    drop(leaving);
    assert_eq!(
        client.get::<String>("small").unwrap().as_deref(),
        Some("ok")
    );
    drop(client);
    server.stop().unwrap();
}
