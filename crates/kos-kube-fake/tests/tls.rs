//! The TLS front: a serving certificate from the cluster's CA, client certificates checked per
//! request as kube-apiserver's authenticators do (trusted: in; untrusted: 401; none: anonymous, who
//! may read only the public paths and `cluster-info`, else 403), bootstrap tokens as bearer tokens,
//! `/readyz` following etcd's quorum; and snapshots that bring a fake's objects back.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use k8s_openapi::api::rbac::v1::{
    ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kos_kube_fake::{Config, FakeKube, TlsServing};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::{Value, json};

type R = Result<(), Box<dyn std::error::Error>>;

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Result<Ca, rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key)?;
    Ok(Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    })
}

/// A leaf signed by `ca`: (certificate PEM, key PEM).
fn leaf(
    ca: &Ca,
    cn: &str,
    sans: &[&str],
    org: Option<&str>,
) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params =
        CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())?;
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = org {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    let cert = params.signed_by(&key, &ca.issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn client(ca: &Ca, identity: Option<(String, String)>) -> Result<reqwest::Client, reqwest::Error> {
    let mut b = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.pem.as_bytes())?])
        .timeout(std::time::Duration::from_secs(30));
    if let Some((cert, key)) = identity {
        b = b.identity(reqwest::Identity::from_pem(
            format!("{cert}{key}").as_bytes(),
        )?);
    }
    b.build()
}

async fn get(c: &reqwest::Client, url: &str) -> Result<(u16, String), reqwest::Error> {
    let r = c.get(url).send().await?;
    Ok((r.status().as_u16(), r.text().await?))
}

/// kubeadm's `kubeadm:bootstrap-signer-clusterinfo` Role and RoleBinding in kube-public.
fn kubeadm_cluster_info_rbac(fake: &FakeKube) -> Result<(), kos_kube_fake::FakeError> {
    let name = "kubeadm:bootstrap-signer-clusterinfo";
    let meta = || kube::api::ObjectMeta {
        name: Some(name.into()),
        namespace: Some("kube-public".into()),
        ..Default::default()
    };
    fake.insert(&Role {
        metadata: meta(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            resource_names: Some(vec!["cluster-info".into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        }]),
    })?;
    fake.insert(&RoleBinding {
        metadata: meta(),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: "system:anonymous".into(),
            ..Default::default()
        }]),
    })?;
    Ok(())
}

fn node(name: &str) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n
}

