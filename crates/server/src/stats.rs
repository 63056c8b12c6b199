//! The server's counters and the `stats` command's output.
//!
//! Each connection counts into counters that only it writes (a load and a
//! store per count, never a read-modify-write on a cache line another
//! thread writes too); `stats` sums them over every slot of counters, as
//! memcached sums its threads' counters.

use crate::config::ServerConfig;
use bytes::BytesMut;
use larder_engine::{Engine, Stats as EngineStats};
use larder_protocol::reply::{write_stat, write_stat_u64};
use parking_lot::Mutex;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A count that one connection writes and `stats` reads.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `by`. Only the connection that holds the counter's
    /// [`OpenCounts`] can call this, so a plain load and store lose nothing.
    pub fn add(&self, by: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(by),
            Ordering::Relaxed,
        );
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Each counter with its place in memcached's `stats` output, listed in the
/// order a slot holds them.
macro_rules! command_counts {
    ($($name:ident = $printed:literal),* $(,)?) => {
        /// One slot of counts (see [`Counts`]), on cache lines of its own
        /// so that connections on different threads never write one line.
        /// The counters every get or set adds to come first, on the first
        /// line: with hundreds of connections a slot is seldom still in the
        /// cache when its connection's next request comes.
        #[derive(Debug, Default)]
        #[repr(align(64))]
        pub struct CommandCounts {
            $(
                #[doc = concat!("memcached's `", stringify!($name), "`.")]
                pub $name: Counter,
            )*
        }

        // The places in the output are 0, 1, ... each once.
        const _: () = {
            const PLACES: &[usize] = &[$($printed),*];
            let mut taken = [false; PLACES.len()];
            let mut index = 0;
            while index < PLACES.len() {
                assert!(PLACES[index] < PLACES.len() && !taken[PLACES[index]]);
                taken[PLACES[index]] = true;
                index += 1;
            }
        };

        /// Counts summed over connections.
        #[derive(Debug, Default, Clone, Copy)]
        pub struct CountTotals {
            $(
                #[doc = concat!("memcached's `", stringify!($name), "`.")]
                pub $name: u64,
            )*
        }

        impl CountTotals {
            fn add(&mut self, counts: &CommandCounts) {
                $(
                    self.$name = self.$name.wrapping_add(counts.$name.get());
                )*
            }

            fn since(&self, earlier: &CountTotals) -> CountTotals {
                CountTotals {
                    $(
                        $name: self.$name.wrapping_sub(earlier.$name),
                    )*
                }
            }

            /// Writes every counter as a `STAT` line in memcached's order,
            /// but `total_items`, which memcached prints among the item
            /// figures.
            fn write(&self, out: &mut BytesMut) {
                let mut lines = [$(($printed, stringify!($name), self.$name)),*];
                lines.sort_unstable_by_key(|&(place, _, _)| place);
                for (_, name, value) in lines {
                    if name != "total_items" {
                        write_stat_u64(out, name.as_bytes(), value);
                    }
                }
            }
        }
    };
}

command_counts!(
    // The first cache line: what every get and set adds to.
    cmd_get = 0,
    cmd_set = 1,
    get_hits = 5,
    get_misses = 6,
    bytes_read = 22,
    bytes_written = 23,
    total_items = 25,
    cmd_meta = 4,
    // The rest.
    cmd_flush = 2,
    cmd_touch = 3,
    get_expired = 7,
    get_flushed = 8,
    delete_misses = 9,
    delete_hits = 10,
    incr_misses = 11,
    incr_hits = 12,
    decr_misses = 13,
    decr_hits = 14,
    cas_misses = 15,
    cas_hits = 16,
    cas_badval = 17,
    touch_hits = 18,
    touch_misses = 19,
    store_too_large = 20,
    store_no_memory = 21,
    server_errors = 24,
);

