//! The metrics over HTTP: `GET /metrics` answers this process's metrics in
//! the OpenMetrics text format Prometheus scrapes; anything else is 404.
//! In the clear and without credentials, as Prometheus exporters are:
//! bind it to an address only the monitoring network reaches
//! (docs/operations.md). A few connections at once, each given a few
//! seconds to send its request.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 16;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `addr` and serves `registry` there from a task of its own;
/// answers the address bound (port 0 asks the kernel for one).
pub async fn serve(addr: SocketAddr, registry: Registry) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let registry = Arc::new(registry);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!("metrics: cannot accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let registry = registry.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let registry = registry.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(&req, &registry)) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(5))
                    .serve_connection(TokioIo::new(stream), service);
                // A scraper that stops reading is let go after a while.
                let _ = tokio::time::timeout(Duration::from_secs(30), conn).await;
                drop(slot);
            });
        }
    });
    tracing::info!(%local, "serving metrics at http://{local}/metrics");
    Ok(local)
}

fn answer<B>(req: &Request<B>, registry: &Registry) -> Response<Full<Bytes>> {
    let reply = |status, kind: &str, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", kind)
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => reply(StatusCode::OK, CONTENT_TYPE, super::render(registry)),
        (&Method::GET, "/") => reply(
            StatusCode::OK,
            "text/plain",
            "mortar: the metrics are at /metrics\n".into(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: the metrics are at /metrics\n".into(),
        ),
    }
}

/// Serves `role`'s metrics at `addr` if given; a failure to bind is
/// logged, not fatal (the process serves its volume all the same).
pub async fn start(addr: Option<SocketAddr>, role: super::Role, labels: Vec<(String, String)>) {
    let Some(addr) = addr else { return };
    if let Err(e) = serve(addr, super::registry(role, labels)).await {
        tracing::warn!(%addr, "metrics not served: cannot listen: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn metrics_are_served_over_http_and_nothing_else() {
        let addr = serve(
            "127.0.0.1:0".parse().unwrap(),
            super::super::registry(super::super::Role::Client, vec![]),
        )
        .await
        .unwrap();
        let ok = get(addr, "/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains("mortar_process_resident_memory_bytes{role=\"client\"}"),
            "{ok}"
        );
        assert!(ok.contains("# EOF"), "{ok}");
        let missing = get(addr, "/secrets").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    }
}
