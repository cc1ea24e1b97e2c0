//! The rotation's steps against an in-memory Keystone, cluster and store, including every place a run
//! can be killed.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;

use super::*;

const CONF: &str = "[Global]\nauth-url = https://keystone.example:5000/v3\nregion = RegionOne\n\
application-credential-id = old-id\napplication-credential-secret = old-secret\n\
\n[LoadBalancer]\nmanage-security-groups = true\n";

#[derive(Default)]
struct World {
    creds: RefCell<Vec<(Listed, String)>>,
    made: RefCell<u32>,
    conf: RefCell<String>,
    workloads: RefCell<Vec<Workload>>,
    /// Polls a changed workload needs before it reports done.
    lag: u32,
    polls: RefCell<u32>,
    pending: RefCell<Option<Credential>>,
    committed: RefCell<Option<Credential>>,
    /// The step at which the "process" dies (an error out of that call), counted from 1.
    die_at: RefCell<Option<u32>>,
    steps: RefCell<u32>,
}

impl World {
    fn new() -> World {
        let w = World::default();
        w.creds.borrow_mut().push((
            Listed {
                id: "old-id".into(),
                name: "kos-demo-ccm".into(),
            },
            "old-secret".into(),
        ));
        *w.conf.borrow_mut() = CONF.into();
        *w.workloads.borrow_mut() = vec![
            Workload {
                kind: WorkloadKind::DaemonSet,
                namespace: "kube-system".into(),
                name: "kos-ccm".into(),
                annotation: None,
            },
            Workload {
                kind: WorkloadKind::Deployment,
                namespace: "kube-system".into(),
                name: "csi-cinder-controllerplugin".into(),
                annotation: None,
            },
        ];
        w
    }

    fn step(&self) -> Result<(), Killed> {
        let mut n = self.steps.borrow_mut();
        *n += 1;
        if *self.die_at.borrow() == Some(*n) {
            return Err(Killed);
        }
        Ok(())
    }

    fn in_use(&self) -> String {
        global_value(&self.conf.borrow(), "application-credential-id").unwrap_or_default()
    }

    fn ids(&self) -> Vec<String> {
        self.creds
            .borrow()
            .iter()
            .map(|(l, _)| l.id.clone())
            .collect()
    }
}

/// The "process" died in a call: each seam reports it as its own kind of failure.
#[derive(Debug)]
struct Killed;

impl std::fmt::Display for Killed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("killed")
    }
}

impl std::error::Error for Killed {}

impl From<Killed> for KeystoneError {
    fn from(k: Killed) -> Self {
        KeystoneError::Unavailable(Box::new(k))
    }
}

impl From<Killed> for ApiError {
    fn from(k: Killed) -> Self {
        ApiError::Unreachable(Box::new(k))
    }
}

impl From<Killed> for StoreError {
    fn from(k: Killed) -> Self {
        StoreError::Write {
            location: "ccm-credential-next.json".into(),
            source: Box::new(k),
        }
    }
}

impl Keystone for World {
    async fn list(&self, names: &[String]) -> Result<Vec<Listed>, KeystoneError> {
        self.step()?;
        Ok(self
            .creds
            .borrow()
            .iter()
            .filter(|(l, _)| names.contains(&l.name))
            .map(|(l, _)| l.clone())
            .collect())
    }
    async fn create(&self, name: &str) -> Result<Credential, KeystoneError> {
        self.step()?;
        if self.creds.borrow().iter().any(|(l, _)| l.name == name) {
            return Err(KeystoneError::Refused(
                format!("409 duplicate name {name}").into(),
            ));
        }
        *self.made.borrow_mut() += 1;
        let n = *self.made.borrow();
        let id = format!("new-{n}");
        let secret = format!("secret-{n}");
        self.creds.borrow_mut().push((
            Listed {
                id: id.clone(),
                name: name.into(),
            },
            secret.clone(),
        ));
        Ok(Credential {
            id,
            name: name.into(),
            secret: SecretString::from(secret),
        })
    }
    async fn delete(&self, id: &str) -> Result<(), KeystoneError> {
        self.step()?;
        let mut creds = self.creds.borrow_mut();
        let before = creds.len();
        creds.retain(|(l, _)| l.id != id);
        if creds.len() == before {
            return Err(KeystoneError::NotFound);
        }
        Ok(())
    }
}

