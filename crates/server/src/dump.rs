//! Export and import: a data directory's live items as a stream of
//! memcached `set` commands.
//!
//! The dump is memcached's text protocol, one command per item:
//!
//! ```text
//! set <key> <flags> <exptime> <bytes> noreply\r\n<value>\r\n
//! ```
//!
//! with the expiry as an absolute unix time (0 for none), which memcached
//! reads as such since it is past 30 days. A key the text protocol cannot
//! carry (one stored in base64 through the meta protocol, holding a
//! space, a control byte or the like) goes as a meta set with the key in
//! base64 instead:
//!
//! ```text
//! ms <base64 key> <bytes> b F<flags> T<exptime> q\r\n<value>\r\n
//! ```
//!
//! So a dump also loads into any memcached-compatible server as it stands
//! (`noreply` and `q`: nothing comes back), and [`import`] takes any
//! stream of such commands, whoever wrote it. The CAS values are not kept:
//! a server gives its own.
//!
//! Both work on a data directory no server has open (the engine's lock
//! file says if one has), opening it as a start would.

use crate::ServerConfig;
use bytes::{Buf, BytesMut};
use larder_engine::{Durability, Engine, Expiry, Item, StoreMode, Ticket};
use larder_protocol::{parse, KeyBytes, Limits, MetaSetMode, Parsed, Request, StoreCommand};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Bytes read from a dump at a time (a longer request is read whole).
const READ_BYTES: usize = 1 << 20;

/// What an export or import went over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Items written out, or stored.
    pub items: u64,
    /// Their values' bytes.
    pub value_bytes: u64,
}

