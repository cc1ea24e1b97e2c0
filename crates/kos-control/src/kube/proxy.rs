//! The proxy to a cluster's API, from the environment as kubectl and the HTTP client kos used
//! before read it: `HTTPS_PROXY` (or `https_proxy`), skipped for hosts `NO_PROXY` (or `no_proxy`)
//! names. Loopback is never proxied (a proxy cannot reach this machine's loopback: a simulated
//! cloud's forwarder listens there).
//!
//! `NO_PROXY`: comma-separated; `*` matches everything; an entry matches the host itself or, with
//! or without a leading dot, any name under it; an IP or CIDR entry matches addresses in it.

use std::net::IpAddr;

use ipnet::IpNet;

/// The proxy for `https://host`, given the variables' values (`None` when direct).
pub fn for_host(host: &str, https_proxy: Option<&str>, no_proxy: Option<&str>) -> Option<String> {
    let proxy = https_proxy.map(str::trim).filter(|p| !p.is_empty())?;
    let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
    let ip: Option<IpAddr> = host.parse().ok();
    if ip.is_some_and(|ip| ip.is_loopback()) || host == "localhost" {
        return None;
    }
    let bypassed = no_proxy
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .any(|entry| {
            if entry.is_empty() {
                return false;
            }
            if entry == "*" {
                return true;
            }
            if let (Some(ip), Ok(net)) = (ip, entry.parse::<IpNet>()) {
                return net.contains(&ip);
            }
            if let (Some(ip), Ok(other)) = (ip, entry.parse::<IpAddr>()) {
                return ip == other;
            }
            let name = entry.trim_start_matches('.').to_ascii_lowercase();
            !name.is_empty()
                && (host == name
                    || host
                        .strip_suffix(&name)
                        .is_some_and(|rest| rest.ends_with('.')))
        });
    (!bypassed).then(|| {
        // A proxy given as host:port is an HTTP proxy, as curl and Go take it.
        if proxy.contains("://") {
            proxy.to_owned()
        } else {
            format!("http://{proxy}")
        }
    })
}

/// [`for_host`] with this process's environment (the upper-case names first, as Go reads them).
pub fn from_env(host: &str) -> Option<String> {
    let var = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
    };
    for_host(
        host,
        var(["HTTPS_PROXY", "https_proxy"]).as_deref(),
        var(["NO_PROXY", "no_proxy"]).as_deref(),
    )
}

/// `config` without a proxy where kubectl (Go's `ProxyFromEnvironment`) would go direct: to a
/// loopback API server, or one `NO_PROXY` names. kube-rs applies `HTTPS_PROXY` to every API server
/// (it matches `NO_PROXY` against the proxy's own URL), so a management cluster on this machine (a
/// kind cluster, a simulated one) would be sent to the proxy, which cannot reach it.
pub fn direct_where_kubectl_is(config: &mut kube::Config) {
    let host = config.cluster_url.host().unwrap_or_default();
    let no_proxy = ["NO_PROXY", "no_proxy"]
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()));
    if for_host(host, Some("http://proxy"), no_proxy.as_deref()).is_none() {
        config.proxy_url = None;
    }
}

#[cfg(test)]
mod tests {
    use super::for_host;

    const P: Option<&str> = Some("http://proxy.example:3128");

    /// kube-rs took `HTTPS_PROXY` for a loopback management cluster too (`kos export` with a
    /// simulated cloud's proxy exported failed with "tunnel error: unsuccessful").
    #[test]
    fn a_loopback_api_server_is_never_proxied() {
        for url in [
            "https://127.0.0.1:6443",
            "https://localhost:6443",
            "https://[::1]:6443",
        ] {
            let mut config = kube::Config::new(url.parse().expect("url"));
            config.proxy_url = Some("http://proxy.example:3128".parse().expect("proxy"));
            super::direct_where_kubectl_is(&mut config);
            assert_eq!(config.proxy_url, None, "{url}");
        }
    }

    #[test]
    fn no_proxy_and_loopback_go_direct() {
        let no = Some("corp.example,10.0.0.0/8,192.0.2.7");
        assert_eq!(for_host("api.corp.example", P, no), None);
        assert_eq!(for_host("corp.example", P, no), None);
        assert_eq!(for_host("10.4.0.2", P, no), None);
        assert_eq!(for_host("192.0.2.7", P, no), None);
        assert_eq!(for_host("127.0.0.1", P, None), None);
        assert_eq!(for_host("::1", P, None), None);
        assert_eq!(for_host("203.0.113.9", P, Some("*")), None);
        assert_eq!(for_host("203.0.113.9", None, None), None);
    }

    #[test]
    fn other_hosts_go_through_the_proxy() {
        let no = Some("corp.example");
        assert_eq!(
            for_host("notcorp.example", P, no).as_deref(),
            Some("http://proxy.example:3128")
        );
        assert_eq!(
            for_host("203.0.113.9", Some("proxy.example:3128"), no).as_deref(),
            Some("http://proxy.example:3128")
        );
    }
}
