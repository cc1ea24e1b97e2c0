//! A running cluster's control planes through the real `kos` binary on the simulated cloud, whose
//! servers run their user_data (kos-guest): a control plane re-created after it was deleted behind kos's
//! back joins the cluster instead of initializing a second one.

mod support;

use std::io::Read;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use kos_cloud::model::TagQuery;
use kos_cloud::model::compute::ServerStatus;
use support::*;

/// Generous for a loaded 2-core machine: an HA `up` on the simulated cloud takes seconds to a minute.
const RUN_DEADLINE: Duration = Duration::from_secs(420);

/// A runtime for the cloud calls the tests make themselves (through kos-cloud, not kos).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
}

/// The minimal example, up on the served cloud: its text.
fn up_minimal(d: &std::path::Path, sim: &Served) -> String {
    let minimal = std::fs::read_to_string(example("minimal.yaml")).expect("minimal.yaml");
    let first = d.join("first.yaml");
    std::fs::write(&first, &minimal).expect("write");
    let first = first.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", first, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    minimal
}

/// The server named `name`, which must exist.
async fn server_named(
    c: &kos_cloud::compute::ComputeApi<'_>,
    name: &str,
) -> kos_cloud::model::compute::Server {
    c.list_servers(&TagQuery::default())
        .await
        .expect("servers")
        .into_iter()
        .find(|x| x.name == name)
        .unwrap_or_else(|| panic!("no server {name}"))
}

