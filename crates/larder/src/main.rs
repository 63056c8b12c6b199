//! The `larder` binary: a thin command line over the server library.

use clap::{ArgAction, Args, Parser, Subcommand};
use larder_server::{config, ConfigFile, ServerConfig};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Larder: a persistent, memcached-compatible key-value server.
#[derive(Parser)]
#[command(name = "larder", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the memcached protocol over a data directory.
    ///
    /// With no flags: listens on 127.0.0.1:11211, keeps data in
    /// ./larder-data, and acknowledges writes once they reach the operating
    /// system, syncing them to disk every second (durability everysec).
    Serve(ServeArgs),
    /// Verify every segment and hint file of a data directory: report each
    /// damaged record (file, offset, key if readable) and exit 1 if any.
    Check(CheckArgs),
    /// Write every live item of a data directory no server has open as
    /// memcached `set` commands (`set <key> <flags> <exptime> <bytes>
    /// noreply`, the expiry as a unix time): a dump that `larder import`
    /// reads, and that any memcached-compatible server takes as it stands.
    Export(ExportArgs),
    /// Store the items of a dump of `set` commands in a data directory no
    /// server has open. The whole dump is read once first: one that holds
    /// anything else changes nothing. Synced when it exits 0.
    Import(ImportArgs),
    Bench(larder_bench::BenchArgs),
}

#[derive(Args)]
struct ExportArgs {
    /// Data directory to export [default: ./larder-data].
    #[arg(long = "data-dir", default_value = "larder-data")]
    data_dir: PathBuf,
    /// Write the dump to this file (whole or not at all) instead of
    /// standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct ImportArgs {
    /// The dump to read.
    #[arg(value_name = "FILE")]
    input: PathBuf,
    /// Data directory to store the items in [default: ./larder-data].
    #[arg(long = "data-dir", default_value = "larder-data")]
    data_dir: PathBuf,
    /// Largest value accepted, as `larder serve -I`: bytes, or with a k/m/g
    /// suffix [default: 1m].
    #[arg(short = 'I', long = "max-item-size")]
    max_item_size: Option<String>,
}

#[derive(Args)]
struct CheckArgs {
    /// Data directory to check [default: ./larder-data].
    #[arg(long = "data-dir", default_value = "larder-data")]
    data_dir: PathBuf,
}

fn check(args: CheckArgs) -> ExitCode {
    let fs = larder_engine::fs::OsFs;
    let report = match larder_engine::check::check(&fs, &args.data_dir) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("larder: {error}");
            return ExitCode::from(2);
        }
    };
    for damage in &report.damage {
        let key = damage
            .key
            .as_ref()
            .map(|key| format!(" key {:?}", String::from_utf8_lossy(key)))
            .unwrap_or_default();
        println!(
            "damaged: {} offset {}{key}: {}",
            damage.file.display(),
            damage.offset,
            damage.reason
        );
    }
    if let Some((file, offset)) = &report.torn_tail {
        println!(
            "torn tail: {} from offset {offset} (an interrupted write: no intact record follows; \
             the next start cuts the newest segment there)",
            file.display()
        );
    }
    for tail in &report.unsynced_tails {
        let settled = if tail.copied {
            "its records from there on are in a newer segment, and the next start cuts it there"
                .to_string()
        } else {
            let end = tail.damaged.map_or("its end".to_string(), |offset| {
                format!("the damage at offset {offset}")
            });
            format!("the next start rewrites it as it reads up to {end}")
        };
        println!(
            "unsynced tail: {} from offset {} (a sync failed before the server stopped; {settled})",
            tail.file.display(),
            tail.from
        );
    }
    for file in &report.unfinished {
        println!(
            "unfinished: {} (a segment a crash cut short before its header reached the disk; \
             it holds no records, and the next start removes it)",
            file.display()
        );
    }
    println!(
        "{} segments, {} hint files, {} intact records, {} damaged",
        report.segments,
        report.hints,
        report.records,
        report.damage.len()
    );
    if report.damage.is_empty() {
        return ExitCode::SUCCESS;
    }
    println!(
        "`larder serve --salvage --data-dir {}` starts without the damaged records, \
         keeping the original files under {}",
        args.data_dir.display(),
        args.data_dir
            .join(larder_engine::salvage::DAMAGED_DIR)
            .display()
    );
    ExitCode::FAILURE
}

