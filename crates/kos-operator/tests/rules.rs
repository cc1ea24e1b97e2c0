//! The Cluster CRD's CEL rules refuse what `kos plan` refuses, with its message: each case edits
//! an example so that kos-cluster's reader refuses it, then applies it to an API server
//! (kos-kube-fake, which evaluates `x-kubernetes-validations` as apiextensions does) and expects
//! the same message at the same field.

mod support;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kos_operator::resource::Cluster;
use kube::api::{Api, Patch, PatchParams, PostParams, ValidationDirective};
use serde_json::{Value, json};

struct Case {
    why: &'static str,
    edit: fn(&mut Value),
    /// Where `kos plan` reports it.
    field: &'static str,
    /// Where the API server reports it and the type it shows, when a rule cannot point where
    /// kos does (a list's rule is reported at the list, kos names the item; a map's entry is
    /// `map[key]`, kos writes `map.key`).
    server_field: Option<(&'static str, &'static str)>,
}

fn case(why: &'static str, field: &'static str, edit: fn(&mut Value)) -> Case {
    Case {
        why,
        edit,
        field,
        server_field: None,
    }
}

/// Public keys kos takes (built, not generated: a key's blob is its algorithm as an SSH string,
/// then its parameters).
const ED25519: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f me@host";
const RSA: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQAABw4VHCMqMTg/Rk1UW2JpcHd+hYyTmqGor7a9xMvS2eDn7vX8AwoRGB8mLTQ7QklQV15lbHN6gYiPlp2kq7K5wMfO1dzj6vH4/wYNFBsiKTA3PkVMU1phaG92fYSLkpmgp661vMPK0djf5u30+wIJEBceJSwzOkFIT1ZdZGtyeYCHjpWco6qxuL/GzdTb4unw9/4FDBMaISgvNj1ES1JZYGdudXyDipGYn6attLvCydDX3uXs8/oBCA8WHSQrMjlAR05VXGNqcXh/ho2Um6KpsLe+xczT2uHo7/b9BAsSGSAnLjU8Q0pRWF9mbXR7gomQl56lrLO6wcjP1t3k6/L5 ops";
const ECDSA: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

fn pool(name: &str) -> Value {
    json!({"name": name, "count": 1, "flavor": "m1.medium", "image": "ubuntu-24.04"})
}

