//! A router builder that records, for every endpoint it registers, the API-reference sample its response
//! must match. The sample-shape test walks this list, so an endpoint cannot be served without being
//! checked against the real service's wire format.

use std::collections::BTreeMap;

use axum::Router;
use axum::handler::Handler;
use axum::routing::{MethodFilter, MethodRouter};

use crate::app::SharedApp;
use crate::service::Service;

/// What a response is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// A file under `shared/api-samples/` (Nova's microversion directory names the version to request).
    File(&'static str),
    /// No body to check (204, 202 with empty body), or no upstream sample exists: the reason.
    NoBody(&'static str),
}

#[derive(Debug, Clone)]
pub struct EndpointDoc {
    pub service: Service,
    pub method: &'static str,
    /// axum path, e.g. `/compute/v2.1/servers/{id}`
    pub path: &'static str,
    pub sample: Sample,
}

pub struct Routes {
    service: Service,
    paths: BTreeMap<&'static str, MethodRouter<SharedApp>>,
    docs: Vec<EndpointDoc>,
}

impl Routes {
    pub fn new(service: Service) -> Self {
        Routes {
            service,
            paths: BTreeMap::new(),
            docs: Vec::new(),
        }
    }

    fn on<H, T>(
        mut self,
        method: &'static str,
        filter: MethodFilter,
        path: &'static str,
        handler: H,
        sample: Sample,
    ) -> Self
    where
        H: Handler<T, SharedApp>,
        T: 'static,
    {
        let mr = self.paths.remove(path).unwrap_or_default();
        self.paths.insert(path, mr.on(filter, handler));
        self.docs.push(EndpointDoc {
            service: self.service,
            method,
            path,
            sample,
        });
        self
    }

    pub fn get<H: Handler<T, SharedApp>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        sample: Sample,
    ) -> Self {
        self.on("GET", MethodFilter::GET, path, h, sample)
    }
    pub fn post<H: Handler<T, SharedApp>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        sample: Sample,
    ) -> Self {
        self.on("POST", MethodFilter::POST, path, h, sample)
    }
    pub fn put<H: Handler<T, SharedApp>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        sample: Sample,
    ) -> Self {
        self.on("PUT", MethodFilter::PUT, path, h, sample)
    }
    pub fn patch<H: Handler<T, SharedApp>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        sample: Sample,
    ) -> Self {
        self.on("PATCH", MethodFilter::PATCH, path, h, sample)
    }
    pub fn delete<H: Handler<T, SharedApp>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        sample: Sample,
    ) -> Self {
        self.on("DELETE", MethodFilter::DELETE, path, h, sample)
    }
    pub fn head<H: Handler<T, SharedApp>, T: 'static>(
        self,
        path: &'static str,
        h: H,
        sample: Sample,
    ) -> Self {
        self.on("HEAD", MethodFilter::HEAD, path, h, sample)
    }

    pub fn docs(&self) -> &[EndpointDoc] {
        &self.docs
    }

    /// The service these routes belong to.
    pub fn service(&self) -> Service {
        self.service
    }

    pub fn into_parts(self) -> (Router<SharedApp>, Vec<EndpointDoc>) {
        let mut r = Router::new();
        for (path, mr) in self.paths {
            r = r.route(path, mr);
        }
        (r, self.docs)
    }
}