#[derive(Args)]
struct ServeArgs {
    /// TCP port to listen on [default: 11211].
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// Address to listen on [default: 127.0.0.1].
    #[arg(short = 'l', long)]
    listen: Option<IpAddr>,
    /// Listen on this Unix domain socket instead of TCP (-l and -p are
    /// then not used). A socket file left by a server that has gone is
    /// replaced.
    #[arg(short = 's', long = "unix-socket", value_name = "PATH")]
    unix_socket: Option<PathBuf>,
    /// Permission bits of the Unix domain socket's file, in octal, 0 to
    /// 0777 [default: 0700].
    #[arg(
        short = 'a',
        long = "unix-socket-mode",
        alias = "unix-mask",
        value_name = "MODE"
    )]
    unix_socket_mode: Option<String>,
    /// Most concurrent client connections [default: 1024].
    #[arg(short = 'c', long = "max-connections")]
    max_connections: Option<usize>,
    /// Worker threads [default: number of CPUs].
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Memory for cached values, in MiB; keys always stay in memory
    /// [default: 1024].
    #[arg(short = 'm', long = "memory-limit")]
    memory_limit: Option<u64>,
    /// Largest value accepted: bytes, or with a k/m/g suffix [default: 1m].
    #[arg(short = 'I', long = "max-item-size")]
    max_item_size: Option<String>,
    /// Data directory [default: ./larder-data].
    #[arg(long = "data-dir")]
    data_dir: Option<PathBuf>,
    /// always: acknowledge after fdatasync (group commit); everysec: sync at
    /// least once a second; none: leave syncing to the OS [default: everysec].
    #[arg(long)]
    durability: Option<String>,
    /// How connections are served: uring (io_uring rings, one per worker
    /// thread, each submitting many connections' receives and sends in one
    /// system call; Linux 5.7 or later), epoll (tokio's tasks, a system
    /// call per receive and per send), or auto: uring where the kernel
    /// allows it, else epoll [default: auto].
    #[arg(long, value_name = "auto|epoll|uring")]
    io: Option<String>,
    /// With io_uring rings: how long a ring thread that has nothing to do
    /// keeps looking for requests before it sleeps, in microseconds, while
    /// no other thread is waiting for a CPU. A request that comes in
    /// meanwhile is served without waking a sleeping thread; a thread that
    /// finds a CPU wanted stops looking for a while. 0 sleeps at once
    /// [default: 50].
    #[arg(long = "idle-poll-us", value_name = "US")]
    idle_poll_us: Option<u64>,
    /// How long a half-received request may wait for its next bytes before
    /// the connection is closed, in milliseconds [default: 30000].
    #[arg(long = "partial-request-timeout-ms", value_name = "MS")]
    partial_request_timeout_ms: Option<u64>,
    /// How long the replies to a client that stops reading may wait for
    /// room in its socket before the connection is closed, in milliseconds
    /// [default: 60000].
    #[arg(long = "write-timeout-ms", value_name = "MS")]
    write_timeout_ms: Option<u64>,
    /// Serve the `stats` figures over HTTP at this address:port, as
    /// Prometheus' text format at /metrics [default: off].
    #[arg(long = "metrics-listen", value_name = "ADDR:PORT")]
    metrics_listen: Option<String>,
    /// Start even if sealed data is damaged: rewrite each damaged segment
    /// with its intact records only, logging every record skipped; the
    /// originals are kept under <data-dir>/damaged/. For one start after
    /// `larder check` reported damage; not a config file setting.
    #[arg(long)]
    salvage: bool,
    /// A TOML file with the same settings (flags override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// More logging (-v info, -vv debug, -vvv trace).
    #[arg(short = 'v', action = ArgAction::Count)]
    verbose: u8,
}

