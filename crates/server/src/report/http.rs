//! The Prometheus endpoint (`--metrics ADDR`, off by default): `GET /metrics` answers
//! the exposition text; anything else is 404 or 405. HTTP/1.1 with
//! `Connection: close`, one request per connection: a scraper every few seconds needs
//! no more, and no HTTP library is linked for it.

use super::Reports;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Longest request head read.
const MAX_HEAD: usize = 8192;

/// Bind `addr` and serve until the task is aborted; returns the bound address.
pub async fn spawn(
    addr: SocketAddr,
    reports: Arc<Reports>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((
        bound,
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let reports = reports.clone();
                tokio::spawn(async move {
                    let Ok(Some(target)) =
                        tokio::time::timeout(Duration::from_secs(5), request_target(&mut stream))
                            .await
                    else {
                        return;
                    };
                    let (status, body) = match target {
                        Target::Get(p) if p == "/metrics" || p.starts_with("/metrics?") => {
                            ("200 OK", reports.answer("metrics").await)
                        }
                        Target::Get(_) => ("404 Not Found", "not found; try /metrics\n".into()),
                        Target::Other => ("405 Method Not Allowed", "GET only\n".into()),
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(body.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        }),
    ))
}

enum Target {
    Get(String),
    Other,
}

/// The request line's method and target, once the whole head has arrived; `None` for
/// a head that is too long or a connection that closed first.
async fn request_target(stream: &mut tokio::net::TcpStream) -> Option<Target> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.split(' ');
    match (parts.next(), parts.next()) {
        (Some("GET"), Some(target)) => Some(Target::Get(target.to_string())),
        _ => Some(Target::Other),
    }
}
