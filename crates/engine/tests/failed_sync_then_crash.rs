//! A failed `fdatasync` leaves the records written since the last good sync
//! readable but never to be written (as Linux does after `EIO`; see
//! [`FaultKind::EioOnSync`]). Those records were acknowledged under
//! `everysec` and `none`, and must survive the process being killed before
//! the log heals, or while it heals, followed by a restart and then a power
//! cut; and a power cut while the log heals must leave a directory that
//! opens.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, contents, keys, set, value, wait_until};
use larder_engine::check::UnsyncedTail;
use larder_engine::fs::{FaultKind, MemFs};
use larder_engine::{Clock, Config, Durability, Engine};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Keys synced before the failed sync.
const SYNCED: usize = 20;
/// Keys in all: the last ones acknowledged after that sync, then lost to
/// the failed one but for the log's buffer and the page cache.
const ALL: usize = 30;

/// An engine with `k0`..`k20` synced and `k20`..`k30` acknowledged after,
/// whose next sync failed with those unsynced. No background threads but
/// the log's sync thread, which is done reserving the (small) segment's
/// blocks before the failure, so that a fault the test injects afterwards
/// falls where the test means it to. Should that thread's own sync (once a
/// second under everysec) land before the failure, there would be nothing
/// unsynced to lose and the test would test nothing: it starts again.
fn after_a_failed_sync(durability: Durability) -> (MemFs, Clock, Config, Engine) {
    after_a_failed_sync_deleting(durability, None)
}

/// [`after_a_failed_sync`], with `deleted` (a synced key) deleted after the
/// last set: its tombstone is among the unsynced records.
fn after_a_failed_sync_deleting(
    durability: Durability,
    deleted: Option<&[u8]>,
) -> (MemFs, Clock, Config, Engine) {
    (0..5)
        .find_map(|_| try_a_failed_sync(durability, deleted))
        .expect("a failed sync with unsynced records, in one of 5 tries")
}

fn try_a_failed_sync(
    durability: Durability,
    deleted: Option<&[u8]>,
) -> Option<(MemFs, Clock, Config, Engine)> {
    let (fs, clock, mut config) = (MemFs::new(), Clock::system(), config(durability));
    config.segment_bytes_max = 64 << 10;
    let engine = reopen(&fs, &config, &clock, None);
    for i in 0..ALL {
        if i == SYNCED {
            engine.sync().unwrap();
        }
        set(&engine, format!("k{i}").as_bytes(), b"v");
    }
    if let Some(key) = deleted {
        let (outcome, _) = engine.delete(key, None).unwrap();
        assert!(matches!(outcome, larder_engine::DeleteOutcome::Deleted));
    }
    wait_until("the log reserved its whole segment", || {
        let names = fs.file_names(&config.dir);
        let active = names
            .iter()
            .filter(|name| name.ends_with(".seg"))
            .max()
            .unwrap();
        let len = fs.read_file(&config.dir.join(active)).unwrap().len();
        len == config.segment_bytes_max as usize
    });
    fs.inject(FaultKind::EioOnSync);
    assert!(engine.sync().is_err());
    fs.clear_faults();
    assert!(engine.stats().sync_failure.is_some());
    let from = unsynced_tail(&fs, &config)?.from;
    let written = engine
        .stats()
        .segment_details
        .iter()
        .map(|s| s.len_bytes)
        .max()?;
    (from < written).then_some((fs, clock, config, engine))
}

/// The unsynced tail `larder check` reports, if any: the marked segment,
/// where its unsure bytes begin and its first damage past that.
fn unsynced_tail(fs: &MemFs, config: &Config) -> Option<UnsyncedTail> {
    let report = larder_engine::check::check(fs, &config.dir).unwrap();
    assert!(
        report.unsynced_tails.len() <= 1,
        "{:?}",
        report.unsynced_tails
    );
    report.unsynced_tails.into_iter().next()
}

/// Drops `engine` (if any) and opens the directory again; panics if the
/// open fails.
fn reopen(fs: &MemFs, config: &Config, clock: &Clock, engine: Option<Engine>) -> Engine {
    drop(engine);
    Engine::open_with(config.clone(), Arc::new(fs.clone()), clock.clone())
        .unwrap_or_else(|error| panic!("open: {error}"))
}

