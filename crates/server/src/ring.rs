//! Serving connections on the server's own io_uring rings (`--io uring`,
//! and the default `--io auto` wherever the kernel allows them).
//!
//! Each ring thread owns one ring and the connections handed to it. Its
//! loop hands the kernel, in one `io_uring_enter`, every receive and send
//! that its connections are ready for, and waits for at least one to
//! complete: where tokio's tasks make a system call for each receive and
//! each send, plus their share of `epoll_wait`, a busy ring thread makes
//! one for many of them. What a connection reads is handled exactly as
//! under tokio, by the same [`Exchange`].
//!
//! Where tokio's workers give up their CPU whenever `epoll_wait` finds
//! nothing, a busy ring thread finds completions at every round; it
//! yields its CPU at most every [`RING_YIELD_INTERVAL`] so that other
//! threads on it are not kept waiting for the scheduler's tick.
//!
//! A ring thread that runs out of work looks for new completions a little
//! longer before it sleeps ([`crate::ServerConfig::idle_poll`], 50 µs by
//! default), while no other thread wants a CPU: on a virtual machine a
//! thread whose CPU went idle takes tens of microseconds to wake, more than
//! a request takes to serve, and with one client waiting on each reply
//! that wake-up was most of every round trip.
//!
//! A connection's life, as in [`crate::connection`]: receive, parse and
//! handle what came ([`Exchange::process`]), commit the batch's writes,
//! send the replies, repeat. On a ring in the kernel's cheapest mode
//! (Linux 6.1 on) a connection's receive stays armed from one request to
//! the next (a multishot receive, into buffers the thread's connections
//! share, see [`buffers`]): a request that comes costs the kernel no new
//! receive to submit, none to try before the data is there, and no poll to
//! arm. What comes while the connection is busy with a batch waits in its
//! input, up to [`INPUT_WHILE_BUSY_BYTES_MAX`], past which its receive is
//! cancelled until the batch is done, so that further input waits in the
//! socket as it does under tokio. On older kernels each wait for input is
//! a receive of its own, into the connection's input. A connection waiting
//! for the rest of a partial request has a timer, which closes it if no
//! byte comes within the partial-request timeout
//! ([`crate::ServerConfig::partial_request_timeout`]) of any wait; a
//! reply is first sent with `MSG_DONTWAIT`, and only what the socket did
//! not take waits, at most the write timeout
//! ([`crate::ServerConfig::write_timeout`]). A commit that must wait for
//! a sync (`always`) is polled again when the engine wakes it, through the
//! ring thread's mailbox.
//!
//! Accepting stays on tokio's runtime ([`crate::Server::run_until`]), which
//! hands each connection to a ring thread in turn, with the guard that
//! counts it open; the connection's task there only waits for the ring
//! thread to drop the connection, so that the shutdown drains and cuts
//! ring connections as it does tokio's.
//!
//! Memory the kernel reads or writes for an operation (a connection's
//! input and output buffers, its timers' times, the bell's counter, the
//! shared receive buffers) stays put until that operation's completion has
//! been seen: a connection is dropped only with no operation in flight,
//! and a closing one cancels its own first; the receive buffers go after
//! the ring.

use crate::connection::{End, Exchange, Processed};
use crate::limits::{
    IDLE_POLL_GAP, IDLE_POLL_PAUSE, IDLE_POLL_YIELD_EVERY, INPUT_WHILE_BUSY_BYTES_MAX,
    RING_COMPLETIONS_MAX, RING_RECEIVE_BUFFERS, RING_RECEIVE_BUFFER_BYTES, RING_SUBMISSIONS,
    RING_YIELD_INTERVAL,
};
use crate::session::Shared;
use crate::Open;
use buffers::ReceiveBuffers;
use bytes::BufMut;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use larder_engine::{CommitFuture, IdleSignal, Ticket};
use parking_lot::Mutex;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

mod buffers;

/// Whether this kernel lets the process set up a ring as large as a ring
/// thread's for `connections` connections and has the operations the ring
/// threads use (it may be too old, a container's seccomp profile may
/// refuse the system call, or an older kernel may count the ring's memory
/// against a low locked-memory limit).
pub fn available(connections: usize) -> std::io::Result<()> {
    let ring = build_ring(connections)?;
    if !ring.params().is_feature_fast_poll() {
        // Without it (before Linux 5.7) a waiting receive takes a kernel
        // worker thread of its own.
        return Err(std::io::Error::other(
            "the kernel's io_uring cannot poll sockets itself",
        ));
    }
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let needed = [
        ("recv", opcode::Recv::CODE),
        ("send", opcode::Send::CODE),
        ("read", opcode::Read::CODE),
        ("link timeout", opcode::LinkTimeout::CODE),
        ("async cancel", opcode::AsyncCancel::CODE),
    ];
    match needed.iter().find(|(_, code)| !probe.is_supported(*code)) {
        None => Ok(()),
        Some((name, _)) => Err(std::io::Error::other(format!(
            "the kernel's io_uring has no {name} operation"
        ))),
    }
}

/// The ring threads of a server.
pub(crate) struct Rings {
    threads: Vec<RingThread>,
    next: AtomicUsize,
}

struct RingThread {
    mailbox: Arc<Mailbox>,
    handle: std::thread::JoinHandle<()>,
}

/// A connection on its way to a ring thread.
pub(crate) struct Arrival {
    pub(crate) fd: OwnedFd,
    pub(crate) open: Open,
    /// Dropped with the connection: its task on the runtime then ends.
    pub(crate) closed: oneshot::Sender<()>,
}

impl Rings {
    /// Starts `count` ring threads serving connections with `shared`.
    /// Each sets up its own ring: the kernel's cheapest mode lets only the
    /// thread that made a ring submit to it.
    pub(crate) fn start(count: usize, shared: &Arc<Shared>) -> std::io::Result<Rings> {
        Rings::start_on(count, shared, build_ring)
    }

    /// [`Rings::start`] with each ring set up by `build`.
    fn start_on(count: usize, shared: &Arc<Shared>, build: RingSetup) -> std::io::Result<Rings> {
        let idle = shared.engine.idle_signal();
        // Connections are handed out in turn, but close in any order: one
        // thread may hold them all.
        let connections = shared.config.max_connections;
        let mut threads = Vec::with_capacity(count);
        for index in 0..count {
            let mailbox = Arc::new(Mailbox::new()?);
            let (ready, started) = std::sync::mpsc::sync_channel(1);
            let (mailbox_there, shared, idle) =
                (Arc::clone(&mailbox), Arc::clone(shared), idle.clone());
            let handle = std::thread::Builder::new()
                .name(format!("larder-ring-{index}"))
                .spawn(move || {
                    let ring = match build(connections) {
                        Ok(ring) => ring,
                        Err(error) => {
                            let _ = ready.send(Err(error));
                            return;
                        }
                    };
                    let buffers = receive_buffers(&ring);
                    let _ = ready.send(Ok(()));
                    Worker::new(ring, buffers, mailbox_there, shared, idle).run();
                })?;
            let outcome = started
                .recv()
                .unwrap_or_else(|_| Err(std::io::Error::other("a ring thread ended at start")));
            if let Err(error) = outcome {
                let _ = handle.join();
                Rings::of(threads).cut_and_join();
                return Err(error);
            }
            threads.push(RingThread { mailbox, handle });
        }
        Ok(Rings::of(threads))
    }

