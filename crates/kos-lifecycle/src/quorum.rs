//! Which etcd members may go, and in what order, so that etcd keeps its quorum at every step.
//!
//! etcd commits a write once a majority of its members (voting members: learners do not count) has it. A
//! cluster of `n` members with `h` healthy ones is available while `2h > n`. Removing an unhealthy member
//! shrinks `n` alone and can only help; removing a healthy one shrinks both. So removals go one at a time,
//! unhealthy (and stale: their server is gone) members first, and a change that no order can make safely
//! is refused before anything is touched.

use std::collections::BTreeSet;

/// One voting etcd member as kos sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's name: the node's name (kubeadm names members after their node).
    pub name: String,
    /// Answered its status and is no learner.
    pub healthy: bool,
}

/// Why a change to the members cannot keep quorum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuorumError {
    #[error(
        "etcd has lost quorum: {healthy} of {members} members are healthy (unhealthy: {}); kos changes no \
         member of a cluster without quorum: bring the unhealthy control planes back first",
        unhealthy.join(", ")
    )]
    Lost {
        healthy: usize,
        members: usize,
        unhealthy: Vec<String>,
    },
    #[error(
        "removing {} would leave {healthy} healthy of {members} etcd members, which is no quorum \
         (unhealthy members that stay: {}); repair or remove those first, or scale down less at once",
        removed,
        unhealthy_kept.join(", ")
    )]
    WouldLose {
        removed: String,
        healthy: usize,
        members: usize,
        unhealthy_kept: Vec<String>,
    },
    #[error("no etcd member would remain: a cluster keeps at least one control plane")]
    Empty,
}

/// Whether `2·healthy > members`.
#[must_use]
pub fn has_quorum(healthy: usize, members: usize) -> bool {
    members > 0 && 2 * healthy > members
}

/// The order in which to remove `remove` from `members`, one at a time, keeping quorum after every
/// removal: unhealthy members first (in name order), then healthy ones (highest name first, as scale-down
/// removes the newest). Names in `remove` that are no member are left out (already removed: a resumed run).
///
/// # Errors
/// Quorum is lost already, some removal would lose it, or nothing would remain.
pub fn removal_order(
    members: &[Member],
    remove: &BTreeSet<String>,
) -> Result<Vec<String>, QuorumError> {
    let healthy = members.iter().filter(|m| m.healthy).count();
    if !has_quorum(healthy, members.len()) {
        return Err(QuorumError::Lost {
            healthy,
            members: members.len(),
            unhealthy: unhealthy_names(members.iter()),
        });
    }
    let mut going: Vec<&Member> = members
        .iter()
        .filter(|m| remove.contains(&m.name))
        .collect();
    if going.len() == members.len() {
        return Err(QuorumError::Empty);
    }
    going.sort_by(|a, b| {
        a.healthy.cmp(&b.healthy).then_with(|| match a.healthy {
            false => a.name.cmp(&b.name),
            true => b.name.cmp(&a.name),
        })
    });
    let mut left: Vec<&Member> = members.iter().collect();
    let mut order = Vec::with_capacity(going.len());
    for m in going {
        left.retain(|x| x.name != m.name);
        let healthy = left.iter().filter(|x| x.healthy).count();
        if !has_quorum(healthy, left.len()) {
            return Err(QuorumError::WouldLose {
                removed: m.name.clone(),
                healthy,
                members: left.len(),
                unhealthy_kept: unhealthy_names(left.iter().copied()),
            });
        }
        order.push(m.name.clone());
    }
    Ok(order)
}

/// Whether `count` new members may join after `members` (with the removals already made): each join adds
/// a member that counts before it is healthy, so the healthy ones must stay a majority of the larger set
/// (kubeadm adds the member, then starts it).
///
/// # Errors
/// The join would stall etcd: it names the unhealthy members.
pub fn check_join(members: &[Member], count: usize) -> Result<(), QuorumError> {
    let healthy = members.iter().filter(|m| m.healthy).count();
    if count > 0 && !has_quorum(healthy, members.len() + 1) {
        return Err(QuorumError::Lost {
            healthy,
            members: members.len() + 1,
            unhealthy: unhealthy_names(members.iter()),
        });
    }
    Ok(())
}

fn unhealthy_names<'a>(members: impl Iterator<Item = &'a Member>) -> Vec<String> {
    members
        .filter(|m| !m.healthy)
        .map(|m| m.name.clone())
        .collect()
}

