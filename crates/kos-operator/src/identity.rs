//! The cloud credential of a Cluster: the Secret its `identityRef` names, as Cluster API's
//! OpenStack provider reads it (key `clouds.yaml`, the cloud `cloudName` in it; key `cacert`, the
//! PEM of the CA that signed the cloud's endpoints, overriding any `cacert` path in clouds.yaml).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kos_cloud::config::CloudProfile;
use kos_cloud::{CloudError, Session};
use kube::api::Api;

use crate::resource::IdentityRef;

/// The Secret's key holding clouds.yaml.
pub const CLOUDS_YAML: &str = "clouds.yaml";
/// The Secret's key holding the cloud's CA bundle (PEM).
pub const CACERT: &str = "cacert";

/// Why the cloud of a Cluster cannot be reached. Never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("the identity Secret {namespace}/{name} does not exist")]
    NoSecret { namespace: String, name: String },
    #[error("the identity Secret {namespace}/{name} has no `{key}` key")]
    NoKey {
        namespace: String,
        name: String,
        key: &'static str,
    },
    #[error("the identity Secret {namespace}/{name}'s `{key}` is not UTF-8 text")]
    NotText {
        namespace: String,
        name: String,
        key: &'static str,
    },
    #[error("reading the identity Secret: {0}")]
    Api(#[source] kube::Error),
    #[error("the cloud's CA bundle cannot be kept for the session: {0}")]
    CaFile(#[source] std::io::Error),
    /// clouds.yaml does not give the cloud, or the cloud refused the credential.
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

impl IdentityError {
    /// A fault of what the user wrote (the Secret or its contents), not of the cloud or the API.
    #[must_use]
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            IdentityError::NoSecret { .. }
                | IdentityError::NoKey { .. }
                | IdentityError::NotText { .. }
                | IdentityError::Cloud(CloudError::Config(_))
        )
    }
}

/// A session with the Cluster's cloud, and the CA bundle it was given.
pub struct Connected {
    pub session: Session,
    /// The CA bundle's PEM (for the nodes' cloud.conf), when the Secret has one.
    pub ca_pem: Option<String>,
    /// The file the session reads the CA bundle from; removed with this.
    _ca_file: Option<tempfile::TempPath>,
}

/// The sessions opened, by identity Secret and cloud, with the Secret's resourceVersion they were
/// opened from: a reconcile whose Secret did not change reuses its session (the token, the
/// endpoints found) instead of authenticating and discovering again. A session re-authenticates
/// itself when its token expires.
#[derive(Default)]
pub struct Sessions(Mutex<HashMap<Key, (String, Arc<Connected>)>>);

/// The identity Secret's namespace and name, and the cloud's name in its clouds.yaml.
type Key = (String, String, String);

impl Sessions {
    fn get(&self, key: &Key, version: &str) -> Option<Arc<Connected>> {
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(key)
            .filter(|(v, _)| v == version)
            .map(|(_, c)| c.clone())
    }

    fn put(&self, key: Key, version: String, c: Arc<Connected>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, (version, c));
    }
}

/// Reads the identity Secret and opens a session with the cloud it names, or takes the one
/// `sessions` holds for this version of the Secret.
///
/// # Errors
/// [`IdentityError`].
pub async fn connect(
    secrets: &Api<Secret>,
    namespace: &str,
    identity: &IdentityRef,
    sessions: &Sessions,
) -> Result<Arc<Connected>, IdentityError> {
    let secret = secrets
        .get_opt(&identity.name)
        .await
        .map_err(IdentityError::Api)?
        .ok_or_else(|| IdentityError::NoSecret {
            namespace: namespace.to_owned(),
            name: identity.name.clone(),
        })?;
    let key = (
        namespace.to_owned(),
        identity.name.clone(),
        identity.cloud_name.clone(),
    );
    let version = secret.metadata.resource_version.clone().unwrap_or_default();
    if let Some(c) = sessions.get(&key, &version).filter(|_| !version.is_empty()) {
        return Ok(c);
    }
    let text = |key: &'static str| -> Result<Option<String>, IdentityError> {
        let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(key)) else {
            return Ok(None);
        };
        String::from_utf8(bytes.0.clone())
            .map(Some)
            .map_err(|_| IdentityError::NotText {
                namespace: namespace.to_owned(),
                name: identity.name.clone(),
                key,
            })
    };
    let clouds = text(CLOUDS_YAML)?.ok_or_else(|| IdentityError::NoKey {
        namespace: namespace.to_owned(),
        name: identity.name.clone(),
        key: CLOUDS_YAML,
    })?;
    let mut ca_pem = text(CACERT)?;
    let shown = format!("Secret {namespace}/{} key {CLOUDS_YAML}", identity.name);
    let mut profile = CloudProfile::from_clouds_text(&shown, &clouds, &identity.cloud_name)?;
    let ca_file = match &ca_pem {
        Some(pem) => {
            // tempfile makes it 0600: only this process reads the bundle.
            let file = tempfile::Builder::new()
                .prefix("kos-operator-cacert-")
                .tempfile()
                .map_err(IdentityError::CaFile)?;
            std::fs::write(file.path(), pem).map_err(IdentityError::CaFile)?;
            let path = file.into_temp_path();
            profile.cacert = Some(PathBuf::from(&*path));
            Some(path)
        }
        None => {
            // A `cacert` path in clouds.yaml (a file mounted into the operator's pod): the nodes'
            // cloud.conf needs its PEM too.
            if let Some(path) = &profile.cacert {
                ca_pem = Some(std::fs::read_to_string(path).map_err(IdentityError::CaFile)?);
            }
            None
        }
    };
    let session = Session::connect(&profile).await?;
    let connected = Arc::new(Connected {
        session,
        ca_pem,
        _ca_file: ca_file,
    });
    sessions.put(key, version, connected.clone());
    Ok(connected)
}
