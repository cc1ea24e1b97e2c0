//! What the `kos` binary's tests share: running it isolated from the developer's machine, and a
//! `kos sim serve` in the background.
// Each test binary uses its own part of this.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const KOS: &str = env!("CARGO_BIN_EXE_kos");

/// The served simulators' CONNECT proxies, by the simulator's base URL (`http://127.0.0.1:PORT`):
/// kos and kubectl reach a simulated cluster's API through it (`HTTPS_PROXY`), as a user does.
static PROXIES: std::sync::Mutex<std::collections::BTreeMap<String, String>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// The proxy of the served simulator the clouds.yaml `clouds` points at, if any.
pub fn proxy_for(clouds: &Path) -> Option<String> {
    let text = std::fs::read_to_string(clouds).ok()?;
    PROXIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(base, _)| text.contains(&format!("{base}/")))
        .map(|(_, proxy)| proxy.clone())
}

/// `cmd` without the developer's proxies, and through `clouds`' simulator's proxy when it has one.
fn proxied(cmd: &mut Command, clouds: Option<&Path>) {
    for var in [
        "HTTPS_PROXY",
        "https_proxy",
        "NO_PROXY",
        "no_proxy",
        "HTTP_PROXY",
        "http_proxy",
    ] {
        cmd.env_remove(var);
    }
    if let Some(proxy) = clouds.and_then(proxy_for) {
        cmd.env("HTTPS_PROXY", proxy);
    }
}

/// python-openstackclient: `KOS_OPENSTACK_CLI`, then `$HOME/.cache/kos/venv/bin/openstack` (where `.ci/run`
/// installs it), then `PATH`. Without it the calling test fails, saying how to install it.
pub fn openstack_cli() -> PathBuf {
    if let Some(p) = std::env::var_os("KOS_OPENSTACK_CLI") {
        return PathBuf::from(p);
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".cache/kos/venv/bin/openstack");
        if p.exists() {
            return p;
        }
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("openstack"))
                .find(|p| p.exists())
        })
        .unwrap_or_default();
    on_path.unwrap_or_else(|| {
        panic!(
            "python-openstackclient is not installed. Install it as .ci/run does:\n  python3 -m venv ~/.cache/kos/venv && \
             ~/.cache/kos/venv/bin/pip install python-openstackclient==10.5.0 python-octaviaclient==3.15.0\n\
             or point KOS_OPENSTACK_CLI at an `openstack` binary."
        )
    })
}

pub fn example(name: &str) -> PathBuf {
    Path::new(
        &std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("../../examples")
    .join(name)
}

/// `kos <args>` that sees no clouds.yaml but `clouds` (none from the developer's machine: not in the
/// working directory, not under HOME), its own data directory and no kubeconfig, so `--cloud sim`
/// means what the test intends.
pub fn isolated(data: &Path, clouds: Option<&Path>, args: &[&str]) -> Command {
    let mut cmd = Command::new(KOS);
    cmd.args(args);
    isolate(cmd, data, clouds)
}

/// As [`isolated`], run under `umask` (through `sh`, which sets it and then becomes `kos`).
pub fn isolated_umask(data: &Path, clouds: Option<&Path>, umask: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(KOS)
        .args(args);
    isolate(cmd, data, clouds)
}

fn isolate(mut cmd: Command, data: &Path, clouds: Option<&Path>) -> Command {
    cmd.current_dir(data)
        .env("HOME", data)
        .env("XDG_CONFIG_HOME", data.join(".config"))
        .env("KOS_DATA_DIR", data.join("kos-data"))
        .env_remove("OS_CLOUD")
        .env_remove("OS_CLIENT_CONFIG_FILE")
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG");
    if let Some(c) = clouds {
        cmd.env("OS_CLIENT_CONFIG_FILE", c);
    }
    proxied(&mut cmd, clouds);
    cmd
}

pub fn kos(data: &Path, clouds: Option<&Path>, args: &[&str]) -> Output {
    isolated(data, clouds, args).output().expect("kos runs")
}

pub fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// `kos sim serve` in the background: a cloud that outlives the `kos` processes of a test, which the
/// test can change between and during their runs.
pub struct Served {
    child: Child,
    pub clouds: PathBuf,
    /// The simulator's base URL (its admin endpoint lives under it).
    pub base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts it with its clouds.yaml in `dir`, 20x faster than real time: an HA `up` takes seconds, a
/// wide window to kill it in.
pub fn serve(dir: &Path) -> Served {
    serve_scaled(dir, "0.05")
}

/// As [`serve`], at `time_scale` real seconds per cloud second.
pub fn serve_scaled(dir: &Path, time_scale: &str) -> Served {
    serve_with(dir, time_scale, None)
}

/// As [`serve_scaled`], with a simulator config file (latency, faults, rate limits, ...).
pub fn serve_with(dir: &Path, time_scale: &str, config: Option<&Path>) -> Served {
    let clouds = dir.join("clouds.yaml");
    let mut cmd = Command::new(KOS);
    cmd.args([
        "sim",
        "serve",
        "--port",
        "0",
        "--time-scale",
        time_scale,
        "--clouds-yaml",
    ])
    .arg(&clouds);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kos sim serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(first.contains("listening"), "{first}");
    let url_in = |line: &str| {
        line.split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned()
    };
    let base = url_in(&first);
    let proxy = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("proxy into the clusters' API endpoints"))
        .map(|l| url_in(&l))
        .expect("kos sim serve names its proxy");
    PROXIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(base.clone(), proxy);
    // Drain what it prints so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Served {
        child,
        clouds,
        base,
    }
}

