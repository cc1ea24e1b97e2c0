//! Where a cluster's local secrets live, and the rules that keep that place from hurting anyone.
//!
//! `<data>/clusters/<cloud>/<project key>/<cluster>/`: the cloud's name (made safe as one path
//! component) and a key of the cloud's identity (the auth URL's host, the project id and the region),
//! so two clusters of one name in two projects, or two clouds that share a name (every `OS_*` cloud is
//! `envvars`), never share a CA. `owner.json` in it records that identity (checked on every use) and
//! whether the secrets ever went into a server's user_data.
//!
//! Deleting is the dangerous part: [`check_ours`] decides, as a pure function, whether a path is a
//! cluster directory kos makes, and [`Local::remove`] deletes only the files kos writes there, then the
//! directory if it is left empty. Nothing here ever removes a tree.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Component, Path, PathBuf};

use kos_bootstrap::{ClusterSecrets, Sensitive};
use kos_cluster::names::ClusterName;
use kos_control::store::{Record, SecretStore, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::files::{create_private_dir, write_private, write_private_io};

/// The files kos writes in a cluster directory (and the `.tmp` each is written through): the only
/// ones [`Local::remove`] deletes.
const KNOWN_FILES: &[&str] = &[
    "pki.json",
    "pki.tmp",
    "ccm-credential.json",
    "ccm-credential.tmp",
    "ccm-credential-next.json",
    "ccm-credential-next.tmp",
    "cluster.json",
    "cluster.tmp",
    "encryption.json",
    "encryption.tmp",
    "create-bootstrap-token.sh",
    "create-bootstrap-token.tmp",
    OWNER,
    "owner.tmp",
    LOCK,
];
const OWNER: &str = "owner.json";
const LOCK: &str = "lock";
/// Hex digits of the identity digest in a project key.
const KEY_DIGEST: usize = 12;
/// The longest readable prefix of a path component made from outside text.
const MAX_COMPONENT: usize = 64;

/// What a path or the local state cannot be used for.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("{path} is not a cluster directory kos makes ({why}); kos leaves it alone")]
    NotOurs { path: String, why: &'static str },
    #[error("{path} is not a directory (a link or a file); kos leaves it alone")]
    NotADirectory { path: String },
    #[error(
        "cluster {cluster} is in use by another kos ({holder}); its lock is {path}",
        holder = holder.as_deref().unwrap_or("its process did not say which")
    )]
    Locked {
        cluster: String,
        holder: Option<String>,
        path: String,
    },
    #[error(
        "{path} records the cloud {recorded}, not this one ({current}): it was copied or edited by hand"
    )]
    Mismatch {
        path: String,
        recorded: String,
        current: String,
    },
    #[error("{path} kept files kos did not write: {files}")]
    Leftover { path: String, files: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is malformed: {detail}")]
    Malformed { path: String, detail: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LocalError + '_ {
    move |source| LocalError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Which cloud and project a cluster's local data belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudIdentity {
    /// The name it was reached by (`--cloud`, `OS_CLOUD`, or `envvars` for the `OS_*` variables).
    pub cloud: String,
    pub auth_url: String,
    pub project_id: String,
    pub region: Option<String>,
}

impl CloudIdentity {
    pub fn of(session: &kos_cloud::Session) -> Self {
        Self {
            cloud: session.cloud_name().to_owned(),
            auth_url: session.auth_url().to_owned(),
            project_id: session.project_id().to_owned(),
            region: session.region().map(str::to_owned),
        }
    }

    /// The auth URL's host: the same Keystone whichever path or port a clouds.yaml writes (and the
    /// embedded simulator's, whose port may change between runs).
    fn host(&self) -> String {
        url::Url::parse(&self.auth_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
            .unwrap_or_else(|| self.auth_url.clone())
    }

    /// `<project id>_<digest>`: readable, and never a cluster name (those have no `_`), so it cannot
    /// be taken for a directory of the earlier layout.
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        for part in [
            self.host().as_str(),
            self.project_id.as_str(),
            self.region.as_deref().unwrap_or(""),
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let digest: String = h
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .chars()
            .take(KEY_DIGEST)
            .collect();
        format!("{}_{digest}", component(&self.project_id))
    }

    fn describe(&self) -> String {
        format!(
            "{} (project {}, region {}, {})",
            self.cloud,
            self.project_id,
            self.region.as_deref().unwrap_or("-"),
            self.host()
        )
    }
}

/// `text` as one safe path component: `[A-Za-z0-9._-]` kept, anything else `-`, at most
/// [`MAX_COMPONENT`] characters, never empty and never starting with `.` (so never `.` or `..`).
pub fn component(text: &str) -> String {
    let mut s: String = text
        .chars()
        .take(MAX_COMPONENT)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    // Replaced, not prefixed: the result must come out of this function unchanged (idempotent).
    if s.starts_with('.') {
        s.replace_range(..1, "_");
    }
    if s.is_empty() {
        s.push('_');
    }
    s
}

/// A cluster's directory under `data`.
pub fn cluster_dir(data: &Path, id: &CloudIdentity, name: &ClusterName) -> PathBuf {
    data.join("clusters")
        .join(component(&id.cloud))
        .join(id.key())
        .join(name.as_str())
}

/// Whether `dir` is a cluster directory kos makes under `data`: exactly
/// `<data>/clusters/<cloud>/<key>/<name>`, every part a plain component of the forms [`component`],
/// [`CloudIdentity::key`] and [`ClusterName`] make. Pure: it looks at no file.
///
/// # Errors
/// [`LocalError::NotOurs`], saying which rule the path breaks.
pub fn check_ours(data: &Path, dir: &Path) -> Result<(), LocalError> {
    let not = |why| LocalError::NotOurs {
        path: dir.display().to_string(),
        why,
    };
    let rest = dir
        .strip_prefix(data)
        .map_err(|_| not("outside the data directory"))?;
    let parts: Vec<&str> = rest
        .components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str().ok_or_else(|| not("not UTF-8")),
            _ => Err(not("it has `.`, `..` or a root in it")),
        })
        .collect::<Result<_, _>>()?;
    let [clusters, cloud, key, name] = parts.as_slice() else {
        return Err(not("not <data>/clusters/<cloud>/<project>/<cluster>"));
    };
    if *clusters != "clusters" {
        return Err(not("not under <data>/clusters"));
    }
    if component(cloud) != *cloud {
        return Err(not("the cloud part is not a name kos makes"));
    }
    let well_formed_key = key.rsplit_once('_').is_some_and(|(project, digest)| {
        component(project) == project
            && digest.len() == KEY_DIGEST
            && digest.chars().all(|c| c.is_ascii_hexdigit())
    });
    if !well_formed_key {
        return Err(not("the project part is not a key kos makes"));
    }
    ClusterName::new(name).map_err(|_| not("the last part is not a cluster name"))?;
    Ok(())
}

