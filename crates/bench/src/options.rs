//! What a run does: [`BenchOptions`], their validation, and the parsers for
//! the option syntaxes shared with the command line (durations, ratios,
//! value sizes).
//!
//! Validation checks every option against [`crate::limits`] before anything
//! connects, so that a run that starts can always finish by itself.

use crate::error::BenchError;
use crate::limits::{
    CONNECTIONS_MAX, DURATION_MAX, INTERVALS_MAX, INTERVAL_MIN, KEY_COUNT_MAX,
    KEY_PREFIX_BYTES_MAX, PIPELINE_MAX, RATE_MAX, REQUESTS_MAX, THREADS_MAX, TIMEOUT_MAX,
    VALUE_BYTES_MAX, WARMUP_MAX,
};
use crate::request::Protocol;
use larder_protocol::KEY_BYTES_MAX;
use std::path::PathBuf;
use std::time::Duration;

/// Largest accepted Zipf skew; beyond it nearly every draw is the first key.
pub const ZIPF_SKEW_MAX: f64 = 10.0;

/// How keys are chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyPattern {
    /// Every key equally likely.
    Uniform,
    /// Zipf-distributed with the given skew (0.99 is YCSB's default): key 0
    /// is the most popular.
    Zipfian { skew: f64 },
    /// Each connection walks the keys in order from its own starting point,
    /// wrapping at the end.
    Sequential,
    /// The ids in a file, one per line, replayed in file order by each
    /// connection from its own starting point; the key count is the number
    /// of ids.
    File(PathBuf),
}

impl KeyPattern {
    /// The name used in reports.
    pub fn name(&self) -> &'static str {
        match self {
            KeyPattern::Uniform => "uniform",
            KeyPattern::Zipfian { .. } => "zipfian",
            KeyPattern::Sequential => "sequential",
            KeyPattern::File(_) => "file",
        }
    }
}

/// The share of gets and sets: `gets` in every `gets + sets` requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ratio {
    pub gets: u32,
    pub sets: u32,
}

/// Value sizes, drawn uniformly from `min_bytes..=max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueSize {
    pub min_bytes: usize,
    pub max_bytes: usize,
}

/// Everything a run needs. Build one with `..BenchOptions::default()` or
/// from [`crate::BenchArgs`]; [`crate::run`] validates it first.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// `host:port` of the server.
    pub target: String,
    pub protocol: Protocol,
    /// Worker threads of the client runtime.
    pub threads: usize,
    /// Connections per thread; the run opens `threads * connections_per_thread`.
    pub connections_per_thread: usize,
    /// Most requests in flight per connection.
    pub pipeline: usize,
    pub ratio: Ratio,
    /// Number of distinct keys (ignored for [`KeyPattern::File`]).
    pub key_count: u64,
    pub key_pattern: KeyPattern,
    /// Printable ASCII put before every id.
    pub key_prefix: String,
    pub value_size: ValueSize,
    /// Length of the measured phase. With `requests` too, whichever ends
    /// first; with neither, validation fails.
    pub duration: Option<Duration>,
    /// Measured requests over all connections (split evenly).
    pub requests: Option<u64>,
    /// Time before measuring starts; requests due in it are not counted.
    pub warmup: Duration,
    /// Write every key once, pipelined, before the clock starts.
    pub preload: bool,
    /// Open-loop target rate in requests per second over all connections;
    /// `None` sends each request as soon as the pipeline has room.
    pub rate: Option<u64>,
    /// Longest wait for a connection to open or for the next byte of a
    /// reply; a connection that exceeds it is dropped and counted.
    pub timeout: Duration,
    /// Seed of the per-connection random number generators; `None` picks one
    /// (reported, so a run can be repeated).
    pub seed: Option<u64>,
    /// Cut the measured phase into intervals of this length and report
    /// each one (requests, ops/s, latency percentiles); `None` reports only
    /// the whole run.
    pub interval: Option<Duration>,
    /// Print a progress line to stderr every second, or with `interval` a
    /// line per interval instead.
    pub progress: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            target: "127.0.0.1:11211".to_owned(),
            protocol: Protocol::Memcached,
            threads: 2,
            connections_per_thread: 25,
            pipeline: 1,
            ratio: Ratio { gets: 90, sets: 10 },
            key_count: 100_000,
            key_pattern: KeyPattern::Uniform,
            key_prefix: "key:".to_owned(),
            value_size: ValueSize {
                min_bytes: 100,
                max_bytes: 100,
            },
            duration: Some(Duration::from_secs(10)),
            requests: None,
            warmup: Duration::ZERO,
            preload: false,
            rate: None,
            timeout: Duration::from_secs(10),
            seed: None,
            interval: None,
            progress: true,
        }
    }
}

