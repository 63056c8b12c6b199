//! Where connections put what they measure while a run goes on.
//!
//! Latencies go into HDR histograms (nanoseconds, 3 significant digits,
//! resizing to the largest value seen). One histogram per connection would
//! cost hundreds of kilobytes times thousands of connections, so the
//! [`Recorder`] keeps a few shards per worker thread, each behind its own
//! mutex, and a connection locks its shard once per batch of replies, not
//! once per reply. With `--interval`, each shard also keeps a histogram of
//! the current interval, recorded under the same lock, which the interval
//! task takes and resets with [`Recorder::take_interval`]; a latency lands in
//! the interval in which its reply was recorded. Counts a progress line
//! needs live in [`Live`] (atomics, relaxed: they are only displayed). Each
//! connection keeps its own [`Tally`] of measured outcomes and returns it
//! when it ends.

use crate::error::BenchError;
use crate::limits::LATENCY_NS_MAX;
use crate::request::Op;
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Latency histograms in nanoseconds: every request, and gets and sets apart.
#[derive(Debug, Clone)]
pub struct Latencies {
    pub all: Histogram<u64>,
    pub get: Histogram<u64>,
    pub set: Histogram<u64>,
}

fn histogram() -> Result<Histogram<u64>, BenchError> {
    Histogram::new(3).map_err(|error| BenchError::Histogram(format!("{error:?}")))
}

/// Records into a resizing histogram. `saturating_record` alone would not
/// resize (it clamps to the current highest trackable value, 2 ns for a new
/// histogram); `record` resizes and fails only past what a histogram can
/// ever track, which the caller's clamp rules out.
fn record_one(histogram: &mut Histogram<u64>, value: u64) {
    if histogram.record(value).is_err() {
        histogram.saturating_record(value);
    }
}

impl Latencies {
    pub fn new() -> Result<Self, BenchError> {
        Ok(Latencies {
            all: histogram()?,
            get: histogram()?,
            set: histogram()?,
        })
    }

    /// Records one latency, clamped to [`LATENCY_NS_MAX`].
    pub fn record(&mut self, op: Op, latency_ns: u64) {
        let latency_ns = latency_ns.clamp(1, LATENCY_NS_MAX);
        record_one(&mut self.all, latency_ns);
        match op {
            Op::Get => record_one(&mut self.get, latency_ns),
            Op::Set => record_one(&mut self.set, latency_ns),
        }
    }

    fn add(&mut self, other: &Latencies) -> Result<(), BenchError> {
        let merge_error = |error| BenchError::Histogram(format!("{error:?}"));
        self.all.add(&other.all).map_err(merge_error)?;
        self.get.add(&other.get).map_err(merge_error)?;
        self.set.add(&other.set).map_err(merge_error)?;
        Ok(())
    }
}

/// One shard: latencies of the whole run, and of the current interval when
/// the run reports intervals.
struct Shard {
    run: Latencies,
    interval: Option<Histogram<u64>>,
}

/// Sharded latency histograms shared by all connections.
pub struct Recorder {
    shards: Vec<Mutex<Shard>>,
}

impl Recorder {
    /// A recorder with `shards` shards (at least one); with `intervals`,
    /// each shard also keeps a histogram for [`Recorder::take_interval`].
    pub fn new(shards: usize, intervals: bool) -> Result<Self, BenchError> {
        let shards = (0..shards.max(1))
            .map(|_| {
                let interval = if intervals { Some(histogram()?) } else { None };
                Ok(Mutex::new(Shard {
                    run: Latencies::new()?,
                    interval,
                }))
            })
            .collect::<Result<_, BenchError>>()?;
        Ok(Recorder { shards })
    }

    /// Records a batch of `(op, latency_ns)` under one lock of the shard for
    /// `connection`.
    pub fn record(&self, connection: usize, batch: &[(Op, u64)]) {
        if batch.is_empty() {
            return;
        }
        let Some(shard) = self.shards.get(connection % self.shards.len()) else {
            return;
        };
        // A panic while holding the lock cannot leave a histogram half
        // updated in a way that matters for a report, so poison is ignored.
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let Shard { run, interval } = &mut *shard;
        for &(op, latency_ns) in batch {
            run.record(op, latency_ns);
            if let Some(interval) = interval.as_mut() {
                record_one(interval, latency_ns.clamp(1, LATENCY_NS_MAX));
            }
        }
    }

