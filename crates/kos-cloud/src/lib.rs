//! kos-cloud: kos's one OpenStack client layer. Everything kos sends to OpenStack goes through
//! [`Session::send`] (retries, call counters, tracing, redaction); the typed facades (compute,
//! network, …) build [`ApiRequest`]s and return kos's own model types. No other kos crate uses
//! `openstack_sdk`.

pub mod config;
mod connect;
pub mod counters;
pub mod error;
pub mod redact;
pub mod request;
pub mod retry;
pub mod session;

pub mod block_storage;
pub mod compute;
pub mod identity;
pub mod image;
pub mod load_balancer;
pub mod model;
pub mod network;
pub mod pace;
pub mod paging;
pub mod rate_limit;

pub use config::{AppCredentialRef, CloudProfile, Env, IdOrName, Interface, ProfileAuth, Source};
pub use counters::{CallCounts, CallObserver, CallRecord};
pub use error::{ApiErrorKind, CloudError};
pub use redact::Redactor;
pub use request::{ApiRequest, ApiResponse, ServiceKind};
pub use retry::RetryPolicy;
pub use session::{ServiceState, Session};