/// What `owner.json` records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Owner {
    #[serde(flatten)]
    pub identity: CloudIdentity,
    /// The secrets went into a server's user_data: a cluster of this CA existed.
    #[serde(default)]
    pub delivered: bool,
    /// A `kos down` found the cluster and started deleting it.
    #[serde(default)]
    pub teardown: bool,
}

/// A cluster's local directory and the cloud it belongs to.
#[derive(Debug, Clone)]
pub struct Place {
    data: PathBuf,
    pub dir: PathBuf,
    identity: CloudIdentity,
    name: ClusterName,
}

/// Held while a command changes a cluster; released when dropped or when the process dies.
#[derive(Debug)]
pub struct ClusterLock {
    _file: File,
}

impl Place {
    pub fn new(data: &Path, identity: CloudIdentity, name: ClusterName) -> Self {
        Self {
            dir: cluster_dir(data, &identity, &name),
            data: data.to_owned(),
            identity,
            name,
        }
    }

    pub fn identity(&self) -> &CloudIdentity {
        &self.identity
    }

    /// The directory of the layout before cloud identities (`<data>/clusters/<cloud>/<name>`), when
    /// the cloud's name is a plain component.
    fn legacy(&self) -> Option<PathBuf> {
        let cloud = Path::new(&self.identity.cloud);
        let plain = matches!(
            cloud.components().collect::<Vec<_>>().as_slice(),
            [Component::Normal(_)]
        );
        plain.then(|| {
            self.data
                .join("clusters")
                .join(&self.identity.cloud)
                .join(self.name.as_str())
        })
    }

