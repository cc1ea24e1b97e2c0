//! What the autoscaler is told of a Cluster's pools, and the sizes it asks for: decided from the
//! Cluster's spec and the servers the cloud shows, with no call of its own.

use std::collections::BTreeMap;

use kos_cloud::model::compute::{Server, ServerStatus};
use kos_cluster::names::TAG_ID;
use kos_lifecycle::succession::TAG_RETIRE;

use super::proto::{InstanceErrorInfo, InstanceStatus, instance_status::InstanceState};

/// The scheme of a node's `spec.providerID`, as the OpenStack cloud controllers write it.
pub const PROVIDER_PREFIX: &str = "openstack://";
/// cluster-autoscaler's `OutOfResourcesErrorClass`: the autoscaler backs off the group.
pub const OUT_OF_RESOURCES: i32 = 1;
/// cluster-autoscaler's `OtherErrorClass`.
pub const OTHER_ERROR: i32 = 99;
/// The Cluster's annotation (`retire.kos.dev/<pool>`: server ids, comma-separated) recording the
/// servers whose `DeleteNodes` lowered the pool's count, written in the same patch as the count:
/// a retry after a lost answer, a conflict or a killed leader lowers it once per server.
pub const ACCOUNTED_PREFIX: &str = "retire.kos.dev/";

/// The annotation of `pool`'s accounted servers.
#[must_use]
pub fn accounted_key(pool: &str) -> String {
    format!("{ACCOUNTED_PREFIX}{pool}")
}

/// The server ids an annotation value holds.
#[must_use]
pub fn accounted_ids(value: &str) -> std::collections::BTreeSet<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The Cluster's annotation (`failed.kos.dev/<pool>`: a JSON object of server id → [`Failure`])
/// recording the servers of an autoscaled pool whose build failed. kos deletes such a server at
/// once, so the autoscaler would never see it fail; recorded, it is reported as an instance being
/// created with its error until the autoscaler deletes it (`DeleteNodes` of its fake node, which
/// lowers the count and drops the record) or [`FAILURE_HOLD_SECS`] pass, and meanwhile the pool's
/// turns do not boot it again (the count held one lower).
pub const FAILED_PREFIX: &str = "failed.kos.dev/";

/// How long a failed build is reported and held: cluster-autoscaler's default
/// `--max-node-provision-time` (15 minutes), after which it gives up on a node itself.
pub const FAILURE_HOLD_SECS: i64 = 15 * 60;

/// The annotation of `pool`'s failed builds.
#[must_use]
pub fn failed_key(pool: &str) -> String {
    format!("{FAILED_PREFIX}{pool}")
}

/// A server whose build failed: Nova's fault, and when kos saw it (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    pub fault: String,
    pub at: i64,
}

/// The failed builds an annotation value holds, those younger than [`FAILURE_HOLD_SECS`] at
/// `now`; a value that is not the JSON kos writes holds none.
#[must_use]
pub fn failures(value: &str, now: i64) -> BTreeMap<String, Failure> {
    let mut all: BTreeMap<String, Failure> = serde_json::from_str(value).unwrap_or_default();
    all.retain(|_, f| now - f.at < FAILURE_HOLD_SECS);
    all
}

/// An annotation's value for `failures`, or `None` for none (the annotation removed).
#[must_use]
pub fn failures_value(failures: &BTreeMap<String, Failure>) -> Option<String> {
    (!failures.is_empty())
        .then(|| serde_json::to_string(failures).ok())
        .flatten()
}

/// The longest fault kept in a record (the annotation stays small).
const MAX_FAULT: usize = 256;

/// `failures` with `found` (server id, fault) added at `now`, the expired dropped, and at most
/// `keep` (the newest).
#[must_use]
pub fn with_failures(
    mut failures: BTreeMap<String, Failure>,
    found: &[(String, String)],
    now: i64,
    keep: usize,
) -> BTreeMap<String, Failure> {
    for (server, fault) in found {
        let mut end = fault.len().min(MAX_FAULT);
        while !fault.is_char_boundary(end) {
            end -= 1;
        }
        failures.insert(
            server.clone(),
            Failure {
                fault: fault[..end].to_owned(),
                at: now,
            },
        );
    }
    failures.retain(|_, f| now - f.at < FAILURE_HOLD_SECS);
    while failures.len() > keep {
        let oldest = failures
            .iter()
            .min_by_key(|(_, f)| f.at)
            .map(|(id, _)| id.clone());
        match oldest {
            Some(id) => failures.remove(&id),
            None => break,
        };
    }
    failures
}

