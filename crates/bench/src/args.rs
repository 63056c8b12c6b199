//! The command line of `larder bench`: [`BenchArgs`] (a `clap::Args`, so any
//! binary can embed it as a subcommand) and [`run_cli`], which turns it into
//! [`BenchOptions`], runs, and prints the report.

use crate::error::BenchError;
use crate::options::{
    parse_duration, parse_ratio, parse_value_size, BenchOptions, KeyPattern, Ratio, ValueSize,
};
use crate::request::Protocol;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Key choice on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyPatternArg {
    /// Every key equally likely.
    Uniform,
    /// Zipf-distributed (see --zipf-skew); key 0 is the most popular.
    Zipfian,
    /// Each connection walks the keys in order, wrapping.
    Sequential,
    /// The ids in --key-file, in file order, wrapping.
    File,
}

/// Load a memcached (or Redis) server and report throughput and latency.
///
/// Opens threads x connections connections, optionally writes every key
/// once (--preload), then sends gets and sets for --duration or until
/// --requests are answered, whichever comes first. Latency is measured from
/// when each request was due: when it was sent in closed loop (the default),
/// or its slot in a fixed schedule with --rate (open loop), so that a
/// stalled server cannot hide its stalls. Prints a progress line to stderr
/// every second (with --interval, a line per interval instead) and a summary
/// (or JSON with --json) at the end.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Server address, host:port, or the path of a Unix domain socket
    /// (starting with / or unix:).
    #[arg(
        long,
        short = 's',
        default_value = "127.0.0.1:11211",
        value_name = "HOST:PORT|PATH"
    )]
    pub target: String,
    /// Wire protocol: memcached text (get/set) or redis RESP (GET/SET).
    #[arg(long, value_enum, default_value = "memcached")]
    pub protocol: Protocol,
    /// Client worker threads. With more of them than the CPUs the client
    /// may use, a thread kept busy by its connections runs out its time
    /// slice while other threads' replies wait, and that wait counts as
    /// latency.
    #[arg(long, short = 't', default_value_t = 2)]
    pub threads: usize,
    /// Connections per thread.
    #[arg(long, short = 'c', default_value_t = 25)]
    pub connections: usize,
    /// Requests in flight per connection.
    #[arg(long, short = 'P', default_value_t = 1)]
    pub pipeline: usize,
    /// Share of gets and sets, GETS:SETS (90:10, 1:0 for gets only).
    #[arg(long, default_value = "90:10", value_parser = parse_ratio, value_name = "GETS:SETS")]
    pub ratio: Ratio,
    /// Number of distinct keys (ignored with --key-file).
    #[arg(long, short = 'k', default_value_t = 100_000)]
    pub keys: u64,
    /// How keys are chosen [default: uniform, or file with --key-file].
    #[arg(long, value_enum)]
    pub key_pattern: Option<KeyPatternArg>,
    /// Skew of the zipfian pattern (0 is uniform; higher is more skewed).
    #[arg(long, default_value_t = 0.99)]
    pub zipf_skew: f64,
    /// File of key ids, one per line, used in file order.
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Text put before every id to make the key.
    #[arg(long, default_value = "key:")]
    pub key_prefix: String,
    /// Value size in bytes, fixed (100) or a range drawn uniformly (32-1024).
    #[arg(long, short = 'v', default_value = "100", value_parser = parse_value_size, value_name = "BYTES|MIN-MAX")]
    pub value_size: ValueSize,
    /// Length of the measured phase (500ms, 10s, 2m) [default: 10s, or none with --requests].
    #[arg(long, short = 'd', value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after this many measured requests (over all connections).
    #[arg(long, short = 'n')]
    pub requests: Option<u64>,
    /// Time before measuring starts; requests due in it are not counted.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Write every key once (pipelined) before the clock starts.
    #[arg(long)]
    pub preload: bool,
    /// Open-loop target rate in requests per second over all connections.
    #[arg(long, value_name = "REQUESTS_PER_SECOND")]
    pub rate: Option<u64>,
    /// Longest wait to connect or for a reply before a connection is dropped.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Seed for the random choices [default: random, shown in the report].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Report every interval of this length of the measured phase (10s, 1m):
    /// requests, ops/s and latency p50/p99/max of the replies in it. Prints
    /// a line per interval on stderr instead of the per-second progress
    /// line, and adds `intervals` to the report.
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

