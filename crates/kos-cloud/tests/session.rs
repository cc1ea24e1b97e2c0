//! Sessions against an in-process kos-sim: clouds.yaml + secure.yaml, OS_* variables, application
//! credentials, re-auth on token expiry, discovery and call counters.

use std::path::PathBuf;

use kos_cloud::{
    ApiRequest, AppCredentialRef, CloudError, CloudProfile, Env, ProfileAuth, RetryPolicy,
    ServiceKind, ServiceState, Session,
};
use kos_sim::{Sim, SimConfig};
use secrecy::SecretString;
use serde_json::{Value, json};

async fn sim() -> Sim {
    // Tokens that outlive the test: a slow machine must not see extra re-auths (fast() gives 3.6 s).
    Sim::start(SimConfig {
        token_lifetime_secs: 1e7,
        ..SimConfig::fast()
    })
    .await
    .expect("start sim")
}

/// An environment that finds no config of the machine running the tests.
fn clean_env(dir: &std::path::Path) -> Env {
    Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.join("no-etc"))
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

async fn connect(sim: &Sim) -> Session {
    let dir = tempfile::tempdir().expect("tempdir");
    let clouds = write(dir.path(), "clouds.yaml", &sim.clouds_yaml("sim"));
    let p =
        CloudProfile::load(&clean_env(dir.path()), Some("sim"), Some(&clouds)).expect("profile");
    Session::connect(&p)
        .await
        .expect("connect")
        .with_retry_policy(RetryPolicy::fast())
}

async fn sim_log(sim: &Sim) -> Vec<Value> {
    let v: Value = reqwest::get(format!("{}/_sim/log", sim.base_url()))
        .await
        .expect("log")
        .json()
        .await
        .expect("log json");
    v["entries"].as_array().cloned().unwrap_or_default()
}

fn count(log: &[Value], method: &str, path: &str, status: Option<u64>) -> usize {
    log.iter()
        .filter(|e| e["method"] == method && e["path"] == path)
        .filter(|e| status.is_none_or(|s| e["status"] == s))
        .count()
}

#[tokio::test]
async fn clouds_yaml_with_password_in_secure_yaml() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = sim.config();
    let clouds = write(
        dir.path(),
        "clouds.yaml",
        &format!(
            "clouds:\n  sim:\n    auth:\n      auth_url: {}\n      username: {}\n      project_name: {}\n      \
             user_domain_name: Default\n      project_domain_name: Default\n    region_name: {}\n",
            sim.auth_url(),
            cfg.username,
            cfg.project,
            cfg.region
        ),
    );
    let secure = write(
        dir.path(),
        "secure.yaml",
        &format!(
            "clouds:\n  sim:\n    auth:\n      password: {}\n",
            cfg.password
        ),
    );
    let p =
        CloudProfile::load(&clean_env(dir.path()), Some("sim"), Some(&clouds)).expect("profile");
    assert_eq!(p.source("password"), &kos_cloud::Source::File(secure));
    let s = Session::connect(&p).await.expect("connect");
    let project_id = sim.app().cloud().keystone.project_id().to_owned();
    assert_eq!(s.project_id(), project_id);
    assert!(!s.user_id().is_empty());
    assert_eq!(s.region(), Some("RegionOne"));
    assert_eq!(s.cloud_name(), "sim");
    assert_eq!(s.service_state(ServiceKind::Identity), &ServiceState::Ready);
    let rsp = s
        .send(ApiRequest::get(
            ServiceKind::Identity,
            "project.get",
            format!("projects/{project_id}"),
        ))
        .await
        .expect("get project");
    assert_eq!(rsp.status, 200);
    let v: Value = rsp.json().expect("json");
    assert_eq!(v["project"]["id"], project_id);
}

#[tokio::test]
async fn openrc_variables() {
    let sim = sim().await;
    let cfg = sim.config();
    let env = Env::from_vars([
        ("OS_AUTH_URL", sim.auth_url()),
        ("OS_USERNAME", cfg.username.clone()),
        ("OS_PASSWORD", cfg.password.clone()),
        ("OS_PROJECT_NAME", cfg.project.clone()),
        ("OS_USER_DOMAIN_NAME", "Default".into()),
        ("OS_PROJECT_DOMAIN_ID", "default".into()),
        ("OS_REGION_NAME", cfg.region.clone()),
        ("OS_INTERFACE", "public".into()),
    ]);
    let p = CloudProfile::load(&env, None, None).expect("profile");
    assert_eq!(p.name, "envvars");
    let s = Session::connect(&p).await.expect("connect");
    assert_eq!(s.project_id(), sim.app().cloud().keystone.project_id());
}

