//! Every bound the load generator enforces, by name, in one place.
//!
//! `larder bench` must stop by itself and never grow without bound, whatever
//! it is asked and whatever the server answers. Options are checked against
//! these in [`crate::BenchOptions::validate`]; the reply parsers check
//! [`REPLY_BYTES_MAX`] before buffering what a server merely claims.

use std::time::Duration;

/// Most worker threads in the client's runtime.
pub const THREADS_MAX: usize = 256;

/// Most connections in one run (threads x connections per thread).
pub const CONNECTIONS_MAX: usize = 10_000;

/// Most requests one connection keeps in flight.
pub const PIPELINE_MAX: usize = 1024;

/// Requests per write while preloading: enough to amortise round trips, few
/// enough that one batch of the largest values stays well under a socket's
/// buffers times a few.
pub const PRELOAD_PIPELINE: usize = 64;

/// Most distinct generated keys (`--keys`).
pub const KEY_COUNT_MAX: u64 = 10_000_000_000;

/// Largest value a run writes. Replies are bounded by [`REPLY_BYTES_MAX`].
pub const VALUE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Largest single reply accepted from a server (a `VALUE` block or a RESP
/// bulk string with its header): a value of [`VALUE_BYTES_MAX`] plus room for
/// the header line. A server claiming more is treated as broken and the
/// connection is dropped, so a read buffer never grows past this.
pub const REPLY_BYTES_MAX: usize = VALUE_BYTES_MAX + REPLY_LINE_BYTES_MAX + 16;

/// Longest reply header line (`VALUE <key> <flags> <bytes> <cas>`, an error
/// line, a RESP length) before the reply is called malformed.
pub const REPLY_LINE_BYTES_MAX: usize = 4096;

/// Longest measured phase.
pub const DURATION_MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// Shortest reporting interval (`--interval`): shorter ones would mostly
/// measure the client's timer and the reader's batching.
pub const INTERVAL_MIN: Duration = Duration::from_millis(100);

/// Most intervals one run may report. The run's longest possible measured
/// phase (its duration, or [`DURATION_MAX`] with only a request count)
/// divided by the interval must not exceed it, so the list of interval
/// reports is bounded before the run starts.
pub const INTERVALS_MAX: u64 = 100_000;

/// Longest warm-up.
pub const WARMUP_MAX: Duration = Duration::from_secs(60 * 60);

/// Most measured requests in one run (`--requests`).
pub const REQUESTS_MAX: u64 = 1_000_000_000_000;

/// Highest target rate, in requests per second over all connections.
pub const RATE_MAX: u64 = 100_000_000;

/// Longest wait for one reply, or for a connection to open.
pub const TIMEOUT_MAX: Duration = Duration::from_secs(60 * 60);

/// Largest key file (`--key-file`), in bytes.
pub const KEY_FILE_BYTES_MAX: u64 = 1024 * 1024 * 1024;

/// Most ids in a key file.
pub const KEY_FILE_IDS_MAX: usize = 200_000_000;

/// Longest key prefix; the prefix plus the longest id must still fit
/// memcached's key limit, which validation checks separately.
pub const KEY_PREFIX_BYTES_MAX: usize = 200;

/// Most latency histogram shards: one per worker thread up to this, and
/// past it threads share them. Each holds up to 0.8 MB of counts, made
/// before the run.
pub const HISTOGRAM_SHARDS_MAX: usize = 64;

/// Highest latency a histogram can record; longer ones are clamped to it
/// (and the reply timeout is below it, so none should be).
pub const LATENCY_NS_MAX: u64 = 2 * 60 * 60 * 1_000_000_000;

const _: () = assert!(TIMEOUT_MAX.as_nanos() < LATENCY_NS_MAX as u128);
const _: () = assert!(PRELOAD_PIPELINE <= PIPELINE_MAX);
// A `VALUE` block is its header line, the data, CRLF, and `END\r\n`.
const _: () = assert!(REPLY_BYTES_MAX >= REPLY_LINE_BYTES_MAX + VALUE_BYTES_MAX + 2 + 5);
