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
    /// Why the user-data (or a module) failed, each a console line's reason.
    pub failures: Vec<String>,
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
            out.failures.push(e.to_string());
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
                    out.failures.push(e);
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
                Err(e) => out.failures.push(e),
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
            out.failures.push(format!("module write_files failed: {e}"));
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
        Err(e) => out
            .failures
            .push(format!("module apt_configure failed: {e}")),
    }
    let commands = cc.runcmd().unwrap_or_else(|e| {
        out.failures.push(format!("module runcmd failed: {e}"));
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
