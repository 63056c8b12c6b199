//! The waits of a connection's measured phase: a reply that never comes
//! fails the connection with the timeout, replies that each come within it
//! never do however long the run, and a request larger than the socket
//! takes at once is still written whole, to a server that reads slowly.

mod common;

use common::{serve_connection, start_tcp};
use larder_bench::{run, BenchOptions, Ratio, Report, ValueSize};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a reply may take in these runs.
const TIMEOUT: Duration = Duration::from_millis(1_000);

/// How late the slow server answers: well within [`TIMEOUT`], yet two
/// delays are longer than it.
const DELAY: Duration = Duration::from_millis(600);

fn bench(port: u16, ratio: Ratio, value_bytes: usize, pipeline: usize, requests: u64) -> Report {
    run(BenchOptions {
        target: format!("127.0.0.1:{port}"),
        threads: 1,
        connections_per_thread: 1,
        pipeline,
        ratio,
        key_count: 10,
        value_size: ValueSize {
            min_bytes: value_bytes,
            max_bytes: value_bytes,
        },
        requests: Some(requests),
        warmup: Duration::ZERO,
        timeout: TIMEOUT,
        seed: Some(3),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes")
}

/// Reads requests and never answers, until the client goes.
fn never_answer(stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 {
        line.clear();
    }
    Ok(())
}

/// Answers each get with a miss, [`DELAY`] after it came.
fn answer_late(stream: TcpStream) -> std::io::Result<()> {
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 {
        std::thread::sleep(DELAY);
        writer.write_all(b"END\r\n")?;
        line.clear();
    }
    Ok(())
}

/// The fake memcached, reading through a small buffer with a pause before
/// every read, so a large request waits for room in the socket.
fn read_slowly(stream: TcpStream) -> std::io::Result<()> {
    struct Slow(TcpStream);
    impl Read for Slow {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_millis(1));
            let room = buf.len().min(64 * 1024);
            self.0.read(buf.get_mut(..room).unwrap_or_default())
        }
    }
    let output = stream.try_clone()?;
    serve_connection(BufReader::with_capacity(64 * 1024, Slow(stream)), output)
}

#[test]
fn a_reply_that_never_comes_fails_the_connection() {
    for pipeline in [1, 4] {
        let report = bench(
            start_tcp(never_answer),
            Ratio { gets: 1, sets: 0 },
            10,
            pipeline,
            50,
        );
        assert_eq!(
            report.failed_connections, 1,
            "pipeline {pipeline}: {report}"
        );
        assert_eq!(
            report.requests, 0,
            "pipeline {pipeline}: nothing was answered"
        );
        let reason = report.first_failure.unwrap_or_default();
        assert!(
            reason.contains(&format!("no reply within {TIMEOUT:?}")),
            "pipeline {pipeline}: {reason}"
        );
    }
}

#[test]
fn replies_within_the_timeout_never_fail_however_long_the_run() {
    // Three replies, each 0.6 of the timeout late: the deadline of the
    // first passes while the second is awaited, and that of the second
    // while the third is.
    let report = bench(start_tcp(answer_late), Ratio { gets: 1, sets: 0 }, 10, 1, 3);
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert_eq!((report.requests, report.misses), (3, 3));
}

#[test]
fn requests_larger_than_the_socket_takes_at_once_are_written_whole() {
    // 4 MiB per set is more than a loopback socket buffers; the server
    // replies ERROR to anything that does not parse, which fails the run,
    // so a byte lost or written twice shows.
    let report = bench(
        start_tcp(read_slowly),
        Ratio { gets: 0, sets: 1 },
        4 << 20,
        1,
        4,
    );
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert_eq!((report.sets, report.errors), (4, 0));
}
