//! The seam to the node's kernel: devices, filesystems, mounts. [`SystemKernel`] runs the same
//! commands upstream's mount-utils runs; tests use [`super::fake::FakeKernel`].

use std::path::{Path, PathBuf};

use tokio::process::Command;

/// Usage of a mounted filesystem, in bytes and inodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsStats {
    pub total_bytes: i64,
    pub available_bytes: i64,
    pub used_bytes: i64,
    pub total_inodes: i64,
    pub free_inodes: i64,
    pub used_inodes: i64,
}

/// A failed command or file operation on the node.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("{command} exited with {status}: {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Unexpected(String),
}

/// What the node service asks of the machine.
#[async_trait::async_trait]
pub trait Kernel: Send + Sync + 'static {
    /// The names under `/dev/disk/by-id`, and that directory.
    async fn disks_by_id(&self) -> Result<(PathBuf, Vec<String>), KernelError>;
    /// Asks udev to settle devices that appeared (upstream's `probeVolume`).
    async fn probe_devices(&self) -> Result<(), KernelError>;
    /// The filesystem (or partition table, as `pt:<type>`) on a device; `None`: empty.
    async fn fs_type(&self, device: &Path) -> Result<Option<String>, KernelError>;
    async fn format(&self, device: &Path, fs_type: &str) -> Result<(), KernelError>;
    async fn is_mount_point(&self, path: &Path) -> Result<bool, KernelError>;
    /// `mount [-t fs_type] -o options source target`.
    async fn mount(
        &self,
        source: &Path,
        target: &Path,
        fs_type: Option<&str>,
        options: &[String],
    ) -> Result<(), KernelError>;
    async fn unmount(&self, target: &Path) -> Result<(), KernelError>;
    /// The source of the mount at `path`, `None` when nothing is mounted there.
    async fn mount_source(&self, path: &Path) -> Result<Option<PathBuf>, KernelError>;
    async fn exists(&self, path: &Path) -> Result<bool, KernelError>;
    async fn is_block_device(&self, path: &Path) -> Result<bool, KernelError>;
    async fn make_dir(&self, path: &Path) -> Result<(), KernelError>;
    async fn make_file(&self, path: &Path) -> Result<(), KernelError>;
    /// Removes an empty directory or a file; gone already is fine.
    async fn remove(&self, path: &Path) -> Result<(), KernelError>;
    /// Has the kernel re-read a device's size (`/sys/block/<dev>/device/rescan`).
    async fn rescan(&self, device: &Path) -> Result<(), KernelError>;
    /// Grows the filesystem on `device` mounted at `mount_path` to the device's size.
    async fn resize_fs(
        &self,
        device: &Path,
        mount_path: &Path,
        fs_type: &str,
    ) -> Result<(), KernelError>;
    async fn fs_stats(&self, path: &Path) -> Result<FsStats, KernelError>;
    async fn device_size(&self, device: &Path) -> Result<i64, KernelError>;
    /// The device carrying a filesystem label (the config drive's `config-2`).
    async fn find_by_label(&self, label: &str) -> Result<Option<PathBuf>, KernelError>;
    async fn read_file(&self, path: &Path) -> Result<String, KernelError>;
}

/// The machine's kernel, through the usual commands (util-linux, e2fsprogs, xfsprogs, udev).
#[derive(Debug, Clone)]
pub struct SystemKernel {
    by_id: PathBuf,
}

impl Default for SystemKernel {
    fn default() -> Self {
        SystemKernel {
            by_id: PathBuf::from("/dev/disk/by-id"),
        }
    }
}

/// What a command did: its exit code (-1 when killed), stdout and stderr.
struct Output {
    code: i32,
    stdout: String,
    stderr: String,
    command: String,
    status: String,
}

async fn exec(program: &str, args: &[&str]) -> Result<Output, KernelError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .await
        .map_err(|source| KernelError::Io {
            path: PathBuf::from(program),
            source,
        })?;
    Ok(Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        command: format!("{program} {}", args.join(" ")),
        status: out.status.to_string(),
    })
}

