//! Request bodies in `application/vnd.kubernetes.protobuf`, which kubectl's typed clients send
//! (`kubectl create deployment|namespace|configmap|secret|serviceaccount`); the real server takes
//! protobuf for every built-in type, and client-go does not fall back to JSON for it.
//!
//! A body is the magic `k8s\0` and a `runtime.Unknown` whose `raw` (field 2) is the object's
//! message. Messages are read by the field numbers of k8s.io/api's `generated.proto` for the types
//! below and turned into the JSON the object would have: Go's encoder writes every non-pointer
//! field, zero or not, so zero strings, numbers, booleans and lists are dropped as Go's JSON
//! `omitempty` would (pointer fields whose zero is meaningful, `replicas: 0`, are kept), and a
//! zero `Time` is absent. A field the tables here do not know is ignored when it is zero and
//! refused (415) otherwise, naming the field, so a body is never silently mangled.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::resources::ResourceType;

pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, Clone, Copy)]
enum Ty {
    Str,
    I32,
    I64,
    Bool,
    Msg(&'static Msg),
    /// `map<string, string>`
    MapStr,
    /// `map<string, bytes>`
    MapBytes,
    /// `map<string, Quantity>`
    MapQuantity,
    Time,
    IntOrString,
}

#[derive(Debug)]
struct Field {
    num: u64,
    name: &'static str,
    ty: Ty,
    repeated: bool,
    /// A Go pointer: its zero is a value, not an absence.
    keep_zero: bool,
}

#[derive(Debug)]
struct Msg {
    name: &'static str,
    fields: &'static [Field],
}

const fn f(num: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        num,
        name,
        ty,
        repeated: false,
        keep_zero: false,
    }
}

const fn list(num: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        num,
        name,
        ty,
        repeated: true,
        keep_zero: false,
    }
}

const fn ptr(num: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        num,
        name,
        ty,
        repeated: false,
        keep_zero: true,
    }
}

// ---------------------------------------------------------------- k8s.io/apimachinery meta/v1

static OBJECT_META: Msg = Msg {
    name: "ObjectMeta",
    fields: &[
        f(1, "name", Ty::Str),
        f(2, "generateName", Ty::Str),
        f(3, "namespace", Ty::Str),
        f(5, "uid", Ty::Str),
        f(6, "resourceVersion", Ty::Str),
        f(7, "generation", Ty::I64),
        f(8, "creationTimestamp", Ty::Time),
        f(9, "deletionTimestamp", Ty::Time),
        ptr(10, "deletionGracePeriodSeconds", Ty::I64),
        f(11, "labels", Ty::MapStr),
        f(12, "annotations", Ty::MapStr),
        list(13, "ownerReferences", Ty::Msg(&OWNER_REFERENCE)),
        list(14, "finalizers", Ty::Str),
    ],
};

static OWNER_REFERENCE: Msg = Msg {
    name: "OwnerReference",
    fields: &[
        f(1, "kind", Ty::Str),
        f(3, "name", Ty::Str),
        f(4, "uid", Ty::Str),
        f(5, "apiVersion", Ty::Str),
        ptr(6, "controller", Ty::Bool),
        ptr(7, "blockOwnerDeletion", Ty::Bool),
    ],
};

static LABEL_SELECTOR: Msg = Msg {
    name: "LabelSelector",
    fields: &[
        f(1, "matchLabels", Ty::MapStr),
        list(2, "matchExpressions", Ty::Msg(&LABEL_SELECTOR_REQUIREMENT)),
    ],
};

static LABEL_SELECTOR_REQUIREMENT: Msg = Msg {
    name: "LabelSelectorRequirement",
    fields: &[
        f(1, "key", Ty::Str),
        f(2, "operator", Ty::Str),
        list(3, "values", Ty::Str),
    ],
};

// ---------------------------------------------------------------------------- k8s.io/api apps/v1

static DEPLOYMENT: Msg = Msg {
    name: "Deployment",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&DEPLOYMENT_SPEC)),
        f(3, "status", Ty::Msg(&EMPTY_STATUS)),
    ],
};

static DEPLOYMENT_SPEC: Msg = Msg {
    name: "DeploymentSpec",
    fields: &[
        ptr(1, "replicas", Ty::I32),
        f(2, "selector", Ty::Msg(&LABEL_SELECTOR)),
        f(3, "template", Ty::Msg(&POD_TEMPLATE_SPEC)),
        f(4, "strategy", Ty::Msg(&DEPLOYMENT_STRATEGY)),
        f(5, "minReadySeconds", Ty::I32),
        ptr(6, "revisionHistoryLimit", Ty::I32),
        f(7, "paused", Ty::Bool),
        ptr(9, "progressDeadlineSeconds", Ty::I32),
    ],
};

