//! `kos bench autoscale`: issue 23's "Performance": how long kos-operator takes to turn the
//! autoscaler's request into a Ready node (a scale-up from zero), and to replace a node found dead,
//! against the floors the cloud and the check set: one server boot and join for the first; the
//! health check's window plus one boot and join for the second. A benchmark, not a test: it
//! measures and reports, never fails on a figure.
//!
//! One in-process kos-sim (the realistic latency model on a scaled clock, guests running kos's
//! user_data) is the cloud, an in-process kos-kube-fake the management cluster, and kos-operator's
//! controller and autoscaler endpoint run in this process, as the operator binary runs them (the
//! Nodes watch included). The autoscaler's calls come over mutual TLS as cluster-autoscaler makes
//! them. A boot and join is measured on the node it times: from its server's first appearance in
//! the cloud's server list to its Node Ready, both seen by polling (the poll's period is in the
//! figures, on both sides).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kos_operator::autoscaler::proto::cloud_provider_client::CloudProviderClient;
use kos_operator::autoscaler::proto::{NodeGroupIncreaseSizeRequest, RefreshRequest};
use kos_operator::reconcile::{Context, Settings};
use kos_operator::resource::Cluster;
use kos_sim::{LatencyModel, Sim, SimConfig};
use kube::api::{Api, PostParams};
use miette::{IntoDiagnostic, WrapErr, miette};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Exit, Failure};
use crate::cli::BenchAutoscaleArgs;

const NS: &str = "fleet";
/// How often the cloud and the cluster are looked at (real time).
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Serialize)]
struct Report {
    time_scale: f64,
    /// Cloud seconds from `NodeGroupIncreaseSize` of a pool at 0 until its node is Ready.
    scale_up_secs: f64,
    /// That node's own boot and join: its server first listed until its Node Ready.
    scale_up_boot_join_secs: f64,
    /// `scale_up_secs / scale_up_boot_join_secs`: 1 is the floor.
    scale_up_ratio: f64,
    /// Cloud seconds from a worker's server stopped until its successor's Node is Ready.
    repair_secs: f64,
    /// The health check's NotReady window (the default's, 300 s).
    repair_window_secs: f64,
    /// The successor's boot and join.
    repair_boot_join_secs: f64,
    /// `repair_secs / (window + boot and join)`: 1 is the floor.
    repair_ratio: f64,
}

pub async fn autoscale(args: BenchAutoscaleArgs) -> Result<Exit, Failure> {
    let report = measure(args.time_scale)
        .await
        .map_err(Failure::cloud_diagnostic)?;
    super::bench::emit(args.output, &report, render)
}

fn render(r: &Report) -> String {
    format!(
        "scale-up from zero: {:.0} cloud s, the node's own boot and join {:.0} s: {:.2}x the floor\n\
         repair of a dead node: {:.0} cloud s, the check's window {:.0} s + the successor's boot \
         and join {:.0} s: {:.2}x the floor\n",
        r.scale_up_secs,
        r.scale_up_boot_join_secs,
        r.scale_up_ratio,
        r.repair_secs,
        r.repair_window_secs,
        r.repair_boot_join_secs,
        r.repair_ratio
    )
}

