//! `#cloud-config` as cloud-init reads it: YAML 1.1 (PyYAML: `0644` is octal), a mapping of module
//! keys. `write_files` and `runcmd` are simulated with cloud-init's semantics (cc_write_files,
//! cc_runcmd); every other key is reported: known cloud-init keys as "not simulated", anything else
//! as unknown (cloud-init's schema check only warns about those, so a typo silently does nothing).

use base64::Engine;
use serde_json::{Map, Value};

use crate::vfs::abspath;

/// Top-level keys of cloud-init's config schema (modules and their options), so that an unknown key
/// can be told from one the guest merely does not simulate.
const KNOWN_KEYS: &[&str] = &[
    "ansible",
    "apk_repos",
    "apt",
    "apt_pipelining",
    "apt_preserve_sources_list",
    "autoinstall",
    "bootcmd",
    "byobu_by_default",
    "ca_certs",
    "ca-certs",
    "chef",
    "chpasswd",
    "cloud_config_modules",
    "cloud_final_modules",
    "cloud_init_modules",
    "create_hostname_file",
    "device_aliases",
    "disable_ec2_metadata",
    "disable_root",
    "disable_root_opts",
    "disk_setup",
    "drivers",
    "fan",
    "final_message",
    "fqdn",
    "fs_setup",
    "groups",
    "growpart",
    "hostname",
    "keyboard",
    "landscape",
    "locale",
    "locale_configfile",
    "lxd",
    "manage_etc_hosts",
    "manage_resolv_conf",
    "mcollective",
    "merge_how",
    "merge_type",
    "mount_default_fields",
    "mounts",
    "ntp",
    "output",
    "package_reboot_if_required",
    "package_update",
    "package_upgrade",
    "packages",
    "password",
    "phone_home",
    "power_state",
    "prefer_fqdn_over_hostname",
    "preserve_hostname",
    "puppet",
    "random_seed",
    "reporting",
    "resize_rootfs",
    "resolv_conf",
    "rh_subscription",
    "rsyslog",
    "runcmd",
    "salt_minion",
    "snap",
    "spacewalk",
    "ssh",
    "ssh_authorized_keys",
    "ssh_deletekeys",
    "ssh_fp_console_blacklist",
    "ssh_genkeytypes",
    "ssh_import_id",
    "ssh_key_console_blacklist",
    "ssh_keys",
    "ssh_publish_hostkeys",
    "ssh_pwauth",
    "ssh_quiet_keygen",
    "swap",
    "timezone",
    "ubuntu_advantage",
    "ubuntu_pro",
    "updates",
    "user",
    "users",
    "vendor_data",
    "wireguard",
    "write_files",
    "yum_repo_dir",
    "yum_repos",
    "zypper",
];

/// One `write_files` entry, decoded.
#[derive(Clone, PartialEq, Eq)]
pub struct WriteFile {
    pub path: String,
    pub content: Vec<u8>,
    pub owner: String,
    pub mode: u32,
    pub append: bool,
    pub defer: bool,
}

impl std::fmt::Debug for WriteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WriteFile({} {:o}, {} bytes)",
            self.path,
            self.mode,
            self.content.len()
        )
    }
}

/// One runcmd entry: cloud-init quotes a list into one shell line, a string is a shell line itself.
#[derive(Clone, PartialEq, Eq)]
pub enum Command {
    Argv(Vec<String>),
    Shell(String),
}

impl Command {
    /// The words, when a shell would split the line plainly (no quotes, variables or operators).
    pub fn words(&self) -> Option<Vec<String>> {
        match self {
            Command::Argv(a) => Some(a.clone()),
            Command::Shell(s) => {
                let plain = s
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b" /._-=:,+@".contains(&b));
                plain.then(|| s.split_whitespace().map(str::to_owned).collect())
            }
        }
    }

    /// What a report may say about the command: its program only (arguments may hold secrets).
    pub fn program(&self) -> String {
        let first = match self {
            Command::Argv(a) => a.first().cloned().unwrap_or_default(),
            Command::Shell(s) => s.split_whitespace().next().unwrap_or_default().to_owned(),
        };
        first.chars().take(80).collect()
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Command({})", self.program())
    }
}

