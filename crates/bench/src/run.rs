//! A whole run, in phases: validate, load keys, connect every connection,
//! preload, measure, report.
//!
//! [`run`] builds a multi-threaded tokio runtime with `threads` workers and
//! blocks on it; call it from a plain thread, not from inside a runtime.
//! Connections are tasks spread over the workers by tokio (not pinned), each
//! one running [`crate::connection`]'s phases, taken in turn
//! ([`GLOBAL_QUEUE_INTERVAL`]). A progress task prints a line
//! to stderr once a second while measuring. Every phase is bounded: opening
//! a connection and each reply wait at most `timeout`, and no request is
//! sent after the stop time.

use crate::connection::{self, Connection, MeasureOutcome, Plan, PreloadOutcome};
use crate::error::BenchError;
use crate::intervals::{interval_loop, IntervalLog};
use crate::keys::{KeyFile, KeySpace};
use crate::limits::{DURATION_MAX, HISTOGRAM_SHARDS_MAX};
use crate::options::{BenchOptions, KeyPattern};
use crate::report::{IntervalReport, LatencyReport, PreloadReport, Report, RunSettings};
use crate::socket::{Stream, Target};
use crate::stats::{Recorder, Tally};
use crate::workload::Shared;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long after the last connection task is spawned the first request is
/// due, so that every task is parked on its timer when the clock starts.
const START_DELAY: Duration = Duration::from_millis(20);

/// How often, in tasks run, a worker takes one from the runtime's shared
/// queue before its own, while the shared queue holds any.
///
/// A worker keeps at most 256 ready tasks in its own queue; when more
/// connections' replies are ready at once (a server that answers a batch of
/// connections together, over 256 connections a worker), half of them move
/// to the shared queue. By default tokio visits that queue once every
/// 200 µs of running tasks (at most every 127 tasks): for tasks as short as
/// a connection's turn here, about once every hundred. The connections
/// moved there waited many times as long as the rest, and their requests
/// made a p99 that belonged to the load generator: 65 ms against a p50 of
/// 1.7 ms for 500 connections on one worker. Every other task lets the
/// moved connections take their turn (p99 8 ms, p50 4.4 ms, the same
/// server and load). See benchmarks/HISTORY.md, "The load generator's
/// turns".
const GLOBAL_QUEUE_INTERVAL: u32 = 2;

