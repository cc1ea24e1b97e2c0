//! Nova: flavors, keypairs, server groups, servers, volume attachments, limits.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

use super::common::{Link, invalid, lenient_u64, nullable, string_enum};
use crate::CloudError;

/// Nova rejects `user_data` whose base64 form is longer than this.
pub const MAX_USER_DATA_BASE64: usize = 65535;
/// Nova server tags: at most 60 characters, no `/` or `,`.
pub const MAX_SERVER_TAG_LEN: usize = 60;

string_enum!(
    /// Nova server status.
    ServerStatus {
        Active = "ACTIVE",
        Build = "BUILD",
        Error = "ERROR",
        Shutoff = "SHUTOFF",
        Deleted = "DELETED",
        SoftDeleted = "SOFT_DELETED",
        Reboot = "REBOOT",
        HardReboot = "HARD_REBOOT",
        Rebuild = "REBUILD",
        Resize = "RESIZE",
        VerifyResize = "VERIFY_RESIZE",
        RevertResize = "REVERT_RESIZE",
        Migrating = "MIGRATING",
        Paused = "PAUSED",
        Suspended = "SUSPENDED",
        Shelved = "SHELVED",
        ShelvedOffloaded = "SHELVED_OFFLOADED",
        Rescue = "RESCUE",
        Password = "PASSWORD",
    }
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    pub vcpus: u32,
    /// MiB.
    pub ram: u64,
    /// GiB (0 = the image's size; boot from volume is then needed on many clouds).
    pub disk: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub swap: u64,
    #[serde(rename = "OS-FLV-EXT-DATA:ephemeral")]
    pub ephemeral: u64,
    #[serde(rename = "os-flavor-access:is_public")]
    pub is_public: bool,
    #[serde(rename = "OS-FLV-DISABLED:disabled")]
    pub disabled: bool,
    #[serde(deserialize_with = "nullable")]
    pub description: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub extra_specs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Keypair {
    pub name: String,
    pub public_key: String,
    pub fingerprint: String,
    #[serde(rename = "type")]
    pub key_type: String,
    pub user_id: Option<String>,
    pub created_at: Option<String>,
}

/// Imports a public key (Nova ≥ 2.92 no longer generates keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeypairCreate {
    pub name: String,
    pub public_key: String,
    /// `ssh` or `x509`.
    #[serde(rename = "type")]
    pub key_type: String,
}

impl KeypairCreate {
    pub fn ssh(name: impl Into<String>, public_key: impl Into<String>) -> Self {
        KeypairCreate {
            name: name.into(),
            public_key: public_key.into(),
            key_type: "ssh".into(),
        }
    }
}

