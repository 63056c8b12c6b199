//! One client connection: read, parse, handle, commit, write, repeat.
//!
//! Each batch is everything handled from one read: its writes are
//! committed with one ticket (one group commit for a whole pipeline) and its
//! replies are written with one `write`. Requests are parsed a few at a
//! time ahead of handling, so that a pipeline's keys are looked up together
//! (see [`Exchange::process`]). A connection stops handling once its
//! replies pass [`WRITE_BUFFER_BYTES_SOFT_MAX`] and sends them, so a
//! client that pipelines many large reads, or asks for many in one `get`,
//! cannot make the server buffer without bound, and one that never reads
//! its replies stops being read.

use crate::conns::{ConnInfo, State};
use crate::limits::{READ_BUFFER_BYTES_INITIAL, READ_ROOM_BYTES_MIN, WRITE_BUFFER_BYTES_SOFT_MAX};
use crate::session::{Flow, Session, Shared};
use bytes::{Buf, BytesMut};
use larder_protocol::{binary, parse, ErrorKind, MetaKey, ParseError, Parsed, Request};
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::watch;

/// A connected stream socket that a client's requests come over: TCP, or a
/// Unix domain socket. Besides tokio's reads and writes, which wait, a
/// connection reads and writes what the socket has or takes at once.
pub trait Socket: AsyncRead + AsyncWrite + AsRawFd + Unpin + Send + 'static {
    /// Reads what has arrived into `buf` without waiting (`WouldBlock` if
    /// nothing has).
    fn try_read_buf(&self, buf: &mut BytesMut) -> std::io::Result<usize>;
    /// Writes what the socket takes of `buf` without waiting
    /// (`WouldBlock` if it takes nothing).
    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize>;
    /// The socket's descriptor, taken off tokio's runtime (for a ring
    /// thread, see [`crate::ring`]).
    fn into_fd(self) -> std::io::Result<OwnedFd>;
}

impl Socket for TcpStream {
    fn try_read_buf(&self, buf: &mut BytesMut) -> std::io::Result<usize> {
        TcpStream::try_read_buf(self, buf)
    }

    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        TcpStream::try_write(self, buf)
    }

    fn into_fd(self) -> std::io::Result<OwnedFd> {
        self.into_std().map(OwnedFd::from)
    }
}

impl Socket for UnixStream {
    fn try_read_buf(&self, buf: &mut BytesMut) -> std::io::Result<usize> {
        UnixStream::try_read_buf(self, buf)
    }

    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        UnixStream::try_write(self, buf)
    }

    fn into_fd(self) -> std::io::Result<OwnedFd> {
        self.into_std().map(OwnedFd::from)
    }
}

/// Whether the server has begun to shut down: whether `shutdown` has seen
/// the channel change since the version it was cloned with, or its sender
/// is gone. The channel only ever changes once, from `false` to `true`, and
/// no receiver that reaches here has been marked as having seen a version
/// (by `changed`, `borrow_and_update` or `mark_unchanged`): one that had
/// would answer `false` after the shutdown. An atomic load, where `borrow`
/// would take the channel's lock on every request of every connection, each
/// taking the lock's cache line from the other workers.
fn stopping(shutdown: &watch::Receiver<bool>) -> bool {
    shutdown.has_changed().unwrap_or(true)
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The client closed it, or asked to (`quit`), or the server is shutting
    /// down.
    Done,
    /// A protocol error that memcached answers by closing.
    ProtocolClose,
    /// A partial request sat too long, or replies could not be written.
    TimedOut,
}

