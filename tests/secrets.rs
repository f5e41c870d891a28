//! Secrets never leak: the bearer token and the URL's credentials and
//! query appear in no `Debug` or `Display` output, no error message, no
//! connection event, no journal record and no tracing output, even when a
//! runtime echoes them back.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use arcp_mock::{Dialect, MockRuntime};
use arcp_sdk::{
    CancelOutcome, Client, ConnectionEvent, Error, Execution, IdempotencyKey, MemoryJournal,
};
use arcp_types::{Accepted, Auth, Dialect as Wire, ErrorCode, ErrorReply, Frame, Message, Welcome};
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

    // A credential in the query (`?access_token=`), over both transports:
    // not in `Debug`, not in the error of a call that cannot connect.
    for scheme in ["ws", "http"] {
        let client = Client::builder(format!("{scheme}://{address}/arcp?access_token={PASSWORD}"))
            .connect_lazy();
        assert!(!format!("{client:?}").contains(PASSWORD), "{client:?}");
        let failed = client
            .invoke_tool("echo", serde_json::json!({}))
            .deadline(std::time::Duration::from_millis(300))
            .send()
            .await
            .unwrap_err();
        let shown = format!("{failed} {failed:?}");
        assert!(!shown.contains(PASSWORD), "{shown}");
    }
}

/// What a leaky runtime does with a session.
#[derive(Clone, Copy)]
enum Leak {
    /// Closes the connection on the hello, with the token as the close
    /// reason.
    CloseOnHello,
    /// Serves calls, echoing the token into every string it can: a frame
    /// the client cannot decode (after the welcome), a tool error's message
    /// and details (`fail`), a refused cancel (`hold`), and the close reason
    /// of a connection dropped under a call (`drop`).
    Serve,
}

