//! Test harness shared by the kos-sim integration tests: a fresh simulator, an authenticated raw HTTP
//! client, and the sample-shape checker that proves every served endpoint answers in the real service's
//! wire format (every key of the API-reference sample is present, recursively).

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

use kos_sim::routes::{EndpointDoc, Sample};
use kos_sim::{Service, Sim, SimConfig};
use serde_json::{Value, json};

/// Keys whose object values are user data (network names, metadata keys), not schema.
const DATA_MAPS: &[&str] = &[
    "addresses",
    "metadata",
    "extra_specs",
    "volume_image_metadata",
    "properties",
    "options",
    "extra",
];

pub fn samples_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("../../testdata/api-samples")
}

pub fn load_sample(rel: &str) -> Value {
    let p = samples_dir().join(rel);
    let text =
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("sample {}: {e}", p.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("sample {} is not JSON: {e}", p.display()))
}

/// Paths (`a.b[].c`) of keys the sample has and `actual` lacks.
pub fn missing_keys(sample: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(sample, actual, "", &mut out);
    out
}

fn walk(sample: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
    match (sample, actual) {
        (Value::Object(s), Value::Object(a)) => {
            let leaf = path.rsplit(['.', ']']).next().unwrap_or("");
            if DATA_MAPS.contains(&leaf) {
                // Values of a data map share one shape: check each actual value against the first sample value.
                if let Some(sv) = s.values().next() {
                    for (k, av) in a {
                        walk(sv, av, &format!("{path}.{k}"), out);
                    }
                }
                return;
            }
            for (k, sv) in s {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match a.get(k) {
                    None => out.push(p),
                    Some(av) => walk(sv, av, &p, out),
                }
            }
        }
        (Value::Array(s), Value::Array(a)) => {
            if let Some(s0) = s.first() {
                for av in a {
                    walk(s0, av, &format!("{path}[]"), out);
                }
            }
        }
        _ => {}
    }
}

/// The microversion a sample was recorded at, from its folder (`compute/servers/v2.47/…`).
pub fn sample_microversion(rel: &str) -> Option<(&'static str, String)> {
    let svc = if rel.starts_with("compute/") {
        "compute"
    } else if rel.starts_with("block-storage/") {
        "volume"
    } else {
        return None;
    };
    rel.split('/')
        .find(|seg| {
            seg.starts_with('v')
                && seg[1..].contains('.')
                && seg[1..].chars().all(|c| c.is_ascii_digit() || c == '.')
        })
        .map(|seg| (svc, seg[1..].to_owned()))
}

pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub json: Value,
}

pub struct Harness {
    pub sim: Sim,
    pub http: reqwest::Client,
    pub token: String,
    pub user_id: String,
    pub project_id: String,
    docs: Vec<EndpointDoc>,
    covered: Mutex<BTreeSet<(&'static str, &'static str)>>,
}

impl Harness {
    pub async fn new() -> Harness {
        Self::with_config(SimConfig::fast()).await
    }

    pub async fn with_config(cfg: SimConfig) -> Harness {
        let sim = Sim::start(cfg).await.expect("simulator starts");
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
            .expect("keystone answers");
        assert_eq!(r.status().as_u16(), 201, "password auth");
        let token = r
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .expect("X-Subject-Token")
            .to_owned();
        let j: Value = r.json().await.expect("token body");
        let user_id = j["token"]["user"]["id"]
            .as_str()
            .expect("user id")
            .to_owned();
        let project_id = j["token"]["project"]["id"]
            .as_str()
            .expect("project id")
            .to_owned();
        Harness {
            sim,
            http,
            token,
            user_id,
            project_id,
            docs: kos_sim::endpoints(),
            covered: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.sim.base_url(), path)
    }

