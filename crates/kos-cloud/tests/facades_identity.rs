//! The Keystone facade against kos-sim: token info, application credentials create/list/get/delete,
//! with the secret returned once and never printed.

mod facades_support;

use facades_support::{R, start};
use kos_cloud::ApiErrorKind;
use kos_cloud::model::identity::ApplicationCredentialCreate;
use secrecy::ExposeSecret;

#[tokio::test]
async fn token_info_comes_from_the_session() -> R {
    let c = start().await?;
    let t = c.session.identity().token_info();
    assert_eq!(t.user_id, c.session.user_id());
    assert_eq!(t.project_id, c.session.project_id());
    assert!(
        t.expires_at.is_some_and(|e| e > chrono::Utc::now()),
        "{t:?}"
    );
    Ok(())
}

#[tokio::test]
async fn application_credential_lifecycle() -> R {
    let c = start().await?;
    let ks = c.session.identity();
    let req = ApplicationCredentialCreate {
        name: "kos-t1-ccm".into(),
        description: Some("kos-ccm of cluster t1".into()),
        ..Default::default()
    };
    let created = ks.create_application_credential(&req).await?;
    assert!(!created.secret.expose_secret().is_empty());
    assert!(
        !format!("{created:?}").contains(created.secret.expose_secret()),
        "the secret leaked into Debug"
    );
    let id = created.credential.id.clone();

    let again = ks
        .create_application_credential(&req)
        .await
        .err()
        .ok_or("a duplicate name was accepted")?;
    assert_eq!(again.kind(), Some(ApiErrorKind::Conflict), "{again}");

    let by_name = ks.list_application_credentials(Some("kos-t1-ccm")).await?;
    assert_eq!(
        by_name.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        vec![id.as_str()]
    );
    assert!(
        ks.list_application_credentials(None)
            .await?
            .iter()
            .any(|a| a.id == id)
    );
    assert_eq!(
        ks.get_application_credential(&id).await?.map(|a| a.name),
        Some("kos-t1-ccm".to_owned())
    );
    ks.delete_application_credential(&id).await?;
    ks.delete_application_credential(&id).await?;
    assert!(ks.get_application_credential(&id).await?.is_none());
    Ok(())
}

/// Creates of one user with equal access rules, at once (two clusters made together, the CCM's
/// and a test's): Keystone fails all but one of those that insert a rule with a 409 naming the
/// credential (kos-sim holds each insert two real seconds, so they overlap). The facade tells that
/// from a name in use, since no credential of the name exists, and sends it again: every one is
/// made. A name that is taken is still a 409.
#[tokio::test]
async fn creates_with_shared_access_rules_all_succeed() -> R {
    use kos_cloud::model::identity::AccessRule;
    let c = facades_support::start_with(kos_sim::SimConfig {
        latency: kos_sim::LatencyModel {
            app_credential_commit_secs: 2000.0,
            ..kos_sim::LatencyModel::instant()
        },
        ..kos_sim::SimConfig::fast()
    })
    .await?;
    let ks = c.session.identity();
    let req = |name: &str| ApplicationCredentialCreate {
        name: name.into(),
        access_rules: vec![AccessRule {
            service: "compute".into(),
            method: "GET".into(),
            path: "/compute/v2.1/servers".into(),
        }],
        ..Default::default()
    };
    let (a, b, d) = (req("kos-a-ccm"), req("kos-b-ccm"), req("kos-c-ccm"));
    let made = futures::future::join_all([
        ks.create_application_credential(&a),
        ks.create_application_credential(&b),
        ks.create_application_credential(&d),
    ])
    .await;
    for m in made {
        let m = m?;
        assert_eq!(m.credential.access_rules.len(), 1, "{:?}", m.credential);
    }
    assert!(c.session.counters().retries >= 1, "no create lost the race");
    let taken = ks
        .create_application_credential(&a)
        .await
        .err()
        .ok_or("a taken name was accepted")?;
    assert_eq!(taken.kind(), Some(ApiErrorKind::Conflict), "{taken}");
    Ok(())
}

/// A create whose answer is lost (a 5xx; a connection cut after the request went out is told the
/// same): whether Keystone stored the credential or not, the facade ends with exactly one of the
/// name, the one whose secret it returns. One Keystone stored is useless without the lost secret,
/// so it is deleted before the create is sent again.
#[tokio::test]
async fn a_create_whose_answer_was_lost_ends_with_one_usable_credential() -> R {
    for stored in [false, true] {
        let rule = serde_json::from_value(serde_json::json!({
            "method": "POST", "path": "/application_credentials$", "status": 500, "count": 1,
            "after_side_effect": stored,
        }))?;
        let c = facades_support::start_with(kos_sim::SimConfig {
            faults: vec![rule],
            ..kos_sim::SimConfig::fast()
        })
        .await?;
        let ks = c.session.identity();
        let req = ApplicationCredentialCreate {
            name: "kos-t1-ccm".into(),
            ..Default::default()
        };
        let made = ks.create_application_credential(&req).await?;
        let listed: Vec<String> = ks
            .list_application_credentials(Some("kos-t1-ccm"))
            .await?
            .into_iter()
            .map(|a| a.id)
            .collect();
        assert_eq!(
            listed,
            std::slice::from_ref(&made.credential.id),
            "stored first: {stored}"
        );
        assert_eq!(c.session.counters().retries, 1, "stored first: {stored}");
        // The secret returned is the live credential's: it authenticates.
        let profile = kos_cloud::CloudProfile {
            name: "sim-ccm".into(),
            auth: kos_cloud::ProfileAuth::ApplicationCredential {
                credential: kos_cloud::AppCredentialRef::Id(made.credential.id.clone()),
                secret: made.secret.clone(),
            },
            ..c.profile.clone()
        };
        kos_cloud::Session::connect(&profile).await?;
    }
    Ok(())
}
