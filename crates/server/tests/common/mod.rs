//! Helpers shared by the server's scenario tests: an in-process server on
//! its own runtime thread, a raw text-protocol socket, and a `memcache`
//! client.
//!
//! A [`TestServer`] owns the thread that runs `larder_server::serve_until`
//! (the runtime the binary runs on); stopping it (explicitly or by dropping
//! it) sends the shutdown signal and joins the thread, so when `stop`
//! returns the engine has been synced and closed and the data directory may
//! be opened again. Each test file compiles this
//! module separately and uses only part of it.

#![allow(dead_code, clippy::unwrap_used, clippy::indexing_slicing)]

use larder_engine::Durability;
use larder_server::{Address, Io, ServerConfig, ServerError, Shutdown};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a test socket waits for a reply before the test fails: far
/// longer than any healthy reply takes, short enough to fail fast.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A configuration for tests: an ephemeral port, two worker threads, the
/// given data directory and durability.
pub fn config(dir: &Path, durability: Durability) -> ServerConfig {
    ServerConfig {
        port: 0,
        threads: 2,
        memory_limit_mb: 64,
        data_dir: dir.to_path_buf(),
        durability,
        segment_bytes_max: Some(16 << 20),
        ..ServerConfig::default()
    }
}

/// A server running on a runtime of its own in a background thread.
pub struct TestServer {
    /// Where it listens.
    pub address: Address,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<Shutdown, ServerError>>>,
}

impl TestServer {
    /// Starts a server on `dir` with `durability`.
    pub fn start(dir: &Path, durability: Durability) -> TestServer {
        TestServer::start_with(config(dir, durability))
    }

    /// Starts a server with `config`; panics if it cannot bind. With
    /// `LARDER_TEST_IO` set (`auto`, `epoll` or `uring`), the server serves its
    /// connections that way, so that the whole suite can be run against
    /// either.
    pub fn start_with(mut config: ServerConfig) -> TestServer {
        if let Ok(name) = std::env::var("LARDER_TEST_IO") {
            config.io = Io::from_name(&name).expect("LARDER_TEST_IO is auto, epoll or uring");
        }
        TestServer::start_as_given(config)
    }

    /// Starts a server with exactly `config`, whatever `LARDER_TEST_IO`
    /// says; panics if it cannot bind.
    pub fn start_as_given(config: ServerConfig) -> TestServer {
        let (ready_sender, ready) = std::sync::mpsc::channel();
        let (shutdown, shutdown_signal) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("test-server".to_owned())
            .spawn(move || {
                larder_server::serve_until(
                    config,
                    move |addr| {
                        let _ = ready_sender.send(addr);
                    },
                    async {
                        let _ = shutdown_signal.await;
                    },
                )
            })
            .unwrap();
        // The sender is dropped unsent if the server fails to start.
        match ready.recv() {
            Ok(address) => TestServer {
                address,
                shutdown: Some(shutdown),
                thread: Some(thread),
            },
            Err(_) => panic!("server did not start: {:?}", thread.join().unwrap()),
        }
    }

    /// Sends the shutdown signal without waiting for the server to stop.
    pub fn signal_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Signals shutdown and waits until the server has stopped and its
    /// engine is synced and closed; returns what `serve_until` returned.
    pub fn stop(mut self) -> Result<Shutdown, ServerError> {
        self.stop_in_place()
    }

    fn stop_in_place(&mut self) -> Result<Shutdown, ServerError> {
        self.signal_shutdown();
        match self.thread.take() {
            Some(thread) => thread.join().unwrap(),
            None => Ok(Shutdown::default()),
        }
    }

    /// A raw connection to this server.
    pub fn raw(&self) -> Raw {
        Raw::connect(self.addr())
    }

    /// A `memcache` crate client speaking the text protocol.
    pub fn client(&self) -> memcache::Client {
        client(self.addr())
    }

    /// The TCP address it listens on; panics if it listens on a Unix
    /// domain socket.
    pub fn addr(&self) -> SocketAddr {
        match &self.address {
            Address::Tcp(addr) => *addr,
            Address::Unix(path) => panic!("listening on {}, not TCP", path.display()),
        }
    }

    /// The general `stats`, by name.
    pub fn stats(&self) -> HashMap<String, String> {
        self.raw().stats()
    }

    /// One general stat as a number.
    pub fn stat(&self, name: &str) -> u64 {
        let stats = self.stats();
        let value = stats.get(name).unwrap_or_else(|| panic!("no stat {name}"));
        value.parse().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.signal_shutdown();
            return;
        }
        let stopped = self.stop_in_place();
        assert!(stopped.is_ok(), "server stopped with {stopped:?}");
    }
}

/// A `memcache` client for `addr` over the text protocol.
pub fn client(addr: SocketAddr) -> memcache::Client {
    let url = format!(
        "memcache://127.0.0.1:{}?protocol=ascii&timeout={}",
        addr.port(),
        REPLY_TIMEOUT.as_secs()
    );
    memcache::Client::connect(url.as_str()).unwrap()
}

