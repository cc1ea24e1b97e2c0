//! What several of kos-operator's test files share. Each file uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// An example cluster document (`examples/<name>`), as JSON.
pub fn example(name: &str) -> Value {
    let path = examples().join(name);
    serde_saphyr::from_str(&std::fs::read_to_string(path).expect("example")).expect("yaml")
}

/// Every example, then the fixture with every field the examples leave out.
pub fn documents() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples())
        .expect("examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files.push(package().join("tests/fixtures/every-field.yaml"));
    assert!(files.len() >= 5, "{files:?}");
    files
}

/// `kubernetes-validate`: `KOS_KUBERNETES_VALIDATE`, then the venv scripts/test installs it into.
pub fn validator() -> PathBuf {
    if let Some(p) = std::env::var_os("KOS_KUBERNETES_VALIDATE") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let p = home.join(".cache/kos/venv/bin/kubernetes-validate");
    assert!(
        p.is_file(),
        "`kubernetes-validate` is required by this test and is missing: run scripts/test (it installs it \
         into ~/.cache/kos/venv), or `pip install kubernetes-validate==1.37.0` and point \
         KOS_KUBERNETES_VALIDATE at it"
    );
    p
}

/// The simulated cloud's forwarders to its clusters' API endpoints (what a workstation or a
/// management cluster reaches them through).
pub struct SimReach(pub kos_sim::SharedApp);

#[derive(Debug, thiserror::Error)]
#[error("the simulated cloud serves no API at {0}")]
struct NotServed(String);

impl kos_control::connect::Reach for SimReach {
    fn local_address<'a>(
        &'a self,
        ep: &'a kos_bootstrap::ApiEndpoint,
    ) -> kos_control::connect::Reaching<'a> {
        Box::pin(async move {
            let want = ep.to_string();
            let list = self
                .0
                .guests()
                .map(|rt| rt.kube_endpoints())
                .unwrap_or_default();
            list.into_iter()
                .find(|e| e.endpoint == want)
                .map(|e| Some(e.local))
                .ok_or_else(|| kos_control::connect::ReachError(Box::new(NotServed(want))))
        })
    }
}

/// The world a controller test runs in: a simulated cloud at 1000x whose servers run kos's
/// user_data (devstack's project network), and kos-kube-fake as the management cluster with the
/// Cluster CRD applied; its client.
pub async fn controller_world() -> (kos_sim::Sim, kos_kube_fake::FakeKube, kube::Client) {
    let mut cfg = kos_sim::SimConfig::fast();
    cfg.project_network = true;
    let mut sim = kos_sim::Sim::start(cfg).await.expect("sim");
    let guests = kos_guest::sim::SimGuests::new().expect("guests");
    assert!(sim.attach_guests(std::sync::Arc::new(guests)));
    let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
    let client = fake.client().expect("client");
    Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &kos_operator::resource::crd())
        .await
        .expect("crd");
    (sim, fake, client)
}

/// A session with `sim` (its clouds.yaml, cloud `sim`), as kos makes one.
pub async fn session(sim: &kos_sim::Sim) -> kos_cloud::Session {
    let profile =
        kos_cloud::config::CloudProfile::from_clouds_text("test", &sim.clouds_yaml("sim"), "sim")
            .expect("profile");
    kos_cloud::Session::connect(&profile)
        .await
        .expect("session")
}

/// How many objects the cloud shows tagged for `cluster`.
pub async fn tagged(sim: &kos_sim::Sim, cluster: &str) -> usize {
    let session = session(sim).await;
    kos_cluster::observe::observe(&session, cluster)
        .await
        .expect("observe")
        .all()
        .count()
}

/// `kos-operator manifests` (for a stand-in image) applied to `fake` as kubectl applies them, all
/// but the Deployment (a test runs the binary itself); every document, the Deployment included.
pub fn apply_manifests(fake: &kos_kube_fake::FakeKube) -> Vec<Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kos-operator"))
        .args([
            "manifests",
            "--image",
            "registry.example/kos/kos-operator:0.1.0",
        ])
        .output()
        .expect("manifests");
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).expect("utf8")).expect("yaml");
    for d in docs.iter().filter(|d| d["kind"] != "Deployment") {
        fake.apply_json(d, "kubectl").expect("apply");
    }
    docs
}

/// A kubeconfig in `dir` with the token of the operator's ServiceAccount (what a pod would mount).
pub fn operator_kubeconfig(fake: &kos_kube_fake::FakeKube, dir: &Path) -> PathBuf {
    let token = fake
        .service_account_token("kos-system", "kos-operator")
        .expect("token");
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: op\nusers:\n- name: op\n  user:\n    token: {token}\ncurrent-context: fake\n",
            fake.url()
        ),
    )
    .expect("kubeconfig");
    path
}