#[tokio::test]
async fn config_errors_name_the_file_and_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clouds = write(
        dir.path(),
        "clouds.yaml",
        "clouds:\n  a:\n    auth:\n      username: u\n  b:\n    region_name: R\n",
    );
    let env = clean_env(dir.path());
    let e = CloudProfile::load(&env, Some("prod"), Some(&clouds)).expect_err("no such cloud");
    assert_eq!(
        e.to_string(),
        format!(
            "cloud 'prod' not found in {}; clouds defined there: a, b",
            clouds.display()
        )
    );
    let e = CloudProfile::load(&env, Some("a"), Some(&clouds)).expect_err("no auth_url");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "auth.auth_url missing for cloud 'a' in {}: add it under clouds.a.auth.auth_url",
            clouds.display()
        )),
        "{msg}"
    );
    let e = CloudProfile::load(&env, None, None).expect_err("nothing configured");
    assert_eq!(
        e.to_string(),
        "OS_AUTH_URL is not set: source your openrc file or set OS_CLOUD"
    );
}

#[tokio::test]
async fn application_credential_reaches_keystone() {
    let sim = sim().await;
    let s1 = connect(&sim).await;
    let uid = s1.user_id().to_owned();
    let created: Value = s1
        .send(ApiRequest::post(
            ServiceKind::Identity,
            "application_credential.create",
            format!("users/{uid}/application_credentials"),
            json!({"application_credential": {"name": "kos-test-ac"}}),
        ))
        .await
        .expect("create app cred")
        .json()
        .expect("json");
    let ac = &created["application_credential"];
    let id = ac["id"].as_str().expect("id").to_owned();
    let secret = ac["secret"].as_str().expect("secret").to_owned();
    s1.redactor().add(SecretString::from(secret.clone()));

    let mut p = CloudProfile::new(
        "sim-ac",
        sim.auth_url(),
        ProfileAuth::ApplicationCredential {
            credential: AppCredentialRef::Id(id.clone()),
            secret: SecretString::from(secret),
        },
    );
    p.region_name = Some(sim.config().region.clone());
    let s2 = Session::connect(&p)
        .await
        .expect("connect with app cred")
        .with_retry_policy(RetryPolicy::fast());
    assert_eq!(s2.user_id(), uid);
    assert_eq!(s2.project_id(), s1.project_id());
    // Every service was discovered for the second session too.
    assert_eq!(
        s2.service_state(ServiceKind::Identity),
        &ServiceState::Ready
    );
    {
        let cloud = sim.app().cloud();
        let tokens: Vec<_> = cloud
            .keystone
            .tokens
            .values()
            .filter(|t| t.app_cred.as_ref().is_some_and(|(cid, _)| *cid == id))
            .collect();
        assert_eq!(tokens.len(), 1, "one token issued for the credential");
        assert_eq!(tokens[0].methods, ["application_credential"]);
    }
    let rsp = s2
        .send(ApiRequest::get(
            ServiceKind::Identity,
            "project.get",
            format!("projects/{}", s2.project_id()),
        ))
        .await
        .expect("call with the app-cred token");
    assert_eq!(rsp.status, 200);

    let del = s1
        .send(ApiRequest::delete(
            ServiceKind::Identity,
            "application_credential.delete",
            format!("users/{uid}/application_credentials/{id}"),
        ))
        .await
        .expect("delete");
    assert_eq!(del.status, 204);
    assert!(del.body.is_empty());
    // Its tokens die with it, and re-authenticating with it fails.
    let e = s2
        .send(ApiRequest::get(
            ServiceKind::Identity,
            "project.get",
            format!("projects/{}", s2.project_id()),
        ))
        .await
        .expect_err("credential deleted");
    assert!(
        matches!(&e, CloudError::Auth(_)) || e.status() == Some(401),
        "{e:?}"
    );
}

