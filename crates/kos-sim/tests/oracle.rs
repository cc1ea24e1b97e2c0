//! The oracle rules (docs/architecture.md §1): a simulator must not be able to agree with a bug because
//! it shares the buggy code. kos-sim depends on no kos crate (above all not kos-cloud, the client it
//! checks), and kos-guest uses kos-bootstrap (whose user_data it runs) only to render test input.

use std::path::Path;

/// The crate names under `[dependencies]` of a Cargo.toml (not dev- or build-dependencies).
fn dependencies(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && let Some((name, _)) = line.split_once(['=', '.']) {
            let name = name.trim();
            if !name.is_empty() && !name.starts_with('#') {
                out.push(name.to_owned());
            }
        }
    }
    out
}

fn manifest(krate: &str) -> String {
    let path = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("..")
    .join(krate)
    .join("Cargo.toml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn kos_sim_shares_no_code_with_kos() {
    let deps = dependencies(&manifest("kos-sim"));
    assert!(
        deps.iter().any(|d| d == "axum"),
        "the parser found nothing: {deps:?}"
    );
    let kos: Vec<&String> = deps.iter().filter(|d| d.starts_with("kos")).collect();
    assert!(kos.is_empty(), "kos-sim depends on {kos:?}");
}

#[test]
fn kos_guest_runs_kos_bootstraps_output_without_its_code() {
    let deps = dependencies(&manifest("kos-guest"));
    assert!(
        deps.iter().any(|d| d == "kos-sim"),
        "the parser found nothing: {deps:?}"
    );
    assert!(
        !deps.iter().any(|d| d == "kos-bootstrap"),
        "kos-guest depends on kos-bootstrap: {deps:?}"
    );
}