/// Deletes the server named `name` through the cloud's API (not through kos) and waits until it is gone.
fn delete_behind_kos(clouds: &std::path::Path, name: &str) {
    let rt = runtime();
    rt.block_on(async {
        let s = session(clouds).await;
        let c = s.compute();
        let victim = server_named(&c, name).await;
        c.delete_server(&victim.id).await.expect("delete");
        let deadline = Instant::now() + Duration::from_secs(120);
        while c.get_server(&victim.id).await.expect("get").is_some() {
            assert!(Instant::now() < deadline, "{name} was not deleted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// `kos <args>` with a deadline: a regression that hangs (a split-brain cluster never gets its nodes
/// Ready) fails the test with what kos printed instead of holding the suite.
fn kos_within(d: &std::path::Path, clouds: &std::path::Path, args: &[&str]) -> Output {
    let mut child = isolated(d, Some(clouds), args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kos");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + RUN_DEADLINE;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    Output {
        status,
        stdout: out.join().expect("stdout"),
        stderr: err.join().expect("stderr"),
    }
}

/// The console of the server named `name`, through Nova's console output.
fn console(clouds: &std::path::Path, name: &str) -> String {
    let rt = runtime();
    rt.block_on(async {
        let s = session(clouds).await;
        let c = s.compute();
        let server = server_named(&c, name).await;
        c.console_output(&server.id, None).await.expect("console")
    })
}

/// The issue's case: cp-0 of a three-control-plane cluster deleted behind kos's back. Before the fix the
/// re-created cp-0 ran `kubeadm init` again (its name made it the initializer) and started a second
/// cluster behind the same endpoint; now the running cp-1 and cp-2 show a cluster, and cp-0 joins it.
#[test]
fn a_first_control_plane_deleted_behind_kos_joins_the_running_cluster() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let spec = example("ha.yaml");
    let spec = spec.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let first = String::from_utf8_lossy(&up.stderr).into_owned();
    assert!(
        first.contains("no control plane of the cluster runs: cp-0 initializes it"),
        "{first}"
    );
    assert!(first.contains("kos: cp-0: kubeadm-init ok"), "{first}");

    delete_behind_kos(&sim.clouds, "kos-prod-cp-0");

    let again = kos_within(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    let out = text(&again);
    assert_eq!(again.status.code(), Some(0), "{out}");
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("control plane(s) cp-1, cp-2 of the cluster run: new control planes join it"),
        "{out}"
    );
    assert!(err.contains("kos: cp-0: kubeadm-join ok"), "{out}");
    assert!(!err.contains("kubeadm-init"), "{out}");
    let cp0 = console(&sim.clouds, "kos-prod-cp-0");
    assert!(!cp0.contains("split brain"), "{cp0}");
    assert!(cp0.contains("kubeadm-join ok"), "{cp0}");
    // The old cp-0's member went before the new one joined on the same address (through the API
    // server to etcd): three members, each with a running server, one cluster.
    assert!(err.contains("removed etcd member kos-prod-cp-0"), "{out}");
    let clusters = sim_admin(&sim.base, "/_sim/clusters");
    let list = clusters.as_array().expect("clusters");
    assert_eq!(list.len(), 1, "one cluster: {clusters}");
    let etcd = &list[0]["etcd"];
    assert_eq!(etcd["quorum"], true, "{etcd}");
    let members = etcd["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{etcd}");
    assert!(members.iter().all(|m| m["up"] == true), "{etcd}");

    // Nothing left to do: the cluster converged with the new cp-0 in it.
    assert_nothing_to_do(d, &sim.clouds, spec, "the new cp-0 joined");
}

/// `kos plan --detailed-exitcode` of `spec` finds nothing to do (`context` says at which stage).
fn assert_nothing_to_do(d: &std::path::Path, clouds: &std::path::Path, spec: &str, context: &str) {
    let plan = kos_within(
        d,
        clouds,
        &["plan", "-f", spec, "--cloud", "sim", "--detailed-exitcode"],
    );
    assert_eq!(plan.status.code(), Some(0), "{context}: {}", text(&plan));
}

/// The control planes' servers of cluster `prod` that the cloud shows.
fn control_planes(clouds: &std::path::Path) -> Vec<String> {
    let rt = runtime();
    rt.block_on(async {
        let s = session(clouds).await;
        let mut names: Vec<String> = s
            .compute()
            .list_servers(&TagQuery::default())
            .await
            .expect("servers")
            .into_iter()
            .map(|x| x.name)
            .filter(|n| n.starts_with("kos-prod-cp-"))
            .collect();
        names.sort();
        names
    })
}

/// Scaling control planes 3 → 1 deleted two servers without removing their etcd members: one member of
/// three left, no quorum. Now the members go one at a time, and a scale-down no order can make safely
/// (cp-0 and cp-1 are stopped: etcd has no quorum to remove members with) is refused before anything
/// changes.
#[test]
fn a_control_plane_scale_down_that_would_lose_quorum_is_refused_before_any_change() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let spec = example("ha.yaml");
    let spec = spec.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let before = control_planes(&sim.clouds);
    assert_eq!(before.len(), 3);
    let rt = runtime();
    rt.block_on(async {
        let s = session(&sim.clouds).await;
        let c = s.compute();
        for name in ["kos-prod-cp-0", "kos-prod-cp-1"] {
            let cp = server_named(&c, name).await;
            c.stop_server(&cp.id).await.expect("stop");
            let deadline = Instant::now() + Duration::from_secs(120);
            while server_named(&c, name).await.status.to_string() != "SHUTOFF" {
                assert!(Instant::now() < deadline, "{name} did not stop");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });

    let one = d.join("one.yaml");
    let text_ha = std::fs::read_to_string(spec).expect("ha.yaml");
    let at = text_ha.find("controlPlane:").expect("controlPlane");
    let (head, tail) = text_ha.split_at(at);
    std::fs::write(
        &one,
        format!("{head}{}", tail.replacen("count: 3", "count: 1", 1)),
    )
    .expect("write");
    let one = one.to_str().expect("utf8");
    for cmd in ["plan", "up"] {
        let o = kos_within(d, &sim.clouds, &[cmd, "-f", one, "--cloud", "sim"]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(3), "{cmd}: {out}");
        assert!(out.contains("spec.controlPlane.count 1"), "{cmd}: {out}");
        assert!(out.contains("cp-0") && out.contains("cp-1"), "{cmd}: {out}");
    }
    assert_eq!(control_planes(&sim.clouds), before);
    // `kos status` against that spec shows what exists and why it is not converged (before, it
    // failed as kos up does, exit 3, and showed nothing).
    let st = kos_within(
        d,
        &sim.clouds,
        &["status", "prod", "-f", one, "--cloud", "sim"],
    );
    let out = text(&st);
    assert_eq!(st.status.code(), Some(2), "{out}");
    assert!(
        out.contains("Not converged: kos up refuses this spec"),
        "{out}"
    );
    assert!(out.contains("spec.controlPlane.count 1"), "{out}");
    assert!(out.contains("kos-prod-cp-2"), "{out}");
    let st = kos_within(
        d,
        &sim.clouds,
        &[
            "status", "prod", "-f", one, "--cloud", "sim", "--output", "json",
        ],
    );
    assert_eq!(st.status.code(), Some(2), "{}", text(&st));
    let doc: serde_json::Value = serde_json::from_slice(&st.stdout).expect("json");
    assert!(
        doc["refused"]
            .as_str()
            .is_some_and(|r| r.contains("spec.controlPlane.count 1")),
        "{doc}"
    );
}

/// Control planes 1 → 3 → 5 → 3 → 1: each run's new control planes join the one cluster (the first
/// run's cp-0 alone initialized it); going down, each removed control plane's etcd member goes before
/// its server (before, 3 → 1 left one member of three: no quorum). After every step the API answers
/// with every node Ready, etcd has one member per control plane, all up, and nothing is left to change.
#[test]
fn control_planes_scale_one_three_five_three_one_keeping_quorum() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let ha = std::fs::read_to_string(example("ha.yaml")).expect("ha.yaml");
    let at = ha.find("controlPlane:").expect("controlPlane");
    let (head, tail) = ha.split_at(at);
    for (step, count) in [1u32, 3, 5, 3, 1].into_iter().enumerate() {
        let path = d.join(format!("cp{count}.yaml"));
        std::fs::write(
            &path,
            format!(
                "{head}{}",
                tail.replacen("count: 3", &format!("count: {count}"), 1)
            ),
        )
        .expect("write");
        let path = path.to_str().expect("utf8");
        let up = kos_within(d, &sim.clouds, &["up", "-f", path, "--cloud", "sim"]);
        let out = text(&up);
        assert_eq!(up.status.code(), Some(0), "{count}: {out}");
        let err = String::from_utf8_lossy(&up.stderr);
        // kos shows every node's markers, the earlier ones' too: only the new control planes' count.
        let new_from = if step == 0 { 0 } else { [1, 3, 5, 3][step - 1] };
        if count < new_from {
            // Down: the highest first, each member before its server.
            for i in (count..new_from).rev() {
                let member = err.find(&format!("removed etcd member kos-prod-cp-{i}"));
                let removing = err.find(&format!("removing cp-{i}"));
                assert!(
                    member.is_some() && removing.is_some_and(|r| member.is_some_and(|m| r < m)),
                    "cp-{i} at {count}: {out}"
                );
            }
        }
        for i in new_from..count {
            let init = err.contains(&format!("kos: cp-{i}: kubeadm-init ok"));
            let join = err.contains(&format!("kos: cp-{i}: kubeadm-join ok"));
            assert_eq!(
                (init, join),
                (step == 0, step > 0),
                "cp-{i} at {count}: {out}"
            );
        }
        assert_eq!(control_planes(&sim.clouds).len(), count as usize);
        // Only the first control plane's user_data holds private keys: the others, joining at
        // creation or later, download the CAs from kubeadm-certs with a certificate key (issue 19).
        let state = sim_state(&sim.base);
        for i in 0..count {
            let name = format!("kos-prod-cp-{i}");
            let Some(ud) = state["nova"]["servers"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["name"] == name.as_str() && s["vm_state"] != "deleted")
                .and_then(|s| s["user_data_decoded"].as_str())
            else {
                panic!("{name}'s user_data");
            };
            let first = i == 0;
            assert_eq!(ud.contains("PRIVATE KEY"), first, "{name} at {count}");
            assert!(first || ud.contains("certificateKey"), "{name} at {count}");
        }
        if step > 0 && count > new_from {
            assert!(err.contains("kubeadm-certs, 2 h"), "{count}: {out}");
        }
        let clusters = sim_admin(&sim.base, "/_sim/clusters");
        let etcd = &clusters[0]["etcd"];
        assert_eq!(etcd["quorum"], true, "{count}: {clusters}");
        let members = etcd["members"].as_array().expect("members");
        assert_eq!(members.len(), count as usize, "{count}: {clusters}");
        assert!(
            members.iter().all(|m| m["up"] == true),
            "{count}: {clusters}"
        );
        let violations = clusters[0]["violations"].as_array().expect("violations");
        assert!(violations.is_empty(), "{count}: {clusters}");
        assert_nothing_to_do(d, &sim.clouds, path, &format!("{count}"));
    }
}

/// The servers of cluster `name` with their flavor (Nova's `original_name`), by server name.
fn flavors(clouds: &std::path::Path, name: &str) -> std::collections::BTreeMap<String, String> {
    let rt = runtime();
    rt.block_on(async {
        let s = session(clouds).await;
        s.compute()
            .list_servers(&TagQuery::all([format!("kos-cluster={name}")]))
            .await
            .expect("servers")
            .into_iter()
            .map(|x| (x.name, x.flavor.original_name.unwrap_or_default()))
            .collect()
    })
}

/// A pool's new flavor and labels plan as replacements with their reasons (before, `kos plan` showed
/// 0 changes and nothing ever changed), and `kos up` replaces the pool's servers one at a time, each
/// drained and its Node deleted first, until the plan is empty again.
#[test]
fn a_pools_new_flavor_and_labels_replace_its_nodes_one_at_a_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let minimal = up_minimal(d, &sim);
    let before = flavors(&sim.clouds, "demo");

    let (head, pool) = minimal
        .split_once("  nodePools:")
        .expect("a nodePools section");
    let changed = format!(
        "{head}  nodePools:{}",
        pool.replacen("flavor: m1.medium", "flavor: m1.large", 1)
            + "      labels:\n        example.com/tier: web\n"
    );
    let second = d.join("second.yaml");
    std::fs::write(&second, &changed).expect("write");
    let second = second.to_str().expect("utf8");
    let plan = kos(
        d,
        Some(&sim.clouds),
        &[
            "plan",
            "-f",
            second,
            "--cloud",
            "sim",
            "--detailed-exitcode",
        ],
    );
    let shown = text(&plan);
    assert_eq!(plan.status.code(), Some(2), "{shown}");
    for w in ["workers-0", "workers-1"] {
        assert!(
            shown
                .lines()
                .any(|l| l.contains("-/+") && l.contains(w) && l.contains("made for another spec")),
            "{w}: {shown}"
        );
    }
    assert!(shown.contains("flavor: m1.medium → m1.large"), "{shown}");
    assert!(shown.contains("labels or taints changed"), "{shown}");
    assert!(
        !shown
            .lines()
            .any(|l| l.contains("-/+") && l.contains("cp-0")),
        "the control plane is not touched: {shown}"
    );

    let roll = kos_within(d, &sim.clouds, &["up", "-f", second, "--cloud", "sim"]);
    let out = text(&roll);
    assert_eq!(roll.status.code(), Some(0), "{out}");
    let err = String::from_utf8_lossy(&roll.stderr);
    let w0 = err.find("replacing workers-0").expect("workers-0 replaced");
    let w1 = err.find("replacing workers-1").expect("workers-1 replaced");
    assert!(w0 < w1, "one at a time, in order: {out}");
    // workers-0's successor joined before workers-1 was touched.
    let joined = err[w0..].find("workers-0: kubeadm-join ok").map(|i| i + w0);
    assert!(joined.is_some_and(|j| j < w1), "{out}");
    let after = flavors(&sim.clouds, "demo");
    assert_eq!(after.len(), before.len(), "{after:?}");
    assert_eq!(after["kos-demo-workers-0"], "m1.large");
    assert_eq!(after["kos-demo-workers-1"], "m1.large");
    assert_eq!(after["kos-demo-cp-0"], before["kos-demo-cp-0"]);
    let clusters = sim_admin(&sim.base, "/_sim/clusters");
    let nodes = clusters[0]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "the old Nodes are gone: {clusters}");
    assert!(nodes.iter().all(|n| n["ready"] == true), "{clusters}");

    assert_nothing_to_do(d, &sim.clouds, second, "the pool replaced");

    // maxUnavailable: 2 takes both down at once: both drained and deleted before either joins.
    let third = d.join("third.yaml");
    std::fs::write(
        &third,
        changed.replace("example.com/tier: web", "example.com/tier: api")
            + "      maxUnavailable: 2\n",
    )
    .expect("write");
    let third = third.to_str().expect("utf8");
    let both = kos_within(d, &sim.clouds, &["up", "-f", third, "--cloud", "sim"]);
    let out = text(&both);
    assert_eq!(both.status.code(), Some(0), "{out}");
    let err = String::from_utf8_lossy(&both.stderr);
    let w1 = err.find("replacing workers-1").expect("workers-1 replaced");
    let w0 = err.find("replacing workers-0").expect("workers-0 replaced");
    let first_join = err[w0.min(w1)..]
        .find("kubeadm-join ok")
        .map(|i| i + w0.min(w1));
    assert!(
        first_join.is_some_and(|j| j > w0.max(w1)),
        "one batch: {out}"
    );

    // maxSurge: 1, maxUnavailable: 0 (Cluster API's MachineDeployment default): a successor under a
    // free index joins before each old node is drained and removed, so the pool never runs short
    // (workers-2, then workers-0 again once the old workers-0 and its Node are gone).
    let fourth = d.join("fourth.yaml");
    std::fs::write(
        &fourth,
        changed.replace("example.com/tier: web", "example.com/tier: db")
            + "      maxUnavailable: 0\n      maxSurge: 1\n",
    )
    .expect("write");
    let fourth = fourth.to_str().expect("utf8");
    let surged = kos_within(d, &sim.clouds, &["up", "-f", fourth, "--cloud", "sim"]);
    let out = text(&surged);
    assert_eq!(surged.status.code(), Some(0), "{out}");
    let err = String::from_utf8_lossy(&surged.stderr);
    // In this order (every converge shows each node's console again: each is looked for after the
    // one before).
    [
        "kos: workers-2: kubeadm-join ok",
        "removing workers-0",
        "deleted server kos-demo-workers-0",
        "kos: workers-0: kubeadm-join ok",
        "removing workers-1",
    ]
    .iter()
    .fold(0, |from, what| {
        from + err[from..]
            .find(what)
            .unwrap_or_else(|| panic!("{what} after byte {from}: {out}"))
    });
    let after = flavors(&sim.clouds, "demo");
    let workers: Vec<&String> = after.keys().filter(|n| n.contains("workers")).collect();
    assert_eq!(
        workers,
        ["kos-demo-workers-0", "kos-demo-workers-2"],
        "{after:?}"
    );
    let clusters = sim_admin(&sim.base, "/_sim/clusters");
    let nodes = clusters[0]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "the old Nodes are gone: {clusters}");
    assert!(nodes.iter().all(|n| n["ready"] == true), "{clusters}");
    assert_nothing_to_do(d, &sim.clouds, fourth, "both replaced at once");
}

/// What a removal killed after its control plane's server went leaves: its port (here `port-cp-1`,
/// tagged as kos tags it), the server and etcd member gone.
fn leave_port_of_a_removed_control_plane(clouds: &std::path::Path, cluster: &str, index: u32) {
    runtime().block_on(async {
        let s = session(clouds).await;
        let net = s.network();
        let ports = net.list_ports(&Default::default()).await.expect("ports");
        let cp0 = ports
            .iter()
            .find(|p| p.name == format!("kos-{cluster}-port-cp-0"))
            .expect("cp-0's port");
        let id = format!("port-cp-{index}");
        let mut req = kos_cloud::model::network::PortCreate::new(
            cp0.network_id.clone(),
            format!("kos-{cluster}-{id}"),
        );
        req.tags = vec![format!("kos-cluster={cluster}"), format!("kos-id={id}")];
        net.create_port(&req).await.expect("port");
    });
}

/// The moment `an_upgrade_killed_at_random_moments_converges_on_the_next_run` once met (seed
/// 1187414209199043409), made on purpose: a control plane's removal killed after its server went,
/// its port left. The next `kos up` finishes that removal, then replaces the pool's nodes through
/// successors. (Before, it counted a control plane as leaving, held the pool for it, found no
/// server to remove and exited 0 with the pool as it was: an upgrade left a worker on the old
/// release.)
#[test]
fn a_port_left_by_a_killed_control_plane_removal_goes_and_the_pool_still_rolls() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let minimal = up_minimal(d, &sim);
    leave_port_of_a_removed_control_plane(&sim.clouds, "demo", 1);
    let (head, pool) = minimal
        .split_once("  nodePools:")
        .expect("a nodePools section");
    let changed = format!(
        "{head}  nodePools:{}",
        pool.replacen("flavor: m1.medium", "flavor: m1.large", 1)
            + "      maxUnavailable: 0\n      maxSurge: 1\n"
    );
    let second = d.join("second.yaml");
    std::fs::write(&second, &changed).expect("write");
    let second = second.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", second, "--cloud", "sim"]);
    let out = text(&up);
    assert_eq!(up.status.code(), Some(0), "{out}");
    let err = String::from_utf8_lossy(&up.stderr);
    let cp1 = err.find("removing cp-1").expect("cp-1's removal finished");
    let w0 = err.find("removing workers-0").expect("workers-0 succeeded");
    assert!(cp1 < w0, "{out}");
    let after = flavors(&sim.clouds, "demo");
    assert!(
        after
            .iter()
            .filter(|(n, _)| n.contains("workers"))
            .all(|(_, f)| f == "m1.large"),
        "{after:?}"
    );
    let ports = runtime().block_on(async {
        let s = session(&sim.clouds).await;
        s.network()
            .list_ports(&Default::default())
            .await
            .expect("ports")
    });
    assert!(
        ports.iter().all(|p| p.name != "kos-demo-port-cp-1"),
        "{ports:?}"
    );
    assert_nothing_to_do(d, &sim.clouds, second, "the port gone, the pool replaced");
}

