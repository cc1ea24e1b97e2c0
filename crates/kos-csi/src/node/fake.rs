//! An in-memory kernel for tests: disks by serial, filesystems, mounts, files. It touches nothing
//! of the machine and refuses what the real one would (mounting onto a missing directory,
//! formatting a mounted device, unmounting what is not mounted).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::kernel::{FsStats, Kernel, KernelError};

/// A disk the fake machine has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeDisk {
    pub fs: Option<String>,
    pub size: i64,
    /// The filesystem's own size (grows on resize).
    pub fs_size: i64,
}

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeMount {
    pub source: PathBuf,
    pub fs_type: Option<String>,
    pub options: Vec<String>,
}

#[derive(Debug, Default)]
pub struct FakeState {
    /// Device path → disk.
    pub disks: BTreeMap<PathBuf, FakeDisk>,
    /// by-id names → device path.
    pub by_id: BTreeMap<String, PathBuf>,
    /// Target → mount.
    pub mounts: BTreeMap<PathBuf, FakeMount>,
    pub dirs: BTreeSet<PathBuf>,
    pub files: BTreeMap<PathBuf, String>,
    pub labels: BTreeMap<String, PathBuf>,
    /// Every command, in order, as a line (`mkfs.ext4 /dev/vdb`).
    pub log: Vec<String>,
}

#[derive(Debug, Default)]
pub struct FakeKernel {
    pub state: Mutex<FakeState>,
}

pub const BY_ID: &str = "/dev/disk/by-id";

impl FakeKernel {
    pub fn new() -> Self {
        FakeKernel::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        let mut g = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Attaches a disk as KVM shows a Cinder volume: `virtio-<first 20 characters of the id>`.
    pub fn attach(&self, volume_id: &str, device: &str, size: i64) {
        let serial: String = volume_id.chars().take(20).collect();
        self.with(|s| {
            s.disks.insert(
                PathBuf::from(device),
                FakeDisk {
                    fs: None,
                    size,
                    fs_size: 0,
                },
            );
            s.by_id
                .insert(format!("virtio-{serial}"), PathBuf::from(device));
        });
    }

    /// Attaches a disk that already holds what an earlier node wrote to it (a volume moving between
    /// nodes keeps its filesystem).
    pub fn attach_disk(&self, volume_id: &str, device: &str, disk: FakeDisk) {
        self.attach(volume_id, device, disk.size);
        self.with(|s| {
            s.disks.insert(PathBuf::from(device), disk);
        });
    }

    /// Detaches a disk (Nova detached the volume): its by-id names go, mounts of it stay (as the
    /// kernel's do, broken). What it held.
    pub fn detach(&self, device: &str) -> Option<FakeDisk> {
        self.with(|s| {
            let dev = Path::new(device);
            s.by_id.retain(|_, d| d != dev);
            s.disks.remove(dev)
        })
    }

    /// The attached disks, by device.
    pub fn disks(&self) -> BTreeMap<PathBuf, FakeDisk> {
        self.with(|s| s.disks.clone())
    }

    /// Grows an attached disk (Cinder extended it).
    pub fn grow(&self, device: &str, size: i64) {
        self.with(|s| {
            if let Some(d) = s.disks.get_mut(Path::new(device)) {
                d.size = size;
            }
        });
    }

    pub fn disk(&self, device: &str) -> Option<FakeDisk> {
        self.with(|s| s.disks.get(Path::new(device)).cloned())
    }

    pub fn mount_at(&self, target: &Path) -> Option<FakeMount> {
        self.with(|s| s.mounts.get(target).cloned())
    }

    pub fn log(&self) -> Vec<String> {
        self.with(|s| s.log.clone())
    }

    pub fn add_dir(&self, p: &Path) {
        self.with(|s| {
            s.dirs.insert(p.to_owned());
        });
    }

    pub fn add_file(&self, p: &Path, content: &str) {
        self.with(|s| {
            s.files.insert(p.to_owned(), content.to_owned());
        });
    }

    pub fn add_label(&self, label: &str, device: &str) {
        self.with(|s| {
            s.labels.insert(label.to_owned(), PathBuf::from(device));
        });
    }

    /// The device a path stands for: a by-id link resolves to its device.
    fn resolve(s: &FakeState, p: &Path) -> PathBuf {
        p.strip_prefix(BY_ID)
            .ok()
            .and_then(|n| s.by_id.get(n.to_str().unwrap_or_default()))
            .cloned()
            .unwrap_or_else(|| p.to_owned())
    }
}

fn fail(what: String) -> KernelError {
    KernelError::Unexpected(what)
}

#[async_trait::async_trait]
impl Kernel for FakeKernel {
    async fn disks_by_id(&self) -> Result<(PathBuf, Vec<String>), KernelError> {
        Ok(self.with(|s| (PathBuf::from(BY_ID), s.by_id.keys().cloned().collect())))
    }