/// A CA and what it signs (PEM).
struct Ca {
    pem: String,
    key_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new() -> miette::Result<Ca> {
        let key = rcgen::KeyPair::generate().into_diagnostic()?;
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kos bench autoscale");
        let pem = params.self_signed(&key).into_diagnostic()?.pem();
        Ok(Ca {
            pem,
            key_pem: key.serialize_pem(),
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    fn sign(&self, cn: &str, sans: &[&str], client: bool) -> miette::Result<(String, String)> {
        let key = rcgen::KeyPair::generate().into_diagnostic()?;
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .into_diagnostic()?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let cert = params.signed_by(&key, &self.issuer).into_diagnostic()?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn cluster() -> Value {
    json!({
        "apiVersion": "kos.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": NS},
        "spec": {
            "identityRef": {"name": "cloud", "cloudName": "sim"},
            "kubernetesVersion": kos_bootstrap::addons::Pins::builtin()
                .map(|p| p.kubernetes.default.clone())
                .unwrap_or_default(),
            "network": {"create": {"cidr": "10.0.0.0/24"}},
            "apiEndpoint": {"type": "floatingIP"},
            "controlPlane": {"count": 1, "flavor": "m1.medium", "image": "ubuntu-24.04"},
            "nodePools": [
                {"name": "fixed", "count": 1, "flavor": "m1.medium", "image": "ubuntu-24.04"},
                {"name": "scaled", "count": 0, "autoscaling": {"min": 0, "max": 2},
                 "flavor": "m1.medium", "image": "ubuntu-24.04"},
            ],
        },
    })
}

/// The in-process simulator's forwarders to its clusters' APIs.
struct SimForwarders(kos_sim::SharedApp);

#[derive(Debug, thiserror::Error)]
#[error("the simulated cloud serves no API at {0}")]
struct NotServed(String);

impl kos_control::connect::Reach for SimForwarders {
    fn local_address<'a>(
        &'a self,
        ep: &'a kos_bootstrap::ApiEndpoint,
    ) -> kos_control::connect::Reaching<'a> {
        Box::pin(async move {
            let want = ep.to_string();
            self.0
                .guests()
                .map(|rt| rt.kube_endpoints())
                .unwrap_or_default()
                .into_iter()
                .find(|e| e.endpoint == want)
                .map(|e| Some(e.local))
                .ok_or_else(|| kos_control::connect::ReachError(Box::new(NotServed(want))))
        })
    }
}

/// Nodes of the simulated cluster: name → (server id, Ready).
async fn nodes(sim: &Sim) -> miette::Result<Vec<(String, Option<String>, bool)>> {
    let v: Value = reqwest::get(format!("{}/_sim/clusters", sim.base_url()))
        .await
        .into_diagnostic()?
        .json()
        .await
        .into_diagnostic()?;
    Ok(v[0]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| {
            Some((
                n["name"].as_str()?.to_owned(),
                n["server"].as_str().map(str::to_owned),
                n["ready"] == true,
            ))
        })
        .collect())
}

/// Waits until server `name` is listed (not `old`), then until its Node is Ready on it: when each
/// was first seen.
async fn follow(
    sim: &Sim,
    session: &kos_cloud::Session,
    name: &str,
    old: Option<&str>,
) -> miette::Result<(Instant, Instant)> {
    let deadline = Instant::now() + Duration::from_secs(3600);
    let mut listed: Option<(Instant, String)> = None;
    loop {
        if Instant::now() > deadline {
            return Err(miette!("{name} never became a Ready node"));
        }
        if listed.is_none() {
            let servers = session
                .compute()
                .list_servers(&kos_cloud::model::TagQuery::default())
                .await
                .into_diagnostic()?;
            if let Some(s) = servers
                .iter()
                .find(|s| s.name == name && Some(s.id.as_str()) != old)
            {
                listed = Some((Instant::now(), s.id.clone()));
            }
        }
        if let Some((at, id)) = &listed
            && nodes(sim)
                .await?
                .iter()
                .any(|(n, s, ready)| n == name && s.as_deref() == Some(id.as_str()) && *ready)
        {
            return Ok((*at, Instant::now()));
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn measure(scale: f64) -> miette::Result<Report> {
    let secs = |d: Duration| d.as_secs_f64() / scale;
    let cfg = SimConfig {
        time_scale: scale,
        latency: LatencyModel::default(),
        token_lifetime_secs: 1e9,
        ..SimConfig::demo()
    };
    let mut sim = Sim::start(cfg)
        .await
        .into_diagnostic()
        .wrap_err("cannot start the simulated cloud")?;
    let guests = kos_guest::sim::SimGuests::new().map_err(|e| miette!("{e}"))?;
    sim.attach_guests(Arc::new(guests));
    let fake = kos_kube_fake::FakeKube::start()
        .await
        .map_err(|e| miette!("cannot start the Kubernetes API: {e}"))?;
    let client = fake.client().into_diagnostic()?;
    fake.apply_json(
        &serde_json::to_value(kos_operator::resource::crd()).into_diagnostic()?,
        "kubectl",
    )
    .into_diagnostic()?;
    fake.apply_json(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        "kubectl",
    )
    .into_diagnostic()?;
    let identity: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cloud", "namespace": NS},
        "stringData": {"clouds.yaml": sim.clouds_yaml("sim")},
    }))
    .into_diagnostic()?;
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &identity)
        .await
        .into_diagnostic()?;

