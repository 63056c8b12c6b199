#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! The command counters `stats` reports are exact across connections: a
//! connection's requests are counted as soon as they are answered, whether
//! it is still open or has closed, and `stats reset` starts every counter
//! from zero, including those of connections open across the reset.

mod common;

use common::TestServer;
use larder_engine::Durability;

fn counters(server: &TestServer) -> [u64; 5] {
    let stats = server.stats();
    let stat = |name: &str| -> u64 { stats[name].parse().unwrap() };
    [
        stat("cmd_get"),
        stat("get_hits"),
        stat("get_misses"),
        stat("cmd_set"),
        stat("total_items"),
    ]
}

#[test]
fn counters_add_up_over_open_and_closed_connections_and_reset_to_zero() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::EverySec);

    let mut open = server.raw();
    open.send(b"set a 0 0 1\r\nx\r\nget a\r\nget b\r\n");
    open.expect(b"STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\nEND\r\n");
    {
        let mut closed = server.raw();
        closed.send(b"set c 0 0 1\r\ny\r\nget c a\r\n");
        closed.expect(b"STORED\r\nVALUE c 0 1\r\ny\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    }
    // Read from a third connection while the first is still open and the
    // second has closed (which the server may notice a moment later: the
    // sum is the same either way).
    // memcached counts `cmd_get` per key asked for.
    assert_eq!(counters(&server), [4, 3, 1, 2, 2]);

    let mut reset = server.raw();
    reset.send(b"stats reset\r\n");
    reset.expect(b"RESET\r\n");
    assert_eq!(counters(&server), [0, 0, 0, 0, 0]);

    // The connection open across the reset counts from zero too.
    open.send(b"get a b\r\n");
    open.expect(b"VALUE a 0 1\r\nx\r\nEND\r\n");
    drop(open);
    assert_eq!(counters(&server), [2, 1, 1, 0, 0]);
}