/// One control plane's new flavor. Behind a floating IP (the minimal example) it could only be
/// replaced in place, which loses the cluster: refused before anything is touched. Behind a load
/// balancer (`maxSurge` defaults to 1, as Cluster API's control plane) a successor joins first: etcd
/// goes 1 → 2 → 1 members, the old control plane leaves after its successor is Ready, and the simulated
/// cloud sees no moment without quorum or an API server. (Before, every change to a single control
/// plane was refused.) `kos up --renew-certificates` then replaces it once more, the same way.
#[test]
fn a_single_control_planes_new_flavor_joins_a_successor_first() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let minimal = up_minimal(d, &sim);
    let before = flavors(&sim.clouds, "demo");
    let changed = minimal.replacen("flavor: m1.medium", "flavor: m1.large", 1);
    assert!(
        changed.find("m1.large") < changed.find("nodePools"),
        "the control plane's"
    );
    let in_place = d.join("in-place.yaml");
    std::fs::write(&in_place, &changed).expect("write");
    let in_place = in_place.to_str().expect("utf8");
    for cmd in ["plan", "up"] {
        let refused = kos_within(d, &sim.clouds, &[cmd, "-f", in_place, "--cloud", "sim"]);
        let out = text(&refused);
        assert_eq!(refused.status.code(), Some(3), "{cmd}: {out}");
        // miette wraps the message: compare its words.
        let flat = out
            .split_whitespace()
            .filter(|w| *w != "│")
            .collect::<Vec<_>>()
            .join(" ");
        assert!(flat.contains("it is the only one"), "{cmd}: {out}");
        assert!(flat.contains("behind a load balancer"), "{cmd}: {out}");
    }
    assert_eq!(flavors(&sim.clouds, "demo"), before, "nothing changed");

    // The same behind a load balancer: another cluster, `solo`.
    let balanced = minimal
        .replacen("  apiEndpoint:\n    type: floatingIP\n", "", 1)
        .replacen("name: demo", "name: solo", 1)
        .replacen("cidr: 10.0.0.0/24", "cidr: 10.0.1.0/24", 1);
    assert!(!balanced.contains("floatingIP"), "{balanced}");
    let first = d.join("solo.yaml");
    std::fs::write(&first, &balanced).expect("write");
    let up = kos_within(
        d,
        &sim.clouds,
        &["up", "-f", first.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let second = d.join("solo-large.yaml");
    std::fs::write(
        &second,
        balanced.replacen("flavor: m1.medium", "flavor: m1.large", 1),
    )
    .expect("write");
    let second = second.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", second, "--cloud", "sim"]);
    let out = text(&up);
    assert_eq!(up.status.code(), Some(0), "{out}");
    let err = String::from_utf8_lossy(&up.stderr);
    let at = |what: &str| err.find(what).unwrap_or_else(|| panic!("{what}: {out}"));
    let steps = [
        at("kos: cp-1: kubeadm-join ok"),
        at("removing cp-0"),
        at("removed etcd member kos-solo-cp-0"),
    ];
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}: {out}");
    let after = flavors(&sim.clouds, "solo");
    assert_eq!(
        after.get("kos-solo-cp-1").map(String::as_str),
        Some("m1.large"),
        "{after:?}"
    );
    assert!(!after.contains_key("kos-solo-cp-0"), "{after:?}");
    let c = solo_without_violations(&sim.base);
    let members = c["etcd"]["members"].as_array().expect("members");
    assert_eq!(members.len(), 1, "{c}");
    assert_eq!(members[0]["name"], "kos-solo-cp-1", "{c}");
    assert_eq!(members[0]["up"], true, "{c}");
    assert_nothing_to_do(d, &sim.clouds, second, "the successor took over");

    // Certificates renewed when asked: `kos plan` shows it, and the control plane made before the
    // run is succeeded the same way (its successor takes the free cp-0), and only once.
    let shown = kos_within(
        d,
        &sim.clouds,
        &[
            "plan",
            "-f",
            second,
            "--cloud",
            "sim",
            "--renew-certificates",
        ],
    );
    let out = text(&shown);
    assert_eq!(shown.status.code(), Some(0), "{out}");
    assert!(
        out.lines().any(|l| l.contains("-/+") && l.contains("cp-1")),
        "{out}"
    );
    assert!(
        out.contains("its kubeadm certificates are renewed"),
        "{out}"
    );
    let renew = kos_within(
        d,
        &sim.clouds,
        &["up", "-f", second, "--cloud", "sim", "--renew-certificates"],
    );
    let out = text(&renew);
    assert_eq!(renew.status.code(), Some(0), "{out}");
    let err = String::from_utf8_lossy(&renew.stderr);
    let joined = err.find("kos: cp-0: kubeadm-join ok");
    let removing = err.find("removing cp-1");
    assert!(
        joined.is_some_and(|j| removing.is_some_and(|r| j < r)),
        "{out}"
    );
    assert!(
        err.contains("its kubeadm certificates are renewed"),
        "{out}"
    );
    let after = flavors(&sim.clouds, "solo");
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        ["kos-solo-cp-0", "kos-solo-workers-0", "kos-solo-workers-1"],
        "{after:?}"
    );
    solo_without_violations(&sim.base);

    // A DNS name for the API on the running cluster (before, refused): kubeadm-config names it, then
    // a successor joins, whose API server certificate kubeadm issues from there. kubectl, knowing
    // the API by that name, trusts the certificate only afterwards.
    let kc = kos_within(d, &sim.clouds, &["kubeconfig", "solo", "--cloud", "sim"]);
    assert_eq!(kc.status.code(), Some(0), "{}", text(&kc));
    let by_name = || {
        kubectl_with(d, &d.join("kubeconfig-solo"))
            .args(["--tls-server-name", "api.solo.example.com"])
            .args(["get", "--raw", "/readyz"])
            .output()
            .expect("kubectl runs")
    };
    let before = by_name();
    assert!(!before.status.success(), "{}", text(&before));
    let named = d.join("solo-named.yaml");
    std::fs::write(
        &named,
        std::fs::read_to_string(second).expect("read").replacen(
            "  controlPlane:\n",
            "  apiEndpoint:\n    dnsName: api.solo.example.com\n  controlPlane:\n",
            1,
        ),
    )
    .expect("write");
    let named = named.to_str().expect("utf8");
    let shown = kos_within(d, &sim.clouds, &["plan", "-f", named, "--cloud", "sim"]);
    let out = text(&shown);
    assert_eq!(shown.status.code(), Some(0), "{out}");
    assert!(
        out.contains("apiEndpoint.dnsName: none → api.solo.example.com"),
        "{out}"
    );
    let up = kos_within(d, &sim.clouds, &["up", "-f", named, "--cloud", "sim"]);
    let out = text(&up);
    assert_eq!(up.status.code(), Some(0), "{out}");
    let err = String::from_utf8_lossy(&up.stderr);
    let at = |what: &str| err.find(what).unwrap_or_else(|| panic!("{what}: {out}"));
    let steps = [
        at("kubeadm-config names the API"),
        at("kos: cp-1: kubeadm-join ok"),
        at("removing cp-0"),
    ];
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}: {out}");
    let after = by_name();
    assert!(after.status.success(), "{}", text(&after));
    assert_eq!(String::from_utf8_lossy(&after.stdout).trim(), "ok");
    assert_nothing_to_do(d, &sim.clouds, named, "the API renamed");
}

