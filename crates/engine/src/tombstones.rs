//! Which tombstones a compaction group must keep.
//!
//! Recovery gives each key the record with the highest seq on disk, so the
//! invariant compaction keeps at every moment (a crash may come between any
//! two of its steps) is: for every key, the newest record of it in the
//! segment files is its current put, or a tombstone, or there is none.
//! Dropping a record that is not its key's newest keeps that; so does
//! dropping a newest tombstone once no other segment holds a put of its
//! key. A tombstone `T` of seq `s` in segment `S` is therefore kept only
//! while all of these hold:
//!
//! - the keydir holds no newer put of the key (checked by the compactor; the
//!   log is synced before `S` is removed, so that put is durable first);
//! - no segment holds a newer tombstone of the key (this segment's or
//!   another's: the other one is not removed while it is needed, and once
//!   it is not, neither is `T`);
//! - some other segment, or a segment that cannot be read here (without a
//!   hint: the active one, an abandoned output), may hold a put of the key
//!   with a seq below `s`. The other members of `S`'s group count: they
//!   are removed one by one after `S`'s output is durable.
//!
//! [`gather`] finds a group's tombstones in its members that may hold one
//! ([`Segment::may_hold_tombstones`]: under overwrites alone, none), then
//! reads, for their keys, every record in the other segments that may hold
//! an older put (those whose smallest seq is below the group's newest
//! tombstone) from their hints, and the group's own. A kept tombstone
//! counts as neither live nor dead in its new segment
//! ([`Segment::tombstone_bytes_kept`]) until it may be droppable:
//! when a segment it was kept for is removed, or when a later group finds
//! a newer tombstone of its key ([`Segment::replace_tombstone`]). So an idle
//! engine stops compacting, and each key keeps at most its newest tombstone
//! once the older ones' segments are compacted.
//!
//! Called by the compactor, under `Inner::compaction_lock`.

use crate::engine::Inner;
use crate::error::Result;
use crate::record::{Header, Kind};
use crate::recovery::read_hint;
use crate::scan::scan_sealed;
use crate::segment::Segment;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The records of one key that a group's tombstones are checked against.
#[derive(Default)]
struct KeyRecords {
    /// Segment and seq of each put read.
    puts: Vec<(u32, u64)>,
    /// Segment, seq and record length of each tombstone read.
    tombstones: Vec<(u32, u64, u64)>,
}

impl KeyRecords {
    fn newest_tombstone(&self) -> u64 {
        self.tombstones
            .iter()
            .map(|&(_, seq, _)| seq)
            .max()
            .unwrap_or(0)
    }
}

/// What a group's tombstones are checked against (see the module doc).
#[derive(Default)]
pub(crate) struct Tombstones {
    keys: HashMap<Vec<u8>, KeyRecords>,
    /// Segments that may hold older puts but could not be read, with their
    /// smallest seq.
    unread: Vec<(u32, u64)>,
}

impl Tombstones {
    /// The segments whose older puts of `key` the tombstone of `seq` in
    /// `segment` hides, possibly repeated; none if it is not needed.
    pub(crate) fn kept_for<'a>(
        &'a self,
        segment: &'a Segment,
        key: &[u8],
        seq: u64,
    ) -> impl Iterator<Item = u32> + 'a {
        // Not gathered: no other segment has a record below `seq`.
        let records = self.keys.get(key).filter(|records| {
            records.newest_tombstone() <= seq && !segment.tombstone_replaced(key, seq)
        });
        let puts = records.into_iter().flat_map(|records| records.puts.iter());
        let unread = self.unread.iter().filter(move |_| records.is_some());
        puts.chain(unread)
            .filter(move |&&(id, older)| id != segment.id && older < seq)
            .map(|&(id, _)| id)
    }
}

/// Gathers what the tombstones of `group` are checked against, and marks
/// the older tombstones of their keys found elsewhere as replaced.
/// `output` is the group's output, not read.
pub(crate) fn gather(inner: &Inner, group: &[Arc<Segment>], output: u32) -> Result<Tombstones> {
    let all = inner.segments.all();
    let mut gathered = Tombstones::default();
    let mut newest = 0;
    // A segment that surely holds no tombstone has none to gather (under
    // overwrites alone, every group: its members' hints then go unread).
    for segment in group.iter().filter(|segment| segment.may_hold_tombstones()) {
        let min_seq_elsewhere = all
            .iter()
            .filter(|other| other.id != segment.id && other.id != output)
            .map(|other| other.min_seq.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        read_group_member(inner, segment, |header, key| {
            if header.kind == Kind::Delete && min_seq_elsewhere < header.seq {
                gathered.keys.entry(key.to_vec()).or_default();
                newest = newest.max(header.seq);
            }
        })?;
    }
    if gathered.keys.is_empty() {
        return Ok(gathered);
    }
    for segment in &all {
        let in_group = group.iter().any(|member| member.id == segment.id);
        let min_seq = segment.min_seq.load(Ordering::Acquire);
        if segment.id == output || !(in_group || min_seq < newest) {
            continue;
        }
        let keys = &mut gathered.keys;
        let note = |header: &Header, key: &[u8]| {
            let Some(records) = keys.get_mut(key) else {
                return;
            };
            match header.kind {
                Kind::Put => records.puts.push((segment.id, header.seq)),
                Kind::Delete => {
                    let len = header.record_len();
                    records.tombstones.push((segment.id, header.seq, len));
                }
                Kind::Touch | Kind::Flush => {}
            }
        };
        let read = match in_group {
            true => read_group_member(inner, segment, note).map(|()| true)?,
            false => {
                read_from_hint(inner, segment, note) && !segment.unsure_tail.load(Ordering::Acquire)
            }
        };
        if !read {
            gathered.unread.push((segment.id, min_seq));
        }
    }
    mark_replaced(inner, &gathered);
    Ok(gathered)
}

/// Marks each tombstone gathered that is older than its key's newest as
/// replaced, in its segment.
fn mark_replaced(inner: &Inner, gathered: &Tombstones) {
    for (key, records) in &gathered.keys {
        let newest = records.newest_tombstone();
        for &(id, seq, len) in &records.tombstones {
            if seq < newest {
                if let Some(segment) = inner.segments.get(id) {
                    segment.replace_tombstone(key, newest, len);
                }
            }
        }
    }
}

/// Visits the header and key of each record of a group member: from its
/// hint, or (an abandoned output has none) from the segment itself.
fn read_group_member(
    inner: &Inner,
    segment: &Segment,
    mut visit: impl FnMut(&Header, &[u8]),
) -> Result<()> {
    if read_from_hint(inner, segment, &mut visit) {
        return Ok(());
    }
    scan_sealed(segment, |_, header, bytes| {
        visit(header, bytes.get(header.key_range()).unwrap_or_default());
        Ok(())
    })
}

/// Visits the header and key of each record of `segment` from its hint;
/// returns false, having visited nothing, if it has none or it does not
/// read back.
fn read_from_hint(inner: &Inner, segment: &Segment, mut visit: impl FnMut(&Header, &[u8])) -> bool {
    if !segment.has_hint.load(Ordering::Acquire) {
        return false;
    }
    let path = segment.path.with_extension("hint");
    let len = segment.len_bytes.load(Ordering::Acquire);
    match read_hint(&*inner.fs, &path, segment.id, len) {
        Ok(hint) => {
            for entry in &hint.entries {
                visit(&entry.header, &entry.key);
            }
            true
        }
        Err(error) => {
            tracing::warn!(%error, "reading a hint to check tombstones; keeping them");
            false
        }
    }
}
