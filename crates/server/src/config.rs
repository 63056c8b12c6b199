//! The server's configuration: defaults, the TOML file, and validation.
//!
//! Names match the command-line flags (`port`, `listen`, `unix_socket`,
//! `unix_socket_mode`, `max_connections`, `threads`, `memory_limit_mb`,
//! `max_item_size`, `data_dir`, `durability`, `io`, `idle_poll_us`,
//! `verbose`), so a config file
//! reads like the flags it replaces.

use crate::limits;
use larder_engine::Durability;
use serde::Deserialize;
use std::net::IpAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Everything `larder serve` needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on (default 127.0.0.1: never exposed by accident).
    pub listen: IpAddr,
    /// TCP port (default 11211; 0 picks a free one).
    pub port: u16,
    /// A Unix domain socket to listen on instead of TCP (memcached's `-s`):
    /// when set, `listen` and `port` are not used.
    pub unix_socket: Option<PathBuf>,
    /// Permission bits of the Unix domain socket's file (memcached's `-a`,
    /// default 0700: only the server's own user may connect).
    pub unix_socket_mode: u32,
    /// Most concurrent client connections.
    pub max_connections: usize,
    /// Worker threads serving connections.
    pub threads: usize,
    /// Memory for cached values, in MiB.
    pub memory_limit_mb: u64,
    /// Largest value accepted, in bytes.
    pub max_item_size: usize,
    /// The data directory.
    pub data_dir: PathBuf,
    /// How durable an acknowledged write is.
    pub durability: Durability,
    /// How connections are served.
    pub io: Io,
    /// How long a ring thread with nothing to do keeps looking for work
    /// before it sleeps, while no other thread wants its CPU (see
    /// [`crate::ring`]); zero sleeps at once, as epoll does.
    pub idle_poll: std::time::Duration,
    /// Log verbosity (0 quiet, 1 info, 2 debug, 3 trace).
    pub verbose: u8,
    /// Largest segment file, in bytes; `None` for the engine's default,
    /// raised to fit the item size limit (see [`ServerConfig::segment_bytes`]).
    pub segment_bytes_max: Option<u32>,
    /// How long a partly received request may wait for its next bytes
    /// before the connection is closed.
    pub partial_request_timeout: std::time::Duration,
    /// How long the replies of one batch may wait for room in a client's
    /// socket, from the first send that left some behind, before the
    /// connection is closed: what a client that stops reading holds.
    pub write_timeout: std::time::Duration,
    /// Where to serve the metrics over HTTP (`GET /metrics`, Prometheus'
    /// text format), if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Open the data directory even if sealed segments are damaged, keeping
    /// only their intact records (see `larder_engine::salvage`). A flag for
    /// one start, never a config file key: damage should stop the next
    /// start too, until someone looks at it.
    pub salvage: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: IpAddr::from([127, 0, 0, 1]),
            port: 11211,
            unix_socket: None,
            unix_socket_mode: limits::UNIX_SOCKET_MODE_DEFAULT,
            max_connections: limits::CONNECTIONS_MAX_DEFAULT,
            threads: std::thread::available_parallelism().map_or(4, usize::from),
            memory_limit_mb: 1024,
            max_item_size: larder_protocol::limits::ITEM_BYTES_MAX_DEFAULT,
            data_dir: PathBuf::from("larder-data"),
            durability: Durability::EverySec,
            io: Io::Auto,
            idle_poll: limits::IDLE_POLL_DEFAULT,
            verbose: 0,
            segment_bytes_max: None,
            partial_request_timeout: limits::PARTIAL_REQUEST_TIMEOUT,
            write_timeout: limits::WRITE_TIMEOUT,
            metrics_listen: None,
            salvage: false,
        }
    }
}

