//! The Cluster CRD's schema and kos's spec reader tell one story: every object the reader reads
//! has exactly the fields the CRD lists, every example is valid under both, and an API server
//! (kos-kube-fake, which prunes and checks custom resources against their CRD's structural schema
//! as apiextensions does) serves the CRD and refuses what the schema refuses.

mod support;

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kos_operator::resource::{Cluster, ClusterSpec};
use kube::api::{Api, Patch, PatchParams, PostParams, ValidationDirective};
use serde_json::{Value, json};

const UNKNOWN: &str = "zzzUnknownKey";

fn documents() -> Vec<(String, Value)> {
    support::documents()
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read");
            let doc: Value = serde_saphyr::from_str(&text).expect("yaml");
            (p.display().to_string(), doc)
        })
        .collect()
}

/// The CRD's schema of `spec`, without the operator's own `identityRef` and the document's
/// `metadata.tags` (`tags`).
fn spec_schema() -> Value {
    let crd = serde_json::to_value(kos_operator::resource::crd()).expect("crd");
    let mut spec = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
        .expect("spec schema")
        .clone();
    spec["properties"]
        .as_object_mut()
        .expect("properties")
        .remove("identityRef");
    spec["properties"]
        .as_object_mut()
        .expect("properties")
        .remove("tags");
    spec
}