fn cases() -> Vec<Case> {
    vec![
        case(
            "a floating IP for three control planes",
            "spec.apiEndpoint.type",
            |s| s["controlPlane"]["count"] = json!(3),
        ),
        case(
            "a floating IP and a control-plane surge",
            "spec.controlPlane.maxSurge",
            |s| s["controlPlane"]["maxSurge"] = json!(1),
        ),
        case(
            "a floating IP with an Octavia provider",
            "spec.apiEndpoint.provider",
            |s| s["apiEndpoint"]["provider"] = json!("ovn"),
        ),
        case("both network sources", "spec.network", |s| {
            s["network"]["existing"] = json!({"network": "net", "subnet": "sub"});
        }),
        case("no network source", "spec.network.create", |s| {
            s["network"] = json!({"podCIDR": "10.244.0.0/16"});
        }),
        Case {
            server_field: Some(("spec.nodePools", "array")),
            ..case("two pools of one name", "spec.nodePools[1].name", |s| {
                s["nodePools"] = json!([pool("web"), pool("web")]);
            })
        },
        case("the pool name cp", "spec.nodePools[1].name", |s| {
            s["nodePools"] = json!([pool("web"), pool("cp")]);
        }),
        case("a pool name port-*", "spec.nodePools[0].name", |s| {
            s["nodePools"] = json!([pool("port-web"), pool("web")]);
        }),
        case("a pool name vol-*", "spec.nodePools[0].name", |s| {
            s["nodePools"] = json!([pool("vol-web")]);
        }),
        case("a pool name sgroup-*", "spec.nodePools[0].name", |s| {
            s["nodePools"] = json!([pool("sgroup-web")]);
        }),
        case(
            "a pool name with an uppercase letter",
            "spec.nodePools[0].name",
            |s| {
                s["nodePools"] = json!([pool("Web")]);
            },
        ),
        case("a pool name with a `_`", "spec.nodePools[0].name", |s| {
            s["nodePools"] = json!([pool("web_1")]);
        }),
        case(
            "a pool name starting with `-`",
            "spec.nodePools[1].name",
            |s| {
                s["nodePools"] = json!([pool("web"), pool("-db")]);
            },
        ),
        case(
            "a pool name ending with `-`",
            "spec.nodePools[0].name",
            |s| {
                s["nodePools"] = json!([pool("web-")]);
            },
        ),
        Case {
            server_field: Some(("spec.nodePools[0].labels[tier]", "string")),
            ..case(
                "a label value with a space",
                "spec.nodePools[0].labels.tier",
                |s| {
                    s["nodePools"][0]["labels"] = json!({"tier": "front end"});
                },
            )
        },
        Case {
            server_field: Some(("spec.nodePools[0].labels[example.com/tier]", "string")),
            ..case(
                "a label value too long",
                "spec.nodePools[0].labels.example.com/tier",
                |s| s["nodePools"][0]["labels"] = json!({"example.com/tier": "x".repeat(64)}),
            )
        },
        Case {
            server_field: Some(("spec.nodePools[0].labels[b]", "string")),
            ..case(
                "a label value starting with `.`",
                "spec.nodePools[0].labels.b",
                |s| {
                    s["nodePools"][0]["labels"] = json!({"a": "", "b": ".x"});
                },
            )
        },
        Case {
            server_field: Some(("spec.nodePools[0].labels[tier]", "string")),
            ..case(
                "a label value ending with `_`",
                "spec.nodePools[0].labels.tier",
                |s| {
                    s["nodePools"][0]["labels"] = json!({"tier": "web_"});
                },
            )
        },
        Case {
            server_field: Some(("spec.kubernetesVersion", "string")),
            ..case(
                "a release without its patch",
                "spec.kubernetesVersion",
                |s| {
                    s["kubernetesVersion"] = json!("1.36");
                },
            )
        },
        Case {
            server_field: Some(("spec.kubernetesVersion", "string")),
            ..case("a release of Kubernetes 2", "spec.kubernetesVersion", |s| {
                s["kubernetesVersion"] = json!("v2.1.0");
            })
        },
        Case {
            server_field: Some(("spec.kubernetesVersion", "string")),
            ..case(
                "a release outside kos's pins",
                "spec.kubernetesVersion",
                |s| {
                    s["kubernetesVersion"] = json!("1.30.2");
                },
            )
        },
        case(
            "a pool that can never replace a node",
            "spec.nodePools[0].maxUnavailable",
            |s| s["nodePools"][0]["maxUnavailable"] = json!(0),
        ),
        case(
            "a pool's count above its autoscaling max",
            "spec.nodePools[0].count",
            |s| s["nodePools"][0]["autoscaling"] = json!({"min": 0, "max": 1}),
        ),
        case(
            "a pool's count below its autoscaling min",
            "spec.nodePools[0].count",
            |s| s["nodePools"][0]["autoscaling"] = json!({"min": 3, "max": 10}),
        ),
        case(
            "an autoscaling min above its max",
            "spec.nodePools[0].autoscaling.min",
            |s| s["nodePools"][0]["autoscaling"] = json!({"min": 5, "max": 3}),
        ),
        case(
            "an autoscaling max of 0",
            "spec.nodePools[0].autoscaling.max",
            |s| {
                s["nodePools"][0]["count"] = json!(0);
                s["nodePools"][0]["autoscaling"] = json!({"min": 0, "max": 0});
            },
        ),
        case("a proxy without a URL", "spec.proxy", |s| {
            s["proxy"] = json!({"noProxy": [".example"]});
        }),
        case(
            "a CNI manifest over http",
            "spec.addons.cniManifest.url",
            |s| {
                s["addons"] = json!({"cniManifest": {"url": "http://example.com/cni.yaml",
                "sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}});
            },
        ),
        case(
            "a CNI manifest's short sha256",
            "spec.addons.cniManifest.sha256",
            |s| {
                s["addons"] = json!({"cniManifest": {"url": "https://example.com/cni.yaml",
                "sha256": "0123456789ABCDEF"}});
            },
        ),
        case("a /29 node subnet", "spec.network.create.cidr", |s| {
            s["network"]["create"]["cidr"] = json!("10.0.0.0/29");
        }),
        case(
            "more nodes than the node subnet has room for",
            "spec.network.create.cidr",
            |s| {
                s["network"]["create"]["cidr"] = json!("10.0.0.0/28");
                s["apiEndpoint"] = json!({"type": "loadBalancer"});
                s["controlPlane"]["count"] = json!(3);
                s["nodePools"] = json!([pool("web"), pool("db")]);
                s["nodePools"][1]["count"] = json!(8);
            },
        ),
        case(
            "more nodes than the default pod range has /24s",
            "spec.network.podCIDR",
            |s| {
                s["network"]["create"]["cidr"] = json!("10.0.0.0/20");
                s["nodePools"][0]["count"] = json!(256);
            },
        ),
        case(
            "more nodes than the pod range has /24s",
            "spec.network.podCIDR",
            |s| {
                s["network"]["podCIDR"] = json!("10.200.0.0/22");
                s["nodePools"] = json!([pool("web"), pool("db")]);
                s["nodePools"][1]["count"] = json!(3);
            },
        ),
        Case {
            server_field: Some(("spec.network.create.cidr", "string")),
            ..case(
                "a node subnet that is not a CIDR",
                "spec.network.create.cidr",
                |s| {
                    s["network"]["create"]["cidr"] = json!("10.0.0/24");
                },
            )
        },
        Case {
            server_field: Some(("spec.network.podCIDR", "string")),
            ..case("a pod range with host bits", "spec.network.podCIDR", |s| {
                s["network"]["podCIDR"] = json!("10.244.1.0/16");
            })
        },
        Case {
            server_field: Some(("spec.network.serviceCIDR", "string")),
            ..case("an IPv6 service range", "spec.network.serviceCIDR", |s| {
                s["network"]["serviceCIDR"] = json!("fd00::/108");
            })
        },
        Case {
            server_field: Some(("spec.apiEndpoint.allowedCIDRs[1]", "string")),
            ..case(
                "an API source range with host bits",
                "spec.apiEndpoint.allowedCIDRs[1]",
                |s| {
                    s["controlPlane"]["count"] = json!(1);
                    s["apiEndpoint"] = json!({"type": "loadBalancer",
                        "allowedCIDRs": ["192.0.2.0/24", "2001:db8::1/64"]});
                },
            )
        },
        Case {
            server_field: Some(("spec.network.ssh.allowedCIDRs[0]", "string")),
            ..case(
                "an SSH source that is not a CIDR",
                "spec.network.ssh.allowedCIDRs[0]",
                |s| {
                    s["network"]["ssh"] = json!({"allowedCIDRs": ["198.51.100.7"]});
                },
            )
        },
        Case {
            server_field: Some(("spec.network.create.dnsServers[1]", "string")),
            ..case(
                "a DNS server that is not an IPv4 address",
                "spec.network.create.dnsServers[1]",
                |s| {
                    s["network"]["create"]["dnsServers"] = json!(["1.1.1.1", "2606:4700::1111"]);
                },
            )
        },
        Case {
            server_field: Some(("spec.proxy.https", "string")),
            ..case("a proxy without a scheme", "spec.proxy.https", |s| {
                s["proxy"] = json!({"https": "proxy.example:3128"});
            })
        },
        Case {
            server_field: Some(("spec.proxy.http", "string")),
            ..case(
                "a proxy with a password and a bad port",
                "spec.proxy.http",
                |s| {
                    s["proxy"] = json!({"http": "http://kos:s3cret@proxy.example:99999"});
                },
            )
        },
        Case {
            server_field: Some(("spec.mirrors.manifests", "string")),
            ..case(
                "a manifest mirror with a space",
                "spec.mirrors.manifests",
                |s| {
                    s["mirrors"] = json!({"manifests": "https://mirror example/files"});
                },
            )
        },
        Case {
            server_field: Some(("spec.mirrors.packages.os", "string")),
            ..case(
                "an OS mirror with a query",
                "spec.mirrors.packages.os",
                |s| {
                    s["mirrors"] = json!({"packages": {"os": "https://mirror.example/ubuntu?x=1"}});
                },
            )
        },
        Case {
            server_field: Some(("spec.mirrors.packages.kubernetes", "string")),
            ..case(
                "a package mirror without a host",
                "spec.mirrors.packages.kubernetes",
                |s| {
                    s["mirrors"] = json!({"packages": {"kubernetes": "https://:8080/k8s"}});
                },
            )
        },
        Case {
            server_field: Some(("spec.mirrors.packages.osSecurity", "string")),
            ..case(
                "a package mirror with a port 0",
                "spec.mirrors.packages.osSecurity",
                |s| {
                    s["mirrors"] = json!({"packages": {"osSecurity": "http://[fd00::1]:0/ubuntu"}});
                },
            )
        },
        Case {
            server_field: Some(("spec.mirrors.manifests", "string")),
            ..case(
                "a manifest mirror with credentials",
                "spec.mirrors.manifests",
                |s| {
                    s["mirrors"] = json!({"manifests": "https://u:secret@mirror.example/files"});
                },
            )
        },
        Case {
            server_field: Some(("spec.mirrors.registries[registry.k8s.io]", "string")),
            ..case(
                "a registry mirror with a path",
                "spec.mirrors.registries.registry.k8s.io",
                |s| {
                    s["mirrors"] = json!({"registries": {"registry.k8s.io": "https://mirror.example:5000/k8s"}});
                },
            )
        },
        Case {
            server_field: Some(("spec.controlPlane.healthCheck.nodeStartupTimeout", "string")),
            ..case(
                "a control plane's startup timeout without a unit",
                "spec.controlPlane.healthCheck.nodeStartupTimeout",
                |s| {
                    s["controlPlane"]["healthCheck"] = json!({"nodeStartupTimeout": "600"});
                },
            )
        },
        Case {
            server_field: Some((
                "spec.nodePools[0].healthCheck.unhealthyConditions[1].timeout",
                "string",
            )),
            ..case(
                "a pool's condition timeout in days",
                "spec.nodePools[0].healthCheck.unhealthyConditions[1].timeout",
                |s| {
                    s["nodePools"][0]["healthCheck"] = json!({"unhealthyConditions": [
                        {"type": "Ready", "status": "False", "timeout": "5m"},
                        {"type": "Ready", "status": "Unknown", "timeout": "1d"},
                    ]});
                },
            )
        },
        Case {
            server_field: Some(("spec.proxy.noProxy[1]", "string")),
            ..case(
                "a noProxy entry with a wildcard",
                "spec.proxy.noProxy[1]",
                |s| {
                    s["proxy"] = json!({"https": "http://proxy.example:3128",
                    "noProxy": [".example.com", "*.svc"]});
                },
            )
        },
        Case {
            server_field: Some(("spec.mirrors.caBundle", "string")),
            ..case(
                "a CA bundle that is a file name",
                "spec.mirrors.caBundle",
                |s| {
                    s["mirrors"] = json!({"caBundle": "mirror-ca.crt"});
                },
            )
        },
        Case {
            server_field: Some(("spec.apiEndpoint.dnsName", "string")),
            ..case(
                "an API DNS name with an uppercase letter",
                "spec.apiEndpoint.dnsName",
                |s| {
                    s["apiEndpoint"]["dnsName"] = json!("api.Example.com");
                },
            )
        },
        Case {
            server_field: Some(("spec.apiEndpoint.dnsName", "string")),
            ..case(
                "an API DNS name with an empty label",
                "spec.apiEndpoint.dnsName",
                |s| {
                    s["apiEndpoint"]["dnsName"] = json!("api..example.com.");
                },
            )
        },
        Case {
            server_field: Some(("spec.apiEndpoint.dnsName", "string")),
            ..case(
                "an API DNS name with an underscore after a bad label",
                "spec.apiEndpoint.dnsName",
                |s| {
                    s["apiEndpoint"]["dnsName"] = json!("k8s.my_corp.Example.com");
                },
            )
        },
        Case {
            server_field: Some(("spec.apiEndpoint.dnsName", "string")),
            ..case(
                "an API DNS name whose label ends with `-`",
                "spec.apiEndpoint.dnsName",
                |s| {
                    s["apiEndpoint"]["dnsName"] = json!("api-.example.com");
                },
            )
        },
        Case {
            server_field: Some(("spec.apiEndpoint.dnsName", "string")),
            ..case(
                "an API DNS name's label too long",
                "spec.apiEndpoint.dnsName",
                |s| {
                    s["apiEndpoint"]["dnsName"] = json!(format!("{}.example.com", "a".repeat(64)));
                },
            )
        },
        Case {
            server_field: Some(("spec.sshPublicKey", "string")),
            ..case("a private key as the SSH key", "spec.sshPublicKey", |s| {
                s["sshPublicKey"] = json!(
                    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n"
                );
            })
        },
        Case {
            server_field: Some(("spec.sshPublicKey", "string")),
            ..case("two SSH keys", "spec.sshPublicKey", |s| {
                s["sshPublicKey"] = json!(format!("{ED25519}\n{RSA}"));
            })
        },
        Case {
            server_field: Some(("spec.sshPublicKey", "string")),
            ..case("a DSA key", "spec.sshPublicKey", |s| {
                s["sshPublicKey"] = json!("ssh-dss AAAAB3NzaC1kc3MAAACBAP me");
            })
        },
        Case {
            server_field: Some(("spec.sshPublicKey", "string")),
            ..case(
                "an SSH key whose data is not base64",
                "spec.sshPublicKey",
                |s| {
                    s["sshPublicKey"] = json!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA!! me");
                },
            )
        },
        Case {
            server_field: Some(("spec.sshPublicKey", "string")),
            ..case("an SSH key without data", "spec.sshPublicKey", |s| {
                s["sshPublicKey"] = json!("ssh-ed25519");
            })
        },
        Case {
            server_field: Some(("spec.sshPublicKey", "string")),
            ..case("an Ed25519 key named RSA", "spec.sshPublicKey", |s| {
                s["sshPublicKey"] = json!(ED25519.replacen("ssh-ed25519", "ssh-rsa", 1));
            })
        },
        Case {
            server_field: Some(("spec.sshPublicKey", "string")),
            ..case("a truncated SSH key", "spec.sshPublicKey", |s| {
                s["sshPublicKey"] = json!("ssh-rsa AAAAB3Nz");
            })
        },
        Case {
            server_field: Some(("spec.controlPlane.flavor", "string")),
            ..case("a blank flavor", "spec.controlPlane.flavor", |s| {
                s["controlPlane"]["flavor"] = json!("  ");
            })
        },
        Case {
            server_field: Some(("spec.nodePools[0].availabilityZones[1]", "string")),
            ..case(
                "an empty availability zone",
                "spec.nodePools[0].availabilityZones[1]",
                |s| {
                    s["nodePools"][0]["availabilityZones"] = json!(["az1", ""]);
                },
            )
        },
        Case {
            server_field: Some(("spec.network.create.cidr", "string")),
            ..case("an empty node subnet", "spec.network.create.cidr", |s| {
                s["network"]["create"]["cidr"] = json!("");
            })
        },
        Case {
            server_field: Some(("spec.sshPublicKey", "string")),
            ..case("an empty SSH key", "spec.sshPublicKey", |s| {
                s["sshPublicKey"] = json!("");
            })
        },
        Case {
            server_field: Some(("spec.proxy.https", "string")),
            ..case("an empty proxy URL", "spec.proxy.https", |s| {
                s["proxy"] = json!({"https": ""});
            })
        },
        Case {
            server_field: Some(("spec.mirrors.registries[docker.io]", "string")),
            ..case(
                "an empty registry mirror",
                "spec.mirrors.registries.docker.io",
                |s| {
                    s["mirrors"] = json!({"registries": {"docker.io": ""}});
                },
            )
        },
        Case {
            server_field: Some(("spec.addons.cniManifest.url", "string")),
            ..case(
                "an empty CNI manifest URL",
                "spec.addons.cniManifest.url",
                |s| {
                    s["addons"] = json!({"cniManifest": {"url": "",
                "sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}});
                },
            )
        },
        Case {
            server_field: Some(("spec.network.existing.subnet", "string")),
            ..case("an empty subnet", "spec.network.existing.subnet", |s| {
                s["network"] = json!({"existing": {"network": "net", "subnet": ""}});
            })
        },
        case(
            "a CNI kos has no verified manifest for",
            "spec.addons.cni",
            |s| {
                s["addons"] = json!({"cni": "cilium"});
            },
        ),
        case("a /25 pod range", "spec.network.podCIDR", |s| {
            s["network"]["podCIDR"] = json!("10.244.0.0/25");
        }),
        case("a /25 service range", "spec.network.serviceCIDR", |s| {
            s["network"]["serviceCIDR"] = json!("10.96.0.0/25");
        }),
        case("a /10 service range", "spec.network.serviceCIDR", |s| {
            s["network"]["serviceCIDR"] = json!("100.64.0.0/10");
        }),
        case("pods over the nodes", "spec.network.podCIDR", |s| {
            s["network"]["podCIDR"] = json!("10.0.0.0/16");
        }),
        case(
            "nodes in the default pod range",
            "spec.network.create.cidr",
            |s| {
                s["network"]["create"]["cidr"] = json!("10.244.1.0/24");
            },
        ),
        case("services over the nodes", "spec.network.serviceCIDR", |s| {
            s["network"]["serviceCIDR"] = json!("10.0.0.0/16");
        }),
        case(
            "nodes in the default service range",
            "spec.network.create.cidr",
            |s| {
                s["network"]["create"]["cidr"] = json!("10.96.0.0/24");
            },
        ),
        case(
            "services over the default pod range",
            "spec.network.serviceCIDR",
            |s| {
                s["network"]["serviceCIDR"] = json!("10.244.0.0/16");
            },
        ),
        case("services over the pods", "spec.network.serviceCIDR", |s| {
            s["network"]["podCIDR"] = json!("10.200.0.0/16");
            s["network"]["serviceCIDR"] = json!("10.200.0.0/20");
        }),
        case(
            "pods in the default service range",
            "spec.network.podCIDR",
            |s| {
                s["network"]["podCIDR"] = json!("10.96.0.0/16");
            },
        ),
    ]
}

/// `kos plan`'s messages for `field`, without the `field: ` prefix they carry.
fn kos_messages(doc: &Value, field: &str) -> Result<Vec<String>, String> {
    let text = serde_saphyr::to_string(doc).map_err(|e| e.to_string())?;
    let report = match kos_cluster::load("cluster.yaml", &text) {
        Ok(_) => return Err("kos accepts it".into()),
        Err(r) => r,
    };
    let found: Vec<String> = report
        .errors()
        .filter(|d| d.field == field)
        .map(|d| {
            d.message
                .strip_prefix(&format!("{field}: "))
                .unwrap_or(&d.message)
                .to_owned()
        })
        .collect();
    if found.is_empty() {
        return Err(format!(
            "kos reports no error at {field}: {:?}",
            report.diagnostics()
        ));
    }
    Ok(found)
}

/// An API server with the Cluster CRD, and its Clusters in `default` (the server lives as long as
/// the first).
async fn with_the_crd() -> (kos_kube_fake::FakeKube, Api<Cluster>) {
    let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
    let client = fake.client().expect("client");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &kos_operator::resource::crd())
        .await
        .expect("the CRD with its rules is accepted");
    (fake, Api::namespaced(client, "default"))
}

#[tokio::test]
async fn the_crd_refuses_what_kos_plan_refuses_with_its_message() {
    let (_fake, clusters) = with_the_crd().await;
    let strict = PatchParams {
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::apply("test")
    };
    let base = support::example("minimal.yaml");
    let mut failures = Vec::new();
    for c in cases() {
        let mut doc = base.clone();
        (c.edit)(&mut doc["spec"]);
        let messages = match kos_messages(&doc, c.field) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{}: {e}", c.why));
                continue;
            }
        };
        let mut obj = json!({
            "apiVersion": "kos.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "refused"},
            "spec": doc["spec"],
        });
        obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
        // The server shows the type of the value whose rule failed: the lists' rules are on
        // lists, the others on objects. One of kos's messages at the field is enough (a range
        // may also be too small for the nodes, which only kos checks).
        let wants: Vec<String> = messages
            .iter()
            .map(|m| match c.server_field {
                Some((f, shown)) => format!("{f}: Invalid value: \"{shown}\": {m}"),
                None => format!("{}: Invalid value: \"object\": {m}", c.field),
            })
            .collect();
        match clusters
            .patch("refused", &strict, &Patch::Apply(&obj))
            .await
        {
            Ok(_) => failures.push(format!(
                "{}: the server accepted it; kos: {messages:?}",
                c.why
            )),
            Err(kube::Error::Api(e))
                if e.code == 422 && wants.iter().any(|w| e.message.contains(w)) =>
            {
                // And no more there than kos says: a rule that stays silent on what an earlier
                // one reports (a blank value, a range that is not a CIDR) must.
                let at = match c.server_field {
                    Some((f, _)) => format!("{f}: Invalid value"),
                    None => format!("{}: Invalid value", c.field),
                };
                let said = e.message.matches(&at).count();
                if said > messages.len() {
                    failures.push(format!(
                        "{}: {said} errors at the field, kos gives {messages:?}: {}",
                        c.why, e.message
                    ));
                }
            }
            Err(e) => failures.push(format!("{}: want one of {wants:?}, got {e}", c.why)),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every release kos supports passes the version's rules, written as kos takes it (with or
/// without a `v`).
#[tokio::test]
async fn the_crd_takes_every_release_kos_takes() {
    let (_fake, clusters) = with_the_crd().await;
    let apply = PatchParams::apply("test");
    let base = support::example("minimal.yaml");
    let minors = kos_cluster::spec::KubernetesVersion::supported_minors();
    assert_eq!(minors.len(), 3, "{minors:?}");
    for (i, release) in minors
        .iter()
        .flat_map(|m| [format!("1.{m}.0"), format!("v1.{m}.12")])
        .enumerate()
    {
        let mut doc = base.clone();
        doc["spec"]["kubernetesVersion"] = json!(release);
        let text = serde_saphyr::to_string(&doc).expect("yaml");
        kos_cluster::load("cluster.yaml", &text).expect("kos takes it");
        let name = format!("release-{i}");
        let mut obj = json!({
            "apiVersion": "kos.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": doc["spec"],
        });
        obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
        clusters
            .patch(&name, &apply, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("{release}: {e}"));
    }
}

/// At the ranges' limits (11 nodes in a /28 node subnet, 256 in the default pod range's /24s)
/// kos and the CRD take the spec.
#[tokio::test]
async fn the_crd_takes_as_many_nodes_as_the_ranges_have_room_for() {
    let (_fake, clusters) = with_the_crd().await;
    let apply = PatchParams::apply("test");
    let base = support::example("minimal.yaml");
    let full_subnet = |s: &mut Value| {
        s["network"]["create"]["cidr"] = json!("10.0.0.0/28");
        s["apiEndpoint"] = json!({"type": "loadBalancer"});
        s["controlPlane"]["count"] = json!(3);
        s["nodePools"][0]["count"] = json!(8);
    };
    let full_pods = |s: &mut Value| {
        s["network"]["create"]["cidr"] = json!("10.0.0.0/20");
        s["nodePools"][0]["count"] = json!(255);
    };
    for (i, edit) in [full_subnet, full_pods].into_iter().enumerate() {
        let mut doc = base.clone();
        edit(&mut doc["spec"]);
        let text = serde_saphyr::to_string(&doc).expect("yaml");
        kos_cluster::load("cluster.yaml", &text).expect("kos takes it");
        let name = format!("full-{i}");
        let mut obj = json!({
            "apiVersion": "kos.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": doc["spec"],
        });
        obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
        clusters
            .patch(&name, &apply, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// Mirrors and a proxy kos takes (a proxy's credentials, an IPv6 host, a port, a registry mirror
/// with a trailing `/`, an `@` in a path, `noProxy` hosts, domains and CIDRs, a CA bundle) and
/// health checks' durations, the API's DNS name (a trailing dot) and a CNI with the user's own
/// manifest pass the rules.
/// Public keys kos takes of three algorithms (one whose name leaves a partial base64 group, one
/// with padding), with and without a comment, with spaces around, pass the SSH key's rules.
#[tokio::test]
async fn the_crd_takes_the_ssh_keys_kos_takes() {
    let (_fake, clusters) = with_the_crd().await;
    let apply = PatchParams::apply("test");
    let base = support::example("minimal.yaml");
    for (i, key) in [
        ED25519.to_owned(),
        RSA.to_owned(),
        ECDSA.to_owned(),
        format!("  {ED25519}\n"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut doc = base.clone();
        doc["spec"]["sshPublicKey"] = json!(key);
        let text = serde_saphyr::to_string(&doc).expect("yaml");
        kos_cluster::load("cluster.yaml", &text)
            .unwrap_or_else(|e| panic!("kos takes {key}: {e:?}"));
        let name = format!("key-{i}");
        let mut obj = json!({
            "apiVersion": "kos.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": doc["spec"],
        });
        obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
        clusters
            .patch(&name, &apply, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
    }
}

#[tokio::test]
async fn the_crd_takes_the_urls_durations_and_bundles_kos_takes() {
    let (_fake, clusters) = with_the_crd().await;
    let apply = PatchParams::apply("test");
    let mut doc = support::example("minimal.yaml");
    doc["spec"]["mirrors"] = json!({
        "registries": {
            "registry.k8s.io": "https://mirror.example:5000/",
            "docker.io": "http://[fd00::5]:5000",
            "quay.io": "https://quay-mirror.example",
        },
        "packages": {
            "kubernetes": "https://mirror.example/pkgs.k8s.io/@stable",
            "os": "http://[fd00::6]/ubuntu",
            "osSecurity": "https://mirror.example:8443/ubuntu-security/",
        },
        "manifests": "https://mirror.example/files",
    });
    doc["spec"]["proxy"] = json!({
        "http": "http://kos:s3cret@proxy.example:3128",
        "https": "http://proxy.example:3128/",
        "noProxy": [".example", "10.0.0.0/8", "[fd00::1]", "mirror.example:5000"],
    });
    doc["spec"]["apiEndpoint"]["dnsName"] = json!("api.k8s-1.example.com.");
    // A CNI without a verified manifest of kos's, with one the user vouches for.
    doc["spec"]["addons"] = json!({"cni": "cilium", "cniManifest": {
        "url": "https://mirror.example/cilium.yaml",
        "sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}});
    doc["spec"]["mirrors"]["caBundle"] =
        json!("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    doc["spec"]["controlPlane"]["healthCheck"] = json!({"nodeStartupTimeout": "0",
        "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "timeout": "1h30m"}]});
    doc["spec"]["nodePools"][0]["healthCheck"] = json!({"nodeStartupTimeout": "20m",
        "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "300s"}]});
    let text = serde_saphyr::to_string(&doc).expect("yaml");
    kos_cluster::load("cluster.yaml", &text).expect("kos takes it");
    let mut obj = json!({
        "apiVersion": "kos.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "mirrored"},
        "spec": doc["spec"],
    });
    obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
    clusters
        .patch("mirrored", &apply, &Patch::Apply(&obj))
        .await
        .expect("URLs kos takes");
}

/// A pool's `autoscaling` kos takes (`count` at either bound, `min` equal to `max`, 0 to 500)
/// passes the rules.
#[tokio::test]
async fn the_crd_takes_the_autoscaling_kos_takes() {
    let (_fake, clusters) = with_the_crd().await;
    let apply = PatchParams::apply("test");
    let base = support::example("minimal.yaml");
    for (i, (count, bounds)) in [
        (2, json!({"min": 1, "max": 10})),
        (0, json!({"min": 0, "max": 4})),
        (4, json!({"min": 0, "max": 4})),
        (7, json!({"min": 7, "max": 7})),
        (3, json!({"min": 3, "max": 500})),
    ]
    .into_iter()
    .enumerate()
    {
        let mut doc = base.clone();
        doc["spec"]["nodePools"][0]["count"] = json!(count);
        doc["spec"]["nodePools"][0]["autoscaling"] = bounds.clone();
        let text = serde_saphyr::to_string(&doc).expect("yaml");
        kos_cluster::load("cluster.yaml", &text)
            .unwrap_or_else(|e| panic!("kos takes {count} in {bounds}: {e:?}"));
        let name = format!("scaled-{i}");
        let mut obj = json!({
            "apiVersion": "kos.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": doc["spec"],
        });
        obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
        clusters
            .patch(&name, &apply, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("{count} in {bounds}: {e}"));
    }
}

/// The pairwise pool-name rule fits the API server's cost budget only because `nodePools` is
/// bounded: without its `maxItems` the CRD is refused.
#[tokio::test]
async fn the_crd_without_its_list_bound_is_refused() {
    let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
    let client = fake.client().expect("client");
    let mut crd = serde_json::to_value(kos_operator::resource::crd()).expect("json");
    let pools = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/nodePools")
        .and_then(Value::as_object_mut)
        .expect("nodePools");
    assert!(pools.remove("maxItems").is_some());
    let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("crd");
    let r = Api::<CustomResourceDefinition>::all(client)
        .create(&PostParams::default(), &crd)
        .await;
    match r {
        Err(kube::Error::Api(e)) => assert!(
            e.message.contains("estimated rule cost exceeds budget"),
            "{e:?}"
        ),
        other => panic!("accepted: {other:?}"),
    }
}

/// The Cluster's name is the cluster's: longer than kos's 20 characters, or with a `.` (which the
/// API server allows in a name), `kubectl apply` is refused with the message `kos plan` gives at
/// `metadata.name` (before, it was accepted and only the reconcile said so, as Degraded).
#[tokio::test]
async fn the_crd_refuses_a_name_kos_refuses_with_its_message() {
    let (_fake, clusters) = with_the_crd().await;
    let apply = PatchParams::apply("test");
    let base = support::example("minimal.yaml");
    let object = |name: &str| {
        let mut obj = json!({
            "apiVersion": "kos.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": base["spec"],
        });
        obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
        obj
    };
    for name in ["a-cluster-name-too-long", "demo.example"] {
        let mut doc = base.clone();
        doc["metadata"]["name"] = json!(name);
        let messages = kos_messages(&doc, "metadata.name").expect("kos refuses it");
        match clusters
            .patch(name, &apply, &Patch::Apply(&object(name)))
            .await
        {
            Err(kube::Error::Api(e))
                if e.code == 422
                    && messages.iter().any(|m| {
                        e.message
                            .contains(&format!("<nil>: Invalid value: \"object\": {m}"))
                    }) => {}
            other => panic!("{name}: want one of {messages:?}, got {other:?}"),
        }
    }
    // At the limit, accepted.
    let name = "twenty-characters-ok";
    assert_eq!(name.len(), 20);
    clusters
        .patch(name, &apply, &Patch::Apply(&object(name)))
        .await
        .expect("a name of 20 characters");
}

/// The extra tags (`metadata.tags` in a cluster document, `spec.tags` in a Cluster) are refused at
/// apply time as `kos plan` refuses them, with its message: the server reports the Cluster's field.
#[tokio::test]
async fn the_crd_refuses_tags_kos_refuses_with_its_message() {
    let (_fake, clusters) = with_the_crd().await;
    let apply = PatchParams::apply("test");
    let base = support::example("minimal.yaml");
    let many: Vec<String> = (0..=kos_cluster::names::USER_TAGS_MAX)
        .map(|i| format!("t{i}"))
        .collect();
    let cases: Vec<(Value, &str, &str, &str)> = vec![
        (json!([""]), "metadata.tags[0]", "spec.tags[0]", "string"),
        (
            json!(["x".repeat(61)]),
            "metadata.tags[0]",
            "spec.tags[0]",
            "string",
        ),
        (
            json!(["team", "team=a,b"]),
            "metadata.tags[1]",
            "spec.tags[1]",
            "string",
        ),
        (json!(["a/b"]), "metadata.tags[0]", "spec.tags[0]", "string"),
        (
            json!(["kos-cluster=other"]),
            "metadata.tags[0]",
            "spec.tags[0]",
            "string",
        ),
        (
            json!(["kos-node=0123456789abcdef"]),
            "metadata.tags[0]",
            "spec.tags[0]",
            "string",
        ),
        (json!(many), "metadata.tags", "spec.tags", "array"),
    ];
    let mut failures = Vec::new();
    for (tags, field, server_field, shown) in cases {
        let mut doc = base.clone();
        doc["metadata"]["tags"] = tags.clone();
        let messages = match kos_messages(&doc, field) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{tags}: {e}"));
                continue;
            }
        };
        let mut obj = json!({
            "apiVersion": "kos.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "refused"},
            "spec": base["spec"],
        });
        obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
        obj["spec"]["tags"] = tags.clone();
        let wants: Vec<String> = messages
            .iter()
            .map(|m| format!("{server_field}: Invalid value: \"{shown}\": {m}"))
            .collect();
        match clusters.patch("refused", &apply, &Patch::Apply(&obj)).await {
            Err(kube::Error::Api(e))
                if e.code == 422 && wants.iter().any(|w| e.message.contains(w)) => {}
            other => failures.push(format!("{tags}: want one of {wants:?}, got {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // Tags kos takes are taken.
    let mut obj = json!({
        "apiVersion": "kos.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "tagged"},
        "spec": base["spec"],
    });
    obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
    obj["spec"]["tags"] = json!(&many[1..]);
    obj["spec"]["tags"][0] = json!("team=kos-x");
    clusters
        .patch("tagged", &apply, &Patch::Apply(&obj))
        .await
        .expect("39 tags kos takes");
}