#[tokio::test]
async fn reauthenticates_after_token_expiry() {
    let sim = sim().await;
    let s = connect(&sim).await;
    let pid = s.project_id().to_owned();
    let get = || {
        ApiRequest::get(
            ServiceKind::Identity,
            "project.get",
            format!("projects/{pid}"),
        )
    };
    s.send(get()).await.expect("first call");
    let expired = reqwest::Client::new()
        .post(format!("{}/_sim/tokens/expire", sim.base_url()))
        .send()
        .await
        .expect("expire");
    assert!(expired.status().is_success());
    let rsp = s.send(get()).await.expect("call after expiry");
    assert_eq!(rsp.status, 200);
    let log = sim_log(&sim).await;
    let issued = count(&log, "POST", "/identity/v3/auth/tokens", Some(201));
    assert_eq!(issued, 2, "a second token was issued: {log:#?}");
    // Every request that went to the network is counted: the one refused with 401 too.
    assert_eq!(
        s.counters().operation(ServiceKind::Identity, "project.get"),
        3
    );
}

/// Issue 20 (3): short-lived tokens and a failing service together. The renewed token expires again
/// while the call waits out a 503: it is renewed again, not reported as a 401 "after 2 attempts".
/// A service that rejects every new token still ends the call.
#[tokio::test]
async fn a_token_that_expires_again_during_the_retries_is_renewed_again() {
    let sim = sim().await;
    let s = connect(&sim).await;
    let http = reqwest::Client::new();
    let path = "^/network/v2.0/networks$";
    // The first rule that fires wins and the others do not count the request: 401, 503, 401, then 200.
    for rule in [
        json!({"method": "GET", "path": path, "status": 401, "skip": 2, "count": 1}),
        json!({"method": "GET", "path": path, "status": 503, "skip": 1, "count": 1}),
        json!({"method": "GET", "path": path, "status": 401, "count": 1}),
    ] {
        let r = http
            .post(format!("{}/_sim/faults", sim.base_url()))
            .json(&rule)
            .send()
            .await
            .expect("fault");
        assert!(r.status().is_success());
    }
    let list = || ApiRequest::get(ServiceKind::Network, "network.list", "networks");
    let rsp = s.send(list()).await.expect("renewed twice, then answered");
    assert_eq!(rsp.status, 200);
    let log = sim_log(&sim).await;
    assert_eq!(
        count(&log, "POST", "/identity/v3/auth/tokens", Some(201)),
        3,
        "{log:#?}"
    );

    // Every new token refused: the call ends after three renewals in a row.
    let r = http
        .post(format!("{}/_sim/faults", sim.base_url()))
        .json(&json!({"method": "GET", "path": path, "status": 401}))
        .send()
        .await
        .expect("fault");
    assert!(r.status().is_success());
    let e = s.send(list()).await.expect_err("always refused");
    assert_eq!(e.status(), Some(401), "{e:?}");
    let log = sim_log(&sim).await;
    assert_eq!(
        count(&log, "POST", "/identity/v3/auth/tokens", Some(201)),
        6,
        "{log:#?}"
    );
}

/// A token that has expired again by the time its renewal's call arrives (a token shorter-lived
/// than a renewal and a retry take: `kos up`'s token-churn test, six cloud seconds at 0.05 real s
/// each, on a loaded machine) is renewed again: the call is not failed with a 401 after one
/// renewal, which preflight would report as the spec's problem.
#[tokio::test]
async fn a_renewed_token_refused_at_once_is_renewed_again() {
    let sim = sim().await;
    let s = connect(&sim).await;
    let http = reqwest::Client::new();
    let path = "^/compute/v2.1/flavors/detail$";
    let r = http
        .post(format!("{}/_sim/faults", sim.base_url()))
        .json(&json!({"method": "GET", "path": path, "status": 401, "count": 2}))
        .send()
        .await
        .expect("fault");
    assert!(r.status().is_success());
    let rsp = s
        .send(ApiRequest::get(
            ServiceKind::Compute,
            "flavor.list",
            "flavors/detail",
        ))
        .await
        .expect("renewed twice, then answered");
    assert_eq!(rsp.status, 200);
    let log = sim_log(&sim).await;
    assert_eq!(
        count(&log, "POST", "/identity/v3/auth/tokens", Some(201)),
        3,
        "{log:#?}"
    );
}

