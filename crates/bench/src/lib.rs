//! `larder bench`: a load generator for memcached-protocol servers, in the
//! text or the binary protocol (and Redis, through RESP `GET`/`SET`, so
//! that both run the same workload).
//!
//! [`run`] takes [`BenchOptions`] and returns a [`Report`]: throughput,
//! hits and misses, errors, and HDR-histogram latency percentiles measured
//! from when each request was due. [`BenchArgs`] is the same thing as a
//! `clap::Args` for the `larder` binary, and [`run_cli`] runs it and prints.
//!
//! ```text
//! run ── validate options, load the key file
//!  └─ tokio runtime (threads workers)
//!      ├─ connect every connection (sequentially, each bounded by timeout)
//!      ├─ preload: one task per connection writes its slice of the keys
//!      ├─ measure: one task per connection = writer ∥ reader (connection.rs)
//!      │     shared: Recorder (sharded histograms), Live counters
//!      ├─ progress task: a line on stderr each second, or
//!      └─ interval task (--interval): a line on stderr per interval
//! ```
//!
//! Modules: [`options`] and [`args`] say what to run, [`limits`] bounds it;
//! `keys`, `zipf` and `workload` choose requests, `request` encodes them,
//! [`reply`] parses answers (pure functions); `connection` and `run` drive
//! the sockets (TCP, or a Unix domain socket: `socket`); `stats` collects,
//! `intervals` cuts the measured phase into intervals, and [`report`]
//! presents.
//!
//! This crate depends on `larder-protocol` only for memcached's key limit
//! and the binary protocol's request encoding and numbers: it is a client,
//! and must work against any server.

mod args;
mod connection;
mod error;
mod intervals;
mod keys;
pub mod limits;
mod options;
pub mod reply;
pub mod report;
mod request;
mod run;
mod socket;
mod stats;
mod workload;
mod zipf;

pub use args::{run_cli, BenchArgs, KeyPatternArg};
pub use error::BenchError;
pub use options::{
    parse_duration, parse_ratio, parse_value_size, BenchOptions, KeyPattern, Ratio, ValueSize,
    ZIPF_SKEW_MAX,
};
pub use report::{
    IntervalReport, LatencyReport, LatencySummary, PreloadReport, Report, RunSettings,
};
pub use request::Protocol;
pub use run::run;