/// Runs a command; its exit code and stdout when it exits 0 or with one of `ok_codes`.
async fn run_allowing(
    program: &str,
    args: &[&str],
    ok_codes: &[i32],
) -> Result<(i32, String), KernelError> {
    let o = exec(program, args).await?;
    if o.code == 0 || ok_codes.contains(&o.code) {
        Ok((o.code, o.stdout))
    } else {
        Err(KernelError::Command {
            command: o.command,
            status: o.status,
            stderr: o.stderr,
        })
    }
}

async fn run(program: &str, args: &[&str]) -> Result<(i32, String), KernelError> {
    run_allowing(program, args, &[]).await
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KernelError + '_ {
    move |source| KernelError::Io {
        path: path.to_owned(),
        source,
    }
}

#[async_trait::async_trait]
impl Kernel for SystemKernel {
    async fn disks_by_id(&self) -> Result<(PathBuf, Vec<String>), KernelError> {
        let mut names = Vec::new();
        let mut dir = match tokio::fs::read_dir(&self.by_id).await {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((self.by_id.clone(), names));
            }
            Err(e) => return Err(io(&self.by_id)(e)),
        };
        while let Some(e) = dir.next_entry().await.map_err(io(&self.by_id))? {
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        Ok((self.by_id.clone(), names))
    }

    async fn probe_devices(&self) -> Result<(), KernelError> {
        run("udevadm", &["trigger"]).await?;
        run("udevadm", &["settle"]).await.map(drop)
    }

    async fn fs_type(&self, device: &Path) -> Result<Option<String>, KernelError> {
        // Exit 2: nothing found, an empty device (mount-utils' reading of blkid).
        let (code, out) = run_allowing(
            "blkid",
            &[
                "-p",
                "-s",
                "TYPE",
                "-s",
                "PTTYPE",
                "-o",
                "export",
                s(device),
            ],
            &[2],
        )
        .await?;
        if code == 2 {
            return Ok(None);
        }
        let mut fs = None;
        let mut pt = None;
        for line in out.lines() {
            match line.split_once('=') {
                Some(("TYPE", v)) => fs = Some(v.to_owned()),
                Some(("PTTYPE", v)) => pt = Some(format!("pt:{v}")),
                _ => {}
            }
        }
        Ok(fs.or(pt).or_else(|| Some("unknown".into())))
    }

    async fn format(&self, device: &Path, fs_type: &str) -> Result<(), KernelError> {
        let mkfs = format!("mkfs.{fs_type}");
        let args: Vec<&str> = match fs_type {
            "ext2" | "ext3" | "ext4" => vec!["-F", "-m0", s(device)],
            _ => vec![s(device)],
        };
        run(&mkfs, &args).await.map(drop)
    }

    async fn is_mount_point(&self, path: &Path) -> Result<bool, KernelError> {
        let (code, _) = run_allowing("findmnt", &["-n", "--mountpoint", s(path)], &[1]).await?;
        Ok(code == 0)
    }

    async fn mount(
        &self,
        source: &Path,
        target: &Path,
        fs_type: Option<&str>,
        options: &[String],
    ) -> Result<(), KernelError> {
        let opts = options.join(",");
        let mut args = Vec::new();
        if let Some(t) = fs_type {
            args.extend(["-t", t]);
        }
        if !opts.is_empty() {
            args.extend(["-o", opts.as_str()]);
        }
        args.extend([s(source), s(target)]);
        // Mount flags may carry secrets (the spec says so): the error names how many, not which.
        run("mount", &args).await.map(drop).map_err(|e| match e {
            KernelError::Command { status, stderr, .. } => KernelError::Command {
                command: format!(
                    "mount {}-o <{} options> {} {}",
                    fs_type.map(|t| format!("-t {t} ")).unwrap_or_default(),
                    options.len(),
                    source.display(),
                    target.display()
                ),
                status,
                stderr,
            },
            e => e,
        })
    }

    async fn unmount(&self, target: &Path) -> Result<(), KernelError> {
        run("umount", &[s(target)]).await.map(drop)
    }

