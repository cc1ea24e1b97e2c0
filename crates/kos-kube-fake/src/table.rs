//! `meta.k8s.io/v1` `Table`s, what `kubectl get` asks for (`Accept: …;as=Table;g=meta.k8s.io;v=v1`)
//! and prints without knowing the types itself.
//!
//! Columns and cells follow kube-apiserver's printers (kubernetes `pkg/printers/internalversion/
//! printers.go`) for the types kubectl users look at: Nodes, Pods, Services, Deployments,
//! DaemonSets, ReplicaSets, Namespaces, ConfigMaps, Secrets, ServiceAccounts, Leases, core
//! Events, (Cluster)RoleBindings, StorageClasses, PersistentVolumes, PersistentVolumeClaims,
//! VolumeAttachments, CSINodes and CSIDrivers. The server always fills the wide
//! (priority 1) cells; kubectl shows them for `-o wide`. Types without a printer get the
//! apiserver's default convertor (`NAME`, `CREATED AT`), custom resources their CRD's
//! `additionalPrinterColumns` or, without any, `AGE` (apiextensions' `serveDefaultColumnsIfEmpty`).
//! Ages are the apimachinery `HumanDuration` of the time since, computed when the table is made.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::resources::{PrinterColumn, ResourceType};
use crate::server::partial_metadata;

/// `includeObject` of `TableOptions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    /// `PartialObjectMetadata` (the default): what kubectl reads labels and namespaces from.
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(q: Option<&str>) -> IncludeObject {
        match q {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// The `Accept` header asks for a `Table` first (kubectl lists it before plain JSON).
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.split(';').any(|p| p.trim() == "as=Table"))
}

pub const TABLE_CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

struct Col {
    name: String,
    type_: &'static str,
    format: &'static str,
    priority: i64,
    description: String,
}

fn col(name: &str, type_: &'static str, priority: i64, description: &str) -> Col {
    Col {
        name: name.to_owned(),
        type_,
        format: if name == "Name" { "name" } else { "" },
        priority,
        description: description.to_owned(),
    }
}

const NAME_DOC: &str = "The object's name, unique within its namespace.";
const AGE_DOC: &str = "Time since the object was created.";

fn name_col() -> Col {
    col("Name", "string", 0, NAME_DOC)
}

fn age_col() -> Col {
    col("Age", "string", 0, AGE_DOC)
}

/// Which printer a type gets.
enum Printer<'a> {
    Node,
    Pod,
    Service,
    Deployment,
    DaemonSet,
    ReplicaSet,
    Namespace,
    ConfigMap,
    Secret,
    ServiceAccount,
    Lease,
    Event,
    RoleBinding,
    StorageClass,
    PersistentVolume,
    PersistentVolumeClaim,
    VolumeAttachment,
    CsiNode,
    CsiDriver,
    /// The apiserver's default: name and creation time.
    CreatedAt,
    Custom(&'a [PrinterColumn]),
}

fn printer(rt: &ResourceType) -> Printer<'_> {
    if let Some(c) = &rt.custom {
        return Printer::Custom(&c.columns);
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Node") => Printer::Node,
        ("", "Pod") => Printer::Pod,
        ("", "Service") => Printer::Service,
        ("", "Namespace") => Printer::Namespace,
        ("", "ConfigMap") => Printer::ConfigMap,
        ("", "Secret") => Printer::Secret,
        ("", "ServiceAccount") => Printer::ServiceAccount,
        ("", "Event") => Printer::Event,
        ("apps", "Deployment") => Printer::Deployment,
        ("apps", "DaemonSet") => Printer::DaemonSet,
        ("apps", "ReplicaSet") => Printer::ReplicaSet,
        ("coordination.k8s.io", "Lease") => Printer::Lease,
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => Printer::RoleBinding,
        ("storage.k8s.io", "StorageClass") => Printer::StorageClass,
        ("", "PersistentVolume") => Printer::PersistentVolume,
        ("", "PersistentVolumeClaim") => Printer::PersistentVolumeClaim,
        ("storage.k8s.io", "VolumeAttachment") => Printer::VolumeAttachment,
        ("storage.k8s.io", "CSINode") => Printer::CsiNode,
        ("storage.k8s.io", "CSIDriver") => Printer::CsiDriver,
        _ => Printer::CreatedAt,
    }
}

