//! The CCM credential's rotation ([`kos_lifecycle::rotate`]) carried out: Keystone through the
//! session, the cluster through its API with kos's admin certificate, the credential kept in the
//! cluster's [`SecretStore`]. `kos rotate credential` runs it, a run once nothing is left to
//! change when the credential is due ([`when_due`]), and the operator's runs before a turn when a
//! rotation has not finished or the secret is lost ([`mend`]).

use std::time::Duration;

use base64::Engine as _;
use kos_cluster::ClusterSpec;
use kos_cluster::credential::Due;
use kos_cluster::graph::Kind;
use kos_cluster::plan::{Op, Plan};
use kos_lifecycle::api::ApiError;
use kos_lifecycle::rotate::{
    self, ClusterApi, Credential, Keystone, KeystoneError, Listed, Options, Rollout, RotateError,
    Workload, WorkloadKind,
};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use crate::connect::{ClientError, Cloud, api_client_at};
use crate::kube::Kube;
use crate::report::{Event, Report};
use crate::store::{CredentialRecords, Record, Records as _, SecretStore, StoreError};

/// Why a rotation did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RotateNowError {
    /// The user's roles allow no credential for the CCM (nothing was changed).
    #[error(transparent)]
    Roles(kos_cluster::credential::NoMemberRole),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// What the store must keep of the cluster is not there (nothing was changed).
    #[error("the {what} of cluster {cluster} are not on this machine ({location})")]
    Missing {
        what: &'static str,
        cluster: String,
        location: String,
    },
    /// The recorded Kubernetes version cannot be read (nothing was changed).
    #[error("{location}: {source}")]
    Version {
        location: String,
        source: kos_bootstrap::Error,
    },
    /// The cluster's API does not answer from here (nothing was changed).
    #[error("cannot reach the API of cluster {cluster} at {address}")]
    Client {
        cluster: String,
        address: String,
        #[source]
        source: ClientError,
    },
    #[error(transparent)]
    Rotate(#[from] RotateError),
}

impl RotateNowError {
    /// Bad input, found before anything was changed.
    #[must_use]
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            RotateNowError::Roles(_)
                | RotateNowError::Missing { .. }
                | RotateNowError::Version { .. }
        )
    }

    /// What the user can do about it, said to `to`.
    #[must_use]
    pub fn help(&self, to: kos_lifecycle::audience::Audience) -> Option<&'static str> {
        use kos_lifecycle::audience::Audience;
        match self {
            RotateNowError::Roles(_) => Some(
                "ask the cloud's administrators for the member role on the project; nothing was changed",
            ),
            RotateNowError::Missing { .. } => Some(
                "run it on the machine that ran `kos up` (or copy its data directory), with the same --cloud",
            ),
            RotateNowError::Client { .. } => {
                Some("the cluster's API must answer from this machine: nothing was changed")
            }
            RotateNowError::Rotate(_) => Some(match to {
                Audience::Cli => {
                    "run `kos rotate credential` again: it continues where this run stopped"
                }
                Audience::Operator => {
                    "the operator tries again by itself: it continues where this rotation stopped"
                }
            }),
            RotateNowError::Store(_) | RotateNowError::Version { .. } => None,
        }
    }
}

/// Rotates the CCM credential of cluster `name` (whose records `store` keeps; the caller holds
/// whatever lock the store needs): a new one of the roles [`kos_cluster::credential::ccm_roles`]
/// chooses, living `lifetime_days`. The old one need not authenticate: Keystone is asked with the
/// user's session. Each step is reported ([`Event::Rotation`]).
///
/// # Errors
/// [`RotateNowError`].
pub async fn rotate_now<S: SecretStore + ?Sized>(
    cloud: Cloud<'_>,
    store: &S,
    name: &str,
    lifetime_days: u32,
    timeout: Duration,
    report: &dyn Report,
) -> Result<rotate::Rotated, RotateNowError> {
    let missing = |what: &'static str, record: Record| RotateNowError::Missing {
        what,
        cluster: name.to_owned(),
        location: store.location(record),
    };
    let roles = kos_cluster::credential::ccm_roles(&cloud.session.token_roles())
        .map_err(RotateNowError::Roles)?;
    let secrets = store
        .pki()?
        .ok_or_else(|| missing("secrets", Record::Pki))?;
    let meta = store
        .meta()?
        .ok_or_else(|| missing("API address and version", Record::Meta))?;
    let version: kos_bootstrap::KubeVersion =
        meta.kubernetes_version
            .parse()
            .map_err(|source| RotateNowError::Version {
                location: store.location(Record::Meta),
                source,
            })?;
    let kube = api_client_at(cloud, &meta.api_address, &version, &secrets)
        .await
        .map_err(|source| RotateNowError::Client {
            cluster: name.to_owned(),
            address: meta.api_address.clone(),
            source,
        })?;
    let keystone = Session {
        session: cloud.session,
        cluster: name,
        roles,
        lifetime_days,
    };
    let api = Api(&kube);
    let records = CredentialRecords(store);
    let opts = Options {
        timeout,
        poll: cloud
            .session
            .pace()
            .local(Duration::from_secs(2))
            .max(Duration::from_millis(50)),
    };
    Ok(
        rotate::rotate(name, &keystone, &api, &records, opts, &mut |line| {
            report.event(Event::Rotation { line });
        })
        .await?,
    )
}

