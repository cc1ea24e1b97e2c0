//! The running cluster's `kube-system/kubeadm-config`, moved before control planes join.
//!
//! `kubeadm join --control-plane` reads the cluster's ClusterConfiguration from there, not from its own
//! configuration: its `kubernetesVersion` for the static pods it writes, and its `apiServer.certSANs`
//! for the API server certificate it issues. Cluster API's control plane updates the ConfigMap before it
//! rolls machines for a new release or new SANs; kos does the same before a successor joins.

use kos_cluster::graph::record::{ROLLED, TAG_KUBERNETES, cluster_changes, recorded};
use kos_cluster::graph::{Desired, DesiredGraph, Kind};
use kos_cluster::plan::Plan;
use serde_json::{Map, Value};

/// What the running control planes were made for that kubeadm-config must move from before another
/// one joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needed {
    /// A control plane records another release than `version`.
    pub version: bool,
    /// A control plane records other certificate names ([`ROLLED`]).
    pub names: bool,
    /// A control plane was made before kos encrypted Secrets: kubeadm-config may lack the API
    /// server's `encryption-provider-config` and its volume, which joining control planes take
    /// from there.
    pub encryption: bool,
}

impl Needed {
    /// From the control planes `plan` found and what `desired` makes of them; nothing needed lets a
    /// plain scale-up join without the API from here (a private endpoint has none).
    #[must_use]
    pub fn of(plan: &Plan, desired: &DesiredGraph, version: &str) -> Self {
        let mut needed = Needed::default();
        for a in plan
            .actions
            .iter()
            .filter(|a| a.kind == Kind::Server && crate::formation::is_control_plane(&a.logical_id))
        {
            let Some(have) = &a.existing else { continue };
            needed.version |=
                recorded(&have.facts.tags, TAG_KUBERNETES).is_some_and(|v| v != version);
            needed.encryption |=
                recorded(&have.facts.tags, crate::encryption::TAG_ENCRYPTION).is_none();
            if let Some(Desired::Server(s)) = desired.node(&a.logical_id).map(|n| &n.spec)
                && let Some(rec) = &s.cluster
            {
                needed.names |= cluster_changes(&have.facts.tags, rec)
                    .iter()
                    .any(|(field, ..)| ROLLED.contains(field));
            }
        }
        needed
    }

    #[must_use]
    pub fn any(self) -> bool {
        self.version || self.names || self.encryption
    }
}

/// What a run wants the ClusterConfiguration to say; `None` leaves a field as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wanted<'a> {
    /// `kubernetesVersion`, without the `v` (e.g. `1.36.4`).
    pub version: Option<&'a str>,
    /// `apiServer.certSANs`, in full (kos renders the endpoint's address and the DNS name).
    pub cert_sans: Option<&'a [String]>,
    /// The API server's `encryption-provider-config` flag and the read-only hostPath volume of its
    /// directory, added when missing (kos-bootstrap's paths).
    pub encryption: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubeadm-config's ClusterConfiguration is not YAML: {0}")]
    Yaml(String),
    #[error("kubeadm-config's ClusterConfiguration is not a mapping of kind ClusterConfiguration")]
    NotClusterConfiguration,
    #[error("kubeadm-config's ClusterConfiguration has no kubernetesVersion")]
    NoVersion,
    #[error("kubeadm-config's ClusterConfiguration has an apiServer that is not a mapping")]
    ApiServer,
}

/// The ClusterConfiguration `text` saying what `wanted` says, or `None` when it already does.
/// Other fields keep their values (kubeadm's defaults, what an operator set).
pub fn updated(text: &str, wanted: Wanted<'_>) -> Result<Option<String>, Error> {
    let mut doc: Value = serde_saphyr::from_str(text).map_err(|e| Error::Yaml(e.to_string()))?;
    let obj = doc
        .as_object_mut()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("ClusterConfiguration"))
        .ok_or(Error::NotClusterConfiguration)?;
    let mut changed = false;
    if let Some(v) = wanted.version {
        let want = Value::String(format!("v{v}"));
        let have = obj.get_mut("kubernetesVersion").ok_or(Error::NoVersion)?;
        if *have != want {
            *have = want;
            changed = true;
        }
    }
    if let Some(sans) = wanted.cert_sans {
        changed |= set_cert_sans(obj, sans)?;
    }
    if wanted.encryption {
        changed |= set_encryption(obj)?;
    }
    if !changed {
        return Ok(None);
    }
    serde_saphyr::to_string(&doc)
        .map(Some)
        .map_err(|e| Error::Yaml(e.to_string()))
}

/// `apiServer.extraArgs` and `extraVolumes` with kos's encryption configuration (v1beta4 lists of
/// `{name, value}` and `HostPathMount`); whether it changed.
fn set_encryption(obj: &mut Map<String, Value>) -> Result<bool, Error> {
    use kos_bootstrap::encryption::{CONFIG_DIR, CONFIG_PATH, FLAG, VOLUME};
    let api = obj
        .entry("apiServer")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or(Error::ApiServer)?;
    let mut changed = false;
    let args = api
        .entry("extraArgs")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .ok_or(Error::ApiServer)?;
    if !args.iter().any(|a| a["name"] == FLAG) {
        args.push(serde_json::json!({"name": FLAG, "value": CONFIG_PATH}));
        changed = true;
    }
    let volumes = api
        .entry("extraVolumes")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .ok_or(Error::ApiServer)?;
    if !volumes.iter().any(|v| v["name"] == VOLUME) {
        volumes.push(serde_json::json!({
            "name": VOLUME, "hostPath": CONFIG_DIR, "mountPath": CONFIG_DIR,
            "readOnly": true, "pathType": "DirectoryOrCreate",
        }));
        changed = true;
    }
    Ok(changed)
}

