//! How the host tells the log that the threads running its committers have
//! run out of work.
//!
//! Under `Always`, a sync that starts while the request threads are still
//! busy covers only the committers that happened to arrive first; the
//! others, whose records are moments away, need a sync of their own. When
//! the host reports each time one of those threads runs out of work (a
//! tokio worker about to park, say), the sync thread can tell the two
//! cases apart: if no thread has run out of work since the previous sync
//! began, more committers are on their way, and it waits for them, at most
//! as long as the previous sync took (see [`Log::sync_loop`]).
//!
//! [`Log::sync_loop`]: crate::log::Log::sync_loop

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Counts the host's reports that a request thread ran out of work, and
/// lets the sync thread wait for the next one. Attach one to an engine with
/// [`Engine::attach_idle_signal`](crate::Engine::attach_idle_signal).
#[derive(Debug, Default)]
pub struct IdleSignal {
    /// Reports so far.
    reports: AtomicU64,
    /// Set while the sync thread waits for a report, so a report takes the
    /// lock and wakes it only then.
    watched: AtomicBool,
    lock: Mutex<()>,
    reported: Condvar,
}

impl IdleSignal {
    /// Reports that a thread running committers has no work left. Cheap
    /// (one atomic increment) unless the sync thread is waiting for it.
    pub fn report(&self) {
        // Both sides use `SeqCst`: either the waiter sees this increment
        // before it sleeps, or this sees `watched` and wakes it.
        self.reports.fetch_add(1, Ordering::SeqCst);
        if self.watched.load(Ordering::SeqCst) {
            let _guard = self.lock.lock();
            self.reported.notify_all();
        }
    }

    /// Reports so far.
    pub fn reports(&self) -> u64 {
        self.reports.load(Ordering::SeqCst)
    }

    /// Waits until there have been more than `seen` reports, or until
    /// `deadline`. Returns whether a report came.
    pub fn wait_past(&self, seen: u64, deadline: Instant) -> bool {
        if self.reports() != seen {
            return true;
        }
        self.watched.store(true, Ordering::SeqCst);
        let mut guard = self.lock.lock();
        while self.reports() == seen {
            if self.reported.wait_until(&mut guard, deadline).timed_out() {
                break;
            }
        }
        drop(guard);
        self.watched.store(false, Ordering::SeqCst);
        self.reports() != seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    #[test]
    fn a_report_already_made_ends_the_wait_at_once() {
        let signal = IdleSignal::default();
        let seen = signal.reports();
        signal.report();
        // A deadline already past: only the report can make this true.
        assert!(signal.wait_past(seen, Instant::now()));
        assert_eq!(signal.reports(), seen + 1);
    }

    #[test]
    fn without_a_report_the_wait_ends_at_the_deadline() {
        let signal = IdleSignal::default();
        let seen = signal.reports();
        assert!(!signal.wait_past(seen, Instant::now() + Duration::from_millis(5)));
        assert!(!signal.watched.load(Ordering::SeqCst));
    }

    #[test]
    fn a_report_from_another_thread_wakes_the_waiter() {
        let signal = Arc::new(IdleSignal::default());
        let seen = signal.reports();
        let start = Arc::new(Barrier::new(2));
        let reporter = {
            let signal = Arc::clone(&signal);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                signal.report();
            })
        };
        start.wait();
        // Far off: the test would hang for a minute, not pass, if the
        // report were lost.
        assert!(signal.wait_past(seen, Instant::now() + Duration::from_secs(60)));
        reporter.join().unwrap();
    }
}
