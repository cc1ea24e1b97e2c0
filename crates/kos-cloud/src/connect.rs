//! Why connecting to Keystone failed, in words that name the endpoint and the setting to check.
//!
//! The SDK reports every failure of Keystone's version discovery as "Service is not working",
//! whatever happened underneath (nothing listening, no such host, TLS spoken to a plain-HTTP
//! port, a certificate nobody trusts, a 503 from a busy cloud). When that is all it says, kos asks
//! the auth URL once itself, with the same trust settings, and reads the answer or the transport
//! error: that tells a wrong port from a busy cloud, and a busy cloud is worth waiting for.
//!
//! Everything shown passes through the session's redactor, and URLs lose any `user:password@`.

use std::time::{Duration, SystemTime};

use openstack_sdk::{AuthError, OpenStackError};

use crate::config::CloudProfile;
use crate::error::CloudError;
use crate::redact::Redactor;
use crate::request::{ServiceKind, error_chain};
use crate::retry::{self, RetryReason};

/// How long the diagnostic request may take when the profile sets no `api_timeout`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// A failed connection attempt: the error to report, and whether trying again may help.
#[derive(Debug)]
pub(crate) struct Failed {
    pub error: CloudError,
    pub retry: Option<(RetryReason, Option<Duration>)>,
}

/// `url` without a `user:password@` part (Keystone takes neither from the URL).
pub fn without_userinfo(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Ok(_) => url.to_owned(),
        // Not a URL: cut anything up to an '@' after the scheme, to be safe.
        Err(_) => match (url.find("://"), url.rfind('@')) {
            (Some(s), Some(a)) if a > s => format!("{}{}", &url[..s + 3], &url[a + 1..]),
            _ => url.to_owned(),
        },
    }
}

/// The password in `url`'s `user:password@` part as written and decoded (to redact it wherever
/// it turns up); empty when there is none.
pub(crate) fn url_password(url: &str) -> Vec<String> {
    let Some(p) = url::Url::parse(url)
        .ok()
        .and_then(|u| u.password().map(str::to_owned))
        .filter(|p| !p.is_empty())
    else {
        return Vec::new();
    };
    let decoded = url::form_urlencoded::parse(format!("p={p}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned());
    let mut all = vec![p];
    all.extend(decoded.filter(|d| d != &all[0]));
    all
}

/// A status Keystone answered with, as a retry decision (429 and 5xx: a busy or restarting cloud).
fn retry_of_status(status: u16, retry_after: Option<Duration>) -> Option<RetryReason> {
    match status {
        429 => Some(RetryReason::RateLimited),
        503 if retry_after.is_some() => Some(RetryReason::Overloaded),
        503 => Some(RetryReason::Unavailable),
        500 | 502 | 504 => Some(RetryReason::ServerError),
        _ => None,
    }
}

/// The HTTP status buried in an SDK error, when Keystone answered.
fn sdk_status(e: &OpenStackError) -> Option<u16> {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(a) = s.downcast_ref::<AuthError>() {
            match a {
                AuthError::Identity(i) => return u16::try_from(i.code).ok(),
                AuthError::UnknownAuth { code, .. } => return Some(*code),
                _ => {}
            }
        }
        if let Some(OpenStackError::Http { status }) = s.downcast_ref::<OpenStackError>() {
            return Some(status.as_u16());
        }
        if let Some(r) = s.downcast_ref::<reqwest::Error>()
            && let Some(st) = r.status()
        {
            return Some(st.as_u16());
        }
        src = s.source();
    }
    None
}

/// A transport error buried in an SDK error: `Some(true)` when it may have been sent (a reset or a
/// timeout, worth another try), `Some(false)` when it never left (refused, DNS, TLS).
fn sdk_transport(e: &OpenStackError) -> Option<bool> {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(r) = s.downcast_ref::<reqwest::Error>() {
            return Some(!r.is_connect());
        }
        src = s.source();
    }
    None
}

/// Why authenticating again failed, and whether another try may help (Keystone busy, a reset).
pub(crate) fn reauth_retry(e: &OpenStackError) -> Option<RetryReason> {
    match sdk_status(e) {
        Some(status) => retry_of_status(status, None),
        None if sdk_transport(e) == Some(true) => Some(RetryReason::Transport),
        None => None,
    }
}

/// Explains a failed [`connect`](crate::Session::connect).
pub(crate) async fn diagnose(p: &CloudProfile, redactor: &Redactor, e: &OpenStackError) -> Failed {
    let url = without_userinfo(&p.auth_url);
    let chain = redactor.redact(&error_chain(e));
    let at = format!("cloud '{}' at {url}", p.name);
    if let Some(status) = sdk_status(e) {
        let retry = retry_of_status(status, None);
        let error = if retry.is_some() {
            unreachable(format!(
                "Keystone of {at} answered {status} (busy or restarting): {chain}"
            ))
        } else {
            CloudError::Auth(format!("{at}: {chain}"))
        };
        return Failed {
            error,
            retry: retry.map(|r| (r, None)),
        };
    }
    match sdk_transport(e) {
        Some(true) => {
            return Failed {
                error: unreachable(format!(
                    "the connection to Keystone of {at} broke off: {chain}"
                )),
                retry: Some((RetryReason::Transport, None)),
            };
        }
        Some(false) => {}
        // An auth or configuration problem the SDK named itself.
        None if !chain.contains("discovery") => {
            return Failed {
                error: CloudError::Auth(format!("{at}: {chain}")),
                retry: None,
            };
        }
        None => {}
    }
    probe(p, redactor, &url).await
}