/// Kills the process, restarts, cuts the power after the restart, and
/// checks that every acknowledged key is there after each start.
fn kill_restart_and_cut_the_power(
    fs: &MemFs,
    config: &Config,
    clock: &Clock,
    engine: Engine,
    what: &str,
) {
    after_a_kill_and_a_power_cut(fs, config, clock, engine, |engine, when| {
        let found = contents(engine, &keys(ALL)).len();
        assert_eq!(found, ALL, "{what}: {when}");
    });
    let names = fs.file_names(&config.dir);
    assert!(
        names.iter().all(|name| !name.ends_with(".unsynced")),
        "{what}: open removes the markers: {names:?}"
    );
}

/// Kills the process and restarts, then cuts the power and opens again;
/// runs `check` on the engine after each start, with which one it is.
fn after_a_kill_and_a_power_cut(
    fs: &MemFs,
    config: &Config,
    clock: &Clock,
    engine: Engine,
    check: impl Fn(&Engine, &str),
) {
    fs.crash_process();
    let engine = reopen(fs, config, clock, Some(engine));
    check(&engine, "after the restart");
    fs.power_cut(None);
    let engine = reopen(fs, config, clock, Some(engine));
    check(&engine, "after the power cut");
}

#[test]
fn a_kill_before_the_log_heals_then_a_power_cut_after_the_restart_loses_nothing() {
    for durability in [Durability::EverySec, Durability::None] {
        let (fs, clock, config, engine) = after_a_failed_sync(durability);
        kill_restart_and_cut_the_power(&fs, &config, &clock, engine, &format!("{durability:?}"));
    }
}

/// What a heal left: the file system, the engine, the failure point and
/// whether the heal succeeded all the same.
struct Healed {
    fs: MemFs,
    clock: Clock,
    config: Config,
    engine: Engine,
    what: String,
    healed: bool,
}

/// Runs `check` on what the heal left with `fault` injected at each of its
/// failure points in turn (the maintenance pass heals first), and at the
/// next few after the first at which the heal succeeds all the same (a
/// failure in its last steps, settling the old segment, does not fail it);
/// returns how many failed it.
fn at_each_failure_point_of_the_heal(fault: FaultKind, mut check: impl FnMut(Healed)) -> u64 {
    let (mut failed, mut healed_in_a_row) = (0, 0);
    for n in 1..60 {
        let (fs, clock, config, engine) = after_a_failed_sync(Durability::EverySec);
        fs.inject_nth(fault, n);
        engine.maintain_now();
        fs.clear_faults();
        let healed = engine.stats().sync_failure.is_none();
        let what = format!("{fault:?} at {n}, healed: {healed}");
        check(Healed {
            fs,
            clock,
            config,
            engine,
            what,
            healed,
        });
        if !healed {
            failed += 1;
            continue;
        }
        healed_in_a_row += 1;
        if healed_in_a_row == 8 {
            return failed;
        }
    }
    panic!("{fault:?}: the heal kept failing");
}

#[test]
fn a_kill_while_the_log_heals_then_a_power_cut_after_the_restart_loses_nothing() {
    for fault in [
        FaultKind::Eio,
        FaultKind::EioOnSync,
        FaultKind::NoSpace,
        FaultKind::EioOnRemove,
    ] {
        let failed = at_each_failure_point_of_the_heal(fault, |h| {
            kill_restart_and_cut_the_power(&h.fs, &h.config, &h.clock, h.engine, &h.what);
        });
        // Removing the marker is the heal's last step, and its failure
        // leaves the marker for the next open: the heal succeeds.
        let expected = if fault == FaultKind::EioOnRemove {
            0
        } else {
            1
        };
        assert!(
            failed >= expected,
            "{fault:?} failed the heal {failed} times"
        );
    }
}