impl ServeArgs {
    /// The defaults, overridden by the config file, overridden by flags.
    fn into_config(self) -> Result<ServerConfig, config::ConfigError> {
        let mut config = ServerConfig::default();
        if let Some(path) = &self.config {
            ConfigFile::load(path)?.apply(&mut config)?;
        }
        let flags = ConfigFile {
            listen: self.listen,
            port: self.port,
            unix_socket: self.unix_socket,
            unix_socket_mode: self.unix_socket_mode,
            max_connections: self.max_connections,
            threads: self.threads,
            memory_limit_mb: self.memory_limit,
            max_item_size: self.max_item_size.map(config::Size::Text),
            data_dir: self.data_dir,
            durability: self.durability,
            io: self.io,
            idle_poll_us: self.idle_poll_us,
            verbose: (self.verbose > 0).then_some(self.verbose),
            segment_bytes_max: None,
            partial_request_timeout_ms: self.partial_request_timeout_ms,
            write_timeout_ms: self.write_timeout_ms,
            metrics_listen: self.metrics_listen,
        };
        flags.apply(&mut config)?;
        config.salvage = self.salvage;
        config.validate()?;
        Ok(config)
    }
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LARDER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn serve(args: ServeArgs) -> ExitCode {
    let config = match args.into_config() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("larder: {error}");
            return ExitCode::from(2);
        }
    };
    init_logging(config.verbose);
    let mut config = config;
    let io = match larder_server::settle_io(&mut config) {
        Ok(None) => config.io.name().to_owned(),
        Ok(Some(refused)) => format!("epoll: io_uring refused here ({refused})"),
        Err(error) => {
            eprintln!("larder: {error}");
            return ExitCode::FAILURE;
        }
    };
    let data_dir = config.data_dir.clone();
    let durability = config.durability;
    let ready = |addr| {
        eprintln!(
            "larder {} listening on {addr} (data in {}, durability {}, io {io})",
            env!("CARGO_PKG_VERSION"),
            data_dir.display(),
            durability.name()
        );
    };
    match larder_server::run(config, ready) {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("larder: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The exit code and line for a failed export or import.
fn dump_failed(error: &larder_server::dump::DumpError) -> ExitCode {
    eprintln!("larder: {error}");
    ExitCode::from(if error.is_bad_input() { 2 } else { 1 })
}

fn export(args: ExportArgs) -> ExitCode {
    let config = ServerConfig {
        data_dir: args.data_dir,
        ..ServerConfig::default()
    };
    let exported = match &args.output {
        None => larder_server::dump::export(&config, &mut std::io::stdout().lock()),
        Some(path) => export_to_file(&config, path),
    };
    match exported {
        Ok(summary) => {
            eprintln!(
                "larder: exported {} items ({} bytes of values) from {}",
                summary.items,
                summary.value_bytes,
                config.data_dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => dump_failed(&error),
    }
}

/// Exports to `path`: written under a temporary name beside it, synced,
/// and renamed, so that `path` only ever holds a whole dump.
fn export_to_file(
    config: &ServerConfig,
    path: &std::path::Path,
) -> Result<larder_server::dump::Summary, larder_server::dump::DumpError> {
    use larder_server::dump::DumpError;
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let io = |what: &str, source| DumpError::Io {
        context: format!("{what} {}", partial.display()),
        source,
    };
    let file = std::fs::File::create(&partial).map_err(|e| io("creating", e))?;
    let mut out = std::io::BufWriter::new(file);
    let written = larder_server::dump::export(config, &mut out).and_then(|summary| {
        let file = out
            .into_inner()
            .map_err(|e| io("writing", e.into_error()))?;
        file.sync_all().map_err(|e| io("syncing", e))?;
        std::fs::rename(&partial, path).map_err(|e| io("renaming", e))?;
        // The new name too is on disk when the export says it is done.
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => std::path::Path::new("."),
        };
        let directory = std::fs::File::open(parent).and_then(|dir| dir.sync_all());
        directory.map_err(|e| DumpError::Io {
            context: format!("syncing {}", parent.display()),
            source: e,
        })?;
        Ok(summary)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

fn import(args: ImportArgs) -> ExitCode {
    let mut config = ServerConfig {
        data_dir: args.data_dir,
        ..ServerConfig::default()
    };
    if let Some(size) = args.max_item_size {
        let file = ConfigFile {
            max_item_size: Some(config::Size::Text(size)),
            ..ConfigFile::default()
        };
        if let Err(error) = file.apply(&mut config).and_then(|()| config.validate()) {
            eprintln!("larder: {error}");
            return ExitCode::from(2);
        }
    }
    match larder_server::dump::import(&config, &args.input) {
        Ok(summary) => {
            eprintln!(
                "larder: imported {} items ({} bytes of values) into {}",
                summary.items,
                summary.value_bytes,
                config.data_dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => dump_failed(&error),
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve(args) => serve(args),
        Command::Bench(args) => larder_bench::run_cli(args),
        Command::Check(args) => check(args),
        Command::Export(args) => export(args),
        Command::Import(args) => import(args),
    }
}