#[tokio::test]
async fn the_front_authenticates_as_kube_apiserver_does() -> R {
    let fake = FakeKube::start().await?;
    fake.insert(&node("n1"))?;
    let mut info = ConfigMap::default();
    info.metadata.name = Some("cluster-info".into());
    info.metadata.namespace = Some("kube-public".into());
    fake.insert(&k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("kube-public".into()),
            ..Default::default()
        },
        ..Default::default()
    })?;
    fake.insert(&info)?;
    // kubeadm's RBAC for anonymous discovery: cluster-info, by name.
    kubeadm_cluster_info_rbac(&fake)?;
    let cluster_ca = ca("kubernetes")?;
    let (cert, key) = leaf(
        &cluster_ca,
        "kube-apiserver",
        &["127.0.0.1", "kubernetes"],
        None,
    )?;
    let front = fake.serve_tls(&TlsServing {
        cert_chain_pem: cert,
        key_pem: key,
        client_ca_pem: cluster_ca.pem.clone(),
    })?;
    let base = format!("https://{}", front.addr());

    // Anonymous: the public paths and cluster-info, nothing else.
    let anon = client(&cluster_ca, None)?;
    assert_eq!(
        get(&anon, &format!("{base}/readyz")).await?,
        (200, "ok".into())
    );
    assert_eq!(get(&anon, &format!("{base}/livez")).await?.0, 200);
    assert_eq!(get(&anon, &format!("{base}/version")).await?.0, 200);
    let (code, _) = get(
        &anon,
        &format!("{base}/api/v1/namespaces/kube-public/configmaps/cluster-info"),
    )
    .await?;
    assert_eq!(code, 200);
    let (code, body) = get(&anon, &format!("{base}/api/v1/nodes")).await?;
    assert_eq!(code, 403, "{body}");
    let status: Value = serde_json::from_str(&body)?;
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "nodes is forbidden: User \"system:anonymous\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
    );
    let (code, body) = get(
        &anon,
        &format!("{base}/api/v1/namespaces/kube-system/secrets/x"),
    )
    .await?;
    assert_eq!(code, 403);
    assert!(
        body.contains("secrets \\\"x\\\" is forbidden")
            && body.contains("in the namespace \\\"kube-system\\\""),
        "{body}"
    );

    // A client certificate from the cluster's CA: in.
    let admin = client(
        &cluster_ca,
        Some(leaf(
            &cluster_ca,
            "kubernetes-admin",
            &[],
            Some("kubeadm:cluster-admins"),
        )?),
    )?;
    // Authenticated, but authorised only by RBAC: until kubeadm binds its group to cluster-admin
    // the admin may discover the API and nothing more.
    let (code, body) = get(&admin, &format!("{base}/api/v1/nodes")).await?;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("User \\\"kubernetes-admin\\\" cannot list resource \\\"nodes\\\""),
        "{body}"
    );
    assert_eq!(get(&admin, &format!("{base}/api/v1")).await?.0, 200);
    fake.insert(&ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some("kubeadm:cluster-admins".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "cluster-admin".into(),
        },
        subjects: Some(vec![Subject {
            kind: "Group".into(),
            name: "kubeadm:cluster-admins".into(),
            ..Default::default()
        }]),
    })?;
    let (code, body) = get(&admin, &format!("{base}/api/v1/nodes")).await?;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"n1\""), "{body}");

    // One from another CA: 401, not anonymous.
    let other = ca("someone-else")?;
    let stranger = client(
        &cluster_ca,
        Some(leaf(&other, "kubernetes-admin", &[], None)?),
    )?;
    let (code, body) = get(&stranger, &format!("{base}/api/v1/nodes")).await?;
    assert_eq!(code, 401, "{body}");
    assert_eq!(get(&stranger, &format!("{base}/readyz")).await?.0, 401);

    // The server's certificate is the cluster CA's: a client trusting another CA refuses it.
    let wrong_trust = client(&other, None)?;
    assert!(
        wrong_trust
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_err()
    );

    // A bootstrap token as a bearer token.
    let token = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("bootstrap-token-abcdef".into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        data: Some(
            [
                ("token-id", "abcdef"),
                ("token-secret", "0123456789abcdef"),
                ("usage-bootstrap-authentication", "true"),
                ("expiration", "2999-01-01T00:00:00Z"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
        ),
        ..Default::default()
    };
    fake.insert(&k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("kube-system".into()),
            ..Default::default()
        },
        ..Default::default()
    })?;
    fake.insert(&token)?;
    let bearer = |t: &str| {
        anon.get(format!("{base}/api/v1/nodes"))
            .bearer_auth(t.to_owned())
            .send()
    };
    // It authenticates (as system:bootstrap:abcdef) but RBAC gives it no nodes list.
    let r = bearer("abcdef.0123456789abcdef").await?;
    assert_eq!(r.status().as_u16(), 403);
    assert!(
        r.text()
            .await?
            .contains("User \\\"system:bootstrap:abcdef\\\" cannot list resource \\\"nodes\\\"")
    );
    assert_eq!(
        bearer("abcdef.wrongwrongwrong0").await?.status().as_u16(),
        401
    );
    assert_eq!(
        bearer("zzzzzz.0123456789abcdef").await?.status().as_u16(),
        401
    );

    // etcd without quorum: /readyz fails, requests time out, /livez still answers.
    front.set_ready(false);
    let (code, body) = get(&admin, &format!("{base}/readyz")).await?;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("[-]etcd failed"), "{body}");
    assert_eq!(get(&admin, &format!("{base}/api/v1/nodes")).await?.0, 504);
    assert_eq!(get(&admin, &format!("{base}/livez")).await?.0, 200);
    front.set_ready(true);
    assert_eq!(get(&admin, &format!("{base}/readyz")).await?.0, 200);

    // A front given its API server's version answers /version with it, even without etcd; a
    // second front of the same fake answers with its own.
    assert!(
        get(&anon, &format!("{base}/version"))
            .await?
            .1
            .contains("kos-kube-fake")
    );
    front.set_version(1, 35, "v1.35.2");
    front.set_ready(false);
    let (code, body) = get(&anon, &format!("{base}/version")).await?;
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body)?;
    assert_eq!(
        (&v["major"], &v["minor"], &v["gitVersion"]),
        (&json!("1"), &json!("35"), &json!("v1.35.2"))
    );
    front.set_ready(true);
    let (cert2, key2) = leaf(&cluster_ca, "kube-apiserver", &["127.0.0.1"], None)?;
    let other = fake.serve_tls(&TlsServing {
        cert_chain_pem: cert2,
        key_pem: key2,
        client_ca_pem: cluster_ca.pem.clone(),
    })?;
    other.set_version(1, 36, "v1.36.0");
    let (_, body) = get(&anon, &format!("https://{}/version", other.addr())).await?;
    assert!(body.contains("\"v1.36.0\""), "{body}");
    assert!(
        get(&anon, &format!("{base}/version"))
            .await?
            .1
            .contains("\"v1.35.2\"")
    );

    // A stopped front refuses connections.
    drop(front);
    assert!(admin.get(format!("{base}/readyz")).send().await.is_err());
    Ok(())
}

