//! Files kos writes that hold secrets: 0600 from the first byte, replaced atomically, in directories that
//! kos makes 0700 whatever the umask (a umask of 000 would otherwise leave them open to every user).

use std::io::Write;
use std::path::Path;

use miette::{IntoDiagnostic, WrapErr};

pub fn write_private(path: &Path, contents: &[u8]) -> miette::Result<()> {
    write_private_io(path, contents)
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot write {}", path.display()))
}

/// [`write_private`], with the I/O error as it is (the caller names the path).
pub fn write_private_io(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)?;
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
}

/// Creates `dir` and its missing parents, each 0700 (set explicitly: `mkdir`'s mode is filtered by the
/// umask). Directories that exist are left as they are: they are not kos's to change.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    for d in missing.into_iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => {}
            // Made by someone else meanwhile (another kos): theirs, not to be changed.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}
