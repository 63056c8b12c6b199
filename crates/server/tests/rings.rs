#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! Connections served on io_uring rings (`--io uring`), whatever
//! `LARDER_TEST_IO` says: the setting shows in `stats settings`; many
//! connections spread over two ring threads each get their own replies,
//! and under `always` each write is acknowledged once its sync wakes the
//! commit through the ring thread's mailbox (a lost wake-up would leave a
//! client waiting for its reply); a pipeline of quiet writes
//! sent just before the shutdown is served, and the server stops without
//! cutting anyone.

mod common;

use common::{config, Raw, TestServer};
use larder_engine::Durability;
use larder_server::{Address, Io, ServerConfig};
use std::path::Path;

fn ring_config(dir: &Path, durability: Durability) -> ServerConfig {
    ServerConfig {
        io: Io::Uring,
        ..config(dir, durability)
    }
}

/// These tests are about rings whatever `LARDER_TEST_IO` says.
fn start(config: ServerConfig) -> TestServer {
    TestServer::start_as_given(config)
}

#[test]
fn stats_settings_name_the_rings() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(ring_config(dir.path(), Durability::EverySec));
    let mut raw = server.raw();
    assert_eq!(raw.stats_of("settings")["larder_io"], "uring");
    raw.call(b"set k 5 0 3\r\nabc\r\n", b"STORED\r\n");
    raw.call(b"get k\r\n", b"VALUE k 5 3\r\nabc\r\nEND\r\n");
    server.stop().unwrap();
}

#[test]
fn connections_on_both_ring_threads_each_get_their_own_replies_under_always() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(ring_config(dir.path(), Durability::Always));
    let Address::Tcp(addr) = server.address.clone() else {
        unreachable!("tests listen on TCP")
    };
    let clients: Vec<_> = (0..24)
        .map(|client| {
            std::thread::spawn(move || {
                let mut raw = Raw::connect(addr);
                for round in 0..40 {
                    let value = format!("c{client}r{round}");
                    let set = format!("set k{client} {round} 0 {}\r\n{value}\r\n", value.len());
                    raw.call(set.as_bytes(), b"STORED\r\n");
                    let reply = format!(
                        "VALUE k{client} {round} {}\r\n{value}\r\nEND\r\n",
                        value.len()
                    );
                    raw.call(format!("get k{client}\r\n").as_bytes(), reply.as_bytes());
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(server.stat("cmd_set"), 960);
    assert_eq!(server.stat("get_hits"), 960);
    // Each set was acknowledged after an fsync (`always`).
    assert!(server.stat("larder_fsyncs") > 0);
    assert_eq!(server.stop().unwrap().connections_cut, 0);
}

#[test]
fn quiet_writes_sent_just_before_the_shutdown_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(ring_config(dir.path(), Durability::EverySec));
    let mut raw = server.raw();
    // Once this is answered, the connection is on a ring thread: one
    // still waiting to be accepted at the shutdown would be refused.
    raw.call(b"set first 0 0 1\r\n1\r\n", b"STORED\r\n");
    let mut burst = Vec::new();
    for key in 0..2000 {
        burst.extend_from_slice(format!("set q{key} 0 0 4 noreply\r\n{key:04}\r\n").as_bytes());
    }
    raw.send(&burst);
    server.signal_shutdown();
    // The connection closes once it has served what it was sent.
    assert_eq!(raw.read_to_close(), b"");
    assert_eq!(server.stop().unwrap().connections_cut, 0);

    let server = start(ring_config(dir.path(), Durability::EverySec));
    let mut raw = server.raw();
    for key in [0, 999, 1999] {
        let reply = format!("VALUE q{key} 0 4\r\n{key:04}\r\nEND\r\n");
        raw.call(format!("get q{key}\r\n").as_bytes(), reply.as_bytes());
    }
    server.stop().unwrap();
}
