//! The Unix domain socket a server may listen on instead of TCP
//! (`--unix-socket PATH`), and the lock file beside it.
//!
//! A start on `PATH` takes, in order: the lock `PATH.lock` (an exclusive
//! `flock`, taken before the data directory is opened, and held until the
//! server stops accepting connections), a look at what is at `PATH` (a
//! socket file no server answers on is removed; a socket a live server
//! answers on, or anything that is not a socket, stops the start), the
//! bind, the file's mode, and `listen`. The lock makes the look and the
//! bind one step among Larder servers: without it, two servers starting
//! on one path at the same moment could each find the other's file bound
//! but not yet listening, take it for a stale one and remove it, leaving
//! one of them serving a file nobody can reach. (memcached takes no lock,
//! and removes any socket file at its path; it and other programs ignore
//! this lock, and only the look at `PATH` keeps Larder off their sockets.)
//! A lock file left by a killed server is not locked, and the next start
//! takes it; a file at `PATH.lock` that Larder could not have left (not an
//! empty regular file, or a symbolic link) stops the start and is left
//! alone. A new lock file gets the socket's permission bits without the
//! execute ones: whoever may connect may also read it, which is all
//! `flock` needs, so a server of another such user can take one left
//! behind, and nobody else can hold it to stop a start.
//!
//! When the server stops accepting, its socket file and then its lock file
//! are removed, each only while the path still names the file this server
//! made, and the lock is let go last.
//!
//! Called from [`Server::bind`](crate::Server::bind) on a runtime thread:
//! the file calls (open, `flock` without waiting, stat, unlink) are short
//! and never wait on another process.

use crate::limits;
use larder_engine::fs::try_lock_exclusive;
use std::fs::File;
use std::io::{Error, ErrorKind};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use tokio::net::{UnixListener, UnixStream};

/// A listening Unix domain socket, its file and its lock.
pub(crate) struct UnixSocketFile {
    // Field order is drop order, which matters: the socket closes, its
    // file goes, and only then is the lock let go.
    pub(crate) listener: UnixListener,
    file: OwnedPath,
    _lock: SocketLockFile,
}

impl UnixSocketFile {
    /// The path the socket was bound to.
    pub(crate) fn path(&self) -> &Path {
        &self.file.path
    }
}

/// A file this server made (the socket's, or its lock file), removed when
/// this is dropped if the path still names it: a file someone else has put
/// there since is theirs.
struct OwnedPath {
    path: PathBuf,
    /// Device and inode of the file.
    identity: (u64, u64),
}

