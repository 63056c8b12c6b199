//! Markers of unsynced tails: `{id:010}.unsynced` says that segment `id`'s
//! bytes from an offset on went through a failed `fdatasync`.
//!
//! After an `EIO` from `fdatasync`, Linux forgets the file's dirty pages:
//! reads still see the bytes while they stay cached, but no later sync
//! writes them, and a sync in a later process succeeds without them. A
//! process killed before [`crate::log::Log::heal`] has rewritten those
//! records elsewhere leaves a segment whose tail reads well and is not on
//! disk, which nothing else could tell; a power cut after the restart would
//! take back records the restarted server had served as durable. And once
//! heal has made a newer log segment, a power cut leaves damage in the
//! healed segment's tail, which is no longer the newest and would be
//! refused as corruption.
//!
//! So the log writes a marker at the failure (the kernel keeps it through a
//! kill even when the disk cannot sync it). Heal makes it durable before it
//! writes the copy to a new segment; once the copy is durable it marks the
//! segment *copied*, then cuts it back to its last good sync and removes
//! the marker (where neither the mark nor the cut holds, the segment keeps
//! its tail and the marker until the next open, and the tombstone check
//! counts it as unread meanwhile: see [`crate::segment::Segment::unsure_tail`]).
//! Open (see [`crate::recovery`]) cuts a segment marked copied
//! at the mark: everything past it is in the copy. It rewrites a segment
//! marked but not copied whole, as reads see it, up to the first damage
//! past the mark (a partial copy may hold some of the same records too:
//! recovery resolves by seq). Either way it then removes the marker.
//!
//! Who writes and reads markers: [`note_failure`] runs on whichever thread
//! saw the sync fail (the log's sync thread, or a request thread rotating
//! the log); [`mark`], [`mark_copied`] and [`unmark`] on the maintenance
//! thread that heals; [`unmark`] also on the opening thread, and
//! [`read_markers`] there and in `larder check`.
//!
//! Byte map (little-endian): magic `LARDTAIL` (8 bytes), format version (2,
//! now 1), flags (1: bit 0 copied), reserved (1, zero), the offset (8),
//! crc32c of the first 20 bytes (4). A marker that does not decode marks
//! the whole segment, from its first record, not copied.

use crate::error::{Error, Result};
use crate::fs::{join, Fs};
use crate::record::{u32_at, u64_at};
use crate::segment;
use std::path::Path;

const MAGIC: &[u8; 8] = b"LARDTAIL";
const VERSION: u16 = 1;
const BYTES: usize = 24;
const COPIED: u8 = 1;
/// File name extension of a marker.
const EXTENSION: &str = "unsynced";

/// What a marker says about its segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// The segment.
    pub id: u32,
    /// Where its unsure bytes begin.
    pub from: u64,
    /// Whether every record from `from` on is durable in a newer segment.
    pub copied: bool,
}

/// The file name of the marker of segment `id`.
pub fn marker_name(id: u32) -> String {
    format!("{id:010}.{EXTENSION}")
}

/// A marker's bytes (see the byte map above): segment bytes from `from`
/// on are unsure, and `copied` says whether they are durable in a newer
/// segment. Public so that tests and fuzzing can lay out a directory as a
/// failed sync leaves it.
pub fn encode(from: u64, copied: bool) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(BYTES);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.push(if copied { COPIED } else { 0 });
    bytes.push(0);
    bytes.extend_from_slice(&from.to_le_bytes());
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// The offset and the copied flag a marker's bytes hold, if they decode.
fn decode(bytes: &[u8]) -> Option<(u64, bool)> {
    let intact = bytes.len() == BYTES
        && bytes.get(..8) == Some(&MAGIC[..])
        && bytes.get(8..10) == Some(&VERSION.to_le_bytes()[..])
        && u32_at(bytes, 20) == crc32c::crc32c(bytes.get(..20).unwrap_or_default());
    let copied = bytes.get(10).is_some_and(|flags| flags & COPIED != 0);
    intact.then(|| (u64_at(bytes, 12), copied))
}

/// What a marker's bytes say of segment `id`: where the unsure bytes begin,
/// never inside the header; every record, not copied, if they do not
/// decode (a marker cut short by a crash as it was written, or damaged).
fn read_marker(id: u32, bytes: &[u8]) -> Marker {
    let whole = u64::from(segment::HEADER_BYTES);
    let (from, copied) = decode(bytes).unwrap_or((whole, false));
    Marker {
        id,
        from: from.max(whole),
        copied,
    }
}

/// Notes at a failed sync that segment `id`'s bytes from `from` on are
/// unsure: writes the marker under its own name, unless one is there that
/// decodes (it was written at the segment's first failed sync, and no sync
/// of the segment has counted since, so its offset is the one that
/// matters), and tries to sync it and the directory. The kernel keeps the
/// marker through a kill even when the disk can sync nothing; [`mark`]
/// makes it durable.
pub(crate) fn note_failure(fs: &dyn Fs, dir: &Path, id: u32, from: u64) -> Result<()> {
    let path = join(dir, &marker_name(id));
    let io = |what: &str, e| Error::io(format!("{what} {}", path.display()), e);
    if existing_offset(fs, &path).is_some() {
        return Ok(());
    }
    let _ = fs.remove(&path);
    let file = fs.create(&path).map_err(|e| io("creating", e))?;
    file.write_all_at(&encode(from, false), 0)
        .map_err(|e| io("writing", e))?;
    file.sync_data().map_err(|e| io("syncing", e))?;
    fs.sync_dir(dir)
        .map_err(|e| Error::io(format!("syncing directory {}", dir.display()), e))
}

