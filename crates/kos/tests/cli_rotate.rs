//! `kos rotate credential` on a cluster of the simulated cloud, whose cloud controller runs in the
//! cluster on the cloud-config Secret: the new credential is rolled out before the old one is deleted
//! (Keystone revokes a deleted credential's tokens at once, so a CCM left on the old one could not
//! make the second Service's load balancer); the rotation alternates between the two names; `kos up`
//! afterwards changes nothing; `kos up --recreate-ccm-credential` on a running cluster is refused
//! instead of deleting the credential the CCM runs on; `kos down` deletes whichever exists.

mod support;

use std::path::Path;

use serde_json::Value;
use support::*;

/// The CCM's application credentials in Keystone, `(name, id)`.
fn credentials(base: &str) -> Vec<(String, String)> {
    sim_state(base)["keystone"]["app_creds"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| Some((c["name"].as_str()?.to_owned(), c["id"].as_str()?.to_owned())))
        .filter(|(n, _)| n.starts_with("kos-demo-ccm"))
        .collect()
}

/// The address the CCM put into the Service's status.
fn service_ip(dir: &Path, service: &str) -> Option<String> {
    let o = kubectl(
        dir,
        &[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/default/services/{service}"),
        ],
    );
    let v: Value = serde_json::from_slice(&o.stdout).ok()?;
    v["status"]["loadBalancer"]["ingress"][0]["ip"]
        .as_str()
        .map(str::to_owned)
}

/// Octavia load balancers the CCM made for `service`.
fn service_lbs(base: &str, service: &str) -> usize {
    let name = format!("kube_service_demo_default_{service}");
    sim_state(base)["octavia"]["loadbalancers"]
        .as_array()
        .map_or(0, |a| {
            a.iter()
                .filter(|l| l["base"]["name"].as_str() == Some(name.as_str()))
                .count()
        })
}

fn service(dir: &Path, name: &str, node_port: u16) {
    std::fs::write(
        dir.join(format!("{name}.yaml")),
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  type: LoadBalancer\n  selector:\n    app: {name}\n  ports:\n  - port: 80\n    targetPort: 8080\n    nodePort: {node_port}\n"
        ),
    )
    .expect("write");
    let o = kubectl(dir, &["apply", "-f", &format!("{name}.yaml")]);
    assert!(o.status.success(), "{}", text(&o));
}

/// The minimal example up on a `kos sim serve`, with its kubeconfig in `dir`.
fn cluster(dir: &Path) -> (Served, String) {
    let sim = serve_scaled(dir, "0.02");
    let spec = example("minimal.yaml").to_str().expect("utf8").to_owned();
    let up = kos(
        dir,
        Some(&sim.clouds),
        &["up", "-f", &spec, "--cloud", "sim"],
    );
    assert_eq!(code(&up), 0, "{}", text(&up));
    let kc = kos(
        dir,
        Some(&sim.clouds),
        &["kubeconfig", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&kc), 0, "{}", text(&kc));
    (sim, spec)
}