    /// Takes the cluster's lock, making its directory (0700) and `owner.json` when they are new,
    /// and checks that an existing `owner.json` names this cloud. Never waits: a second command on the
    /// same cluster stops, naming the holder.
    ///
    /// # Errors
    /// [`LocalError::Locked`] while another process holds it; I/O; [`LocalError::Mismatch`].
    pub fn lock(&self, what: &str) -> Result<ClusterLock, LocalError> {
        check_ours(&self.data, &self.dir)?;
        create_private_dir(&self.dir).map_err(io(&self.dir))?;
        self.refuse_links()?;
        let path = self.dir.join(LOCK);
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut file = opts.open(&path).map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(LocalError::Locked {
                    cluster: self.name.to_string(),
                    holder: (!holder.is_empty())
                        .then(|| kos_cluster::escape_unprintable(holder).into_owned()),
                    path: path.display().to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        let me = format!("pid {}: kos {what}", std::process::id());
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(me.as_bytes()))
            .map_err(io(&path))?;
        match self.owner()? {
            Some(_) => {}
            None => self.write_owner(&Owner {
                identity: self.identity.clone(),
                // Secrets from before owner.json existed (moved from the old layout) were in use.
                delivered: self.dir.join("pki.json").exists(),
                teardown: false,
            })?,
        }
        Ok(ClusterLock { _file: file })
    }

    /// A link in place of the directory would take kos's writes elsewhere.
    fn refuse_links(&self) -> Result<(), LocalError> {
        let meta = std::fs::symlink_metadata(&self.dir).map_err(io(&self.dir))?;
        if meta.is_dir() {
            Ok(())
        } else {
            Err(LocalError::NotADirectory {
                path: self.dir.display().to_string(),
            })
        }
    }

    /// `owner.json`, checked against this cloud; `None` when there is none.
    ///
    /// # Errors
    /// I/O, a malformed file, or [`LocalError::Mismatch`].
    pub fn owner(&self) -> Result<Option<Owner>, LocalError> {
        let path = self.dir.join(OWNER);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        let owner: Owner = serde_json::from_str(&text).map_err(|e| LocalError::Malformed {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        let same = owner.identity.project_id == self.identity.project_id
            && owner.identity.region == self.identity.region
            && owner.identity.host() == self.identity.host();
        if !same {
            return Err(LocalError::Mismatch {
                path: path.display().to_string(),
                recorded: owner.identity.describe(),
                current: self.identity.describe(),
            });
        }
        Ok(Some(owner))
    }

    fn write_owner(&self, owner: &Owner) -> Result<(), LocalError> {
        let path = self.dir.join(OWNER);
        let body = serde_json::to_vec_pretty(owner).map_err(|e| LocalError::Malformed {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        write_private_io(&path, &body).map_err(io(&path))
    }

    /// Records a fact in `owner.json` (made if missing).
    ///
    /// # Errors
    /// As [`Place::owner`], and the write.
    pub fn record(&self, change: impl FnOnce(&mut Owner)) -> Result<(), LocalError> {
        let mut owner = self.owner()?.unwrap_or_else(|| Owner {
            identity: self.identity.clone(),
            delivered: false,
            teardown: false,
        });
        change(&mut owner);
        self.write_owner(&owner)
    }

    /// Whether a file of kos's that is worth keeping (not the lock or the owner record) is here.
    pub fn has_data(&self) -> bool {
        KNOWN_FILES
            .iter()
            .filter(|f| !matches!(**f, OWNER | LOCK))
            .any(|f| self.dir.join(f).exists())
    }

    /// The earlier layout's directory when it holds secrets and this one does not.
    pub fn legacy_pending(&self) -> Option<PathBuf> {
        let old = self.legacy()?;
        let is_old_dir = std::fs::symlink_metadata(&old).is_ok_and(|m| m.is_dir());
        (is_old_dir && old.join("pki.json").exists() && !self.dir.join("pki.json").exists())
            .then_some(old)
    }

    /// Moves the files of the layout before cloud identities into this directory, when this one has
    /// no secrets yet. Call only once the cloud shows the cluster: the old directory was shared by
    /// every project of a cloud's name. Returns whether anything moved.
    ///
    /// # Errors
    /// I/O.
    pub fn adopt_legacy(&self) -> Result<bool, LocalError> {
        let Some(old) = self.legacy_pending() else {
            return Ok(false);
        };
        create_private_dir(&self.dir).map_err(io(&self.dir))?;
        for f in KNOWN_FILES {
            let from = old.join(f);
            if std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_file()) {
                std::fs::rename(&from, self.dir.join(f)).map_err(io(&from))?;
            }
        }
        // Left only if something else is in it: not kos's to delete.
        let _ = std::fs::remove_dir(&old);
        self.record(|o| o.delivered = true)?;
        Ok(true)
    }

    /// Deletes the files kos writes here, then the directory and its project and cloud parents when
    /// they are left empty. A directory that is not [`check_ours`], or is a link, is refused; files kos
    /// did not write are kept and named.
    ///
    /// # Errors
    /// [`LocalError::NotOurs`], [`LocalError::NotADirectory`], [`LocalError::Leftover`], I/O.
    pub fn remove(&self) -> Result<(), LocalError> {
        check_ours(&self.data, &self.dir)?;
        match std::fs::symlink_metadata(&self.dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(&self.dir)(e)),
            Ok(_) => self.refuse_links()?,
        }
        for f in KNOWN_FILES {
            let p = self.dir.join(f);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&p)(e)),
            }
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            let files: Vec<String> = std::fs::read_dir(&self.dir)
                .map(|rd| {
                    rd.filter_map(Result::ok)
                        .map(|e| {
                            kos_cluster::escape_unprintable(&e.file_name().to_string_lossy())
                                .into_owned()
                        })
                        .collect()
                })
                .unwrap_or_default();
            if files.is_empty() {
                return Err(io(&self.dir)(e));
            }
            return Err(LocalError::Leftover {
                path: self.dir.display().to_string(),
                files: files.join(", "),
            });
        }
        // The project and cloud levels, only if empty: another cluster's data may be there.
        for parent in self.dir.ancestors().skip(1).take(2) {
            if std::fs::remove_dir(parent).is_err() {
                break;
            }
        }
        Ok(())
    }
}