fn columns(p: &Printer<'_>) -> Vec<Col> {
    let containers = || {
        [
            col(
                "Containers",
                "string",
                1,
                "Names of the template's containers.",
            ),
            col(
                "Images",
                "string",
                1,
                "Images of the template's containers.",
            ),
        ]
    };
    match p {
        Printer::Node => vec![
            name_col(),
            col("Status", "string", 0, "The node's Ready condition."),
            col("Roles", "string", 0, "The node's roles (node-role labels)."),
            age_col(),
            col("Version", "string", 0, "The kubelet's version."),
            col("Internal-IP", "string", 1, "The node's first InternalIP."),
            col("External-IP", "string", 1, "The node's first ExternalIP."),
            col("OS-Image", "string", 1, "The node's OS image."),
            col("Kernel-Version", "string", 1, "The node's kernel."),
            col(
                "Container-Runtime",
                "string",
                1,
                "The node's container runtime.",
            ),
        ],
        Printer::Pod => vec![
            name_col(),
            col("Ready", "string", 0, "Ready containers of all containers."),
            col(
                "Status",
                "string",
                0,
                "The aggregate status of the containers.",
            ),
            col(
                "Restarts",
                "string",
                0,
                "Container restarts and the time of the last.",
            ),
            age_col(),
            col("IP", "string", 1, "The pod's IP."),
            col("Node", "string", 1, "The node it runs on."),
            col(
                "Nominated Node",
                "string",
                1,
                "The node the scheduler nominated.",
            ),
            col("Readiness Gates", "string", 1, "Readiness gates that hold."),
        ],
        Printer::Service => vec![
            name_col(),
            col("Type", "string", 0, "The service type."),
            col("Cluster-IP", "string", 0, "The allocated cluster IP."),
            col(
                "External-IP",
                "string",
                0,
                "Load balancer ingress or external IPs.",
            ),
            col(
                "Port(s)",
                "string",
                0,
                "Ports (with node ports) and protocols.",
            ),
            age_col(),
            col("Selector", "string", 1, "The pod selector."),
        ],
        Printer::Deployment => {
            let mut v = vec![
                name_col(),
                col("Ready", "string", 0, "Ready replicas of the desired."),
                col(
                    "Up-to-date",
                    "string",
                    0,
                    "Replicas of the current template.",
                ),
                col("Available", "string", 0, "Available replicas."),
                age_col(),
            ];
            v.extend(containers());
            v.push(col("Selector", "string", 1, "The pod selector."));
            v
        }
        Printer::DaemonSet => {
            let mut v = vec![
                name_col(),
                col("Desired", "integer", 0, "Nodes that should run the pod."),
                col("Current", "integer", 0, "Nodes that run the pod."),
                col("Ready", "integer", 0, "Nodes whose pod is ready."),
                col(
                    "Up-to-date",
                    "integer",
                    0,
                    "Nodes with the current template.",
                ),
                col("Available", "integer", 0, "Nodes whose pod is available."),
                col(
                    "Node Selector",
                    "string",
                    0,
                    "The template's node selector.",
                ),
                age_col(),
            ];
            v.extend(containers());
            v.push(col("Selector", "string", 1, "The pod selector."));
            v
        }
        Printer::ReplicaSet => {
            let mut v = vec![
                name_col(),
                col("Desired", "integer", 0, "Desired replicas."),
                col("Current", "integer", 0, "Current replicas."),
                col("Ready", "integer", 0, "Ready replicas."),
                age_col(),
            ];
            v.extend(containers());
            v.push(col("Selector", "string", 1, "The pod selector."));
            v
        }
        Printer::Namespace => vec![
            name_col(),
            col("Status", "string", 0, "The namespace's phase."),
            age_col(),
        ],
        Printer::ConfigMap => vec![
            name_col(),
            col("Data", "string", 0, "Number of keys."),
            age_col(),
        ],
        Printer::Secret => vec![
            name_col(),
            col("Type", "string", 0, "The secret's type."),
            col("Data", "string", 0, "Number of keys."),
            age_col(),
        ],
        Printer::ServiceAccount => vec![
            name_col(),
            col("Secrets", "string", 0, "Number of secrets."),
            age_col(),
        ],
        Printer::Lease => vec![
            name_col(),
            col("Holder", "string", 0, "The holder's identity."),
            age_col(),
        ],
        Printer::Event => vec![
            col(
                "Last Seen",
                "string",
                0,
                "Time since the event was last seen.",
            ),
            col("Type", "string", 0, "Normal or Warning."),
            col("Reason", "string", 0, "Why it happened."),
            col("Object", "string", 0, "What it is about."),
            col("Subobject", "string", 1, "The part of the object."),
            col("Source", "string", 1, "Who reported it."),
            col("Message", "string", 0, "What happened."),
            col(
                "First Seen",
                "string",
                1,
                "Time since the event was first seen.",
            ),
            col("Count", "string", 1, "How often it was seen."),
            Col {
                priority: 1,
                ..name_col()
            },
        ],
        Printer::RoleBinding => vec![
            name_col(),
            col("Role", "string", 0, "The bound role."),
            age_col(),
            col("Users", "string", 1, "Bound users."),
            col("Groups", "string", 1, "Bound groups."),
            col("ServiceAccounts", "string", 1, "Bound service accounts."),
        ],
        Printer::StorageClass => vec![
            name_col(),
            col("Provisioner", "string", 0, "The volume provisioner."),
            col(
                "ReclaimPolicy",
                "string",
                0,
                "What happens to released volumes.",
            ),
            col("VolumeBindingMode", "string", 0, "When volumes are bound."),
            col("AllowVolumeExpansion", "string", 0, "Volumes may grow."),
            age_col(),
        ],
        Printer::PersistentVolume => vec![
            name_col(),
            col("Capacity", "string", 0, "The volume's capacity."),
            col(
                "Access Modes",
                "string",
                0,
                "How the volume can be mounted.",
            ),
            col(
                "Reclaim Policy",
                "string",
                0,
                "What happens to the volume when its claim is released.",
            ),
            col("Status", "string", 0, "The volume's phase."),
            col("Claim", "string", 0, "The claim bound to the volume."),
            col("StorageClass", "string", 0, "StorageClass of the pv"),
            col(
                "VolumeAttributesClass",
                "string",
                0,
                "VolumeAttributesClass of the pv",
            ),
            col("Reason", "string", 0, "Why the volume is in its phase."),
            age_col(),
            col("VolumeMode", "string", 1, "Filesystem or Block."),
        ],
        Printer::PersistentVolumeClaim => vec![
            name_col(),
            col("Status", "string", 0, "The claim's phase."),
            col("Volume", "string", 0, "The volume bound to the claim."),
            col("Capacity", "string", 0, "The bound volume's capacity."),
            col(
                "Access Modes",
                "string",
                0,
                "How the bound volume can be mounted.",
            ),
            col("StorageClass", "string", 0, "StorageClass of the pvc"),
            col(
                "VolumeAttributesClass",
                "string",
                0,
                "VolumeAttributesClass of the pvc",
            ),
            age_col(),
            col("VolumeMode", "string", 1, "Filesystem or Block."),
        ],
        Printer::VolumeAttachment => vec![
            name_col(),
            Col {
                format: "name",
                ..col("Attacher", "string", 0, "The CSI driver that attaches.")
            },
            col("PV", "string", 0, "The attached PersistentVolume."),
            col("Node", "string", 0, "The node attached to."),
            col("Attached", "boolean", 0, "Whether the volume is attached."),
            age_col(),
        ],
        Printer::CsiNode => vec![
            name_col(),
            col(
                "Drivers",
                "integer",
                0,
                "Drivers indicates the number of CSI drivers registered on the node",
            ),
            age_col(),
        ],
        Printer::CsiDriver => vec![
            name_col(),
            col(
                "AttachRequired",
                "boolean",
                0,
                "Whether volumes are attached.",
            ),
            col(
                "PodInfoOnMount",
                "boolean",
                0,
                "Whether the driver gets pod information on mount.",
            ),
            col(
                "StorageCapacity",
                "boolean",
                0,
                "Whether the driver reports capacity.",
            ),
            col(
                "TokenRequests",
                "string",
                0,
                "The audiences of the tokens the driver gets.",
            ),
            col(
                "RequiresRepublish",
                "boolean",
                0,
                "Whether NodePublishVolume is called again.",
            ),
            col("Modes", "string", 0, "The volume lifecycle modes."),
            age_col(),
        ],
        Printer::CreatedAt => vec![
            name_col(),
            col("Created At", "date", 0, "When the object was created."),
        ],
        Printer::Custom([]) => vec![name_col(), age_col()],
        Printer::Custom(cols) => {
            let mut v = vec![name_col()];
            v.extend(cols.iter().map(|c| Col {
                name: c.name.clone(),
                type_: match c.type_.as_str() {
                    "integer" => "integer",
                    "number" => "number",
                    "boolean" => "boolean",
                    "date" => "date",
                    _ => "string",
                },
                format: "",
                priority: c.priority,
                description: if c.description.is_empty() {
                    format!(
                        "Custom resource definition column (in JSONPath format): {}",
                        c.json_path
                    )
                } else {
                    c.description.clone()
                },
            }));
            v
        }
    }
}

