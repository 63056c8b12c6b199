//! The Unix domain socket a server may listen on instead of TCP
//! (`--unix-socket PATH`), and the lock file beside it.
//!
//! A start on `PATH` takes, in order: the lock `PATH.lock` (an exclusive
//! `flock`, held for the server's life), a look at what is at `PATH` (a
//! socket file no server answers on is removed; a socket a live server
//! answers on, or anything that is not a socket, stops the start), the
//! bind, the file's mode, and `listen`. The lock makes the look and the
//! bind one step among Larder servers: without it, two servers starting
//! on one path at the same moment could each find the other's file bound
//! but not yet listening, take it for a stale one and remove it, leaving
//! one of them serving a file nobody can reach. (memcached takes no lock,
//! and removes any socket file at its path.) A lock file left by a killed
//! server is not locked, and the next start takes it.
//!
//! When the server stops, its socket file and then its lock file are
//! removed, each only while the path still names the file this server
//! made, and the lock is let go last.

use crate::limits;
use std::fs::File;
use std::io::{Error, ErrorKind};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use tokio::net::{UnixListener, UnixStream};

/// A listening Unix domain socket, its file and its lock. Dropped in this
/// order: the socket closes, its file goes, then the lock file.
pub(crate) struct UnixSocketFile {
    pub(crate) listener: UnixListener,
    file: BoundPath,
    _lock: PathLock,
}

impl UnixSocketFile {
    /// The path the socket was bound to.
    pub(crate) fn path(&self) -> &Path {
        &self.file.path
    }
}

/// The file a Unix domain socket was bound to, removed when this is
/// dropped unless something else has taken the path since.
struct BoundPath {
    path: PathBuf,
    /// Device and inode of the socket's file.
    identity: (u64, u64),
}

impl Drop for BoundPath {
    fn drop(&mut self) {
        remove_if_same(&self.path, self.identity);
    }
}

/// Removes the file at `path` if it is still the one with `identity`
/// (device, inode): a file someone else has put there since is theirs.
fn remove_if_same(path: &Path, identity: (u64, u64)) {
    if identity_of(path).is_ok_and(|found| found == identity) {
        let _ = std::fs::remove_file(path);
    }
}

/// Device and inode of the file at `path`, not following a link.
fn identity_of(path: &Path) -> std::io::Result<(u64, u64)> {
    std::fs::symlink_metadata(path).map(|metadata| (metadata.dev(), metadata.ino()))
}

/// `PATH.lock`, locked (`flock`, exclusive) from before anything at the
/// socket's path is looked at until the server has removed its socket
/// file; removed when dropped, while still locked, if the path still names
/// it.
struct PathLock {
    path: PathBuf,
    identity: (u64, u64),
    /// Closing it lets the lock go; it is dropped after `drop` has run.
    _file: File,
}

impl PathLock {
    /// Creates (or opens) and locks the lock file of `socket_path`, without
    /// waiting: another server holding it fails the start.
    fn take(socket_path: &Path) -> std::io::Result<PathLock> {
        let mut path = socket_path.as_os_str().to_owned();
        path.push(".lock");
        let path = PathBuf::from(path);
        let named = |error: Error| {
            Error::new(
                error.kind(),
                format!("lock file {}: {error}", path.display()),
            )
        };
        for _ in 0..limits::UNIX_SOCKET_LOCK_ATTEMPTS_MAX {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(named)?;
            // SAFETY: flock takes a valid open descriptor, owned by `file`,
            // which outlives the call.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let error = Error::last_os_error();
                if error.kind() == ErrorKind::WouldBlock {
                    return Err(Error::new(
                        ErrorKind::AddrInUse,
                        format!(
                            "another server holds its lock file {} (it is starting, \
                             or serving on this path)",
                            path.display()
                        ),
                    ));
                }
                return Err(named(error));
            }
            let held = file.metadata().map_err(named)?;
            let identity = (held.dev(), held.ino());
            // A server stopping removes its lock file while it holds it; one
            // opened just before that is locked only once nobody else can
            // find it, so it is opened again.
            match identity_of(&path) {
                Ok(found) if found == identity => {
                    return Ok(PathLock {
                        path,
                        identity,
                        _file: file,
                    })
                }
                Ok(_) => {}
                Err(error) if error.kind() == ErrorKind::NotFound => {}
                Err(error) => return Err(named(error)),
            }
        }
        Err(named(Error::other(
            "it was replaced on every attempt to lock it",
        )))
    }
}

impl Drop for PathLock {
    fn drop(&mut self) {
        remove_if_same(&self.path, self.identity);
    }
}

/// Opens a Unix domain socket at `path` whose file has permission bits
/// `mode`, with the same backlog as TCP's, holding `PATH.lock` (see the
/// module's documentation). A socket file left at `path` by a server that
/// has gone is replaced, as memcached replaces any socket file there;
/// unlike memcached, anything else there is left alone and the start
/// fails: a socket that a live server answers on, or a file that is not a
/// socket.
pub(crate) async fn listen_unix(path: &Path, mode: u32) -> std::io::Result<UnixSocketFile> {
    use std::os::unix::fs::PermissionsExt;
    // If the start fails from here on, dropping these removes the files.
    let lock = PathLock::take(path)?;
    clear_stale_socket(path).await?;
    let socket = tokio::net::UnixSocket::new_stream()?;
    socket.bind(path)?;
    let file = BoundPath {
        path: path.to_owned(),
        identity: identity_of(path)?,
    };
    // Before `listen`: until then every connect is refused, so no client
    // gets in under the permissions the umask gave the file.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    let listener = socket.listen(limits::LISTEN_BACKLOG)?;
    Ok(UnixSocketFile {
        listener,
        file,
        _lock: lock,
    })
}

/// Removes a socket file at `path` that no server answers on; fails,
/// removing nothing, if a server answers on it or the path is something
/// other than a socket.
async fn clear_stale_socket(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
        Ok(metadata) if !metadata.file_type().is_socket() => {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                "the path exists and is not a socket (left as it is)",
            ))
        }
        Ok(_) => {}
    }
    // tokio connects without waiting: a live server accepts (or, with its
    // backlog full, the connect fails with `WouldBlock`), and only a file
    // that no socket listens on refuses.
    match UnixStream::connect(path).await {
        Err(error) if error.kind() == ErrorKind::ConnectionRefused => std::fs::remove_file(path),
        Err(error) if error.kind() != ErrorKind::WouldBlock => Err(error),
        _ => Err(Error::new(
            ErrorKind::AddrInUse,
            "a server is listening on it already",
        )),
    }
}