/// A pool's new server group policy (before, refused): Nova cannot change a group's policy, so
/// `kos up` makes the group again and replaces the pool's servers into it, drained one at a time,
/// until every one of them is a member of the new group and the plan is empty.
#[test]
fn a_pools_new_server_group_policy_replaces_its_nodes_into_a_new_group() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let minimal = up_minimal(d, &sim);
    let groups = || {
        runtime().block_on(async {
            let s = session(&sim.clouds).await;
            s.compute()
                .list_server_groups()
                .await
                .expect("groups")
                .into_iter()
                .filter(|g| g.name == "kos-demo-sgroup-workers")
                .collect::<Vec<_>>()
        })
    };
    let old = groups();
    assert_eq!(old.len(), 1, "{old:?}");
    assert_eq!(old[0].policy.as_str(), "soft-anti-affinity");
    let hard = minimal.replacen(
        "      count: 2\n",
        "      count: 2\n      serverGroupPolicy: anti-affinity\n",
        1,
    );
    assert_ne!(hard, minimal);
    let spec = d.join("hard.yaml");
    std::fs::write(&spec, &hard).expect("write");
    let spec = spec.to_str().expect("utf8");
    let plan = kos_within(d, &sim.clouds, &["plan", "-f", spec, "--cloud", "sim"]);
    let out = text(&plan);
    assert_eq!(plan.status.code(), Some(0), "{out}");
    assert!(
        out.contains("policy: soft-anti-affinity → anti-affinity"),
        "{out}"
    );
    for w in ["workers-0", "workers-1"] {
        assert!(
            out.lines().any(|l| l.contains("-/+") && l.contains(w)),
            "{w}: {out}"
        );
    }
    let up = kos_within(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    let out = text(&up);
    assert_eq!(up.status.code(), Some(0), "{out}");
    let now = groups();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0].id, old[0].id, "made again");
    assert_eq!(now[0].policy.as_str(), "anti-affinity");
    let members: std::collections::BTreeSet<String> = now[0].members.iter().cloned().collect();
    let workers: std::collections::BTreeSet<String> = runtime().block_on(async {
        let s = session(&sim.clouds).await;
        let c = s.compute();
        let mut ids = std::collections::BTreeSet::new();
        for w in ["kos-demo-workers-0", "kos-demo-workers-1"] {
            ids.insert(server_named(&c, w).await.id);
        }
        ids
    });
    assert_eq!(members, workers, "{out}");
    let clusters = sim_admin(&sim.base, "/_sim/clusters");
    assert_eq!(
        clusters[0]["violations"],
        serde_json::json!([]),
        "{clusters}"
    );
    let nodes = clusters[0]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{clusters}");
    assert!(nodes.iter().all(|n| n["ready"] == true), "{clusters}");
    assert_nothing_to_do(d, &sim.clouds, spec, "the group made again");
}