impl Drop for OwnedPath {
    fn drop(&mut self) {
        if identity_of(&self.path).is_ok_and(|found| found == self.identity) {
            let _ = std::fs::remove_file(&self.path);
        }
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
pub(crate) struct SocketLockFile {
    // Field order is drop order: the file is removed while still locked.
    _owned: OwnedPath,
    /// Closing it lets the lock go.
    _file: File,
}

impl SocketLockFile {
    /// Opens (or creates, with the socket's permission bits `mode` without
    /// execute) and locks the lock file of the socket at `socket_path`,
    /// without waiting: a lock another process holds fails the start, as
    /// does a file there that is not a lock file.
    pub(crate) fn take(socket_path: &Path, mode: u32) -> std::io::Result<SocketLockFile> {
        Self::take_with(socket_path, mode, |_| {})
    }

    /// [`SocketLockFile::take`], calling `between_open_and_lock` with the
    /// lock file's path after each open and before its `flock` (tests use
    /// it to remove or replace the file there, as a stopping server may).
    fn take_with(
        socket_path: &Path,
        mode: u32,
        mut between_open_and_lock: impl FnMut(&Path),
    ) -> std::io::Result<SocketLockFile> {
        let mut path = socket_path.as_os_str().to_owned();
        path.push(limits::UNIX_SOCKET_LOCK_FILE_SUFFIX);
        let path = PathBuf::from(path);
        let said = |what: &str, error: Error| lock_file_error(what, &path, error);
        for _ in 0..limits::UNIX_SOCKET_LOCK_ATTEMPTS_MAX {
            let Some(file) = open_or_create(&path, mode & 0o666)? else {
                continue;
            };
            between_open_and_lock(&path);
            if let Err(error) = try_lock_exclusive(&file) {
                if error.kind() == ErrorKind::WouldBlock {
                    return Err(Error::new(
                        ErrorKind::AddrInUse,
                        format!(
                            "the lock file {} is held by another process (a Larder \
                             starting, serving or stopping on this path)",
                            path.display()
                        ),
                    ));
                }
                return Err(said("cannot lock", error));
            }
            let held = file
                .metadata()
                .map_err(|error| said("cannot read", error))?;
            let identity = (held.dev(), held.ino());
            // A server stopping removes its lock file while it holds it; a
            // file opened just before that is locked only once nobody else
            // can find it, so the path is opened again.
            match identity_of(&path) {
                Ok(found) if found == identity => {
                    return Ok(SocketLockFile {
                        _owned: OwnedPath { path, identity },
                        _file: file,
                    })
                }
                Ok(_) => {}
                Err(error) if error.kind() == ErrorKind::NotFound => {}
                Err(error) => return Err(said("cannot read", error)),
            }
        }
        Err(said(
            "cannot lock",
            Error::other(format!(
                "it was removed or replaced on each of {} attempts",
                limits::UNIX_SOCKET_LOCK_ATTEMPTS_MAX
            )),
        ))
    }
}

/// `error` from doing `what` ("cannot lock") to the lock file at `path`,
/// naming both.
fn lock_file_error(what: &str, path: &Path, error: Error) -> Error {
    Error::new(
        error.kind(),
        format!("{what} lock file {}: {error}", path.display()),
    )
}

/// Opens the lock file at `path` for reading (`flock` needs no more, so a
/// file another user's server left can be taken), or creates it with
/// permission bits `mode` (whatever the umask) if there is none; `None` if
/// another process created it in between, to be opened again. A link is
/// not followed, nor is anything but an empty regular file taken.
fn open_or_create(path: &Path, mode: u32) -> std::io::Result<Option<File>> {
    use std::os::unix::fs::PermissionsExt;
    let refused = |why: &str| {
        Error::new(
            ErrorKind::AlreadyExists,
            format!("{} {why} (left as it is)", path.display()),
        )
    };
    let opened = std::fs::OpenOptions::new()
        .read(true)
        // O_NONBLOCK: opening a FIFO there must not wait for a writer.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(error) if error.kind() == ErrorKind::NotFound => {
            let cannot_create = |error| lock_file_error("cannot create", path, error);
            return match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
            {
                Ok(file) => {
                    file.set_permissions(std::fs::Permissions::from_mode(mode))
                        .map_err(cannot_create)?;
                    Ok(Some(file))
                }
                Err(error) if error.kind() == ErrorKind::AlreadyExists => Ok(None),
                Err(error) => Err(cannot_create(error)),
            };
        }
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refused("is a symbolic link, not a lock file"))
        }
        Err(error) => return Err(lock_file_error("cannot open", path, error)),
    };
    let metadata = file
        .metadata()
        .map_err(|error| lock_file_error("cannot read", path, error))?;
    if !metadata.is_file() || metadata.len() > 0 {
        return Err(refused("is not an empty regular file, so not a lock file"));
    }
    Ok(Some(file))
}

/// Opens a Unix domain socket at `path` whose file has permission bits
/// `mode`, with the same backlog as TCP's, under `lock`, the path's lock
/// (see the module's documentation). A socket file left at `path` by a
/// server that has gone is replaced, as memcached replaces any socket file
/// there; unlike memcached, anything else there is left alone and the
/// start fails: a socket that a live server answers on, or a file that is
/// not a socket. If the start fails, the files it made are removed.
pub(crate) async fn listen_unix(
    path: &Path,
    mode: u32,
    lock: SocketLockFile,
) -> std::io::Result<UnixSocketFile> {
    use std::os::unix::fs::PermissionsExt;
    clear_stale_socket(path).await?;
    let socket = tokio::net::UnixSocket::new_stream()?;
    socket.bind(path)?;
    let identity = match identity_of(path) {
        Ok(identity) => identity,
        Err(error) => {
            // Bound just now under the lock, so the file is this server's.
            let _ = std::fs::remove_file(path);
            return Err(error);
        }
    };
    // If the start fails from here on, dropping this removes the file.
    let file = OwnedPath {
        path: path.to_owned(),
        identity,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_lock_file_removed_before_it_is_locked_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("larder.sock");
        let mut removed = false;
        // As a server that is stopping removes the file this start opened.
        let lock = SocketLockFile::take_with(&socket, 0o700, |path| {
            if !removed {
                std::fs::remove_file(path).unwrap();
                removed = true;
            }
        })
        .unwrap();
        assert!(removed);
        assert_eq!(
            identity_of(&lock._owned.path).unwrap(),
            lock._owned.identity
        );
        drop(lock);
        assert!(!dir.path().join("larder.sock.lock").exists());
    }

    #[test]
    fn a_lock_file_replaced_at_every_attempt_fails_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("larder.sock");
        let mut attempts = 0;
        let error = SocketLockFile::take_with(&socket, 0o700, |path| {
            attempts += 1;
            std::fs::remove_file(path).unwrap();
            std::fs::write(path, b"").unwrap();
        })
        .err()
        .unwrap();
        assert_eq!(attempts, limits::UNIX_SOCKET_LOCK_ATTEMPTS_MAX);
        assert!(error.to_string().contains("removed or replaced"), "{error}");
        assert!(
            dir.path().join("larder.sock.lock").exists(),
            "a file this start did not lock is left"
        );
    }
}
