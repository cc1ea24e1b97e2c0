//! Checks by the real tools: cloud-init's own schema validator (after cloud-init's own Jinja rendering),
//! shellcheck, and openssl for the discovery hash and the certificate chain. A missing tool fails the test
//! with the package to install.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::path::Path;
use std::process::Command;

use common::*;
use kos_bootstrap::cloud_init::{BOOTSTRAP_SCRIPT, bootstrap_env, render_user_data};
use kos_bootstrap::*;

const INSTANCE_ID: &str = "3f9d2c1a-5b6e-4f70-8a9b-0c1d2e3f4a5b";
const HOSTNAME: &str = "demo-cp-0";

/// Renders the user-data the way cloud-init does at boot: inflate gzip, then run cloud-init's own Jinja
/// handler (`## template: jinja`) with instance data. cloud-init 22.x's `schema --config-file` only
/// accepts a file that starts with `#cloud-config`, i.e. the rendered template, so that is what we validate.
fn cloud_init_render(ud: &UserData, dir: &Path, name: &str) -> String {
    let raw = if ud.gzipped {
        let mut s = String::new();
        flate2::read::GzDecoder::new(ud.payload())
            .read_to_string(&mut s)
            .unwrap();
        s
    } else {
        String::from_utf8(ud.payload().to_vec()).unwrap()
    };
    assert!(raw.starts_with("## template: jinja\n#cloud-config\n"));
    let template = write(dir, &format!("{name}.tmpl"), raw.as_bytes());
    let rendered = dir.join(format!("{name}.yaml"));
    // cloud-init's interpreter is the one on its shebang line (its modules are not on every python's path).
    let shebang = std::fs::read_to_string(tool_path("cloud-init")).unwrap();
    let python = shebang
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("#!")
        .trim()
        .to_string();
    let script = r#"
import sys
from cloudinit.handlers.jinja_template import render_jinja_payload
src, dst, iid, host = sys.argv[1:5]
out = render_jinja_payload(open(src).read(), src, {"v1": {"instance_id": iid, "local_hostname": host}})
if out is None or "CI_MISSING_JINJA_VAR" in out:
    sys.exit("cloud-init could not render the template")
open(dst, "w").write(out)
"#;
    let status = Command::new(&python)
        .args(["-c", script])
        .arg(&template)
        .arg(&rendered)
        .args([INSTANCE_ID, HOSTNAME])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cloud-init's Jinja renderer failed for {name}"
    );
    std::fs::read_to_string(rendered).unwrap()
}

fn tool_path(name: &str) -> std::path::PathBuf {
    let _ = tool(name, "cloud-init");
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap()
}

fn scenarios() -> Vec<(String, ClusterInput, NodeInput)> {
    let mut out = vec![];
    for (version, cps) in [("1.36.4", 1), ("1.36.4", 3), ("1.34.2", 3)] {
        for role in [Role::InitControlPlane, Role::JoinControlPlane, Role::Worker] {
            if cps == 1 && role == Role::JoinControlPlane {
                continue;
            }
            out.push((
                format!("{version}-{cps}cp-{}", role.key()),
                cluster(version, cps, 2),
                node(role),
            ));
        }
    }
    let mut upload = cluster("1.36.4", 3, 0);
    upload.pki_delivery = PkiDelivery::UploadCerts;
    out.push((
        "upload-certs-join".into(),
        upload,
        node(Role::JoinControlPlane),
    ));
    let mut v6 = cluster("1.36.4", 1, 0);
    v6.pod_cidr = "fd00:10:244::/56".parse().unwrap();
    v6.service_cidr = "fd00:10:96::/112".parse().unwrap();
    out.push(("ipv6-init".into(), v6, node(Role::InitControlPlane)));
    for role in [Role::InitControlPlane, Role::Worker] {
        out.push((
            format!("airgapped-{}", role.key()),
            airgapped("1.36.4", 1, 2),
            node(role),
        ));
    }
    out
}