/// Serves one connection until it ends. Never panics on client input.
pub(crate) async fn serve<S: Socket>(
    stream: S,
    open: &crate::Open,
    mut shutdown: watch::Receiver<bool>,
) {
    // Cloned before `stop` first awaits a change on `shutdown`, so never
    // marked as having seen one (see [`stopping`]).
    let shutdown_seen = shutdown.clone();
    let mut connection = Connection {
        stream,
        exchange: open.exchange(),
    };
    // One wait for the shutdown for the connection's whole life, rather
    // than one registered and dropped again on every read. Polled again
    // after it completes it would panic: `run` returns as soon as it has.
    let stop = async move {
        let _ = shutdown.changed().await;
    };
    tokio::pin!(stop);
    let end = connection.run(&shutdown_seen, stop).await;
    if end == End::TimedOut {
        connection
            .exchange
            .session
            .shared
            .stats
            .timed_out_connections
            .fetch_add(1, Ordering::Relaxed);
    }
    let _ = connection.stream.shutdown().await;
}

struct Connection<S> {
    stream: S,
    exchange: Exchange,
}

/// A connection's requests and replies, apart from its socket: what it has
/// read and not yet handled, and its session. Either way of serving
/// connections (tokio's tasks, or the server's own rings, see
/// [`crate::ring`]) drives one of these.
pub(crate) struct Exchange {
    pub(crate) input: BytesMut,
    /// Bytes of a rejected data block still to be swallowed.
    discard_bytes: u64,
    /// The input ends in a value whose command line has come.
    value_pending: bool,
    /// What `stats conns` shows of the connection.
    info: Arc<ConnInfo>,
    /// Chosen by the connection's first byte, as in memcached.
    protocol: Protocol,
    pub(crate) session: Session,
}

/// The protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// No byte has come yet.
    Unknown,
    /// memcached's text and meta protocols.
    Text,
    /// memcached's binary protocol (see [`Exchange::process_binary`]).
    Binary,
}

impl<S: Socket> Connection<S> {
    /// Serves until the connection ends; `stop` completes when the server
    /// begins to shut down, which `shutdown` also tells.
    async fn run(
        &mut self,
        shutdown: &watch::Receiver<bool>,
        mut stop: Pin<&mut impl Future>,
    ) -> End {
        loop {
            let flow = self.exchange.process();
            if let Err(end) = self.flush().await {
                return end;
            }
            match flow {
                Processed::Close(end) => return end,
                Processed::OutputFull => continue,
                Processed::NeedInput => {}
            }
            if stopping(shutdown) {
                // Serve what the client sent before the shutdown (e.g. a
                // pipeline of noreply sets), without waiting for more.
                match self.stream.try_read_buf(&mut self.exchange.input) {
                    Ok(read) if read > 0 => {
                        self.exchange.session.counts.bytes_read.add(read as u64);
                        continue;
                    }
                    _ => return End::Done,
                }
            }
            match self.read(stop.as_mut()).await {
                Ok(0) => return End::Done,
                Ok(read) => self.exchange.session.counts.bytes_read.add(read as u64),
                Err(end) => return end,
            }
        }
    }

    /// Reads more input; a partial request must make progress within the
    /// timeout. Returns 0 at end of input or shutdown.
    async fn read(&mut self, stop: Pin<&mut impl Future>) -> Result<usize, End> {
        self.exchange.make_room_to_read();
        let partial = self.exchange.partial();
        let patience = self.exchange.session.shared.config.partial_request_timeout;
        let read = self.stream.read_buf(&mut self.exchange.input);
        // `select!` builds a disabled branch's future too; in an `async`
        // block the timer (and its read of the clock) is made only when the
        // branch is polled, which is only when a request is partial.
        let timer = async { tokio::time::sleep(patience).await };
        // In order, the read first: a wake-up for input then looks at
        // nothing else, and no random order is drawn on every read.
        tokio::select! {
            biased;
            result = read => result.map_err(|_| End::Done),
            () = timer, if partial => Err(End::TimedOut),
            _ = stop => Ok(0),
        }
    }