impl BenchArgs {
    /// The options these arguments describe (not yet validated: [`crate::run`]
    /// does that).
    pub fn to_options(&self) -> Result<BenchOptions, BenchError> {
        let key_pattern = match (self.key_pattern, &self.key_file) {
            (None | Some(KeyPatternArg::File), Some(path)) => KeyPattern::File(path.clone()),
            (Some(KeyPatternArg::File), None) => {
                return Err(BenchError::InvalidOption {
                    option: "key-pattern",
                    reason: "file needs --key-file".to_owned(),
                })
            }
            (Some(_), Some(_)) => return Err(BenchError::InvalidOption {
                option: "key-file",
                reason:
                    "a key file is read in file order; drop --key-pattern or use --key-pattern file"
                        .to_owned(),
            }),
            (None | Some(KeyPatternArg::Uniform), None) => KeyPattern::Uniform,
            (Some(KeyPatternArg::Zipfian), None) => KeyPattern::Zipfian {
                skew: self.zipf_skew,
            },
            (Some(KeyPatternArg::Sequential), None) => KeyPattern::Sequential,
        };
        let duration = match (self.duration, self.requests) {
            (None, None) => Some(Duration::from_secs(10)),
            (duration, _) => duration,
        };
        Ok(BenchOptions {
            target: self.target.clone(),
            protocol: self.protocol,
            threads: self.threads,
            connections_per_thread: self.connections,
            pipeline: self.pipeline,
            ratio: self.ratio,
            key_count: self.keys,
            key_pattern,
            key_prefix: self.key_prefix.clone(),
            value_size: self.value_size,
            duration,
            requests: self.requests,
            warmup: self.warmup,
            preload: self.preload,
            rate: self.rate,
            timeout: self.timeout,
            seed: self.seed,
            interval: self.interval,
            progress: !self.quiet,
        })
    }
}

/// Runs `larder bench`: prints the report on stdout (text, or JSON with
/// `--json`) and exits 0; on a bad option prints why and exits 2; when the
/// run cannot start or its preload fails, exits 1.
pub fn run_cli(args: BenchArgs) -> ExitCode {
    let options = match args
        .to_options()
        .and_then(|options| options.validate().map(|()| options))
    {
        Ok(options) => options,
        Err(error) => {
            eprintln!("larder bench: {error}");
            return ExitCode::from(2);
        }
    };
    let report = match crate::run(options) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("larder bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(error) => {
                eprintln!("larder bench: cannot encode the report as JSON: {error}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{report}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parsed(args: &[&str]) -> Result<BenchOptions, BenchError> {
        let cli =
            Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).unwrap();
        cli.bench.to_options()
    }

    #[test]
    fn defaults_describe_a_valid_ten_second_run() {
        let options = parsed(&[]).unwrap();
        options.validate().unwrap();
        assert_eq!(options.duration, Some(Duration::from_secs(10)));
        assert_eq!(options.connections(), 50);
        assert_eq!(options.key_pattern, KeyPattern::Uniform);
    }

    #[test]
    fn a_request_count_alone_has_no_duration() {
        let options = parsed(&["-n", "1000"]).unwrap();
        assert_eq!(options.duration, None);
        assert_eq!(options.requests, Some(1000));
    }

    #[test]
    fn key_file_implies_the_file_pattern() {
        let options = parsed(&["--key-file", "ids.txt"]).unwrap();
        assert_eq!(
            options.key_pattern,
            KeyPattern::File(PathBuf::from("ids.txt"))
        );
        assert!(parsed(&["--key-file", "ids.txt", "--key-pattern", "zipfian"]).is_err());
        assert!(parsed(&["--key-pattern", "file"]).is_err());
    }

    #[test]
    fn flags_reach_the_options() {
        let options = parsed(&[
            "--key-pattern",
            "zipfian",
            "--zipf-skew",
            "1.2",
            "--ratio",
            "1:0",
            "-v",
            "10-20",
            "-d",
            "2s",
            "--warmup",
            "500ms",
            "--rate",
            "1000",
            "--protocol",
            "resp",
            "-P",
            "8",
        ])
        .unwrap();
        options.validate().unwrap();
        assert_eq!(options.key_pattern, KeyPattern::Zipfian { skew: 1.2 });
        assert_eq!(options.ratio, Ratio { gets: 1, sets: 0 });
        assert_eq!(
            options.value_size,
            ValueSize {
                min_bytes: 10,
                max_bytes: 20
            }
        );
        assert_eq!(options.warmup, Duration::from_millis(500));
        assert_eq!(options.protocol, Protocol::Redis);
        assert_eq!(options.pipeline, 8);
        assert_eq!(options.rate, Some(1000));
        assert_eq!(options.interval, None);
    }

    #[test]
    fn interval_reaches_the_options() {
        let options = parsed(&["--interval", "10s", "-d", "10m"]).unwrap();
        options.validate().unwrap();
        assert_eq!(options.interval, Some(Duration::from_secs(10)));
        assert_eq!(options.duration, Some(Duration::from_secs(600)));
    }
}
