//! An HTTP(S) proxy as the node's tools use it: curl and apt from the script's exported
//! `http_proxy`/`https_proxy`/`no_proxy`, containerd from its systemd drop-in's `Environment=`
//! lines. A request whose host `no_proxy` matches goes direct; any other goes to the proxy, and
//! reaches its target when the node reaches the proxy and the target's host is up (a proxy's own
//! egress is the point of it: on the simulated internet, a public host out of the nodes' reach is
//! still reached through a proxy they reach, and a host that is down fails through it as well, with
//! the proxy's answer: Squid's 503 for a name it cannot resolve or a host it cannot connect to).
//!
//! `no_proxy` as curl and Go's `httpproxy` read it: comma-separated; `*` matches everything; an
//! entry matches the host itself or, with or without a leading dot, any name under it; an IP or
//! CIDR entry matches addresses in it. Ports in entries are ignored (both tools ignore them for
//! names).

use std::net::IpAddr;

use ipnet::IpNet;

use crate::bootstrap::env::Env;
use crate::seam::{Host, ServerId};
use crate::vfs::Vfs;

/// What a request for a URL met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    Reached,
    /// The target, asked directly, did not answer.
    Unreachable,
    /// The request went to a proxy and failed there.
    Proxy(ProxyFailure),
}

/// How a request through a proxy failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyFailure {
    /// The proxy (its URL) did not answer.
    Unreachable(String),
    /// The proxy answered 503 for the target `url`, whose host is down.
    TargetDown { proxy: String, url: String },
}

/// A request for `url` from `id` through `proxy` (direct when `None` or bypassed).
pub fn reach(host: &dyn Host, id: &ServerId, url: &str, proxy: Option<&Proxy>) -> Reach {
    match proxy.and_then(|p| p.route(url)) {
        Some(p) if !host.internet_reaches(id, p) => {
            Reach::Proxy(ProxyFailure::Unreachable(p.to_owned()))
        }
        Some(_) if host.internet_serves(url) => Reach::Reached,
        Some(p) => Reach::Proxy(ProxyFailure::TargetDown {
            proxy: p.to_owned(),
            url: url.to_owned(),
        }),
        None if host.internet_reaches(id, url) => Reach::Reached,
        None => Reach::Unreachable,
    }
}

/// A tool's proxy settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proxy {
    http: Option<String>,
    https: Option<String>,
    no_proxy: Vec<String>,
}

/// The script's line that exports its environment's proxy to the tools it runs.
const SCRIPT_EXPORT: &str = "export https_proxy=$KOS_HTTPS_PROXY";

impl Proxy {
    /// curl's and apt's proxy in the script: its `KOS_*` variables, when the script exports them.
    pub fn of_script(env: &Env, script: &str) -> Option<Proxy> {
        if !script.lines().any(|l| l.trim().starts_with(SCRIPT_EXPORT)) {
            return None;
        }
        let get = |k: &str| env.get(k).ok().filter(|v| !v.is_empty()).map(str::to_owned);
        Proxy::of(
            get("KOS_HTTP_PROXY"),
            get("KOS_HTTPS_PROXY"),
            get("KOS_NO_PROXY").as_deref(),
        )
    }

    /// A service's proxy: the `Environment=` lines of its drop-ins
    /// (`/etc/systemd/system/<service>.service.d/*.conf`).
    pub fn of_service(vfs: &Vfs, service: &str) -> Option<Proxy> {
        let dir = format!("/etc/systemd/system/{service}.service.d");
        let mut vars: Vec<(String, String)> = Vec::new();
        for f in vfs.list(&dir).into_iter().filter(|f| f.ends_with(".conf")) {
            for line in vfs.text(f).unwrap_or_default().lines() {
                let Some(rest) = line.trim().strip_prefix("Environment=") else {
                    continue;
                };
                for kv in systemd_words(rest) {
                    if let Some((k, v)) = kv.split_once('=') {
                        vars.push((k.to_owned(), v.to_owned()));
                    }
                }
            }
        }
        // Go's httpproxy reads the upper-case names first.
        let get = |names: [&str; 2]| {
            names.iter().find_map(|n| {
                vars.iter()
                    .rev()
                    .find(|(k, v)| k == n && !v.is_empty())
                    .map(|(_, v)| v.clone())
            })
        };
        Proxy::of(
            get(["HTTP_PROXY", "http_proxy"]),
            get(["HTTPS_PROXY", "https_proxy"]),
            get(["NO_PROXY", "no_proxy"]).as_deref(),
        )
    }

