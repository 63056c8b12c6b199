//! One connection's request handling: turns parsed requests into engine
//! calls and replies, with no I/O of its own.
//!
//! A [`Session`] belongs to one connection task. It appends replies to its
//! output buffer and remembers the latest write [`Ticket`] of the batch; the
//! connection commits that ticket before sending the batch's replies, so a
//! pipelined batch of writes shares one group commit. Should the commit fail,
//! [`Session::fail_acks`] turns every acknowledgement of the batch into a
//! `SERVER_ERROR` before anything is sent.

use crate::stats::{OpenCounts, ServerStats};
use crate::ServerConfig;
use bytes::BytesMut;
use larder_engine::{
    ArithOutcome, Engine, Error as EngineError, Expiry, StoreMode, StoreOutcome, Ticket,
};
use larder_protocol::reply::{self, Reply};
use larder_protocol::{binary, Limits, Request};
use std::ops::Range;
use std::sync::Arc;

/// What the connection does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading requests.
    Continue,
    /// Send what is buffered, then close (`quit`).
    Close,
    /// The request's replies passed
    /// [`WRITE_BUFFER_BYTES_SOFT_MAX`](crate::limits::WRITE_BUFFER_BYTES_SOFT_MAX)
    /// before it was finished (a `get` of many keys): send what is
    /// buffered, then hand the same request in again, which carries on
    /// where it stopped.
    Unfinished,
}

/// State shared by every connection.
pub struct Shared {
    /// The storage engine.
    pub engine: Arc<Engine>,
    /// Server figures.
    pub stats: ServerStats,
    /// The configuration the server runs with.
    pub config: ServerConfig,
    /// Protocol limits derived from the configuration.
    pub limits: Limits,
}

#[cfg(test)]
impl Shared {
    /// State for unit tests: an engine on `fs` with `durability` and no
    /// background threads, and the default server configuration.
    pub(crate) fn on_memory(
        fs: &larder_engine::fs::MemFs,
        durability: larder_engine::Durability,
    ) -> Arc<Shared> {
        let mut config = larder_engine::Config::new("/data");
        config.durability = durability;
        config.background_threads = false;
        let fs = Arc::new(fs.clone());
        let engine = Engine::open_with(config, fs, larder_engine::Clock::system()).unwrap();
        Arc::new(Shared {
            engine: Arc::new(engine),
            stats: ServerStats::default(),
            config: ServerConfig::default(),
            limits: Limits::default(),
        })
    }
}

/// Per-connection request handling. See the module documentation.
pub struct Session {
    pub(crate) shared: Arc<Shared>,
    /// Replies not yet sent.
    pub output: BytesMut,
    /// Byte ranges of `output` that acknowledge a write of this batch.
    acks: Vec<Ack>,
    /// The latest write of this batch: committing it commits them all.
    pub ticket: Ticket,
    /// This connection's counts, which `stats` reads as they are.
    pub counts: OpenCounts,
    /// Keys of the retrieval at the front of the input already answered,
    /// when it stopped as [`Flow::Unfinished`]; 0 otherwise.
    pub(crate) retrieval_keys_done: usize,
    /// The replies of that unfinished retrieval so far wait for a commit
    /// (see [`Session::ack_seen`]).
    pub(crate) retrieval_acked: bool,
    /// They became a `SERVER_ERROR` (see [`Session::fail_acks`]): it is
    /// answered.
    pub(crate) retrieval_failed: bool,
    /// Keydir partitions of the `lru_crawler metadump` at the front of the
    /// input already listed, when it stopped as [`Flow::Unfinished`]; 0
    /// otherwise.
    pub(crate) dump_partitions_done: usize,
    /// The lines of that unfinished listing so far wait for a commit (as
    /// [`Session::retrieval_acked`] for a retrieval's replies).
    pub(crate) dump_acked: bool,
    /// They became a `SERVER_ERROR`: it is answered.
    pub(crate) dump_failed: bool,
    /// The header of the binary-protocol request being handled, if it is
    /// one: its acknowledgements fail in that protocol.
    pub(crate) binary_request: Option<binary::Header>,
}