fn secret_credential_id(dir: &Path) -> String {
    let o = kubectl(
        dir,
        &[
            "get",
            "secret",
            "-n",
            "kube-system",
            "cloud-config",
            "-o",
            "jsonpath={.data.cloud\\.conf}",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    use base64::Engine as _;
    let conf = base64::engine::general_purpose::STANDARD
        .decode(o.stdout.trim_ascii())
        .expect("base64");
    let conf = String::from_utf8(conf).expect("utf8");
    conf.lines()
        .find_map(|l| l.strip_prefix("application-credential-id = "))
        .expect("an application credential in cloud.conf")
        .trim_matches('"')
        .to_owned()
}

#[test]
fn a_rotated_credential_is_live_before_the_old_one_goes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let (sim, spec) = cluster(d);
    let spec = spec.as_str();

    service(d, "web", 30080);
    eventually(120, "web's load balancer", || service_ip(d, "web"));
    assert_eq!(service_lbs(&sim.base, "web"), 1);
    let before = credentials(&sim.base);
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].0, "kos-demo-ccm");
    assert_eq!(secret_credential_id(d), before[0].1);

    let rot = kos(
        d,
        Some(&sim.clouds),
        &["rotate", "credential", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&rot), 0, "{}", text(&rot));
    let after = credentials(&sim.base);
    assert_eq!(after.len(), 1, "the old credential is gone: {after:?}");
    assert_eq!(after[0].0, "kos-demo-ccm-b");
    assert_ne!(after[0].1, before[0].1);
    assert_eq!(
        secret_credential_id(d),
        after[0].1,
        "the cluster holds the new one"
    );
    // Its secret appears nowhere in what kos printed.
    let secret = sim_state(&sim.base)["keystone"]["app_creds"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == after[0].1.as_str()))
        .and_then(|c| c["secret"].as_str().map(str::to_owned))
        .expect("the new credential's secret");
    assert!(!text(&rot).contains(&secret), "{}", text(&rot));
    let dir = cluster_dir(d, "sim", "demo");
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("ccm-credential.json")).expect("stored"),
    )
    .expect("json");
    assert_eq!(stored["id"], after[0].1.as_str());
    assert!(!dir.join("ccm-credential-next.json").exists());
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.join("ccm-credential.json"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // The CCM reconciles on the new credential: the old one's tokens were revoked with it.
    assert_eq!(
        service_lbs(&sim.base, "web"),
        1,
        "web keeps its load balancer"
    );
    service(d, "api", 30081);
    eventually(120, "a load balancer made after the rotation", || {
        service_ip(d, "api")
    });
    assert_eq!(service_lbs(&sim.base, "api"), 1);

    // kos up finds nothing to do, and keeps the rotated credential.
    let plan = kos(
        d,
        Some(&sim.clouds),
        &["plan", "-f", spec, "--cloud", "sim", "--detailed-exitcode"],
    );
    assert_eq!(code(&plan), 0, "{}", text(&plan));
    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    assert_eq!(credentials(&sim.base), after);

    // Rotating again goes back to the first name.
    let rot = kos(
        d,
        Some(&sim.clouds),
        &["rotate", "credential", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&rot), 0, "{}", text(&rot));
    let again = credentials(&sim.base);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].0, "kos-demo-ccm");
    assert_eq!(secret_credential_id(d), again[0].1);

    // The old way would delete the credential the running CCM uses: refused, nothing changed.
    let re = kos(
        d,
        Some(&sim.clouds),
        &[
            "up",
            "-f",
            spec,
            "--cloud",
            "sim",
            "--recreate-ccm-credential",
        ],
    );
    assert_eq!(code(&re), 3, "{}", text(&re));
    assert!(
        text(&re).contains("kos rotate credential demo"),
        "{}",
        text(&re)
    );
    assert_eq!(credentials(&sim.base), again);

    let down = kos(d, Some(&sim.clouds), &["down", "demo", "--cloud", "sim"]);
    assert_eq!(code(&down), 0, "{}", text(&down));
    assert_eq!(credentials(&sim.base), Vec::<(String, String)>::new());
}

/// A rotation that stops before deleting the old credential (Keystone refuses the delete): `kos up`
/// refuses to pick one of the two, and `kos rotate credential` again leaves one, live.
#[test]
fn an_unfinished_rotation_is_finished_by_running_it_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let (sim, spec) = cluster(d);
    let spec = spec.as_str();
    let (status, _) = admin(
        &sim.base,
        reqwest::Method::POST,
        "/_sim/faults",
        Some(
            serde_json::json!({"method": "DELETE", "path": "application_credentials/", "status": 403}),
        ),
    );
    assert_eq!(status, 201);
    let rot = kos(
        d,
        Some(&sim.clouds),
        &["rotate", "credential", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&rot), 1, "{}", text(&rot));
    assert!(
        text(&rot).contains("run `kos rotate credential` again"),
        "{}",
        text(&rot)
    );
    let both = credentials(&sim.base);
    assert_eq!(both.len(), 2, "{both:?}");
    let live = secret_credential_id(d);
    assert!(
        both.iter()
            .any(|(n, id)| n == "kos-demo-ccm-b" && *id == live),
        "{both:?}"
    );
    let (status, _) = admin(&sim.base, reqwest::Method::DELETE, "/_sim/faults", None);
    assert!(status < 300, "{status}");

    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 3, "{}", text(&up));
    assert!(text(&up).contains("has not finished"), "{}", text(&up));
    assert_eq!(credentials(&sim.base), both, "kos up deleted neither");

    let rot = kos(
        d,
        Some(&sim.clouds),
        &["rotate", "credential", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&rot), 0, "{}", text(&rot));
    let after = credentials(&sim.base);
    assert_eq!(after.len(), 1, "{after:?}");
    // The new credential was live and kept: only the old one's deletion was left.
    assert_eq!(
        after[0].1, live,
        "a third credential was made: {both:?} {after:?}"
    );
    assert_eq!(secret_credential_id(d), after[0].1);
    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
}

