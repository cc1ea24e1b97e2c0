//! kos's access rules (`addons.credentialAccessRules`, `kos_cluster::access_rules::CALLS`) are
//! exactly what kos-ccm and kos-csi need. On kos-sim, whose services check a credential's rules as
//! keystonemiddleware does (a 401 for a request no rule allows) and record which rules allowed each
//! request, the scenarios of kos-ccm (a Service's load balancer made, changed, joined by a node,
//! monitored, disabled, made internal and deleted, with its floating IP and security group; a
//! node's server found, addressed, labelled, shut off and gone) and of kos-csi (volumes made, published, unpublished, snapshotted, restored, expanded and deleted) run
//! on an application credential carrying exactly kos's rules. Then no request was refused, and
//! every call of the table was the only one allowing some request: a call no flow needs fails by
//! name. The same with one rule left out fails with the 401, naming the request.

use anyhow::{Result, ensure};
use kos_cluster::access_rules::{CALLS, Call};
use kos_e2e::rules::{Use, rule_use};
use kos_e2e::{Ctx, Target, scenarios};
use kos_sim::SimConfig;

/// Calls of the table no flow here can drive, each with why it is still needed. Keep it tiny.
const NOT_DRIVEN: &[(&str, &str)] = &[];

/// Requests refused by kos's rules that nothing needs: openstack-sdk's version discovery at Cinder's
/// catalog URL (`/volume/v3/{project_id}`, then without the slash, then `/volume/v3`), all in
/// Cinder's authenticated pipeline. A real Cinder refuses them to a credential with rules too (seen
/// on minicloud: three 401s per session), the SDK then calls the catalog URL as it is, and
/// kos-cloud sends its own microversion, so no rule is spent on them.
fn refused_and_unneeded(request: &str) -> bool {
    let Some(rest) = request.strip_prefix("GET /volume/v3") else {
        return false;
    };
    let project = rest
        .strip_prefix('/')
        .map(|r| r.strip_suffix('/').unwrap_or(r));
    match project {
        None => rest.is_empty(),
        Some(p) => p.len() == 32 && p.chars().all(|c| c.is_ascii_hexdigit()),
    }
}

async fn sim(cfg: SimConfig, calls: &[Call]) -> Result<Ctx> {
    Ok(Target::sim(cfg).connect().await?.with_access_rules(calls))
}

#[tokio::test]
async fn every_rule_is_needed_and_every_request_allowed() -> Result<()> {
    let ctx = sim(SimConfig::fast(), CALLS).await?;
    // One after the other: each checks that nothing of the run is left after it.
    let lb = scenarios::ccm_load_balancer(&ctx).await;
    let changes = scenarios::ccm_load_balancer_changes(&ctx).await;
    let csi = scenarios::csi_controller(&ctx).await;
    let nodes = scenarios::ccm_nodes(&ctx).await;
    let used = rule_use(&ctx, CALLS).await?;
    // The 401s first: a flow that failed on one says which rule is missing.
    let refused: Vec<&String> = used
        .refused
        .iter()
        .filter(|r| !refused_and_unneeded(r))
        .collect();
    ensure!(
        refused.is_empty(),
        "refused (a rule is missing): {refused:?}"
    );
    lb?;
    changes?;
    csi?;
    nodes?;
    let unneeded: Vec<String> = used
        .unneeded(CALLS)
        .into_iter()
        .filter(|c| !NOT_DRIVEN.iter().any(|(d, _)| d == c))
        .collect();
    ensure!(
        unneeded.is_empty(),
        "grants more than needed: no request needs {unneeded:?} (requests allowed by several calls' rules: {:?})",
        used.shared
    );
    Ok(())
}

#[test]
fn only_cinder_version_discovery_is_refused_and_unneeded() {
    let project = "f54b516d1eac46c4a89cf7a34fdeb94e";
    for r in [
        "GET /volume/v3".to_owned(),
        format!("GET /volume/v3/{project}"),
        format!("GET /volume/v3/{project}/"),
    ] {
        assert!(refused_and_unneeded(&r), "{r}");
    }
    for r in [
        "GET /volume/v3/".to_owned(),
        format!("GET /volume/v3/{project}/volumes"),
        format!("POST /volume/v3/{project}"),
        "GET /volume/v3/not-a-project".to_owned(),
        "GET /compute/v2.1".to_owned(),
    ] {
        assert!(!refused_and_unneeded(&r), "{r}");
    }
}

/// Every call but `(method, path)`.
fn without(method: &str, path: &str) -> Vec<Call> {
    let left: Vec<Call> = CALLS
        .iter()
        .filter(|c| !(c.method == method && c.path == path))
        .copied()
        .collect();
    assert_eq!(
        left.len(),
        CALLS.len() - 1,
        "{method} {path} is one of kos's calls"
    );
    left
}

