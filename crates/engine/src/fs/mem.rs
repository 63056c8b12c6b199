//! An in-memory [`Fs`] that models durability, for crash and fault tests.
//!
//! [`MemFs`] keeps two images of everything: the *current* state, which reads
//! and [`Fs::list`] see, and the *durable* state, which is what the disk would
//! hold after a power cut. As in LevelDB's `db/fault_injection_test.cc`, only
//! the calls that promise durability advance the durable image:
//!
//! - [`FsFile::sync_data`] copies into the file's durable contents its current
//!   length and the bytes written to it since its last sync;
//! - [`Fs::sync_dir`] copies a directory's current names (creations, removals,
//!   renames) into its durable namespace. A name maps to a file, not to bytes:
//!   the file's contents are made durable by `sync_data` alone.
//!
//! [`MemFs::power_cut`] throws the current state away and restarts from the
//! durable one, optionally tearing unsynced writes; [`MemFs::crash_process`]
//! models `kill -9`, after which the kernel still holds everything. Both
//! invalidate every open handle and release every lock, so the engine can be
//! reopened on the same `MemFs`. [`MemFs::inject`] and [`MemFs::inject_nth`]
//! make operations fail with `ENOSPC` or `EIO`.
//!
//! Directories themselves are durable as soon as they are created: the engine
//! creates its data directory once, and losing the whole directory would test
//! the test's setup rather than the engine.
//!
//! # Thread safety
//!
//! A `MemFs` is a handle to state behind one mutex; clones share that state
//! and any thread may call anything. Every [`Fs`] and [`FsFile`] call takes
//! the mutex once, so each is atomic with respect to the others and to
//! `power_cut`.
//!
//! Injected failures are not sticky here, as they are not in a kernel: a
//! call after a failed one may succeed. Making an I/O failure sticky is the
//! engine's job, and these tests check that it does.
//!
//! # Invariants
//!
//! - A file's dirty ranges lie inside its current contents.
//! - A file is kept while a current name, a durable name or a live handle
//!   refers to it; as on POSIX, a removed file stays readable and writable
//!   through the handles already open on it.
//! - Handles and lock guards carry the generation they were made in; a crash
//!   starts a new one. A handle from an older generation fails every call, and
//!   a guard from one releases nothing.

use super::{Fs, FsFile};
use parking_lot::Mutex;
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The largest file `MemFs` holds. A write beyond it is an engine bug that
/// would otherwise exhaust the test's memory, so it fails with `EFBIG`.
const FILE_BYTES_MAX: u64 = 1 << 32;

/// A failure that [`MemFs::inject`] or [`MemFs::inject_nth`] arms.
///
/// A failed write or `create` changes nothing; what a failed sync does is
/// described on [`FaultKind::EioOnSync`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The disk is full: `write_all_at`, `create`, and `set_len` growing a
    /// file fail with `ENOSPC`.
    NoSpace,
    /// The disk fails writes: `write_all_at` and `set_len` fail with `EIO`.
    Eio,
    /// The disk fails flushes: `sync_data`, `sync_dir` and write-back
    /// (`start_write_back`, `wait_write_back`) fail with `EIO`.
    ///
    /// A failed `sync_data` makes none of the file's unsynced writes durable,
    /// and, as Linux does, it forgets them: reads still see those bytes, but
    /// no later sync makes them durable. The file's length is still made
    /// durable by the next successful sync, so bytes appended and then lost
    /// this way come back as zeros after a power cut. A failed `sync_dir`
    /// changes nothing; a later successful one makes the entries durable.
    /// A failed write-back forgets the file's unsynced writes as a failed
    /// `sync_data` does (Linux forgets only the range's, and reports the
    /// error once; forgetting more is the harsher test).
    EioOnSync,
    /// The disk fails unlinks: `remove` fails with `EIO` and changes
    /// nothing.
    EioOnRemove,
}

/// The operations a fault can apply to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Write,
    Grow,
    Shrink,
    Sync,
    Remove,
}

impl FaultKind {
    fn applies_to(self, op: Op) -> bool {
        match self {
            FaultKind::NoSpace => matches!(op, Op::Create | Op::Write | Op::Grow),
            FaultKind::Eio => matches!(op, Op::Write | Op::Grow | Op::Shrink),
            FaultKind::EioOnSync => op == Op::Sync,
            FaultKind::EioOnRemove => op == Op::Remove,
        }
    }

    fn error(self) -> io::Error {
        match self {
            FaultKind::NoSpace => io::Error::from_raw_os_error(libc::ENOSPC),
            FaultKind::Eio | FaultKind::EioOnSync | FaultKind::EioOnRemove => {
                io::Error::from_raw_os_error(libc::EIO)
            }
        }
    }
}

/// An injected fault. `countdown` counts the matching operations left up to
/// and including the one it fails, after which it is disarmed; `None` fails
/// every matching operation until cleared.
#[derive(Debug)]
struct ArmedFault {
    kind: FaultKind,
    countdown: Option<u64>,
}

/// A shared, in-memory file system that forgets what was not made durable.
/// Clones share the same files; see the module documentation for the model.
///
/// Besides the errors a real file system gives (`NotFound`, `AlreadyExists`,
/// `UnexpectedEof`, `EISDIR`, and `EBADF` for a write through a handle opened
/// read-only), its handles fail with `ErrorKind::Other` once a crash has made
/// them stale, and with `EFBIG` when a write or `set_len` would take a file
/// past 4 GiB. Injected faults add `ENOSPC` and `EIO`; see [`FaultKind`].
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFs").finish_non_exhaustive()
    }
}

type FileId = u64;

struct State {
    /// Every directory, by normalized path. Both roots, `/` and the empty
    /// path that relative paths start from, always exist.
    dirs: BTreeMap<PathBuf, Dir>,
    /// Every file still referred to by a name or a handle. Ordered so that
    /// a torn power cut with a given seed is reproducible.
    files: BTreeMap<FileId, Node>,
    next_file_id: FileId,
    /// Advanced by each crash; see the module's invariants.
    generation: u64,
    /// Held locks: path to the token of the guard that holds it.
    locks: HashMap<PathBuf, u64>,
    next_lock_token: u64,
    faults: Vec<ArmedFault>,
    sync_data_calls: u64,
    sync_dir_calls: u64,
    write_back_waits: u64,
    prepare_writes_calls: u64,
    /// Called at each `sync_data`, on the calling thread
    /// ([`MemFs::observe_sync_data`]).
    sync_observer: Option<SyncObserver>,
}

/// What [`MemFs::observe_sync_data`] calls.
type SyncObserver = Arc<dyn Fn() + Send + Sync>;