#[tokio::test]
async fn a_snapshot_brings_the_objects_back_with_their_identity_and_owners() -> R {
    let fake = FakeKube::start().await?;
    fake.insert(&node("n1"))?;
    let applied = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2", "labels": {"a": "1"}}});
    fake.apply_json(&applied, "kubectl")?;
    let before: Vec<Node> = fake.list(None)?;
    let snap = fake.snapshot();
    let text = serde_json::to_string(&snap)?;
    let back = FakeKube::start_sync_from(Config::default(), &serde_json::from_str(&text)?)?;
    let after: Vec<Node> = back.list(None)?;
    assert_eq!(before, after);
    assert_eq!(back.resource_version(), fake.resource_version());
    // Field ownership came back: another manager's apply of kubectl's field conflicts.
    let nodes: kube::Api<Node> = kube::Api::all(back.client()?);
    let other = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2", "labels": {"a": "2"}}});
    let err = nodes
        .patch(
            "n2",
            &kube::api::PatchParams::apply("someone"),
            &kube::api::Patch::Apply(&other),
        )
        .await
        .expect_err("conflict");
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 409, "{s:?}"),
        e => panic!("{e}"),
    }
    // New writes continue the resourceVersion.
    back.insert(&node("n3"))?;
    assert!(back.resource_version() > fake.resource_version());
    Ok(())
}

#[tokio::test]
async fn a_snapshot_brings_custom_resources_back_with_their_definition() -> R {
    let fake = FakeKube::start().await?;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "ippools.crd.projectcalico.org"},
        "spec": {"group": "crd.projectcalico.org", "scope": "Cluster",
                 "names": {"plural": "ippools", "singular": "ippool", "kind": "IPPool", "listKind": "IPPoolList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    fake.apply_json(&crd, "kubectl")?;
    let pool = json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
                      "metadata": {"name": "default-ipv4"}, "spec": {"cidr": "10.244.0.0/16"}});
    fake.apply_json(&pool, "kubectl")?;
    let back = FakeKube::start_sync_from(Config::default(), &fake.snapshot())?;
    let pools = back.list_json("crd.projectcalico.org/v1", "IPPool", None)?;
    assert_eq!(pools.len(), 1, "{pools:?}");
    assert_eq!(pools[0]["spec"]["cidr"], "10.244.0.0/16");
    Ok(())
}

