//! Application-credential access rules as Keystone keeps them and keystonemiddleware enforces them:
//! the rules are checked against Keystone's schema, returned, put into the token, and every
//! service (Keystone itself included) refuses with a 401 a request no rule allows. A rule matches
//! one service type, one method, and the whole path the service is asked for, its endpoint's
//! prefix included; `*` is one path segment, `**` any number.

mod common;

use common::Harness;
use kos_sim::keystone::{AccessRule, path_matches, request_allowed};
use kos_sim::{Service, SimConfig};
use serde_json::{Value, json};

fn rule(service: &str, method: &str, path: &str) -> AccessRule {
    AccessRule {
        id: "r".into(),
        service: service.into(),
        method: method.into(),
        path: path.into(),
    }
}

#[test]
fn paths_match_as_keystonemiddleware_matches_them() {
    // `*`: exactly one non-empty segment.
    assert!(path_matches("/v2.1/servers/abc", "/v2.1/servers/*"));
    assert!(!path_matches("/v2.1/servers/abc/action", "/v2.1/servers/*"));
    assert!(!path_matches("/v2.1/servers/", "/v2.1/servers/*"));
    assert!(!path_matches("/v2.1/servers", "/v2.1/servers/*"));
    // `{name}` is a segment too.
    assert!(path_matches(
        "/v2.1/servers/abc/action",
        "/v2.1/servers/{id}/action"
    ));
    // `**`: anything, several segments or none.
    assert!(path_matches("/v2.1/servers/a/b/c", "/v2.1/servers/**"));
    assert!(path_matches("/v2.1/servers/", "/v2.1/servers/**"));
    assert!(!path_matches("/v2.1/servers", "/v2.1/servers/**"));
    assert!(path_matches("/compute/v2.1/flavors", "/**/flavors"));
    // The whole path, prefix included: a rule written without the endpoint's `/compute` misses.
    assert!(!path_matches(
        "/compute/v2.1/servers/abc",
        "/v2.1/servers/*"
    ));
    assert!(!path_matches(
        "/v2.1/servers/abc",
        "/compute/v2.1/servers/*"
    ));
    assert!(!path_matches("/v2.1/servers/abcx", "/v2.1/servers/abc"));
    // Other characters go into the regular expression as they are: `.` is any character.
    assert!(path_matches("/v2x1/servers", "/v2.1/servers"));
}

#[test]
fn a_rule_allows_one_service_type_and_method() {
    let rules = [rule("compute", "GET", "/compute/v2.1/servers/*")];
    let ok = |svc, m, p| request_allowed(&rules, Some(svc), m, p);
    assert!(ok("compute", "GET", "/compute/v2.1/servers/s1"));
    assert!(!ok("compute", "DELETE", "/compute/v2.1/servers/s1"));
    assert!(!ok("network", "GET", "/compute/v2.1/servers/s1"));
    // A service without `service_type` refuses every token with rules, even a matching request.
    assert!(!request_allowed(
        &rules,
        None,
        "GET",
        "/compute/v2.1/servers/s1"
    ));
    // No rules: nothing is checked, with or without `service_type`.
    assert!(request_allowed(&[], None, "DELETE", "/anything"));
    // Keystone lets any token be validated.
    assert!(request_allowed(
        &rules,
        Some("identity"),
        "GET",
        "/identity/v3/auth/tokens"
    ));
    assert!(!request_allowed(
        &rules,
        Some("identity"),
        "HEAD",
        "/identity/v3/auth/tokens"
    ));
}

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

/// A token of the credential `id`, and the token's body.
async fn token_of(h: &Harness, id: &str, secret: &str) -> (String, Value) {
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
    assert_eq!(r.status().as_u16(), 201);
    let token = r
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .expect("a token")
        .to_owned();
    (token, r.json().await.expect("token body"))
}

