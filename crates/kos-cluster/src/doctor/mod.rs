//! `kos doctor`: static connectivity analysis of a cluster, by Neutron's and Octavia's semantics.
//!
//! Nothing here sends a packet. [`fetch`] reads what the cloud shows (ports, their port security and
//! allowed address pairs, security groups and rules, routers, floating IPs, the API load balancer and
//! the CCM's Service load balancers with their listeners, pools, members and monitors) into a
//! [`Snapshot`]; [`analyse`] walks the flows a working cluster needs ([`catalogue`]) through Neutron's
//! filtering ([`neutron`]) and Octavia's datapath ([`octavia`]) and returns a [`Report`]: each flow
//! allowed (with the rule that admits it), blocked (with what is missing) or unknown (with why).
//!
//! ```
//! use kos_cluster::doctor::{Snapshot, analyse};
//! let report = analyse(&Snapshot::default(), None);
//! assert!(!report.blocked());
//! ```

pub mod catalogue;
mod fetch;
pub mod intent;
pub mod model;
pub mod neutron;
pub mod octavia;
mod ranges;
pub mod report;
#[cfg(test)]
mod testutil;

pub use catalogue::analyse;
pub use fetch::fetch;
pub use intent::Intent;
pub use model::Snapshot;
pub use report::{Finding, Flow, Report, Section, Verdict};