    /// A raw call with the harness token. `microversion` is `("compute", "2.47")`.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        microversion: Option<(&str, &str)>,
    ) -> Resp {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut rb = self
            .http
            .request(m, self.url(path))
            .header("x-auth-token", &self.token);
        if let Some((svc, v)) = microversion {
            rb = rb.header("openstack-api-version", format!("{svc} {v}"));
            if svc == "compute" {
                rb = rb.header("x-openstack-nova-api-version", v);
            }
        }
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let bytes = r.bytes().await.expect("body");
        let json = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Resp {
            status,
            headers,
            json,
        }
    }

    fn doc(&self, method: &str, template: &str) -> &EndpointDoc {
        self.docs
            .iter()
            .find(|d| d.method == method && d.path == template)
            .unwrap_or_else(|| panic!("kos-sim does not register {method} {template}"))
    }

    /// Calls `path` (an instance of the registered `template`), asserts a 2xx and that the response carries
    /// every key of the endpoint's sample (requested at the sample's microversion), and marks the endpoint
    /// covered. Returns the response body.
    pub async fn check(
        &self,
        method: &str,
        template: &str,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        self.check_allowing(method, template, path, body, &[]).await
    }

    /// As [`check`], tolerating the listed missing key paths (each must come with a reason at the call site).
    pub async fn check_allowing(
        &self,
        method: &str,
        template: &str,
        path: &str,
        body: Option<Value>,
        allowed: &[&str],
    ) -> Value {
        let doc = self.doc(method, template).clone();
        let mv = match doc.sample {
            Sample::File(rel) => sample_microversion(rel),
            Sample::NoBody(_) => None,
        };
        let resp = self
            .call(
                method,
                path,
                body,
                mv.as_ref().map(|(s, v)| (*s, v.as_str())),
            )
            .await;
        assert!(
            (200..300).contains(&resp.status),
            "{method} {path} answered {}: {}",
            resp.status,
            resp.json
        );
        if let Sample::File(rel) = doc.sample {
            let sample = load_sample(rel);
            let missing: Vec<String> = missing_keys(&sample, &resp.json)
                .into_iter()
                .filter(|k| !allowed.contains(&k.as_str()))
                .collect();
            assert!(
                missing.is_empty(),
                "{method} {path}: response lacks keys of {rel}: {missing:?}\nresponse: {:#}",
                resp.json
            );
        }
        self.covered
            .lock()
            .expect("lock")
            .insert((doc.method, doc.path));
        resp.json
    }

    /// Marks an endpoint checked by hand (status not 2xx, or special headers needed).
    pub fn mark_covered(&self, method: &str, template: &str) {
        let doc = self.doc(method, template).clone();
        self.covered
            .lock()
            .expect("lock")
            .insert((doc.method, doc.path));
    }

    /// Every endpoint of `service` was checked by this harness.
    pub fn assert_all_covered(&self, service: Service) {
        let covered = self.covered.lock().expect("lock");
        let missing: Vec<String> = self
            .docs
            .iter()
            .filter(|d| d.service == service && !covered.contains(&(d.method, d.path)))
            .map(|d| format!("{} {}", d.method, d.path))
            .collect();
        assert!(
            missing.is_empty(),
            "{service} endpoints not checked against a sample: {missing:#?}"
        );
    }
}

#[test]
fn missing_keys_walks_nested_objects_and_arrays() {
    let sample = json!({"a": {"b": 1, "c": [{"d": 1, "e": 2}]}, "addresses": {"private": [{"addr": "x", "version": 4}]}});
    let actual = json!({"a": {"b": 2, "c": [{"d": 1}]}, "addresses": {"net1": [{"addr": "y"}]}});
    assert_eq!(
        missing_keys(&sample, &actual),
        vec!["a.c[].e", "addresses.net1[].version"]
    );
    assert_eq!(
        sample_microversion("compute/servers/v2.47/server-get-resp.json"),
        Some(("compute", "2.47".into()))
    );
    assert_eq!(
        sample_microversion("network/ports/port-show-response.json"),
        None
    );
}
