//! The file system seen by the engine.
//!
//! Every byte the engine reads or writes goes through [`Fs`] and [`FsFile`], so
//! tests can swap the real file system ([`OsFs`]) for one that lives in memory
//! and can lose whatever was not yet synced, tear a write, or fail with
//! `ENOSPC`/`EIO` on demand ([`MemFs`]).
//!
//! Both traits are object safe and `Send + Sync`: one `Arc<dyn Fs>` is shared by
//! the writer, the flusher, the compactor and every reader thread. Paths are
//! always absolute or relative to the process's working directory; the engine
//! only ever names files inside its data directory.
//!
//! A write that returned is in the operating system's hands: it survives the
//! process being killed (`kill -9`), whether it went through `pwrite` or a
//! shared mapping of the file ([`FsFile::allocate`]).
//!
//! What "durable" means here: data written with [`FsFile::write_all_at`] is only
//! guaranteed to survive a power cut after [`FsFile::sync_data`] returns `Ok`;
//! a file's creation, removal or rename only after [`Fs::sync_dir`] on its
//! directory returns `Ok`. A failed sync leaves the file in an unknown state;
//! callers must not retry it as if nothing happened.

mod mem;
mod os;

pub use mem::{FaultKind, MemFs};
pub use os::OsFs;

use std::any::Any;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file opened through an [`Fs`]. Positional reads and writes only: the
/// engine tracks offsets itself, so no cursor is shared between threads.
#[expect(
    clippy::len_without_is_empty,
    reason = "a file's length is an I/O query, not a collection size"
)]
pub trait FsFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset`; `UnexpectedEof` if the
    /// file is shorter.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every write that returned before this call durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// The current length of the file in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends the file to `len` bytes. Not durable until
    /// [`FsFile::sync_data`].
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Extends the file with zeros to at least `len` bytes and reserves its
    /// blocks, so that writes below `len` cannot fail for lack of space.
    /// Returns whether writes below `len` are now cheap (no system call:
    /// [`OsFs`] takes them through a shared memory mapping, which is as
    /// durable as a `write` once it returns, unless
    /// [`FsFile::map_reserved_writes`] turned that off); `false`, having changed
    /// nothing, where the file system cannot reserve blocks. The new length
    /// is durable only after [`FsFile::sync_data`]. [`OsFs`] writes the
    /// zeros (so that overwriting them later leaves the block map alone):
    /// as slow as a write of `len` bytes, so keep it off the request path.
    fn allocate(&self, len: u64) -> io::Result<bool>;
    /// Whether writes into the part [`FsFile::allocate`] reserved may go
    /// through a memory mapping, as they do by default. A file synced after
    /// nearly every write is better off without: each `fdatasync` makes the
    /// mapped pages it writes back read-only again, which costs an
    /// interrupt to every other CPU running the process (to flush their
    /// TLBs) and a page fault at the next write to each page. Without it,
    /// every write is a `pwrite`. The default does nothing: a file system
    /// that never maps has nothing to turn off.
    fn map_reserved_writes(&self, enabled: bool) {
        let _ = enabled;
    }
}

/// A file system: the operations on names the engine needs.
pub trait Fs: Send + Sync {
    /// Creates a new empty file, failing if it exists. The name is durable
    /// only after [`Fs::sync_dir`].
    fn create(&self, path: &Path) -> io::Result<Arc<dyn FsFile>>;
    /// Opens an existing file for reading, and for writing if `writable`.
    fn open(&self, path: &Path, writable: bool) -> io::Result<Arc<dyn FsFile>>;
    /// Removes a file. Durable only after [`Fs::sync_dir`].
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Atomically renames `from` to `to`, replacing `to`. Durable only after
    /// [`Fs::sync_dir`].
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// The names (not paths) of the files in `dir`, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Makes the directory's entries (creations, removals, renames) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path` (creating it), held until the
    /// returned guard is dropped. Fails with `WouldBlock` if another holder
    /// (another process, for [`OsFs`]) has it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>>;
}

/// Reads a whole file.
pub fn read_all(fs: &dyn Fs, path: &Path) -> io::Result<Vec<u8>> {
    let file = fs.open(path, false)?;
    let len = usize::try_from(file.len()?).map_err(io::Error::other)?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// Creates `path` (replacing any file there) holding `bytes`, synced. The
/// caller syncs the directory once the name matters.
pub(crate) fn write_synced(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let _ = fs.remove(path);
    let file = fs.create(path)?;
    file.write_all_at(bytes, 0)?;
    file.sync_data()
}

/// Joins a file name to a directory; a tiny helper so call sites read well.
pub(crate) fn join(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
