//! The real file system, through `std::fs` and positional I/O.
//!
//! A file's reserved part ([`FsFile::allocate`]) is written through a shared
//! memory mapping (unless [`FsFile::map_reserved_writes`] turned that off),
//! one window of [`WINDOW_BYTES`] at a time: a `memcpy` into
//! the page cache instead of a `pwrite` per call, and just as safe against
//! the process being killed. Reads stay `pread`s, which see the same pages.
//! Blocks are reserved with `fallocate` and written with zeros before they
//! are mapped, so a write through the mapping never meets a full disk
//! (which would be `SIGBUS`) and never changes the file's block map (which
//! would make the next `fdatasync` commit the file system's journal too).
//! That holds on file systems that overwrite blocks in place, so mapping is
//! used only on ext2/3/4, XFS and tmpfs; elsewhere (btrfs and ZFS copy on
//! write and can still run out of space) `allocate` says no and writes stay
//! `pwrite`s. If a window cannot be mapped, that write and every later one
//! to the file is a `pwrite`.
//!
//! Mapping a window and unmapping one are changes to the process's memory
//! map, which wait for every page fault in progress in the process and
//! hold up every one that starts meanwhile; unmapping a window also flushes
//! its pages out of every CPU's TLB. The log writes under its lock, so
//! [`FsFile::prepare_writes`] (the log's sync thread) maps the window
//! after the one being written before the writes reach it, and unmaps the
//! windows they have left; a write maps or unmaps a window itself only when
//! that has not kept up. Shrinking the file ([`FsFile::set_len`], the
//! log's rotation) still unmaps its windows at once. What mapping cannot turn into an error: a
//! disk that fails to read back a page of the active segment the log is
//! appending to (a `pwrite` would get `EIO`; a mapped write gets `SIGBUS`).

use super::{Fs, FsFile};
use memmap2::{MmapMut, MmapOptions};
use parking_lot::Mutex;
use std::any::Any;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

/// Bytes of a file mapped at a time; a multiple of every page size.
const WINDOW_BYTES: u64 = 8 << 20;

/// Windows left by the writes and kept mapped for [`FsFile::prepare_writes`]
/// to unmap; a write that would retire one more unmaps the window itself.
const RETIRED_MAX: usize = 2;

/// What [`FsFile::allocate`] writes into the blocks it reserves.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

struct OsFile {
    file: File,
    mapped: Mutex<Mapped>,
}

/// The reserved part of a file and the window mapped onto it.
#[derive(Default)]
struct Mapped {
    /// Bytes `[0, reserved)` have blocks (`fallocate`d) and lie inside the
    /// file, so the mapping may write them.
    reserved: u64,
    /// The mapped window writes go to, and the file offset it starts at.
    window: Option<(u64, MmapMut)>,
    /// A window mapped by [`FsFile::prepare_writes`] for the writes to
    /// reach, past `window`.
    ahead: Option<(u64, MmapMut)>,
    /// Windows the writes have left, for [`FsFile::prepare_writes`] to
    /// unmap; at most [`RETIRED_MAX`].
    retired: Vec<MmapMut>,
    /// Counts the times every window was dropped ([`FsFile::set_len`], or
    /// mapped writes turned off): a window mapped while the lock was let go
    /// is installed only if this has not moved.
    drops: u64,
    /// Whether the file system overwrites blocks in place (asked once).
    in_place: Option<bool>,
    /// Set by [`FsFile::map_reserved_writes`]`(false)`: every write is a
    /// `pwrite`.
    unmapped: bool,
}

impl OsFile {
    fn new(file: File) -> OsFile {
        OsFile {
            file,
            mapped: Mutex::new(Mapped::default()),
        }
    }
}

/// Maps the window of `file` that starts at `start`.
fn map_window(file: &File, start: u64) -> io::Result<MmapMut> {
    // SAFETY: the mapping is shared with the page cache; the engine owns its
    // data directory, and within this process the file is only written
    // through its windows below `reserved` (where the file has blocks, so no
    // SIGBUS) and shrunk by `set_len`, which drops every window first.
    unsafe {
        MmapOptions::new()
            .offset(start)
            .len(WINDOW_BYTES as usize)
            .map_mut(file)
    }
}