/// Why an export or import stopped.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The data directory could not be opened, read or written.
    #[error("{0}")]
    Engine(#[from] larder_engine::Error),
    /// A file could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The dump is not a stream of `set` commands.
    #[error("{file}: request {request} (at byte {offset}): {reason}")]
    Input {
        /// The dump.
        file: PathBuf,
        /// Which request, counting from 1.
        request: u64,
        /// Where it starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The settings are unusable.
    #[error("{0}")]
    Config(String),
    /// The dump changed between the import's two reads of it.
    #[error("{} changed while it was being imported", .0.display())]
    Changed(PathBuf),
}

impl DumpError {
    /// Whether the input was at fault, rather than the disk or the data
    /// directory.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, DumpError::Input { .. } | DumpError::Config(_))
    }
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> DumpError {
    move |source| DumpError::Io { context, source }
}

/// Writes every live item of the data directory in `config` to `out` as
/// `set` commands (see the module documentation).
pub fn export(config: &ServerConfig, out: &mut dyn Write) -> Result<Summary, DumpError> {
    // Opening would make an empty one, and export nothing from it.
    if !config.data_dir.is_dir() {
        let dir = config.data_dir.display();
        return Err(DumpError::Config(format!("no data directory at {dir}")));
    }
    let mut engine_config = config.engine_config();
    // Nothing is written but what opening writes; no compaction meanwhile.
    engine_config.background_threads = false;
    let engine = Engine::open(engine_config)?;
    let mut summary = Summary::default();
    let written = engine.for_each_live(|key, item| {
        write_set(out, key, &item).map_err(io_error("writing the dump".to_owned()))?;
        summary.items += 1;
        summary.value_bytes += item.value.len() as u64;
        Ok::<(), DumpError>(())
    });
    let closed = engine.close();
    written?;
    closed?;
    out.flush()
        .map_err(io_error("writing the dump".to_owned()))?;
    Ok(summary)
}

/// One item as a `set` command, or an `ms` with its key in base64 where
/// the text protocol cannot carry the key. (Such a key came in base64,
/// whose 250 bytes at most on the wire decode to 186, so its base64 fits
/// again.)
fn write_set(out: &mut dyn Write, key: &[u8], item: &Item) -> std::io::Result<()> {
    // Stored expiry times are absolute; the protocol's exptime is an i32.
    let exptime = item.exptime.min(i32::MAX as u32);
    let (flags, len) = (item.flags, item.value.len());
    // As a text protocol key may be: no space, control byte or DEL (bytes
    // past ASCII, UTF-8 say, are fine).
    if key.iter().all(|&byte| byte > b' ' && byte != 0x7f) {
        out.write_all(b"set ")?;
        out.write_all(key)?;
        write!(out, " {flags} {exptime} {len} noreply\r\n")?;
    } else {
        let mut encoded = Vec::with_capacity(key.len() * 4 / 3 + 4);
        larder_protocol::encode_base64(key, &mut encoded);
        out.write_all(b"ms ")?;
        out.write_all(&encoded)?;
        write!(out, " {len} b F{flags} T{exptime} q\r\n")?;
    }
    out.write_all(&item.value)?;
    out.write_all(b"\r\n")
}

/// Stores every item of the dump at `path` (a regular file: it is read
/// twice) in the data directory in `config`, after reading the whole dump
/// once to check it: a dump with anything but plain stores in it (`set`,
/// or `ms` with no flags but `b`, `F`, `T` and `q`), or a value over the
/// item size limit, changes nothing. Items are stored as a `set` stores
/// them (a key already there gets the dump's value; others stay), with
/// `none` durability, and the directory is synced once at the end: the
/// import is durable when this returns. A failure while storing (a full
/// disk, say) leaves the items stored before it, synced as far as the disk
/// allows.
pub fn import(config: &ServerConfig, path: &Path) -> Result<Summary, DumpError> {
    let limits = Limits::default()
        .with_item_bytes_max(config.max_item_size)
        .map_err(|error| DumpError::Config(format!("max item size: {error}")))?;
    let mut file = File::open(path).map_err(io_error(format!("opening {}", path.display())))?;
    let before = file_identity(&file, path)?;
    if !before.regular {
        return Err(DumpError::Config(format!(
            "{} is not a regular file: an import reads its dump twice, so save it to a file first",
            path.display()
        )));
    }
    let mut checked = Summary::default();
    for_each_set(&mut file, path, &limits, |_, value, _, _| {
        checked.items += 1;
        checked.value_bytes += value.len() as u64;
        Ok(())
    })?;
    file.seek(SeekFrom::Start(0))
        .map_err(io_error(format!("reading {}", path.display())))?;
    let changed = || DumpError::Changed(path.to_owned());
    if file_identity(&file, path)? != before {
        return Err(changed());
    }
    let mut engine_config = config.engine_config();
    engine_config.durability = Durability::None;
    let engine = Engine::open(engine_config)?;
    let mut last = Ticket::NONE;
    let mut stored = Summary::default();
    let storing = for_each_set(&mut file, path, &limits, |key, value, flags, exptime| {
        let expiry = Expiry::from_memcached(i64::from(exptime), engine.clock().now());
        let (_, ticket) = engine.store(StoreMode::Set, key, value, flags, expiry)?;
        last = ticket;
        stored.items += 1;
        stored.value_bytes += value.len() as u64;
        Ok(())
    });
    // Written out and synced even after a failure, so that what was
    // stored stays; a sync that failed at any time is an error here.
    let synced = engine
        .commit(last)
        .and_then(|()| engine.sync())
        .map_err(DumpError::from);
    let closed = engine.close().map_err(DumpError::from);
    storing.and(synced).and(closed)?;
    if stored != checked {
        return Err(changed());
    }
    Ok(stored)
}

/// What tells whether a file changed between two reads: its kind, length
/// and modification time.
#[derive(Debug, PartialEq, Eq)]
struct FileIdentity {
    regular: bool,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

fn file_identity(file: &File, path: &Path) -> Result<FileIdentity, DumpError> {
    let metadata = file
        .metadata()
        .map_err(io_error(format!("reading {}", path.display())))?;
    Ok(FileIdentity {
        regular: metadata.is_file(),
        len: metadata.len(),
        modified: metadata.modified().ok(),
    })
}

/// Reads the dump in `file` (at `path`) from where it stands and hands
/// each store's key, value, flags and exptime to `store`; fails at the
/// first request that is not a plain store (see [`import`]).
fn for_each_set(
    file: &mut File,
    path: &Path,
    limits: &Limits,
    mut store: impl FnMut(&[u8], &[u8], u32, i32) -> Result<(), DumpError>,
) -> Result<(), DumpError> {
    let mut input = BytesMut::with_capacity(READ_BYTES);
    let (mut request, mut offset) = (1u64, 0u64);
    let refuse = |request, offset, reason: String| DumpError::Input {
        file: path.to_owned(),
        request,
        offset,
        reason,
    };
    loop {
        let wanted = match parse(&input, limits) {
            Ok(Parsed::Complete {
                request: complete,
                frame_bytes,
            }) => {
                if let Some((key, value, flags, exptime)) = plain_store(&complete) {
                    store(&key, value, flags, exptime)?;
                    input.advance(frame_bytes);
                    request += 1;
                    offset += frame_bytes as u64;
                    continue;
                }
                let name = input[..]
                    .split(|&byte| byte == b' ' || byte == b'\r' || byte == b'\n')
                    .next()
                    .unwrap_or_default();
                let name = String::from_utf8_lossy(name).into_owned();
                let reason = format!(
                    "`{name}` is not a plain store (`set`, or `ms` with no flags but b, F, T and q), \
                     the only command a dump holds"
                );
                return Err(refuse(request, offset, reason));
            }
            Ok(Parsed::Incomplete { frame_bytes }) => frame_bytes.unwrap_or(0),
            Err(error) => return Err(refuse(request, offset, error.kind.to_string())),
        };
        let room = READ_BYTES.max(wanted.saturating_sub(input.len()));
        let read = read_more(file, &mut input, room)
            .map_err(io_error(format!("reading {}", path.display())))?;
        if read == 0 {
            if input.is_empty() {
                return Ok(());
            }
            let reason = "the file ends inside this request".to_owned();
            return Err(refuse(request, offset, reason));
        }
    }
}

/// A plain store's key, value, flags and exptime: a `set`, or an `ms`
/// that only stores its value, as a `set` does (its flags at most `b`, the
/// key in base64, `F` client flags, `T` expiry and `q` quiet).
fn plain_store<'a>(request: &Request<'a>) -> Option<(KeyBytes<'a>, &'a [u8], u32, i32)> {
    match request {
        Request::Store(set) if set.command == StoreCommand::Set => {
            Some((KeyBytes::Plain(set.key), set.value, set.flags, set.exptime))
        }
        Request::MetaSet(set) => {
            let flags = &set.flags;
            let plain = flags
                .requested()
                .all(|letter| matches!(letter, b'b' | b'F' | b'T' | b'q'));
            (plain && set.mode == MetaSetMode::Set).then(|| {
                let (client_flags, exptime) = (flags.client_flags, flags.ttl);
                let (client_flags, exptime) = (client_flags.unwrap_or(0), exptime.unwrap_or(0));
                (set.key.bytes(), set.value, client_flags, exptime)
            })
        }
        _ => None,
    }
}

/// Appends up to `room` bytes from `file` to `input`; returns how many (0
/// at the end of the file).
fn read_more(file: &mut File, input: &mut BytesMut, room: usize) -> std::io::Result<usize> {
    let start = input.len();
    input.resize(start + room, 0);
    let read = loop {
        match file.read(&mut input[start..]) {
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            other => break other,
        }
    };
    input.truncate(start + *read.as_ref().unwrap_or(&0));
    read
}