impl Default for State {
    fn default() -> Self {
        let mut dirs = BTreeMap::new();
        dirs.insert(PathBuf::from("/"), Dir::default());
        dirs.insert(PathBuf::new(), Dir::default());
        State {
            dirs,
            files: BTreeMap::new(),
            next_file_id: 0,
            generation: 0,
            locks: HashMap::new(),
            next_lock_token: 0,
            faults: Vec::new(),
            sync_data_calls: 0,
            sync_dir_calls: 0,
            write_back_waits: 0,
            prepare_writes_calls: 0,
            sync_observer: None,
        }
    }
}

/// A directory's file names, as seen now and as they would be after a power
/// cut. Subdirectories are not entries: they live in `State::dirs`.
#[derive(Default)]
struct Dir {
    current: BTreeMap<String, FileId>,
    durable: BTreeMap<String, FileId>,
}

/// One file's contents.
#[derive(Default)]
struct Node {
    /// What reads see.
    data: Vec<u8>,
    /// What survives a power cut.
    durable: Vec<u8>,
    /// Ranges of `data` written since the last sync, successful or not.
    dirty: Ranges,
    /// Whether `data` may differ from `durable` outside `dirty` and past the
    /// shorter length, because a failed sync dropped writes.
    diverged: bool,
    /// Live handles open on this file.
    open_handles: usize,
    /// End of the furthest write (zeros from growing the file not counted).
    written_end: usize,
}

impl Node {
    fn write(&mut self, buf: &[u8], offset: usize) {
        let end = offset + buf.len();
        let old_len = self.data.len();
        if end > old_len {
            self.data.resize(end, 0);
        }
        self.data
            .get_mut(offset..end)
            .expect("the file was just extended to cover the write")
            .copy_from_slice(buf);
        self.written_end = self.written_end.max(end);
        // A gap between the old end and the write was zero-filled; it is dirty
        // too, since an unsynced truncation may have left older durable bytes
        // there.
        self.dirty.insert(offset.min(old_len), end);
    }

    fn set_len(&mut self, len: usize) {
        let old_len = self.data.len();
        self.data.resize(len, 0);
        self.written_end = self.written_end.min(len);
        if len < old_len {
            self.dirty.truncate(len);
        } else {
            self.dirty.insert(old_len, len);
        }
    }

    /// Makes the current length and the dirty bytes durable.
    fn sync(&mut self) {
        let Node {
            data,
            durable,
            dirty,
            ..
        } = self;
        durable.resize(data.len(), 0);
        for (start, end) in dirty.iter() {
            let source = data
                .get(start..end)
                .expect("dirty ranges lie inside the file");
            durable
                .get_mut(start..end)
                .expect("durable contents were just resized to the file's length")
                .copy_from_slice(source);
        }
        dirty.clear();
    }

    /// Forgets the unsynced writes, as Linux does when writeback fails.
    fn drop_dirty(&mut self) {
        if !self.dirty.is_empty() {
            self.dirty.clear();
            self.diverged = true;
        }
    }

    /// Lets part of the unsynced state reach the durable contents, as a power
    /// cut in the middle of writeback would: the length moves to anywhere
    /// between the durable and the current one, each unsynced overwrite kept
    /// a random prefix, and so did the bytes written past the durable length
    /// (the rest of the new length reads as zeros, as blocks reserved or
    /// allocated and never written do).
    fn tear(&mut self, rng: &mut SplitMix64) {
        let Node {
            data,
            durable,
            dirty,
            written_end,
            ..
        } = self;
        let durable_len = durable.len();
        let current_len = data.len();
        let torn_len = if current_len > durable_len {
            durable_len + rng.below(current_len - durable_len + 1)
        } else if current_len < durable_len && rng.below(2) == 0 {
            current_len
        } else {
            durable_len
        };
        durable.resize(torn_len, 0);
        for (start, end) in dirty.iter() {
            let end = end.min(torn_len);
            if start >= end {
                continue;
            }
            let appended_start = durable_len.clamp(start, end);
            let kept_end = start + rng.below(appended_start - start + 1);
            let appended_written_end = (*written_end).clamp(appended_start, end);
            let appended_kept_end =
                appended_start + rng.below(appended_written_end - appended_start + 1);
            for range in [start..kept_end, appended_start..appended_kept_end] {
                let source = data
                    .get(range.clone())
                    .expect("dirty ranges lie inside the file");
                durable
                    .get_mut(range)
                    .expect("the torn range lies inside the torn length")
                    .copy_from_slice(source);
            }
        }
    }

    /// Makes the current contents the durable ones, as after a power cut.
    ///
    /// Unless a failed sync dropped writes, the two contents differ only in
    /// dirty ranges and past the shorter length (every byte past the durable
    /// length was written or zero-filled since the last sync, so it is
    /// dirty), and only those bytes are copied: a test may cut power
    /// thousands of times on a large file.
    fn revert_to_durable(&mut self) {
        let Node {
            data,
            durable,
            dirty,
            diverged,
            ..
        } = self;
        if *diverged {
            data.clone_from(durable);
        } else {
            let common_len = data.len().min(durable.len());
            for (start, end) in dirty.iter() {
                let range = start.min(common_len)..end.min(common_len);
                let source = durable
                    .get(range.clone())
                    .expect("range is clipped to both");
                data.get_mut(range)
                    .expect("range is clipped to both")
                    .copy_from_slice(source);
            }
            data.truncate(common_len);
            data.extend_from_slice(durable.get(common_len..).unwrap_or_default());
        }
        dirty.clear();
        *diverged = false;
    }
}

/// A set of disjoint, non-adjacent byte ranges: start to end (exclusive).
#[derive(Default, Debug)]
struct Ranges(BTreeMap<usize, usize>);

impl Ranges {
    fn insert(&mut self, mut start: usize, mut end: usize) {
        if start >= end {
            return;
        }
        if let Some((&before_start, &before_end)) = self.0.range(..=start).next_back() {
            if before_end >= start {
                start = before_start;
                end = end.max(before_end);
                self.0.remove(&before_start);
            }
        }
        while let Some((&next_start, &next_end)) = self.0.range(start..=end).next() {
            end = end.max(next_end);
            self.0.remove(&next_start);
        }
        self.0.insert(start, end);
    }

    /// Drops everything at or past `len`.
    fn truncate(&mut self, len: usize) {
        self.0.split_off(&len);
        if let Some((_, end)) = self.0.iter_mut().next_back() {
            *end = (*end).min(len);
        }
    }

    fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.0.iter().map(|(&start, &end)| (start, end))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// splitmix64: a tiny, good-enough generator, so that tearing is
/// reproducible from a seed without a dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`; `bound` must not be zero.
    fn below(&mut self, bound: usize) -> usize {
        assert!(bound > 0, "an empty range has no member to pick");
        // The remainder is below `bound`, so it fits in a usize.
        (self.next() % bound as u64) as usize
    }
}