#[tokio::test]
async fn service_account_tokens_authenticate_and_rbac_authorises_them() -> R {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use kube::api::{Api, ListParams, PostParams};

    let fake = FakeKube::start().await?;
    fake.insert(&Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("kube-system".into()),
            ..Default::default()
        },
        ..Default::default()
    })?;
    fake.insert(&node("n1"))?;
    // No ServiceAccount, no token: the pod would not start.
    let missing = fake
        .service_account_token("kube-system", "ccm")
        .expect_err("a token without its ServiceAccount");
    assert!(
        missing
            .to_string()
            .contains("serviceaccounts \"ccm\" not found"),
        "{missing}"
    );
    let sa = |name: &str| ServiceAccount {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    fake.insert(&sa("ccm"))?;

    // Authenticated as the ServiceAccount, and nothing granted yet: the apiserver's 403.
    let as_ccm = fake.service_account_client("kube-system", "ccm")?;
    let nodes: Api<Node> = Api::all(as_ccm.clone());
    let Err(kube::Error::Api(e)) = nodes.list(&ListParams::default()).await else {
        panic!("listed nodes without a grant");
    };
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "nodes is forbidden: User \"system:serviceaccount:kube-system:ccm\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
    );
    // The denial is in the request log, with who asked.
    let denied = fake
        .requests()
        .into_iter()
        .rfind(|r| r.status == 403)
        .expect("logged");
    assert_eq!(
        denied.user.as_deref(),
        Some("system:serviceaccount:kube-system:ccm")
    );

    // A ClusterRole bound to the ServiceAccount grants exactly its rules.
    fake.insert(&ClusterRole {
        metadata: kube::api::ObjectMeta {
            name: Some("node-lister".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["nodes".into()]),
            verbs: vec!["list".into()],
            ..Default::default()
        }]),
        ..Default::default()
    })?;
    fake.insert(&ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some("node-lister".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "node-lister".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "ccm".into(),
            namespace: Some("kube-system".into()),
            ..Default::default()
        }]),
    })?;
    assert_eq!(nodes.list(&ListParams::default()).await?.items.len(), 1);
    assert!(nodes.get("n1").await.is_err(), "list is not get");

    // Minting tokens is `create` on serviceaccounts/token: not granted to it.
    let accounts: Api<ServiceAccount> = Api::namespaced(as_ccm, "kube-system");
    let tr = TokenRequest {
        spec: Some(TokenRequestSpec::default()),
        ..Default::default()
    };
    let Err(kube::Error::Api(e)) = accounts
        .create_subresource::<TokenRequest, TokenRequest>(
            "token",
            "ccm",
            &PostParams::default(),
            &tr,
        )
        .await
    else {
        panic!("minted a token without a grant");
    };
    assert!(
        e.message.contains("cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"kube-system\""),
        "{}",
        e.message
    );

    // The loopback client may: the TokenRequest API issues a token that authenticates on the TLS
    // front as the ServiceAccount, until the ServiceAccount is gone.
    let admin: Api<ServiceAccount> = Api::namespaced(fake.client()?, "kube-system");
    fake.insert(&sa("other"))?;
    let issued: TokenRequest = admin
        .create_subresource("token", "other", &PostParams::default(), &tr)
        .await?;
    let token = issued.status.and_then(|s| s.token).unwrap_or_default();
    assert!(!token.is_empty());
    let cluster_ca = ca("kubernetes")?;
    let (cert, key) = leaf(&cluster_ca, "kube-apiserver", &["127.0.0.1"], None)?;
    let front = fake.serve_tls(&TlsServing {
        cert_chain_pem: cert,
        key_pem: key,
        client_ca_pem: cluster_ca.pem.clone(),
    })?;
    let https = client(&cluster_ca, None)?;
    let url = format!("https://{}/api/v1/nodes", front.addr());
    let r = https.get(&url).bearer_auth(&token).send().await?;
    assert_eq!(r.status().as_u16(), 403);
    assert!(
        r.text()
            .await?
            .contains("system:serviceaccount:kube-system:other")
    );
    admin.delete("other", &Default::default()).await?;
    let r = https.get(&url).bearer_auth(&token).send().await?;
    assert_eq!(r.status().as_u16(), 401, "a deleted ServiceAccount's token");
    Ok(())
}
