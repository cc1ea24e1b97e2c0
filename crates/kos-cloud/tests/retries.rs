//! The retry rules against injected faults: what is retried, how long it waits, when it stops, and
//! that a POST whose outcome is unknown is never sent twice.

use std::time::{Duration, Instant};

use kos_cloud::{
    ApiErrorKind, ApiRequest, CloudError, CloudProfile, Env, RetryPolicy, ServiceKind, Session,
};
use kos_sim::{Sim, SimConfig};
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

async fn connect(sim: &Sim) -> Session {
    let dir = tempfile::tempdir().expect("tempdir");
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(&clouds, sim.clouds_yaml("sim")).expect("write");
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("etc"));
    let p = CloudProfile::load(&env, Some("sim"), Some(&clouds)).expect("profile");
    Session::connect(&p)
        .await
        .expect("connect")
        .with_retry_policy(RetryPolicy::fast())
}

async fn fault(sim: &Sim, rule: Value) {
    let rsp = reqwest::Client::new()
        .post(format!("{}/_sim/faults", sim.base_url()))
        .json(&rule)
        .send()
        .await
        .expect("add fault");
    assert_eq!(rsp.status(), 201, "{:?}", rsp.text().await);
}

async fn sim_log(sim: &Sim) -> Vec<Value> {
    let v: Value = reqwest::get(format!("{}/_sim/log", sim.base_url()))
        .await
        .expect("log")
        .json()
        .await
        .expect("json");
    v["entries"].as_array().cloned().unwrap_or_default()
}

fn project_get(s: &Session) -> ApiRequest {
    ApiRequest::get(
        ServiceKind::Identity,
        "project.get",
        format!("projects/{}", s.project_id()),
    )
}

fn app_cred_create(s: &Session, name: &str) -> ApiRequest {
    ApiRequest::post(
        ServiceKind::Identity,
        "application_credential.create",
        format!("users/{}/application_credentials", s.user_id()),
        json!({"application_credential": {"name": name}}),
    )
}

