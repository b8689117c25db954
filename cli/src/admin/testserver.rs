//! A test server of the admin protocol on a Unix socket in a temporary directory, for the
//! client's tests and its users' (the event stream's follower).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::SOCKET;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::mpsc;

type Body = BoxBody<Bytes, Infallible>;

/// What a test server answers: a status and a body (fixed, or fed through a channel).
pub enum Answer {
    /// A status and a body.
    Fixed(u16, Vec<u8>),
    /// A 200 whose body is what the channel sends, until it closes.
    Stream(mpsc::Receiver<Vec<u8>>),
}

pub fn json(status: u16, v: &impl serde::Serialize) -> Answer {
    Answer::Fixed(status, serde_json::to_vec(v).unwrap())
}

pub type Handler = Arc<dyn Fn(&str, &str, &[u8]) -> Answer + Send + Sync>;

/// A server on `dir/admin.sock` answering every request with `handler(method, target, body)`.
pub fn serve(dir: &Path, handler: Handler) -> PathBuf {
    let socket = dir.join(SOCKET);
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let handler = handler.clone();
                    async move {
                        let method = req.method().as_str().to_owned();
                        let target = req.uri().to_string();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let (status, body): (u16, Body) = match handler(&method, &target, &body) {
                            Answer::Fixed(s, b) => (s, Full::new(Bytes::from(b)).boxed()),
                            Answer::Stream(rx) => {
                                let chunks = futures_util::stream::unfold(rx, |mut rx| async {
                                    let chunk = rx.recv().await?;
                                    Some((Ok::<_, Infallible>(Frame::data(Bytes::from(chunk))), rx))
                                });
                                (200, BodyExt::boxed(StreamBody::new(chunks)))
                            }
                        };
                        Ok::<_, Infallible>(
                            hyper::Response::builder()
                                .status(status)
                                .body(body)
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    socket
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
