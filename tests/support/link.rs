//! A TCP link between a client and a server, on loopback, that a test can
//! break the way networks break: black-holed (connections are accepted and
//! nothing is forwarded either way until the link heals, as a middlebox
//! that drops packets while TCP retransmits), or slowed (every chunk is
//! held a while before it is forwarded); and its established connections
//! stranded for good while new ones pass (a middlebox that lost its flow
//! state).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How the link treats traffic now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LinkMode {
    /// Forward everything at once.
    Forward,
    /// Forward nothing (both ways, old and new connections) until the mode
    /// changes; nothing is lost.
    BlackHole,
    /// Hold every chunk this long before forwarding it.
    Delay(Duration),
}

/// A running link; stops (and cuts its connections) when dropped.
pub(crate) struct Link {
    addr: SocketAddr,
    mode: watch::Sender<LinkMode>,
    /// Bumped by `strand_established`: a connection born before the
    /// current value forwards nothing more.
    epoch: watch::Sender<u64>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

impl Link {
    /// Starts a link to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> std::io::Result<Link> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mode = watch::Sender::new(LinkMode::Forward);
        let epoch = watch::Sender::new(0u64);
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let accept = tokio::spawn({
            let mode = mode.clone();
            let epoch = epoch.clone();
            let tasks = tasks.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let mode = mode.clone();
                    let epoch = epoch.subscribe();
                    let task = tokio::spawn(async move {
                        let _ = bridge(client, upstream, mode, epoch).await;
                    });
                    tasks.lock().unwrap().push(task);
                }
            }
        });
        tasks.lock().unwrap().push(accept);
        Ok(Link {
            addr,
            mode,
            epoch,
            tasks,
        })
    }

    /// The link's address: connect here instead of to the server.
    pub(crate) fn address(&self) -> SocketAddr {
        self.addr
    }

    /// Changes how the link treats traffic, for every connection.
    pub(crate) fn set(&self, mode: LinkMode) {
        self.mode.send_replace(mode);
    }

    /// Every connection open now forwards nothing more, ever (neither way,
    /// and not closed); connections opened later pass as the mode says.
    pub(crate) fn strand_established(&self) {
        self.epoch.send_modify(|epoch| *epoch += 1);
    }
}

async fn bridge(
    client: TcpStream,
    upstream: SocketAddr,
    mode: watch::Sender<LinkMode>,
    epoch: watch::Receiver<u64>,
) -> std::io::Result<()> {
    let born = *epoch.borrow();
    wait_open(&mut mode.subscribe()).await;
    let server = TcpStream::connect(upstream).await?;
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(
        client_read,
        server_write,
        mode.subscribe(),
        (epoch.clone(), born),
    );
    let down = pump(server_read, client_write, mode.subscribe(), (epoch, born));
    let _ = tokio::join!(up, down);
    Ok(())
}

/// Waits while the link is black-holed.
async fn wait_open(mode: &mut watch::Receiver<LinkMode>) {
    loop {
        let dark = *mode.borrow_and_update() == LinkMode::BlackHole;
        if !dark || mode.changed().await.is_err() {
            return;
        }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: watch::Receiver<LinkMode>,
    (epoch, born): (watch::Receiver<u64>, u64),
) -> std::io::Result<()> {
    let stranded = move || *epoch.borrow() > born;
    // Latency, not a serial pause: each chunk is forwarded its delay after
    // it arrived, in order, while later chunks are already on their way.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let mut reading_mode = mode.clone();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // A black hole reads nothing either: the sender's data waits in
            // its socket, as it would wait for retransmission.
            wait_open(&mut reading_mode).await;
            let n = from.read(&mut buf).await?;
            if stranded() {
                // Lost flow state: nothing passes, and nothing says so.
                std::future::pending::<()>().await;
            }
            let delay = match *reading_mode.borrow() {
                LinkMode::Delay(d) => d,
                _ => Duration::ZERO,
            };
            if tx
                .send((tokio::time::Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
                || n == 0
            {
                return Ok::<_, std::io::Error>(());
            }
        }
    };
    let mut writing_mode = mode;
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            wait_open(&mut writing_mode).await;
            if chunk.is_empty() {
                return to.shutdown().await;
            }
            to.write_all(&chunk).await?;
        }
        Ok(())
    };
    let (r, w) = tokio::join!(read, write);
    r.and(w)
}
