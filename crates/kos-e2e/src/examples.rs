//! The example clusters of the repository (examples/*.yaml), rewritten for the cloud a scenario runs on.
//!
//! Only what a cloud names differently changes: the cluster's name (unique per run), images, flavors,
//! the external network, zones, the boot volume type, the load-balancer provider, the bring-your-own
//! network's names, and pool sizes scaled down so that two clusters fit one project's default quotas
//! at once (10 instances, 20 vCPUs). Everything else of the example stays as written. Each edit must
//! match exactly where expected, so an example that changes breaks the scenario loudly instead of
//! silently testing something else.

use anyhow::{Context as _, Result, bail};
use kos_cloud::model::compute::Flavor;

use crate::Ctx;

/// kubeadm's minimum for a control plane, which kos's preflight enforces.
const CP_MIN_VCPUS: u32 = 2;
const CP_MIN_RAM_MB: u64 = 2048;

/// What the examples need from the cloud: from `KOS_E2E_*` variables where set, else found on it.
#[derive(Debug, Clone)]
pub struct Fit {
    /// `KOS_E2E_IMAGE`, else the smallest active image (by id: names need not be unique).
    pub image: String,
    /// Workers: `KOS_E2E_FLAVOR`, else the smallest flavor.
    pub flavor: String,
    /// Control planes: `KOS_E2E_CP_FLAVOR`, else the smallest with 2 vCPUs and 2 GiB.
    pub cp_flavor: String,
    /// `KOS_E2E_EXTERNAL_NETWORK`, else the cloud's one external network.
    pub external_network: String,
    /// Whether the external network was named by the variable (else minimal.yaml keeps finding it).
    pub external_network_pinned: bool,
    /// `KOS_E2E_ZONES` (comma-separated), else the available compute zones.
    pub zones: Vec<String>,
    /// `KOS_E2E_BOOT_VOLUMES` (`0` or `false`: boot from images; minicloud's Cinder cannot make a
    /// volume from an image), default true.
    pub boot_volumes: bool,
    /// `KOS_E2E_VOLUME_TYPE`, else `None`: keep the example's type when the cloud has it.
    pub volume_type: Option<String>,
    pub volume_types: Vec<String>,
    /// `KOS_E2E_LB_PROVIDER`, else `None`: keep the example's provider when the cloud offers it.
    pub lb_provider: Option<String>,
    pub lb_providers: Vec<String>,
}

fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
}

impl Fit {
    pub async fn of(ctx: &Ctx) -> Result<Fit> {
        let s = &ctx.session;
        let image = ctx.image().await?.id;
        let flavors = s.compute().list_flavors().await?;
        let usable = || flavors.iter().filter(|f| !f.disabled);
        let by_size = |f: &&Flavor| (f.ram, f.vcpus, f.disk);
        let flavor = match var("KOS_E2E_FLAVOR") {
            Some(f) => f,
            None => usable()
                .min_by_key(by_size)
                .context("the cloud offers no flavor")?
                .name
                .clone(),
        };
        let cp_flavor = match var("KOS_E2E_CP_FLAVOR") {
            Some(f) => f,
            None => usable()
                .filter(|f| f.vcpus >= CP_MIN_VCPUS && f.ram >= CP_MIN_RAM_MB)
                .min_by_key(by_size)
                .context(
                    "no flavor has 2 vCPUs and 2 GiB for a control plane: set KOS_E2E_CP_FLAVOR",
                )?
                .name
                .clone(),
        };
        let external_network = ctx.external_network().await?.name;
        let zones = match var("KOS_E2E_ZONES") {
            Some(z) => z.split(',').map(|z| z.trim().to_owned()).collect(),
            None => s
                .compute()
                .availability_zones()
                .await?
                .into_iter()
                .filter(|z| z.state.available)
                .map(|z| z.name)
                .collect(),
        };
        let volume_types = s
            .block_storage()
            .list_volume_types()
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect();
        let lb_providers = s
            .load_balancer()
            .list_providers()
            .await?
            .into_iter()
            .map(|p| p.name)
            .collect();
        Ok(Fit {
            image,
            flavor,
            cp_flavor,
            external_network,
            external_network_pinned: var("KOS_E2E_EXTERNAL_NETWORK").is_some(),
            zones,
            boot_volumes: !matches!(
                var("KOS_E2E_BOOT_VOLUMES").as_deref(),
                Some("0" | "false" | "no")
            ),
            volume_type: var("KOS_E2E_VOLUME_TYPE"),
            volume_types,
            lb_provider: var("KOS_E2E_LB_PROVIDER"),
            lb_providers,
        })
    }

