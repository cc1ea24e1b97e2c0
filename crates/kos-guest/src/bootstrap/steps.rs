//! The semantics of each step of kos's bootstrap script (crates/kos-bootstrap/src/scripts/
//! bootstrap.sh), keyed by the `step NAME FUNCTION` pair the script declares. The guest runs no shell:
//! each step does to the node and its cluster what the script's function does, and prints what the
//! function prints, so the marker's reason (the last log line) is the script's. A step the script
//! declares and the guest does not know fails as "not simulated".

use serde_json::Value;
use time::OffsetDateTime;

use crate::bootstrap::env::Env;
use crate::bootstrap::script::{self, StepCall};
use crate::cluster::{Cluster, ClusterId, CniState, KUBE_SYSTEM, KUBEADM_CERTS};
use crate::error::GuestError;
use crate::guest::{BOOTSTRAP_LOG, Cleanup, Guest, Program, Server, marker, reason_of, secs};
use crate::internet;
use crate::log::Logged;
use crate::proxy::{Reach, Tool};
use crate::seam::{Host, ServerId};
use crate::version::Version;

/// The `(step, function)` pairs the guest simulates, in the script's order.
pub const KNOWN_STEPS: &[(&str, &str)] = &[
    ("preflight", "preflight"),
    ("packages", "packages"),
    ("kernel", "kernel"),
    ("containerd", "containerd_config"),
    ("metadata-block", "metadata_block_step"),
    ("kubeadm-init", "kubeadm_init"),
    ("cni", "cni"),
    ("addons", "addons"),
    ("metadata-close", "metadata_close_step"),
    ("api-wait", "wait_api"),
    ("kubeadm-join", "kubeadm_join"),
    ("cleanup", "cleanup"),
];

/// The pseudo step for the script's `*)` branch: an unknown role fails after the common steps.
pub(crate) const UNKNOWN_ROLE: &str = "__unknown_role";

pub const KUBEADM_CONFIG: &str = "/etc/kos/kubeadm.yaml";
pub const PKI_DIR: &str = "/etc/kubernetes/pki";
pub const PKI_BACKUP: &str = "/etc/kos/pki";
pub const ADDONS_DIR: &str = "/etc/kos/addons";
pub const CNI_FILE: &str = "/etc/kos/cni.yaml";
pub const ADMIN_CONF: &str = "/etc/kubernetes/admin.conf";
pub const KUBEADM_LOG: &str = "/var/log/kos-kubeadm.log";
const METADATA_UNIT: &str = "/etc/systemd/system/kos-metadata-block.service";
/// How often the cleanup loop counts the nodes (the script's `sleep 30`).
const CLEANUP_POLL: u64 = 30;
/// The api-wait poll: `curl --max-time 5`, then `sleep 10`.
const API_POLL: u64 = 15;

/// Cloud seconds a step takes on a typical node (the packages step downloads).
pub fn duration(step: &str) -> u64 {
    match step {
        "packages" => 45,
        "containerd" => 6,
        "kernel" => 2,
        "kubeadm-init" => 60,
        "kubeadm-join" => 40,
        "cni" => 10,
        "addons" => 5,
        _ => 1,
    }
}

/// What one execution of a step did.
pub(crate) enum StepResult {
    Ok(Vec<String>),
    /// Not done yet: poll again at that time.
    Wait(OffsetDateTime, Vec<String>),
    /// An attempt failed and the step tries again at that time.
    Retry(OffsetDateTime, Vec<String>),
    /// The step failed: its output (the last line is the marker's reason) and the root cause.
    Fail {
        output: Vec<String>,
        detail: Option<String>,
    },
}

fn fail(line: impl Into<String>) -> StepResult {
    StepResult::Fail {
        output: vec![line.into()],
        detail: None,
    }
}

/// A cluster's pods have a network: a CNI was applied and its network is the cluster's pod subnet.
pub fn network_ready(c: &Cluster) -> bool {
    c.cni
        .as_ref()
        .is_some_and(|cni| match (&cni.network, &c.pod_subnet) {
            (Some(net), Some(pods)) => net == pods,
            _ => true,
        })
}

fn append_log(srv: &mut Server, lines: &[String]) {
    let mut text = String::new();
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    srv.vfs
        .write(BOOTSTRAP_LOG, text.as_bytes(), 0o600, "root:root", true);
}

/// Attempts of the script's `retry 10 kubectl …` (cni, addons).
const KUBECTL_ATTEMPTS: u32 = 10;

/// The script's `retry 10 kubectl …` after a failed attempt: it sleeps `attempt × 5` s and tries
/// again (an API endpoint still being built, a load balancer Octavia has not finished, answers a
/// few minutes later), and gives up after the tenth.
fn kubectl_retry(attempt: u32, now: OffsetDateTime, command: &str, detail: String) -> StepResult {
    let this = attempt + 1;
    if this >= KUBECTL_ATTEMPTS {
        return StepResult::Fail {
            output: vec![format!("gave up after {this} attempts: {command}")],
            detail: Some(detail),
        };
    }
    StepResult::Retry(now + secs(u64::from(this) * 5), vec![detail])
}

