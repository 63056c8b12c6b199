//! Group commits under `Always` with an idle signal attached: a sync may
//! wait for busy request threads to bring more committers, but every
//! committer is still acknowledged and its write is there after a reopen,
//! whether no signal is attached, one is attached and never reported, or
//! one is reported often. (The decision to wait and the signal itself are
//! unit-tested in `log.rs` and `idle.rs`.)

#![allow(clippy::unwrap_used)]

mod common;

use common::{keys, set, value};
use larder_engine::fs::OsFs;
use larder_engine::{Clock, Config, Durability, Engine, IdleSignal};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const COMMITTERS: usize = 4;
const SETS_EACH: usize = 150;

/// How the host reports idleness in one run.
#[derive(Debug, Clone, Copy)]
enum Host {
    /// No signal attached.
    Detached,
    /// Attached, never reported: every sync after the first may wait.
    Silent,
    /// Attached, reported every 50 µs from a thread of its own.
    Reporting,
}

/// `Always` on real files in `dir`, so each sync takes a real `fdatasync`.
fn always_config(dir: &Path) -> Config {
    let mut config = Config::new(dir);
    config.durability = Durability::Always;
    config.background_threads = false;
    config
}

fn open_os(config: &Config) -> Engine {
    Engine::open_with(config.clone(), Arc::new(OsFs), Clock::system()).unwrap()
}

/// Committer threads set and commit their own keys concurrently.
fn commit_concurrently(engine: &Arc<Engine>, keys: &Arc<Vec<Vec<u8>>>) {
    let committers: Vec<_> = (0..COMMITTERS)
        .map(|committer| {
            let engine = Arc::clone(engine);
            let keys = Arc::clone(keys);
            std::thread::spawn(move || {
                for key in keys.iter().skip(committer).step_by(COMMITTERS) {
                    set(&engine, key, key);
                }
            })
        })
        .collect();
    for committer in committers {
        committer.join().unwrap();
    }
}

fn run(host: Host) {
    let dir = tempfile::tempdir().unwrap();
    let config = always_config(dir.path());
    let engine = Arc::new(open_os(&config));
    let signal = Arc::new(IdleSignal::default());
    let stop = Arc::new(AtomicBool::new(false));
    let reporter = match host {
        Host::Detached => None,
        Host::Silent => {
            assert!(engine.attach_idle_signal(Arc::clone(&signal)));
            None
        }
        Host::Reporting => {
            assert!(engine.attach_idle_signal(Arc::clone(&signal)));
            let signal = Arc::clone(&signal);
            let stop = Arc::clone(&stop);
            Some(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    signal.report();
                    std::thread::sleep(Duration::from_micros(50));
                }
            }))
        }
    };
    let keys = Arc::new(keys(COMMITTERS * SETS_EACH));
    commit_concurrently(&engine, &keys);
    stop.store(true, Ordering::Relaxed);
    if let Some(reporter) = reporter {
        reporter.join().unwrap();
    }

    let stats = engine.stats();
    assert!(stats.group_commits > 0, "{host:?}: {stats:?}");
    if matches!(host, Host::Detached) {
        assert_eq!(
            stats.group_commits_waited, 0,
            "no signal, no wait: {stats:?}"
        );
    }

    Arc::into_inner(engine).unwrap().close().unwrap();
    let engine = open_os(&config);
    for key in keys.iter() {
        assert_eq!(
            value(&engine, key).as_deref(),
            Some(key.as_slice()),
            "{host:?}"
        );
    }
}

#[test]
fn every_committer_is_acknowledged_without_a_signal() {
    run(Host::Detached);
}

#[test]
fn every_committer_is_acknowledged_when_the_host_never_reports_idleness() {
    run(Host::Silent);
}

#[test]
fn every_committer_is_acknowledged_when_the_host_reports_idleness() {
    run(Host::Reporting);
}

#[test]
fn a_second_signal_is_refused_and_the_first_kept() {
    let dir = tempfile::tempdir().unwrap();
    let config = always_config(dir.path());
    let engine = open_os(&config);
    let first = Arc::new(IdleSignal::default());
    assert!(engine.attach_idle_signal(Arc::clone(&first)));
    assert!(!engine.attach_idle_signal(Arc::new(IdleSignal::default())));
    // The engine holds the first signal, and only that one.
    assert_eq!(Arc::strong_count(&first), 2);
    set(&engine, b"key", b"value");
    assert_eq!(value(&engine, b"key"), Some(b"value".to_vec()));
}
