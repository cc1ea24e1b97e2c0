//! Password auth, the token's identity, and an application credential that authenticates a second
//! session (what the CCM and CSI run with), then is deleted.

use anyhow::{Result, ensure};
use kos_cloud::model::identity::ApplicationCredentialCreate;
use kos_cloud::model::network::NetworkFilter;
use kos_cloud::{AppCredentialRef, CloudProfile, ProfileAuth, Session};

use crate::{Ctx, Made};

pub async fn identity(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let id = ctx.session.identity();
        let info = id.token_info();
        ensure!(
            !info.user_id.is_empty() && !info.project_id.is_empty(),
            "token without identity: {info:?}"
        );
        ensure!(info.expires_at.is_some(), "token without expiry");

        let cred = id
            .create_application_credential(&ApplicationCredentialCreate {
                name: ctx.run.name("appcred"),
                description: Some("kos-e2e identity scenario".into()),
                ..Default::default()
            })
            .await?;
        made.push(Made::AppCredential(cred.credential.id.clone()));
        ensure!(
            !cred.credential.unrestricted,
            "credential should be restricted"
        );

        let profile = CloudProfile {
            name: format!("{}-appcred", ctx.profile.name),
            auth: ProfileAuth::ApplicationCredential {
                credential: AppCredentialRef::Id(cred.credential.id.clone()),
                secret: cred.secret.clone(),
            },
            ..ctx.profile.clone()
        };
        let s2 = Session::connect(&profile).await?;
        let info2 = s2.identity().token_info();
        ensure!(
            info2.project_id == info.project_id && info2.user_id == info.user_id,
            "app-credential session is someone else: {info2:?} vs {info:?}"
        );
        // Discovery ran for the second session too: a network call works.
        s2.network()
            .list_networks(&NetworkFilter::default())
            .await?;

        let listed = id
            .list_application_credentials(Some(&ctx.run.name("appcred")))
            .await?;
        ensure!(
            listed.len() == 1,
            "listed {} credentials by name",
            listed.len()
        );
        id.delete_application_credential(&cred.credential.id)
            .await?;
        ensure!(
            id.get_application_credential(&cred.credential.id)
                .await?
                .is_none(),
            "credential still there after delete"
        );
        ensure!(
            Session::connect(&profile).await.is_err(),
            "a deleted application credential still authenticates"
        );
        Ok(())
    })
    .await
}
