//! What a booting guest does with its user_data, as far as the serial console shows it.
//!
//! Nova only checks that user_data is base64; cloud-init on the guest inflates it (gzip), and here
//! refuses anything but a cloud-config (plain, `## template: jinja`, or MIME multipart) with the
//! warning cloud-init writes on the console when it ignores user_data. A kos bootstrap (the `kos-bootstrap` script run from runcmd) writes the markers
//! its script writes, in the script's order, spread over the boot. Nothing really runs, so steps that
//! need a real Kubernetes API end with `skipped: simulated cloud`, never `ok`; so does the final
//! `bootstrap` marker. A `failed` marker on the console (injected through `/_sim/servers/{id}/console`)
//! stops the simulated script, as `set -e` stops the real one.

use std::io::Read;

use flate2::read::GzDecoder;
use serde_json::Value;

use super::Server;
use crate::clock::SimTime;

/// Where kos-bootstrap lands and its parameters file (`KOS_ROLE=...`).
const SCRIPT: &str = "/usr/local/sbin/kos-bootstrap";
const ENV_FILE: &str = "/etc/kos/bootstrap.env";
/// Inflated user_data larger than this is refused (cloud-init has no such limit; a gzip bomb guard).
const MAX_INFLATED: u64 = 4 << 20;
/// What a skipped step says.
pub const SKIPPED: &str = "skipped: simulated cloud";

/// A step of the bootstrap script: its marker name, cloud seconds it takes, and whether it needs a
/// running Kubernetes API (then it is reported skipped).
struct Step(&'static str, f64, bool);

/// kos-bootstrap's `main`, as its script runs it (crates/kos-bootstrap/src/scripts/bootstrap.sh).
const COMMON: &[Step] = &[
    Step("preflight", 1.0, false),
    Step("packages", 45.0, false),
    Step("kernel", 2.0, false),
    Step("containerd", 6.0, false),
    Step("metadata-block", 1.0, false),
];
const INIT: &[Step] = &[
    Step("kubeadm-init", 1.0, true),
    Step("cni", 1.0, true),
    Step("addons", 1.0, true),
];
const JOIN: &[Step] = &[Step("api-wait", 1.0, true), Step("kubeadm-join", 1.0, true)];

/// The text cloud-init sees: the base64-decoded bytes, inflated when gzipped.
pub(super) fn inflate(bytes: &[u8]) -> String {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        let inflated = GzDecoder::new(bytes)
            .take(MAX_INFLATED)
            .read_to_end(&mut out);
        if inflated.is_ok() {
            return String::from_utf8_lossy(&out).into_owned();
        }
    }
    String::from_utf8_lossy(bytes).into_owned()
}

/// What cloud-init makes of the user_data.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// Ignored, with the warning cloud-init logs (`<file>[WARNING]: <message>`).
    Refused(&'static str),
    /// A cloud-config kos-sim does not look into.
    CloudConfig,
    /// A kos bootstrap for this role (`init`, `join-control-plane`, `worker`, or what the file says).
    Kos(String),
}

