//! `kos backup` and `kos restore`: a cluster whose secrets this machine lost is taken on again from
//! a backup sealed with the user's passphrase, and `kos up` continues it without replacing a server.
//! The backup is 0600, shows no secret, opens with its passphrase only, is never overwritten, and a
//! restore never writes over another cluster's secrets.

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use support::{cluster_dir, code, example, kos, text};

const PASSPHRASE: &str = "correct horse battery staple";

fn server_ids(d: &Path) -> Vec<String> {
    let o = kos(
        d,
        None,
        &["status", "demo", "--cloud", "sim", "--output", "json"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let mut ids: Vec<String> = doc["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter(|r| r["kind"] == "server")
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .collect();
    ids.sort();
    assert!(!ids.is_empty(), "no servers in {doc}");
    ids
}

#[test]
fn a_cluster_whose_secrets_were_lost_is_continued_from_its_backup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let up = kos(d, None, &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    let servers = server_ids(d);
    let demo = cluster_dir(d, "sim", "demo");
    let pki = std::fs::read_to_string(demo.join("pki.json")).expect("pki");

    let pass = d.join("passphrase");
    std::fs::write(&pass, format!("{PASSPHRASE}\n")).expect("passphrase");
    let pass = pass.to_str().expect("utf8");
    let o = kos(d, None, &["backup", "demo", "--cloud", "sim"]);
    assert_eq!(code(&o), 3, "no passphrase: {}", text(&o));
    assert!(text(&o).contains("KOS_BACKUP_PASSPHRASE"), "{}", text(&o));
    let o = kos(
        d,
        None,
        &[
            "backup",
            "demo",
            "--cloud",
            "sim",
            "--passphrase-file",
            pass,
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let file = d.join("demo.kos-backup");
    let sealed = std::fs::read_to_string(&file).expect("backup");
    assert_eq!(
        std::fs::metadata(&file).expect("meta").permissions().mode() & 0o777,
        0o600
    );
    assert!(
        !sealed.contains("PRIVATE KEY") && !sealed.contains("BEGIN"),
        "{sealed}"
    );
    // No secret of the PKI shows through, nor in what kos printed.
    let pki_doc: serde_json::Value = serde_json::from_str(&pki).expect("pki json");
    let mut secrets = Vec::new();
    collect_strings(&pki_doc, &mut secrets);
    for s in secrets.iter().filter(|s| s.len() >= 16) {
        assert!(!sealed.contains(s.as_str()), "a PKI value in the backup");
        assert!(!text(&o).contains(s.as_str()), "a PKI value printed");
    }
    // Never overwritten.
    let again = kos(
        d,
        None,
        &[
            "backup",
            "demo",
            "--cloud",
            "sim",
            "--passphrase-file",
            pass,
        ],
    );
    assert_eq!(code(&again), 3, "{}", text(&again));
    assert_eq!(std::fs::read_to_string(&file).expect("backup"), sealed);

    // This machine loses the cluster's files: kos up cannot continue it.
    let lost = d.join("lost");
    std::fs::rename(&demo, &lost).expect("lose the files");
    let o = kos(d, None, &["up", "-f", spec, "--cloud", "sim"]);
    assert_ne!(code(&o), 0, "continued without its secrets: {}", text(&o));
    assert_eq!(
        server_ids(d),
        servers,
        "a run without the secrets replaced servers"
    );

    // A wrong passphrase opens nothing and writes nothing.
    let wrong = d.join("wrong");
    std::fs::write(&wrong, "not the passphrase at all\n").expect("wrong");
    let file_arg = file.to_str().expect("utf8");
    let o = kos(
        d,
        None,
        &[
            "restore",
            file_arg,
            "--cloud",
            "sim",
            "--passphrase-file",
            wrong.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(text(&o).contains("passphrase is wrong"), "{}", text(&o));
    assert!(!cluster_dir(d, "sim", "demo").join("pki.json").exists());

    // Restored (the passphrase from the environment), the same secrets are back and kos up goes on.
    let o = support::isolated(d, None, &["restore", file_arg, "--cloud", "sim"])
        .env("KOS_BACKUP_PASSPHRASE", PASSPHRASE)
        .output()
        .expect("kos runs");
    assert_eq!(code(&o), 0, "{}", text(&o));
    let demo = cluster_dir(d, "sim", "demo");
    assert_eq!(
        std::fs::read_to_string(demo.join("pki.json")).expect("pki"),
        pki
    );
    assert_eq!(
        std::fs::metadata(demo.join("pki.json"))
            .expect("meta")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let o = kos(d, None, &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(server_ids(d), servers, "a server was replaced");
    let o = kos(d, None, &["kubeconfig", "demo", "--cloud", "sim"]);
    assert_eq!(code(&o), 0, "{}", text(&o));

    // Another cluster's secrets under that name are never written over.
    let other = demo.join("pki.json");
    let mut doc = pki_doc.clone();
    doc["tampered"] = serde_json::json!(true);
    std::fs::write(&other, doc.to_string()).expect("other pki");
    let o = kos(
        d,
        None,
        &[
            "restore",
            file_arg,
            "--cloud",
            "sim",
            "--passphrase-file",
            pass,
        ],
    );
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(text(&o).contains("differs"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(&other).expect("pki"),
        doc.to_string()
    );
}

fn collect_strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}
