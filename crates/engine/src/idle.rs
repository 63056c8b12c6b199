//! How the host tells the log that the threads running its committers have
//! run out of work.
//!
//! Under `Always`, a sync that starts while the request threads are still
//! busy covers only the committers that happened to arrive first; others,
//! whose requests those threads may be about to handle, need a sync of
//! their own. When the host reports each time one of those threads runs
//! out of work (a tokio worker that finds no task to run and is about to
//! park, say), the sync thread can tell a busy server from an idle one: if
//! no thread has run out of work since the previous round began, it waits
//! for one to, at most as long as the previous round took (see
//! [`Log::fill_group`]).
//!
//! Threads: any thread may call [`IdleSignal::report`], as often as it
//! likes. One thread at a time waits ([`IdleSignal::wait_past`], the
//! sync thread of the one engine the signal is attached to); another
//! waiter would still be woken, by its deadline at the latest.
//!
//! [`Log::fill_group`]: crate::log::Log

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Counts the host's reports that a request thread ran out of work, and
/// lets the sync thread wait for the next one. Attach one to an engine with
/// [`Engine::attach_idle_signal`](crate::Engine::attach_idle_signal).
#[derive(Debug, Default)]
pub struct IdleSignal {
    /// Reports so far.
    reports: AtomicU64,
    /// Threads waiting for a report: only while there are any does a
    /// report take the lock to wake them.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    reported: Condvar,
}

impl IdleSignal {
    /// Reports that a thread running committers has no work left. Cheap
    /// (one atomic increment) unless the sync thread is waiting for it.
    pub fn report(&self) {
        // Both sides use `SeqCst`: either the waiter sees this increment
        // before it sleeps, or this sees it waiting and wakes it.
        self.reports.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock();
            self.reported.notify_all();
        }
    }

    /// Reports so far.
    pub(crate) fn reports(&self) -> u64 {
        self.reports.load(Ordering::SeqCst)
    }

    /// Waits until there have been more than `seen` reports, or until
    /// `deadline`. Returns whether a report came.
    pub(crate) fn wait_past(&self, seen: u64, deadline: Instant) -> bool {
        if self.reports() != seen {
            return true;
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock.lock();
        while self.reports() == seen {
            if self.reported.wait_until(&mut guard, deadline).timed_out() {
                break;
            }
        }
        drop(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        self.reports() != seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
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
    fn without_a_report_the_wait_lasts_until_the_deadline() {
        let signal = IdleSignal::default();
        let seen = signal.reports();
        let deadline = Instant::now() + Duration::from_millis(5);
        assert!(!signal.wait_past(seen, deadline));
        assert!(Instant::now() >= deadline, "returned before its deadline");
        assert_eq!(signal.waiters.load(Ordering::SeqCst), 0);
    }

    /// Reports once `waiters` threads are asleep in `wait_past`.
    fn report_once_waited_on(
        signal: &Arc<IdleSignal>,
        waiters: usize,
    ) -> std::thread::JoinHandle<()> {
        let signal = Arc::clone(signal);
        std::thread::spawn(move || {
            while signal.waiters.load(Ordering::SeqCst) < waiters {
                std::thread::yield_now();
            }
            signal.report();
        })
    }

    #[test]
    fn a_report_wakes_every_waiter_before_its_deadline() {
        // The deadline is a minute off: were the wake-up lost, the waiters
        // would return only then, and the check of the time would fail.
        let signal = Arc::new(IdleSignal::default());
        let seen = signal.reports();
        let deadline = Instant::now() + Duration::from_secs(60);
        let other = {
            let signal = Arc::clone(&signal);
            std::thread::spawn(move || signal.wait_past(seen, deadline))
        };
        let reporter = report_once_waited_on(&signal, 2);
        assert!(signal.wait_past(seen, deadline));
        assert!(other.join().unwrap());
        reporter.join().unwrap();
        assert!(
            Instant::now() < deadline,
            "woken by the deadline, not the report"
        );
        assert_eq!(signal.waiters.load(Ordering::SeqCst), 0);
    }
}
