//! Disk trouble: a full disk (`ENOSPC`), failing writes and failing syncs
//! (`EIO`), injected through [`MemFs`]. Writes fail with a temporary error,
//! reads keep working, nothing acknowledged before is lost (neither while
//! the engine runs nor after a reopen), and a failed sync is sticky: the
//! engine refuses writes, because it cannot know which of its pages reached
//! the disk, until the maintenance pass has rewritten everything since the
//! last good sync to a new segment (or the engine is reopened).

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, contents, keys, open, set, value};
use larder_engine::fs::{FaultKind, MemFs};
use larder_engine::{Clock, Config, Durability, Engine, Error, Expiry, StoreMode};
use std::sync::Arc;

/// Stores and commits `k{i}` = `v{i}` for `range`.
fn acknowledged(engine: &Engine, range: std::ops::Range<usize>) {
    for i in range {
        set(
            engine,
            format!("k{i}").as_bytes(),
            format!("v{i}").as_bytes(),
        );
    }
}

/// An engine on a new in-memory file system, with `k0`..`k{count}`
/// acknowledged.
fn started(durability: Durability, count: usize) -> (MemFs, Clock, Config, Engine) {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = config(durability);
    let engine = open(&fs, &config, &clock);
    acknowledged(&engine, 0..count);
    (fs, clock, config, engine)
}

/// An engine that acknowledged 20 writes and was killed before its next
/// sync: the records are in the page cache only, and the next open finds
/// them there. Should the background sync (once a second under everysec)
/// land before the kill, the records were synced and a test of what open
/// does with unsynced records would test nothing: it starts again.
fn killed_before_its_next_sync(durability: Durability) -> (MemFs, Clock, Config, Engine) {
    (0..5)
        .map(|_| {
            let (fs, clock, config) = (MemFs::new(), Clock::system(), config(durability));
            let engine = open(&fs, &config, &clock);
            let syncs_before = fs.sync_data_calls();
            acknowledged(&engine, 0..20);
            fs.crash_process();
            let unsynced = fs.sync_data_calls() == syncs_before;
            (unsynced, (fs, clock, config, engine))
        })
        .find_map(|(unsynced, started)| unsynced.then_some(started))
        .expect("a kill before the next sync, in one of 5 tries")
}

fn store_and_commit(engine: &Engine, key: &[u8], value: &[u8]) -> Result<(), Error> {
    let (_, ticket) = engine.store(StoreMode::Set, key, value, 0, Expiry::Never)?;
    engine.commit(ticket)
}

#[test]
fn a_full_disk_fails_writes_temporarily_and_loses_nothing_acknowledged() {
    let (fs, clock, config, engine) = started(Durability::Always, 20);
    let before = contents(&engine, &keys(20));

    fs.inject(FaultKind::NoSpace);
    for attempt in 0..3 {
        let error = store_and_commit(&engine, b"k0", b"not acknowledged").unwrap_err();
        assert!(error.is_temporary(), "attempt {attempt}: {error}");
        assert!(matches!(error, Error::Io { .. }), "{error}");
    }
    assert!(engine.stats().write_errors >= 3);
    for i in 1..20 {
        let key = format!("k{i}");
        assert_eq!(
            value(&engine, key.as_bytes()).unwrap(),
            format!("v{i}").as_bytes()
        );
    }

    fs.clear_faults();
    acknowledged(&engine, 20..30);
    assert_eq!(value(&engine, b"k25").unwrap(), b"v25");
    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    let after = contents(&engine, &keys(30));
    for (key, stored) in &before {
        if key != b"k0" {
            assert_eq!(after.get(key), Some(stored));
        }
    }
    let k0 = value(&engine, b"k0").unwrap();
    assert!(k0 == b"v0" || k0 == b"not acknowledged", "{k0:?}");
    assert_eq!(value(&engine, b"k29").unwrap(), b"v29");
}

#[test]
fn a_full_disk_at_segment_rotation_fails_the_write_and_recovers() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::Always);
    config.segment_bytes_max = 1024;
    let engine = open(&fs, &config, &clock);
    acknowledged(&engine, 0..10);
    fs.inject(FaultKind::NoSpace);
    let mut failures = 0;
    for i in 10..60 {
        let key = format!("k{i}");
        let error = store_and_commit(&engine, key.as_bytes(), &[b'x'; 100]).unwrap_err();
        assert!(error.is_temporary(), "{error}");
        failures += 1;
    }
    assert_eq!(failures, 50);
    fs.clear_faults();
    acknowledged(&engine, 60..100);
    assert!(engine.stats().segments > 2, "rotations resumed");
    let engine = {
        engine.close().unwrap();
        open(&fs, &config, &clock)
    };
    for i in (0..10).chain(60..100) {
        let key = format!("k{i}");
        assert_eq!(
            value(&engine, key.as_bytes()).unwrap(),
            format!("v{i}").as_bytes()
        );
    }
}

