//! `lease run --metrics ADDR`: this process's metrics in the Prometheus text format, over a
//! minimal HTTP/1.1 server (GET /metrics, one request per connection).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use lease::clock::{Clock, SystemClock};

use crate::exit::{self, Exit};

/// `f`'s output, unless `bound` passes first.
async fn within<T>(bound: Duration, f: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::select! {
        v = f => Some(v),
        _ = SystemClock.sleep(bound) => None,
    }
}

/// A running metrics endpoint.
pub struct Server {
    scrapes: Arc<(AtomicU64, Notify)>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub async fn start(addr: SocketAddr) -> Result<Server, Exit> {
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            Exit::fail(
                exit::USAGE,
                format!("--metrics {addr}: cannot listen there: {e}"),
            )
        })?;
        let scrapes = Arc::new((AtomicU64::new(0), Notify::new()));
        let counter = scrapes.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let counter = counter.clone();
                tokio::spawn(async move {
                    let bound = Duration::from_secs(10);
                    if let Some(Ok(true)) = within(bound, answer(stream)).await {
                        counter.0.fetch_add(1, Ordering::SeqCst);
                        counter.1.notify_waiters();
                    }
                });
            }
        });
        Ok(Server { scrapes, task })
    }

    /// Wait at most `bound` for one more scrape than were served so far.
    pub async fn linger(&self, bound: Duration) {
        let (count, notify) = &*self.scrapes;
        let seen = count.load(Ordering::SeqCst);
        within(bound, async {
            while count.load(Ordering::SeqCst) == seen {
                let next = notify.notified();
                tokio::pin!(next);
                next.as_mut().enable();
                if count.load(Ordering::SeqCst) != seen {
                    break;
                }
                next.await;
            }
        })
        .await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answer one request; true when it was a scrape of the metrics.
async fn answer(mut stream: TcpStream) -> std::io::Result<bool> {
    let mut request = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || request.len() > 16 * 1024 {
            return Ok(false);
        }
        request.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&request);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body, scrape) = match (method, path) {
        ("GET", "/metrics" | "/") => (
            "200 OK",
            lease::metrics::CONTENT_TYPE,
            lease::metrics::encode_text(),
            true,
        ),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "not found: the metrics are at /metrics\n".to_string(),
            false,
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "use GET /metrics\n".to_string(),
            false,
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await?;
    Ok(scrape)
}
