//! Where connections put what they measure while a run goes on.
//!
//! Latencies go into HDR histograms (nanoseconds, 3 significant digits,
//! 1 ns to [`LATENCY_NS_MAX`]). Each histogram is made whole before the
//! run, its memory written once, so that recording never allocates, grows
//! or faults in a page while requests are measured. One histogram per
//! connection would cost hundreds of kilobytes times thousands of
//! connections, so the [`Recorder`] keeps a shard per thread that records
//! (up to a limit; past it threads share shards), each behind its own
//! mutex, and a connection records into the shard of the thread it runs
//! on, once per batch of replies: the shard is then in that thread's
//! core's cache, where a shard per connection was in the other core's
//! cache about half the time (tokio moves tasks between threads). A thread
//! gets its shard at its first record into a recorder, the next one in
//! turn. A shard records each latency once, by kind; the histogram of every
//! request is the kinds merged when the run is reported. With
//! `--interval`, each shard also keeps a histogram of the current interval,
//! recorded under the same lock, which the interval task takes and resets
//! with [`Recorder::take_interval`]; a latency lands in the interval in
//! which its reply was recorded. Counts a progress line needs live in
//! [`Live`] (atomics, relaxed: they are only displayed). Each connection
//! keeps its own [`Tally`] of measured outcomes and returns it when it
//! ends.

use crate::error::BenchError;
use crate::limits::LATENCY_NS_MAX;
use crate::request::Op;
use hdrhistogram::Histogram;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Latency histograms in nanoseconds: every request, and gets and sets apart.
#[derive(Debug, Clone)]
pub struct Latencies {
    pub all: Histogram<u64>,
    pub get: Histogram<u64>,
    pub set: Histogram<u64>,
}

/// An empty histogram of 1 ns to [`LATENCY_NS_MAX`], which never resizes.
fn histogram() -> Result<Histogram<u64>, BenchError> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3)
        .map_err(|error| BenchError::Histogram(format!("{error:?}")))
}

/// A [`histogram`] whose every count has been written once, so that no
/// record into it is the first touch of a page. (A new one's counts are
/// zeroed memory the system may not have mapped yet.) `black_box` keeps
/// the compiler from dropping the writes as storing zeroes over zeroes.
fn touched_histogram() -> Result<Histogram<u64>, BenchError> {
    let mut histogram = std::hint::black_box(histogram()?);
    histogram.reset();
    Ok(histogram)
}

/// Records one latency, clamped to the histogram's range.
fn record_one(histogram: &mut Histogram<u64>, latency_ns: u64) {
    histogram.saturating_record(latency_ns.clamp(1, LATENCY_NS_MAX));
}

impl Latencies {
    pub fn new() -> Result<Self, BenchError> {
        Ok(Latencies {
            all: histogram()?,
            get: histogram()?,
            set: histogram()?,
        })
    }
}

thread_local! {
    /// The recorder this thread last recorded into (its `id`) and the
    /// shard it was given there.
    static SHARD: Cell<Option<(u64, usize)>> = const { Cell::new(None) };
}

/// Numbers recorders, so a thread can tell which one its shard is in.
static RECORDERS: AtomicU64 = AtomicU64::new(0);

/// One shard: latencies of the whole run by kind, and of the current
/// interval when the run reports intervals.
struct Shard {
    get: Histogram<u64>,
    set: Histogram<u64>,
    interval: Option<Histogram<u64>>,
}

/// Sharded latency histograms shared by all connections.
pub struct Recorder {
    /// Unique in the process.
    id: u64,
    shards: Vec<Mutex<Shard>>,
    /// Threads given a shard so far.
    threads: AtomicUsize,
    /// With intervals, an empty interval histogram to swap into a shard
    /// (see [`Recorder::take_interval`]); `None` without.
    spare: Mutex<Option<Histogram<u64>>>,
}

impl Recorder {
    /// A recorder with `shards` shards (at least one); with `intervals`,
    /// each shard also keeps a histogram for [`Recorder::take_interval`].
    pub fn new(shards: usize, intervals: bool) -> Result<Self, BenchError> {
        let shards = (0..shards.max(1))
            .map(|_| {
                let interval = if intervals {
                    Some(touched_histogram()?)
                } else {
                    None
                };
                Ok(Mutex::new(Shard {
                    get: touched_histogram()?,
                    set: touched_histogram()?,
                    interval,
                }))
            })
            .collect::<Result<_, BenchError>>()?;
        let spare = if intervals {
            Some(touched_histogram()?)
        } else {
            None
        };
        Ok(Recorder {
            id: RECORDERS.fetch_add(1, Ordering::Relaxed),
            shards,
            threads: AtomicUsize::new(0),
            spare: Mutex::new(spare),
        })
    }

    /// Records a batch of `(op, latency_ns)` under one lock of the calling
    /// thread's shard.
    pub fn record(&self, batch: &[(Op, u64)]) {
        let shard = match SHARD.get() {
            Some((id, shard)) if id == self.id => shard,
            _ => {
                let shard = self.threads.fetch_add(1, Ordering::Relaxed);
                SHARD.set(Some((self.id, shard)));
                shard
            }
        };
        self.record_into(shard, batch);
    }

    /// Records a batch under one lock of shard `shard % shards`.
    fn record_into(&self, shard: usize, batch: &[(Op, u64)]) {
        if batch.is_empty() {
            return;
        }
        let Some(shard) = self.shards.get(shard % self.shards.len()) else {
            return;
        };
        // A panic while holding the lock cannot leave a histogram half
        // updated in a way that matters for a report, so poison is ignored.
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let Shard { get, set, interval } = &mut *shard;
        for &(op, latency_ns) in batch {
            match op {
                Op::Get => record_one(get, latency_ns),
                Op::Set => record_one(set, latency_ns),
            }
            if let Some(interval) = interval.as_mut() {
                record_one(interval, latency_ns);
            }
        }
    }