/// The command `function` retries as the script's `retry` prints it when it gives up (`local_kubectl
/// apply -f /etc/kos/cni.yaml`): its variables expanded as the guest knows them, else `fallback`.
fn retried(script_text: &str, function: &str, fallback: &str) -> String {
    match script::retried_command(script_text, function) {
        Some(words) if !words.is_empty() => words
            .iter()
            .map(|w| match w.trim_matches('"') {
                "$CNI_FILE" => CNI_FILE.to_owned(),
                "$ADDONS_DIR" => ADDONS_DIR.to_owned(),
                other => other.to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => fallback.to_owned(),
    }
}

/// `server: https://HOST:PORT` of a kubeconfig.
fn kubeconfig_server(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .map(str::to_owned)
}

impl Guest {
    /// Runs what is due on one server: its background cleanup, then its current step.
    pub(crate) fn advance(
        &mut self,
        id: &ServerId,
        srv: &mut Server,
        host: &dyn Host,
    ) -> Result<(), GuestError> {
        let now = host.now();
        if srv.cleanup.as_ref().is_some_and(|c| c.wake <= now) {
            self.run_cleanup(id, srv, host)?;
        }
        let (step, env, attempt, started, script) = match &srv.program {
            Program::Running(r) if r.wake <= now => match r.steps.get(r.idx) {
                Some(s) => (
                    s.clone(),
                    r.env.clone(),
                    r.attempt,
                    r.started.unwrap_or(now),
                    r.script.clone(),
                ),
                None => return Ok(()),
            },
            _ => return Ok(()),
        };
        let result = self.run_step(id, srv, &step, &env, attempt, started, &script, host)?;
        let Program::Running(run) = &mut srv.program else {
            return Ok(());
        };
        run.started.get_or_insert(now);
        match result {
            StepResult::Wait(at, out) => {
                run.wake = at;
                append_log(srv, &out);
            }
            StepResult::Retry(at, out) => {
                run.wake = at;
                run.attempt += 1;
                append_log(srv, &out);
            }
            StepResult::Ok(out) => {
                run.idx += 1;
                run.attempt = 0;
                run.started = None;
                let next = run.steps.get(run.idx).map(|s| s.name.clone());
                let spawn = run.spawns_cleanup.then(|| run.cleanup_step.clone());
                let final_marker = run.final_marker.clone();
                let env = run.env.clone();
                if let Some(next) = &next {
                    run.wake = now + secs(duration(next));
                }
                append_log(srv, &out);
                let line = marker(&step.name, Ok(()));
                append_log(srv, std::slice::from_ref(&line));
                self.say(id, srv, line, host);
                if next.is_none() {
                    if let Some(step) = spawn {
                        let deadline = now + secs(env.number("KOS_TOKEN_TTL_SECONDS").unwrap_or(0));
                        srv.cleanup = Some(Cleanup {
                            env,
                            step,
                            deadline,
                            wake: now,
                        });
                    }
                    srv.program = Program::Done;
                    if let Some(m) = final_marker {
                        let line = format!("kos-bootstrap: {m}");
                        append_log(srv, std::slice::from_ref(&line));
                        self.say(id, srv, line, host);
                    }
                }
            }
            StepResult::Fail { output, detail } => {
                let resumable = run.resumable_from.is_some_and(|from| run.idx >= from);
                let reason = reason_of(&output);
                if let (true, Some(unit)) = (resumable, run.resume) {
                    // The script's `step` after RESUMABLE: the marker says `retrying`, and the
                    // resume unit runs the script again (the steps that passed are skipped), first
                    // after its timer, then at each restart while it fails.
                    run.wake = now
                        + secs(if run.resuming {
                            unit.restart_secs
                        } else {
                            unit.first_secs
                        });
                    run.resuming = true;
                    run.attempt = 0;
                    run.started = None;
                    append_log(srv, &output);
                    let line = format!("kos-bootstrap: {} retrying: {reason}", step.name);
                    append_log(srv, std::slice::from_ref(&line));
                    self.say(id, srv, line, host);
                    self.record(
                        id,
                        Logged::StepFailed {
                            step: step.name.clone(),
                            reason,
                            detail,
                        },
                        host,
                    );
                    return Ok(());
                }
                append_log(srv, &output);
                // A resumable step whose unit the guest could not read fails visibly.
                let reason = if resumable {
                    "the resume unit (systemd-run ... \"$SELF\" resume) is not simulated by kos-guest"
                        .to_owned()
                } else {
                    reason
                };
                let line = marker(&step.name, Err(&reason));
                append_log(srv, std::slice::from_ref(&line));
                self.say(id, srv, line, host);
                srv.program = Program::Failed(step.name.clone());
                self.record(
                    id,
                    Logged::StepFailed {
                        step: step.name.clone(),
                        reason,
                        detail,
                    },
                    host,
                );
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)] // One per piece of a running step's context.
    fn run_step(
        &mut self,
        id: &ServerId,
        srv: &mut Server,
        step: &StepCall,
        env: &Env,
        attempt: u32,
        started: OffsetDateTime,
        script_text: &str,
        host: &dyn Host,
    ) -> Result<StepResult, GuestError> {
        let known = KNOWN_STEPS
            .iter()
            .any(|(n, f)| *n == step.name && *f == step.function);
        if step.function == UNKNOWN_ROLE {
            let role = env.get("KOS_ROLE").unwrap_or_default();
            return Ok(fail(format!("unknown role {role}")));
        }
        if !known {
            return Ok(fail(format!(
                "step {} (runs {}) is not simulated by kos-guest",
                step.name, step.function
            )));
        }
        let r = match step.function.as_str() {
            "preflight" => preflight(srv, env),
            "packages" => packages(id, srv, env, script_text, host),
            "kernel" => kernel(srv),
            "containerd_config" => containerd(srv, env, script_text, &step.function),
            "metadata_block_step" => metadata_block(srv, env, script_text, &step.function),
            "metadata_close_step" => metadata_close(srv, env, script_text, &step.function),
            "wait_api" => self.wait_api(id, srv, env, started, host),
            "kubeadm_init" | "kubeadm_join" => {
                self.kubeadm_step(id, srv, step, env, attempt, script_text, host)?
            }
            "cni" => self.cni(id, srv, env, attempt, script_text, host)?,
            "addons" => self.addons(id, srv, attempt, script_text, host)?,
            // Known pairs are matched above; the cleanup runs through run_cleanup.
            other => fail(format!(
                "step function {other} is not simulated by kos-guest"
            )),
        };
        Ok(r)
    }

    fn wait_api(
        &self,
        id: &ServerId,
        srv: &Server,
        env: &Env,
        started: OffsetDateTime,
        host: &dyn Host,
    ) -> StepResult {
        let (endpoint, wait) = match (env.get("KOS_ENDPOINT"), env.number("KOS_API_WAIT_SECONDS")) {
            (Ok(e), Ok(w)) => (e, w),
            (Err(e), _) | (_, Err(e)) => return fail(e),
        };
        let now = host.now();
        let answer = self.answering(id, Some(srv), endpoint, host);
        if !answer.clusters.is_empty() {
            return StepResult::Ok(vec![format!("API https://{endpoint} is ready")]);
        }
        if now >= started + secs(wait) {
            let detail = if answer.without_quorum.is_empty() {
                format!("nothing answers at {endpoint} from {id}")
            } else {
                let ids: Vec<String> = answer
                    .without_quorum
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                format!(
                    "the API servers behind {endpoint} fail /readyz: etcd of {} has lost quorum",
                    ids.join(", ")
                )
            };
            return StepResult::Fail {
                output: vec![format!(
                    "API https://{endpoint}/readyz did not answer within {wait}s"
                )],
                detail: Some(detail),
            };
        }
        StepResult::Wait(now + secs(API_POLL), Vec::new())
    }

    #[allow(clippy::too_many_arguments)] // One per piece of a running step's context.
    fn kubeadm_step(
        &mut self,
        id: &ServerId,
        srv: &mut Server,
        step: &StepCall,
        env: &Env,
        attempt: u32,
        script_text: &str,
        host: &dyn Host,
    ) -> Result<StepResult, GuestError> {
        let attempts_var = if step.function == "kubeadm_init" {
            "KOS_INIT_ATTEMPTS"
        } else {
            "KOS_JOIN_ATTEMPTS"
        };
        let attempts = match env.number(attempts_var) {
            Ok(n) => u32::try_from(n).unwrap_or(u32::MAX).max(1),
            Err(e) => return Ok(fail(e)),
        };
        let Some(mut args) = script::kubeadm_args(script_text, &step.function) else {
            return Ok(fail(format!(
                "{} does not call kubeadm_retry: not simulated by kos-guest",
                step.function
            )));
        };
        // kubeadm_retry's own arguments.
        args.extend([format!("--config={KUBEADM_CONFIG}"), "-v=1".to_owned()]);
        restore_pki(srv);
        let sub = args.first().cloned().unwrap_or_default();
        let result = match sub.as_str() {
            "init" => self.kubeadm_init(id, srv, &args[1..], host)?,
            "join" => self.kubeadm_join(id, srv, &args[1..], host)?,
            other => Err(vec![format!("unknown command \"{other}\" for \"kubeadm\"")]),
        };
        let now = host.now();
        let mut output = match result {
            Ok(out) => {
                srv.vfs.write(
                    KUBEADM_LOG,
                    out.join("\n").as_bytes(),
                    0o600,
                    "root:root",
                    false,
                );
                return Ok(StepResult::Ok(out));
            }
            Err(out) => out,
        };
        srv.vfs.write(
            KUBEADM_LOG,
            output.join("\n").as_bytes(),
            0o600,
            "root:root",
            false,
        );
        let this = attempt + 1;
        let reason = kubeadm_reason(&output);
        let root = Some(reason.clone());
        if this >= attempts {
            output.push(format!(
                "kubeadm {sub} failed after {this} attempts: {reason}"
            ));
            return Ok(StepResult::Fail {
                output,
                detail: root,
            });
        }
        // 10 s doubling to 120 s, plus half the delay for the script's `RANDOM % delay` jitter.
        let delay = (10u64 << (this - 1).min(4)).min(120);
        output.push(format!(
            "kubeadm {sub} attempt {this} failed; resetting and retrying in about {delay}s"
        ));
        self.kubeadm_reset(id, srv);
        Ok(StepResult::Retry(now + secs(delay + delay / 2), output))
    }

    /// The cluster the kubectl of `function` (its `retry N <kubectl> …` line) reaches: `kubectl`
    /// goes to admin.conf's server (the cluster's endpoint); the script's `local_kubectl` to this
    /// node's own API server, at the advertise address kubeadm recorded in its static pod manifest
    /// (a name its serving certificate holds).
    fn step_kubectl_cluster(
        &self,
        id: &ServerId,
        srv: &Server,
        script_text: &str,
        function: &str,
        host: &dyn Host,
    ) -> Result<ClusterId, String> {
        let command = script::retried_command(script_text, function).unwrap_or_default();
        match command.first().map(String::as_str) {
            Some("kubectl") => self.kubectl_cluster(id, srv, host),
            Some("local_kubectl") => {
                let Some(endpoint) = crate::static_pods::apiserver_endpoint(&srv.vfs) else {
                    return Err(format!(
                        "no advertise address in {}/kube-apiserver.yaml",
                        crate::static_pods::MANIFESTS_DIR
                    ));
                };
                self.answering(id, Some(srv), &endpoint, host)
                    .clusters
                    .first()
                    .copied()
                    .ok_or_else(|| format!("The connection to the server {endpoint} was refused - did you specify the right host or port?"))
            }
            _ => Err(format!(
                "{function} runs no `retry N kubectl` or `retry N local_kubectl`: not simulated by kos-guest"
            )),
        }
    }

    /// `kubectl` with admin.conf: the cluster that answers at its server from this node.
    fn kubectl_cluster(
        &self,
        id: &ServerId,
        srv: &Server,
        host: &dyn Host,
    ) -> Result<ClusterId, String> {
        let Some(server) = srv.vfs.text(ADMIN_CONF).and_then(kubeconfig_server) else {
            return Err("The connection to the server localhost:8080 was refused - did you specify the right host or port?".into());
        };
        self.answering(id, Some(srv), &server, host)
            .clusters
            .first()
            .copied()
            .ok_or_else(|| format!("The connection to the server {server} was refused - did you specify the right host or port?"))
    }

    #[allow(clippy::too_many_arguments)] // One per piece of a running step's context.
    fn cni(
        &mut self,
        id: &ServerId,
        srv: &mut Server,
        env: &Env,
        attempt: u32,
        script_text: &str,
        host: &dyn Host,
    ) -> Result<StepResult, GuestError> {
        let get = |k: &str| env.get(k).map(str::to_owned);
        let vars = (|| {
            Ok::<_, String>((
                get("KOS_CNI_URL")?,
                get("KOS_CNI_NAME")?,
                get("KOS_CNI_VERSION")?,
                get("KOS_CNI_VERIFIED")?,
                get("KOS_CNI_SHA256")?,
                get("KOS_CNI_POD_CIDR_DEFAULT")?,
                get("KOS_POD_CIDR")?,
            ))
        })();
        let (url, name, version, verified, sha, cidr_default, pod_cidr) = match vars {
            Ok(v) => v,
            Err(e) => return Ok(fail(e)),
        };
        if url.is_empty() {
            return Ok(fail(format!(
                "no manifest for CNI {name}: pin one (url and sha256) in the cluster spec"
            )));
        }
        if verified != "true" {
            return Ok(fail(format!(
                "sha256 of the {name} {version} manifest is not verified: pin one in the cluster spec"
            )));
        }
        match crate::proxy::reach(
            host,
            id,
            &url,
            crate::proxy::Proxy::of_script(env, script_text).as_ref(),
        ) {
            Reach::Reached => {}
            Reach::Unreachable => return Ok(fail(internet::unreachable(&url))),
            Reach::Proxy(f) => return Ok(fail(f.said_by(Tool::Curl))),
        }
        let manifest = match internet::download(&url) {
            Ok(m) => m,
            Err(e) => return Ok(fail(e)),
        };
        srv.fetched.push(url.clone());
        srv.vfs.write(
            CNI_FILE,
            manifest.sha256.as_bytes(),
            0o644,
            "root:root",
            false,
        );
        if manifest.sha256 != sha {
            return Ok(fail(format!("sha256 mismatch for {url}")));
        }
        // The script's `sed s#DEFAULT#POD_CIDR#g` only changes what the manifest really contains.
        let network = manifest.pod_cidr_default.map(|hard| {
            if !cidr_default.is_empty() && cidr_default == hard && cidr_default != pod_cidr {
                pod_cidr.clone()
            } else {
                hard.to_owned()
            }
        });
        let cid = match self.step_kubectl_cluster(id, srv, script_text, "cni", host) {
            Ok(c) => c,
            Err(e) => {
                return Ok(kubectl_retry(
                    attempt,
                    host.now(),
                    &retried(script_text, "cni", &format!("kubectl apply -f {CNI_FILE}")),
                    e,
                ));
            }
        };
        let Some(c) = self.clusters.get_mut(&cid) else {
            return Ok(fail("the cluster vanished"));
        };
        let ds = serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": manifest.daemonset,
                "namespace": KUBE_SYSTEM,
                "annotations": {"kos-guest/stand-in-for": url},
            },
            "spec": {
                "selector": {"matchLabels": {"k8s-app": manifest.daemonset}},
                "template": {"metadata": {"labels": {"k8s-app": manifest.daemonset}}, "spec": {"containers": []}},
            },
        });
        let Some(admin) = admin_conf(c, srv) else {
            return Ok(fail(NO_ADMIN_CONF));
        };
        match admin.apply_json(&ds) {
            Ok(_) => {}
            Err(kos_kube_fake::FakeError::Api(e)) => {
                return Ok(kubectl_retry(
                    attempt,
                    host.now(),
                    &retried(script_text, "cni", &format!("kubectl apply -f {CNI_FILE}")),
                    format!(
                        "Error from server ({}): error when applying {CNI_FILE:?}: {}",
                        e.reason, e.message
                    ),
                ));
            }
            Err(e) => return Err(e.into()),
        }
        drop(admin);
        c.cni = Some(CniState {
            daemonset: manifest.daemonset.to_owned(),
            network,
        });
        Ok(StepResult::Ok(vec![format!(
            "daemonset.apps/{} created",
            manifest.daemonset
        )]))
    }

    /// The addons step: each `kubectl apply -f DIR` and `kubectl wait` of the script's `addons()`,
    /// in order, as kubectl does them: a directory's own `.yaml`/`.yml`/`.json` files only (no
    /// descent without `-R`), every object's kind mapped before any is created (a custom resource
    /// sent with its CRD finds no kind; the others are applied and the command fails), and a wait
    /// for `condition=established` on the CRDs of a directory.
    fn addons(
        &mut self,
        id: &ServerId,
        srv: &mut Server,
        attempt: u32,
        script_text: &str,
        host: &dyn Host,
    ) -> Result<StepResult, GuestError> {
        let now = host.now();
        let mut commands: Vec<Vec<String>> = script::retried_commands(script_text, "addons")
            .into_iter()
            .map(|words| {
                words
                    .into_iter()
                    .map(|w| w.trim_matches('"').replace("$ADDONS_DIR", ADDONS_DIR))
                    .collect()
            })
            .collect();
        if commands.is_empty() {
            commands.push(
                ["local_kubectl", "apply", "-f", ADDONS_DIR]
                    .map(str::to_owned)
                    .to_vec(),
            );
        }
        let cid = match self.step_kubectl_cluster(id, srv, script_text, "addons", host) {
            Ok(c) => c,
            Err(e) => {
                let first = commands[0].join(" ");
                return Ok(kubectl_retry(attempt, now, &first, e));
            }
        };
        let mut out = Vec::new();
        for words in &commands {
            let command = words.join(" ");
            let gave_up = |detail: String| kubectl_retry(attempt, now, &command, detail);
            let dir = words
                .iter()
                .position(|w| w == "-f")
                .and_then(|i| words.get(i + 1))
                .cloned()
                .unwrap_or_default();
            // The script guards each subdirectory with `[ -d … ]`: an absent one is skipped.
            let files: Vec<String> = srv
                .vfs
                .list(&dir)
                .into_iter()
                .filter(|p| {
                    let rest = &p[dir.trim_end_matches('/').len() + 1..];
                    !rest.contains('/')
                        && [".yaml", ".yml", ".json"].iter().any(|x| rest.ends_with(x))
                })
                .map(str::to_owned)
                .collect();
            if files.is_empty() && dir != ADDONS_DIR {
                continue;
            }
            let mut docs: Vec<(String, Value)> = Vec::new();
            for path in &files {
                let Some(text) = srv.vfs.text(path) else {
                    return Ok(gave_up(format!("error: {path} is not text")));
                };
                for part in text.split("\n---\n") {
                    if part.trim().is_empty() {
                        continue;
                    }
                    match serde_saphyr::from_str::<Value>(part) {
                        Ok(Value::Null) => {}
                        Ok(v) => docs.push((path.clone(), v)),
                        Err(e) => {
                            return Ok(gave_up(format!(
                                "error: error parsing {path}: {}",
                                e.to_string().lines().next().unwrap_or_default()
                            )));
                        }
                    }
                }
            }
            let Some(c) = self.clusters.get(&cid) else {
                return Ok(fail("the cluster vanished"));
            };
            let Some(admin) = admin_conf(c, srv) else {
                return Ok(fail(NO_ADMIN_CONF));
            };
            let field = |d: &Value, p: &str| {
                d.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            if words.iter().any(|w| w == "wait") {
                for (path, doc) in &docs {
                    let name = field(doc, "/metadata/name");
                    let established = c
                        .kube
                        .list_json("apiextensions.k8s.io/v1", "CustomResourceDefinition", None)
                        .unwrap_or_default()
                        .iter()
                        .find(|d| field(d, "/metadata/name") == name)
                        .is_some_and(|d| {
                            d.pointer("/status/conditions")
                                .and_then(Value::as_array)
                                .is_some_and(|cs| {
                                    cs.iter().any(|x| {
                                        field(x, "/type") == "Established"
                                            && field(x, "/status") == "True"
                                    })
                                })
                        });
                    if !established {
                        return Ok(gave_up(format!(
                            "error: timed out waiting for the condition on {name} from {path}"
                        )));
                    }
                }
                out.push(format!("{} condition met", docs.len()));
                continue;
            }
            // kubectl maps every object's kind before it creates any.
            let served = |doc: &Value| {
                c.kube
                    .list_json(&field(doc, "/apiVersion"), &field(doc, "/kind"), None)
                    .is_ok()
            };
            let unmapped: Vec<String> = docs
                .iter()
                .filter(|(_, d)| !served(d))
                .map(|(path, d)| {
                    format!(
                        "error: resource mapping not found for name: {:?} namespace: {:?} from {path:?}: no matches for kind {:?} in version {:?}\nensure CRDs are installed first",
                        field(d, "/metadata/name"),
                        field(d, "/metadata/namespace"),
                        field(d, "/kind"),
                        field(d, "/apiVersion"),
                    )
                })
                .collect();
            for (path, mut doc) in docs.into_iter().filter(|(_, d)| served(d)) {
                let (api, kind, name) = (
                    field(&doc, "/apiVersion"),
                    field(&doc, "/kind"),
                    field(&doc, "/metadata/name"),
                );
                if api.is_empty() || kind.is_empty() {
                    return Ok(gave_up(format!(
                        "error: error validating {path}: apiVersion or kind not set"
                    )));
                }
                string_data_to_data(&mut doc);
                if !CLUSTER_SCOPED.contains(&kind.as_str())
                    && field(&doc, "/metadata/namespace").is_empty()
                {
                    doc["metadata"]["namespace"] = Value::from("default");
                }
                match admin.apply_json(&doc) {
                    Ok(_) => out.push(format!("{}/{name} configured", kind.to_ascii_lowercase())),
                    Err(e) => {
                        return Ok(gave_up(format!(
                            "error: error when applying {name:?} from {path}: {e}"
                        )));
                    }
                }
            }
            if !unmapped.is_empty() {
                return Ok(gave_up(unmapped.join("\n")));
            }
        }
        Ok(StepResult::Ok(out))
    }

    /// The background `kos-bootstrap cleanup`: once the expected nodes registered (or the token's
    /// lifetime is over) it deletes the bootstrap token and `kubeadm-certs`.
    fn run_cleanup(
        &mut self,
        id: &ServerId,
        srv: &mut Server,
        host: &dyn Host,
    ) -> Result<(), GuestError> {
        let Some(job) = srv.cleanup.take() else {
            return Ok(());
        };
        let now = host.now();
        let known = KNOWN_STEPS
            .iter()
            .any(|(n, f)| *n == job.step.name && *f == job.step.function);
        let fail_with = |this: &mut Guest, srv: &mut Server, reason: String| {
            let line = marker(&job.step.name, Err(&reason));
            this.say(id, srv, line, host);
            this.record(
                id,
                Logged::StepFailed {
                    step: job.step.name.clone(),
                    reason,
                    detail: None,
                },
                host,
            );
        };
        if !known {
            fail_with(
                self,
                srv,
                format!("step {} is not simulated by kos-guest", job.step.name),
            );
            return Ok(());
        }
        let (expected, token_id) = match (
            job.env.number("KOS_EXPECTED_NODES"),
            job.env.get("KOS_TOKEN_ID"),
        ) {
            (Ok(e), Ok(t)) => (e, t.to_owned()),
            (Err(e), _) | (_, Err(e)) => {
                fail_with(self, srv, e);
                return Ok(());
            }
        };
        let cluster = self.kubectl_cluster(id, srv, host).ok();
        let count = match cluster.and_then(|c| self.clusters.get(&c)) {
            Some(c) => c.kube.list::<k8s_openapi::api::core::v1::Node>(None)?.len() as u64,
            None => 0,
        };
        if count < expected && now < job.deadline {
            srv.cleanup = Some(Cleanup {
                wake: now + secs(CLEANUP_POLL),
                ..job
            });
            return Ok(());
        }
        let mut output = vec![format!("{count} of {expected} nodes registered")];
        match cluster.and_then(|c| self.clusters.get(&c)) {
            Some(c) => {
                // The script's `kubectl delete` with admin.conf; a refusal fails the cleanup.
                let mut refused = None;
                for name in [
                    format!("bootstrap-token-{token_id}"),
                    KUBEADM_CERTS.to_owned(),
                ] {
                    if c.secret(&name)?.is_some() {
                        let Some(admin) = admin_conf(c, srv) else {
                            refused = Some(NO_ADMIN_CONF.to_owned());
                            break;
                        };
                        match admin
                            .delete::<k8s_openapi::api::core::v1::Secret>(Some(KUBE_SYSTEM), &name)
                        {
                            Ok(()) => output.push(format!("secret \"{name}\" deleted")),
                            Err(kos_kube_fake::FakeError::Api(e)) => {
                                refused = Some(format!(
                                    "Error from server ({}): {}",
                                    e.reason, e.message
                                ));
                                break;
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                if let Some(why) = refused {
                    output.push(why);
                    append_log(srv, &output);
                    fail_with(self, srv, reason_of(&output));
                    return Ok(());
                }
            }
            None => {
                output.push(format!(
                    "gave up after 10 attempts: kubectl -n kube-system delete secret bootstrap-token-{token_id} kubeadm-certs --ignore-not-found"
                ));
                append_log(srv, &output);
                fail_with(self, srv, reason_of(&output));
                return Ok(());
            }
        }
        append_log(srv, &output);
        let line = marker(&job.step.name, Ok(()));
        self.say(id, srv, line, host);
        Ok(())
    }
}

/// What a node's `kubectl` without admin.conf's user says (kubeadm wrote admin.conf, so a node
/// with one has kubeadm installed).
const NO_ADMIN_CONF: &str =
    "error: no user in /etc/kubernetes/admin.conf: kubeadm is not installed";

/// The script's `kubectl` as admin.conf's user: `kubernetes-admin`, in the group the node's
/// kubeadm gives it ([`crate::kubeadm::rbac::admin`]), its writes owned by `kubectl`.
fn admin_conf<'a>(c: &'a Cluster, srv: &Server) -> Option<kos_kube_fake::Acting<'a>> {
    let kubeadm = srv.installed?;
    Some(
        c.kube
            .acting_as(crate::kubeadm::rbac::admin(kubeadm), "kubectl"),
    )
}

/// The script's `kubeadm_reason`: the first failed preflight check (`[ERROR <check>]: ...`), else
/// kubeadm's last `error: ` line without the prefix, else its last line that is not blank or the
/// stack-trace hint.
pub(crate) fn kubeadm_reason(output: &[String]) -> String {
    let check = output
        .iter()
        .find(|l| l.trim_start().starts_with("[ERROR "))
        .map(|l| l.trim_start().to_owned());
    let error = || {
        output
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .map(str::to_owned)
    };
    let last = || {
        output
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty() && !l.contains("To see the stack trace"))
            .cloned()
    };
    check
        .or_else(error)
        .or_else(last)
        .unwrap_or_else(|| "no output".into())
}

/// Kinds kubectl applies without a namespace.
const CLUSTER_SCOPED: &[&str] = &[
    "ClusterRole",
    "ClusterRoleBinding",
    "StorageClass",
    "CSIDriver",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "CustomResourceDefinition",
];

/// The API server turns a Secret's `stringData` into base64 `data`.
fn string_data_to_data(doc: &mut Value) {
    let Some(obj) = doc.as_object_mut() else {
        return;
    };
    let Some(Value::Object(sd)) = obj.remove("stringData") else {
        return;
    };
    let data = obj
        .entry("data")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            let text = v.as_str().unwrap_or_default();
            d.insert(
                k,
                Value::from(base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    text,
                )),
            );
        }
    }
}

