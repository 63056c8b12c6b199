//! Per-interval figures of the measured phase (`--interval`).
//!
//! [`IntervalLog`] is the bookkeeping, free of clocks and I/O: it says when
//! the current interval ends by the clock, and turns the latencies taken
//! from the [`crate::stats::Recorder`] at that moment into an
//! [`IntervalReport`]. [`interval_loop`] is the task that drives it: it
//! sleeps to each boundary, takes the interval's latencies (which resets
//! them) and prints the interval's line. Boundaries fall every `length`
//! after the end of the warm-up, but only before the stop time: the last
//! interval is closed by [`crate::run`] once every reply is in, so the
//! replies that arrive after the stop time count in it rather than in an
//! interval of their own.
//!
//! The loop runs on the run's runtime, one task per run; the log belongs to
//! that task until it hands it back on shutdown, so nothing else touches it.

use crate::error::BenchError;
use crate::report::{IntervalReport, LatencySummary};
use crate::workload::Shared;
use hdrhistogram::Histogram;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The intervals closed so far, and where the next one starts.
#[derive(Debug)]
pub struct IntervalLog {
    measure_start: Instant,
    stop: Instant,
    length: Duration,
    /// Where the open interval started: the previous interval's end.
    open_start: Instant,
    closed: Vec<IntervalReport>,
}

impl IntervalLog {
    /// A log for a measured phase from `measure_start` to `stop`, cut every
    /// `length` (which must not be zero: validation refuses it).
    pub fn new(measure_start: Instant, stop: Instant, length: Duration) -> Self {
        assert!(!length.is_zero());
        assert!(stop >= measure_start);
        IntervalLog {
            measure_start,
            stop,
            length,
            open_start: measure_start,
            closed: Vec::new(),
        }
    }

    /// When the open interval closes by the clock: its nominal boundary
    /// (`measure_start + (closed + 1) * length`, so a late timer does not
    /// shift later boundaries), or `None` when that is at or after the stop
    /// time and the interval closes when the run ends instead.
    pub fn next_boundary(&self) -> Option<Instant> {
        let number = u32::try_from(self.closed.len() + 1).ok()?;
        let boundary = self
            .measure_start
            .checked_add(self.length.checked_mul(number)?)?;
        (boundary < self.stop).then_some(boundary)
    }

    /// Closes the open interval at `end` with `latencies`, the latencies
    /// recorded in it, and returns its report. An `end` before the
    /// interval's start (a clock read before a late reply was recorded)
    /// gives an interval of no length.
    pub fn close(&mut self, end: Instant, latencies: &Histogram<u64>) -> IntervalReport {
        let end = end.max(self.open_start);
        let seconds_since_start =
            |instant: Instant| instant.duration_since(self.measure_start).as_secs_f64();
        let length_seconds = end.duration_since(self.open_start).as_secs_f64();
        let summary = LatencySummary::from_histogram(latencies);
        let report = IntervalReport {
            index: self.closed.len() as u64,
            start_seconds: seconds_since_start(self.open_start),
            end_seconds: seconds_since_start(end),
            requests: summary.count,
            ops_per_second: if length_seconds > 0.0 {
                summary.count as f64 / length_seconds
            } else {
                0.0
            },
            p50_us: summary.p50_us,
            p99_us: summary.p99_us,
            max_us: summary.max_us,
        };
        self.closed.push(report);
        self.open_start = end;
        report
    }

    /// Closes the last interval when the run has ended at `now`. A run that
    /// reached its stop time ends at the stop time or at the last reply
    /// drained after it, whichever is later, so a server that stopped
    /// answering shows as a slow last interval, not a short one. A run that
    /// ended earlier (its request count was spent, or every connection
    /// failed) ends at its last reply, or at `now` if the open interval saw
    /// no reply.
    pub fn close_last(
        &mut self,
        now: Instant,
        last_reply: Option<Instant>,
        latencies: &Histogram<u64>,
    ) -> IntervalReport {
        let end = if now >= self.stop {
            last_reply.map_or(self.stop, |last| last.max(self.stop))
        } else {
            last_reply
                .filter(|&last| last > self.open_start)
                .unwrap_or(now)
        };
        self.close(end, latencies)
    }

    /// The closed intervals, in order.
    pub fn into_reports(self) -> Vec<IntervalReport> {
        self.closed
    }
}

/// Closes intervals at their boundaries until `done` fires (or its sender
/// is dropped), then hands the log back so that the caller can close the
/// last one. Prints each interval's line on stderr when `print`.
pub async fn interval_loop(
    shared: Arc<Shared>,
    mut log: IntervalLog,
    print: bool,
    mut done: oneshot::Receiver<()>,
) -> Result<IntervalLog, BenchError> {
    while let Some(boundary) = log.next_boundary() {
        tokio::select! {
            _ = tokio::time::sleep_until(boundary.into()) => {}
            _ = &mut done => return Ok(log),
        }
        let latencies = shared.recorder.take_interval()?;
        let report = log.close(Instant::now(), &latencies);
        if print {
            eprintln!("{report}");
        }
    }
    // Past the last boundary: only the run's end is left to wait for. A
    // dropped sender means the same thing as a sent signal.
    let _ = done.await;
    Ok(log)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]
