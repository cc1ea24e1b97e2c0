//! cloud.conf: the upstream CCM's configuration file, read with the upstream's rules.
//!
//! [`gcfg`] is the generic reader (sections, subsections, entries with positions);
//! [`model`] maps a document onto the typed [`CloudConfig`]; [`semantics`] holds the value rules
//! (booleans, integers, Go durations, repeated keys) and the [`Diagnostic`] type.

pub mod gcfg;
pub mod model;
pub mod semantics;

use std::path::PathBuf;

pub use gcfg::{Document, Entry, Pos, Section, SyntaxError, SyntaxErrorKind};
pub use model::{
    BlockStorage, CloudConfig, EffectiveRow, EffectiveSection, Global, LbMethod, LoadBalancer,
    LoadBalancerClass, Loaded, Metadata, MetadataSource, Networking, Route,
};
pub use semantics::{Diagnostic, parse_go_duration};

/// Why a cloud.conf cannot be used. No variant carries a secret value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", lines(.0))]
    Syntax(Vec<SyntaxError>),
    /// The file parses but its values are wrong; `warnings` are what else was found.
    #[error("{}", lines(errors))]
    Invalid {
        errors: Vec<Diagnostic>,
        warnings: Vec<Diagnostic>,
    },
    #[error("{file}: [Global] use-clouds: {source}")]
    Clouds {
        file: String,
        #[source]
        source: kos_cloud::CloudError,
    },
}

fn lines<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
