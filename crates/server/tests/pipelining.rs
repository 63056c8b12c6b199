#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
//! Pipelined clients: many requests written at once are answered in order,
//! byte for byte as memcached would; a pipelined burst of writes under
//! durability `always` is acknowledged only once durable yet shares its
//! fsyncs; concurrent writers on separate connections share fsyncs too
//! (group commit), as the `larder_group_commit*` stats show; a lone
//! writer's syncs never wait for a group to fill; and errors and a `quit`
//! inside a long pipeline act exactly where they stand.

mod common;

use common::{Raw, TestServer};
use larder_engine::Durability;

/// The value the mixed pipeline's request `index` stores, if it stores one.
fn value_of(index: usize) -> String {
    format!("v{index}-").repeat(index % 7 + 1)
}

/// Appends request `index` of the mixed pipeline and the exact reply it
/// must get.
fn mixed_request(index: usize, request: &mut Vec<u8>, reply: &mut Vec<u8>) {
    let value = value_of(index);
    let length = value.len();
    let line = |out: &mut Vec<u8>, text: String| out.extend_from_slice(text.as_bytes());
    let group = index / 5;
    match (index % 5, group % 2) {
        (0, _) => {
            line(
                request,
                format!("set p{group} {group} 0 {length}\r\n{value}\r\n"),
            );
            line(reply, "STORED\r\n".to_owned());
        }
        (1, _) => {
            // The value set by the request before this one.
            let value = value_of(index - 1);
            let length = value.len();
            line(request, format!("get p{group}\r\n"));
            line(
                reply,
                format!("VALUE p{group} {group} {length}\r\n{value}\r\nEND\r\n"),
            );
        }
        (2, _) => {
            line(
                request,
                format!("ms m{group} {length} F{group}\r\n{value}\r\n"),
            );
            line(reply, "HD\r\n".to_owned());
        }
        (3, _) => {
            let value = value_of(index - 1);
            let length = value.len();
            line(request, format!("mg m{group} v f\r\n"));
            line(reply, format!("VA {length} f{group}\r\n{value}\r\n"));
        }
        (_, 0) => {
            line(request, format!("delete p{group}\r\n"));
            line(reply, "DELETED\r\n".to_owned());
        }
        _ => {
            line(request, format!("mg gone{group} v\r\n"));
            line(reply, "EN\r\n".to_owned());
        }
    }
}

#[test]
fn a_thousand_pipelined_requests_are_answered_in_order_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::EverySec);
    let mut raw = server.raw();
    let (mut requests, mut replies) = (Vec::new(), Vec::new());
    for index in 0..1000 {
        mixed_request(index, &mut requests, &mut replies);
    }
    raw.send(&requests);
    raw.expect(&replies);
    // Nothing more than the expected bytes came: the next reply is next.
    raw.call(b"mn\r\n", b"MN\r\n");
    // Deletes in the pipeline took effect; other keys stayed.
    let kept = value_of(5);
    let expected = format!("VALUE p1 1 {}\r\n{kept}\r\nEND\r\n", kept.len());
    raw.call(b"get p0 p1\r\n", expected.as_bytes());
}

#[test]
fn a_pipelined_burst_of_sets_under_always_is_acknowledged_and_visible() {
    const SETS: usize = 500;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::Always);
    let fsyncs_before = server.stat("larder_fsyncs");
    let mut writer = server.raw();
    let mut burst = Vec::new();
    for index in 0..SETS {
        let value = format!("burst-value-{index}");
        burst.extend_from_slice(
            format!("set b{index} {index} 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
        );
    }
    writer.send(&burst);
    writer.expect(&b"STORED\r\n".repeat(SETS));
    let fsyncs = server.stat("larder_fsyncs") - fsyncs_before;
    assert!(fsyncs >= 1, "acknowledged under `always` without an fsync");
    assert!(
        fsyncs < SETS as u64 / 2,
        "{fsyncs} fsyncs for {SETS} pipelined sets"
    );

    let mut reader = server.raw();
    for index in 0..SETS {
        let (value, flags, _) = reader.gets(&format!("b{index}")).unwrap();
        assert_eq!(value, format!("burst-value-{index}").as_bytes());
        assert_eq!(flags, index as u32);
    }
}

