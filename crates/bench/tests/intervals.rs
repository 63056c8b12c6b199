//! `--interval` over a real socket: the intervals of a short run tile its
//! measured phase, and between them count every measured request exactly
//! once. The server is a minimal in-test memcached (set and get only) so
//! that the scenario needs nothing installed.

mod common;

use common::start_fake_memcached;
use larder_bench::{run, BenchOptions, Ratio};
use std::time::Duration;

#[test]
fn intervals_tile_the_run_and_count_every_request_once() {
    let port = start_fake_memcached();
    let report = run(BenchOptions {
        target: format!("127.0.0.1:{port}"),
        threads: 1,
        connections_per_thread: 4,
        pipeline: 2,
        ratio: Ratio { gets: 0, sets: 1 },
        key_count: 1_000,
        duration: Some(Duration::from_millis(1_000)),
        warmup: Duration::from_millis(100),
        interval: Some(Duration::from_millis(250)),
        seed: Some(7),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes");
    println!("{report}");
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert_eq!(report.settings.interval_seconds, Some(0.25));
    let intervals = report.intervals.as_ref().expect("intervals are reported");
    assert_eq!(
        intervals.len(),
        4,
        "boundaries at 0.25, 0.5 and 0.75 s, then the end"
    );
    let counted: u64 = intervals.iter().map(|interval| interval.requests).sum();
    assert_eq!(
        counted, report.requests,
        "every measured request in one interval"
    );
    let mut expected_start = 0.0;
    for (index, interval) in intervals.iter().enumerate() {
        assert_eq!(interval.index, index as u64);
        assert_eq!(interval.start_seconds, expected_start, "{intervals:?}");
        assert!(
            interval.end_seconds > interval.start_seconds,
            "{interval:?}"
        );
        assert!(interval.requests > 0, "{interval:?}");
        assert!(interval.ops_per_second > 0.0, "{interval:?}");
        assert!(interval.p50_us > 0.0, "{interval:?}");
        assert!(interval.p50_us <= interval.p99_us, "{interval:?}");
        assert!(interval.p99_us <= interval.max_us, "{interval:?}");
        expected_start = interval.end_seconds;
    }
    let last = intervals.last().expect("at least one interval");
    assert!(
        last.end_seconds >= 1.0 && last.end_seconds < 2.0,
        "the last interval runs to the stop time or the last reply: {last:?}"
    );
    let json = serde_json::to_value(&report).expect("the report encodes");
    let encoded = json.get("intervals").and_then(|value| value.as_array());
    assert_eq!(encoded.map(Vec::len), Some(4));
}

#[test]
fn without_an_interval_the_json_report_is_unchanged() {
    let port = start_fake_memcached();
    let report = run(BenchOptions {
        target: format!("127.0.0.1:{port}"),
        threads: 1,
        connections_per_thread: 1,
        ratio: Ratio { gets: 1, sets: 0 },
        duration: None,
        requests: Some(50),
        seed: Some(7),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes");
    assert_eq!(report.requests, 50);
    assert!(report.intervals.is_none());
    let json = serde_json::to_value(&report).expect("the report encodes");
    assert!(json.get("intervals").is_none(), "{json}");
    let settings = json.get("settings").expect("settings are reported");
    assert!(settings.get("interval_seconds").is_none(), "{json}");
}