    fn of(threads: Vec<RingThread>) -> Rings {
        Rings {
            threads,
            next: AtomicUsize::new(0),
        }
    }

    /// Hands a connection to the next ring thread in turn.
    pub(crate) fn hand(&self, arrival: Arrival) {
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.threads.len();
        self.threads[turn]
            .mailbox
            .post(|inbox| inbox.arrivals.push(arrival));
    }

    /// The server is shutting down: each connection finishes the requests
    /// it has read, serves what the client sent before this without
    /// waiting for more, and closes.
    pub(crate) fn stop(&self) {
        for thread in &self.threads {
            thread.mailbox.post(|inbox| inbox.stop = true);
        }
    }

    /// Closes every connection at once, then ends the threads and waits
    /// for them.
    pub(crate) fn cut_and_join(self) {
        for thread in &self.threads {
            thread.mailbox.post(|inbox| inbox.cut = true);
        }
        // A ring thread never unwinds (see [`AbortOnPanic`]).
        for thread in self.threads {
            let _ = thread.handle.join();
        }
    }
}

/// What sets up a ring for a thread that may serve up to so many
/// connections.
type RingSetup = fn(usize) -> std::io::Result<IoUring>;

/// Sets up a ring for a thread that may serve up to `connections`
/// connections, in the kernel's cheapest mode where it has it
/// ([`cheapest_ring`]), else as older kernels can ([`plain_ring`]).
fn build_ring(connections: usize) -> std::io::Result<IoUring> {
    cheapest_ring(connections).or_else(|_| plain_ring(connections))
}

/// A ring in the kernel's cheapest mode (Linux 6.1 on): completions
/// reaped only by the one thread that submits, when it enters the kernel,
/// with a flag in the ring's memory saying when some wait for an entry,
/// which an idle poll reads ([`Worker::poll_before_sleeping`]).
fn cheapest_ring(connections: usize) -> std::io::Result<IoUring> {
    // A ring set up here has a single issuer only with deferred
    // completions (asked for together; the first came in Linux 6.0, the
    // second in 6.1), so [`Worker::enter`] tells the mode by the first.
    IoUring::builder()
        .setup_cqsize(completion_room(connections))
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(RING_SUBMISSIONS)
}

/// A ring as kernels before 6.1 have it: completions are posted without
/// waiting for the ring's thread to enter the kernel (the kernel
/// interrupts the thread to run the work that posts them).
fn plain_ring(connections: usize) -> std::io::Result<IoUring> {
    IoUring::builder()
        .setup_cqsize(completion_room(connections))
        .build(RING_SUBMISSIONS)
}

/// The buffers a ring's multishot receives take, on a ring in the kernel's
/// cheapest mode (Linux 6.1 on, where both are there); `None` on a plain
/// ring, or should the kernel refuse them: its connections then receive
/// one request at a time, each into its own input.
fn receive_buffers(ring: &IoUring) -> Option<ReceiveBuffers> {
    if !ring.params().is_setup_single_issuer() {
        return None;
    }
    match ReceiveBuffers::register(ring, RING_RECEIVE_BUFFERS, RING_RECEIVE_BUFFER_BYTES) {
        Ok(buffers) => Some(buffers),
        Err(error) => {
            tracing::warn!("receive buffers refused ({error}): one receive a request");
            None
        }
    }
}

/// Room in a ring's queue of completions for five completions of each of
/// `connections` connections at once (a receive's, a send's and its
/// timeout's, a partial request's timer's, a cancel's), up to the
/// kernel's ceiling. Past it the kernel keeps completions aside rather
/// than drop them (a connection closing has a few more; a multishot
/// receive may post many in a round), and ends a multishot receive,
/// which is then armed again.
fn completion_room(connections: usize) -> u32 {
    u32::try_from(connections.saturating_mul(5))
        .unwrap_or(u32::MAX)
        .clamp(2 * RING_SUBMISSIONS, RING_COMPLETIONS_MAX)
}

/// What other threads tell a ring thread: new connections, commits the
/// engine woke, and the shutdown. Posting rings the bell (an eventfd the
/// ring thread always has a read waiting on) unless it is rung already.
struct Mailbox {
    inbox: Mutex<Inbox>,
    rung: AtomicBool,
    bell: OwnedFd,
}

#[derive(Default)]
struct Inbox {
    arrivals: Vec<Arrival>,
    /// Slots of connections whose commit the engine woke.
    woken: Vec<usize>,
    stop: bool,
    cut: bool,
}

impl Mailbox {
    fn new() -> std::io::Result<Mailbox> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new
        // descriptor that nothing else owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mailbox {
            inbox: Mutex::new(Inbox::default()),
            rung: AtomicBool::new(false),
            // SAFETY: `fd` is the new descriptor, owned from here on.
            bell: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn post(&self, put: impl FnOnce(&mut Inbox)) {
        put(&mut self.inbox.lock());
        if !self.rung.swap(true, Ordering::AcqRel) {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes the 8 bytes of `one` to the eventfd. It fails
            // only if the counter would overflow, which takes 2^64 posts
            // unread; the ring thread then still finds the inbox full.
            unsafe { libc::write(self.bell.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }

    /// Empties the inbox; the next post rings the bell again.
    fn take(&self) -> Inbox {
        self.rung.store(false, Ordering::Release);
        std::mem::take(&mut *self.inbox.lock())
    }
}

/// Ends the process if dropped by a panic. A ring thread's connections
/// have buffers the kernel may be reading or writing; unwinding would free
/// them under it, so a panic in the ring thread's own work (a bug) stops
/// the server rather than closing the thread's connections. Handling a
/// connection's requests is [`contained`].
struct AbortOnPanic;

/// Runs the part of a connection's work that handles its requests (the
/// protocol, the engine, the commit): a panic there (a bug) unwinds no
/// further than this, and the caller ends that one connection, as a panic
/// in its task would under tokio, while the thread serves the others.
/// Nothing of the ring's is touched meanwhile: the kernel may be using
/// this connection's buffers only for operations the caller's end then
/// cancels and waits for. `None` if it panicked.
fn contained<R>(work: impl FnOnce() -> R) -> Option<R> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(result) => Some(result),
        Err(_) => {
            tracing::error!("handling a connection's requests panicked: closing the connection");
            None
        }
    }
}

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!("a ring thread panicked: stopping the server");
            std::process::abort();
        }
    }
}

/// Wakes a connection's commit: posts its slot to its ring thread.
struct CommitWaker {
    mailbox: Arc<Mailbox>,
    slot: usize,
}