    fn of(http: Option<String>, https: Option<String>, no_proxy: Option<&str>) -> Option<Proxy> {
        if http.is_none() && https.is_none() {
            return None;
        }
        Some(Proxy {
            http,
            https,
            no_proxy: no_proxy
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }

    /// The proxy a request for `url` goes through, `None` when it goes direct.
    pub fn route(&self, url: &str) -> Option<&str> {
        let proxy = if url.starts_with("https://") {
            self.https.as_deref()
        } else {
            self.http.as_deref()
        }?;
        let host = crate::internet::host_of(url).trim_matches(['[', ']']);
        (!self.bypassed(host)).then_some(proxy)
    }

    fn bypassed(&self, host: &str) -> bool {
        let ip: Option<IpAddr> = host.parse().ok();
        self.no_proxy.iter().any(|entry| {
            if entry == "*" {
                return true;
            }
            if let (Some(ip), Ok(net)) = (ip, entry.parse::<IpNet>()) {
                return net.contains(&ip);
            }
            if let (Some(ip), Ok(other)) = (ip, entry.parse::<IpAddr>()) {
                return ip == other;
            }
            let name = entry
                .split(':')
                .next()
                .unwrap_or_default()
                .trim_start_matches('.')
                .to_ascii_lowercase();
            let host = host.to_ascii_lowercase();
            !name.is_empty()
                && (host == name
                    || host
                        .strip_suffix(&name)
                        .is_some_and(|rest| rest.ends_with('.')))
        })
    }
}

/// The assignments of one `Environment=` value: space-separated, each optionally in double quotes
/// (systemd.exec(5); a quoted one may hold spaces).
fn systemd_words(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in value.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            ' ' | '\t' if !quoted => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            _ => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(word);
    }
    out
}

/// How each tool names a proxy it could not reach.
#[derive(Debug, Clone, Copy)]
pub enum Tool {
    Curl,
    Apt,
    Containerd,
}

impl ProxyFailure {
    /// The error `tool` reports for it.
    ///
    /// For a target that is down, the proxy's 503 as each tool shows it: an `https://` target is
    /// asked with CONNECT (curl's exit 56; Go's transport, containerd's, returns the status text
    /// alone; apt's https method names the proxy's answer), an `http://` one is forwarded (curl
    /// `-f`'s exit 22, apt's status line).
    pub fn said_by(&self, tool: Tool) -> String {
        match self {
            ProxyFailure::Unreachable(proxy) => unreachable(tool, proxy),
            ProxyFailure::TargetDown { url, .. } => {
                let tunnel = url.starts_with("https://");
                match (tool, tunnel) {
                    (Tool::Curl, true) => "curl: (56) CONNECT tunnel failed, response 503".into(),
                    (Tool::Curl, false) => {
                        "curl: (22) The requested URL returned error: 503".into()
                    }
                    (Tool::Apt, true) => {
                        "Invalid response from proxy: HTTP/1.1 503 Service Unavailable".into()
                    }
                    (Tool::Apt, false) => "503  Service Unavailable".into(),
                    (Tool::Containerd, _) => "Service Unavailable".into(),
                }
            }
        }
    }
}

/// The error `tool` reports for an unreachable `proxy`.
fn unreachable(tool: Tool, proxy: &str) -> String {
    let host = crate::internet::host_of(proxy);
    match tool {
        Tool::Curl => format!("curl: (5) Could not resolve proxy: {host}"),
        Tool::Apt => format!("Could not resolve '{host}'"),
        Tool::Containerd => {
            format!("proxyconnect tcp: dial tcp: lookup {host}: no such host")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(no_proxy: &str) -> Proxy {
        Proxy::of(
            Some("http://proxy.example:3128".into()),
            Some("http://proxy.example:3128".into()),
            Some(no_proxy),
        )
        .expect("a proxy")
    }

    #[test]
    fn no_proxy_matches_names_domains_and_ranges() {
        let p = proxy("mirror.example,.svc,10.0.0.0/16,192.168.1.5,localhost");
        assert_eq!(p.route("https://mirror.example/x"), None);
        assert_eq!(p.route("https://a.mirror.example:5000/v2/"), None);
        assert_eq!(
            p.route("https://notmirror.example/x"),
            Some("http://proxy.example:3128")
        );
        assert_eq!(p.route("https://kubernetes.default.svc/api"), None);
        assert_eq!(p.route("https://10.0.4.2:6443/readyz"), None);
        assert_eq!(p.route("http://192.168.1.5/"), None);
        assert_eq!(
            p.route("http://192.168.1.6/"),
            Some("http://proxy.example:3128")
        );
        assert_eq!(
            p.route("https://pkgs.k8s.io/core:/stable:/v1.36/deb/Release.key"),
            Some("http://proxy.example:3128")
        );
        assert_eq!(proxy("*").route("https://pkgs.k8s.io/"), None);
    }

    #[test]
    fn only_the_scheme_s_proxy_is_used() {
        let p = Proxy::of(Some("http://p:3128".into()), None, None).expect("a proxy");
        assert_eq!(p.route("http://archive.ubuntu.com/"), Some("http://p:3128"));
        assert_eq!(p.route("https://pkgs.k8s.io/"), None);
    }

    #[test]
    fn a_drop_in_s_environment_is_read() {
        let mut vfs = Vfs::default();
        vfs.write(
            "/etc/systemd/system/containerd.service.d/http-proxy.conf",
            b"[Service]\nEnvironment=\"HTTP_PROXY=http://proxy.example:3128\" \"HTTPS_PROXY=http://proxy.example:3128\" \"NO_PROXY=mirror.example,.svc\" \"no_proxy=mirror.example,.svc\"\n",
            0o600,
            "root:root",
            false,
        );
        let p = Proxy::of_service(&vfs, "containerd").expect("a proxy");
        assert_eq!(
            p.route("https://registry.k8s.io/v2/"),
            Some("http://proxy.example:3128")
        );
        assert_eq!(p.route("https://mirror.example:5000/v2/"), None);
        assert!(Proxy::of_service(&vfs, "kubelet").is_none());
    }
}
