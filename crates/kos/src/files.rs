//! Files kos writes that hold secrets: 0600 from the first byte, replaced atomically.

use std::io::Write;
use std::path::Path;

use miette::{IntoDiagnostic, WrapErr};

pub fn write_private(path: &Path, contents: &[u8]) -> miette::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .into_diagnostic()
            .wrap_err_with(|| format!("cannot create {}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let write = || -> std::io::Result<()> {
        let mut f = opts.open(&tmp)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        f.write_all(contents)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write()
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot write {}", path.display()))
}