/// What the Cluster's annotations record of its autoscaled pools, read once: per pool, the servers
/// whose `DeleteNodes` lowered the count ([`ACCOUNTED_PREFIX`]) and the failed builds not expired
/// at the time read ([`FAILED_PREFIX`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    pub accounted: BTreeMap<String, std::collections::BTreeSet<String>>,
    pub failed: BTreeMap<String, BTreeMap<String, Failure>>,
}

impl Records {
    /// From a Cluster's annotations, at `now` (Unix seconds).
    #[must_use]
    pub fn of(annotations: &BTreeMap<String, String>, now: i64) -> Records {
        let mut r = Records::default();
        for (k, v) in annotations {
            if let Some(pool) = k.strip_prefix(ACCOUNTED_PREFIX) {
                r.accounted.insert(pool.to_owned(), accounted_ids(v));
            } else if let Some(pool) = k.strip_prefix(FAILED_PREFIX) {
                r.failed.insert(pool.to_owned(), failures(v, now));
            }
        }
        r
    }

    /// Every pool's accounted servers.
    #[must_use]
    pub fn all_accounted(&self) -> std::collections::BTreeSet<String> {
        self.accounted.values().flatten().cloned().collect()
    }

    /// `pool`'s accounted servers.
    #[must_use]
    pub fn accounted_of(&self, pool: &str) -> std::collections::BTreeSet<String> {
        self.accounted.get(pool).cloned().unwrap_or_default()
    }

    /// How many of `pool`'s failed builds the autoscaler has not taken yet (not accounted): the
    /// pool's turns run that much smaller, not booting them again behind its back.
    #[must_use]
    pub fn held(&self, pool: &str) -> u32 {
        let taken = self.accounted.get(pool);
        let held = self.failed.get(pool).map_or(0, |f| {
            f.keys()
                .filter(|id| !taken.is_some_and(|t| t.contains(*id)))
                .count()
        });
        u32::try_from(held).unwrap_or(u32::MAX)
    }
}

/// What a `DeleteNodes` does, in this order: take the tag off servers a call that failed before
/// its count was lowered left tagged (they would leave in place of the named ones), tag the named
/// servers, lower the count and record them in one patch, then delete the named servers Nova
/// will not tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    /// Named, not tagged yet, and taggable.
    pub tag: Vec<Member>,
    /// Named, and Nova will not tag them ([`Member::taggable`]): being built, or their build
    /// failed (what the autoscaler names after a create error). They never joined: deleted once
    /// the count is lowered (a turn in between takes a failed one first too: it has no booted
    /// server), unless already being deleted.
    pub remove: Vec<Member>,
    /// Tagged by a call that never lowered the count, and not named now.
    pub untag: Vec<Member>,
    /// Named, not accounted yet: the count is lowered by these.
    pub account: Vec<String>,
    /// The annotation's server ids after it: the pool's accounted and named servers that exist.
    pub accounted: std::collections::BTreeSet<String>,
    pub target: u32,
}

/// An autoscaled pool: a node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The pool's name: the node group's id.
    pub pool: String,
    /// Its place in `spec.nodePools` (the JSON patch's path).
    pub position: usize,
    pub min: u32,
    pub max: u32,
    /// `count`: the target size.
    pub target: u32,
}

/// The autoscaled pools of a Cluster's spec.
#[must_use]
pub fn groups(spec: &kos_cluster::schema::Spec) -> Vec<Group> {
    spec.node_pools
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(position, p)| {
            let a = p.autoscaling.as_ref()?;
            Some(Group {
                pool: p.name.clone(),
                position,
                min: a.min,
                max: a.max,
                target: p.count,
            })
        })
        .collect()
}