static DEPLOYMENT_STRATEGY: Msg = Msg {
    name: "DeploymentStrategy",
    fields: &[
        f(1, "type", Ty::Str),
        f(2, "rollingUpdate", Ty::Msg(&ROLLING_UPDATE_DEPLOYMENT)),
    ],
};

static ROLLING_UPDATE_DEPLOYMENT: Msg = Msg {
    name: "RollingUpdateDeployment",
    fields: &[
        f(1, "maxUnavailable", Ty::IntOrString),
        f(2, "maxSurge", Ty::IntOrString),
    ],
};

/// A status a client sends is all zeros (the server owns it): only zero fields are accepted.
static EMPTY_STATUS: Msg = Msg {
    name: "status",
    fields: &[],
};

// ---------------------------------------------------------------------------- k8s.io/api core/v1

static POD_TEMPLATE_SPEC: Msg = Msg {
    name: "PodTemplateSpec",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&POD_SPEC)),
    ],
};

static POD_SPEC: Msg = Msg {
    name: "PodSpec",
    fields: &[
        list(2, "containers", Ty::Msg(&CONTAINER)),
        f(3, "restartPolicy", Ty::Str),
        ptr(4, "terminationGracePeriodSeconds", Ty::I64),
        f(6, "dnsPolicy", Ty::Str),
        f(7, "nodeSelector", Ty::MapStr),
        f(8, "serviceAccountName", Ty::Str),
        f(10, "nodeName", Ty::Str),
        f(11, "hostNetwork", Ty::Bool),
        f(19, "schedulerName", Ty::Str),
        list(20, "initContainers", Ty::Msg(&CONTAINER)),
    ],
};

static CONTAINER: Msg = Msg {
    name: "Container",
    fields: &[
        f(1, "name", Ty::Str),
        f(2, "image", Ty::Str),
        list(3, "command", Ty::Str),
        list(4, "args", Ty::Str),
        f(5, "workingDir", Ty::Str),
        list(6, "ports", Ty::Msg(&CONTAINER_PORT)),
        list(7, "env", Ty::Msg(&ENV_VAR)),
        // Not a pointer in Go: `resources: {}` even when empty.
        f(8, "resources", Ty::Msg(&RESOURCE_REQUIREMENTS)),
        f(13, "terminationMessagePath", Ty::Str),
        f(14, "imagePullPolicy", Ty::Str),
        f(16, "stdin", Ty::Bool),
        f(17, "stdinOnce", Ty::Bool),
        f(18, "tty", Ty::Bool),
        f(20, "terminationMessagePolicy", Ty::Str),
        f(24, "restartPolicy", Ty::Str),
    ],
};

static CONTAINER_PORT: Msg = Msg {
    name: "ContainerPort",
    fields: &[
        f(1, "name", Ty::Str),
        f(2, "hostPort", Ty::I32),
        f(3, "containerPort", Ty::I32),
        f(4, "protocol", Ty::Str),
        f(5, "hostIP", Ty::Str),
    ],
};

static ENV_VAR: Msg = Msg {
    name: "EnvVar",
    fields: &[f(1, "name", Ty::Str), f(2, "value", Ty::Str)],
};

static RESOURCE_REQUIREMENTS: Msg = Msg {
    name: "ResourceRequirements",
    fields: &[
        f(1, "limits", Ty::MapQuantity),
        f(2, "requests", Ty::MapQuantity),
    ],
};

static NAMESPACE: Msg = Msg {
    name: "Namespace",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "spec", Ty::Msg(&NAMESPACE_SPEC)),
        f(3, "status", Ty::Msg(&EMPTY_STATUS)),
    ],
};

static NAMESPACE_SPEC: Msg = Msg {
    name: "NamespaceSpec",
    fields: &[list(1, "finalizers", Ty::Str)],
};

static CONFIG_MAP: Msg = Msg {
    name: "ConfigMap",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "data", Ty::MapStr),
        f(3, "binaryData", Ty::MapBytes),
        ptr(4, "immutable", Ty::Bool),
    ],
};

static SECRET: Msg = Msg {
    name: "Secret",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        f(2, "data", Ty::MapBytes),
        f(3, "type", Ty::Str),
        f(4, "stringData", Ty::MapStr),
        ptr(5, "immutable", Ty::Bool),
    ],
};

static SERVICE_ACCOUNT: Msg = Msg {
    name: "ServiceAccount",
    fields: &[
        f(1, "metadata", Ty::Msg(&OBJECT_META)),
        ptr(4, "automountServiceAccountToken", Ty::Bool),
    ],
};

