//! cloud-init on first boot, as the guest sees its user_data: decode ([`userdata`]), render Jinja
//! ([`jinja`]), parse and merge the cloud-configs ([`config`]), then run the simulated modules in
//! cloud-init's stage order: `write_files` (init stage), `apt_configure` (config stage: `apt.primary`
//! and `apt.security` replace the image's archives in its deb822 sources), `runcmd` (config stage
//! writes the script),
//! `write_files` entries with `defer: true` (final stage, `write_files_deferred`), and the runcmd
//! script (final stage, `scripts_user`). A failing module is reported and the next one runs, as in
//! cloud-init.

pub mod config;
pub mod jinja;
pub mod userdata;

use crate::seam::{Image, Metadata};
use crate::vfs::Vfs;
use config::{CloudConfig, Command};
use userdata::Part;

/// What cloud-init did with the user_data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// runcmd, in order, to be run by the final stage.
    pub commands: Vec<Command>,
    /// What cloud-init warns about or the guest does not simulate: each is reported.
    pub reports: Vec<String>,
    /// What failed: cloud-init warns about each on the console and goes on without it.
    pub failures: Vec<Failure>,
}

/// Something cloud-init gave up on. Real cloud-init logs each at WARNING and carries on, so the
/// console's warning line is all a watcher sees; the guest words each as cloud-init's own code
/// does (cloudinit/handlers/__init__.py, handlers/jinja_template.py, util.py `load_yaml`,
/// config/modules.py), with the guest's reason where cloud-init's message has room for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The user_data (or what it decodes to) is no format cloud-init handles.
    Unhandled(String),
    /// A Jinja template cloud-init could not render: it ignores the whole part.
    Jinja(String),
    /// A cloud-config that is not YAML, or not a mapping: cloud-init ignores it.
    Yaml(String),
    /// A module raised: cloud-init logs only that it failed (the cause goes to its debug log).
    Module { name: &'static str, detail: String },
}

impl Failure {
    /// The console line cloud-init's console handler writes for it, after `asctime`
    /// (`%(asctime)s - %(filename)s[%(levelname)s]: %(message)s`, config/cloud.cfg.d/05_logging.cfg).
    pub fn warning(&self, asctime: &str) -> String {
        let (file, message) = match self {
            Failure::Unhandled(why) => (
                "__init__.py",
                format!("Unhandled non-multipart (text/x-not-multipart) userdata: '{why}...'"),
            ),
            Failure::Jinja(why) => (
                "jinja_template.py",
                format!(
                    "Ignoring jinja template for /var/lib/cloud/instance/user-data.txt. Failed to render template. {why}"
                ),
            ),
            Failure::Yaml(why) => ("util.py", format!("Failed loading yaml blob. {why}")),
            Failure::Module { name, .. } => (
                "modules.py",
                format!(
                    "Running module {name} (<module 'cloudinit.config.cc_{name}' from '/usr/lib/python3/dist-packages/cloudinit/config/cc_{name}.py'>) failed"
                ),
            ),
        };
        format!("{asctime} - {file}[WARNING]: {message}")
    }

    /// The guest's own account of a failure whose warning holds no reason.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Failure::Module { detail, .. } => Some(detail),
            _ => None,
        }
    }
}

/// Where the image's apt sources are (deb822, as Ubuntu 24.04 and Debian 12 cloud images have
/// them).
pub fn sources_path(image: &Image) -> String {
    format!("/etc/apt/sources.list.d/{}.sources", image.os_id)
}

/// The image's sources with `apt`'s archives in place of its own: `<release>` and
/// `<release>-updates` from the primary archive, `<release>-security` from the security one.
fn apt_sources(image: &Image, apt: &config::AptArchives) -> String {
    let (primary, security) = image.apt_archives();
    let primary = apt.primary.as_deref().unwrap_or(primary);
    let security = apt.security.as_deref().unwrap_or(security);
    let r = &image.release;
    format!(
        "Types: deb\nURIs: {primary}\nSuites: {r} {r}-updates\nComponents: main\n\nTypes: deb\nURIs: {security}\nSuites: {r}-security\nComponents: main\n"
    )
}

/// The (archive, suite) pairs a node's apt sources name: its sources file, or the image's own
/// archives when there is none.
pub fn apt_suites(image: &Image, vfs: &Vfs) -> Vec<(String, String)> {
    let Some(text) = vfs.text(&sources_path(image)) else {
        let (primary, security) = image.apt_archives();
        let r = &image.release;
        return vec![
            (primary.to_owned(), r.clone()),
            (primary.to_owned(), format!("{r}-updates")),
            (security.to_owned(), format!("{r}-security")),
        ];
    };
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name).map(str::trim))
                .unwrap_or_default()
        };
        for uri in field("URIs:").split_whitespace() {
            for suite in field("Suites:").split_whitespace() {
                out.push((uri.trim_end_matches('/').to_owned(), suite.to_owned()));
            }
        }
    }
    out
}