/// A server of a pool, as the cloud shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub server_id: String,
    /// The server's name: its node's name.
    pub name: String,
    pub pool: String,
    pub index: u32,
    pub status: ServerStatus,
    /// Nova's `task_state` (`deleting`).
    pub task: Option<String>,
    /// Tagged `kos-retire`: named by a `DeleteNodes`.
    pub retiring: bool,
    /// Its `DeleteNodes` lowered the count (the Cluster's annotation names it).
    pub accounted: bool,
    pub fault: Option<String>,
}

impl Member {
    /// Whether Nova takes a tag change on the server: not while it is being built nor once its
    /// build failed (`vm_state` building, error: nova/api/openstack/compute/server_tags.py allows
    /// active, paused, suspended, stopped and shelved servers only, and answers 409 otherwise).
    #[must_use]
    pub fn taggable(&self) -> bool {
        !matches!(self.status, ServerStatus::Build | ServerStatus::Error)
    }

    /// Being deleted, or gone.
    fn going(&self) -> bool {
        self.task.as_deref() == Some("deleting")
            || matches!(
                self.status,
                ServerStatus::Deleted | ServerStatus::SoftDeleted
            )
    }

    /// The node's `spec.providerID`.
    #[must_use]
    pub fn provider_id(&self) -> String {
        format!("{PROVIDER_PREFIX}/{}", self.server_id)
    }

    /// The instance as the autoscaler reads it. A server in ERROR is one whose creation failed:
    /// reported as creating with its error, so the autoscaler gives up on it and backs off the
    /// group (Nova's "No valid host" is out of resources).
    #[must_use]
    pub fn status(&self) -> InstanceStatus {
        // Named and its count lowered: on its way out (a tag alone is a call that failed).
        let deleting = self.accounted || self.going();
        let (state, error) = match self.status {
            _ if deleting => (InstanceState::InstanceDeleting, None),
            ServerStatus::Build => (InstanceState::InstanceCreating, None),
            ServerStatus::Error => {
                let message = self
                    .fault
                    .clone()
                    .unwrap_or_else(|| "the server went to ERROR".to_owned());
                let class = if message.contains("No valid host") {
                    OUT_OF_RESOURCES
                } else {
                    OTHER_ERROR
                };
                let error = InstanceErrorInfo {
                    error_code: "ERROR".to_owned(),
                    error_message: message,
                    instance_error_class: class,
                };
                (InstanceState::InstanceCreating, Some(error))
            }
            _ => (InstanceState::InstanceRunning, None),
        };
        InstanceStatus {
            instance_state: state.into(),
            error_info: error,
        }
    }
}

/// The pool servers among a cluster's servers (control planes and unknown ones left out); those in
/// `accounted` (server ids) had their `DeleteNodes` lower the count.
#[must_use]
pub fn members(servers: &[Server], accounted: &std::collections::BTreeSet<String>) -> Vec<Member> {
    servers
        .iter()
        .filter_map(|s| {
            let id = s.tags.iter().find_map(|t| {
                t.strip_prefix(TAG_ID)
                    .and_then(|rest| rest.strip_prefix('='))
            })?;
            let (pool, index) = id.rsplit_once('-')?;
            let index = index.parse().ok()?;
            (pool != "cp" && !pool.is_empty()).then(|| Member {
                server_id: s.id.clone(),
                name: s.name.clone(),
                pool: pool.to_owned(),
                index,
                status: s.status.clone(),
                task: s.task_state.clone(),
                retiring: s.tags.iter().any(|t| t == TAG_RETIRE),
                accounted: accounted.contains(&s.id),
                fault: s.fault.as_ref().map(|f| f.message.clone()),
            })
        })
        .collect()
}

/// The members [`members`] gives, with a member for each failed build `records` holds whose
/// server is gone: in ERROR with its fault, as Nova showed it.
#[must_use]
pub fn with_failed(mut members: Vec<Member>, records: &Records) -> Vec<Member> {
    let accounted = records.all_accounted();
    for (pool, failures) in &records.failed {
        for (server, f) in failures {
            if members.iter().any(|m| &m.server_id == server) {
                continue;
            }
            members.push(Member {
                server_id: server.clone(),
                name: format!("{pool}-failed-{server}"),
                pool: pool.clone(),
                index: u32::MAX,
                status: ServerStatus::Error,
                task: None,
                retiring: false,
                accounted: accounted.contains(server),
                fault: Some(f.fault.clone()),
            });
        }
    }
    members
}

