//! The errors a benchmark run can end with.
//!
//! A run fails only when it cannot start (bad options, unreadable key file,
//! no connection) or when its preload did not store every key. Trouble while
//! measuring (error replies, dropped connections, timeouts) is not an error:
//! it is counted in the [`crate::Report`], because a server that misbehaves
//! under load is exactly what a benchmark is for.

use std::path::PathBuf;
use thiserror::Error;

/// Why [`crate::run`] could not produce a report.
#[derive(Debug, Error)]
pub enum BenchError {
    /// An option is out of range or malformed; `option` is its flag name.
    #[error("invalid --{option}: {reason}")]
    InvalidOption {
        option: &'static str,
        reason: String,
    },
    /// The key file could not be read.
    #[error("cannot read key file {}: {source}", path.display())]
    KeyFileRead {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A line of the key file is not a usable key id.
    #[error("key file {} line {line}: {reason}", path.display())]
    KeyFileLine {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// The target did not resolve to any address.
    #[error("cannot resolve {target}: {reason}")]
    Resolve { target: String, reason: String },
    /// Opening connection number `connection` failed (or timed out).
    #[error("cannot connect to {target} (connection {connection}): {source}")]
    Connect {
        target: String,
        connection: usize,
        source: std::io::Error,
    },
    /// The client's tokio runtime could not start.
    #[error("cannot start the client runtime: {0}")]
    Runtime(std::io::Error),
    /// A latency histogram could not be created or merged (a bug: the
    /// histograms resize themselves).
    #[error("latency histogram: {0}")]
    Histogram(String),
    /// The preload phase did not store every key; `first` is the first
    /// problem seen (an error reply, a timeout, a dropped connection).
    #[error("preload failed: {failures} failures, first: {first}")]
    Preload { failures: u64, first: String },
}