/// Runs a benchmark and returns its report.
///
/// Errors mean the run could not start or its preload failed (see
/// [`BenchError`]); error replies and dropped connections during the
/// measured phase are counted in the report instead. Nothing is left
/// running when this returns.
pub fn run(options: BenchOptions) -> Result<Report, BenchError> {
    options.validate()?;
    let keys = match &options.key_pattern {
        KeyPattern::File(path) => {
            KeySpace::File(Arc::new(KeyFile::load(path, options.key_prefix.len())?))
        }
        _ => KeySpace::Range {
            count: options.key_count,
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.threads)
        .global_queue_interval(GLOBAL_QUEUE_INTERVAL)
        .thread_name("larder-bench")
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    runtime.block_on(drive(options, keys))
}

async fn drive(options: BenchOptions, keys: KeySpace) -> Result<Report, BenchError> {
    let seed = options.seed.unwrap_or_else(rand::random);
    let connections = options.connections();
    // A shard per worker thread, each thread recording into its own (the
    // runtime's other threads never record).
    let shards = options.threads.clamp(1, HISTOGRAM_SHARDS_MAX);
    let recorder = Recorder::new(shards, options.interval.is_some())?;
    let shared = Arc::new(Shared::new(&options, keys, seed, recorder));
    let streams = connect_all(&options.target, connections, options.timeout).await?;
    let mut open: Vec<Connection> = streams
        .into_iter()
        .enumerate()
        .map(|(index, stream)| Connection::new(index, stream))
        .collect();
    let preload = if options.preload {
        let (connections, report) = preload_all(open, &shared, &options).await?;
        open = connections;
        Some(report)
    } else {
        None
    };
    let start = Instant::now() + START_DELAY;
    let measure_start = start + options.warmup;
    let plan = Plan {
        start,
        measure_start,
        stop: measure_start + options.duration.unwrap_or(DURATION_MAX),
        pipeline: options.pipeline,
        timeout: options.timeout,
        rate: options.rate,
    };
    let progress = (options.progress && options.interval.is_none())
        .then(|| tokio::spawn(progress_loop(Arc::clone(&shared), plan)));
    let intervals = options
        .interval
        .map(|length| spawn_intervals(&shared, &plan, length, options.progress));
    let outcomes = measure_all(open, &shared, plan, options.requests).await;
    if let Some(progress) = progress {
        progress.abort();
    }
    let intervals = match intervals {
        Some(task) => {
            let last_reply = outcomes
                .iter()
                .filter_map(|outcome| outcome.last_reply)
                .max();
            Some(finish_intervals(&shared, task, last_reply, options.progress).await?)
        }
        None => None,
    };
    let latency = LatencyReport::from_latencies(&shared.recorder.merged()?);
    let mut report = build_report(&options, &shared, &plan, preload, outcomes, latency);
    report.intervals = intervals;
    Ok(report)
}

/// The interval task of a run and the sender that tells it the run is over.
type IntervalTask = (
    oneshot::Sender<()>,
    JoinHandle<Result<IntervalLog, BenchError>>,
);

fn spawn_intervals(
    shared: &Arc<Shared>,
    plan: &Plan,
    length: Duration,
    print: bool,
) -> IntervalTask {
    let log = IntervalLog::new(plan.measure_start, plan.stop, length);
    let (done, done_receiver) = oneshot::channel();
    let task = tokio::spawn(interval_loop(Arc::clone(shared), log, print, done_receiver));
    (done, task)
}

/// Stops the interval task, waits for it to hand back its log (so that no
/// boundary is being closed concurrently), and closes the last interval
/// with whatever was recorded since the last boundary.
async fn finish_intervals(
    shared: &Shared,
    (done, task): IntervalTask,
    last_reply: Option<Instant>,
    print: bool,
) -> Result<Vec<IntervalReport>, BenchError> {
    // The task may already be waiting on `done` or past it; either way it
    // returns, so a failed send needs no handling.
    let _ = done.send(());
    let mut log = match task.await {
        Ok(result) => result?,
        // The task is never aborted, so this is a panic: our bug, re-raised.
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    };
    let latencies = shared.recorder.take_interval()?;
    let last = log.close_last(Instant::now(), last_reply, &latencies);
    if print {
        eprintln!("{last}");
    }
    Ok(log.into_reports())
}

/// How long a connect to a Unix domain socket whose backlog is full waits
/// before it tries again.
const UNIX_CONNECT_RETRY: Duration = Duration::from_millis(1);

async fn connect_all(
    target: &str,
    connections: usize,
    timeout: Duration,
) -> Result<Vec<Stream>, BenchError> {
    /// The target with its host name resolved.
    enum Place {
        Tcp(SocketAddr),
        Unix(std::path::PathBuf),
    }
    let place = match Target::parse(target) {
        Target::Tcp(host_port) => Place::Tcp(resolve(&host_port).await?),
        Target::Unix(path) => Place::Unix(path),
    };
    let mut streams = Vec::with_capacity(connections);
    for connection in 0..connections {
        let connect_error = |source| BenchError::Connect {
            target: target.to_owned(),
            connection,
            source,
        };
        let connect = async {
            match &place {
                Place::Unix(path) => loop {
                    // On Linux a full backlog refuses a Unix domain
                    // socket's connect at once where TCP's waits: try again
                    // until the timeout around this gives up.
                    match UnixStream::connect(path).await {
                        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                            tokio::time::sleep(UNIX_CONNECT_RETRY).await;
                        }
                        result => break result.map(Stream::Unix),
                    }
                },
                Place::Tcp(address) => {
                    let stream = TcpStream::connect(address).await?;
                    // Requests are small and batched by the writer already:
                    // Nagle's delay would only add latency.
                    stream.set_nodelay(true)?;
                    Ok(Stream::Tcp(stream))
                }
            }
        };
        let stream = match tokio::time::timeout(timeout, connect).await {
            Ok(result) => result.map_err(connect_error)?,
            Err(_) => {
                let message = format!("no answer within {timeout:?}");
                return Err(connect_error(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    message,
                )));
            }
        };
        streams.push(stream);
    }
    Ok(streams)
}

async fn resolve(target: &str) -> Result<SocketAddr, BenchError> {
    let resolve_error = |reason: String| BenchError::Resolve {
        target: target.to_owned(),
        reason,
    };
    let mut addresses = tokio::net::lookup_host(target)
        .await
        .map_err(|error| resolve_error(error.to_string()))?;
    addresses
        .next()
        .ok_or_else(|| resolve_error("no addresses".to_owned()))
}

async fn preload_all(
    open: Vec<Connection>,
    shared: &Arc<Shared>,
    options: &BenchOptions,
) -> Result<(Vec<Connection>, PreloadReport), BenchError> {
    let started = Instant::now();
    if options.progress {
        eprintln!("preloading {} keys...", shared.keys.len());
    }
    let mut tasks = tokio::task::JoinSet::new();
    for mut connection in open {
        let shared = Arc::clone(shared);
        let timeout = options.timeout;
        tasks.spawn(async move {
            let outcome = connection::preload(&mut connection, &shared, timeout).await;
            (connection, outcome)
        });
    }
    let mut connections = Vec::with_capacity(tasks.len());
    let mut total = PreloadOutcome::default();
    while let Some(joined) = tasks.join_next().await {
        let (connection, outcome) = joined.map_err(|error| BenchError::Preload {
            failures: 1,
            first: format!("a preload task failed: {error}"),
        })?;
        total.stored += outcome.stored;
        total.failures += outcome.failures;
        if total.first_failure.is_none() {
            total.first_failure = outcome.first_failure;
        }
        connections.push(connection);
    }
    if total.failures > 0 {
        return Err(BenchError::Preload {
            failures: total.failures,
            first: total.first_failure.unwrap_or_default(),
        });
    }
    connections.sort_by_key(|connection| connection.index);
    let report = PreloadReport {
        keys: total.stored,
        seconds: started.elapsed().as_secs_f64(),
    };
    if options.progress {
        eprintln!("preloaded {} keys in {:.2} s", report.keys, report.seconds);
    }
    Ok((connections, report))
}

