//! The result of a run: [`Report`], printed as a plain text summary
//! (`Display`) or serialised as JSON (`serde`).
//!
//! Latencies are in microseconds, measured from when each request was due:
//! when it was written in a closed-loop run, and its slot in the fixed
//! schedule in an open-loop (`--rate`) run, so time a request spent waiting
//! behind a stalled server counts against the server.
//!
//! With `--interval`, the report also holds one [`IntervalReport`] per
//! interval of the measured phase, and each is printed as a line while the
//! run goes on (its `Display`).

use crate::stats::Latencies;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::fmt;

/// Percentiles of one histogram, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl LatencySummary {
    /// Summarises a histogram of nanoseconds (all zeros when it is empty).
    pub fn from_histogram(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            count: histogram.len(),
            mean_us: histogram.mean() / 1000.0,
            min_us: us(histogram.min()),
            p50_us: us(histogram.value_at_quantile(0.5)),
            p90_us: us(histogram.value_at_quantile(0.9)),
            p99_us: us(histogram.value_at_quantile(0.99)),
            p999_us: us(histogram.value_at_quantile(0.999)),
            max_us: us(histogram.max()),
        }
    }
}

/// Latency summaries: every request, and gets and sets apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencyReport {
    pub all: LatencySummary,
    pub get: LatencySummary,
    pub set: LatencySummary,
}

impl LatencyReport {
    pub fn from_latencies(latencies: &Latencies) -> Self {
        LatencyReport {
            all: LatencySummary::from_histogram(&latencies.all),
            get: LatencySummary::from_histogram(&latencies.get),
            set: LatencySummary::from_histogram(&latencies.set),
        }
    }
}

/// One interval of the measured phase: the measured requests whose replies
/// were recorded in it, and their latencies (from when each was due, like
/// the run's). Intervals tile the measured phase: each starts where the
/// previous one ended, the first at the end of the warm-up, and the last
/// ends at the last reply (or at the stop time, if that is later).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct IntervalReport {
    /// Position in the run, from 0.
    pub index: u64,
    /// Seconds from the end of the warm-up to the interval's start and end.
    pub start_seconds: f64,
    pub end_seconds: f64,
    /// Measured requests completed in the interval.
    pub requests: u64,
    /// `requests` over the interval's length; 0 for an interval of no length.
    pub ops_per_second: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl fmt::Display for IntervalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[interval {:>4}] {:>7.1} s to {:>7.1} s {:>10} ops {:>10.0} ops/s  p50 {:>9.1} us  p99 {:>9.1} us  max {:>10.1} us",
            self.index,
            self.start_seconds,
            self.end_seconds,
            self.requests,
            self.ops_per_second,
            self.p50_us,
            self.p99_us,
            self.max_us
        )
    }
}

/// What the preload phase did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PreloadReport {
    pub keys: u64,
    pub seconds: f64,
}

/// The settings a run used, repeated in its report so that a JSON file
/// stands on its own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSettings {
    pub target: String,
    pub protocol: &'static str,
    pub threads: usize,
    pub connections: usize,
    pub pipeline: usize,
    pub ratio_gets: u32,
    pub ratio_sets: u32,
    pub key_count: u64,
    pub key_pattern: &'static str,
    pub zipf_skew: Option<f64>,
    pub value_bytes_min: usize,
    pub value_bytes_max: usize,
    pub duration_seconds: Option<f64>,
    pub requests_limit: Option<u64>,
    pub warmup_seconds: f64,
    /// Open-loop target rate, requests per second; `None` for closed loop.
    pub rate: Option<u64>,
    pub seed: u64,
    /// Length of the reporting intervals (`--interval`); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<f64>,
}

