//! What ovn-octavia-provider adds to Neutron for health checks: one port per member subnet that a
//! monitored OVN load balancer has members on, named `ovn-lb-hm-<subnet id>`, `device_owner`
//! `ovn-lb-hm:distributed`, `device_id` equal to its name, port security off, in the project of the
//! member's port. OVN's service monitor probes members from that port's address, so a member's security
//! groups must admit it (read in ovn-octavia-provider `helper.py`: `_create_hm_port`,
//! `_ensure_hm_ovn_port`, `_update_hm_member`, `_clean_up_hm_port`; `common/constants.py`). Members
//! without a subnet are on the load balancer's VIP subnet (`driver.py`, `_get_subnet_from_pool`).
//!
//! [`sync`] keeps the ports in line with the monitors once Octavia has settled a change: the provider
//! creates the port when a monitor (or a monitored member) is added and deletes it when no monitor uses
//! its address any more.

use std::collections::BTreeMap;

use super::ports::{self, FixedIpReq, PortSpec};
use crate::state::Cloud;

/// Name prefix of the health-check ports (`LB_HM_PORT_PREFIX`).
pub const PORT_PREFIX: &str = "ovn-lb-hm-";
/// Their device owner (`OVN_LB_HM_PORT_DISTRIBUTED`).
pub const DEVICE_OWNER: &str = "ovn-lb-hm:distributed";

/// Creates the missing health-check ports and removes those no monitor needs.
pub fn sync(cloud: &mut Cloud) {
    // subnet -> project of the port to make.
    let mut wanted: BTreeMap<String, String> = BTreeMap::new();
    let st = &cloud.octavia;
    for m in &st.monitors {
        if m.base.provisioning_status == "PENDING_DELETE" {
            continue;
        }
        let Ok(lb) = st.lb(&m.loadbalancer_id) else {
            continue;
        };
        if lb.provider != "ovn" || lb.base.provisioning_status == "PENDING_DELETE" {
            continue;
        }
        for member in st.members.iter().filter(|x| x.pool_id == m.pool_id) {
            let Some(subnet) = member
                .subnet_id
                .clone()
                .or_else(|| lb.vip_subnet_id.clone())
            else {
                continue;
            };
            let project = member_project(cloud, &subnet, &member.address)
                .unwrap_or_else(|| lb.base.project_id.clone());
            wanted.entry(subnet).or_insert(project);
        }
    }
    let stale: Vec<String> = cloud
        .neutron
        .ports
        .iter()
        .filter(|p| p.device_owner == DEVICE_OWNER)
        .filter(|p| {
            p.m.name
                .strip_prefix(PORT_PREFIX)
                .is_none_or(|subnet| !wanted.contains_key(subnet))
        })
        .map(|p| p.m.id.clone())
        .collect();
    for id in stale {
        ports::remove(&mut cloud.neutron, &id);
    }
    for (subnet, project) in wanted {
        let name = format!("{PORT_PREFIX}{subnet}");
        if cloud.neutron.ports.iter().any(|p| p.m.name == name) {
            continue;
        }
        let Some(network_id) = super::subnet_network(cloud, &subnet) else {
            continue;
        };
        let spec = PortSpec {
            network_id,
            name: name.clone(),
            device_owner: DEVICE_OWNER.into(),
            device_id: name,
            fixed_ips: Some(vec![FixedIpReq {
                subnet_id: Some(subnet),
                ip_address: None,
            }]),
            security_groups: Some(Vec::new()),
            port_security_enabled: Some(false),
            ..PortSpec::default()
        };
        // The provider logs and marks the member ERROR when Neutron refuses (a full subnet): nothing to
        // undo here, the next settle tries again.
        let _ = ports::create(cloud, &project, spec, false);
    }
}

/// The project of the port that holds `address` on `subnet` (what the provider reads from the member's
/// logical switch port).
fn member_project(cloud: &Cloud, subnet: &str, address: &str) -> Option<String> {
    cloud
        .neutron
        .ports
        .iter()
        .find(|p| {
            p.fixed_ips
                .iter()
                .any(|f| f.subnet_id == subnet && f.ip_address == address)
        })
        .map(|p| p.m.project_id.clone())
}
