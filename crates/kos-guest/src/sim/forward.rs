//! Local addresses for the clusters' API endpoints: a TCP listener on `127.0.0.1` per endpoint that
//! forwards each connection, at L4 as a load balancer or a floating IP does, to one of the API
//! servers the cloud's network reaches there (round robin, the next one when a connect fails). TLS
//! passes through untouched: clients verify the real serving certificate, for the endpoint's name
//! (kubectl's `tls-server-name`). One more per cluster stands in for the `kubernetes` Service that
//! pods use (every API server of the cluster).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kos_sim::guests::KubeEndpoint;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::cluster::ClusterId;

/// What a local address stands for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Key {
    /// An API endpoint (`host:port`), as the cluster's `controlPlaneEndpoint` names it.
    Endpoint(String),
    /// A cluster's `kubernetes` Service.
    Service(ClusterId),
}

type Routes = Arc<Mutex<Vec<SocketAddr>>>;

struct Forward {
    local: SocketAddr,
    routes: Routes,
    task: JoinHandle<()>,
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every local address.
#[derive(Default)]
pub(crate) struct Forwards {
    open: BTreeMap<Key, Forward>,
}

impl Forwards {
    /// Opens a listener for every key (on the port it had before when `ports` remembers one and it
    /// is free), closes those not wanted any more, and points each at its routes.
    pub fn reconcile(
        &mut self,
        wanted: BTreeMap<Key, Vec<SocketAddr>>,
        ports: &mut BTreeMap<String, u16>,
    ) {
        self.open.retain(|k, _| wanted.contains_key(k));
        for (key, routes) in wanted {
            if let Some(f) = self.open.get(&key) {
                *f.routes.lock().unwrap_or_else(PoisonError::into_inner) = routes;
                continue;
            }
            let remembered = match &key {
                Key::Endpoint(ep) => ports.get(ep).copied(),
                Key::Service(_) => None,
            };
            match open(remembered, routes) {
                Ok(f) => {
                    if let Key::Endpoint(ep) = &key {
                        ports.insert(ep.clone(), f.local.port());
                        tracing::debug!(endpoint = %ep, local = %f.local, "API endpoint forwarded");
                    }
                    self.open.insert(key, f);
                }
                Err(e) => tracing::warn!("cannot open a local address for {key:?}: {e}"),
            }
        }
    }

    pub fn local(&self, key: &Key) -> Option<SocketAddr> {
        self.open.get(key).map(|f| f.local)
    }

    /// The endpoints and their local addresses, by endpoint.
    pub fn endpoints(&self) -> Vec<KubeEndpoint> {
        self.open
            .iter()
            .filter_map(|(k, f)| match k {
                Key::Endpoint(ep) => Some(KubeEndpoint {
                    endpoint: ep.clone(),
                    local: f.local,
                }),
                Key::Service(_) => None,
            })
            .collect()
    }
}

fn bind(port: u16) -> std::io::Result<TcpListener> {
    let l = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    l.set_nonblocking(true)?;
    TcpListener::from_std(l)
}

fn open(port: Option<u16>, routes: Vec<SocketAddr>) -> std::io::Result<Forward> {
    let listener = match port.map(bind) {
        Some(Ok(l)) => l,
        _ => bind(0)?,
    };
    let local = listener.local_addr()?;
    let routes: Routes = Arc::new(Mutex::new(routes));
    let task = tokio::spawn(serve(listener, routes.clone()));
    Ok(Forward {
        local,
        routes,
        task,
    })
}

async fn serve(listener: TcpListener, routes: Routes) {
    let next = AtomicUsize::new(0);
    // Connections close with the listener (the endpoint went away).
    let mut conns = JoinSet::new();
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        while conns.try_join_next().is_some() {}
        let targets = routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let start = next.fetch_add(1, Ordering::Relaxed);
        conns.spawn(async move {
            let n = targets.len();
            for i in 0..n {
                let Some(t) = targets.get((start + i) % n) else {
                    continue;
                };
                if let Ok(mut upstream) = TcpStream::connect(t).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    return;
                }
            }
            // Nothing behind the endpoint: the connection is closed, as an LB without healthy
            // members (or a floating IP on a server that is off) leaves it unanswered.
        });
    }
}
