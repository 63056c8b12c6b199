//! A request larger than the socket takes at once: the client writes what
//! the socket takes without waiting, then the rest under its timeout, and
//! the server must receive every byte once, in order.

mod common;

use common::{serve_connection, start_tcp};
use larder_bench::{run, BenchOptions, Ratio, ValueSize};
use std::io::{BufReader, Read};
use std::net::TcpStream;
use std::time::Duration;

/// The fake memcached, reading through a small buffer with a pause before
/// every read, so that a large request waits for room in the socket.
fn read_slowly(stream: TcpStream) -> std::io::Result<()> {
    struct Slow(TcpStream);
    impl Read for Slow {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_millis(1));
            let room = buf.len().min(64 * 1024);
            self.0.read(buf.get_mut(..room).unwrap_or_default())
        }
    }
    let output = stream.try_clone()?;
    serve_connection(BufReader::with_capacity(64 * 1024, Slow(stream)), output)
}

#[test]
fn requests_larger_than_the_socket_takes_at_once_are_written_whole() {
    // 4 MiB per set is more than a loopback socket buffers. The server
    // answers a data block that does not end where its byte count says
    // with CLIENT_ERROR, and anything that does not parse with ERROR, both
    // counted as errors, so a byte lost or written twice shows (a lost
    // last byte leaves the server waiting, and the set times out).
    let value_bytes = 4 << 20;
    let report = run(BenchOptions {
        target: format!("127.0.0.1:{}", start_tcp(read_slowly)),
        threads: 1,
        connections_per_thread: 1,
        pipeline: 1,
        ratio: Ratio { gets: 0, sets: 1 },
        key_count: 10,
        value_size: ValueSize {
            min_bytes: value_bytes,
            max_bytes: value_bytes,
        },
        requests: Some(4),
        warmup: Duration::ZERO,
        // Far longer than the slow reads take: the timeout is not what is
        // tested here.
        timeout: Duration::from_secs(60),
        seed: Some(3),
        progress: false,
        ..BenchOptions::default()
    })
    .expect("the run completes");
    assert_eq!(report.failed_connections, 0, "{:?}", report.first_failure);
    assert_eq!((report.sets, report.errors), (4, 0));
}
