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
use larder_engine::fs::{FaultKind, MemFs};
use larder_engine::{Clock, Config, Durability, Engine};
use std::path::PathBuf;
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
    (0..5)
        .find_map(|_| try_a_failed_sync(durability))
        .expect("a failed sync with unsynced records, in one of 5 tries")
}

fn try_a_failed_sync(durability: Durability) -> Option<(MemFs, Clock, Config, Engine)> {
    let (fs, clock, mut config) = (MemFs::new(), Clock::system(), config(durability));
    config.segment_bytes_max = 64 << 10;
    let engine = reopen(&fs, &config, &clock, None);
    for i in 0..ALL {
        if i == SYNCED {
            engine.sync().unwrap();
        }
        set(&engine, format!("k{i}").as_bytes(), b"v");
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
    let (_, from, _) = unsynced_tail(&fs, &config)?;
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
fn unsynced_tail(fs: &MemFs, config: &Config) -> Option<(PathBuf, u64, Option<u64>)> {
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
    fs.crash_process();
    let engine = reopen(fs, config, clock, Some(engine));
    assert_eq!(
        contents(&engine, &keys(ALL)).len(),
        ALL,
        "{what}: after the restart"
    );
    fs.power_cut(None);
    let engine = reopen(fs, config, clock, Some(engine));
    assert_eq!(
        contents(&engine, &keys(ALL)).len(),
        ALL,
        "{what}: after the power cut"
    );
    let names = fs.file_names(&config.dir);
    assert!(
        names.iter().all(|name| !name.ends_with(".unsynced")),
        "{what}: open removes the markers: {names:?}"
    );
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
/// failure points in turn (the maintenance pass heals first), up to and
/// including the first at which it succeeds all the same; returns how
/// many failed it.
fn at_each_failure_point_of_the_heal(fault: FaultKind, mut check: impl FnMut(Healed)) -> u64 {
    for n in 1..40 {
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
        if healed {
            return n - 1;
        }
    }
    panic!("{fault:?}: the heal failed at 39 points in a row");
}

#[test]
fn a_kill_while_the_log_heals_then_a_power_cut_after_the_restart_loses_nothing() {
    for fault in [
        FaultKind::Eio,
        FaultKind::EioOnSync,
        FaultKind::NoSpace,
        FaultKind::EioOnRemove,
    ] {
        let failed = at_each_failure_point_of_the_heal(fault, |healed| {
            let Healed {
                fs,
                clock,
                config,
                engine,
                what,
                ..
            } = healed;
            kill_restart_and_cut_the_power(&fs, &config, &clock, engine, &what);
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
        let failed = at_each_failure_point_of_the_heal(fault, |healed| {
            let Healed {
                fs,
                clock,
                config,
                engine,
                what,
                healed,
            } = healed;
            seed += 1;
            fs.power_cut(Some(seed));
            let engine = reopen(&fs, &config, &clock, Some(engine));
            let found = contents(&engine, &keys(ALL));
            for key in keys(SYNCED) {
                assert!(found.contains_key(&key), "{what}: {key:?}");
            }
            if healed {
                assert_eq!(found.len(), ALL, "{what}");
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
    let (path, from, damage) = unsynced_tail(&fs, &config).unwrap();
    assert_eq!(damage, None, "the tail reads well");
    // k20..k29 are records of one length from the mark on: damage k25's.
    let bytes = fs.read_file(&path).unwrap();
    let record = larder_engine::record::HEADER_BYTES as u64 + 3 + 1;
    let records_end = from + 10 * record;
    assert!(bytes[records_end as usize..].iter().all(|&byte| byte == 0));
    let damaged = from + 5 * record;
    fs.corrupt(&path, damaged + record - 1, 0x01).unwrap();
    assert_eq!(
        unsynced_tail(&fs, &config),
        Some((path, from, Some(damaged)))
    );
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

/// Both ways of settling the old segment after the copy fail (marking it
/// copied, and cutting it back): the heal fails, the copy stays on disk,
/// and a kill, a restart and a power cut still lose nothing. The two
/// failure points are searched for, not counted by hand: a failing write
/// and then a failing sync, each at its `n`th chance.
#[test]
fn a_heal_that_can_neither_mark_the_copy_nor_cut_fails_and_loses_nothing() {
    let found = (1..8)
        .flat_map(|write| (1..16).map(move |sync| (write, sync)))
        .find_map(|(write, sync)| {
            let (fs, clock, config, engine) = after_a_failed_sync(Durability::EverySec);
            let segments_before = segment_files(&fs, &config);
            fs.inject_nth(FaultKind::Eio, write);
            fs.inject_nth(FaultKind::EioOnSync, sync);
            engine.maintain_now();
            fs.clear_faults();
            let failed = engine.stats().sync_failure.is_some();
            let copy_kept = segment_files(&fs, &config) == segments_before + 1;
            let marked = unsynced_tail(&fs, &config).is_some();
            (failed && copy_kept && marked).then_some((fs, clock, config, engine))
        });
    let (fs, clock, config, engine) = found.expect("a heal that failed after its copy");
    kill_restart_and_cut_the_power(&fs, &config, &clock, engine, "neither");
}

/// A heal whose cut failed leaves the old segment's tail on disk past the
/// length its hint describes, marked copied. A key whose put is in that
/// tail, deleted afterwards, stays deleted through compactions (which may
/// drop the tombstone once no older put of the key is known), a kill and
/// a restart: the restart cuts the tail at the mark.
#[test]
fn a_key_deleted_after_a_heal_whose_cut_failed_stays_deleted() {
    let (fs, clock, config, engine) = (1..20)
        .find_map(|n| {
            let (fs, clock, config, engine) = after_a_failed_sync(Durability::EverySec);
            // Writes and cuts: the new segment's header, the copy, the
            // marker's rewrite, then the cut; counted, not assumed.
            fs.inject_nth(FaultKind::Eio, n);
            engine.maintain_now();
            fs.clear_faults();
            let healed = engine.stats().sync_failure.is_none();
            (healed && unsynced_tail(&fs, &config).is_some()).then_some((fs, clock, config, engine))
        })
        .expect("a failure point where the heal succeeds and leaves the tail uncut");
    let (deleted, ticket) = engine.delete(b"k25", None).unwrap();
    engine.commit(ticket).unwrap();
    assert!(
        matches!(deleted, larder_engine::DeleteOutcome::Deleted),
        "{deleted:?}"
    );
    // Enough churn to seal and compact every segment, more than once.
    for round in 0..6 {
        for i in 0..400 {
            set(
                &engine,
                format!("churn{i}").as_bytes(),
                format!("{round}").as_bytes(),
            );
        }
        engine.compact_now(0.0).unwrap();
    }
    fs.crash_process();
    let engine = reopen(&fs, &config, &clock, Some(engine));
    assert_eq!(value(&engine, b"k25"), None, "after the restart");
    assert_eq!(contents(&engine, &keys(ALL)).len(), ALL - 1);
    fs.power_cut(None);
    let engine = reopen(&fs, &config, &clock, Some(engine));
    assert_eq!(value(&engine, b"k25"), None, "after the power cut");
    assert_eq!(contents(&engine, &keys(ALL)).len(), ALL - 1);
}

fn segment_files(fs: &MemFs, config: &Config) -> usize {
    let names = fs.file_names(&config.dir);
    names.iter().filter(|name| name.ends_with(".seg")).count()
}
