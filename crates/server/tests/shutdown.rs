#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! Graceful shutdown: once the signal comes, the server stops accepting,
//! lets each connection finish what it has read (so a client sees whole
//! replies, then a clean close), and syncs and closes the engine. Every
//! write a client saw acknowledged is then in the data directory, whatever
//! the durability mode, as opening it with `larder_engine::Engine` shows.
//! A client that never reads its replies delays shutdown by at most the
//! grace period.

mod common;

use common::{Raw, TestServer, REPLY_TIMEOUT};
use larder_engine::{Durability, Engine};
use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

fn open_engine(dir: &Path) -> Engine {
    Engine::open(larder_engine::Config::new(dir)).unwrap()
}

fn stored_value(engine: &Engine, key: &str) -> Option<Vec<u8>> {
    engine
        .get(key.as_bytes())
        .unwrap()
        .map(|item| item.value.to_vec())
}

#[test]
fn replies_in_flight_at_shutdown_arrive_whole_and_are_durable() {
    const SETS: usize = 3000;
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestServer::start(dir.path(), Durability::Always);
    let mut raw = server.raw();
    raw.call(b"set first 0 0 5\r\nfirst\r\n", b"STORED\r\n");
    // The sets go out in chunks, and the signal comes while they do; the
    // server may close before it has read them all, which is allowed.
    let mut stream = raw.stream().try_clone().unwrap();
    for chunk in 0..SETS / 100 {
        let mut burst = Vec::new();
        for index in chunk * 100..(chunk + 1) * 100 {
            burst.extend_from_slice(format!("set k{index} 0 0 6\r\nv{index:05}\r\n").as_bytes());
        }
        if chunk == 5 {
            server.signal_shutdown();
        }
        if stream.write_all(&burst).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let replies = raw.read_to_close();
    let acknowledged = replies.len() / b"STORED\r\n".len();
    assert_eq!(
        replies,
        b"STORED\r\n".repeat(acknowledged),
        "a reply was cut short or wrong"
    );
    server.stop().unwrap();

    let engine = open_engine(dir.path());
    assert_eq!(stored_value(&engine, "first").unwrap(), b"first");
    for index in 0..acknowledged {
        let value = stored_value(&engine, &format!("k{index}"));
        assert_eq!(value.unwrap(), format!("v{index:05}").as_bytes());
    }
    engine.close().unwrap();
}

#[test]
fn new_connections_are_refused_once_shutdown_is_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestServer::start(dir.path(), Durability::EverySec);
    let addr = server.addr();
    let mut idle = server.raw();
    idle.call(b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
    server.signal_shutdown();
    // An idle connection is closed cleanly, with nothing more said.
    assert_eq!(idle.read_to_close(), b"");
    let deadline = Instant::now() + REPLY_TIMEOUT;
    loop {
        match TcpStream::connect(addr) {
            Err(error) if error.kind() == ErrorKind::ConnectionRefused => break,
            Err(error) => panic!("unexpected connect error {error}"),
            Ok(_) => {
                assert!(Instant::now() < deadline, "still accepting after shutdown");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    server.stop().unwrap();
    let refused = TcpStream::connect(addr).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
}

#[test]
fn a_half_sent_request_does_not_hold_up_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestServer::start(dir.path(), Durability::EverySec);
    let mut partial = server.raw();
    partial.call(b"set whole 0 0 5\r\nwhole\r\n", b"STORED\r\n");
    partial.send(b"set half 0 0 10\r\nhalf");
    std::thread::sleep(Duration::from_millis(50));
    server.signal_shutdown();
    assert_eq!(partial.read_to_close(), b"");
    // Closed as soon as shutdown began, not cut when the grace period ran out.
    assert_eq!(server.stop().unwrap().connections_cut, 0);

    let engine = open_engine(dir.path());
    assert_eq!(stored_value(&engine, "whole").unwrap(), b"whole");
    assert_eq!(stored_value(&engine, "half"), None);
    engine.close().unwrap();
}

/// Writes with every kind of command, then checks the data directory holds
/// exactly what the client saw acknowledged.
fn acknowledged_writes_survive(durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), durability);
    let mut raw: Raw = server.raw();
    for index in 0..300 {
        let value = format!("value-{index}");
        let request = format!("set s{index} {index} 0 {}\r\n{value}\r\n", value.len());
        raw.call(request.as_bytes(), b"STORED\r\n");
    }
    raw.call(b"append s1 0 0 4\r\n-end\r\n", b"STORED\r\n");
    raw.call(b"prepend s2 0 0 6\r\nstart-\r\n", b"STORED\r\n");
    raw.call(b"delete s3\r\n", b"DELETED\r\n");
    raw.call(b"set n 0 0 2\r\n40\r\n", b"STORED\r\n");
    raw.call(b"incr n 2\r\n", b"42\r\n");
    raw.call(b"touch s4 3600\r\n", b"TOUCHED\r\n");
    raw.call(b"ms m 4 F9 T0\r\nmeta\r\n", b"HD\r\n");
    raw.call(b"md s5\r\n", b"HD\r\n");
    drop(raw);
    server.stop().unwrap();

    let engine = open_engine(dir.path());
    let mut expected: Vec<(String, Option<Vec<u8>>)> = (0..300)
        .map(|index| {
            (
                format!("s{index}"),
                Some(format!("value-{index}").into_bytes()),
            )
        })
        .collect();
    expected[1].1 = Some(b"value-1-end".to_vec());
    expected[2].1 = Some(b"start-value-2".to_vec());
    expected[3].1 = None;
    expected[5].1 = None;
    expected.push(("n".to_owned(), Some(b"42".to_vec())));
    expected.push(("m".to_owned(), Some(b"meta".to_vec())));
    for (key, value) in &expected {
        assert_eq!(&stored_value(&engine, key), value, "{key}");
    }
    assert_eq!(engine.get(b"s7").unwrap().unwrap().flags, 7);
    assert_eq!(engine.get(b"m").unwrap().unwrap().flags, 9);
    assert!(engine.get(b"s4").unwrap().unwrap().exptime > 0);
    engine.close().unwrap();
}

#[test]
fn acknowledged_writes_are_in_the_data_directory_with_durability_always() {
    acknowledged_writes_survive(Durability::Always);
}

#[test]
fn acknowledged_writes_are_in_the_data_directory_with_durability_everysec() {
    acknowledged_writes_survive(Durability::EverySec);
}

#[test]
fn acknowledged_writes_are_in_the_data_directory_with_durability_none() {
    acknowledged_writes_survive(Durability::None);
}

#[test]
fn a_client_that_never_reads_is_cut_when_the_grace_period_runs_out() {
    const VALUE_BYTES: usize = 500 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::EverySec);
    let mut writer = server.raw();
    let mut set = format!("set big 0 0 {VALUE_BYTES}\r\n").into_bytes();
    set.extend_from_slice(&vec![b'v'; VALUE_BYTES]);
    set.extend_from_slice(b"\r\n");
    writer.call(&set, b"STORED\r\n");
    // Enough gets that the replies cannot all fit in the socket buffers.
    let stuck = TcpStream::connect(server.addr()).unwrap();
    (&stuck).write_all(&b"get big\r\n".repeat(400)).unwrap();
    std::thread::sleep(Duration::from_millis(200));

    // The writer is idle and closes at once; the reader that never reads is
    // cut when the grace period runs out, and shutdown goes on without it
    // (the bound only tells a hang from that, it times nothing).
    let (stopped, shutdown) = std::sync::mpsc::channel();
    std::thread::spawn(move || stopped.send(server.stop()));
    let report = shutdown
        .recv_timeout(larder_server::limits::SHUTDOWN_GRACE * 6)
        .expect("shutdown finished")
        .unwrap();
    assert_eq!(report.connections_cut, 1);
    drop(stuck);

    let engine = open_engine(dir.path());
    assert_eq!(stored_value(&engine, "big").unwrap().len(), VALUE_BYTES);
    engine.close().unwrap();
}