fn invalid(option: &'static str, reason: impl Into<String>) -> BenchError {
    BenchError::InvalidOption {
        option,
        reason: reason.into(),
    }
}

fn check_range<T: PartialOrd + std::fmt::Display>(
    option: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<(), BenchError> {
    if value < min || value > max {
        return Err(invalid(option, format!("{value} is not in {min}..={max}")));
    }
    Ok(())
}

impl BenchOptions {
    /// Total connections.
    pub fn connections(&self) -> usize {
        self.threads.saturating_mul(self.connections_per_thread)
    }

    /// Checks every option against its bound. Key files are checked when
    /// they are loaded, at the start of [`crate::run`].
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.target.trim().is_empty() {
            return Err(invalid("target", "empty"));
        }
        check_range("threads", self.threads, 1, THREADS_MAX)?;
        check_range(
            "connections",
            self.connections_per_thread,
            1,
            CONNECTIONS_MAX,
        )?;
        if self.connections() > CONNECTIONS_MAX {
            let reason = format!(
                "{} threads x {} connections is more than {CONNECTIONS_MAX} connections",
                self.threads, self.connections_per_thread
            );
            return Err(invalid("connections", reason));
        }
        check_range("pipeline", self.pipeline, 1, PIPELINE_MAX)?;
        if self.ratio.gets == 0 && self.ratio.sets == 0 {
            return Err(invalid("ratio", "gets and sets are both 0"));
        }
        self.validate_keys()?;
        let ValueSize {
            min_bytes,
            max_bytes,
        } = self.value_size;
        check_range("value-size", max_bytes, 0, VALUE_BYTES_MAX)?;
        if min_bytes > max_bytes {
            return Err(invalid(
                "value-size",
                format!("{min_bytes} is more than {max_bytes}"),
            ));
        }
        self.validate_stop()?;
        if let Some(rate) = self.rate {
            check_range("rate", rate, 1, RATE_MAX)?;
        }
        if self.timeout.is_zero() || self.timeout > TIMEOUT_MAX {
            return Err(invalid(
                "timeout",
                format!("{:?} is not in (0, {TIMEOUT_MAX:?}]", self.timeout),
            ));
        }
        Ok(())
    }

    fn validate_keys(&self) -> Result<(), BenchError> {
        let prefix = self.key_prefix.as_bytes();
        check_range("key-prefix", prefix.len(), 0, KEY_PREFIX_BYTES_MAX)?;
        if !prefix.iter().all(u8::is_ascii_graphic) {
            return Err(invalid(
                "key-prefix",
                "must be printable ASCII without spaces",
            ));
        }
        match &self.key_pattern {
            KeyPattern::File(_) => return Ok(()),
            KeyPattern::Zipfian { skew } => {
                if !skew.is_finite() || *skew < 0.0 || *skew > ZIPF_SKEW_MAX {
                    return Err(invalid(
                        "zipf-skew",
                        format!("{skew} is not in 0..={ZIPF_SKEW_MAX}"),
                    ));
                }
            }
            KeyPattern::Uniform | KeyPattern::Sequential => {}
        }
        check_range("keys", self.key_count, 1, KEY_COUNT_MAX)?;
        let longest_id = (self.key_count - 1).to_string().len();
        if prefix.len() + longest_id > KEY_BYTES_MAX {
            let reason =
                format!("prefix plus a {longest_id}-digit id is longer than {KEY_BYTES_MAX} bytes");
            return Err(invalid("key-prefix", reason));
        }
        Ok(())
    }

    fn validate_stop(&self) -> Result<(), BenchError> {
        if self.duration.is_none() && self.requests.is_none() {
            return Err(invalid("duration", "give a duration or a request count"));
        }
        if let Some(duration) = self.duration {
            if duration.is_zero() || duration > DURATION_MAX {
                return Err(invalid(
                    "duration",
                    format!("{duration:?} is not in (0, {DURATION_MAX:?}]"),
                ));
            }
        }
        if let Some(requests) = self.requests {
            check_range("requests", requests, 1, REQUESTS_MAX)?;
        }
        if let Some(interval) = self.interval {
            self.validate_interval(interval)?;
        }
        if self.warmup > WARMUP_MAX {
            return Err(invalid(
                "warmup",
                format!("{:?} is more than {WARMUP_MAX:?}", self.warmup),
            ));
        }
        Ok(())
    }

    /// An interval must be long enough to hold replies, and the longest the
    /// measured phase can last must not hold more than [`INTERVALS_MAX`].
    fn validate_interval(&self, interval: Duration) -> Result<(), BenchError> {
        if interval < INTERVAL_MIN || interval > DURATION_MAX {
            return Err(invalid(
                "interval",
                format!("{interval:?} is not in [{INTERVAL_MIN:?}, {DURATION_MAX:?}]"),
            ));
        }
        let longest = self.duration.unwrap_or(DURATION_MAX);
        let intervals = longest.as_nanos().div_ceil(interval.as_nanos());
        if intervals > u128::from(INTERVALS_MAX) {
            let reason = format!(
                "{interval:?} cuts a measured phase of up to {longest:?} into more than {INTERVALS_MAX} intervals; give a longer interval or a --duration"
            );
            return Err(invalid("interval", reason));
        }
        Ok(())
    }
}