    /// Commits the batch's writes, then sends its replies.
    async fn flush(&mut self) -> Result<(), End> {
        self.exchange.commit().await;
        // Replies almost always fit in the socket's buffer at once: the
        // timeout (and its read of the clock) is armed only for what the
        // socket does not take.
        let sent = self.send_now()?;
        if let Some(rest) = self
            .exchange
            .session
            .output
            .get(sent..)
            .filter(|rest| !rest.is_empty())
        {
            self.exchange.waiting_to_send();
            let write = self.stream.write_all(rest);
            let patience = self.exchange.session.shared.config.write_timeout;
            match tokio::time::timeout(patience, write).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(End::Done),
                Err(_) => return Err(End::TimedOut),
            }
        }
        self.exchange.batch_sent();
        Ok(())
    }

    /// Writes as much of the replies as the socket takes without waiting;
    /// returns how many bytes it took.
    fn send_now(&self) -> Result<usize, End> {
        let output = &self.exchange.session.output;
        let mut sent = 0;
        while let Some(rest) = output.get(sent..).filter(|rest| !rest.is_empty()) {
            match self.stream.try_write(rest) {
                Ok(0) => return Err(End::Done),
                Ok(taken) => sent += taken,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(End::Done),
            }
        }
        Ok(sent)
    }
}

impl Exchange {
    pub(crate) fn new(shared: Arc<Shared>, info: Arc<ConnInfo>) -> Exchange {
        Exchange {
            input: BytesMut::with_capacity(READ_BUFFER_BYTES_INITIAL),
            discard_bytes: 0,
            value_pending: false,
            info,
            protocol: Protocol::Unknown,
            session: Session::new(shared),
        }
    }

    /// Whether the input holds part of a request (or of a rejected data
    /// block still being swallowed), which must be completed within the
    /// partial-request timeout.
    pub(crate) fn partial(&self) -> bool {
        !self.input.is_empty() || self.discard_bytes > 0
    }

    /// Readies the input buffer for the next read (see
    /// [`make_room_to_read`]), and shows the connection waiting for it.
    pub(crate) fn make_room_to_read(&mut self) {
        make_room_to_read(&mut self.input);
        self.info.set(if self.discard_bytes > 0 {
            State::Swallow
        } else if self.value_pending {
            State::ReadValue
        } else {
            State::Read
        });
    }

    /// Appends bytes received for the connection to its input, as a ring's
    /// shared receive buffers hand them over (see `crate::ring`), leaving
    /// the state `stats conns` shows as it is: they may come while the
    /// connection is busy with a batch.
    pub(crate) fn take_input(&mut self, bytes: &[u8]) {
        make_room_to_read(&mut self.input);
        self.input.extend_from_slice(bytes);
        self.session.counts.bytes_read.add(bytes.len() as u64);
    }

    /// Shows the connection waiting for room in its socket for replies.
    pub(crate) fn waiting_to_send(&self) {
        self.info.set(State::Write);
    }

    /// Parses and handles buffered requests until input runs out, replies
    /// pass the soft limit, or the connection must close.
    ///
    /// Complete requests are parsed a window of up to [`WINDOW_REQUESTS`]
    /// at a time, and when a window holds more than one, the keydir entries
    /// of its keys are asked for before any request is handled: a
    /// pipeline's lookups then wait for memory together rather than one
    /// after another. The requests are handled in order, each exactly as if
    /// it had been parsed alone; what ends a window (an incomplete request,
    /// or one that is refused) is dealt with once every request before it
    /// has been handled.
    pub(crate) fn process(&mut self) -> Processed {
        self.info.set(State::ParseCmd);
        self.value_pending = false;
        if self.protocol == Protocol::Unknown {
            self.protocol = match self.input.first() {
                None => return Processed::NeedInput,
                Some(&binary::REQUEST_MAGIC) => Protocol::Binary,
                Some(_) => Protocol::Text,
            };
        }
        loop {
            if self.discard_bytes > 0 {
                let swallowed = self.discard_bytes.min(self.input.len() as u64);
                self.input.advance(swallowed as usize);
                self.discard_bytes -= swallowed;
                if self.discard_bytes > 0 {
                    return Processed::NeedInput;
                }
            }
            if self.session.output.len() >= WRITE_BUFFER_BYTES_SOFT_MAX {
                return Processed::OutputFull;
            }
            let stop = match self.protocol {
                Protocol::Binary => self.handle_window::<BinaryWire>(),
                _ => self.handle_window::<TextWire>(),
            };
            // Every request of the window was handled: what ended it is now
            // at the front.
            let next = match stop {
                Err(next) => Some(next),
                Ok(None) => None,
                Ok(Some(Stop::Incomplete(frame_bytes))) => {
                    if let Some(frame) = frame_bytes {
                        self.input.reserve(frame.saturating_sub(self.input.len()));
                        self.value_pending = true;
                    }
                    Some(Processed::NeedInput)
                }
                Ok(Some(Stop::Refused(Refused::Text(error)))) => self.refuse_text(&error),
                Ok(Some(Stop::Refused(Refused::Binary(refusal)))) => self.refuse_binary(&refusal),
            };
            if let Some(next) = next {
                return next;
            }
        }
    }

