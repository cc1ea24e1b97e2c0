//! Keystone facade: who the session is, and application credentials (created for the in-cluster CCM and
//! CSI, which must not hold the user's password).

use secrecy::SecretString;

use crate::error::CloudError;
use crate::model::identity::{
    ApplicationCredential, ApplicationCredentialCreate, CreatedWire, NewApplicationCredential,
    TokenInfo,
};
use crate::paging::util::{body, fetch, found, gone, run};
use crate::request::{ApiRequest, ServiceKind};
use crate::session::Session;
use openstack_sdk::api::AsyncClient;

const SVC: ServiceKind = ServiceKind::Identity;
const PLACEHOLDER: &str = "kos-access-rule";

/// Where a service's access rules point: see [`IdentityApi::rule_target`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleTarget {
    /// The catalog types the catalog lists for the service, e.g. `["block-storage", "volumev3"]`.
    pub types: Vec<String>,
    /// The path every request to it starts with, ending in `/`: `/compute/v2.1/`, `/v2.0/`.
    pub prefix: String,
}

/// Keystone, through one session: `session.identity()`.
#[derive(Debug, Clone, Copy)]
pub struct IdentityApi<'a> {
    session: &'a Session,
}

impl Session {
    pub fn identity(&self) -> IdentityApi<'_> {
        IdentityApi { session: self }
    }
}

impl IdentityApi<'_> {
    /// The session's user, project and token expiry (no API call).
    pub fn token_info(&self) -> TokenInfo {
        TokenInfo {
            user_id: self.session.user_id().to_owned(),
            project_id: self.session.project_id().to_owned(),
            region: self.session.region().map(str::to_owned),
            expires_at: self.session.token_expires_at(),
        }
    }

    /// What an access rule for `service` names, as this session reaches it: the catalog types
    /// listed for it and the path prefix its requests carry. `None` when the catalog lacks it.
    ///
    /// A service's keystonemiddleware compares a rule's `service` with its own
    /// `[keystone_authtoken] service_type`, which no API shows: every alias the catalog lists is
    /// named (Cinder's `block-storage` and `volumev3`). It matches a rule's `path` against the whole
    /// path it is asked for: the discovered endpoint's path (`/compute/v2.1/`, Cinder's
    /// `/volume/v3/<project>/`) comes first.
    pub async fn rule_target(&self, service: ServiceKind) -> Option<RuleTarget> {
        let catalog = self
            .session
            .inner
            .client
            .get_token_catalog()
            .unwrap_or_default();
        let types: Vec<String> = crate::session::catalog_aliases(service)
            .iter()
            .filter(|a| catalog.iter().any(|c| c.service_type == **a))
            .map(|a| (*a).to_owned())
            .collect();
        if types.is_empty() {
            return None;
        }
        let endpoint = self
            .session
            .inner
            .client
            .get_service_endpoint(&service.sdk(), None)
            .await
            .ok()?;
        // The URL kos's own requests take, for a placeholder relative path.
        let url = endpoint.build_request_url(PLACEHOLDER).ok()?;
        let prefix = url.path().strip_suffix(PLACEHOLDER)?.to_owned();
        Some(RuleTarget { types, prefix })
    }

    fn path(&self) -> String {
        format!("users/{}/application_credentials", self.session.user_id())
    }

    /// Creates an application credential of the session's user on its project. The secret is only
    /// returned here, once.
    ///
    /// Keystone keeps one access-rule row per user and (service, path, method), shared by that
    /// user's credentials, and inserts a missing one inside the create's transaction. Two creates of
    /// one user that insert the same rule at once collide on that row's unique key: the later one
    /// fails with the 409 of a duplicate name, naming its own credential
    /// (keystone/application_credential/backends/sql.py, `duplicate_access_rule_for_user_constraint`
    /// under `handle_conflicts`). Nothing was stored, so such a create is sent again when no
    /// credential of its name exists; by then the rows it needs are there.
    ///
    /// A create whose answer was lost (a 5xx, or the connection cut after the request went out) is
    /// settled here rather than left to the caller: names are unique per user and a taken one is
    /// refused, so a credential of this name found then is this create's own, and useless, its
    /// secret being in the lost answer. It is deleted and the create sent again.
    ///
    /// Errors: 409 `Conflict` when the user already has one with this name; [`CloudError::Ambiguous`]
    /// when the retries ran out with the outcome still unknown.
    pub async fn create_application_credential(
        &self,
        req: &ApplicationCredentialCreate,
    ) -> Result<NewApplicationCredential, CloudError> {
        let mut budget = crate::retry::Budget::default();
        let created = loop {
            budget.attempts += 1;
            let r = ApiRequest::post(
                SVC,
                "application_credential.create",
                self.path(),
                body("application_credential", req)?,
            );
            let (e, reason) = match fetch::<CreatedWire>(self.session, r, "application_credential")
                .await
            {
                Err(e) if e.status() == Some(409) && !req.access_rules.is_empty() => {
                    if !self
                        .list_application_credentials(Some(&req.name))
                        .await?
                        .is_empty()
                    {
                        return Err(e);
                    }
                    (e, crate::retry::RetryReason::Contended)
                }
                Err(e @ CloudError::Ambiguous { .. }) => (e, crate::retry::RetryReason::Transport),
                other => break other?,
            };
            let Some(delay) =
                budget.retry(self.session.retry_policy(), reason, None, &mut rand::rng())
            else {
                return Err(e);
            };
            if reason == crate::retry::RetryReason::Transport {
                for lost in self.list_application_credentials(Some(&req.name)).await? {
                    tracing::warn!(name = %req.name, id = %lost.id, "deleting the application credential whose create answer was lost");
                    self.delete_application_credential(&lost.id).await?;
                }
            }
            let wait = self.session.schedule_retry(delay);
            self.session.record_retry();
            tracing::debug!(
                name = %req.name,
                delay_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "application credential create retried: {e}"
            );
            tokio::time::sleep(wait).await;
        };
        let secret = created.secret.ok_or_else(|| CloudError::Decode {
            service: SVC,
            operation: "application_credential.create",
            detail: "Keystone returned no secret".into(),
        })?;
        // From now on this secret is one of the session's: keep it out of every later error message.
        let secret = SecretString::from(secret);
        self.session.redactor().add(secret.clone());
        Ok(NewApplicationCredential {
            credential: created.credential,
            secret,
        })
    }

    /// The user's application credentials, optionally only the one called `name`.
    pub async fn list_application_credentials(
        &self,
        name: Option<&str>,
    ) -> Result<Vec<ApplicationCredential>, CloudError> {
        let mut r = ApiRequest::get(SVC, "application_credential.list", self.path());
        if let Some(n) = name {
            r = r.query("name", n);
        }
        fetch(self.session, r, "application_credentials").await
    }

    pub async fn get_application_credential(
        &self,
        id: &str,
    ) -> Result<Option<ApplicationCredential>, CloudError> {
        let r = ApiRequest::get(
            SVC,
            "application_credential.get",
            format!("{}/{id}", self.path()),
        );
        found(fetch(self.session, r, "application_credential").await)
    }

    /// Deletes; already gone is fine.
    pub async fn delete_application_credential(&self, id: &str) -> Result<(), CloudError> {
        let r = ApiRequest::delete(
            SVC,
            "application_credential.delete",
            format!("{}/{id}", self.path()),
        );
        gone(run(self.session, r).await)
    }
}