fn preflight(srv: &mut Server, env: &Env) -> StepResult {
    if !srv.vfs.exists(KUBEADM_CONFIG) {
        return fail(format!("missing {KUBEADM_CONFIG}"));
    }
    if srv.vfs.exists(&format!("{PKI_DIR}/ca.key")) && srv.vfs.list(PKI_BACKUP).is_empty() {
        // kubeadm reset empties the certificates directory: the script keeps a copy for retries.
        let files: Vec<(String, crate::vfs::File)> = srv
            .vfs
            .list(PKI_DIR)
            .into_iter()
            .filter_map(|p| srv.vfs.get(p).map(|f| (p.to_owned(), f.clone())))
            .collect();
        for (p, f) in files {
            let to = format!("{PKI_BACKUP}{}", &p[PKI_DIR.len()..]);
            srv.vfs.write(&to, &f.content, f.mode, &f.owner, false);
        }
    }
    match (env.get("KOS_ROLE"), env.get("KOS_K8S_VERSION")) {
        (Ok(r), Ok(v)) => StepResult::Ok(vec![format!("role {r}, kubernetes {v}")]),
        (Err(e), _) | (_, Err(e)) => fail(e),
    }
}

pub(crate) fn restore_pki(srv: &mut Server) {
    let files: Vec<(String, crate::vfs::File)> = srv
        .vfs
        .list(PKI_BACKUP)
        .into_iter()
        .filter_map(|p| srv.vfs.get(p).map(|f| (p.to_owned(), f.clone())))
        .collect();
    for (p, f) in files {
        let to = format!("{PKI_DIR}{}", &p[PKI_BACKUP.len()..]);
        srv.vfs.write(&to, &f.content, f.mode, &f.owner, false);
    }
}