    /// Parses a window of up to [`WINDOW_REQUESTS`] whole requests at the
    /// front of the input, asks for their keys' entries ahead when it holds
    /// more than one, and handles them in order, each exactly as if it had
    /// been parsed alone. Returns what ended the window (an incomplete
    /// request, or one refused: nothing, if the window was full), to be
    /// dealt with now that every request before it is handled; or what the
    /// connection does next if the handling stopped early (a close, or
    /// replies past the soft limit).
    fn handle_window<W: Wire>(&mut self) -> Result<Option<Stop>, Processed> {
        let limits = self.session.shared.limits;
        let mut window = [None; WINDOW_REQUESTS];
        let (mut parsed, mut at) = (0, 0);
        let mut stop = None;
        while let Some(slot) = window.get_mut(parsed) {
            match W::parse(self.input.get(at..).unwrap_or_default(), &limits) {
                Ok(Ok((request, frame_bytes))) => {
                    *slot = Some((request, frame_bytes));
                    parsed += 1;
                    at += frame_bytes;
                }
                Ok(Err(frame_bytes)) => {
                    stop = Some(Stop::Incomplete(frame_bytes));
                    break;
                }
                Err(refused) => {
                    stop = Some(Stop::Refused(refused));
                    break;
                }
            }
        }
        let requests = window.iter().take(parsed).flatten();
        if parsed > 0 {
            self.info.commanded(self.session.now());
        }
        if parsed > 1 {
            let keys = requests.clone().flat_map(|(request, _)| W::keys(request));
            self.session
                .shared
                .engine
                .prefetch(keys.take(WINDOW_KEYS_MAX));
        }
        let (mut consumed, mut close) = (0, false);
        for (request, frame_bytes) in requests {
            let flow = W::handle(&mut self.session, request);
            if flow == Flow::Unfinished {
                // It stays at the front of the input, to be handed in
                // again once the replies are sent.
                assert!(self.session.output.len() >= WRITE_BUFFER_BYTES_SOFT_MAX);
                break;
            }
            consumed += frame_bytes;
            if flow == Flow::Close {
                close = true;
                break;
            }
            if self.session.output.len() >= WRITE_BUFFER_BYTES_SOFT_MAX {
                break;
            }
        }
        self.input.advance(consumed);
        if close {
            return Err(Processed::Close(End::Done));
        }
        if self.session.output.len() >= WRITE_BUFFER_BYTES_SOFT_MAX {
            // Whatever of the window is left is parsed again once the
            // replies are sent.
            return Err(Processed::OutputFull);
        }
        Ok(stop)
    }