impl Mapped {
    /// Copies `buf` to `offset` through the windows it spans.
    fn write(&mut self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut at = offset;
        let mut rest = buf;
        while !rest.is_empty() {
            let start = at - at % WINDOW_BYTES;
            if self
                .window
                .as_ref()
                .is_none_or(|(current, _)| *current != start)
            {
                let next = match self.ahead.take() {
                    Some((ahead, map)) if ahead == start => map,
                    other => {
                        self.ahead = other;
                        map_window(file, start)?
                    }
                };
                if let Some((_, left)) = self.window.replace((start, next)) {
                    self.retire(left);
                }
            }
            let Some((_, window)) = &mut self.window else {
                return Err(io::Error::other("no window mapped"));
            };
            let within = (at - start) as usize;
            let count = rest.len().min(WINDOW_BYTES as usize - within);
            let (head, tail) = rest.split_at(count);
            window
                .get_mut(within..within + count)
                .ok_or_else(|| io::Error::other("write outside the mapped window"))?
                .copy_from_slice(head);
            at += count as u64;
            rest = tail;
        }
        Ok(())
    }

    /// Keeps a window the writes have left for [`FsFile::prepare_writes`]
    /// to unmap, or unmaps it here if too many wait already.
    fn retire(&mut self, window: MmapMut) {
        if self.retired.len() < RETIRED_MAX {
            self.retired.push(window);
        }
    }

    /// Takes every window out, for the caller to unmap: writes map again
    /// from the next one on.
    fn take_windows(&mut self) -> Vec<MmapMut> {
        self.drops += 1;
        let mut windows = std::mem::take(&mut self.retired);
        windows.extend(self.window.take().map(|(_, map)| map));
        windows.extend(self.ahead.take().map(|(_, map)| map));
        windows
    }
}

impl OsFile {
    /// Starts writing the range back (`wait`: false) or writes it back and
    /// waits (`wait`: true), with `sync_file_range(2)`. Where the system has
    /// no such call, or a sandbox forbids it, or off Linux, there is
    /// nothing to pace: `Ok`.
    fn write_back(&self, offset: u64, len: u64, wait: bool) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            let (Ok(offset), Ok(len)) = (
                libc::off64_t::try_from(offset),
                libc::off64_t::try_from(len),
            ) else {
                return Err(io::Error::from_raw_os_error(libc::EFBIG));
            };
            let flags = if wait {
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER
            } else {
                libc::SYNC_FILE_RANGE_WRITE
            };
            // SAFETY: sync_file_range takes a valid open descriptor, owned
            // by `self.file`, which outlives the call; it reads no memory of
            // ours.
            let rc = unsafe { libc::sync_file_range(self.file.as_raw_fd(), offset, len, flags) };
            if rc == 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::ENOSYS | libc::EPERM | libc::EOPNOTSUPP) => Ok(()),
                _ => Err(error),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (offset, len, wait);
            Ok(())
        }
    }
}

