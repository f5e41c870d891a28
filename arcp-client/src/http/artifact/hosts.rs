//! Which hosts an artifact fetch may reach. A runtime chooses artifact URIs
//! (and the servers behind them choose redirects), so by default the
//! fetcher refuses link-local addresses, where cloud metadata services
//! answer with the machine's credentials: 169.254.0.0/16 and fe80::/10
//! (IPv4 also as an IPv4-mapped IPv6 address), and the AWS IPv6 metadata
//! address fd00:ec2::254. A literal address in a URI is checked before the
//! request; a name is checked on every address it resolves to, by the
//! fetcher's own resolver, so the connection goes only to an address that
//! was checked (no second lookup to rebind).

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// The AWS instance metadata service's IPv6 address.
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// Whether `ip` is link-local or a cloud metadata address.
pub(super) fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4.is_link_local();
            }
            (v6.segments()[0] & 0xffc0) == 0xfe80 || v6 == AWS_METADATA_V6
        }
    }
}

/// The literal address of `url`'s host, when it has one that is refused.
pub(super) fn refused_literal(url: &Url) -> Option<IpAddr> {
    // The parser has already normalised a literal (decimal, hexadecimal,
    // short IPv4 forms); an IPv6 literal keeps its brackets.
    let host = url.host_str()?;
    let ip: IpAddr = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .parse()
        .ok()?;
    is_link_local(ip).then_some(ip)
}

/// A name that resolved only to refused addresses.
#[derive(Debug)]
pub(super) struct LinkLocalRefused {
    pub(super) host: String,
}

impl fmt::Display for LinkLocalRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", refusal(&self.host))
    }
}

impl std::error::Error for LinkLocalRefused {}

/// The words of a refusal, naming the knob that allows it.
pub(super) fn refusal(host: &str) -> String {
    format!(
        "{host} is a link-local or cloud metadata address, refused by default \
         (ArtifactFetcherBuilder::allow_link_local or \
         ClientBuilder::allow_link_local_artifacts allows it)"
    )
}

/// The system resolver with refused addresses taken out; a name left with
/// none fails with [`LinkLocalRefused`].
#[derive(Debug, Clone, Copy)]
pub(super) struct CheckedResolver;

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept = keep_allowed(found);
            if kept.is_empty() {
                return Err(Box::new(LinkLocalRefused { host }) as _);
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// The addresses that are not refused (an empty list stays empty).
fn keep_allowed(found: Vec<SocketAddr>) -> Vec<SocketAddr> {
    found
        .into_iter()
        .filter(|a| !is_link_local(a.ip()))
        .collect()
}

/// Whether `e`'s chain holds a [`LinkLocalRefused`].
pub(super) fn link_local_refusal<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a LinkLocalRefused> {
    let mut next = Some(e);
    while let Some(cause) = next {
        if let Some(refused) = cause.downcast_ref::<LinkLocalRefused>() {
            return Some(refused);
        }
        next = cause.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_and_metadata_addresses_are_refused() {
        for refused in [
            "169.254.169.254",
            "169.254.0.1",
            "fe80::1",
            "febf::1",
            "::ffff:169.254.169.254",
            "fd00:ec2::254",
        ] {
            assert!(is_link_local(refused.parse().unwrap()), "{refused}");
        }
        for allowed in [
            "127.0.0.1",
            "10.0.0.1",
            "169.253.255.255",
            "169.255.0.1",
            "::1",
            "fec0::1",
            "fd00:ec2::253",
            "2001:db8::1",
        ] {
            assert!(!is_link_local(allowed.parse().unwrap()), "{allowed}");
        }
    }

    #[test]
    fn literal_hosts_are_checked_in_every_spelling() {
        let literal = |u: &str| refused_literal(&Url::parse(u).unwrap());
        assert!(literal("http://169.254.169.254/latest").is_some());
        // The URL parser reads decimal and hexadecimal IPv4 too.
        assert!(literal("http://2852039166/").is_some());
        assert!(literal("http://0xa9fea9fe/").is_some());
        assert!(literal("http://[fe80::1]:8080/").is_some());
        assert!(literal("http://[::ffff:a9fe:a9fe]/").is_some());
        assert!(literal("http://127.0.0.1/").is_none());
        assert!(literal("http://metadata.example/").is_none());
    }

    #[test]
    fn a_name_keeps_only_its_allowed_addresses() {
        let a = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let kept = keep_allowed(vec![a("169.254.169.254:0"), a("10.1.2.3:0")]);
        assert_eq!(kept, vec![a("10.1.2.3:0")]);
        assert!(keep_allowed(vec![a("[fe80::1]:0")]).is_empty());
    }
}