/// A table of `objects` of type `rt`; `list_meta` is the list's metadata (resourceVersion,
/// continue); `headers` false for the watch events after the first (the apiserver's `NoHeaders`).
pub fn table(
    rt: &ResourceType,
    objects: &[Value],
    list_meta: Value,
    headers: bool,
    include: IncludeObject,
) -> Value {
    let p = printer(rt);
    let now = Utc::now();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(&p, o, now)});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(o),
                IncludeObject::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    let mut t = json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "rows": rows,
    });
    if headers {
        t["columnDefinitions"] = columns(&p)
            .into_iter()
            .map(|c| {
                json!({"name": c.name, "type": c.type_, "format": c.format,
                       "description": c.description, "priority": c.priority})
            })
            .collect();
    }
    t
}

// ------------------------------------------------------------------------------ cells

fn s<'a>(o: &'a Value, p: &str) -> &'a str {
    o.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

fn int(o: &Value, p: &str) -> i64 {
    o.pointer(p).and_then(Value::as_i64).unwrap_or_default()
}

fn arr<'a>(o: &'a Value, p: &str) -> &'a [Value] {
    o.pointer(p)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn len_of(o: &Value, p: &str) -> usize {
    match o.pointer(p) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn parse_time(t: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// apimachinery's `duration.HumanDuration`: about two significant figures.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The printers' `translateTimestampSince`.
fn since(t: &str, now: DateTime<Utc>) -> String {
    match parse_time(t) {
        Some(t) => human_duration((now - t).num_seconds()),
        None => "<unknown>".into(),
    }
}

fn age(o: &Value, now: DateTime<Utc>) -> Value {
    json!(since(s(o, "/metadata/creationTimestamp"), now))
}

fn or_unset(v: &str) -> String {
    if v.is_empty() {
        "<unset>".into()
    } else {
        v.to_owned()
    }
}

/// A volume's or claim's phase, `Terminating` once it is being deleted.
fn phase_or_terminating(o: &Value) -> String {
    if o.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        "Terminating".into()
    } else {
        s(o, "/status/phase").to_owned()
    }
}

/// `GetAccessModesAsString`: the modes present, in a fixed order, abbreviated.
fn access_modes(modes: &[Value]) -> String {
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(m, _)| modes.iter().any(|x| x == m))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

fn or_none(v: &str) -> String {
    if v.is_empty() {
        "<none>".into()
    } else {
        v.to_owned()
    }
}

/// `labels.FormatLabels`: sorted `k=v` pairs, `<none>` when empty.
fn format_labels(m: Option<&Value>) -> String {
    let pairs: Vec<String> = m
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    or_none(&pairs.join(","))
}

/// `metav1.FormatLabelSelector`.
fn format_selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel else {
        return "<none>".into();
    };
    let mut parts: Vec<String> = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    for e in arr(sel, "/matchExpressions") {
        let key = s(e, "/key");
        let values: Vec<&str> = arr(e, "/values").iter().filter_map(Value::as_str).collect();
        parts.push(match s(e, "/operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            op => format!("{key} {op} ({})", values.join(",")),
        });
    }
    or_none(&parts.join(","))
}