/// Every connection's counts, in slots that outlive their connections.
///
/// A connection takes a free slot when it opens and gives it back when it
/// closes; the next connection to take the slot adds to what is already
/// there. So the sum over all slots is the sum over every connection ever
/// open, `stats` reads it without a lock that opening or closing a
/// connection takes, and there are only as many slots as connections were
/// ever open at once.
#[derive(Debug, Default)]
pub struct Counts {
    registry: Arc<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    /// Never shrinks and never moves a slot, so it can be read while
    /// connections take and return slots.
    slots: boxcar::Vec<Arc<CommandCounts>>,
    /// Indexes of the slots no open connection holds. Handing a slot over
    /// through this lock is what makes the earlier owner's counts visible
    /// to the next owner, which adds to them.
    free: Mutex<Vec<usize>>,
    /// The sum at the last `stats reset`, which later sums are taken from.
    at_reset: Mutex<CountTotals>,
}

impl Registry {
    fn sum(&self, engine: &EngineCounts) -> CountTotals {
        let mut sum = CountTotals::default();
        for (_, counts) in &self.slots {
            sum.add(counts);
        }
        sum.get_expired = engine.get_expired;
        sum.get_flushed = engine.get_flushed;
        sum
    }
}

/// The counts `stats` takes from the engine rather than from connections:
/// whether a miss found an expired or a flushed item is the engine's to
/// know. Connections leave these two counters at 0.
#[derive(Debug, Default, Clone, Copy)]
pub struct EngineCounts {
    /// Items found expired (memcached's `get_expired`).
    pub get_expired: u64,
    /// Items found flushed (`get_flushed`).
    pub get_flushed: u64,
}

impl EngineCounts {
    /// The engine's counts as they are now.
    pub fn of(engine: &Engine) -> EngineCounts {
        let (get_expired, get_flushed) = engine.found_dead();
        EngineCounts {
            get_expired,
            get_flushed,
        }
    }
}

/// A connection's slot of counters, given back when dropped.
///
/// It is `Send` but not `Sync`, so a connection cannot share it with
/// another thread by reference; the single writer that [`Counter::add`]
/// relies on still rests on nobody sending on the `&CommandCounts` it
/// dereferences to.
#[derive(Debug)]
pub struct OpenCounts {
    /// The slot's counters, held here so that counting looks nothing up.
    counts: Arc<CommandCounts>,
    slot: usize,
    registry: Arc<Registry>,
    _one_writer: PhantomData<Cell<()>>,
}

impl std::ops::Deref for OpenCounts {
    type Target = CommandCounts;

    fn deref(&self) -> &CommandCounts {
        &self.counts
    }
}

impl Drop for OpenCounts {
    fn drop(&mut self) {
        self.registry.free.lock().push(self.slot);
    }
}

impl Counts {
    /// Counters for a new connection, counted by `stats` from now on.
    pub fn open(&self) -> OpenCounts {
        let free = self.registry.free.lock().pop();
        let slot =
            free.unwrap_or_else(|| self.registry.slots.push(Arc::new(CommandCounts::default())));
        OpenCounts {
            counts: Arc::clone(&self.registry.slots[slot]),
            slot,
            registry: Arc::clone(&self.registry),
            _one_writer: PhantomData,
        }
    }

    /// Every connection's counts since the last `stats reset`. Summed under
    /// the reset's lock, so that a reset cannot come between the sum and
    /// what it is taken from (connections never take that lock).
    /// `engine` reads the counts the engine keeps, under that lock too.
    pub fn totals(&self, engine: impl FnOnce() -> EngineCounts) -> CountTotals {
        let at_reset = self.registry.at_reset.lock();
        self.registry.sum(&engine()).since(&at_reset)
    }

    /// `stats reset`: counts start again from zero; `engine` as for
    /// [`Counts::totals`].
    pub fn reset(&self, engine: impl FnOnce() -> EngineCounts) {
        let mut at_reset = self.registry.at_reset.lock();
        *at_reset = self.registry.sum(&engine());
    }

    /// How many slots there are: the most connections ever open at once.
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.registry.slots.count()
    }
}