/// A run killed while a single control plane's successor boots (its server just made, then once
/// it is ACTIVE but may not have joined, then, made on purpose, with only its port made): the next
/// plain `kos up` keeps the old control plane in the API's load balancer until the successor's Node
/// is there, then retires it. (Before, the next run took the old one out of the pool at once, and
/// the successor, which joins through it, never did: "bootstrap did not finish"; before that, it
/// refused with "etcd has lost quorum"; with the port alone, "no etcd member would remain".)
#[test]
fn a_run_killed_while_a_successor_boots_is_finished_by_the_next() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let minimal = std::fs::read_to_string(example("minimal.yaml")).expect("minimal.yaml");
    let balanced = minimal
        .replacen("  apiEndpoint:\n    type: floatingIP\n", "", 1)
        .replacen("name: demo", "name: solo", 1)
        .replacen("      count: 2\n", "      count: 1\n", 1);
    assert!(!balanced.contains("floatingIP") && balanced.contains("count: 1\n      flavor"));
    let spec = d.join("solo.yaml");
    std::fs::write(&spec, &balanced).expect("write");
    let spec = spec.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));

    let status = |name: &str| {
        runtime().block_on(async {
            let s = session(&sim.clouds).await;
            s.compute()
                .list_servers(&TagQuery::all(["kos-cluster=solo".to_owned()]))
                .await
                .ok()?
                .into_iter()
                .find(|x| x.name == name)
                .map(|x| x.status)
        })
    };
    // cp-0 → cp-1 (killed as soon as cp-1 exists), cp-1 → cp-0 (killed once it is ACTIVE), then
    // cp-0 → cp-1 again with cp-1's port left as a run killed between the port and the server
    // leaves it.
    enum Moment {
        Exists,
        Active,
        PortOnly,
    }
    let moments = [
        ("m1.large", "kos-solo-cp-1", "kos-solo-cp-0", Moment::Exists),
        (
            "m1.medium",
            "kos-solo-cp-0",
            "kos-solo-cp-1",
            Moment::Active,
        ),
        (
            "m1.large",
            "kos-solo-cp-1",
            "kos-solo-cp-0",
            Moment::PortOnly,
        ),
    ];
    for (flavor, successor, old, moment) in moments {
        std::fs::write(
            spec,
            balanced.replacen("flavor: m1.medium", &format!("flavor: {flavor}"), 1),
        )
        .expect("write");
        if let Moment::PortOnly = moment {
            leave_port_of_a_removed_control_plane(&sim.clouds, "solo", 1);
        } else {
            let child = spawn(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
            eventually(600, successor, || {
                let s = status(successor)?;
                (!matches!(moment, Moment::Active) || s == ServerStatus::Active).then_some(())
            });
            kill(child);
        }
        let up = kos_within(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
        let out = text(&up);
        assert_eq!(up.status.code(), Some(0), "{successor}: {out}");
        let after = flavors(&sim.clouds, "solo");
        assert_eq!(
            after.get(successor).map(String::as_str),
            Some(flavor),
            "{after:?}"
        );
        assert!(!after.contains_key(old), "{after:?}");
        let c = solo_without_violations(&sim.base);
        let members = c["etcd"]["members"].as_array().expect("members");
        assert_eq!(members.len(), 1, "{c}");
        assert_eq!(members[0]["name"], successor, "{c}");
        assert_nothing_to_do(d, &sim.clouds, spec, successor);
    }
}

/// The simulated cluster `solo` (the cloud also runs `demo`), which must show no invariant violated.
fn solo_without_violations(base: &str) -> serde_json::Value {
    let clusters = sim_admin(base, "/_sim/clusters");
    let c = clusters
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["nodes"].to_string().contains("kos-solo-"))
        .expect("solo")
        .clone();
    assert_eq!(c["violations"], serde_json::json!([]), "{clusters}");
    c
}