/// A simulator config file (`kos sim serve --config`) in `d` holding `yaml`.
pub fn sim_config(d: &Path, yaml: &str) -> PathBuf {
    let p = d.join("sim.yaml");
    std::fs::write(&p, yaml).expect("write sim config");
    p
}

/// Calls the simulator's admin API (`/_sim/...`): `method` `path` with an optional JSON body; the
/// answer's status and JSON body (null when it has none).
pub fn admin(
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut req = reqwest::Client::new().request(method, format!("{base}{path}"));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let rsp = req.send().await.expect("the simulator answers");
        let status = rsp.status().as_u16();
        let text = rsp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or_default())
    })
}

/// How many cloud requests (its own admin API aside) the simulator has logged.
pub fn requests(base: &str) -> usize {
    let (_, v) = admin(base, reqwest::Method::GET, "/_sim/log", None);
    v["entries"].as_array().map_or(0, |e| {
        e.iter()
            .filter(|e| !e["path"].as_str().unwrap_or_default().starts_with("/_sim"))
            .count()
    })
}

/// A port on 127.0.0.1 that nothing listens on (bound, then freed).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A clouds.yaml in `dir` with one cloud `name` at `auth_url`.
pub fn clouds_yaml(dir: &Path, name: &str, auth_url: &str) -> PathBuf {
    let path = dir.join(format!("clouds-{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "clouds:\n  {name}:\n    auth:\n      auth_url: {auth_url}\n      username: someone\n      \
             password: a-long-password-1\n      project_name: someproject\n"
        ),
    )
    .expect("write clouds.yaml");
    path
}

/// A kos-cloud session to the served simulator: what tests look at the cloud through (never through the
/// `kos` whose work they check).
pub async fn session(clouds: &Path) -> kos_cloud::Session {
    let profile =
        kos_cloud::CloudProfile::load(&kos_cloud::Env::process(), Some("sim"), Some(clouds))
            .expect("profile");
    kos_cloud::Session::connect(&profile)
        .await
        .expect("session")
}

