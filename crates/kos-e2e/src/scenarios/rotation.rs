//! `kos up`'s rotation of an expired CCM credential, on the target's Keystone: a credential made as
//! kos makes the CCM's, but expiring seconds later, stops authenticating; kos's rule calls the
//! rotation due; the rotation kos runs ([`kos_lifecycle::rotate::rotate`] over the user's session,
//! as the CLI's adapter in crates/kos/src/cmd/rotate.rs asks Keystone: the same calls and
//! [`request`]) makes the other name with the chosen roles and a full lifetime, puts it into
//! cloud.conf, and deletes the expired one. The cluster's side (the Secret, the rollouts) is an
//! in-memory stand-in here; the simulated cloud's cli_rotate runs it on a cluster.

use std::sync::Mutex;

use anyhow::{Context as _, Result, ensure};
use kos_cloud::model::identity::keystone_expiry;
use kos_cloud::model::network::NetworkFilter;
use kos_cloud::{AppCredentialRef, CloudProfile, ProfileAuth, Session};
use kos_cluster::credential::{Due, ccm_roles, request, rotation_due};
use kos_lifecycle::api::ApiError;
use kos_lifecycle::rotate::{
    ClusterApi, Credential, CredentialStore, Keystone, KeystoneError, Listed, Options, Rollout,
    StoreError, Workload, credential_names, global_value, rotate,
};
use secrecy::{ExposeSecret as _, SecretString};

use crate::{Ctx, Made};

/// How long the first credential lives: Keystone refuses an expiry in the past.
const SHORT_SECS: i64 = 5;

pub async fn credential_rotation(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let cluster = ctx.run.name("rot");
        let names = credential_names(&cluster);
        let roles = ccm_roles(&ctx.session.token_roles())?;
        let mut req = request(&names[0], &cluster, &roles, 90, chrono::Utc::now());
        req.expires_at = Some(keystone_expiry(
            chrono::Utc::now() + chrono::Duration::seconds(SHORT_SECS),
        ));
        let old = ctx
            .session
            .identity()
            .create_application_credential(&req)
            .await?;
        made.push(Made::AppCredential(old.credential.id.clone()));

        // Expired: it no longer authenticates, and kos's rule says so from Keystone's expiry.
        let expired = profile(ctx, &old.credential.id, &old.secret);
        ctx.poll("the short-lived credential to stop authenticating", || async {
            Ok(Session::connect(&expired).await.is_err().then_some(()))
        })
        .await?;
        let listed = ctx
            .session
            .identity()
            .list_application_credentials(Some(&names[0]))
            .await?;
        let expires = listed
            .first()
            .and_then(|c| c.expires())
            .context("Keystone lists the credential without its expiry")?
            .timestamp();
        let due = rotation_due(Some(expires), chrono::Utc::now().timestamp(), 90);
        ensure!(due == Due::Expired, "rotation judged {due:?}");

        let api = Conf(Mutex::new(format!(
            "[Global]\nauth-url = {}\napplication-credential-id = {}\napplication-credential-secret = {}\n",
            ctx.profile.auth_url,
            old.credential.id,
            old.secret.expose_secret()
        )));
        let store = Kept::default();
        let keystone = UserKeystone {
            session: &ctx.session,
            cluster: &cluster,
            roles: roles.clone(),
            lifetime_days: 90,
        };
        let rotated = rotate(&cluster, &keystone, &api, &store, Options::default(), &mut |l| {
            eprintln!("credential_rotation: {l}")
        })
        .await?;
        made.push(Made::AppCredential(rotated.id.clone()));

        ensure!(
            rotated.name == names[1] && rotated.deleted == vec![old.credential.id.clone()],
            "rotated {rotated:?}"
        );
        ensure!(
            ctx.session
                .identity()
                .get_application_credential(&old.credential.id)
                .await?
                .is_none(),
            "the expired credential is still there"
        );
        let new = ctx
            .session
            .identity()
            .get_application_credential(&rotated.id)
            .await?
            .context("the new credential is not in Keystone")?;
        let got: Vec<String> = new.roles.iter().filter_map(|r| r.name.clone()).collect();
        ensure!(
            roles.iter().all(|r| got.contains(r)) && !got.iter().any(|r| r == "admin"),
            "new credential's roles {got:?}, asked for {roles:?}"
        );
        let left = new
            .expires()
            .map(|at| at - chrono::Utc::now())
            .context("the new credential has no expiry")?;
        ensure!(
            left > chrono::Duration::days(89) && left <= chrono::Duration::days(90),
            "the new credential expires in {left}"
        );
        ensure!(!new.unrestricted, "the new credential is unrestricted");

        // cloud.conf names it, and what it holds authenticates.
        let conf = api.0.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
        ensure!(
            global_value(&conf, "application-credential-id").as_deref() == Some(&rotated.id),
            "cloud.conf after the rotation:\n{}",
            conf.replace(store_secret(&store)?.expose_secret(), "***")
        );
        let secret = store_secret(&store)?;
        ensure!(
            global_value(&conf, "application-credential-secret").as_deref()
                == Some(secret.expose_secret()),
            "cloud.conf does not carry the kept secret"
        );
        let s = Session::connect(&profile(ctx, &rotated.id, &secret)).await?;
        s.network()
            .list_networks(&NetworkFilter::default())
            .await?;
        Ok(())
    })
    .await
}

