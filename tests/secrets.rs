//! Secrets never leak: the bearer token appears in no `Debug` or `Display`
//! output, no error message and no tracing output, even when a runtime echoes
//! it back.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use arcp_mock::{Dialect, MockRuntime};
use arcp_sdk::{Client, Error};
use arcp_types::{Auth, Dialect as Wire, ErrorCode, ErrorReply, Frame, Message};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message as Ws;

const TOKEN: &str = "sekrit-7f3a9c-token";

/// A tracing writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

// current_thread: the connection task logs on this thread, under the guard.
#[tokio::test(flavor = "current_thread")]
async fn the_token_is_never_printed_or_logged() {
    let (logs, _guard) = capture();
    let mock = MockRuntime::builder()
        .token(TOKEN, "alice")
        .tool("echo", |args, _| async move { Ok(args) })
        .start()
        .await
        .unwrap();
    let builder = Client::builder(mock.ws_url()).bearer_token(TOKEN);
    assert!(!format!("{builder:?}").contains(TOKEN));
    let client = builder.connect().await.unwrap();
    assert!(!format!("{client:?}").contains(TOKEN));
    let out = client.invoke_tool("echo", json!({"x": 1})).await.unwrap();
    assert!(!format!("{out:?}").contains(TOKEN));
    mock.kill_connections(); // a reconnect re-sends the credentials
    client.invoke_tool("echo", json!({"x": 2})).await.unwrap();

    let wrong = Client::builder(mock.ws_url())
        .bearer_token(format!("{TOKEN}-wrong"))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(wrong, Error::Unauthenticated { .. }), "{wrong:?}");
    assert!(!format!("{wrong} {wrong:?}").contains(TOKEN));

    assert!(!format!("{:?}", Auth::bearer(TOKEN)).contains(TOKEN));
    let text = logs.text();
    assert!(text.contains("session established"), "tracing was captured");
    assert!(
        !text.contains(TOKEN),
        "the token leaked into the logs:\n{text}"
    );
}

/// A runtime that refuses every session and echoes the token it was given.
async fn echoing_runtime() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/arcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(socket).await.unwrap();
                while let Some(Ok(Ws::Text(text))) = ws.next().await {
                    let Ok(frame) = Wire::V1_1.decode(text.as_str()) else {
                        continue;
                    };
                    let Message::Open(open) = frame.message else {
                        continue;
                    };
                    let token = open.auth.token.unwrap_or_default();
                    let refusal = Frame::new(Message::SessionError(ErrorReply::new(
                        ErrorCode::Unauthenticated,
                        format!("token {token} is not valid"),
                    )));
                    let _ = ws.send(Ws::text(Wire::V1_1.encode(&refusal))).await;
                }
            });
        }
    });
    url
}

#[tokio::test(flavor = "current_thread")]
async fn a_runtime_echoing_the_token_does_not_leak_it() {
    let (logs, _guard) = capture();
    let url = echoing_runtime().await;
    let err = Client::builder(url)
        .bearer_token(TOKEN)
        .dialect(Dialect::V1_1)
        .connect()
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("<redacted>"), "{shown}");
    assert!(!shown.contains(TOKEN), "{shown}");
    assert!(!logs.text().contains(TOKEN));
}

/// Credentials in the URL itself (`scheme://user:password@host`) are shown
/// nowhere: not by `Debug` of the builder or the client, not in the errors
/// of a connect that fails (WebSocket, refused; HTTP, a malformed URL).
#[tokio::test]
async fn credentials_in_the_url_are_never_printed() {
    const PASSWORD: &str = "url-pa55word-91c";
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = dead.local_addr().unwrap();
    drop(dead);
    let builder = Client::builder(format!("ws://user:{PASSWORD}@{address}/arcp"))
        .connect_budget(std::time::Duration::from_millis(200));
    assert!(!format!("{builder:?}").contains(PASSWORD));
    let refused = builder.connect().await.unwrap_err();
    assert!(
        !format!("{refused} {refused:?}").contains(PASSWORD),
        "{refused:?}"
    );
    let malformed = Client::builder(format!("http://user:{PASSWORD}@[bad/arcp"))
        .connect()
        .await
        .unwrap_err();
    assert!(
        !format!("{malformed} {malformed:?}").contains(PASSWORD),
        "{malformed:?}"
    );
    let client = Client::builder(format!("http://user:{PASSWORD}@{address}/arcp"))
        .connect()
        .await
        .unwrap();
    assert!(!format!("{client:?}").contains(PASSWORD), "{client:?}");
}