/// The server id of a `spec.providerID` (`openstack:///<id>`, or with a region:
/// `openstack://<region>/<id>`).
#[must_use]
pub fn server_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix(PROVIDER_PREFIX)?;
    let (_, id) = rest.rsplit_once('/')?;
    (!id.is_empty()).then_some(id)
}

/// A size the autoscaler asked for that the group cannot take. Its message is the gRPC status's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("delta must be positive, got {0}")]
    NotPositive(i32),
    #[error("delta must be negative, got {0}")]
    NotNegative(i32),
    #[error("pool {pool}: size {size} would be above its max {max}")]
    AboveMax { pool: String, size: i64, max: u32 },
    #[error("pool {pool}: size {size} would be below its min {min}")]
    BelowMin { pool: String, size: i64, min: u32 },
    #[error(
        "pool {pool}: a target of {size} would delete existing nodes ({existing} servers); name \
         them with DeleteNodes"
    )]
    WouldDeleteExisting {
        pool: String,
        size: i64,
        existing: usize,
    },
    #[error("node {node} is not in pool {pool}")]
    NotInGroup { node: String, pool: String },
}

impl Group {
    /// The target after `IncreaseSize(delta)`.
    ///
    /// # Errors
    /// A delta that is not positive, or a size above `max`.
    pub fn increased(&self, delta: i32) -> Result<u32, SizeError> {
        if delta <= 0 {
            return Err(SizeError::NotPositive(delta));
        }
        let size = i64::from(self.target) + i64::from(delta);
        self.within(size)
    }

    /// The target after `DecreaseTargetSize(delta)`, which never deletes an existing server:
    /// only what was asked for and not yet made.
    ///
    /// # Errors
    /// A delta that is not negative, a size below `min`, or below the servers the pool has.
    pub fn decreased(&self, delta: i32, members: &[Member]) -> Result<u32, SizeError> {
        if delta >= 0 {
            return Err(SizeError::NotNegative(delta));
        }
        let size = i64::from(self.target) + i64::from(delta);
        let existing = self.existing(members);
        if size < existing as i64 {
            return Err(SizeError::WouldDeleteExisting {
                pool: self.pool.clone(),
                size,
                existing,
            });
        }
        self.within(size)
    }

    /// For `DeleteNodes`: what to do, and the target once the named servers are gone.
    ///
    /// # Errors
    /// A node of another pool (or none), or a size below `min`.
    pub fn deleting(
        &self,
        nodes: &[(String, String)],
        members: &[Member],
    ) -> Result<Deletion, SizeError> {
        let mut named = BTreeMap::new();
        for (provider_id, name) in nodes {
            let found = members.iter().find(|m| {
                server_id(provider_id).is_some_and(|id| id == m.server_id)
                    || (provider_id.is_empty() && &m.name == name)
            });
            let Some(m) = found.filter(|m| m.pool == self.pool) else {
                return Err(SizeError::NotInGroup {
                    node: if name.is_empty() {
                        provider_id.clone()
                    } else {
                        name.clone()
                    },
                    pool: self.pool.clone(),
                });
            };
            named.insert(m.server_id.clone(), m.clone());
        }
        // Counted once: a server its earlier DeleteNodes accounted for lowers nothing again.
        let account: Vec<String> = named
            .values()
            .filter(|m| !m.accounted)
            .map(|m| m.server_id.clone())
            .collect();
        let size = i64::from(self.target) - account.len() as i64;
        let target = self.within(size)?;
        let untag = members
            .iter()
            .filter(|m| {
                // One Nova will not untag (its server failed since) keeps the tag: retired
                // first, it is the one to go anyway.
                m.pool == self.pool
                    && m.retiring
                    && !m.accounted
                    && m.taggable()
                    && !named.contains_key(&m.server_id)
            })
            .cloned()
            .collect();
        let accounted = members
            .iter()
            .filter(|m| m.pool == self.pool && (m.accounted || named.contains_key(&m.server_id)))
            .map(|m| m.server_id.clone())
            .collect();
        let (tag, remove) = named.into_values().partition::<Vec<_>, _>(|m| m.taggable());
        Ok(Deletion {
            tag: tag.into_iter().filter(|m| !m.retiring).collect(),
            remove: remove.into_iter().filter(|m| !m.going()).collect(),
            untag,
            account,
            accounted,
            target,
        })
    }

