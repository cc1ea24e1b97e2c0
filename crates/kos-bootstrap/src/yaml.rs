//! One YAML writer for everything we render.
//!
//! serde-saphyr by default folds strings longer than 80 characters into `>` block scalars, which adds a
//! trailing newline to the value (a kubelet `node-labels` argument would end in `\n`). Block style is
//! used only where we ask for it, with [`serde_saphyr::LitString`].

use serde::Serialize;

use crate::{Error, Result};

/// Serialises `v` as one YAML document.
pub fn to_string<T: Serialize>(v: &T) -> Result<String> {
    let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
    serde_saphyr::to_string_with_options(v, options).map_err(|e| Error::Yaml(e.to_string()))
}