async fn measure_all(
    open: Vec<Connection>,
    shared: &Arc<Shared>,
    plan: Plan,
    requests: Option<u64>,
) -> Vec<MeasureOutcome> {
    let count = open.len().max(1) as u64;
    let mut tasks = tokio::task::JoinSet::new();
    for connection in open {
        // Split the request count evenly; the first `total % count`
        // connections take one more.
        let index = connection.index as u64;
        let budget = requests.map(|total| total / count + u64::from(index < total % count));
        tasks.spawn(connection::measure(
            connection,
            Arc::clone(shared),
            plan,
            budget,
        ));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    while let Some(joined) = tasks.join_next().await {
        outcomes.push(joined.unwrap_or_else(|error| MeasureOutcome {
            failure: Some(format!("a connection task failed: {error}")),
            ..MeasureOutcome::default()
        }));
    }
    outcomes
}

/// Prints one line a second to stderr until aborted.
async fn progress_loop(shared: Arc<Shared>, plan: Plan) {
    let second = Duration::from_secs(1);
    let mut ticker = tokio::time::interval_at((plan.start + second).into(), second);
    let mut last_completed = 0;
    let mut last_tick = plan.start;
    loop {
        ticker.tick().await;
        let now = Instant::now();
        let completed = shared.live.completed.load(Ordering::Relaxed);
        let errors = shared.live.errors.load(Ordering::Relaxed);
        let failed = shared.live.failed_connections.load(Ordering::Relaxed);
        let interval = now
            .saturating_duration_since(last_tick)
            .as_secs_f64()
            .max(1e-3);
        let rate = (completed - last_completed) as f64 / interval;
        let phase = if now < plan.measure_start {
            "warm-up"
        } else if now < plan.stop {
            "measuring"
        } else {
            "draining"
        };
        let elapsed = now.saturating_duration_since(plan.start).as_secs_f64();
        eprintln!(
            "[{elapsed:>5.0}s] {phase:<9} {rate:>10.0} ops/s  {completed} replies  {errors} errors  {failed} failed connections"
        );
        last_completed = completed;
        last_tick = now;
    }
}

fn build_report(
    options: &BenchOptions,
    shared: &Shared,
    plan: &Plan,
    preload: Option<PreloadReport>,
    outcomes: Vec<MeasureOutcome>,
    latency: LatencyReport,
) -> Report {
    let mut tally = Tally::default();
    let mut last_reply: Option<Instant> = None;
    let mut failed_connections = 0;
    let mut first_failure = None;
    for outcome in outcomes {
        tally.add(&outcome.tally);
        last_reply = last_reply.max(outcome.last_reply);
        if let Some(failure) = outcome.failure {
            failed_connections += 1;
            first_failure.get_or_insert(failure);
        }
    }
    let measured_seconds = last_reply
        .map(|last| {
            last.saturating_duration_since(plan.measure_start)
                .as_secs_f64()
        })
        .unwrap_or(0.0);
    let ops_per_second = if measured_seconds > 0.0 {
        tally.requests() as f64 / measured_seconds
    } else {
        0.0
    };
    Report {
        settings: settings(options, shared),
        preload,
        measured_seconds,
        requests: tally.requests(),
        ops_per_second,
        gets: tally.gets,
        sets: tally.sets,
        hits: tally.hits,
        misses: tally.misses,
        errors: tally.errors,
        failed_connections,
        first_failure,
        send_lag_mean_us: tally.send_lag_ns_total as f64 / tally.requests().max(1) as f64 / 1000.0,
        send_lag_max_us: tally.send_lag_ns_max as f64 / 1000.0,
        latency,
        intervals: None,
    }
}

fn settings(options: &BenchOptions, shared: &Shared) -> RunSettings {
    RunSettings {
        target: options.target.clone(),
        protocol: options.protocol.name(),
        threads: options.threads,
        connections: options.connections(),
        pipeline: options.pipeline,
        ratio_gets: options.ratio.gets,
        ratio_sets: options.ratio.sets,
        key_count: shared.keys.len(),
        key_pattern: options.key_pattern.name(),
        zipf_skew: match options.key_pattern {
            KeyPattern::Zipfian { skew } => Some(skew),
            _ => None,
        },
        value_bytes_min: options.value_size.min_bytes,
        value_bytes_max: options.value_size.max_bytes,
        duration_seconds: options.duration.map(|duration| duration.as_secs_f64()),
        requests_limit: options.requests,
        warmup_seconds: options.warmup.as_secs_f64(),
        rate: options.rate,
        seed: shared.seed,
        interval_seconds: options.interval.map(|length| length.as_secs_f64()),
    }
}
