//! What the access rules of the CCM's and CSI's credential were used for on kos-sim, read from its
//! per-credential record of keystonemiddleware's checks ([`kos_sim::app::Observations::rule_checks`]):
//! the requests refused (each a 401 naming its method and path), and for each call of the table
//! ([`kos_cluster::access_rules::CALLS`]) one request that its rules alone allowed — a call with
//! none could go from the table and nothing would change.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result};
use kos_cluster::access_rules::{Call, rules_for};

use crate::Ctx;

/// The requests of every credential with access rules on one simulator, against `calls`.
#[derive(Debug, Default)]
pub struct Use {
    /// `METHOD /path` of each request the rules refused.
    pub refused: BTreeSet<String>,
    /// For each call (its index in `calls`) a request that only its rules allowed.
    pub needed: BTreeMap<usize, String>,
    /// Requests that rules of several calls allowed (none of which is needed for it alone).
    pub shared: BTreeMap<String, BTreeSet<usize>>,
}

impl Use {
    /// The calls of `calls` no request needed, as `METHOD service path`.
    pub fn unneeded(&self, calls: &[Call]) -> Vec<String> {
        calls
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.needed.contains_key(i))
            .map(|(_, c)| describe(c))
            .collect()
    }
}

/// `GET Network ports`.
pub fn describe(c: &Call) -> String {
    format!("{} {:?} {}", c.method, c.service, c.path)
}

/// What the credentials with access rules on `ctx`'s simulator did, against `calls` (the calls
/// their rules were made from).
pub async fn rule_use(ctx: &Ctx, calls: &[Call]) -> Result<Use> {
    let sim = ctx.sim().context("rule use is kos-sim's record")?;
    // Each call's rules as the credential got them: (service type, method, whole path).
    let mut call_of: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for (i, c) in calls.iter().enumerate() {
        for r in rules_for(&ctx.session, std::slice::from_ref(c)).await {
            call_of.insert((r.service, r.method, r.path), i);
        }
    }
    let obs = sim.app().observations();
    let mut u = Use::default();
    for check in obs.rule_checks.values().flatten() {
        let request = format!("{} {}", check.method, check.path);
        if !check.allowed {
            u.refused.insert(request);
            continue;
        }
        let of: BTreeSet<usize> = check
            .matched
            .iter()
            .filter_map(|r| {
                let key = (r.service.clone(), r.method.clone(), r.path.clone());
                call_of.get(&key).copied()
            })
            .collect();
        match of.len() {
            1 => {
                let i = of.into_iter().next().unwrap_or_default();
                u.needed.entry(i).or_insert(request);
            }
            // Keystone's own token validation needs no rule.
            0 => {}
            _ => {
                u.shared.entry(request).or_default().extend(of);
            }
        }
    }
    Ok(u)
}

/// What one request on a credential with kos's rules got: `200` for an answer, else the status
/// (`0`: no HTTP answer).
pub type Probe = (&'static str, u16);

/// On `ctx`'s cloud, an application credential made as kos makes the CCM's and CSI's with access
/// rules (the rules of [`kos_cluster::access_rules::CALLS`]), then one request its rules allow on
/// each of Nova, Neutron, Octavia and Cinder, one they do not allow on Neutron, and one on Keystone
/// itself; the credential is deleted after. On a cloud whose services lack
/// `[keystone_authtoken] service_type` (minicloud, most clouds) every service request is a 401.
pub async fn probe(ctx: &Ctx) -> Result<Vec<Probe>> {
    use kos_cloud::model::TagQuery;
    use kos_cloud::model::block_storage::VolumeFilter;
    use kos_cloud::model::network::{NetworkFilter, RouterFilter};
    use kos_cloud::{AppCredentialRef, CloudError, CloudProfile, ProfileAuth, Session};

    let mut out = Vec::new();
    ctx.guarded(async |made| {
        let roles = kos_cluster::credential::ccm_roles(&ctx.session.token_roles())?;
        let mut req = kos_cluster::credential::request(
            &ctx.run.name("rules"),
            "e2e",
            &roles,
            1,
            chrono::Utc::now(),
        );
        req.access_rules = kos_cluster::access_rules::for_session(&ctx.session).await;
        let cred = ctx
            .session
            .identity()
            .create_application_credential(&req)
            .await?;
        made.push(crate::Made::AppCredential(cred.credential.id.clone()));
        anyhow::ensure!(
            cred.credential.access_rules.len() == req.access_rules.len(),
            "Keystone kept {} of {} rules",
            cred.credential.access_rules.len(),
            req.access_rules.len()
        );
        let session = Session::connect(&CloudProfile {
            name: format!("{}-rules", ctx.profile.name),
            auth: ProfileAuth::ApplicationCredential {
                credential: AppCredentialRef::Id(cred.credential.id.clone()),
                secret: cred.secret.clone(),
            },
            ..ctx.profile.clone()
        })
        .await?
        .with_retry_policy(kos_cloud::RetryPolicy::none());
        fn status<T>(r: Result<T, CloudError>) -> u16 {
            match r {
                Ok(_) => 200,
                Err(e) => e.status().unwrap_or(0),
            }
        }
        out.push((
            "nova GET servers/detail (allowed)",
            status(session.compute().list_servers(&TagQuery::default()).await),
        ));
        out.push((
            "neutron GET networks (allowed)",
            status(
                session
                    .network()
                    .list_networks(&NetworkFilter::default())
                    .await,
            ),
        ));
        out.push((
            "neutron GET routers (no rule)",
            status(
                session
                    .network()
                    .list_routers(&RouterFilter::default())
                    .await,
            ),
        ));
        out.push((
            "octavia GET lbaas/loadbalancers (allowed)",
            status(
                session
                    .load_balancer()
                    .list_load_balancers(&Default::default())
                    .await,
            ),
        ));
        out.push((
            "cinder GET volumes/detail (allowed)",
            status(
                session
                    .block_storage()
                    .list_volumes(&VolumeFilter::default())
                    .await,
            ),
        ));
        out.push((
            "keystone GET application_credentials (no rule)",
            status(session.identity().list_application_credentials(None).await),
        ));
        Ok(())
    })
    .await?;
    Ok(out)
}