mod tests {
    use super::*;

    fn latencies(values_ns: &[u64]) -> Histogram<u64> {
        let mut histogram = Histogram::<u64>::new(3).unwrap();
        for &value in values_ns {
            histogram.record(value).unwrap();
        }
        histogram
    }

    fn seconds(value: f64) -> Duration {
        Duration::from_secs_f64(value)
    }

    #[test]
    fn boundaries_fall_every_length_and_only_before_the_stop() {
        let start = Instant::now();
        let mut log = IntervalLog::new(start, start + seconds(30.0), seconds(10.0));
        assert_eq!(log.next_boundary(), Some(start + seconds(10.0)));
        // A late timer does not push the next boundary back.
        log.close(start + seconds(10.5), &latencies(&[]));
        assert_eq!(log.next_boundary(), Some(start + seconds(20.0)));
        log.close(start + seconds(20.0), &latencies(&[]));
        assert_eq!(
            log.next_boundary(),
            None,
            "the boundary at the stop time is left to the end of the run"
        );
    }

    #[test]
    fn an_interval_longer_than_the_run_has_no_boundary() {
        let start = Instant::now();
        let log = IntervalLog::new(start, start + seconds(5.0), seconds(10.0));
        assert_eq!(log.next_boundary(), None);
    }

    #[test]
    fn intervals_tile_the_phase_and_count_their_own_requests() {
        let start = Instant::now();
        let mut log = IntervalLog::new(start, start + seconds(30.0), seconds(10.0));
        let first = log.close(
            start + seconds(10.0),
            &latencies(&[1_000, 2_000, 3_000, 4_000]),
        );
        let second = log.close(start + seconds(20.0), &latencies(&[50_000, 60_000]));
        assert_eq!((first.index, second.index), (0, 1));
        assert_eq!(first.start_seconds, 0.0);
        assert_eq!(first.end_seconds, 10.0);
        assert_eq!(second.start_seconds, first.end_seconds);
        assert_eq!(first.requests, 4);
        assert_eq!(second.requests, 2);
        assert!((first.ops_per_second - 0.4).abs() < 1e-9, "{first:?}");
        assert!((second.ops_per_second - 0.2).abs() < 1e-9, "{second:?}");
        assert!((first.max_us - 4.0).abs() < 0.01, "{first:?}");
        assert!(
            second.p50_us >= 49.9 && second.p50_us <= 50.1,
            "the second interval does not see the first one's latencies: {second:?}"
        );
        assert_eq!(log.into_reports(), vec![first, second]);
    }

    #[test]
    fn the_last_interval_ends_at_the_last_reply_or_the_stop_time() {
        let start = Instant::now();
        let stop = start + seconds(20.0);
        // Replies drained after the stop time extend the last interval.
        let mut log = IntervalLog::new(start, stop, seconds(10.0));
        log.close(start + seconds(10.0), &latencies(&[1_000]));
        let last = log.close_last(
            start + seconds(21.0),
            Some(start + seconds(20.5)),
            &latencies(&[1_000]),
        );
        assert_eq!(last.end_seconds, 20.5);
        // A server that stopped answering: the interval still runs to the stop.
        let mut log = IntervalLog::new(start, stop, seconds(10.0));
        log.close(start + seconds(10.0), &latencies(&[1_000]));
        let stalled = log.close_last(
            start + seconds(30.0),
            Some(start + seconds(9.0)),
            &latencies(&[]),
        );
        assert_eq!(stalled.end_seconds, 20.0);
        assert_eq!(stalled.requests, 0);
        assert_eq!(stalled.ops_per_second, 0.0);
        // A run ended early by its request count ends at its last reply.
        let mut log = IntervalLog::new(start, stop, seconds(10.0));
        let early = log.close_last(
            start + seconds(3.0),
            Some(start + seconds(2.5)),
            &latencies(&[1_000]),
        );
        assert_eq!(early.end_seconds, 2.5);
        assert!((early.ops_per_second - 0.4).abs() < 1e-9, "{early:?}");
    }

    #[test]
    fn a_clock_read_before_the_interval_start_gives_no_length_and_no_rate() {
        let start = Instant::now();
        let mut log = IntervalLog::new(start, start + seconds(30.0), seconds(10.0));
        log.close(start + seconds(10.0), &latencies(&[]));
        let empty = log.close(start + seconds(9.0), &latencies(&[1_000]));
        assert_eq!(empty.start_seconds, 10.0);
        assert_eq!(empty.end_seconds, 10.0);
        assert_eq!(empty.requests, 1);
        assert_eq!(empty.ops_per_second, 0.0);
    }
}