    async fn probe_devices(&self) -> Result<(), KernelError> {
        self.with(|s| s.log.push("udevadm trigger".into()));
        Ok(())
    }

    async fn fs_type(&self, device: &Path) -> Result<Option<String>, KernelError> {
        self.with(|s| {
            let d = Self::resolve(s, device);
            s.disks
                .get(&d)
                .map(|d| d.fs.clone())
                .ok_or_else(|| fail(format!("blkid: {} does not exist", device.display())))
        })
    }

    async fn format(&self, device: &Path, fs_type: &str) -> Result<(), KernelError> {
        self.with(|s| {
            let d = Self::resolve(s, device);
            s.log.push(format!("mkfs.{fs_type} {}", d.display()));
            if s.mounts.values().any(|m| Self::resolve(s, &m.source) == d) {
                return Err(fail(format!("mkfs: {} is mounted", d.display())));
            }
            let disk = s
                .disks
                .get_mut(&d)
                .ok_or_else(|| fail(format!("mkfs: {} does not exist", d.display())))?;
            disk.fs = Some(fs_type.to_owned());
            disk.fs_size = disk.size;
            Ok(())
        })
    }

    async fn is_mount_point(&self, path: &Path) -> Result<bool, KernelError> {
        Ok(self.with(|s| s.mounts.contains_key(path)))
    }

    async fn mount(
        &self,
        source: &Path,
        target: &Path,
        fs_type: Option<&str>,
        options: &[String],
    ) -> Result<(), KernelError> {
        self.with(|s| {
            s.log.push(format!(
                "mount {}-o {} {} {}",
                fs_type.map(|t| format!("-t {t} ")).unwrap_or_default(),
                options.join(","),
                source.display(),
                target.display()
            ));
            if !s.dirs.contains(target) && !s.files.contains_key(target) {
                return Err(fail(format!(
                    "mount: {}: mount point does not exist",
                    target.display()
                )));
            }
            let bind = options.iter().any(|o| o == "bind");
            let dev = Self::resolve(s, source);
            if bind {
                let ok = s.mounts.contains_key(source) || s.disks.contains_key(&dev);
                if !ok {
                    return Err(fail(format!("mount: {} not found", source.display())));
                }
            } else {
                let disk = s
                    .disks
                    .get(&dev)
                    .ok_or_else(|| fail(format!("mount: {} not found", source.display())))?;
                if disk.fs.as_deref() != fs_type {
                    return Err(fail(format!(
                        "mount: wrong fs type: {} has {:?}",
                        source.display(),
                        disk.fs
                    )));
                }
            }
            s.mounts.insert(
                target.to_owned(),
                FakeMount {
                    source: source.to_owned(),
                    fs_type: fs_type.map(str::to_owned),
                    options: options.to_vec(),
                },
            );
            Ok(())
        })
    }

    async fn unmount(&self, target: &Path) -> Result<(), KernelError> {
        self.with(|s| {
            s.log.push(format!("umount {}", target.display()));
            s.mounts
                .remove(target)
                .map(drop)
                .ok_or_else(|| fail(format!("umount: {}: not mounted", target.display())))
        })
    }