/// Many calls in flight when the token expires: one re-authentication serves them all, and no call
/// reaches a service while its endpoint is being rediscovered (it would land on the unversioned
/// URL and get a 404 that looks like "no such resource").
#[tokio::test]
async fn calls_in_flight_share_one_reauthentication() {
    // Every call takes a few real milliseconds, so calls overlap the re-authentication.
    let sim = Sim::start(SimConfig {
        token_lifetime_secs: 1e7,
        time_scale: 0.1,
        latency: kos_sim::LatencyModel {
            per_call_secs: 0.02,
            ..kos_sim::LatencyModel::instant()
        },
        ..SimConfig::fast()
    })
    .await
    .expect("start sim");
    let s = connect(&sim).await;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers = (0..12).map(|i| {
        let (s, done) = (s.clone(), done.clone());
        async move {
            for _ in 0..20 {
                let req = match i % 3 {
                    0 => ApiRequest::get(ServiceKind::Network, "network.list", "networks"),
                    1 => ApiRequest::get(
                        ServiceKind::LoadBalancer,
                        "loadbalancer.list",
                        "lbaas/loadbalancers",
                    ),
                    _ => ApiRequest::get(ServiceKind::Compute, "flavor.list", "flavors"),
                };
                let status = s.send(req).await.map(|r| r.status);
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                assert_eq!(status.expect("call"), 200, "worker {i}");
            }
        }
    });
    let expirer = {
        let (base, done) = (sim.base_url().to_owned(), done.clone());
        async move {
            // Twice, each while the workers are mid-way.
            for at in [40, 140] {
                while done.load(std::sync::atomic::Ordering::SeqCst) < at {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                let expired = reqwest::Client::new()
                    .post(format!("{base}/_sim/tokens/expire"))
                    .send()
                    .await
                    .expect("expire");
                assert!(expired.status().is_success());
            }
        }
    };
    tokio::join!(futures::future::join_all(workers), expirer);
    let log = sim_log(&sim).await;
    assert_eq!(
        count(&log, "POST", "/identity/v3/auth/tokens", Some(201)),
        3,
        "one new token per expiry: {log:#?}"
    );
    let misrouted: Vec<_> = log
        .iter()
        .filter(|e| {
            // Discovery's own probes get 300/404 too; the calls above must not.
            let path = e["path"].as_str().unwrap_or_default();
            ["/networks", "/lbaas/loadbalancers", "/flavors"]
                .iter()
                .any(|p| path.ends_with(p))
                && e["status"] != 200
                && e["status"] != 401
        })
        .collect();
    assert!(misrouted.is_empty(), "{misrouted:#?}");
}

/// The SDK forgets every discovered endpoint when it re-authenticates; the session must discover them
/// again, or every later call goes to an unversioned URL (404 on Neutron and Octavia).
#[tokio::test]
async fn service_endpoints_survive_a_token_expiry() {
    let sim = sim().await;
    let s = connect(&sim).await;
    let list = || ApiRequest::get(ServiceKind::Network, "network.list", "networks");
    s.send(list()).await.expect("before expiry");
    let expired = reqwest::Client::new()
        .post(format!("{}/_sim/tokens/expire", sim.base_url()))
        .send()
        .await
        .expect("expire");
    assert!(expired.status().is_success());
    let rsp = s
        .send(list())
        .await
        .expect("network list after the SDK re-authenticated");
    assert_eq!(rsp.status, 200);
    let lbs = ApiRequest::get(
        ServiceKind::LoadBalancer,
        "loadbalancer.list",
        "lbaas/loadbalancers",
    );
    assert_eq!(
        s.send(lbs).await.expect("octavia after re-auth").status,
        200
    );
    let log = sim_log(&sim).await;
    assert_eq!(
        count(&log, "POST", "/identity/v3/auth/tokens", Some(201)),
        2,
        "{log:#?}"
    );
}

/// The discovery that follows a re-authentication meets a busy cloud: it is retried, and when it
/// still fails the service's next call discovers again instead of going to the unversioned URL.
#[tokio::test]
async fn discovery_after_reauthentication_survives_a_busy_cloud() {
    let sim = sim().await;
    let s = connect(&sim).await;
    let lbs = || {
        ApiRequest::get(
            ServiceKind::LoadBalancer,
            "loadbalancer.list",
            "lbaas/loadbalancers",
        )
    };
    let nets = || ApiRequest::get(ServiceKind::Network, "network.list", "networks");
    let http = reqwest::Client::new();
    let fault = |count: u64| {
        http.post(format!("{}/_sim/faults", sim.base_url()))
            .json(&json!({"method": "GET", "path": "^/load-balancer/?$", "status": 503, "count": count}))
            .send()
    };
    let expire = || {
        http.post(format!("{}/_sim/tokens/expire", sim.base_url()))
            .send()
    };
    // A short outage: retried within the re-authentication.
    assert!(fault(2).await.expect("fault").status().is_success());
    assert!(expire().await.expect("expire").status().is_success());
    assert_eq!(s.send(nets()).await.expect("networks").status, 200);
    assert_eq!(s.send(lbs()).await.expect("octavia").status, 200);

    // A longer one: Octavia's calls fail clearly while it lasts, other services are unaffected,
    // and once it is over Octavia's endpoint is found again.
    assert!(fault(1000).await.expect("fault").status().is_success());
    assert!(expire().await.expect("expire").status().is_success());
    assert_eq!(s.send(nets()).await.expect("networks").status, 200);
    let e = s.send(lbs()).await.expect_err("octavia undiscoverable");
    assert!(e.to_string().contains("could not be discovered"), "{e}");
    let cleared = http
        .delete(format!("{}/_sim/faults", sim.base_url()))
        .send()
        .await
        .expect("clear");
    assert!(cleared.status().is_success());
    assert_eq!(s.send(lbs()).await.expect("octavia again").status, 200);
    let log = sim_log(&sim).await;
    let misrouted = log
        .iter()
        .filter(|e| e["path"] == "/load-balancer/lbaas/loadbalancers")
        .count();
    assert_eq!(misrouted, 0, "{log:#?}");
}

/// Every OpenStack call is a `send` future and the engine nests many of them: big sub-futures (the
/// SDK's discovery, notably) are boxed so that debug builds never overflow a test thread's stack.
#[tokio::test]
async fn send_future_stays_small() {
    let sim = sim().await;
    let s = connect(&sim).await;
    let fut = s.send(ApiRequest::get(
        ServiceKind::Network,
        "network.list",
        "networks",
    ));
    let size = std::mem::size_of_val(&fut);
    eprintln!("send future: {size} bytes");
    assert!(
        size < 4 * 1024,
        "send future is {size} bytes: box the large sub-future"
    );
    fut.await.expect("list");
}

#[tokio::test]
async fn counters_per_service_and_operation() {
    let sim = sim().await;
    let s = connect(&sim).await;
    let clone = s.clone();
    let pid = s.project_id().to_owned();
    let uid = s.user_id().to_owned();
    for _ in 0..3 {
        s.send(ApiRequest::get(
            ServiceKind::Identity,
            "project.get",
            format!("projects/{pid}"),
        ))
        .await
        .expect("project");
    }
    clone
        .send(ApiRequest::get(
            ServiceKind::Identity,
            "application_credential.list",
            format!("users/{uid}/application_credentials"),
        ))
        .await
        .expect("list");
    let e = s
        .send(ApiRequest::get(
            ServiceKind::Identity,
            "project.get",
            "projects/does-not-exist",
        ))
        .await
        .expect_err("404");
    assert!(e.is_not_found(), "{e:?}");
    let c = s.counters();
    assert_eq!(c, clone.counters(), "clones share counters");
    assert_eq!(c.service(ServiceKind::Identity), 5);
    assert_eq!(c.operation(ServiceKind::Identity, "project.get"), 4);
    assert_eq!(
        c.operation(ServiceKind::Identity, "application_credential.list"),
        1
    );
    assert_eq!(c.service(ServiceKind::Network), 0);
    assert_eq!(c.total(), 5);
    assert_eq!(c.retries, 0);
}

/// Every service is discovered, and a Neutron call goes to the versioned endpoint.
#[tokio::test]
async fn network_list_through_discovered_endpoint() {
    let sim = sim().await;
    let s = connect(&sim).await;
    for kind in ServiceKind::ALL {
        assert_eq!(s.service_state(kind), &ServiceState::Ready, "{kind}");
    }
    let rsp = s
        .send(ApiRequest::get(
            ServiceKind::Network,
            "network.list",
            "networks",
        ))
        .await
        .expect("list networks");
    let v: Value = rsp.json().expect("json");
    assert!(v["networks"].is_array(), "{v}");
    let log = sim_log(&sim).await;
    assert_eq!(count(&log, "GET", "/network/v2.0/networks", Some(200)), 1);
    assert_eq!(
        s.counters().operation(ServiceKind::Network, "network.list"),
        1
    );
}

/// An observer (what kos-ccm's metrics plug into) sees every attempt: a retried call twice, the
/// failed attempt as an error with its status.
#[tokio::test]
async fn an_observer_sees_every_attempt() {
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    struct Seen(Mutex<Vec<(String, Option<u16>, bool)>>);
    impl kos_cloud::CallObserver for Seen {
        fn observe(&self, call: &kos_cloud::CallRecord<'_>) {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).push((
                call.operation.to_owned(),
                call.status,
                call.is_error(),
            ));
        }
    }
    let sim = sim().await;
    let seen = Arc::new(Seen::default());
    let s = connect(&sim).await.with_observer(seen.clone());
    let added = reqwest::Client::new()
        .post(format!("{}/_sim/faults", sim.base_url()))
        .json(&json!({"method": "GET", "path": "/networks$", "status": 503, "count": 1}))
        .send()
        .await
        .expect("fault");
    assert!(added.status().is_success());
    let rsp = s
        .clone()
        .send(ApiRequest::get(
            ServiceKind::Network,
            "network.list",
            "networks",
        ))
        .await
        .expect("retried");
    assert_eq!(rsp.status, 200);
    let seen = seen.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        seen,
        vec![
            ("network.list".to_owned(), Some(503), true),
            ("network.list".to_owned(), Some(200), false),
        ]
    );
}