    // The endpoint with mutual TLS, one CA for both sides.
    let ca = Ca::new()?;
    let dir = tempfile::tempdir().into_diagnostic()?;
    let (cert, key) = ca.sign("kos-operator", &["localhost"], false)?;
    std::fs::write(dir.path().join("tls.crt"), cert).into_diagnostic()?;
    std::fs::write(dir.path().join("tls.key"), key).into_diagnostic()?;
    std::fs::write(dir.path().join("ca.crt"), &ca.pem).into_diagnostic()?;
    std::fs::write(dir.path().join("ca.key"), &ca.key_pem).into_diagnostic()?;
    let tls = kos_operator::autoscaler::tls::Tls::load(dir.path(), None).into_diagnostic()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .into_diagnostic()?;
    let addr = listener.local_addr().into_diagnostic()?;
    tokio::spawn(kos_operator::autoscaler::serve(
        listener,
        tls,
        client.clone(),
    ));

    let ctx = Arc::new(Context::new(
        client.clone(),
        Arc::new(SimForwarders(sim.app().clone())),
        kube::runtime::events::Reporter {
            controller: "kos-operator".into(),
            instance: None,
        },
        Settings {
            retry: Duration::from_secs_f64((60.0 * scale).max(1.0)),
            resync: Duration::from_secs_f64(600.0 * scale),
            ..Settings::default()
        },
    ));
    let triggers = ctx.node_watches().triggers();
    let controller = tokio::spawn(
        kube::runtime::Controller::new(
            Api::<Cluster>::all(client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .reconcile_on(triggers)
        .run(
            kos_operator::reconcile::reconcile,
            kos_operator::reconcile::error_policy,
            ctx.clone(),
        )
        .for_each(|_| async {}),
    );
    fake.apply_json(&cluster(), "kubectl").into_diagnostic()?;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let ready = clusters
            .get_opt("demo")
            .await
            .into_diagnostic()?
            .is_some_and(|c| {
                c.status.is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|x| x.kind == "Ready" && x.status == "True")
                })
            });
        if ready {
            break;
        }
        if Instant::now() > deadline {
            return Err(miette!("the Cluster never became Ready"));
        }
        tokio::time::sleep(POLL).await;
    }
    eprintln!("kos bench autoscale: the cluster is Ready; a scale-up from zero");
    let session = {
        let profile = kos_cloud::config::CloudProfile::from_clouds_text(
            "bench",
            &sim.clouds_yaml("sim"),
            "sim",
        )
        .into_diagnostic()?;
        kos_cloud::Session::connect(&profile)
            .await
            .into_diagnostic()?
    };

    // The autoscaler's client, its certificate for the Cluster.
    let (cert, key) = ca.sign(&format!("{NS}/demo"), &[], true)?;
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&ca.pem))
        .identity(tonic::transport::Identity::from_pem(cert, key))
        .domain_name("localhost");
    let channel = tonic::transport::Channel::from_shared(format!("https://{addr}"))
        .into_diagnostic()?
        .tls_config(tls)
        .into_diagnostic()?
        .connect()
        .await
        .into_diagnostic()?;
    let mut provider = CloudProviderClient::new(channel);
    provider
        .refresh(RefreshRequest {})
        .await
        .map_err(|e| miette!("{e}"))?;
    let t0 = Instant::now();
    provider
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: "scaled".into(),
        })
        .await
        .map_err(|e| miette!("{e}"))?;
    let (listed, ready) = follow(&sim, &session, "kos-demo-scaled-0", None).await?;
    let scale_up_secs = secs(ready - t0);
    let scale_up_boot_join_secs = secs(ready - listed);

    eprintln!("kos bench autoscale: a node found dead");
    let old = session
        .compute()
        .list_servers(&kos_cloud::model::TagQuery::default())
        .await
        .into_diagnostic()?
        .into_iter()
        .find(|s| s.name == "kos-demo-fixed-0")
        .ok_or_else(|| miette!("no fixed-0 server"))?;
    let t1 = Instant::now();
    session
        .compute()
        .stop_server(&old.id)
        .await
        .into_diagnostic()?;
    let (listed, ready) = follow(&sim, &session, "kos-demo-fixed-0", Some(&old.id)).await?;
    controller.abort();
    if std::env::var_os("KOS_BENCH_TRACE").is_some() {
        for e in fake.events() {
            eprintln!("{} {}: {}", e.type_, e.reason, e.message);
        }
    }
    let repair_secs = secs(ready - t1);
    let repair_boot_join_secs = secs(ready - listed);
    let window = kos_cluster::spec::HealthCheck::NOT_READY_TIMEOUT_SECS as f64;
    Ok(Report {
        time_scale: scale,
        scale_up_secs,
        scale_up_boot_join_secs,
        scale_up_ratio: scale_up_secs / scale_up_boot_join_secs,
        repair_secs,
        repair_window_secs: window,
        repair_boot_join_secs,
        repair_ratio: repair_secs / (window + repair_boot_join_secs),
    })
}