    async fn mount_source(&self, path: &Path) -> Result<Option<PathBuf>, KernelError> {
        let (code, out) = run_allowing(
            "findmnt",
            &["-n", "-o", "SOURCE", "--mountpoint", s(path)],
            &[1],
        )
        .await?;
        let src = out.lines().next().unwrap_or_default().trim();
        Ok((code == 0 && !src.is_empty()).then(|| PathBuf::from(src)))
    }

    async fn exists(&self, path: &Path) -> Result<bool, KernelError> {
        tokio::fs::try_exists(path).await.map_err(io(path))
    }

    async fn is_block_device(&self, path: &Path) -> Result<bool, KernelError> {
        use std::os::unix::fs::FileTypeExt;
        let m = tokio::fs::metadata(path).await.map_err(io(path))?;
        Ok(m.file_type().is_block_device())
    }

    async fn make_dir(&self, path: &Path) -> Result<(), KernelError> {
        tokio::fs::create_dir_all(path).await.map_err(io(path))
    }

    async fn make_file(&self, path: &Path) -> Result<(), KernelError> {
        tokio::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .await
            .map(drop)
            .map_err(io(path))
    }

    async fn remove(&self, path: &Path) -> Result<(), KernelError> {
        let r = match tokio::fs::symlink_metadata(path).await {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => Err(e),
            Ok(m) if m.is_dir() => tokio::fs::remove_dir(path).await,
            Ok(_) => tokio::fs::remove_file(path).await,
        };
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r.map_err(io(path)),
        }
    }

    async fn rescan(&self, device: &Path) -> Result<(), KernelError> {
        let real = tokio::fs::canonicalize(device).await.map_err(io(device))?;
        let name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| KernelError::Unexpected(format!("{} has no name", real.display())))?;
        let p = PathBuf::from(format!("/sys/block/{name}/device/rescan"));
        tokio::fs::write(&p, "1").await.map_err(io(&p))
    }

    async fn resize_fs(
        &self,
        device: &Path,
        mount_path: &Path,
        fs_type: &str,
    ) -> Result<(), KernelError> {
        match fs_type {
            "ext2" | "ext3" | "ext4" => run("resize2fs", &[s(device)]).await.map(drop),
            "xfs" => run("xfs_growfs", &["-d", s(mount_path)]).await.map(drop),
            other => Err(KernelError::Unexpected(format!(
                "cannot grow a {other} filesystem (ext2/3/4 and xfs can be)"
            ))),
        }
    }

    async fn fs_stats(&self, path: &Path) -> Result<FsStats, KernelError> {
        let (_, out) = run("stat", &["-f", "-c", "%S %b %f %a %c %d", s(path)]).await?;
        let n: Vec<i64> = out
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| KernelError::Unexpected(format!("stat -f {}: {e}", path.display())))?;
        let [bsize, blocks, free, avail, files, ffree] = n[..] else {
            return Err(KernelError::Unexpected(format!(
                "stat -f {}: {out:?}",
                path.display()
            )));
        };
        Ok(FsStats {
            total_bytes: blocks * bsize,
            available_bytes: avail * bsize,
            used_bytes: (blocks - free) * bsize,
            total_inodes: files,
            free_inodes: ffree,
            used_inodes: files - ffree,
        })
    }

    async fn device_size(&self, device: &Path) -> Result<i64, KernelError> {
        let (_, out) = run("blockdev", &["--getsize64", s(device)]).await?;
        out.trim()
            .parse()
            .map_err(|e| KernelError::Unexpected(format!("blockdev {}: {e}", device.display())))
    }

    async fn find_by_label(&self, label: &str) -> Result<Option<PathBuf>, KernelError> {
        let t = format!("LABEL={label}");
        let (code, out) = run_allowing("blkid", &["-l", "-t", &t, "-o", "device"], &[2]).await?;
        let dev = out.lines().next().unwrap_or_default().trim();
        Ok((code == 0 && !dev.is_empty()).then(|| PathBuf::from(dev)))
    }

    async fn read_file(&self, path: &Path) -> Result<String, KernelError> {
        tokio::fs::read_to_string(path).await.map_err(io(path))
    }
}