/// A cluster's local files.
#[derive(Debug, Clone)]
pub struct Local {
    pub dir: PathBuf,
    /// Where they belong; `None` for a directory `kos kubeconfig` found without asking the cloud.
    place: Option<Place>,
}

/// What the cloud shows of a cluster when its secrets are looked for.
impl Local {
    /// The cluster's directory for the cloud and project `session` is connected to.
    pub fn for_session(session: &kos_cloud::Session, cluster: &str) -> miette::Result<Self> {
        let name = kos_cluster::names::ClusterName::new(cluster).map_err(|e| {
            miette::miette!(
                "`{}` is not a cluster name: {e}",
                crate::term::printable(cluster)
            )
        })?;
        let place = Place::new(&crate::cloud::data_dir()?, CloudIdentity::of(session), name);
        Ok(Self {
            dir: place.dir.clone(),
            place: Some(place),
        })
    }

    /// A directory found by [`crate::local::candidates`], to read from.
    pub fn at(dir: PathBuf) -> Self {
        Self { dir, place: None }
    }

    /// Where the files belong (`None` for [`Local::at`]).
    pub fn place(&self) -> Option<&Place> {
        self.place.as_ref()
    }

    /// Takes the cluster's lock for a command that changes it (see [`Place::lock`]).
    pub fn lock(&self, what: &str) -> miette::Result<ClusterLock> {
        let place = self
            .place
            .as_ref()
            .ok_or_else(|| miette::miette!("{} has no cloud to lock it for", self.dir.display()))?;
        place.lock(what).map_err(|e| match e {
            LocalError::Locked { .. } => miette::miette!(
                help = "wait for it to finish (or stop it), then run the command again: two runs at once would \
                        each write the cluster's secrets",
                "{e}"
            ),
            e => miette::miette!("{e}"),
        })
    }

    /// Whether files of the layout before cloud identities wait to be adopted.
    pub fn legacy_pending(&self) -> bool {
        self.place
            .as_ref()
            .is_some_and(|p| p.legacy_pending().is_some())
    }

