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
pub use os::{try_lock_exclusive, OsFs};

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
    /// Readies the file for writes from `from` on, for a caller that writes
    /// front to back under a lock of its own, to call from another thread:
    /// [`OsFs`] maps the part of the reserved blocks the writes reach next
    /// and unmaps the parts they have left, changes to the process's memory
    /// map that a write would otherwise make under that lock. A hint: it
    /// changes no data, and failing to map changes nothing. The default
    /// does nothing.
    fn prepare_writes(&self, from: u64) {
        let _ = from;
    }
    /// Starts writing the range's unwritten pages to the disk, without
    /// waiting. Not a sync: nothing is durable until [`FsFile::sync_data`].
    /// For writing a large file back a piece at a time as it is written;
    /// the default does nothing.
    ///
    /// An error means what a failed [`FsFile::sync_data`] means: the
    /// file's unsynced writes, in this range or not, may be lost, and a
    /// later sync through this handle need not say so (Linux reports a
    /// write-back error once).
    fn start_write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// Writes the range's unwritten pages to the disk and waits until they
    /// are written, including any write-back already started. Not a sync
    /// either (no cache flush, no metadata), and its errors mean the same as
    /// [`FsFile::start_write_back`]'s. The default does nothing.
    fn wait_write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }
}

/// Bytes handed to the disk at a time by [`WriteBack`], and the pieces in
/// which [`write_synced`] and [`copy_synced`] write a file.
pub(crate) const WRITE_BACK_CHUNK: usize = 1 << 20;

/// Hands a file that is being written front to back, in pieces, to the
/// disk piece by piece: each piece is started as soon as it is written,
/// and the one before it waited for.
///
/// Without it, a file of many megabytes reaches the disk all at once, at
/// its `fdatasync` (or whenever the OS flushes it), and the disk's queue
/// then holds all of it: a small sync issued meanwhile, such as the log's
/// under `always`, waits behind the whole file. On the benchmark machine's
/// disk, a 4 KiB write's `fdatasync` took 10-21 ms at worst while 16 MiB
/// were written and synced next to it, and 2.3-7 ms with the 16 MiB paced
/// a megabyte at a time (about 85 µs alone). Paced this way, at most two
/// pieces are in the queue, and the file's final sync has little left to
/// write.
#[derive(Debug, Default)]
pub(crate) struct WriteBack {
    /// The piece started last and not yet waited for: offset and length.
    started: Option<(u64, u64)>,
}

