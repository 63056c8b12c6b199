//! Larder's network server: the memcached text and meta protocols over the
//! storage engine.
//!
//! # Threads and tasks
//!
//! ```text
//!  tokio runtime (`threads` workers)            engine threads
//!  ┌──────────────────────────────────┐        ┌──────────────────────┐
//!  │ accept task ── spawns ──┐        │        │ larder-sync: write + │
//!  │                         v        │ commit │ fdatasync, wakes     │
//!  │ connection task (one per client):│ ─────> │ committers (group    │
//!  │  read -> parse -> engine call -> │        │ commit)              │
//!  │  commit_async(ticket) -> write   │        │ larder-compact: hint │
//!  │                                  │        │ files, compaction    │
//!  │ signal task: SIGTERM/SIGINT ->   │        │ larder-maint: expiry,│
//!  │  stop accepting, drain, sync     │        │ flush, value cache   │
//!  │                                  │ idle   │                      │
//!  │ worker about to park ────────────│ ─────> │ larder-sync: may let │
//!  │                                  │        │ a group fill first   │
//!  └──────────────────────────────────┘        └──────────────────────┘
//! ```
//!
//! Engine calls run on the connection's task: they take one partition lock
//! and copy a value, so they are short; only the commit waits, and it waits
//! as a future, so a worker thread never blocks on `fdatasync`. Each
//! worker that finds no task to run reports it to the engine's
//! [`IdleSignal`](larder_engine::IdleSignal) before it parks: under
//! `always`, while no worker has, the sync thread lets the next group
//! commit gather more committers ([`serve_until`]). The sync thread runs
//! as a batch thread: its wake-ups do not preempt a busy worker.
//!
//! With `--io uring` ([`Io::Uring`]), which the default `--io auto` settles
//! on wherever the kernel lets the server set up its rings ([`settle_io`]),
//! the runtime keeps one worker, which accepts connections and hands each
//! to one of `threads` ring threads; a ring thread serves its connections
//! through an io_uring ring, many receives and sends to one system call,
//! with the same parsing and handling, and reports to the idle signal
//! before it waits (see the `ring` module).
//!
//! Replies follow memcached 1.6 byte for byte; see the `larder-protocol`
//! crate for the parsing rules and error replies.

mod binary;
pub mod config;
mod connection;
mod conns;
pub mod dump;
pub mod limits;
mod meta;
mod metrics;
mod ring;
mod session;
pub mod stats;
mod text;
mod unix_socket;

pub use config::{ConfigError, ConfigFile, Io, ServerConfig};

use connection::Socket;
use larder_protocol::Limits;
use session::Shared;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use unix_socket::{listen_unix, SocketLockFile, UnixSocketFile};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data directory could not be opened or recovered.
    #[error("cannot open data directory: {0}{hint}", hint = salvage_hint(.0))]
    Engine(#[from] larder_engine::Error),
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: Address,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    /// `--io uring` was asked for and the kernel refused a ring (`auto`
    /// falls back to epoll instead).
    #[error(
        "cannot use io_uring ({0}): it needs Linux 5.7 or later, not refused by a \
         container's seccomp profile or the kernel.io_uring_disabled sysctl; serve with --io auto or --io epoll"
    )]
    Uring(std::io::Error),
}

/// How a server's shutdown went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shutdown {
    /// Connections still busy when the grace period
    /// ([`limits::SHUTDOWN_GRACE`]) ran out, closed without finishing
    /// (a client that does not read its replies, say; also one refused for
    /// too many connections whose refusal could not be sent). Connections
    /// that finished their requests or were idle are not counted.
    pub connections_cut: usize,
}

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A TCP address and port.
    Tcp(SocketAddr),
    /// The path of a Unix domain socket.
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "{addr}"),
            Address::Unix(path) => write!(f, "unix socket {}", path.display()),
        }
    }
}

/// A server bound to its port with its data directory open, ready to run.
pub struct Server {
    shared: Arc<Shared>,
    listener: Listener,
    /// The metrics endpoint, if one was asked for.
    metrics: Option<metrics::Endpoint>,
}

