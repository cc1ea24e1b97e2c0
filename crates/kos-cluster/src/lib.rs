//! The kos cluster spec: `cluster.yaml` read into a typed [`ClusterSpec`], checked before any cloud call.
//!
//! [`load`] parses the YAML, reads every field and applies every rule, and returns either the spec (with any
//! warnings) or a [`Report`] of *all* problems, each pointing at its line in the file. The report renders with
//! miette:
//!
//! ```
//! let text = "apiVersion: kos.dev/v1alpha1\nkind: Cluster\nmetadata: {name: Demo}\n";
//! let errors = kos_cluster::load("cluster.yaml", text).unwrap_err();
//! assert!(errors.errors().any(|d| d.code == kos_cluster::Code::Name));
//! assert!(errors.errors().any(|d| d.code == kos_cluster::Code::MissingField));
//! // eprintln!("{:?}", miette::Report::new(errors));
//! ```
//!
//! Modules: [`spec`] holds the types, [`names`] the naming and tag rules, [`diagnostics`] the report type;
//! the rules themselves are private (`validate`).

pub mod access_rules;
pub mod apply;
pub mod bootstrap;
pub mod certs;
pub mod credential;
pub mod critical_path;
pub mod diagnostics;
pub mod doctor;
mod encoding;
pub mod events;
pub mod graph;
pub mod names;
pub mod observe;
pub mod plan;
pub mod preflight;
pub mod resolved;
pub mod schema;
pub mod spec;
pub mod status;
pub mod teardown;
mod tree;
mod validate;

pub use diagnostics::{
    Code, Diagnostic, Label, Report, Severity, SpecErrors, escape_unprintable, printable,
};

/// The largest spec kos reads. A cluster spec is a few KiB: a file a thousand times larger is the wrong file
/// (or an endless stream), and reading it whole would only delay saying so.
pub const MAX_SPEC_BYTES: usize = 1 << 20;
pub use spec::ClusterSpec;

/// A valid spec and the warnings found while reading it.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The spec.
    pub spec: ClusterSpec,
    /// Warnings only (it may be empty); render it like an error report.
    pub warnings: Report,
}

/// Reads and validates a `cluster.yaml` as read from disk: the bytes must be UTF-8 (a leading byte-order mark is
/// dropped), then as [`load`].
///
/// # Errors
/// As [`load`]; bytes that are not UTF-8 are the one problem reported (`kos::spec::encoding`).
pub fn load_bytes(path_for_messages: &str, bytes: &[u8]) -> Result<Loaded, SpecErrors> {
    match encoding::decode(bytes) {
        Ok(text) => load(path_for_messages, text),
        Err(undecodable) => {
            let (shown, problem) = *undecodable;
            let mut report = Report::new(path_for_messages, &shown);
            report.push(problem);
            Err(report)
        }
    }
}

/// Reads and validates a `cluster.yaml`.
///
/// `path_for_messages` is only shown to the user; `text` is the file's contents.
///
/// # Errors
/// A [`SpecErrors`] report holding every problem found (errors and warnings), sorted by position, when at
/// least one is an error. A YAML syntax error is the only case that reports a single problem: nothing else
/// can be read.
pub fn load(path_for_messages: &str, text: &str) -> Result<Loaded, SpecErrors> {
    let mut report = Report::new(path_for_messages, text);
    let spec = match tree::parse(text) {
        Ok(root) => {
            let (spec, diagnostics) = validate::check(text, &root);
            diagnostics.into_iter().for_each(|d| report.push(d));
            spec
        }
        Err(syntax) => {
            report.push(syntax);
            None
        }
    };
    report.sort();
    match spec {
        Some(spec) if !report.has_errors() => Ok(Loaded {
            spec,
            warnings: report,
        }),
        _ => Err(report),
    }
}