/// A runtime that echoes the token it was given into everything it sends.
async fn leaky_runtime(dialect: Wire, leak: Leak) -> String {
    use tokio_tungstenite::tungstenite::protocol::{frame::coding::CloseCode, CloseFrame};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/arcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut jobs = 0u32;
        while let Ok((socket, _)) = listener.accept().await {
            jobs += 100;
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(socket).await else {
                    return;
                };
                let mut token = String::new();
                let mut job = jobs;
                while let Some(Ok(Ws::Text(text))) = ws.next().await {
                    let Ok(frame) = dialect.decode(text.as_str()) else {
                        continue;
                    };
                    let request = frame.envelope.id.clone();
                    let reply = |message: Message, job: Option<&str>| {
                        let mut f = Frame::new(message);
                        f.envelope.correlation_id = Some(request.clone());
                        f.envelope.job_id = job.map(str::to_owned);
                        dialect.encode(&f)
                    };
                    let close = |token: &str| {
                        Ws::Close(Some(CloseFrame {
                            code: CloseCode::Error,
                            reason: format!("bad {token}").into(),
                        }))
                    };
                    let mut out = Vec::new();
                    match frame.message {
                        Message::Open(open) => {
                            token = open.auth.token.unwrap_or_default();
                            if matches!(leak, Leak::CloseOnHello) {
                                let _ = ws.send(close(&token)).await;
                                return;
                            }
                            let welcome: Welcome = serde_json::from_value(json!({
                                "session_id": "sess_leaky",
                                "runtime": {"name": "leaky", "version": "0"}
                            }))
                            .unwrap();
                            out.push(Ws::text(reply(Message::Welcome(welcome), None)));
                            // A frame the client cannot decode, quoting it.
                            out.push(Ws::text(format!(
                                r#"{{"type":"job.event","id":"msg_1","event_seq":"{token}","payload":{{}}}}"#
                            )));
                        }
                        Message::Invoke(invoke) => {
                            job += 1;
                            let id = format!("job_{job:026}");
                            let accepted = Accepted::new(&id).with_request_id(request.clone());
                            out.push(Ws::text(reply(Message::Accepted(accepted), Some(&id))));
                            match invoke.tool.as_str() {
                                "fail" => {
                                    let e = ErrorReply::new(
                                        ErrorCode::PermissionDenied,
                                        format!("{token} may not"),
                                    )
                                    .with_details(json!({"token": token, "nested": [token]}));
                                    out.push(Ws::text(reply(Message::Error(e), Some(&id))));
                                }
                                "drop" => out.push(close(&token)),
                                _ => {}
                            }
                        }
                        Message::Cancel(cancel) => {
                            let why = format!("{token} may not cancel");
                            let refusal = if dialect == Wire::Legacy {
                                Message::CancelRefused(
                                    json!({"reason": why}).as_object().unwrap().clone(),
                                )
                            } else {
                                Message::Error(
                                    ErrorReply::new(ErrorCode::PermissionDenied, why)
                                        .with_request_id(request.clone()),
                                )
                            };
                            out.push(Ws::text(reply(refusal, Some(&cancel.job_id))));
                        }
                        _ => {}
                    }
                    for message in out {
                        if ws.send(message).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    url
}

/// Every channel a runtime can put text into, fed by a runtime that echoes
/// the token: errors (`Display` and `Debug`), a refused cancel, tool-error
/// details, close reasons (the handshake error, the "connection lost" log,
/// `ConnectionEvent::Disconnected`), journal records and tracing output.
async fn nothing_leaks_over(dialect: Wire) {
    let (logs, _guard) = capture();
    let query_secret = "query-s3cret-8a1f";

    // A close reason on the hello: the handshake error.
    let url = leaky_runtime(dialect, Leak::CloseOnHello).await;
    let err = Client::builder(format!("{url}?access_token={query_secret}"))
        .bearer_token(TOKEN)
        .dialect(dialect)
        .connect_budget(Duration::from_millis(300))
        .connect()
        .await
        .unwrap_err();
    let mut shown = format!("{err} {err:?}\n");

    let url = leaky_runtime(dialect, Leak::Serve).await;
    let client = Client::builder(format!("{url}?access_token={query_secret}"))
        .bearer_token(TOKEN)
        .dialect(dialect)
        .journal(MemoryJournal::new())
        .connect()
        .await
        .unwrap();
    let mut events = client.events();
    shown.push_str(&format!("{client:?}\n"));

    // A tool error: its message and details.
    let failed = client.invoke_tool("fail", json!({})).await.unwrap_err();
    let Error::Tool(tool_error) = &failed else {
        panic!("{failed:?}");
    };
    assert_eq!(tool_error.execution, Execution::Ran);
    assert!(tool_error.details.is_some(), "details kept, redacted");
    shown.push_str(&format!("{failed} {failed:?}\n"));

    // A refused cancel.
    let call = client
        .invoke_tool("hold", json!({}))
        .deadline(Duration::from_secs(2))
        .send();
    let handle = call.handle();
    let held = tokio::spawn(call);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cancelled = handle.cancel().await;
    assert!(
        matches!(cancelled, CancelOutcome::Refused { .. }),
        "{cancelled:?}"
    );
    shown.push_str(&format!("{cancelled:?}\n"));
    held.abort();

    // A connection closed under a call, with the token as the reason.
    let key = IdempotencyKey::new();
    let dropped = client
        .invoke_tool("drop", json!({}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(1500))
        .send()
        .await
        .unwrap_err();
    shown.push_str(&format!("{dropped} {dropped:?}\n"));
    let record = client.lookup(&key).await.unwrap().expect("journaled");
    shown.push_str(&format!("{record:?}\n"));
    let mut disconnects = 0;
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(50), events.next()).await
    {
        disconnects += usize::from(matches!(event, ConnectionEvent::Disconnected { .. }));
        shown.push_str(&format!("{event:?}\n"));
    }
    assert!(disconnects >= 1, "{shown}");
    client.close().await;

    let logs = logs.text();
    assert!(logs.contains("connection lost"), "tracing was captured");
    for text in [&shown, &logs] {
        assert!(text.contains("<redacted>"), "{text}");
        assert!(!text.contains(TOKEN), "the token leaked:\n{text}");
        assert!(
            !text.contains(query_secret),
            "the URL's query leaked:\n{text}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn nothing_a_runtime_echoes_leaks_v1_1() {
    nothing_leaks_over(Wire::V1_1).await;
}

#[tokio::test(flavor = "current_thread")]
async fn nothing_a_runtime_echoes_leaks_legacy() {
    nothing_leaks_over(Wire::Legacy).await;
}

/// A token provider's tokens (each connection asks for a fresh one) are
/// redacted everywhere the fixed token is: a runtime echoing the token it
/// was sent into a tool error's message and details, a close reason under
/// a call (the error, `ConnectionEvent::Disconnected`, the journal record,
/// the "connection lost" log) and a close reason on the hello.
#[tokio::test(flavor = "current_thread")]
async fn a_runtime_echoing_the_providers_token_does_not_leak_it() {
    let (logs, _guard) = capture();
    let provider = |prefix: &'static str| {
        let n = Arc::new(std::sync::atomic::AtomicU32::new(0));
        move || {
            let n = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Ok::<_, std::io::Error>(format!("{prefix}-{n}-4b7e0d")) }
        }
    };

    let url = leaky_runtime(Wire::V1_1, Leak::CloseOnHello).await;
    let err = Client::builder(&url)
        .token_provider(provider("hello-provided"))
        .dialect(Wire::V1_1)
        .connect_budget(Duration::from_millis(300))
        .connect()
        .await
        .unwrap_err();
    let mut shown = format!("{err} {err:?}\n");

    let url = leaky_runtime(Wire::V1_1, Leak::Serve).await;
    let client = Client::builder(&url)
        .token_provider(provider("call-provided"))
        .dialect(Wire::V1_1)
        .journal(MemoryJournal::new())
        .connect()
        .await
        .unwrap();
    let mut events = client.events();
    let failed = client.invoke_tool("fail", json!({})).await.unwrap_err();
    let Error::Tool(tool_error) = &failed else {
        panic!("{failed:?}");
    };
    assert!(tool_error.details.is_some(), "details kept, redacted");
    shown.push_str(&format!("{failed} {failed:?}\n"));
    let key = IdempotencyKey::new();
    let dropped = client
        .invoke_tool("drop", json!({}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(1500))
        .send()
        .await
        .unwrap_err();
    shown.push_str(&format!("{dropped} {dropped:?}\n"));
    let record = client.lookup(&key).await.unwrap().expect("journaled");
    shown.push_str(&format!("{record:?}\n"));
    let mut disconnects = 0;
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(50), events.next()).await
    {
        disconnects += usize::from(matches!(event, ConnectionEvent::Disconnected { .. }));
        shown.push_str(&format!("{event:?}\n"));
    }
    assert!(disconnects >= 1, "{shown}");
    client.close().await;

    let logs = logs.text();
    assert!(logs.contains("connection lost"), "tracing was captured");
    for text in [&shown, &logs] {
        assert!(text.contains("<redacted>"), "{text}");
        for prefix in ["hello-provided", "call-provided"] {
            assert!(!text.contains(prefix), "a provided token leaked:\n{text}");
        }
    }
}
