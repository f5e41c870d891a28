//! SIGINT (Ctrl-C) and SIGTERM, for the commands that stop on them.

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM. The handlers are
/// installed before this returns, so no signal sent after it is missed
/// (and neither signal kills the process meanwhile).
pub(crate) fn shutdown() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async move {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