/// `kos up --repair` replaces a node NotReady for longer than `--repair-after` (here a worker whose
/// server was stopped behind kos's back); plain `kos up` leaves it to the operator.
#[test]
fn repair_replaces_a_node_that_stays_notready() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let rt = runtime();
    let old = rt.block_on(async {
        let s = session(&sim.clouds).await;
        let c = s.compute();
        let w1 = server_named(&c, "kos-demo-workers-1").await;
        c.stop_server(&w1.id).await.expect("stop");
        w1.id
    });
    eventually(120, "workers-1 NotReady", || {
        let clusters = sim_admin(&sim.base, "/_sim/clusters");
        clusters[0]["nodes"]
            .as_array()?
            .iter()
            .any(|n| n["name"] == "kos-demo-workers-1" && n["ready"] == false)
            .then_some(())
    });
    let repaired = kos_within(
        d,
        &sim.clouds,
        &[
            "up",
            "-f",
            spec,
            "--cloud",
            "sim",
            "--repair",
            "--repair-after",
            "0",
        ],
    );
    let out = text(&repaired);
    assert_eq!(repaired.status.code(), Some(0), "{out}");
    assert!(out.contains("replacing workers-1 (NotReady for"), "{out}");
    let new = rt.block_on(async {
        let s = session(&sim.clouds).await;
        server_named(&s.compute(), "kos-demo-workers-1").await
    });
    assert_ne!(new.id, old, "a new server");
    assert_eq!(new.status.to_string(), "ACTIVE");
    let clusters = sim_admin(&sim.base, "/_sim/clusters");
    let nodes = clusters[0]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{clusters}");
    assert!(nodes.iter().all(|n| n["ready"] == true), "{clusters}");
}

/// A pool's `healthCheck` holds `--repair` back when more of the pool than `maxUnhealthy` is
/// NotReady at once (a partition, not dead nodes), as Cluster API's MachineHealthCheck does: three
/// of five workers stopped behind kos's back, at 40 %, are left alone and the run says why; once two
/// are back, the one left is replaced.
#[test]
fn repair_leaves_a_pool_alone_past_its_max_unhealthy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let minimal = std::fs::read_to_string(example("minimal.yaml")).expect("minimal.yaml");
    assert_eq!(minimal.matches("      count: 2\n").count(), 1, "{minimal}");
    let spec = d.join("five.yaml");
    std::fs::write(
        &spec,
        minimal.replacen(
            "      count: 2\n",
            "      count: 5\n      healthCheck:\n        maxUnhealthy: 40%\n",
            1,
        ),
    )
    .expect("write");
    let spec = spec.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let rt = runtime();
    let stopped: Vec<String> = rt.block_on(async {
        let s = session(&sim.clouds).await;
        let c = s.compute();
        let mut ids = Vec::new();
        for i in 0..3 {
            let w = server_named(&c, &format!("kos-demo-workers-{i}")).await;
            c.stop_server(&w.id).await.expect("stop");
            ids.push(w.id);
        }
        ids
    });
    eventually(120, "three workers NotReady", || {
        let clusters = sim_admin(&sim.base, "/_sim/clusters");
        let not_ready = clusters[0]["nodes"]
            .as_array()?
            .iter()
            .filter(|n| n["ready"] == false)
            .count();
        (not_ready == 3).then_some(())
    });
    // The held nodes stay NotReady: the held run waits for nothing past the servers.
    let repair = |wait: &str| {
        kos_within(
            d,
            &sim.clouds,
            &[
                "up",
                "-f",
                spec,
                "--cloud",
                "sim",
                "--repair",
                "--repair-after",
                "0",
                "--wait",
                wait,
            ],
        )
    };
    let held = repair("infra");
    let out = text(&held);
    assert_eq!(held.status.code(), Some(0), "{out}");
    assert!(
        out.contains(
            "not repairing workers: remediation is not allowed, the number of not started or \
             unhealthy nodes exceeds maxUnhealthy (total: 5, unhealthy: 3, maxUnhealthy: 2)"
        ),
        "{out}"
    );
    assert!(!out.contains("replacing"), "{out}");
    // What was found, node by node.
    for i in 0..3 {
        assert!(
            out.contains(&format!(
                "kos: demo: kos-demo-workers-{i} (workers) is unhealthy: condition Ready on its \
                 Node is reporting status"
            )),
            "{out}"
        );
    }
    let ids = |rt: &tokio::runtime::Runtime| -> Vec<String> {
        rt.block_on(async {
            let s = session(&sim.clouds).await;
            let mut ids = Vec::new();
            for i in 0..3 {
                ids.push(
                    server_named(&s.compute(), &format!("kos-demo-workers-{i}"))
                        .await
                        .id,
                );
            }
            ids
        })
    };
    assert_eq!(ids(&rt), stopped, "no server replaced");

    // Two come back: one of five is within 40 %, and it is replaced.
    rt.block_on(async {
        let s = session(&sim.clouds).await;
        for id in &stopped[..2] {
            s.compute().start_server(id).await.expect("start");
        }
    });
    eventually(120, "one worker NotReady", || {
        let clusters = sim_admin(&sim.base, "/_sim/clusters");
        let not_ready = clusters[0]["nodes"]
            .as_array()?
            .iter()
            .filter(|n| n["ready"] == false)
            .count();
        (not_ready == 1).then_some(())
    });
    let repaired = repair("ready");
    let out = text(&repaired);
    assert_eq!(repaired.status.code(), Some(0), "{out}");
    assert!(out.contains("replacing workers-2 (NotReady for"), "{out}");
    let now = ids(&rt);
    assert_eq!(now[..2], stopped[..2]);
    assert_ne!(now[2], stopped[2], "workers-2 made again");
}

/// A pod `name` (label `app: <name>`) on `node`, Running and Ready as its kubelet would report it,
/// and a PodDisruptionBudget `name` that keeps one such pod: its eviction is refused while it is
/// the only one. `kubectl` runs kubectl against the cluster.
fn pod_with_budget(
    d: &std::path::Path,
    kubectl: &dyn Fn(&[&str]) -> Output,
    name: &str,
    node: &str,
) {
    let objects = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{app: {name}}}\nspec:\n  nodeName: {node}\n  containers:\n  - name: main\n    image: nginx\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  minAvailable: 1\n  selector:\n    matchLabels: {{app: {name}}}\n"
    );
    let file = format!("{name}.yaml");
    std::fs::write(d.join(&file), objects).expect("write");
    let made = kubectl(&["apply", "-f", &file]);
    assert!(made.status.success(), "{}", text(&made));
    // A Pending pod ignores budgets; a Running and Ready one counts.
    let running = kubectl(&[
        "patch",
        "pod",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    assert!(running.status.success(), "{}", text(&running));
}

/// `kos up -f spec` with a 5 s drain timeout, stopped by the PodDisruptionBudget `budget`: exit 1
/// naming it. Its output with miette's wrapping undone, and its stderr.
fn up_held_by(
    d: &std::path::Path,
    clouds: &std::path::Path,
    spec: &str,
    budget: &str,
) -> (String, String) {
    let held = kos_within(
        d,
        clouds,
        &["up", "-f", spec, "--cloud", "sim", "--drain-timeout", "5"],
    );
    let out = text(&held);
    assert_eq!(held.status.code(), Some(1), "{out}");
    let flat = out
        .split_whitespace()
        .filter(|w| *w != "│")
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        flat.contains(&format!("The disruption budget {budget} needs")),
        "{out}"
    );
    (flat, String::from_utf8_lossy(&held.stderr).into_owned())
}