/// The listening socket.
enum Listener {
    Tcp(TcpListener),
    Unix(UnixSocketFile),
}

/// A connection just accepted.
enum Accepted {
    Tcp(TcpStream, SocketAddr),
    Unix(UnixStream),
}

impl Listener {
    async fn accept(&self) -> std::io::Result<Accepted> {
        match self {
            Listener::Tcp(listener) => listener
                .accept()
                .await
                .map(|(s, peer)| Accepted::Tcp(s, peer)),
            Listener::Unix(socket) => socket
                .listener
                .accept()
                .await
                .map(|(s, _)| Accepted::Unix(s)),
        }
    }
}

/// What to do about damage that stops a start.
fn salvage_hint(error: &larder_engine::Error) -> &'static str {
    match error {
        // Offset 0 is a segment or hint header, which salvage cannot mend.
        larder_engine::Error::Corruption { offset, .. } if *offset > 0 => {
            "; `larder check` lists the damage, and `larder serve --salvage` starts \
             without the damaged records (the originals are kept under damaged/)"
        }
        _ => "",
    }
}

impl Server {
    /// Opens the data directory (recovering it) and binds the listening
    /// socket. Must be called inside a tokio runtime.
    pub async fn bind(mut config: ServerConfig) -> Result<Server, ServerError> {
        config.validate()?;
        settle_io(&mut config)?;
        let limits = Limits::default()
            .with_item_bytes_max(config.max_item_size)
            .map_err(|e| ConfigError(format!("max item size: {e}")))?;
        make_room_for_connections(config.max_connections);
        let listen_error = |path: &PathBuf| {
            let addr = Address::Unix(path.clone());
            move |source| ServerError::Listen { addr, source }
        };
        // Before the data directory, whose recovery may take a while: a
        // second server on the socket's path stops at once.
        let socket_lock = match &config.unix_socket {
            Some(path) => Some((
                path,
                SocketLockFile::take(path, config.unix_socket_mode).map_err(listen_error(path))?,
            )),
            None => None,
        };
        // Before the data directory too: a port in use stops the start at
        // once. `stats settings` then shows the port bound.
        let metrics = match config.metrics_listen {
            Some(addr) => {
                let endpoint =
                    metrics::Endpoint::bind(addr)
                        .await
                        .map_err(|source| ServerError::Listen {
                            addr: Address::Tcp(addr),
                            source,
                        })?;
                config.metrics_listen = Some(endpoint.address());
                Some(endpoint)
            }
            None => None,
        };
        let engine_config = config.engine_config();
        let engine =
            tokio::task::spawn_blocking(move || larder_engine::Engine::open(engine_config))
                .await
                .map_err(|e| ServerError::Runtime(std::io::Error::other(e)))??;
        let listener = match socket_lock {
            Some((path, lock)) => listen_unix(path, config.unix_socket_mode, lock)
                .await
                .map(Listener::Unix)
                .map_err(listen_error(path))?,
            None => {
                let addr = SocketAddr::new(config.listen, config.port);
                listen(addr)
                    .map(Listener::Tcp)
                    .map_err(|source| ServerError::Listen {
                        addr: Address::Tcp(addr),
                        source,
                    })?
            }
        };
        let shared = Arc::new(Shared {
            engine: Arc::new(engine),
            stats: stats::ServerStats::default(),
            config,
            limits,
        });
        let server = Server {
            shared,
            listener,
            metrics,
        };
        let fd = match &server.listener {
            Listener::Tcp(listener) => listener.as_raw_fd(),
            Listener::Unix(socket) => socket.listener.as_raw_fd(),
        };
        let now = server.shared.engine.clock().now();
        let name = server.listen_name();
        server.shared.stats.conns.listening(fd, name, now);
        Ok(server)
    }

