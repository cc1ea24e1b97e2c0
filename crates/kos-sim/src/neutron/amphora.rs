//! What Octavia's amphora driver adds to Neutron around a load balancer, as minicloud shows it: in
//! Octavia's own `service` project, a security group `lb-<lb id>` on the VIP port, and the amphora's port
//! `octavia-lb-vrrp-<amphora id>` on the VIP network (`compute:nova`, ACTIVE, the VIP as its allowed
//! address pair). The network's owner sees that port in `port list` but may neither change nor delete it
//! (403), nor show the group (404): clients that count "ports on my network" must cope with it.

use serde::{Deserialize, Serialize};

use super::ports::{self, FixedIpReq, PairReq, PortSpec};
use super::security_groups;
use crate::error::SimResult;
use crate::ids;
use crate::state::Cloud;

/// The project Octavia's service user works in. Fixed, so saved simulator state stays consistent.
pub const SERVICE_PROJECT_ID: &str = "0c7a5e1d5e7a4c3d9f0e8b6a2d4c1f3e";

/// What [`plug`] made, for [`unplug`] to remove when the load balancer goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AmphoraPlumbing {
    pub security_group_id: String,
    pub vrrp_port_id: String,
}

/// Plugs a new amphora into the load balancer's VIP network. On error nothing is left behind.
pub fn plug(cloud: &mut Cloud, lb_id: &str, vip_port_id: &str) -> SimResult<AmphoraPlumbing> {
    let n = &mut cloud.neutron;
    let Some(vip) = n.ports.iter().find(|p| p.m.id == vip_port_id) else {
        return Err(super::Kind::Port.not_found(vip_port_id));
    };
    let (network_id, fixed) = (vip.network_id.clone(), vip.fixed_ips.first().cloned());
    let sg = security_groups::new_group(n, SERVICE_PROJECT_ID, &format!("lb-{lb_id}"), "", true);
    let amphora_id = ids::uuid();
    let spec = PortSpec {
        network_id,
        name: format!("octavia-lb-vrrp-{amphora_id}"),
        device_owner: "compute:nova".into(),
        device_id: amphora_id,
        fixed_ips: fixed.as_ref().map(|f| {
            vec![FixedIpReq {
                subnet_id: Some(f.subnet_id.clone()),
                ip_address: None,
            }]
        }),
        security_groups: Some(Vec::new()),
        allowed_address_pairs: fixed.as_ref().map(|f| {
            vec![PairReq {
                ip_address: Some(f.ip_address.clone()),
                mac_address: None,
            }]
        }),
        binding_host_id: Some("amphora-host".into()),
        ..PortSpec::default()
    };
    // Octavia's project, not the user's: the user's port quota is not charged.
    let vrrp = match ports::create(cloud, SERVICE_PROJECT_ID, spec, false) {
        Ok(id) => id,
        Err(e) => {
            remove_group(&mut cloud.neutron, &sg);
            return Err(e);
        }
    };
    let n = &mut cloud.neutron;
    for p in n.ports.iter_mut() {
        if p.m.id == vrrp {
            p.security_groups = vec![sg.clone()];
            p.status = "ACTIVE".into();
        } else if p.m.id == vip_port_id {
            // Octavia owns the VIP port's filtering and keeps a VIP port it made administratively down
            // (the address lives on the amphora's port through the allowed address pair).
            p.security_groups = vec![sg.clone()];
            if p.device_owner == "Octavia" {
                p.admin_state_up = false;
            }
            p.m.touch();
        }
    }
    Ok(AmphoraPlumbing {
        security_group_id: sg,
        vrrp_port_id: vrrp,
    })
}

/// Removes what [`plug`] made (the load balancer is gone, or its amphora is being replaced).
pub fn unplug(cloud: &mut Cloud, plumbing: &AmphoraPlumbing) {
    let n = &mut cloud.neutron;
    ports::remove(n, &plumbing.vrrp_port_id);
    for p in n.ports.iter_mut() {
        p.security_groups
            .retain(|g| g != &plumbing.security_group_id);
    }
    remove_group(n, &plumbing.security_group_id);
}

fn remove_group(n: &mut super::NeutronState, sg: &str) {
    n.security_group_rules.retain(|r| r.security_group_id != sg);
    n.security_groups.retain(|g| g.m.id != sg);
}
