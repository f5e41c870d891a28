//! The published reference runtime, `arcp-runtime = "=2.0.0"`, unmodified,
//! served the way its own `arcp serve` does: `tokio_tungstenite::accept_async`
//! on a plain accepted socket (no TCP_NODELAY), then
//! `ARCPRuntime::serve_connection`, on the default multi-threaded runtime.
//! Only an `echo` tool is registered (`arcp serve` registers none).

use std::sync::Arc;

use arcp_core::messages::Capabilities;
use arcp_core::transport::websocket::WebSocketTransport;
use arcp_runtime::auth::BearerAuthenticator;
use arcp_runtime::runtime::{ARCPRuntime, ToolContext, ToolHandler, ToolRegistryBuilder};
use arcp_runtime::ARCPError;
use async_trait::async_trait;
use serde_json::Value;

use crate::listener;

struct Echo;

#[async_trait]
impl ToolHandler for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    async fn invoke(&self, arguments: Value, _ctx: ToolContext) -> Result<Value, ARCPError> {
        Ok(arguments)
    }
}

pub(crate) fn serve(port: u16) -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let runtime = ARCPRuntime::builder()
            .with_authenticator(Box::new(
                BearerAuthenticator::new().with_token(crate::TOKEN, "alice"),
            ))
            .with_tools(ToolRegistryBuilder::new().with(Arc::new(Echo)).build())
            .with_capabilities(Capabilities {
                streaming: Some(true),
                durable_jobs: Some(true),
                artifacts: Some(false),
                subscriptions: Some(false),
                ..Default::default()
            })
            .build()
            .await?;
        let listener = listener::bind_and_announce(port, "ws").await?;
        loop {
            let tcp = listener::accept(&listener).await;
            let runtime = runtime.clone();
            tokio::spawn(async move {
                if let Ok(ws) = tokio_tungstenite_029::accept_async(tcp).await {
                    // Detached, as `arcp serve` does.
                    drop(runtime.serve_connection(WebSocketTransport::accept_stream(ws)));
                }
            });
        }
    })
}
