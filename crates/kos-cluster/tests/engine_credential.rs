//! The CCM's application credential on kos-sim: made with the roles the plan names (the member
//! and Octavia roles, never admin, even for an admin) and an expiry, and adopted as it is by the
//! next run.

mod engine_support;

use engine_support::*;
use kos_cluster::observe::observe;
use kos_cluster::plan::Op;
use kos_sim::SimConfig;

#[tokio::test]
async fn the_credential_has_the_planned_roles_and_an_expiry_not_admin() -> R {
    // An admin's token: admin implies member implies reader.
    let c = start_with(SimConfig {
        user_roles: vec!["admin".into(), "load-balancer_member".into()],
        ..SimConfig::fast()
    })
    .await?;
    let g = graph(&c.session, &Shape::small("cred", 0)).await?;
    let plan = plan_for(&c.session, &g).await?;
    let a = plan.for_node("appcred-ccm").ok_or("no credential action")?;
    assert_eq!(a.op, Op::Create);
    assert_eq!(
        a.changes,
        ["roles member, load-balancer_member; expires 90 days after it is made"]
    );
    assert!(
        plan.diff(false)
            .contains("roles member, load-balancer_member")
    );

    up(&c.session, &g).await?;
    let o = observe(&c.session, "cred").await?;
    let cred = &o.get("appcred-ccm")[0];
    let mut roles = cred.facts.roles.clone();
    roles.sort();
    // Keystone adds what member implies (reader); admin is not among them.
    assert_eq!(roles, ["load-balancer_member", "member", "reader"]);
    let at = cred.facts.expires_at.as_deref().ok_or("no expiry")?;
    let at = chrono::DateTime::parse_from_rfc3339(at)?;
    let days = (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_hours() as f64 / 24.0;
    assert!((89.9..=90.1).contains(&days), "expires in {days} days");

    // The next run keeps it.
    assert_eq!(pending(&c.session, &g).await?, 0);
    down(&c.session, "cred").await
}
