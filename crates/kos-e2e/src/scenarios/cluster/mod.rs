//! Cluster-level scenarios: the `kos` CLI (`plan`, `up`, `down`, `gc`) on the example clusters, rewritten
//! for the target ([`crate::examples`]), checked through the facades ([`crate::census`]).
//!
//! Each registers its cluster for cleanup (`kos down`) before the first `kos up`, so a failing scenario
//! still tears down, and [`Ctx::guarded`] then lists the cluster by tag, name prefix and metadata. On a
//! real cloud, `kos up --wait` is `KOS_E2E_WAIT` (default `infra`: test images run no kos bootstrap); on
//! kos-sim it is the default, which follows every node's bootstrap markers.

mod byo_network;
mod gc;
mod ha;
mod minimal;

pub use byo_network::cluster_byo_network;
pub use gc::cluster_gc;
pub use ha::cluster_ha;
pub use minimal::cluster_minimal;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail, ensure};
use kos_cloud::model::compute::{Server, ServerStatus};

use crate::census::{self, Census, Obj, show};
use crate::cli::{Kos, Ran};
use crate::{Cleanup, Ctx, Made};

/// One cluster of a scenario, and the CLI that manages it.
pub(crate) struct Cluster<'a> {
    pub ctx: &'a Ctx,
    pub kos: &'a Kos,
    pub name: String,
}

/// A plan's changes, as `(op, logical id)`: `("create", "workers-2")`.
pub(crate) type Changes = BTreeSet<(String, String)>;

