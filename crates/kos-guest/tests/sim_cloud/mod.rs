//! A kos-sim cloud with kos-guest attached, driven over HTTP as Nova's clients do, for the tests that
//! boot kos's real user_data through it (in_sim.rs, day_two.rs).
#![allow(dead_code)]

use std::time::Duration;

use base64::Engine as _;
use kos_bootstrap::ClusterSecrets;
use kos_sim::Sim;
use serde_json::{Value, json};

pub const P: &str = "/compute/v2.1";
pub const MV: &str = "compute 2.96";

pub struct Cloud {
    pub sim: Sim,
    pub http: reqwest::Client,
    pub token: String,
    pub user: String,
}

impl Cloud {
    pub async fn start(sim: Sim) -> Cloud {
        let http = reqwest::Client::new();
        let c = sim.config().clone();
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {"name": c.username, "domain": {"name": "Default"}, "password": c.password}}},
            "scope": {"project": {"name": c.project, "domain": {"name": "Default"}}},
        }});
        let r = http
            .post(format!("{}/auth/tokens", sim.auth_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        let token = r.headers()["x-subject-token"].to_str().unwrap().to_owned();
        let j: Value = r.json().await.unwrap();
        let user = j["token"]["user"]["id"].as_str().unwrap().to_owned();
        Cloud {
            sim,
            http,
            token,
            user,
        }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut rb = self
            .http
            .request(m, format!("{}{path}", self.sim.base_url()))
            .header("x-auth-token", &self.token)
            .header("openstack-api-version", MV);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb.send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// The cloud's date, as its `Date` header shows it (whole seconds).
    pub async fn date(&self) -> time::OffsetDateTime {
        let r = self
            .http
            .get(format!("{}/compute/v2.1/", self.sim.base_url()))
            .header("x-auth-token", &self.token)
            .send()
            .await
            .unwrap();
        let date = r.headers()["date"].to_str().unwrap().to_owned();
        time::OffsetDateTime::parse(&date, &time::format_description::well_known::Rfc2822)
            .unwrap_or_else(|e| panic!("Date {date:?}: {e}"))
    }

    pub async fn first(&self, path: &str, key: &str) -> Value {
        self.call("GET", path, None).await[key][0].clone()
    }

    pub async fn console(&self, server: &str) -> String {
        let v = self
            .call(
                "POST",
                &format!("{P}/servers/{server}/action"),
                Some(json!({"os-getConsoleOutput": {}})),
            )
            .await;
        v["output"].as_str().unwrap_or_default().to_owned()
    }
}

/// Polls `f` until it returns `Some`, for up to `secs` real seconds (generous: a loaded machine).
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An admin client's configuration for the cluster through the endpoint's local address,
/// verifying the serving certificate for the endpoint's address as kubectl's `tls-server-name` does.
pub fn admin_config(s: &ClusterSecrets, local: &str, endpoint_host: &str) -> kube::Config {
    let (cert, key) = kos_bootstrap::pki::sign_client(
        &mut rand::rng(),
        &s.ca,
        kos_bootstrap::pki::CaKind::Cluster,
        kos_bootstrap::kubeconfig::ADMIN_CN,
        &["kubeadm:cluster-admins"],
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let b64 = |x: &str| base64::engine::general_purpose::STANDARD.encode(x);
    let mut config = kube::Config::new(format!("https://{local}").parse().unwrap());
    let der = x509_parser::pem::parse_x509_pem(s.ca.cert_pem.as_bytes())
        .unwrap()
        .1
        .contents;
    config.root_cert = Some(vec![der]);
    config.tls_server_name = Some(endpoint_host.to_owned());
    config.auth_info.client_certificate_data = Some(b64(&cert));
    config.auth_info.client_key_data = Some(secrecy::SecretString::from(b64(key.expose())));
    config
}
