//! The open connections, as `stats conns` lists them: memcached's lines
//! for each (its descriptor, the client's address, the listener's, what it
//! is doing, and the seconds since its last command), the listening
//! socket's first.
//!
//! A connection registers itself when accepted and leaves when dropped
//! (see [`crate::Open`]); while it lives, its own thread updates its
//! [`ConnInfo`] with relaxed atomic stores, on a cache line no other
//! connection writes. Its socket closes just before it leaves, so for that
//! moment a new connection given the same descriptor may be listed beside
//! it.

use bytes::BytesMut;
use larder_protocol::reply;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// What a connection is doing, by memcached's names for its states where
/// they mean the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Waiting for a request, or for the rest of a request line.
    Read = 0,
    /// Waiting for the rest of a value whose command line has come.
    ReadValue = 1,
    /// Discarding the rest of a value it refused.
    Swallow = 2,
    /// Parsing and handling requests.
    ParseCmd = 3,
    /// Waiting for its writes to be synced before replying (Larder's own:
    /// memcached never waits for a disk).
    Sync = 4,
    /// Replies waiting for room in the client's socket.
    Write = 5,
}

impl State {
    fn name(self) -> &'static [u8] {
        match self {
            State::Read => b"conn_read",
            State::ReadValue => b"conn_nread",
            State::Swallow => b"conn_swallow",
            State::ParseCmd => b"conn_parse_cmd",
            State::Sync => b"conn_sync",
            State::Write => b"conn_mwrite",
        }
    }

    fn from_u8(value: u8) -> State {
        match value {
            1 => State::ReadValue,
            2 => State::Swallow,
            3 => State::ParseCmd,
            4 => State::Sync,
            5 => State::Write,
            _ => State::Read,
        }
    }
}

/// How `stats conns` names an address: memcached's `tcp:` or `tcp6:` and
/// the address, or `unix:` and the socket's path.
pub(crate) fn tcp_name(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(addr) => format!("tcp:{addr}"),
        SocketAddr::V6(addr) => format!("tcp6:{addr}"),
    }
}

/// See [`tcp_name`]. A control character in the path (a line break would
/// end the stat's line) shows as `?`.
pub(crate) fn unix_name(path: &Path) -> String {
    let path = path.display().to_string().replace(char::is_control, "?");
    format!("unix:{path}")
}

/// One open connection, as `stats conns` shows it. A cache line of its own,
/// which only its connection's thread writes.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct ConnInfo {
    fd: RawFd,
    /// The client's address (see [`tcp_name`]).
    peer: String,
    state: AtomicU8,
    /// Unix seconds of the connection's last command (of its accept,
    /// before its first).
    last_command: AtomicU32,
    /// Which entry of [`Connections::open`] this is.
    serial: u64,
}

impl ConnInfo {
    pub(crate) fn set(&self, state: State) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    pub(crate) fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Notes that a command was handled at `now` (unix seconds).
    pub(crate) fn commanded(&self, now: u32) {
        if self.last_command.load(Ordering::Relaxed) != now {
            self.last_command.store(now, Ordering::Relaxed);
        }
    }
}

/// The listening socket, as `stats conns` shows it.
#[derive(Debug)]
struct Listening {
    fd: RawFd,
    name: String,
    /// Unix seconds of the last accept (of the start, before the first).
    last_accept: AtomicU32,
}

/// The open connections and the listening socket.
#[derive(Debug, Default)]
pub struct Connections {
    open: Mutex<BTreeMap<u64, Arc<ConnInfo>>>,
    serials: AtomicU64,
    listening: OnceLock<Listening>,
}

impl Connections {
    /// Names the listening socket, once it listens.
    pub(crate) fn listening(&self, fd: RawFd, name: String, now: u32) {
        let listening = Listening {
            fd,
            name,
            last_accept: AtomicU32::new(now),
        };
        let _ = self.listening.set(listening);
    }

    /// Registers a connection just accepted at `now` on descriptor `fd`
    /// from `peer`; it stays listed until [`Connections::remove`].
    pub(crate) fn add(&self, fd: RawFd, peer: String, now: u32) -> Arc<ConnInfo> {
        if let Some(listening) = self.listening.get() {
            listening.last_accept.fetch_max(now, Ordering::Relaxed);
        }
        let info = Arc::new(ConnInfo {
            fd,
            peer,
            state: AtomicU8::new(State::Read as u8),
            last_command: AtomicU32::new(now),
            serial: self.serials.fetch_add(1, Ordering::Relaxed),
        });
        self.open.lock().insert(info.serial, Arc::clone(&info));
        info
    }