/// The CCM credential's roles and expiry, `(name, roles sorted, expires_at)`, from the simulator.
fn credential_terms(base: &str) -> Vec<(String, Vec<String>, Option<String>)> {
    sim_state(base)["keystone"]["app_creds"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| {
            let name = c["name"].as_str()?.to_owned();
            let mut roles: Vec<String> = c["roles"]
                .as_array()?
                .iter()
                .filter_map(|r| r["name"].as_str().map(str::to_owned))
                .collect();
            roles.sort();
            Some((name, roles, c["expires_at"].as_str().map(str::to_owned)))
        })
        .filter(|(n, ..)| n.starts_with("kos-demo-ccm"))
        .collect()
}

/// Makes the credential `id` expire `days` from now (negative: expired), as time passing would.
fn expire_in(base: &str, id: &str, days: i64) {
    let at = (chrono::Utc::now() + chrono::Duration::days(days)).to_rfc3339();
    let (status, body) = admin(
        base,
        reqwest::Method::POST,
        &format!("/_sim/app-credentials/{id}/expiry"),
        Some(serde_json::json!({ "expires_at": at })),
    );
    assert_eq!(status, 204, "{body}");
}

/// Days from now to a Keystone time (`2026-01-01T00:00:00.000000`, UTC).
fn days_left(keystone_time: &str) -> i64 {
    let t = chrono::NaiveDateTime::parse_from_str(keystone_time, "%Y-%m-%dT%H:%M:%S%.f")
        .expect("a Keystone time")
        .and_utc();
    (t - chrono::Utc::now()).num_days()
}

/// The credential kos makes has the member and Octavia roles only and an expiry `kos status` shows;
/// `kos up` rotates it when less than a third of its life is left, and when it has expired (the CCM
/// cannot authenticate then), and the CCM makes load balancers on the new one.
#[test]
fn kos_up_rotates_a_credential_near_its_expiry_or_expired() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let (sim, spec) = cluster(d);
    let spec = spec.as_str();

    let made = credential_terms(&sim.base);
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0].1, ["load-balancer_member", "member", "reader"]);
    let at = made[0].2.as_deref().expect("an expiry");
    assert!((89..=90).contains(&days_left(at)), "{at}");

    let st = kos(d, Some(&sim.clouds), &["status", "demo", "--cloud", "sim"]);
    assert_eq!(code(&st), 0, "{}", text(&st));
    assert!(
        text(&st).contains("expires 20") && text(&st).contains("(in 89 days)"),
        "{}",
        text(&st)
    );
    let st = kos(
        d,
        Some(&sim.clouds),
        &["status", "demo", "--cloud", "sim", "--output", "json"],
    );
    let doc: Value = serde_json::from_slice(&st.stdout).expect("json");
    let cred = doc["resources"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["logical_id"] == "appcred-ccm"))
        .expect("the credential in kos status");
    assert!(cred["facts"]["expires_at"].as_str().is_some(), "{cred}");

    // With 60 of its 90 days left, kos up leaves it.
    let first = credentials(&sim.base);
    expire_in(&sim.base, &first[0].1, 60);
    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    assert_eq!(credentials(&sim.base), first);

    // With 20 left (less than a third), kos up rotates it.
    expire_in(&sim.base, &first[0].1, 20);
    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    // 20 days when set; the cloud's clock runs on while kos starts (19 days and some hours then).
    assert!(
        text(&up).contains("days (less than a third of its 90 days): rotating it"),
        "{}",
        text(&up)
    );
    let second = credentials(&sim.base);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0].0, "kos-demo-ccm-b");
    assert_eq!(secret_credential_id(d), second[0].1);
    let terms = credential_terms(&sim.base);
    assert_eq!(terms[0].1, ["load-balancer_member", "member", "reader"]);
    assert!((89..=90).contains(&days_left(terms[0].2.as_deref().expect("expiry"))));

    // Expired: the CCM cannot authenticate; kos up rotates it without it, and the CCM works again.
    expire_in(&sim.base, &second[0].1, -1);
    let st = kos(d, Some(&sim.clouds), &["status", "demo", "--cloud", "sim"]);
    assert!(text(&st).contains("expired 20"), "{}", text(&st));
    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    assert!(text(&up).contains("has expired"), "{}", text(&up));
    let third = credentials(&sim.base);
    assert_eq!(third.len(), 1, "{third:?}");
    assert_eq!(third[0].0, "kos-demo-ccm");
    assert_eq!(secret_credential_id(d), third[0].1);
    service(d, "web", 30080);
    eventually(120, "a load balancer made on the new credential", || {
        service_ip(d, "web")
    });
    assert_eq!(service_lbs(&sim.base, "web"), 1);
}
