//! The accept loop: each connection served by hyper with a header-read
//! timeout (which also closes a kept-alive connection that sends nothing),
//! an idle timeout (no byte read or written), a cap on connections per
//! client address and in all (a connection past a cap is closed at once),
//! and a bounded shutdown: on Ctrl-C or SIGTERM it stops accepting, lets
//! requests in progress finish for at most [`Limits::shutdown_grace`], then
//! closes what is left.

use crate::limiter::client_key;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower_service::Service;

/// The server's limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest wait for a request's whole header, from the connection's
    /// start or the previous answer (hyper's `header_read_timeout`).
    pub header_timeout: Duration,
    /// Longest time a connection may read and write nothing.
    pub idle_timeout: Duration,
    /// Open connections per client address (IPv6: per /64).
    pub per_address: usize,
    /// Open connections in all.
    pub total: usize,
    /// Longest wait for requests in progress after Ctrl-C or SIGTERM.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            per_address: 64,
            total: 1024,
            shutdown_grace: Duration::from_secs(3),
        }
    }
}

/// Open connections, per client address and in all.
#[derive(Default)]
struct Open {
    by_address: HashMap<IpAddr, usize>,
    total: usize,
}

/// One open connection, counted until dropped.
struct Slot {
    open: Arc<Mutex<Open>>,
    address: IpAddr,
}

impl Slot {
    fn take(open: &Arc<Mutex<Open>>, address: IpAddr, limits: &Limits) -> Option<Slot> {
        let mut o = open.lock().unwrap_or_else(|e| e.into_inner());
        let here = o.by_address.get(&address).copied().unwrap_or(0);
        if here >= limits.per_address || o.total >= limits.total {
            return None;
        }
        o.by_address.insert(address, here + 1);
        o.total += 1;
        Some(Slot {
            open: Arc::clone(open),
            address,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut o = self.open.lock().unwrap_or_else(|e| e.into_inner());
        o.total -= 1;
        if let Some(n) = o.by_address.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                o.by_address.remove(&self.address);
            }
        }
    }
}

/// A stream that notes when it last moved a byte.
struct Watched {
    stream: TcpStream,
    start: Instant,
    last: Arc<AtomicU64>,
}

impl Watched {
    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Serves `router` on `listener` until `stop` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    let open = Arc::new(Mutex::new(Open::default()));
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                let (stream, client) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of file descriptors and the like: pause, so
                        // the loop does not spin, then go on.
                        eprintln!("headroom-registry: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Some(slot) = Slot::take(&open, client_key(client.ip()), &limits) else {
                    // Over a cap: closed at once, before any byte is read.
                    drop(stream);
                    continue;
                };
                connections.spawn(connection(
                    stream,
                    client,
                    router.clone(),
                    limits,
                    stopping.clone(),
                    slot,
                ));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stopping_tx.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.shutdown_grace, drained)
        .await
        .is_err()
    {
        connections.abort_all();
    }
    Ok(())
}

async fn connection(
    stream: TcpStream,
    client: SocketAddr,
    router: Router,
    limits: Limits,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    _slot: Slot,
) {
    let _ = stream.set_nodelay(true);
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let io = TokioIo::new(Watched {
        stream,
        start,
        last: Arc::clone(&last),
    });
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(client));
        let mut router = router.clone();
        async move { router.call(req).await }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut watch = tokio::time::interval(Duration::from_millis(500));
    let mut shutting = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => break,
            changed = stopping.changed(), if !shutting => {
                shutting = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
            _ = watch.tick() => {
                let idle = start.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
                if idle > limits.idle_timeout {
                    break;
                }
            }
        }
    }
}