#[test]
fn every_user_data_passes_cloud_init_schema() {
    let s = secrets();
    let dir = tempfile::tempdir().unwrap();
    for (name, c, n) in scenarios() {
        let ud = render_user_data(&c, &n, &s).unwrap();
        let rendered = cloud_init_render(&ud, dir.path(), &name);
        assert!(rendered.starts_with("#cloud-config\n"), "{name}");
        assert!(
            rendered.contains(&format!("openstack:///{INSTANCE_ID}")),
            "{name}: provider-id not rendered"
        );
        assert!(
            rendered.contains(&format!("name: \"{HOSTNAME}\"")),
            "{name}: node name not rendered"
        );
        // Jinja must leave everything else byte for byte: the script and every key survive.
        assert!(rendered.contains("kos-bootstrap: $*"), "{name}");
        let out = tool("cloud-init", "cloud-init")
            .args(["schema", "--config-file"])
            .arg(dir.path().join(format!("{name}.yaml")))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: cloud-init schema rejected the user-data:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_shell_script_passes_shellcheck() {
    let s = secrets();
    let dir = tempfile::tempdir().unwrap();
    let mut files = vec![write(
        dir.path(),
        "kos-bootstrap",
        BOOTSTRAP_SCRIPT.as_bytes(),
    )];
    for (name, c, n) in scenarios() {
        files.push(write(
            dir.path(),
            &format!("{name}.env"),
            bootstrap_env(&c, &n, &s).unwrap().as_bytes(),
        ));
    }
    for f in files {
        let out = tool("shellcheck", "shellcheck")
            .args(["--shell=bash", "--severity=style"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "shellcheck {}:\n{}",
            f.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // The env file is valid shell that sets what the script reads.
    let env = write(
        dir.path(),
        "check.env",
        bootstrap_env(&cluster("1.36.4", 3, 2), &node(Role::Worker), &s)
            .unwrap()
            .as_bytes(),
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            ". {} && echo \"$KOS_ROLE $KOS_ENDPOINT $KOS_K8S_CHANNEL\"",
            env.display()
        ))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "worker 203.0.113.10:6443 v1.36\n"
    );
}

fn sh(cmd: &str) -> String {
    let out = tool("openssl", "openssl").arg("version").output().unwrap();
    assert!(out.status.success());
    let out = Command::new("bash")
        .args(["-o", "pipefail", "-c", cmd])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn discovery_hash_matches_openssl() {
    let s = secrets();
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "ca.crt", s.ca.cert_pem.as_bytes());
    let expected = sh(&format!(
        "openssl x509 -pubkey -noout -in {} | openssl pkey -pubin -outform der | sha256sum",
        ca.display()
    ));
    let hex = expected.split_whitespace().next().unwrap();
    assert_eq!(s.discovery_hash().unwrap(), format!("sha256:{hex}"));
}

#[test]
fn pki_is_what_kubeadm_expects() {
    let s = secrets();
    let dir = tempfile::tempdir().unwrap();
    for (name, ca, cn) in [
        ("ca", &s.ca, "kubernetes"),
        ("etcd-ca", &s.etcd_ca, "etcd-ca"),
        ("front-proxy-ca", &s.front_proxy_ca, "front-proxy-ca"),
    ] {
        let crt = write(dir.path(), &format!("{name}.crt"), ca.cert_pem.as_bytes());
        let key = write(
            dir.path(),
            &format!("{name}.key"),
            ca.key_pem.expose().as_bytes(),
        );
        let text = sh(&format!(
            "openssl x509 -in {} -noout -text -subject",
            crt.display()
        ));
        assert!(
            text.contains("CA:TRUE") && text.contains("Certificate Sign"),
            "{name}"
        );
        assert!(
            text.contains(&format!("CN = {cn}")) || text.contains(&format!("CN={cn}")),
            "{name}"
        );
        assert!(
            text.contains("Not After : Dec 30 00:00:00 2035 GMT"),
            "{name}: {text}"
        );
        // The key belongs to the certificate.
        let a = sh(&format!(
            "openssl x509 -in {} -noout -pubkey",
            crt.display()
        ));
        let b = sh(&format!("openssl pkey -in {} -pubout", key.display()));
        assert_eq!(a, b, "{name}");
    }
    let sa = write(
        dir.path(),
        "sa.key",
        s.service_account.private_pem.expose().as_bytes(),
    );
    assert_eq!(
        sh(&format!("openssl pkey -in {} -pubout", sa.display())),
        s.service_account.public_pem
    );
}

#[test]
fn admin_kubeconfig_chains_to_the_ca_even_from_a_stored_bundle() {
    let generated = secrets();
    let s = ClusterSecrets::from_bundle(generated.to_bundle().expose()).unwrap();
    let c = cluster("1.36.4", 1, 0);
    let kc = render_kubeconfig(
        &mut rng(),
        &c.name,
        &c.endpoint,
        &c.kubernetes_version,
        &s,
        now(),
    )
    .unwrap();
    let field = |key: &str| -> Vec<u8> {
        use base64::Engine;
        let line = kc
            .expose()
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap();
        let v = line.split_once(": ").unwrap().1.trim();
        base64::engine::general_purpose::STANDARD.decode(v).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "ca.crt", &field("certificate-authority-data"));
    let crt = write(dir.path(), "admin.crt", &field("client-certificate-data"));
    write(dir.path(), "admin.key", &field("client-key-data"));
    assert_eq!(std::fs::read_to_string(&ca).unwrap(), generated.ca.cert_pem);
    let verify = sh(&format!(
        "openssl verify -CAfile {} {}",
        ca.display(),
        crt.display()
    ));
    assert!(verify.trim_end().ends_with(": OK"), "{verify}");
    let subject = sh(&format!(
        "openssl x509 -in {} -noout -subject -ext extendedKeyUsage",
        crt.display()
    ));
    assert!(
        subject.contains("kubeadm:cluster-admins") && subject.contains("kubernetes-admin"),
        "{subject}"
    );
    assert!(
        subject.contains("TLS Web Client Authentication"),
        "{subject}"
    );
}

/// Runs the script's `cni` step against a local "download": a CNI without a manifest, unverified pins
/// and checksum mismatches fail closed with a marker; a matching manifest is rewritten to the pod CIDR
/// (and an untagged image to its pinned tag) and handed to kubectl.
#[test]
fn cni_step_fails_closed_and_applies_only_verified_manifests() {
    let s = secrets();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = write(d, "kos-bootstrap", BOOTSTRAP_SCRIPT.as_bytes());
    // A kubectl that records its arguments and the file it was asked to apply (its last argument).
    let bin = d.join("bin");
    write(
        &bin,
        "kubectl",
        b"#!/bin/sh\necho \"$@\" >\"$KOS_TEST_APPLIED.args\"\nfor f; do :; done\ncp \"$f\" \"$KOS_TEST_APPLIED\"\n",
    );
    // The API server's static pod manifest as kubeadm writes it, with the advertise address.
    let apiserver_manifest = write(
        d,
        "kube-apiserver.yaml",
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 10.0.0.5:6443\n  creationTimestamp: null\n",
    );
    sh(&format!(
        "chmod +x {} {}",
        bin.join("kubectl").display(),
        script.display()
    ));
    let run = |name: &str, env: &str| -> (bool, String) {
        let env_file = write(d, &format!("{name}.env"), env.as_bytes());
        let console = d.join(format!("{name}.console"));
        std::fs::write(&console, "").unwrap();
        let ok = Command::new("bash")
            .arg(&script)
            .args(["__step", "step", "cni", "cni"])
            .env("KOS_ENV_FILE", &env_file)
            .env("KOS_LOG", d.join(format!("{name}.log")))
            .env("KOS_CONSOLE", &console)
            .env("KOS_CNI_FILE", d.join(format!("{name}.cni.yaml")))
            .env("KOS_TEST_APPLIED", d.join(format!("{name}.applied")))
            .env("KOS_APISERVER_MANIFEST", &apiserver_manifest)
            .env("KOS_STATE_DIR", d.join(format!("{name}.state")))
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .status()
            .unwrap()
            .success();
        (ok, std::fs::read_to_string(console).unwrap())
    };
    // The env of `cni`, its download pointed at a local manifest with the given sha256.
    let pinned = |env: &str, manifest: &Path, sha: &str, verified: bool| {
        env.lines()
            .map(|l| match l.split_once('=') {
                Some(("KOS_CNI_URL", _)) => format!("KOS_CNI_URL='file://{}'", manifest.display()),
                Some(("KOS_CNI_SHA256", _)) => format!("KOS_CNI_SHA256='{sha}'"),
                Some(("KOS_CNI_VERIFIED", _)) => format!("KOS_CNI_VERIFIED='{verified}'"),
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let sha_of = |path: &Path| sh(&format!("sha256sum {} | cut -d' ' -f1", path.display()));
    let _ = tool("curl", "curl");

    // Cilium has no manifest to pin (validation refuses it first; the script still fails closed).
    let mut c = cluster("1.36.4", 1, 0);
    c.cni = Cni::Cilium;
    let env = bootstrap_env(&c, &node(Role::InitControlPlane), &s).unwrap();
    let (ok, console) = run("cilium", &env);
    assert!(!ok);
    assert_eq!(
        console,
        "kos-bootstrap: cni failed: no manifest for CNI cilium: pin one (url and sha256) in the cluster spec\n"
    );

    // Flannel: the verified pin is used as is; its hard-coded network becomes the pod CIDR.
    let manifest = "net-conf.json: '{\"Network\": \"10.244.0.0/16\"}'\n";
    let manifest_path = write(d, "flannel.yaml", manifest.as_bytes());
    let sha = sha_of(&manifest_path);
    c.cni = Cni::Flannel;
    c.pod_cidr = "10.42.0.0/16".parse().unwrap();
    let env = bootstrap_env(&c, &node(Role::InitControlPlane), &s).unwrap();
    assert!(env.contains("KOS_CNI_VERIFIED='true'"), "{env}");
    let (ok, console) = run(
        "unverified",
        &pinned(&env, &manifest_path, sha.trim(), false),
    );
    assert!(!ok);
    assert_eq!(
        console,
        "kos-bootstrap: cni failed: sha256 of the flannel v0.28.9 manifest is not verified: pin one in the cluster spec\n"
    );
    let (ok, console) = run(
        "mismatch",
        &pinned(&env, &manifest_path, &"0".repeat(64), true),
    );
    assert!(!ok);
    assert!(
        console.starts_with("kos-bootstrap: cni failed: sha256 mismatch for file://"),
        "{console}"
    );
    assert!(!d.join("mismatch.applied").exists());
    let (ok, console) = run("good", &pinned(&env, &manifest_path, sha.trim(), true));
    assert!(ok, "{console}");
    assert_eq!(console, "kos-bootstrap: cni ok\n");
    let applied = std::fs::read_to_string(d.join("good.applied")).unwrap();
    assert_eq!(applied, manifest.replace("10.244.0.0/16", "10.42.0.0/16"));
    // Through this node's own API server, at the advertise address kubeadm recorded, not
    // admin.conf's endpoint (a load balancer that may not answer yet).
    let args = std::fs::read_to_string(d.join("good.applied.args")).unwrap();
    assert_eq!(
        args.trim_end(),
        format!(
            "--server https://10.0.0.5:6443 apply -f {}",
            d.join("good.cni.yaml").display()
        )
    );
    // A step that passed is recorded, so the resume unit's run skips it.
    assert!(d.join("good.state/cni.done").exists());

    // kube-router names its image without a tag: it gets the release's tag, on every container.
    let manifest = "      containers:\n      - name: kube-router\n        image: docker.io/cloudnativelabs/kube-router\n        imagePullPolicy: Always\n      initContainers:\n      - image: docker.io/cloudnativelabs/kube-router\n";
    let manifest_path = write(d, "kube-router.yaml", manifest.as_bytes());
    let sha = sha_of(&manifest_path);
    c.cni = Cni::KubeRouter;
    let env = bootstrap_env(&c, &node(Role::InitControlPlane), &s).unwrap();
    let (ok, console) = run(
        "kube-router",
        &pinned(&env, &manifest_path, sha.trim(), true),
    );
    assert!(ok, "{console}");
    let applied = std::fs::read_to_string(d.join("kube-router.applied")).unwrap();
    assert_eq!(
        applied,
        manifest.replace(
            "docker.io/cloudnativelabs/kube-router\n",
            "docker.io/cloudnativelabs/kube-router:v2.11.1\n"
        )
    );
    // A manifest without that image cannot be pinned: refused rather than applied unpinned.
    let other = write(d, "other.yaml", b"image: example.org/other\n");
    let sha = sha_of(&other);
    let (ok, console) = run("no-image", &pinned(&env, &other, sha.trim(), true));
    assert!(!ok);
    assert_eq!(
        console,
        "kos-bootstrap: cni failed: could not pin image docker.io/cloudnativelabs/kube-router to v2.11.1 in the kube-router manifest\n"
    );
}

/// Once the cluster exists (main sets RESUMABLE after kubeadm init), a failed step is not the end:
/// its marker says `retrying`, and a systemd unit runs the script again a minute later and every
/// minute while it fails; inside that unit a failure only exits non-zero (systemd restarts it), and
/// a step that passed before is skipped without a marker.
#[test]
fn a_step_failing_after_init_is_retried_by_a_systemd_unit() {
    let s = secrets();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = write(d, "kos-bootstrap", BOOTSTRAP_SCRIPT.as_bytes());
    let bin = d.join("bin");
    // A systemd-run that records its arguments.
    write(
        &bin,
        "systemd-run",
        b"#!/bin/sh\necho \"$@\" >>\"$KOS_TEST_UNITS\"\n",
    );
    sh(&format!(
        "chmod +x {} {}",
        bin.join("systemd-run").display(),
        script.display()
    ));
    // A CNI step that fails at once: no manifest pinned.
    let mut c = cluster("1.36.4", 1, 0);
    c.cni = Cni::Cilium;
    let env = bootstrap_env(&c, &node(Role::InitControlPlane), &s).unwrap();
    let env_file = write(d, "init.env", env.as_bytes());
    let state = d.join("state");
    let units = d.join("units");
    let run = |name: &str, body: &str| -> (bool, String) {
        let console = d.join(format!("{name}.console"));
        std::fs::write(&console, "").unwrap();
        let ok = Command::new("bash")
            .arg(&script)
            .args(["__step", "eval", body])
            .env("KOS_ENV_FILE", &env_file)
            .env("KOS_LOG", d.join(format!("{name}.log")))
            .env("KOS_CONSOLE", &console)
            .env("KOS_STATE_DIR", &state)
            .env("KOS_TEST_UNITS", &units)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .status()
            .unwrap()
            .success();
        (ok, std::fs::read_to_string(console).unwrap())
    };
    let reason = "no manifest for CNI cilium: pin one (url and sha256) in the cluster spec";

    // The first run (cloud-init's): the unit takes over.
    let (ok, console) = run("first", "RESUMABLE=true; step cni cni");
    assert!(!ok);
    assert_eq!(console, format!("kos-bootstrap: cni retrying: {reason}\n"));
    assert_eq!(
        std::fs::read_to_string(&units).unwrap(),
        format!(
            "--unit=kos-bootstrap-resume --on-active=60 --property=Restart=on-failure --property=RestartSec=60 {} resume\n",
            script.canonicalize().unwrap().display()
        )
    );

    // Inside the unit: the marker again, and no second unit.
    let (ok, console) = run("unit", "RESUMABLE=true; RESUMING=true; step cni cni");
    assert!(!ok, "a failure must make systemd run the unit again");
    assert_eq!(console, format!("kos-bootstrap: cni retrying: {reason}\n"));
    assert_eq!(std::fs::read_to_string(&units).unwrap().lines().count(), 1);

    // Before the cluster exists, a failure is final, as before.
    let (ok, console) = run("before", "step cni cni");
    assert!(!ok);
    assert_eq!(console, format!("kos-bootstrap: cni failed: {reason}\n"));

    // A step that passed in an earlier run is skipped, silently.
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("cni.done"), "").unwrap();
    let (ok, console) = run("done", "RESUMABLE=true; RESUMING=true; step cni cni");
    assert!(ok);
    assert_eq!(console, "");
}

/// A kubeadm that fails makes the script's marker carry kubeadm's own error: the failed preflight
/// check, or kubeadm's `error:` line, never the "To see the stack trace ..." hint every kubeadm
/// failure ends with. The outputs are kubeadm's (its error handler prints `error: <err>` and the
/// hint; a failed preflight lists `[ERROR <check>]` lines first).
#[test]
fn a_kubeadm_failure_is_reported_with_kubeadms_own_error() {
    let s = secrets();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = write(d, "kos-bootstrap", BOOTSTRAP_SCRIPT.as_bytes());
    let bin = d.join("bin");
    // A kubeadm that prints what a real one printed, then fails.
    write(
        &bin,
        "kubeadm",
        b"#!/bin/sh\ncat \"$KOS_TEST_KUBEADM_OUTPUT\"\nexit 1\n",
    );
    sh(&format!(
        "chmod +x {} {}",
        bin.join("kubeadm").display(),
        script.display()
    ));
    let env = bootstrap_env(&cluster("1.36.4", 1, 1), &node(Role::Worker), &s)
        .unwrap()
        .lines()
        .map(|l| match l.split_once('=') {
            Some(("KOS_JOIN_ATTEMPTS", _)) => "KOS_JOIN_ATTEMPTS='1'".to_owned(),
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let env_file = write(d, "join.env", env.as_bytes());
    let run = |name: &str, output: &str| -> String {
        let out = write(d, &format!("{name}.kubeadm"), output.as_bytes());
        let console = d.join(format!("{name}.console"));
        std::fs::write(&console, "").unwrap();
        let ok = Command::new("bash")
            .arg(&script)
            .args(["__step", "step", "kubeadm-join", "kubeadm_join"])
            .env("KOS_ENV_FILE", &env_file)
            .env("KOS_LOG", d.join(format!("{name}.log")))
            .env("KOS_CONSOLE", &console)
            .env("KOS_KUBEADM_LOG", d.join(format!("{name}.kubeadm.log")))
            .env("KOS_TEST_KUBEADM_OUTPUT", &out)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .status()
            .unwrap()
            .success();
        assert!(!ok, "{name}: the step must fail");
        std::fs::read_to_string(console).unwrap()
    };
    let discovery = "[preflight] Running pre-flight checks\n\
        error: error execution phase preflight: couldn't validate the identity of the API Server: could not find a JWS signature in the cluster-info ConfigMap for token ID \"abcdef\"\n\
        To see the stack trace of this error execute with --v=5 or higher\n";
    assert_eq!(
        run("discovery", discovery),
        "kos-bootstrap: kubeadm-join failed: kubeadm join failed after 1 attempts: error execution phase preflight: couldn't validate the identity of the API Server: could not find a JWS signature in the cluster-info ConfigMap for token ID \"abcdef\"\n"
    );
    let preflight = "[preflight] Running pre-flight checks\n\
        [preflight] Some fatal errors occurred:\n\
        \t[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists\n\
        \t[ERROR Port-10250]: Port 10250 is in use\n\
        [preflight] If you know what you are doing, you can make a check non-fatal with `--ignore-preflight-errors=...`\n\
        error: error execution phase preflight: preflight checks failed\n\
        To see the stack trace of this error execute with --v=5 or higher\n";
    assert_eq!(
        run("preflight", preflight),
        "kos-bootstrap: kubeadm-join failed: kubeadm join failed after 1 attempts: [ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists\n"
    );
    // A kubeadm from before the `error:` prefix: its last line before the hint.
    let older = "[preflight] Running pre-flight checks\n\
        error execution phase kubelet-start: a Node with name \"kos-demo-w-0\" and status \"Ready\" already exists in the cluster. You must delete the existing Node or change the name of this new joining Node\n\
        To see the stack trace of this error execute with --v=5 or higher\n";
    assert_eq!(
        run("older", older),
        "kos-bootstrap: kubeadm-join failed: kubeadm join failed after 1 attempts: error execution phase kubelet-start: a Node with name \"kos-demo-w-0\" and status \"Ready\" already exists in the cluster. You must delete the existing Node or change the name of this new joining Node\n"
    );
}

/// With a manifest mirror the cni step downloads the mirror's copy (`<mirror>/<host>/<path>` of the
/// published URL) and still checks the pinned sha256; the proxy's variables reach curl.
#[test]
fn cni_step_downloads_from_the_manifest_mirror_and_checks_the_same_sha256() {
    let s = secrets();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _ = tool("curl", "curl");
    let script = write(d, "kos-bootstrap", BOOTSTRAP_SCRIPT.as_bytes());
    let bin = d.join("bin");
    write(
        &bin,
        "kubectl",
        b"#!/bin/sh\nfor f; do :; done\ncp \"$f\" \"$KOS_TEST_APPLIED\"\nenv | grep '^https_proxy=' >\"$KOS_TEST_APPLIED.env\"\n",
    );
    let apiserver_manifest = write(
        d,
        "kube-apiserver.yaml",
        b"metadata:\n  annotations:\n    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 10.0.0.5:6443\n",
    );
    sh(&format!(
        "chmod +x {} {}",
        bin.join("kubectl").display(),
        script.display()
    ));
    let manifest = "kind: DaemonSet # mirrored\n";
    let mirrored = write(
        &d.join("mirror/example.com/cni"),
        "manifest.yaml",
        manifest.as_bytes(),
    );
    let sha = sh(&format!("sha256sum {} | cut -d' ' -f1", mirrored.display()));
    let mut c = airgapped("1.36.4", 1, 0);
    c.cni_manifest = Some(ManifestPin {
        url: "https://example.com/cni/manifest.yaml".into(),
        sha256: sha.trim().into(),
    });
    c.airgap.manifests = Some(format!("file://{}/mirror/", d.display()));
    let env = bootstrap_env(&c, &node(Role::InitControlPlane), &s).unwrap();
    let want = format!(
        "KOS_CNI_URL='file://{}/mirror/example.com/cni/manifest.yaml'",
        d.display()
    );
    assert!(env.contains(&want), "{env}");
    assert!(
        env.contains("KOS_HTTPS_PROXY='http://proxy.example:3128'"),
        "{env}"
    );
    let run = |name: &str, env: &str| -> (bool, String) {
        let env_file = write(d, &format!("{name}.env"), env.as_bytes());
        let console = d.join(format!("{name}.console"));
        std::fs::write(&console, "").unwrap();
        let ok = Command::new("bash")
            .arg(&script)
            .args(["__step", "step", "cni", "cni"])
            .env("KOS_ENV_FILE", &env_file)
            .env("KOS_LOG", d.join(format!("{name}.log")))
            .env("KOS_CONSOLE", &console)
            .env("KOS_CNI_FILE", d.join(format!("{name}.cni.yaml")))
            .env("KOS_TEST_APPLIED", d.join(format!("{name}.applied")))
            .env("KOS_APISERVER_MANIFEST", &apiserver_manifest)
            .env("KOS_STATE_DIR", d.join(format!("{name}.state")))
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .status()
            .unwrap()
            .success();
        (ok, std::fs::read_to_string(console).unwrap())
    };
    let (ok, console) = run("mirror", &env);
    assert!(ok, "{console}");
    assert_eq!(
        std::fs::read_to_string(d.join("mirror.applied")).unwrap(),
        manifest
    );
    assert_eq!(
        std::fs::read_to_string(d.join("mirror.applied.env")).unwrap(),
        "https_proxy=http://proxy.example:3128\n"
    );
    // A mirror serving other bytes is refused by the same pin.
    std::fs::write(&mirrored, "kind: DaemonSet # tampered\n").unwrap();
    let (ok, console) = run("tampered", &env);
    assert!(!ok);
    assert!(
        console.starts_with("kos-bootstrap: cni failed: sha256 mismatch for file://"),
        "{console}"
    );
}
