//! `spec.mirrors` and `spec.proxy`: where the nodes of an air-gapped or proxied cloud fetch what they
//! would fetch from the internet. Read as strictly as the rest: a URL kos cannot put into containerd's
//! `hosts.toml`, an apt source or a systemd unit is refused here, before anything is created.

use crate::diagnostics::{Code, Diagnostic};
use crate::spec::{HttpUrl, Mirrors, Proxy};
use crate::tree::Value;

use super::read::{Cx, Field, Obj, key_text, list, string};

/// The public registries kos's nodes pull from: kubeadm's and the cloud provider's images
/// (registry.k8s.io), the CNIs' (docker.io, quay.io, ghcr.io).
const KNOWN_REGISTRIES: &[&str] = &["registry.k8s.io", "docker.io", "quay.io", "ghcr.io"];

fn url(cx: &mut Cx<'_>, f: &Field<'_>, what: &str, credentials: bool) -> Option<HttpUrl> {
    let s = string(cx, f)?;
    let u = f.check(
        cx,
        HttpUrl::parse(s.value.trim()),
        Code::InvalidValue,
        "not an http(s) URL",
        format!("give {what} as `https://host[:port][/path]`"),
        |e| format!("`{}` {e}", without_userinfo(&s.value)),
    )?;
    if u.has_userinfo() && !credentials {
        return f.invalid(
            cx,
            Code::InvalidValue,
            format!("`{}` carries credentials", u.redacted()),
            "credentials in the URL",
            format!(
                "{what} is read without credentials: allow the nodes' subnet on the mirror instead"
            ),
        );
    }
    Some(u)
}

/// A URL that did not parse, with what may be its credentials (`user:password@` after the
/// scheme, before the first `/`) masked as a parsed one's are ([`HttpUrl::redacted`]): the
/// message goes to logs, CI output and a Cluster's status and Events.
fn without_userinfo(s: &str) -> String {
    let start = s.find("://").map_or(0, |i| i + 3);
    match crate::spec::userinfo_end(s, start) {
        Some(at) => format!("{}***{}", &s[..start], &s[at..]),
        None => s.to_owned(),
    }
}

/// A registry mirror: `scheme://host[:port]`; containerd appends `/v2/…` itself.
fn registry_mirror(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<HttpUrl> {
    let u = url(cx, f, "a registry mirror", false)?;
    if !matches!(u.path(), "" | "/") {
        return f.invalid(
            cx,
            Code::InvalidValue,
            format!("the registry mirror `{}` has a path", u.as_str()),
            "path",
            "a registry mirror is `https://host[:port]`: it serves the public registry's repositories under \
             the same names (`/v2/<name>/…`)",
        );
    }
    Some(u)
}

fn registries(
    cx: &mut Cx<'_>,
    f: &Field<'_>,
) -> Option<std::collections::BTreeMap<String, HttpUrl>> {
    let Value::Map(entries) = &f.node.value else {
        return f.wrong_type(cx, "a mapping of registry hosts to mirror URLs");
    };
    let mut out = Some(std::collections::BTreeMap::new());
    for (k, v) in entries {
        let host = key_text(cx, k);
        let path = format!("{}.{host}", f.path);
        let host_ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'))
            && !host.contains("://");
        if !host_ok {
            cx.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    &path,
                    format!("`{host}` is not a registry host"),
                )
                .label(k.span, "not a host")
                .help(format!(
                    "name the public registry as images name it, e.g. {}",
                    KNOWN_REGISTRIES.join(", ")
                )),
            );
            out = None;
            continue;
        }
        let field = Field {
            path,
            node: v,
            at: k.span,
        };
        match (registry_mirror(cx, &field), &mut out) {
            (Some(u), Some(map)) => {
                map.insert(host, u);
            }
            _ => out = None,
        }
    }
    out
}