    /// Where the metrics endpoint listens, if there is one (with port 0,
    /// the port the system chose).
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(metrics::Endpoint::address)
    }

    /// Where the server listens (with port 0, the port the system chose).
    pub fn address(&self) -> Address {
        match &self.listener {
            Listener::Tcp(listener) => Address::Tcp(listener.local_addr().unwrap_or_else(|_| {
                SocketAddr::new(self.shared.config.listen, self.shared.config.port)
            })),
            Listener::Unix(socket) => Address::Unix(socket.path().to_owned()),
        }
    }

    /// Serves until `shutdown` resolves; then stops accepting, lets
    /// connections finish the requests they have read (for at most
    /// [`limits::SHUTDOWN_GRACE`]), and syncs and closes the engine.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Shutdown, ServerError> {
        // A client of a Unix domain socket has no address of its own.
        let unix_peer = self.listen_name();
        let Server {
            shared,
            listener,
            metrics,
        } = self;
        let rings = match shared.config.io {
            // `bind` settled `auto` into one of the others.
            Io::Epoll | Io::Auto => None,
            Io::Uring => Some(
                ring::Rings::start(shared.config.threads, &shared).map_err(ServerError::Uring)?,
            ),
        };
        let (stop_sender, stop) = watch::channel(false);
        let metrics = metrics.map(|endpoint| endpoint.serve(Arc::clone(&shared), stop.clone()));
        let permits = Arc::new(Semaphore::new(shared.config.max_connections));
        let mut connections = JoinSet::new();
        let mut accept_warned: Option<std::time::Instant> = None;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(Accepted::Tcp(stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        let peer = conns::tcp_name(&peer);
                        accept(stream, peer, &shared, &permits, &stop, rings.as_ref(), &mut connections);
                    }
                    Ok(Accepted::Unix(stream)) => {
                        let peer = unix_peer.clone();
                        accept(stream, peer, &shared, &permits, &stop, rings.as_ref(), &mut connections);
                    }
                    Err(error) if out_of_resources(&error) => {
                        let quiet = accept_warned
                            .is_some_and(|at| at.elapsed() < limits::ACCEPT_WARNING_INTERVAL);
                        if !quiet {
                            accept_warned = Some(std::time::Instant::now());
                            tracing::warn!(
                                %error,
                                "cannot accept a connection; retrying every {} ms \
                                 or when a connection closes (raise the open files \
                                 limit, ulimit -n, above -c)",
                                limits::ACCEPT_PAUSE.as_millis()
                            );
                        }
                        tokio::select! {
                            () = &mut shutdown => break,
                            () = tokio::time::sleep(limits::ACCEPT_PAUSE) => {}
                            Some(_) = connections.join_next(), if !connections.is_empty() => {}
                        }
                    }
                    // The client gave up before it was accepted, or the
                    // like: nothing to wait for.
                    Err(_) => {}
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        let _ = stop_sender.send(true);
        if let Some(metrics) = metrics {
            let _ = metrics.await;
        }
        if let Some(rings) = &rings {
            rings.stop();
        }
        let drain = async { while connections.join_next().await.is_some() {} };
        let mut report = Shutdown::default();
        if tokio::time::timeout(limits::SHUTDOWN_GRACE, drain)
            .await
            .is_err()
        {
            connections.abort_all();
            // A task in the middle of a poll on another worker finishes
            // that poll first; the engine is synced after the last one.
            // One that ended on its own just before the abort is not cut.
            while let Some(ended) = connections.join_next().await {
                if ended.is_err_and(|error| error.is_cancelled()) {
                    report.connections_cut += 1;
                }
            }
            tracing::warn!(
                connections = report.connections_cut,
                "connections still busy after the grace period were closed"
            );
        }
        if let Some(rings) = rings {
            // Closes what the grace period left, and waits for the threads.
            tokio::task::spawn_blocking(move || rings.cut_and_join())
                .await
                .map_err(|e| ServerError::Runtime(std::io::Error::other(e)))?;
        }
        let engine = Arc::clone(&shared.engine);
        drop(shared);
        tokio::task::spawn_blocking(move || engine.sync())
            .await
            .map_err(|e| ServerError::Runtime(std::io::Error::other(e)))??;
        Ok(report)
    }

    /// How `stats conns` names where the server listens.
    fn listen_name(&self) -> String {
        match self.address() {
            Address::Tcp(addr) => conns::tcp_name(&addr),
            Address::Unix(path) => conns::unix_name(&path),
        }
    }

    /// The engine, for in-process tests and tools.
    pub fn engine(&self) -> Arc<larder_engine::Engine> {
        Arc::clone(&self.shared.engine)
    }
}

