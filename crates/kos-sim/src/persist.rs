//! Saving a simulated cloud between runs, for the embedded demo (`kos up --cloud sim` and friends, each
//! a separate process, share one cloud). The file holds the simulator's own password and tokens, so it is
//! written 0600, atomically (a crash never leaves half a cloud).

use std::io::Write;
use std::path::Path;

use crate::state::Cloud;

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("cannot read the simulated cloud's state {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the simulated cloud's state {path} is damaged ({detail}); delete it to start a fresh cloud"
    )]
    Parse { path: String, detail: String },
    #[error("cannot write the simulated cloud's state {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot take a snapshot of the simulated guests for {path}: {detail}")]
    Snapshot { path: String, detail: String },
}

/// Where the guest runtime's snapshot goes: next to the cloud's state (`guests.json`).
pub fn guests_path(state: &Path) -> std::path::PathBuf {
    state.with_file_name("guests.json")
}

/// The guest runtime's saved snapshot, `None` when there is none yet.
pub fn load_guests(state: &Path) -> Result<Option<Vec<u8>>, PersistError> {
    let path = guests_path(state);
    match std::fs::read(&path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PersistError::Read {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// The saved cloud, or `None` when there is no saved state yet.
pub fn load(path: &Path) -> Result<Option<Cloud>, PersistError> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(PersistError::Read {
                path: path.display().to_string(),
                source,
            });
        }
    };
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| PersistError::Parse {
            path: path.display().to_string(),
            detail: e.to_string(),
        })
}

/// Writes `cloud` to `path` (0600), through a temporary file renamed into place.
pub fn save(cloud: &Cloud, path: &Path) -> Result<(), PersistError> {
    let json = serde_json::to_vec(cloud).map_err(|e| PersistError::Write {
        path: path.display().to_string(),
        source: std::io::Error::other(e),
    })?;
    save_bytes(&json, path)
}

/// Writes `bytes` to `path` (0600: the guests' snapshot holds the clusters' keys too), through a
/// temporary file renamed into place.
pub fn save_bytes(bytes: &[u8], path: &Path) -> Result<(), PersistError> {
    let err = |source| PersistError::Write {
        path: path.display().to_string(),
        source,
    };
    let json = bytes;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp).map_err(err)?;
    f.write_all(json).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;

    #[test]
    fn round_trip_keeps_the_cloud() {
        let dir = std::env::temp_dir().join(format!("kos-sim-persist-{}", crate::ids::hex_id()));
        let path = dir.join("state.json");
        assert!(load(&path).expect("missing is fine").is_none());
        let cloud = Cloud::seeded(&SimConfig::default());
        save(&cloud, &path).expect("saved");
        let back = load(&path).expect("loads").expect("present");
        assert_eq!(back.keystone.project_id(), cloud.keystone.project_id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        std::fs::write(&path, b"{not json").expect("write");
        assert!(matches!(load(&path), Err(PersistError::Parse { .. })));
        let _ = std::fs::remove_dir_all(dir);
    }
}