    /// The example's provider when offered, else amphora (Octavia's reference), else the first.
    fn provider(&self, wanted: &str) -> Result<String> {
        if let Some(p) = &self.lb_provider {
            return Ok(p.clone());
        }
        let offered = |p: &str| self.lb_providers.iter().any(|o| o == p);
        if offered(wanted) {
            Ok(wanted.to_owned())
        } else if offered("amphora") {
            Ok("amphora".into())
        } else {
            self.lb_providers
                .first()
                .cloned()
                .context("the cloud offers no load-balancer provider")
        }
    }

    /// The control planes' boot volume type: `KOS_E2E_VOLUME_TYPE`, else the example's `ssd` when the
    /// cloud has it, else the cloud's default (`None`).
    pub fn boot_volume_type(&self) -> Option<&str> {
        match &self.volume_type {
            Some(t) => Some(t),
            None => self
                .volume_types
                .iter()
                .any(|t| t == "ssd")
                .then_some("ssd"),
        }
    }

    /// `[a, b]` of the zones to spread over.
    fn zone_list(&self) -> Result<String> {
        if self.zones.is_empty() {
            bail!("the cloud has no available compute zone: set KOS_E2E_ZONES");
        }
        Ok(format!("[{}]", self.zones.join(", ")))
    }
}

/// The bring-your-own network a scenario made for examples/byo-network.yaml.
#[derive(Debug, Clone)]
pub struct Byo {
    pub network: String,
    pub subnet: String,
    pub router: String,
}

/// examples/minimal.yaml: one control plane behind a floating IP, `workers` workers, on `cidr`.
pub fn minimal(fit: &Fit, cluster: &str, cidr: &str, workers: u32) -> Result<String> {
    let mut e = Edit::example("minimal.yaml")?;
    e.once("  name: demo\n", &format!("  name: {cluster}\n"))?;
    e.once(
        "      cidr: 10.0.0.0/24\n",
        &format!("      cidr: {cidr}\n"),
    )?;
    if fit.external_network_pinned {
        e.once(
            "    # externalNetwork is found automatically when the cloud has exactly one.\n",
            &format!("    externalNetwork: {}\n", fit.external_network),
        )?;
    }
    e.once(
        "    count: 1\n    flavor: m1.medium\n    image: ubuntu-24.04\n",
        &format!(
            "    count: 1\n    flavor: {}\n    image: {}\n",
            fit.cp_flavor, fit.image
        ),
    )?;
    e.once(
        "      count: 2\n      flavor: m1.medium\n      image: ubuntu-24.04\n",
        &format!(
            "      count: {workers}\n      flavor: {}\n      image: {}\n",
            fit.flavor, fit.image
        ),
    )?;
    Ok(e.text)
}

/// examples/ha.yaml: three control planes behind an Octavia LB with a floating IP, boot volumes, a
/// general and a tainted batch pool (one node each, down from 3 and 2: the quota of two clusters at once).
pub fn ha(fit: &Fit, cluster: &str) -> Result<String> {
    let mut e = Edit::example("ha.yaml")?;
    e.once("  name: prod\n", &format!("  name: {cluster}\n"))?;
    e.once(
        "    externalNetwork: public\n",
        &format!("    externalNetwork: {}\n", fit.external_network),
    )?;
    // The API's and the Services' provider.
    e.times(
        "    provider: amphora\n",
        &format!("    provider: {}\n", fit.provider("amphora")?),
        2,
    )?;
    e.once(
        "    count: 3\n    flavor: m1.large\n    # An image by name or id, or `{tags: [kos, ubuntu-24.04]}`: the one image carrying all these tags.\n    image: ubuntu-24.04\n",
        &format!(
            "    count: 3\n    flavor: {}\n    image: {}\n",
            fit.cp_flavor, fit.image
        ),
    )?;
    if fit.boot_volumes {
        match fit.boot_volume_type() {
            Some(t) => e.once("      type: ssd\n", &format!("      type: {t}\n"))?,
            // The cloud's default type.
            None => e.once("      type: ssd\n", "")?,
        }
    } else {
        e.once("    bootVolume:\n      sizeGB: 50\n      type: ssd\n", "")?;
        e.once("      bootVolume:\n        sizeGB: 100\n", "")?;
    }
    e.times(
        "availabilityZones: [az1, az2, az3]\n",
        &format!("availabilityZones: {}\n", fit.zone_list()?),
        2,
    )?;
    e.once(
        "      count: 3\n      flavor: m1.xlarge\n      image: ubuntu-24.04\n",
        &format!(
            "      count: 1\n      flavor: {}\n      image: {}\n",
            fit.flavor, fit.image
        ),
    )?;
    e.once(
        "      count: 2\n      flavor: m1.xlarge\n      image: ubuntu-24.04\n",
        &format!(
            "      count: 1\n      flavor: {}\n      image: {}\n",
            fit.flavor, fit.image
        ),
    )?;
    Ok(e.text)
}