/// `layoutContainerCells`: names and images, comma-separated.
fn containers(template_spec: Option<&Value>) -> (Value, Value) {
    let cs = template_spec
        .and_then(|t| t.get("containers"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let names: Vec<&str> = cs.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = cs.iter().map(|c| s(c, "/image")).collect();
    (json!(names.join(",")), json!(images.join(",")))
}

fn cells(p: &Printer<'_>, o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let name = json!(s(o, "/metadata/name"));
    match p {
        Printer::Node => node_cells(o, now),
        Printer::Pod => pod_cells(o, now),
        Printer::Service => service_cells(o, now),
        Printer::Deployment => {
            let (c, i) = containers(o.pointer("/spec/template/spec"));
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    int(o, "/status/readyReplicas"),
                    int(o, "/spec/replicas")
                )),
                json!(int(o, "/status/updatedReplicas")),
                json!(int(o, "/status/availableReplicas")),
                age(o, now),
                c,
                i,
                json!(format_selector(o.pointer("/spec/selector"))),
            ]
        }
        Printer::DaemonSet => {
            let (c, i) = containers(o.pointer("/spec/template/spec"));
            vec![
                name,
                json!(int(o, "/status/desiredNumberScheduled")),
                json!(int(o, "/status/currentNumberScheduled")),
                json!(int(o, "/status/numberReady")),
                json!(int(o, "/status/updatedNumberScheduled")),
                json!(int(o, "/status/numberAvailable")),
                json!(format_labels(o.pointer("/spec/template/spec/nodeSelector"))),
                age(o, now),
                c,
                i,
                json!(format_selector(o.pointer("/spec/selector"))),
            ]
        }
        Printer::ReplicaSet => {
            let (c, i) = containers(o.pointer("/spec/template/spec"));
            vec![
                name,
                json!(int(o, "/spec/replicas")),
                json!(int(o, "/status/replicas")),
                json!(int(o, "/status/readyReplicas")),
                age(o, now),
                c,
                i,
                json!(format_selector(o.pointer("/spec/selector"))),
            ]
        }
        Printer::Namespace => vec![name, json!(s(o, "/status/phase")), age(o, now)],
        Printer::ConfigMap => vec![
            name,
            json!(len_of(o, "/data") + len_of(o, "/binaryData")),
            age(o, now),
        ],
        Printer::Secret => vec![
            name,
            json!(s(o, "/type")),
            json!(len_of(o, "/data")),
            age(o, now),
        ],
        Printer::ServiceAccount => vec![name, json!(len_of(o, "/secrets")), age(o, now)],
        Printer::Lease => {
            let holder = o
                .pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .unwrap_or("<unknown>");
            vec![name, json!(holder), age(o, now)]
        }
        Printer::Event => event_cells(o, now),
        Printer::RoleBinding => {
            let subjects = arr(o, "/subjects");
            let of = |kind: &str| {
                subjects
                    .iter()
                    .filter(|x| s(x, "/kind") == kind)
                    .map(|x| match kind {
                        "ServiceAccount" => format!("{}/{}", s(x, "/namespace"), s(x, "/name")),
                        _ => s(x, "/name").to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    s(o, "/roleRef/kind"),
                    s(o, "/roleRef/name")
                )),
                age(o, now),
                json!(of("User")),
                json!(of("Group")),
                json!(of("ServiceAccount")),
            ]
        }
        Printer::StorageClass => {
            let default = [
                "storageclass.kubernetes.io/is-default-class",
                "storageclass.beta.kubernetes.io/is-default-class",
            ]
            .iter()
            .any(|a| {
                o.pointer("/metadata/annotations")
                    .and_then(|m| m.get(*a))
                    .and_then(Value::as_str)
                    == Some("true")
            });
            let mut n = s(o, "/metadata/name").to_owned();
            if default {
                n.push_str(" (default)");
            }
            let or = |p: &str, d: &str| {
                let v = s(o, p);
                if v.is_empty() {
                    d.to_owned()
                } else {
                    v.to_owned()
                }
            };
            vec![
                json!(n),
                json!(s(o, "/provisioner")),
                json!(or("/reclaimPolicy", "Delete")),
                json!(or("/volumeBindingMode", "Immediate")),
                json!(
                    o.get("allowVolumeExpansion")
                        .and_then(Value::as_bool)
                        .unwrap_or(false)
                ),
                age(o, now),
            ]
        }
        Printer::PersistentVolume => {
            let claim = match o.pointer("/spec/claimRef").filter(|c| !c.is_null()) {
                Some(c) => format!("{}/{}", s(c, "/namespace"), s(c, "/name")),
                None => String::new(),
            };
            vec![
                name,
                json!(s(o, "/spec/capacity/storage")),
                json!(access_modes(arr(o, "/spec/accessModes"))),
                json!(s(o, "/spec/persistentVolumeReclaimPolicy")),
                json!(phase_or_terminating(o)),
                json!(claim),
                json!(s(o, "/spec/storageClassName")),
                json!(or_unset(s(o, "/spec/volumeAttributesClassName"))),
                json!(s(o, "/status/reason")),
                age(o, now),
                json!(or_unset(s(o, "/spec/volumeMode"))),
            ]
        }
        Printer::PersistentVolumeClaim => {
            // Capacity and modes are the bound volume's, shown once the claim names one.
            let bound = !s(o, "/spec/volumeName").is_empty();
            let class = match s(
                o,
                "/metadata/annotations/volume.beta.kubernetes.io~1storage-class",
            ) {
                "" => s(o, "/spec/storageClassName"),
                beta => beta,
            };
            vec![
                name,
                json!(phase_or_terminating(o)),
                json!(s(o, "/spec/volumeName")),
                json!(if bound {
                    s(o, "/status/capacity/storage")
                } else {
                    ""
                }),
                json!(if bound {
                    access_modes(arr(o, "/status/accessModes"))
                } else {
                    String::new()
                }),
                json!(class),
                json!(or_unset(s(o, "/spec/volumeAttributesClassName"))),
                age(o, now),
                json!(or_unset(s(o, "/spec/volumeMode"))),
            ]
        }
        Printer::VolumeAttachment => vec![
            name,
            json!(s(o, "/spec/attacher")),
            json!(s(o, "/spec/source/persistentVolumeName")),
            json!(s(o, "/spec/nodeName")),
            json!(
                o.pointer("/status/attached")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            age(o, now),
        ],
        Printer::CsiNode => vec![name, json!(arr(o, "/spec/drivers").len()), age(o, now)],
        Printer::CsiDriver => {
            let flag = |p: &str, d: bool| o.pointer(p).and_then(Value::as_bool).unwrap_or(d);
            let audiences: Vec<&str> = arr(o, "/spec/tokenRequests")
                .iter()
                .map(|t| s(t, "/audience"))
                .collect();
            let modes: Vec<&str> = arr(o, "/spec/volumeLifecycleModes")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            vec![
                name,
                json!(flag("/spec/attachRequired", true)),
                json!(flag("/spec/podInfoOnMount", false)),
                json!(flag("/spec/storageCapacity", false)),
                json!(if audiences.is_empty() {
                    "<unset>".to_owned()
                } else {
                    audiences.join(",")
                }),
                json!(flag("/spec/requiresRepublish", false)),
                json!(if modes.is_empty() {
                    "<none>".to_owned()
                } else {
                    modes.join(",")
                }),
                age(o, now),
            ]
        }
        Printer::CreatedAt => vec![
            name,
            json!(
                parse_time(s(o, "/metadata/creationTimestamp"))
                    .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                    .unwrap_or_default()
            ),
        ],
        Printer::Custom([]) => vec![name, age(o, now)],
        Printer::Custom(cols) => {
            let mut v = vec![name];
            v.extend(cols.iter().map(|c| custom_cell(c, o, now)));
            v
        }
    }
}