/// Parses a duration: a number with an optional unit `ms`, `s`, `m` or `h`
/// (`500ms`, `5s`, `2m`, `1.5h`); a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 500ms, 5s, 2m or 1h"))?;
    let seconds_per_unit = match unit.trim() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("unknown unit {other:?} (use ms, s, m or h)")),
    };
    let seconds = number * seconds_per_unit;
    // Anything past a year is refused here; validation applies the real bounds.
    if !seconds.is_finite() || seconds > 366.0 * 86_400.0 {
        return Err(format!("{text:?} is too long"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses `GETS:SETS`, for example `90:10`, `1:0` or `0:1`.
pub fn parse_ratio(text: &str) -> Result<Ratio, String> {
    let usage = || format!("{text:?} is not GETS:SETS like 90:10");
    let (gets, sets) = text.split_once(':').ok_or_else(usage)?;
    let gets = gets.trim().parse().map_err(|_| usage())?;
    let sets = sets.trim().parse().map_err(|_| usage())?;
    Ok(Ratio { gets, sets })
}

/// Parses a value size: `BYTES` or `MIN-MAX` (bytes, inclusive).
pub fn parse_value_size(text: &str) -> Result<ValueSize, String> {
    let usage = || format!("{text:?} is not BYTES or MIN-MAX like 100 or 32-1024");
    let (min, max) = text.split_once('-').unwrap_or((text, text));
    let min_bytes = min.trim().parse().map_err(|_| usage())?;
    let max_bytes = max.trim().parse().map_err(|_| usage())?;
    Ok(ValueSize {
        min_bytes,
        max_bytes,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]
mod tests {
    use super::*;

    fn refused(options: BenchOptions) -> &'static str {
        match options.validate() {
            Err(BenchError::InvalidOption { option, .. }) => option,
            other => panic!("expected an invalid option, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid() {
        BenchOptions::default().validate().unwrap();
    }

    #[test]
    fn out_of_range_options_are_refused_by_name() {
        let base = BenchOptions::default;
        assert_eq!(
            refused(BenchOptions {
                threads: 0,
                ..base()
            }),
            "threads"
        );
        assert_eq!(
            refused(BenchOptions {
                pipeline: PIPELINE_MAX + 1,
                ..base()
            }),
            "pipeline"
        );
        assert_eq!(
            refused(BenchOptions {
                key_count: 0,
                ..base()
            }),
            "keys"
        );
        assert_eq!(
            refused(BenchOptions {
                ratio: Ratio { gets: 0, sets: 0 },
                ..base()
            }),
            "ratio"
        );
        assert_eq!(
            refused(BenchOptions {
                rate: Some(0),
                ..base()
            }),
            "rate"
        );
        assert_eq!(
            refused(BenchOptions {
                timeout: Duration::ZERO,
                ..base()
            }),
            "timeout"
        );
        assert_eq!(
            refused(BenchOptions {
                target: " ".to_owned(),
                ..base()
            }),
            "target"
        );
        let too_big = ValueSize {
            min_bytes: 1,
            max_bytes: VALUE_BYTES_MAX + 1,
        };
        assert_eq!(
            refused(BenchOptions {
                value_size: too_big,
                ..base()
            }),
            "value-size"
        );
        let inverted = ValueSize {
            min_bytes: 10,
            max_bytes: 5,
        };
        assert_eq!(
            refused(BenchOptions {
                value_size: inverted,
                ..base()
            }),
            "value-size"
        );
    }

    #[test]
    fn too_many_connections_in_total_are_refused() {
        let options = BenchOptions {
            threads: 100,
            connections_per_thread: CONNECTIONS_MAX / 10,
            ..BenchOptions::default()
        };
        assert_eq!(refused(options), "connections");
    }

    #[test]
    fn a_run_needs_a_duration_or_a_request_count() {
        let neither = BenchOptions {
            duration: None,
            requests: None,
            ..BenchOptions::default()
        };
        assert_eq!(refused(neither), "duration");
        let count_only = BenchOptions {
            duration: None,
            requests: Some(10),
            ..BenchOptions::default()
        };
        count_only.validate().unwrap();
        let too_long = BenchOptions {
            duration: Some(DURATION_MAX * 2),
            ..BenchOptions::default()
        };
        assert_eq!(refused(too_long), "duration");
        let too_warm = BenchOptions {
            warmup: WARMUP_MAX * 2,
            ..BenchOptions::default()
        };
        assert_eq!(refused(too_warm), "warmup");
    }

    #[test]
    fn intervals_are_bounded_in_length_and_in_number() {
        let with = |interval: Duration, duration: Option<Duration>| BenchOptions {
            interval: Some(interval),
            duration,
            requests: Some(100),
            ..BenchOptions::default()
        };
        with(Duration::from_secs(10), Some(Duration::from_secs(600)))
            .validate()
            .unwrap();
        with(INTERVAL_MIN, Some(Duration::from_secs(60)))
            .validate()
            .unwrap();
        assert_eq!(
            refused(with(
                Duration::from_millis(99),
                Some(Duration::from_secs(60))
            )),
            "interval"
        );
        assert_eq!(
            refused(with(DURATION_MAX * 2, Some(Duration::from_secs(60)))),
            "interval"
        );
        // A request count alone may run for DURATION_MAX: too many 100 ms
        // intervals, but one-second ones fit.
        assert_eq!(refused(with(INTERVAL_MIN, None)), "interval");
        with(Duration::from_secs(1), None).validate().unwrap();
    }

    #[test]
    fn key_prefixes_must_be_memcached_safe() {
        let spaced = BenchOptions {
            key_prefix: "a b".to_owned(),
            ..BenchOptions::default()
        };
        assert_eq!(refused(spaced), "key-prefix");
        let long = BenchOptions {
            key_prefix: "p".repeat(KEY_PREFIX_BYTES_MAX + 1),
            ..BenchOptions::default()
        };
        assert_eq!(refused(long), "key-prefix");
        let longest = BenchOptions {
            key_prefix: "p".repeat(KEY_PREFIX_BYTES_MAX),
            key_count: KEY_COUNT_MAX,
            ..BenchOptions::default()
        };
        longest.validate().unwrap();
    }

    #[test]
    fn zipf_skew_must_be_finite_and_non_negative() {
        for skew in [-0.5, f64::NAN, f64::INFINITY, ZIPF_SKEW_MAX + 1.0] {
            let options = BenchOptions {
                key_pattern: KeyPattern::Zipfian { skew },
                ..BenchOptions::default()
            };
            assert_eq!(refused(options), "zipf-skew");
        }
        let options = BenchOptions {
            key_pattern: KeyPattern::Zipfian { skew: 0.99 },
            ..BenchOptions::default()
        };
        options.validate().unwrap();
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1e300").is_err());
    }

    #[test]
    fn ratios_and_value_sizes_parse() {
        assert_eq!(parse_ratio("90:10").unwrap(), Ratio { gets: 90, sets: 10 });
        assert_eq!(parse_ratio("0:1").unwrap(), Ratio { gets: 0, sets: 1 });
        assert!(parse_ratio("90").is_err());
        assert!(parse_ratio("-1:2").is_err());
        assert_eq!(
            parse_value_size("100").unwrap(),
            ValueSize {
                min_bytes: 100,
                max_bytes: 100
            }
        );
        assert_eq!(
            parse_value_size("32-1024").unwrap(),
            ValueSize {
                min_bytes: 32,
                max_bytes: 1024
            }
        );
        assert!(parse_value_size("big").is_err());
    }
}
