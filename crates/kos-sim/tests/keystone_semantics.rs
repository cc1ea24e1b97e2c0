//! Keystone's application credentials as strictly as Keystone: roles only from the creator's token
//! (with what they imply), no expiry in the past, an expired credential does not authenticate and
//! its tokens end with it, a restricted credential makes no other.

mod common;

use common::Harness;
use kos_sim::SimConfig;
use serde_json::{Value, json};

fn creds_path(h: &Harness) -> String {
    format!("/identity/v3/users/{}/application_credentials", h.user_id)
}

async fn create(h: &Harness, body: Value) -> common::Resp {
    h.call(
        "POST",
        &creds_path(h),
        Some(json!({"application_credential": body})),
        None,
    )
    .await
}

fn names(roles: &Value) -> Vec<String> {
    let mut n: Vec<String> = roles
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect();
    n.sort();
    n
}

/// Authenticates with an application credential: the status, the token and its body.
async fn auth(h: &Harness, id: &str, secret: &str) -> (u16, Option<String>, Value) {
    let r = h
        .http
        .post(format!("{}/auth/tokens", h.sim.auth_url()))
        .json(
            &json!({"auth": {"identity": {"methods": ["application_credential"],
            "application_credential": {"id": id, "secret": secret}}}}),
        )
        .send()
        .await
        .expect("keystone answers");
    let status = r.status().as_u16();
    let token = r
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = r.json().await.unwrap_or(Value::Null);
    (status, token, body)
}

fn in_days(days: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::days(days))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[tokio::test]
async fn roles_are_a_subset_of_the_creators_with_what_they_imply() {
    let h = Harness::with_config(SimConfig {
        user_roles: vec!["member".into(), "load-balancer_member".into()],
        ..SimConfig::fast()
    })
    .await;

    // admin exists but is not the user's: Keystone answers 400, not 403.
    let r = create(&h, json!({"name": "a", "roles": [{"name": "admin"}]})).await;
    assert_eq!(r.status, 400, "{}", r.json);
    assert!(r.json.to_string().contains("unassigned role"), "{}", r.json);
    // A role that does not exist at all: 404.
    let r = create(
        &h,
        json!({"name": "a", "roles": [{"name": "no-such-role"}]}),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.json);

    // member brings reader, which it implies; load-balancer_member is left out.
    let r = create(&h, json!({"name": "a", "roles": [{"name": "member"}]})).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let c = &r.json["application_credential"];
    assert_eq!(names(&c["roles"]), ["member", "reader"]);
    let (status, _, tok) = auth(
        &h,
        c["id"].as_str().expect("id"),
        c["secret"].as_str().expect("secret"),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(
        names(&tok["token"]["roles"]),
        ["member", "reader"],
        "a token of the credential carries its roles only"
    );

    // No roles asked: the creator's token's, all of them.
    let r = create(&h, json!({"name": "b"})).await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(
        names(&r.json["application_credential"]["roles"]),
        ["load-balancer_member", "member", "reader"]
    );
}

#[tokio::test]
async fn an_expiry_in_the_past_or_malformed_is_refused() {
    let h = Harness::new().await;
    let r = create(&h, json!({"name": "a", "expires_at": in_days(-1)})).await;
    assert_eq!(r.status, 400, "{}", r.json);
    assert!(
        r.json.to_string().contains("must not be before now"),
        "{}",
        r.json
    );
    // Keystone appends a Z before parsing: a numeric offset is malformed.
    let r = create(
        &h,
        json!({"name": "a", "expires_at": "2099-01-01T00:00:00+00:00"}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.json);
    let r = create(&h, json!({"name": "a", "expires_at": in_days(90)})).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let at = r.json["application_credential"]["expires_at"]
        .as_str()
        .expect("expires_at");
    // As the API reference shows it: microseconds, no zone.
    assert!(
        at.len() == 26 && !at.ends_with('Z'),
        "expires_at as Keystone writes it: {at}"
    );
}

#[tokio::test]
async fn an_expired_credential_does_not_authenticate_and_its_tokens_end() {
    let h = Harness::new().await;
    let r = create(&h, json!({"name": "a", "expires_at": in_days(90)})).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let c = &r.json["application_credential"];
    let (id, secret) = (
        c["id"].as_str().expect("id"),
        c["secret"].as_str().expect("secret"),
    );
    let (status, token, tok) = auth(&h, id, secret).await;
    assert_eq!(status, 201);
    let token = token.expect("a token");
    // The token ends no later than the credential.
    let ends = tok["token"]["expires_at"].as_str().expect("expires_at");
    assert!(ends < in_days(91).as_str(), "{ends}");

    // Time passes: the credential expires.
    let r = h
        .http
        .post(h.url(&format!("/_sim/app-credentials/{id}/expiry")))
        .json(&json!({"expires_at": in_days(-1)}))
        .send()
        .await
        .expect("admin");
    assert_eq!(r.status().as_u16(), 204);
    let (status, token2, body) = auth(&h, id, secret).await;
    assert_eq!(status, 401, "{body}");
    assert!(token2.is_none());
    assert_eq!(
        body["error"]["message"],
        "The request you have made requires authentication."
    );
    let r = h
        .http
        .get(h.url("/identity/v3/auth/catalog"))
        .header("x-auth-token", &token)
        .send()
        .await
        .expect("catalog");
    assert_eq!(r.status().as_u16(), 401, "its tokens ended with it");
}

#[tokio::test]
async fn a_restricted_credential_makes_no_other() {
    let h = Harness::new().await;
    let r = create(&h, json!({"name": "a"})).await;
    let c = &r.json["application_credential"];
    let (_, token, _) = auth(
        &h,
        c["id"].as_str().expect("id"),
        c["secret"].as_str().expect("secret"),
    )
    .await;
    let r = h
        .http
        .post(h.url(&creds_path(&h)))
        .header("x-auth-token", token.expect("token"))
        .json(&json!({"application_credential": {"name": "b"}}))
        .send()
        .await
        .expect("create");
    assert_eq!(r.status().as_u16(), 403);
}