#[test]
fn a_failed_write_is_retried_by_the_next_commit() {
    let (fs, clock, config, engine) = started(Durability::Always, 5);
    // Both the sync thread's write-out and the commit's retry fail.
    fs.inject(FaultKind::Eio);
    let error = store_and_commit(&engine, b"retried", b"r").unwrap_err();
    fs.clear_faults();
    assert!(error.is_temporary(), "{error}");
    // A write error is not a sync error: the next commit writes both.
    set(&engine, b"next", b"n");
    assert_eq!(engine.stats().sync_failure, None);
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &clock);
    assert_eq!(value(&engine, b"retried").unwrap(), b"r");
    assert_eq!(value(&engine, b"next").unwrap(), b"n");
    assert_eq!(contents(&engine, &keys(5)).len(), 5);
}

#[test]
fn a_failed_sync_under_always_refuses_writes_until_reopened() {
    let (fs, clock, config, engine) = started(Durability::Always, 20);
    let before = contents(&engine, &keys(20));

    fs.inject(FaultKind::EioOnSync);
    let error = store_and_commit(&engine, b"k0", b"lost?").unwrap_err();
    assert!(error.is_temporary(), "{error}");
    assert!(matches!(error, Error::WritesFailing(_)), "{error}");
    assert!(engine.stats().sync_failure.is_some());
    // Sticky: even once the disk is healthy again, no write is accepted.
    fs.clear_faults();
    for _ in 0..3 {
        let error = store_and_commit(&engine, b"k1", b"refused").unwrap_err();
        assert!(matches!(error, Error::WritesFailing(_)), "{error}");
        assert!(error.is_temporary());
    }
    assert!(matches!(
        engine.delete(b"k2", None),
        Err(Error::WritesFailing(_))
    ));
    assert!(matches!(engine.flush_all(0), Err(Error::WritesFailing(_))));
    // Regression: `sync` succeeded here, as if the failed sync had not
    // happened, though the pages it lost were never written again.
    assert!(matches!(engine.sync(), Err(Error::WritesFailing(_))));
    for i in 1..20 {
        let key = format!("k{i}");
        assert_eq!(
            value(&engine, key.as_bytes()).unwrap(),
            format!("v{i}").as_bytes()
        );
    }

    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    let after = contents(&engine, &keys(20));
    for (key, stored) in &before {
        if key != b"k0" {
            assert_eq!(after.get(key), Some(stored), "{key:?}");
        }
    }
    set(&engine, b"k1", b"accepted again");
    assert_eq!(value(&engine, b"k1").unwrap(), b"accepted again");
}

#[test]
fn acknowledged_writes_survive_a_failed_sync_followed_by_a_power_cut() {
    let (fs, clock, config, engine) = started(Durability::Always, 20);
    let before = contents(&engine, &keys(20));
    fs.inject(FaultKind::EioOnSync);
    assert!(store_and_commit(&engine, b"extra", b"x").is_err());
    fs.clear_faults();
    fs.power_cut(Some(7));
    drop(engine);
    let engine = open(&fs, &config, &clock);
    assert_eq!(contents(&engine, &keys(20)), before);
}

