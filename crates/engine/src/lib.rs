//! Larder's storage engine: a durable, log-structured hash store.
//!
//! Every write appends one checksummed record to the active segment file
//! (see [`record`] for the byte map); an in-memory keydir maps each key to
//! its latest record and, within a memory budget, caches the value. Sealed
//! segments get hint files so reopening reads keys and locations without
//! values; background compaction rewrites segments that are mostly dead.
//!
//! # Use
//!
//! ```no_run
//! use larder_engine::{Config, Durability, Engine, Expiry, StoreMode};
//! let mut config = Config::new("/var/lib/larder");
//! config.durability = Durability::Always;
//! let engine = Engine::open(config)?;
//! let (outcome, ticket) = engine.store(StoreMode::Set, b"key", b"value", 0, Expiry::Never)?;
//! engine.commit(ticket)?; // now acknowledged: it survives a power cut
//! assert_eq!(engine.get(b"key")?.map(|item| item.value).as_deref(), Some(&b"value"[..]));
//! # let _ = outcome;
//! # Ok::<(), larder_engine::Error>(())
//! ```
//!
//! # Threads and durability
//!
//! An [`Engine`] is `Send + Sync`. Writes are visible to readers as soon as
//! the write call returns, and acknowledged (durable as the [`Durability`]
//! mode promises) once [`Engine::commit`] (or [`Engine::commit_async`]) of
//! the returned [`Ticket`] returns. Commit the latest ticket of a group of
//! writes to acknowledge them all.
//!
//! # Memory per key
//!
//! Each key costs one heap block (40 bytes of metadata, the key, and the
//! value while cached) and a pointer plus a control byte per table slot (the
//! table grows at 7/8 full); about 80 bytes besides the key in all, measured
//! by `examples/memory_per_key.rs`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

pub mod check;
pub mod clock;
mod compaction;
mod config;
mod engine;
mod error;
pub mod fs;
pub mod hint;
mod idle;
mod item;
mod keydir;
mod log;
mod maintenance;
mod ops;
pub mod record;
mod recovery;
pub mod salvage;
pub mod scan;
mod scheduling;
pub mod segment;
mod stats;
mod tombstones;
pub mod unsynced;

pub use clock::{Clock, Expiry};
pub use config::{Config, Durability};
pub use engine::{Engine, ReadOptions};
pub use error::{Error, Result};
pub use idle::IdleSignal;
pub use item::{Arith, ArithOutcome, BatchOp, DeleteOutcome, Item, StoreMode, StoreOutcome};
pub use log::{CommitFuture, Ticket};
pub use recovery::LOCK_FILE;
pub use stats::{RecoveryReport, SegmentStats, Stats};