/// Server-wide figures.
#[derive(Debug)]
pub struct ServerStats {
    /// Command counters.
    pub counts: Counts,
    /// Connections open now.
    pub curr_connections: AtomicU64,
    /// Connections accepted since start.
    pub total_connections: AtomicU64,
    /// Connections refused because `max_connections` were open.
    pub rejected_connections: AtomicU64,
    /// Connections closed for sitting on a partial request too long, or
    /// for leaving their replies unread too long.
    pub timed_out_connections: AtomicU64,
    /// The open connections, for `stats conns`.
    pub(crate) conns: crate::conns::Connections,
    /// Current `verbosity` level.
    pub verbosity: AtomicU64,
    started: Instant,
}

impl Default for ServerStats {
    fn default() -> Self {
        ServerStats {
            counts: Counts::default(),
            curr_connections: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            timed_out_connections: AtomicU64::new(0),
            conns: Default::default(),
            verbosity: AtomicU64::new(0),
            started: Instant::now(),
        }
    }
}

/// The version reported by `version` and `stats`: memcached-style numbers
/// first so clients that parse it see a 1.6 server, then Larder's own.
pub const VERSION: &str = concat!("1.6.0-larder-", env!("CARGO_PKG_VERSION"));

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

impl ServerStats {
    /// `stats` with no argument: memcached's general figures, then Larder's.
    pub fn write_general(&self, config: &ServerConfig, engine: &Engine, out: &mut BytesMut) {
        let figures = engine.stats();
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        write_stat_u64(out, b"pid", u64::from(std::process::id()));
        write_stat_u64(out, b"uptime", self.started.elapsed().as_secs());
        write_stat_u64(out, b"time", unix_now());
        write_stat(out, b"version", VERSION.as_bytes());
        write_stat_u64(out, b"pointer_size", usize::BITS.into());
        let (user, system) = rusage();
        write_stat(out, b"rusage_user", user.as_bytes());
        write_stat(out, b"rusage_system", system.as_bytes());
        write_stat_u64(out, b"max_connections", config.max_connections as u64);
        write_stat_u64(out, b"curr_connections", load(&self.curr_connections));
        write_stat_u64(out, b"total_connections", load(&self.total_connections));
        write_stat_u64(
            out,
            b"rejected_connections",
            load(&self.rejected_connections),
        );
        write_stat_u64(out, b"connection_structures", load(&self.curr_connections));
        let counts = self.counts.totals(|| EngineCounts::of(engine));
        counts.write(out);
        write_stat_u64(out, b"limit_maxbytes", figures.cache_bytes_max);
        write_stat_u64(out, b"accepting_conns", 1);
        write_stat_u64(out, b"threads", config.threads as u64);
        write_stat_u64(out, b"bytes", figures.item_bytes);
        write_stat_u64(out, b"curr_items", figures.items);
        write_stat_u64(out, b"total_items", counts.total_items);
        write_stat_u64(out, b"evictions", 0);
        write_stat_u64(out, b"reclaimed", figures.reclaimed_items);
        self.write_larder(config, &figures, out);
    }