    /// Answers a text request the parser refused, as memcached does.
    fn refuse_text(&mut self, error: &ParseError) -> Option<Processed> {
        if error.kind == ErrorKind::ObjectTooLarge {
            let key = error.rejected_key(&self.input);
            self.session.refused_too_large(key.as_deref());
        }
        if let Some(text) = error.reply() {
            self.session.output.extend_from_slice(text);
        }
        self.input.advance(error.consumed.min(self.input.len()));
        self.discard_bytes = error.discard_bytes;
        error
            .closes_connection()
            .then_some(Processed::Close(End::ProtocolClose))
    }

    /// Answers a binary request the parser refused, as memcached does (see
    /// [`binary::parse`]).
    fn refuse_binary(&mut self, refusal: &binary::Refusal) -> Option<Processed> {
        if let Some(header) = &refusal.header {
            if refusal.status == binary::Status::TooLarge {
                let key = refusal.set_key.clone().and_then(|at| self.input.get(at));
                let key = key.map(<[u8]>::to_vec);
                self.session.refused_too_large(key.as_deref());
            }
            binary::write_error(&mut self.session.output, header, refusal.status);
        }
        self.input.advance(refusal.consumed.min(self.input.len()));
        self.discard_bytes = refusal.discard_bytes;
        refusal
            .close
            .then_some(Processed::Close(End::ProtocolClose))
    }

    /// Commits the batch's writes; if the commit fails, the batch's
    /// acknowledgements become errors.
    pub(crate) async fn commit(&mut self) {
        let ticket = self.session.ticket;
        if ticket != larder_engine::Ticket::NONE {
            if self.session.shared.config.durability == larder_engine::Durability::Always {
                self.syncing();
            }
            let commit = self.session.shared.engine.commit_async(ticket);
            if let Err(error) = commit.await {
                self.commit_failed(&error);
            }
        }
    }

    /// Shows the connection waiting for its writes' commit.
    pub(crate) fn syncing(&self) {
        self.info.set(State::Sync);
    }

    pub(crate) fn commit_failed(&mut self, error: &larder_engine::Error) {
        tracing::warn!(%error, "commit failed; the batch's writes are answered SERVER_ERROR");
        self.session.fail_acks(error);
    }

    /// Ends a batch whose replies (if any) the socket has taken.
    pub(crate) fn batch_sent(&mut self) {
        let written = self.session.output.len() as u64;
        if written > 0 {
            self.session.counts.bytes_written.add(written);
            self.session.output.clear();
            if self.session.output.capacity() > 2 * WRITE_BUFFER_BYTES_SOFT_MAX {
                self.session.output = BytesMut::with_capacity(READ_BUFFER_BYTES_INITIAL);
            }
        }
        self.session.batch_sent();
    }
}

/// Complete requests parsed ahead of handling, at most (see
/// [`Exchange::process`]).
const WINDOW_REQUESTS: usize = 16;

/// Keys whose entries are asked for ahead, at most, per window: a window
/// with a multi-key `get` could otherwise name tens of thousands, whose
/// early entries would be out of the cache again by the time they are
/// looked up.
const WINDOW_KEYS_MAX: usize = 64;

/// What ended a window of complete requests.
enum Stop {
    /// An incomplete request, and how long its frame is once known.
    Incomplete(Option<usize>),
    /// A request refused by the parser.
    Refused(Refused),
}

/// A request the parser refused, in either protocol.
enum Refused {
    Text(ParseError),
    Binary(binary::Refusal),
}

/// A whole request and its bytes; or, when it is not all in yet, how long
/// it is once that is known.
type Framed<R> = Result<(R, usize), Option<usize>>;

/// A protocol, as a window of its requests is parsed, looked ahead at and
/// handled ([`Exchange::handle_window`]).
trait Wire {
    type Request<'a>: Copy;

    /// The whole request at the front of `input`, or why it is refused.
    fn parse<'a>(
        input: &'a [u8],
        limits: &larder_protocol::Limits,
    ) -> Result<Framed<Self::Request<'a>>, Refused>;

    /// The keys the request will look up, as far as they can be told
    /// before it is handled.
    fn keys<'a>(request: &Self::Request<'a>) -> impl Iterator<Item = &'a [u8]> + Clone;

    fn handle(session: &mut Session, request: &Self::Request<'_>) -> Flow;
}

