//! The etcd members of control planes that are made again. A control plane whose server is gone
//! (deleted behind kos's back, or in ERROR and replaced) leaves its member registered; its replacement
//! gets the same name and, on the same port, the same peer URL. kubeadm's join then takes the member
//! as already added (etcd's ErrPeerURLExist) and starts etcd with an empty data dir under the old
//! member's identity, which etcd cannot take back; so the stale member is removed first, as Cluster
//! API's control plane does before it replaces a machine. Removing a member whose server is gone never
//! lowers the number of healthy members, so it cannot cost quorum.

use crate::etcd::{Dial, EtcdClient, EtcdError, Member};

/// A control plane about to be created in a running cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joining {
    /// Its node name (the server's hostname), which kubeadm gives its member.
    pub name: String,
    /// Its fixed IP when its port exists already: the host of its member's peer URL.
    pub address: Option<String>,
}

/// The members that stand for one of `joining`: the same name, or a peer URL on its address.
pub fn stale<'a>(members: &'a [Member], joining: &[Joining]) -> Vec<&'a Member> {
    members
        .iter()
        .filter(|m| {
            joining.iter().any(|j| {
                (!m.name.is_empty() && m.name == j.name)
                    || j.address
                        .as_deref()
                        .is_some_and(|a| m.peer_urls.iter().any(|u| peer_host(u) == Some(a)))
            })
        })
        .collect()
}

/// `https://10.0.0.5:2380` → `10.0.0.5` (`[fd00::1]` → `fd00::1`).
fn peer_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_port = rest.split('/').next()?;
    if let Some(v6) = host_port.strip_prefix('[') {
        return v6.split_once(']').map(|(h, _)| h);
    }
    Some(host_port.rsplit_once(':').map_or(host_port, |(h, _)| h))
}

/// Removes the stale members of `joining` through `client` (a member of the cluster that runs); the
/// members removed. A member already gone is skipped, so a run stopped half-way goes on.
///
/// # Errors
/// etcd cannot be reached or refuses.
pub async fn remove_stale<D: Dial>(
    client: &EtcdClient<D>,
    joining: &[Joining],
) -> Result<Vec<Member>, EtcdError> {
    let members = client.member_list().await?;
    let mut removed = Vec::new();
    for m in stale(&members, joining) {
        client.member_remove(m.id).await?;
        removed.push(m.clone());
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::MemberId;

    fn member(id: u64, name: &str, ip: &str) -> Member {
        Member {
            id: MemberId(id),
            name: name.into(),
            peer_urls: vec![format!("https://{ip}:2380")],
            client_urls: vec![format!("https://{ip}:2379")],
            is_learner: false,
        }
    }

    #[test]
    fn a_member_stands_for_a_joining_node_by_name_or_peer_address() {
        let members = [
            member(1, "kos-prod-cp-0", "10.0.0.9"),
            member(2, "kos-prod-cp-1", "10.0.0.10"),
            member(3, "", "10.0.0.11"),
            member(4, "kos-prod-cp-20", "10.0.0.90"),
        ];
        let by_name = [Joining {
            name: "kos-prod-cp-0".into(),
            address: None,
        }];
        let ids = |v: Vec<&Member>| v.iter().map(|m| m.id.0).collect::<Vec<_>>();
        assert_eq!(ids(stale(&members, &by_name)), vec![1]);
        // Added but never started (no name yet): found by its peer URL.
        let by_address = [Joining {
            name: "kos-prod-cp-2".into(),
            address: Some("10.0.0.11".into()),
        }];
        assert_eq!(ids(stale(&members, &by_address)), vec![3]);
        // A reused address is stale whatever the member's name; 10.0.0.9 is not 10.0.0.90, and cp-2
        // is not cp-20.
        let reused = [Joining {
            name: "kos-prod-cp-2".into(),
            address: Some("10.0.0.9".into()),
        }];
        assert_eq!(ids(stale(&members, &reused)), vec![1]);
        assert_eq!(peer_host("https://[fd00::1]:2380"), Some("fd00::1"));
        assert_eq!(peer_host("https://10.0.0.90:2380"), Some("10.0.0.90"));
    }
}