/// The bytes of `output` that acknowledge a write, and the binary request
/// they answer, if they answer one (see [`Session::fail_acks`]).
struct Ack {
    range: Range<usize>,
    binary: Option<binary::Header>,
}

impl Session {
    /// A session for a new connection.
    pub fn new(shared: Arc<Shared>) -> Session {
        let counts = shared.stats.counts.open();
        Session {
            counts,
            shared,
            output: BytesMut::with_capacity(crate::limits::READ_BUFFER_BYTES_INITIAL),
            acks: Vec::new(),
            ticket: Ticket::NONE,
            retrieval_keys_done: 0,
            retrieval_acked: false,
            retrieval_failed: false,
            dump_partitions_done: 0,
            dump_acked: false,
            dump_failed: false,
            binary_request: None,
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    pub(crate) fn now(&self) -> u32 {
        self.shared.engine.clock().now()
    }

    /// Converts a client's exptime with memcached's rules (the binary protocol's is
    /// unsigned, so never negative).
    pub(crate) fn expiry(&self, exptime: impl Into<i64>) -> Expiry {
        Expiry::from_memcached(exptime.into(), self.now())
    }

    /// Notes a write to commit before this batch's replies are sent.
    pub(crate) fn wrote(&mut self, ticket: Ticket) {
        self.ticket = self.ticket.max(ticket);
    }

    /// Writes a reply that acknowledges a write of this batch.
    pub(crate) fn ack(&mut self, write: impl FnOnce(&mut BytesMut)) {
        let start = self.output.len();
        write(&mut self.output);
        self.ack_since(start);
    }

    /// A reply written from `start` on answered what reads saw, to be
    /// synced up to `ticket` before it is sent: like an acknowledgement, it
    /// becomes a `SERVER_ERROR` if that commit fails. Nothing to do for
    /// [`Ticket::NONE`].
    pub(crate) fn ack_seen(&mut self, start: usize, ticket: Ticket) {
        if ticket != Ticket::NONE {
            self.wrote(ticket);
            self.ack_since(start);
        }
    }

    /// Records `output[start..]` as the acknowledgement of a write of this
    /// batch.
    pub(crate) fn ack_since(&mut self, start: usize) {
        self.acks.push(Ack {
            range: start..self.output.len(),
            binary: self.binary_request,
        });
    }

    /// A write of this batch succeeded quietly (a meta command's `q`): no
    /// reply now, but if the batch's commit fails, an error goes here, as
    /// `q` hides successes only.
    pub(crate) fn ack_quietly(&mut self) {
        let at = self.output.len();
        self.acks.push(Ack {
            range: at..at,
            binary: self.binary_request,
        });
    }

    /// Counts a store's outcome as memcached does: every item stored, and
    /// how a compare-and-swap went.
    pub(crate) fn count_store(&mut self, outcome: StoreOutcome, mode: StoreMode) {
        let compared = matches!(mode, StoreMode::Cas(_) | StoreMode::CasOrStale(_));
        match outcome {
            StoreOutcome::Stored { .. } => {
                self.counts.total_items.add(1);
                if compared {
                    self.counts.cas_hits.add(1);
                }
            }
            StoreOutcome::NotStored => {}
            // An append or prepend whose CAS unique differs is not a `cas`
            // to memcached's counters.
            StoreOutcome::Exists if compared => self.counts.cas_badval.add(1),
            StoreOutcome::Exists => {}
            StoreOutcome::NotFound => self.counts.cas_misses.add(1),
        }
    }

    /// Counts an incr's or decr's outcome as memcached does: a counter `ma`
    /// creates is an item stored and neither hit nor miss; one that needs
    /// more digits is stored anew, which is an item stored as well.
    pub(crate) fn count_arith(&mut self, outcome: ArithOutcome, incr: bool) {
        let counts = &self.counts;
        let (hits, misses) = if incr {
            (&counts.incr_hits, &counts.incr_misses)
        } else {
            (&counts.decr_hits, &counts.decr_misses)
        };
        match outcome {
            ArithOutcome::Value { created: true, .. } => counts.total_items.add(1),
            ArithOutcome::Value { grew, .. } => {
                hits.add(1);
                if grew {
                    counts.total_items.add(1);
                }
            }
            // A counter that is not a number, or a CAS unique that does not
            // match, is neither a hit nor a miss to memcached.
            ArithOutcome::NonNumeric | ArithOutcome::Exists => {}
            ArithOutcome::NotFound => misses.add(1),
        }
    }

    /// Replies to an engine error with memcached's `SERVER_ERROR` line,
    /// saying whether a retry may help.
    pub(crate) fn engine_error(&mut self, error: &EngineError) {
        self.counts.server_errors.add(1);
        let message = match error {
            EngineError::TooLarge(_) => "object too large for cache".to_owned(),
            error if error.is_temporary() => format!("temporary failure, retry later: {error}"),
            error => format!("{error}"),
        };
        let message = message.replace(['\r', '\n'], " ");
        reply::write_server_error(&mut self.output, message.as_bytes());
    }

    /// A storage command was refused as too large. For a `set` or `ms`
    /// (`key` is then given), like memcached, remove the key's old value so
    /// no client reads it as if the update had won.
    pub fn refused_too_large(&mut self, key: Option<&[u8]>) {
        self.counts.store_too_large.add(1);
        let Some(key) = key else { return };
        match self.engine().delete(key, None) {
            Ok((_, ticket)) => self.wrote(ticket),
            Err(error) => tracing::warn!(%error, "removing the value of a refused update"),
        }
    }

    /// The batch's commit failed: every acknowledgement becomes an error,
    /// and every quiet success gets one; in the binary protocol, the
    /// status "Temporary failure" with the same message.
    pub fn fail_acks(&mut self, error: &EngineError) {
        let message = format!("write not durable, retry later: {error}").replace(['\r', '\n'], " ");
        let mut rebuilt = BytesMut::with_capacity(self.output.len());
        let mut at = 0;
        for ack in self.acks.drain(..) {
            let before = self.output.get(at..ack.range.start).unwrap_or_default();
            rebuilt.extend_from_slice(before);
            match ack.binary {
                Some(request) => binary::write_error_message(
                    &mut rebuilt,
                    &request,
                    binary::Status::TemporaryFailure,
                    message.as_bytes(),
                ),
                None => reply::write_server_error(&mut rebuilt, message.as_bytes()),
            }
            at = ack.range.end;
        }
        rebuilt.extend_from_slice(self.output.get(at..).unwrap_or_default());
        self.output = rebuilt;
        self.retrieval_failed = self.retrieval_keys_done != 0 && self.retrieval_acked;
        self.dump_failed = self.dump_partitions_done != 0 && self.dump_acked;
        self.counts.server_errors.add(1);
    }

    /// Forgets the batch's acknowledgements once they are safe to send.
    pub fn batch_sent(&mut self) {
        self.acks.clear();
        self.retrieval_acked = false;
        self.dump_acked = false;
        self.ticket = Ticket::NONE;
    }

    /// Handles one request, appending its reply.
    pub fn handle(&mut self, request: Request<'_>) -> Flow {
        match request {
            Request::Retrieval(get) => return self.retrieval(&get),
            Request::Store(store) => self.store(&store),
            Request::Delete(delete) => self.delete(&delete),
            Request::Arithmetic(arith) => self.arithmetic(&arith),
            Request::Touch(touch) => self.touch(&touch),
            Request::FlushAll(flush) => self.flush_all(&flush),
            Request::Stats(stats) => self.stats(&stats),
            Request::Version => {
                reply::write_version(&mut self.output, crate::stats::VERSION.as_bytes());
            }
            Request::Verbosity(verbosity) => {
                // memcached keeps at most its highest level, 2.
                self.shared.stats.verbosity.store(
                    u64::from(verbosity.level.min(VERBOSITY_MAX)),
                    std::sync::atomic::Ordering::Relaxed,
                );
                if !verbosity.noreply {
                    reply::write_reply(&mut self.output, Reply::Ok);
                }
            }
            Request::Quit => return Flow::Close,
            Request::MetaGet(get) => self.meta_get(&get),
            Request::MetaSet(set) => self.meta_set(&set),
            Request::MetaDelete(delete) => self.meta_delete(&delete),
            Request::MetaArithmetic(arith) => self.meta_arithmetic(&arith),
            Request::MetaNoop => reply::meta::write_meta_noop(&mut self.output),
            Request::MetaDebug(debug) => self.meta_debug(&debug),
            Request::MetaDump => return self.metadump(),
            Request::CacheMemlimit(limit) => self.cache_memlimit(limit),
        }
        Flow::Continue
    }
}

/// The highest level `verbosity` sets (memcached's `MAX_VERBOSITY_LEVEL`).
const VERBOSITY_MAX: u32 = 2;

#[cfg(test)]
mod tests {
    use super::*;
    use larder_engine::fs::{FaultKind, MemFs};
    use larder_engine::Durability;
    use larder_protocol::{parse, Parsed};

    /// A session over an engine on `fs` that acknowledges after a sync.
    fn session(fs: &MemFs) -> Session {
        Session::new(Shared::on_memory(fs, Durability::Always))
    }

    /// What a connection does once a batch is handled: commit, on failure
    /// turn the acknowledgements into errors; then "send" the replies.
    fn commit_and_send(session: &mut Session) -> String {
        if let Err(error) = session.engine().commit(session.ticket) {
            session.fail_acks(&error);
        }
        let sent = String::from_utf8(session.output.to_vec()).unwrap();
        session.output.clear();
        session.batch_sent();
        sent
    }

    /// Handles every request of `input` as one batch.
    fn handle_all(session: &mut Session, mut input: &[u8]) {
        while !input.is_empty() {
            let Ok(Parsed::Complete {
                request,
                frame_bytes,
            }) = parse(input, &Limits::default())
            else {
                panic!(
                    "not one whole request: {:?}",
                    input.escape_ascii().to_string()
                );
            };
            assert_eq!(session.handle(request), Flow::Continue);
            input = input.get(frame_bytes..).unwrap();
        }
    }

    #[test]
    fn a_failed_commit_answers_every_write_of_the_batch_the_quiet_ones_too() {
        let fs = MemFs::new();
        let mut session = session(&fs);
        // The quiet miss comes first: a miss waits for the unsynced writes
        // of its keydir partition, and which partition `zz` shares with
        // the keys written here changes with the hash's seed.
        handle_all(
            &mut session,
            b"mg zz q v\r\nms a 1 q\r\nx\r\nmn\r\nms b 1\r\ny\r\nmd b q\r\n\
              ma n q N0\r\nma n q v\r\nset s 0 0 1\r\nz\r\nmn\r\n",
        );
        // Every success is hidden but `ms b`'s `HD`, the `HD` of the `ma`
        // that created its counter (memcached answers that one) and `set`'s
        // `STORED`.
        assert_eq!(
            session.output.as_ref(),
            b"MN\r\nHD\r\nHD\r\nSTORED\r\nMN\r\n"
        );
        fs.inject(FaultKind::EioOnSync);
        let error = session.engine().commit(session.ticket).unwrap_err();
        session.fail_acks(&error);
        let output = String::from_utf8(session.output.to_vec()).unwrap();
        let lines: Vec<&str> = output.split_terminator("\r\n").collect();
        let failed = |line: &&str| line.starts_with("SERVER_ERROR write not durable");
        // The quiet ms, then `MN`, then ms b, md b, both ma, then `set`, then `MN`;
        // the quiet miss of `mg` stays quiet.
        assert_eq!(lines.len(), 8, "{output}");
        assert!(failed(&lines[0]), "{output}");
        assert_eq!(lines[1], "MN");
        assert!(lines[2..7].iter().all(failed), "{output}");
        assert_eq!(lines[7], "MN");
        // The batch's failure counts once in `server_errors`.
        let mut stats = BytesMut::new();
        let shared = &session.shared;
        shared
            .stats
            .write_general(&shared.config, &shared.engine, &mut stats);
        let stats = String::from_utf8(stats.to_vec()).unwrap();
        assert!(stats.contains("STAT server_errors 1\r\n"), "{stats}");
    }

    #[test]
    fn answers_that_saw_another_sessions_unsynced_write_wait_for_its_sync_and_fail_with_it() {
        let fs = MemFs::new();
        let mut writer = session(&fs);
        let mut reader = Session::new(Arc::clone(&writer.shared));
        let reads = |key: &str| {
            format!("get {key}\r\nadd {key} 0 0 1\r\nx\r\nincr {key} 1\r\nmg {key} v\r\nms {key} 1 C99999\r\nx\r\nmn\r\n")
        };

        // The writer has not committed: the reader's answers wait for it.
        handle_all(&mut writer, b"set k 0 0 1\r\nv\r\n");
        handle_all(&mut reader, reads("k").as_bytes());
        assert!(
            reader.ticket >= writer.ticket,
            "{:?} < {:?}",
            reader.ticket,
            writer.ticket
        );
        assert_eq!(
            commit_and_send(&mut reader),
            "VALUE k 0 1\r\nv\r\nEND\r\nNOT_STORED\r\n\
             CLIENT_ERROR cannot increment or decrement non-numeric value\r\n\
             VA 1\r\nv\r\nEX\r\nMN\r\n"
        );
        assert_eq!(commit_and_send(&mut writer), "STORED\r\n");

        // The sync fails: every answer that saw the write becomes an error.
        // (The fault goes in first, while nothing is unsynced, so that the
        // sync thread's round once a second cannot make the write durable
        // before it.)
        fs.inject(FaultKind::EioOnSync);
        handle_all(&mut writer, b"set j 0 0 1\r\nv\r\n");
        handle_all(&mut reader, reads("j").as_bytes());
        let sent = commit_and_send(&mut reader);
        let lines: Vec<&str> = sent.split_terminator("\r\n").collect();
        assert_eq!(lines.len(), 6, "{sent}");
        assert!(
            lines[..5]
                .iter()
                .all(|line| line.starts_with("SERVER_ERROR write not durable")),
            "{sent}"
        );
        assert_eq!(lines[5], "MN");
    }

    #[test]
    fn a_metadump_waits_for_the_sync_of_what_it_lists_and_fails_with_it() {
        let fs = MemFs::new();
        let mut writer = session(&fs);
        let mut reader = Session::new(Arc::clone(&writer.shared));
        let dump = b"lru_crawler metadump all\r\n";

        handle_all(&mut writer, b"set k 0 0 1\r\nv\r\n");
        assert_eq!(commit_and_send(&mut writer), "STORED\r\n");
        // Everything listed is synced: the listing waits for nothing.
        handle_all(&mut reader, dump);
        assert_eq!(reader.ticket, Ticket::NONE);
        assert!(commit_and_send(&mut reader).starts_with("key=k "));

        // An unsynced write is listed only once its sync is done.
        handle_all(&mut writer, b"set j 0 0 1\r\nv\r\n");
        handle_all(&mut reader, dump);
        assert!(reader.ticket >= writer.ticket, "{:?}", reader.ticket);
        let sent = commit_and_send(&mut reader);
        assert!(
            sent.contains("key=j ") && sent.ends_with("END\r\n"),
            "{sent}"
        );
        assert_eq!(commit_and_send(&mut writer), "STORED\r\n");

        // Its sync fails: the listing is one SERVER_ERROR.
        fs.inject(FaultKind::EioOnSync);
        handle_all(&mut writer, b"set i 0 0 1\r\nv\r\n");
        handle_all(&mut reader, dump);
        let sent = commit_and_send(&mut reader);
        assert!(sent.starts_with("SERVER_ERROR write not durable"), "{sent}");
        assert_eq!(sent.lines().count(), 1, "{sent}");
    }

    #[test]
    fn a_long_metadump_whose_commit_fails_part_way_ends_with_the_error() {
        let fs = MemFs::new();
        let mut writer = session(&fs);
        let mut reader = Session::new(Arc::clone(&writer.shared));
        // Enough lines of long keys to pass the soft limit: about 20k keys
        // of 250 bytes, each listed as a line of some 300.
        let mut sets = Vec::new();
        for index in 0..20_000 {
            sets.extend_from_slice(format!("set {index:0>250} 0 0 1 noreply\r\nv\r\n").as_bytes());
        }
        handle_all(&mut writer, &sets);
        // Synced, so that the fault goes in while nothing is unsynced: the
        // sync thread syncs on its own too, once a second, and could sync a
        // write made before the fault. Then a key of the first partition,
        // which the listing's first part holds, is written again.
        assert_eq!(commit_and_send(&mut writer), "");
        let mut first = Vec::new();
        let seen = writer.engine().walk_partition(0, |key, _, _| {
            if first.is_empty() {
                first = key.to_vec();
            }
        });
        assert!(!first.is_empty());
        writer
            .engine()
            .commit(seen)
            .expect("the listed writes are synced");
        fs.inject(FaultKind::EioOnSync);
        let mut set = b"set ".to_vec();
        set.extend_from_slice(&first);
        set.extend_from_slice(b" 0 0 1 noreply\r\nw\r\n");
        handle_all(&mut writer, &set);
        let Ok(Parsed::Complete { request, .. }) =
            parse(b"lru_crawler metadump all\r\n", &Limits::default())
        else {
            panic!("metadump does not parse");
        };
        assert_eq!(reader.handle(request), Flow::Unfinished);
        assert!(reader.ticket >= writer.ticket, "{:?}", reader.ticket);
        let sent = commit_and_send(&mut reader);
        assert!(
            sent.starts_with("SERVER_ERROR write not durable") && sent.lines().count() == 1,
            "{}",
            &sent[..80.min(sent.len())]
        );
        // Handed in again, the listing is over: no more lines, no END.
        assert_eq!(reader.handle(request), Flow::Continue);
        assert_eq!(commit_and_send(&mut reader), "");
    }

    #[test]
    fn a_long_get_whose_commit_fails_part_way_ends_with_the_error() {
        let fs = MemFs::new();
        let mut writer = session(&fs);
        let mut reader = Session::new(Arc::clone(&writer.shared));
        let value = vec![b'v'; 1_000_000];
        let mut set = b"set k 0 0 1000000\r\n".to_vec();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        handle_all(&mut writer, &set);
        assert_eq!(commit_and_send(&mut writer), "STORED\r\n");

        // Enough keys for the replies to pass the soft limit: the get
        // stops part way, and its first part waits for the unsynced `set`.
        let get = format!("get {}\r\n", ["k"; 6].join(" "));
        let Ok(Parsed::Complete { request, .. }) = parse(get.as_bytes(), &Limits::default()) else {
            panic!("get does not parse");
        };
        fs.inject(FaultKind::EioOnSync);
        handle_all(&mut writer, &set);
        assert_eq!(reader.handle(request), Flow::Unfinished);
        assert_ne!(reader.ticket, Ticket::NONE);
        let sent = commit_and_send(&mut reader);
        assert!(
            sent.starts_with("SERVER_ERROR write not durable"),
            "{}",
            &sent[..80.min(sent.len())]
        );
        assert!(
            sent.ends_with("\r\n") && sent.lines().count() == 1,
            "one line: {}",
            sent.len()
        );
        // Handed in again, the get is over: no more values, no END.
        assert_eq!(reader.handle(request), Flow::Continue);
        assert_eq!(commit_and_send(&mut reader), "");
    }
}