/// `kos <args>` started in the background, its output discarded.
pub fn spawn(data: &Path, clouds: &Path, args: &[&str]) -> Child {
    isolated(data, Some(clouds), args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kos")
}

/// SIGKILL: no cleanup, no goodbye.
pub fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Every kos-named object of `cluster` still in the cloud, found through kos-cloud directly (not through
/// the engine whose work is being checked).
pub async fn leftovers(clouds: &Path, cluster: &str) -> Vec<String> {
    let s = session(clouds).await;
    let prefix = format!("kos-{cluster}-");
    let mut left = Vec::new();
    let mut add = |kind: &str, names: Vec<String>| {
        left.extend(
            names
                .into_iter()
                .filter(|n| n.starts_with(&prefix))
                .map(|n| format!("{kind} {n}")),
        )
    };
    add(
        "server",
        s.compute()
            .list_servers(&kos_cloud::model::TagQuery::default())
            .await
            .expect("servers")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    add(
        "keypair",
        s.compute()
            .list_keypairs()
            .await
            .expect("keypairs")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    add(
        "server group",
        s.compute()
            .list_server_groups()
            .await
            .expect("groups")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    let net = s.network();
    add(
        "network",
        net.list_networks(&Default::default())
            .await
            .expect("networks")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    add(
        "port",
        net.list_ports(&Default::default())
            .await
            .expect("ports")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    add(
        "router",
        net.list_routers(&Default::default())
            .await
            .expect("routers")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    add(
        "security group",
        net.list_security_groups(&Default::default())
            .await
            .expect("sgs")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    add(
        "floating ip",
        net.list_floating_ips(&Default::default())
            .await
            .expect("fips")
            .into_iter()
            .map(|x| x.description)
            .collect(),
    );
    add(
        "volume",
        s.block_storage()
            .list_volumes(&Default::default())
            .await
            .expect("volumes")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    add(
        "application credential",
        s.identity()
            .list_application_credentials(None)
            .await
            .expect("application credentials")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    add(
        "load balancer",
        s.load_balancer()
            .list_load_balancers(&Default::default())
            .await
            .expect("lbs")
            .into_iter()
            .map(|x| x.name)
            .collect(),
    );
    left
}

/// kubectl: `KOS_KUBECTL`, else `/usr/bin/kubectl`, else the one on PATH; without one the calling
/// test fails saying how to install it.
pub fn kubectl_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KOS_KUBECTL") {
        return PathBuf::from(p);
    }
    let usr = PathBuf::from("/usr/bin/kubectl");
    if usr.exists() {
        return usr;
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("kubectl"))
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| {
            panic!(
                "kubectl is not installed: `apt-get install kubernetes-client` (Debian), or point KOS_KUBECTL at a kubectl binary"
            )
        })
}

/// kubectl with `dir`'s `kubeconfig-demo` (what `kos kubeconfig demo` writes there), nothing else.
pub fn kubectl(dir: &Path, args: &[&str]) -> Output {
    kubectl_with(dir, &dir.join("kubeconfig-demo"))
        .args(args)
        .output()
        .expect("kubectl runs")
}

/// kubectl with the kubeconfig `kubeconfig` only, in `dir`, through the proxy of the served
/// simulator whose clouds.yaml is in `dir` (a simulated cluster's API is at its floating IP).
pub fn kubectl_with(dir: &Path, kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(kubectl_binary());
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .current_dir(dir)
        .env_remove("KUBECONFIG");
    proxied(&mut cmd, Some(&dir.join("clouds.yaml")));
    cmd
}

/// The simulator's whole state (`GET /_sim/state`).
pub fn sim_state(base: &str) -> Value {
    sim_admin(base, "/_sim/state")
}

/// A JSON document of the simulator's admin API (`/_sim/...`).
pub fn sim_admin(base: &str, path: &str) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        reqwest::get(format!("{base}{path}"))
            .await
            .expect("admin API")
            .json()
            .await
            .expect("json")
    })
}

/// Polls `f` until `Some`, for up to `secs` real seconds (generous: a loaded machine).
pub fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The local directory of cluster `name` on cloud `cloud` under the test's data directory `d`:
/// `kos-data/clusters/<cloud>/<project key>/<name>`, the one project that has it (a path that does
/// not exist while none has).
pub fn cluster_dir(d: &Path, cloud: &str, name: &str) -> PathBuf {
    let base = d.join("kos-data/clusters").join(cloud);
    let found: Vec<PathBuf> = std::fs::read_dir(&base)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path().join(name))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    match found.as_slice() {
        [] => base.join("(no project yet)").join(name),
        [one] => one.clone(),
        more => panic!("cluster {name} has directories in several projects: {more:?}"),
    }
}

/// `kos <args>` in the background, every line it prints (stdout and stderr) sent as it comes.
pub struct Watched {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Watched {
    pub fn start(d: &Path, clouds: &Path, args: &[&str]) -> Watched {
        let mut child = isolated(d, Some(clouds), args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kos");
        let (tx, lines) = std::sync::mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        for r in [
            Box::new(out) as Box<dyn std::io::Read + Send>,
            Box::new(err) as Box<dyn std::io::Read + Send>,
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    if tx.send(l).is_err() {
                        return;
                    }
                }
            });
        }
        Watched {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits until a line contains `what` (true), or the run ends or `secs` pass (false).
    pub fn until(&mut self, what: &str, secs: u64) -> bool {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(l) => {
                    let hit = l.contains(what);
                    self.seen.push(l);
                    if hit {
                        return true;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return false,
            }
        }
        false
    }

    /// Waits for the run to end (at most `secs`, then it is killed); its exit code and output.
    pub fn finish(mut self, secs: u64) -> (i32, String) {
        let end = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s.code().unwrap_or(-1);
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break -1;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        // The readers end with the process.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        (status, self.seen.join("\n"))
    }
}

/// Cinder volumes a cluster's CSI driver made (its cluster metadata), from the simulator's state.
pub fn csi_volumes(base: &str) -> Vec<Value> {
    sim_state(base)["cinder"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v["metadata"]["cinder.csi.openstack.org/cluster"].is_string())
        .collect()
}

/// `kubectl get WHAT -o json` with `dir`'s `kubeconfig-demo`, or `None` when it fails.
pub fn kube_get(dir: &Path, what: &[&str]) -> Option<Value> {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", "json"]);
    let o = kubectl(dir, &args);
    if !o.status.success() {
        return None;
    }
    serde_json::from_slice(&o.stdout).ok()
}

/// The server a Node is (its `openstack:///` provider ID).
pub fn server_of(node: &Value) -> String {
    node["spec"]["providerID"]
        .as_str()
        .and_then(|p| p.strip_prefix("openstack:///"))
        .unwrap_or_default()
        .to_owned()
}
