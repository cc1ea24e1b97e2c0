//! The RBAC objects `kubeadm init` creates (its `bootstrap-token` and `upload-config` phases, and
//! `kubeconfig`'s admin binding from 1.29), so that the cluster's API server, which authorises
//! every request, lets kubeadm's identities do what they do on a real cluster:
//! - `kubeadm:cluster-admins` (1.29+): the group of `admin.conf`'s `kubernetes-admin`, bound to
//!   `cluster-admin` (before 1.29 admin.conf is in `system:masters`, which needs no binding): the
//!   admin tries to create it, is refused (it has no rights yet), and `super-admin.conf`'s
//!   `kubernetes-super-admin` (`system:masters`) creates it ([`cluster_admins_binding`]); every
//!   other write of kubeadm's is then admin.conf's;
//! - the default node token's group (`system:bootstrappers:kubeadm:default-node-token`): CSRs
//!   (`kubeadm:kubelet-bootstrap`), their auto-approval (`kubeadm:node-autoapprove-bootstrap`),
//!   `get` of Nodes (`kubeadm:get-nodes`), the `kubeadm-config` and `kubelet-config` ConfigMaps;
//! - `system:nodes`: certificate rotation, the same two ConfigMaps;
//! - `system:anonymous`: the `cluster-info` ConfigMap of `kube-public` (discovery).
//!
//! Not created: kube-proxy's (the simulated cluster runs no kube-proxy) and CoreDNS's.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::ObjectMeta;

use crate::cluster::KUBE_SYSTEM;
use crate::version::Version;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
pub const NODE_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
pub const CLUSTER_ADMINS: &str = "kubeadm:cluster-admins";

fn meta(ns: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: ns.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

fn subject(kind: &str, name: &str) -> Subject {
    Subject {
        api_group: Some(RBAC_GROUP.into()),
        kind: kind.into(),
        name: name.into(),
        namespace: None,
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some(RBAC_GROUP.into()),
        kind: kind.into(),
        name: name.into(),
    }
}

fn crb(name: &str, role: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(None, name),
        role_ref: role_ref("ClusterRole", role),
        subjects: Some(subjects),
    }
}

/// A Role allowing `get` of one ConfigMap, and its binding to `subjects`.
fn configmap_reader(ns: &str, name: &str, cm: &str, subjects: Vec<Subject>) -> (Role, RoleBinding) {
    (
        Role {
            metadata: meta(Some(ns), name),
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["configmaps".into()]),
                resource_names: Some(vec![cm.into()]),
                verbs: vec!["get".into()],
                ..PolicyRule::default()
            }]),
        },
        RoleBinding {
            metadata: meta(Some(ns), name),
            role_ref: role_ref("Role", name),
            subjects: Some(subjects),
        },
    )
}

/// `admin.conf`'s user: `kubernetes-admin`, in `kubeadm:cluster-admins` from kubeadm 1.29 (which
/// `cluster-admins_binding` makes an admin), in `system:masters` before.
pub fn admin(kubeadm: Version) -> kos_kube_fake::User {
    let group = if kubeadm.minor >= 29 {
        CLUSTER_ADMINS
    } else {
        "system:masters"
    };
    kos_kube_fake::User::authenticated("kubernetes-admin", [group.to_owned()])
}

/// `super-admin.conf`'s user (kubeadm 1.29+ `init` only): `kubernetes-super-admin` in
/// `system:masters`, which every authorizer chain allows.
pub fn super_admin() -> kos_kube_fake::User {
    kos_kube_fake::User::authenticated("kubernetes-super-admin", ["system:masters".to_owned()])
}

/// `kubeadm:cluster-admins`, binding the group to `cluster-admin` (kubeadm's
/// `EnsureAdminClusterRoleBinding`, cmd/kubeadm/app/phases/kubeconfig/kubeconfig.go).
pub fn cluster_admins_binding() -> ClusterRoleBinding {
    crb(
        CLUSTER_ADMINS,
        "cluster-admin",
        vec![subject("Group", CLUSTER_ADMINS)],
    )
}

/// What `kubeadm init` creates with admin.conf, after
/// [`cluster_admins_binding`].
pub struct InitRbac {
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
}

pub fn init() -> InitRbac {
    let token = || subject("Group", NODE_TOKEN_GROUP);
    let nodes = || subject("Group", "system:nodes");
    let bindings = vec![
        crb(
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            vec![token()],
        ),
        crb(
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![token()],
        ),
        crb(
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![nodes()],
        ),
        crb("kubeadm:get-nodes", "kubeadm:get-nodes", vec![token()]),
    ];
    let get_nodes = ClusterRole {
        metadata: meta(None, "kubeadm:get-nodes"),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["nodes".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    let readers = [
        configmap_reader(
            "kube-public",
            "kubeadm:bootstrap-signer-clusterinfo",
            "cluster-info",
            vec![subject("User", "system:anonymous")],
        ),
        configmap_reader(
            KUBE_SYSTEM,
            "kubeadm:nodes-kubeadm-config",
            "kubeadm-config",
            vec![token(), nodes()],
        ),
        configmap_reader(
            KUBE_SYSTEM,
            "kubeadm:kubelet-config",
            "kubelet-config",
            vec![token(), nodes()],
        ),
    ];
    let (roles, role_bindings) = readers.into_iter().unzip();
    InitRbac {
        cluster_roles: vec![get_nodes],
        cluster_role_bindings: bindings,
        roles,
        role_bindings,
    }
}
