//! Keeps secrets out of every message kos-cloud produces. Services echo request fragments back in
//! error bodies and transport errors can carry headers, so every [`CloudError`](crate::CloudError)
//! message passes through a [`Redactor`] built from the session's own secrets.

use std::sync::{Arc, LazyLock, RwLock};

use regex::Regex;
use secrecy::{ExposeSecret, SecretString};

const MASK: &str = "***";
/// Old tokens stay redacted after a re-auth, but the list must not grow without bound.
const MAX_TOKENS: usize = 8;

/// `X-Auth-Token: …`, `"x-subject-token": "…"` and JSON `"password"`/`"secret"`/`"token"` fields,
/// whatever the secret's value: a token we never saw (another session's) is still a token.
static PATTERNS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (
            r#"(?i)(x-(?:auth|subject)-token"?\s*[:=]\s*"?)[^\s",}]+"#,
            "${1}***",
        ),
        (
            r#"(?i)("(?:password|secret|application_credential_secret|token|id_token|access_token)"\s*:\s*")(?:[^"\\]|\\.)*""#,
            "${1}***\"",
        ),
        // `password=…`, `secret: …` in plain text (query strings, log lines echoed in a body).
        (
            r#"(?i)\b((?:password|passwd|secret)\s*[=:]\s*)([^\s"',;&}]+)"#,
            "${1}***",
        ),
    ]
    .into_iter()
    .filter_map(|(re, rep)| Regex::new(re).ok().map(|r| (r, rep)))
    .collect()
});

/// Replaces known secrets (password, application-credential secret, tokens) with `***`.
/// Cheap to clone; shared by a session and its clones so a re-auth's new token is known to all.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Arc<RwLock<Secrets>>,
}

#[derive(Default)]
struct Secrets {
    fixed: Vec<SecretString>,
    tokens: Vec<SecretString>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor(..)")
    }
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = SecretString>) -> Self {
        let fixed = secrets
            .into_iter()
            .filter(|s| !s.expose_secret().is_empty())
            .collect();
        Redactor {
            secrets: Arc::new(RwLock::new(Secrets {
                fixed,
                tokens: Vec::new(),
            })),
        }
    }

    /// Adds a secret learned later (e.g. an application credential created through the session).
    pub fn add(&self, secret: SecretString) {
        if secret.expose_secret().is_empty() {
            return;
        }
        let mut s = self.secrets.write().unwrap_or_else(|p| p.into_inner());
        if !s
            .fixed
            .iter()
            .any(|f| f.expose_secret() == secret.expose_secret())
        {
            s.fixed.push(secret);
        }
    }

    /// Records the session's current token (called after connect and after a re-auth).
    pub fn set_token(&self, token: SecretString) {
        if token.expose_secret().is_empty() {
            return;
        }
        let mut s = self.secrets.write().unwrap_or_else(|p| p.into_inner());
        if s.tokens.last().map(|t| t.expose_secret()) == Some(token.expose_secret()) {
            return;
        }
        s.tokens
            .retain(|t| t.expose_secret() != token.expose_secret());
        if s.tokens.len() >= MAX_TOKENS {
            s.tokens.remove(0);
        }
        s.tokens.push(token);
    }

    /// The text with every known secret and every token-looking header value masked.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        {
            let s = self.secrets.read().unwrap_or_else(|p| p.into_inner());
            // Longest first, so a secret containing another is masked whole.
            let mut all: Vec<&str> = s
                .fixed
                .iter()
                .chain(&s.tokens)
                .map(|x| x.expose_secret())
                .collect();
            all.sort_by_key(|x| std::cmp::Reverse(x.len()));
            for secret in all {
                if out.contains(secret) {
                    out = out.replace(secret, MASK);
                }
            }
        }
        for (re, rep) in PATTERNS.iter() {
            if let std::borrow::Cow::Owned(s) = re.replace_all(&out, *rep) {
                out = s;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> SecretString {
        SecretString::from(s.to_owned())
    }

    #[test]
    fn masks_known_secrets() {
        let r = Redactor::new([secret("hunter2-pw"), secret("")]);
        r.set_token(secret("gAAAAtoken1"));
        let got = r.redact("login hunter2-pw failed with gAAAAtoken1 twice: hunter2-pw");
        assert_eq!(got, "login *** failed with *** twice: ***");
    }

    #[test]
    fn keeps_old_tokens_after_reauth() {
        let r = Redactor::default();
        r.set_token(secret("tok-one-aaaa"));
        r.set_token(secret("tok-two-bbbb"));
        assert_eq!(r.redact("tok-one-aaaa tok-two-bbbb"), "*** ***");
        r.add(secret("app-cred-secret"));
        assert_eq!(r.redact("s=app-cred-secret"), "s=***");
    }

    #[test]
    fn masks_header_and_json_fields() {
        let r = Redactor::default();
        assert_eq!(
            r.redact("sent X-Auth-Token: abc123def and x-subject-token=zzz"),
            "sent X-Auth-Token: *** and x-subject-token=***"
        );
        assert_eq!(
            r.redact(r#"{"x-auth-token": "abc", "user": {"password": "p\"w"}, "secret":"s3"}"#),
            r#"{"x-auth-token": "***", "user": {"password": "***"}, "secret":"***"}"#
        );
    }

    #[test]
    fn masks_plain_text_assignments() {
        let r = Redactor::default();
        assert_eq!(
            r.redact("db error for password=hunter2 and secret: abc, user=bob"),
            "db error for password=*** and secret: ***, user=bob"
        );
    }

    #[test]
    fn longest_secret_first() {
        let r = Redactor::new([secret("abc"), secret("abcdef")]);
        assert_eq!(r.redact("abcdef abc"), "*** ***");
    }
}