#[test]
fn concurrent_writers_under_always_share_group_commits() {
    const CONNECTIONS: usize = 64;
    const SETS_EACH: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::Always);
    let addr = server.addr();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(CONNECTIONS));
    let writers: Vec<_> = (0..CONNECTIONS)
        .map(|writer| {
            let barrier = std::sync::Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut raw = Raw::connect(addr);
                barrier.wait();
                for index in 0..SETS_EACH {
                    let request = format!("set w{writer}:{index} 0 0 2\r\nok\r\n");
                    raw.call(request.as_bytes(), b"STORED\r\n");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let stats = server.stats();
    let stat = |name: &str| stats[name].parse::<u64>().unwrap();
    let commits = stat("larder_group_commits");
    let writers_total = stat("larder_group_commit_writers");
    let writers_max = stat("larder_group_commit_writers_max");
    assert!(commits > 0, "no group commits");
    assert!(writers_max >= 1);
    assert!(
        writers_total > commits,
        "no commit covered two writers: {writers_total} writers in {commits} commits"
    );
    assert!(writers_max >= 2, "largest group {writers_max}");
    assert_eq!(stat("curr_items"), (CONNECTIONS * SETS_EACH) as u64);
}

#[test]
fn a_lone_writer_under_always_never_waits_for_a_group_to_fill() {
    // Between two of its sets the worker serving the connection runs out of
    // work (it waits for the sync, then for the next request) and reports
    // it, so the sync thread has no reason to wait. Were the workers' park
    // reports not wired to the engine, nearly every sync after the first
    // would wait. Only a request arriving between the reply's write and
    // the next read could make a sync wait: a few at most.
    const SETS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::Always);
    let mut raw = server.raw();
    for index in 0..SETS {
        let request = format!("set lone{index} 0 0 5\r\nvalue\r\n");
        raw.call(request.as_bytes(), b"STORED\r\n");
    }
    let waited = server.stat("larder_group_commits_waited");
    let commits = server.stat("larder_group_commits");
    assert!(
        commits >= SETS as u64,
        "{commits} group commits for {SETS} sets"
    );
    assert!(
        waited <= (SETS / 20) as u64,
        "{waited} of {commits} syncs waited"
    );
}

/// A pipeline longer than one window of parsed requests, with an unknown
/// command, a refused oversized value (its data swallowed) and a `quit`
/// inside it: each acts exactly where it stands, as if the requests had come
/// one by one, and nothing after the `quit` is carried out.
#[test]
fn errors_and_a_quit_inside_a_long_pipeline_act_where_they_stand() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), Durability::EverySec);
    let mut raw = server.raw();
    let (mut requests, mut replies) = (Vec::new(), Vec::new());
    for index in 0..60 {
        match index {
            13 => {
                requests.extend_from_slice(b"bogus command\r\n");
                replies.extend_from_slice(b"ERROR\r\n");
            }
            21 => {
                requests.extend_from_slice(b"set big 0 0 2000000\r\n");
                requests.extend_from_slice(&vec![b'x'; 2_000_000]);
                requests.extend_from_slice(b"\r\n");
                replies.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
            }
            45 => requests.extend_from_slice(b"quit\r\n"),
            _ => {
                requests.extend_from_slice(format!("set w{index} 0 0 2\r\nok\r\n").as_bytes());
                if index < 45 {
                    replies.extend_from_slice(b"STORED\r\n");
                }
            }
        }
    }
    raw.send(&requests);
    assert_eq!(raw.read_to_close(), replies);
    let mut check = server.raw();
    for index in 0..60 {
        let stored = index < 45 && index != 13 && index != 21;
        let expected = match stored {
            true => format!("VALUE w{index} 0 2\r\nok\r\nEND\r\n"),
            false => "END\r\n".to_owned(),
        };
        check.call(format!("get w{index}\r\n").as_bytes(), expected.as_bytes());
    }
    check.call(b"get big\r\n", b"END\r\n");
}