/// The flow fails with the 401, and the record names the request.
fn refused(outcome: Result<()>, used: &Use, request: &str) -> Result<()> {
    let e = match outcome {
        Ok(()) => anyhow::bail!("the flow succeeded without the rule for {request}"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(e.contains("401"), "not the 401: {e}");
    ensure!(
        used.refused.iter().any(|r| r.contains(request)),
        "refused {:?}, not {request}",
        used.refused
    );
    Ok(())
}

#[tokio::test]
async fn without_the_load_balancer_create_rule_kos_ccm_gets_the_401() -> Result<()> {
    let calls = without("POST", "lbaas/loadbalancers");
    let ctx = sim(SimConfig::fast(), &calls).await?;
    let outcome = scenarios::ccm_load_balancer(&ctx).await;
    let used = rule_use(&ctx, &calls).await?;
    refused(outcome, &used, "POST /load-balancer/v2/lbaas/loadbalancers")
}

#[tokio::test]
async fn without_the_attach_rule_kos_csi_gets_the_401() -> Result<()> {
    let calls = without("POST", "servers/*/os-volume_attachments");
    let ctx = sim(SimConfig::fast(), &calls).await?;
    let outcome = scenarios::csi_controller(&ctx).await;
    let used = rule_use(&ctx, &calls).await?;
    refused(outcome, &used, "/os-volume_attachments")
}

#[tokio::test]
async fn with_a_service_that_has_no_service_type_everything_there_is_refused() -> Result<()> {
    // The cloud kos cannot detect: Cinder's keystonemiddleware lacks service_type.
    let ctx = sim(
        SimConfig {
            no_service_type: vec![kos_sim::Service::BlockStorage],
            ..SimConfig::fast()
        },
        CALLS,
    )
    .await?;
    let outcome = scenarios::csi_controller(&ctx).await;
    let used = rule_use(&ctx, CALLS).await?;
    refused(outcome, &used, " /volume/v3/")
}

/// Whether the real cloud's services set `[keystone_authtoken] service_type`, and so check an
/// application credential's access rules: `KOS_E2E_SERVICE_TYPES=1` says they do
/// (`scripts/e2e-minicloud` sets it when `KOS_MINICLOUD_SERVICE_TYPES=1` made it start minicloud
/// so), unset or `0` that they do not (minicloud's default, as most clouds run).
fn services_check_rules() -> Result<bool> {
    match std::env::var("KOS_E2E_SERVICE_TYPES").as_deref() {
        Err(_) | Ok("0") => Ok(false),
        Ok("1") => Ok(true),
        Ok(v) => anyhow::bail!("KOS_E2E_SERVICE_TYPES={v:?}: say 1 or 0"),
    }
}

/// The differential check: on a real cloud (minicloud: Keystone, Nova, Neutron, Octavia and Cinder)
/// a credential with kos's rules gets the same answers as on kos-sim configured as that cloud is.
/// Where `[keystone_authtoken]` lacks `service_type` (as most clouds run): a 401 from every
/// service, even for what a rule allows, and Keystone (which knows its own type) enforcing the
/// rules on its own API. Where it is set: what a rule allows is answered, what none allows is a 401.
#[tokio::test]
#[ignore = "needs a real cloud: set KOS_E2E_CLOUD (see docs/testing.md)"]
async fn rules_answer_as_on_kos_sim() -> Result<()> {
    use kos_sim::Service::{BlockStorage, Compute, LoadBalancer, Network};
    let checked = services_check_rules()?;
    let real = Target::real()?.connect().await?;
    eprintln!("run {} (services check rules: {checked})", real.run.prefix);
    let sim = Target::sim(SimConfig {
        no_service_type: if checked {
            Vec::new()
        } else {
            vec![Compute, Network, LoadBalancer, BlockStorage]
        },
        ..SimConfig::fast()
    })
    .connect()
    .await?;
    let (theirs, ours) = (
        kos_e2e::rules::probe(&real).await?,
        kos_e2e::rules::probe(&sim).await?,
    );
    eprintln!("real cloud: {theirs:?}");
    ensure!(
        theirs == ours,
        "the real cloud answered {theirs:?}, kos-sim {ours:?}"
    );
    Ok(())
}

/// kos's rules, matched by a real keystonemiddleware: kos-ccm's and kos-csi's flows (the ones
/// `every_rule_is_needed_and_every_request_allowed` runs on kos-sim) on a credential holding
/// exactly kos's rules. Where services check rules, every flow runs to its end: a rule whose path
/// or method the real matcher reads differently from kos-sim fails here. Where they do not, kos-csi's
/// flow stops at its first request with the 401 (why `credentialAccessRules` stays off there; the
/// CCM's flows would retry the 401 until their timeout, which says nothing more).
#[tokio::test]
#[ignore = "needs a real cloud: set KOS_E2E_CLOUD (see docs/testing.md)"]
async fn every_flow_runs_on_kos_rules_on_a_real_cloud() -> Result<()> {
    let checked = services_check_rules()?;
    let ctx = Target::real()?.connect().await?.with_access_rules(CALLS);
    eprintln!("run {} (services check rules: {checked})", ctx.run.prefix);
    if !checked {
        let e = match scenarios::csi_controller(&ctx).await {
            Ok(()) => anyhow::bail!("kos-csi's flow ran although the services cannot check rules"),
            Err(e) => format!("{e:#}"),
        };
        ensure!(e.contains("401"), "not the 401: {e}");
        return Ok(());
    }
    let outcomes = [
        (
            "ccm_load_balancer",
            scenarios::ccm_load_balancer(&ctx).await,
        ),
        (
            "ccm_load_balancer_changes",
            scenarios::ccm_load_balancer_changes(&ctx).await,
        ),
        ("csi_controller", scenarios::csi_controller(&ctx).await),
        ("ccm_nodes", scenarios::ccm_nodes(&ctx).await),
    ];
    let failed: Vec<String> = outcomes
        .into_iter()
        .filter_map(|(flow, outcome)| outcome.err().map(|e| format!("{flow}: {e:#}")))
        .collect();
    ensure!(failed.is_empty(), "{}", failed.join("\n"));
    Ok(())
}