/// examples/byo-network.yaml on `net`: three control planes behind a private LB, one worker (down from 3).
pub fn byo_network(fit: &Fit, cluster: &str, net: &Byo) -> Result<String> {
    let mut e = Edit::example("byo-network.yaml")?;
    e.once("  name: internal\n", &format!("  name: {cluster}\n"))?;
    e.once(
        "      network: private\n      subnet: private-subnet\n      router: router1\n",
        &format!(
            "      network: {}\n      subnet: {}\n      router: {}\n",
            net.network, net.subnet, net.router
        ),
    )?;
    e.once(
        "    provider: ovn\n",
        &format!("    provider: {}\n", fit.provider("ovn")?),
    )?;
    let image = "ubuntu-24.04";
    e.once(
        &format!("    count: 3\n    flavor: m1.large\n    image: {image}\n"),
        &format!(
            "    count: 3\n    flavor: {}\n    image: {}\n",
            fit.cp_flavor, fit.image
        ),
    )?;
    e.once(
        &format!("      count: 3\n      flavor: m1.large\n      image: {image}\n"),
        &format!(
            "      count: 1\n      flavor: {}\n      image: {}\n",
            fit.flavor, fit.image
        ),
    )?;
    Ok(e.text)
}

/// A spec's text with `(from, to)` edits that must each match a known number of times.
pub struct Edit {
    pub text: String,
}

impl Edit {
    /// examples/<file> of the repository.
    pub fn example(file: &str) -> Result<Edit> {
        let path = crate::workspace().join("examples").join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(Edit { text })
    }

    pub fn once(&mut self, from: &str, to: &str) -> Result<()> {
        self.times(from, to, 1)
    }

    pub fn times(&mut self, from: &str, to: &str, n: usize) -> Result<()> {
        let found = self.text.matches(from).count();
        if found != n {
            bail!(
                "the example changed: {from:?} occurs {found} time(s), expected {n}; adapt crates/kos-e2e/src/examples.rs"
            );
        }
        self.text = self.text.replace(from, to);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit() -> Fit {
        Fit {
            image: "img-1".into(),
            flavor: "m1.tiny".into(),
            cp_flavor: "m1.medium".into(),
            external_network: "ext".into(),
            external_network_pinned: false,
            zones: vec!["nova".into()],
            boot_volumes: true,
            volume_type: None,
            volume_types: vec!["__DEFAULT__".into()],
            lb_provider: None,
            lb_providers: vec!["amphora".into(), "octavia".into()],
        }
    }

    #[test]
    fn every_example_adapts_and_keeps_the_rest() -> Result<()> {
        let f = fit();
        let m = minimal(&f, "e2e-1-min", "10.0.1.0/24", 3)?;
        assert!(m.contains("name: e2e-1-min") && m.contains("count: 3"));
        assert!(m.contains("cidr: 10.0.1.0/24") && m.contains("type: floatingIP"));
        assert!(!m.contains("ubuntu-24.04") && !m.contains("externalNetwork: "));

        let h = ha(&f, "e2e-1-ha")?;
        assert!(h.contains("availabilityZones: [nova]") && !h.contains("[az1"));
        assert!(!h.contains("type: ssd") && h.contains("sizeGB: 100"));
        assert!(h.contains("externalNetwork: ext") && h.contains("provider: amphora"));
        assert!(h.contains("example.com/dedicated=batch:NoSchedule") && !h.contains("m1.xlarge"));

        let b = byo_network(
            &f,
            "e2e-1-byo",
            &Byo {
                network: "n".into(),
                subnet: "s".into(),
                router: "r".into(),
            },
        )?;
        assert!(b.contains("provider: amphora") && b.contains("      router: r\n"));
        assert!(!b.contains("ubuntu-24.04") && b.contains("allowedCIDRs: [172.16.0.0/12]"));

        let pinned = Fit {
            external_network_pinned: true,
            lb_providers: vec!["ovn".into()],
            volume_types: vec!["ssd".into()],
            ..fit()
        };
        assert!(minimal(&pinned, "c", "10.0.0.0/24", 2)?.contains("externalNetwork: ext"));
        assert!(ha(&pinned, "c")?.contains("type: ssd"));
        let images = Fit {
            boot_volumes: false,
            ..fit()
        };
        let h = ha(&images, "c")?;
        assert!(!h.contains("bootVolume") && !h.contains("sizeGB"), "{h}");
        assert!(
            byo_network(
                &pinned,
                "c",
                &Byo {
                    network: "n".into(),
                    subnet: "s".into(),
                    router: "r".into(),
                }
            )?
            .contains("provider: ovn")
        );
        Ok(())
    }

    #[test]
    fn an_edit_that_no_longer_matches_fails() {
        let mut e = Edit {
            text: "a: 1\n".into(),
        };
        assert!(e.once("b: 2\n", "b: 3\n").is_err());
        assert!(e.times("a: 1\n", "a: 2\n", 2).is_err());
    }
}