/// A parsed cloud-config: what the guest simulates, and the reports for the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudConfig {
    pub keys: Map<String, Value>,
}

/// Parses one cloud-config part.
pub fn parse(text: &str) -> Result<CloudConfig, String> {
    let mut options = serde_saphyr::Options::default();
    // PyYAML is YAML 1.1: an unquoted 0644 is octal 420, as cloud-init reads it.
    options.legacy_octal_numbers = true;
    // Errors go to the console: never a snippet of the (secret-bearing) source.
    options.with_snippet = false;
    let doc: Value = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
        format!(
            "cloud-config is not valid YAML: {}",
            first_line(&e.to_string())
        )
    })?;
    match doc {
        Value::Null => Ok(CloudConfig::default()),
        Value::Object(keys) => Ok(CloudConfig { keys }),
        _ => Err("cloud-config is not a mapping".into()),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

impl CloudConfig {
    /// Merges a later part in, as cloud-init's default `dict(replace)+list()+str()`: a later
    /// top-level key replaces the earlier one.
    pub fn merge(&mut self, later: CloudConfig) {
        self.keys.extend(later.keys);
    }

    /// Reports for every key the guest does not simulate.
    pub fn unsimulated_keys(&self) -> Vec<String> {
        self.keys
            .keys()
            .filter(|k| !matches!(k.as_str(), "write_files" | "runcmd" | "apt"))
            .map(|k| {
                if KNOWN_KEYS.contains(&k.as_str()) {
                    format!("cloud-config key {k:?} is not simulated by kos-guest")
                } else {
                    format!(
                        "unknown cloud-config key {k:?} (cloud-init only warns about it, so it does nothing)"
                    )
                }
            })
            .collect()
    }

    /// `apt.primary` and `apt.security` (cc_apt_configure): the archive each names for this
    /// machine's architecture (an entry whose `arches` has `amd64` or `default`, the first that
    /// matches); reports for the rest of `apt`, which the guest does not simulate.
    pub fn apt(&self, warnings: &mut Vec<String>) -> Result<AptArchives, String> {
        let Some(v) = self.keys.get("apt") else {
            return Ok(AptArchives::default());
        };
        let Some(apt) = v.as_object() else {
            return Err("apt is not a mapping".into());
        };
        let mut out = AptArchives::default();
        for (k, v) in apt {
            let slot = match k.as_str() {
                "primary" => &mut out.primary,
                "security" => &mut out.security,
                other => {
                    warnings.push(format!("apt.{other} is not simulated by kos-guest"));
                    continue;
                }
            };
            let Some(list) = v.as_array() else {
                return Err(format!("apt.{k} is not a list"));
            };
            for (i, entry) in list.iter().enumerate() {
                let Some(e) = entry.as_object() else {
                    return Err(format!("apt.{k} entry {} is not a mapping", i + 1));
                };
                let Some(arches) = e.get("arches").and_then(Value::as_array) else {
                    return Err(format!(
                        "apt.{k} entry {}: 'arches' is a required property",
                        i + 1
                    ));
                };
                let ours = arches
                    .iter()
                    .any(|a| matches!(a.as_str(), Some("default" | "amd64")));
                if !ours {
                    continue;
                }
                for key in e.keys() {
                    if !matches!(key.as_str(), "arches" | "uri") {
                        warnings.push(format!(
                            "apt.{k} entry {}: {key} is not simulated by kos-guest",
                            i + 1
                        ));
                    }
                }
                if let Some(uri) = e.get("uri").and_then(Value::as_str) {
                    *slot = Some(uri.trim_end_matches('/').to_owned());
                }
                break;
            }
        }
        Ok(out)
    }

    /// The `write_files` entries, decoded; warnings for what cloud-init skips or defaults.
    pub fn write_files(&self, warnings: &mut Vec<String>) -> Result<Vec<WriteFile>, String> {
        let Some(v) = self.keys.get("write_files") else {
            return Ok(Vec::new());
        };
        let Some(list) = v.as_array() else {
            return Err("write_files is not a list".into());
        };
        let mut out = Vec::new();
        for (i, entry) in list.iter().enumerate() {
            let n = i + 1;
            let Some(f) = entry.as_object() else {
                return Err(format!("write_files entry {n} is not a mapping"));
            };
            for k in f.keys() {
                if !matches!(
                    k.as_str(),
                    "path"
                        | "content"
                        | "source"
                        | "owner"
                        | "permissions"
                        | "encoding"
                        | "append"
                        | "defer"
                ) {
                    warnings.push(format!(
                        "write_files entry {n}: unknown key {k:?} (cloud-init ignores it)"
                    ));
                }
            }
            if f.contains_key("source") {
                return Err(format!(
                    "write_files entry {n}: source (download from a URL) is not simulated by kos-guest"
                ));
            }
            let path = match f.get("path") {
                Some(Value::String(p)) if !p.is_empty() => abspath(p),
                _ => {
                    warnings.push(format!(
                        "No path provided to write for entry {n} in module write_files"
                    ));
                    continue;
                }
            };
            let encoding = match f.get("encoding") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.trim().to_ascii_lowercase(),
                Some(_) => return Err(format!("write_files entry {n}: encoding is not a string")),
            };
            let raw = match f.get("content") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(s)) => s.clone().into_bytes(),
                Some(_) => {
                    return Err(format!(
                        "write_files entry {n} ({path}): content is not a string"
                    ));
                }
            };
            let content = extract(&raw, &encoding, warnings)
                .map_err(|e| format!("write_files entry {n} ({path}): {e}"))?;
            let owner = match f.get("owner") {
                None | Some(Value::Null) => "root:root".to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(_) => {
                    return Err(format!(
                        "write_files entry {n} ({path}): owner is not a string"
                    ));
                }
            };
            out.push(WriteFile {
                mode: decode_perms(f.get("permissions"), n, warnings),
                append: cfg_bool(f.get("append")),
                defer: cfg_bool(f.get("defer")),
                path,
                content,
                owner,
            });
        }
        Ok(out)
    }

    /// The `runcmd` entries.
    pub fn runcmd(&self) -> Result<Vec<Command>, String> {
        let Some(v) = self.keys.get("runcmd") else {
            return Ok(Vec::new());
        };
        let Some(list) = v.as_array() else {
            return Err("runcmd is not a list".into());
        };
        list.iter()
            .map(|c| match c {
                Value::String(s) => Ok(Command::Shell(s.clone())),
                Value::Array(words) => words
                    .iter()
                    .map(|w| match w {
                        Value::String(s) => Ok(s.clone()),
                        Value::Number(n) => Ok(n.to_string()),
                        Value::Bool(b) => Ok(if *b { "True" } else { "False" }.to_owned()),
                        _ => Err("runcmd: unable to shellify a nested list or mapping".to_owned()),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Command::Argv),
                other => Err(format!(
                    "Unable to shellify type '{}'. Expected list, string, tuple.",
                    json_type(other)
                )),
            })
            .collect()
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// cc_write_files' `canonicalize_extraction` + `extract_contents`.
fn extract(raw: &[u8], encoding: &str, warnings: &mut Vec<String>) -> Result<Vec<u8>, String> {
    let b64 = |data: &[u8]| {
        let compact: Vec<u8> = data
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map_err(|e| format!("content is not valid base64 ({e})"))
    };
    let gunzip = |data: &[u8]| {
        use std::io::Read;
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(data)
            .read_to_end(&mut out)
            .map(|_| out)
            .map_err(|e| format!("content is not valid gzip ({e})"))
    };
    match encoding {
        "gz" | "gzip" => gunzip(raw),
        "gz+base64" | "gzip+base64" | "gz+b64" | "gzip+b64" => gunzip(&b64(raw)?),
        "b64" | "base64" => b64(raw),
        "" | "text/plain" => Ok(raw.to_vec()),
        other => {
            warnings.push(format!(
                "Unknown encoding type {other}, assuming text/plain"
            ));
            Ok(raw.to_vec())
        }
    }
}

/// cc_write_files' `decode_perms`: a YAML number is taken as is, a string as octal; anything
/// undecodable falls back to 0644 with a warning.
fn decode_perms(v: Option<&Value>, n: usize, warnings: &mut Vec<String>) -> u32 {
    const DEFAULT: u32 = 0o644;
    match v {
        None | Some(Value::Null) => DEFAULT,
        Some(Value::Number(num)) => num
            .as_u64()
            .or_else(|| num.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .and_then(|x| u32::try_from(x).ok())
            .unwrap_or(DEFAULT),
        Some(other) => {
            let s = match other {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            u32::from_str_radix(s.trim().trim_start_matches("0o"), 8).unwrap_or_else(|_| {
                warnings.push(format!(
                    "write_files entry {n}: Undecodable permissions {s}, returning default 644"
                ));
                DEFAULT
            })
        }
    }
}

/// cloud-init's `get_cfg_option_bool`: true for `true`, and for the strings `true`, `1`, `on`, `yes`.
/// The archives `apt` names in place of the image's (`None`: the image's own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AptArchives {
    pub primary: Option<String>,
    pub security: Option<String>,
}

fn cfg_bool(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_i64() == Some(1),
        Some(Value::String(s)) => matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "true" | "1" | "on" | "yes"
        ),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn write_files_follow_cloud_init() {
        let cc = parse(
            "#cloud-config\nwrite_files:\n- path: /a\n  permissions: 0644\n  content: x\n- path: b\n  permissions: '0600'\n  encoding: b64\n  content: aGk=\n  defer: true\n- content: nopath\n- path: /c\n  permissions: rwx\n  encoding: rot13\n  append: 'yes'\n",
        )
        .unwrap();
        let mut w = Vec::new();
        let files = cc.write_files(&mut w).unwrap();
        assert_eq!(files.len(), 3);
        assert_eq!(
            (files[0].mode, files[0].owner.as_str()),
            (0o644, "root:root")
        );
        assert_eq!(
            (
                files[1].path.as_str(),
                files[1].content.as_slice(),
                files[1].mode,
                files[1].defer
            ),
            ("/b", &b"hi"[..], 0o600, true)
        );
        assert_eq!((files[2].mode, files[2].append), (0o644, true));
        assert_eq!(w.len(), 3, "{w:?}");
    }

    /// cloud-init's apt module: the entry for this machine's architecture, the first that matches;
    /// the rest of `apt` reported, `arches` required.
    #[test]
    fn apt_primary_and_security_for_this_architecture() {
        let cc = parse(
            "#cloud-config\napt:\n  primary:\n  - arches: [arm64]\n    uri: http://ports.example/ubuntu\n  - arches: [default]\n    uri: http://mirror.example/ubuntu/\n  security:\n  - arches: [amd64]\n    uri: http://sec.example/ubuntu\n    search: [x]\n  conf: x\n",
        )
        .unwrap();
        let mut warnings = Vec::new();
        let apt = cc.apt(&mut warnings).unwrap();
        assert_eq!(apt.primary.as_deref(), Some("http://mirror.example/ubuntu"));
        assert_eq!(apt.security.as_deref(), Some("http://sec.example/ubuntu"));
        assert!(
            warnings
                .iter()
                .any(|w| w == "apt.conf is not simulated by kos-guest")
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("search is not simulated"))
        );
        assert!(!cc.unsimulated_keys().iter().any(|k| k.contains("\"apt\"")));
        let bad = parse("#cloud-config\napt:\n  primary:\n  - uri: http://m/ubuntu\n").unwrap();
        assert!(
            bad.apt(&mut Vec::new())
                .unwrap_err()
                .contains("'arches' is a required property")
        );
        let none = parse("#cloud-config\nruncmd: []\n").unwrap();
        assert_eq!(none.apt(&mut Vec::new()).unwrap(), AptArchives::default());
    }

    #[test]
    fn unknown_keys_and_runcmd_shapes() {
        let cc =
            parse("#cloud-config\nruncmd:\n- [ls, -l]\n- echo hi\nwrte_files: []\npackages: []\n")
                .unwrap();
        let r = cc.unsimulated_keys();
        assert!(
            r.iter()
                .any(|m| m.contains("unknown cloud-config key \"wrte_files\""))
        );
        assert!(
            r.iter()
                .any(|m| m.contains("\"packages\" is not simulated"))
        );
        assert_eq!(
            cc.runcmd().unwrap()[0],
            Command::Argv(vec!["ls".into(), "-l".into()])
        );
        assert!(
            parse("#cloud-config\nruncmd:\n- 3\n")
                .unwrap()
                .runcmd()
                .is_err()
        );
        assert!(parse("- a\n").is_err());
    }
}