    /// Whether kos keeps anything of the cluster here besides its lock and owner record.
    pub fn has_data(&self) -> bool {
        self.place.as_ref().is_some_and(Place::has_data)
    }

    /// Moves this cluster's files from the layout before cloud identities, once the cloud shows the
    /// cluster (see [`Place::adopt_legacy`]).
    pub fn adopt_legacy(&self) -> Result<(), LocalError> {
        if let Some(place) = &self.place
            && place.adopt_legacy()?
        {
            eprintln!(
                "kos: moved the local secrets of cluster {} to {}",
                place
                    .dir
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                place.dir.display()
            );
        }
        Ok(())
    }

    /// The script that creates a renewed bootstrap token in a cluster whose API kos cannot reach.
    pub fn token_script(&self) -> PathBuf {
        self.dir.join("create-bootstrap-token.sh")
    }

    /// Writes [`token_script`](Self::token_script) (0600: it holds the token) for `cluster`: run on
    /// a control plane, it creates the token kos put into this run's new nodes, so they can join a
    /// cluster whose API is private. Nothing is printed or logged with the token in it.
    pub fn write_token_script(
        &self,
        cluster: &str,
        secrets: &ClusterSecrets,
        certs: bool,
        now: OffsetDateTime,
    ) -> miette::Result<PathBuf> {
        let t = &secrets.token;
        // What is left of the join window, at least a quarter of an hour to get to a control plane.
        let ttl = (t.expires - now).max(time::Duration::minutes(15));
        // Joining control planes download the CAs sealed under this run's key (kubeadm's own phase
        // makes the Secret, its two-hour token and the Role).
        let upload = if certs {
            format!(
                "kubeadm init phase upload-certs --upload-certs --kubeconfig /etc/kubernetes/admin.conf \\\n  \
                 --certificate-key '{}'\n",
                secrets.certificate_key.expose()
            )
        } else {
            String::new()
        };
        let script = format!(
            "#!/bin/sh\n\
             # kos: create the renewed bootstrap token of cluster {cluster}, so that the nodes `kos up`\n\
             # creates can join. Run it on one of the cluster's control planes, as root:\n\
             #   sudo sh create-bootstrap-token.sh\n\
             # It holds the token: keep it 0600 and delete it afterwards.\n\
             set -eu\n\
             kubeadm token create '{}.{}' --kubeconfig /etc/kubernetes/admin.conf --ttl {}s \\\n  \
             --groups system:bootstrappers:kubeadm:default-node-token \\\n  \
             --description 'renewed by kos up'\n{upload}",
            t.id,
            t.secret.expose(),
            ttl.whole_seconds()
        );
        let path = self.token_script();
        write_private(&path, script.as_bytes())?;
        Ok(path)
    }
}

impl Local {
    /// The file a record is kept in (one of [`KNOWN_FILES`]).
    fn file(record: Record) -> &'static str {
        match record {
            Record::Pki => "pki.json",
            Record::CcmCredential => "ccm-credential.json",
            Record::PendingCcmCredential => "ccm-credential-next.json",
            Record::EncryptionKeys => "encryption.json",
            Record::Meta => "cluster.json",
        }
    }

    fn path(&self, record: Record) -> PathBuf {
        self.dir.join(Self::file(record))
    }
}

/// The join token for a private API: `create-bootstrap-token.sh` in the cluster's directory.
impl kos_control::tokens::TokenScript for Local {
    fn write(
        &self,
        cluster: &str,
        secrets: &ClusterSecrets,
        certs: bool,
        now: OffsetDateTime,
    ) -> Result<String, kos_control::store::Cause> {
        self.write_token_script(cluster, secrets, certs, now)
            .map(|p| p.display().to_string())
            .map_err(Into::into)
    }

    fn remove(&self) {
        // As the records: a directory found without the cloud ([`Local::at`]) is only read.
        if self.place.is_some() {
            let _ = std::fs::remove_file(self.token_script());
        }
    }
}