    async fn mount_source(&self, path: &Path) -> Result<Option<PathBuf>, KernelError> {
        Ok(self.with(|s| {
            let mut p = path.to_owned();
            // A bind mount's source is another mount: follow to the device, as findmnt shows.
            while let Some(m) = s.mounts.get(&p) {
                p = m.source.clone();
            }
            (p != path).then_some(p)
        }))
    }

    async fn exists(&self, path: &Path) -> Result<bool, KernelError> {
        Ok(self.with(|s| {
            s.dirs.contains(path) || s.files.contains_key(path) || s.disks.contains_key(path)
        }))
    }

    async fn is_block_device(&self, path: &Path) -> Result<bool, KernelError> {
        Ok(self.with(|s| s.disks.contains_key(&Self::resolve(s, path))))
    }

    async fn make_dir(&self, path: &Path) -> Result<(), KernelError> {
        self.with(|s| {
            for a in path.ancestors() {
                s.dirs.insert(a.to_owned());
            }
        });
        Ok(())
    }

    async fn make_file(&self, path: &Path) -> Result<(), KernelError> {
        self.with(|s| {
            let parent = path.parent().map(Path::to_owned).unwrap_or_default();
            if !s.dirs.contains(&parent) {
                return Err(fail(format!("{}: no such directory", parent.display())));
            }
            s.files.entry(path.to_owned()).or_default();
            Ok(())
        })
    }

    async fn remove(&self, path: &Path) -> Result<(), KernelError> {
        self.with(|s| {
            if s.mounts.contains_key(path) {
                return Err(fail(format!("rm {}: busy (mounted)", path.display())));
            }
            s.dirs.remove(path);
            s.files.remove(path);
            Ok(())
        })
    }

    async fn rescan(&self, device: &Path) -> Result<(), KernelError> {
        self.with(|s| s.log.push(format!("rescan {}", device.display())));
        Ok(())
    }

    async fn resize_fs(
        &self,
        device: &Path,
        mount_path: &Path,
        fs_type: &str,
    ) -> Result<(), KernelError> {
        self.with(|s| {
            s.log.push(format!(
                "resize {fs_type} {} {}",
                device.display(),
                mount_path.display()
            ));
            let d = Self::resolve(s, device);
            let disk = s
                .disks
                .get_mut(&d)
                .ok_or_else(|| fail(format!("resize: {} not found", d.display())))?;
            disk.fs_size = disk.size;
            Ok(())
        })
    }

    async fn fs_stats(&self, path: &Path) -> Result<FsStats, KernelError> {
        self.with(|s| {
            let mut p = path.to_owned();
            while let Some(m) = s.mounts.get(&p) {
                p = m.source.clone();
            }
            let d = Self::resolve(s, &p);
            let disk = s
                .disks
                .get(&d)
                .ok_or_else(|| fail(format!("stat -f {}: not a mount", path.display())))?;
            Ok(FsStats {
                total_bytes: disk.fs_size,
                available_bytes: disk.fs_size,
                used_bytes: 0,
                total_inodes: 1000,
                free_inodes: 990,
                used_inodes: 10,
            })
        })
    }

    async fn device_size(&self, device: &Path) -> Result<i64, KernelError> {
        self.with(|s| {
            let d = Self::resolve(s, device);
            s.disks
                .get(&d)
                .map(|d| d.size)
                .ok_or_else(|| fail(format!("blockdev: {} not found", d.display())))
        })
    }

    async fn find_by_label(&self, label: &str) -> Result<Option<PathBuf>, KernelError> {
        Ok(self.with(|s| s.labels.get(label).cloned()))
    }

    async fn read_file(&self, path: &Path) -> Result<String, KernelError> {
        self.with(|s| {
            s.files
                .get(path)
                .cloned()
                .ok_or_else(|| fail(format!("{}: no such file", path.display())))
        })
    }
}

impl FakeKernel {
    /// Gives a disk a filesystem (made elsewhere, e.g. the config drive's).
    pub fn with_fs(&self, device: &str, fs: &str) {
        self.with(|s| {
            if let Some(d) = s.disks.get_mut(Path::new(device)) {
                d.fs = Some(fs.to_owned());
                d.fs_size = d.size;
            }
        });
    }
}
