//! Waiting for replies: a reply that never comes fails the connection with
//! the timeout, and replies that each come within it never do, however
//! much longer than the timeout the run lasts (each connection bounds its
//! reads with one timer, armed again when an earlier read's deadline
//! passes while a later read waits).

mod common;

use common::start_tcp;
use larder_bench::{run, BenchOptions, Ratio, Report};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How late the slow server answers each request it reads.
const DELAY: Duration = Duration::from_millis(1_200);

fn gets(port: u16, pipeline: usize, requests: u64, timeout: Duration) -> Report {
    run(BenchOptions {
        target: format!("127.0.0.1:{port}"),
        threads: 1,
        connections_per_thread: 1,
        pipeline,
        ratio: Ratio { gets: 1, sets: 0 },
        key_count: 10,
        requests: Some(requests),
        warmup: Duration::ZERO,
        timeout,
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

/// Answers each get with a miss, [`DELAY`] after reading it.
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

#[test]
fn a_reply_that_never_comes_fails_the_connection() {
    let timeout = Duration::from_millis(300);
    for pipeline in [1, 4] {
        let report = gets(start_tcp(never_answer), pipeline, 50, timeout);
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
            reason.contains(&format!("no reply within {timeout:?}")),
            "pipeline {pipeline}: {reason}"
        );
    }
}

#[test]
fn replies_within_the_timeout_never_fail_however_long_the_run() {
    // Three gets, each answered 1.2 s after the server reads it, with a
    // 2 s timeout: the deadline of the first read passes while the second
    // waits, and that of the second while the third does. With two in
    // flight the second reply comes 2.4 s after its request (the server
    // answers in turn), but its read began at the first reply, 1.2 s
    // before it.
    let timeout = Duration::from_millis(2_000);
    for pipeline in [1, 2] {
        let report = gets(start_tcp(answer_late), pipeline, 3, timeout);
        assert_eq!(
            report.failed_connections, 0,
            "pipeline {pipeline}: {:?}",
            report.first_failure
        );
        assert_eq!(
            (report.requests, report.misses),
            (3, 3),
            "pipeline {pipeline}"
        );
    }
}
