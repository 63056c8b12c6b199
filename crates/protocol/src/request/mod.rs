//! Parsed requests: one type per command family, borrowing from the buffer.
//!
//! Every `&'a [u8]` in a request (keys, values, opaque tokens) points into
//! the buffer given to [`crate::parse`]; nothing is copied. A request is
//! therefore valid only until the caller drops or overwrites those bytes, and
//! the caller should act on it (or copy what it keeps) before consuming the
//! frame. Numbers keep the exact values memcached would use: exptimes are the
//! raw signed seconds from the wire (0 = never, negative = already expired,
//! above 30 days = absolute Unix time), which the server interprets.
//!
//! Each submodule parses one command family, mirroring memcached's
//! `process_*_command` functions.

pub(crate) mod admin;
pub(crate) mod arithmetic;
pub(crate) mod delete;
pub(crate) mod meta_arithmetic;
pub(crate) mod meta_debug;
pub(crate) mod meta_delete;
pub(crate) mod meta_flags;
pub(crate) mod meta_get;
pub(crate) mod meta_set;
pub(crate) mod retrieval;
pub(crate) mod storage;
pub(crate) mod touch;

pub use admin::{CacheMemlimit, FlushAll, Stats, Verbosity};
pub use arithmetic::{Arithmetic, Direction};
pub use delete::Delete;
pub use meta_arithmetic::{MetaArithmetic, MetaArithmeticMode};
pub use meta_debug::MetaDebug;
pub use meta_delete::MetaDelete;
pub use meta_flags::{KeyBytes, MetaFlags, MetaKey};
pub use meta_get::MetaGet;
pub use meta_set::{MetaSet, MetaSetMode};
pub use retrieval::{Keys, Retrieval, RetrievalCommand};
pub use storage::{Store, StoreCommand};
pub use touch::Touch;

/// One complete, well-formed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get`, `gets`, `gat`, `gats` (and memcached's undocumented `bget`).
    /// Reply: a `VALUE` line and data block per hit, then `END`.
    Retrieval(Retrieval<'a>),
    /// `set`, `add`, `replace`, `append`, `prepend`, `cas`. Reply: `STORED`,
    /// `NOT_STORED`, `EXISTS` or `NOT_FOUND` (none with `noreply`).
    Store(Store<'a>),
    /// `delete`. Reply: `DELETED` or `NOT_FOUND`.
    Delete(Delete<'a>),
    /// `incr`, `decr`. Reply: the new value as a decimal line, `NOT_FOUND`,
    /// or `CLIENT_ERROR cannot increment or decrement non-numeric value`.
    Arithmetic(Arithmetic<'a>),
    /// `touch`. Reply: `TOUCHED` or `NOT_FOUND`.
    Touch(Touch<'a>),
    /// `flush_all [delay] [noreply]`. Reply: `OK`.
    FlushAll(FlushAll),
    /// `stats [args...]`. Reply: `STAT` lines then `END`; `ERROR` for an
    /// unknown group (the server decides which groups exist).
    Stats(Stats<'a>),
    /// `version` (any further tokens are ignored). Reply: `VERSION <v>`.
    Version,
    /// `verbosity <level> [noreply]`. Reply: `OK`.
    Verbosity(Verbosity),
    /// `quit` (any further tokens are ignored): close the connection, no
    /// reply.
    Quit,
    /// `mg <key> <flags>*`. Reply: `VA`, `HD` or `EN` (see [`MetaGet`]).
    MetaGet(MetaGet<'a>),
    /// `ms <key> <datalen> <flags>*` and its data block. Reply: `HD`, `NS`,
    /// `EX` or `NF`.
    MetaSet(MetaSet<'a>),
    /// `md <key> <flags>*`. Reply: `HD`, `NF` or `EX`.
    MetaDelete(MetaDelete<'a>),
    /// `ma <key> <flags>*`. Reply: `HD`, `VA`, `NF`, `NS` or `EX`.
    MetaArithmetic(MetaArithmetic<'a>),
    /// `mn` (any further tokens are ignored). Reply: `MN`; memcached also
    /// flushes its pending replies to the socket at this point.
    MetaNoop,
    /// `me <key> [b]`. Reply: an `ME` debug line or `EN`.
    MetaDebug(MetaDebug<'a>),
    /// `cache_memlimit <megabytes> [noreply]`: change the memory limit for
    /// values. Reply: `OK`, or below 8 MiB `MEMLIMIT_TOO_SMALL cannot set
    /// maxbytes to less than 8m` (none with `noreply`).
    CacheMemlimit(CacheMemlimit),
    /// `lru_crawler metadump all` (or `hash`, or `1`, the one class): a
    /// line per live item (`key=... exp=... la=... cas=... fetch=...
    /// cls=... size=...`), then `END`. memcached's other `lru_crawler`
    /// commands are unknown commands here.
    MetaDump,
}