#[test]
fn a_failed_background_sync_under_everysec_refuses_later_writes() {
    let (fs, clock, config, engine) = started(Durability::EverySec, 10);
    engine.sync().unwrap();
    fs.inject(FaultKind::EioOnSync);
    set(&engine, b"written", b"not synced");
    // The sync thread runs at least once a second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while engine.stats().sync_failure.is_none() {
        assert!(std::time::Instant::now() < deadline, "no sync in 5 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    fs.clear_faults();
    let error = store_and_commit(&engine, b"later", b"refused").unwrap_err();
    assert!(matches!(error, Error::WritesFailing(_)), "{error}");
    assert_eq!(value(&engine, b"k3").unwrap(), b"v3");
    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    assert_eq!(contents(&engine, &keys(10)).len(), 10);
    assert_eq!(value(&engine, b"later"), None);
}

/// The story: a failed `fdatasync` used to leave the engine refusing writes
/// until a restart. Now the maintenance pass cuts the active segment back to
/// its last good sync and rewrites the records since then (kept in memory)
/// to a new segment, so writes resume by themselves once syncs succeed, and
/// writes acknowledged before the failure survive a later power cut.
#[test]
fn writes_resume_by_themselves_once_syncs_succeed_again() {
    for durability in [Durability::Always, Durability::EverySec] {
        let (fs, clock, config, engine) = started(durability, 20);
        engine.sync().unwrap();
        // Acknowledged under everysec (written, not yet synced); under
        // always this write fails with the sync.
        let pending = store_and_commit(&engine, b"pending", b"p");
        fs.inject(FaultKind::EioOnSync);
        let failed = engine.sync();
        assert!(failed.is_err());
        assert!(engine.stats().sync_failure.is_some());

        engine.maintain_now();
        assert!(
            engine.stats().sync_failure.is_some(),
            "no healing while syncs still fail"
        );
        fs.clear_faults();
        engine.maintain_now();
        assert!(engine.stats().sync_failure.is_none(), "healed");
        store_and_commit(&engine, b"after", b"a").unwrap();
        engine.sync().unwrap();
        for i in 0..20 {
            let key = format!("k{i}");
            assert_eq!(
                value(&engine, key.as_bytes()).unwrap(),
                format!("v{i}").as_bytes()
            );
        }

        fs.power_cut(Some(11));
        drop(engine);
        let engine = open(&fs, &config, &clock);
        assert_eq!(contents(&engine, &keys(20)).len(), 20, "{durability:?}");
        assert_eq!(value(&engine, b"after").unwrap(), b"a");
        if pending.is_ok() {
            assert_eq!(value(&engine, b"pending").unwrap(), b"p", "{durability:?}");
        }
    }
}

#[test]
fn writes_are_refused_once_failing_writes_fill_the_buffer_and_resume_after() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::None);
    // Large enough that no rotation (which fails outright) comes first.
    config.segment_bytes_max = 1 << 30;
    let engine = open(&fs, &config, &clock);
    acknowledged(&engine, 0..5);
    fs.inject(FaultKind::Eio);
    let big = vec![b'b'; 512 << 10];
    let mut stored = 0usize;
    let refusal = loop {
        match engine.store(StoreMode::Set, b"big", &big, 0, Expiry::Never) {
            Ok(_) => stored += 1,
            Err(error) => break error,
        }
        assert!(stored < 1024, "appends were never refused");
    };
    // 256 MiB of unwritten records is the limit.
    assert!(
        stored >= 512,
        "refused after only {stored} appends: {refusal}"
    );
    assert!(matches!(refusal, Error::WritesFailing(_)), "{refusal}");
    assert!(refusal.is_temporary(), "{refusal}");
    assert!(
        refusal.to_string().contains("write buffer full"),
        "{refusal}"
    );
    assert_eq!(value(&engine, b"k3").unwrap(), b"v3");

    // The sync thread's next round (here called directly) writes the
    // buffer out, and writes are accepted again.
    fs.clear_faults();
    engine.sync().unwrap();
    set(&engine, b"later", b"l");
    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    assert_eq!(value(&engine, b"big").unwrap(), big);
    assert_eq!(value(&engine, b"later").unwrap(), b"l");
    assert_eq!(contents(&engine, &keys(5)).len(), 5);
}

#[test]
fn under_always_a_failing_write_is_retried_at_a_bounded_rate() {
    // The sync thread writes under `always`; while the disk fails writes it
    // retries them (so that writes resume by themselves) with a pause in
    // between, not in a loop that takes the log lock as fast as it can.
    let (fs, _, _, engine) = started(Durability::Always, 5);
    fs.inject(FaultKind::Eio);
    let error = store_and_commit(&engine, b"failing", b"f").unwrap_err();
    assert!(error.is_temporary(), "{error}");
    let before = engine.stats().write_errors;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let retries = engine.stats().write_errors - before;
    fs.clear_faults();
    // A pause of 20 ms allows about 25 retries in 500 ms; a tight loop
    // makes thousands.
    assert!(
        (1..=100).contains(&retries),
        "{retries} failed writes in 500 ms"
    );
    set(&engine, b"next", b"n");
    assert_eq!(value(&engine, b"failing").unwrap(), b"f");
    assert_eq!(contents(&engine, &keys(5)).len(), 5);
}

#[test]
fn under_always_what_was_written_is_acknowledged_while_later_writes_fail() {
    // Past 1 MiB of unwritten records an append writes them out itself.
    // If the write of later records then fails, the sync thread still syncs
    // what was written: those commits succeed instead of waiting for the
    // failing write.
    let (fs, clock, config, engine) = started(Durability::Always, 0);
    let engine = std::sync::Arc::new(engine);
    let value_of = |i: usize| format!("{i:>1024}").into_bytes();
    let mut tickets = Vec::new();
    for i in 0..1100 {
        let key = format!("k{i}");
        let (_, ticket) = engine
            .store(
                StoreMode::Set,
                key.as_bytes(),
                &value_of(i),
                0,
                Expiry::Never,
            )
            .unwrap();
        tickets.push(ticket);
    }
    fs.inject(FaultKind::Eio);
    // Record 500 went out with the first MiB; the last one did not.
    let (done, result) = std::sync::mpsc::channel();
    let committer = {
        let engine = std::sync::Arc::clone(&engine);
        let ticket = tickets[500];
        std::thread::spawn(move || done.send(engine.commit(ticket)).unwrap())
    };
    let outcome = result.recv_timeout(std::time::Duration::from_secs(10));
    let last = engine.commit(tickets[1099]);
    fs.clear_faults();
    committer.join().unwrap();
    let outcome = outcome.expect("a commit of written records waited for a failing write");
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(last.unwrap_err().is_temporary());
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &clock);
    for i in 0..=500 {
        assert_eq!(
            value(&engine, format!("k{i}").as_bytes()),
            Some(value_of(i)),
            "k{i}"
        );
    }
}