/// The script's first `apt-get install`: what the image's distribution archive must serve.
const OS_PACKAGES: &str =
    "apt-transport-https ca-certificates curl gpg containerd conntrack socat ethtool iptables";

fn packages(
    id: &ServerId,
    srv: &mut Server,
    env: &Env,
    script: &str,
    host: &dyn Host,
) -> StepResult {
    // apt and curl use the proxy the script exports.
    let proxy = crate::proxy::Proxy::of_script(env, script);
    let (version, channel) = match (env.get("KOS_K8S_VERSION"), env.get("KOS_K8S_CHANNEL")) {
        (Ok(v), Ok(c)) => (v.to_owned(), c.to_owned()),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let want = Version::parse(&version);
    if want.is_some() && srv.installed == want {
        return StepResult::Ok(vec![format!(
            "kubeadm v{version} already installed (prebuilt image): skipping packages"
        )]);
    }
    if !matches!(srv.image.os_id.as_str(), "debian" | "ubuntu") {
        let os = if srv.image.os_id.is_empty() {
            "unknown OS"
        } else {
            srv.image.os_id.as_str()
        };
        return fail(format!(
            "cannot install on {os}: use an image with kubeadm v{version}"
        ));
    }
    // `apt-get update` then `apt-get install … containerd conntrack …` from the image's sources
    // (or the archives cloud-init's apt module put there): an archive apt cannot reach is only a
    // warning to `update` (`W: Failed to fetch …`), so the install is what fails, finding no
    // package, and `retry` gives up on it.
    for (archive, suite) in crate::cloud_init::apt_suites(&srv.image, &srv.vfs) {
        let index = format!("{archive}/dists/{suite}/InRelease");
        let reason = match crate::proxy::reach(host, id, &index, proxy.as_ref()) {
            Reach::Reached => None,
            Reach::Unreachable => Some(format!(
                "Temporary failure resolving '{}'",
                internet::host_of(&index)
            )),
            Reach::Proxy(f) => Some(f.said_by(Tool::Apt)),
        };
        if let Some(reason) = reason {
            let fetch = format!("Failed to fetch {index}  {reason}");
            // The script's apt_unreachable names apt's first fetch warning after retry gives up.
            return StepResult::Fail {
                output: vec![
                    format!("W: {fetch}"),
                    "E: Unable to locate package containerd".to_owned(),
                    format!("gave up after 5 attempts: apt-get install -y -q {OS_PACKAGES}"),
                    format!(
                        "the OS packages' archive is unreachable ({fetch}): set mirrors.packages.os, or fix the image's apt sources"
                    ),
                ],
                detail: Some(fetch),
            };
        }
        srv.fetched.push(index);
    }
    // The script's `repo=…` and its `curl … "${repo}Release.key"`: the repository's host must be
    // reachable and serve a Kubernetes repository.
    let base = match env.get("KOS_K8S_PACKAGES") {
        Ok(b) => b.to_owned(),
        Err(e) => return fail(e),
    };
    let repo = format!("{base}/core:/stable:/{channel}/deb/");
    let key = format!("{repo}Release.key");
    match crate::proxy::reach(host, id, &key, proxy.as_ref()) {
        Reach::Reached => {}
        Reach::Unreachable => return fail(internet::unreachable(&key)),
        Reach::Proxy(f) => return fail(f.said_by(Tool::Curl)),
    }
    if let Err(e) = internet::package_repository(&repo) {
        return fail(e);
    }
    srv.fetched.push(key);
    srv.fetched.push(repo);
    // pkgs.k8s.io has one repository per minor: the version must be in the channel's.
    let in_channel =
        want.is_some_and(|w| channel == format!("v{}.{}", w.major, w.minor) && w.minor >= 24);
    if !in_channel {
        return fail(format!(
            "gave up after 5 attempts: apt-get install -y -q --allow-downgrades --allow-change-held-packages kubelet={version}-* kubeadm={version}-* kubectl={version}-*"
        ));
    }
    srv.installed = want;
    StepResult::Ok(vec![format!(
        "kubelet, kubeadm, kubectl {version} installed and held"
    )])
}

/// `sysctl --system`: the last assignment of a key over /etc/sysctl.d/*.conf (in name order) and
/// /etc/sysctl.conf wins.
fn sysctl(srv: &Server, key: &str) -> Option<String> {
    let mut value = None;
    let mut files: Vec<&str> = srv
        .vfs
        .list("/etc/sysctl.d")
        .into_iter()
        .filter(|p| p.ends_with(".conf"))
        .collect();
    files.push("/etc/sysctl.conf");
    for f in files {
        for line in srv.vfs.text(f).unwrap_or_default().lines() {
            if let Some((k, v)) = line.split_once('=')
                && k.trim() == key
            {
                value = Some(v.trim().to_owned());
            }
        }
    }
    value
}

fn kernel(srv: &mut Server) -> StepResult {
    if sysctl(srv, "net.ipv4.ip_forward").as_deref() != Some("1") {
        return fail("net.ipv4.ip_forward is not 1");
    }
    StepResult::Ok(Vec::new())
}

/// The script's containerd step: `containerd config default` with systemd's cgroup driver and, when
/// the function sets it from `KOS_PAUSE_IMAGE`, that image as the sandbox image (containerd 1.7's
/// default, registry.k8s.io/pause:3.8, otherwise). The guest does not run the function's `sed`; it
/// reads whether the function names the variable.
fn containerd(srv: &mut Server, env: &Env, script: &str, function: &str) -> StepResult {
    if srv.installed.is_none() {
        return fail("containerd: command not found");
    }
    let sets_sandbox = crate::firewall::body(script, function)
        .is_some_and(|b| b.iter().any(|l| l.contains("$KOS_PAUSE_IMAGE")));
    let sandbox = env
        .get("KOS_PAUSE_IMAGE")
        .ok()
        .filter(|i| sets_sandbox && !i.is_empty())
        .unwrap_or(crate::kubeadm::images::CONTAINERD_DEFAULT_SANDBOX);
    let config = format!(
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{sandbox}\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n            SystemdCgroup = true\n"
    );
    srv.vfs.write(
        "/etc/containerd/config.toml",
        config.as_bytes(),
        0o644,
        "root:root",
        false,
    );
    StepResult::Ok(vec![
        "Created symlink /etc/systemd/system/multi-user.target.wants/kubelet.service".into(),
    ])
}

/// The node's rules as `function` of the script sets them, added to what it has.
fn set_rules(srv: &mut Server, env: &Env, script: &str, function: &str) -> Result<(), String> {
    for r in crate::firewall::rules_of(script, function, env)? {
        // `-C … || -I …`: a rule that is there is not inserted twice.
        if !srv.firewall.contains(&r) {
            srv.firewall.push(r);
        }
    }
    Ok(())
}

/// Where the bootstrap marks that it closed the metadata service (the script's `METADATA_CLOSED`).
pub const METADATA_CLOSED: &str = "/etc/kos/metadata-closed";

fn metadata_close(srv: &mut Server, env: &Env, script: &str, function: &str) -> StepResult {
    if let Err(e) = set_rules(srv, env, script, function) {
        return fail(e);
    }
    srv.vfs
        .write(METADATA_CLOSED, b"", 0o644, "root:root", false);
    StepResult::Ok(Vec::new())
}

fn metadata_block(srv: &mut Server, env: &Env, script: &str, function: &str) -> StepResult {
    let vars = (
        env.get("KOS_POD_CIDR"),
        env.get("KOS_METADATA_ADDR"),
        env.get("KOS_IPTABLES"),
    );
    let (pods, metadata, iptables) = match vars {
        (Ok(p), Ok(m), Ok(i)) => (p, m, i),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return fail(e),
    };
    let v6 = match iptables {
        "iptables" => false,
        "ip6tables" => true,
        other => return fail(format!("{other}: command not found")),
    };
    for addr in [pods, metadata] {
        let ok = addr
            .parse::<ipnet::IpNet>()
            .is_ok_and(|n| n.addr().is_ipv6() == v6);
        if !ok {
            return fail(format!(
                "{iptables} v1.8.10 (nf_tables): host/network `{addr}' not found"
            ));
        }
    }
    if !srv.vfs.exists(METADATA_UNIT) {
        return fail("Failed to enable unit: Unit file kos-metadata-block.service does not exist.");
    }
    if let Err(e) = set_rules(srv, env, script, function) {
        return fail(e);
    }
    // What systemd runs at every boot from now on.
    srv.metadata_unit = srv.vfs.text(METADATA_UNIT).and_then(|unit| {
        unit.lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .map(|cmd| cmd.split_whitespace().map(str::to_owned).collect())
    });
    StepResult::Ok(vec![
        "Created symlink /etc/systemd/system/multi-user.target.wants/kos-metadata-block.service"
            .into(),
    ])
}
