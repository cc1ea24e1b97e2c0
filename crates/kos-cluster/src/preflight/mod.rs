//! Preflight: the checks against the cloud that run after the spec is valid and before anything is created.
//!
//! [`preflight`] asks the cloud everything it needs at once (each list at most once, all lookups concurrently),
//! then checks the spec against the answers without further calls: images, flavors, the external network,
//! zones, the Octavia provider, volume types, a bring-your-own network, CIDR collisions with what the project's
//! routers reach, and quota against current usage. Every problem becomes a [`Diagnostic`] in a [`Report`] of
//! the same `cluster.yaml`, so it points at the line that needs changing; all of them are reported together.
//! On success the answers are condensed into the [`Resolved`] facts the desired graph is built from.
//!
//! Read-only by construction: only GETs are sent.

mod cidr;
mod facts;
mod quota;
mod resolve;

use std::fmt;

use kos_cloud::{CloudError, Session};

use crate::diagnostics::{Code, Diagnostic, Report};
use crate::resolved::Resolved;
use crate::spec::ClusterSpec;

pub use quota::{QuotaRow, QuotaTable, Resource};

/// What preflight learned: the facts for the desired graph, the warnings, and the quota it checked.
#[derive(Clone, Debug)]
pub struct Preflight {
    /// Every name in the spec resolved against the cloud.
    pub resolved: Resolved,
    /// Warnings only (it may be empty); render it like an error report.
    pub warnings: Report,
    /// Every quota line this cluster uses, short or not.
    pub quota: QuotaTable,
}

/// Why the cloud cannot run the spec: every problem found, plus the quota lines that are short.
#[derive(Clone, Debug)]
pub struct PreflightError {
    /// Errors and warnings, in file order; render with miette.
    pub report: Report,
    /// The quota lines that are short, when any is (also in the `quota_short` diagnostic's help).
    pub quota: Option<QuotaTable>,
    /// A lookup failed because the cloud was busy, failing or out of reach (after the session's retries):
    /// the checks that needed it did not run, so this is the cloud's failure, not the spec's; the same run
    /// may pass later.
    pub cloud_failed: bool,
}

impl fmt::Display for PreflightError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "preflight: {}", self.report)
    }
}

impl std::error::Error for PreflightError {}

impl miette::Diagnostic for PreflightError {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new("kos::preflight"))
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        miette::Diagnostic::source_code(&self.report)
    }

    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        miette::Diagnostic::related(&self.report)
    }
}

/// Checks `spec` (read from `file`, whose text is `source`) against the cloud of `session`.
///
/// # Errors
/// A [`PreflightError`] with every problem found when at least one is an error. A lookup that fails (a
/// service down, a forbidden call) is one of those problems (`kos::preflight::cloud_error`), so the other
/// checks still run.
pub async fn preflight(
    session: &Session,
    spec: &ClusterSpec,
    file: &str,
    source: &str,
) -> Result<Preflight, PreflightError> {
    checked(session, spec, file, source, None).await
}

/// [`preflight`] after an observe of the cluster ([`crate::observe::observe_listed`]): the lists
/// the observe made are read from `listed`, not asked again (a resync lists each type once).
///
/// # Errors
/// As [`preflight`].
pub async fn preflight_listed(
    session: &Session,
    spec: &ClusterSpec,
    file: &str,
    source: &str,
    listed: &crate::observe::Listed,
) -> Result<Preflight, PreflightError> {
    checked(session, spec, file, source, Some(listed)).await
}

async fn checked(
    session: &Session,
    spec: &ClusterSpec,
    file: &str,
    source: &str,
    listed: Option<&crate::observe::Listed>,
) -> Result<Preflight, PreflightError> {
    // Boxed: the gather is one large future (some twenty lookups joined), and a reconcile that
    // holds it inline overflowed a 2 MiB worker stack in a debug build.
    let facts = Box::pin(facts::Facts::gather(session, spec, listed)).await;
    let mut cx = Cx {
        report: Report::new(file, source),
        cloud_failed: false,
    };
    let resolved = resolve::resolve(&mut cx, spec, &facts);
    let table = quota::check(&mut cx, spec, &facts, resolved.as_ref());
    let cloud_failed = cx.cloud_failed;
    let mut report = cx.report;
    report.sort();
    match resolved {
        Some(resolved) if !report.has_errors() => Ok(Preflight {
            resolved,
            warnings: report,
            quota: table,
        }),
        _ => {
            let short = table.short();
            Err(PreflightError {
                report,
                quota: (!short.is_empty()).then_some(short),
                cloud_failed,
            })
        }
    }
}

/// The report being written, and the helpers every check uses.
pub(crate) struct Cx {
    report: Report,
    /// Some lookup failed for a reason that may pass (see [`PreflightError::cloud_failed`]).
    cloud_failed: bool,
}

impl Cx {
    fn push(&mut self, d: Diagnostic) {
        self.report.push(d);
    }