/// A pool scaled down (5 → 2) drains the nodes it removes first, newest first, through the Eviction
/// API: a PodDisruptionBudget that allows no disruption holds the run (exit 1 naming the budget, the server
/// still there); once the budget allows it, the pod is evicted and the server goes (before, the
/// server was deleted with its pods, whatever their budget).
#[test]
fn a_pool_scaled_down_drains_its_removed_nodes_and_budgets_hold() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let minimal = std::fs::read_to_string(example("minimal.yaml")).expect("minimal.yaml");
    let five = d.join("five.yaml");
    std::fs::write(&five, minimal.replacen("count: 2", "count: 5", 1)).expect("write");
    let five = five.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", five, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let kc = kos(
        d,
        Some(&sim.clouds),
        &["kubeconfig", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&kc), 0, "{}", text(&kc));
    pod_with_budget(d, &|args| kubectl(d, args), "web-4", "kos-demo-workers-4");

    let two = d.join("two.yaml");
    std::fs::write(&two, &minimal).expect("write");
    let two = two.to_str().expect("utf8");
    let (flat, _) = up_held_by(d, &sim.clouds, two, "web-4");
    assert!(flat.contains("default/web-4"), "{flat}");
    assert!(
        flavors(&sim.clouds, "demo").contains_key("kos-demo-workers-4"),
        "the server stays while its pod cannot go"
    );

    let relaxed = kubectl(d, &["delete", "pdb", "web-4"]);
    assert!(relaxed.status.success(), "{}", text(&relaxed));
    let down = kos_within(d, &sim.clouds, &["up", "-f", two, "--cloud", "sim"]);
    let out = text(&down);
    assert_eq!(down.status.code(), Some(0), "{out}");
    let err = String::from_utf8_lossy(&down.stderr);
    let drained = err.find("workers-4: drained (1 pod(s) evicted)");
    let deleted = err.find("deleted server kos-demo-workers-4");
    assert!(
        drained.is_some_and(|d| deleted.is_some_and(|x| d < x)),
        "drained before its server goes: {out}"
    );
    for w in ["workers-3", "workers-2"] {
        assert!(err.contains(&format!("{w}: drained")), "{out}");
    }
    let left = flavors(&sim.clouds, "demo");
    assert_eq!(left.len(), 3, "{left:?}");
    let pods = kubectl(d, &["get", "pod", "web-4", "-o", "name"]);
    assert!(
        !pods.status.success(),
        "the pod was evicted: {}",
        text(&pods)
    );
    let clusters = sim_admin(&sim.base, "/_sim/clusters");
    let nodes = clusters[0]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "the removed Nodes are gone: {clusters}");
}

/// The ids of the volumes named `kos-prod-vol-cp-<n>`, by name.
fn control_plane_volumes(clouds: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    runtime().block_on(async {
        let s = session(clouds).await;
        s.block_storage()
            .list_volumes(&Default::default())
            .await
            .expect("volumes")
            .into_iter()
            .filter(|v| v.name.starts_with("kos-prod-vol-cp-"))
            .map(|v| (v.name, v.id))
            .collect()
    })
}

/// Upgrade 1.35 → 1.36 of three control planes and two pools: `kos up` moves kubeadm-config first,
/// then replaces control planes one at a time, each successor joining before its predecessor leaves
/// (so etcd keeps three healthy members at every moment), and then each pool's workers: `general`
/// through successors (`maxSurge: 1`), `batch` in place. A PodDisruptionBudget stops the rollout at
/// the drain it forbids; once it allows, plain `kos up` continues. The simulated cloud
/// watches at every step: etcd keeps quorum, no member outlives its server, no kubelet is newer than
/// an API server it talks to, no two API servers are more than a minor apart. Afterwards every node
/// and API server runs 1.36 and nothing is left to change. (Before, a changed kubernetesVersion
/// planned as 0 changes; then it was refused.)
#[test]
fn an_upgrade_replaces_control_planes_then_workers_within_the_skew_policy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let ha = std::fs::read_to_string(example("ha.yaml")).expect("ha.yaml");
    let old = d.join("old.yaml");
    std::fs::write(
        &old,
        ha.replace(
            "kubernetesVersion: \"1.36.4\"",
            "kubernetesVersion: \"1.35.2\"",
        ),
    )
    .expect("write");
    let old = old.to_str().expect("utf8");
    let up = kos_within(d, &sim.clouds, &["up", "-f", old, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let before = sim_admin(&sim.base, "/_sim/clusters");
    assert!(
        before[0]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .all(|n| n["version"] == "v1.35.2"),
        "{before}"
    );

    let volumes = control_plane_volumes(&sim.clouds);
    assert_eq!(volumes.len(), 3, "{volumes:?}");
    let new = example("ha.yaml");
    let new = new.to_str().expect("utf8");
    let plan = kos(d, Some(&sim.clouds), &["plan", "-f", new, "--cloud", "sim"]);
    let shown = text(&plan);
    assert_eq!(plan.status.code(), Some(0), "{shown}");
    assert!(shown.contains("Kubernetes: 1.35.2 → 1.36.4"), "{shown}");
    assert!(shown.contains("(replacement 1 of 8)"), "{shown}");

    // A budget that allows no disruption of the one pod on general-0: the rollout stops at its
    // drain (exit 1, naming the budget), with the pod and its server still there.
    let kc = kos(
        d,
        Some(&sim.clouds),
        &["kubeconfig", "prod", "--cloud", "sim"],
    );
    assert_eq!(code(&kc), 0, "{}", text(&kc));
    let prod_kubectl = |args: &[&str]| {
        kubectl_with(d, &d.join("kubeconfig-prod"))
            .args(args)
            .output()
            .expect("kubectl")
    };
    pod_with_budget(d, &prod_kubectl, "db-0", "kos-prod-general-0");

    let (_, err) = up_held_by(d, &sim.clouds, new, "db-0");
    let pod = prod_kubectl(&["get", "pod", "db-0", "-o", "name"]);
    assert!(pod.status.success(), "the budget held: {}", text(&pod));
    assert!(
        flavors(&sim.clouds, "prod").contains_key("kos-prod-general-0"),
        "the server stays while its pod cannot go"
    );
    let mid = sim_admin(&sim.base, "/_sim/clusters");
    assert_eq!(mid[0]["violations"], serde_json::json!([]), "{mid}");
    let relaxed = prod_kubectl(&["delete", "pdb", "db-0"]);
    assert!(relaxed.status.success(), "{}", text(&relaxed));

    // Plain `kos up` continues where the budget stopped it.
    let upgraded = kos_within(d, &sim.clouds, &["up", "-f", new, "--cloud", "sim"]);
    let out = text(&upgraded);
    assert_eq!(upgraded.status.code(), Some(0), "{out}");
    let rest = String::from_utf8_lossy(&upgraded.stderr);
    let config = err
        .find("kubeadm-config says Kubernetes 1.36.4")
        .expect("kubeadm-config moved");
    // A successor under a fresh index joins before each old control plane leaves.
    let at = |what: &str| err.find(what).unwrap_or_else(|| panic!("{what}: {out}"));
    // Zones go round-robin by index (az1, az2, az3): cp-0's successor in az1 is cp-3, cp-1's cp-4.
    let steps = [
        at("kos: cp-3: kubeadm-join ok"),
        at("removing cp-0"),
        at("removed etcd member kos-prod-cp-0"),
        at("kos: cp-4: kubeadm-join ok"),
        at("removing cp-1"),
        at("kos: cp-5: kubeadm-join ok"),
        at("removing cp-2"),
    ];
    assert!(config < steps[0], "kubeadm-config first: {out}");
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}: {out}");
    // Then the general pool (maxSurge: 1): general-0's successor joined before it was drained.
    let general = [
        at("kos: general-3: kubeadm-join ok"),
        at("removing general-0"),
    ];
    assert!(steps[6] < general[0], "control planes first: {out}");
    assert!(general[0] < general[1], "{out}");
    // The second run: general-0 leaves, the others are succeeded, then batch in place.
    let at = |what: &str| rest.find(what).unwrap_or_else(|| panic!("{what}: {out}"));
    let workers = [
        at("general-0: drained (1 pod(s) evicted)"),
        at("kos: general-4: kubeadm-join ok"),
        at("removing general-1"),
        at("kos: general-5: kubeadm-join ok"),
        at("removing general-2"),
        at("replacing batch-0"),
        at("replacing batch-1"),
    ];
    assert!(
        workers.windows(2).all(|w| w[0] < w[1]),
        "{workers:?}: {out}"
    );

    let after = sim_admin(&sim.base, "/_sim/clusters");
    let c = &after[0];
    assert_eq!(c["violations"], serde_json::json!([]), "{after}");
    let nodes = c["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 8, "{after}");
    for n in nodes {
        assert_eq!(n["version"], "v1.36.4", "{after}");
        assert_eq!(n["ready"], true, "{after}");
        let name = n["name"].as_str().unwrap_or_default();
        if name.contains("-cp-") {
            assert_eq!(n["apiserver"], "v1.36.4", "{after}");
        }
    }
    let members = c["etcd"]["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{after}");
    assert!(members.iter().all(|m| m["up"] == true), "{after}");
    // Each new control plane booted a fresh volume: the old ones, which held the old nodes' disks
    // (kubeadm state, etcd data), are gone with their servers.
    let fresh = control_plane_volumes(&sim.clouds);
    assert_eq!(
        fresh.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "kos-prod-vol-cp-3",
            "kos-prod-vol-cp-4",
            "kos-prod-vol-cp-5"
        ],
        "{fresh:?}"
    );
    for (name, id) in &volumes {
        assert_ne!(
            fresh.get(name),
            Some(id),
            "{name} was booted again: {fresh:?}"
        );
    }
    assert_nothing_to_do(d, &sim.clouds, new, "after the upgrade");

    // The addons that follow the minor moved with it: cloud-provider-openstack's 1.36 release.
    assert!(
        rest.contains("moved to the images of Kubernetes 1.36"),
        "{out}"
    );
    let ds = prod_kubectl(&[
        "-n",
        "kube-system",
        "get",
        "daemonsets,deployments",
        "-o",
        "json",
    ]);
    let listed = String::from_utf8_lossy(&ds.stdout);
    assert!(ds.status.success(), "{}", text(&ds));
    assert!(
        listed.contains("openstack-cloud-controller-manager:v1.36.0")
            && !listed.contains("openstack-cloud-controller-manager:v1.35.0")
            && !listed.contains("cinder-csi-plugin:v1.35.0"),
        "{listed}"
    );
}