/// The control planes whose server holds a stacked etcd member (kubeadm's layout): every tagged
/// control-plane server not in ERROR or BUILD, healthy while ACTIVE; with their index. A server
/// still in BUILD (a successor an interrupted run made) has no member yet: kubeadm adds it after
/// boot (and [`crate::succession`] lets nothing it replaces leave before it is up); counted as an
/// unhealthy member, a single control plane's successor booting made every re-run refuse with
/// "etcd has lost quorum".
pub(crate) fn running_members(observed: &kos_cluster::observe::Observed) -> Vec<(u32, Member)> {
    let mut out = Vec::new();
    for (id, found) in &observed.resources {
        let Some(index) = id
            .strip_prefix("cp-")
            .filter(|_| crate::formation::is_control_plane(id))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(server) = found
            .iter()
            .find(|r| r.kind == kos_cluster::graph::Kind::Server && r.tagged && !r.failed)
        else {
            continue;
        };
        if server.state == "BUILD" {
            continue;
        }
        out.push((
            index,
            Member {
                name: id.clone(),
                healthy: server.state == "ACTIVE",
            },
        ));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn members(spec: &[(&str, bool)]) -> Vec<Member> {
        spec.iter()
            .map(|(n, h)| Member {
                name: (*n).to_owned(),
                healthy: *h,
            })
            .collect()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert!(has_quorum(1, 1) && has_quorum(2, 3) && has_quorum(3, 5) && has_quorum(2, 2));
        assert!(!has_quorum(1, 2) && !has_quorum(2, 4) && !has_quorum(0, 0));
    }

    #[test]
    fn scaling_five_to_one_removes_the_newest_one_at_a_time() {
        let m = members(&[
            ("cp-0", true),
            ("cp-1", true),
            ("cp-2", true),
            ("cp-3", true),
            ("cp-4", true),
        ]);
        let order = removal_order(&m, &set(&["cp-1", "cp-2", "cp-3", "cp-4"])).unwrap();
        assert_eq!(order, ["cp-4", "cp-3", "cp-2", "cp-1"]);
    }

    /// 3 → 1 with cp-1 down: removing healthy cp-2 first would leave cp-0 and a dead cp-1 (1 of 2).
    #[test]
    fn unhealthy_members_go_first() {
        let m = members(&[("cp-0", true), ("cp-1", false), ("cp-2", true)]);
        let order = removal_order(&m, &set(&["cp-1", "cp-2"])).unwrap();
        assert_eq!(order, ["cp-1", "cp-2"]);
    }

    /// 3 → 1 keeping a dead cp-0: no order keeps quorum; refused, naming it.
    #[test]
    fn keeping_only_an_unhealthy_member_is_refused() {
        let m = members(&[("cp-0", false), ("cp-1", true), ("cp-2", true)]);
        let e = removal_order(&m, &set(&["cp-1", "cp-2"])).unwrap_err();
        assert_eq!(
            e,
            QuorumError::WouldLose {
                removed: "cp-2".into(),
                healthy: 1,
                members: 2,
                unhealthy_kept: vec!["cp-0".into()],
            }
        );
        assert!(e.to_string().contains("cp-0"), "{e}");
    }

    /// 5 → 3 with two members down, both kept: removing either healthy one leaves 2 of 4.
    #[test]
    fn removing_more_than_the_cluster_can_lose_is_refused() {
        let m = members(&[
            ("cp-0", false),
            ("cp-1", false),
            ("cp-2", true),
            ("cp-3", true),
            ("cp-4", true),
        ]);
        assert!(matches!(
            removal_order(&m, &set(&["cp-3", "cp-4"])),
            Err(QuorumError::WouldLose {
                healthy: 2,
                members: 4,
                ..
            })
        ));
        // Removing the dead ones instead is safe.
        assert_eq!(
            removal_order(&m, &set(&["cp-0", "cp-1"])).unwrap(),
            ["cp-0", "cp-1"]
        );
    }

    #[test]
    fn no_change_without_quorum_and_never_to_zero() {
        let lost = members(&[("cp-0", true), ("cp-1", false), ("cp-2", false)]);
        assert!(matches!(
            removal_order(&lost, &set(&["cp-1"])),
            Err(QuorumError::Lost {
                healthy: 1,
                members: 3,
                ..
            })
        ));
        let one = members(&[("cp-0", true)]);
        assert_eq!(
            removal_order(&one, &set(&["cp-0"])),
            Err(QuorumError::Empty)
        );
    }

    /// A resumed run: what an earlier run removed is no member any more, and is skipped.
    #[test]
    fn already_removed_members_are_skipped() {
        let m = members(&[("cp-0", true), ("cp-1", true), ("cp-2", true)]);
        assert_eq!(
            removal_order(&m, &set(&["cp-2", "cp-3", "cp-4"])).unwrap(),
            ["cp-2"]
        );
    }

    /// The stale member of a deleted cp-0 goes before its replacement joins: 3 members with one dead can
    /// take no fourth (2 of 4), 2 live members can take a third.
    #[test]
    fn a_join_waits_for_the_stale_member_to_go() {
        let m = members(&[("cp-0", false), ("cp-1", true), ("cp-2", true)]);
        assert!(check_join(&m, 1).is_err());
        let order = removal_order(&m, &set(&["cp-0"])).unwrap();
        let left: Vec<Member> = m.into_iter().filter(|x| !order.contains(&x.name)).collect();
        assert_eq!(check_join(&left, 1), Ok(()));
        assert_eq!(check_join(&left, 0), Ok(()));
    }
}