impl ClusterApi for World {
    async fn cloud_conf(&self) -> Result<SecretString, ApiError> {
        self.step()?;
        Ok(SecretString::from(self.conf.borrow().clone()))
    }
    async fn set_cloud_conf(&self, text: &SecretString) -> Result<(), ApiError> {
        self.step()?;
        *self.conf.borrow_mut() = text.expose_secret().to_owned();
        Ok(())
    }
    async fn workloads_mounting(&self, secret: &str) -> Result<Vec<Workload>, ApiError> {
        self.step()?;
        assert_eq!(secret, "cloud-config");
        Ok(self.workloads.borrow().clone())
    }
    async fn annotate(&self, w: &Workload, key: &str, value: &str) -> Result<(), ApiError> {
        self.step()?;
        assert_eq!(key, CREDENTIAL_ANNOTATION);
        for x in self.workloads.borrow_mut().iter_mut() {
            if x.name == w.name {
                x.annotation = Some(value.into());
            }
        }
        *self.polls.borrow_mut() = 0;
        Ok(())
    }
    async fn rollout(&self, w: &Workload) -> Result<Rollout, ApiError> {
        self.step()?;
        let mut p = self.polls.borrow_mut();
        *p += 1;
        let current = self
            .workloads
            .borrow()
            .iter()
            .find(|x| x.name == w.name)
            .and_then(|x| x.annotation.clone());
        // A pod reads cloud.conf when it starts: it runs on what the Secret held then.
        if current.is_some() && *p > self.lag {
            Ok(Rollout::Done)
        } else {
            Ok(Rollout::Waiting("0 of 1 updated pods available".into()))
        }
    }
}

impl CredentialStore for World {
    fn pending(&self) -> Result<Option<Credential>, StoreError> {
        Ok(self.pending.borrow().clone())
    }
    fn committed(&self) -> Result<Option<Credential>, StoreError> {
        Ok(self.committed.borrow().clone())
    }
    fn keep_pending(&self, c: &Credential) -> Result<(), StoreError> {
        self.step()?;
        *self.pending.borrow_mut() = Some(c.clone());
        Ok(())
    }
    fn commit(&self, c: &Credential) -> Result<(), StoreError> {
        self.step()?;
        *self.committed.borrow_mut() = Some(c.clone());
        *self.pending.borrow_mut() = None;
        Ok(())
    }
}

fn fast() -> Options {
    Options {
        timeout: Duration::from_secs(5),
        poll: Duration::from_millis(1),
    }
}

async fn run(w: &World) -> Result<Rotated, RotateError> {
    rotate("demo", w, w, w, fast(), &mut |_| {}).await
}

#[tokio::test]
async fn a_rotation_rolls_the_new_credential_out_before_deleting_the_old() {
    let w = World::new();
    let r = run(&w).await.unwrap();
    assert_eq!(r.name, "kos-demo-ccm-b");
    assert_eq!(w.in_use(), r.id);
    assert!(
        w.conf
            .borrow()
            .contains("application-credential-secret = \"secret-1\"\n"),
        "{}",
        w.conf.borrow()
    );
    assert!(
        w.conf
            .borrow()
            .contains("[LoadBalancer]\nmanage-security-groups = true\n")
    );
    assert_eq!(w.ids(), vec![r.id.clone()], "the old credential is gone");
    assert_eq!(r.deleted, vec!["old-id".to_owned()]);
    assert_eq!(r.rolled.len(), 2);
    assert!(
        w.workloads
            .borrow()
            .iter()
            .all(|x| x.annotation.as_deref() == Some("new-1"))
    );
    assert_eq!(
        w.committed.borrow().as_ref().map(|c| c.id.clone()),
        Some(r.id)
    );
    assert!(w.pending.borrow().is_none());
}

#[tokio::test]
async fn the_next_rotation_goes_back_to_the_first_name() {
    let w = World::new();
    run(&w).await.unwrap();
    let r = run(&w).await.unwrap();
    assert_eq!(r.name, "kos-demo-ccm");
    assert_eq!(w.ids(), vec![r.id]);
}

#[tokio::test]
async fn a_rollout_that_does_not_finish_keeps_the_old_credential() {
    let mut w = World::new();
    w.lag = u32::MAX;
    let e = rotate(
        "demo",
        &w,
        &w,
        &w,
        Options {
            timeout: Duration::from_millis(20),
            poll: Duration::from_millis(1),
        },
        &mut |_| {},
    )
    .await
    .unwrap_err();
    assert!(matches!(e, RotateError::RolloutTimeout { .. }), "{e}");
    assert!(
        e.to_string().contains("daemonset kube-system/kos-ccm"),
        "{e}"
    );
    assert!(
        w.ids().contains(&"old-id".to_owned()),
        "the old one is kept"
    );
    // Once the pods come up, running it again finishes without making a third credential.
    w.lag = 0;
    let r = run(&w).await.unwrap();
    assert_eq!(*w.made.borrow(), 1, "the pending credential is reused");
    assert_eq!(w.ids(), vec![r.id]);
}