/// The cluster's records as 0600 files in its 0700 directory, each replaced atomically
/// ([`write_private`]); `owner.json` says whether the secrets were delivered.
impl SecretStore for Local {
    fn read(&self, record: Record) -> Result<Option<Sensitive>, StoreError> {
        let path = self.path(record);
        match std::fs::read_to_string(&path) {
            Ok(t) => Ok(Some(Sensitive::new(t))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Read {
                record,
                location: path.display().to_string(),
                source: Box::new(e),
            }),
        }
    }

    fn write(&self, record: Record, contents: &Sensitive) -> Result<(), StoreError> {
        let path = self.path(record);
        write_private_io(&path, contents.expose().as_bytes()).map_err(|e| StoreError::Write {
            record,
            location: path.display().to_string(),
            source: Box::new(e),
        })
    }

    fn remove(&self, record: Record) -> Result<(), StoreError> {
        let path = self.path(record);
        // A directory found without asking the cloud ([`Local::at`]) is only read: kos deletes
        // only in the directory it keyed by the cloud's identity for this cluster.
        if self.place.is_none() {
            return Err(StoreError::Write {
                record,
                location: path.display().to_string(),
                source: "a directory found without the cloud is read-only".into(),
            });
        }
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::Write {
                record,
                location: path.display().to_string(),
                source: Box::new(e),
            }),
        }
    }

    fn location(&self, record: Record) -> String {
        self.path(record).display().to_string()
    }

    fn delivered(&self) -> Result<Option<bool>, StoreError> {
        match &self.place {
            Some(p) => Ok(p
                .owner()
                .map_err(|e| StoreError::Unusable(Box::new(e)))?
                .map(|o| o.delivered)),
            None => Ok(None),
        }
    }

    fn mark_delivered(&self) -> Result<(), StoreError> {
        match &self.place {
            Some(p) => p
                .record(|o| o.delivered = true)
                .map_err(|e| StoreError::Unusable(Box::new(e))),
            None => Ok(()),
        }
    }
}

