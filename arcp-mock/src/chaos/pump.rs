//! Accepting and forwarding: one task per connection, two pumps (one per
//! direction) that forward what the frame parser approves and kill the
//! connection when it says so.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::frames::{DirParser, Side};
use super::schedule::{lock, Conn, LiveConn, Shared};

/// Size of the per-direction forwarding buffer.
const BUF_SIZE: usize = 32 * 1024;
/// How long a killing direction may spend handing already-approved bytes to
/// the peer before the sockets are torn down.
const KILL_FLUSH_TIMEOUT: Duration = Duration::from_millis(250);

pub(super) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // e.g. EMFILE: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let _ = client.set_nodelay(true);
        let mut live = lock(&shared.live);
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        let id = shared.connections.fetch_add(1, Ordering::AcqRel);
        let conn = Arc::new(Conn::new(id, &shared.config));
        // Spawned while holding `live`, so the task cannot deregister itself
        // before it is registered.
        let task = tokio::spawn(run_conn(Arc::clone(&shared), Arc::clone(&conn), client));
        live.insert(
            id,
            LiveConn {
                conn,
                task: task.abort_handle(),
            },
        );
    }
}

/// Close a socket abruptly: `SO_LINGER` 0 makes the close send a RST.
pub(super) fn reset(stream: &TcpStream) {
    // `set_linger` is deprecated because a non-zero linger blocks on drop; a
    // zero linger never blocks (and works on every Tokio 1.x).
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome {
    /// Clean EOF from the source; FIN propagated to the destination.
    Eof,
    /// This direction killed the connection.
    Killed,
    /// I/O error on either socket.
    Error,
}

pub(super) async fn run_conn(shared: Arc<Shared>, conn: Arc<Conn>, mut client: TcpStream) {
    let upstream = tokio::select! {
        biased;
        _ = conn.kill.notified() => None,
        r = TcpStream::connect(shared.upstream) => r.ok(),
    };
    let Some(mut upstream) = upstream else {
        reset(&client);
        lock(&shared.live).remove(&conn.id);
        return;
    };
    let _ = upstream.set_nodelay(true);

    let abort = {
        let (client_rd, client_wr) = client.split();
        let (upstream_rd, upstream_wr) = upstream.split();
        let c2s = pump(&shared, &conn, Side::Client, client_rd, upstream_wr);
        let s2c = pump(&shared, &conn, Side::Server, upstream_rd, client_wr);
        tokio::pin!(c2s, s2c);
        let (mut c2s_done, mut s2c_done) = (false, false);
        loop {
            tokio::select! {
                biased;
                _ = conn.kill.notified() => break true,
                outcome = &mut c2s, if !c2s_done => match outcome {
                    Outcome::Eof => c2s_done = true,
                    Outcome::Killed | Outcome::Error => break true,
                },
                outcome = &mut s2c, if !s2c_done => match outcome {
                    Outcome::Eof => s2c_done = true,
                    Outcome::Killed | Outcome::Error => break true,
                },
            }
            if c2s_done && s2c_done {
                break false;
            }
        }
    };
    if abort {
        reset(&client);
        reset(&upstream);
    }
    drop((client, upstream));
    lock(&shared.live).remove(&conn.id);
}

pub(super) async fn pump(
    shared: &Shared,
    conn: &Conn,
    side: Side,
    mut rd: ReadHalf<'_>,
    mut wr: WriteHalf<'_>,
) -> Outcome {
    let mut stall = shared.stall_tx.subscribe();
    let mut buf = vec![0u8; BUF_SIZE].into_boxed_slice();
    let mut parser = DirParser::new(side);
    loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) => {
                let _ = wr.shutdown().await;
                return Outcome::Eof;
            }
            Ok(n) => n,
            Err(_) => return Outcome::Error,
        };
        // Black hole: hold what was read until the stall is lifted.
        if stall.wait_for(|stalled| !*stalled).await.is_err() {
            return Outcome::Error;
        }
        let data = &buf[..n];
        let plan = parser.plan(data, conn, shared);
        if plan.dead || (plan.kill.is_none() && conn.killed.load(Ordering::Acquire)) {
            // Someone else killed the connection; the supervisor tears it down.
            std::future::pending::<()>().await;
        }
        let out_bytes = (plan.prefix_len + plan.end) as u64;
        // Count when handed to the outbound socket, so an observer that has
        // received a frame always sees it counted.
        conn.frames.fetch_add(plan.frames, Ordering::AcqRel);
        conn.bytes.fetch_add(out_bytes, Ordering::AcqRel);
        shared.frames.fetch_add(plan.frames, Ordering::AcqRel);
        shared.bytes.fetch_add(out_bytes, Ordering::AcqRel);
        let prefix = &plan.prefix[..plan.prefix_len];
        let body = &data[..plan.end];
        if let Some(reason) = plan.kill {
            shared.record_kill(conn, reason);
            // Hand over the frames approved before the killed one, then die.
            let _ = tokio::time::timeout(KILL_FLUSH_TIMEOUT, async {
                if !prefix.is_empty() {
                    wr.write_all(prefix).await?;
                }
                wr.write_all(body).await
            })
            .await;
            return Outcome::Killed;
        }
        if !prefix.is_empty() && wr.write_all(prefix).await.is_err() {
            return Outcome::Error;
        }
        if !body.is_empty() && wr.write_all(body).await.is_err() {
            return Outcome::Error;
        }
    }
}