impl State {
    /// Fails the operation if an armed fault applies to it, counting it
    /// against every countdown that applies.
    fn check_fault(&mut self, op: Op) -> io::Result<()> {
        let mut fired = None;
        self.faults.retain_mut(|fault| {
            if !fault.kind.applies_to(op) {
                return true;
            }
            let Some(countdown) = fault.countdown.as_mut() else {
                fired.get_or_insert(fault.kind);
                return true;
            };
            *countdown -= 1;
            if *countdown > 0 {
                return true;
            }
            fired.get_or_insert(fault.kind);
            false
        });
        fired.map_or(Ok(()), |kind| Err(kind.error()))
    }

    fn check_generation(&self, generation: u64) -> io::Result<()> {
        if generation == self.generation {
            Ok(())
        } else {
            Err(io::Error::other("file handle from before a crash"))
        }
    }

    fn dir(&self, dir: &Path) -> io::Result<&Dir> {
        self.dirs.get(dir).ok_or_else(|| no_directory(dir))
    }

    fn dir_mut(&mut self, dir: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(dir).ok_or_else(|| no_directory(dir))
    }

    /// The file currently named `path`.
    fn lookup(&self, path: &Path) -> io::Result<FileId> {
        let (dir, name) = split(path)?;
        if self.dirs.contains_key(path) {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        self.dir(dir)?.current.get(name).copied().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such file", path.display()),
            )
        })
    }

    fn node_mut(&mut self, id: FileId) -> &mut Node {
        self.files
            .get_mut(&id)
            .expect("a file with a live handle or a name is kept")
    }

    /// Creates an empty file named `path`, visible at once, not yet durable.
    fn create_file(&mut self, path: &Path) -> io::Result<FileId> {
        let (dir, name) = split(path)?;
        let exists = self.dirs.contains_key(path) || self.dir(dir)?.current.contains_key(name);
        if exists {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: file exists", path.display()),
            ));
        }
        let id = self.next_file_id;
        self.next_file_id += 1;
        self.files.insert(id, Node::default());
        self.dir_mut(dir)?.current.insert(name.to_owned(), id);
        Ok(id)
    }

    fn open_handle(&mut self, shared: &MemFs, id: FileId, writable: bool) -> Arc<dyn FsFile> {
        self.node_mut(id).open_handles += 1;
        Arc::new(MemFile {
            fs: shared.clone(),
            id,
            generation: self.generation,
            writable,
        })
    }

    fn is_named(&self, id: FileId) -> bool {
        self.dirs.values().any(|dir| {
            dir.current.values().any(|&named| named == id)
                || dir.durable.values().any(|&named| named == id)
        })
    }

    /// Frees a file that nothing refers to any more.
    fn release_if_orphan(&mut self, id: FileId) {
        let Some(node) = self.files.get(&id) else {
            return;
        };
        if node.open_handles == 0 && !self.is_named(id) {
            self.files.remove(&id);
        }
    }

    /// Ends the old generation: handles fail from now on, locks are free, and
    /// files that only handles kept alive are freed.
    fn end_generation(&mut self) {
        self.generation += 1;
        self.locks.clear();
        let named: BTreeSet<FileId> = self
            .dirs
            .values()
            .flat_map(|dir| dir.current.values().chain(dir.durable.values()))
            .copied()
            .collect();
        self.files.retain(|id, _| named.contains(id));
        for node in self.files.values_mut() {
            node.open_handles = 0;
        }
    }
}

impl MemFs {
    /// An empty file system holding only the roots `/` and `.`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a power loss: afterwards every directory holds its durable
    /// names and every file its durable contents. Every handle and lock guard
    /// handed out before becomes stale; injected faults stay armed.
    ///
    /// With `tear_seed`, writes that were in flight partly reach the disk,
    /// chosen reproducibly from the seed: a file's length lands anywhere
    /// between its durable and its current length, bytes appended up to that
    /// length are kept, and each unsynced overwrite keeps a random prefix
    /// (possibly empty, possibly whole); an unsynced truncation either happened
    /// or did not. Durable bytes not overwritten or truncated since are never
    /// changed, and names are never torn.
    pub fn power_cut(&self, tear_seed: Option<u64>) {
        let mut state = self.state.lock();
        let state = &mut *state;
        for dir in state.dirs.values_mut() {
            dir.current.clone_from(&dir.durable);
        }
        state.end_generation();
        let mut rng = tear_seed.map(SplitMix64);
        for node in state.files.values_mut() {
            if let Some(rng) = rng.as_mut() {
                node.tear(rng);
            }
            node.revert_to_durable();
        }
    }

    /// Simulates `kill -9` of the process using the file system: nothing is
    /// lost, since the kernel still holds unsynced data (a later power cut
    /// can still lose it), but every handle and lock guard handed out before
    /// becomes stale.
    pub fn crash_process(&self) {
        self.state.lock().end_generation();
    }

    /// Makes every operation `fault` applies to fail until
    /// [`MemFs::clear_faults`].
    pub fn inject(&self, fault: FaultKind) {
        self.state.lock().faults.push(ArmedFault {
            kind: fault,
            countdown: None,
        });
    }

    /// Makes the `n`th operation from now that `fault` applies to fail, once;
    /// `n == 1` is the next one. Panics if `n` is zero.
    pub fn inject_nth(&self, fault: FaultKind, n: u64) {
        assert!(n > 0, "operations are counted from 1");
        self.state.lock().faults.push(ArmedFault {
            kind: fault,
            countdown: Some(n),
        });
    }

