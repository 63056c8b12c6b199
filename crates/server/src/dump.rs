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
//! reads as such since it is past 30 days. So a dump also loads into any
//! memcached-compatible server as it stands (`noreply`: nothing comes
//! back), and [`import`] takes any stream of `set` commands, whoever wrote
//! it. The CAS values are not kept: a server gives its own.
//!
//! Both work on a data directory no server has open (the engine's lock
//! file says if one has), opening it as a start would.

use crate::ServerConfig;
use bytes::{Buf, BytesMut};
use larder_engine::{Durability, Engine, Expiry, Item, StoreMode, Ticket};
use larder_protocol::{parse, Limits, Parsed, Request, StoreCommand};
use std::fs::File;
use std::io::{Read, Write};
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

/// One item as a `set` command.
fn write_set(out: &mut dyn Write, key: &[u8], item: &Item) -> std::io::Result<()> {
    // Stored expiry times are absolute; the protocol's exptime is an i32.
    let exptime = item.exptime.min(i32::MAX as u32);
    out.write_all(b"set ")?;
    out.write_all(key)?;
    write!(
        out,
        " {} {exptime} {} noreply\r\n",
        item.flags,
        item.value.len()
    )?;
    out.write_all(&item.value)?;
    out.write_all(b"\r\n")
}

/// Stores every item of the dump at `path` in the data directory in
/// `config`, after reading the whole dump once to check it: a dump with
/// anything but `set` commands in it, or a value over the item size limit,
/// changes nothing. Items are stored as a `set` stores them (a key already
/// there gets the dump's value; others stay), with `none` durability, and
/// the directory is synced once at the end: the import is durable when
/// this returns. A failure while storing (a full disk, say) leaves the
/// items stored before it.
pub fn import(config: &ServerConfig, path: &Path) -> Result<Summary, DumpError> {
    let limits = Limits::default()
        .with_item_bytes_max(config.max_item_size)
        .map_err(|error| DumpError::Config(format!("max item size: {error}")))?;
    let mut checked = Summary::default();
    for_each_set(path, &limits, |_, value, _, _| {
        checked.items += 1;
        checked.value_bytes += value.len() as u64;
        Ok(())
    })?;
    let mut engine_config = config.engine_config();
    engine_config.durability = Durability::None;
    let engine = Engine::open(engine_config)?;
    let mut last = Ticket::NONE;
    let stored = for_each_set(path, &limits, |key, value, flags, exptime| {
        let expiry = Expiry::from_memcached(i64::from(exptime), engine.clock().now());
        let (_, ticket) = engine.store(StoreMode::Set, key, value, flags, expiry)?;
        last = ticket;
        Ok(())
    });
    // Written out and synced even after a failure, so that what was
    // stored stays.
    let committed = engine.commit(last);
    let closed = engine.close();
    committed?;
    stored?;
    closed?;
    Ok(checked)
}

/// Reads the dump at `path` and hands each `set` command's key, value,
/// flags and exptime to `store`; fails at the first request that is not a
/// well-formed `set`.
fn for_each_set(
    path: &Path,
    limits: &Limits,
    mut store: impl FnMut(&[u8], &[u8], u32, i32) -> Result<(), DumpError>,
) -> Result<(), DumpError> {
    let opening = format!("opening {}", path.display());
    let mut file = File::open(path).map_err(io_error(opening))?;
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
                request: Request::Store(set),
                frame_bytes,
            }) if set.command == StoreCommand::Set => {
                store(set.key, set.value, set.flags, set.exptime)?;
                input.advance(frame_bytes);
                request += 1;
                offset += frame_bytes as u64;
                continue;
            }
            Ok(Parsed::Complete { .. }) => {
                let name = input[..]
                    .split(|&byte| byte == b' ' || byte == b'\r' || byte == b'\n')
                    .next()
                    .unwrap_or_default();
                let name = String::from_utf8_lossy(name).into_owned();
                let reason = format!("`{name}` is not a `set` command, the only one a dump holds");
                return Err(refuse(request, offset, reason));
            }
            Ok(Parsed::Incomplete { frame_bytes }) => frame_bytes.unwrap_or(0),
            Err(error) => return Err(refuse(request, offset, error.kind.to_string())),
        };
        let room = READ_BYTES.max(wanted.saturating_sub(input.len()));
        let read = read_more(&mut file, &mut input, room)
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
