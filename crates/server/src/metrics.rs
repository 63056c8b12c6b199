//! The metrics endpoint (`--metrics-listen`): `GET /metrics` over HTTP
//! answers every numeric figure of `stats` in Prometheus' text format, for
//! scrapers that speak HTTP rather than the memcached protocol.
//!
//! Each `STAT name value` line of `stats` whose value is a finite number
//! becomes `larder_<name> <value>` (a name that starts with `larder_`
//! already keeps it once); the figures are untyped, as their meaning is
//! the memcached-style documentation of `stats`. The endpoint runs on the
//! server's runtime, with hyper: at most [`METRICS_CONNECTIONS_MAX`]
//! connections at once (more are closed at once), each closed after
//! [`METRICS_CONNECTION_TIMEOUT`], and an accept that fails for want of
//! descriptors or memory is retried after a pause, as the memcached
//! listener's is.

use crate::session::Shared;
use bytes::{Bytes, BytesMut};
use http_body_util::Full;
use hyper::{header, Method, Request, Response, StatusCode};
use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// The content type of Prometheus' text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Metrics connections open at once, at most: a scraper needs one.
const METRICS_CONNECTIONS_MAX: usize = 16;
/// How long a metrics connection may stay open, whatever it does.
const METRICS_CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// The bound metrics listener.
pub(crate) struct Endpoint {
    listener: TcpListener,
    address: SocketAddr,
}

impl Endpoint {
    /// Listens on `address`.
    pub(crate) async fn bind(address: SocketAddr) -> std::io::Result<Endpoint> {
        let listener = TcpListener::bind(address).await?;
        let address = listener.local_addr()?;
        Ok(Endpoint { listener, address })
    }

    /// Where it listens (with port 0, the port the system chose).
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serves requests until `stop` changes (or its sender is gone).
    pub(crate) fn serve(
        self,
        shared: Arc<Shared>,
        mut stop: watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let open = Arc::new(Semaphore::new(METRICS_CONNECTIONS_MAX));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    accepted = self.listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            // Past the cap the connection is closed at once.
                            let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
                                continue;
                            };
                            tokio::spawn(serve_connection(stream, Arc::clone(&shared), permit));
                        }
                        Err(error) if crate::out_of_resources(&error) => {
                            tokio::time::sleep(crate::limits::ACCEPT_PAUSE).await;
                        }
                        Err(_) => {}
                    },
                }
            }
        })
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    shared: Arc<Shared>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let response = answer(&request, &shared);
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    if let Ok(Err(error)) = tokio::time::timeout(METRICS_CONNECTION_TIMEOUT, connection).await {
        tracing::debug!(%error, "serving a metrics connection");
    }
}

fn answer<B>(request: &Request<B>, shared: &Shared) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE, exposition(shared)),
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            b"not found: the metrics are at /metrics\n".to_vec(),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            b"only GET\n".to_vec(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// Every numeric figure of `stats`, in Prometheus' text format, each name
/// once.
fn exposition(shared: &Shared) -> Vec<u8> {
    let mut stats = BytesMut::new();
    shared
        .stats
        .write_general(&shared.config, &shared.engine, &mut stats);
    let mut body = Vec::with_capacity(stats.len() * 2);
    let mut named = HashSet::new();
    for (name, value) in crate::stats::stat_lines(&stats) {
        let Some(value) = std::str::from_utf8(value)
            .ok()
            .filter(|value| value.parse::<f64>().is_ok_and(f64::is_finite))
        else {
            continue;
        };
        let name = String::from_utf8_lossy(name);
        let name = name.strip_prefix("larder_").unwrap_or(&name);
        let name: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if !named.insert(name.clone()) {
            continue;
        }
        body.extend_from_slice(b"larder_");
        body.extend_from_slice(name.as_bytes());
        body.push(b' ');
        body.extend_from_slice(value.as_bytes());
        body.push(b'\n');
    }
    body
}