/// The result of a run. Counts cover requests due after the warm-up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub settings: RunSettings,
    pub preload: Option<PreloadReport>,
    /// From the end of the warm-up to the last measured reply.
    pub measured_seconds: f64,
    /// Completed requests (replies received).
    pub requests: u64,
    pub ops_per_second: f64,
    pub gets: u64,
    pub sets: u64,
    pub hits: u64,
    pub misses: u64,
    /// Error replies, refused sets and replies of the wrong kind.
    pub errors: u64,
    /// Connections dropped before the end (I/O error, timeout, malformed or
    /// unexpected reply); their requests in flight are not counted.
    pub failed_connections: u64,
    /// The first reason a connection was dropped.
    pub first_failure: Option<String>,
    /// Open loop: how late, on average and at worst, the client sent
    /// measured requests after they were due (its timer has a resolution of
    /// about 1 ms). Latencies include this lag; 0 in closed loop.
    pub send_lag_mean_us: f64,
    pub send_lag_max_us: f64,
    pub latency: LatencyReport,
    /// Per-interval figures, in order (`--interval`); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Vec<IntervalReport>>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        writeln!(
            f,
            "target      {} ({}), {} threads, {} connections, pipeline {}",
            s.target, s.protocol, s.threads, s.connections, s.pipeline
        )?;
        let pattern = match s.zipf_skew {
            Some(skew) => format!("zipfian (skew {skew})"),
            None => s.key_pattern.to_owned(),
        };
        let values = if s.value_bytes_min == s.value_bytes_max {
            format!("{} bytes", s.value_bytes_min)
        } else {
            format!("{}-{} bytes", s.value_bytes_min, s.value_bytes_max)
        };
        writeln!(
            f,
            "workload    get:set {}:{}, {} keys {pattern}, values {values}, seed {}",
            s.ratio_gets, s.ratio_sets, s.key_count, s.seed
        )?;
        match s.rate {
            Some(rate) => writeln!(
                f,
                "schedule    open loop at {rate} requests/s; sends lagged the schedule by {:.0} us on average, {:.0} us at most (included in latency)",
                self.send_lag_mean_us, self.send_lag_max_us
            )?,
            None => writeln!(f, "schedule    closed loop")?,
        }
        if let Some(preload) = &self.preload {
            writeln!(
                f,
                "preload     {} keys in {:.2} s",
                preload.keys, preload.seconds
            )?;
        }
        writeln!(
            f,
            "measured    {:.2} s after {:.2} s of warm-up",
            self.measured_seconds, s.warmup_seconds
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "throughput  {:.0} ops/s ({} requests)",
            self.ops_per_second, self.requests
        )?;
        writeln!(
            f,
            "gets        {} ({} hits, {} misses); sets {}",
            self.gets, self.hits, self.misses, self.sets
        )?;
        writeln!(
            f,
            "errors      {}; failed connections {}",
            self.errors, self.failed_connections
        )?;
        if let Some(failure) = &self.first_failure {
            writeln!(f, "first failure: {failure}")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "latency us  {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "p50", "p90", "p99", "p99.9", "max", "mean", "count"
        )?;
        for (name, summary) in [
            ("all", &self.latency.all),
            ("get", &self.latency.get),
            ("set", &self.latency.set),
        ] {
            if summary.count == 0 {
                continue;
            }
            writeln!(
                f,
                "{name:<11} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10}",
                summary.p50_us,
                summary.p90_us,
                summary.p99_us,
                summary.p999_us,
                summary.max_us,
                summary.mean_us,
                summary.count
            )?;
        }
        if let Some(intervals) = &self.intervals {
            write_intervals(f, intervals)?;
        }
        Ok(())
    }
}

fn write_intervals(f: &mut fmt::Formatter<'_>, intervals: &[IntervalReport]) -> fmt::Result {
    writeln!(f)?;
    writeln!(
        f,
        "intervals   {:>15} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "seconds", "requests", "ops/s", "p50 us", "p99 us", "max us"
    )?;
    for interval in intervals {
        let span = format!("{:.1}-{:.1}", interval.start_seconds, interval.end_seconds);
        writeln!(
            f,
            "{:<11} {span:>15} {:>10} {:>10.0} {:>10.1} {:>10.1} {:>10.1}",
            interval.index,
            interval.requests,
            interval.ops_per_second,
            interval.p50_us,
            interval.p99_us,
            interval.max_us
        )?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]
mod tests {
    use super::*;

    #[test]
    fn summary_reports_microseconds() {
        let mut histogram = Histogram::<u64>::new(3).unwrap();
        for ns in 1..=1000u64 {
            histogram.record(ns * 1000).unwrap();
        }
        let summary = LatencySummary::from_histogram(&histogram);
        assert_eq!(summary.count, 1000);
        assert!((summary.p50_us - 500.0).abs() < 1.0, "{summary:?}");
        assert!((summary.p99_us - 990.0).abs() < 1.0, "{summary:?}");
        assert!((summary.max_us - 1000.0).abs() < 1.0, "{summary:?}");
    }

    #[test]
    fn empty_histogram_summarises_to_zeros() {
        let histogram = Histogram::<u64>::new(3).unwrap();
        assert_eq!(
            LatencySummary::from_histogram(&histogram),
            LatencySummary::default()
        );
    }
}
