//! Cinder's zones named apart from Nova's: with a CSI volume zone, cloud.conf's `[BlockStorage]` has
//! `ignore-volume-az = true` and the default StorageClass `parameters.availability`, so volumes are
//! made in that Cinder zone and reachable from the node that asked; without one, neither.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use kos_bootstrap::*;

fn conf(c: &ClusterInput) -> String {
    addons::cloud_conf(c).expose().to_string()
}

/// The `[BlockStorage]` section of a cloud.conf.
fn block_storage(conf: &str) -> &str {
    let (_, after) = conf.split_once("[BlockStorage]\n").unwrap();
    after.split("\n[").next().unwrap()
}

/// The rendered default StorageClass, parsed.
fn storage_class(c: &ClusterInput) -> serde_json::Value {
    let addons = render_addons(c).unwrap();
    let m = addons
        .iter()
        .find(|m| m.yaml.expose().contains("kind: StorageClass"))
        .expect("a StorageClass");
    serde_saphyr::from_str(m.yaml.expose()).unwrap()
}

#[test]
fn cloud_conf_ignores_the_volume_zone_only_with_a_csi_volume_zone() {
    let mut c = cluster("1.36.4", 1, 0);
    let plain = conf(&c);
    assert!(!plain.contains("ignore-volume-az"), "{plain}");

    c.cloud.csi_volume_zone = Some("nova".into());
    let zoned = conf(&c);
    let bs = block_storage(&zoned);
    assert!(
        bs.lines().any(|l| l == "ignore-volume-az = true"),
        "{zoned}"
    );
    assert!(bs.contains("node-volume-attach-limit = 256"), "{zoned}");
    // Only there: the CCM's sections are as before.
    assert_eq!(zoned.matches("ignore-volume-az").count(), 1, "{zoned}");
}

#[test]
fn the_default_storage_class_names_the_zone_only_with_a_csi_volume_zone() {
    for csi in [
        Csi::Cinder,
        Csi::Kos {
            image: "registry.example.com/kos/kos-csi:0.1.0".into(),
        },
    ] {
        let mut c = cluster("1.36.4", 1, 0);
        c.csi = csi;
        let plain = storage_class(&c);
        assert_eq!(plain["parameters"], serde_json::Value::Null, "{plain}");

        c.cloud.csi_volume_zone = Some("nova".into());
        let zoned = storage_class(&c);
        assert_eq!(zoned["parameters"]["availability"], "nova", "{zoned}");
        // The rest of the class is untouched.
        assert_eq!(zoned["provisioner"], plain["provisioner"]);
        assert_eq!(zoned["volumeBindingMode"], "WaitForFirstConsumer");
        assert_eq!(zoned["metadata"], plain["metadata"]);
    }
}

/// A zone is data, quoted whatever it holds; one that would break a line is refused.
#[test]
fn a_zone_is_one_quoted_value() {
    let mut c = cluster("1.36.4", 1, 0);
    c.cloud.csi_volume_zone = Some("zone: \"a\" # b".into());
    assert_eq!(
        storage_class(&c)["parameters"]["availability"],
        "zone: \"a\" # b"
    );
    c.cloud.csi_volume_zone = Some("nova\nkind: Secret".into());
    assert!(render_addons(&c).is_err());
    c.cloud.csi_volume_zone = Some(String::new());
    assert!(render_addons(&c).is_err());
}
