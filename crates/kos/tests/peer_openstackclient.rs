//! The peer-client test: python-openstackclient (with python-octaviaclient), a client kos did not write,
//! drives `kos sim serve` through a whole cluster's worth of resources and deletes them again. This is the
//! proof that kos-sim speaks OpenStack, not just "what kos-cloud expects".
//!
//! The `openstack` CLI is found as [`support::openstack_cli`] says; without it the test fails, saying how
//! to install it: it is never skipped silently.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

mod support;

/// `kos sim serve` in the background (killed on drop), its clouds.yaml in a directory of its own.
struct SimProcess {
    // Held for its Drop (the process is killed before its directory goes).
    _served: support::Served,
    clouds_yaml: PathBuf,
    _dir: tempfile::TempDir,
}

impl SimProcess {
    fn start() -> SimProcess {
        let dir = tempfile::tempdir().expect("tempdir");
        // 50x faster than real time: LB provisioning takes ~1 s, a server boot ~0.6 s.
        let served = support::serve_scaled(dir.path(), "0.02");
        let clouds_yaml = served.clouds.clone();
        let mode = std::fs::metadata(&clouds_yaml).expect("clouds.yaml written");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                mode.permissions().mode() & 0o777,
                0o600,
                "clouds.yaml holds a password: 0600"
            );
        }
        SimProcess {
            _served: served,
            clouds_yaml,
            _dir: dir,
        }
    }
}

struct Osc {
    bin: PathBuf,
    clouds_yaml: PathBuf,
    keydir: PathBuf,
}

