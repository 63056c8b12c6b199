//! Every limit the server enforces, in one place.
//!
//! The protocol's own limits (key length, command line length, item size)
//! live in `larder_protocol::limits`; these are the server's: how many
//! connections, how much a connection may buffer, how long a half-sent
//! request may sit.

use std::time::Duration;

/// Default `-c`: concurrent client connections (memcached's default).
pub const CONNECTIONS_MAX_DEFAULT: usize = 1024;
/// Largest `-c` accepted.
pub const CONNECTIONS_MAX_CEILING: usize = 1 << 20;
/// Default permission bits of a Unix domain socket's file (memcached's
/// `-a` default): only the server's own user may connect.
pub const UNIX_SOCKET_MODE_DEFAULT: u32 = 0o700;
/// Longest Unix domain socket path: the kernel's `sun_path` holds 108
/// bytes with the terminating zero.
pub const UNIX_SOCKET_PATH_BYTES_MAX: usize = 107;
/// Most times a start opens and locks a Unix domain socket's lock file
/// when each one it locked had been removed by a stopping server.
pub const UNIX_SOCKET_LOCK_ATTEMPTS_MAX: usize = 8;
/// What a Unix domain socket's lock file is named by: the socket's path
/// with this added.
pub const UNIX_SOCKET_LOCK_FILE_SUFFIX: &str = ".lock";
/// Connections the kernel may queue before the server accepts them.
pub const LISTEN_BACKLOG: u32 = 4096;
/// Read buffer a connection starts with, and shrinks back to when idle.
pub const READ_BUFFER_BYTES_INITIAL: usize = 16 * 1024;
/// Free room a read must have at the end of the read buffer. With less, the
/// unparsed bytes first move to the front of the buffer (or, when they fill
/// most of it, the buffer grows), so a read of up to this many bytes is not
/// cut short by the buffer's end, and a buffer that keeps being reused does
/// not grow.
pub const READ_ROOM_BYTES_MIN: usize = READ_BUFFER_BYTES_INITIAL / 4;
/// Input a connection on a ring (`--io uring`) takes in while it is busy
/// with a batch (committing it, sending its replies); beyond this, further
/// input waits in the socket, as it does under tokio, which reads only
/// between batches. It is checked as input comes, so the arrivals of one
/// round may take a connection past it by up to all of its ring thread's
/// receive buffers ([`RING_RECEIVE_BUFFERS`] of
/// [`RING_RECEIVE_BUFFER_BYTES`]), once a batch.
pub const INPUT_WHILE_BUSY_BYTES_MAX: usize = READ_BUFFER_BYTES_INITIAL;
/// Replies buffered before the connection stops processing requests and
/// writes them out (a client that pipelines many large gets, or names many
/// keys in one, cannot make the server buffer more than about this plus one
/// value).
pub const WRITE_BUFFER_BYTES_SOFT_MAX: usize = 4 * 1024 * 1024;
/// How long a connection may hold a partly received request without
/// sending more bytes before it is closed (the default of
/// `ServerConfig::partial_request_timeout`).
pub const PARTIAL_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Shortest partial-request or write timeout accepted: below this an
/// ordinary network stall would cut honest clients off mid-request or
/// mid-reply.
pub const CONNECTION_TIMEOUT_MIN: Duration = Duration::from_millis(100);
/// Longest partial-request or write timeout accepted (an hour): beyond it a
/// stalled client would hold its connection's buffers for good.
pub const CONNECTION_TIMEOUT_MAX: Duration = Duration::from_secs(60 * 60);
/// How long the replies of one batch that a client does not read may wait
/// for room in its socket before the connection is closed (the default of
/// `ServerConfig::write_timeout`).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the listener stops accepting after running out of file
/// descriptors or memory for a new connection (unless a connection ends
/// first): the waiting connection stays ready to accept, so accepting again
/// at once would only fail again, at the cost of a whole core.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// While accepts keep failing so, the warning is logged at most this
/// often.
pub const ACCEPT_WARNING_INTERVAL: Duration = Duration::from_secs(60);
/// How long graceful shutdown waits for connections to finish their
/// current requests.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Submissions a ring thread (`--io uring`) queues before it must hand
/// them to the kernel; a round hands them all over in one system call.
pub const RING_SUBMISSIONS: u32 = 1024;
/// Most completions a ring's queue holds (the kernel's own ceiling): past
/// it the kernel keeps further ones aside, more slowly, rather than drop
/// them.
pub const RING_COMPLETIONS_MAX: u32 = 65536;
/// Buffers a ring thread shares among its connections' multishot receives
/// (a power of two), and each one's size: 2 MiB a ring thread. A receive
/// takes one for each arrival, which goes back as soon as its bytes are
/// copied into the connection's input, so they run short only when more
/// connections than this have input in one round; those then receive
/// again in the next.
pub const RING_RECEIVE_BUFFERS: u16 = 512;
pub const RING_RECEIVE_BUFFER_BYTES: usize = 4096;
/// A ring thread yields its CPU at most this often while it has work. A
/// busy ring thread finds completions waiting at each round and never
/// sleeps, so a thread waiting for its CPU (a client on the same host, the
/// sync thread) would wait for the scheduler's tick, 4 ms at 250 Hz.
pub const RING_YIELD_INTERVAL: Duration = Duration::from_micros(200);
/// How long an idle ring thread looks for work before it sleeps, by
/// default ([`crate::ServerConfig::idle_poll`]).
pub const IDLE_POLL_DEFAULT: Duration = Duration::from_micros(50);
/// The longest idle poll accepted.
pub const IDLE_POLL_MAX: Duration = Duration::from_millis(1);
/// A pause longer than this between two looks of an idle poll may mean
/// that another thread took the CPU: the ring thread then asks the kernel
/// whether it was preempted.
pub const IDLE_POLL_GAP: Duration = Duration::from_micros(5);
/// How often an idle poll offers its CPU to any other thread waiting for
/// it.
pub const IDLE_POLL_YIELD_EVERY: Duration = Duration::from_micros(10);
/// How long a ring thread that was preempted while polling sleeps at once
/// when idle, before it polls again.
pub const IDLE_POLL_PAUSE: Duration = Duration::from_millis(10);

const _: () = assert!(READ_BUFFER_BYTES_INITIAL <= WRITE_BUFFER_BYTES_SOFT_MAX);
const _: () = assert!(RING_RECEIVE_BUFFERS.is_power_of_two());
const _: () =
    assert!(READ_ROOM_BYTES_MIN > 0 && READ_ROOM_BYTES_MIN <= READ_BUFFER_BYTES_INITIAL / 2);
const _: () = assert!(CONNECTIONS_MAX_DEFAULT <= CONNECTIONS_MAX_CEILING);
