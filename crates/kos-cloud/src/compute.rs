//! Nova facade: flavors, keypairs, server groups, servers, volume attachments, limits.
//!
//! Microversions: servers, flavors, attachments and limits at 2.79 (tags, description, BDMv2 with
//! `volume_type`, `delete_on_termination` on attachments; the embedded flavor); keypairs at 2.92 (the
//! public key is required, Nova no longer generates keys); server groups at 2.64 (one `policy` + `rules`).

use serde_json::json;
use tokio::time::Instant;

use crate::error::CloudError;
use crate::model::TagQuery;
use crate::model::compute::{
    AvailabilityZone, ComputeLimits, Flavor, Keypair, KeypairCreate, Server, ServerCreate,
    ServerCreated, ServerGroup, ServerGroupCreate, ServerStatus, VolumeAttach, VolumeAttachment,
};
use crate::paging::util::{body, exactly_one, fetch, found, gone, run};
use crate::paging::wait::{self, Step};
use crate::request::{ApiRequest, ServiceKind};
use crate::session::Session;

const SVC: ServiceKind = ServiceKind::Compute;
const MV_SERVER: &str = "2.79";
const MV_KEYPAIR: &str = "2.92";
const MV_GROUP: &str = "2.64";

/// Nova, through one session. Cheap to make: `session.compute()`.
#[derive(Debug, Clone, Copy)]
pub struct ComputeApi<'a> {
    session: &'a Session,
    page_size: Option<u32>,
}

impl Session {
    pub fn compute(&self) -> ComputeApi<'_> {
        ComputeApi {
            session: self,
            page_size: None,
        }
    }
}

fn get(op: &'static str, path: impl Into<String>, mv: &'static str) -> ApiRequest {
    ApiRequest::get(SVC, op, path).microversion(mv)
}

