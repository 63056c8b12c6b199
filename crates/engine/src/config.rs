//! Engine configuration: where the data lives, how durable an acknowledged
//! write is, and the sizes that bound memory and files.

use std::path::PathBuf;

/// What an acknowledged write survives.
///
/// Every mode hands each write to the operating system (a `write(2)`) before
/// [`crate::Engine::commit`] returns, so a crash of the Larder process
/// (`kill -9`, a panic) loses nothing in any mode. The modes differ in what
/// survives a power cut or a kernel crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// A write is acknowledged after an `fdatasync` that covers it. One
    /// `fdatasync` covers every write waiting at that moment (group commit),
    /// so throughput grows with the number of concurrent writers. A power cut
    /// loses nothing acknowledged (on a disk that honours flushes).
    Always,
    /// A write is acknowledged once written to the operating system; a
    /// background thread calls `fdatasync` at least once a second. A power
    /// cut loses at most the writes of about the last second.
    EverySec,
    /// A write is acknowledged once written to the operating system, which
    /// flushes it to disk when it chooses (typically within 30 s on Linux).
    /// A power cut loses an unknown number of the latest writes (what
    /// survives is always a prefix of the log), but the directory still
    /// opens: a segment is synced when it is created and when it is sealed.
    None,
}

impl Durability {
    /// The name used in configuration files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Always => "always",
            Durability::EverySec => "everysec",
            Durability::None => "none",
        }
    }

    /// Parses `always`, `everysec` or `none`.
    pub fn from_name(name: &str) -> Option<Durability> {
        match name {
            "always" => Some(Durability::Always),
            "everysec" => Some(Durability::EverySec),
            "none" => Some(Durability::None),
            _ => None,
        }
    }
}

/// Everything [`crate::Engine::open`] needs. Build one with
/// [`Config::new`] and adjust the public fields.
#[derive(Debug, Clone)]
pub struct Config {
    /// The data directory; created if missing. One engine at a time may hold
    /// it (a lock file enforces this).
    pub dir: PathBuf,
    /// See [`Durability`].
    pub durability: Durability,
    /// A segment is sealed and a new one started when the next record would
    /// take it past this size. Records larger than this get a segment of
    /// their own.
    pub segment_bytes_max: u32,
    /// Values are kept in memory while the total of cached value bytes stays
    /// under this budget; past it, only keys and locations stay in memory and
    /// values are read from the segment files.
    pub cache_bytes_max: u64,
    /// The longest value an `append` or `prepend` may make: one that would
    /// be longer is not stored, as memcached refuses to grow an item past
    /// its item size limit. At most 4 GiB - 1, the record format's limit.
    pub value_bytes_max: u32,
    /// Number of keydir partitions, each behind its own lock. Rounded up to
    /// a power of two, and at most 65,536 (so that the partition bits stay
    /// clear of the bits each table compares before reading an entry).
    pub partitions: usize,
    /// A sealed segment is compacted once this fraction of its bytes is dead
    /// (or, while the segment files hold more than 1.5x the live bytes, one
    /// at least 25% dead may be), but not while the files hold no more than
    /// the live bytes and a segment; see the compaction module.
    pub compaction_dead_ratio_min: f64,
    /// Run the background compaction and maintenance threads (the log's sync
    /// thread always runs). Tests that want full control over when compaction
    /// happens turn this off and call [`crate::Engine::compact_now`].
    pub background_threads: bool,
    /// Open even when sealed segments, or the active segment before intact
    /// records, are damaged: rewrite each such segment with its intact
    /// records only, keeping the original under `damaged/` (see
    /// [`crate::salvage`]). Off by default: such damage then fails the open.
    pub salvage: bool,
}

impl Config {
    /// Default segment size: 32 MiB. Compacting a segment needs room for
    /// its live records beside it until its output is durable, so the size
    /// bounds how far above its usual level disk use rises meanwhile: with
    /// 64 MiB, Experiment D (131.5 MiB live) peaked at 1.97x-2.02x of the
    /// live data sampled every second, with 32 MiB at 1.81x.
    pub const SEGMENT_BYTES_MAX_DEFAULT: u32 = 32 << 20;
    /// Default value cache: 1 GiB.
    pub const CACHE_BYTES_MAX_DEFAULT: u64 = 1 << 30;
    /// Default partition count: 256 (several per core on any machine).
    pub const PARTITIONS_DEFAULT: usize = 256;

    /// A configuration with Larder's defaults for the given directory.
    pub fn new(dir: impl Into<PathBuf>) -> Config {
        Config {
            dir: dir.into(),
            durability: Durability::EverySec,
            segment_bytes_max: Self::SEGMENT_BYTES_MAX_DEFAULT,
            cache_bytes_max: Self::CACHE_BYTES_MAX_DEFAULT,
            value_bytes_max: u32::MAX,
            partitions: Self::PARTITIONS_DEFAULT,
            compaction_dead_ratio_min: 0.5,
            background_threads: true,
            salvage: false,
        }
    }
}