/// Killed at every step in turn, then run again: one live credential, the one the Secret names,
/// every workload on it, and its secret kept.
#[tokio::test]
async fn killed_at_any_step_a_second_run_finishes_it() {
    let mut total = 0;
    {
        let w = World::new();
        run(&w).await.unwrap();
        total = total.max(*w.steps.borrow());
    }
    for die in 1..=total {
        let w = World::new();
        *w.die_at.borrow_mut() = Some(die);
        let first = run(&w).await;
        let kept_first = w.committed.borrow().as_ref().map(|c| c.id.clone());
        *w.die_at.borrow_mut() = None;
        let r = run(&w)
            .await
            .unwrap_or_else(|e| panic!("killed at step {die}: {e}"));
        assert_eq!(w.ids(), vec![r.id.clone()], "killed at step {die}");
        assert_eq!(w.in_use(), r.id, "killed at step {die}");
        let secret = w
            .creds
            .borrow()
            .iter()
            .find(|(l, _)| l.id == r.id)
            .map(|(_, s)| s.clone())
            .unwrap();
        assert!(
            w.conf
                .borrow()
                .contains(&format!("application-credential-secret = \"{secret}\"\n")),
            "killed at step {die}: the Secret holds the live credential's secret"
        );
        let kept = w.committed.borrow().clone().unwrap();
        assert_eq!(
            (kept.id.as_str(), kept.secret.expose_secret()),
            (r.id.as_str(), secret.as_str())
        );
        assert!(
            w.workloads
                .borrow()
                .iter()
                .all(|x| x.annotation.as_deref() == Some(r.id.as_str())),
            "killed at step {die}"
        );
        if first.is_ok() {
            // Killed after everything that matters: the second run rotated once more.
            assert_ne!(r.id, "new-1");
        } else if kept_first.as_deref() == Some("new-1") {
            // Killed after the new credential was kept, before the old one went: the second run
            // only deleted it (no third credential to roll out).
            assert_eq!(r.id, "new-1", "killed at step {die}");
            assert_eq!(*w.made.borrow(), 1, "killed at step {die}");
        }
    }
}

#[test]
fn cloud_conf_edits_touch_only_the_global_credential() {
    let conf = "# kos\n[Global]\nauth-url = x\napplication-credential-id = \"a\"\napplication-credential-secret=b\n[Other]\napplication-credential-id = keep\n";
    assert_eq!(
        global_value(conf, "application-credential-id").as_deref(),
        Some("a")
    );
    let out = with_credential(conf, "n", "s").unwrap();
    assert_eq!(
        out,
        "# kos\n[Global]\nauth-url = x\napplication-credential-id = \"n\"\napplication-credential-secret = \"s\"\n[Other]\napplication-credential-id = keep\n"
    );
    assert_eq!(
        with_credential("[Global]\nusername = u\npassword = p\n", "n", "s"),
        None,
        "a password cloud.conf is not rewritten"
    );
}

#[tokio::test]
async fn a_cloud_conf_without_an_application_credential_is_refused_before_keystone() {
    let w = World::new();
    *w.conf.borrow_mut() = "[Global]\nusername = u\npassword = p\n".into();
    let e = run(&w).await.unwrap_err();
    assert!(matches!(e, RotateError::NotAnApplicationCredential));
    assert_eq!(*w.made.borrow(), 0);
}

#[test]
fn errors_and_debug_never_show_a_secret() {
    let c = Credential {
        id: "i".into(),
        name: "n".into(),
        secret: SecretString::from("hunter2"),
    };
    assert!(!format!("{c:?}").contains("hunter2"));
}