/// `api_timeout` from clouds.yaml bounds every HTTP request, authentication included: a cloud that
/// accepts connections and never answers fails the call instead of hanging it for the SDK's 30 s.
#[tokio::test]
async fn api_timeout_bounds_a_silent_cloud() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    // Accepts and holds connections, never answering.
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let clouds = write(
        dir.path(),
        "clouds.yaml",
        &format!(
            "clouds:\n  silent:\n    api_timeout: 0.3\n    auth:\n      auth_url: http://127.0.0.1:{port}/v3\n      username: u\n      password: p\n      project_name: p\n      user_domain_name: Default\n      project_domain_name: Default\n"
        ),
    );
    let p =
        CloudProfile::load(&clean_env(dir.path()), Some("silent"), Some(&clouds)).expect("profile");
    assert_eq!(p.api_timeout, Some(std::time::Duration::from_millis(300)));
    // Far below the SDK's default of 30 s: only the configured timeout can end it in time.
    let r = tokio::time::timeout(std::time::Duration::from_secs(20), Session::connect(&p)).await;
    let e = r
        .expect("connect gave up on its own")
        .expect_err("nothing answers");
    assert!(!e.to_string().contains("secret"), "{e}");

    let bad = write(
        dir.path(),
        "bad.yaml",
        "clouds:\n  c:\n    api_timeout: soon\n    auth:\n      auth_url: http://127.0.0.1:1/v3\n      username: u\n      password: p\n      project_name: p\n",
    );
    let e = CloudProfile::load(&clean_env(dir.path()), Some("c"), Some(&bad))
        .expect_err("not a number");
    assert!(e.to_string().contains("api_timeout 'soon'"), "{e}");
}