    pub(crate) fn remove(&self, info: &ConnInfo) {
        self.open.lock().remove(&info.serial);
    }

    /// `stats conns`, at `now` (unix seconds): the listening socket, then
    /// every open connection, in the order of their descriptors.
    pub(crate) fn write(&self, now: u32, out: &mut BytesMut) {
        let mut open: Vec<Arc<ConnInfo>> = self.open.lock().values().cloned().collect();
        open.sort_by_key(|info| (info.fd, info.serial));
        let mut stat = |fd: RawFd, field: &str, value: &[u8]| {
            reply::write_stat(out, format!("{fd}:{field}").as_bytes(), value);
        };
        let since = |then: &AtomicU32| now.saturating_sub(then.load(Ordering::Relaxed)).to_string();
        let listening = self.listening.get();
        if let Some(listening) = listening {
            let fd = listening.fd;
            stat(fd, "addr", listening.name.as_bytes());
            stat(fd, "state", b"conn_listening");
            stat(
                fd,
                "secs_since_last_cmd",
                since(&listening.last_accept).as_bytes(),
            );
        }
        for info in open {
            let fd = info.fd;
            stat(fd, "addr", info.peer.as_bytes());
            if let Some(listening) = listening {
                stat(fd, "listen_addr", listening.name.as_bytes());
            }
            stat(fd, "state", info.state().name());
            stat(
                fd,
                "secs_since_last_cmd",
                since(&info.last_command).as_bytes(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(connections: &Connections, now: u32) -> Vec<String> {
        let mut out = BytesMut::new();
        connections.write(now, &mut out);
        String::from_utf8(out.to_vec())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn connections_are_listed_after_the_listener_by_descriptor_until_removed() {
        let connections = Connections::default();
        connections.listening(7, "tcp:127.0.0.1:11211".to_owned(), 1_000);
        let late = connections.add(12, "tcp:127.0.0.1:40002".to_owned(), 1_005);
        let early = connections.add(9, "tcp:127.0.0.1:40001".to_owned(), 1_003);
        early.set(State::Write);
        late.commanded(1_008);
        assert_eq!(
            lines(&connections, 1_010),
            [
                "STAT 7:addr tcp:127.0.0.1:11211",
                "STAT 7:state conn_listening",
                "STAT 7:secs_since_last_cmd 5",
                "STAT 9:addr tcp:127.0.0.1:40001",
                "STAT 9:listen_addr tcp:127.0.0.1:11211",
                "STAT 9:state conn_mwrite",
                "STAT 9:secs_since_last_cmd 7",
                "STAT 12:addr tcp:127.0.0.1:40002",
                "STAT 12:listen_addr tcp:127.0.0.1:11211",
                "STAT 12:state conn_read",
                "STAT 12:secs_since_last_cmd 2",
            ]
        );
        connections.remove(&early);
        let listed = lines(&connections, 1_010);
        assert_eq!(listed.len(), 7, "{listed:?}");
        assert!(listed.iter().all(|line| !line.starts_with("STAT 9:")));
    }

    #[test]
    fn every_state_reads_back_as_set_and_has_a_memcached_style_name() {
        for state in [
            State::Read,
            State::ReadValue,
            State::Swallow,
            State::ParseCmd,
            State::Sync,
            State::Write,
        ] {
            assert_eq!(State::from_u8(state as u8), state);
            assert!(state.name().starts_with(b"conn_"));
        }
    }

    #[test]
    fn addresses_are_named_as_memcached_names_them() {
        let v4: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let v6: SocketAddr = "[::1]:5000".parse().unwrap();
        assert_eq!(tcp_name(&v4), "tcp:127.0.0.1:5000");
        assert_eq!(tcp_name(&v6), "tcp6:[::1]:5000");
        assert_eq!(unix_name(Path::new("/run/l.sock")), "unix:/run/l.sock");
        assert_eq!(unix_name(Path::new("/tmp/a\r\nb")), "unix:/tmp/a??b");
    }
}
