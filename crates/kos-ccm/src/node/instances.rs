//! The cloud side of a Node, what the upstream calls InstancesV2 (`pkg/openstack/instances.go`):
//! find the node's server, and read its metadata (providerID, instance type, addresses, zone,
//! region, host id).
//!
//! Lookup: by `spec.providerID` (one `GET /servers/{id}`), else by name (one list with the name
//! anchored). A providerID whose server is gone ([`Lookup::Gone`]) is a definite answer; a name
//! that matches no server ([`Lookup::NoServerNamed`]) is not, since node and server names may simply
//! differ (OCCM #2062), and the callers treat it so.
//!
//! Metadata costs one Neutron port list per call; the flavor is read from the server itself
//! (compute microversion 2.79 embeds `original_name`), with a cached flavor lookup only when that
//! name is not a valid label value.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::Node;
use kos_cloud::Session;
use kos_cloud::model::compute::{Server, ServerStatus};
use kos_cloud::model::network::PortFilter;
use kube::ResourceExt;

use super::addresses::{self, Address};
use super::error::{Error, Result};
use super::labels::{self, HOST_ID};
use super::provider_id::ProviderId;
use crate::config::Networking;

/// Where a node's server is.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    Found(Box<Server>),
    /// The node has no providerID and no server carries its name.
    NoServerNamed,
    /// The node's providerID names a server that does not exist (any more).
    Gone {
        server_id: String,
    },
}

/// What the cloud says about a node's server (upstream `cloudprovider.InstanceMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceMetadata {
    pub provider_id: ProviderId,
    pub instance_type: String,
    pub addresses: Vec<Address>,
    /// The server's availability zone, sanitised to a label value; `None` when empty.
    pub zone: Option<String>,
    pub region: Option<String>,
    /// `topology.openstack.org/host-id`.
    pub additional_labels: BTreeMap<String, String>,
}

/// Nova only: `SHUTOFF` is the one status the upstream reports as shut down.
pub fn is_shut_down(server: &Server) -> bool {
    server.status == ServerStatus::Shutoff
}

/// Finds servers and reads their metadata, for one region.
pub struct Instances {
    session: Session,
    networking: Networking,
    region: Option<String>,
    regional_provider_id: bool,
    /// Flavor id or name → instance type, for the servers whose flavor name is not a label value.
    instance_types: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Instances {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instances")
            .field("region", &self.region)
            .field("regional_provider_id", &self.regional_provider_id)
            .finish_non_exhaustive()
    }
}

impl Instances {
    pub fn new(
        session: Session,
        networking: Networking,
        region: Option<String>,
        regional_provider_id: bool,
    ) -> Instances {
        Instances {
            session,
            networking,
            region,
            regional_provider_id,
            instance_types: Mutex::new(HashMap::new()),
        }
    }

    /// The node's server: by providerID when it has one, else by name.
    pub async fn lookup(&self, node: &Node) -> Result<Lookup> {
        let name = node.name_any();
        let cloud = |what| {
            let node = name.clone();
            move |source| Error::Cloud { node, what, source }
        };
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .filter(|p| !p.is_empty());
        let Some(raw) = provider_id else {
            let mut found = self
                .session
                .compute()
                .list_servers_named(&name)
                .await
                .map_err(cloud("list servers by name"))?;
            return match found.len() {
                0 => Ok(Lookup::NoServerNamed),
                1 => Ok(Lookup::Found(Box::new(found.remove(0)))),
                count => Err(Error::ServersNamedAlike { node: name, count }),
            };
        };
        let pid = ProviderId::parse(raw).map_err(|source| Error::ProviderId {
            node: name.clone(),
            source,
        })?;
        if let Some(theirs) = &pid.region
            && Some(theirs) != self.region.as_ref()
        {
            return Err(Error::RegionMismatch {
                node: name,
                provider_id: raw.to_owned(),
                theirs: theirs.clone(),
                ours: self.region.clone().unwrap_or_default(),
            });
        }
        match self
            .session
            .compute()
            .get_server(&pid.server_id)
            .await
            .map_err(cloud("get server"))?
        {
            Some(s) => Ok(Lookup::Found(Box::new(s))),
            None => Ok(Lookup::Gone {
                server_id: pid.server_id,
            }),
        }
    }

    /// The providerID the server's node should have.
    pub fn provider_id(&self, server: &Server) -> ProviderId {
        let region = self
            .regional_provider_id
            .then_some(self.region.as_deref())
            .flatten();
        ProviderId::new(&server.id, region)
    }

    /// Everything the node is labelled and addressed with (one Neutron port list).
    pub async fn metadata(&self, node: &str, server: &Server) -> Result<InstanceMetadata> {
        let ports = self
            .session
            .network()
            .list_ports(&PortFilter {
                device_id: Some(server.id.clone()),
                ..Default::default()
            })
            .await
            .map_err(|source| Error::Cloud {
                node: node.to_owned(),
                what: "list the server's ports",
                source,
            })?;
        let instance_type = self.instance_type(node, server).await?;
        let zone = server
            .availability_zone
            .as_deref()
            .map(labels::sanitize_label)
            .filter(|z| !z.is_empty());
        let mut additional_labels = BTreeMap::new();
        if let Some(host) = server
            .host_id
            .as_deref()
            .map(labels::sanitize_label)
            .filter(|h| !h.is_empty())
        {
            additional_labels.insert(HOST_ID.to_owned(), host);
        }
        Ok(InstanceMetadata {
            provider_id: self.provider_id(server),
            instance_type,
            addresses: addresses::node_addresses(server, &ports, &self.networking),
            zone,
            region: self.region.clone(),
            additional_labels,
        })
    }

    /// Upstream `srvInstanceType`: the flavor's name when it is a valid label value, else the
    /// flavor looked up (its name, or its id when the name is not a label value either).
    async fn instance_type(&self, node: &str, server: &Server) -> Result<String> {
        let f = &server.flavor;
        if let Some(name) = f.original_name.as_deref()
            && labels::is_valid_label_value(name)
            && !name.is_empty()
        {
            return Ok(name.to_owned());
        }
        let key = match (&f.id, &f.original_name) {
            (Some(id), _) => format!("id:{id}"),
            (None, Some(name)) => format!("name:{name}"),
            (None, None) => {
                return Err(Error::InstanceType {
                    node: node.to_owned(),
                    server_id: server.id.clone(),
                    detail: "the server shows neither".into(),
                });
            }
        };
        let cached = self
            .instance_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(t) = cached {
            return Ok(t);
        }
        let cloud = |source| Error::Cloud {
            node: node.to_owned(),
            what: "look the server's flavor up",
            source,
        };
        let compute = self.session.compute();
        let flavor = match (&f.id, &f.original_name) {
            (Some(id), _) => compute.get_flavor(id).await.map_err(cloud)?,
            (None, Some(name)) => compute
                .list_flavors()
                .await
                .map_err(cloud)?
                .into_iter()
                .find(|fl| fl.name == *name),
            (None, None) => None,
        };
        let Some(flavor) = flavor else {
            return Err(Error::InstanceType {
                node: node.to_owned(),
                server_id: server.id.clone(),
                detail: format!(
                    "flavor {:?} is not a valid label value and no such flavor exists",
                    f.original_name
                        .as_deref()
                        .or(f.id.as_deref())
                        .unwrap_or_default()
                ),
            });
        };
        let t = if labels::is_valid_label_value(&flavor.name) && !flavor.name.is_empty() {
            flavor.name
        } else {
            flavor.id
        };
        self.instance_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, t.clone());
        Ok(t)
    }
}