impl<'a> Cluster<'a> {
    /// A cluster `e2e-<run>-<what>`, registered for `kos down` before anything of it exists.
    pub async fn new(ctx: &'a Ctx, made: &mut Cleanup, what: &str) -> Result<Cluster<'a>> {
        let kos = ctx.kos().await?;
        let name = ctx.run.cluster(what);
        made.push(Made::Cluster(name.clone()));
        let c = Cluster { ctx, kos, name };
        let stale = c.census().await?;
        ensure!(
            stale.is_empty(),
            "cluster {} exists before the scenario made it:\n{}",
            c.name,
            stale.list()
        );
        Ok(c)
    }

    /// `kos-<cluster>-<logical id>`.
    pub fn object(&self, logical: &str) -> String {
        format!("kos-{}-{logical}", self.name)
    }

    pub fn spec(&self, file: &str, text: &str) -> Result<PathBuf> {
        self.kos.write_spec(&format!("{}-{file}", self.name), text)
    }

    pub async fn census(&self) -> Result<Census> {
        census::census(&self.ctx.session, &self.name).await
    }

    /// The plan's changes (everything but no-ops), from `kos plan --output json`.
    pub async fn planned(&self, spec: &Path) -> Result<Changes> {
        let plan = self.kos.plan_json(spec).await?;
        ensure!(
            plan["cluster"] == self.name.as_str(),
            "plan of another cluster: {}",
            plan["cluster"]
        );
        let actions = plan["actions"]
            .as_array()
            .context("plan JSON without actions")?;
        actions
            .iter()
            .filter(|a| a["op"] != "no-op")
            .map(|a| {
                let op = a["op"].as_str().context("action without op")?;
                let id = a["logical_id"].as_str().context("action without id")?;
                Ok((op.to_owned(), id.to_owned()))
            })
            .collect()
    }

    /// `kos plan --detailed-exitcode` says `changes` are pending (exit 2), `kos up` makes exactly them,
    /// follows the new nodes as far as `--wait` asks, and the cluster is converged afterwards.
    pub async fn up(&self, spec: &Path, changes: &Changes) -> Result<Ran> {
        let planned = self.planned(spec).await?;
        ensure!(
            &planned == changes,
            "plan for {}:\n  planned:  {planned:?}\n  expected: {changes:?}",
            spec.display()
        );
        self.kos
            .plan(spec)
            .await?
            .expect(if changes.is_empty() { 0 } else { 2 })?;
        let first = self.kos.try_up(spec).await?;
        if first.hit_scheduling_race() {
            // What the error's own help says: run it again, it continues where it stopped. The
            // exact changes are then split over two runs; convergence is still checked below.
            eprintln!(
                "`{}` met Nova's anti-affinity scheduling race; running it again\n{}",
                first.line,
                first.output()
            );
            if first.stderr.contains("No valid host was found") {
                // Nova's scheduler may still count the lost boot on the free host until the compute
                // hosts' instance sync: a run at once would meet the same view. As long as kos
                // itself waits for it.
                tokio::time::sleep(kos_cluster::apply::ApplyOptions::default().scheduler_sync)
                    .await;
            }
            let again = self.kos.up(spec).await?;
            self.converged(spec).await?;
            return Ok(again);
        }
        let up = first.expect(0)?;
        let said = format!(
            "Cluster {} is up: {} change(s) made.",
            self.name,
            changes.len()
        );
        ensure!(
            up.stdout.contains(&said),
            "`{}` did not say {said:?}\n{}",
            up.line,
            up.output()
        );
        let created: Vec<&str> = changes
            .iter()
            .filter(|(op, _)| op == "create")
            .map(|(_, id)| id.as_str())
            .collect();
        self.followed(&up, &created)?;
        self.converged(spec).await?;
        Ok(up)
    }

    /// From nothing: every object of the plan is a create, and after `up` the cloud holds them.
    pub async fn up_from_zero(&self, spec: &Path) -> Result<Census> {
        let planned = self.planned(spec).await?;
        ensure!(
            planned.iter().all(|(op, _)| op == "create") && !planned.is_empty(),
            "a fresh cluster's plan: {planned:?}"
        );
        self.up(spec, &planned).await?;
        // Every flow the cluster needs passes the cloud's security groups and load balancers, as the
        // cloud shows them (on minicloud: its real Neutron and Octavia objects, amphora ports included).
        self.kos
            .doctor(&self.name, spec)
            .await?
            .expect(0)
            .context("kos doctor after `kos up`")?;
        let census = self.census().await?;
        for s in self.servers().await? {
            ensure!(
                s.status == ServerStatus::Active,
                "server {} is {}",
                s.name,
                s.status
            );
        }
        Ok(census)
    }

    /// `kos plan --detailed-exitcode` exits 0 and its JSON holds only no-ops.
    pub async fn converged(&self, spec: &Path) -> Result<()> {
        let plan = self.kos.plan(spec).await?;
        plan.expect(0)
            .context("the plan after `kos up` is not empty")?;
        let left = self.planned(spec).await?;
        ensure!(left.is_empty(), "plan JSON after `kos up`: {left:?}");
        Ok(())
    }

    /// Re-running `kos up` adopts everything and creates nothing: no change reported, and the cloud holds
    /// exactly the same objects (same ids) as `before`.
    pub async fn up_again_changes_nothing(&self, spec: &Path, before: &Census) -> Result<()> {
        self.up(spec, &Changes::new()).await?;
        self.unchanged_since(before).await
    }

    /// The cloud holds exactly `before`'s objects.
    pub async fn unchanged_since(&self, before: &Census) -> Result<()> {
        let after = self.census().await?;
        let (added, removed) = before.diff(&after);
        ensure!(
            added.is_empty() && removed.is_empty(),
            "objects changed:\n added:\n{}\n removed:\n{}",
            show(&added),
            show(&removed)
        );
        Ok(())
    }

    /// The census changed by exactly `added` and `removed` (as `(kind, logical id)`).
    pub fn changed_by(
        &self,
        before: &Census,
        after: &Census,
        added: &[(&str, &str)],
        removed: &[(&str, &str)],
    ) -> Result<()> {
        let (plus, minus) = before.diff(after);
        let shape = |set: &BTreeSet<Obj>| -> BTreeSet<(String, String)> {
            set.iter()
                .map(|o| (o.kind.to_owned(), o.name.clone()))
                .collect()
        };
        let want = |l: &[(&str, &str)]| -> BTreeSet<(String, String)> {
            l.iter()
                .map(|(k, id)| ((*k).to_owned(), self.object(id)))
                .collect()
        };
        ensure!(
            shape(&plus) == want(added) && shape(&minus) == want(removed),
            "objects changed:\n added:\n{}  expected {added:?}\n removed:\n{}  expected {removed:?}",
            show(&plus),
            show(&minus)
        );
        Ok(())
    }

    /// The cluster's servers (by its tag).
    pub async fn servers(&self) -> Result<Vec<Server>> {
        let q = kos_cloud::model::TagQuery::all([format!("kos-cluster={}", self.name)]);
        Ok(self.ctx.session.compute().list_servers(&q).await?)
    }

    /// The servers named `kos-<cluster>-<id>` for `ids`, exactly.
    pub async fn expect_servers(&self, ids: &[&str]) -> Result<Vec<Server>> {
        let servers = self.servers().await?;
        let names: BTreeSet<String> = servers.iter().map(|s| s.name.clone()).collect();
        let want: BTreeSet<String> = ids.iter().map(|id| self.object(id)).collect();
        ensure!(names == want, "servers {names:?}, expected {want:?}");
        for s in &servers {
            let id = s
                .name
                .strip_prefix(&self.object(""))
                .context("server name")?;
            for t in [format!("kos-cluster={}", self.name), format!("kos-id={id}")] {
                ensure!(s.tags.contains(&t), "server {} lacks tag {t}", s.name);
            }
        }
        Ok(servers)
    }

    /// `kos up` followed the servers it created as far as `--wait` asks: with `infra` it says it did
    /// not; otherwise each new server shows its final `bootstrap` marker.
    fn followed(&self, up: &Ran, created: &[&str]) -> Result<()> {
        let wait = self.kos.cloud().wait.as_str();
        if wait == "infra" {
            ensure!(
                up.stdout.contains("Bootstrap: not followed (--wait infra)"),
                "`{}` followed the bootstrap:\n{}",
                up.line,
                up.output()
            );
            return Ok(());
        }
        let servers: Vec<&str> = created
            .iter()
            .copied()
            .filter(|id| is_server_id(id))
            .collect();
        for id in servers {
            let shown = up
                .stdout
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{id} ")) && l.contains("bootstrap "));
            ensure!(
                shown,
                "`{}` shows no finished bootstrap for {id}\n{}",
                up.line,
                up.output()
            );
        }
        Ok(())
    }

    /// `kos down` removes everything: by tag, name and the CCM's conventions nothing is left, the local
    /// secrets are gone, and `kos gc` finds nothing of the cluster.
    pub async fn down(&self) -> Result<()> {
        let before = self.census().await?;
        let down = self.kos.down(&self.name).await?;
        let said = format!("Cluster {} deleted:", self.name);
        ensure!(
            down.stdout.contains(&said),
            "`{}` did not say {said:?}\n{}",
            down.line,
            down.output()
        );
        let left = self.census().await?;
        if !left.is_empty() {
            bail!(
                "after `kos down` of {}:\n{}(of {} objects before)",
                self.name,
                left.list(),
                before.0.len()
            );
        }
        ensure!(
            !self.kos.cluster_dir(&self.name).exists(),
            "the cluster's local secrets outlived `kos down`"
        );
        self.gc_finds_nothing().await
    }

    /// `kos gc` lists nothing of this cluster (and on a private simulator, nothing at all).
    pub async fn gc_finds_nothing(&self) -> Result<()> {
        let (ran, orphans) = self.kos.gc(&[]).await?;
        let ours: Vec<&String> = orphans
            .iter()
            .filter(|(c, _)| *c == self.name)
            .map(|(_, l)| l)
            .collect();
        ensure!(ours.is_empty(), "`kos gc` lists {}: {ours:#?}", self.name);
        if self.ctx.is_sim() {
            ensure!(
                ran.stdout.trim() == "No orphans.",
                "`kos gc` on a cloud of this scenario alone:\n{}",
                ran.output()
            );
        }
        Ok(())
    }
}

/// Logical ids of servers: `cp-0`, `<pool>-<n>` (not `port-…`, `vol-…`, `sgroup-…` and the like).
fn is_server_id(id: &str) -> bool {
    let Some((pool, n)) = id.rsplit_once('-') else {
        return false;
    };
    n.chars().all(|c| c.is_ascii_digit())
        && !["port", "vol", "sgroup"]
            .iter()
            .any(|p| pool == *p || pool.starts_with(&format!("{p}-")))
}

/// `("create", id)` for each id.
pub(crate) fn creates(ids: &[&str]) -> Changes {
    ids.iter()
        .map(|id| ("create".to_owned(), (*id).to_owned()))
        .collect()
}

/// `("delete", id)` for each id.
pub(crate) fn deletes(ids: &[&str]) -> Changes {
    ids.iter()
        .map(|id| ("delete".to_owned(), (*id).to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_ids_are_told_from_other_indexed_ids() {
        for id in ["cp-0", "workers-12", "general-0", "gpu-1"] {
            assert!(is_server_id(id), "{id}");
        }
        for id in [
            "port-cp-0",
            "vol-general-0",
            "sgroup-workers",
            "network",
            "api-fip",
        ] {
            assert!(!is_server_id(id), "{id}");
        }
    }
}