    /// Larder's own figures, all prefixed `larder_`.
    fn write_larder(&self, config: &ServerConfig, engine: &EngineStats, out: &mut BytesMut) {
        let stat = |out: &mut BytesMut, name: &str, value: u64| {
            write_stat_u64(out, format!("larder_{name}").as_bytes(), value);
        };
        write_stat(
            out,
            b"larder_durability",
            config.durability.name().as_bytes(),
        );
        stat(out, "cached_value_bytes", engine.cached_bytes);
        stat(out, "cache_evictions", engine.cache_evictions);
        stat(out, "disk_reads", engine.disk_reads);
        stat(out, "unsynced_seen", engine.unsynced_seen);
        stat(out, "segments", engine.segments);
        stat(out, "disk_bytes", engine.disk_bytes);
        stat(out, "live_bytes", engine.live_bytes);
        stat(out, "dead_bytes", engine.dead_bytes);
        stat(out, "log_bytes_written", engine.log_bytes_written);
        stat(out, "write_errors", engine.write_errors);
        stat(out, "fsyncs", engine.fsyncs);
        stat(out, "fsync_micros_total", engine.fsync_micros_total);
        stat(out, "fsync_micros_max", engine.fsync_micros_max);
        stat(out, "group_commits", engine.group_commits);
        stat(out, "group_commit_writers", engine.group_commit_writers);
        stat(
            out,
            "group_commit_writers_max",
            engine.group_commit_writers_max,
        );
        stat(out, "group_commits_waited", engine.group_commits_waited);
        stat(out, "expiry_walks", engine.expiry_walks);
        stat(out, "compactions", engine.compactions);
        stat(out, "compaction_bytes_read", engine.compaction_bytes_read);
        stat(
            out,
            "compaction_bytes_written",
            engine.compaction_bytes_written,
        );
        stat(
            out,
            "recovery_millis",
            engine.recovery.duration.as_millis() as u64,
        );
        stat(out, "recovery_records", engine.recovery.records);
        stat(
            out,
            "recovery_truncated_bytes",
            engine.recovery.truncated_bytes,
        );
        stat(
            out,
            "recovery_unfinished_segments",
            engine.recovery.unfinished_segments,
        );
        stat(
            out,
            "recovery_rewritten_segments",
            engine.recovery.rewritten_segments,
        );
        stat(
            out,
            "recovery_salvaged_segments",
            engine.recovery.salvaged_segments,
        );
        stat(
            out,
            "recovery_salvaged_records_skipped",
            engine.recovery.salvaged_records_skipped,
        );
        stat(
            out,
            "timed_out_connections",
            self.timed_out_connections.load(Ordering::Relaxed),
        );
        let failing = u64::from(engine.sync_failure.is_some());
        stat(out, "writes_failing", failing);
    }

    /// `stats settings`; `maxbytes` is the value cache's limit now (see
    /// `cache_memlimit`).
    pub fn write_settings(&self, config: &ServerConfig, engine: &Engine, out: &mut BytesMut) {
        write_stat_u64(out, b"maxbytes", engine.cache_bytes_max());
        write_stat_u64(out, b"maxconns", config.max_connections as u64);
        // On a Unix domain socket too, as memcached does.
        write_stat_u64(out, b"tcpport", u64::from(config.port));
        write_stat_u64(out, b"udpport", 0);
        write_stat(out, b"inter", config.listen.to_string().as_bytes());
        match &config.unix_socket {
            Some(path) => write_stat(out, b"domain_socket", path.as_os_str().as_encoded_bytes()),
            None => write_stat(out, b"domain_socket", b"NULL"),
        }
        write_stat(
            out,
            b"umask",
            format!("{:o}", config.unix_socket_mode).as_bytes(),
        );
        write_stat_u64(out, b"verbosity", self.verbosity.load(Ordering::Relaxed));
        write_stat(out, b"evictions", b"off");
        write_stat_u64(out, b"num_threads", config.threads as u64);
        write_stat(out, b"cas_enabled", b"yes");
        write_stat_u64(out, b"item_size_max", config.max_item_size as u64);
        write_stat(out, b"flush_enabled", b"yes");
        write_stat(
            out,
            b"larder_durability",
            config.durability.name().as_bytes(),
        );
        write_stat(out, b"larder_io", config.io.name().as_bytes());
        write_stat_u64(
            out,
            b"larder_idle_poll_us",
            u64::try_from(config.idle_poll.as_micros()).unwrap_or(u64::MAX),
        );
        write_stat(
            out,
            b"larder_data_dir",
            config.data_dir.display().to_string().as_bytes(),
        );
        write_stat_u64(
            out,
            b"larder_segment_bytes_max",
            u64::from(config.segment_bytes()),
        );
        match config.metrics_listen {
            Some(addr) => write_stat(out, b"larder_metrics_listen", addr.to_string().as_bytes()),
            None => write_stat(out, b"larder_metrics_listen", b"off"),
        }
        for (name, timeout) in [
            (
                &b"larder_partial_request_timeout_ms"[..],
                config.partial_request_timeout,
            ),
            (b"larder_write_timeout_ms", config.write_timeout),
        ] {
            let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            write_stat_u64(out, name, ms);
        }
    }