string_enum!(
    /// Server group policy (microversion ≥ 2.64: one policy per group).
    ServerGroupPolicy {
        Affinity = "affinity",
        AntiAffinity = "anti-affinity",
        SoftAffinity = "soft-affinity",
        SoftAntiAffinity = "soft-anti-affinity",
    }
);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerGroup {
    pub id: String,
    pub name: String,
    pub policy: ServerGroupPolicy,
    /// e.g. `max_server_per_host` for anti-affinity.
    pub rules: BTreeMap<String, Value>,
    /// Server ids.
    pub members: Vec<String>,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerGroupCreate {
    pub name: String,
    pub policy: ServerGroupPolicy,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rules: BTreeMap<String, Value>,
}

impl ServerGroupCreate {
    pub fn new(name: impl Into<String>, policy: ServerGroupPolicy) -> Self {
        ServerGroupCreate {
            name: name.into(),
            policy,
            rules: BTreeMap::new(),
        }
    }
}

/// Why a server is in ERROR (Nova's `fault`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Fault {
    pub code: u16,
    pub message: String,
    pub details: Option<String>,
    pub created: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerAddress {
    pub addr: String,
    pub version: u8,
    /// `fixed` or `floating`.
    #[serde(rename = "OS-EXT-IPS:type")]
    pub kind: Option<String>,
    #[serde(rename = "OS-EXT-IPS-MAC:mac_addr")]
    pub mac_addr: Option<String>,
}

/// The flavor embedded in a server (microversion ≥ 2.47: a copy, not a link).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerFlavor {
    /// Only before 2.47.
    pub id: Option<String>,
    pub original_name: Option<String>,
    pub vcpus: u32,
    pub ram: u64,
    pub disk: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AttachedVolume {
    pub id: String,
    pub delete_on_termination: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamedRef {
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Server {
    pub id: String,
    pub name: String,
    pub status: ServerStatus,
    #[serde(deserialize_with = "nullable")]
    pub description: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub tags: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub metadata: BTreeMap<String, String>,
    /// Network name → addresses.
    #[serde(deserialize_with = "nullable")]
    pub addresses: BTreeMap<String, Vec<ServerAddress>>,
    /// Set when status is ERROR (and sometimes after a failed action).
    pub fault: Option<Fault>,
    #[serde(deserialize_with = "nullable")]
    pub key_name: Option<String>,
    pub flavor: ServerFlavor,
    /// `None` when the server boots from a volume (Nova sends `""`).
    #[serde(rename = "image", deserialize_with = "image_id")]
    pub image_id: Option<String>,
    #[serde(rename = "OS-EXT-AZ:availability_zone")]
    pub availability_zone: Option<String>,
    /// The user-set public addresses (`""` when unset, as Nova sends them).
    #[serde(rename = "accessIPv4", deserialize_with = "nullable")]
    pub access_ipv4: String,
    #[serde(rename = "accessIPv6", deserialize_with = "nullable")]
    pub access_ipv6: String,
    #[serde(
        rename = "os-extended-volumes:volumes_attached",
        deserialize_with = "nullable"
    )]
    pub volumes_attached: Vec<AttachedVolume>,
    #[serde(deserialize_with = "nullable")]
    pub security_groups: Vec<NamedRef>,
    #[serde(rename = "OS-EXT-STS:vm_state")]
    pub vm_state: Option<String>,
    #[serde(rename = "OS-EXT-STS:task_state")]
    pub task_state: Option<String>,
    #[serde(rename = "OS-EXT-STS:power_state")]
    pub power_state: Option<u8>,
    #[serde(rename = "hostId")]
    pub host_id: Option<String>,
    pub created: Option<String>,
    pub updated: Option<String>,
    #[serde(alias = "tenant_id")]
    pub project_id: Option<String>,
    pub links: Vec<Link>,
}

impl Server {
    /// The fixed addresses on network `name` (what a kubelet node address comes from).
    pub fn fixed_ips(&self) -> impl Iterator<Item = &str> {
        self.addresses
            .values()
            .flatten()
            .filter(|a| a.kind.as_deref() != Some("floating"))
            .map(|a| a.addr.as_str())
    }
}

fn image_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        Some(Value::Object(o)) => o.get("id").and_then(Value::as_str).map(str::to_owned),
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    })
}

/// What the server create answers with (202): enough to poll it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ServerCreated {
    pub id: String,
}

/// One NIC of a new server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nic {
    /// A port kos made beforehand (fixed IP, allowed address pairs and security groups are on the port).
    Port(String),
    /// Nova creates the port on this network.
    Network {
        id: String,
        fixed_ip: Option<String>,
    },
}

impl Nic {
    fn to_json(&self) -> Value {
        match self {
            Nic::Port(id) => json!({"port": id}),
            Nic::Network { id, fixed_ip: None } => json!({"uuid": id}),
            Nic::Network {
                id,
                fixed_ip: Some(ip),
            } => json!({"uuid": id, "fixed_ip": ip}),
        }
    }
}

/// A block device of a new server (BDMv2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockDevice {
    /// A new volume made from an image.
    ImageToVolume {
        image_id: String,
        size_gb: u32,
        volume_type: Option<String>,
        delete_on_termination: bool,
    },
    /// An existing volume.
    Volume {
        volume_id: String,
        delete_on_termination: bool,
    },
}

