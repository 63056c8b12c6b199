//! On Linux, a Unix domain socket whose backlog is full refuses a connect
//! at once (TCP's connect waits): `larder bench` tries again until the
//! server accepts, within its connect timeout, instead of failing the run.

#![cfg(target_os = "linux")]

mod common;

use common::serve_connection;
use larder_bench::{run, BenchOptions, Ratio};
use std::os::unix::net::UnixListener;
use std::time::Duration;

/// A listening socket at `path` with a backlog of one, and connections that
/// fill that backlog; the runtime is only needed to set the backlog.
fn full_listener(path: &std::path::Path) -> (UnixListener, Vec<tokio::net::UnixStream>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let socket = tokio::net::UnixSocket::new_stream().expect("a socket");
        socket.bind(path).expect("bind");
        let listener = socket.listen(1).expect("listen");
        let mut waiting = Vec::new();
        loop {
            match tokio::net::UnixStream::connect(path).await {
                Ok(stream) => waiting.push(stream),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) => panic!("connect: {error}"),
            }
            assert!(waiting.len() < 100, "the backlog never filled");
        }
        let listener = listener.into_std().expect("a std listener");
        listener.set_nonblocking(false).expect("blocking accepts");
        (listener, waiting)
    })
}

#[test]
fn a_full_backlog_delays_the_connect_instead_of_failing_the_run() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("busy.sock");
    let (listener, waiting) = full_listener(&path);
    // The server starts accepting only after the run has begun connecting.
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve_connection(stream.try_clone()?, stream));
        }
    });
    let report = run(BenchOptions {
        target: format!("unix:{}", path.display()),
        threads: 1,
        connections_per_thread: 2,
        ratio: Ratio { gets: 1, sets: 0 },
        key_count: 100,
        requests: Some(20),
        warmup: Duration::ZERO,
        timeout: Duration::from_secs(10),
        seed: Some(3),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes once the server accepts");
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert_eq!(report.requests, 20);
    assert_eq!(report.misses, 20, "the fake server answers every get END");
    drop(waiting);
}