    /// `stats items`: memcached reports per slab class; Larder has one class.
    pub fn write_items(&self, engine: &EngineStats, out: &mut BytesMut) {
        write_stat_u64(out, b"items:1:number", engine.items);
        write_stat_u64(out, b"items:1:evicted", 0);
        write_stat_u64(out, b"items:1:reclaimed", engine.reclaimed_items);
    }

    /// `stats segments` (Larder's own): one line per segment file.
    pub fn write_segments(&self, engine: &EngineStats, out: &mut BytesMut) {
        for segment in &engine.segment_details {
            let value = format!(
                "len={} live={} dead={} sealed={}",
                segment.len_bytes,
                segment.live_bytes,
                segment.len_bytes.saturating_sub(segment.live_bytes),
                u8::from(segment.sealed)
            );
            write_stat(
                out,
                format!("segment:{}", segment.id).as_bytes(),
                value.as_bytes(),
            );
        }
    }
}

/// User and system CPU time as memcached prints them (`seconds.micros`).
fn rusage() -> (String, String) {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete rusage into the pointer, which is
    // valid and aligned for it; zeroed() also makes it a valid value before.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let format = |time: libc::timeval| format!("{}.{:06}", time.tv_sec, time.tv_usec);
    (format(usage.ru_utime), format(usage.ru_stime))
}

