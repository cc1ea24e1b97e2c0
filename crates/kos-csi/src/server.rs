//! Serving the CSI services over a unix socket (`--endpoint unix:///csi/csi.sock`).

use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

use crate::controller::Controller;
use crate::csi::controller_server::ControllerServer;
use crate::csi::identity_server::IdentityServer;
use crate::csi::node_server::NodeServer;
use crate::identity::Identity;
use crate::node::NodeService;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--endpoint {0:?}: only unix:// sockets are served (unix:///csi/csi.sock)")]
    Endpoint(String),
    #[error(
        "--endpoint {}: something that is not a socket is there; kos-csi replaces only a stale socket",
        .0.display()
    )]
    NotASocket(PathBuf),
    #[error("socket {}: {source}", path.display())]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// The socket path of a `unix://` endpoint, read as upstream's `ParseEndpoint` does: what follows
/// `unix://` is the path, so the upstream manifests' `unix://csi/csi.sock` is `csi/csi.sock`
/// relative to the working directory (`/` in the image: `/csi/csi.sock`).
pub fn socket_path(endpoint: &str) -> Result<PathBuf, ServeError> {
    let rest = endpoint
        .get(..7)
        .filter(|p| p.eq_ignore_ascii_case("unix://"))
        .and_then(|_| endpoint.get(7..))
        .filter(|r| !r.is_empty())
        .ok_or_else(|| ServeError::Endpoint(endpoint.to_owned()))?;
    Ok(PathBuf::from(rest))
}

/// Binds the socket, replacing a stale one (a previous run's), as upstream does.
pub fn bind(path: &Path) -> Result<UnixListener, ServeError> {
    let err = |source| ServeError::Socket {
        path: path.to_owned(),
        source,
    };
    // Only a socket is replaced: the path comes from a flag, and a mistyped one must not delete a file.
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path).map_err(err)?,
        Ok(_) => return Err(ServeError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    UnixListener::bind(path).map_err(err)
}

/// The services one process provides (upstream's `--provide-controller-service`,
/// `--provide-node-service`).
pub struct Services {
    pub identity: Identity,
    pub controller: Option<Controller>,
    pub node: Option<NodeService>,
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    s: Services,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    tonic::transport::Server::builder()
        .add_service(IdentityServer::new(s.identity))
        .add_optional_service(s.controller.map(ControllerServer::new))
        .add_optional_service(s.node.map(NodeServer::new))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_unix_sockets() {
        assert_eq!(
            socket_path("unix:///csi/csi.sock").ok(),
            Some(PathBuf::from("/csi/csi.sock"))
        );
        // The upstream manifests' spelling: a path relative to the working directory.
        assert_eq!(
            socket_path("unix://csi/csi.sock").ok(),
            Some(PathBuf::from("csi/csi.sock"))
        );
        assert_eq!(
            socket_path("UNIX:///x.sock").ok(),
            Some(PathBuf::from("/x.sock"))
        );
        assert!(socket_path("tcp://127.0.0.1:10000").is_err());
        assert!(socket_path("unix://").is_err());
        assert!(socket_path("/csi/csi.sock").is_err());
    }

    /// A stale socket is replaced; a file at the endpoint is refused and left as it was (a tempdir
    /// only: nothing outside it is ever named).
    #[tokio::test]
    async fn only_a_stale_socket_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("csi.sock");
        drop(bind(&sock).expect("first bind"));
        assert!(sock.exists(), "the stale socket stays after its listener");
        drop(bind(&sock).expect("a stale socket is replaced"));
        let file = dir.path().join("data");
        std::fs::write(&file, "keep").expect("write");
        assert!(matches!(bind(&file), Err(ServeError::NotASocket(_))));
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "keep");
    }
}