/// The schema's objects with named fields, as paths (`nodePools[]`) and their field names.
fn schema_objects(schema: &Value, path: String, out: &mut Vec<(String, BTreeSet<String>)>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        out.push((path.clone(), props.keys().cloned().collect()));
        for (k, v) in props {
            schema_objects(v, format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = schema.get("items") {
        schema_objects(items, format!("{path}[]"), out);
    }
}

/// A document's objects that the schema gives named fields: their JSON pointer, their schema path
/// and the schema's field names.
fn visit(
    node: &Value,
    schema: &Value,
    pointer: String,
    path: String,
    out: &mut Vec<(String, String, BTreeSet<String>)>,
) {
    if let (Some(obj), Some(props)) = (
        node.as_object(),
        schema.get("properties").and_then(Value::as_object),
    ) {
        out.push((
            pointer.clone(),
            path.clone(),
            props.keys().cloned().collect(),
        ));
        for (k, v) in obj {
            if let Some(s) = props.get(k) {
                visit(v, s, format!("{pointer}/{k}"), format!("{path}.{k}"), out);
            }
        }
    }
    if let (Some(list), Some(items)) = (node.as_array(), schema.get("items")) {
        for (i, v) in list.iter().enumerate() {
            visit(v, items, format!("{pointer}/{i}"), format!("{path}[]"), out);
        }
    }
}

/// What kos's reader says the fields of the object at `pointer` are: the help of its
/// unknown-field diagnostic.
fn reader_fields(doc: &Value, pointer: &str) -> BTreeSet<String> {
    let mut doc = doc.clone();
    doc.pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .expect("object")
        .insert(UNKNOWN.into(), json!("x"));
    let text = serde_json::to_string_pretty(&doc).expect("json");
    let errors = kos_cluster::load("doc.yaml", &text).expect_err("an unknown field is refused");
    let d = errors
        .errors()
        .find(|d| d.code == kos_cluster::Code::UnknownField && d.field.ends_with(UNKNOWN))
        .unwrap_or_else(|| panic!("no unknown-field error at {pointer}: {errors:?}"));
    let help = d.help.as_deref().expect("help");
    let list = help
        .strip_prefix("known fields here: ")
        .unwrap_or_else(|| panic!("{pointer}: {help}"));
    list.split(", ")
        .map(|f| f.trim_matches('`').to_owned())
        .collect()
}

#[test]
fn every_object_the_reader_reads_has_the_fields_the_crd_lists() {
    let schema = spec_schema();
    let mut wanted = Vec::new();
    schema_objects(&schema, "spec".into(), &mut wanted);
    let mut covered = BTreeSet::new();
    for (name, doc) in documents() {
        let text = serde_json::to_string(&doc).expect("json");
        if let Err(e) = kos_cluster::load(&name, &text) {
            panic!("{name} is not valid for kos: {e:?}");
        }
        let mut objects = Vec::new();
        visit(
            &doc["spec"],
            &schema,
            "/spec".into(),
            "spec".into(),
            &mut objects,
        );
        for (pointer, path, fields) in objects {
            assert_eq!(
                reader_fields(&doc, &pointer),
                fields,
                "{name}: {path}: the reader's fields (left) and the CRD's (right) differ"
            );
            covered.insert(path);
        }
    }
    let missed: Vec<&String> = wanted
        .iter()
        .map(|(p, _)| p)
        .filter(|p| !covered.contains(*p))
        .collect();
    assert!(
        missed.is_empty(),
        "no example or fixture has these objects, so their fields went unchecked: {missed:?}"
    );
}

#[test]
fn every_example_is_a_cluster_resource() {
    let mut tagged = 0;
    for (name, doc) in documents() {
        let mut spec = doc["spec"].clone();
        spec["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
        if let Some(tags) = doc["metadata"].get("tags") {
            spec["tags"] = tags.clone();
            tagged += 1;
        }
        let parsed: ClusterSpec =
            serde_json::from_value(spec.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Nothing is lost on the way through the types: the operator hands kos this text.
        assert_eq!(serde_json::to_value(&parsed).expect("json"), spec, "{name}");
        // The document the operator reads is the example's, tags included.
        let cluster = Cluster::new(doc["metadata"]["name"].as_str().expect("name"), parsed);
        let read = kos_cluster::load("operator", &kos_operator::reconcile::document(&cluster))
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let original = kos_cluster::load(&name, &serde_json::to_string(&doc).expect("json"))
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let names = |l: &kos_cluster::Loaded| {
            l.spec
                .tags
                .iter()
                .map(|t| t.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&read), names(&original), "{name}");
    }
    assert!(tagged > 0, "no example has metadata.tags");
}

#[tokio::test]
async fn an_api_server_serves_the_crd_and_refuses_what_the_schema_refuses() {
    let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
    let client = fake.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &kos_operator::resource::crd())
        .await
        .expect("the CRD is accepted");
    let clusters: Api<Cluster> = Api::namespaced(client, "default");
    let strict = PatchParams {
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::apply("test")
    };
    for (name, doc) in documents() {
        let mut obj = json!({
            "apiVersion": "kos.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": doc["metadata"]["name"]},
            "spec": doc["spec"],
        });
        obj["spec"]["identityRef"] = json!({"name": "cloud", "cloudName": "openstack"});
        let n = doc["metadata"]["name"].as_str().expect("name").to_owned();
        let stored = clusters
            .patch(&n, &strict, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            serde_json::to_value(&stored.spec).expect("json"),
            obj["spec"],
            "{name}: the server pruned nothing"
        );
    }
    let base = json!({
        "apiVersion": "kos.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "bad"},
        "spec": {
            "identityRef": {"name": "cloud", "cloudName": "openstack"},
            "network": {"create": {"cidr": "10.0.0.0/24"}},
            "controlPlane": {"count": 1, "flavor": "m1.medium", "image": "ubuntu-24.04"},
        },
    });
    let refused = |edit: &dyn Fn(&mut Value)| {
        let mut obj = base.clone();
        edit(&mut obj);
        obj
    };
    for (why, obj) in [
        (
            "a misspelt field",
            refused(&|o| o["spec"]["controlPlane"]["flavour"] = json!("m1.large")),
        ),
        (
            "an even control-plane count",
            refused(&|o| o["spec"]["controlPlane"]["count"] = json!(2)),
        ),
        (
            "a misspelt autoscaling bound",
            refused(&|o| {
                o["spec"]["nodePools"] = json!([{"name": "workers", "count": 1,
                    "flavor": "m1.medium", "image": "ubuntu-24.04",
                    "autoscaling": {"min": 0, "maxSize": 3}}]);
            }),
        ),
        (
            "an unknown CNI",
            refused(&|o| o["spec"]["addons"] = json!({"cni": "weave"})),
        ),
        (
            "no identityRef",
            refused(&|o| {
                o["spec"]
                    .as_object_mut()
                    .expect("spec")
                    .remove("identityRef");
            }),
        ),
    ] {
        let r = clusters.patch("bad", &strict, &Patch::Apply(&obj)).await;
        assert!(r.is_err(), "{why} was accepted");
    }
}