/// Once nothing is left to change: rotates the CCM credential when less than a third of its
/// lifetime is left, when it has expired (the CCM and CSI fail then), or when it never expires
/// (made before kos gave credentials an expiry, with every role of the user).
///
/// # Errors
/// [`RotateNowError`].
pub async fn when_due<S: SecretStore + ?Sized>(
    cloud: Cloud<'_>,
    store: &S,
    spec: &ClusterSpec,
    plan: &Plan,
    report: &dyn Report,
) -> Result<(), RotateNowError> {
    let Some(cred) = plan
        .actions
        .iter()
        .find(|a| a.kind == Kind::AppCredential && a.op != Op::Delete)
        .and_then(|a| a.existing.as_ref())
    else {
        return Ok(());
    };
    let name = spec.name.value.as_str();
    let lifetime = spec.addons.credential_lifetime_days();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let expires = cred.facts.expires_at.as_deref().and_then(unix);
    let due = kos_cluster::credential::rotation_due(expires, now, lifetime);
    let why = match due {
        Due::No { .. } => return Ok(()),
        Due::NeverExpires => "never expires (made before kos gave it an expiry)".to_owned(),
        Due::Expired => "has expired: the cloud controller and CSI cannot authenticate".to_owned(),
        Due::Soon { left_secs } => format!(
            "expires in {} (less than a third of its {lifetime} days)",
            left(left_secs)
        ),
    };
    report.event(Event::RotationDue {
        cluster: name,
        credential: &cred.name,
        why: &why,
    });
    rotate_now(
        cloud,
        store,
        name,
        lifetime,
        Duration::from_secs(600),
        report,
    )
    .await
    .map(|_| ())
}

/// Before a turn, when the run mends the CCM credential itself ([`crate::up::CcmMending::Run`]):
/// finishes the rotation a stopped run left (two credentials, or a new one kept but not yet
/// live), or rotates a credential whose secret is kept nowhere while servers use it (a first
/// control plane made again could not get its cloud.conf). The rotation continues from what
/// Keystone, the cluster and the store show. Whether it rotated: the turn is then looked at again.
///
/// # Errors
/// [`RotateNowError`].
pub async fn mend<S: SecretStore + ?Sized>(
    cloud: Cloud<'_>,
    store: &S,
    spec: &ClusterSpec,
    plan: &Plan,
    report: &dyn Report,
) -> Result<bool, RotateNowError> {
    let pending = store.read(Record::PendingCcmCredential)?.is_some();
    let stored = store.ccm_credential()?;
    let why = match rotate::recreate(plan, pending, stored.as_ref().map(|c| c.id.as_str()), false) {
        Err(rotate::RecreateRefusal::Unfinished) => "has a rotation that has not finished",
        Ok(rotate::Recreate::LostInUse) => "has its secret kept nowhere while servers use it",
        Ok(_) | Err(rotate::RecreateRefusal::InUse) => return Ok(false),
    };
    let name = spec.name.value.as_str();
    let credential = plan
        .actions
        .iter()
        .filter(|a| a.kind == Kind::AppCredential)
        .find_map(|a| a.existing.as_ref())
        .map_or("", |r| r.name.as_str());
    report.event(Event::RotationDue {
        cluster: name,
        credential,
        why,
    });
    rotate_now(
        cloud,
        store,
        name,
        spec.addons.credential_lifetime_days(),
        Duration::from_secs(600),
        report,
    )
    .await?;
    Ok(true)
}

