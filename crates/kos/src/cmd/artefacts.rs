//! `kos artefacts`: everything the nodes of a spec fetch (packages, manifests, images), as fetched
//! (after the spec's mirrors) and as published, with the pinned sha256 of files. An operator fills a
//! mirror from it. No cloud is contacted.

use std::fmt::Write as _;

use kos_bootstrap::airgap::{Artefact, Kind};
use kos_bootstrap::{Ccm, Cni, KubeVersion, ManifestPin};
use kos_cluster::spec;
use miette::IntoDiagnostic;

use super::cluster::load_spec;
use super::{Exit, Failure};
use crate::cli::{ArtefactsArgs, Output};

pub async fn artefacts(args: ArtefactsArgs) -> Result<Exit, Failure> {
    let file = load_spec(&args.spec.file)?;
    let list = of_spec(&file.loaded.spec).map_err(Failure::input)?;
    match args.output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&list)
                .into_diagnostic()
                .map_err(Failure::input)?
        ),
        Output::Text => print!("{}", crate::term::escape(&table(&list))),
    }
    Ok(Exit::Ok)
}

/// The artefacts of a validated spec.
pub fn of_spec(spec: &kos_cluster::ClusterSpec) -> miette::Result<Vec<Artefact>> {
    let version: KubeVersion = spec
        .kubernetes_version
        .to_string()
        .parse()
        .map_err(|e| miette::miette!("{e}"))?;
    let cni = match spec.addons.cni {
        spec::Cni::Calico => Cni::Calico,
        spec::Cni::Cilium => Cni::Cilium,
        spec::Cni::Flannel => Cni::Flannel,
        spec::Cni::KubeRouter => Cni::KubeRouter,
    };
    let ccm = match &spec.addons.ccm {
        spec::Ccm::Upstream => Ccm::Upstream,
        spec::Ccm::Kos { image } => Ccm::Kos {
            image: image.clone(),
        },
    };
    let csi = kos_control::kubeadm::csi_input(&spec.addons.csi);
    let pin = spec.addons.cni_manifest.as_ref().map(|m| ManifestPin {
        url: m.url.clone(),
        sha256: m.sha256.clone(),
    });
    let airgap = kos_control::kubeadm::airgap_input(spec, None);
    let mut list = kos_bootstrap::artefacts_for(version, cni, pin.as_ref(), &ccm, &csi, &airgap)
        .map_err(|e| miette::miette!("{e}"))?;
    // kos-operator installs cluster-autoscaler of the cluster's minor for autoscaled pools: its
    // nodes pull it through the same mirrors.
    if spec.node_pools.iter().any(|p| p.autoscaling.is_some()) {
        let pins = kos_bootstrap::addons::Pins::builtin().map_err(|e| miette::miette!("{e}"))?;
        let origin = pins
            .images_for(version.minor)
            .map(|m| m.cluster_autoscaler.clone())
            .ok_or_else(|| miette::miette!("{version} has no images in the pins table"))?;
        list.push(Artefact {
            kind: Kind::Image,
            step: "addons",
            fetched: airgap.pulled_from(&origin),
            origin,
            sha256: None,
            note: Some("installed by kos-operator for the pools with autoscaling".to_owned()),
        });
    }
    Ok(list)
}

/// The human table: one line per artefact, its origin below when mirrored.
fn table(list: &[Artefact]) -> String {
    let mut out = String::new();
    for a in list {
        let kind = match a.kind {
            Kind::PackageRepository => "packages",
            Kind::Manifest => "manifest",
            Kind::Image => "image",
        };
        let _ = write!(out, "{:<9} {:<9} {}", a.step, kind, a.fetched);
        if let Some(sha) = &a.sha256 {
            let _ = write!(out, "  sha256:{sha}");
        }
        out.push('\n');
        if a.fetched != a.origin {
            let _ = writeln!(out, "{:<19} from {}", "", a.origin);
        }
        if let Some(note) = &a.note {
            let _ = writeln!(out, "{:<19} {note}", "");
        }
    }
    out
}