/// memcached's text and meta protocols.
struct TextWire;

impl Wire for TextWire {
    type Request<'a> = Request<'a>;

    fn parse<'a>(
        input: &'a [u8],
        limits: &larder_protocol::Limits,
    ) -> Result<Framed<Request<'a>>, Refused> {
        match parse(input, limits) {
            Ok(Parsed::Complete {
                request,
                frame_bytes,
            }) => Ok(Ok((request, frame_bytes))),
            Ok(Parsed::Incomplete { frame_bytes }) => Ok(Err(frame_bytes)),
            Err(error) => Err(Refused::Text(error)),
        }
    }

    fn keys<'a>(request: &Self::Request<'a>) -> impl Iterator<Item = &'a [u8]> + Clone {
        keys(request)
    }

    fn handle(session: &mut Session, request: &Request<'_>) -> Flow {
        session.handle(*request)
    }
}

/// memcached's binary protocol.
struct BinaryWire;

impl Wire for BinaryWire {
    type Request<'a> = binary::Request<'a>;

    fn parse<'a>(
        input: &'a [u8],
        limits: &larder_protocol::Limits,
    ) -> Result<Framed<binary::Request<'a>>, Refused> {
        match binary::parse(input, limits) {
            Ok(binary::Parsed::Complete {
                request,
                frame_bytes,
            }) => Ok(Ok((request, frame_bytes))),
            Ok(binary::Parsed::Incomplete { frame_bytes }) => Ok(Err(frame_bytes)),
            Err(refusal) => Err(Refused::Binary(refusal)),
        }
    }

    fn keys<'a>(request: &Self::Request<'a>) -> impl Iterator<Item = &'a [u8]> + Clone {
        let key = match request.command {
            binary::Command::Get { key, .. }
            | binary::Command::Store { key, .. }
            | binary::Command::Concat { key, .. }
            | binary::Command::Delete { key, .. }
            | binary::Command::Arithmetic { key, .. }
            | binary::Command::Touch { key, .. } => Some(key),
            _ => None,
        };
        key.into_iter()
    }

    fn handle(session: &mut Session, request: &binary::Request<'_>) -> Flow {
        session.handle_binary(request)
    }
}

/// The keys a request will look up, as far as they can be told before it is
/// handled: none for requests without keys, and for a meta request's key
/// sent in base64, whose bytes are decoded only when it is handled.
fn keys<'a>(request: &Request<'a>) -> impl Iterator<Item = &'a [u8]> + Clone {
    let (one, many) = match request {
        Request::Store(store) => (Some(store.key), None),
        Request::Retrieval(retrieval) => (None, Some(retrieval.keys.iter())),
        Request::Delete(delete) => (Some(delete.key), None),
        Request::Touch(touch) => (Some(touch.key), None),
        Request::Arithmetic(arithmetic) => (Some(arithmetic.key), None),
        Request::MetaGet(get) => (plain(&get.key), None),
        Request::MetaSet(set) => (plain(&set.key), None),
        Request::MetaDelete(delete) => (plain(&delete.key), None),
        Request::MetaArithmetic(arithmetic) => (plain(&arithmetic.key), None),
        Request::MetaDebug(debug) => (plain(&debug.key), None),
        _ => (None, None),
    };
    one.into_iter().chain(many.into_iter().flatten())
}

/// A meta request's key, unless sent in base64.
fn plain<'a>(key: &MetaKey<'a>) -> Option<&'a [u8]> {
    (!key.is_base64()).then(|| key.wire())
}