fn classify(text: &str) -> Kind {
    let mut lines = text.lines().map(str::trim_end);
    let first = lines.next().unwrap_or_default();
    let body_is_cloud_config = match first {
        "#cloud-config" => true,
        "## template: jinja" => lines.next() == Some("#cloud-config"),
        _ => false,
    };
    if !body_is_cloud_config {
        let head = first.to_ascii_lowercase();
        if head.starts_with("content-type: multipart/") || head.starts_with("mime-version:") {
            return Kind::CloudConfig;
        }
        // Library mode runs no shell script either (README): stricter than cloud-init, never laxer.
        return Kind::Refused(
            "__init__.py[WARNING]: Unhandled non-multipart (text/x-not-multipart) userdata: 'not a cloud-config...'",
        );
    }
    let Ok(doc) = serde_saphyr::from_str::<Value>(text) else {
        return Kind::Refused(
            "util.py[WARNING]: Failed loading yaml blob. cloud-config is not valid YAML",
        );
    };
    if !(doc.is_object() || doc.is_null()) {
        return Kind::Refused(
            "util.py[WARNING]: Failed loading yaml blob. Yaml load allows (<class 'dict'>,) root types, but got another instead",
        );
    }
    let runs_kos = doc["runcmd"].as_array().is_some_and(|cmds| {
        cmds.iter().any(|c| match c {
            Value::String(s) => s.contains(SCRIPT),
            Value::Array(a) => a.first().and_then(Value::as_str) == Some(SCRIPT),
            _ => false,
        })
    });
    if !runs_kos {
        return Kind::CloudConfig;
    }
    let role = doc["write_files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["path"].as_str() == Some(ENV_FILE))
        .filter_map(|f| f["content"].as_str())
        .flat_map(str::lines)
        .find_map(|l| l.strip_prefix("KOS_ROLE="))
        .map(|v| v.trim_matches('\'').to_owned())
        .unwrap_or_default();
    Kind::Kos(role)
}

/// Console lines the boot writes after cloud-init starts, as (cloud seconds after ACTIVE, line).
fn script(user_data: Option<&str>) -> Vec<(f64, String)> {
    let role = match user_data.map(classify) {
        None | Some(Kind::CloudConfig) => return Vec::new(),
        Some(Kind::Refused(why)) => {
            return vec![(
                0.0,
                format!("[    9.345678] cloud-init[700]: 2026-01-01 00:00:09,345 - {why}"),
            )];
        }
        Some(Kind::Kos(role)) => role,
    };
    let steps = match role.as_str() {
        "init" => INIT,
        "join-control-plane" | "worker" => JOIN,
        other => {
            return vec![(
                1.0,
                format!("kos-bootstrap: preflight failed: unknown role {other}"),
            )];
        }
    };
    let mut at = 0.0;
    let mut out = Vec::new();
    for Step(name, secs, needs_api) in COMMON.iter().chain(steps) {
        at += secs;
        let outcome = if *needs_api { SKIPPED } else { "ok" };
        out.push((at, format!("kos-bootstrap: {name} {outcome}")));
    }
    out.push((at, format!("kos-bootstrap: bootstrap {SKIPPED}")));
    out
}

/// Schedules the boot's console lines on a server that just became ACTIVE for the first time.
pub(super) fn schedule(s: &mut Server, now: SimTime) {
    s.pending_console = script(s.user_data_decoded.as_deref())
        .into_iter()
        .map(|(secs, line)| (now.after(secs), line))
        .collect();
}

/// Writes the lines that are due. A stopped guest or a failed step ends the script.
pub(super) fn flush(s: &mut Server, now: SimTime) {
    if s.pending_console.is_empty() {
        return;
    }
    let failed = s
        .console
        .iter()
        .any(|l| l.starts_with("kos-bootstrap: ") && l.contains(" failed: "));
    if s.vm_state != "active" || failed {
        s.pending_console.clear();
        return;
    }
    let due = s
        .pending_console
        .iter()
        .take_while(|(t, _)| now.reached(*t))
        .count();
    s.console
        .extend(s.pending_console.drain(..due).map(|(_, l)| l));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write;

    use super::*;

    fn kos(role: &str) -> String {
        format!(
            "## template: jinja\n#cloud-config\n# kos cluster demo\nwrite_files:\n- path: {ENV_FILE}\n  owner: root:root\n  permissions: '0600'\n  content: |\n    KOS_ROLE='{role}'\n    KOS_K8S_VERSION='1.32.4'\nruncmd:\n- - {SCRIPT}\n  - run\n"
        )
    }

    #[test]
    fn gzip_is_inflated() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"#cloud-config\n").unwrap();
        assert_eq!(inflate(&enc.finish().unwrap()), "#cloud-config\n");
        assert_eq!(inflate(b"#cloud-config\n"), "#cloud-config\n");
    }

    #[test]
    fn only_cloud_configs_are_accepted() {
        assert_eq!(classify("#cloud-config\n{}\n"), Kind::CloudConfig);
        assert_eq!(
            classify("Content-Type: multipart/mixed; boundary=x\n"),
            Kind::CloudConfig
        );
        for bad in [
            "#!/bin/sh\necho hi\n",
            "",
            "## template: jinja\n#!/bin/sh\n",
        ] {
            assert!(matches!(classify(bad), Kind::Refused(_)), "{bad:?}");
        }
        assert!(matches!(classify("#cloud-config\n: [\n"), Kind::Refused(_)));
        assert_eq!(classify(&kos("worker")), Kind::Kos("worker".into()));
    }

    #[test]
    fn markers_follow_the_script_and_never_claim_api_steps() {
        let lines: Vec<String> = script(Some(&kos("init")))
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        assert_eq!(lines[0], "kos-bootstrap: preflight ok");
        assert!(lines.contains(&format!("kos-bootstrap: addons {SKIPPED}")));
        assert_eq!(
            lines.last().unwrap(),
            &format!("kos-bootstrap: bootstrap {SKIPPED}")
        );
        let join = script(Some(&kos("worker")));
        assert!(join.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(join.iter().any(|(_, l)| l.contains("kubeadm-join skipped")));
        assert!(
            script(Some("#!/bin/sh\n"))[0]
                .1
                .contains("[WARNING]: Unhandled non-multipart")
        );
        assert!(script(Some("#cloud-config\n{}\n")).is_empty());
    }
}
