//! Password auth, the token's identity, and an application credential that authenticates a second
//! session (what the CCM and CSI run with), then is deleted; one that expires stops authenticating
//! (what `kos up`'s rotation then replaces).

use anyhow::{Result, ensure};
use kos_cloud::model::identity::ApplicationCredentialCreate;
use kos_cloud::model::network::NetworkFilter;
use kos_cloud::{AppCredentialRef, CloudProfile, ProfileAuth, Session};

use crate::{Cleanup, Ctx, Made};

/// A session on an application credential made as kos makes the CCM's
/// ([`kos_cluster::credential::request`]): the roles kos chooses from the user's token, never
/// admin, expiring in a day. The credential is deleted with the scenario's other objects.
pub(crate) async fn ccm_session(ctx: &Ctx, made: &mut Cleanup) -> Result<Session> {
    let roles = kos_cluster::credential::ccm_roles(&ctx.session.token_roles())?;
    // Names are unique per user: one per session made, as scenarios may share a run.
    static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut req = kos_cluster::credential::request(
        &ctx.run.name(&format!("ccmcred{n}")),
        "e2e",
        &roles,
        1,
        chrono::Utc::now(),
    );
    if let Some(calls) = ctx.access_rules() {
        req.access_rules = kos_cluster::access_rules::rules_for(&ctx.session, calls).await;
    }
    let cred = ctx
        .session
        .identity()
        .create_application_credential(&req)
        .await?;
    made.push(Made::AppCredential(cred.credential.id.clone()));
    let got: Vec<String> = cred
        .credential
        .roles
        .iter()
        .filter_map(|r| r.name.clone())
        .collect();
    ensure!(
        roles.iter().all(|r| got.contains(r)) && !got.iter().any(|r| r == "admin"),
        "credential roles {got:?}, asked for {roles:?}"
    );
    let left = cred
        .credential
        .expires()
        .map(|at| at - chrono::Utc::now())
        .ok_or_else(|| anyhow::anyhow!("the credential has no expiry"))?;
    ensure!(
        left > chrono::Duration::hours(23) && left <= chrono::Duration::hours(24),
        "expires in {left}"
    );
    let profile = CloudProfile {
        name: format!("{}-ccmcred", ctx.profile.name),
        auth: ProfileAuth::ApplicationCredential {
            credential: AppCredentialRef::Id(cred.credential.id.clone()),
            secret: cred.secret.clone(),
        },
        ..ctx.profile.clone()
    };
    let session = Session::connect(&profile).await?;
    ensure!(
        cred.credential.access_rules.len() == req.access_rules.len(),
        "Keystone kept {} of {} access rules",
        cred.credential.access_rules.len(),
        req.access_rules.len()
    );
    Ok(session.with_retry_policy(ctx.session.retry_policy().clone()))
}

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

        // One that expires: Keystone refuses an expiry in the past, so a few seconds ahead.
        let short = id
            .create_application_credential(&ApplicationCredentialCreate {
                name: ctx.run.name("appcred-short"),
                expires_at: Some(kos_cloud::model::identity::keystone_expiry(
                    chrono::Utc::now() + chrono::Duration::seconds(5),
                )),
                ..Default::default()
            })
            .await?;
        made.push(Made::AppCredential(short.credential.id.clone()));
        let short_profile = CloudProfile {
            auth: ProfileAuth::ApplicationCredential {
                credential: AppCredentialRef::Id(short.credential.id.clone()),
                secret: short.secret.clone(),
            },
            ..profile.clone()
        };
        tokio::time::sleep(std::time::Duration::from_secs(7)).await;
        ensure!(
            Session::connect(&short_profile).await.is_err(),
            "an expired application credential still authenticates"
        );
        id.delete_application_credential(&short.credential.id)
            .await?;
        Ok(())
    })
    .await
}