async fn app_cred_names(s: &Session) -> Vec<String> {
    let v: Value = s
        .send(ApiRequest::get(
            ServiceKind::Identity,
            "application_credential.list",
            format!("users/{}/application_credentials", s.user_id()),
        ))
        .await
        .expect("list")
        .json()
        .expect("json");
    v["application_credentials"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn idempotent_get_is_retried_through_503() {
    let sim = sim().await;
    let s = connect(&sim).await;
    fault(
        &sim,
        json!({"method": "GET", "path": "^/identity/v3/projects/", "status": 503, "count": 2}),
    )
    .await;
    let rsp = s
        .send(project_get(&s))
        .await
        .expect("third attempt succeeds");
    assert_eq!(rsp.status, 200);
    let c = s.counters();
    assert_eq!(c.operation(ServiceKind::Identity, "project.get"), 3);
    assert_eq!(c.retries, 2);
}

#[tokio::test]
async fn rate_limited_post_waits_for_retry_after() {
    let sim = sim().await;
    let s = connect(&sim).await;
    fault(
        &sim,
        json!({"method": "POST", "path": "/application_credentials$", "status": 429,
               "count": 1, "retry_after": 1}),
    )
    .await;
    let started = Instant::now();
    let rsp = s
        .send(app_cred_create(&s, "after-429"))
        .await
        .expect("retried after 429");
    // Lower bound only: a loaded machine may take longer.
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(rsp.status, 201);
    assert_eq!(
        s.counters()
            .operation(ServiceKind::Identity, "application_credential.create"),
        2
    );
    // 429 means "not processed": retrying the POST made exactly one credential.
    assert_eq!(app_cred_names(&s).await, ["after-429"]);
}

/// A controller that requeues instead of waiting turns the busy-409 retry off: one attempt, and
/// the 409 comes back to it.
#[tokio::test]
async fn octavia_immutable_409_comes_back_when_busy_retries_are_off() {
    let sim = sim().await;
    let s = connect(&sim).await.with_retry_policy(RetryPolicy {
        retry_busy_load_balancer: false,
        ..RetryPolicy::fast()
    });
    fault(
        &sim,
        json!({"path": "^/load-balancer/v2/lbaas/loadbalancers", "status": 409, "count": 1,
               "message": "Load Balancer x is immutable and cannot be updated."}),
    )
    .await;
    let e = s
        .send(ApiRequest::get(
            ServiceKind::LoadBalancer,
            "loadbalancer.list",
            "lbaas/loadbalancers",
        ))
        .await
        .expect_err("the 409 is the caller's");
    assert_eq!(e.status(), Some(409), "{e:?}");
    let c = s.counters();
    assert_eq!(
        c.operation(ServiceKind::LoadBalancer, "loadbalancer.list"),
        1
    );
    assert_eq!(c.retries, 0);
}

#[tokio::test]
async fn octavia_immutable_409_is_retried() {
    let sim = sim().await;
    let s = connect(&sim).await;
    fault(
        &sim,
        json!({"path": "^/load-balancer/v2/lbaas/loadbalancers", "status": 409, "count": 2,
               "message": "Load Balancer x is immutable and cannot be updated."}),
    )
    .await;
    // A POST: Octavia refused it, so even a non-idempotent call is safe to send again.
    let result = s
        .send(ApiRequest::post(
            ServiceKind::LoadBalancer,
            "loadbalancer.create",
            "lbaas/loadbalancers",
            json!({"loadbalancer": {"name": "lb", "vip_subnet_id": "no-such-subnet"}}),
        ))
        .await;
    let c = s.counters();
    assert_eq!(
        c.operation(ServiceKind::LoadBalancer, "loadbalancer.create"),
        3
    );
    assert_eq!(c.retries, 2);
    // Whatever Octavia says on the third attempt, it is not the injected 409.
    if let Err(e) = &result {
        assert_ne!(e.status(), Some(409), "{e:?}");
    }
    let log = sim_log(&sim).await;
    let posts: Vec<_> = log
        .iter()
        .filter(|e| e["method"] == "POST" && e["path"] == "/load-balancer/v2/lbaas/loadbalancers")
        .collect();
    assert_eq!(posts.len(), 3);
}

#[tokio::test]
async fn retries_stop_at_max_attempts_with_the_last_error() {
    let sim = sim().await;
    let s = connect(&sim).await.with_retry_policy(RetryPolicy {
        max_attempts: 3,
        ..RetryPolicy::fast()
    });
    fault(
        &sim,
        json!({"method": "GET", "path": "^/identity/v3/projects/", "status": 503,
               "message": "still down"}),
    )
    .await;
    let e = s.send(project_get(&s)).await.expect_err("gives up");
    match &e {
        CloudError::Api {
            status,
            kind,
            message,
            operation,
            ..
        } => {
            assert_eq!(*status, 503);
            assert_eq!(*kind, ApiErrorKind::Unavailable);
            assert_eq!(*operation, "project.get");
            assert!(message.contains("still down"), "{message}");
            assert!(message.contains("after 3 attempts"), "{message}");
        }
        other => panic!("expected Api, got {other:?}"),
    }
    let c = s.counters();
    assert_eq!(c.operation(ServiceKind::Identity, "project.get"), 3);
    assert_eq!(c.retries, 2);
}

#[tokio::test]
async fn ambiguous_post_is_sent_once() {
    let sim = sim().await;
    let s = connect(&sim).await;
    fault(
        &sim,
        json!({"method": "POST", "path": "/application_credentials$", "status": 500,
               "count": 1, "after_side_effect": true}),
    )
    .await;
    let e = s
        .send(app_cred_create(&s, "maybe-made"))
        .await
        .expect_err("ambiguous");
    assert!(
        matches!(
            &e,
            CloudError::Ambiguous {
                service: ServiceKind::Identity,
                operation: "application_credential.create",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("look the object up"), "{e}");
    let path = format!("/identity/v3/users/{}/application_credentials", s.user_id());
    let posts = sim_log(&sim)
        .await
        .iter()
        .filter(|e| e["method"] == "POST" && e["path"] == path.as_str())
        .count();
    assert_eq!(posts, 1, "never re-POSTed");
    assert_eq!(s.counters().retries, 0);
    // The cloud did the work: looking it up finds it.
    assert_eq!(app_cred_names(&s).await, ["maybe-made"]);
}

#[tokio::test]
async fn explicitly_idempotent_post_is_retried_on_500() {
    let sim = sim().await;
    let s = connect(&sim).await;
    fault(
        &sim,
        json!({"method": "POST", "path": "/application_credentials$", "status": 500, "count": 1}),
    )
    .await;
    let rsp = s
        .send(app_cred_create(&s, "marked-idempotent").idempotent(true))
        .await
        .expect("retried");
    assert_eq!(rsp.status, 201);
    assert_eq!(s.counters().retries, 1);
}

#[tokio::test]
async fn unreachable_cloud_is_a_transport_error_after_retries() {
    let sim = sim().await;
    let s = connect(&sim).await.with_retry_policy(RetryPolicy {
        max_attempts: 3,
        ..RetryPolicy::fast()
    });
    sim.stop().await;
    let e = s.send(project_get(&s)).await.expect_err("cloud is gone");
    assert!(matches!(&e, CloudError::Transport { .. }), "{e:?}");
    assert_eq!(
        s.counters().operation(ServiceKind::Identity, "project.get"),
        3
    );
}

/// Records the wait before each retry, as computed by the session.
#[derive(Default)]
struct Waits(std::sync::Mutex<Vec<Duration>>);

impl kos_cloud::CallObserver for Waits {
    fn observe(&self, call: &kos_cloud::CallRecord<'_>) {
        if let Some(w) = call.retry_in {
            self.0.lock().expect("lock").push(w);
        }
    }
}

/// Issue 12: under a strict rate limit concurrent calls all get through, only later; each retry
/// waits at least the Retry-After the cloud gave, plus a random share so they do not come back
/// together. (They used to wait exactly Retry-After, return all at once, and give up after six
/// attempts.)
#[tokio::test]
async fn a_strict_rate_limit_makes_concurrent_calls_wait_not_fail() {
    // Real time, two requests a second: Retry-After is 1 s.
    let sim = Sim::start(SimConfig {
        time_scale: 1.0,
        rate_limits: [(kos_sim::Service::Network, 2.0)].into_iter().collect(),
        ..SimConfig::fast()
    })
    .await
    .expect("sim");
    let waits = std::sync::Arc::new(Waits::default());
    let s = connect(&sim).await.with_observer(waits.clone());
    let calls = (0..12).map(|_| {
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
        assert_eq!(r.expect("every call gets through"), 200);
    }
    let waits = waits.0.lock().expect("lock").clone();
    assert!(!waits.is_empty(), "the limit was never hit");
    for w in &waits {
        assert!(
            *w >= Duration::from_secs(1),
            "shorter than Retry-After: {w:?}"
        );
    }
    let c = s.counters();
    assert_eq!(c.retries as usize, waits.len());
    assert!(
        c.operation(ServiceKind::Network, "network.list") > 12,
        "{c:?}"
    );
}

/// Octavia refuses a write to a busy load balancer's objects with 409 (LBPendingStateError "Invalid
/// state PENDING_UPDATE of loadbalancer resource <id>", ImmutableObject "… is immutable and cannot be
/// updated."): nothing was done, so a PUT and a DELETE are sent again, counted as calls and retries.
/// A real conflict (a duplicate) is the caller's at once.
#[tokio::test]
async fn octavia_busy_409_on_put_and_delete_is_retried_a_duplicate_is_not() {
    let sim = sim().await;
    let s = connect(&sim).await;
    fault(
        &sim,
        json!({"method": "PUT", "path": "/lbaas/listeners/", "status": 409, "count": 2,
               "message": "Invalid state PENDING_UPDATE of loadbalancer resource 5d1f"}),
    )
    .await;
    fault(
        &sim,
        json!({"method": "DELETE", "path": "/lbaas/pools/", "status": 409, "count": 1,
               "message": "Pool 7a2c is immutable and cannot be updated."}),
    )
    .await;
    let lb = s.load_balancer();
    let put = lb
        .update_listener("no-such-listener", &Default::default())
        .await;
    let del = lb.delete_pool("no-such-pool").await;
    // Whatever Octavia says once it is not busy, it is not the injected 409.
    for r in [put.err(), del.err()].into_iter().flatten() {
        assert_ne!(r.status(), Some(409), "{r:?}");
    }
    let c = s.counters();
    assert_eq!(c.operation(ServiceKind::LoadBalancer, "listener.update"), 3);
    assert_eq!(c.operation(ServiceKind::LoadBalancer, "pool.delete"), 2);
    assert_eq!(c.retries, 3);

    fault(
        &sim,
        json!({"method": "PUT", "path": "/lbaas/listeners/", "status": 409, "count": 1,
               "message": "Another Listener on this Load Balancer is already using protocol_port 6443"}),
    )
    .await;
    let e = lb
        .update_listener("no-such-listener", &Default::default())
        .await
        .expect_err("a duplicate is a conflict");
    assert_eq!(e.status(), Some(409), "{e:?}");
    assert_eq!(
        s.counters()
            .operation(ServiceKind::LoadBalancer, "listener.update"),
        4
    );
}
