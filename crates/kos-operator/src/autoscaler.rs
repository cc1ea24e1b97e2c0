//! cluster-autoscaler's `externalgrpc` CloudProvider, served by kos-operator for the pools that set
//! `autoscaling: {min, max}`.
//!
//! The autoscaler reads and changes a pool's size here; kos does the rest as for any count. A pool's
//! target size is its `count` in the Cluster's spec (as Cluster API's autoscaler integration keeps a
//! MachineDeployment's `replicas`): `IncreaseSize` and `DecreaseTargetSize` patch it, guarded by a
//! JSON patch `test` of the value read, and the Cluster's next turn makes or removes servers.
//! `DeleteNodes` tags the named servers `kos-retire` (kos-lifecycle's `succession::TAG_RETIRE`),
//! then lowers the count: the turn's scale-down takes those servers and no other, and the cloud
//! keeps the choice across a killed leader. A named server Nova will not tag (being built, or its
//! build failed: what the autoscaler names after a create error) is deleted by the provider once
//! the count is lowered.
//!
//! Each autoscaler presents a client certificate whose common name is its Cluster's
//! `<namespace>/<name>` ([`tls`]): it sees and changes that Cluster's pools alone.

pub mod groups;
pub mod install;
pub mod provider;
pub mod template;
pub mod tls;

/// The generated messages and service of `proto/externalgrpc.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("clusterautoscaler.cloudprovider.v1.externalgrpc");
}

/// Why the endpoint stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the autoscaler endpoint's TLS: {0}")]
    Tls(#[source] tonic::transport::Error),
    #[error("serving the autoscaler endpoint: {0}")]
    Serve(#[source] tonic::transport::Error),
}

/// Serves the CloudProvider on `listener` with mutual TLS until the process ends.
///
/// # Errors
/// [`ServeError`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: tonic::transport::ServerTlsConfig,
    client: kube::Client,
) -> Result<(), ServeError> {
    tonic::transport::Server::builder()
        .tls_config(tls)
        .map_err(ServeError::Tls)?
        .add_service(provider::Provider::new(client).service())
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await
        .map_err(ServeError::Serve)
}