/// The client-side rate limit holds across clones (a lower bound: a slow machine only adds time).
#[tokio::test]
async fn rate_limit_spaces_calls_across_clones() {
    let sim = sim().await;
    let s = connect(&sim).await.with_rate_limit(20.0, 1);
    let start = std::time::Instant::now();
    let calls = (0..5).map(|_| {
        let s = s.clone();
        async move {
            s.send(ApiRequest::get(
                ServiceKind::Network,
                "network.list",
                "networks",
            ))
            .await
            .map(|r| r.status)
        }
    });
    for r in futures::future::join_all(calls).await {
        assert_eq!(r.expect("call"), 200);
    }
    // Five calls at 20/s, no burst: the fifth not before 4 intervals of 50 ms.
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );
}

fn profile_at(auth_url: &str) -> CloudProfile {
    CloudProfile::new(
        "probe",
        auth_url,
        ProfileAuth::Password {
            user: kos_cloud::IdOrName::Name("demo".into()),
            user_domain: Some(kos_cloud::IdOrName::Id("default".into())),
            password: SecretString::from("kos-sim-password".to_owned()),
            project: Some(kos_cloud::IdOrName::Name("demo".into())),
            project_domain: Some(kos_cloud::IdOrName::Id("default".into())),
        },
    )
}

