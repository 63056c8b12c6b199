//! The metrics endpoint (`--metrics-listen`): `GET /metrics` over HTTP
//! answers every numeric figure of `stats` in Prometheus' text format, for
//! scrapers that speak HTTP rather than the memcached protocol.
//!
//! Each `STAT name value` line of `stats` whose value is a number becomes
//! `larder_<name> <value>` (a name that starts with `larder_` already
//! keeps it once); the figures are untyped, as their meaning is the
//! memcached-style documentation of `stats`. The endpoint runs on a thread
//! of its own, outside the request path, and serves one request at a time.

use crate::session::Shared;
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

/// The content type of Prometheus' text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The bound metrics listener.
pub(crate) struct Endpoint {
    server: Arc<tiny_http::Server>,
    address: SocketAddr,
}

/// The endpoint serving on its thread.
pub(crate) struct Serving {
    server: Arc<tiny_http::Server>,
    thread: JoinHandle<()>,
}

impl Endpoint {
    /// Listens on `address`.
    pub(crate) fn bind(address: SocketAddr) -> std::io::Result<Endpoint> {
        let server = tiny_http::Server::http(address).map_err(std::io::Error::other)?;
        let address = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| std::io::Error::other("the metrics listener has no IP address"))?;
        Ok(Endpoint {
            server: Arc::new(server),
            address,
        })
    }

    /// Where it listens (with port 0, the port the system chose).
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serves requests on a thread of its own until [`Serving::stop`].
    pub(crate) fn serve(self, shared: Arc<Shared>) -> std::io::Result<Serving> {
        let server = Arc::clone(&self.server);
        let thread = std::thread::Builder::new()
            .name("larder-metrics".to_owned())
            .spawn(move || {
                for request in self.server.incoming_requests() {
                    answer(request, &shared);
                }
            })?;
        Ok(Serving { server, thread })
    }
}

impl Serving {
    /// Stops taking requests and waits for the thread.
    pub(crate) fn stop(self) {
        self.server.unblock();
        let _ = self.thread.join();
    }
}

fn answer(request: tiny_http::Request, shared: &Shared) {
    use tiny_http::{Header, Method, Response};
    let path = request.url().split('?').next().unwrap_or_default();
    let response = match (request.method(), path) {
        (Method::Get, "/metrics") => {
            let body = exposition(shared);
            let content_type = Header::from_bytes(&b"Content-Type"[..], CONTENT_TYPE.as_bytes());
            let response = Response::from_data(body);
            match content_type {
                Ok(header) => response.with_header(header),
                Err(()) => response,
            }
        }
        (Method::Get, _) => {
            Response::from_data(b"not found: the metrics are at /metrics\n".to_vec())
                .with_status_code(404)
        }
        _ => Response::from_data(b"only GET\n".to_vec()).with_status_code(405),
    };
    if let Err(error) = request.respond(response) {
        tracing::debug!(%error, "answering a metrics request");
    }
}

/// Every numeric figure of `stats`, in Prometheus' text format.
fn exposition(shared: &Shared) -> Vec<u8> {
    let mut stats = BytesMut::new();
    shared
        .stats
        .write_general(&shared.config, &shared.engine, &mut stats);
    let mut body = Vec::with_capacity(stats.len() * 2);
    for line in stats[..].split(|&byte| byte == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let mut words = line.splitn(3, |&byte| byte == b' ');
        let (Some(b"STAT"), Some(name), Some(value)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        let Some(value) = std::str::from_utf8(value)
            .ok()
            .filter(|value| value.parse::<f64>().is_ok())
        else {
            continue;
        };
        let name = String::from_utf8_lossy(name);
        let name = name.strip_prefix("larder_").unwrap_or(&name);
        body.extend_from_slice(b"larder_");
        for character in name.chars() {
            let keep = character.is_ascii_alphanumeric() || character == '_';
            body.push(if keep { character as u8 } else { b'_' });
        }
        body.push(b' ');
        body.extend_from_slice(value.as_bytes());
        body.push(b'\n');
    }
    body
}