    /// All shards merged.
    pub fn merged(&self) -> Result<Latencies, BenchError> {
        let mut total = Latencies::new()?;
        for shard in &self.shards {
            total.add(&shard.lock().unwrap_or_else(PoisonError::into_inner).run)?;
        }
        Ok(total)
    }

    /// The latencies recorded since the previous call (or since the start),
    /// every shard merged; each shard's interval histogram is reset as it is
    /// read, so every latency is returned by exactly one call. Empty when
    /// the recorder was made without intervals.
    pub fn take_interval(&self) -> Result<Histogram<u64>, BenchError> {
        let mut total = histogram()?;
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(interval) = shard.interval.as_mut() {
                total
                    .add(&*interval)
                    .map_err(|error| BenchError::Histogram(format!("{error:?}")))?;
                interval.reset();
            }
        }
        Ok(total)
    }
}

/// Counts for the progress line: every completed reply, warm-up included.
#[derive(Debug, Default)]
pub struct Live {
    pub completed: AtomicU64,
    pub errors: AtomicU64,
    pub failed_connections: AtomicU64,
}

impl Live {
    pub fn add(&self, completed: u64, errors: u64) {
        self.completed.fetch_add(completed, Ordering::Relaxed);
        self.errors.fetch_add(errors, Ordering::Relaxed);
    }
}

/// One connection's measured outcomes (requests due after the warm-up).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub gets: u64,
    pub sets: u64,
    pub hits: u64,
    pub misses: u64,
    /// Error replies, refused sets, and replies of the wrong kind.
    pub errors: u64,
    /// How late the writer sent measured requests after they were due, in
    /// total and at most (open loop only: the client's own timer
    /// granularity and scheduling, which the latencies include).
    pub send_lag_ns_total: u64,
    pub send_lag_ns_max: u64,
}

impl Tally {
    pub fn add(&mut self, other: &Tally) {
        self.gets += other.gets;
        self.sets += other.sets;
        self.hits += other.hits;
        self.misses += other.misses;
        self.errors += other.errors;
        self.send_lag_ns_total = self
            .send_lag_ns_total
            .saturating_add(other.send_lag_ns_total);
        self.send_lag_ns_max = self.send_lag_ns_max.max(other.send_lag_ns_max);
    }

    pub fn requests(&self) -> u64 {
        self.gets + self.sets
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]
mod tests {
    use super::*;

    #[test]
    fn shards_merge_into_one_histogram_per_op() {
        let recorder = Recorder::new(3, false).unwrap();
        recorder.record(0, &[(Op::Get, 1_000), (Op::Set, 5_000)]);
        recorder.record(1, &[(Op::Get, 2_000)]);
        recorder.record(7, &[(Op::Get, 0), (Op::Set, u64::MAX)]);
        let merged = recorder.merged().unwrap();
        assert_eq!(merged.all.len(), 5);
        assert_eq!(merged.get.len(), 3);
        assert_eq!(merged.set.len(), 2);
        assert_eq!(merged.get.min(), 1, "zero is clamped to 1 ns");
        assert!(merged.set.max() >= LATENCY_NS_MAX / 1001 * 1000);
    }

    #[test]
    fn each_latency_is_taken_in_exactly_one_interval() {
        let recorder = Recorder::new(2, true).unwrap();
        recorder.record(0, &[(Op::Get, 1_000), (Op::Set, 2_000)]);
        recorder.record(1, &[(Op::Get, 3_000)]);
        let first = recorder.take_interval().unwrap();
        assert_eq!(first.len(), 3, "both shards are merged");
        assert!(
            first.max() / 10 == 300,
            "the largest is 3 us: {}",
            first.max()
        );
        assert!(
            recorder.take_interval().unwrap().is_empty(),
            "taking an interval resets it"
        );
        recorder.record(5, &[(Op::Set, 7_000_000)]);
        let second = recorder.take_interval().unwrap();
        assert_eq!(second.len(), 1);
        assert!(
            second.min() > 6_990_000,
            "only the new latency: {}",
            second.min()
        );
        assert_eq!(
            recorder.merged().unwrap().all.len(),
            4,
            "the whole run keeps every latency"
        );
    }

    #[test]
    fn a_recorder_without_intervals_takes_empty_ones() {
        let recorder = Recorder::new(1, false).unwrap();
        recorder.record(0, &[(Op::Get, 1_000)]);
        assert!(recorder.take_interval().unwrap().is_empty());
        assert_eq!(recorder.merged().unwrap().all.len(), 1);
    }
}
