//! TCP to the runtime: the host's name resolved, then each address tried in
//! turn. A name the resolver says does not exist is definitive before the
//! client ever had a session (a mistyped host fails at once, naming the
//! host), and transient after one ([`on_reconnect`]: a name that resolved
//! and now does not is a DNS blip during a failover, and failing every
//! call in flight on it would be wrong); a resolver that could not answer
//! this time (no DNS server reachable) is transient, as is any failure to
//! connect.

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpStream;

use super::link_io::DialFailure;
use crate::error::{Error, ErrorSource};

/// Resolves `host` and connects to the first address that answers.
pub(super) async fn tcp(host: &str, port: u16, url: &str) -> Result<TcpStream, DialFailure> {
    let addresses = resolve(host, port, url).await?;
    let mut last = None;
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(tcp) => return Ok(tcp),
            Err(e) => last = Some((address, e)),
        }
    }
    Err(match last {
        Some((address, e)) => failure(
            url,
            format!("could not connect to {host} ({address}): {e}"),
            true,
            Some(e),
        ),
        None => failure(url, format!("{host} resolved to no address"), true, None),
    })
}

/// The addresses of `host` (an IP literal is its own).
async fn resolve(host: &str, port: u16, url: &str) -> Result<Vec<SocketAddr>, DialFailure> {
    #[cfg(test)]
    let found = match test_resolver::answer(host) {
        Some(answer) => answer,
        None => tokio::net::lookup_host((host, port))
            .await
            .map(|a| a.collect()),
    };
    #[cfg(not(test))]
    let found = tokio::net::lookup_host((host, port))
        .await
        .map(|a| a.collect());
    match found {
        Ok(found) => Ok(found),
        Err(e) if no_such_host(&e) => Err(failure(
            url,
            format!("the host {host} does not exist (the resolver: {e})"),
            false,
            Some(e),
        )),
        Err(e) => Err(failure(
            url,
            format!("could not resolve the host {host}: {e}"),
            true,
            Some(e),
        )),
    }
}

/// A failed dial of a client that had a session before: a host the
/// resolver now says does not exist is retried like any transient failure
/// (within the call's budget and deadline; the error keeps naming the
/// host). Other definitive failures stay definitive.
pub(super) fn on_reconnect(mut failure: DialFailure) -> DialFailure {
    if let Error::Connect {
        retryable,
        source: Some(source),
        ..
    } = &mut failure.error
    {
        let io = source.downcast_ref::<io::Error>();
        if !*retryable && io.is_some_and(no_such_host) {
            *retryable = true;
            failure.transient = true;
        }
    }
    failure
}

/// Names resolved by the tests, which switch a name from resolving to
/// not existing while a client runs.
#[cfg(test)]
pub(crate) mod test_resolver {
    use std::net::SocketAddr;
    use std::sync::Mutex;

    static NAMES: Mutex<Vec<(String, Option<SocketAddr>)>> = Mutex::new(Vec::new());

    /// From now on `host` resolves to `address`, or (`None`) does not exist.
    pub(crate) fn set(host: &str, address: Option<SocketAddr>) {
        let mut names = crate::sync::lock(&NAMES);
        names.retain(|(name, _)| name != host);
        names.push((host.to_owned(), address));
    }

    /// The answer for `host`, if the tests set one: the resolver's own
    /// words for a name that does not exist.
    pub(super) fn answer(host: &str) -> Option<std::io::Result<Vec<SocketAddr>>> {
        let names = crate::sync::lock(&NAMES);
        let (_, address) = names.iter().find(|(name, _)| name == host)?;
        Some(match address {
            Some(address) => Ok(vec![*address]),
            None => Err(std::io::Error::other(
                "failed to lookup address information: Name or service not known",
            )),
        })
    }
}

/// Whether a failed lookup says the name does not exist, as opposed to a
/// resolver that could not answer. The standard library reports
/// `getaddrinfo`'s codes only as `gai_strerror` text (a Rust program runs
/// in the C locale, so the text is the English one): `EAI_NONAME` and
/// `EAI_NODATA` in glibc, musl and the BSDs, and Windows'
/// `WSAHOST_NOT_FOUND`. `EAI_AGAIN` ("Temporary failure in name
/// resolution") and `EAI_FAIL` stay transient.
fn no_such_host(e: &io::Error) -> bool {
    /// Windows' `WSAHOST_NOT_FOUND` and `WSANO_DATA`.
    const WINDOWS_NOT_FOUND: [i32; 2] = [11001, 11004];
    const NOT_FOUND: [&str; 6] = [
        "name or service not known",
        "no address associated with hostname",
        "nodename nor servname provided",
        "name does not resolve",
        "name has no usable address",
        "no such host is known",
    ];
    if cfg!(windows)
        && e.raw_os_error()
            .is_some_and(|c| WINDOWS_NOT_FOUND.contains(&c))
    {
        return true;
    }
    let text = e.to_string().to_ascii_lowercase();
    NOT_FOUND.iter().any(|t| text.contains(t))
}

/// A failed dial (directly or through a proxy), with the I/O error that
/// caused it when there is one.
pub(super) fn failure(
    url: &str,
    message: String,
    transient: bool,
    cause: Option<io::Error>,
) -> DialFailure {
    DialFailure {
        error: Error::Connect {
            url: url.to_owned(),
            message,
            retryable: transient,
            source: cause.map(ErrorSource::new),
        },
        transient,
        floor: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup_error(detail: &str) -> io::Error {
        io::Error::other(format!("failed to lookup address information: {detail}"))
    }

    #[test]
    fn a_name_that_does_not_exist_is_told_from_a_resolver_that_did_not_answer() {
        for detail in [
            "Name or service not known",
            "No address associated with hostname",
            "nodename nor servname provided, or not known",
            "Name does not resolve",
        ] {
            assert!(no_such_host(&lookup_error(detail)), "{detail}");
        }
        for detail in [
            "Temporary failure in name resolution",
            "Non-recoverable failure in name resolution",
            "System error",
        ] {
            assert!(!no_such_host(&lookup_error(detail)), "{detail}");
        }
        assert!(!no_such_host(&io::Error::from(
            io::ErrorKind::ConnectionRefused
        )));
    }

    #[tokio::test]
    async fn a_host_that_does_not_exist_is_definitive_and_named() {
        let url = "ws://no-such-host.invalid/arcp";
        let failure = tcp("no-such-host.invalid", 80, url).await.unwrap_err();
        assert!(!failure.transient);
        assert!(
            failure.error.to_string().contains("no-such-host.invalid"),
            "{}",
            failure.error
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_transient() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let failure = tcp("127.0.0.1", port, "ws://127.0.0.1/").await.unwrap_err();
        assert!(failure.transient, "{}", failure.error);
    }
}

#[cfg(test)]
#[path = "dial_reconnect_tests.rs"]
mod reconnect_tests;
