//! kubectl, a peer client kos did not write, against a cluster of the simulated cloud: the kubeconfig
//! from `kos kubeconfig` reaches the cluster's API through the endpoint's local address and verifies
//! its real serving certificate; the nodes are initialised by the cloud controller running in the
//! cluster; a LoadBalancer Service gets an Octavia load balancer with an address, and loses it when
//! deleted. kubectl is `KOS_KUBECTL`, else `/usr/bin/kubectl`, else the one on PATH; without one the
//! test fails saying how to install it (never skipped).

mod support;

use serde_json::Value;
use support::*;

fn service_lbs(base: &str) -> Vec<Value> {
    sim_state(base)["octavia"]["loadbalancers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|l| {
            l["base"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("kube_service_demo_default_web"))
        })
        .collect()
}

#[test]
fn kubectl_uses_the_kubeconfig_and_a_load_balancer_service_gets_an_address() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve_scaled(d, "0.02");
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    assert!(
        String::from_utf8_lossy(&up.stdout)
            .contains("Kubernetes API: ready; 3 node(s) Ready and initialised"),
        "{}",
        text(&up)
    );
    let kc = kos(
        d,
        Some(&sim.clouds),
        &["kubeconfig", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&kc), 0, "{}", text(&kc));

    let ready = kubectl(d, &["get", "--raw", "/readyz"]);
    assert!(ready.status.success(), "{}", text(&ready));
    assert_eq!(String::from_utf8_lossy(&ready.stdout).trim(), "ok");

    let nodes = kubectl(d, &["get", "nodes", "-o", "json"]);
    assert!(nodes.status.success(), "{}", text(&nodes));
    let list: Value = serde_json::from_slice(&nodes.stdout).expect("node list JSON");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 3, "{list}");
    for n in items {
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            n["spec"]["providerID"]
                .as_str()
                .is_some_and(|p| p.starts_with("openstack:///")),
            "{name}: {n}"
        );
        let taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
        assert!(
            !taints
                .iter()
                .any(|t| t["key"] == "node.cloudprovider.kubernetes.io/uninitialized"),
            "{name} is initialised: {n}"
        );
        assert!(
            n["status"]["addresses"]
                .as_array()
                .is_some_and(|a| !a.is_empty()),
            "{name}: {n}"
        );
    }

    // A LoadBalancer Service, created through the cluster's API.
    std::fs::write(
        d.join("web.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: default\nspec:\n  type: LoadBalancer\n  selector:\n    app: web\n  ports:\n  - port: 80\n    targetPort: 8080\n    nodePort: 30080\n",
    )
    .expect("write");
    let created = kubectl(d, &["apply", "-f", "web.yaml"]);
    assert!(created.status.success(), "{}", text(&created));
    let ip = eventually(120, "the Service's external address", || {
        let o = kubectl(
            d,
            &["get", "--raw", "/api/v1/namespaces/default/services/web"],
        );
        let v: Value = serde_json::from_slice(&o.stdout).ok()?;
        v["status"]["loadBalancer"]["ingress"][0]["ip"]
            .as_str()
            .map(str::to_owned)
    });
    let lbs = service_lbs(&sim.base);
    assert_eq!(lbs.len(), 1, "one Octavia load balancer for the Service");
    let fips = sim_state(&sim.base)["neutron"]["floating_ips"].clone();
    assert!(
        fips.as_array()
            .is_some_and(|f| f.iter().any(|x| x["floating_ip_address"] == ip.as_str())),
        "{ip} is the load balancer's floating IP: {fips}"
    );
    let deleted = kubectl(d, &["delete", "-f", "web.yaml"]);
    assert!(deleted.status.success(), "{}", text(&deleted));
    eventually(120, "the Service's load balancer to go", || {
        service_lbs(&sim.base).is_empty().then_some(())
    });

    let down = kos(d, Some(&sim.clouds), &["down", "demo", "--cloud", "sim"]);
    assert_eq!(code(&down), 0, "{}", text(&down));
}
