//! A connection's socket: TCP, or a Unix domain socket when the target is
//! a path (`/run/memcached.sock`, or `unix:` before any path), as memcached
//! and Redis both serve with `-s` / `unixsocket`.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `host:port`, resolved when connecting.
    Tcp(String),
    /// The path of a Unix domain socket.
    Unix(PathBuf),
}

impl Target {
    /// Reads a target as given on the command line: a path if it starts
    /// with `/` or `unix:`, `host:port` otherwise.
    pub fn parse(text: &str) -> Target {
        match text.strip_prefix("unix:") {
            Some(path) => Target::Unix(PathBuf::from(path)),
            None if text.starts_with('/') => Target::Unix(PathBuf::from(text)),
            None => Target::Tcp(text.to_owned()),
        }
    }
}

/// An open connection's socket.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Splits the socket into halves that a reader and a writer own.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Tcp(stream) => {
                let (read, write) = stream.into_split();
                (ReadHalf::Tcp(read), WriteHalf::Tcp(write))
            }
            Stream::Unix(stream) => {
                let (read, write) = stream.into_split();
                (ReadHalf::Unix(read), WriteHalf::Unix(write))
            }
        }
    }
}

/// The half of a connection that replies are read from.
pub enum ReadHalf {
    Tcp(tcp::OwnedReadHalf),
    Unix(unix::OwnedReadHalf),
}

/// The half of a connection that requests are written to.
pub enum WriteHalf {
    Tcp(tcp::OwnedWriteHalf),
    Unix(unix::OwnedWriteHalf),
}

impl WriteHalf {
    /// Writes what the socket takes at once, without waiting: `WouldBlock`
    /// when it takes nothing now.
    pub fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            WriteHalf::Tcp(half) => half.try_write(bytes),
            WriteHalf::Unix(half) => half.try_write(bytes),
        }
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(half) => Pin::new(half).poll_read(cx, buf),
            ReadHalf::Unix(half) => Pin::new(half).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(half) => Pin::new(half).poll_write(cx, buf),
            WriteHalf::Unix(half) => Pin::new(half).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(half) => Pin::new(half).poll_flush(cx),
            WriteHalf::Unix(half) => Pin::new(half).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(half) => Pin::new(half).poll_shutdown(cx),
            WriteHalf::Unix(half) => Pin::new(half).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_unix_sockets_and_the_rest_host_and_port() {
        assert_eq!(
            Target::parse("/run/memcached.sock"),
            Target::Unix(PathBuf::from("/run/memcached.sock"))
        );
        assert_eq!(
            Target::parse("unix:relative.sock"),
            Target::Unix(PathBuf::from("relative.sock"))
        );
        assert_eq!(
            Target::parse("127.0.0.1:11211"),
            Target::Tcp("127.0.0.1:11211".to_owned())
        );
        assert_eq!(
            Target::parse("localhost:6379"),
            Target::Tcp("localhost:6379".to_owned())
        );
    }
}
