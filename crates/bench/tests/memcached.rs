//! `larder bench` against a real memcached: a short pipelined run after a
//! preload must complete requests, see no errors, and find the preloaded
//! keys, over TCP and over memcached's Unix domain socket. Skipped (with a
//! message) only when memcached is not installed; `scripts/test.sh`
//! installs it.

use larder_bench::{run, BenchOptions, Protocol, Ratio};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const MEMCACHED: &str = "/usr/bin/memcached";
/// How long a probe waits for memcached's answer before it asks again.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// Stops memcached by its PID however the test ends.
struct ServerGuard(Child);

impl Drop for ServerGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// Whether a memcached answers `version` on `stream`. A bare connect
/// proves only that something accepts there: if the port found free was
/// taken again before memcached could bind it, memcached exits, and the
/// connect reaches whatever took it (or, on a port of the ephemeral range
/// that connects pick, the connecting socket itself).
fn answers_version(mut stream: impl Read + Write) -> bool {
    let mut reply = [0u8; 8];
    stream.write_all(b"version\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && reply == *b"VERSION "
}

/// Whether memcached is installed; says so when it is not, and the test
/// is skipped.
fn installed() -> bool {
    let there = std::path::Path::new(MEMCACHED).exists();
    if !there {
        eprintln!("skipping: {MEMCACHED} is not installed");
    }
    there
}

fn start_memcached() -> (ServerGuard, u16) {
    // The port found free may be taken again before memcached binds it:
    // then it exits, and another port is tried.
    for _ in 0..5 {
        let port = free_port();
        let listen_flags = ["-p", &port.to_string(), "-l", "127.0.0.1"];
        let started = spawn_memcached(&listen_flags, || {
            TcpStream::connect(("127.0.0.1", port)).is_ok_and(|stream| {
                stream.set_read_timeout(Some(ANSWER_TIMEOUT)).is_ok() && answers_version(stream)
            })
        });
        if let Some(guard) = started {
            return (guard, port);
        }
    }
    panic!("memcached exited at start on five free ports in a row");
}

/// Starts memcached with `listen_flags` (its listening flags) and waits until
/// `listening` says it serves; `None` if it exited first (a listening
/// address already taken).
fn spawn_memcached(listen_flags: &[&str], listening: impl Fn() -> bool) -> Option<ServerGuard> {
    let child = Command::new(MEMCACHED)
        .args(["-u", "root", "-U", "0"])
        .args(listen_flags)
        .spawn()
        .expect("start memcached");
    let mut guard = ServerGuard(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !listening() {
        if let Some(status) = guard.0.try_wait().expect("memcached's status") {
            eprintln!("memcached exited at start ({status}) with {listen_flags:?}");
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "memcached did not listen ({listen_flags:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(guard)
}

#[test]
fn pipelined_run_against_memcached_hits_preloaded_keys() {
    if !installed() {
        return;
    }
    let (_memcached, port) = start_memcached();
    let started = Instant::now();
    let report = run(BenchOptions {
        target: format!("127.0.0.1:{port}"),
        threads: 2,
        connections_per_thread: 4,
        pipeline: 4,
        ratio: Ratio { gets: 9, sets: 1 },
        key_count: 10_000,
        preload: true,
        duration: Some(Duration::from_secs(1)),
        warmup: Duration::from_millis(200),
        seed: Some(42),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes");
    let call_seconds = started.elapsed().as_secs_f64();
    println!("{report}");
    assert_eq!(report.preload.map(|preload| preload.keys), Some(10_000));
    assert!(report.requests > 0, "no requests completed");
    assert_eq!(report.errors, 0);
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert!(report.hits > 0);
    assert_eq!(report.misses, 0, "every key was preloaded");
    assert_eq!(report.requests, report.gets + report.sets);
    assert_eq!(report.latency.all.count, report.requests);
    assert!(report.latency.all.p50_us > 0.0);
    assert!(report.latency.all.p50_us <= report.latency.all.p99_us);
    // The measured window ran for the duration asked, inside the call
    // (which also preloaded and warmed up).
    assert!(report.measured_seconds > 0.9, "{}", report.measured_seconds);
    assert!(
        report.measured_seconds + report.settings.warmup_seconds < call_seconds,
        "{} s measured after {} s of warm-up in a call of {call_seconds} s",
        report.measured_seconds,
        report.settings.warmup_seconds
    );
}

#[test]
fn a_run_over_memcacheds_unix_socket_hits_preloaded_keys() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("memcached.sock");
    let path_text = path.to_str().expect("a UTF-8 path");
    if !installed() {
        return;
    }
    let _memcached = spawn_memcached(&["-s", path_text], || {
        UnixStream::connect(&path).is_ok_and(|stream| {
            stream.set_read_timeout(Some(ANSWER_TIMEOUT)).is_ok() && answers_version(stream)
        })
    })
    .expect("memcached listens on a new socket path");
    let report = run(BenchOptions {
        target: path_text.to_owned(),
        threads: 1,
        connections_per_thread: 3,
        pipeline: 2,
        ratio: Ratio { gets: 3, sets: 1 },
        key_count: 2_000,
        preload: true,
        duration: Some(Duration::from_millis(500)),
        warmup: Duration::from_millis(100),
        seed: Some(7),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes");
    assert_eq!(report.preload.map(|preload| preload.keys), Some(2_000));
    assert!(report.gets > 0 && report.sets > 0, "{report}");
    assert_eq!(report.errors, 0);
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert_eq!(report.misses, 0, "every key was preloaded");
    assert_eq!(report.hits, report.gets);
}

#[test]
fn a_run_in_the_binary_protocol_hits_preloaded_keys_and_stores() {
    if !installed() {
        return;
    }
    let (_memcached, port) = start_memcached();
    let report = run(BenchOptions {
        target: format!("127.0.0.1:{port}"),
        protocol: Protocol::Binary,
        threads: 1,
        connections_per_thread: 3,
        pipeline: 3,
        ratio: Ratio { gets: 1, sets: 1 },
        key_count: 2_000,
        preload: true,
        duration: Some(Duration::from_millis(500)),
        warmup: Duration::from_millis(100),
        seed: Some(11),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes");
    assert_eq!(report.settings.protocol, "binary");
    assert_eq!(report.preload.map(|preload| preload.keys), Some(2_000));
    assert!(report.gets > 0 && report.sets > 0, "{report}");
    assert_eq!(report.errors, 0);
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert_eq!(report.misses, 0, "every key was preloaded");
    assert_eq!(report.hits, report.gets);
}