/// The cluster directories of `name` under `data` for the cloud named `cloud`, in any project, with
/// secrets in them (the earlier layout's included): what `kos kubeconfig` can use without asking
/// the cloud which project it is.
pub fn candidates(data: &Path, cloud: &str, name: &ClusterName) -> Vec<PathBuf> {
    let base = data.join("clusters").join(component(cloud));
    let mut found: Vec<PathBuf> = std::fs::read_dir(&base)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path().join(name.as_str()))
                .filter(|p| check_ours(data, p).is_ok() && p.join("pki.json").is_file())
                .collect()
        })
        .unwrap_or_default();
    let plain = matches!(
        Path::new(cloud).components().collect::<Vec<_>>().as_slice(),
        [Component::Normal(_)]
    );
    let old = data.join("clusters").join(cloud).join(name.as_str());
    if plain && old.join("pki.json").is_file() {
        found.push(old);
    }
    found.sort();
    found
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn id(project: &str) -> CloudIdentity {
        CloudIdentity {
            cloud: "envvars".into(),
            auth_url: "https://keystone.example.com:5000/v3".into(),
            project_id: project.into(),
            region: Some("RegionOne".into()),
        }
    }

    fn name(s: &str) -> ClusterName {
        ClusterName::new(s).unwrap()
    }

    #[test]
    fn two_projects_never_share_a_directory() {
        let data = Path::new("/data");
        let a = cluster_dir(data, &id("p1"), &name("demo"));
        let b = cluster_dir(data, &id("p2"), &name("demo"));
        assert_ne!(a, b);
        let mut other_region = id("p1");
        other_region.region = Some("RegionTwo".into());
        assert_ne!(a, cluster_dir(data, &other_region, &name("demo")));
        // The same Keystone written with another port or path is the same cloud.
        let mut same = id("p1");
        same.auth_url = "https://KEYSTONE.example.com/identity/v3/".into();
        assert_eq!(a, cluster_dir(data, &same, &name("demo")));
        assert!(check_ours(data, &a).is_ok());
    }

    #[test]
    fn hostile_cloud_names_stay_one_component() {
        for cloud in ["/", "..", ".", "", "../../etc", "a/b", "\u{1b}]52;x\u{7}"] {
            let c = component(cloud);
            assert!(
                !c.contains('/') && !c.starts_with('.') && !c.is_empty(),
                "{cloud:?} → {c:?}"
            );
            let mut i = id("p1");
            i.cloud = cloud.into();
            let d = cluster_dir(Path::new("/data"), &i, &name("demo"));
            assert!(
                check_ours(Path::new("/data"), &d).is_ok(),
                "{}",
                d.display()
            );
            assert!(d.starts_with("/data/clusters/"), "{}", d.display());
        }
        let mut i = id("../../../etc");
        i.cloud = "sim".into();
        let d = cluster_dir(Path::new("/data"), &i, &name("demo"));
        assert!(
            check_ours(Path::new("/data"), &d).is_ok(),
            "{}",
            d.display()
        );
    }

    #[test]
    fn only_cluster_directories_under_the_data_directory_are_ours() {
        let data = Path::new("/home/u/.local/share/kos");
        let good = cluster_dir(data, &id("p1"), &name("demo"));
        assert!(check_ours(data, &good).is_ok());
        let key = id("p1").key();
        for bad in [
            PathBuf::from("/"),
            PathBuf::from("/etc"),
            data.to_path_buf(),
            data.join("clusters"),
            data.join("clusters/envvars"),
            data.join(format!("clusters/envvars/{key}")),
            // The earlier layout's directory: never removed as a tree.
            data.join("clusters/envvars/demo"),
            data.join(format!("clusters/envvars/{key}/demo/"))
                .join(".."),
            data.join(format!("clusters/envvars/{key}/../../../etc")),
            data.join(format!("clusters/envvars/{key}/demo/x")),
            data.join(format!("clusters/envvars/{key}/Demo")),
            data.join(format!("clusters/envvars/{key}/.")),
            data.join(format!("clusters/../clusters/envvars/{key}/demo")),
            data.join("clusters/envvars/nokey/demo"),
            data.join("clusters/envvars/p1_xyzxyzxyzxyz/demo"),
            data.join("sim/demo/demo/demo"),
            PathBuf::from(format!("/tmp/clusters/envvars/{key}/demo")),
        ] {
            assert!(
                check_ours(data, &bad).is_err(),
                "{} was taken for ours",
                bad.display()
            );
        }
    }

    #[test]
    fn removal_deletes_only_what_kos_wrote() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        let place = Place::new(data, id("p1"), name("demo"));
        let _lock = place.lock("up").unwrap();
        std::fs::write(place.dir.join("pki.json"), "{}").unwrap();
        std::fs::write(place.dir.join("notes.txt"), "mine").unwrap();
        let err = place.remove().unwrap_err();
        assert!(matches!(err, LocalError::Leftover { .. }), "{err}");
        assert!(place.dir.join("notes.txt").exists());
        assert!(!place.dir.join("pki.json").exists());
        std::fs::remove_file(place.dir.join("notes.txt")).unwrap();
        place.remove().unwrap();
        assert!(!place.dir.exists());
        // The empty project and cloud levels go; the data directory and `clusters` stay.
        assert!(data.join("clusters").exists());
        assert!(!data.join("clusters/envvars").exists());
    }

    #[test]
    fn a_link_in_place_of_the_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let victim = tmp.path().join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("pki.json"), "precious").unwrap();
        let place = Place::new(&data, id("p1"), name("demo"));
        std::fs::create_dir_all(place.dir.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&victim, &place.dir).unwrap();
        assert!(matches!(
            place.remove(),
            Err(LocalError::NotADirectory { .. })
        ));
        assert!(matches!(
            place.lock("up"),
            Err(LocalError::NotADirectory { .. })
        ));
        assert_eq!(
            std::fs::read_to_string(victim.join("pki.json")).unwrap(),
            "precious"
        );
    }

    #[test]
    fn a_second_holder_is_refused_naming_the_first() {
        let tmp = tempfile::tempdir().unwrap();
        let place = Place::new(tmp.path(), id("p1"), name("demo"));
        let held = place.lock("up").unwrap();
        let err = place.lock("down").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {}: kos up", std::process::id())),
            "{text}"
        );
        drop(held);
        place.lock("down").unwrap();
    }

    #[test]
    fn owner_of_another_project_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let place = Place::new(tmp.path(), id("p1"), name("demo"));
        drop(place.lock("up").unwrap());
        let copied = Place {
            identity: id("p2"),
            ..place.clone()
        };
        assert!(matches!(copied.owner(), Err(LocalError::Mismatch { .. })));
    }

    #[test]
    fn the_old_layout_is_adopted_file_by_file() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        let old = data.join("clusters/envvars/demo");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("pki.json"), "ca").unwrap();
        std::fs::write(old.join("cluster.json"), "meta").unwrap();
        let place = Place::new(data, id("p1"), name("demo"));
        assert_eq!(
            candidates(data, "envvars", &name("demo")),
            vec![old.clone()]
        );
        assert!(place.adopt_legacy().unwrap());
        assert!(!old.exists());
        assert_eq!(
            std::fs::read_to_string(place.dir.join("pki.json")).unwrap(),
            "ca"
        );
        assert!(place.owner().unwrap().unwrap().delivered);
        assert_eq!(
            candidates(data, "envvars", &name("demo")),
            vec![place.dir.clone()]
        );
        // Nothing more to adopt.
        assert!(!place.adopt_legacy().unwrap());
    }

    #[test]
    fn the_token_script_holds_the_token_in_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let local = Local::at(dir.path().to_path_buf());
        let now = OffsetDateTime::now_utc();
        let secrets =
            ClusterSecrets::generate(&mut rand::rng(), now, kos_bootstrap::DEFAULT_TOKEN_TTL)
                .unwrap();
        let path = local
            .write_token_script("demo", &secrets, true, now)
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let token = format!("{}.{}", secrets.token.id, secrets.token.secret.expose());
        assert!(
            text.contains(&format!("kubeadm token create '{token}'")),
            "{text}"
        );
        assert!(text.contains("system:bootstrappers:kubeadm:default-node-token"));
        assert!(
            text.contains(&format!(
                "--certificate-key '{}'",
                secrets.certificate_key.expose()
            )),
            "{text}"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A real shell accepts it.
        let check = std::process::Command::new("sh")
            .arg("-n")
            .arg(&path)
            .status()
            .unwrap();
        assert!(check.success());
        // A directory found without the cloud is only read: its script stays.
        kos_control::tokens::TokenScript::remove(&local);
        assert!(path.exists());
    }

    #[test]
    fn the_store_keeps_records_in_private_files_and_the_owner_record() {
        use kos_control::store::Records as _;
        let tmp = tempfile::tempdir().unwrap();
        let place = Place::new(tmp.path(), id("p1"), name("demo"));
        let local = Local {
            dir: place.dir.clone(),
            place: Some(place.clone()),
        };
        let _lock = place.lock("up").unwrap();
        assert!(local.pki().unwrap().is_none());
        let now = OffsetDateTime::now_utc();
        let secrets =
            ClusterSecrets::generate(&mut rand::rng(), now, kos_bootstrap::DEFAULT_TOKEN_TTL)
                .unwrap();
        local.put_pki(&secrets).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let pki = place.dir.join("pki.json");
        assert_eq!(
            std::fs::metadata(&pki).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(&place.dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(
            local.pki().unwrap().unwrap().ca.cert_pem,
            secrets.ca.cert_pem
        );
        assert_eq!(local.location(Record::Pki), pki.display().to_string());
        // A new directory's secrets were never delivered; then they are, in owner.json.
        assert_eq!(local.delivered().unwrap(), Some(false));
        local.mark_delivered().unwrap();
        assert!(place.owner().unwrap().unwrap().delivered);
        assert_eq!(local.delivered().unwrap(), Some(true));
        // Every record is a file `remove` knows.
        for r in Record::ALL {
            assert!(KNOWN_FILES.contains(&Local::file(r)), "{r:?}");
        }
        // A directory found without the cloud loses nothing.
        assert!(Local::at(place.dir.clone()).remove(Record::Pki).is_err());
        assert!(pki.exists());
        local.remove(Record::Pki).unwrap();
        local.remove(Record::Pki).unwrap();
        assert!(!pki.exists());
        // Another project's copy of the directory is not used.
        let copied = Local {
            dir: place.dir.clone(),
            place: Some(Place {
                identity: id("p2"),
                ..place.clone()
            }),
        };
        assert!(matches!(copied.delivered(), Err(StoreError::Unusable(_))));
    }
}
