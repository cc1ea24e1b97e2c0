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

const SVC: ServiceKind = ServiceKind::Identity;

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

    fn path(&self) -> String {
        format!("users/{}/application_credentials", self.session.user_id())
    }

    /// Creates an application credential of the session's user on its project. The secret is only
    /// returned here, once.
    ///
    /// Errors: 409 `Conflict` when the user already has one with this name.
    pub async fn create_application_credential(
        &self,
        req: &ApplicationCredentialCreate,
    ) -> Result<NewApplicationCredential, CloudError> {
        let r = ApiRequest::post(
            SVC,
            "application_credential.create",
            self.path(),
            body("application_credential", req)?,
        );
        let created: CreatedWire = fetch(self.session, r, "application_credential").await?;
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