fn message_of(rt: &ResourceType) -> Option<&'static Msg> {
    Some(
        match (rt.group.as_str(), rt.version.as_str(), rt.kind.as_str()) {
            ("apps", "v1", "Deployment") => &DEPLOYMENT,
            ("", "v1", "Namespace") => &NAMESPACE,
            ("", "v1", "ConfigMap") => &CONFIG_MAP,
            ("", "v1", "Secret") => &SECRET,
            ("", "v1", "ServiceAccount") => &SERVICE_ACCOUNT,
            _ => return None,
        },
    )
}

fn unsupported(why: String) -> ApiError {
    ApiError::new(415, "UnsupportedMediaType", why)
}

/// The object of a protobuf request body, as JSON of type `rt`.
pub fn decode(body: &[u8], rt: &ResourceType) -> Result<Value, ApiError> {
    let msg = message_of(rt).ok_or_else(|| {
        unsupported(format!(
            "kos-kube-fake reads {CONTENT_TYPE} bodies of Deployments, Namespaces, ConfigMaps, Secrets and ServiceAccounts only, not {}: send application/json",
            rt.kind
        ))
    })?;
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request("the protobuf body does not start with the k8s magic prefix")
    })?;
    let raw = Reader(envelope)
        .fields()?
        .into_iter()
        .find_map(|(num, v)| match (num, v) {
            (2, Wire::Len(b)) => Some(b),
            _ => None,
        })
        .ok_or_else(|| ApiError::bad_request("the protobuf body carries no object (raw)"))?;
    let mut obj = message(raw, msg)?;
    obj["apiVersion"] = json!(rt.api_version());
    obj["kind"] = json!(rt.kind);
    Ok(obj)
}

#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Len(&'a [u8]),
    /// Fixed 32- and 64-bit values, which none of these messages use.
    Fixed,
}

impl Wire<'_> {
    fn is_zero(&self) -> bool {
        match self {
            Wire::Varint(v) => *v == 0,
            Wire::Len(b) => b.is_empty(),
            Wire::Fixed => false,
        }
    }
}

struct Reader<'a>(&'a [u8]);

fn malformed() -> ApiError {
    ApiError::bad_request("the protobuf body is malformed")
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ApiError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let (&b, rest) = self.0.split_first().ok_or_else(malformed)?;
            self.0 = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ApiError> {
        if n > self.0.len() {
            return Err(malformed());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn fields(mut self) -> Result<Vec<(u64, Wire<'a>)>, ApiError> {
        let mut out = Vec::new();
        while !self.0.is_empty() {
            let key = self.varint()?;
            let v = match key & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    Wire::Fixed
                }
                2 => {
                    let n = usize::try_from(self.varint()?).map_err(|_| malformed())?;
                    Wire::Len(self.take(n)?)
                }
                5 => {
                    self.take(4)?;
                    Wire::Fixed
                }
                _ => return Err(malformed()),
            };
            out.push((key >> 3, v));
        }
        Ok(out)
    }
}

fn utf8(b: &[u8]) -> Result<String, ApiError> {
    String::from_utf8(b.to_vec())
        .map_err(|_| ApiError::bad_request("a protobuf string is not UTF-8"))
}

fn message(bytes: &[u8], msg: &Msg) -> Result<Value, ApiError> {
    let mut out = Map::new();
    for (num, wire) in Reader(bytes).fields()? {
        let Some(field) = msg.fields.iter().find(|f| f.num == num) else {
            if wire.is_zero() {
                continue;
            }
            return Err(unsupported(format!(
                "kos-kube-fake cannot read field {num} of the protobuf {} it was sent: send application/json",
                msg.name
            )));
        };
        let Some(v) = value(field, wire)? else {
            continue;
        };
        match field.ty {
            Ty::MapStr | Ty::MapBytes | Ty::MapQuantity => {
                let (k, v) = (v[0].clone(), v[1].clone());
                let m = out
                    .entry(field.name)
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .ok_or_else(malformed)?;
                m.insert(k.as_str().unwrap_or_default().to_owned(), v);
            }
            _ if field.repeated => {
                out.entry(field.name)
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .ok_or_else(malformed)?
                    .push(v);
            }
            _ => {
                out.insert(field.name.to_owned(), v);
            }
        }
    }
    Ok(Value::Object(out))
}