/// The identity Secret `cloud` (`sim`'s clouds.yaml, cloud `sim`) made in `secrets`' namespace, and
/// the `identityRef` a Cluster there names it by.
pub async fn create_identity(
    secrets: &Api<Secret>,
    sim: &kos_sim::Sim,
) -> kos_operator::resource::IdentityRef {
    let identity: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cloud"},
        "stringData": {"clouds.yaml": sim.clouds_yaml("sim")},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &identity)
        .await
        .expect("identity");
    kos_operator::resource::IdentityRef {
        name: "cloud".into(),
        cloud_name: "sim".into(),
    }
}

/// The real kubectl (`KOS_KUBECTL`, else `/usr/bin/kubectl`, else `PATH`), as the operator's users
/// run it; scripts/test-deps installs Debian's kubernetes-client.
pub fn kubectl_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KOS_KUBECTL") {
        return PathBuf::from(p);
    }
    std::iter::once(PathBuf::from("/usr/bin"))
        .chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        )
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .expect(
            "kubectl is required by this test and was not found (KOS_KUBECTL, /usr/bin/kubectl, \
             PATH): `apt-get install kubernetes-client`, as scripts/test-deps does",
        )
}

/// `kubectl ARGS` as an admin of `fake` (with `stdin` piped in when given): whether it exited 0,
/// stdout, stderr. Run off the async workers (kubectl may take a while on a loaded machine).
pub async fn kubectl(
    fake: &kos_kube_fake::FakeKube,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    let home = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        home.path().join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: admin\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: admin\n\
             current-context: fake\n",
            fake.url()
        ),
    )
    .expect("kubeconfig");
    let mut cmd = std::process::Command::new(kubectl_binary());
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("KUBECONFIG", home.path().join("kubeconfig"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let input = stdin.unwrap_or_default().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = cmd.spawn().expect("run kubectl");
        if let Some(mut pipe) = child.stdin.take() {
            pipe.write_all(input.as_bytes()).expect("kubectl's stdin");
        }
        let out = child.wait_with_output().expect("kubectl");
        drop(home);
        out
    })
    .await
    .expect("kubectl's thread");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubernetes-validate --strict` of `objects` for each Kubernetes minor kos supports: panics
/// naming the minor and what the validator said.
pub fn validate_for_each_minor(objects: &[Value]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let path = dir.path().join(format!("{i}.yaml"));
        std::fs::write(&path, serde_saphyr::to_string(o).expect("yaml")).expect("write");
        files.push(path);
    }
    let minors = kos_cluster::spec::KubernetesVersion::supported_minors();
    assert_eq!(minors.len(), 3, "{minors:?}");
    for minor in minors {
        let out = std::process::Command::new(validator())
            .args(["--strict", "--no-warn", "--quiet", "-k"])
            .arg(format!("1.{minor}.0"))
            .args(&files)
            .output()
            .expect("run kubernetes-validate");
        assert!(
            out.status.success(),
            "1.{minor}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A client of the workload cluster, from the `demo-kubeconfig` Secret the operator keeps in
/// `secrets`' namespace, reached through the simulated cloud's forwarder.
pub async fn workload(secrets: &Api<Secret>, reach: &SimReach) -> kube::Client {
    use kos_control::connect::Reach as _;
    let secret = secrets.get("demo-kubeconfig").await.expect("kubeconfig");
    let data = secret.data.expect("the kubeconfig Secret's data");
    let value = data.get("value").expect("the kubeconfig Secret's value");
    let text = String::from_utf8(value.0.clone()).expect("utf8");
    let kc = kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig yaml");
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("config");
    let host = config
        .cluster_url
        .host()
        .expect("the kubeconfig's server has a host")
        .to_owned();
    let ep = kos_control::connect::endpoint(&host);
    let local = reach
        .local_address(&ep)
        .await
        .expect("reach")
        .expect("local");
    config.cluster_url = format!("https://{local}").parse().expect("url");
    config.tls_server_name = Some(host);
    kube::Client::try_from(config).expect("client")
}

/// The operator's shared state for a controller test: this client, `sim`'s forwarders, kos-operator
/// as the Events' reporter, and `settings`.
#[allow(dead_code)] // Not every test binary starts a controller.
pub fn context(
    client: &kube::Client,
    sim: &kos_sim::Sim,
    settings: kos_operator::reconcile::Settings,
) -> std::sync::Arc<kos_operator::reconcile::Context> {
    std::sync::Arc::new(kos_operator::reconcile::Context::new(
        client.clone(),
        std::sync::Arc::new(SimReach(sim.app().clone())),
        kube::runtime::events::Reporter {
            controller: "kos-operator".into(),
            instance: None,
        },
        settings,
    ))
}

/// This package's directory in the checkout under test: `CARGO_MANIFEST_DIR` as cargo gives it at
/// run time (the compiled-in one may be another checkout's, sharing the target directory).
fn package() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
}

fn examples() -> PathBuf {
    package().join("../../examples")
}