#[test]
fn what_a_killed_process_left_unsynced_is_synced_at_open_so_a_later_failed_sync_drops_none_of_it() {
    for durability in [Durability::EverySec, Durability::None] {
        let (fs, clock, config, engine) = killed_before_its_next_sync(durability);
        drop(engine);
        let engine = open(&fs, &config, &clock);
        assert_eq!(contents(&engine, &keys(20)).len(), 20, "{durability:?}");
        store_and_commit(&engine, b"after", b"a").unwrap();
        // A failed sync may drop any unsynced page of the active segment;
        // heal rewrites what the log kept since its last good sync, which
        // is where open found the segment's end. Unless open synced the
        // records before that end, the failed sync left them a hole that
        // the power cut below turns to zeros, and the next open refuses.
        fs.inject(FaultKind::EioOnSync);
        assert!(engine.sync().is_err());
        fs.clear_faults();
        engine.maintain_now();
        assert!(engine.stats().sync_failure.is_none(), "healed");
        power_cut_keeps_the_20_and_after(&fs, &config, &clock, engine, durability);
    }
}

#[test]
fn a_failed_sync_at_open_rewrites_the_active_segment_so_a_restart_loses_nothing() {
    for durability in [Durability::EverySec, Durability::None] {
        let (fs, clock, config, engine) = killed_before_its_next_sync(durability);
        drop(engine);
        // Open syncs the directory, then the active segment: fail the
        // second. The failed sync leaves the killed process's records
        // readable but never to be written; only a rewrite saves them.
        fs.inject_nth(FaultKind::EioOnSync, 2);
        let engine = open(&fs, &config, &clock);
        assert_eq!(
            engine.recovery_report().rewritten_segments,
            1,
            "the fault hit the active segment's sync ({durability:?})"
        );
        assert_eq!(contents(&engine, &keys(20)).len(), 20, "{durability:?}");
        store_and_commit(&engine, b"after", b"a").unwrap();
        let engine = power_cut_keeps_the_20_and_after(&fs, &config, &clock, engine, durability);
        assert_eq!(engine.recovery_report().rewritten_segments, 0);
        assert_no_temporary_files(&fs, &config);
    }
}

/// Syncs, cuts the power and opens again: the 20 keys written before the
/// kill and the one written after it must all be there.
fn power_cut_keeps_the_20_and_after(
    fs: &MemFs,
    config: &Config,
    clock: &Clock,
    engine: Engine,
    durability: Durability,
) -> Engine {
    engine.sync().unwrap();
    fs.power_cut(None);
    drop(engine);
    let engine = open(fs, config, clock);
    assert_eq!(contents(&engine, &keys(20)).len(), 20, "{durability:?}");
    assert_eq!(value(&engine, b"after").unwrap(), b"a", "{durability:?}");
    engine
}

fn assert_no_temporary_files(fs: &MemFs, config: &Config) {
    let names = fs.file_names(&config.dir);
    assert!(
        names.iter().all(|name| !name.ends_with(".tmp")),
        "{names:?}"
    );
}

#[test]
fn when_the_rewrite_fails_too_open_fails_and_leaves_no_temporary_file() {
    let (fs, clock, config, engine) = killed_before_its_next_sync(Durability::EverySec);
    drop(engine);
    // The active segment's sync, then the rewrite's first write-back.
    fs.inject_nth(FaultKind::EioOnSync, 2);
    fs.inject_nth(FaultKind::EioOnSync, 3);
    let dir_syncs_before = fs.sync_dir_calls();
    let error = Engine::open_with(config.clone(), Arc::new(fs.clone()), clock.clone())
        .err()
        .expect("open fails");
    let message = error.to_string();
    assert!(
        message.contains("syncing") && message.contains(".seg"),
        "the first error, the segment's sync: {message}"
    );
    // Open's own, and the one after removing the temporary file: the
    // rewrite was tried.
    assert_eq!(fs.sync_dir_calls(), dir_syncs_before + 2);
    fs.clear_faults();
    assert_no_temporary_files(&fs, &config);
}