    /// All shards merged; `all` is gets and sets merged.
    pub fn merged(&self) -> Result<Latencies, BenchError> {
        let merge_error = |error| BenchError::Histogram(format!("{error:?}"));
        let mut total = Latencies::new()?;
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            total.get.add(&shard.get).map_err(merge_error)?;
            total.set.add(&shard.set).map_err(merge_error)?;
        }
        total.all.add(&total.get).map_err(merge_error)?;
        total.all.add(&total.set).map_err(merge_error)?;
        Ok(total)
    }

    /// The latencies recorded since the previous call (or since the start),
    /// every shard merged; each shard's interval histogram is reset as it is
    /// read, so every latency is returned by exactly one call. Empty when
    /// the recorder was made without intervals.
    ///
    /// Under a shard's lock its interval histogram is only swapped for an
    /// empty one, so connections recording into it wait for a swap, not
    /// for the merge and the reset of hundreds of kilobytes of counts; the
    /// histogram taken out, once merged and reset, is the next shard's
    /// empty one.
    pub fn take_interval(&self) -> Result<Histogram<u64>, BenchError> {
        let mut total = histogram()?;
        // Held for the whole call: one taker at a time.
        let mut spare = self.spare.lock().unwrap_or_else(PoisonError::into_inner);
        for shard in &self.shards {
            let Some(empty) = spare.take() else {
                break;
            };
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(interval) = shard.interval.as_mut() else {
                *spare = Some(empty);
                break;
            };
            let mut taken = std::mem::replace(interval, empty);
            drop(shard);
            let merged = total.add(&taken);
            taken.reset();
            *spare = Some(taken);
            merged.map_err(|error| BenchError::Histogram(format!("{error:?}")))?;
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
    /// Adds to the counts. Zeroes are skipped: every connection's adds
    /// touch the same cache line, which a write moves between the cores.
    pub fn add(&self, completed: u64, errors: u64) {
        if completed > 0 {
            self.completed.fetch_add(completed, Ordering::Relaxed);
        }
        if errors > 0 {
            self.errors.fetch_add(errors, Ordering::Relaxed);
        }
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
        recorder.record_into(0, &[(Op::Get, 1_000), (Op::Set, 5_000)]);
        recorder.record_into(1, &[(Op::Get, 2_000)]);
        recorder.record_into(7, &[(Op::Get, 0), (Op::Set, u64::MAX)]);
        let merged = recorder.merged().unwrap();
        assert_eq!(merged.all.len(), 5);
        assert_eq!(merged.get.len(), 3);
        assert_eq!(merged.set.len(), 2);
        assert_eq!(merged.get.min(), 1, "zero is clamped to 1 ns");
        assert!(merged.set.max() >= LATENCY_NS_MAX / 1001 * 1000);
    }

    #[test]
    fn each_recording_thread_gets_a_shard_of_its_own() {
        let recorder = Recorder::new(3, false).unwrap();
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    recorder.record(&[(Op::Get, 1_000)]);
                    recorder.record(&[(Op::Set, 2_000)]);
                });
            }
        });
        for shard in &recorder.shards {
            let shard = shard.lock().unwrap();
            assert_eq!(
                (shard.get.len(), shard.set.len()),
                (1, 1),
                "each shard holds one thread's two records"
            );
        }
    }

    #[test]
    fn a_thread_gets_a_shard_in_each_recorder_it_records_into() {
        let first = Recorder::new(2, false).unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| first.record(&[(Op::Get, 1_000)]));
        });
        first.record(&[(Op::Get, 1_000)]);
        let second = Recorder::new(2, false).unwrap();
        second.record(&[(Op::Get, 1_000)]);
        let counts = |recorder: &Recorder| {
            recorder
                .shards
                .iter()
                .map(|shard| shard.lock().unwrap().get.len())
                .collect::<Vec<_>>()
        };
        assert_eq!(counts(&first), [1, 1], "this thread came second");
        assert_eq!(counts(&second), [1, 0], "and first in the new recorder");
    }

    #[test]
    fn recording_never_resizes_a_histogram() {
        let recorder = Recorder::new(1, true).unwrap();
        let sizes = |recorder: &Recorder| {
            let shard = recorder.shards.first().unwrap().lock().unwrap();
            let interval = shard.interval.as_ref().unwrap();
            [&shard.get, &shard.set, interval].map(Histogram::distinct_values)
        };
        let before = sizes(&recorder);
        assert!(before.iter().all(|&size| size > 30_000), "{before:?}");
        recorder.record_into(
            0,
            &[(Op::Get, 1), (Op::Set, LATENCY_NS_MAX), (Op::Get, u64::MAX)],
        );
        assert_eq!(sizes(&recorder), before);
    }

    #[test]
    fn each_latency_is_taken_in_exactly_one_interval() {
        let recorder = Recorder::new(2, true).unwrap();
        recorder.record_into(0, &[(Op::Get, 1_000), (Op::Set, 2_000)]);
        recorder.record_into(1, &[(Op::Get, 3_000)]);
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
        recorder.record_into(5, &[(Op::Set, 7_000_000)]);
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
        recorder.record_into(0, &[(Op::Get, 1_000)]);
        assert!(recorder.take_interval().unwrap().is_empty());
        assert_eq!(recorder.merged().unwrap().all.len(), 1);
    }
}