impl BlockDevice {
    fn to_json(&self, boot_index: Option<u32>) -> Value {
        let mut v = match self {
            BlockDevice::ImageToVolume {
                image_id,
                size_gb,
                volume_type,
                delete_on_termination,
            } => {
                let mut v = json!({
                    "source_type": "image", "destination_type": "volume", "uuid": image_id,
                    "volume_size": size_gb, "delete_on_termination": delete_on_termination,
                });
                if let Some(t) = volume_type {
                    v["volume_type"] = json!(t);
                }
                v
            }
            BlockDevice::Volume {
                volume_id,
                delete_on_termination,
            } => json!({
                "source_type": "volume", "destination_type": "volume", "uuid": volume_id,
                "delete_on_termination": delete_on_termination,
            }),
        };
        if let Some(i) = boot_index {
            v["boot_index"] = json!(i);
        }
        v
    }
}

/// Where the root disk comes from: exactly one of these, so a server without a boot source cannot be asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// The image on the hypervisor's local disk.
    Image(String),
    /// A volume (new from an image, or existing) as the root disk.
    Volume(BlockDevice),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCreate {
    pub name: String,
    pub flavor_id: String,
    pub boot: Boot,
    /// More volumes attached at boot (not bootable).
    pub data_volumes: Vec<BlockDevice>,
    pub nics: Vec<Nic>,
    /// Raw bytes (cloud-init); base64-encoded by the facade.
    pub user_data: Option<Vec<u8>>,
    pub server_group: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub tags: Vec<String>,
    pub key_name: Option<String>,
    pub availability_zone: Option<String>,
    /// Names or ids; applied only to ports Nova creates (a pre-made port keeps its own groups).
    pub security_groups: Vec<String>,
    pub description: Option<String>,
    /// A `config-2` disk with the metadata and user_data (Nova's `config_drive`), so the guest needs
    /// no metadata service after its first boot.
    pub config_drive: bool,
}

impl ServerCreate {
    pub fn new(name: impl Into<String>, flavor_id: impl Into<String>, boot: Boot) -> Self {
        ServerCreate {
            name: name.into(),
            flavor_id: flavor_id.into(),
            boot,
            data_volumes: Vec::new(),
            nics: Vec::new(),
            user_data: None,
            server_group: None,
            metadata: BTreeMap::new(),
            tags: Vec::new(),
            key_name: None,
            availability_zone: None,
            security_groups: Vec::new(),
            description: None,
            config_drive: false,
        }
    }