impl FsFile for OsFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut mapped = self.mapped.lock();
        let end = offset.checked_add(buf.len() as u64);
        if !mapped.unmapped && end.is_some_and(|end| end <= mapped.reserved) {
            match mapped.write(&self.file, buf, offset) {
                Ok(()) => return Ok(()),
                Err(error) => {
                    // Out of address space or map areas: pwrite from now on.
                    tracing::warn!(%error, "cannot map the log for writing; writing with pwrite");
                    drop(mapped.take_windows());
                    mapped.reserved = 0;
                }
            }
        }
        drop(mapped);
        self.file.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        // On Linux `fdatasync` also writes back pages dirtied through a
        // shared mapping (no `msync` needed).
        self.file.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut mapped = self.mapped.lock();
        drop(mapped.take_windows());
        mapped.reserved = mapped.reserved.min(len);
        self.file.set_len(len)
    }

    fn map_reserved_writes(&self, enabled: bool) {
        let mut mapped = self.mapped.lock();
        mapped.unmapped = !enabled;
        if !enabled {
            drop(mapped.take_windows());
        }
    }

    fn prepare_writes(&self, from: u64) {
        let (wanted, left, drops) = {
            let mut mapped = self.mapped.lock();
            if mapped.unmapped {
                return;
            }
            let start = from - from % WINDOW_BYTES;
            let current = mapped.window.as_ref().map(|(at, _)| *at);
            let ahead = mapped.ahead.as_ref().map(|(at, _)| *at);
            // The window of `from` if no write has mapped it, whatever is
            // reserved yet (writes go through a window only below the
            // reservation, and mapping past the file's end is allowed);
            // else the next one, once blocks are reserved in it.
            let wanted = if current == Some(start) {
                start + WINDOW_BYTES
            } else {
                start
            };
            let wanted = (ahead != Some(wanted) && (wanted == start || wanted < mapped.reserved))
                .then_some(wanted);
            (wanted, std::mem::take(&mut mapped.retired), mapped.drops)
        };
        // Unmapped here, outside the lock the writes take.
        drop(left);
        let Some(start) = wanted else {
            return;
        };
        let map = match map_window(&self.file, start) {
            Ok(map) => map,
            // The write that reaches it will try again, and report.
            Err(_) => return,
        };
        let mut mapped = self.mapped.lock();
        let behind = mapped
            .window
            .as_ref()
            .is_some_and(|(current, _)| *current >= start);
        if mapped.drops != drops || mapped.unmapped || behind {
            drop(mapped);
            return;
        }
        let replaced = mapped.ahead.replace((start, map));
        drop(mapped);
        drop(replaced);
    }

    fn start_write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_back(offset, len, false)
    }

    fn wait_write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_back(offset, len, true)
    }

    fn allocate(&self, len: u64) -> io::Result<bool> {
        let mut mapped = self.mapped.lock();
        if len <= mapped.reserved {
            return Ok(true);
        }
        let in_place = match mapped.in_place {
            Some(known) => known,
            None => *mapped
                .in_place
                .insert(reserves_blocks_in_place(&self.file)?),
        };
        if !in_place {
            return Ok(false);
        }
        let from = mapped.reserved;
        let old_len = self.file.metadata()?.len();
        let (Ok(offset), Ok(count)) = (
            libc::off_t::try_from(from),
            libc::off_t::try_from(len - from),
        ) else {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        };
        // SAFETY: fallocate takes a valid open descriptor, owned by
        // `self.file`, which outlives the call.
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, offset, count) };
        if rc != 0 {
            let error = io::Error::last_os_error();
            return match error.raw_os_error() {
                Some(libc::EOPNOTSUPP | libc::ENOSYS) => Ok(false),
                _ => Err(error),
            };
        }
        // Blocks fallocate added are marked unwritten: the first write to
        // each one changes the file's block map, so every fdatasync that
        // covers such a write also commits the file system's journal
        // (several times slower). Writing the zeros makes them ordinary
        // blocks once, here, instead.
        let mut at = from.max(old_len);
        while at < len {
            let count = (len - at).min(ZEROS.len() as u64) as usize;
            let zeros = ZEROS.get(..count).unwrap_or(&ZEROS);
            self.file.write_all_at(zeros, at)?;
            at += zeros.len() as u64;
        }
        mapped.reserved = len;
        Ok(true)
    }
}

/// Whether `file` is on a file system where `fallocate`d blocks are
/// overwritten in place (so writing them through a mapping cannot fail for
/// lack of space): ext2/3/4, XFS or tmpfs.
fn reserves_blocks_in_place(file: &File) -> io::Result<bool> {
    let kind = fs_type(file)?;
    #[allow(
        clippy::unnecessary_cast,
        reason = "the magic constants have different types on other targets"
    )]
    let known = [
        libc::EXT4_SUPER_MAGIC as i64,
        libc::XFS_SUPER_MAGIC as i64,
        libc::TMPFS_MAGIC as i64,
    ]
    .contains(&kind);
    Ok(known)
}

/// The type (`f_type`, a magic number) of the file system `file` is on.
fn fs_type(file: &File) -> io::Result<i64> {
    let mut stats = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs takes a valid open descriptor, owned by `file`, and
    // writes a `statfs` to the pointer, which points to one.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), stats.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs returned 0, so it filled the struct.
    let kind = unsafe { stats.assume_init() }.f_type;
    #[allow(
        clippy::unnecessary_cast,
        reason = "f_type's type differs between targets"
    )]
    Ok(kind as i64)
}

