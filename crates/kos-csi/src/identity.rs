//! The CSI Identity service: the driver's name and version, its capabilities (upstream's), and
//! readiness.

use tonic::{Request, Response, Status};

use crate::csi;
use crate::csi::plugin_capability::{Service, Type, VolumeExpansion, service, volume_expansion};
use crate::{DRIVER_NAME, VENDOR_VERSION};

#[derive(Debug, Clone)]
pub struct Identity {
    pub with_topology: bool,
}

impl Identity {
    /// Upstream's list: the controller service, online and offline expansion, and topology when on.
    pub fn capabilities(&self) -> Vec<csi::PluginCapability> {
        let service = |t: service::Type| csi::PluginCapability {
            r#type: Some(Type::Service(Service { r#type: t as i32 })),
        };
        let expansion = |t: volume_expansion::Type| csi::PluginCapability {
            r#type: Some(Type::VolumeExpansion(VolumeExpansion { r#type: t as i32 })),
        };
        let mut caps = vec![
            service(service::Type::ControllerService),
            expansion(volume_expansion::Type::Online),
            expansion(volume_expansion::Type::Offline),
        ];
        if self.with_topology {
            caps.push(service(service::Type::VolumeAccessibilityConstraints));
        }
        caps
    }
}

#[tonic::async_trait]
impl csi::identity_server::Identity for Identity {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: DRIVER_NAME.to_owned(),
            vendor_version: VENDOR_VERSION.to_owned(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(csi::GetPluginCapabilitiesResponse {
            capabilities: self.capabilities(),
        }))
    }

    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        // Serving means ready: the cloud session was made before the socket opened.
        Ok(Response::new(csi::ProbeResponse { ready: Some(true) }))
    }
}