    /// Disarms every injected fault.
    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// The names of the files currently in `dir`, sorted; empty if `dir` does
    /// not exist. Subdirectories are left out.
    pub fn file_names(&self, dir: &Path) -> Vec<String> {
        let state = self.state.lock();
        state
            .dirs
            .get(&normalize(dir))
            .map(|dir| dir.current.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The current contents of the file at `path`, or `None` if there is no
    /// such file.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.state.lock();
        let id = state.lookup(&normalize(path)).ok()?;
        state.files.get(&id).map(|node| node.data.clone())
    }

    /// Puts a file holding `bytes` at `path`, replacing any file there, and
    /// makes both its name and its contents durable at once. Creates missing
    /// parent directories. Handles open on a replaced file keep it, as on
    /// POSIX. Injected faults do not apply.
    pub fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let path = normalize(path);
        let (dir, name) = split(&path)?;
        self.create_dir_all(dir)?;
        let mut state = self.state.lock();
        if state.dirs.contains_key(&path) {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        let id = state.next_file_id;
        state.next_file_id += 1;
        let node = Node {
            data: bytes.to_vec(),
            durable: bytes.to_vec(),
            ..Node::default()
        };
        state.files.insert(id, node);
        let entries = state.dir_mut(dir)?;
        let replaced = [
            entries.current.insert(name.to_owned(), id),
            entries.durable.insert(name.to_owned(), id),
        ];
        for old in replaced.into_iter().flatten() {
            state.release_if_orphan(old);
        }
        Ok(())
    }

    /// XORs the byte at `offset` of the file at `path` with `xor_mask`, in
    /// both its current and its durable contents where they reach `offset`,
    /// as media corruption would. Fails with `NotFound` if there is no such
    /// file and `InvalidInput` if neither contents reach `offset`.
    pub fn corrupt(&self, path: &Path, offset: u64, xor_mask: u8) -> io::Result<()> {
        let path = normalize(path);
        let mut state = self.state.lock();
        let id = state.lookup(&path)?;
        let node = state.node_mut(id);
        let index = usize::try_from(offset).unwrap_or(usize::MAX);
        let mut flipped = false;
        for contents in [&mut node.data, &mut node.durable] {
            if let Some(byte) = contents.get_mut(index) {
                *byte ^= xor_mask;
                flipped = true;
            }
        }
        if flipped {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: offset {offset} is past the end", path.display()),
            ))
        }
    }

    /// How many times `sync_data` was called on a live handle, whether it
    /// failed or not.
    pub fn sync_data_calls(&self) -> u64 {
        self.state.lock().sync_data_calls
    }

    /// Calls `observe` at the start of every later `sync_data` on a live
    /// handle, on the thread that syncs, with no lock of this file system
    /// held: for a test to see which thread syncs, and how it runs.
    /// Replaces any earlier observer.
    pub fn observe_sync_data(&self, observe: impl Fn() + Send + Sync + 'static) {
        self.state.lock().sync_observer = Some(Arc::new(observe));
    }

    /// How many times `sync_dir` was called, whether it failed or not.
    pub fn sync_dir_calls(&self) -> u64 {
        self.state.lock().sync_dir_calls
    }

    /// How many times `wait_write_back` was called on a live handle,
    /// whether it failed or not.
    pub fn write_back_waits(&self) -> u64 {
        self.state.lock().write_back_waits
    }

    /// How many times `prepare_writes` was called on a live handle.
    pub fn prepare_writes_calls(&self) -> u64 {
        self.state.lock().prepare_writes_calls
    }
}

impl Fs for MemFs {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn FsFile>> {
        let path = normalize(path);
        let mut state = self.state.lock();
        state.check_fault(Op::Create)?;
        let id = state.create_file(&path)?;
        Ok(state.open_handle(self, id, true))
    }

    fn open(&self, path: &Path, writable: bool) -> io::Result<Arc<dyn FsFile>> {
        let mut state = self.state.lock();
        let id = state.lookup(&normalize(path))?;
        Ok(state.open_handle(self, id, writable))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let path = normalize(path);
        let mut state = self.state.lock();
        let id = state.lookup(&path)?;
        state.check_fault(Op::Remove)?;
        let (dir, name) = split(&path)?;
        state.dir_mut(dir)?.current.remove(name);
        state.release_if_orphan(id);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from, to) = (normalize(from), normalize(to));
        let mut state = self.state.lock();
        let id = state.lookup(&from)?;
        let (from_dir, from_name) = split(&from)?;
        let (to_dir, to_name) = split(&to)?;
        if state.dirs.contains_key(&to) {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        state.dir(to_dir)?;
        if from == to {
            return Ok(());
        }
        state.dir_mut(from_dir)?.current.remove(from_name);
        let replaced = state
            .dir_mut(to_dir)?
            .current
            .insert(to_name.to_owned(), id);
        if let Some(replaced) = replaced {
            state.release_if_orphan(replaced);
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let dir = normalize(dir);
        let state = self.state.lock();
        let mut names: Vec<String> = state.dir(&dir)?.current.keys().cloned().collect();
        let subdirs = state
            .dirs
            .keys()
            .filter(|path| path.parent() == Some(dir.as_path()))
            .filter_map(|path| path.file_name()?.to_str());
        names.extend(subdirs.map(str::to_owned));
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let dir = normalize(dir);
        let mut state = self.state.lock();
        state.sync_dir_calls += 1;
        state.dir(&dir)?;
        state.check_fault(Op::Sync)?;
        let entries = state.dir_mut(&dir)?;
        let old = std::mem::replace(&mut entries.durable, entries.current.clone());
        for id in old.into_values() {
            state.release_if_orphan(id);
        }
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let dir = normalize(dir);
        let mut state = self.state.lock();
        let missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|ancestor| !state.dirs.contains_key(*ancestor))
            .collect();
        for ancestor in missing.into_iter().rev() {
            let (parent, name) = split(ancestor)?;
            if state.dir(parent)?.current.contains_key(name) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{}: a file has this name", ancestor.display()),
                ));
            }
            state.dirs.insert(ancestor.to_path_buf(), Dir::default());
        }
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        let path = normalize(path);
        let mut state = self.state.lock();
        if state.locks.contains_key(&path) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{}: already locked", path.display()),
            ));
        }
        // Like `OsFs`, which opens the lock file with `create(true)`. Faults
        // do not apply: the engine takes its lock before it writes anything.
        if let Err(error) = state.lookup(&path) {
            if error.kind() != io::ErrorKind::NotFound {
                return Err(error);
            }
            state.create_file(&path)?;
        }
        let token = state.next_lock_token;
        state.next_lock_token += 1;
        state.locks.insert(path.clone(), token);
        Ok(Box::new(LockGuard {
            fs: self.clone(),
            path,
            token,
        }))
    }
}

/// Holds a [`Fs::lock`] until dropped.
struct LockGuard {
    fs: MemFs,
    path: PathBuf,
    token: u64,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let mut state = self.fs.state.lock();
        // After a crash the lock may have been taken again by a new guard,
        // which this one must not release.
        if state.locks.get(&self.path) == Some(&self.token) {
            state.locks.remove(&self.path);
        }
    }
}

/// A handle on one file, valid until the next crash.
struct MemFile {
    fs: MemFs,
    id: FileId,
    generation: u64,
    writable: bool,
}

impl MemFile {
    /// Locks the state for a call on this handle, failing if it is stale or,
    /// for a write, read-only.
    fn state(&self, writes: bool) -> io::Result<parking_lot::MutexGuard<'_, State>> {
        let state = self.fs.state.lock();
        state.check_generation(self.generation)?;
        if writes && !self.writable {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        Ok(state)
    }

    /// An armed sync fault fails a write-back and forgets the file's
    /// unsynced writes, as a failed sync does.
    fn write_back_fault(&self, state: &mut State) -> io::Result<()> {
        if let Err(error) = state.check_fault(Op::Sync) {
            state.node_mut(self.id).drop_dirty();
            return Err(error);
        }
        Ok(())
    }
}

