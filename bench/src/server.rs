//! The upstream: HTTP/1.1 keep-alive, prepared responses, no per-request allocation but
//! the head copy. `/1m` answers 1 MiB, anything else 3 bytes.

use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::http::Conn;

/// Size of the bulk response body.
pub const BULK: usize = 1 << 20;

fn response(body_len: usize) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {body_len}\r\n\r\n"
    )
    .into_bytes();
    if body_len == 3 {
        r.extend_from_slice(b"hi\n");
    } else {
        r.resize(r.len() + body_len, b'x');
    }
    r
}

/// Serves every address in `listen` (and `tls_listen` with `tls`) until killed.
pub async fn serve(
    listen: Vec<String>,
    tls_listen: Vec<String>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> anyhow::Result<()> {
    let small: Arc<[u8]> = response(3).into();
    let bulk: Arc<[u8]> = response(BULK).into();
    let mut tasks = Vec::new();
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let all = listen
        .into_iter()
        .map(|a| (a, None))
        .chain(tls_listen.into_iter().map(|a| (a, acceptor.clone())));
    for (addr, acceptor) in all {
        let l = TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let (small, bulk) = (Arc::clone(&small), Arc::clone(&bulk));
        tasks.push(tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.context("accepting")?;
                let _ = s.set_nodelay(true);
                let (small, bulk) = (Arc::clone(&small), Arc::clone(&bulk));
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let mut c = match acceptor {
                        None => Conn::new(s),
                        Some(a) => match a.accept(s).await {
                            Ok(t) => Conn::new(t),
                            Err(_) => return,
                        },
                    };
                    while let Ok(Some(head)) = c.request().await {
                        let line_end = head.iter().position(|&b| b == b'\r').unwrap_or(head.len());
                        let line = &head[..line_end];
                        let resp = if line.windows(4).any(|w| w == b"/1m ") {
                            &bulk
                        } else {
                            &small
                        };
                        let close = head
                            .to_ascii_lowercase()
                            .windows(17)
                            .any(|w| w == b"connection: close");
                        if c.send(resp).await.is_err() || close {
                            break;
                        }
                    }
                });
            }
            #[allow(unreachable_code)]
            Ok::<(), anyhow::Error>(())
        }));
    }
    // Runs until killed; returns only when a listener fails.
    for t in tasks {
        t.await??;
    }
    Ok(())
}
