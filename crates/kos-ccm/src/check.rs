//! `kos-ccm check-config`: parse, check and print the effective configuration, secrets
//! redacted, so a cloud.conf can be verified before the CCM runs with it.

use std::fmt::Write as _;
use std::path::Path;

use kos_cloud::{AppCredentialRef, Env, IdOrName, ProfileAuth};

use crate::config::{CloudConfig, ConfigError, EffectiveSection};

/// How the effective configuration is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Yaml,
}

/// What `check-config` prints and whether the file is usable.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: String,
    pub ok: bool,
}

/// Checks `path`; `env` is where clouds.yaml is looked for when `use-clouds` is on.
pub fn check_config(path: &Path, format: Format, env: &Env) -> Outcome {
    let mut out = Outcome::default();
    let loaded = match CloudConfig::load(path) {
        Ok(l) => l,
        Err(e) => {
            if let ConfigError::Invalid { warnings, .. } = &e {
                for w in warnings {
                    let _ = writeln!(out.stderr, "warning: {w}");
                }
            }
            for line in e.to_string().lines() {
                let _ = writeln!(out.stderr, "error: {line}");
            }
            return out;
        }
    };
    for w in &loaded.warnings {
        let _ = writeln!(out.stderr, "warning: {w}");
    }
    let cfg = &loaded.config;
    out.stdout = match format {
        Format::Table => table(&cfg.effective()),
        Format::Yaml => yaml(&cfg.effective()),
    };
    match cfg.profile(env) {
        Ok(p) => {
            // The TLS stack would take a file that is not a certificate without a word and fail
            // later, naming neither.
            if let Some(ca) = &p.cacert
                && let Err(why) = kos_cloud::config::check_ca_bundle(ca)
            {
                let _ = writeln!(
                    out.stderr,
                    "error: {}: [Global] ca-file: {} {why}: point it at the PEM file of the CA that \
                     signed Keystone's certificate",
                    path.display(),
                    ca.display()
                );
                return out;
            }
            let summary = describe(&p.auth);
            match format {
                Format::Table => {
                    let _ = writeln!(out.stdout, "\nauthentication: {summary}");
                }
                Format::Yaml => {
                    let _ = writeln!(out.stdout, "authentication: {}", quote(&summary));
                }
            }
            out.ok = true;
        }
        Err(e) => {
            for line in e.to_string().lines() {
                let _ = writeln!(out.stderr, "error: {line}");
            }
        }
    }
    out
}

fn id_or_name(v: &IdOrName) -> String {
    match v {
        IdOrName::Id(i) => format!("id {i}"),
        IdOrName::Name(n) => format!("{n:?}"),
    }
}

/// One line on who authenticates, without the secret.
fn describe(auth: &ProfileAuth) -> String {
    match auth {
        ProfileAuth::Password {
            user,
            user_domain,
            project,
            ..
        } => {
            let mut s = format!("password of user {}", id_or_name(user));
            if let Some(d) = user_domain {
                s += &format!(" in domain {}", id_or_name(d));
            }
            match project {
                Some(p) => s += &format!(", project {}", id_or_name(p)),
                None => s += ", no project (the token is not project-scoped)",
            }
            s
        }
        ProfileAuth::ApplicationCredential { credential, .. } => match credential {
            AppCredentialRef::Id(id) => format!("application credential id {id}"),
            AppCredentialRef::Name { name, user, .. } => format!(
                "application credential {name:?} of user {}",
                id_or_name(user)
            ),
        },
    }
}

fn origin(line: Option<u32>) -> String {
    line.map_or_else(|| "default".to_owned(), |l| format!("line {l}"))
}

fn table(sections: &[EffectiveSection]) -> String {
    let key_w = sections
        .iter()
        .flat_map(|s| s.rows.iter().map(|r| r.key.len()))
        .max()
        .unwrap_or(0);
    let val_w = sections
        .iter()
        .flat_map(|s| {
            s.rows
                .iter()
                .map(|r| r.value.as_deref().unwrap_or("-").chars().count())
        })
        .max()
        .unwrap_or(0)
        .min(60);
    let mut out = String::new();
    for (i, s) in sections.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "{}", s.label);
        for r in &s.rows {
            let v = r.value.as_deref().unwrap_or("-");
            let _ = writeln!(out, "  {:key_w$}  {v:val_w$}  {}", r.key, origin(r.line));
        }
    }
    out
}

/// A YAML (and JSON) double-quoted scalar.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn yaml(sections: &[EffectiveSection]) -> String {
    let mut out = String::new();
    for s in sections {
        let name = s.label.trim_start_matches('[').trim_end_matches(']');
        let _ = writeln!(out, "{}:", quote(name));
        for r in &s.rows {
            let v = r.value.as_deref().map_or_else(|| "null".to_owned(), quote);
            let _ = writeln!(out, "  {}: {v}  # {}", r.key, origin(r.line));
        }
    }
    out
}
