#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! The metrics endpoint: `GET /metrics` answers the numeric `stats`
//! figures in Prometheus' text format, and they move with the traffic;
//! other paths and methods are refused.

mod common;

use common::TestServer;
use larder_engine::Durability;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

/// A port on 127.0.0.1 that was free a moment ago.
fn free_address() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// One HTTP/1.0 request: the status line, the headers (lower-cased names)
/// and the body.
fn http(address: SocketAddr, request: &str) -> (String, HashMap<String, String>, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(common::REPLY_TIMEOUT))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().to_owned();
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn metrics(address: SocketAddr) -> HashMap<String, f64> {
    let (status, headers, body) = http(address, "GET /metrics HTTP/1.0\r\n\r\n");
    assert!(status.ends_with(" 200 OK"), "{status}");
    assert_eq!(
        headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let figures: HashMap<String, f64> = body
        .lines()
        .map(|line| {
            let (name, value) = line.split_once(' ').unwrap();
            assert!(
                name.starts_with("larder_") && !name.starts_with("larder_larder_"),
                "{line}"
            );
            let valid = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            assert!(valid, "{line}");
            (name.to_owned(), value.parse().unwrap())
        })
        .collect();
    assert_eq!(figures.len(), body.lines().count(), "a name twice:\n{body}");
    figures
}

/// A server with its metrics at the address returned.
fn start_with_metrics() -> (tempfile::TempDir, TestServer, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let address = free_address();
    let mut config = common::config(dir.path(), Durability::EverySec);
    config.metrics_listen = Some(address);
    let server = TestServer::start_with(config);
    (dir, server, address)
}

#[test]
fn the_stats_figures_are_served_in_prometheus_text_format_and_move() {
    let (_dir, server, address) = start_with_metrics();
    let mut raw = server.raw();
    raw.call(b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
    let before = metrics(address);
    assert_eq!(before["larder_curr_items"], 1.0);
    assert_eq!(before["larder_curr_connections"], 1.0);
    assert!(before["larder_live_bytes"] > 0.0);
    assert!(
        before.contains_key("larder_rusage_user"),
        "a decimal figure"
    );
    assert!(!before.contains_key("larder_version"), "not a number");
    for _ in 0..3 {
        raw.call(b"get k\r\n", b"VALUE k 0 1\r\nx\r\nEND\r\n");
    }
    let after = metrics(address);
    assert_eq!(after["larder_cmd_get"] - before["larder_cmd_get"], 3.0);
    assert_eq!(after["larder_get_hits"] - before["larder_get_hits"], 3.0);
    // What `stats settings` says of it.
    let settings = raw.stats_of("settings");
    assert_eq!(settings["larder_metrics_listen"], address.to_string());
}

#[test]
fn other_paths_and_methods_are_refused() {
    let (_dir, _server, address) = start_with_metrics();
    let (status, _, _) = http(address, "GET / HTTP/1.0\r\n\r\n");
    assert!(status.ends_with(" 404 Not Found"), "{status}");
    let (status, _, _) = http(
        address,
        "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
    );
    assert!(status.ends_with(" 405 Method Not Allowed"), "{status}");
}

#[test]
fn past_sixteen_open_metrics_connections_another_is_closed_unanswered() {
    let (_dir, _server, address) = start_with_metrics();
    // Sixteen idle connections take every place.
    let idle: Vec<TcpStream> = (0..16)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    // Accepted in order: once a request on a seventeenth is refused, all
    // sixteen hold their places.
    let refused = |address| {
        let mut stream = TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(common::REPLY_TIMEOUT))
            .unwrap();
        let _ = stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        reply.is_empty()
    };
    assert!(refused(address), "a seventeenth connection was answered");
    // One place freed, a scrape is answered again.
    drop(idle);
    let deadline = std::time::Instant::now() + common::REPLY_TIMEOUT;
    while refused(address) {
        assert!(std::time::Instant::now() < deadline, "no place came free");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(metrics(address).contains_key("larder_curr_connections"));
}

#[test]
fn an_idle_metrics_connection_is_closed_so_it_cannot_hold_a_place_for_good() {
    let (_dir, _server, address) = start_with_metrics();
    // Sixteen clients connect and never send a request: every place is
    // taken, until the server gives up on them (after 10 s).
    let mut idle: Vec<TcpStream> = (0..16)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    // A guard against a hang, well past the server's 10 s.
    let guard = std::time::Duration::from_secs(40);
    for stream in &mut idle {
        stream.set_read_timeout(Some(guard)).unwrap();
        let mut rest = Vec::new();
        let read = stream.read_to_end(&mut rest);
        assert!(
            matches!(read, Ok(0)),
            "an idle connection was not closed by the server: {read:?}, {rest:?}"
        );
    }
    // Their places are free again: a scrape is answered.
    assert!(metrics(address).contains_key("larder_curr_connections"));
}
