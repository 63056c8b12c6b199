//! Where connections put what they measure while a run goes on.
//!
//! Latencies go into HDR histograms (nanoseconds, 3 significant digits,
//! resizing to the largest value seen). One histogram per connection would
//! cost hundreds of kilobytes times thousands of connections, so the
//! [`Recorder`] keeps a few shards per worker thread, each behind its own
//! mutex, and a connection locks its shard once per batch of replies, not
//! once per reply. Counts a progress line needs live in [`Live`] (atomics,
//! relaxed: they are only displayed). Each connection keeps its own
//! [`Tally`] of measured outcomes and returns it when it ends.

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

/// Sharded latency histograms shared by all connections.
pub struct Recorder {
    shards: Vec<Mutex<Latencies>>,
}

impl Recorder {
    /// A recorder with `shards` shards (at least one).
    pub fn new(shards: usize) -> Result<Self, BenchError> {
        let shards = (0..shards.max(1))
            .map(|_| Latencies::new().map(Mutex::new))
            .collect::<Result<_, _>>()?;
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
        let mut latencies = shard.lock().unwrap_or_else(PoisonError::into_inner);
        for &(op, latency_ns) in batch {
            latencies.record(op, latency_ns);
        }
    }

    /// All shards merged.
    pub fn merged(&self) -> Result<Latencies, BenchError> {
        let mut total = Latencies::new()?;
        for shard in &self.shards {
            total.add(&shard.lock().unwrap_or_else(PoisonError::into_inner))?;
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
        let recorder = Recorder::new(3).unwrap();
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
}