    /// The pool's servers not on their way out (named and accounted).
    fn existing(&self, members: &[Member]) -> usize {
        members
            .iter()
            .filter(|m| m.pool == self.pool && !m.accounted)
            .count()
    }

    fn within(&self, size: i64) -> Result<u32, SizeError> {
        if size > i64::from(self.max) {
            return Err(SizeError::AboveMax {
                pool: self.pool.clone(),
                size,
                max: self.max,
            });
        }
        if size < i64::from(self.min) {
            return Err(SizeError::BelowMin {
                pool: self.pool.clone(),
                size,
                min: self.min,
            });
        }
        u32::try_from(size).map_err(|_| SizeError::BelowMin {
            pool: self.pool.clone(),
            size,
            min: self.min,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn group(min: u32, max: u32, target: u32) -> Group {
        Group {
            pool: "workers".into(),
            position: 0,
            min,
            max,
            target,
        }
    }

    fn member(id: &str, pool: &str, index: u32, status: ServerStatus) -> Member {
        Member {
            server_id: id.into(),
            name: format!("kos-demo-{pool}-{index}"),
            pool: pool.into(),
            index,
            status,
            task: None,
            retiring: false,
            accounted: false,
            fault: None,
        }
    }

    #[test]
    fn sizes_stay_within_the_group_and_its_servers() {
        let g = group(0, 3, 1);
        assert_eq!(g.increased(2), Ok(3));
        assert!(matches!(g.increased(3), Err(SizeError::AboveMax { .. })));
        assert!(matches!(g.increased(0), Err(SizeError::NotPositive(0))));
        let g = group(0, 3, 3);
        let one = [member("a", "workers", 0, ServerStatus::Active)];
        assert_eq!(g.decreased(-2, &one), Ok(1));
        assert!(matches!(
            g.decreased(-3, &one),
            Err(SizeError::WouldDeleteExisting { existing: 1, .. })
        ));
        assert!(matches!(
            g.decreased(1, &one),
            Err(SizeError::NotNegative(1))
        ));
        assert!(matches!(
            group(2, 3, 3).decreased(-2, &[]),
            Err(SizeError::BelowMin { .. })
        ));
    }

    #[test]
    fn delete_names_exactly_the_nodes_given_and_counts_each_once() {
        let g = group(0, 5, 3);
        let mut ms = vec![
            member("a", "workers", 0, ServerStatus::Active),
            member("b", "workers", 1, ServerStatus::Active),
            member("c", "workers", 2, ServerStatus::Active),
            member("x", "other", 0, ServerStatus::Active),
        ];
        let d = g
            .deleting(
                &[("openstack:///b".into(), "kos-demo-workers-1".into())],
                &ms,
            )
            .unwrap();
        let ids = |v: &[Member]| v.iter().map(|m| m.server_id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&d.tag), ["b"]);
        assert_eq!(d.account, ["b"]);
        assert_eq!(d.target, 2);
        assert!(d.untag.is_empty());
        assert_eq!(d.accounted.iter().collect::<Vec<_>>(), ["b"]);
        // Tagged, the count never lowered (a conflict, a lost answer, a killed leader): asked
        // again, it is lowered then, once.
        ms[1].retiring = true;
        let d = g
            .deleting(&[("openstack:///b".into(), String::new())], &ms)
            .unwrap();
        assert!(d.tag.is_empty());
        assert_eq!((d.account.len(), d.target), (1, 2));
        // Done (tagged and accounted): nothing more.
        ms[1].accounted = true;
        let g = group(0, 5, 2);
        let d = g
            .deleting(&[("openstack:///b".into(), String::new())], &ms)
            .unwrap();
        assert!(d.tag.is_empty() && d.account.is_empty());
        assert_eq!(d.target, 2);
        // Another call's tag that never lowered the count comes off, so that only the named
        // server leaves.
        ms[2].retiring = true;
        let d = g
            .deleting(&[("openstack:///a".into(), String::new())], &ms)
            .unwrap();
        assert_eq!(ids(&d.untag), ["c"]);
        assert_eq!(ids(&d.tag), ["a"]);
        assert_eq!(d.accounted.iter().collect::<Vec<_>>(), ["a", "b"]);
        // Another pool's node, or an unknown one, is refused.
        for node in ["openstack:///x", "openstack:///nope"] {
            assert!(matches!(
                g.deleting(
                    &[
                        ("openstack:///a".into(), String::new()),
                        (node.into(), String::new())
                    ],
                    &ms
                ),
                Err(SizeError::NotInGroup { .. })
            ));
        }
        assert!(matches!(
            group(2, 5, 2).deleting(&[("openstack:///a".into(), String::new())], &ms),
            Err(SizeError::BelowMin { .. })
        ));
    }

    /// A failed build kos deleted is an instance being created with its error until it expires;
    /// named by the autoscaler it is counted and deleted (a delete of a gone server is nothing).
    #[test]
    fn a_failed_build_kos_deleted_is_reported_until_named_or_expired() {
        let found = [("gone".to_owned(), "No valid host was found.".to_owned())];
        let f = with_failures(BTreeMap::new(), &found, 1_000, 3);
        let value = failures_value(&f).unwrap();
        assert_eq!(failures(&value, 1_000 + FAILURE_HOLD_SECS - 1).len(), 1);
        assert!(
            failures(&value, 1_000 + FAILURE_HOLD_SECS).is_empty(),
            "expired"
        );
        assert!(failures("not json", 0).is_empty());
        assert_eq!(failures_value(&BTreeMap::new()), None);
        // At most `keep`, the newest.
        let more: Vec<(String, String)> = (0..5).map(|i| (format!("s{i}"), "x".into())).collect();
        let mut f2 = BTreeMap::new();
        for (i, one) in more.iter().enumerate() {
            f2 = with_failures(f2, std::slice::from_ref(one), 1_000 + i as i64, 3);
        }
        assert_eq!(f2.keys().collect::<Vec<_>>(), ["s2", "s3", "s4"]);

        let real = vec![member("a", "workers", 0, ServerStatus::Active)];
        let annotations = BTreeMap::from([
            (failed_key("workers"), value.clone()),
            (accounted_key("workers"), "a".to_owned()),
        ]);
        let records = Records::of(&annotations, 1_000);
        assert_eq!(records.held("workers"), 1);
        assert_eq!(records.held("other"), 0);
        let ms = with_failed(real, &records);
        assert_eq!(ms.len(), 2);
        let s = ms[1].status();
        assert_eq!(s.instance_state, InstanceState::InstanceCreating as i32);
        let e = s.error_info.unwrap();
        assert_eq!(e.instance_error_class, OUT_OF_RESOURCES);
        assert_eq!(ms[1].provider_id(), "openstack:///gone");
        // The autoscaler's fake node for it: counted once, deleted.
        let fake = [(
            "openstack:///gone".to_owned(),
            "openstack:///gone".to_owned(),
        )];
        let d = group(0, 5, 2).deleting(&fake, &ms).unwrap();
        assert_eq!(d.target, 1);
        assert_eq!(d.account, ["gone"]);
        assert_eq!(d.remove.len(), 1);
        assert!(d.tag.is_empty());
        // A record of a server that still exists adds nothing.
        let real = vec![member("gone", "workers", 1, ServerStatus::Error)];
        assert_eq!(with_failed(real, &records).len(), 1);
        // Once accounted, it holds the pool no more.
        let annotations = BTreeMap::from([
            (failed_key("workers"), value),
            (accounted_key("workers"), "a,gone".to_owned()),
        ]);
        assert_eq!(Records::of(&annotations, 1_000).held("workers"), 0);
    }

    #[test]
    fn a_server_nova_will_not_tag_is_deleted_once_counted() {
        let ids = |v: &[Member]| v.iter().map(|m| m.server_id.clone()).collect::<Vec<_>>();
        // After a create error the autoscaler names the server whose build failed (its fake node:
        // name and providerID the instance's id); Nova answers a tag on it with 409.
        let mut ms = vec![
            member("a", "workers", 0, ServerStatus::Active),
            member("b", "workers", 1, ServerStatus::Error),
        ];
        let fake = [("openstack:///b".to_owned(), "openstack:///b".to_owned())];
        let d = group(0, 5, 2).deleting(&fake, &ms).unwrap();
        assert!(d.tag.is_empty(), "{:?}", d.tag);
        assert_eq!(ids(&d.remove), ["b"]);
        assert_eq!((d.account.as_slice(), d.target), (&["b".to_owned()][..], 1));
        // Asked again once counted (the delete may have failed): deleted, not counted again.
        ms[1].accounted = true;
        let d = group(0, 5, 1).deleting(&fake, &ms).unwrap();
        assert_eq!(ids(&d.remove), ["b"]);
        assert!(d.account.is_empty());
        assert_eq!(d.target, 1);
        // Already being deleted: nothing more.
        ms[1].task = Some("deleting".into());
        let d = group(0, 5, 1).deleting(&fake, &ms).unwrap();
        assert!(d.remove.is_empty() && d.tag.is_empty());
        // One still being built is not taggable either; a running one is tagged, as before.
        ms[0].status = ServerStatus::Build;
        let d = group(0, 5, 1)
            .deleting(&[("openstack:///a".into(), String::new())], &ms)
            .unwrap();
        assert_eq!(
            (ids(&d.remove), ids(&d.tag)),
            (vec!["a".to_owned()], vec![])
        );
        ms[0].status = ServerStatus::Active;
        let d = group(0, 5, 1)
            .deleting(&[("openstack:///a".into(), String::new())], &ms)
            .unwrap();
        assert_eq!(
            (ids(&d.remove), ids(&d.tag)),
            (vec![], vec!["a".to_owned()])
        );
        // Left tagged by a call that failed, then its server failed: not untagged (Nova would
        // answer 409 on every later call).
        ms[0].retiring = true;
        ms[0].status = ServerStatus::Error;
        ms.push(member("c", "workers", 2, ServerStatus::Active));
        let d = group(0, 5, 2)
            .deleting(&[("openstack:///c".into(), String::new())], &ms)
            .unwrap();
        assert!(d.untag.is_empty(), "{:?}", d.untag);
        assert_eq!(ids(&d.tag), ["c"]);
    }

    #[test]
    fn instance_states_follow_the_server() {
        let state = |m: &Member| m.status().instance_state;
        let mut m = member("a", "workers", 0, ServerStatus::Active);
        assert_eq!(state(&m), InstanceState::InstanceRunning as i32);
        m.status = ServerStatus::Build;
        assert_eq!(state(&m), InstanceState::InstanceCreating as i32);
        m.status = ServerStatus::Active;
        m.task = Some("deleting".into());
        assert_eq!(state(&m), InstanceState::InstanceDeleting as i32);
        m.task = None;
        m.retiring = true;
        assert_eq!(
            state(&m),
            InstanceState::InstanceRunning as i32,
            "a tag alone"
        );
        m.accounted = true;
        assert_eq!(state(&m), InstanceState::InstanceDeleting as i32);
        m.retiring = false;
        m.accounted = false;
        m.status = ServerStatus::Error;
        m.fault = Some("No valid host was found. There are not enough hosts available.".into());
        let s = m.status();
        assert_eq!(s.instance_state, InstanceState::InstanceCreating as i32);
        let e = s.error_info.unwrap();
        assert_eq!(e.instance_error_class, OUT_OF_RESOURCES);
        assert_eq!(e.error_code, "ERROR");
    }

    #[test]
    fn provider_ids_name_their_server() {
        assert_eq!(server_id("openstack:///abc"), Some("abc"));
        assert_eq!(server_id("openstack://RegionOne/abc"), Some("abc"));
        assert_eq!(server_id("aws:///abc"), None);
        assert_eq!(server_id("openstack:///"), None);
    }
}
