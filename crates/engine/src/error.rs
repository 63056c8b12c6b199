//! The engine's errors. Each variant carries the evidence needed to act on it.

use std::io;
use std::path::PathBuf;

/// A result whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong inside the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation failed. `context` says which operation on which file.
    #[error("{context}: {source}")]
    Io {
        /// What the engine was doing, naming the file.
        context: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Stored bytes failed a check: a bad checksum, an impossible length, a
    /// wrong magic number.
    #[error("corrupt data in {file} at offset {offset}: {reason}")]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damaged record or header.
        offset: u64,
        /// What check failed, with the expected and actual values.
        reason: String,
    },
    /// Another engine (usually another process) holds the data directory.
    #[error("data directory {dir} is in use by another process (lock file {lock})")]
    Locked {
        /// The data directory.
        dir: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// A write could not be made durable earlier; the engine refuses writes
    /// until the cause is fixed and it recovers (see [`crate::Engine::stats`]).
    /// Reads keep working. Retrying later may succeed.
    #[error("writes are failing: {0}")]
    WritesFailing(String),
    /// A request exceeds a limit. The message names the limit.
    #[error("{0}")]
    TooLarge(String),
    /// The engine has used up its sequence numbers or segment ids, which are
    /// never reused: it takes no more writes. Reads keep working.
    #[error("{0}")]
    Exhausted(String),
    /// The engine has been closed.
    #[error("the engine is closed")]
    Closed,
}

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// True when retrying the same request later may succeed: disk full,
    /// I/O errors on writes, overload.
    pub fn is_temporary(&self) -> bool {
        matches!(self, Error::Io { .. } | Error::WritesFailing(_))
    }
}