/// Holds an `flock` until dropped (closing the descriptor releases it).
struct LockGuard(#[allow(dead_code)] File);

impl Fs for OsFs {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Arc::new(OsFile::new(file)))
    }

    fn open(&self, path: &Path, writable: bool) -> io::Result<Arc<dyn FsFile>> {
        let file = OpenOptions::new().read(true).write(writable).open(path)?;
        Ok(Arc::new(OsFile::new(file)))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        try_lock_exclusive(&file)?;
        Ok(Box::new(LockGuard(file)))
    }
}

/// Takes an exclusive `flock` on `file` without waiting; an error of kind
/// `WouldBlock` when another open of the file holds it. The lock lasts until
/// every descriptor of this open is closed; a process that dies lets it go.
pub fn try_lock_exclusive(file: &File) -> io::Result<()> {
    // SAFETY: flock takes a valid open descriptor, owned by `file`, which
    // outlives the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    /// A new empty file "f" in a new temporary directory (removed when the
    /// returned guard drops).
    fn new_file() -> (tempfile::TempDir, std::path::PathBuf, Arc<dyn FsFile>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = OsFs.create(&path).unwrap();
        (dir, path, file)
    }

    #[test]
    fn a_file_written_back_in_pieces_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..(3 << 20) + 12_345).map(|i| (i % 251) as u8).collect();
        super::super::write_synced(&OsFs, &path, &bytes).unwrap();
        assert_eq!(super::super::read_all(&OsFs, &path).unwrap(), bytes);
        // Past the end there is nothing to write back, and that is no error.
        let file = OsFs.open(&path, true).unwrap();
        file.start_write_back(8 << 20, 1 << 20).unwrap();
        file.wait_write_back(8 << 20, 1 << 20).unwrap();
    }

    #[test]
    fn writes_in_the_reserved_part_go_through_the_mapping_and_read_back() {
        let (_dir, path, file) = new_file();
        file.write_all_at(b"head", 0).unwrap();
        let reserved = 2 * WINDOW_BYTES;
        assert!(file.allocate(reserved).unwrap());
        assert_eq!(file.len().unwrap(), reserved);
        // One write inside a window, one across the boundary of two.
        file.write_all_at(b"inside", 4).unwrap();
        let across = WINDOW_BYTES - 3;
        file.write_all_at(b"0123456789", across).unwrap();
        let mut buf = [0u8; 10];
        file.read_exact_at(&mut buf, across).unwrap();
        assert_eq!(&buf, b"0123456789");
        // Past the reservation: an ordinary write that extends the file.
        file.write_all_at(b"tail", reserved).unwrap();
        assert_eq!(file.len().unwrap(), reserved + 4);
        drop(file);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..10], b"headinside");
        assert_eq!(&bytes[across as usize..][..10], b"0123456789");
        assert_eq!(&bytes[reserved as usize..], b"tail");
    }

    /// Whether this process maps `path` (/proc/self/maps).
    fn mapped_here(path: &Path) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .any(|line| line.ends_with(path.to_str().unwrap()))
    }

    #[test]
    fn with_mapped_writes_off_reserved_writes_are_pwrites() {
        let (_dir, path, file) = new_file();
        assert!(file.allocate(WINDOW_BYTES).unwrap());
        file.write_all_at(b"mapped", 0).unwrap();
        assert!(mapped_here(&path), "a reserved write maps the file");
        file.map_reserved_writes(false);
        assert!(!mapped_here(&path), "turning mapped writes off unmaps");
        file.write_all_at(b"written", 6).unwrap();
        assert!(!mapped_here(&path), "a reserved write still maps the file");
        let mut buf = [0u8; 13];
        file.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"mappedwritten");
        assert_eq!(file.len().unwrap(), WINDOW_BYTES);
    }

    /// A new empty file in a new temporary directory, as the `OsFile` itself.
    fn new_os_file() -> (tempfile::TempDir, OsFile) {
        let dir = tempfile::tempdir().unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("f"))
            .unwrap();
        (dir, OsFile::new(file))
    }

    /// Where the current window and the one ahead start, and how many
    /// windows wait to be unmapped.
    fn windows(file: &OsFile) -> (Option<u64>, Option<u64>, usize) {
        let mapped = file.mapped.lock();
        (
            mapped.window.as_ref().map(|(start, _)| *start),
            mapped.ahead.as_ref().map(|(start, _)| *start),
            mapped.retired.len(),
        )
    }

    #[test]
    fn writes_reach_the_window_mapped_ahead_and_the_one_they_left_is_unmapped_later() {
        let (_dir, file) = new_os_file();
        assert!(file.allocate(3 * WINDOW_BYTES).unwrap());
        file.write_all_at(b"first", 0).unwrap();
        assert_eq!(windows(&file), (Some(0), None, 0));
        file.prepare_writes(5);
        assert_eq!(windows(&file), (Some(0), Some(WINDOW_BYTES), 0));
        let prepared = file.mapped.lock().ahead.as_ref().unwrap().1.as_ptr();
        let across = WINDOW_BYTES - 3;
        file.write_all_at(b"0123456789", across).unwrap();
        // The write went on in the mapping made ahead, and kept the window
        // it left for later.
        assert_eq!(windows(&file), (Some(WINDOW_BYTES), None, 1));
        assert_eq!(
            file.mapped.lock().window.as_ref().unwrap().1.as_ptr(),
            prepared
        );
        file.prepare_writes(across + 10);
        assert_eq!(
            windows(&file),
            (Some(WINDOW_BYTES), Some(2 * WINDOW_BYTES), 0)
        );
        file.write_all_at(b"last", 2 * WINDOW_BYTES).unwrap();
        // Nothing lies ahead past the reserved blocks.
        file.prepare_writes(2 * WINDOW_BYTES + 4);
        assert_eq!(windows(&file), (Some(2 * WINDOW_BYTES), None, 0));
        let mut buf = [0u8; 10];
        file.read_exact_at(&mut buf[..5], 0).unwrap();
        assert_eq!(&buf[..5], b"first");
        file.read_exact_at(&mut buf, across).unwrap();
        assert_eq!(&buf, b"0123456789");
        file.read_exact_at(&mut buf[..4], 2 * WINDOW_BYTES).unwrap();
        assert_eq!(&buf[..4], b"last");
    }

    #[test]
    fn windows_left_unprepared_are_kept_for_unmapping_up_to_a_bound() {
        let (_dir, file) = new_os_file();
        assert!(file.allocate(4 * WINDOW_BYTES).unwrap());
        for window in 0..4 {
            file.write_all_at(b"w", window * WINDOW_BYTES).unwrap();
        }
        assert_eq!(windows(&file), (Some(3 * WINDOW_BYTES), None, RETIRED_MAX));
        // A file not yet written, nor reserved, maps the window of the
        // first write ahead, and the write takes it once blocks are
        // reserved.
        let (_dir, fresh) = new_os_file();
        fresh.prepare_writes(0);
        assert_eq!(windows(&fresh), (None, Some(0), 0));
        fresh.write_all_at(b"unreserved", 0).unwrap();
        assert_eq!(windows(&fresh), (None, Some(0), 0));
        assert!(fresh.allocate(WINDOW_BYTES).unwrap());
        fresh.write_all_at(b"w", 1).unwrap();
        assert_eq!(windows(&fresh), (Some(0), None, 0));
        let mut buf = [0u8; 10];
        fresh.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"uwreserved");
    }

    #[test]
    fn shrinking_the_file_or_ending_mapped_writes_drops_the_windows_ahead_and_left() {
        let (_dir, file) = new_os_file();
        assert!(file.allocate(2 * WINDOW_BYTES).unwrap());
        file.write_all_at(b"w", 0).unwrap();
        file.write_all_at(b"w", WINDOW_BYTES).unwrap();
        // Behind the writes nothing is mapped ahead.
        file.prepare_writes(0);
        assert_eq!(windows(&file), (Some(WINDOW_BYTES), None, 0));
        // A write that goes back maps its window itself.
        file.write_all_at(b"w", 0).unwrap();
        assert_eq!(windows(&file), (Some(0), None, 1));
        file.prepare_writes(1);
        assert_eq!(windows(&file), (Some(0), Some(WINDOW_BYTES), 0));
        file.set_len(4).unwrap();
        assert_eq!(windows(&file), (None, None, 0));
        assert!(file.allocate(2 * WINDOW_BYTES).unwrap());
        file.prepare_writes(0);
        assert_eq!(windows(&file), (None, Some(0), 0));
        file.map_reserved_writes(false);
        assert_eq!(windows(&file), (None, None, 0));
        file.prepare_writes(0);
        assert_eq!(windows(&file), (None, None, 0));
    }

    #[test]
    fn shrinking_a_file_ends_mapped_writes_past_the_new_length() {
        let (_dir, path, file) = new_file();
        assert!(file.allocate(WINDOW_BYTES).unwrap());
        file.write_all_at(b"kept", 0).unwrap();
        file.set_len(4).unwrap();
        assert_eq!(file.len().unwrap(), 4);
        // Would be SIGBUS through a stale mapping; a plain write instead.
        file.write_all_at(b"more", 100).unwrap();
        assert_eq!(file.len().unwrap(), 104);
        file.sync_data().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..4], b"kept");
        assert_eq!(&bytes[100..], b"more");
    }

    #[test]
    fn reserving_writes_zeros_after_the_data_and_keeps_the_data() {
        let (_dir, path, file) = new_file();
        assert!(file.allocate(4096).unwrap());
        file.write_all_at(b"mapped", 0).unwrap();
        // Past the reservation, by pwrite: the next reservation starts
        // below this data and must not overwrite it.
        file.write_all_at(b"written", 5000).unwrap();
        let reserved = 3 * (64 << 10) + 17;
        assert!(file.allocate(reserved).unwrap());
        assert_eq!(file.len().unwrap(), reserved);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..6], b"mapped");
        assert_eq!(&bytes[5000..5007], b"written");
        assert!(bytes[5007..].iter().all(|&b| b == 0));
        if !is_ext4_or_xfs(&path) {
            return;
        }
        // The reserved blocks are ordinary written blocks: overwriting them
        // will not change the block map.
        let extents = extents_of(&path);
        assert!(!extents.is_empty());
        for (logical, length, flags) in extents {
            assert_eq!(
                flags & FIEMAP_EXTENT_UNWRITTEN,
                0,
                "extent at {logical} ({length} bytes) is unwritten"
            );
        }
    }

    #[allow(
        clippy::unnecessary_cast,
        reason = "the magic constants have different types on other targets"
    )]
    fn is_ext4_or_xfs(path: &Path) -> bool {
        let kind = fs_type(&File::open(path).unwrap()).unwrap();
        kind == libc::EXT4_SUPER_MAGIC as i64 || kind == libc::XFS_SUPER_MAGIC as i64
    }

    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_FLAG_SYNC: u32 = 1;
    const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;

    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct FiemapExtent {
        logical: u64,
        physical: u64,
        length: u64,
        reserved64: [u64; 2],
        flags: u32,
        reserved: [u32; 3],
    }

    #[repr(C)]
    struct Fiemap {
        start: u64,
        length: u64,
        flags: u32,
        mapped_extents: u32,
        extent_count: u32,
        reserved: u32,
        extents: [FiemapExtent; 64],
    }

    /// (logical offset, length, flags) of the file's extents, after a sync.
    fn extents_of(path: &Path) -> Vec<(u64, u64, u32)> {
        let file = File::open(path).unwrap();
        let mut map = Fiemap {
            start: 0,
            length: u64::MAX,
            flags: FIEMAP_FLAG_SYNC,
            mapped_extents: 0,
            extent_count: 64,
            reserved: 0,
            extents: [FiemapExtent::default(); 64],
        };
        // SAFETY: FS_IOC_FIEMAP reads and fills a `struct fiemap` followed by
        // `extent_count` extents, which `Fiemap` lays out.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &mut map) };
        assert_eq!(rc, 0, "FIEMAP: {}", io::Error::last_os_error());
        map.extents[..map.mapped_extents as usize]
            .iter()
            .map(|e| (e.logical, e.length, e.flags))
            .collect()
    }
}
