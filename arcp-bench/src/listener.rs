//! A server's loopback listener, as every server here opens it: bound on
//! the port asked for (0: an ephemeral one), announced to the parent once
//! it listens (`ready_line`), and accepting through transient errors.

use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// Binds `127.0.0.1:port` and announces `{scheme}://127.0.0.1:{port}/arcp`.
pub(crate) async fn bind_and_announce(port: u16, scheme: &str) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let port = listener.local_addr()?.port();
    crate::ready_line::announce(&format!("{scheme}://127.0.0.1:{port}/arcp"));
    Ok(listener)
}

/// The next connection; an accept that fails (too many open files, a
/// connection reset before it was accepted) is retried after 10 ms.
pub(crate) async fn accept(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => return tcp,
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}