/// File descriptors the server needs besides one per connection at the
/// least: the listener, the log's directory, standard streams, and a few
/// segment and hint files (each segment file stays open).
const FILES_BESIDES_CONNECTIONS: u64 = 64;

/// Raises the soft limit on open files to the hard limit, so that
/// connections and segment files (one each, and a store grows by one per
/// segment, 32 MiB by default) do not run out of descriptors first; warns if the hard
/// limit is below `max_connections` plus [`FILES_BESIDES_CONNECTIONS`].
fn make_room_for_connections(max_connections: usize) {
    let wanted = (max_connections as u64).saturating_add(FILES_BESIDES_CONNECTIONS);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the one rlimit passed,
    // which is valid for both.
    let open_files = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        let before = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        if before >= limit.rlim_max || libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
            limit.rlim_cur
        } else {
            before
        }
    };
    if open_files < wanted {
        tracing::warn!(
            open_files,
            max_connections,
            "the open files limit is below -c plus {FILES_BESIDES_CONNECTIONS}: connections \
             past it wait to be accepted until others close (raise ulimit -n)"
        );
    }
}

/// Whether a failed accept ran out of something the process or the
/// machine must first get back (file descriptors, memory), rather than
/// failed for the one connection.
fn out_of_resources(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Opens the listening socket with a backlog deep enough for a burst of
/// thousands of connections (the kernel caps it at `net.core.somaxconn`).
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(limits::LISTEN_BACKLOG)
}

fn accept<S: Socket>(
    stream: S,
    peer: String,
    shared: &Arc<Shared>,
    permits: &Arc<Semaphore>,
    stop: &watch::Receiver<bool>,
    rings: Option<&ring::Rings>,
    connections: &mut JoinSet<()>,
) {
    let stats = &shared.stats;
    let Ok(permit) = Arc::clone(permits).try_acquire_owned() else {
        stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
        connections.spawn(async move {
            use tokio::io::AsyncWriteExt;
            let mut stream = stream;
            let _ = stream
                .write_all(b"ERROR Too many open connections\r\n")
                .await;
        });
        return;
    };
    stats.total_connections.fetch_add(1, Ordering::Relaxed);
    let open = Open::new(Arc::clone(shared), permit, stream.as_raw_fd(), peer);
    if let Some(rings) = rings {
        let fd = match stream.into_fd() {
            Ok(fd) => fd,
            // The connection is dropped, and `open` with it.
            Err(error) => {
                tracing::warn!(%error, "cannot take an accepted connection off the runtime");
                return;
            }
        };
        let (closed, waiting) = tokio::sync::oneshot::channel();
        rings.hand(ring::Arrival { fd, open, closed });
        // Ends when the ring thread drops the connection, so that the
        // shutdown drains and cuts ring connections as it does tasks.
        connections.spawn(async move {
            let _ = waiting.await;
        });
        return;
    }
    let stop = stop.clone();
    connections.spawn(async move {
        connection::serve(stream, &open, stop).await;
        drop(open);
    });
}

/// What an open connection holds: given back when its task ends, however
/// it ends (closed, or aborted at shutdown), or when its ring thread drops
/// it.
pub(crate) struct Open {
    shared: Arc<Shared>,
    /// What `stats conns` shows of it.
    info: Arc<conns::ConnInfo>,
    _permit: OwnedSemaphorePermit,
}

impl Open {
    /// Counts a connection on descriptor `fd` from `peer` (see
    /// [`conns::tcp_name`]) open (`curr_connections`), and lists it in
    /// `stats conns`, until this is dropped.
    fn new(shared: Arc<Shared>, permit: OwnedSemaphorePermit, fd: RawFd, peer: String) -> Open {
        shared
            .stats
            .curr_connections
            .fetch_add(1, Ordering::Relaxed);
        let now = shared.engine.clock().now();
        let info = shared.stats.conns.add(fd, peer, now);
        Open {
            shared,
            info,
            _permit: permit,
        }
    }

