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

/// How long a reload waits for the calls under way before it cuts their connections.
const RELOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves the CloudProvider on `listener` with mutual TLS until the process ends. When the TLS
/// files change (cert-manager renewed them) or the certificate the operator signed itself is due,
/// the endpoint is served afresh with the new ones on the same socket: connections made before
/// are let finish their calls and closed, and the autoscalers dial again.
///
/// # Errors
/// [`ServeError`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    mut tls: tls::Tls,
    client: kube::Client,
) -> Result<(), ServeError> {
    let listener = std::sync::Arc::new(listener);
    loop {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let incoming = futures::stream::unfold(listener.clone(), |l| async move {
            let accepted = l.accept().await.map(|(stream, _)| stream);
            Some((accepted, l))
        });
        let server = tonic::transport::Server::builder()
            .tls_config(tls.config())
            .map_err(ServeError::Tls)?
            .add_service(provider::Provider::new(client.clone()).service())
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            });
        tokio::pin!(server);
        let next = loop {
            tokio::select! {
                r = &mut server => return r.map_err(ServeError::Serve),
                () = tokio::time::sleep(tls.poll()) => {}
            }
            match tls.reloaded() {
                Ok(Some(next)) => break next,
                Ok(None) => {}
                Err(e) => tracing::warn!("{e}; the autoscaler endpoint keeps its TLS"),
            }
        };
        let _ = stop.send(());
        match tokio::time::timeout(RELOAD_GRACE, &mut server).await {
            Ok(r) => r.map_err(ServeError::Serve)?,
            Err(_) => tracing::warn!("calls still under way after {RELOAD_GRACE:?}: cut"),
        }
        tracing::info!("the autoscaler endpoint serves with its renewed certificate");
        tls = next;
    }
}
