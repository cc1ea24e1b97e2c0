//! `addons.credentialAccessRules`: with it, the CCM's application credential `kos up` makes carries
//! kos's access rules for this cloud (kos-ccm's and kos-csi's calls under each service's endpoint
//! path, `kos_cluster::access_rules`), and the plan says so; without it, none.

mod engine_support;

use std::collections::BTreeSet;

use engine_support::*;
use kos_cluster::bootstrap::Formation;
use kos_cluster::graph::{DesiredGraph, desired};

async fn graph_with(c: &Cloud, shape: &Shape, rules: bool) -> Result<DesiredGraph, E> {
    let mut yaml = shape.yaml();
    if rules {
        yaml = yaml.replacen(
            "spec:\n",
            "spec:\n  addons: {credentialAccessRules: true, ccm: {kos: {image: \"ghcr.io/example/kos-ccm:v0.1.0\"}}, csi: {kos: {image: \"ghcr.io/example/kos-csi:v0.1.0\"}}}\n",
            1,
        );
    }
    let spec = kos_cluster::load("cluster.yaml", &yaml)
        .map(|l| l.spec)
        .map_err(|e| format!("{:?}", miette::Report::new(e)))?;
    assert_eq!(spec.addons.credential_access_rules, rules);
    let resolved = resolve(&c.session, &spec).await?;
    Ok(desired(&spec, &resolved, Formation::Fresh)?)
}

/// The rules Keystone keeps for the cluster's credential, as (service, method, path).
fn kept(c: &Cloud, cluster: &str) -> BTreeSet<(String, String, String)> {
    let name = format!("kos-{cluster}-ccm");
    let cloud = c.sim.app().cloud();
    let cred = cloud
        .keystone
        .app_creds
        .iter()
        .find(|a| a.name == name)
        .unwrap_or_else(|| panic!("no credential {name}"));
    cred.access_rules
        .iter()
        .map(|r| (r.service.clone(), r.method.clone(), r.path.clone()))
        .collect()
}

#[tokio::test]
async fn with_the_field_the_credential_carries_kos_rules_for_this_cloud() -> R {
    let c = start().await?;
    let g = graph_with(&c, &Shape::small("rules", 0), true).await?;
    let plan = plan_for(&c.session, &g).await?;
    let a = plan.for_node("appcred-ccm").ok_or("no credential action")?;
    assert!(
        a.changes.iter().any(
            |c| c.contains("access rules (addons.credentialAccessRules)")
                && c.contains("load-balancer")
        ),
        "{:?}",
        a.changes
    );

    up(&c.session, &g).await?;
    let want: BTreeSet<_> = kos_cluster::access_rules::for_session(&c.session)
        .await
        .into_iter()
        .map(|r| (r.service, r.method, r.path))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(kept(&c, "rules"), want);
    // The simulated cloud's own paths: the endpoint prefix and the project id are in them.
    let project = c.session.project_id().to_owned();
    assert!(want.contains(&(
        "compute".to_owned(),
        "GET".to_owned(),
        "/compute/v2.1/servers/*".to_owned()
    )));
    assert!(want.contains(&(
        "volumev3".to_owned(),
        "POST".to_owned(),
        format!("/volume/v3/{project}/volumes")
    )));
    assert_eq!(pending(&c.session, &g).await?, 0, "the next run keeps it");
    down(&c.session, "rules").await
}

#[tokio::test]
async fn without_the_field_the_credential_has_no_rules() -> R {
    let c = start().await?;
    let g = graph_with(&c, &Shape::small("norules", 0), false).await?;
    let plan = plan_for(&c.session, &g).await?;
    let a = plan.for_node("appcred-ccm").ok_or("no credential action")?;
    assert!(
        a.changes.iter().all(|c| !c.contains("access rules")),
        "{:?}",
        a.changes
    );
    up(&c.session, &g).await?;
    assert!(kept(&c, "norules").is_empty());
    down(&c.session, "norules").await
}

#[test]
fn anything_but_a_boolean_is_refused_naming_the_field() {
    let yaml = Shape::small("badrules", 0).yaml().replacen(
        "spec:\n",
        "spec:\n  addons: {credentialAccessRules: \"yes\"}\n",
        1,
    );
    let e = kos_cluster::load("cluster.yaml", &yaml).expect_err("a string is not a boolean");
    let text = format!("{:?}", miette::Report::new(e));
    assert!(text.contains("spec.addons.credentialAccessRules"), "{text}");
}

/// The rules name kos-ccm's and kos-csi's calls only: with the upstream CCM or cinder-csi (the
/// defaults) the spec is refused before anything is made, naming the field and the fix.
#[test]
fn rules_with_upstream_components_are_refused_before_the_cloud() {
    let yaml = Shape::small("uprules", 0).yaml().replacen(
        "spec:\n",
        "spec:\n  addons: {credentialAccessRules: true, ccm: {kos: {image: \"ghcr.io/example/kos-ccm:v0.1.0\"}}}\n",
        1,
    );
    let e = kos_cluster::load("cluster.yaml", &yaml).expect_err("cinder-csi with kos's rules");
    let text = format!("{:?}", miette::Report::new(e));
    assert!(
        text.contains("spec.addons.credentialAccessRules")
            && text.contains("csi: cinder")
            && !text.contains("ccm: upstream"),
        "{text}"
    );
}
