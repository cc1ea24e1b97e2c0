//! cloud-init on first boot, as the guest sees its user_data: decode ([`userdata`]), render Jinja
//! ([`jinja`]), parse and merge the cloud-configs ([`config`]), then run the simulated modules in
//! cloud-init's stage order: `write_files` (init stage), `runcmd` (config stage writes the script),
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