async fn connect_error(p: &CloudProfile) -> String {
    Session::connect_with(p, RetryPolicy::fast())
        .await
        .expect_err("cannot connect")
        .to_string()
}

/// Issue 12: every way of not reaching Keystone used to read "Service is not working."; each now
/// names the endpoint and the setting to check, and a password in the URL is never shown.
#[tokio::test]
async fn connect_failures_name_the_endpoint_and_the_setting() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // A port nothing listens on: bound, then freed.
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = free.local_addr().expect("addr").port();
    drop(free);

    let refused = connect_error(&profile_at(&format!(
        "http://bob:hunter2-url-pw@127.0.0.1:{port}/identity/v3"
    )))
    .await;
    assert!(
        refused.contains(&format!(
            "nothing listens at 127.0.0.1:{port} (connection refused)"
        )) && refused.contains("auth_url"),
        "{refused}"
    );
    assert!(!refused.contains("hunter2-url-pw"), "{refused}");

    let dns = connect_error(&profile_at("http://no-such-host.invalid:5000/v3")).await;
    assert!(
        dns.contains("cannot resolve the host of http://no-such-host.invalid:5000/v3")
            && dns.contains("auth_url"),
        "{dns}"
    );

    let tls_to_http = sim.auth_url().replacen("http://", "https://", 1);
    let tls = connect_error(&profile_at(&tls_to_http)).await;
    assert!(
        tls.contains("does not speak TLS") && tls.contains("use http:// in auth_url"),
        "{tls}"
    );

    let not_a_cert = write(dir.path(), "ca.pem", "this is not a certificate\n");
    let mut p = profile_at(&tls_to_http);
    p.cacert = Some(not_a_cert.clone());
    let bad_ca = connect_error(&p).await;
    assert!(
        bad_ca.starts_with(&format!("cacert {}", not_a_cert.display()))
            && bad_ca.contains("holds no `-----BEGIN CERTIFICATE-----` block"),
        "{bad_ca}"
    );

    let wrong_path = format!("{}/nope/v3", sim.base_url());
    let e = connect_error(&profile_at(&wrong_path)).await;
    assert!(
        e.contains("answered 404") && e.contains("path of auth_url"),
        "{e}"
    );

    for e in [&refused, &dns, &tls, &bad_ca, &e] {
        assert!(!e.contains("Service is not working"), "{e}");
    }
}

/// Issue 12: Keystone answering 429 and 503 is waited out at connect, as every other call is; a
/// Keystone that allows one request a second lets kos in (it used to refuse the token request
/// that the SDK sends right after discovery, every time).
#[tokio::test]
async fn a_busy_keystone_is_waited_out_at_connect() {
    let sim = sim().await;
    for rule in [
        json!({"method": "POST", "path": "^/identity/v3/auth/tokens$", "status": 503, "count": 2}),
        json!({"method": "POST", "path": "^/identity/v3/auth/tokens$", "status": 429, "count": 2, "retry_after": 0}),
        json!({"method": "GET", "path": "^/identity/v3/?$", "status": 503, "count": 1, "retry_after": 0}),
    ] {
        let rsp = reqwest::Client::new()
            .post(format!("{}/_sim/faults", sim.base_url()))
            .json(&rule)
            .send()
            .await
            .expect("fault");
        assert_eq!(rsp.status(), 201);
    }
    let s = Session::connect_with(&profile_at(&sim.auth_url()), RetryPolicy::fast())
        .await
        .expect("connects once Keystone answers");
    assert!(!s.project_id().is_empty());
    let log = sim_log(&sim).await;
    assert_eq!(
        count(&log, "POST", "/identity/v3/auth/tokens", Some(201)),
        1
    );
    assert_eq!(count(&log, "POST", "/identity/v3/auth/tokens", None), 5);

    // One request a second, in real time: discovery and the token request each wait their turn.
    let strict = Sim::start(SimConfig {
        time_scale: 1.0,
        rate_limits: [(kos_sim::Service::Identity, 1.0)].into_iter().collect(),
        ..SimConfig::fast()
    })
    .await
    .expect("sim");
    Session::connect_with(&profile_at(&strict.auth_url()), RetryPolicy::fast())
        .await
        .expect("connects under one request a second");
}