#[test]
fn a_power_cut_while_the_log_heals_leaves_a_directory_that_opens_with_every_synced_key() {
    for fault in [FaultKind::Eio, FaultKind::EioOnSync, FaultKind::NoSpace] {
        let mut seed = 0;
        let failed = at_each_failure_point_of_the_heal(fault, |h| {
            seed += 1;
            h.fs.power_cut(Some(seed));
            let engine = reopen(&h.fs, &h.config, &h.clock, Some(h.engine));
            let found = contents(&engine, &keys(ALL));
            for key in keys(SYNCED) {
                assert!(found.contains_key(&key), "{}: {key:?}", h.what);
            }
            if h.healed {
                assert_eq!(found.len(), ALL, "{}", h.what);
            }
        });
        assert!(failed >= 1, "{fault:?} never failed the heal");
    }
}

/// A power cut after a kill that followed a failed sync can leave the
/// marked tail damaged with intact records after the damage: open cuts the
/// segment at the damage, since nothing past the mark was ever synced, and
/// keeps every record before it.
#[test]
fn open_cuts_a_marked_tail_at_its_first_damage_even_with_intact_records_after_it() {
    let (fs, clock, config, engine) = after_a_failed_sync(Durability::EverySec);
    fs.crash_process();
    drop(engine);
    let tail = unsynced_tail(&fs, &config).unwrap();
    let (path, from) = (tail.file.clone(), tail.from);
    assert_eq!(
        (tail.copied, tail.damaged),
        (false, None),
        "the tail reads well"
    );
    // k20..k29 are records of one length from the mark on: damage k25's.
    let bytes = fs.read_file(&path).unwrap();
    let record = larder_engine::record::HEADER_BYTES as u64 + 3 + 1;
    let records_end = from + 10 * record;
    assert!(bytes[records_end as usize..].iter().all(|&byte| byte == 0));
    let damaged = from + 5 * record;
    fs.corrupt(&path, damaged + record - 1, 0x01).unwrap();
    assert_eq!(unsynced_tail(&fs, &config).unwrap().damaged, Some(damaged));
    let engine = reopen(&fs, &config, &clock, None);
    let found = contents(&engine, &keys(ALL));
    assert_eq!(found.len(), 25, "{:?}", found.keys());
    assert!(keys(25).iter().all(|key| found.contains_key(key)));
    assert_eq!(unsynced_tail(&fs, &config), None, "the marker is gone");
    fs.power_cut(None);
    let engine = reopen(&fs, &config, &clock, Some(engine));
    assert_eq!(contents(&engine, &keys(ALL)).len(), 25);
}

#[test]
fn a_heal_leaves_no_marker_and_a_power_cut_after_it_keeps_everything() {
    let (fs, clock, config, engine) = after_a_failed_sync(Durability::EverySec);
    assert!(
        fs.file_names(&config.dir)
            .iter()
            .any(|name| name.ends_with(".unsynced")),
        "the failed sync left a marker"
    );
    engine.maintain_now();
    assert!(engine.stats().sync_failure.is_none(), "healed");
    let names = fs.file_names(&config.dir);
    assert!(
        names.iter().all(|name| !name.ends_with(".unsynced")),
        "{names:?}"
    );
    fs.power_cut(Some(3));
    let engine = reopen(&fs, &config, &clock, Some(engine));
    assert_eq!(contents(&engine, &keys(ALL)).len(), ALL);
}

/// A heal whose copy is durable but whose old segment could be neither
/// marked copied nor cut back (here by a failing write, then a failing
/// sync, found by search rather than counted by hand).
fn healed_with_the_old_tail_left(
    copied: bool,
    deleted: Option<&[u8]>,
) -> (MemFs, Clock, Config, Engine) {
    (1..8)
        .flat_map(|write| (1..16).map(move |sync| (write, sync)))
        .find_map(|(write, sync)| {
            let (fs, clock, config, engine) =
                after_a_failed_sync_deleting(Durability::EverySec, deleted);
            fs.inject_nth(FaultKind::Eio, write);
            fs.inject_nth(FaultKind::EioOnSync, sync);
            engine.maintain_now();
            fs.clear_faults();
            let healed = engine.stats().sync_failure.is_none();
            let tail = unsynced_tail(&fs, &config)?;
            let old = fs.read_file(&tail.file).unwrap().len() as u64;
            (healed && tail.copied == copied && old > tail.from)
                .then_some((fs, clock, config, engine))
        })
        .expect("a heal that left the old tail on disk")
}