/// Marks segment `id`'s bytes from `from` on (or from the offset a marker
/// already there names, as [`note_failure`] keeps it) as unsure, durably:
/// written afresh under a temporary name, synced and renamed over the
/// marker, and the directory synced. Not a sync of the marker already
/// there, which may be the file whose sync failed: a later sync of it can
/// succeed without its bytes.
pub(crate) fn mark(fs: &dyn Fs, dir: &Path, id: u32, from: u64) -> Result<()> {
    let from = existing_offset(fs, &join(dir, &marker_name(id))).unwrap_or(from);
    install_marker(fs, dir, id, &encode(from, false))
}

/// The offset the marker at `path` names, if it is there, reads back and
/// decodes. One that does not read back is as good as none: the offset
/// the caller has is at or before the one it would name (the log's synced
/// position only grows).
fn existing_offset(fs: &dyn Fs, path: &Path) -> Option<u64> {
    let bytes = crate::fs::read_all(fs, path).ok()?;
    decode(&bytes).map(|(from, _)| from)
}

/// Makes `bytes` the marker of segment `id`, whole or not at all (see
/// [`crate::fs::install`]); on failure removes the temporary file.
fn install_marker(fs: &dyn Fs, dir: &Path, id: u32, bytes: &[u8]) -> Result<()> {
    let name = marker_name(id);
    crate::fs::install(fs, dir, &name, bytes).inspect_err(|_| {
        crate::fs::discard(fs, dir, &[&crate::fs::temporary_path(dir, &name)]);
    })
}

/// Marks segment `id` copied from `from` on, durably and whole or not at
/// all (written under a temporary name and renamed over the marker).
pub(crate) fn mark_copied(fs: &dyn Fs, dir: &Path, id: u32, from: u64) -> Result<()> {
    install_marker(fs, dir, id, &encode(from, true))
}

/// Removes segment `id`'s marker and syncs the directory.
pub(crate) fn unmark(fs: &dyn Fs, dir: &Path, id: u32) -> Result<()> {
    let path = join(dir, &marker_name(id));
    match fs.remove(&path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(Error::io(format!("removing {}", path.display()), error)),
    }
    fs.sync_dir(dir)
        .map_err(|e| Error::io(format!("syncing directory {}", dir.display()), e))
}

/// Every marker in `dir`, by segment id. `names` is the directory's
/// listing.
pub(crate) fn read_markers(fs: &dyn Fs, dir: &Path, names: &[String]) -> Vec<Marker> {
    let mut markers = Vec::new();
    for name in names {
        let Some(id) = segment::parse_name(name, EXTENSION) else {
            continue;
        };
        // One that does not read back marks the whole segment, not copied.
        let bytes = crate::fs::read_all(fs, &join(dir, name)).unwrap_or_default();
        markers.push(read_marker(id, &bytes));
    }
    markers.sort_unstable_by_key(|marker| marker.id);
    markers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    fn marker(id: u32, from: u64, copied: bool) -> Marker {
        Marker { id, from, copied }
    }

    #[test]
    fn a_marker_names_its_offset_and_a_damaged_one_the_whole_segment() {
        let header = u64::from(segment::HEADER_BYTES);
        assert_eq!(read_marker(1, &encode(4096, false)), marker(1, 4096, false));
        assert_eq!(read_marker(1, &encode(4096, true)), marker(1, 4096, true));
        let mut flipped = encode(4096, true);
        flipped[13] ^= 1;
        assert_eq!(read_marker(1, &flipped), marker(1, header, false));
        assert_eq!(
            read_marker(1, &encode(4096, false)[..12]),
            marker(1, header, false)
        );
        assert_eq!(read_marker(1, &[]), marker(1, header, false));
        let mut later = encode(4096, false);
        later[8] = 2;
        assert_eq!(decode(&later), None, "an unknown version");
        // An offset inside the header still leaves the header alone.
        assert_eq!(read_marker(1, &encode(3, false)).from, header);
    }

    #[test]
    fn a_marker_that_does_not_decode_is_written_again() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        fs.write_file(&join(dir, &marker_name(7)), b"").unwrap();
        note_failure(&fs, dir, 7, 1000).unwrap();
        let names = fs.list(dir).unwrap();
        assert_eq!(read_markers(&fs, dir, &names), vec![marker(7, 1000, false)]);
    }

    #[test]
    fn marking_again_keeps_the_first_offset_copied_replaces_it_and_unmarking_twice_is_fine() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        note_failure(&fs, dir, 7, 1000).unwrap();
        note_failure(&fs, dir, 7, 5000).unwrap();
        mark(&fs, dir, 7, 6000).unwrap();
        mark(&fs, dir, 9, 64).unwrap();
        let names = fs.list(dir).unwrap();
        assert_eq!(
            read_markers(&fs, dir, &names),
            vec![marker(7, 1000, false), marker(9, 64, false)]
        );
        mark_copied(&fs, dir, 9, 64).unwrap();
        // Durable: a power cut keeps both.
        fs.power_cut(None);
        let names = fs.list(dir).unwrap();
        assert_eq!(
            read_markers(&fs, dir, &names),
            vec![marker(7, 1000, false), marker(9, 64, true)]
        );
        unmark(&fs, dir, 7).unwrap();
        unmark(&fs, dir, 7).unwrap();
        let names = fs.list(dir).unwrap();
        assert_eq!(read_markers(&fs, dir, &names), vec![marker(9, 64, true)]);
    }
}