/// The `(name, value)` of each `STAT <name> <value>` line of a `stats`
/// reply written by this module, for the forms other than the text reply
/// (the binary protocol's packets, the metrics endpoint's lines).
pub(crate) fn stat_lines(text: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    text.split(|&byte| byte == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let stat = line.strip_prefix(b"STAT ")?;
        let at = stat.iter().position(|&byte| byte == b' ')?;
        Some((stat.get(..at)?, stat.get(at + 1..)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_every_get_and_set_adds_to_share_one_cache_line() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<CommandCounts>(), 64);
        for (name, offset) in [
            ("cmd_get", offset_of!(CommandCounts, cmd_get)),
            ("cmd_set", offset_of!(CommandCounts, cmd_set)),
            ("get_hits", offset_of!(CommandCounts, get_hits)),
            ("get_misses", offset_of!(CommandCounts, get_misses)),
            ("bytes_read", offset_of!(CommandCounts, bytes_read)),
            ("bytes_written", offset_of!(CommandCounts, bytes_written)),
            ("total_items", offset_of!(CommandCounts, total_items)),
            ("cmd_meta", offset_of!(CommandCounts, cmd_meta)),
        ] {
            assert!(
                offset + size_of::<Counter>() <= 64,
                "{name} at byte {offset}"
            );
        }
    }

    #[test]
    fn stats_prints_the_counters_in_memcacheds_order() {
        let mut out = BytesMut::new();
        CountTotals::default().write(&mut out);
        let names: Vec<&str> = std::str::from_utf8(&out)
            .unwrap()
            .lines()
            .map(|line| line.split(' ').nth(1).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "cmd_get",
                "cmd_set",
                "cmd_flush",
                "cmd_touch",
                "cmd_meta",
                "get_hits",
                "get_misses",
                "get_expired",
                "get_flushed",
                "delete_misses",
                "delete_hits",
                "incr_misses",
                "incr_hits",
                "decr_misses",
                "decr_hits",
                "cas_misses",
                "cas_hits",
                "cas_badval",
                "touch_hits",
                "touch_misses",
                "store_too_large",
                "store_no_memory",
                "bytes_read",
                "bytes_written",
                "server_errors",
            ]
        );
    }

    #[test]
    fn a_closed_connections_counts_stay_and_a_reset_starts_from_zero() {
        let counts = Counts::default();
        let first = counts.open();
        first.cmd_get.add(3);
        drop(first);
        let second = counts.open();
        second.cmd_get.add(2);
        second.get_hits.add(1);
        assert_eq!(counts.totals(EngineCounts::default).cmd_get, 5);
        assert_eq!(counts.totals(EngineCounts::default).get_hits, 1);

        counts.reset(EngineCounts::default);
        assert_eq!(counts.totals(EngineCounts::default).cmd_get, 0);
        second.cmd_get.add(4);
        drop(second);
        assert_eq!(counts.totals(EngineCounts::default).cmd_get, 4);
        assert_eq!(counts.totals(EngineCounts::default).get_hits, 0);
    }

    #[test]
    fn the_engines_counts_are_taken_from_the_last_reset_too() {
        let counts = Counts::default();
        let engine = |expired, flushed| EngineCounts {
            get_expired: expired,
            get_flushed: flushed,
        };
        assert_eq!(counts.totals(|| engine(3, 1)).get_expired, 3);
        counts.reset(|| engine(3, 1));
        let totals = counts.totals(|| engine(5, 1));
        assert_eq!((totals.get_expired, totals.get_flushed), (2, 0));
    }

    #[test]
    fn the_engines_counts_read_for_stats_never_fall_below_a_concurrent_resets() {
        // The engine counts on while one thread resets and another reads:
        // read outside the reset's lock, a count taken before a reset that
        // recorded a larger one wrapped round to nearly 2^64.
        let counts = Arc::new(Counts::default());
        let expired = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let engine = |expired: &AtomicU64| EngineCounts {
            get_expired: expired.fetch_add(1, Ordering::Relaxed),
            get_flushed: 0,
        };
        let resetter = {
            let (counts, expired, stop) = (counts.clone(), expired.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    counts.reset(|| engine(&expired));
                }
            })
        };
        for _ in 0..20_000 {
            let totals = counts.totals(|| engine(&expired));
            assert!(totals.get_expired < 1 << 32, "{}", totals.get_expired);
        }
        stop.store(true, Ordering::Relaxed);
        resetter.join().unwrap();
    }

    #[test]
    fn there_are_only_as_many_slots_as_connections_open_at_once() {
        let counts = Counts::default();
        for _ in 0..3 {
            let open: Vec<OpenCounts> = (0..10).map(|_| counts.open()).collect();
            for connection in &open {
                connection.cmd_set.add(1);
            }
        }
        assert_eq!(counts.slots(), 10);
        assert_eq!(counts.totals(EngineCounts::default).cmd_set, 30);

        let open: Vec<OpenCounts> = (0..11).map(|_| counts.open()).collect();
        assert_eq!(counts.slots(), 11);
        drop(open);
        assert_eq!(counts.totals(EngineCounts::default).cmd_set, 30);
    }

    #[test]
    fn counts_handed_between_threads_through_reused_slots_add_up() {
        const THREADS: u64 = 4;
        const CONNECTIONS: u64 = 2_000;
        let counts = Counts::default();
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _ in 0..CONNECTIONS {
                        let connection = counts.open();
                        for _ in 0..10 {
                            connection.cmd_get.add(1);
                        }
                        connection.bytes_read.add(7);
                    }
                });
            }
            // `stats` reads while the slots change hands.
            for _ in 0..100 {
                assert!(counts.totals(EngineCounts::default).cmd_get <= THREADS * CONNECTIONS * 10);
            }
        });
        let totals = counts.totals(EngineCounts::default);
        assert_eq!(totals.cmd_get, THREADS * CONNECTIONS * 10);
        assert_eq!(totals.bytes_read, THREADS * CONNECTIONS * 7);
        assert!(counts.slots() as u64 <= THREADS);
    }
}