/// Keystone deleting an old credential someone else deleted meanwhile says 404: the rotation
/// counts it done. Any other refusal stops the rotation, naming the step, with Keystone's error
/// as the cause.
#[tokio::test]
async fn a_credential_gone_already_is_deleted_and_a_refusal_is_reported_with_its_cause() {
    struct Gone<'a>(&'a World, KeystoneError);
    impl Keystone for Gone<'_> {
        async fn list(&self, names: &[String]) -> Result<Vec<Listed>, KeystoneError> {
            self.0.list(names).await
        }
        async fn create(&self, name: &str) -> Result<Credential, KeystoneError> {
            self.0.create(name).await
        }
        async fn delete(&self, id: &str) -> Result<(), KeystoneError> {
            // Gone before this call: what Keystone answers then.
            self.0.delete(id).await?;
            match &self.1 {
                KeystoneError::NotFound => Err(KeystoneError::NotFound),
                KeystoneError::Refused(e) => Err(KeystoneError::Refused(e.to_string().into())),
                KeystoneError::Unavailable(e) => {
                    Err(KeystoneError::Unavailable(e.to_string().into()))
                }
            }
        }
    }
    let w = World::new();
    let r = rotate(
        "demo",
        &Gone(&w, KeystoneError::NotFound),
        &w,
        &w,
        fast(),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert_eq!(r.deleted, ["old-id"]);
    assert_eq!(w.ids(), [r.id]);

    let w = World::new();
    let refused = KeystoneError::Refused("403 Forbidden: You are not authorized".into());
    let e = rotate("demo", &Gone(&w, refused), &w, &w, fast(), &mut |_| {})
        .await
        .unwrap_err();
    let RotateError::Keystone { what, source } = &e else {
        panic!("{e}")
    };
    assert_eq!(what, "deleting application credential old-id");
    assert!(!source.is_transient());
    assert_eq!(
        crate::api::chain(&e),
        "Keystone: deleting application credential old-id: Keystone refused the request: \
         403 Forbidden: You are not authorized"
    );
    // The new credential is live and committed before the old one goes.
    assert!(w.committed.borrow().is_some());
}

/// What the cluster's API failed at is named, its kind kept, and no secret is in the text.
#[tokio::test]
async fn a_failing_cluster_api_is_reported_by_step_without_a_secret() {
    let w = World::new();
    *w.die_at.borrow_mut() = Some(5);
    let e = run(&w).await.unwrap_err();
    let RotateError::Api { what, source } = &e else {
        panic!("{e}")
    };
    assert_eq!(what, "writing kube-system/cloud-config");
    assert!(source.is_transient());
    let shown = format!("{} {e:?}", crate::api::chain(&e));
    for secret in ["secret-1", "old-secret"] {
        assert!(!shown.contains(secret), "{shown}");
    }
}

mod recreate {
    use kos_cluster::graph::Kind;
    use kos_cluster::observe::{Facts, Resource};
    use kos_cluster::plan::{Action, Op, Plan};

    use crate::rotate::{Recreate, RecreateRefusal, recreate};

    fn action(id: &str, kind: Kind, op: Op, exists: bool) -> Action {
        Action {
            logical_id: id.into(),
            kind,
            name: format!("kos-demo-{id}"),
            op,
            reason: String::new(),
            changes: Vec::new(),
            existing: exists.then(|| Resource {
                kind,
                logical_id: id.into(),
                id: format!("id-{id}"),
                name: format!("kos-demo-{id}"),
                tagged: true,
                state: "ACTIVE".into(),
                failed: false,
                facts: Facts::default(),
            }),
        }
    }

    fn plan(credential: bool, servers: bool) -> Plan {
        let mut actions = vec![action(
            "appcred-ccm",
            Kind::AppCredential,
            Op::NoOp,
            credential,
        )];
        if servers {
            actions.push(action("cp-0", Kind::Server, Op::NoOp, true));
        }
        Plan {
            cluster: "demo".into(),
            actions,
            refused: Vec::new(),
        }
    }

    #[test]
    fn a_kept_credential_stays_unless_asked_and_nothing_uses_it() {
        let stored = Some("id-appcred-ccm");
        assert_eq!(
            recreate(&plan(true, true), false, stored, false),
            Ok(Recreate::No)
        );
        assert_eq!(
            recreate(&plan(true, false), false, stored, true),
            Ok(Recreate::Asked)
        );
        assert_eq!(
            recreate(&plan(true, true), false, stored, true),
            Err(RecreateRefusal::InUse)
        );
        // None made yet: made, asked or not.
        assert_eq!(
            recreate(&plan(false, false), false, None, false),
            Ok(Recreate::No)
        );
    }

    #[test]
    fn a_lost_secret_is_replaced_only_while_nothing_uses_it() {
        let lost = recreate(&plan(true, false), false, None, false).unwrap();
        assert_eq!(lost, Recreate::Lost);
        assert!(lost.recreates());
        // Another credential's secret is no secret of this one.
        let in_use = recreate(&plan(true, true), false, Some("other"), false).unwrap();
        assert_eq!(in_use, Recreate::LostInUse);
        assert!(!in_use.recreates());
    }

    #[test]
    fn a_rotation_in_flight_is_refused() {
        assert_eq!(
            recreate(&plan(true, true), true, Some("id-appcred-ccm"), false),
            Err(RecreateRefusal::Unfinished)
        );
        let mut p = plan(true, true);
        p.actions.push(action(
            "appcred-ccm-old",
            Kind::AppCredential,
            Op::Delete,
            true,
        ));
        assert_eq!(
            recreate(&p, false, Some("id-appcred-ccm"), false),
            Err(RecreateRefusal::Unfinished)
        );
    }
}
