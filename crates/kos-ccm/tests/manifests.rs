//! The DaemonSets that run a CCM in kos clusters: kos-ccm accepts every flag of the upstream
//! openstack-cloud-controller-manager manifest (switching is a change of image) and of its own.

use clap::Parser;
use kos_ccm::options::{Controller, RunArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

/// The container's `command` + `args` of a DaemonSet manifest, with `$(VAR)` from its env.
fn container_argv(manifest: &str) -> (Vec<String>, Vec<String>) {
    let text = manifest
        .replace("@CLUSTER_NAME@", "prod")
        .replace("@CCM_IMAGE@", "example/ccm:1");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("YAML documents");
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    let env: Vec<(String, String)> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                e["value"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let expand = |s: &str| {
        env.iter().fold(s.to_owned(), |acc, (k, v)| {
            acc.replace(&format!("$({k})"), v)
        })
    };
    let list = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str())
            .map(expand)
            .collect()
    };
    (list(&c["command"]), list(&c["args"]))
}

fn parse(argv: &[String]) -> kos_ccm::options::Options {
    let cli =
        Cli::try_parse_from(std::iter::once("kos-ccm".to_owned()).chain(argv.iter().cloned()))
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    cli.run.check().unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

#[test]
fn the_upstream_manifest_runs_kos_ccm_unchanged() {
    let (command, args) = container_argv(include_str!("../../kos-bootstrap/src/addons/ccm.yaml"));
    assert!(
        command.is_empty(),
        "upstream relies on the image's entrypoint"
    );
    // The image runs its args as the command: the first is the binary's upstream path, which the
    // kos-ccm image provides too (see Dockerfile).
    assert_eq!(args[0], "/bin/openstack-cloud-controller-manager");
    let o = parse(&args[1..]);
    assert_eq!(o.cluster_name, "prod");
    assert_eq!(
        o.cloud_config,
        std::path::Path::new("/etc/config/cloud.conf")
    );
    assert_eq!(o.controllers.len(), Controller::ALL.len());
}

#[test]
fn the_kos_ccm_manifest_parses_and_probes_what_it_serves() {
    let manifest = include_str!("../../kos-bootstrap/src/addons/kos-ccm.yaml");
    let (command, args) = container_argv(manifest);
    assert_eq!(command, ["/bin/kos-ccm"]);
    let o = parse(&args);
    assert_eq!(o.cluster_name, "prod");
    let served = o.serve_on.expect("serves /healthz");
    assert!(manifest.contains(&format!("port: {}", served.port())));
    assert!(manifest.contains(&format!("host: {}", served.ip())));
    assert!(
        o.leader_election.is_some(),
        "one replica per control plane: elect"
    );
}

#[test]
fn the_dockerfile_provides_both_binary_paths() {
    let dockerfile = include_str!("../Dockerfile");
    for path in ["/bin/kos-ccm", "/bin/openstack-cloud-controller-manager"] {
        assert!(dockerfile.contains(path), "{path}");
    }
}
