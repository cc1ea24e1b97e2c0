//! Neutron subset (placeholder: the cross-service interface below is fixed; bodies are filled in).

use serde::{Deserialize, Serialize};

use crate::config::SimConfig;
use crate::error::{SimError, SimResult};
use crate::routes::Routes;
use crate::service::Service;
use crate::state::Cloud;

const SVC: Service = Service::Network;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NeutronState {}

/// What other services need to know about a port.
#[derive(Debug, Clone)]
pub struct PortView {
    pub id: String,
    pub network_id: String,
    pub mac_address: String,
    /// (subnet_id, ip_address)
    pub fixed_ips: Vec<(String, String)>,
    pub security_group_ids: Vec<String>,
    pub status: String,
    pub device_id: String,
    pub device_owner: String,
}

/// A port another service creates (Nova for `networks: [{"uuid": ..}]`, Octavia for a VIP).
#[derive(Debug, Clone, Default)]
pub struct InternalPort {
    pub project_id: String,
    pub network_id: String,
    pub subnet_id: Option<String>,
    pub ip_address: Option<String>,
    pub name: String,
    pub device_owner: String,
    pub device_id: String,
    /// `None`: the project's default security group; `Some(vec![])`: none.
    pub security_groups: Option<Vec<String>>,
}

pub fn seed(_cloud: &mut Cloud, _cfg: &SimConfig, _project_id: &str) {}

pub fn advance(_cloud: &mut Cloud, _cfg: &SimConfig) {}

pub fn versions() -> Routes {
    Routes::new(SVC)
}

pub fn routes() -> Routes {
    Routes::new(SVC)
}

pub fn port_view(_cloud: &Cloud, _port_id: &str) -> Option<PortView> {
    None
}

pub fn network_name(_cloud: &Cloud, _network_id: &str) -> Option<String> {
    None
}

/// Network id of a subnet.
pub fn subnet_network(_cloud: &Cloud, _subnet_id: &str) -> Option<String> {
    None
}

/// IPAM, quota and fixed-IP conflict checks as for a POST /v2.0/ports. Errors are Neutron errors.
pub fn create_port_internal(_cloud: &mut Cloud, _spec: InternalPort) -> SimResult<String> {
    Err(SimError::not_found(SVC, "not implemented"))
}

/// Binds a port to a device on a host (status stays DOWN until the device is up). 409 `PortInUse` when
/// another device holds it.
pub fn bind_port(
    _cloud: &mut Cloud,
    _port_id: &str,
    _device_id: &str,
    _device_owner: &str,
    _host: &str,
) -> SimResult<()> {
    Err(SimError::not_found(SVC, "not implemented"))
}

/// "ACTIVE" once the server runs, "DOWN" otherwise.
pub fn set_port_status(_cloud: &mut Cloud, _port_id: &str, _status: &str) {}

/// Clears device_id, device_owner and the binding (server deleted, port kept).
pub fn unbind_port(_cloud: &mut Cloud, _port_id: &str) {}

/// Removes a port and disassociates its floating IPs (server deleted with a port Nova created, LB deleted).
pub fn delete_port_internal(_cloud: &mut Cloud, _port_id: &str) {}

/// Floating IP addresses associated to a port.
pub fn floating_ips_of_port(_cloud: &Cloud, _port_id: &str) -> Vec<String> {
    Vec::new()
}

/// Id of a security group of the project, by id or by name (Nova accepts either).
pub fn security_group_id(
    _cloud: &mut Cloud,
    _project_id: &str,
    _name_or_id: &str,
) -> Option<String> {
    None
}

pub fn security_group_name(_cloud: &Cloud, _id: &str) -> Option<String> {
    None
}