    /// The request body, checked before anything is sent: user_data within Nova's limit, valid tags.
    pub fn to_body(&self) -> Result<Value, CloudError> {
        let invalid = |detail: String| invalid(format!("server {:?}", self.name), detail);
        if let Some(t) = self
            .tags
            .iter()
            .find(|t| t.is_empty() || t.len() > MAX_SERVER_TAG_LEN || t.contains(['/', ',']))
        {
            return Err(invalid(format!(
                "invalid Nova tag {t:?}: tags must be 1–{MAX_SERVER_TAG_LEN} characters without '/' or ','"
            )));
        }
        let mut s = json!({
            "name": self.name,
            "flavorRef": self.flavor_id,
            "networks": if self.nics.is_empty() { json!("none") } else { Value::Array(self.nics.iter().map(Nic::to_json).collect()) },
        });
        let mut bdms: Vec<Value> = Vec::new();
        match &self.boot {
            Boot::Image(id) => s["imageRef"] = json!(id),
            Boot::Volume(dev) => bdms.push(dev.to_json(Some(0))),
        }
        bdms.extend(self.data_volumes.iter().map(|d| d.to_json(None)));
        if !bdms.is_empty() {
            if let Boot::Image(id) = &self.boot {
                // With BDMv2, the image has to be listed as the boot device too.
                bdms.insert(0, json!({"source_type": "image", "destination_type": "local", "uuid": id, "boot_index": 0, "delete_on_termination": true}));
            }
            s["block_device_mapping_v2"] = Value::Array(bdms);
        }
        if let Some(data) = &self.user_data {
            let b64 = base64::engine::general_purpose::STANDARD.encode(data);
            if b64.len() > MAX_USER_DATA_BASE64 {
                return Err(invalid(format!(
                    "user_data is {} bytes after base64 encoding ({} raw); Nova accepts at most {MAX_USER_DATA_BASE64}: gzip it or move content out of user_data",
                    b64.len(),
                    data.len()
                )));
            }
            s["user_data"] = json!(b64);
        }
        if !self.metadata.is_empty() {
            s["metadata"] = json!(self.metadata);
        }
        if !self.tags.is_empty() {
            s["tags"] = json!(self.tags);
        }
        if let Some(k) = &self.key_name {
            s["key_name"] = json!(k);
        }
        if let Some(az) = &self.availability_zone {
            s["availability_zone"] = json!(az);
        }
        if self.config_drive {
            s["config_drive"] = json!(true);
        }
        if !self.security_groups.is_empty() {
            s["security_groups"] = self
                .security_groups
                .iter()
                .map(|n| json!({"name": n}))
                .collect();
        }
        if let Some(d) = &self.description {
            s["description"] = json!(d);
        }
        let mut body = json!({"server": s});
        if let Some(g) = &self.server_group {
            body["OS-SCH-HNT:scheduler_hints"] = json!({"group": g});
        }
        Ok(body)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeAttachment {
    pub id: String,
    #[serde(rename = "volumeId")]
    pub volume_id: String,
    #[serde(rename = "serverId")]
    pub server_id: String,
    pub device: Option<String>,
    pub tag: Option<String>,
    pub delete_on_termination: bool,
}

/// Attaches an existing volume to a server (microversion ≥ 2.79 for `delete_on_termination`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VolumeAttach {
    #[serde(rename = "volumeId")]
    pub volume_id: String,
    /// Ignored by most hypervisors; `None` lets Nova choose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    pub delete_on_termination: bool,
}

impl VolumeAttach {
    pub fn new(volume_id: impl Into<String>) -> Self {
        VolumeAttach {
            volume_id: volume_id.into(),
            device: None,
            tag: None,
            delete_on_termination: false,
        }
    }
}

/// Nova's absolute limits with current usage (`GET /limits`). -1 means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ComputeLimits {
    pub max_total_instances: i64,
    pub total_instances_used: i64,
    pub max_total_cores: i64,
    pub total_cores_used: i64,
    #[serde(rename = "maxTotalRAMSize")]
    pub max_total_ram_size: i64,
    #[serde(rename = "totalRAMUsed")]
    pub total_ram_used: i64,
    pub max_total_keypairs: i64,
    pub max_server_groups: i64,
    pub total_server_groups_used: i64,
    pub max_server_group_members: i64,
    pub max_server_meta: i64,
}