/// An RFC 3339 time as Unix seconds.
#[must_use]
pub fn unix(rfc3339: &str) -> Option<i64> {
    time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(time::OffsetDateTime::unix_timestamp)
}

/// `12 days`, `5 hours`, `3 minutes`.
#[must_use]
pub fn left(secs: i64) -> String {
    match secs {
        s if s >= 2 * 86_400 => format!("{} days", s / 86_400),
        s if s >= 2 * 3600 => format!("{} hours", s / 3600),
        s => format!("{} minutes", (s / 60).max(1)),
    }
}

/// Keystone through the user's session; new credentials get `roles` and live `lifetime_days`.
struct Session<'a> {
    session: &'a kos_cloud::Session,
    cluster: &'a str,
    roles: Vec<String>,
    lifetime_days: u32,
}

impl Keystone for Session<'_> {
    async fn list(&self, names: &[String]) -> Result<Vec<Listed>, KeystoneError> {
        let mut out = Vec::new();
        for n in names {
            let found = self
                .session
                .identity()
                .list_application_credentials(Some(n))
                .await
                .map_err(keystone_error)?;
            out.extend(found.into_iter().map(|c| Listed {
                id: c.id,
                name: c.name,
            }));
        }
        Ok(out)
    }

    async fn create(&self, name: &str) -> Result<Credential, KeystoneError> {
        let mut req = kos_cluster::credential::request(
            name,
            self.cluster,
            &self.roles,
            self.lifetime_days,
            chrono::Utc::now(),
        );
        // Access rules, when the credential it replaces has them (`addons.credentialAccessRules`).
        req.access_rules = kos_cluster::credential::rotation_rules(
            self.session,
            &rotate::credential_names(self.cluster),
        )
        .await
        .map_err(keystone_error)?;
        let c = self
            .session
            .identity()
            .create_application_credential(&req)
            .await
            .map_err(keystone_error)?;
        Ok(Credential {
            id: c.credential.id,
            name: c.credential.name,
            secret: c.secret,
        })
    }

    async fn delete(&self, id: &str) -> Result<(), KeystoneError> {
        self.session
            .identity()
            .delete_application_credential(id)
            .await
            .map_err(keystone_error)
    }
}

/// Keystone's error as the rotation tells it apart: gone, worth trying again, or refused. The
/// session's error (redacted) stays as the cause.
fn keystone_error(e: kos_cloud::CloudError) -> KeystoneError {
    if e.is_not_found() {
        KeystoneError::NotFound
    } else if e.is_transient() {
        KeystoneError::Unavailable(Box::new(e))
    } else {
        KeystoneError::Refused(Box::new(e))
    }
}

const SECRET_PATH: &str = "/api/v1/namespaces/kube-system/secrets/cloud-config";

struct Api<'a>(&'a Kube);

impl Api<'_> {
    fn path(w: &Workload) -> String {
        let plural = match w.kind {
            WorkloadKind::DaemonSet => "daemonsets",
            WorkloadKind::Deployment => "deployments",
        };
        format!(
            "/apis/apps/v1/namespaces/{}/{plural}/{}",
            w.namespace, w.name
        )
    }
}

impl ClusterApi for Api<'_> {
    async fn cloud_conf(&self) -> Result<SecretString, ApiError> {
        // The value never goes into the error: it is a secret.
        let malformed = |what: &str| ApiError::Malformed {
            what: what.to_owned(),
            source: None,
        };
        let s = self.0.get(SECRET_PATH).await?;
        let b64 = s
            .pointer("/data/cloud.conf")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("it has no cloud.conf"))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| malformed("its cloud.conf is not base64"))?;
        String::from_utf8(bytes)
            .map(SecretString::from)
            .map_err(|_| malformed("its cloud.conf is not text"))
    }

    async fn set_cloud_conf(&self, text: &SecretString) -> Result<(), ApiError> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(text.expose_secret());
        Ok(self
            .0
            .merge_patch(SECRET_PATH, &json!({"data": {"cloud.conf": b64}}))
            .await?)
    }

    async fn workloads_mounting(&self, secret: &str) -> Result<Vec<Workload>, ApiError> {
        let mut out = Vec::new();
        for (kind, plural) in [
            (WorkloadKind::DaemonSet, "daemonsets"),
            (WorkloadKind::Deployment, "deployments"),
        ] {
            let list = self
                .0
                .get(&format!("/apis/apps/v1/namespaces/kube-system/{plural}"))
                .await?;
            for item in list["items"].as_array().into_iter().flatten() {
                let mounts = item
                    .pointer("/spec/template/spec/volumes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|v| {
                        v.pointer("/secret/secretName").and_then(Value::as_str) == Some(secret)
                    });
                let Some(name) = item.pointer("/metadata/name").and_then(Value::as_str) else {
                    continue;
                };
                if mounts {
                    out.push(Workload {
                        kind,
                        namespace: "kube-system".into(),
                        name: name.to_owned(),
                        annotation: item
                            .pointer("/spec/template/metadata/annotations")
                            .and_then(|a| a.get(rotate::CREDENTIAL_ANNOTATION))
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    });
                }
            }
        }
        Ok(out)
    }

    async fn annotate(&self, w: &Workload, key: &str, value: &str) -> Result<(), ApiError> {
        Ok(self
            .0
            .merge_patch(
                &Self::path(w),
                &json!({"spec": {"template": {"metadata": {"annotations": {key: value}}}}}),
            )
            .await?)
    }

    async fn rollout(&self, w: &Workload) -> Result<Rollout, ApiError> {
        let o = self.0.get(&Self::path(w)).await?;
        Ok(rollout_of(w.kind, &o))
    }
}