    /// Takes a lookup's answer, reporting a failure as an error: the checks that need it are skipped.
    fn got<'a, T>(&mut self, what: &str, r: &'a Result<T, CloudError>) -> Option<&'a T> {
        r.as_ref()
            .map_err(|e| {
                let help = if e.is_transient() {
                    self.cloud_failed = true;
                    "the cloud was busy or out of reach: nothing was changed; run the command again"
                } else {
                    "check that the service is up and that your credentials may read it, then retry"
                };
                self.push(
                    Diagnostic::error(
                        Code::CloudError,
                        "",
                        format!("could not {what}, so the checks that need it were skipped: {e}"),
                    )
                    .help(help),
                );
            })
            .ok()
    }
}

/// "1 vCPU", "2 vCPUs": counts in messages read as sentences.
fn plural(n: impl Into<u64>, what: &str) -> String {
    let n = n.into();
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// At most `max` items joined with `, `, then "and N more": help texts stay readable on big clouds.
fn some_of<I: IntoIterator<Item = String>>(items: I, max: usize) -> String {
    let all: Vec<String> = items.into_iter().collect();
    if all.is_empty() {
        return "none".into();
    }
    let mut s = all.iter().take(max).cloned().collect::<Vec<_>>().join(", ");
    if all.len() > max {
        s.push_str(&format!(" and {} more", all.len() - max));
    }
    s
}

#[cfg(test)]
mod tests {
    use kos_cloud::model::compute::Flavor;
    use kos_cloud::model::image::Image;
    use kos_cloud::model::load_balancer::Provider;
    use kos_cloud::model::network::Network;

    use super::facts::Facts;
    use super::*;
    use crate::spec::{ImageRef, ResourceRef};

    const SPEC: &str = "apiVersion: kos.dev/v1alpha1
kind: Cluster
metadata: {name: t}
spec:
  kubernetesVersion: 1.36.4
  network: {create: {cidr: 10.0.0.0/24}}
  apiEndpoint: {type: loadBalancer, provider: ovn}
  controlPlane: {count: 1, flavor: m1.medium, image: ubuntu}
";

    /// A cloud with one flavor, one image, one external network and only the amphora provider (kos-sim
    /// always offers both providers, so this case is checked here).
    fn facts() -> Facts {
        Facts {
            flavors: Ok(vec![Flavor {
                id: "3".into(),
                name: "m1.medium".into(),
                vcpus: 2,
                ram: 4096,
                disk: 40,
                ..Default::default()
            }]),
            images: vec![(
                ImageRef::Ref(ResourceRef::Name("ubuntu".into())),
                Ok(vec![Image {
                    id: "img".into(),
                    name: "ubuntu".into(),
                    status: "active".into(),
                    ..Default::default()
                }]),
            )],
            networks: Ok(vec![Network {
                id: "ext".into(),
                name: "public".into(),
                external: true,
                ..Default::default()
            }]),
            subnets: Ok(Vec::new()),
            routers: Ok(Vec::new()),
            ports: Ok(Vec::new()),
            zones: None,
            volume_zones: None,
            providers: Some(Ok(vec![Provider {
                name: "amphora".into(),
                description: String::new(),
            }])),
            volume_types: None,
            compute_limits: Ok(Default::default()),
            network_quotas: Ok(Default::default()),
            volume_quotas: None,
            lb_quotas: None,
            servers: Ok(Vec::new()),
            volumes: None,
            floating_ips: Ok(Vec::new()),
            security_groups: Ok(Vec::new()),
            server_groups: Ok(Vec::new()),
            load_balancers: Some(Ok(Vec::new())),
            token_roles: vec!["member".into(), "reader".into()],
        }
    }

    fn check(facts: &Facts) -> (Option<Resolved>, Report) {
        let spec = crate::load("t.yaml", SPEC).map(|l| l.spec);
        let Ok(spec) = spec else {
            panic!("test spec invalid: {spec:?}");
        };
        let mut cx = Cx {
            report: Report::new("t.yaml", SPEC),
            cloud_failed: false,
        };
        let r = resolve::resolve(&mut cx, &spec, facts);
        quota::check(&mut cx, &spec, facts, r.as_ref());
        (r, cx.report)
    }

    #[test]
    fn a_provider_octavia_does_not_offer_is_an_error_listing_the_enabled_ones() {
        let (resolved, report) = check(&facts());
        assert!(resolved.is_none());
        let d = report.errors().find(|d| d.code == Code::ProviderNotFound);
        let d = d.map(|d| (d.message.as_str(), d.help.as_deref().unwrap_or_default()));
        assert_eq!(
            d,
            Some((
                "spec.apiEndpoint.provider: Octavia on this cloud has no provider `ovn`",
                "set `apiEndpoint.provider` to one of the enabled providers: amphora"
            ))
        );
    }

    #[test]
    fn quota_that_cannot_be_read_is_a_warning_not_an_error() {
        let mut f = facts();
        f.providers = Some(Ok(vec![Provider {
            name: "ovn".into(),
            description: String::new(),
        }]));
        f.compute_limits = Err(CloudError::Failed {
            what: "limits".into(),
            detail: "gone".into(),
        });
        let (resolved, report) = check(&f);
        assert!(resolved.is_some(), "{report:?}");
        assert!(report.warnings().any(|d| d.code == Code::QuotaUnchecked));
    }
}
