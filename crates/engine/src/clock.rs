//! Time, as the engine sees it, and memcached's expiry rules.
//!
//! Expiry times are stored as absolute unix seconds (`u32`, 0 = never). The
//! clock is injectable so tests can move time forward without sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Memcached treats an expiry above this many seconds (30 days) as an
/// absolute unix time rather than a count of seconds from now.
pub const RELATIVE_EXPIRY_SECS_MAX: i64 = 60 * 60 * 24 * 30;

/// A source of the current unix time in seconds. Cloning shares the source.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    /// Seconds added to the system time; tests move time with it.
    offset_secs: Arc<AtomicI64>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// The current unix time in seconds.
    pub fn now(&self) -> u32 {
        let now = system_secs() + self.offset_secs.load(Ordering::Relaxed);
        now.clamp(1, i64::from(u32::MAX)) as u32
    }

    /// Moves this clock (and every clone) forward by `secs`. For tests.
    pub fn advance(&self, secs: i64) {
        self.offset_secs.fetch_add(secs, Ordering::Relaxed);
    }
}

/// Unix seconds from the kernel's coarse real-time clock: it is read on
/// every request, and a tick of a few milliseconds is plenty for expiry in
/// whole seconds.
fn system_secs() -> i64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut time) };
    if rc == 0 {
        return time.tv_sec;
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs() as i64)
        .unwrap_or(0)
}

/// An expiry as a client states it, converted to the stored form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Never expires.
    Never,
    /// Expires at this unix second.
    At(u32),
    /// Already expired: the write removes the item (memcached's negative
    /// exptime).
    Immediately,
}

impl Expiry {
    /// Converts memcached's exptime argument: 0 never; up to 30 days, seconds
    /// from now; above that, an absolute unix time (in the past means
    /// expired); negative, expired at once.
    pub fn from_memcached(exptime: i64, now: u32) -> Expiry {
        if exptime == 0 {
            Expiry::Never
        } else if exptime < 0 {
            Expiry::Immediately
        } else if exptime <= RELATIVE_EXPIRY_SECS_MAX {
            let at = i64::from(now) + exptime;
            Expiry::At(at.min(i64::from(u32::MAX)) as u32)
        } else if exptime <= i64::from(now) {
            Expiry::Immediately
        } else {
            Expiry::At(exptime.min(i64::from(u32::MAX)) as u32)
        }
    }

    /// The stored form: absolute unix seconds, 0 = never. `Immediately`
    /// becomes a time in the past (1).
    pub fn stored(self) -> u32 {
        match self {
            Expiry::Never => 0,
            Expiry::At(at) => at,
            Expiry::Immediately => 1,
        }
    }
}

/// True when an item with stored expiry `exptime` is expired at `now`.
pub fn is_expired(exptime: u32, now: u32) -> bool {
    exptime != 0 && exptime <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_expiry_rules_hold() {
        let now = 1_800_000_000;
        assert_eq!(Expiry::from_memcached(0, now), Expiry::Never);
        assert_eq!(Expiry::from_memcached(-1, now), Expiry::Immediately);
        assert_eq!(Expiry::from_memcached(10, now), Expiry::At(now + 10));
        assert_eq!(
            Expiry::from_memcached(RELATIVE_EXPIRY_SECS_MAX, now),
            Expiry::At(now + RELATIVE_EXPIRY_SECS_MAX as u32)
        );
        assert_eq!(
            Expiry::from_memcached(i64::from(now) + 5, now),
            Expiry::At(now + 5)
        );
        assert_eq!(
            Expiry::from_memcached(RELATIVE_EXPIRY_SECS_MAX + 1, now),
            Expiry::Immediately
        );
        assert!(is_expired(Expiry::Immediately.stored(), now));
        assert!(!is_expired(0, now));
        assert!(is_expired(now, now));
        assert!(!is_expired(now + 1, now));
    }

    #[test]
    fn the_coarse_clock_agrees_with_the_system_clock() {
        let system = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!((system_secs() - system).abs() <= 1);
    }

    #[test]
    fn advancing_a_clock_moves_its_clones() {
        let clock = Clock::system();
        let clone = clock.clone();
        let before = clone.now();
        clock.advance(3600);
        assert!(clone.now() >= before + 3600);
    }
}