impl WriteBack {
    /// Call after writing `len` bytes of `file` at `offset`.
    pub(crate) fn wrote(&mut self, file: &dyn FsFile, offset: u64, len: u64) -> io::Result<()> {
        file.start_write_back(offset, len)?;
        if let Some((offset, len)) = self.started.replace((offset, len)) {
            file.wait_write_back(offset, len)?;
        }
        Ok(())
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
/// caller syncs the directory once the name matters. Written in pieces
/// handed to the disk as they go ([`WriteBack`]).
pub(crate) fn write_synced(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_synced_with(fs, path, bytes.len() as u64, |file, offset, len| {
        let piece = bytes
            .get(offset as usize..)
            .and_then(|rest| rest.get(..len))
            .ok_or_else(|| io::Error::other("piece out of range"))?;
        file.write_all_at(piece, offset)
    })
}

/// Creates `path` (replacing any file there) holding a copy of the first
/// `len` bytes of `source` as reads of it see them now, synced, as
/// [`write_synced`] does; reads and writes a piece at a time. Pieces of
/// zeros (the log's reserved blocks) are not written: they read back as
/// zeros all the same, and the disk is spared the writes.
fn copy_synced(fs: &dyn Fs, path: &Path, source: &dyn FsFile, len: u64) -> io::Result<()> {
    let mut buffer = vec![0u8; (WRITE_BACK_CHUNK as u64).min(len) as usize];
    write_synced_with(fs, path, len, |file, offset, len| {
        let piece = buffer
            .get_mut(..len)
            .ok_or_else(|| io::Error::other("piece out of range"))?;
        source.read_exact_at(piece, offset)?;
        if piece.iter().all(|&byte| byte == 0) {
            return Ok(());
        }
        file.write_all_at(piece, offset)
    })
}

/// Creates `path` (replacing any file there) of `len` bytes, each piece of
/// at most [`WRITE_BACK_CHUNK`] written by `write_piece(file, offset,
/// piece_len)` (which may leave it a hole of zeros) and handed to the disk
/// as it goes, then synced, its length with it.
fn write_synced_with(
    fs: &dyn Fs,
    path: &Path,
    len: u64,
    mut write_piece: impl FnMut(&dyn FsFile, u64, usize) -> io::Result<()>,
) -> io::Result<()> {
    let _ = fs.remove(path);
    let file = fs.create(path)?;
    let mut write_back = WriteBack::default();
    let mut offset = 0u64;
    while offset < len {
        let piece = (len - offset).min(WRITE_BACK_CHUNK as u64);
        write_piece(&*file, offset, piece as usize)?;
        write_back.wrote(&*file, offset, piece)?;
        offset += piece;
    }
    if file.len()? != len {
        file.set_len(len)?;
    }
    file.sync_data()
}

/// The temporary name under which [`install`] writes the file `name` of
/// `dir`: `<name>.tmp`, which recovery deletes.
pub(crate) fn temporary_path(dir: &Path, name: &str) -> PathBuf {
    join(dir, &format!("{name}.tmp"))
}

/// Makes `bytes` the file `name` in `dir`, whole or not at all: written
/// under its [`temporary_path`] and synced, renamed over any file of that
/// name, and the directory synced. On failure the file is left under
/// whichever name it had got to (see [`discard`]).
pub(crate) fn install(fs: &dyn Fs, dir: &Path, name: &str, bytes: &[u8]) -> crate::Result<()> {
    install_with(fs, dir, name, |tmp| write_synced(fs, tmp, bytes))
}

/// As [`install`], with a copy of the first `len` bytes of `source` (see
/// [`copy_synced`]).
pub(crate) fn install_copy(
    fs: &dyn Fs,
    dir: &Path,
    name: &str,
    source: &dyn FsFile,
    len: u64,
) -> crate::Result<()> {
    install_with(fs, dir, name, |tmp| copy_synced(fs, tmp, source, len))
}

/// [`install`]'s steps around `write`, which creates the temporary file
/// and syncs it.
fn install_with(
    fs: &dyn Fs,
    dir: &Path,
    name: &str,
    write: impl FnOnce(&Path) -> io::Result<()>,
) -> crate::Result<()> {
    let io = |what: &str, path: &Path, e| crate::Error::io(format!("{what} {}", path.display()), e);
    let tmp = temporary_path(dir, name);
    let path = join(dir, name);
    write(&tmp).map_err(|e| io("writing", &tmp, e))?;
    fs.rename(&tmp, &path)
        .map_err(|e| io("renaming to", &path, e))?;
    fs.sync_dir(dir)
        .map_err(|e| io("syncing directory", dir, e))
}

/// Removes whichever of `paths` exist and syncs `dir`, as far as the disk
/// allows: clearing up after a failure, whose own error is the one to
/// report.
pub(crate) fn discard(fs: &dyn Fs, dir: &Path, paths: &[&Path]) {
    let mut removed = false;
    for path in paths {
        removed |= fs.remove(path).is_ok();
    }
    if removed {
        let _ = fs.sync_dir(dir);
    }
}

/// Deletes the file at `path` after cutting it `step` bytes at a time from
/// its end. On a file system mounted with `discard`, deleting a file trims
/// all its blocks at once, and the disk's other requests wait behind the
/// trim; a step at a time, each waits behind one step's. The file must be
/// one nobody reads any more: it shrinks before it goes.
pub(crate) fn remove_in_steps(fs: &dyn Fs, path: &Path, step: u64) -> io::Result<()> {
    let file = fs.open(path, true)?;
    let mut len = file.len()?;
    while len > 0 {
        len = len.saturating_sub(step.max(1));
        file.set_len(len)?;
    }
    drop(file);
    fs.remove(path)
}

/// Joins a file name to a directory; a tiny helper so call sites read well.
pub(crate) fn join(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
