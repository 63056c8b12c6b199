//! A minimal in-test memcached (set and get only) for the scenarios that
//! must run with nothing installed. Each test file compiles this module
//! separately.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

/// Answers `set` with `STORED` (`CLIENT_ERROR` when its data block does not
/// end where its byte count says) and `get` with `END` (a miss) until the
/// client closes the connection: requests come from `input`, replies go
/// to `output` (two handles of one socket).
pub fn serve_connection(input: impl Read, mut output: impl Write) -> std::io::Result<()> {
    let mut reader = BufReader::new(input);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first().copied() {
            Some("set") => {
                let bytes: usize = words
                    .get(4)
                    .and_then(|word| word.parse().ok())
                    .expect("set carries a byte count");
                let mut data = vec![0; bytes + 2];
                reader.read_exact(&mut data)?;
                if data.ends_with(b"\r\n") {
                    output.write_all(b"STORED\r\n")?;
                } else {
                    output.write_all(b"CLIENT_ERROR bad data chunk\r\n")?;
                }
            }
            Some("get") => output.write_all(b"END\r\n")?,
            _ => output.write_all(b"ERROR\r\n")?,
        }
    }
}

/// Serves each connection accepted on an ephemeral port of 127.0.0.1 with
/// `serve`, on a thread of its own; returns the port. The threads end with
/// the test process.
pub fn start_tcp(serve: fn(TcpStream) -> std::io::Result<()>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    let port = listener.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    port
}

/// The fake memcached of [`serve_connection`] on an ephemeral port.
pub fn start_fake_memcached() -> u16 {
    start_tcp(|stream| serve_connection(stream.try_clone()?, stream))
}
