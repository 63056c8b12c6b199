//! One request in flight and no rate, the measured phase's own loop: every
//! request is answered and counted once, by kind, warm-up requests not at
//! all, and a server that answers what was not asked, or answers out of
//! step, fails the connection with the reason instead of being counted.

mod common;

use common::{start_fake_memcached, start_tcp};
use larder_bench::{run, BenchOptions, Ratio, Report};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Answers every request line with `reply`, ignoring what it asked.
fn answer_each_line(stream: TcpStream, reply: &[u8]) -> std::io::Result<()> {
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 {
        writer.write_all(reply)?;
        line.clear();
    }
    Ok(())
}

fn bench(port: u16, ratio: Ratio, requests: u64) -> Report {
    run(BenchOptions {
        target: format!("127.0.0.1:{port}"),
        threads: 1,
        connections_per_thread: 2,
        pipeline: 1,
        ratio,
        key_count: 100,
        requests: Some(requests),
        warmup: Duration::ZERO,
        timeout: Duration::from_secs(10),
        seed: Some(11),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes")
}

#[test]
fn every_request_is_answered_and_counted_once_by_kind() {
    let port = start_fake_memcached();
    let report = bench(port, Ratio { gets: 1, sets: 1 }, 400);
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert_eq!(report.requests, 400);
    assert_eq!(report.gets + report.sets, 400);
    assert!(report.gets > 100 && report.sets > 100, "{report}");
    assert_eq!(
        report.misses, report.gets,
        "the fake server answers get END"
    );
    assert_eq!((report.hits, report.errors), (0, 0));
    assert_eq!(report.latency.all.count, 400);
}

/// A gets-only run against a server that answers with `serve`; both
/// connections must fail. Returns the report.
fn failing_run(serve: fn(TcpStream) -> std::io::Result<()>) -> Report {
    let report = bench(start_tcp(serve), Ratio { gets: 1, sets: 0 }, 100);
    assert_eq!(report.failed_connections, 2, "{report}");
    assert_eq!(
        report.latency.all.count, report.requests,
        "every request counted is recorded"
    );
    report
}

#[test]
fn a_reply_nobody_asked_for_fails_the_connection() {
    let report = failing_run(|stream| answer_each_line(stream, b"END\r\nEND\r\n"));
    let reason = report.first_failure.unwrap_or_default();
    assert!(reason.contains("nobody asked for"), "{reason}");
}

#[test]
fn a_reply_of_the_wrong_kind_fails_the_connection() {
    let report = failing_run(|stream| answer_each_line(stream, b"STORED\r\n"));
    assert_eq!(
        report.requests, 0,
        "a request answered out of step is not counted"
    );
    let reason = report.first_failure.unwrap_or_default();
    assert!(reason.contains("is not an answer to a Get"), "{reason}");
}

#[test]
fn warm_up_requests_are_not_counted_and_intervals_add_up() {
    let port = start_fake_memcached();
    let report = run(BenchOptions {
        target: format!("127.0.0.1:{port}"),
        threads: 1,
        connections_per_thread: 2,
        pipeline: 1,
        ratio: Ratio { gets: 3, sets: 1 },
        key_count: 100,
        requests: Some(3_000),
        warmup: Duration::from_millis(200),
        interval: Some(Duration::from_millis(100)),
        timeout: Duration::from_secs(10),
        seed: Some(5),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes");
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert_eq!(
        report.requests, 3_000,
        "the budget counts measured requests only"
    );
    assert_eq!(report.latency.all.count, 3_000);
    let intervals = report.intervals.as_ref().expect("intervals are reported");
    let counted: u64 = intervals.iter().map(|interval| interval.requests).sum();
    assert_eq!(counted, 3_000);
}