/// One compute availability zone (`GET /os-availability-zone`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AvailabilityZone {
    #[serde(rename = "zoneName")]
    pub name: String,
    #[serde(rename = "zoneState")]
    pub state: ZoneState,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ZoneState {
    pub available: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{keys, parse_sample, sample_keys};

    type R = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn flavors_parse_across_microversions() -> R {
        for p in [
            "compute/flavors/flavors-detail-resp.json",
            "compute/flavors/v2.75/flavors-detail-resp.json",
            "compute/flavors/v2.102/flavors-detail-resp.json",
        ] {
            let f: Vec<Flavor> = parse_sample(p, "flavors")?;
            assert!(
                f.iter()
                    .any(|f| f.name == "m1.tiny" && f.ram == 512 && f.vcpus == 1),
                "{p}"
            );
        }
        let f: Flavor = parse_sample("compute/flavors/v2.75/flavor-get-resp.json", "flavor")?;
        assert!(!f.id.is_empty());
        Ok(())
    }

    #[test]
    fn keypairs_parse() -> R {
        let k: Keypair = parse_sample(
            "compute/os-keypairs/v2.92/keypairs-import-post-resp.json",
            "keypair",
        )?;
        assert_eq!(k.key_type, "ssh");
        let k: Keypair = parse_sample(
            "compute/os-keypairs/v2.10/keypairs-get-resp.json",
            "keypair",
        )?;
        assert!(k.fingerprint.starts_with("44:fe"));
        #[derive(Deserialize)]
        struct Wrapped {
            keypair: Keypair,
        }
        let l: Vec<Wrapped> = parse_sample(
            "compute/os-keypairs/v2.35/keypairs-list-resp.json",
            "keypairs",
        )?;
        assert_eq!(l.len(), 1);
        assert!(l[0].keypair.name.starts_with("keypair-"));
        Ok(())
    }

    #[test]
    fn keypair_create_matches_the_2_92_request() -> R {
        let body = serde_json::to_value(KeypairCreate::ssh("k", "ssh-ed25519 AAAA"))?;
        let mut want = sample_keys(
            "compute/os-keypairs/v2.92/keypairs-import-post-req.json",
            "keypair",
        )?;
        want.retain(|k| k != "user_id"); // admin-only
        assert_eq!(keys(&body), want);
        Ok(())
    }

    #[test]
    fn server_groups_parse_and_create_matches_the_sample() -> R {
        let g: ServerGroup = parse_sample(
            "compute/os-server-groups/v2.64/server-groups-get-resp.json",
            "server_group",
        )?;
        assert_eq!(g.policy, ServerGroupPolicy::AntiAffinity);
        let l: Vec<ServerGroup> = parse_sample(
            "compute/os-server-groups/v2.64/server-groups-list-resp.json",
            "server_groups",
        )?;
        assert_eq!(l.len(), 1);
        let mut c = ServerGroupCreate::new("test", ServerGroupPolicy::AntiAffinity);
        c.rules.insert("max_server_per_host".into(), json!(3));
        assert_eq!(
            keys(&serde_json::to_value(&c)?),
            sample_keys(
                "compute/os-server-groups/v2.64/server-groups-post-req.json",
                "server_group"
            )?
        );
        Ok(())
    }

    #[test]
    fn servers_parse_across_microversions() -> R {
        for v in ["v2.79", "v2.90", "v2.96", "v2.98", "v2.100"] {
            let p = format!("compute/servers/{v}/server-get-resp.json");
            if crate::model::sample(&p).is_err() {
                continue;
            }
            let s: Server = parse_sample(&p, "server")?;
            assert_eq!(s.status, ServerStatus::Active, "{p}");
            assert_eq!(
                s.image_id.as_deref(),
                Some("70a599e0-31e7-49b7-b260-868f441e862b")
            );
            assert_eq!(s.fixed_ips().collect::<Vec<_>>(), vec!["192.168.1.30"]);
            assert_eq!(
                (s.access_ipv4.as_str(), s.access_ipv6.as_str()),
                ("1.2.3.4", "80fe::")
            );
        }
        let l: Vec<Server> = parse_sample(
            "compute/servers/v2.100/servers-details-resp.json",
            "servers",
        )?;
        assert!(!l.is_empty());
        let l: Vec<Server> = parse_sample("compute/servers/servers-details-resp.json", "servers")?;
        assert!(!l.is_empty());
        Ok(())
    }

    #[test]
    fn server_with_fault_and_volume_boot_parses() -> R {
        let s: Server = serde_json::from_value(json!({
            "id": "x", "status": "ERROR", "image": "", "flavor": {"vcpus": 1, "ram": 1, "disk": 0},
            "fault": {"code": 500, "message": "No valid host was found. ", "created": "2026-01-01T00:00:00Z"},
            "tags": null, "weird_new_field": 1
        }))?;
        assert_eq!(s.status, ServerStatus::Error);
        assert_eq!(s.image_id, None);
        assert_eq!(
            s.fault.map(|f| f.message).as_deref(),
            Some("No valid host was found. ")
        );
        Ok(())
    }

    fn full_create() -> ServerCreate {
        let mut c = ServerCreate::new("new-server-test", "1", Boot::Image("70a599e0".into()));
        c.nics = vec![
            Nic::Port("p1".into()),
            Nic::Network {
                id: "n1".into(),
                fixed_ip: Some("10.0.0.5".into()),
            },
        ];
        c.user_data = Some(b"#cloud-config\n".to_vec());
        c.metadata.insert("My Server Name".into(), "Apache1".into());
        c.tags = vec!["kos-cluster=a".into()];
        c.key_name = Some("k".into());
        c.availability_zone = Some("us-west".into());
        c.security_groups = vec!["default".into()];
        c.server_group = Some("g1".into());
        c.description = Some("d".into());
        c
    }

    #[test]
    fn server_create_matches_the_api_reference() -> R {
        let body = full_create().to_body()?;
        let mut want = sample_keys("compute/servers/v2.100/server-create-req.json", "server")?;
        // Fields kos does not use.
        want.retain(|k| {
            !["accessIPv4", "accessIPv6", "OS-DCF:diskConfig", "hostname"].contains(&k.as_str())
        });
        want.extend(["tags".into(), "key_name".into(), "description".into()]);
        want.sort();
        assert_eq!(keys(&body["server"]), want);
        assert_eq!(
            body["server"]["networks"],
            json!([{"port": "p1"}, {"uuid": "n1", "fixed_ip": "10.0.0.5"}])
        );
        assert_eq!(body["server"]["user_data"], json!("I2Nsb3VkLWNvbmZpZwo="));
        assert_eq!(body["OS-SCH-HNT:scheduler_hints"], json!({"group": "g1"}));
        Ok(())
    }

    #[test]
    fn boot_from_volume_sends_bdm_v2_without_image_ref() -> R {
        let mut c = ServerCreate::new(
            "s",
            "1",
            Boot::Volume(BlockDevice::ImageToVolume {
                image_id: "img".into(),
                size_gb: 20,
                volume_type: Some("ssd".into()),
                delete_on_termination: true,
            }),
        );
        c.data_volumes.push(BlockDevice::Volume {
            volume_id: "v".into(),
            delete_on_termination: false,
        });
        let body = c.to_body()?;
        assert!(body["server"].get("imageRef").is_none());
        assert_eq!(body["server"]["networks"], json!("none"));
        let bdm = &body["server"]["block_device_mapping_v2"];
        assert_eq!(bdm[0]["boot_index"], json!(0));
        assert_eq!(bdm[0]["volume_type"], json!("ssd"));
        assert_eq!(bdm[1]["source_type"], json!("volume"));
        assert!(bdm[1].get("boot_index").is_none());
        Ok(())
    }

    #[test]
    fn oversized_user_data_and_bad_tags_fail_before_sending() {
        let mut c = full_create();
        c.user_data = Some(vec![b'x'; 49_152]); // 65536 bytes of base64
        let e = c.to_body().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("65536 bytes after base64"), "{e}");
        c.user_data = Some(vec![b'x'; 49_149]); // 65532 bytes of base64
        assert!(c.to_body().is_ok());
        c.tags = vec!["a/b".into()];
        assert!(c.to_body().is_err());
    }

    #[test]
    fn volume_attachments_and_limits_parse() -> R {
        let a: VolumeAttachment = parse_sample(
            "compute/os-volume_attachments/v2.79/attach-volume-to-server-resp.json",
            "volumeAttachment",
        )?;
        assert!(a.delete_on_termination);
        let l: Vec<VolumeAttachment> = parse_sample(
            "compute/os-volume_attachments/v2.79/list-volume-attachments-resp.json",
            "volumeAttachments",
        )?;
        assert_eq!(l.len(), 2);
        let req = VolumeAttach {
            volume_id: "v".into(),
            device: None,
            tag: Some("foo".into()),
            delete_on_termination: true,
        };
        assert_eq!(
            keys(&serde_json::to_value(&req)?),
            sample_keys(
                "compute/os-volume_attachments/v2.79/attach-volume-to-server-req.json",
                "volumeAttachment"
            )?
        );
        let v: Value = parse_sample("compute/limits/v2.57/limit-get-resp.json", "limits")?;
        let l: ComputeLimits = serde_json::from_value(v["absolute"].clone())?;
        assert_eq!(
            (
                l.max_total_instances,
                l.max_total_cores,
                l.max_total_ram_size
            ),
            (10, 20, 51200)
        );
        Ok(())
    }

    #[test]
    fn availability_zones_parse() -> R {
        let z: Vec<AvailabilityZone> = parse_sample(
            "compute/os-availability-zone/availability-zone-list-resp.json",
            "availabilityZoneInfo",
        )?;
        assert_eq!((z[0].name.as_str(), z[0].state.available), ("nova", true));
        Ok(())
    }
}