/// Readies `input` for the next read. Drained (every byte read so far
/// parsed, as after each request of a client that waits for its reply), it
/// reads to the start of its allocation again, into the cache lines the
/// last request wrote, which may still be cached, rather than on into
/// lines untouched for a while: a buffer that marched on through its
/// 16 KiB read each request into lines of its own. Otherwise, with less
/// than [`READ_ROOM_BYTES_MIN`] free at its end, the unparsed bytes move to
/// the front of the allocation when the consumed part before them is at
/// least as large (`BytesMut::reserve` reclaims it, copying no more than
/// they are), and only else does the buffer grow.
///
/// A drained buffer whose allocation is more than four times
/// [`READ_BUFFER_BYTES_INITIAL`] is replaced by one of that size when the
/// requests since it was last drained used some but less than a quarter
/// of it: a large request gives its memory back after the next small one,
/// while a client that keeps sending large requests keeps the buffer they
/// grew (a request that made the buffer double used more than a quarter of
/// it).
///
/// Reserving only once the buffer was completely full, as this once did,
/// let reads stop at the buffer's end mid-request, and the first such stop
/// doubled the buffer: a connection of 100-byte sets grew from 16 to
/// 32 KiB after about 120 requests (for 500 connections, 10 MB more memory,
/// taken as fresh zeroed pages while they served), and from then on cut one
/// read in about 240 in two.
fn make_room_to_read(input: &mut BytesMut) {
    if input.is_empty() {
        // `capacity` counts from the current start: the room the requests
        // since the last drain left. One byte more than that brings the
        // whole allocation back whenever the start has moved, copying
        // nothing (the buffer is empty) and never allocating; `input` is
        // never split, so the allocation is its own, and this fails only
        // when the start has not moved.
        let unused = input.capacity();
        let _at_the_start = input.try_reclaim(unused + 1);
        let allocation = input.capacity();
        // Nothing used: the start had not moved, and there is nothing to
        // judge by.
        let used = allocation - unused;
        if allocation > 4 * READ_BUFFER_BYTES_INITIAL && (1..allocation / 4).contains(&used) {
            *input = BytesMut::with_capacity(READ_BUFFER_BYTES_INITIAL);
        }
    }
    if input.capacity() - input.len() < READ_ROOM_BYTES_MIN {
        input.reserve(READ_ROOM_BYTES_MIN);
    }
}