async fn call_as(h: &Harness, token: &str, method: &str, path: &str) -> u16 {
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    h.http
        .request(m, h.url(path))
        .header("x-auth-token", token)
        .send()
        .await
        .expect("answer")
        .status()
        .as_u16()
}

#[tokio::test]
async fn keystone_refuses_rules_its_schema_refuses() {
    let h = Harness::new().await;
    let bad = [
        json!("not a list"),
        json!(["not an object"]),
        json!([{"service": "compute", "method": "GET", "path": "v2.1/servers"}]),
        json!([{"service": "compute", "method": "get", "path": "/v2.1/servers"}]),
        json!([{"service": "compute", "method": "OPTIONS", "path": "/v2.1/servers"}]),
        json!([{"service": "comp ute", "method": "GET", "path": "/v2.1/servers"}]),
        json!([{"service": "", "method": "GET", "path": "/v2.1/servers"}]),
        json!([{"service": "compute", "method": "GET", "path": format!("/{}", "a".repeat(225))}]),
        json!([{"service": "compute", "method": "GET", "path": 7}]),
    ];
    for (i, rules) in bad.into_iter().enumerate() {
        let r = create(
            &h,
            json!({"name": format!("bad{i}"), "access_rules": rules}),
        )
        .await;
        assert_eq!(r.status, 400, "{rules}: {}", r.json);
    }
    // The backend reads all three fields: one missing is Keystone's 500.
    let r = create(
        &h,
        json!({"name": "half", "access_rules": [{"service": "compute"}]}),
    )
    .await;
    assert_eq!(r.status, 500, "{}", r.json);
    // Nothing was made.
    let l = h.call("GET", &creds_path(&h), None, None).await;
    assert_eq!(l.json["application_credentials"], json!([]));
}

