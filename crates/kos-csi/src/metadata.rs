//! Who this node is: the Nova server's id and availability zone, from the config drive or the
//! metadata service, in `[Metadata] search-order` (upstream's `pkg/util/metadata`).

use std::path::PathBuf;
use std::sync::Arc;

use kos_ccm::config::MetadataSource;
use tokio::sync::OnceCell;

use crate::node::Kernel;

/// The metadata service's document (`openstack/latest/meta_data.json`), the fields read.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct MetaData {
    pub uuid: String,
    #[serde(default)]
    pub availability_zone: String,
}

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("config drive: {0}")]
    ConfigDrive(String),
    #[error("metadata service {url}: {detail}")]
    Service { url: String, detail: String },
    #[error("no metadata source answered: {0}")]
    Nothing(String),
}

/// Where NodeGetInfo learns the node's identity.
#[async_trait::async_trait]
pub trait NodeMetadata: Send + Sync + 'static {
    async fn get(&self) -> Result<MetaData, MetadataError>;
}

/// A fixed identity (tests; a node told its id by other means).
#[derive(Debug, Clone)]
pub struct Fixed(pub MetaData);

#[async_trait::async_trait]
impl NodeMetadata for Fixed {
    async fn get(&self) -> Result<MetaData, MetadataError> {
        Ok(self.0.clone())
    }
}

/// The config drive's label, as Nova writes it.
pub const CONFIG_DRIVE_LABEL: &str = "config-2";
const META_PATH: &str = "openstack/latest/meta_data.json";

/// Reads the sources in order, once; the answer is kept (a server's id and zone do not change).
pub struct Sources {
    pub order: Vec<MetadataSource>,
    pub kernel: Arc<dyn Kernel>,
    /// Where the config drive is mounted while it is read.
    pub mount_dir: PathBuf,
    /// The metadata service's base URL.
    pub service_url: String,
    cached: OnceCell<MetaData>,
}

impl Sources {
    pub fn new(order: Vec<MetadataSource>, kernel: Arc<dyn Kernel>) -> Self {
        Sources {
            order,
            kernel,
            mount_dir: PathBuf::from("/run/kos-csi/config-drive"),
            service_url: "http://169.254.169.254".into(),
            cached: OnceCell::new(),
        }
    }

    async fn config_drive(&self) -> Result<MetaData, MetadataError> {
        let k = &self.kernel;
        let e = |e: crate::node::KernelError| MetadataError::ConfigDrive(e.to_string());
        let dev = match k.find_by_label(CONFIG_DRIVE_LABEL).await.map_err(e)? {
            Some(d) => d,
            None => k
                .find_by_label(&CONFIG_DRIVE_LABEL.to_uppercase())
                .await
                .map_err(e)?
                .ok_or_else(|| MetadataError::ConfigDrive("no device labelled config-2".into()))?,
        };
        k.make_dir(&self.mount_dir).await.map_err(e)?;
        let fs = k.fs_type(&dev).await.map_err(e)?;
        let fs = fs.as_deref().filter(|f| *f == "vfat").unwrap_or("iso9660");
        k.mount(&dev, &self.mount_dir, Some(fs), &["ro".to_owned()])
            .await
            .map_err(e)?;
        let text = k.read_file(&self.mount_dir.join(META_PATH)).await;
        let unmounted = k.unmount(&self.mount_dir).await;
        let text = text.map_err(e)?;
        unmounted.map_err(e)?;
        serde_json::from_str(&text).map_err(|err| MetadataError::ConfigDrive(err.to_string()))
    }

    async fn service(&self) -> Result<MetaData, MetadataError> {
        let url = format!("{}/{META_PATH}", self.service_url.trim_end_matches('/'));
        let err = |detail: String| MetadataError::Service {
            url: url.clone(),
            detail,
        };
        let rsp = reqwest::Client::new()
            .get(&url)
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| err(e.to_string()))?
            .error_for_status()
            .map_err(|e| err(e.to_string()))?;
        rsp.json().await.map_err(|e| err(e.to_string()))
    }
}

#[async_trait::async_trait]
impl NodeMetadata for Sources {
    async fn get(&self) -> Result<MetaData, MetadataError> {
        self.cached
            .get_or_try_init(|| async {
                let mut failures = Vec::new();
                for s in &self.order {
                    let r = match s {
                        MetadataSource::ConfigDrive => self.config_drive().await,
                        MetadataSource::MetadataService => self.service().await,
                    };
                    match r {
                        Ok(m) if !m.uuid.is_empty() => return Ok(m),
                        Ok(_) => failures.push(format!("{}: no uuid", s.as_str())),
                        Err(e) => failures.push(e.to_string()),
                    }
                }
                Err(MetadataError::Nothing(failures.join("; ")))
            })
            .await
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fake::FakeKernel;

    #[tokio::test]
    async fn the_config_drive_is_mounted_read_and_unmounted() -> Result<(), MetadataError> {
        let k = Arc::new(FakeKernel::new());
        k.attach("config", "/dev/sr0", 1 << 20);
        k.with_fs("/dev/sr0", "iso9660");
        k.add_label("config-2", "/dev/sr0");
        let s = Sources::new(
            vec![MetadataSource::ConfigDrive, MetadataSource::MetadataService],
            k.clone(),
        );
        k.add_file(
            &s.mount_dir.join(META_PATH),
            r#"{"uuid": "i-1", "availability_zone": "az1", "name": "n"}"#,
        );
        let m = s.get().await?;
        assert_eq!(
            (m.uuid.as_str(), m.availability_zone.as_str()),
            ("i-1", "az1")
        );
        assert!(k.mount_at(&s.mount_dir).is_none(), "left mounted");
        assert!(
            k.log()
                .iter()
                .any(|l| l == "mount -t iso9660 -o ro /dev/sr0 /run/kos-csi/config-drive")
        );
        Ok(())
    }

    #[tokio::test]
    async fn the_metadata_service_answers_when_there_is_no_config_drive()
    -> Result<(), Box<dyn std::error::Error>> {
        use axum::routing::get;
        let app = axum::Router::new().route(
            "/openstack/latest/meta_data.json",
            get(|| async { r#"{"uuid": "i-2", "availability_zone": "az3", "hostname": "h"}"# }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let k = Arc::new(FakeKernel::new());
        let mut s = Sources::new(
            vec![MetadataSource::ConfigDrive, MetadataSource::MetadataService],
            k,
        );
        s.service_url = format!("http://{addr}");
        let m = s.get().await?;
        assert_eq!(
            (m.uuid.as_str(), m.availability_zone.as_str()),
            ("i-2", "az3")
        );
        // Kept: the server is not asked again.
        server.abort();
        assert_eq!(s.get().await?.uuid, "i-2");
        Ok(())
    }

    #[tokio::test]
    async fn without_any_source_the_error_names_each() {
        let k = Arc::new(FakeKernel::new());
        let mut s = Sources::new(
            vec![MetadataSource::ConfigDrive, MetadataSource::MetadataService],
            k,
        );
        s.service_url = "http://127.0.0.1:9".into();
        let e = s
            .get()
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("config-2") && e.contains("127.0.0.1:9"), "{e}");
    }
}