fn ca_bundle(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<String> {
    let s = string(cx, f)?;
    if !s.value.contains("-----BEGIN CERTIFICATE-----") || s.value.contains("PRIVATE KEY") {
        return f.invalid(
            cx,
            Code::InvalidValue,
            "not a PEM certificate bundle",
            "not PEM certificates",
            "paste the mirror's CA certificates (`-----BEGIN CERTIFICATE-----` …) as a literal block (`caBundle: |`)",
        );
    }
    Some(s.value)
}

pub(super) fn mirrors(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Mirrors> {
    let m = Obj::new(cx, f, &["registries", "caBundle", "packages", "manifests"])?;
    let registries = m.or(cx, "registries", Default::default(), registries);
    let ca_bundle = m.opt(cx, "caBundle", ca_bundle);
    let packages = m.opt(cx, "packages", |cx, f| {
        let p = Obj::new(cx, f, &["kubernetes", "os", "osSecurity"])?;
        let kubernetes = p.opt(cx, "kubernetes", |cx, f| {
            url(cx, f, "the Kubernetes package mirror", false)
        });
        let os = p.opt(cx, "os", |cx, f| url(cx, f, "the OS package mirror", false));
        let security = p.opt(cx, "osSecurity", |cx, f| {
            url(cx, f, "the OS security package mirror", false)
        });
        Some((kubernetes?, os?, security?))
    });
    let manifests = m.opt(cx, "manifests", |cx, f| {
        url(cx, f, "the manifest mirror", false)
    });
    let (kubernetes_packages, os_packages, os_security_packages) =
        packages?.unwrap_or((None, None, None));
    Some(Mirrors {
        registries: registries?,
        ca_bundle: ca_bundle?,
        kubernetes_packages,
        os_packages,
        os_security_packages,
        manifests: manifests?,
    })
}

/// A `noProxy` entry: a host, `.domain`, `*`-free, or a CIDR / address.
fn no_proxy_entry(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<String> {
    let s = string(cx, f)?;
    let v = s.value.trim();
    let ok = v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'/' | b'[' | b']'));
    if !ok {
        return f.invalid(
            cx,
            Code::InvalidValue,
            format!("`{v}` is not a host, domain or CIDR"),
            "not a host, domain or CIDR",
            "list hosts (`mirror.example`), domains (`.example.com`) or CIDRs (`10.0.0.0/8`), one per item",
        );
    }
    Some(v.to_owned())
}

pub(super) fn proxy(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Proxy> {
    let m = Obj::new(cx, f, &["http", "https", "noProxy"])?;
    let http = m.opt(cx, "http", |cx, f| url(cx, f, "the proxy", true));
    let https = m.opt(cx, "https", |cx, f| url(cx, f, "the proxy", true));
    let no_proxy = m.or(cx, "noProxy", Vec::new(), |cx, f| {
        list(cx, f, no_proxy_entry)
    });
    let (http, https, no_proxy) = (http?, https?, no_proxy?);
    if http.is_none() && https.is_none() {
        cx.push(
            Diagnostic::error(Code::MissingField, m.path(), "a proxy needs `http` or `https`")
                .label(m.at(), "no proxy URL")
                .help("give `https: http://proxy.example:3128` (and `http:` for plain-HTTP downloads), or remove `proxy`"),
        );
        return None;
    }
    Some(Proxy {
        http,
        https,
        no_proxy,
    })
}

/// Mirrors without a proxy for what they leave out: the nodes still fetch that from the internet,
/// which a cloud that needs mirrors usually cannot reach. A warning (a cloud may reach some public
/// hosts), naming what is left out.
pub(super) fn check_unmirrored(cx: &mut Cx<'_>, m: &Obj<'_>, mirrors: &Mirrors, proxy: bool) {
    if mirrors.is_empty() || proxy {
        return;
    }
    let mut left: Vec<String> = KNOWN_REGISTRIES
        .iter()
        .filter(|r| !mirrors.registries.contains_key(**r))
        .map(|r| format!("{r}'s images"))
        .collect();
    if mirrors.kubernetes_packages.is_none() {
        left.push("the Kubernetes packages (pkgs.k8s.io)".into());
    }
    if mirrors.os_packages.is_none() {
        left.push("the OS packages (the image's apt sources)".into());
    }
    if mirrors.manifests.is_none() {
        left.push("the CNI manifest (raw.githubusercontent.com)".into());
    }
    if left.is_empty() {
        return;
    }
    let span = m.key_span(cx, "mirrors").unwrap_or(m.at());
    cx.push(
        Diagnostic::warning(
            Code::Risky,
            &format!("{}.mirrors", m.path()),
            format!("not mirrored, and no proxy: the nodes fetch {} from the internet", left.join(", ")),
        )
        .label(span, "partly mirrored")
        .help("mirror them too (`kos artefacts -f <spec>` lists everything), or give `proxy` for the rest"),
    );
}

#[cfg(test)]
mod tests {
    use super::without_userinfo;

    /// What may be credentials goes; an `@` in the path, or none, leaves the URL as it is.
    #[test]
    fn a_malformed_urls_credentials_are_masked() {
        for (raw, shown) in [
            (
                "http://kos:pw@proxy.example:99999",
                "http://***@proxy.example:99999",
            ),
            ("http://kos:p@ss@proxy.example", "http://***@proxy.example"),
            ("kos:pw@proxy.example:3128", "***@proxy.example:3128"),
            ("https://mirror.example/a@b", "https://mirror.example/a@b"),
            ("https://mirror.example:0", "https://mirror.example:0"),
        ] {
            assert_eq!(without_userinfo(raw), shown, "{raw}");
        }
    }
}
