//! The Kubernetes CEL library functions (k8s.io/apiserver/pkg/cel/library) the fake implements.

use cel::Context;

/// The names of the functions [`register`] adds.
pub const FUNCTIONS: &[&str] = &[];

/// Adds the library's functions to an evaluation's context.
pub fn register(_cx: &mut Context<'_, '_>) {}