/// One field's JSON value (a `[key, value]` pair for map entries), `None` when Go's JSON would
/// leave it out.
fn value(field: &Field, wire: Wire<'_>) -> Result<Option<Value>, ApiError> {
    let keep = field.keep_zero || field.repeated;
    // Two's complement varints: int32 and int64 values come as u64.
    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
    let v = match (field.ty, wire) {
        (Ty::Str, Wire::Len(b)) => {
            let s = utf8(b)?;
            (keep || !s.is_empty()).then(|| json!(s))
        }
        (Ty::I32, Wire::Varint(n)) => (keep || n != 0).then(|| json!(n as i64 as i32)),
        (Ty::I64, Wire::Varint(n)) => (keep || n != 0).then(|| json!(n as i64)),
        (Ty::Bool, Wire::Varint(n)) => (keep || n != 0).then(|| json!(n != 0)),
        (Ty::Msg(m), Wire::Len(b)) => Some(message(b, m)?),
        (Ty::Time, Wire::Len(b)) => time(b)?,
        (Ty::IntOrString, Wire::Len(b)) => Some(int_or_string(b)?),
        (Ty::MapStr | Ty::MapBytes | Ty::MapQuantity, Wire::Len(b)) => {
            let mut key = String::new();
            let mut val = match field.ty {
                Ty::MapStr | Ty::MapQuantity => json!(""),
                _ => json!(base64::engine::general_purpose::STANDARD.encode([])),
            };
            for (n, w) in Reader(b).fields()? {
                match (n, w) {
                    (1, Wire::Len(k)) => key = utf8(k)?,
                    (2, Wire::Len(x)) => {
                        val = match field.ty {
                            Ty::MapStr => json!(utf8(x)?),
                            Ty::MapBytes => {
                                json!(base64::engine::general_purpose::STANDARD.encode(x))
                            }
                            _ => quantity(x)?,
                        }
                    }
                    _ => return Err(malformed()),
                }
            }
            Some(json!([key, val]))
        }
        _ => return Err(malformed()),
    };
    Ok(v)
}

/// `meta/v1.Time`: seconds and nanos since the epoch, RFC 3339 in JSON; zero is no time.
fn time(b: &[u8]) -> Result<Option<Value>, ApiError> {
    let (mut secs, mut nanos) = (0i64, 0u32);
    for (n, w) in Reader(b).fields()? {
        #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
        match (n, w) {
            (1, Wire::Varint(v)) => secs = v as i64,
            (2, Wire::Varint(v)) => nanos = v as u32,
            _ => return Err(malformed()),
        }
    }
    if secs == 0 && nanos == 0 {
        return Ok(None);
    }
    let t = chrono::DateTime::from_timestamp(secs, nanos).ok_or_else(malformed)?;
    Ok(Some(json!(
        t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )))
}

/// `intstr.IntOrString`: type (0 int, 1 string), intVal, strVal.
fn int_or_string(b: &[u8]) -> Result<Value, ApiError> {
    let (mut is_str, mut i, mut s) = (false, 0i64, String::new());
    for (n, w) in Reader(b).fields()? {
        #[allow(clippy::cast_possible_wrap)]
        match (n, w) {
            (1, Wire::Varint(v)) => is_str = v == 1,
            (2, Wire::Varint(v)) => i = i64::from(v as i64 as i32),
            (3, Wire::Len(x)) => s = utf8(x)?,
            _ => return Err(malformed()),
        }
    }
    Ok(if is_str { json!(s) } else { json!(i) })
}

/// `resource.Quantity`: its string form.
fn quantity(b: &[u8]) -> Result<Value, ApiError> {
    let mut s = String::new();
    for (n, w) in Reader(b).fields()? {
        match (n, w) {
            (1, Wire::Len(x)) => s = utf8(x)?,
            _ => return Err(malformed()),
        }
    }
    Ok(json!(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn len_field(num: u64, payload: &[u8], out: &mut Vec<u8>) {
        varint(num << 3 | 2, out);
        varint(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }

    #[test]
    fn a_config_map_decodes_with_zero_fields_left_out() -> Result<(), ApiError> {
        let mut meta = Vec::new();
        len_field(1, b"settings", &mut meta);
        len_field(2, b"", &mut meta); // generateName: "", as Go writes it
        let mut entry = Vec::new();
        len_field(1, b"mode", &mut entry);
        len_field(2, b"fast", &mut entry);
        let mut cm = Vec::new();
        len_field(1, &meta, &mut cm);
        len_field(2, &entry, &mut cm);
        varint(99 << 3, &mut cm); // an unknown field, zero: ignored
        varint(0, &mut cm);
        let mut body = MAGIC.to_vec();
        let mut unknown = Vec::new();
        len_field(2, &cm, &mut unknown);
        body.extend(unknown);
        let v = decode(&body, &ResourceType::of::<ConfigMap>(true))?;
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "settings"}, "data": {"mode": "fast"}})
        );
        // An unknown field that carries data is refused, not dropped.
        let mut bad = cm.clone();
        varint(98 << 3, &mut bad);
        varint(7, &mut bad);
        let mut body = MAGIC.to_vec();
        let mut unknown = Vec::new();
        len_field(2, &bad, &mut unknown);
        body.extend(unknown);
        let e = decode(&body, &ResourceType::of::<ConfigMap>(true)).err();
        assert_eq!(e.map(|e| e.code), Some(415));
        Ok(())
    }
}
