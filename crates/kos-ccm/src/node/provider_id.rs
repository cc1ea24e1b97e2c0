//! `spec.providerID` of a Node: `openstack:///<server id>`, or `openstack://<region>/<server id>`
//! with the upstream's `OS_CCM_REGIONAL=true`. Parsing follows the upstream exactly
//! (`instanceIDFromProviderID`): a value without `://` gets `openstack://` put in front (k/k#85731),
//! then must match `^openstack://([^/]*)/([^/]+)$`. The format must stay stable: existing Nodes and
//! the load-balancer code parse it.

use std::fmt;

/// The provider name in providerIDs.
pub const PROVIDER_NAME: &str = "openstack";

/// The upstream's switch for the regional form (read by the binary, not here).
pub const REGIONAL_PROVIDER_ID_ENV: &str = "OS_CCM_REGIONAL";

/// A parsed providerID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderId {
    /// `None` for the `openstack:///<id>` form.
    pub region: Option<String>,
    pub server_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("providerID {0:?} does not match the expected format \"openstack://[region]/<server id>\"")]
pub struct ProviderIdError(pub String);

impl ProviderId {
    /// The providerID of a server; `region` only for the regional form.
    pub fn new(server_id: impl Into<String>, region: Option<&str>) -> ProviderId {
        ProviderId {
            region: region.filter(|r| !r.is_empty()).map(str::to_owned),
            server_id: server_id.into(),
        }
    }

    pub fn parse(s: &str) -> Result<ProviderId, ProviderIdError> {
        let err = || ProviderIdError(s.to_owned());
        let full = if !s.is_empty() && !s.contains("://") {
            format!("{PROVIDER_NAME}://{s}")
        } else {
            s.to_owned()
        };
        let rest = full
            .strip_prefix(PROVIDER_NAME)
            .and_then(|r| r.strip_prefix("://"))
            .ok_or_else(err)?;
        let (region, id) = rest.split_once('/').ok_or_else(err)?;
        if region.contains('/') || id.is_empty() || id.contains('/') {
            return Err(err());
        }
        Ok(ProviderId::new(id, Some(region)))
    }
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PROVIDER_NAME}://{}/{}",
            self.region.as_deref().unwrap_or_default(),
            self.server_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_upstream_forms_and_round_trips() -> Result<(), ProviderIdError> {
        let plain = ProviderId::parse("openstack:///9f1b")?;
        assert_eq!(
            (plain.region.as_deref(), plain.server_id.as_str()),
            (None, "9f1b")
        );
        assert_eq!(plain.to_string(), "openstack:///9f1b");
        let regional = ProviderId::parse("openstack://RegionOne/9f1b")?;
        assert_eq!(regional.region.as_deref(), Some("RegionOne"));
        assert_eq!(regional.to_string(), "openstack://RegionOne/9f1b");
        // k/k#85731: the scheme-less forms.
        assert_eq!(ProviderId::parse("/9f1b")?, plain);
        assert_eq!(ProviderId::parse("RegionOne/9f1b")?, regional);
        for bad in [
            "",
            "9f1b",
            "aws:///i-1",
            "openstack://",
            "openstack:///",
            "openstack:///a/b",
            "openstack://r/a/b",
        ] {
            assert!(ProviderId::parse(bad).is_err(), "{bad}");
        }
        Ok(())
    }
}