/// The TOML file: every field optional, overriding the defaults; flags on
/// the command line override the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// See [`ServerConfig::listen`].
    pub listen: Option<IpAddr>,
    /// See [`ServerConfig::port`].
    pub port: Option<u16>,
    /// See [`ServerConfig::unix_socket`].
    pub unix_socket: Option<PathBuf>,
    /// See [`ServerConfig::unix_socket_mode`]: octal digits in a string,
    /// such as `"0770"`, read as `-a` reads them.
    pub unix_socket_mode: Option<String>,
    /// See [`ServerConfig::max_connections`].
    pub max_connections: Option<usize>,
    /// See [`ServerConfig::threads`].
    pub threads: Option<usize>,
    /// See [`ServerConfig::memory_limit_mb`].
    pub memory_limit_mb: Option<u64>,
    /// See [`ServerConfig::max_item_size`]; a number of bytes or a size
    /// with a `k`, `m` or `g` suffix.
    pub max_item_size: Option<Size>,
    /// See [`ServerConfig::data_dir`].
    pub data_dir: Option<PathBuf>,
    /// `always`, `everysec` or `none`.
    pub durability: Option<String>,
    /// `auto`, `epoll` or `uring`.
    pub io: Option<String>,
    /// See [`ServerConfig::idle_poll`], in microseconds.
    pub idle_poll_us: Option<u64>,
    /// See [`ServerConfig::verbose`].
    pub verbose: Option<u8>,
    /// See [`ServerConfig::segment_bytes_max`].
    pub segment_bytes_max: Option<u32>,
    /// See [`ServerConfig::partial_request_timeout`], in milliseconds.
    pub partial_request_timeout_ms: Option<u64>,
    /// See [`ServerConfig::write_timeout`], in milliseconds.
    pub write_timeout_ms: Option<u64>,
    /// See [`ServerConfig::metrics_listen`]: `address:port`.
    pub metrics_listen: Option<String>,
}

/// How the server waits for its connections' input and sends their
/// replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// Rings where this kernel lets the server set them up, epoll where it
    /// does not (see [`crate::settle_io`]): the default.
    Auto,
    /// tokio's tasks, woken through epoll: a system call for each receive
    /// and each send.
    Epoll,
    /// The server's own io_uring rings, one per worker thread: each hands
    /// the kernel many connections' receives and sends in one system call
    /// (Linux 5.7 or later; refused at start where the kernel or a
    /// container does not allow io_uring).
    Uring,
}

impl Io {
    /// Parses `auto`, `epoll` or `uring`.
    pub fn from_name(name: &str) -> Option<Io> {
        [Io::Auto, Io::Epoll, Io::Uring]
            .into_iter()
            .find(|io| io.name() == name)
    }

    /// The name the flag and the config file take.
    pub fn name(self) -> &'static str {
        match self {
            Io::Auto => "auto",
            Io::Epoll => "epoll",
            Io::Uring => "uring",
        }
    }
}

/// A size setting: a number of bytes, or text like `"2m"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// A number of bytes.
    Bytes(u64),
    /// Bytes with an optional `k`, `m` or `g` suffix.
    Text(String),
}