/// `apiServer.certSANs` set to `sans` (removed when empty); whether it changed.
fn set_cert_sans(obj: &mut Map<String, Value>, sans: &[String]) -> Result<bool, Error> {
    let api = obj
        .entry("apiServer")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or(Error::ApiServer)?;
    let have: Vec<&str> = api
        .get("certSANs")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if have == sans.iter().map(String::as_str).collect::<Vec<_>>() {
        return Ok(false);
    }
    if sans.is_empty() {
        api.remove("certSANs");
    } else {
        api.insert(
            "certSANs".into(),
            Value::Array(sans.iter().cloned().map(Value::String).collect()),
        );
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPLOADED: &str = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n\
        kubernetesVersion: v1.35.2\nclusterName: demo\ncontrolPlaneEndpoint: \"172.24.4.2:6443\"\n\
        networking:\n  serviceSubnet: 10.96.0.0/12\n  podSubnet: 10.244.0.0/16\n  dnsDomain: cluster.local\n\
        apiServer:\n  certSANs:\n  - 172.24.4.2\n  extraArgs:\n  - name: audit-log-maxage\n    value: \"7\"\n";

    fn parsed(text: &str) -> Value {
        serde_saphyr::from_str(text).expect("yaml")
    }

    #[test]
    fn the_version_and_names_move_and_the_rest_stays() {
        let sans = ["172.24.4.2".to_owned(), "api.example.com".to_owned()];
        let out = updated(
            UPLOADED,
            Wanted {
                version: Some("1.36.0"),
                cert_sans: Some(&sans),
                encryption: false,
            },
        )
        .expect("updated")
        .expect("changed");
        let (before, after) = (parsed(UPLOADED), parsed(&out));
        assert_eq!(after["kubernetesVersion"], "v1.36.0");
        assert_eq!(
            after["apiServer"]["certSANs"],
            serde_json::json!(["172.24.4.2", "api.example.com"])
        );
        assert_eq!(
            after["apiServer"]["extraArgs"],
            before["apiServer"]["extraArgs"]
        );
        assert_eq!(after["networking"], before["networking"]);
        assert_eq!(after["controlPlaneEndpoint"], "172.24.4.2:6443");
        assert_eq!(
            after["apiServer"]["extraArgs"][0]["value"], "7",
            "still a string"
        );
    }

    #[test]
    fn what_already_says_so_is_not_rewritten() {
        let sans = ["172.24.4.2".to_owned()];
        let same = Wanted {
            version: Some("1.35.2"),
            cert_sans: Some(&sans),
            encryption: false,
        };
        assert!(updated(UPLOADED, same).expect("read").is_none());
        assert!(
            updated(UPLOADED, Wanted::default())
                .expect("read")
                .is_none()
        );
    }

    #[test]
    fn a_name_removed_leaves_the_address_and_none_at_all_removes_the_list() {
        let out = updated(
            UPLOADED,
            Wanted {
                version: None,
                cert_sans: Some(&[]),
                encryption: false,
            },
        )
        .expect("updated")
        .expect("changed");
        assert!(parsed(&out)["apiServer"].get("certSANs").is_none(), "{out}");
        let bare = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.35.2\n";
        let sans = ["10.0.0.5".to_owned()];
        let out = updated(
            bare,
            Wanted {
                version: None,
                cert_sans: Some(&sans),
                encryption: false,
            },
        )
        .expect("updated")
        .expect("changed");
        assert_eq!(
            parsed(&out)["apiServer"]["certSANs"],
            serde_json::json!(["10.0.0.5"])
        );
    }

    #[test]
    fn the_encryption_flag_and_volume_are_added_once() {
        let want = Wanted {
            encryption: true,
            ..Wanted::default()
        };
        let out = updated(UPLOADED, want).expect("updated").expect("changed");
        let after = parsed(&out);
        let args = after["apiServer"]["extraArgs"].as_array().expect("args");
        assert_eq!(args[0]["name"], "audit-log-maxage", "kept");
        assert_eq!(args[1]["name"], "encryption-provider-config");
        assert_eq!(after["apiServer"]["extraVolumes"][0]["readOnly"], true);
        assert!(updated(&out, want).expect("read").is_none());
    }

    #[test]
    fn what_is_not_a_cluster_configuration_is_an_error() {
        let v = Wanted {
            version: Some("1.36.0"),
            cert_sans: None,
            encryption: false,
        };
        assert!(matches!(
            updated("kind: InitConfiguration\n", v),
            Err(Error::NotClusterConfiguration)
        ));
        assert!(matches!(
            updated("kind: ClusterConfiguration\n", v),
            Err(Error::NoVersion)
        ));
        assert!(matches!(updated("a: [", v), Err(Error::Yaml(_))));
    }
}