fn node_cells(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let ready = arr(o, "/status/conditions")
        .iter()
        .find(|c| s(c, "/type") == "Ready");
    let mut status = vec![match ready.map(|c| s(c, "/status")) {
        Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
                    Some(role) if !role.is_empty() => Some(role.to_owned()),
                    Some(_) => None,
                    None if k == "kubernetes.io/role" => {
                        v.as_str().filter(|r| !r.is_empty()).map(str::to_owned)
                    }
                    None => None,
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.dedup();
    let address = |t: &str| {
        arr(o, "/status/addresses")
            .iter()
            .find(|a| s(a, "/type") == t)
            .map_or_else(|| "<none>".to_owned(), |a| s(a, "/address").to_owned())
    };
    let info = |f: &str| {
        let v = s(o, &format!("/status/nodeInfo/{f}"));
        if v.is_empty() {
            "<unknown>".to_owned()
        } else {
            v.to_owned()
        }
    };
    vec![
        json!(s(o, "/metadata/name")),
        json!(status.join(",")),
        json!(or_none(&roles.join(","))),
        age(o, now),
        json!(s(o, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

fn pod_cells(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let phase = s(o, "/status/phase");
    let mut reason = match s(o, "/status/reason") {
        "" => phase.to_owned(),
        r => r.to_owned(),
    };
    let conditions = arr(o, "/status/conditions");
    if conditions
        .iter()
        .any(|c| s(c, "/type") == "PodScheduled" && s(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let init_specs = arr(o, "/spec/initContainers");
    // Sidecars (init containers that restart Always) count as containers of the pod.
    let sidecar = |name: &str| {
        init_specs
            .iter()
            .any(|c| s(c, "/name") == name && s(c, "/restartPolicy") == "Always")
    };
    let total = arr(o, "/spec/containers").len()
        + init_specs
            .iter()
            .filter(|c| s(c, "/restartPolicy") == "Always")
            .count();
    let mut ready = 0;
    let mut restarts = 0;
    let mut sidecar_restarts = 0;
    let mut last_restart: Option<DateTime<Utc>> = None;
    let mut last_sidecar_restart: Option<DateTime<Utc>> = None;
    let later = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let finished = |c: &Value| parse_time(s(c, "/lastState/terminated/finishedAt"));
    let mut initializing = false;
    let init_statuses = arr(o, "/status/initContainerStatuses");
    for (i, c) in init_statuses.iter().enumerate() {
        restarts += int(c, "/restartCount");
        last_restart = later(last_restart, finished(c));
        let is_sidecar = sidecar(s(c, "/name"));
        if is_sidecar {
            sidecar_restarts += int(c, "/restartCount");
            last_sidecar_restart = later(last_sidecar_restart, finished(c));
        }
        let terminated = c.pointer("/state/terminated");
        let waiting_reason = s(c, "/state/waiting/reason");
        if terminated.is_some_and(|t| int(t, "/exitCode") == 0) {
            continue;
        }
        if is_sidecar && c.get("started").and_then(Value::as_bool) == Some(true) {
            if c.get("ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            reason = match (s(t, "/reason"), int(t, "/signal")) {
                ("", 0) => format!("Init:ExitCode:{}", int(t, "/exitCode")),
                ("", sig) => format!("Init:Signal:{sig}"),
                (r, _) => format!("Init:{r}"),
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }
    let initialized = conditions
        .iter()
        .any(|c| s(c, "/type") == "Initialized" && s(c, "/status") == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut running = false;
        for c in arr(o, "/status/containerStatuses").iter().rev() {
            restarts += int(c, "/restartCount");
            last_restart = later(last_restart, finished(c));
            let waiting = s(c, "/state/waiting/reason");
            let terminated = c.pointer("/state/terminated");
            if !waiting.is_empty() {
                reason = waiting.to_owned();
            } else if let Some(t) = terminated {
                reason = match (s(t, "/reason"), int(t, "/signal")) {
                    ("", 0) => format!("ExitCode:{}", int(t, "/exitCode")),
                    ("", sig) => format!("Signal:{sig}"),
                    (r, _) => r.to_owned(),
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let pod_ready = conditions
                .iter()
                .any(|c| s(c, "/type") == "Ready" && s(c, "/status") == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    let deleting = o.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && s(o, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && !matches!(phase, "Succeeded" | "Failed") {
        reason = "Terminating".into();
    }
    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            human_duration((now - t).num_seconds())
        ),
        _ => restarts.to_string(),
    };
    let gates = arr(o, "/spec/readinessGates");
    let gates_cell = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let holding = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| s(c, "/type") == s(g, "/conditionType"))
                    .is_some_and(|c| s(c, "/status") == "True")
            })
            .count();
        format!("{holding}/{}", gates.len())
    };
    let ip = arr(o, "/status/podIPs")
        .first()
        .map(|p| s(p, "/ip"))
        .unwrap_or_default();
    vec![
        json!(s(o, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        age(o, now),
        json!(or_none(ip)),
        json!(or_none(s(o, "/spec/nodeName"))),
        json!(or_none(s(o, "/status/nominatedNodeName"))),
        json!(gates_cell),
    ]
}

fn service_cells(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let type_ = s(o, "/spec/type");
    let external_ips: Vec<&str> = arr(o, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let external = match type_ {
        "ClusterIP" | "NodePort" if !external_ips.is_empty() => external_ips.join(","),
        "ClusterIP" | "NodePort" => "<none>".into(),
        "LoadBalancer" => {
            let mut ingress: Vec<&str> = arr(o, "/status/loadBalancer/ingress")
                .iter()
                .map(|i| match s(i, "/ip") {
                    "" => s(i, "/hostname"),
                    ip => ip,
                })
                .filter(|a| !a.is_empty())
                .collect();
            ingress.sort_unstable();
            ingress.dedup();
            // The server fills the wide cells, where the list is not clipped.
            let mut all: Vec<&str> = ingress;
            all.extend(&external_ips);
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(o, "/spec/externalName").to_owned(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = arr(o, "/spec/ports")
        .iter()
        .map(|p| {
            let proto = s(p, "/protocol");
            match int(p, "/nodePort") {
                0 => format!("{}/{proto}", int(p, "/port")),
                np => format!("{}:{np}/{proto}", int(p, "/port")),
            }
        })
        .collect();
    let cluster_ip = arr(o, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    vec![
        json!(s(o, "/metadata/name")),
        json!(type_),
        json!(cluster_ip),
        json!(external),
        json!(or_none(&ports.join(","))),
        age(o, now),
        json!(format_labels(o.pointer("/spec/selector"))),
    ]
}

fn event_cells(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let first = match s(o, "/firstTimestamp") {
        "" => since(s(o, "/eventTime"), now),
        t => since(t, now),
    };
    let mut last = match s(o, "/lastTimestamp") {
        "" => first.clone(),
        t => since(t, now),
    };
    let mut count = int(o, "/count");
    if let Some(series) = o.get("series").filter(|x| x.is_object()) {
        last = since(s(series, "/lastObservedTime"), now);
        count = int(series, "/count");
    } else if count == 0 {
        count = 1;
    }
    let kind = s(o, "/involvedObject/kind").to_lowercase();
    let target = match s(o, "/involvedObject/name") {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let pick = |a: &str, b: &str| {
        let a = s(o, a);
        if a.is_empty() {
            s(o, b).to_owned()
        } else {
            a.to_owned()
        }
    };
    let component = pick("/source/component", "/reportingComponent");
    let host = pick("/source/host", "/reportingInstance");
    let source = if host.is_empty() {
        component
    } else {
        format!("{component}, {host}")
    };
    vec![
        json!(last),
        json!(s(o, "/type")),
        json!(s(o, "/reason")),
        json!(target),
        json!(s(o, "/involvedObject/fieldPath")),
        json!(source),
        json!(s(o, "/message").trim()),
        json!(first),
        json!(count),
        json!(s(o, "/metadata/name")),
    ]
}

/// One step of a CRD column's JSONPath.
enum Step {
    Field(String),
    Index(usize),
    /// `[?(@.field=="value")]`
    Filter(String, String),
}

/// The simple JSONPaths CRD columns allow: `.a.b`, `.a[0]`, `.a[?(@.k=="v")].b`.
fn parse_path(path: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            steps.push(Step::Field(r[..end].to_owned()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            if let Some(f) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, v) = f.split_once("==")?;
                steps.push(Step::Filter(
                    k.trim().to_owned(),
                    v.trim().trim_matches(['"', '\'']).to_owned(),
                ));
            } else {
                steps.push(Step::Index(inner.parse().ok()?));
            }
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(steps)
}

fn find_path<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = o;
    for step in parse_path(path)? {
        cur = match step {
            Step::Field(f) => cur.get(&f)?,
            Step::Index(i) => cur.get(i)?,
            Step::Filter(k, v) => cur.as_array()?.iter().find(|x| {
                x.get(&k).is_some_and(|y| match y {
                    Value::String(s) => *s == v,
                    other => serde_json::from_str::<Value>(&v).ok().as_ref() == Some(other),
                })
            })?,
        };
    }
    Some(cur)
}

fn custom_cell(c: &PrinterColumn, o: &Value, now: DateTime<Utc>) -> Value {
    let Some(v) = find_path(o, &c.json_path) else {
        return Value::Null;
    };
    match (c.type_.as_str(), v) {
        ("date", Value::String(t)) => json!(since(t, now)),
        ("integer", Value::Number(n)) => json!(n.as_i64()),
        ("number", Value::Number(n)) => json!(n.as_f64()),
        ("boolean", Value::Bool(b)) => json!(b),
        (_, Value::String(s)) => json!(s),
        (_, Value::Object(_) | Value::Array(_)) => json!(v.to_string()),
        (_, Value::Null) => Value::Null,
        (_, other) => json!(other.to_string()),
    }
}

/// The columns a CRD version declares.
pub fn printer_columns(version: &Value) -> Vec<PrinterColumn> {
    arr(version, "/additionalPrinterColumns")
        .iter()
        .map(|c| PrinterColumn {
            name: s(c, "/name").to_owned(),
            type_: s(c, "/type").to_owned(),
            format: s(c, "/format").to_owned(),
            description: s(c, "/description").to_owned(),
            priority: int(c, "/priority"),
            json_path: s(c, "/jsonPath").to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_duration_matches_apimachinery() {
        let cases = [
            (0, "0s"),
            (-1, "0s"),
            (-5, "<invalid>"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60 * 20, "3h20m"),
            (47 * 3600, "47h"),
            (50 * 3600, "2d2h"),
            (9 * 86400, "9d"),
            (800 * 86400, "2y70d"),
            (3000 * 86400, "8y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
    }

    #[test]
    fn crd_column_paths_follow_simple_jsonpath() {
        let o = json!({"spec": {"n": 3, "list": [{"type": "A", "s": "x"}, {"type": "Ready", "s": "True"}]}});
        assert_eq!(find_path(&o, ".spec.n"), Some(&json!(3)));
        assert_eq!(find_path(&o, ".spec.list[0].s"), Some(&json!("x")));
        assert_eq!(
            find_path(&o, ".spec.list[?(@.type==\"Ready\")].s"),
            Some(&json!("True"))
        );
        assert_eq!(find_path(&o, ".spec.missing"), None);
    }
}