impl Wake for CommitWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let slot = self.slot;
        self.mailbox.post(|inbox| inbox.woken.push(slot));
    }
}

/// What an operation's completion is for: the low byte of its user data,
/// above which is the connection's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Op {
    Receive = 1,
    Send = 2,
    /// A send's linked timeout.
    Timeout = 3,
    Cancel = 4,
    /// The timer of a connection waiting for the rest of a partial request.
    PartialTimer = 5,
}

/// Whether an `io_uring_enter` is done with, rather than to be made again
/// (interrupted by a signal). Any other failure is a bug: the ring thread
/// panics, which stops the server (see [`AbortOnPanic`]).
fn entry_ends(entered: std::io::Result<usize>) -> bool {
    match entered {
        Ok(_) => true,
        Err(error) => match error.raw_os_error() {
            // Waited for as long as asked, with nothing completed.
            Some(libc::ETIME) => true,
            Some(libc::EINTR) => false,
            // The completion queue is full, or the kernel is short of
            // memory for requests: reap, then submit again.
            Some(libc::EBUSY | libc::EAGAIN) => true,
            _ => panic!("io_uring_enter failed: {error}"),
        },
    }
}

/// The bell's read, which belongs to no connection.
const BELL: u64 = u64::MAX;

fn user_data(slot: usize, op: Op) -> u64 {
    ((slot as u64) << 8) | op as u64
}

fn op_of(user_data: u64) -> (usize, Option<Op>) {
    let op = match user_data & 0xff {
        1 => Some(Op::Receive),
        2 => Some(Op::Send),
        3 => Some(Op::Timeout),
        4 => Some(Op::Cancel),
        5 => Some(Op::PartialTimer),
        _ => None,
    };
    ((user_data >> 8) as usize, op)
}

/// Where a connection is in its loop.
enum Phase {
    /// A receive is in flight.
    Receiving,
    /// The batch's commit waits for a sync; then its replies go.
    Committing(CommitFuture, Processed),
    /// Replies are being sent; `sent` bytes of them are taken.
    Sending { sent: usize, then: Processed },
    /// Read at shutdown, to be served in the next round.
    Ready,
    /// Ended: waiting for its operations' completions, then dropped.
    Closing,
}

struct Conn {
    fd: OwnedFd,
    exchange: Exchange,
    phase: Phase,
    /// Its multishot receive is armed (until a completion without
    /// `IORING_CQE_F_MORE`).
    armed: bool,
    /// Input came while it was busy with a batch, to be handled next.
    arrived: bool,
    /// Since when it waits for the rest of a partial request (set each
    /// time it begins to wait with one).
    partial_since: Option<Instant>,
    /// Its partial-request timer is in flight.
    partial_timer_set: bool,
    /// When that timer fires, read by the kernel when it is submitted.
    /// Boxed: it must not move.
    partial_timer: Box<types::Timespec>,
    /// Its input ended (the client shut its side, or the socket failed)
    /// while it was busy with a batch: it closes once that is sent.
    input_ended: bool,
    /// Operations submitted whose completion has not been seen.
    in_flight: u8,
    /// A cancel of its armed receive is in flight.
    cancelling: bool,
    /// When replies that are waiting for room in the socket must be sent
    /// by; `None` until a batch's first send leaves some.
    write_deadline: Option<Instant>,
    /// What is left of the write timeout, read by the kernel when a
    /// waiting send's timeout is submitted. Boxed: it must not move.
    write_timeout: Box<types::Timespec>,
    waker: Waker,
    _open: Open,
    _closed: oneshot::Sender<()>,
}

/// One ring thread's state.
struct Worker {
    ring: IoUring,
    /// The buffers of multishot receives ([`receive_buffers`]). Dropped
    /// after the ring, which the kernel may still be writing into until
    /// then.
    buffers: Option<ReceiveBuffers>,
    mailbox: Arc<Mailbox>,
    shared: Arc<Shared>,
    idle: Option<Arc<IdleSignal>>,
    conns: Vec<Option<Conn>>,
    /// Slots of `conns` that hold no connection.
    free: Vec<usize>,
    stopping: bool,
    /// The bell's counter, read into by the bell's read. Boxed: it must not
    /// move while the read is in flight.
    bell_count: Box<u64>,
    bell_reading: bool,
    /// Connections that read input at shutdown, to serve next round.
    ready: Vec<usize>,
    /// Completions taken off the queue to make room while submitting, to
    /// handle next round.
    set_aside: Vec<(u64, i32, u32)>,
    /// The completions of one round (user data, result), taken off the
    /// queue before any is handled; kept between rounds for its memory.
    completions: Vec<(u64, i32, u32)>,
    /// Until when this thread sleeps at once when idle: it found another
    /// thread wanting its CPU while it polled.
    poll_paused_until: Option<Instant>,
    /// Times the kernel had switched this thread out for another
    /// (`ru_nivcsw`) when last asked.
    involuntary_switches: i64,
    runnable: Runnable,
}

/// How many threads the machine has ready to run, read from
/// `/proc/loadavg` (its fourth field: runnable threads, the running ones
/// included), against its CPUs. A CPU that goes idle takes a thread
/// waiting for another CPU; one that polls does not, so a poll that went
/// on while threads wait would keep them waiting.
struct Runnable {
    /// `None` where the file cannot be read: polls then look only at
    /// their own CPU.
    loadavg: Option<std::fs::File>,
    cpus: usize,
}

impl Runnable {
    fn new() -> Runnable {
        // SAFETY: sysconf takes no pointers.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        Runnable {
            loadavg: std::fs::File::open("/proc/loadavg").ok(),
            cpus: usize::try_from(online).unwrap_or(1).max(1),
        }
    }

    /// Whether more threads are ready to run than there are CPUs.
    fn others_wait(&self) -> bool {
        use std::os::unix::fs::FileExt;
        let Some(file) = &self.loadavg else {
            return false;
        };
        let mut text = [0u8; 128];
        let Ok(length) = file.read_at(&mut text, 0) else {
            return false;
        };
        let runnable = text.get(..length).and_then(runnable_in_loadavg);
        runnable.is_some_and(|count| count > self.cpus)
    }
}

