//! `larder bench` against a real memcached: a short pipelined run after a
//! preload must complete requests, see no errors, and find the preloaded
//! keys. Skipped (with a message) only when memcached is not installed;
//! `scripts/test.sh` installs it.

use larder_bench::{run, BenchOptions, Ratio};
use std::net::TcpListener;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const MEMCACHED: &str = "/usr/bin/memcached";

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

fn start_memcached() -> Option<(ServerGuard, u16)> {
    if !std::path::Path::new(MEMCACHED).exists() {
        eprintln!("skipping: {MEMCACHED} is not installed");
        return None;
    }
    let port = free_port();
    let child = Command::new(MEMCACHED)
        .args([
            "-u",
            "root",
            "-p",
            &port.to_string(),
            "-l",
            "127.0.0.1",
            "-U",
            "0",
        ])
        .spawn()
        .expect("start memcached");
    let guard = ServerGuard(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "memcached did not listen on port {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((guard, port))
}

#[test]
fn pipelined_run_against_memcached_hits_preloaded_keys() {
    let Some((_memcached, port)) = start_memcached() else {
        return;
    };
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