    /// A new exchange of requests and replies for this connection.
    pub(crate) fn exchange(&self) -> connection::Exchange {
        connection::Exchange::new(Arc::clone(&self.shared), Arc::clone(&self.info))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.shared.stats.conns.remove(&self.info);
        self.shared
            .stats
            .curr_connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Ready connections a worker takes from one poll for I/O events: at most
/// as many as its own task queue holds, which is empty when it polls this
/// way (idle, about to wait).
const IO_EVENTS_PER_POLL_MAX: usize = 256;

/// Ready connections a worker that still has tasks to run takes from one
/// poll.
const IO_EVENTS_PER_BUSY_POLL_MAX: usize = 64;

/// Runs a server with `config` on a new runtime until SIGTERM or SIGINT.
/// `on_ready` is called with the bound address once it accepts connections.
pub fn run(config: ServerConfig, on_ready: impl FnOnce(Address)) -> Result<Shutdown, ServerError> {
    serve_until(config, on_ready, termination())
}

/// Runs a server with `config` on a new runtime until `shutdown` resolves.
/// `on_ready` is called with the bound address once it accepts connections.
///
/// Each of the runtime's workers reports to the engine whenever it finds
/// no task to run and is about to park (before it polls for I/O), so that
/// under `always` a group commit waits, while the workers stay busy, for
/// the committers they may be about to bring (see
/// [`larder_engine::IdleSignal`]; at most as long as the previous sync
/// round took, and 2 ms).
///
/// A worker's poll for I/O events puts every connection it finds ready on
/// that worker's own queue, which holds 256 tasks; past that the older half
/// spills into the runtime's shared queue, where they wait longest. So a
/// poll takes at most [`IO_EVENTS_PER_POLL_MAX`] events (tokio's default is
/// 1024), and a poll that does not wait (a worker that still has tasks to
/// run, or one whose timer is already due) at most
/// [`IO_EVENTS_PER_BUSY_POLL_MAX`]. The rest stay ready in the kernel for
/// the next poll, by either worker, so the connections already found are
/// served first (benchmarks/HISTORY.md, "Fewer ready connections per poll").
pub fn serve_until(
    config: ServerConfig,
    on_ready: impl FnOnce(Address),
    shutdown: impl Future<Output = ()>,
) -> Result<Shutdown, ServerError> {
    let mut config = config;
    settle_io(&mut config)?;
    let idle = Arc::new(larder_engine::IdleSignal::default());
    // With rings, the runtime only accepts connections and waits for them
    // to close: the ring threads serve them.
    let runtime_threads = match config.io {
        Io::Epoll | Io::Auto => config.threads,
        Io::Uring => 1,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(runtime_threads)
        .thread_name("larder-worker")
        .max_io_events_per_tick(IO_EVENTS_PER_POLL_MAX)
        .max_io_events_per_busy_tick(IO_EVENTS_PER_BUSY_POLL_MAX)
        .on_thread_park({
            let idle = Arc::clone(&idle);
            move || idle.report()
        })
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    runtime.block_on(async move {
        let server = Server::bind(config).await?;
        let attached = server.engine().attach_idle_signal(idle);
        assert!(attached, "a new engine has no idle signal yet");
        on_ready(server.address());
        server.run_until(shutdown).await
    })
}

/// Settles how `config` serves its connections: `auto` becomes `uring`
/// where this kernel lets the server set up its rings and `epoll` where it
/// does not, and then returns why the rings were refused; `uring` asked for
/// outright must be available.
pub fn settle_io(config: &mut ServerConfig) -> Result<Option<std::io::Error>, ServerError> {
    match config.io {
        Io::Epoll => Ok(None),
        Io::Uring => ring::available(config.max_connections)
            .map(|()| None)
            .map_err(ServerError::Uring),
        Io::Auto => match ring::available(config.max_connections) {
            Ok(()) => {
                config.io = Io::Uring;
                Ok(None)
            }
            Err(refused) => {
                tracing::info!(%refused, "io_uring refused: connections served on epoll");
                config.io = Io::Epoll;
                Ok(Some(refused))
            }
        },
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn termination() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