/// A configuration that cannot be used; the message says which setting and
/// why, in one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl ConfigFile {
    /// Reads and parses a TOML file.
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| {
            let message = e.message().to_owned();
            ConfigError(format!("config file {}: {message}", path.display()))
        })
    }

    /// Applies the file's settings over `config`.
    pub fn apply(self, config: &mut ServerConfig) -> Result<(), ConfigError> {
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if let Some(port) = self.port {
            config.port = port;
        }
        if let Some(path) = self.unix_socket {
            config.unix_socket = Some(path);
        }
        if let Some(mode) = self.unix_socket_mode {
            config.unix_socket_mode = parse_mode(&mode)?;
        }
        if let Some(max) = self.max_connections {
            config.max_connections = max;
        }
        if let Some(threads) = self.threads {
            config.threads = threads;
        }
        if let Some(memory) = self.memory_limit_mb {
            config.memory_limit_mb = memory;
        }
        if let Some(size) = self.max_item_size {
            config.max_item_size = match size {
                Size::Bytes(bytes) => usize::try_from(bytes)
                    .map_err(|_| ConfigError(format!("max_item_size {bytes} is too large")))?,
                Size::Text(text) => parse_size(&text)?,
            };
        }
        if let Some(dir) = self.data_dir {
            config.data_dir = dir;
        }
        if let Some(ms) = self.partial_request_timeout_ms {
            config.partial_request_timeout = std::time::Duration::from_millis(ms);
        }
        if let Some(ms) = self.write_timeout_ms {
            config.write_timeout = std::time::Duration::from_millis(ms);
        }
        if let Some(text) = self.metrics_listen {
            let addr = text.parse().map_err(|_| {
                ConfigError(format!(
                    "metrics listen address {text:?} is not an address:port such as 127.0.0.1:9150"
                ))
            })?;
            config.metrics_listen = Some(addr);
        }
        if let Some(name) = self.durability {
            config.durability = parse_durability(&name)?;
        }
        if let Some(name) = self.io {
            config.io = Io::from_name(&name).ok_or_else(|| {
                ConfigError(format!("io must be auto, epoll or uring, not {name:?}"))
            })?;
        }
        if let Some(us) = self.idle_poll_us {
            config.idle_poll = std::time::Duration::from_micros(us);
        }
        if let Some(verbose) = self.verbose {
            config.verbose = verbose;
        }
        if let Some(segment) = self.segment_bytes_max {
            config.segment_bytes_max = Some(segment);
        }
        Ok(())
    }
}

/// The smallest segment that must hold an item of `max_item_size` bytes:
/// the limit itself, up to 64 MiB.
fn item_fitting_segment(max_item_size: usize) -> usize {
    max_item_size.min(64 << 20)
}

/// Parses `always`, `everysec` or `none`.
pub fn parse_durability(name: &str) -> Result<Durability, ConfigError> {
    Durability::from_name(name).ok_or_else(|| {
        ConfigError(format!(
            "durability must be always, everysec or none, not {name:?}"
        ))
    })
}

/// Parses a Unix domain socket's permission bits as memcached's `-a`
/// takes them: octal digits, such as `700` or `0770`.
pub fn parse_mode(text: &str) -> Result<u32, ConfigError> {
    let digits = text.trim();
    let octal = !digits.is_empty() && digits.bytes().all(|b| (b'0'..=b'7').contains(&b));
    octal
        .then(|| u32::from_str_radix(digits, 8).ok())
        .flatten()
        .filter(|mode| *mode <= 0o777)
        .ok_or_else(|| {
            ConfigError(format!(
                "{text:?} is not a socket permission mode (octal, 0 to 0777, e.g. 0700)"
            ))
        })
}

/// Parses a size as memcached's `-I` does: bytes, or a number with a `k`,
/// `m` or `g` suffix (powers of 1024).
pub fn parse_size(text: &str) -> Result<usize, ConfigError> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().last() {
        Some((at, 'k' | 'K')) => (&text[..at], 1usize << 10),
        Some((at, 'm' | 'M')) => (&text[..at], 1 << 20),
        Some((at, 'g' | 'G')) => (&text[..at], 1 << 30),
        _ => (text, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|number| number.checked_mul(unit))
        .ok_or_else(|| {
            ConfigError(format!(
                "{text:?} is not a size (e.g. 1048576, 512k, 2m, 1g)"
            ))
        })
}