fn unreachable(detail: String) -> CloudError {
    CloudError::Transport {
        service: ServiceKind::Identity,
        operation: "auth.connect",
        detail,
    }
}

/// Asks `url` (the auth URL) once, with the profile's trust settings, and says what happened.
async fn probe(p: &CloudProfile, redactor: &Redactor, url: &str) -> Failed {
    let auth_url = p.source("auth_url");
    let fail = |detail: String| Failed {
        error: unreachable(redactor.redact(&detail)),
        retry: None,
    };
    let timeout = p.api_timeout.unwrap_or(PROBE_TIMEOUT);
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout);
    if !p.verify {
        builder = builder.danger_accept_invalid_certs(true);
    }
    if let Some(ca) = &p.cacert
        && let Ok(pem) = std::fs::read(ca)
        && let Ok(certs) = reqwest::Certificate::from_pem_bundle(&pem)
    {
        for c in certs {
            builder = builder.add_root_certificate(c);
        }
    }
    let client = match builder.build() {
        Ok(c) => c,
        Err(e) => {
            return fail(format!(
                "cannot set up a client for {url}: {}",
                error_chain(&e)
            ));
        }
    };
    let answer = client.get(url).send().await;
    let rsp = match answer {
        Ok(rsp) => rsp,
        Err(e) => return fail(transport_words(p, url, timeout, &e)),
    };
    let status = rsp.status().as_u16();
    let retry_after = rsp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry::parse_retry_after(v, SystemTime::now()));
    if let Some(reason) = retry_of_status(status, retry_after) {
        return Failed {
            error: unreachable(format!(
                "Keystone at {url} answered {status} (busy or restarting): try again later"
            )),
            retry: Some((reason, retry_after)),
        };
    }
    let detail = match status {
        200..=300 => format!(
            "{url} answered {status} but not as Keystone's v3 API does: check auth_url (from \
             {auth_url}); it is Keystone's URL, usually ending in /v3"
        ),
        404 => format!(
            "{url} answered 404 Not Found: check the path of auth_url (from {auth_url}); \
             Keystone's usually ends in /v3"
        ),
        _ => format!(
            "Keystone at {url} answered {status}: check auth_url (from {auth_url}) and the \
             cloud's status"
        ),
    };
    fail(detail)
}

/// What a transport error means for the user, naming the URL and the setting to check.
fn transport_words(p: &CloudProfile, url: &str, timeout: Duration, e: &reqwest::Error) -> String {
    let chain = error_chain(e);
    let lower = chain.to_ascii_lowercase();
    let auth_url = p.source("auth_url");
    let host = url::Url::parse(url)
        .ok()
        .map(|u| {
            let host = u.host_str().unwrap_or_default().to_owned();
            match u.port_or_known_default() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .unwrap_or_else(|| url.to_owned());
    let refused = {
        let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
        let mut found = false;
        while let Some(s) = src {
            if let Some(io) = s.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::ConnectionRefused
            {
                found = true;
            }
            src = s.source();
        }
        found || lower.contains("connection refused")
    };
    if refused {
        format!(
            "nothing listens at {host} (connection refused): check the host and port of auth_url \
             (from {auth_url}) and that Keystone is up"
        )
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        format!(
            "cannot resolve the host of {url} (DNS lookup failed): check the host name in auth_url \
             (from {auth_url}) and this machine's DNS"
        )
    } else if lower.contains("invalidcontenttype")
        || lower.contains("corrupt message")
        || lower.contains("wrong version number")
    {
        format!(
            "{host} does not speak TLS (the answer to the TLS handshake looks like plain HTTP): \
             use http:// in auth_url (from {auth_url}), or the cloud's TLS port"
        )
    } else if lower.contains("certificate") || lower.contains("unknownissuer") {
        let ca = match &p.cacert {
            Some(c) => format!("cacert ({}, from {})", c.display(), p.source("cacert")),
            None => "cacert".to_owned(),
        };
        format!(
            "the TLS certificate of {host} is not trusted ({chain}): set {ca} to the CA bundle \
             that signed it"
        )
    } else if e.is_timeout() {
        format!(
            "no answer from {url} within {:.1}s: check auth_url (from {auth_url}), a firewall or \
             proxy in between, or try again later",
            timeout.as_secs_f64()
        )
    } else {
        format!("cannot reach Keystone at {url} (auth_url from {auth_url}): {chain}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_dropped_from_urls() {
        assert_eq!(
            without_userinfo("https://bob:hunter2@keystone.example:5000/v3"),
            "https://keystone.example:5000/v3"
        );
        assert_eq!(
            without_userinfo("https://keystone.example:5000/v3"),
            "https://keystone.example:5000/v3"
        );
        assert_eq!(without_userinfo("nonsense://a:b@c d"), "nonsense://c d");
        assert_eq!(
            url_password("https://bob:hun%40ter2@k:5000/v3"),
            ["hun%40ter2", "hun@ter2"]
        );
        assert!(url_password("https://k:5000/v3").is_empty());
    }

    #[test]
    fn busy_keystone_answers_are_worth_another_try() {
        assert_eq!(retry_of_status(429, None), Some(RetryReason::RateLimited));
        assert_eq!(
            retry_of_status(503, Some(Duration::from_secs(1))),
            Some(RetryReason::Overloaded)
        );
        assert_eq!(retry_of_status(502, None), Some(RetryReason::ServerError));
        assert_eq!(retry_of_status(401, None), None);
        assert_eq!(retry_of_status(404, None), None);
    }
}
