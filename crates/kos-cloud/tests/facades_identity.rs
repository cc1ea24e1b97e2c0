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