/// A value with explicit client flags, for the `memcache` crate (whose
/// built-in value types always send flags 0).
pub struct Flagged<'a> {
    /// The value bytes.
    pub bytes: &'a [u8],
    /// The client flags to store.
    pub flags: u32,
}

impl memcache::ToMemcacheValue<memcache::Stream> for Flagged<'_> {
    fn get_flags(&self) -> u32 {
        self.flags
    }

    fn get_length(&self) -> usize {
        self.bytes.len()
    }

    fn write_to(&self, stream: &mut memcache::Stream) -> std::io::Result<()> {
        stream.write_all(self.bytes)
    }
}

/// A raw text-protocol connection with a read timeout, over TCP or a Unix
/// domain socket.
pub struct Raw<S = TcpStream> {
    reader: BufReader<S>,
    writer: S,
}

impl Raw {
    /// Connects to `addr`; panics if the connection is refused.
    pub fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).unwrap();
        Raw::from_stream(stream)
    }

    /// Wraps a connected stream, setting the read timeout and nodelay.
    pub fn from_stream(stream: TcpStream) -> Raw {
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        let writer = stream.try_clone().unwrap();
        Raw {
            reader: BufReader::new(stream),
            writer,
        }
    }

    /// The socket, for setting options.
    pub fn stream(&self) -> &TcpStream {
        &self.writer
    }
}

impl Raw<UnixStream> {
    /// Connects to the Unix domain socket at `path`; panics if refused.
    pub fn connect_unix(path: &Path) -> Self {
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        let writer = stream.try_clone().unwrap();
        Raw {
            reader: BufReader::new(stream),
            writer,
        }
    }
}

impl<S: Read + Write> Raw<S> {
    /// Sends `bytes` in one write.
    pub fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    /// Reads exactly `length` bytes.
    pub fn read_bytes(&mut self, length: usize) -> Vec<u8> {
        let mut bytes = vec![0; length];
        self.reader.read_exact(&mut bytes).unwrap();
        bytes
    }

    /// Reads one line, `\r\n` included.
    pub fn read_line(&mut self) -> String {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).unwrap();
        String::from_utf8(line).unwrap()
    }

    /// Reads exactly as many bytes as `expected` and asserts they match.
    pub fn expect(&mut self, expected: &[u8]) {
        let actual = self.read_bytes(expected.len());
        assert_eq!(
            String::from_utf8_lossy(&actual),
            String::from_utf8_lossy(expected)
        );
    }

    /// Sends `request` and asserts the reply is exactly `expected`.
    pub fn call(&mut self, request: &[u8], expected: &[u8]) {
        self.send(request);
        self.expect(expected);
    }

    /// Reads until the server closes the connection (or resets it), and
    /// returns what arrived first. Panics if the read times out instead.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        let mut bytes = Vec::new();
        match self.reader.read_to_end(&mut bytes) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(error) => panic!("expected the server to close the connection: {error}"),
        }
        bytes
    }

    /// `stats`, by name.
    pub fn stats(&mut self) -> HashMap<String, String> {
        self.stats_of("")
    }

    /// `stats GROUP` (`settings`, say), by name; `""` for plain `stats`.
    pub fn stats_of(&mut self, group: &str) -> HashMap<String, String> {
        let request = format!("stats {group}");
        self.send(format!("{}\r\n", request.trim_end()).as_bytes());
        let mut stats = HashMap::new();
        loop {
            let line = self.read_line();
            if line == "END\r\n" {
                return stats;
            }
            let mut words = line.trim_end().splitn(3, ' ');
            assert_eq!(words.next(), Some("STAT"), "bad stats line {line:?}");
            let name = words.next().unwrap().to_owned();
            stats.insert(name, words.next().unwrap_or_default().to_owned());
        }
    }

    /// `gets key`: the value, flags and CAS unique, or `None` on a miss.
    pub fn gets(&mut self, key: &str) -> Option<(Vec<u8>, u32, u64)> {
        self.send(format!("gets {key}\r\n").as_bytes());
        let header = self.read_line();
        if header == "END\r\n" {
            return None;
        }
        let words: Vec<&str> = header.trim_end().split(' ').collect();
        assert_eq!(words.len(), 5, "bad VALUE line {header:?}");
        assert_eq!(words[0], "VALUE");
        assert_eq!(words[1], key);
        let flags = words[2].parse().unwrap();
        let length: usize = words[3].parse().unwrap();
        let cas = words[4].parse().unwrap();
        let value = self.read_bytes(length);
        self.expect(b"\r\nEND\r\n");
        Some((value, flags, cas))
    }

    /// The remaining time to live of `key` from `mg key t`: `Some(-1)` for
    /// an item that never expires, `None` on a miss.
    pub fn ttl(&mut self, key: &str) -> Option<i64> {
        self.send(format!("mg {key} t\r\n").as_bytes());
        let line = self.read_line();
        if line == "EN\r\n" {
            return None;
        }
        let ttl = line
            .trim_end()
            .strip_prefix("HD t")
            .unwrap_or_else(|| panic!("bad mg reply {line:?}"));
        Some(ttl.parse().unwrap())
    }
}
