//! Canary secrets never show up in errors, in `Debug` output, or in TRACE-level logs: across a failed
//! authentication, injected server errors (whose bodies echo the secrets back) and normal calls.

use std::io::Write;
use std::sync::{Arc, Mutex};

use kos_cloud::{
    ApiRequest, AppCredentialRef, CloudError, CloudProfile, Env, ProfileAuth, RetryPolicy,
    ServiceKind, Session,
};
use kos_sim::{Sim, SimConfig};
use secrecy::SecretString;
use serde_json::{Value, json};

const CANARY_PW: &str = "CANARY-pw-8c1f2b7d9e";
const CANARY_WRONG_PW: &str = "CANARY-wrongpw-41d0aa";
const CANARY_AC: &str = "CANARY-ac-5e9d3c1a77";

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

fn assert_clean(what: &str, text: &str) {
    for canary in [CANARY_PW, CANARY_WRONG_PW, CANARY_AC] {
        assert!(!text.contains(canary), "{what} leaks {canary}: {text}");
    }
}

fn assert_error_clean(e: &CloudError) {
    assert_clean("error Display", &e.to_string());
    assert_clean("error Debug", &format!("{e:?}"));
}

async fn fault(sim: &Sim, rule: Value) {
    let rsp = reqwest::Client::new()
        .post(format!("{}/_sim/faults", sim.base_url()))
        .json(&rule)
        .send()
        .await
        .expect("add fault");
    assert_eq!(rsp.status(), 201);
}

#[tokio::test]
async fn canaries_never_leak() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let sim = Sim::start(SimConfig {
        password: CANARY_PW.into(),
        token_lifetime_secs: 1e7,
        ..SimConfig::fast()
    })
    .await
    .expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(&clouds, sim.clouds_yaml("sim")).expect("write");
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("etc"));
    let profile = CloudProfile::load(&env, Some("sim"), Some(&clouds)).expect("profile");
    assert_clean("profile Debug", &format!("{profile:?}"));

    // 1. A failed authentication.
    let mut wrong = profile.clone();
    if let ProfileAuth::Password { password, .. } = &mut wrong.auth {
        *password = SecretString::from(CANARY_WRONG_PW.to_owned());
    }
    let e = Session::connect(&wrong).await.expect_err("wrong password");
    assert!(matches!(e, CloudError::Auth(_)), "{e:?}");
    assert_error_clean(&e);

    // 2. Normal calls.
    let s = Session::connect(&profile)
        .await
        .expect("connect")
        .with_retry_policy(RetryPolicy::fast());
    assert_clean("session Debug", &format!("{s:?}"));
    let uid = s.user_id().to_owned();
    let created: Value = s
        .send(ApiRequest::post(
            ServiceKind::Identity,
            "application_credential.create",
            format!("users/{uid}/application_credentials"),
            json!({"application_credential": {"name": "canary", "secret": CANARY_AC}}),
        ))
        .await
        .expect("create")
        .json()
        .expect("json");
    assert_eq!(created["application_credential"]["secret"], CANARY_AC);
    let id = created["application_credential"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    s.redactor().add(SecretString::from(CANARY_AC.to_owned()));

    let mut ac_profile = CloudProfile::new(
        "sim-ac",
        sim.auth_url(),
        ProfileAuth::ApplicationCredential {
            credential: AppCredentialRef::Id(id),
            secret: SecretString::from(CANARY_AC.to_owned()),
        },
    );
    ac_profile.region_name = Some(sim.config().region.clone());
    assert_clean("app-cred profile Debug", &format!("{ac_profile:?}"));
    let s2 = Session::connect(&ac_profile)
        .await
        .expect("app cred connect")
        .with_retry_policy(RetryPolicy::fast());
    assert_clean("app-cred session Debug", &format!("{s2:?}"));
    let project = format!("projects/{}", s2.project_id());
    s2.send(ApiRequest::get(
        ServiceKind::Identity,
        "project.get",
        project.clone(),
    ))
    .await
    .expect("call with app cred");

    // 3. Injected errors whose bodies echo the secrets (as a careless service might).
    fault(
        &sim,
        json!({"method": "GET", "path": "^/identity/v3/projects/", "status": 500,
               "message": format!("db error for password={CANARY_PW} secret {CANARY_AC}")}),
    )
    .await;
    let e = s2
        .send(ApiRequest::get(
            ServiceKind::Identity,
            "project.get",
            project.clone(),
        ))
        .await
        .expect_err("500");
    assert_eq!(e.status(), Some(500));
    assert!(e.to_string().contains("***"), "{e}");
    assert_error_clean(&e);
    let e = s
        .send(ApiRequest::get(
            ServiceKind::Identity,
            "project.get",
            project,
        ))
        .await
        .expect_err("500");
    assert_error_clean(&e);

    fault(
        &sim,
        json!({"method": "POST", "path": "/application_credentials$", "status": 500,
               "message": format!("echo {{\"secret\": \"{CANARY_AC}\"}}")}),
    )
    .await;
    let e = s
        .send(ApiRequest::post(
            ServiceKind::Identity,
            "application_credential.create",
            format!("users/{uid}/application_credentials"),
            json!({"application_credential": {"name": "second", "secret": CANARY_AC}}),
        ))
        .await
        .expect_err("ambiguous");
    assert!(matches!(e, CloudError::Ambiguous { .. }), "{e:?}");
    assert_error_clean(&e);

    let text = logs.text();
    assert!(
        text.contains("openstack") && text.contains("retrying"),
        "the capture works: {text}"
    );
    assert_clean("TRACE logs", &text);
}