/// Whether a workload has rolled out, judged as `kubectl rollout status` does: the controller has
/// seen the latest spec, every pod is of it, and as many are available as wanted.
fn rollout_of(kind: WorkloadKind, o: &Value) -> Rollout {
    let n = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    if n("/status/observedGeneration") < n("/metadata/generation") {
        return Rollout::Waiting("the controller has not seen the change yet".into());
    }
    match kind {
        WorkloadKind::DaemonSet => {
            let (desired, updated, available) = (
                n("/status/desiredNumberScheduled"),
                n("/status/updatedNumberScheduled"),
                n("/status/numberAvailable"),
            );
            if updated < desired {
                Rollout::Waiting(format!("{updated} of {desired} updated pods scheduled"))
            } else if available < desired {
                Rollout::Waiting(format!("{available} of {desired} updated pods available"))
            } else {
                Rollout::Done
            }
        }
        WorkloadKind::Deployment => {
            let want = o
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let (replicas, updated, available) = (
                n("/status/replicas"),
                n("/status/updatedReplicas"),
                n("/status/availableReplicas"),
            );
            if updated < want {
                Rollout::Waiting(format!("{updated} of {want} replicas updated"))
            } else if replicas > updated {
                Rollout::Waiting(format!(
                    "{} old replicas pending termination",
                    replicas - updated
                ))
            } else if available < updated {
                Rollout::Waiting(format!(
                    "{available} of {updated} updated replicas available"
                ))
            } else {
                Rollout::Done
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollouts_are_judged_as_kubectl_does() {
        let ds = |g: i64, og: i64, d: i64, u: i64, a: i64| {
            json!({"metadata": {"generation": g}, "status": {"observedGeneration": og,
                "desiredNumberScheduled": d, "updatedNumberScheduled": u, "numberAvailable": a}})
        };
        assert!(matches!(
            rollout_of(WorkloadKind::DaemonSet, &ds(2, 1, 1, 1, 1)),
            Rollout::Waiting(_)
        ));
        assert!(matches!(
            rollout_of(WorkloadKind::DaemonSet, &ds(2, 2, 3, 2, 3)),
            Rollout::Waiting(_)
        ));
        assert!(matches!(
            rollout_of(WorkloadKind::DaemonSet, &ds(2, 2, 3, 3, 2)),
            Rollout::Waiting(_)
        ));
        assert_eq!(
            rollout_of(WorkloadKind::DaemonSet, &ds(2, 2, 3, 3, 3)),
            Rollout::Done
        );
        let dep = |r: i64, u: i64, a: i64| {
            json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
                "status": {"observedGeneration": 3, "replicas": r, "updatedReplicas": u, "availableReplicas": a}})
        };
        assert!(matches!(
            rollout_of(WorkloadKind::Deployment, &dep(3, 2, 2)),
            Rollout::Waiting(_)
        ));
        assert!(matches!(
            rollout_of(WorkloadKind::Deployment, &dep(2, 1, 2)),
            Rollout::Waiting(_)
        ));
        assert!(matches!(
            rollout_of(WorkloadKind::Deployment, &dep(2, 2, 1)),
            Rollout::Waiting(_)
        ));
        assert_eq!(
            rollout_of(WorkloadKind::Deployment, &dep(2, 2, 2)),
            Rollout::Done
        );
    }
}