impl FsFile for MemFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut state = self.state(false)?;
        if buf.is_empty() {
            return Ok(());
        }
        let node = state.node_mut(self.id);
        let source = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(buf.len())?))
            .and_then(|range| node.data.get(range))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past the end of the file",
                )
            })?;
        buf.copy_from_slice(source);
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.state(true)?;
        let offset = checked_file_size(offset, buf.len())?;
        state.check_fault(Op::Write)?;
        if !buf.is_empty() {
            state.node_mut(self.id).write(buf, offset);
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let observer = self.state(false)?.sync_observer.clone();
        if let Some(observe) = observer {
            observe();
        }
        let mut state = self.state(false)?;
        state.sync_data_calls += 1;
        if let Err(error) = state.check_fault(Op::Sync) {
            state.node_mut(self.id).drop_dirty();
            return Err(error);
        }
        state.node_mut(self.id).sync();
        Ok(())
    }

    /// Nothing to write: the bytes are already where reads see them. Can
    /// fail as a sync does, forgetting the unsynced writes.
    fn start_write_back(&self, _offset: u64, _len: u64) -> io::Result<()> {
        let mut state = self.state(false)?;
        self.write_back_fault(&mut state)
    }

    /// As [`MemFile::start_write_back`], counted.
    fn wait_write_back(&self, _offset: u64, _len: u64) -> io::Result<()> {
        let mut state = self.state(false)?;
        state.write_back_waits += 1;
        self.write_back_fault(&mut state)
    }

    fn len(&self) -> io::Result<u64> {
        let mut state = self.state(false)?;
        Ok(state.node_mut(self.id).data.len() as u64)
    }

    /// Nothing to map: counted.
    fn prepare_writes(&self, _from: u64) {
        if let Ok(mut state) = self.state(false) {
            state.prepare_writes_calls += 1;
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state(true)?;
        let len = checked_file_size(len, 0)?;
        let op = if len > state.node_mut(self.id).data.len() {
            Op::Grow
        } else {
            Op::Shrink
        };
        state.check_fault(op)?;
        state.node_mut(self.id).set_len(len);
        Ok(())
    }

    /// Grows the file with zeros like [`FsFile::set_len`] (a reservation
    /// behaves like zeros written and not yet synced) and reports writes
    /// below `len` as cheap, which they are here.
    fn allocate(&self, len: u64) -> io::Result<bool> {
        let mut state = self.state(true)?;
        let len = checked_file_size(len, 0)?;
        if len > state.node_mut(self.id).data.len() {
            state.check_fault(Op::Grow)?;
            state.node_mut(self.id).set_len(len);
        }
        Ok(true)
    }
}

impl Drop for MemFile {
    fn drop(&mut self) {
        let mut state = self.fs.state.lock();
        if state.generation != self.generation {
            return;
        }
        let node = state.node_mut(self.id);
        node.open_handles = node
            .open_handles
            .checked_sub(1)
            .expect("each live handle is counted once");
        state.release_if_orphan(self.id);
    }
}

/// `offset` as an index, if `offset + len` stays within [`FILE_BYTES_MAX`];
/// `EFBIG` otherwise.
fn checked_file_size(offset: u64, len: usize) -> io::Result<usize> {
    let too_big = || io::Error::from_raw_os_error(libc::EFBIG);
    let end = offset.checked_add(len as u64).ok_or_else(too_big)?;
    if end > FILE_BYTES_MAX {
        return Err(too_big());
    }
    usize::try_from(offset).map_err(|_| too_big())
}

/// `path` with `.` dropped and `..` applied, so that one file has one key.
fn normalize(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

/// A normalized path's directory and file name.
fn split(path: &Path) -> io::Result<(&Path, &str)> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a UTF-8 file name in a directory", path.display()),
        )
    };
    let dir = path.parent().ok_or_else(invalid)?;
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(invalid)?;
    Ok((dir, name))
}

fn no_directory(dir: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such directory", dir.display()),
    )
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly on a broken expectation"
)]
mod tests {
    use super::*;

    const DIR: &str = "/data";