impl ComputeApi<'_> {
    /// Lists ask for pages of `n` (default: the service's own page size).
    pub fn page_size(self, n: u32) -> Self {
        ComputeApi {
            page_size: Some(n),
            ..self
        }
    }

    // ------------------------------------------------------------ flavors

    pub async fn list_flavors(&self) -> Result<Vec<Flavor>, CloudError> {
        self.session
            .list_all(
                get("flavor.list", "flavors/detail", MV_SERVER),
                "flavors",
                self.page_size,
            )
            .await
    }

    /// `None` when there is no such flavor.
    pub async fn get_flavor(&self, id: &str) -> Result<Option<Flavor>, CloudError> {
        found(
            fetch(
                self.session,
                get("flavor.get", format!("flavors/{id}"), MV_SERVER),
                "flavor",
            )
            .await,
        )
    }

    /// The one flavor whose id or name is `name_or_id`.
    pub async fn find_flavor(&self, name_or_id: &str) -> Result<Flavor, CloudError> {
        let all = self.list_flavors().await?;
        let by_id: Vec<Flavor> = all.iter().filter(|f| f.id == name_or_id).cloned().collect();
        let matches = if by_id.is_empty() {
            all.into_iter().filter(|f| f.name == name_or_id).collect()
        } else {
            by_id
        };
        exactly_one(
            matches,
            || format!("flavor '{name_or_id}'"),
            |f| f.id.as_str(),
            "pass an id",
        )
    }

    // ------------------------------------------------------------ keypairs

    pub async fn create_keypair(&self, req: &KeypairCreate) -> Result<Keypair, CloudError> {
        let r = ApiRequest::post(SVC, "keypair.create", "os-keypairs", body("keypair", req)?)
            .microversion(MV_KEYPAIR);
        fetch(self.session, r, "keypair").await
    }

    pub async fn get_keypair(&self, name: &str) -> Result<Option<Keypair>, CloudError> {
        found(
            fetch(
                self.session,
                get("keypair.get", format!("os-keypairs/{name}"), MV_KEYPAIR),
                "keypair",
            )
            .await,
        )
    }

    pub async fn list_keypairs(&self) -> Result<Vec<Keypair>, CloudError> {
        #[derive(serde::Deserialize)]
        struct Item {
            keypair: Keypair,
        }
        let items: Vec<Item> = self
            .session
            .list_all(
                get("keypair.list", "os-keypairs", MV_KEYPAIR),
                "keypairs",
                self.page_size,
            )
            .await?;
        Ok(items.into_iter().map(|i| i.keypair).collect())
    }

    /// Deletes; a keypair that is already gone is fine.
    pub async fn delete_keypair(&self, name: &str) -> Result<(), CloudError> {
        gone(
            run(
                self.session,
                ApiRequest::delete(SVC, "keypair.delete", format!("os-keypairs/{name}"))
                    .microversion(MV_KEYPAIR),
            )
            .await,
        )
    }

    // ------------------------------------------------------------ server groups

    pub async fn create_server_group(
        &self,
        req: &ServerGroupCreate,
    ) -> Result<ServerGroup, CloudError> {
        let r = ApiRequest::post(
            SVC,
            "server_group.create",
            "os-server-groups",
            body("server_group", req)?,
        )
        .microversion(MV_GROUP);
        fetch(self.session, r, "server_group").await
    }

    pub async fn get_server_group(&self, id: &str) -> Result<Option<ServerGroup>, CloudError> {
        found(
            fetch(
                self.session,
                get(
                    "server_group.get",
                    format!("os-server-groups/{id}"),
                    MV_GROUP,
                ),
                "server_group",
            )
            .await,
        )
    }

    /// The project's server groups (Nova pages these by offset without next links: one call for up to
    /// the service's max_limit, 1000 by default).
    pub async fn list_server_groups(&self) -> Result<Vec<ServerGroup>, CloudError> {
        self.session
            .list_all(
                get("server_group.list", "os-server-groups", MV_GROUP),
                "server_groups",
                None,
            )
            .await
    }

    pub async fn delete_server_group(&self, id: &str) -> Result<(), CloudError> {
        gone(
            run(
                self.session,
                ApiRequest::delete(SVC, "server_group.delete", format!("os-server-groups/{id}"))
                    .microversion(MV_GROUP),
            )
            .await,
        )
    }

    // ------------------------------------------------------------ servers

    /// Starts a server build (202). Checks user_data size and tags before sending.
    ///
    /// Errors: [`CloudError::Ambiguous`] if the create may have happened: look the server up by name
    /// or tag before trying again.
    pub async fn create_server(&self, req: &ServerCreate) -> Result<ServerCreated, CloudError> {
        let r = ApiRequest::post(SVC, "server.create", "servers", req.to_body()?)
            .microversion(MV_SERVER);
        fetch(self.session, r, "server").await
    }

    /// `None` when there is no such server.
    pub async fn get_server(&self, id: &str) -> Result<Option<Server>, CloudError> {
        found(
            fetch(
                self.session,
                get("server.get", format!("servers/{id}"), MV_SERVER),
                "server",
            )
            .await,
        )
    }

    /// Servers with these tags, with details, all pages.
    pub async fn list_servers(&self, tags: &TagQuery) -> Result<Vec<Server>, CloudError> {
        let mut r = get("server.list", "servers/detail", MV_SERVER);
        r.query.extend(tags.to_query());
        self.session.list_all(r, "servers", self.page_size).await
    }

    /// The servers named exactly `name` (Nova filters names by regular expression: the name is
    /// anchored and escaped, and the answer checked again here).
    pub async fn list_servers_named(&self, name: &str) -> Result<Vec<Server>, CloudError> {
        let mut r = get("server.list", "servers/detail", MV_SERVER);
        r.query
            .push(("name".into(), format!("^{}$", regex_quote(name))));
        let all: Vec<Server> = self.session.list_all(r, "servers", self.page_size).await?;
        Ok(all.into_iter().filter(|s| s.name == name).collect())
    }

    /// Adds one tag to a server (already there: nothing changes).
    pub async fn add_server_tag(&self, id: &str, tag: &str) -> Result<(), CloudError> {
        run(
            self.session,
            ApiRequest::put_empty(
                SVC,
                "server.tag",
                format!(
                    "servers/{id}/tags/{}",
                    crate::model::common::path_segment(tag)
                ),
            )
            .microversion(MV_SERVER)
            .idempotent(true),
        )
        .await
    }

    /// Takes one tag off a server (not there, or the server gone: nothing changes).
    pub async fn remove_server_tag(&self, id: &str, tag: &str) -> Result<(), CloudError> {
        gone(
            run(
                self.session,
                ApiRequest::delete(
                    SVC,
                    "server.untag",
                    format!(
                        "servers/{id}/tags/{}",
                        crate::model::common::path_segment(tag)
                    ),
                )
                .microversion(MV_SERVER),
            )
            .await,
        )
    }

    /// Starts the delete (204); a server that is already gone is fine.
    pub async fn delete_server(&self, id: &str) -> Result<(), CloudError> {
        gone(
            run(
                self.session,
                ApiRequest::delete(SVC, "server.delete", format!("servers/{id}"))
                    .microversion(MV_SERVER),
            )
            .await,
        )
    }

    /// Polls until ACTIVE. ERROR ends the wait with Nova's fault message; so does the server vanishing.
    pub async fn wait_for_server_active(
        &self,
        id: &str,
        deadline: Instant,
    ) -> Result<Server, CloudError> {
        let what = format!("server {id}");
        let what = what.as_str();
        let this = *self;
        wait::until(what, deadline, move || async move {
            let Some(s) = this.get_server(id).await? else {
                return Err(CloudError::Failed {
                    what: what.to_owned(),
                    detail: "disappeared while waiting for ACTIVE".into(),
                });
            };
            match &s.status {
                ServerStatus::Active => Ok(Step::Done(s)),
                ServerStatus::Error => Err(CloudError::Failed {
                    what: format!("server {} ({id})", s.name),
                    detail: format!(
                        "went to ERROR: {}",
                        s.fault
                            .as_ref()
                            .map_or("no fault message", |f| f.message.as_str())
                    ),
                }),
                other => Ok(Step::Pending(other.to_string())),
            }
        })
        .await
    }

    /// The last `lines` lines of the console log (all of it for `None`).
    pub async fn console_output(&self, id: &str, lines: Option<u32>) -> Result<String, CloudError> {
        let r = ApiRequest::post(
            SVC,
            "server.console_output",
            format!("servers/{id}/action"),
            json!({"os-getConsoleOutput": {"length": lines}}),
        )
        .microversion(MV_SERVER)
        .idempotent(true);
        fetch(self.session, r, "output").await
    }

    pub async fn stop_server(&self, id: &str) -> Result<(), CloudError> {
        self.action(id, "server.stop", json!({"os-stop": null}))
            .await
    }

    pub async fn start_server(&self, id: &str) -> Result<(), CloudError> {
        self.action(id, "server.start", json!({"os-start": null}))
            .await
    }

    async fn action(
        &self,
        id: &str,
        op: &'static str,
        b: serde_json::Value,
    ) -> Result<(), CloudError> {
        run(
            self.session,
            ApiRequest::post(SVC, op, format!("servers/{id}/action"), b).microversion(MV_SERVER),
        )
        .await
    }

    // ------------------------------------------------------------ volume attachments

    pub async fn attach_volume(
        &self,
        server_id: &str,
        req: &VolumeAttach,
    ) -> Result<VolumeAttachment, CloudError> {
        let r = ApiRequest::post(
            SVC,
            "server.volume.attach",
            format!("servers/{server_id}/os-volume_attachments"),
            body("volumeAttachment", req)?,
        )
        .microversion(MV_SERVER);
        fetch(self.session, r, "volumeAttachment").await
    }

    /// Starts the detach (202); an attachment that is already gone is fine.
    pub async fn detach_volume(&self, server_id: &str, volume_id: &str) -> Result<(), CloudError> {
        let r = ApiRequest::delete(
            SVC,
            "server.volume.detach",
            format!("servers/{server_id}/os-volume_attachments/{volume_id}"),
        )
        .microversion(MV_SERVER);
        gone(run(self.session, r).await)
    }

    pub async fn list_volume_attachments(
        &self,
        server_id: &str,
    ) -> Result<Vec<VolumeAttachment>, CloudError> {
        let r = get(
            "server.volume.list",
            format!("servers/{server_id}/os-volume_attachments"),
            MV_SERVER,
        );
        fetch(self.session, r, "volumeAttachments").await
    }

    // ------------------------------------------------------------ availability zones

    /// The compute zones a server may be put in (`os-availability-zone`, the non-admin view).
    pub async fn availability_zones(&self) -> Result<Vec<AvailabilityZone>, CloudError> {
        fetch(
            self.session,
            get("availability_zone.list", "os-availability-zone", MV_SERVER),
            "availabilityZoneInfo",
        )
        .await
    }

    // ------------------------------------------------------------ limits

    /// Absolute limits with the project's current usage.
    pub async fn limits(&self) -> Result<ComputeLimits, CloudError> {
        #[derive(serde::Deserialize)]
        struct Limits {
            absolute: ComputeLimits,
        }
        let l: Limits = fetch(
            self.session,
            get("limits.get", "limits", MV_SERVER),
            "limits",
        )
        .await?;
        Ok(l.absolute)
    }
}

/// `s` as a regular expression that matches only itself (Python `re` and Go `regexp.QuoteMeta`
/// agree on these metacharacters).
fn regex_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn regex_quote_escapes_metacharacters() {
        assert_eq!(super::regex_quote("kos-a.cp-0"), "kos-a\\.cp-0");
        assert_eq!(super::regex_quote("a+b(c)"), "a\\+b\\(c\\)");
    }
}