/// Runs cloud-init's per-instance handling of `user_data` on a node's filesystem.
pub fn run(user_data: Option<&[u8]>, meta: &Metadata, image: &Image, vfs: &mut Vfs) -> Outcome {
    let mut out = Outcome::default();
    let Some(bytes) = user_data else {
        return out;
    };
    let parts = match userdata::parts(bytes) {
        Ok(p) => p,
        Err(e) => {
            out.failures.push(Failure::Unhandled(e.to_string()));
            return out;
        }
    };
    let v1 = jinja::v1_keys(meta, image);
    let mut merged: Option<CloudConfig> = None;
    for part in parts {
        let part = match part {
            Part::Jinja(template) => match jinja::render(&template, &v1) {
                Ok(r) => {
                    out.reports.extend(r.warnings);
                    match userdata::classify(&r.text) {
                        Part::Jinja(_) => Part::Unsupported(
                            "a Jinja template rendering to another template".into(),
                        ),
                        p => p,
                    }
                }
                Err(e) => {
                    out.failures.push(Failure::Jinja(e));
                    continue;
                }
            },
            p => p,
        };
        match part {
            Part::CloudConfig(text) => match config::parse(&text) {
                Ok(cc) => match merged.as_mut() {
                    Some(m) => m.merge(cc),
                    None => merged = Some(cc),
                },
                Err(e) => out.failures.push(Failure::Yaml(e)),
            },
            Part::ShellScript => out
                .reports
                .push("a shell-script part is not simulated (kos-guest runs no shell)".into()),
            Part::Unsupported(what) => out
                .reports
                .push(format!("{what} is not supported by kos-guest")),
            Part::Jinja(_) => {}
        }
    }
    let Some(cc) = merged else {
        return out;
    };
    out.reports.extend(cc.unsimulated_keys());
    let files = match cc.write_files(&mut out.reports) {
        Ok(f) => f,
        Err(e) => {
            out.failures.push(Failure::Module {
                name: "write_files",
                detail: e.to_string(),
            });
            Vec::new()
        }
    };
    for f in files.iter().filter(|f| !f.defer) {
        vfs.write(&f.path, &f.content, f.mode, &f.owner, f.append);
    }
    // Config stage: apt_configure renders the distribution's sources with the archives given.
    match cc.apt(&mut out.reports) {
        Ok(apt) if apt != config::AptArchives::default() => {
            let sources = apt_sources(image, &apt);
            vfs.write(
                &sources_path(image),
                sources.as_bytes(),
                0o644,
                "root:root",
                false,
            );
        }
        Ok(_) => {}
        Err(e) => out.failures.push(Failure::Module {
            name: "apt_configure",
            detail: e.to_string(),
        }),
    }
    let commands = cc.runcmd().unwrap_or_else(|e| {
        out.failures.push(Failure::Module {
            name: "runcmd",
            detail: e.to_string(),
        });
        Vec::new()
    });
    for f in files.iter().filter(|f| f.defer) {
        vfs.write(&f.path, &f.content, f.mode, &f.owner, f.append);
    }
    out.commands = commands;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `apt`, the image's own archives; with it, the sources file cloud-init writes,
    /// read back as apt would.
    #[test]
    fn apt_sources_are_the_images_unless_apt_names_archives() {
        let image = Image::ubuntu();
        let vfs = Vfs::new();
        let own: Vec<String> = apt_suites(&image, &vfs)
            .into_iter()
            .map(|(a, s)| format!("{a} {s}"))
            .collect();
        assert_eq!(
            own,
            [
                "http://archive.ubuntu.com/ubuntu noble",
                "http://archive.ubuntu.com/ubuntu noble-updates",
                "http://security.ubuntu.com/ubuntu noble-security"
            ]
        );
        let mut vfs = Vfs::new();
        let ud = b"#cloud-config\napt:\n  primary:\n  - arches: [default]\n    uri: https://mirror.example/ubuntu\n";
        let meta = Metadata {
            instance_id: "i".into(),
            local_hostname: "n".into(),
            availability_zone: "nova".into(),
            region: "RegionOne".into(),
        };
        let out = run(Some(ud), &meta, &image, &mut vfs);
        assert!(out.failures.is_empty(), "{:?}", out.failures);
        let mirrored: Vec<String> = apt_suites(&image, &vfs)
            .into_iter()
            .map(|(a, s)| format!("{a} {s}"))
            .collect();
        // Only the primary archive given: -security stays the image's.
        assert_eq!(
            mirrored,
            [
                "https://mirror.example/ubuntu noble",
                "https://mirror.example/ubuntu noble-updates",
                "http://security.ubuntu.com/ubuntu noble-security"
            ]
        );
    }
}