    fn setup() -> MemFs {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new(DIR)).unwrap();
        fs
    }

    fn path(name: &str) -> PathBuf {
        Path::new(DIR).join(name)
    }

    /// Creates `name` holding `bytes`, with name and contents durable.
    fn durable_file(fs: &MemFs, name: &str, bytes: &[u8]) -> Arc<dyn FsFile> {
        let file = fs.create(&path(name)).unwrap();
        file.write_all_at(bytes, 0).unwrap();
        file.sync_data().unwrap();
        fs.sync_dir(Path::new(DIR)).unwrap();
        file
    }

    fn contents(fs: &MemFs, name: &str) -> Option<Vec<u8>> {
        fs.read_file(&path(name))
    }

    /// The error of a call that must fail; `FsFile` handles are not `Debug`,
    /// so `unwrap_err` does not apply to them.
    fn error_of<T>(result: io::Result<T>) -> io::Error {
        match result {
            Ok(_) => panic!("the call succeeded"),
            Err(error) => error,
        }
    }

    fn raw_os_error(result: io::Result<impl Sized>) -> Option<i32> {
        result.err().and_then(|error| error.raw_os_error())
    }

    #[test]
    fn reads_see_unsynced_writes() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        file.write_all_at(b"hello", 0).unwrap();
        let mut buf = [0; 5];
        file.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"hello");
        assert_eq!(file.len().unwrap(), 5);
    }

    #[test]
    fn unsynced_append_is_lost_at_power_cut() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"synced");
        file.write_all_at(b" unsynced", 6).unwrap();
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"synced");
    }

    #[test]
    fn synced_data_survives_power_cut() {
        let fs = setup();
        durable_file(&fs, "a", b"synced");
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"synced");
    }

    #[test]
    fn unsynced_overwrite_of_synced_bytes_is_lost_at_power_cut() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"aaaa");
        file.write_all_at(b"b", 1).unwrap();
        file.sync_data().unwrap();
        file.write_all_at(b"c", 2).unwrap();
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"abaa");
    }

    #[test]
    fn created_file_disappears_at_power_cut_without_sync_dir() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        file.write_all_at(b"data", 0).unwrap();
        file.sync_data().unwrap();
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a"), None);
        assert!(fs.list(Path::new(DIR)).unwrap().is_empty());
    }

    #[test]
    fn created_file_survives_power_cut_after_sync_dir_but_unsynced_data_does_not() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        fs.sync_dir(Path::new(DIR)).unwrap();
        file.write_all_at(b"data", 0).unwrap();
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"");
    }

    #[test]
    fn removed_file_reappears_with_durable_contents_without_sync_dir() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"old");
        file.write_all_at(b"new", 0).unwrap();
        fs.remove(&path("a")).unwrap();
        assert_eq!(contents(&fs, "a"), None);
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"old");
    }

    #[test]
    fn removed_file_stays_removed_after_sync_dir() {
        let fs = setup();
        durable_file(&fs, "a", b"old");
        fs.remove(&path("a")).unwrap();
        fs.sync_dir(Path::new(DIR)).unwrap();
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a"), None);
        assert!(
            fs.state.lock().files.is_empty(),
            "the removed file was freed"
        );
    }

    #[test]
    fn unsynced_rename_is_undone_at_power_cut() {
        let fs = setup();
        durable_file(&fs, "old", b"x");
        durable_file(&fs, "target", b"y");
        fs.rename(&path("old"), &path("target")).unwrap();
        assert_eq!(fs.file_names(Path::new(DIR)), ["target"]);
        assert_eq!(contents(&fs, "target").unwrap(), b"x");
        fs.power_cut(None);
        assert_eq!(fs.file_names(Path::new(DIR)), ["old", "target"]);
        assert_eq!(contents(&fs, "old").unwrap(), b"x");
        assert_eq!(contents(&fs, "target").unwrap(), b"y");
    }

    #[test]
    fn synced_rename_replaces_target_at_power_cut() {
        let fs = setup();
        durable_file(&fs, "old", b"x");
        durable_file(&fs, "target", b"y");
        fs.rename(&path("old"), &path("target")).unwrap();
        fs.sync_dir(Path::new(DIR)).unwrap();
        fs.power_cut(None);
        assert_eq!(fs.file_names(Path::new(DIR)), ["target"]);
        assert_eq!(contents(&fs, "target").unwrap(), b"x");
    }

    #[test]
    fn rename_of_missing_file_is_not_found() {
        let fs = setup();
        let error = fs.rename(&path("missing"), &path("b")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn power_cut_invalidates_old_handles() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"data");
        fs.power_cut(None);
        let mut buf = [0; 1];
        for error in [
            file.read_exact_at(&mut buf, 0).unwrap_err(),
            file.write_all_at(b"x", 0).unwrap_err(),
            file.sync_data().unwrap_err(),
            file.len().unwrap_err(),
            file.set_len(0).unwrap_err(),
        ] {
            assert_eq!(error.kind(), io::ErrorKind::Other);
            assert_eq!(error.to_string(), "file handle from before a crash");
        }
        let reopened = fs.open(&path("a"), false).unwrap();
        assert_eq!(reopened.len().unwrap(), 4);
    }

    #[test]
    fn crash_process_keeps_unsynced_data_but_invalidates_handles() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        file.write_all_at(b"unsynced", 0).unwrap();
        fs.crash_process();
        assert_eq!(contents(&fs, "a").unwrap(), b"unsynced");
        assert_eq!(file.len().unwrap_err().kind(), io::ErrorKind::Other);
        // The kernel still holds the data unsynced: a power cut loses it.
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a"), None);
    }

    #[test]
    fn second_lock_on_same_path_would_block_until_guard_dropped() {
        let fs = setup();
        let guard = fs.lock(&path("LOCK")).unwrap();
        let error = fs.lock(&path("LOCK")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
        drop(guard);
        fs.lock(&path("LOCK")).unwrap();
    }

    #[test]
    fn lock_creates_its_file() {
        let fs = setup();
        let _guard = fs.lock(&path("LOCK")).unwrap();
        assert_eq!(fs.list(Path::new(DIR)).unwrap(), ["LOCK"]);
    }

    #[test]
    fn crashes_release_locks() {
        let fs = setup();
        let _first = fs.lock(&path("LOCK")).unwrap();
        fs.crash_process();
        let _second = fs.lock(&path("LOCK")).unwrap();
        fs.power_cut(None);
        fs.lock(&path("LOCK")).unwrap();
    }

    #[test]
    fn lock_guard_from_before_a_crash_does_not_release_the_new_lock() {
        let fs = setup();
        let old_guard = fs.lock(&path("LOCK")).unwrap();
        fs.crash_process();
        let _new_guard = fs.lock(&path("LOCK")).unwrap();
        drop(old_guard);
        let error = fs.lock(&path("LOCK")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn torn_power_cut_keeps_a_prefix_of_unsynced_append() {
        let mut lengths = BTreeSet::new();
        // Keeping all 10 bytes takes the longest length and the longest
        // prefix, 1 in 121 per seed.
        for seed in 0..1024 {
            let fs = setup();
            let file = durable_file(&fs, "a", b"synced:");
            file.write_all_at(b"0123456789", 7).unwrap();
            fs.power_cut(Some(seed));
            let after = contents(&fs, "a").unwrap();
            let full = b"synced:0123456789";
            assert!(after.len() >= 7, "seed {seed}: synced bytes were lost");
            assert!(
                after.len() <= full.len(),
                "seed {seed}: grew past the append"
            );
            // A prefix of the append made it; the rest of the length is zeros.
            let kept = (7..after.len())
                .find(|&at| after[at] != full[at])
                .unwrap_or(after.len());
            assert!(
                after[kept..].iter().all(|&byte| byte == 0),
                "seed {seed}: {after:?}"
            );
            lengths.insert((kept, after.len()));
        }
        assert!(
            lengths.contains(&(7, 7)),
            "no seed dropped the whole append"
        );
        assert!(lengths.contains(&(17, 17)), "no seed kept the whole append");
        assert!(
            lengths.iter().any(|&(kept, len)| kept < len),
            "no seed kept the length without the bytes: {lengths:?}"
        );
        assert!(lengths.len() > 3, "tears land at few places: {lengths:?}");
    }

    #[test]
    fn torn_power_cut_keeps_a_prefix_of_unsynced_overwrite() {
        let mut kept = BTreeSet::new();
        for seed in 0..64 {
            let fs = setup();
            let file = durable_file(&fs, "a", b"aaaaaaaa");
            file.write_all_at(b"bbbb", 2).unwrap();
            fs.power_cut(Some(seed));
            let after = contents(&fs, "a").unwrap();
            let overwritten = after.iter().filter(|&&byte| byte == b'b').count();
            let expected: Vec<u8> = [
                &b"aa"[..],
                &b"bbbb"[..overwritten],
                &b"aaaaaa"[overwritten..],
            ]
            .concat();
            assert_eq!(after, expected, "seed {seed}");
            kept.insert(overwritten);
        }
        assert_eq!(kept.len(), 5, "every prefix length occurs: {kept:?}");
    }

    #[test]
    fn torn_power_cut_is_reproducible_from_its_seed() {
        let run = |seed| {
            let fs = setup();
            let file = durable_file(&fs, "a", &[1; 100]);
            file.write_all_at(&[2; 300], 50).unwrap();
            fs.power_cut(Some(seed));
            contents(&fs, "a").unwrap()
        };
        assert_eq!(run(7), run(7));
        assert!(
            (0..16).any(|seed| run(seed) != run(7)),
            "the seed changes nothing"
        );
    }

    #[test]
    fn power_cut_leaves_durable_state_unchanged_by_later_syncs() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"synced");
        file.write_all_at(b"!", 6).unwrap();
        fs.power_cut(Some(3));
        let after_cut = contents(&fs, "a").unwrap();
        let file = fs.open(&path("a"), true).unwrap();
        file.sync_data().unwrap();
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), after_cut);
    }

    #[test]
    fn no_space_fault_fails_writes_and_create_with_enospc() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"data");
        fs.inject(FaultKind::NoSpace);
        assert_eq!(raw_os_error(file.write_all_at(b"x", 0)), Some(libc::ENOSPC));
        assert_eq!(raw_os_error(file.set_len(100)), Some(libc::ENOSPC));
        assert_eq!(raw_os_error(fs.create(&path("b"))), Some(libc::ENOSPC));
        assert_eq!(contents(&fs, "a").unwrap(), b"data");
        assert_eq!(contents(&fs, "b"), None);
        fs.clear_faults();
        file.write_all_at(b"x", 0).unwrap();
        fs.create(&path("b")).unwrap();
    }

    #[test]
    fn eio_fault_fails_writes_and_leaves_contents_unchanged() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"data");
        fs.inject(FaultKind::Eio);
        assert_eq!(raw_os_error(file.write_all_at(b"x", 0)), Some(libc::EIO));
        assert_eq!(raw_os_error(file.set_len(1)), Some(libc::EIO));
        assert_eq!(contents(&fs, "a").unwrap(), b"data");
        file.sync_data().unwrap();
    }

    #[test]
    fn failed_sync_does_not_make_data_durable() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"synced");
        file.write_all_at(b"!", 6).unwrap();
        fs.inject(FaultKind::EioOnSync);
        assert_eq!(raw_os_error(file.sync_data()), Some(libc::EIO));
        assert_eq!(
            contents(&fs, "a").unwrap(),
            b"synced!",
            "reads still see it"
        );
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"synced");
    }

    #[test]
    fn writes_dropped_by_failed_sync_stay_lost_after_a_later_sync() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"aaaa");
        file.write_all_at(b"b", 0).unwrap();
        file.write_all_at(b"lost", 4).unwrap();
        fs.inject_nth(FaultKind::EioOnSync, 1);
        assert_eq!(raw_os_error(file.sync_data()), Some(libc::EIO));
        file.write_all_at(b"c", 1).unwrap();
        file.sync_data().unwrap();
        fs.power_cut(None);
        // The overwrite keeps the old byte; the lost append came back as
        // zeros because the length was made durable by the second sync.
        assert_eq!(contents(&fs, "a").unwrap(), b"acaa\0\0\0\0");
    }

    #[test]
    fn failed_sync_dir_leaves_entries_not_durable() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        file.sync_data().unwrap();
        fs.inject_nth(FaultKind::EioOnSync, 1);
        assert_eq!(raw_os_error(fs.sync_dir(Path::new(DIR))), Some(libc::EIO));
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a"), None);
    }

    #[test]
    fn nth_write_fault_fails_only_that_write() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        fs.inject_nth(FaultKind::Eio, 3);
        file.write_all_at(b"1", 0).unwrap();
        file.write_all_at(b"2", 1).unwrap();
        assert_eq!(raw_os_error(file.write_all_at(b"3", 2)), Some(libc::EIO));
        file.write_all_at(b"4", 2).unwrap();
        assert_eq!(contents(&fs, "a").unwrap(), b"124");
        assert!(
            fs.state.lock().faults.is_empty(),
            "a fired fault is disarmed"
        );
    }

    #[test]
    fn nth_fault_counts_only_operations_it_applies_to() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        fs.inject_nth(FaultKind::EioOnSync, 2);
        file.write_all_at(b"x", 0).unwrap();
        file.sync_data().unwrap();
        file.write_all_at(b"y", 1).unwrap();
        assert_eq!(raw_os_error(file.sync_data()), Some(libc::EIO));
        file.sync_data().unwrap();
    }

    #[test]
    fn sync_data_calls_counts_every_call() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        file.sync_data().unwrap();
        fs.inject(FaultKind::EioOnSync);
        file.sync_data().unwrap_err();
        fs.sync_dir(Path::new(DIR)).unwrap_err();
        assert_eq!(fs.sync_data_calls(), 2);
        assert_eq!(fs.sync_dir_calls(), 1);
    }

    #[test]
    fn create_fails_if_file_exists() {
        let fs = setup();
        fs.create(&path("a")).unwrap();
        let error = error_of(fs.create(&path("a")));
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn create_in_missing_directory_is_not_found() {
        let fs = setup();
        let error = error_of(fs.create(Path::new("/missing/a")));
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn open_fails_if_file_missing() {
        let fs = setup();
        let error = error_of(fs.open(&path("a"), false));
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        let error = fs.remove(&path("a")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn read_past_end_is_unexpected_eof() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"abc");
        let mut buf = [0; 2];
        let error = file.read_exact_at(&mut buf, 2).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        let error = file.read_exact_at(&mut buf, u64::MAX).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn write_past_end_zero_fills_the_gap() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        file.write_all_at(b"ab", 0).unwrap();
        file.write_all_at(b"z", 5).unwrap();
        assert_eq!(contents(&fs, "a").unwrap(), b"ab\0\0\0z");
    }

    #[test]
    fn write_beyond_the_size_limit_is_efbig() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        assert_eq!(
            raw_os_error(file.write_all_at(b"x", FILE_BYTES_MAX)),
            Some(libc::EFBIG)
        );
        assert_eq!(
            raw_os_error(file.write_all_at(b"x", u64::MAX)),
            Some(libc::EFBIG)
        );
        assert_eq!(file.len().unwrap(), 0);
    }

    #[test]
    fn set_len_truncates_and_extends_with_zeros() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"abcdef");
        file.set_len(2).unwrap();
        assert_eq!(contents(&fs, "a").unwrap(), b"ab");
        file.set_len(4).unwrap();
        assert_eq!(contents(&fs, "a").unwrap(), b"ab\0\0");
    }

    #[test]
    fn unsynced_truncation_is_undone_at_power_cut() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"abcdef");
        file.set_len(2).unwrap();
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"abcdef");
    }

    #[test]
    fn truncate_then_extend_is_durable_as_zeros_after_sync() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"abcdef");
        file.set_len(2).unwrap();
        file.write_all_at(b"z", 5).unwrap();
        file.sync_data().unwrap();
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"ab\0\0\0z");
    }

    #[test]
    fn read_only_handle_rejects_writes() {
        let fs = setup();
        durable_file(&fs, "a", b"abc");
        let file = fs.open(&path("a"), false).unwrap();
        assert_eq!(raw_os_error(file.write_all_at(b"x", 0)), Some(libc::EBADF));
        assert_eq!(raw_os_error(file.set_len(0)), Some(libc::EBADF));
        assert_eq!(contents(&fs, "a").unwrap(), b"abc");
    }

    #[test]
    fn list_returns_current_files_and_subdirectories() {
        let fs = setup();
        fs.create(&path("a")).unwrap();
        durable_file(&fs, "b", b"");
        fs.remove(&path("b")).unwrap();
        fs.create_dir_all(&path("sub/deeper")).unwrap();
        let mut names = fs.list(Path::new(DIR)).unwrap();
        names.sort();
        assert_eq!(names, ["a", "sub"]);
        assert_eq!(fs.file_names(Path::new(DIR)), ["a"]);
        let error = fs.list(Path::new("/missing")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn create_dir_all_fails_where_a_file_has_the_name() {
        let fs = setup();
        fs.create(&path("a")).unwrap();
        let error = fs.create_dir_all(&path("a/b")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn paths_are_normalized() {
        let fs = setup();
        let file = fs.create(Path::new("/data/./x/../a")).unwrap();
        file.write_all_at(b"1", 0).unwrap();
        assert_eq!(contents(&fs, "a").unwrap(), b"1");
        fs.create_dir_all(Path::new("rel/dir/")).unwrap();
        fs.write_file(Path::new("./rel/dir/f"), b"2").unwrap();
        assert_eq!(fs.read_file(Path::new("rel/dir/f")).unwrap(), b"2");
    }

    #[test]
    fn removed_file_stays_usable_through_an_open_handle() {
        let fs = setup();
        let file = fs.create(&path("a")).unwrap();
        fs.remove(&path("a")).unwrap();
        file.write_all_at(b"still here", 0).unwrap();
        let mut buf = [0; 10];
        file.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"still here");
        drop(file);
        assert!(fs.state.lock().files.is_empty(), "the last handle freed it");
    }

    #[test]
    fn write_file_is_durable_at_once() {
        let fs = MemFs::new();
        fs.write_file(&path("a"), b"planted").unwrap();
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"planted");
    }

    #[test]
    fn corrupt_flips_bits_in_current_and_durable_contents() {
        let fs = setup();
        let file = durable_file(&fs, "a", b"abc");
        file.write_all_at(b"d", 3).unwrap();
        fs.corrupt(&path("a"), 1, 0x01).unwrap();
        fs.corrupt(&path("a"), 3, 0x01).unwrap();
        assert_eq!(contents(&fs, "a").unwrap(), b"acce");
        fs.power_cut(None);
        assert_eq!(contents(&fs, "a").unwrap(), b"acc");
        let error = fs.corrupt(&path("a"), 3, 0x01).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn handles_work_from_many_threads() {
        let fs = setup();
        std::thread::scope(|scope| {
            for thread in 0..4u8 {
                let fs = fs.clone();
                scope.spawn(move || {
                    let file = fs.create(&path(&thread.to_string())).unwrap();
                    for offset in 0..1000u64 {
                        file.write_all_at(&[thread], offset).unwrap();
                    }
                    file.sync_data().unwrap();
                });
            }
        });
        for thread in 0..4u8 {
            assert_eq!(
                contents(&fs, &thread.to_string()).unwrap(),
                vec![thread; 1000]
            );
        }
    }

    #[test]
    fn ranges_merge_overlapping_and_adjacent_inserts() {
        let mut ranges = Ranges::default();
        ranges.insert(10, 20);
        ranges.insert(30, 40);
        ranges.insert(20, 25);
        ranges.insert(5, 5);
        assert_eq!(ranges.iter().collect::<Vec<_>>(), [(10, 25), (30, 40)]);
        ranges.insert(0, 35);
        assert_eq!(ranges.iter().collect::<Vec<_>>(), [(0, 40)]);
        ranges.insert(50, 60);
        ranges.truncate(55);
        assert_eq!(ranges.iter().collect::<Vec<_>>(), [(0, 40), (50, 55)]);
        ranges.truncate(50);
        assert_eq!(ranges.iter().collect::<Vec<_>>(), [(0, 40)]);
    }

    /// A byte-by-byte model of one file: obviously right, too slow for use.
    #[derive(Default)]
    struct ModelFile {
        current: Vec<u8>,
        durable: Vec<u8>,
        dirty: Vec<bool>,
    }

    impl ModelFile {
        fn write(&mut self, buf: &[u8], offset: usize) {
            let end = offset + buf.len();
            if end > self.current.len() {
                // The zero-filled gap counts as written.
                let old_len = self.current.len();
                self.current.resize(end, 0);
                self.dirty.resize(end, false);
                self.dirty[old_len..].fill(true);
            }
            self.current[offset..end].copy_from_slice(buf);
            self.dirty[offset..end].fill(true);
        }

        fn set_len(&mut self, len: usize) {
            let old_len = self.current.len();
            self.current.resize(len, 0);
            self.dirty.resize(len, true);
            if len > old_len {
                self.dirty[old_len..].fill(true);
            }
        }

        fn sync(&mut self, succeeds: bool) {
            if succeeds {
                self.durable.resize(self.current.len(), 0);
                for (index, _) in self.dirty.iter().enumerate().filter(|(_, &dirty)| dirty) {
                    self.durable[index] = self.current[index];
                }
            }
            self.dirty.fill(false);
        }

        fn power_cut(&mut self) {
            self.current.clone_from(&self.durable);
            self.dirty = vec![false; self.current.len()];
        }

        /// Checks that a torn power cut left each byte as it was durable, as
        /// it was written, or zero, then takes that as the new durable state.
        fn torn_power_cut(&mut self, after: &[u8]) {
            let shorter = self.current.len().min(self.durable.len());
            let longer = self.current.len().max(self.durable.len());
            assert!(after.len() >= shorter && after.len() <= longer);
            for (index, &byte) in after.iter().enumerate() {
                let allowed = [self.durable.get(index), self.current.get(index), Some(&0)];
                assert!(allowed.contains(&Some(&byte)), "byte {index} is {byte}");
            }
            self.durable = after.to_vec();
            self.power_cut();
        }
    }

    #[test]
    fn random_operations_match_a_bytewise_model() {
        let fs = setup();
        durable_file(&fs, "a", b"");
        let mut file = fs.open(&path("a"), true).unwrap();
        let mut model = ModelFile::default();
        let mut rng = SplitMix64(42);
        for step in 0..20_000u64 {
            let len = model.current.len();
            match rng.below(10) {
                0..=4 => {
                    let offset = rng.below(len + 20);
                    let byte = u8::try_from(rng.below(255) + 1).unwrap();
                    let buf = vec![byte; rng.below(30) + 1];
                    file.write_all_at(&buf, offset as u64).unwrap();
                    model.write(&buf, offset);
                }
                5 => {
                    let new_len = rng.below(len + 20);
                    file.set_len(new_len as u64).unwrap();
                    model.set_len(new_len);
                }
                6 | 7 => {
                    let succeeds = rng.below(4) != 0;
                    if !succeeds {
                        fs.inject_nth(FaultKind::EioOnSync, 1);
                    }
                    assert_eq!(file.sync_data().is_ok(), succeeds);
                    model.sync(succeeds);
                }
                8 => {
                    let tear_seed = rng.below(2) == 0;
                    fs.power_cut(tear_seed.then_some(step));
                    file = fs.open(&path("a"), true).unwrap();
                    if tear_seed {
                        model.torn_power_cut(&contents(&fs, "a").unwrap());
                    } else {
                        model.power_cut();
                    }
                }
                _ => {
                    fs.crash_process();
                    file = fs.open(&path("a"), true).unwrap();
                }
            }
            assert_eq!(contents(&fs, "a").unwrap(), model.current, "step {step}");
        }
    }
}