/// Where [`Exchange::process`] stopped.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Processed {
    /// The buffer holds no complete request.
    NeedInput,
    /// Replies reached the soft limit: send them, then go on parsing.
    OutputFull,
    /// Send what is buffered, then close.
    Close(End),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_sees_the_shutdown_once_it_is_sent_or_its_sender_is_gone() {
        let (sender, made) = watch::channel(false);
        let connection = made.clone();
        assert!(!stopping(&connection));
        sender.send(true).unwrap();
        assert!(stopping(&connection));
        assert!(stopping(&connection), "seen again, not only once");

        let (sender, made) = watch::channel(false);
        let connection = made.clone();
        drop(sender);
        assert!(stopping(&connection));
    }

    /// Feeds `input` a stream of `request_bytes`-long requests in reads of
    /// up to `read_bytes` (never more than the free room, as a socket read
    /// into the buffer would), consuming each complete request; checks that
    /// every read of at most [`READ_ROOM_BYTES_MIN`] had its whole room (the
    /// old code let reads stop at the buffer's end mid-request) and returns
    /// the largest capacity seen.
    fn stream_through(input: &mut BytesMut, request_bytes: usize, read_bytes: usize) -> usize {
        let mut largest = input.capacity();
        for _ in 0..20_000 {
            make_room_to_read(input);
            largest = largest.max(input.capacity());
            let room = input.capacity() - input.len();
            assert!(
                room >= READ_ROOM_BYTES_MIN,
                "a read with {room} bytes of room"
            );
            let wanted = read_bytes - input.len() % read_bytes;
            let read = wanted.min(room);
            input.extend_from_slice(&vec![b'x'; read]);
            let complete = input.len() / request_bytes * request_bytes;
            input.advance(complete);
        }
        largest
    }

    #[test]
    fn a_stream_of_small_requests_reuses_the_buffer_it_started_with() {
        let mut input = BytesMut::with_capacity(READ_BUFFER_BYTES_INITIAL);
        let start = input.as_ptr();
        let largest = stream_through(&mut input, 133, 133);
        assert_eq!(largest, READ_BUFFER_BYTES_INITIAL);
        let offset = input.as_ptr() as usize - start as usize;
        assert!(
            offset < READ_BUFFER_BYTES_INITIAL,
            "the first allocation is still the one in use"
        );
    }

    #[test]
    fn a_drained_buffer_reads_to_the_start_of_its_allocation_again() {
        let mut input = BytesMut::with_capacity(READ_BUFFER_BYTES_INITIAL);
        let start = input.as_ptr();
        for _ in 0..10 {
            make_room_to_read(&mut input);
            assert_eq!(input.as_ptr(), start, "the read lands at the start");
            assert_eq!(input.capacity(), READ_BUFFER_BYTES_INITIAL);
            input.extend_from_slice(&[b'x'; 133]);
            input.advance(133);
        }
        // Not drained: the unparsed bytes stay where they are.
        input.extend_from_slice(&[b'x'; 200]);
        input.advance(133);
        let unparsed = input.as_ptr();
        make_room_to_read(&mut input);
        assert_eq!(input.as_ptr(), unparsed);
        assert_eq!(input.len(), 67);
    }

    #[test]
    fn pipelined_reads_that_leave_partial_requests_stay_in_the_buffer() {
        // Reads of 1000 bytes hold 7 requests of 133 and part of an 8th.
        let mut input = BytesMut::with_capacity(READ_BUFFER_BYTES_INITIAL);
        let largest = stream_through(&mut input, 133, 1000);
        assert_eq!(largest, READ_BUFFER_BYTES_INITIAL);
    }

    #[test]
    fn a_request_larger_than_the_buffer_grows_it_and_small_requests_after_bring_back_a_small_one() {
        let mut input = BytesMut::with_capacity(READ_BUFFER_BYTES_INITIAL);
        let largest = stream_through(&mut input, 300_000, 50_000);
        assert!(largest >= 300_000, "grew to {largest}");
        input.clear();
        stream_through(&mut input, 133, 133);
        make_room_to_read(&mut input);
        // Without the shrink the big allocation stays in use.
        assert_eq!(input.capacity(), READ_BUFFER_BYTES_INITIAL);
    }

    /// Reads one request of `request_bytes` into `input`, a read at a
    /// time as its room allows, and consumes it.
    fn feed_one(input: &mut BytesMut, request_bytes: usize) {
        let mut left = request_bytes;
        while left > 0 {
            make_room_to_read(input);
            let read = left.min(input.capacity() - input.len());
            input.extend_from_slice(&vec![b'x'; read]);
            left -= read;
        }
        input.advance(request_bytes);
    }

    #[test]
    fn large_requests_keep_the_buffer_they_grew_and_a_small_one_after_gives_it_back() {
        for request_bytes in [100_000, 126_000, 300_000] {
            let mut input = BytesMut::with_capacity(READ_BUFFER_BYTES_INITIAL);
            feed_one(&mut input, request_bytes);
            make_room_to_read(&mut input);
            let (start, grown) = (input.as_ptr(), input.capacity());
            assert!(grown >= request_bytes, "{grown} bytes for {request_bytes}");
            for _ in 0..10 {
                feed_one(&mut input, request_bytes);
                make_room_to_read(&mut input);
                assert_eq!(input.as_ptr(), start, "requests of {request_bytes}");
                assert_eq!(input.capacity(), grown);
            }
            feed_one(&mut input, 133);
            make_room_to_read(&mut input);
            assert_eq!(input.capacity(), READ_BUFFER_BYTES_INITIAL);
        }
    }
}