/// After a heal that left the old segment's tail on disk past the length
/// its hint describes, a key whose put is in that tail is deleted, and
/// compaction runs until it has rewritten everything but the old segment
/// (which may drop a tombstone once no older put of its key is known). The
/// key stays deleted after a kill and a restart, and after a power cut:
/// either the marker says copied and the restart cuts the tail at the
/// mark, or it does not and the tombstone was kept, since the tombstone
/// check counts a segment with such a tail as unread.
#[test]
fn a_key_deleted_after_a_heal_that_left_the_old_tail_stays_deleted() {
    for copied in [true, false] {
        let (fs, clock, config, engine) = healed_with_the_old_tail_left(copied, None);
        let old = unsynced_tail(&fs, &config).unwrap().file;
        let (deleted, ticket) = engine.delete(b"k25", None).unwrap();
        engine.commit(ticket).unwrap();
        assert!(
            matches!(deleted, larder_engine::DeleteOutcome::Deleted),
            "{deleted:?}"
        );
        // Enough churn to seal and compact every segment, more than once.
        for round in 0..6 {
            for i in 0..400 {
                let value = format!("{round}");
                set(&engine, format!("churn{i}").as_bytes(), value.as_bytes());
            }
            engine.compact_now(0.0).unwrap();
        }
        assert!(
            fs.read_file(&old).is_some(),
            "copied: {copied}: the old segment stayed"
        );
        assert_eq!(unsynced_tail(&fs, &config).map(|tail| tail.file), Some(old));
        after_a_kill_and_a_power_cut(&fs, &config, &clock, engine, |engine, when| {
            assert_eq!(value(engine, b"k25"), None, "copied: {copied}: {when}");
            assert_eq!(contents(engine, &keys(ALL)).len(), ALL - 1, "{when}");
        });
    }
}

/// A key deleted among the unsynced records: the heal copies its tombstone
/// to the new segment, which compaction then rewrites while the put the
/// tombstone hides is still on disk (in the old segment, which keeps its
/// unsure tail until the next open), so the tombstone must be kept each
/// time. The key stays deleted after a kill and a restart (which cuts the
/// old tail at the mark, since the heal marked it copied), and after a
/// power cut: the kept tombstone alone then hides the put.
#[test]
fn a_key_deleted_just_before_a_heal_stays_deleted_once_the_copy_is_compacted() {
    let (fs, clock, config, engine) = healed_with_the_old_tail_left(true, Some(b"k5"));
    let old = unsynced_tail(&fs, &config).unwrap().file;
    assert_eq!(value(&engine, b"k5"), None);
    let segments = || {
        engine
            .stats()
            .segment_details
            .iter()
            .map(|s| s.id)
            .collect::<Vec<_>>()
    };
    // The heal's copy is the active segment.
    let copy = segments().into_iter().max().unwrap();
    for round in 0..6 {
        for i in 0..400 {
            let value = format!("{round}");
            set(&engine, format!("churn{i}").as_bytes(), value.as_bytes());
        }
        engine.compact_now(0.0).unwrap();
    }
    assert!(!segments().contains(&copy), "the copy was compacted");
    assert_eq!(unsynced_tail(&fs, &config).map(|tail| tail.file), Some(old));
    after_a_kill_and_a_power_cut(&fs, &config, &clock, engine, |engine, when| {
        assert_eq!(value(engine, b"k5"), None, "{when}");
        assert_eq!(contents(engine, &keys(ALL)).len(), ALL - 1, "{when}");
    });
}