impl ServerConfig {
    /// Checks every setting against its limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use larder_protocol::limits::{ITEM_BYTES_MAX_CEILING, ITEM_BYTES_MAX_FLOOR};
        if !(ITEM_BYTES_MAX_FLOOR..=ITEM_BYTES_MAX_CEILING).contains(&self.max_item_size) {
            return Err(ConfigError(format!(
                "max item size {} is outside {ITEM_BYTES_MAX_FLOOR}..={ITEM_BYTES_MAX_CEILING} bytes",
                self.max_item_size
            )));
        }
        if self.max_connections == 0 || self.max_connections > limits::CONNECTIONS_MAX_CEILING {
            return Err(ConfigError(format!(
                "max connections {} is outside 1..={}",
                self.max_connections,
                limits::CONNECTIONS_MAX_CEILING
            )));
        }
        if self.threads == 0 || self.threads > 1024 {
            return Err(ConfigError(format!(
                "threads {} is outside 1..=1024",
                self.threads
            )));
        }
        for (name, timeout) in [
            ("partial request timeout", self.partial_request_timeout),
            ("write timeout", self.write_timeout),
        ] {
            let accepted = limits::CONNECTION_TIMEOUT_MIN..=limits::CONNECTION_TIMEOUT_MAX;
            if !accepted.contains(&timeout) {
                return Err(ConfigError(format!(
                    "{name} {} ms is outside {}..={} ms",
                    timeout.as_millis(),
                    accepted.start().as_millis(),
                    accepted.end().as_millis()
                )));
            }
        }
        if self.idle_poll > limits::IDLE_POLL_MAX {
            return Err(ConfigError(format!(
                "idle poll {} us is outside 0..={} us",
                self.idle_poll.as_micros(),
                limits::IDLE_POLL_MAX.as_micros()
            )));
        }
        if self.unix_socket_mode > 0o777 {
            return Err(ConfigError(format!(
                "unix socket mode {:o} is outside 0..=0777 (octal)",
                self.unix_socket_mode
            )));
        }
        if let Some(path) = &self.unix_socket {
            let length = path.as_os_str().len();
            if length == 0 || length > limits::UNIX_SOCKET_PATH_BYTES_MAX {
                return Err(ConfigError(format!(
                    "unix socket path {:?} must be 1 to {} bytes long",
                    path.display().to_string(),
                    limits::UNIX_SOCKET_PATH_BYTES_MAX
                )));
            }
            // The socket is a file in a directory, with its lock file
            // beside it: "dir/", "." and ".." name no such file.
            let bytes = path.as_os_str().as_bytes();
            let last = bytes
                .rsplit(|&byte| byte == b'/')
                .next()
                .unwrap_or_default();
            let names_a_file = !matches!(last, b"" | b"." | b"..");
            if !names_a_file {
                return Err(ConfigError(format!(
                    "unix socket path {:?} must end in a file name",
                    path.display().to_string()
                )));
            }
        }
        if (self.segment_bytes() as usize) < item_fitting_segment(self.max_item_size) {
            return Err(ConfigError(format!(
                "segment size {} is smaller than the item size limit",
                self.segment_bytes()
            )));
        }
        Ok(())
    }

    /// The largest segment file: as set, or the engine's default raised to
    /// hold an item of the size limit (up to 64 MiB: a larger item may span
    /// a segment of its own).
    pub fn segment_bytes(&self) -> u32 {
        self.segment_bytes_max.unwrap_or_else(|| {
            let fitting =
                u32::try_from(item_fitting_segment(self.max_item_size)).unwrap_or(u32::MAX);
            larder_engine::Config::SEGMENT_BYTES_MAX_DEFAULT.max(fitting)
        })
    }

    /// The engine configuration these settings imply.
    pub fn engine_config(&self) -> larder_engine::Config {
        let mut config = larder_engine::Config::new(&self.data_dir);
        config.durability = self.durability;
        config.cache_bytes_max = self.memory_limit_mb.saturating_mul(1 << 20);
        config.segment_bytes_max = self.segment_bytes();
        config.value_bytes_max = u32::try_from(self.max_item_size).unwrap_or(u32::MAX);
        config.salvage = self.salvage;
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sizes_parse_like_memcached() {
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("2m").unwrap(), 2 << 20);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn file_settings_override_defaults_and_unknown_names_are_refused() {
        let file: ConfigFile = toml::from_str(
            "port = 12000\ndurability = \"always\"\nmax_item_size = \"2m\"\nio = \"uring\"",
        )
        .unwrap();
        let mut config = ServerConfig::default();
        assert_eq!(config.io, Io::Auto);
        file.apply(&mut config).unwrap();
        assert_eq!(config.port, 12000);
        assert_eq!(config.durability, Durability::Always);
        assert_eq!(config.max_item_size, 2 << 20);
        assert_eq!(config.io, Io::Uring);
        assert!(toml::from_str::<ConfigFile>("prot = 1").is_err());
        let bad: ConfigFile = toml::from_str("io = \"poll\"").unwrap();
        let error = bad.apply(&mut config).unwrap_err().to_string();
        assert_eq!(error, "io must be auto, epoll or uring, not \"poll\"");
        let epoll: ConfigFile = toml::from_str("io = \"epoll\"").unwrap();
        epoll.apply(&mut config).unwrap();
        assert_eq!(config.io, Io::Epoll);
        let auto: ConfigFile = toml::from_str("io = \"auto\"").unwrap();
        auto.apply(&mut config).unwrap();
        assert_eq!(config.io, Io::Auto);
        assert_eq!(config.metrics_listen, None);
        let metrics: ConfigFile = toml::from_str("metrics_listen = \"[::1]:9150\"").unwrap();
        metrics.apply(&mut config).unwrap();
        assert_eq!(config.metrics_listen, Some("[::1]:9150".parse().unwrap()));
        let bad: ConfigFile = toml::from_str("metrics_listen = \"9150\"").unwrap();
        let error = bad.apply(&mut config).unwrap_err().to_string();
        assert!(error.contains("not an address:port"), "{error}");
    }

    #[test]
    fn the_idle_poll_is_a_file_setting_in_microseconds_up_to_one_millisecond() {
        let mut config = ServerConfig::default();
        assert_eq!(config.idle_poll, Duration::from_micros(50));
        let file: ConfigFile = toml::from_str("idle_poll_us = 0").unwrap();
        file.apply(&mut config).unwrap();
        assert_eq!(config.idle_poll, Duration::ZERO);
        assert!(config.validate().is_ok());
        for (us, fits) in [(0, true), (1000, true), (1001, false)] {
            let config = ServerConfig {
                idle_poll: Duration::from_micros(us),
                ..ServerConfig::default()
            };
            assert_eq!(config.validate().is_ok(), fits, "idle poll {us} us");
        }
        let too_long = ServerConfig {
            idle_poll: Duration::from_micros(5000),
            ..ServerConfig::default()
        };
        let error = too_long.validate().unwrap_err().to_string();
        assert_eq!(error, "idle poll 5000 us is outside 0..=1000 us");
    }

    #[test]
    fn both_connection_timeouts_are_file_settings_held_to_the_same_range() {
        let file: ConfigFile =
            toml::from_str("partial_request_timeout_ms = 2500\nwrite_timeout_ms = 100").unwrap();
        let mut config = ServerConfig::default();
        assert_eq!(config.write_timeout, limits::WRITE_TIMEOUT);
        file.apply(&mut config).unwrap();
        assert_eq!(config.partial_request_timeout, Duration::from_millis(2500));
        assert_eq!(config.write_timeout, Duration::from_millis(100));
        assert!(config.validate().is_ok());
        for (ms, fits) in [
            (99, false),
            (100, true),
            (3_600_000, true),
            (3_600_001, false),
        ] {
            let write = ServerConfig {
                write_timeout: Duration::from_millis(ms),
                ..ServerConfig::default()
            };
            let partial = ServerConfig {
                partial_request_timeout: Duration::from_millis(ms),
                ..ServerConfig::default()
            };
            assert_eq!(write.validate().is_ok(), fits, "write timeout {ms} ms");
            assert_eq!(partial.validate().is_ok(), fits, "partial timeout {ms} ms");
            if !fits {
                let error = write.validate().unwrap_err().to_string();
                let want = format!("write timeout {ms} ms is outside 100..=3600000 ms");
                assert_eq!(error, want);
            }
        }
    }

    #[test]
    fn the_default_segment_size_grows_to_fit_the_item_size_limit_and_a_set_one_must_fit_it() {
        let default = larder_engine::Config::SEGMENT_BYTES_MAX_DEFAULT;
        let mut config = ServerConfig::default();
        assert_eq!(config.segment_bytes(), default);
        config.max_item_size = 48 << 20;
        assert_eq!(config.segment_bytes(), 48 << 20);
        assert!(config.validate().is_ok());
        config.max_item_size = 512 << 20;
        assert_eq!(config.segment_bytes(), 64 << 20);
        assert!(config.validate().is_ok());
        config.segment_bytes_max = Some(default);
        let error = config.validate().unwrap_err();
        assert!(
            error
                .to_string()
                .contains("smaller than the item size limit"),
            "{error}"
        );
    }

    #[test]
    fn socket_modes_parse_as_octal_like_memcached() {
        assert_eq!(parse_mode("700").unwrap(), 0o700);
        assert_eq!(parse_mode("0770").unwrap(), 0o770);
        assert_eq!(parse_mode("0").unwrap(), 0);
        for bad in ["", "800", "1000", "rw", "-7", "+700", "0x1ff", "07 7"] {
            assert!(parse_mode(bad).is_err(), "{bad:?}");
        }
        let file: ConfigFile =
            toml::from_str("unix_socket = \"/run/larder.sock\"\nunix_socket_mode = \"0770\"")
                .unwrap();
        let mut config = ServerConfig::default();
        assert_eq!(config.unix_socket_mode, 0o700);
        file.apply(&mut config).unwrap();
        assert_eq!(
            config.unix_socket.as_deref(),
            Some(Path::new("/run/larder.sock"))
        );
        assert_eq!(config.unix_socket_mode, 0o770);
        assert!(config.validate().is_ok());
        // A number would be read in decimal, a mode is octal: refused.
        assert!(toml::from_str::<ConfigFile>("unix_socket_mode = 400").is_err());
        let bad: ConfigFile = toml::from_str("unix_socket_mode = \"0999\"").unwrap();
        let error = bad.apply(&mut config).unwrap_err().to_string();
        assert!(error.contains("not a socket permission mode"), "{error}");
    }

    #[test]
    fn unusable_socket_settings_are_rejected() {
        let mode = ServerConfig {
            unix_socket_mode: 0o1777,
            ..ServerConfig::default()
        };
        assert!(mode.validate().unwrap_err().to_string().contains("mode"));
        for path in ["", &"s".repeat(108)] {
            let config = ServerConfig {
                unix_socket: Some(PathBuf::from(path)),
                ..ServerConfig::default()
            };
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains("1 to 107 bytes"), "{error}");
        }
        let longest = ServerConfig {
            unix_socket: Some(PathBuf::from("s".repeat(107))),
            ..ServerConfig::default()
        };
        assert!(longest.validate().is_ok());
        for path in ["/run/larder/", ".", "..", "/run/..", "/", "/run/."] {
            let config = ServerConfig {
                unix_socket: Some(PathBuf::from(path)),
                ..ServerConfig::default()
            };
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains("must end in a file name"), "{path}: {error}");
        }
        for path in ["larder.sock", "./larder.sock", "/run/larder.sock"] {
            let config = ServerConfig {
                unix_socket: Some(PathBuf::from(path)),
                ..ServerConfig::default()
            };
            assert!(config.validate().is_ok(), "{path}");
        }
    }

    #[test]
    fn out_of_range_settings_are_rejected() {
        let config = ServerConfig {
            max_item_size: 10,
            ..ServerConfig::default()
        };
        assert!(config.validate().is_err());
        assert!(ServerConfig::default().validate().is_ok());
    }
}