/// The servers of cluster `name` by server name, with their ids (a duplicate name shows as a
/// shorter map than list).
fn server_names(clouds: &std::path::Path, name: &str) -> Vec<String> {
    let rt = runtime();
    rt.block_on(async {
        let s = session(clouds).await;
        s.compute()
            .list_servers(&TagQuery::all([format!("kos-cluster={name}")]))
            .await
            .expect("servers")
            .into_iter()
            .map(|x| x.name)
            .collect()
    })
}

/// kill -9 at random moments of an upgrade's rollout, then plain `kos up`: it converges, with no
/// duplicate server, one etcd member per control-plane server (none without its server, no server
/// without its member), every node at the new release, and no invariant of the simulated cloud
/// violated at any moment. `KOS_ROLLOUT_SEED` replays the kill times, `KOS_ROLLOUT_KILLS` sets
/// their number.
#[test]
fn an_upgrade_killed_at_random_moments_converges_on_the_next_run() {
    use rand::{Rng, SeedableRng};
    let seed: u64 = std::env::var("KOS_ROLLOUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let kills: u32 = std::env::var("KOS_ROLLOUT_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    eprintln!("KOS_ROLLOUT_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let ha = std::fs::read_to_string(example("ha.yaml"))
        .expect("ha.yaml")
        .replace(
            "      count: 3\n      flavor: m1.xlarge",
            "      count: 1\n      flavor: m1.xlarge",
        )
        .replace("      count: 2\n", "      count: 1\n");
    let old = d.join("old.yaml");
    std::fs::write(
        &old,
        ha.replace(
            "kubernetesVersion: \"1.36.4\"",
            "kubernetesVersion: \"1.35.2\"",
        ),
    )
    .expect("write");
    let new = d.join("new.yaml");
    std::fs::write(&new, &ha).expect("write");
    let (old, new) = (old.to_str().expect("utf8"), new.to_str().expect("utf8"));
    let up = kos_within(d, &sim.clouds, &["up", "-f", old, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let count = server_names(&sim.clouds, "prod").len();
    assert_eq!(count, 5);

    for k in 0..kills {
        // Kills land anywhere in a run: while it checks the spec and the cloud, mid-converge, mid-step.
        let after = Duration::from_millis(rng.random_range(300..9_000));
        let child = spawn(d, &sim.clouds, &["up", "-f", new, "--cloud", "sim"]);
        std::thread::sleep(after);
        kill(child);
        let names = server_names(&sim.clouds, "prod");
        let unique: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(
            unique.len(),
            names.len(),
            "kill {k} after {after:?}: duplicates {names:?}"
        );
    }
    let last = kos_within(d, &sim.clouds, &["up", "-f", new, "--cloud", "sim"]);
    let out = text(&last);
    assert_eq!(last.status.code(), Some(0), "seed {seed}: {out}");
    let names = server_names(&sim.clouds, "prod");
    let unique: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(
        (names.len(), unique.len()),
        (count, count),
        "seed {seed}: {names:?}"
    );
    let clusters = sim_admin(&sim.base, "/_sim/clusters");
    let list = clusters.as_array().expect("clusters");
    assert_eq!(list.len(), 1, "seed {seed}: one cluster: {clusters}");
    let c = &list[0];
    assert_eq!(
        c["violations"],
        serde_json::json!([]),
        "seed {seed}: {clusters}"
    );
    let members = c["etcd"]["members"].as_array().expect("members");
    let cps: Vec<&String> = names.iter().filter(|n| n.contains("-cp-")).collect();
    assert_eq!(members.len(), cps.len(), "seed {seed}: {clusters}");
    for m in members {
        assert_eq!(
            m["up"], true,
            "seed {seed}: a member without its server: {clusters}"
        );
        assert!(
            cps.iter().any(|n| m["name"] == n.as_str()),
            "seed {seed}: {clusters}"
        );
    }
    let nodes = c["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), count, "seed {seed}: {clusters}");
    assert!(
        nodes
            .iter()
            .all(|n| n["version"] == "v1.36.4" && n["ready"] == true),
        "seed {seed}: {clusters}"
    );
    assert_nothing_to_do(d, &sim.clouds, new, &format!("seed {seed}"));
}