fn profile(ctx: &Ctx, id: &str, secret: &SecretString) -> CloudProfile {
    CloudProfile {
        name: format!("{}-rot", ctx.profile.name),
        auth: ProfileAuth::ApplicationCredential {
            credential: AppCredentialRef::Id(id.to_owned()),
            secret: secret.clone(),
        },
        ..ctx.profile.clone()
    }
}

fn store_secret(store: &Kept) -> Result<SecretString> {
    store
        .0
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .1
        .as_ref()
        .map(|c| c.secret.clone())
        .context("no credential was committed")
}

/// The cluster's cloud.conf, with no workload mounting it.
struct Conf(Mutex<String>);

/// A lock a panic poisoned, as the stand-ins report it.
fn poisoned() -> ApiError {
    ApiError::Malformed {
        what: "poisoned".into(),
        source: None,
    }
}

/// What the stand-in cluster answers for a workload: it has none.
fn no_workload() -> ApiError {
    ApiError::NotFound
}

impl ClusterApi for Conf {
    async fn cloud_conf(&self) -> Result<SecretString, ApiError> {
        let c = self.0.lock().map_err(|_| poisoned())?;
        Ok(SecretString::from(c.clone()))
    }
    async fn set_cloud_conf(&self, text: &SecretString) -> Result<(), ApiError> {
        *self.0.lock().map_err(|_| poisoned())? = text.expose_secret().to_owned();
        Ok(())
    }
    async fn workloads_mounting(&self, _secret: &str) -> Result<Vec<Workload>, ApiError> {
        Ok(Vec::new())
    }
    async fn annotate(&self, _w: &Workload, _key: &str, _value: &str) -> Result<(), ApiError> {
        Err(no_workload())
    }
    async fn rollout(&self, _w: &Workload) -> Result<Rollout, ApiError> {
        Err(no_workload())
    }
}

/// The pending and the committed credential, as the data directory keeps them.
#[derive(Default)]
struct Kept(Mutex<(Option<Credential>, Option<Credential>)>);

fn poisoned_store() -> StoreError {
    StoreError::Malformed {
        location: "(in memory, poisoned)".into(),
    }
}

impl CredentialStore for Kept {
    fn pending(&self) -> Result<Option<Credential>, StoreError> {
        Ok(self.0.lock().map_err(|_| poisoned_store())?.0.clone())
    }
    fn committed(&self) -> Result<Option<Credential>, StoreError> {
        Ok(self.0.lock().map_err(|_| poisoned_store())?.1.clone())
    }
    fn keep_pending(&self, c: &Credential) -> Result<(), StoreError> {
        self.0.lock().map_err(|_| poisoned_store())?.0 = Some(c.clone());
        Ok(())
    }
    fn commit(&self, c: &Credential) -> Result<(), StoreError> {
        let mut k = self.0.lock().map_err(|_| poisoned_store())?;
        *k = (None, Some(c.clone()));
        Ok(())
    }
}

/// Keystone through the user's session, as the CLI asks it (`cmd/rotate.rs`).
struct UserKeystone<'a> {
    session: &'a Session,
    cluster: &'a str,
    roles: Vec<String>,
    lifetime_days: u32,
}

impl Keystone for UserKeystone<'_> {
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
        let req = request(
            name,
            self.cluster,
            &self.roles,
            self.lifetime_days,
            chrono::Utc::now(),
        );
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

/// As the CLI tells Keystone's errors apart (`cmd/rotate.rs`).
fn keystone_error(e: kos_cloud::CloudError) -> KeystoneError {
    if e.is_not_found() {
        KeystoneError::NotFound
    } else if e.is_transient() {
        KeystoneError::Unavailable(Box::new(e))
    } else {
        KeystoneError::Refused(Box::new(e))
    }
}