#[tokio::test]
async fn rules_are_kept_returned_and_carried_by_the_token() {
    let h = Harness::new().await;
    let rules = json!([
        {"service": "compute", "method": "GET", "path": "/compute/v2.1/servers/**"},
        {"service": "block-storage", "method": "GET", "path": format!("/volume/v3/{}/volumes/detail", h.project_id)},
    ]);
    let r = create(&h, json!({"name": "limited", "access_rules": rules})).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let c = &r.json["application_credential"];
    let id = c["id"].as_str().expect("id").to_owned();
    let secret = c["secret"].as_str().expect("secret").to_owned();
    let got = h
        .call("GET", &format!("{}/{id}", creds_path(&h)), None, None)
        .await;
    let kept = &got.json["application_credential"]["access_rules"];
    assert_eq!(kept.as_array().map(Vec::len), Some(2), "{kept}");
    for (k, want) in kept
        .as_array()
        .into_iter()
        .flatten()
        .zip(rules.as_array().into_iter().flatten())
    {
        assert_eq!(
            (&k["service"], &k["method"], &k["path"]),
            (&want["service"], &want["method"], &want["path"])
        );
        assert!(
            k["id"].as_str().is_some_and(|i| !i.is_empty()),
            "each rule has an id: {k}"
        );
    }
    // A second credential with an equal rule shares the user's rule (its id).
    let r2 = create(
        &h,
        json!({"name": "again", "access_rules": [rules[0].clone()]}),
    )
    .await;
    assert_eq!(
        r2.json["application_credential"]["access_rules"][0]["id"],
        kept[0]["id"]
    );

    let (token, body) = token_of(&h, &id, &secret).await;
    assert_eq!(
        body["token"]["application_credential"]["access_rules"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{body}"
    );
    // Allowed: any depth under servers (`**`), the exact volume list.
    assert_eq!(
        call_as(&h, &token, "GET", "/compute/v2.1/servers/detail").await,
        200
    );
    let vols = format!("/volume/v3/{}/volumes/detail", h.project_id);
    assert_eq!(call_as(&h, &token, "GET", &vols).await, 200);
    // Refused with a 401: another method, another path, another service, Keystone itself.
    assert_eq!(
        call_as(&h, &token, "POST", "/compute/v2.1/servers/x/action").await,
        401
    );
    assert_eq!(
        call_as(&h, &token, "GET", "/compute/v2.1/flavors/detail").await,
        401
    );
    assert_eq!(call_as(&h, &token, "GET", "/network/v2.0/ports").await, 401);
    let v = format!("/volume/v3/{}/volumes", h.project_id);
    assert_eq!(call_as(&h, &token, "GET", &v).await, 401);
    assert_eq!(
        call_as(
            &h,
            &token,
            "GET",
            &format!("/identity/v3/users/{}/application_credentials", h.user_id)
        )
        .await,
        401
    );
    // Unversioned discovery documents sit outside the services' auth pipeline.
    assert_eq!(call_as(&h, &token, "GET", "/compute/").await, 200);

    // A credential without rules: its token carries none and may call anything its roles allow.
    let r = create(&h, json!({"name": "open"})).await;
    let c = &r.json["application_credential"];
    assert_eq!(c["access_rules"], json!([]));
    let (open, body) = token_of(
        &h,
        c["id"].as_str().expect("id"),
        c["secret"].as_str().expect("secret"),
    )
    .await;
    assert!(
        body["token"]["application_credential"]
            .get("access_rules")
            .is_none(),
        "{body}"
    );
    assert_eq!(call_as(&h, &open, "GET", "/network/v2.0/ports").await, 200);
}

#[tokio::test]
async fn a_service_without_service_type_refuses_every_token_with_rules() {
    let h = Harness::with_config(SimConfig {
        no_service_type: vec![Service::Network],
        ..SimConfig::fast()
    })
    .await;
    let r = create(
        &h,
        json!({"name": "n", "access_rules": [
            {"service": "network", "method": "GET", "path": "/network/v2.0/ports"},
            {"service": "compute", "method": "GET", "path": "/compute/v2.1/servers/detail"},
        ]}),
    )
    .await;
    let c = &r.json["application_credential"];
    let (token, _) = token_of(
        &h,
        c["id"].as_str().expect("id"),
        c["secret"].as_str().expect("secret"),
    )
    .await;
    assert_eq!(call_as(&h, &token, "GET", "/network/v2.0/ports").await, 401);
    assert_eq!(
        call_as(&h, &token, "GET", "/compute/v2.1/servers/detail").await,
        200
    );
    // The user's own token has no rules: Neutron serves it.
    assert_eq!(
        call_as(&h, &h.token, "GET", "/network/v2.0/ports").await,
        200
    );
}

#[tokio::test]
async fn each_request_of_a_credential_with_rules_is_recorded_with_the_rules_that_allowed_it() {
    let h = Harness::new().await;
    let rules = json!([
        {"service": "compute", "method": "GET", "path": "/compute/v2.1/servers/*"},
        {"service": "compute", "method": "GET", "path": "/compute/v2.1/servers/detail"},
        {"service": "network", "method": "GET", "path": "/network/v2.0/networks"},
    ]);
    let r = create(&h, json!({"name": "seen", "access_rules": rules})).await;
    let c = &r.json["application_credential"];
    let id = c["id"].as_str().expect("id").to_owned();
    let rule_id = |i: usize| {
        c["access_rules"][i]["id"]
            .as_str()
            .expect("rule id")
            .to_owned()
    };
    let (token, _) = token_of(&h, &id, c["secret"].as_str().expect("secret")).await;
    assert_eq!(
        call_as(&h, &token, "GET", "/compute/v2.1/servers/detail").await,
        200
    );
    assert_eq!(
        call_as(&h, &token, "GET", "/network/v2.0/networks").await,
        200
    );
    assert_eq!(call_as(&h, &token, "GET", "/network/v2.0/ports").await, 401);
    // The user's own token carries no rules: nothing is recorded for it.
    assert_eq!(
        call_as(&h, &h.token, "GET", "/network/v2.0/ports").await,
        200
    );
    let obs = h.sim.app().observations();
    let seen: Vec<(String, String, bool, Vec<String>)> = obs
        .rule_checks
        .get(&id)
        .into_iter()
        .flatten()
        .filter(|c| c.service_type.as_deref() != Some("identity"))
        .map(|c| {
            (
                c.method.clone(),
                c.path.clone(),
                c.allowed,
                c.matched.iter().map(|r| r.id.clone()).collect(),
            )
        })
        .collect();
    let get = |p: &str| ("GET".to_owned(), p.to_owned());
    let want = vec![
        // Both compute rules allow the list: neither is needed for it alone.
        {
            let (m, p) = get("/compute/v2.1/servers/detail");
            (m, p, true, vec![rule_id(0), rule_id(1)])
        },
        {
            let (m, p) = get("/network/v2.0/networks");
            (m, p, true, vec![rule_id(2)])
        },
        {
            let (m, p) = get("/network/v2.0/ports");
            (m, p, false, vec![])
        },
    ];
    assert_eq!(seen, want);
    assert_eq!(obs.rule_checks.len(), 1, "only the credential with rules");
}

/// Keystone's `access_rule` rows are unique per user and (service, path, method), and a create
/// inserts the ones it needs inside its transaction: of two creates of one user that insert the
/// same rule at once, the later commit fails with the 409 of a duplicate name (naming its own
/// credential), and nothing of it is stored. The rows outlive their credentials: a rule made again
/// after every credential holding it is gone keeps its id.
#[tokio::test]
async fn creates_racing_to_insert_one_rule_fail_as_keystones_do() {
    // Each create that inserts a rule holds it two real seconds before it commits: the two
    // creates sent together overlap, whatever the machine's load.
    let h = Harness::with_config(SimConfig {
        latency: kos_sim::LatencyModel {
            app_credential_commit_secs: 2000.0,
            ..kos_sim::LatencyModel::instant()
        },
        ..SimConfig::fast()
    })
    .await;
    let rules = json!([{"service": "compute", "method": "GET", "path": "/compute/v2.1/servers"}]);
    let (a, b) = tokio::join!(
        create(&h, json!({"name": "race-a", "access_rules": rules})),
        create(&h, json!({"name": "race-b", "access_rules": rules})),
    );
    let (won, lost, loser) = match (a.status, b.status) {
        (201, 409) => (a, b, "race-b"),
        (409, 201) => (b, a, "race-a"),
        other => panic!(
            "one of two racing creates fails, not {other:?}: {} {}",
            a.json, b.json
        ),
    };
    assert_eq!(
        lost.json["error"]["message"],
        format!(
            "Conflict occurred attempting to store application_credential - Duplicate entry \
             found with name {loser}."
        )
    );
    let listed = h.call("GET", &creds_path(&h), None, None).await;
    let names: Vec<&str> = listed.json["application_credentials"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(!names.contains(&loser), "the loser was stored: {names:?}");
    // Sent again, it finds the row the winner stored: nothing to insert, no conflict.
    let again = create(&h, json!({"name": loser, "access_rules": rules})).await;
    assert_eq!(again.status, 201, "{}", again.json);
    let rule_id = &won.json["application_credential"]["access_rules"][0]["id"];
    assert_eq!(
        &again.json["application_credential"]["access_rules"][0]["id"],
        rule_id
    );
    // Every credential holding the rule deleted, the rule's row stays: a new credential gets it.
    for c in [&won, &again] {
        let id = c.json["application_credential"]["id"].as_str().expect("id");
        let d = h
            .call("DELETE", &format!("{}/{id}", creds_path(&h)), None, None)
            .await;
        assert_eq!(d.status, 204);
    }
    let later = create(&h, json!({"name": "later", "access_rules": rules})).await;
    assert_eq!(later.status, 201, "{}", later.json);
    assert_eq!(
        &later.json["application_credential"]["access_rules"][0]["id"],
        rule_id
    );
}