/// A kill at each `fdatasync` of the heal, just before it, then a restart
/// and a power cut, loses nothing acknowledged. The kill is an unwind out
/// of the heal at that point: nothing of the heal after it runs.
#[test]
fn a_kill_at_each_sync_of_the_heal_then_a_power_cut_after_the_restart_loses_nothing() {
    struct Killed;
    // The syncs of a heal that goes through: the marker, the new segment's
    // header (each with its directory sync, not counted), the copy, the
    // copied marker, the cut.
    let syncs_of_a_heal = {
        let (fs, _clock, _config, engine) = after_a_failed_sync(Durability::EverySec);
        let before = fs.sync_data_calls();
        engine.maintain_now();
        assert!(engine.stats().sync_failure.is_none());
        fs.sync_data_calls() - before
    };
    assert!(syncs_of_a_heal >= 5, "{syncs_of_a_heal}");
    for n in 1..=syncs_of_a_heal {
        let (fs, clock, config, engine) = after_a_failed_sync(Durability::EverySec);
        let syncs = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&syncs);
        fs.observe_sync_data(move || {
            if counted.fetch_add(1, Ordering::SeqCst) + 1 == n {
                std::panic::resume_unwind(Box::new(Killed));
            }
        });
        let heal = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.maintain_now()));
        fs.observe_sync_data(|| {});
        assert!(heal.is_err(), "no kill at sync {n} of {syncs_of_a_heal}");
        // The engine's own threads and drop would go on writing: the
        // process is dead, so they must not.
        fs.crash_process();
        std::mem::forget(engine);
        let engine = reopen(&fs, &config, &clock, None);
        let what = format!("killed at sync {n}");
        assert_eq!(
            contents(&engine, &keys(ALL)).len(),
            ALL,
            "{what}: after the restart"
        );
        fs.power_cut(None);
        let engine = reopen(&fs, &config, &clock, Some(engine));
        assert_eq!(
            contents(&engine, &keys(ALL)).len(),
            ALL,
            "{what}: after the power cut"
        );
    }
}

/// A copy that a failed heal can remove neither keeps every later heal
/// from succeeding until it is gone: a segment file the log does not know
/// holds puts the tombstone check would not see.
#[test]
fn a_copy_a_failed_heal_cannot_remove_holds_off_every_heal_until_it_goes() {
    let segments = |fs: &MemFs, config: &Config| {
        let names = fs.file_names(&config.dir);
        names.iter().filter(|name| name.ends_with(".seg")).count()
    };
    let (fs, clock, config, engine) = (1..16)
        .find_map(|n| {
            let (fs, clock, config, engine) = after_a_failed_sync(Durability::EverySec);
            fs.inject(FaultKind::EioOnRemove);
            fs.inject_nth(FaultKind::EioOnSync, n);
            engine.maintain_now();
            // A segment file beyond the old one, holding records: the copy
            // (a new segment whose creation failed has none).
            let names = fs.file_names(&config.dir);
            let copy = names.iter().filter(|name| name.ends_with(".seg")).nth(1)?;
            let records = fs.read_file(&config.dir.join(copy))?.len() > 40;
            let stray = records && engine.stats().sync_failure.is_some();
            stray.then_some((fs, clock, config, engine))
        })
        .expect("a heal whose copy failed and stayed");
    engine.maintain_now();
    assert!(
        engine.stats().sync_failure.is_some(),
        "not while the copy stays"
    );
    fs.clear_faults();
    engine.maintain_now();
    assert!(engine.stats().sync_failure.is_none(), "healed once it went");
    assert_eq!(
        segments(&fs, &config),
        2,
        "the old segment and the new copy"
    );
    kill_restart_and_cut_the_power(&fs, &config, &clock, engine, "after the stray copy");
}

/// A segment a heal left with its tail on disk, unmarked as copied, is not
/// compacted before the next open settles it, however dead; after that it
/// is compacted as any.
#[test]
fn a_segment_left_with_an_unsure_tail_waits_for_the_next_open_to_be_compacted() {
    let (fs, clock, config, engine) = healed_with_the_old_tail_left(false, None);
    let old = unsynced_tail(&fs, &config).unwrap().file;
    for i in 0..SYNCED {
        set(&engine, format!("k{i}").as_bytes(), b"w");
    }
    for _ in 0..3 {
        engine.compact_now(0.0).unwrap();
    }
    assert!(
        fs.read_file(&old).is_some(),
        "kept while its tail is unsure"
    );
    drop(engine);
    let engine = reopen(&fs, &config, &clock, None);
    engine.compact_now(0.0).unwrap();
    assert!(fs.read_file(&old).is_none(), "compacted once settled");
    let found = contents(&engine, &keys(ALL));
    assert_eq!(found.len(), ALL);
    for key in keys(SYNCED) {
        assert_eq!(found[&key].0, b"w", "{key:?}");
    }
}