impl Osc {
    /// Runs `openstack <args>` and returns its stdout; panics with stderr on failure.
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(&self.bin)
            .args(args)
            .env("OS_CLIENT_CONFIG_FILE", &self.clouds_yaml)
            .env("OS_CLOUD", "sim")
            .env_remove("OS_AUTH_URL")
            .env_remove("OS_PASSWORD")
            .env("HOME", &self.keydir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "openstack {} failed ({}):\nstdout: {stdout}\nstderr: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-f", "json"]);
        let out = self.run(&a);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("openstack {}: not JSON ({e}): {out}", args.join(" ")))
    }

    fn id(&self, args: &[&str]) -> String {
        let v = self.json(args);
        v["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id in {v}"))
            .to_owned()
    }

    fn names(&self, args: &[&str]) -> Vec<String> {
        let v = self.json(args);
        v.as_array()
            .unwrap_or_else(|| panic!("openstack {}: not a list: {v}", args.join(" ")))
            .iter()
            .filter_map(|row| {
                row.get("Name")
                    .or_else(|| row.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    }

    /// Polls `show` until `field` equals `want` (bounded; fails loudly rather than hanging).
    fn wait_for(&self, args: &[&str], field: &str, want: &str) {
        for _ in 0..120 {
            let v = self.json(args);
            if v[field].as_str() == Some(want) {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("openstack {} never reached {field}={want}", args.join(" "));
    }
}

#[test]
fn openstackclient_drives_the_simulator() {
    let bin = support::openstack_cli();
    let sim = SimProcess::start();
    let home = tempfile::tempdir().expect("home");
    let osc = Osc {
        bin,
        clouds_yaml: sim.clouds_yaml.clone(),
        keydir: home.path().to_path_buf(),
    };

    let token = osc.json(&["token", "issue"]);
    assert!(
        token["id"].as_str().is_some_and(|t| !t.is_empty()),
        "token issued: {token}"
    );

    // What the fresh (demo) cloud holds, which must be all that is left at the end.
    let seeded_ports = osc.json(&["port", "list"]);
    assert_eq!(
        osc.names(&["router", "list"]),
        vec!["router1".to_owned()],
        "the demo cloud has devstack's project router"
    );

    // Network plumbing.
    osc.run(&["network", "create", "peer-net"]);
    osc.run(&[
        "subnet",
        "create",
        "--network",
        "peer-net",
        "--subnet-range",
        "10.20.0.0/24",
        "peer-subnet",
    ]);
    osc.run(&["router", "create", "peer-router"]);
    osc.run(&[
        "router",
        "set",
        "--external-gateway",
        "public",
        "peer-router",
    ]);
    osc.run(&["router", "add", "subnet", "peer-router", "peer-subnet"]);

    // Security group with a CIDR rule and a remote-group rule.
    osc.run(&["security", "group", "create", "peer-sg"]);
    osc.run(&[
        "security",
        "group",
        "rule",
        "create",
        "--protocol",
        "tcp",
        "--dst-port",
        "6443",
        "--remote-ip",
        "0.0.0.0/0",
        "peer-sg",
    ]);
    osc.run(&[
        "security",
        "group",
        "rule",
        "create",
        "--protocol",
        "tcp",
        "--dst-port",
        "10250",
        "--remote-group",
        "peer-sg",
        "peer-sg",
    ]);

    // A port with a fixed IP and an allowed address pair for the pod CIDR.
    let port = osc.id(&[
        "port",
        "create",
        "--network",
        "peer-net",
        "--fixed-ip",
        "subnet=peer-subnet,ip-address=10.20.0.10",
        "--allowed-address",
        "ip-address=10.244.0.0/16",
        "--security-group",
        "peer-sg",
        "peer-port",
    ]);
    let shown = osc.json(&["port", "show", &port]);
    assert!(
        shown["allowed_address_pairs"]
            .to_string()
            .contains("10.244.0.0/16"),
        "AAP kept: {shown}"
    );

    // Keypair and server group.
    let pubkey = home.path().join("id_ed25519.pub");
    std::fs::write(&pubkey, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDy8pT9m8QwQf1O4mVwq0sO9Q1xq0P4m8qg3k2pXhR7c peer@test\n").expect("key");
    osc.run(&[
        "keypair",
        "create",
        "--public-key",
        &pubkey.to_string_lossy(),
        "peer-key",
    ]);
    let group = osc.id(&[
        "server",
        "group",
        "create",
        "--policy",
        "anti-affinity",
        "peer-group",
    ]);

    // A server on the port, waited for by the client itself.
    let hint = format!("group={group}");
    let server = osc.json(&[
        "server",
        "create",
        "--flavor",
        "m1.small",
        "--image",
        "cirros-0.6.2",
        "--port",
        &port,
        "--key-name",
        "peer-key",
        "--hint",
        &hint,
        "--wait",
        "peer-vm",
    ]);
    assert_eq!(
        server["status"].as_str(),
        Some("ACTIVE"),
        "server ACTIVE: {server}"
    );
    let bound = osc.json(&["port", "show", &port]);
    assert_eq!(
        bound["status"].as_str(),
        Some("ACTIVE"),
        "port bound and ACTIVE: {bound}"
    );

    // Floating IP on the port (works because the subnet has a router interface to `public`).
    let fip = osc.json(&["floating", "ip", "create", "public"]);
    let fip_id = fip["id"].as_str().expect("fip id").to_owned();
    osc.run(&["floating", "ip", "set", "--port", &port, &fip_id]);
    let fip = osc.json(&["floating", "ip", "show", &fip_id]);
    assert_eq!(fip["port_id"].as_str(), Some(port.as_str()));

    // A volume, in one of the zones Cinder lists (its own, not Nova's).
    let zones = osc.json(&["availability", "zone", "list", "--volume"]);
    let zone = zones
        .as_array()
        .and_then(|z| z.first())
        .and_then(|z| z["Zone Name"].as_str())
        .unwrap_or_else(|| panic!("no volume zone listed: {zones}"))
        .to_owned();
    osc.run(&[
        "volume",
        "create",
        "--size",
        "1",
        "--availability-zone",
        &zone,
        "peer-vol",
    ]);
    osc.wait_for(&["volume", "show", "peer-vol"], "status", "available");

    // A load balancer with listener, pool, member and health monitor, each waited for.
    osc.run(&[
        "loadbalancer",
        "create",
        "--name",
        "peer-lb",
        "--vip-subnet-id",
        "peer-subnet",
        "--wait",
    ]);
    osc.run(&[
        "loadbalancer",
        "listener",
        "create",
        "--name",
        "peer-listener",
        "--protocol",
        "TCP",
        "--protocol-port",
        "6443",
        "--wait",
        "peer-lb",
    ]);
    osc.run(&[
        "loadbalancer",
        "pool",
        "create",
        "--name",
        "peer-pool",
        "--lb-algorithm",
        "ROUND_ROBIN",
        "--listener",
        "peer-listener",
        "--protocol",
        "TCP",
        "--wait",
    ]);
    osc.run(&[
        "loadbalancer",
        "member",
        "create",
        "--subnet-id",
        "peer-subnet",
        "--address",
        "10.20.0.10",
        "--protocol-port",
        "6443",
        "--wait",
        "peer-pool",
    ]);
    osc.run(&[
        "loadbalancer",
        "healthmonitor",
        "create",
        "--delay",
        "5",
        "--timeout",
        "3",
        "--max-retries",
        "3",
        "--type",
        "TCP",
        "--wait",
        "peer-pool",
    ]);
    let lb = osc.json(&["loadbalancer", "show", "peer-lb"]);
    assert_eq!(lb["provisioning_status"].as_str(), Some("ACTIVE"), "{lb}");

    // Delete everything, in the order a careful operator would.
    osc.run(&["loadbalancer", "delete", "--cascade", "--wait", "peer-lb"]);
    osc.run(&["floating", "ip", "delete", &fip_id]);
    osc.run(&["server", "delete", "--wait", "peer-vm"]);
    osc.run(&["volume", "delete", "peer-vol"]);
    osc.run(&["keypair", "delete", "peer-key"]);
    osc.run(&["server", "group", "delete", "peer-group"]);
    osc.run(&["port", "delete", &port]);
    osc.run(&["router", "remove", "subnet", "peer-router", "peer-subnet"]);
    osc.run(&["router", "unset", "--external-gateway", "peer-router"]);
    osc.run(&["router", "delete", "peer-router"]);
    osc.run(&["security", "group", "delete", "peer-sg"]);
    osc.run(&["subnet", "delete", "peer-subnet"]);
    osc.run(&["network", "delete", "peer-net"]);

    // Everything the scenario made is gone; only what a fresh cloud has remains.
    for _ in 0..120 {
        if osc.names(&["volume", "list"]).is_empty()
            && osc.names(&["loadbalancer", "list"]).is_empty()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(osc.names(&["server", "list"]), Vec::<String>::new());
    assert_eq!(osc.names(&["volume", "list"]), Vec::<String>::new());
    assert_eq!(osc.names(&["loadbalancer", "list"]), Vec::<String>::new());
    assert_eq!(osc.names(&["keypair", "list"]), Vec::<String>::new());
    assert_eq!(
        osc.names(&["server", "group", "list"]),
        Vec::<String>::new()
    );
    assert_eq!(osc.names(&["router", "list"]), vec!["router1".to_owned()]);
    assert_eq!(osc.json(&["floating", "ip", "list"]), serde_json::json!([]));
    assert_eq!(osc.json(&["port", "list"]), seeded_ports);
    let mut networks = osc.names(&["network", "list"]);
    networks.sort();
    assert_eq!(networks, vec!["private".to_owned(), "public".to_owned()]);
    let mut subnets = osc.names(&["subnet", "list"]);
    subnets.sort();
    assert_eq!(
        subnets,
        vec!["private-subnet".to_owned(), "public-subnet".to_owned()]
    );
    assert_eq!(
        osc.names(&["security", "group", "list"]),
        vec!["default".to_owned()]
    );
}