/// The runnable threads in the text of `/proc/loadavg`, such as
/// `0.20 0.18 0.12 2/187 1234`: the fourth field's first number.
fn runnable_in_loadavg(text: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(text).ok()?;
    let field = text.split_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

impl Worker {
    fn new(
        ring: IoUring,
        buffers: Option<ReceiveBuffers>,
        mailbox: Arc<Mailbox>,
        shared: Arc<Shared>,
        idle: Option<Arc<IdleSignal>>,
    ) -> Worker {
        Worker {
            ring,
            buffers,
            mailbox,
            shared,
            idle,
            conns: Vec::new(),
            free: Vec::new(),
            stopping: false,
            bell_count: Box::new(0),
            bell_reading: false,
            ready: Vec::new(),
            set_aside: Vec::new(),
            completions: Vec::with_capacity(RING_SUBMISSIONS as usize),
            poll_paused_until: None,
            involuntary_switches: 0,
            runnable: Runnable::new(),
        }
    }

    fn run(mut self) {
        // Dropped before `self`, whose buffers the kernel may still be
        // writing to: unwinding must not free them.
        let _abort = AbortOnPanic;
        self.read_bell();
        let mut cut = false;
        let mut yielded = Instant::now();
        loop {
            let inbox = self.mailbox.take();
            for arrival in inbox.arrivals {
                self.admit(arrival);
            }
            for slot in inbox.woken {
                self.poll_commit(slot);
            }
            if inbox.stop && !self.stopping {
                self.stopping = true;
                self.cancel_receives();
            }
            if inbox.cut && !cut {
                cut = true;
                self.stopping = true;
                self.close_all();
            }
            if cut && self.free.len() == self.conns.len() {
                break;
            }
            self.serve_ready();
            self.wait();
            self.reap();
            if yielded.elapsed() >= RING_YIELD_INTERVAL {
                std::thread::yield_now();
                yielded = Instant::now();
            }
        }
        self.stop_bell();
    }

    /// Submits what is queued and waits for at least one completion,
    /// telling the engine first if this thread has nothing else to do and
    /// polling before it sleeps ([`Worker::poll_before_sleeping`]); with
    /// connections ready to serve or completions set aside, only submits.
    fn wait(&mut self) {
        let idle =
            self.ready.is_empty() && self.set_aside.is_empty() && self.ring.completion().is_empty();
        if !idle {
            return self.enter();
        }
        if let Some(signal) = &self.idle {
            signal.report();
        }
        if !self.poll_before_sleeping() {
            while !entry_ends(self.ring.submit_and_wait(1)) {}
        }
    }

    /// Looks for completions for up to the idle poll
    /// ([`crate::ServerConfig::idle_poll`]) before the thread sleeps, so
    /// that a request arriving meanwhile is served without a wake-up: on a
    /// virtual machine, waking a thread whose CPU has gone idle takes tens
    /// of microseconds, more than serving a request. True if some came.
    ///
    /// Only while no other thread wants a CPU: every
    /// [`IDLE_POLL_YIELD_EVERY`] the poll offers its CPU to any thread
    /// waiting for it and asks how many threads are ready to run
    /// ([`Runnable`]); if one took the CPU, more threads are ready than
    /// there are CPUs, or the kernel preempted the poll, polling stops for
    /// [`IDLE_POLL_PAUSE`] (the thread then sleeps at once when idle, as
    /// without it).
    fn poll_before_sleeping(&mut self) -> bool {
        let window = self.shared.config.idle_poll;
        let start = Instant::now();
        if window.is_zero() || self.poll_paused_until.is_some_and(|until| start < until) {
            return false;
        }
        let mut enter = true;
        let mut last = start;
        let mut offered: Option<Instant> = None;
        loop {
            // Completions the kernel deferred to this thread's next entry
            // (the cheapest mode) are flagged; entering runs them. The
            // first round enters anyway, to submit what is queued.
            if enter || self.ring.submission().taskrun() {
                enter = false;
                self.enter();
                last = Instant::now();
            }
            if !self.ring.completion().is_empty() {
                return true;
            }
            std::hint::spin_loop();
            let mut now = Instant::now();
            if offered.is_none_or(|at| now - at >= IDLE_POLL_YIELD_EVERY) {
                std::thread::yield_now();
                let back = Instant::now();
                // Another thread ran meanwhile, or one waits for another
                // CPU, which would take it from this one were it idle.
                if back - now > IDLE_POLL_GAP || self.runnable.others_wait() {
                    self.poll_paused_until = Some(back + IDLE_POLL_PAUSE);
                    return false;
                }
                offered = Some(back);
                now = back;
            } else if now - last > IDLE_POLL_GAP && self.was_preempted() {
                self.poll_paused_until = Some(now + IDLE_POLL_PAUSE);
                return false;
            }
            if now - start >= window {
                return false;
            }
            last = now;
        }
    }

    /// Enters the kernel to submit what is queued and take the
    /// completions it deferred, without waiting. With completions deferred
    /// to the thread's own entries (the cheapest mode) they must be asked
    /// for, with a zero timeout, or other connections' would stay unseen;
    /// a ring without that mode (an older kernel, which may not take a
    /// timeout with its entry) has them posted without an entry, and
    /// submitting is enough.
    fn enter(&mut self) {
        let zero = types::Timespec::new();
        let no_wait = types::SubmitArgs::new().timespec(&zero);
        let deferred = self.ring.params().is_setup_single_issuer();
        loop {
            let entered = if deferred {
                self.ring.submitter().submit_with_args(0, &no_wait)
            } else {
                self.ring.submit()
            };
            if entry_ends(entered) {
                return;
            }
        }
    }

    /// Whether the kernel has switched this thread out for another since
    /// last asked (or since it started).
    fn was_preempted(&mut self) -> bool {
        // SAFETY: a `rusage` is plain integers, for which all zeroes is a
        // value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `getrusage` writes this thread's figures into `usage`,
        // which lives across the call.
        let done = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
        if done != 0 {
            return false;
        }
        let switches = usage.ru_nivcsw;
        std::mem::replace(&mut self.involuntary_switches, switches) != switches
    }

    fn reap(&mut self) {
        let mut completions = std::mem::take(&mut self.completions);
        completions.append(&mut self.set_aside);
        completions.extend(
            self.ring
                .completion()
                .map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())),
        );
        for &(user_data, result, flags) in &completions {
            if user_data == BELL {
                self.bell_reading = false;
                if result != -libc::ECANCELED {
                    self.read_bell();
                }
                continue;
            }
            let (slot, op) = op_of(user_data);
            self.complete(slot, op, result, flags);
        }
        completions.clear();
        self.completions = completions;
    }

    fn read_bell(&mut self) {
        let read = opcode::Read::new(
            types::Fd(self.mailbox.bell.as_raw_fd()),
            (&mut *self.bell_count as *mut u64).cast(),
            8,
        )
        .build()
        .user_data(BELL);
        self.push(read);
        self.bell_reading = true;
    }

    /// Cancels the bell's read and waits for its completion, so that its
    /// counter may be freed.
    fn stop_bell(&mut self) {
        if !self.bell_reading {
            return;
        }
        self.push(opcode::AsyncCancel::new(BELL).build().user_data(BELL - 1));
        while self.bell_reading {
            self.wait();
            for cqe in self.ring.completion() {
                if cqe.user_data() == BELL {
                    self.bell_reading = false;
                }
            }
        }
    }

    fn push(&mut self, entry: squeue::Entry) {
        self.push_all(&[entry]);
    }

    /// Queues an operation and its linked timeout together: split over two
    /// submissions, the operation would end its batch unlinked and the
    /// timeout fail alone.
    fn push_linked(&mut self, operation: squeue::Entry, timeout: squeue::Entry) {
        self.push_all(&[operation.flags(squeue::Flags::IO_LINK), timeout]);
    }

    fn push_all(&mut self, entries: &[squeue::Entry]) {
        loop {
            // SAFETY: every entry points only at memory that outlives its
            // completion: a connection's buffers and write timeout (the
            // connection is kept until its operations complete), the boxed
            // bell counter and partial-request timeout (kept until the
            // ring is dropped).
            if unsafe { self.ring.submission().push_multiple(entries) }.is_ok() {
                return;
            }
            match self.ring.submit() {
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => {}
                Err(error) if matches!(error.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => {
                    // The kernel takes no submissions until completions are
                    // taken off its queue: set them aside for the next
                    // round (this may be in the middle of handling one).
                    let completions = self
                        .ring
                        .completion()
                        .map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags()));
                    self.set_aside.extend(completions);
                }
                Err(error) => panic!("io_uring_enter failed: {error}"),
            }
        }
    }

    fn admit(&mut self, arrival: Arrival) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let waker = Waker::from(Arc::new(CommitWaker {
            mailbox: Arc::clone(&self.mailbox),
            slot,
        }));
        self.conns[slot] = Some(Conn {
            fd: arrival.fd,
            exchange: arrival.open.exchange(),
            phase: Phase::Receiving,
            armed: false,
            arrived: false,
            input_ended: false,
            partial_since: None,
            partial_timer_set: false,
            partial_timer: Box::new(types::Timespec::new()),
            in_flight: 0,
            cancelling: false,
            write_deadline: None,
            write_timeout: Box::new(types::Timespec::new()),
            waker,
            _open: arrival.open,
            _closed: arrival.closed,
        });
        self.next_input(slot);
    }

    fn conn(&mut self, slot: usize) -> &mut Conn {
        self.conns[slot].as_mut().expect("a live slot")
    }

    /// Handles one completion of a connection's operation.
    fn complete(&mut self, slot: usize, op: Option<Op>, result: i32, flags: u32) {
        if let Some(id) = cqueue::buffer_select(flags) {
            // Whatever becomes of the connection, the buffer goes back
            // once its bytes are copied.
            self.take_received(slot, id, result);
        }
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if op == Some(Op::Receive) && result > 0 && self.buffers.is_none() {
            let read = result as usize;
            // SAFETY: the receive was given the buffer's spare room, which
            // starts at its length, and the kernel wrote `read` bytes there.
            unsafe { conn.exchange.input.advance_mut(read) };
            conn.exchange.session.counts.bytes_read.add(read as u64);
        }
        if op == Some(Op::Receive) && cqueue::more(flags) {
            // The receive stays armed.
        } else {
            if op == Some(Op::Receive) {
                conn.armed = false;
                conn.cancelling = false;
            }
            conn.in_flight -= 1;
        }
        if matches!(conn.phase, Phase::Closing) {
            if conn.in_flight == 0 {
                self.release(slot);
            }
            return;
        }
        match op {
            Some(Op::Receive) => self.received(slot, result),
            Some(Op::Send) => self.sent(slot, result),
            Some(Op::PartialTimer) => self.partial_timer_fired(slot),
            Some(Op::Timeout | Op::Cancel) | None => {}
        }
    }

    /// Copies what the kernel received into buffer `id` for the
    /// connection in `slot` (if it is still open and reading) into its
    /// input, and gives the buffer back.
    fn take_received(&mut self, slot: usize, id: u16, result: i32) {
        let buffers = self.buffers.as_mut().expect("a buffer was selected");
        if result > 0 {
            if let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) {
                if !matches!(conn.phase, Phase::Closing) {
                    conn.exchange
                        .take_input(buffers.received(id, result as usize));
                }
            }
        }
        buffers.give_back(id);
    }

    fn received(&mut self, slot: usize, result: i32) {
        let conn = self.conn(slot);
        if result > 0 {
            if matches!(conn.phase, Phase::Receiving) {
                self.serve(slot);
            } else {
                // Busy with a batch: what comes meanwhile waits in the
                // input, up to a bound; beyond it, in the socket, holding
                // up the client's sends.
                conn.arrived = true;
                if conn.exchange.input.len() >= INPUT_WHILE_BUSY_BYTES_MAX {
                    self.cancel_receive(slot);
                }
            }
        } else if result == -libc::ENOBUFS {
            // Every buffer was taken this round: arm again (the data waits
            // in the socket).
            if matches!(conn.phase, Phase::Receiving) {
                self.next_input(slot);
            }
        } else if result == -libc::ECANCELED {
            // Cancelled at the shutdown (then read what is there, and
            // close), or while the connection had input enough waiting.
            if matches!(conn.phase, Phase::Receiving) {
                self.next_input(slot);
            }
        } else {
            // The end of input, or a failed socket: what came before it is
            // served first, be the connection busy with a batch or waiting
            // at the shutdown for a cancel of its receive.
            conn.input_ended = true;
            if matches!(conn.phase, Phase::Receiving) {
                self.next_input(slot);
            }
        }
    }

    /// Parses and handles what the connection has read, then commits and
    /// sends (or waits for the commit).
    fn serve(&mut self, slot: usize) {
        let conn = self.conns[slot].as_mut().expect("a live slot");
        let engine = &self.shared.engine;
        let handled = contained(|| {
            #[cfg(test)]
            tests::panic_if_asked(&conn.exchange.input);
            let then = conn.exchange.process();
            let ticket = conn.exchange.session.ticket;
            let commit = (ticket != Ticket::NONE).then(|| engine.commit_async(ticket));
            (then, commit)
        });
        match handled {
            None => self.end(slot, End::Done),
            Some((then, None)) => self.send(slot, 0, then),
            Some((then, Some(commit))) => {
                self.conn(slot).phase = Phase::Committing(commit, then);
                self.poll_commit(slot);
            }
        }
    }

    /// Polls a connection's commit, at first and whenever the engine wakes
    /// it; once settled, sends the batch's replies.
    fn poll_commit(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let Phase::Committing(commit, then) = &mut conn.phase else {
            // A wake-up for a commit already settled, or a connection
            // closed since.
            return;
        };
        let then = *then;
        let waker = &conn.waker;
        match contained(|| Pin::new(commit).poll(&mut Context::from_waker(waker))) {
            None => return self.end(slot, End::Done),
            Some(Poll::Ready(Ok(()))) => {}
            Some(Poll::Ready(Err(error))) => conn.exchange.commit_failed(&error),
            Some(Poll::Pending) => return conn.exchange.syncing(),
        }
        self.send(slot, 0, then);
    }

    /// Sends the replies from byte `sent` on, then goes on with `then`.
    /// The first attempt takes what the socket has room for without
    /// waiting; what is left then waits for room, all of it within
    /// the write timeout of that first attempt, as under tokio.
    fn send(&mut self, slot: usize, sent: usize, then: Processed) {
        let conn = self.conn(slot);
        let output = &conn.exchange.session.output;
        if sent >= output.len() {
            conn.exchange.batch_sent();
            conn.write_deadline = None;
            self.after_batch(slot, then);
            return;
        }
        let rest = &output[sent..];
        let waits = conn.write_deadline.is_some();
        let send = opcode::Send::new(
            types::Fd(conn.fd.as_raw_fd()),
            rest.as_ptr(),
            u32::try_from(rest.len()).unwrap_or(u32::MAX),
        )
        .flags(libc::MSG_NOSIGNAL | if waits { 0 } else { libc::MSG_DONTWAIT })
        .build()
        .user_data(user_data(slot, Op::Send));
        conn.phase = Phase::Sending { sent, then };
        let Some(deadline) = conn.write_deadline else {
            conn.in_flight += 1;
            self.push(send);
            return;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        *conn.write_timeout = types::Timespec::from(left);
        let timeout = opcode::LinkTimeout::new(&*conn.write_timeout)
            .build()
            .user_data(user_data(slot, Op::Timeout));
        conn.in_flight += 2;
        self.push_linked(send, timeout);
    }

    fn sent(&mut self, slot: usize, result: i32) {
        let conn = self.conn(slot);
        let Phase::Sending { sent, then } = conn.phase else {
            unreachable!("a send completed outside the sending phase");
        };
        let taken = match result {
            taken if taken > 0 => taken as usize,
            // No room at all on the first attempt: wait for it.
            error if error == -libc::EAGAIN && conn.write_deadline.is_none() => 0,
            error if error == -libc::ECANCELED => return self.end(slot, End::TimedOut),
            _ => return self.end(slot, End::Done),
        };
        if conn.write_deadline.is_none() && sent + taken < conn.exchange.session.output.len() {
            let patience = conn.exchange.session.shared.config.write_timeout;
            conn.write_deadline = Some(Instant::now() + patience);
            conn.exchange.waiting_to_send();
        }
        self.send(slot, sent + taken, then);
    }

    /// A batch's replies are all sent: go on as [`Exchange::process`] said.
    fn after_batch(&mut self, slot: usize, then: Processed) {
        match then {
            Processed::Close(end) => self.end(slot, end),
            Processed::OutputFull => self.serve(slot),
            Processed::NeedInput => self.next_input(slot),
        }
    }

    /// Waits for more input; at shutdown, takes only what has come already
    /// (served in the next round, see [`Worker::serve_ready`]) and closes
    /// once there is none.
    fn next_input(&mut self, slot: usize) {
        let stopping = self.stopping;
        let multishot = self.buffers.is_some();
        let conn = self.conn(slot);
        // A single receive in flight would be writing into the input,
        // which the next line may move.
        debug_assert!(multishot || !conn.armed);
        conn.exchange.make_room_to_read();
        let fd = conn.fd.as_raw_fd();
        let room = conn.exchange.input.spare_capacity_mut();
        let (at, room_bytes) = (room.as_mut_ptr().cast::<u8>(), room.len());
        if stopping && conn.armed {
            // Its multishot receive must end first, or what it took from
            // the socket could come after what is read here.
            conn.phase = Phase::Receiving;
            return self.cancel_receive(slot);
        }
        if conn.arrived {
            conn.arrived = false;
            if stopping {
                conn.phase = Phase::Ready;
                self.ready.push(slot);
                return;
            }
            return self.serve(slot);
        }
        if conn.input_ended {
            return self.end(slot, End::Done);
        }
        if stopping {
            // Serve what the client sent before the shutdown (e.g. a
            // pipeline of noreply sets), without waiting for more.
            // SAFETY: receives into the buffer's spare room, `room_bytes`
            // long, which nothing else uses meanwhile.
            let read = unsafe { libc::recv(fd, at.cast(), room_bytes, libc::MSG_DONTWAIT) };
            if read > 0 {
                // SAFETY: the kernel wrote `read` bytes from the length on.
                unsafe { conn.exchange.input.advance_mut(read as usize) };
                conn.exchange.session.counts.bytes_read.add(read as u64);
                conn.phase = Phase::Ready;
                self.ready.push(slot);
            } else {
                self.end(slot, End::Done);
            }
            return;
        }
        conn.phase = Phase::Receiving;
        if conn.exchange.partial() {
            // A partial request must be completed within the timeout of
            // each wait for more of it.
            conn.partial_since = Some(Instant::now());
            if !conn.partial_timer_set {
                let patience = conn.exchange.session.shared.config.partial_request_timeout;
                self.set_partial_timer(slot, patience);
            }
        }
        let conn = self.conn(slot);
        if conn.armed {
            return;
        }
        let receive = if multishot {
            opcode::RecvMulti::new(types::Fd(fd), buffers::GROUP).build()
        } else {
            // SAFETY of the pointer: the receive writes only into the
            // input's spare room, which nothing else touches until it
            // completes (the connection waits in `Phase::Receiving`).
            opcode::Recv::new(
                types::Fd(fd),
                at,
                u32::try_from(room_bytes).unwrap_or(u32::MAX),
            )
            .build()
        }
        .user_data(user_data(slot, Op::Receive));
        conn.armed = true;
        conn.in_flight += 1;
        self.push(receive);
    }

    /// Sets the connection's partial-request timer to fire in `after`.
    fn set_partial_timer(&mut self, slot: usize, after: Duration) {
        let conn = self.conn(slot);
        *conn.partial_timer = types::Timespec::from(after);
        let timer = opcode::Timeout::new(&*conn.partial_timer)
            .build()
            .user_data(user_data(slot, Op::PartialTimer));
        conn.partial_timer_set = true;
        conn.in_flight += 1;
        self.push(timer);
    }

    /// The partial-request timer went off (or was cancelled, with the
    /// connection). A connection still waiting for the rest of a request
    /// it began that long ago is timed out; one that waits since less
    /// long has its timer set for the rest; any other has none.
    /// At the shutdown nothing more is waited for anyway.
    fn partial_timer_fired(&mut self, slot: usize) {
        let stopping = self.stopping;
        let conn = self.conn(slot);
        conn.partial_timer_set = false;
        let waiting =
            !stopping && matches!(conn.phase, Phase::Receiving) && conn.exchange.partial();
        let (Some(since), true) = (conn.partial_since, waiting) else {
            return;
        };
        let patience = conn.exchange.session.shared.config.partial_request_timeout;
        match patience.checked_sub(since.elapsed()) {
            Some(left) if !left.is_zero() => self.set_partial_timer(slot, left),
            _ => self.end(slot, End::TimedOut),
        }
    }

    /// Serves the connections that read input at shutdown in the last
    /// round. One round at a time, so that a client that keeps sending
    /// while the server stops does not keep the thread from its other
    /// connections, nor deepen its stack.
    fn serve_ready(&mut self) {
        let mut ready = std::mem::take(&mut self.ready);
        for &slot in &ready {
            let waiting = self.conns.get(slot).and_then(Option::as_ref);
            if waiting.is_some_and(|conn| matches!(conn.phase, Phase::Ready)) {
                self.serve(slot);
            }
        }
        ready.clear();
        if self.ready.is_empty() {
            self.ready = ready;
        }
    }

    /// The shutdown: every connection waiting for input stops waiting
    /// (its receive completes cancelled, or with what had come).
    fn cancel_receives(&mut self) {
        for slot in 0..self.conns.len() {
            let Some(conn) = self.conns[slot].as_mut() else {
                continue;
            };
            if matches!(conn.phase, Phase::Receiving) {
                self.cancel_receive(slot);
            }
        }
    }

    /// Asks for the connection's armed receive to end, unless that is
    /// asked already; its last completion then comes cancelled, or with
    /// what came before the cancel.
    fn cancel_receive(&mut self, slot: usize) {
        let conn = self.conn(slot);
        if !conn.armed || conn.cancelling {
            return;
        }
        conn.cancelling = true;
        conn.in_flight += 1;
        let cancel = opcode::AsyncCancel::new(user_data(slot, Op::Receive))
            .build()
            .user_data(user_data(slot, Op::Cancel));
        self.push(cancel);
    }

    /// Closes every connection now, whatever it was doing.
    fn close_all(&mut self) {
        self.ready.clear();
        for slot in 0..self.conns.len() {
            if self.conns[slot].is_some() {
                self.end(slot, End::Done);
            }
        }
    }

    /// Ends a connection: no more input is read nor replies sent. It is
    /// dropped (closed) once its operations in flight have completed,
    /// which a cancel hurries.
    fn end(&mut self, slot: usize, end: End) {
        let conn = self.conn(slot);
        if matches!(conn.phase, Phase::Closing) {
            return;
        }
        if end == End::TimedOut {
            self.shared
                .stats
                .timed_out_connections
                .fetch_add(1, Ordering::Relaxed);
        }
        let conn = self.conn(slot);
        conn.phase = Phase::Closing;
        // SAFETY: shutdown takes no pointers; the descriptor is the
        // connection's own and still open.
        unsafe { libc::shutdown(conn.fd.as_raw_fd(), libc::SHUT_WR) };
        if conn.in_flight == 0 {
            self.release(slot);
            return;
        }
        conn.in_flight += 3;
        for op in [Op::Receive, Op::Send, Op::PartialTimer] {
            let cancel = opcode::AsyncCancel::new(user_data(slot, op))
                .build()
                .user_data(user_data(slot, Op::Cancel));
            self.push(cancel);
        }
    }

    fn release(&mut self, slot: usize) {
        self.conns[slot] = None;
        self.free.push(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use larder_engine::fs::MemFs;
    use larder_engine::Durability;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use tokio::sync::Semaphore;

    /// Input starting with this panics while it is handled.
    const PANIC: &[u8] = b"panic-for-test\r\n";

    #[test]
    fn the_runnable_threads_are_read_from_loadavg_and_anything_else_is_none() {
        assert_eq!(runnable_in_loadavg(b"0.20 0.18 0.12 2/187 1234\n"), Some(2));
        assert_eq!(runnable_in_loadavg(b"12.5 9.0 3.1 17/2048 99"), Some(17));
        assert_eq!(runnable_in_loadavg(b"0.20 0.18 0.12"), None);
        assert_eq!(runnable_in_loadavg(b"0.20 0.18 0.12 x/187 1"), None);
        assert_eq!(runnable_in_loadavg(b"0.20 0.18 0.12 2 1"), None);
        assert_eq!(runnable_in_loadavg(b"\xff\xfe"), None);
        let here = std::fs::read("/proc/loadavg").unwrap();
        assert!(runnable_in_loadavg(&here).is_some_and(|count| count >= 1));
    }

    pub(super) fn panic_if_asked(input: &[u8]) {
        if input.starts_with(PANIC) {
            panic!("asked to panic");
        }
    }

    /// Hands one end of a new socket pair to `rings`; returns the other
    /// end and what tells that the ring thread dropped its connection.
    fn connect(rings: &Rings, shared: &Arc<Shared>) -> (UnixStream, oneshot::Receiver<()>) {
        let (client, server) = UnixStream::pair().unwrap();
        // A hang is a failure, not a wait without end.
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        client
            .set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // A small send buffer on the server's end, so that a reply of some
        // kilobytes is sent in parts whatever the host's default.
        let bytes: libc::c_int = 4096;
        // SAFETY: sets an int option on a socket this test owns, from an
        // int that lives across the call.
        let done = unsafe {
            libc::setsockopt(
                server.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
        let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        let fd = server.as_raw_fd();
        let open = crate::Open::new(Arc::clone(shared), permit, fd, "unix:".to_owned());
        let (closed, dropped) = oneshot::channel();
        rings.hand(Arrival {
            fd: OwnedFd::from(server),
            open,
            closed,
        });
        (client, dropped)
    }

    fn call(client: &mut UnixStream, request: &[u8], reply: &[u8]) {
        client.write_all(request).unwrap();
        let mut got = vec![0; reply.len()];
        client.read_exact(&mut got).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(reply)
        );
    }

    /// The ways of setting up a ring that this kernel has: the cheapest
    /// where it has it (Linux 6.1 on), and always the plain one older
    /// kernels fall back to, which a newer kernel serves too.
    fn setups() -> Vec<(&'static str, RingSetup)> {
        let mut setups = vec![("plain", plain_ring as RingSetup)];
        match cheapest_ring(8) {
            Ok(_) => setups.push(("cheapest", cheapest_ring)),
            Err(error) => eprintln!("no cheapest ring on this kernel ({error}): plain only"),
        }
        setups
    }

    /// One ring thread on each of [`setups`], each serving its own
    /// engine on memory with `durability`; started one at a time, as the
    /// caller goes through them.
    fn one_ring_each_setup(
        durability: Durability,
    ) -> impl Iterator<Item = (&'static str, Arc<Shared>, Rings)> {
        setups().into_iter().map(move |(name, setup)| {
            let shared = Shared::on_memory(&MemFs::new(), durability);
            let rings = Rings::start_on(1, &shared, setup).unwrap();
            (name, shared, rings)
        })
    }

    #[test]
    fn the_two_ring_setups_are_the_two_modes_that_worker_enter_tells_apart() {
        if let Ok(ring) = cheapest_ring(8) {
            assert!(ring.params().is_setup_single_issuer());
        }
        assert!(!plain_ring(8).unwrap().params().is_setup_single_issuer());
        assert_eq!(completion_room(0), 2 * RING_SUBMISSIONS);
        assert_eq!(completion_room(usize::MAX), RING_COMPLETIONS_MAX);
    }

    #[test]
    fn each_ring_setup_serves_commits_woken_by_a_sync_and_replies_larger_than_the_socket() {
        // Under `always` a commit waits for the engine's sync thread,
        // which wakes it through the ring thread's mailbox.
        for (name, shared, rings) in one_ring_each_setup(Durability::Always) {
            let (mut client, _) = connect(&rings, &shared);
            call(&mut client, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");

            // Eight copies of a 256 KiB value in one reply: far more than
            // the 4 KiB send buffer, so the ring sends in parts.
            let one = set_big(&mut client);
            let item = &one[..one.len() - b"END\r\n".len()];
            let mut reply = item.repeat(8);
            reply.extend_from_slice(b"END\r\n");
            client
                .write_all(b"get big big big big big big big big\r\n")
                .unwrap();
            let mut got = vec![0; reply.len()];
            client.read_exact(&mut got).unwrap();
            assert!(got == reply, "{name}: the large reply came back altered");

            call(&mut client, b"get k\r\n", b"VALUE k 0 1\r\nx\r\nEND\r\n");
            rings.stop();
            rings.cut_and_join();
        }
    }

    /// Sets `big` to a value of 256 KiB, far more than a socket from
    /// [`connect`] takes at once; returns the reply to `get big`.
    fn set_big(client: &mut UnixStream) -> Vec<u8> {
        let value: Vec<u8> = (0..256 << 10).map(|i| b'a' + (i % 26) as u8).collect();
        let mut set = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        call(client, &set, b"STORED\r\n");
        let mut reply = format!("VALUE big 0 {}\r\n", value.len()).into_bytes();
        reply.extend_from_slice(&value);
        reply.extend_from_slice(b"\r\nEND\r\n");
        reply
    }

    #[test]
    fn what_comes_while_replies_wait_for_room_is_served_after_them_even_past_the_clients_end() {
        for (name, shared, rings) in one_ring_each_setup(Durability::EverySec) {
            let (mut client, _) = connect(&rings, &shared);
            call(&mut client, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
            let big = set_big(&mut client);
            // The big reply waits for room until this client reads; the
            // next request and the end of its input come meanwhile.
            client.write_all(b"get big\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            client.write_all(b"get k\r\n").unwrap();
            client.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).unwrap();
            let mut expected = big;
            expected.extend_from_slice(b"VALUE k 0 1\r\nx\r\nEND\r\n");
            assert!(
                rest == expected,
                "{name}: {} bytes came, {} expected; the last: {:?}",
                rest.len(),
                expected.len(),
                String::from_utf8_lossy(&rest[rest.len().saturating_sub(40)..])
            );
            rings.stop();
            rings.cut_and_join();
        }
    }

    #[test]
    fn what_came_while_replies_waited_is_served_at_the_shutdown_with_the_end_of_input() {
        for (name, shared, rings) in one_ring_each_setup(Durability::EverySec) {
            let (mut client, _) = connect(&rings, &shared);
            let big = set_big(&mut client);
            client.write_all(b"get big\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            client
                .write_all(b"set late 0 0 1 noreply\r\nx\r\n")
                .unwrap();
            client.shutdown(std::net::Shutdown::Write).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            rings.stop();
            std::thread::sleep(Duration::from_millis(50));
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).unwrap();
            assert!(rest == big, "{name}: {} bytes came", rest.len());
            rings.cut_and_join();
            let late = shared.engine.get(b"late").unwrap();
            assert_eq!(
                late.map(|item| item.value.to_vec()),
                Some(b"x".to_vec()),
                "{name}"
            );
        }
    }

    #[test]
    fn a_connection_whose_replies_wait_for_room_shows_so_in_stats_conns_while_input_comes() {
        for (name, shared, rings) in one_ring_each_setup(Durability::EverySec) {
            let (mut waiting, _) = connect(&rings, &shared);
            set_big(&mut waiting);
            waiting.write_all(b"get big\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            waiting.write_all(b"get big\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let (mut asking, _) = connect(&rings, &shared);
            asking.write_all(b"stats conns\r\n").unwrap();
            let mut stats = Vec::new();
            while !stats.ends_with(b"END\r\n") {
                let mut chunk = [0; 4096];
                let read = asking.read(&mut chunk).unwrap();
                assert!(read > 0, "{name}: closed");
                stats.extend_from_slice(&chunk[..read]);
            }
            let stats = String::from_utf8(stats).unwrap();
            let states: Vec<&str> = stats
                .lines()
                .filter_map(|line| line.split_once(":state ").map(|(_, state)| state))
                .collect();
            assert!(
                states.contains(&"conn_mwrite"),
                "{name}: no connection shown writing: {states:?}"
            );
            rings.stop();
            rings.cut_and_join();
        }
    }

    #[test]
    fn a_connection_whose_replies_wait_for_room_takes_in_a_bounded_amount_of_input() {
        for (name, shared, rings) in one_ring_each_setup(Durability::EverySec) {
            let (mut client, _) = connect(&rings, &shared);
            set_big(&mut client);
            client.write_all(b"get big\r\n").unwrap();
            // Requests that the server must take in or leave in the socket,
            // written without reading a reply until the socket takes no
            // more.
            client.set_nonblocking(true).unwrap();
            let requests = b"get big\r\n".repeat(1024);
            let mut taken = 0usize;
            let mut refused_since: Option<Instant> = None;
            while taken < 64 << 20 {
                match client.write(&requests) {
                    Ok(written) => {
                        taken += written;
                        refused_since = None;
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        // Refused for a while: the server reads no more.
                        let since = *refused_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > Duration::from_millis(200) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(error) => panic!("{name}: {error}"),
                }
            }
            // The socket's own buffer, whatever the host's default, and
            // what the server took in: 16 gets' replies fill a batch.
            assert!(
                taken < 4 << 20,
                "{name}: the server took in {taken} bytes of requests while its replies waited"
            );
            rings.stop();
            rings.cut_and_join();
        }
    }

    #[test]
    fn a_panic_handling_requests_closes_that_connection_and_the_ring_serves_the_others() {
        for (name, shared, rings) in one_ring_each_setup(Durability::EverySec) {
            let (mut kept, _) = connect(&rings, &shared);
            let (mut panicking, mut dropped) = connect(&rings, &shared);
            call(&mut kept, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");

            panicking.write_all(PANIC).unwrap();
            let mut rest = Vec::new();
            assert_eq!(panicking.read_to_end(&mut rest).unwrap(), 0, "{rest:?}");
            let deadline = Instant::now() + Duration::from_secs(10);
            while dropped.try_recv() == Err(oneshot::error::TryRecvError::Empty) {
                assert!(
                    Instant::now() < deadline,
                    "{name}: the connection was never dropped"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(shared.stats.curr_connections.load(Ordering::Relaxed), 1);

            call(&mut kept, b"get k\r\n", b"VALUE k 0 1\r\nx\r\nEND\r\n");
            let (mut later, _) = connect(&rings, &shared);
            call(&mut later, b"get k\r\n", b"VALUE k 0 1\r\nx\r\nEND\r\n");
            rings.stop();
            rings.cut_and_join();
        }
    }
}
