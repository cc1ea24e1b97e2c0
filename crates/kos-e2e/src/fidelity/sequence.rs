//! The recorded sequence: what kos does to a cloud (create, read, list with tag filters, wait for
//! states, delete) plus the error cases kos must recognise (bad auth, duplicate fixed IP, floating IP
//! without a router interface, deleting an in-use network, security group and attached volume,
//! mutating a PENDING load balancer, over-quota). A step whose prerequisite failed is skipped, which
//! shows up as `<step>/missing`. Everything is made with the run's prefix and cleaned up by
//! [`Ctx::guarded`] whatever happens.

use std::time::Duration;

use anyhow::{Context as _, Result};
use kos_cloud::ServiceKind::{BlockStorage, Compute, Identity, LoadBalancer, Network};
use kos_cloud::{ApiRequest, Session};
use serde_json::{Value, json};

use super::record::{Recorder, Recording, Track};
use crate::scenarios::PUBLIC_KEY;
use crate::{Cleanup, Ctx, Made, RUN_KEY};

const MV_SERVER: &str = "2.79";
const MV_VOLUME: &str = "3.60";

/// Runs the sequence on `ctx`'s cloud; `target` names it in the report.
pub async fn record(ctx: &Ctx, target: &str) -> Result<Recording> {
    let mut r = Recorder::new(ctx, target);
    ctx.guarded(async |made| steps(&mut r, made).await)
        .await
        .with_context(|| format!("recording on {target}"))?;
    Ok(r.rec)
}

fn id(v: &Option<Value>) -> Option<String> {
    v.as_ref()?.get("id")?.as_str().map(str::to_owned)
}

fn str_of<'v>(v: &'v Option<Value>, field: &str) -> Option<&'v str> {
    v.as_ref()?.get(field)?.as_str()
}

async fn steps(r: &mut Recorder<'_>, made: &mut Cleanup) -> Result<()> {
    let ctx = r.ctx;
    let run = &ctx.run;
    let tag = run.tag();

    // ---------------------------------------------------------------- identity
    if let Some(p) = ctx.bad_password_profile() {
        let res = Session::connect(&p).await;
        r.outcome("auth.bad_password", &res);
    }
    let creds = format!("users/{}/application_credentials", ctx.session.user_id());
    let body = json!({"application_credential": {"name": run.name("ac")}});
    let ac = r
        .call(
            "application_credential.create",
            ApiRequest::post(Identity, "application_credential.create", &creds, body),
            Some("application_credential"),
            &["unrestricted"],
        )
        .await;
    if let Some(ac) = id(&ac) {
        made.push(Made::AppCredential(ac.clone()));
        let req = ApiRequest::delete(
            Identity,
            "application_credential.delete",
            format!("{creds}/{ac}"),
        );
        r.call("application_credential.delete", req, None, &[])
            .await;
    }

    // ---------------------------------------------------------------- network, subnet, tags, lists
    let body = json!({"network": {"name": run.name("net")}});
    let net = r
        .call(
            "network.create",
            ApiRequest::post(Network, "network.create", "networks", body),
            Some("network"),
            &["status", "tags"],
        )
        .await;
    let Some(net) = id(&net) else { return Ok(()) };
    made.push(Made::Network(net.clone()));
    let tags = json!({"tags": [tag]});
    let req = ApiRequest::put(
        Network,
        "network.tags",
        format!("networks/{net}/tags"),
        tags.clone(),
    );
    r.call("network.tags.replace", req, None, &["tags"]).await;
    let body = json!({"subnet": {"network_id": net, "name": run.name("subnet"), "cidr": "10.249.0.0/24", "ip_version": 4}});
    let sub = r
        .call(
            "subnet.create",
            ApiRequest::post(Network, "subnet.create", "subnets", body),
            Some("subnet"),
            &["gateway_ip", "allocation_pools", "enable_dhcp", "tags"],
        )
        .await;
    let Some(sub) = id(&sub) else { return Ok(()) };
    made.push(Made::Subnet(sub.clone()));
    let req = ApiRequest::put(
        Network,
        "subnet.tags",
        format!("subnets/{sub}/tags"),
        tags.clone(),
    );
    r.call("subnet.tags.replace", req, None, &["tags"]).await;
    let list = || ApiRequest::get(Network, "network.list", "networks");
    r.list("network.list.tags", list().query("tags", tag), "networks")
        .await;
    let any = format!("{tag},kos-e2e-absent");
    r.list(
        "network.list.tags_any",
        list().query("tags-any", any),
        "networks",
    )
    .await;
    let not = list().query("name", run.name("net")).query("not-tags", tag);
    r.list("network.list.not_tags", not, "networks").await;
    let req = ApiRequest::get(Network, "subnet.list", "subnets").query("tags", tag);
    r.list("subnet.list.tags", req, "subnets").await;

    // ---------------------------------------------------------------- security groups
    let body = json!({"security_group": {"name": run.name("sg"), "description": "kos-e2e"}});
    let sg = r
        .call(
            "security_group.create",
            ApiRequest::post(Network, "security_group.create", "security-groups", body),
            Some("security_group"),
            &["stateful"],
        )
        .await;
    let Some(sg) = id(&sg) else { return Ok(()) };
    made.push(Made::SecurityGroup(sg.clone()));
    let rule = json!({"security_group_rule": {
        "security_group_id": sg, "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
        "port_range_min": 6443, "port_range_max": 6443, "remote_group_id": sg}});
    let req = || {
        ApiRequest::post(
            Network,
            "security_group_rule.create",
            "security-group-rules",
            rule.clone(),
        )
    };
    r.call(
        "security_group_rule.create.remote_group",
        req(),
        Some("security_group_rule"),
        &["protocol", "direction"],
    )
    .await;
    r.call(
        "security_group_rule.create.duplicate",
        req(),
        Some("security_group_rule"),
        &[],
    )
    .await;

    // ---------------------------------------------------------------- ports
    let fixed = json!([{"subnet_id": sub, "ip_address": "10.249.0.10"}]);
    let body = json!({"port": {"network_id": net, "name": run.name("port"), "fixed_ips": fixed,
        "allowed_address_pairs": [{"ip_address": "10.96.0.0/12"}], "security_groups": [sg], "tags": [tag]}});
    let port = r
        .call(
            "port.create",
            ApiRequest::post(Network, "port.create", "ports", body),
            Some("port"),
            &[
                "status",
                "tags",
                "device_owner",
                "admin_state_up",
                "port_security_enabled",
            ],
        )
        .await;
    let Some(port) = id(&port) else { return Ok(()) };
    made.push(Made::Port(port.clone()));
    let req = ApiRequest::put(
        Network,
        "port.tags",
        format!("ports/{port}/tags"),
        tags.clone(),
    );
    r.call("port.tags.replace", req, None, &["tags"]).await;
    let req = ApiRequest::get(Network, "port.get", format!("ports/{port}"));
    r.call("port.get", req, Some("port"), &["tags", "status"])
        .await;
    let req = ApiRequest::get(Network, "port.list", "ports").query("tags", tag);
    r.list("port.list.tags", req, "ports").await;
    let body = json!({"port": {"network_id": net, "name": run.name("dup"), "fixed_ips": fixed}});
    let dup = r
        .call(
            "port.create.duplicate_ip",
            ApiRequest::post(Network, "port.create", "ports", body),
            Some("port"),
            &[],
        )
        .await;
    if let Some(dup) = id(&dup) {
        made.push(Made::Port(dup));
    }
    let req = ApiRequest::delete(
        Network,
        "security_group.delete",
        format!("security-groups/{sg}"),
    );
    r.call("security_group.delete.in_use", req, None, &[]).await;
    let req = ApiRequest::delete(Network, "network.delete", format!("networks/{net}"));
    r.call("network.delete.in_use", req, None, &[]).await;

    // ---------------------------------------------------------------- floating IP and router
    let ext = ctx.external_network().await?;
    let body =
        json!({"floatingip": {"floating_network_id": ext.id, "description": run.name("fip")}});
    let fip = r
        .call(
            "floatingip.create",
            ApiRequest::post(Network, "floating_ip.create", "floatingips", body),
            Some("floatingip"),
            &["status", "port_id", "router_id"],
        )
        .await;
    let Some(fip) = id(&fip) else { return Ok(()) };
    made.push(Made::FloatingIp(fip.clone()));
    let assoc = json!({"floatingip": {"port_id": port}});
    let req = || {
        ApiRequest::put(
            Network,
            "floating_ip.associate",
            format!("floatingips/{fip}"),
            assoc.clone(),
        )
    };
    r.call(
        "floatingip.associate.no_router",
        req(),
        Some("floatingip"),
        &[],
    )
    .await;
    let body = json!({"router": {"name": run.name("router"), "external_gateway_info": {"network_id": ext.id}}});
    let router = r
        .call(
            "router.create",
            ApiRequest::post(Network, "router.create", "routers", body),
            Some("router"),
            &["status", "admin_state_up"],
        )
        .await;
    let Some(router) = id(&router) else {
        return Ok(());
    };
    made.push(Made::Router(router.clone()));
    let iface = json!({"subnet_id": sub});
    let add = ApiRequest::put(
        Network,
        "router.interface.add",
        format!("routers/{router}/add_router_interface"),
        iface.clone(),
    );
    r.call("router.interface.add", add, None, &[]).await;
    made.push(Made::RouterInterface {
        router: router.clone(),
        subnet: sub.clone(),
    });
    r.call(
        "floatingip.associate",
        req(),
        Some("floatingip"),
        &["status"],
    )
    .await;
    let get_fip = ApiRequest::get(Network, "floating_ip.get", format!("floatingips/{fip}"));
    let t = Track::new("floatingip", "status", &["ACTIVE"])
        .only_final()
        .patience(Duration::from_secs(20));
    r.track("floatingip.states.associated", &get_fip, t).await;

    // ---------------------------------------------------------------- compute
    let body =
        json!({"keypair": {"name": run.name("key"), "public_key": PUBLIC_KEY, "type": "ssh"}});
    let kp = r
        .call(
            "keypair.create",
            ApiRequest::post(Compute, "keypair.create", "os-keypairs", body).microversion("2.92"),
            Some("keypair"),
            &["type"],
        )
        .await;
    let kp = str_of(&kp, "name").map(str::to_owned);
    if let Some(kp) = &kp {
        made.push(Made::Keypair(kp.clone()));
    }
    let body = json!({"server_group": {"name": run.name("group"), "policy": "anti-affinity"}});
    let group = r
        .call(
            "server_group.create",
            ApiRequest::post(Compute, "server_group.create", "os-server-groups", body)
                .microversion("2.64"),
            Some("server_group"),
            &["policy", "rules", "members"],
        )
        .await;
    let group = id(&group);
    if let Some(g) = &group {
        made.push(Made::ServerGroup(g.clone()));
    }
    let body = json!({"port": {"network_id": net, "name": run.name("vm-port")}});
    let vm_port = r
        .call(
            "port.create.plain",
            ApiRequest::post(Network, "port.create", "ports", body),
            Some("port"),
            &["status"],
        )
        .await;
    let Some(vm_port) = id(&vm_port) else {
        return Ok(());
    };
    made.push(Made::Port(vm_port.clone()));
    let (flavor, image) = (ctx.flavor().await?, ctx.image().await?);
    let mut body = json!({"server": {"name": run.name("vm"), "flavorRef": flavor.id, "imageRef": image.id,
        "networks": [{"port": vm_port}], "tags": [tag], "metadata": {"role": "e2e"}}});
    if let Some(kp) = &kp {
        body["server"]["key_name"] = json!(kp);
    }
    if let Some(g) = &group {
        body["OS-SCH-HNT:scheduler_hints"] = json!({"group": g});
    }
    let server = r
        .call(
            "server.create",
            ApiRequest::post(Compute, "server.create", "servers", body).microversion(MV_SERVER),
            Some("server"),
            &[],
        )
        .await;
    let Some(server) = id(&server) else {
        return Ok(());
    };
    made.push(Made::Server(server.clone()));
    let get_server =
        ApiRequest::get(Compute, "server.get", format!("servers/{server}")).microversion(MV_SERVER);
    r.track(
        "server.states.create",
        &get_server,
        Track::new("server", "status", &["ACTIVE", "ERROR"]),
    )
    .await;
    let fields = [
        "status",
        "tags",
        "metadata",
        "OS-EXT-STS:vm_state",
        "OS-EXT-STS:task_state",
        "OS-EXT-STS:power_state",
    ];
    r.call("server.get", get_server.clone(), Some("server"), &fields)
        .await;
    let req = ApiRequest::get(Compute, "server.list", "servers/detail")
        .microversion(MV_SERVER)
        .query("tags", tag);
    r.list("server.list.tags", req, "servers").await;
    let get_vm_port = ApiRequest::get(Network, "port.get", format!("ports/{vm_port}"));
    let t = Track::new("port", "status", &["ACTIVE"])
        .only_final()
        .patience(Duration::from_secs(30));
    r.track("port.states.bound", &get_vm_port, t).await;
    r.call(
        "port.get.bound",
        get_vm_port,
        Some("port"),
        &["status", "device_owner"],
    )
    .await;
    let req = ApiRequest::get(
        Compute,
        "server.get",
        "servers/00000000-0000-4000-8000-000000000000",
    )
    .microversion(MV_SERVER);
    r.call("server.get.missing", req, Some("server"), &[]).await;

    // ---------------------------------------------------------------- volumes
    let quotas = ctx.session.block_storage().quotas().await?;
    let limit = quotas.get("gigabytes").map_or(-1, |q| q.limit);
    let too_big = if limit >= 0 { limit + 1 } else { 1_000_000 };
    let body = json!({"volume": {"size": too_big, "name": run.name("too-big"), "metadata": {RUN_KEY: run.prefix}}});
    let big = r
        .call(
            "volume.create.over_quota",
            ApiRequest::post(BlockStorage, "volume.create", "volumes", body)
                .microversion(MV_VOLUME),
            Some("volume"),
            &[],
        )
        .await;
    if let Some(big) = id(&big) {
        made.push(Made::Volume(big));
    }
    let body =
        json!({"volume": {"size": 1, "name": run.name("vol"), "metadata": {RUN_KEY: run.prefix}}});
    let vol = r
        .call(
            "volume.create",
            ApiRequest::post(BlockStorage, "volume.create", "volumes", body)
                .microversion(MV_VOLUME),
            Some("volume"),
            &["status", "size", "bootable", "attachments"],
        )
        .await;
    let first = str_of(&vol, "status").map(str::to_owned);
    let Some(vol) = id(&vol) else { return Ok(()) };
    made.push(Made::Volume(vol.clone()));
    let get_vol = ApiRequest::get(BlockStorage, "volume.get", format!("volumes/{vol}"))
        .microversion(MV_VOLUME);
    let t = Track::new("volume", "status", &["available", "error"]).first(first.as_deref());
    r.track("volume.states.create", &get_vol, t).await;
    r.call(
        "volume.get",
        get_vol.clone(),
        Some("volume"),
        &["status", "bootable", "multiattach", "encrypted"],
    )
    .await;
    let meta = json!({RUN_KEY: run.prefix}).to_string();
    let req = ApiRequest::get(BlockStorage, "volume.list", "volumes/detail")
        .microversion(MV_VOLUME)
        .query("metadata", meta);
    r.list("volume.list.metadata", req, "volumes").await;
    let body = json!({"volumeAttachment": {"volumeId": vol}});
    let path = format!("servers/{server}/os-volume_attachments");
    let att = r
        .call(
            "volume.attach",
            ApiRequest::post(Compute, "server.volume.attach", &path, body).microversion(MV_SERVER),
            Some("volumeAttachment"),
            &[],
        )
        .await;
    if att.is_some() {
        made.push(Made::VolumeAttachment {
            server: server.clone(),
            volume: vol.clone(),
        });
        let t = Track::new("volume", "status", &["in-use", "error"]).only_final();
        r.track("volume.states.attach", &get_vol, t).await;
        let req = ApiRequest::delete(BlockStorage, "volume.delete", format!("volumes/{vol}"))
            .microversion(MV_VOLUME);
        r.call("volume.delete.attached", req, None, &[]).await;
        let req = ApiRequest::delete(Compute, "server.volume.detach", format!("{path}/{vol}"))
            .microversion(MV_SERVER);
        r.call("volume.detach", req, None, &[]).await;
        let t = Track::new("volume", "status", &["available", "error"]).only_final();
        r.track("volume.states.detach", &get_vol, t).await;
    }

    // ---------------------------------------------------------------- load balancer
    let body =
        json!({"loadbalancer": {"name": run.name("lb"), "vip_subnet_id": sub, "tags": [tag]}});
    let lb = r
        .call(
            "loadbalancer.create",
            ApiRequest::post(
                LoadBalancer,
                "loadbalancer.create",
                "lbaas/loadbalancers",
                body,
            ),
            Some("loadbalancer"),
            &["provisioning_status", "operating_status", "tags"],
        )
        .await;
    let first = str_of(&lb, "provisioning_status").map(str::to_owned);
    let Some(lb) = id(&lb) else { return Ok(()) };
    made.push(Made::LoadBalancer(lb.clone()));
    let listener = json!({"listener": {"loadbalancer_id": lb, "name": run.name("listener"), "protocol": "TCP", "protocol_port": 6443}});
    let req = || {
        ApiRequest::post(
            LoadBalancer,
            "listener.create",
            "lbaas/listeners",
            listener.clone(),
        )
    };
    // Straight after the create, the LB is PENDING_CREATE: immutable.
    r.call("listener.create.pending_lb", req(), Some("listener"), &[])
        .await;
    let get_lb = ApiRequest::get(
        LoadBalancer,
        "loadbalancer.get",
        format!("lbaas/loadbalancers/{lb}"),
    );
    let settle = || Track::new("loadbalancer", "provisioning_status", &["ACTIVE", "ERROR"]);
    r.track(
        "loadbalancer.states.create",
        &get_lb,
        settle().first(first.as_deref()),
    )
    .await;
    let settled = r
        .call(
            "loadbalancer.get",
            get_lb.clone(),
            Some("loadbalancer"),
            &["provisioning_status", "tags"],
        )
        .await;
    // What the load balancer put on the user's network: its VIP port, and (amphora provider) the
    // amphora's own port, another project's, which the network's owner sees next to the server's.
    if let Some(vip_port) = str_of(&settled, "vip_port_id") {
        let get = ApiRequest::get(Network, "port.get", format!("ports/{vip_port}"));
        r.call(
            "port.get.vip",
            get,
            Some("port"),
            &["admin_state_up", "status", "device_owner"],
        )
        .await;
    }
    let ports = ApiRequest::get(Network, "port.list", "ports")
        .query("network_id", &net)
        .query("device_owner", "compute:nova");
    r.list("port.list.compute_owned", ports, "ports").await;
    let list = ApiRequest::get(LoadBalancer, "loadbalancer.list", "lbaas/loadbalancers")
        .query("tags", tag);
    r.list("loadbalancer.list.tags", list, "loadbalancers")
        .await;
    let listener = r
        .call(
            "listener.create",
            req(),
            Some("listener"),
            &["provisioning_status", "operating_status"],
        )
        .await;
    r.track("loadbalancer.states.listener", &get_lb, settle())
        .await;
    if let Some(listener) = id(&listener) {
        let body = json!({"pool": {"listener_id": listener, "name": run.name("pool"), "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}});
        let pool = r
            .call(
                "pool.create",
                ApiRequest::post(LoadBalancer, "pool.create", "lbaas/pools", body),
                Some("pool"),
                &["provisioning_status"],
            )
            .await;
        r.track("loadbalancer.states.pool", &get_lb, settle().only_final())
            .await;
        if let Some(pool) = id(&pool) {
            let body = json!({"healthmonitor": {"pool_id": pool, "type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}});
            r.call(
                "healthmonitor.create",
                ApiRequest::post(
                    LoadBalancer,
                    "healthmonitor.create",
                    "lbaas/healthmonitors",
                    body,
                ),
                Some("healthmonitor"),
                &["provisioning_status"],
            )
            .await;
            r.track(
                "loadbalancer.states.healthmonitor",
                &get_lb,
                settle().only_final(),
            )
            .await;
            let members: Vec<Value> = ["10.249.0.21", "10.249.0.22"]
                .iter()
                .map(|ip| json!({"address": ip, "protocol_port": 6443, "subnet_id": sub}))
                .collect();
            let path = format!("lbaas/pools/{pool}/members");
            let req = ApiRequest::put(
                LoadBalancer,
                "member.replace",
                &path,
                json!({"members": members}),
            );
            r.call("member.replace", req, None, &[]).await;
            r.track(
                "loadbalancer.states.members",
                &get_lb,
                settle().only_final(),
            )
            .await;
            r.list(
                "member.list",
                ApiRequest::get(LoadBalancer, "member.list", &path),
                "members",
            )
            .await;
        }
    }
    let req = ApiRequest::get(
        LoadBalancer,
        "loadbalancer.status",
        format!("lbaas/loadbalancers/{lb}/status"),
    );
    r.call("loadbalancer.status_tree", req, Some("statuses"), &[])
        .await;
    let req = ApiRequest::delete(
        LoadBalancer,
        "loadbalancer.delete",
        format!("lbaas/loadbalancers/{lb}"),
    )
    .query("cascade", "true");
    r.call("loadbalancer.delete.cascade", req, None, &[]).await;
    r.track(
        "loadbalancer.states.delete",
        &get_lb,
        Track::new("loadbalancer", "provisioning_status", &[]),
    )
    .await;

    // ---------------------------------------------------------------- teardown, recorded
    let req = ApiRequest::delete(Compute, "server.delete", format!("servers/{server}"))
        .microversion(MV_SERVER);
    r.call("server.delete", req, None, &[]).await;
    r.track(
        "server.states.delete",
        &get_server,
        Track::new("server", "status", &[]).only_final(),
    )
    .await;
    let req = ApiRequest::delete(BlockStorage, "volume.delete", format!("volumes/{vol}"))
        .microversion(MV_VOLUME);
    r.call("volume.delete", req, None, &[]).await;
    r.track(
        "volume.states.delete",
        &get_vol,
        Track::new("volume", "status", &[]).only_final(),
    )
    .await;
    if let Some(kp) = &kp {
        let req = ApiRequest::delete(Compute, "keypair.delete", format!("os-keypairs/{kp}"))
            .microversion("2.92");
        r.call("keypair.delete", req, None, &[]).await;
    }
    if let Some(g) = &group {
        let req = ApiRequest::delete(
            Compute,
            "server_group.delete",
            format!("os-server-groups/{g}"),
        )
        .microversion("2.64");
        r.call("server_group.delete", req, None, &[]).await;
    }
    let del = |op: &'static str, path: String| ApiRequest::delete(Network, op, path);
    r.call(
        "floatingip.delete",
        del("floating_ip.delete", format!("floatingips/{fip}")),
        None,
        &[],
    )
    .await;
    let rm = ApiRequest::put(
        Network,
        "router.interface.remove",
        format!("routers/{router}/remove_router_interface"),
        iface,
    );
    r.call("router.interface.remove", rm, None, &[]).await;
    r.call(
        "router.delete",
        del("router.delete", format!("routers/{router}")),
        None,
        &[],
    )
    .await;
    r.call(
        "port.delete",
        del("port.delete", format!("ports/{port}")),
        None,
        &[],
    )
    .await;
    let req = ApiRequest::get(Network, "port.get", format!("ports/{vm_port}"));
    r.call(
        "port.get.after_server_delete",
        req,
        Some("port"),
        &["status", "device_owner"],
    )
    .await;
    r.call(
        "port.delete.vm_port",
        del("port.delete", format!("ports/{vm_port}")),
        None,
        &[],
    )
    .await;
    r.call(
        "security_group.delete",
        del("security_group.delete", format!("security-groups/{sg}")),
        None,
        &[],
    )
    .await;
    // The dup port (if the cloud wrongly made it) still holds the network: cleanup handles it.
    if dup.is_none() {
        r.call(
            "subnet.delete",
            del("subnet.delete", format!("subnets/{sub}")),
            None,
            &[],
        )
        .await;
        r.call(
            "network.delete",
            del("network.delete", format!("networks/{net}")),
            None,
            &[],
        )
        .await;
        let req = ApiRequest::get(Network, "network.get", format!("networks/{net}"));
        r.call("network.get.deleted", req, Some("network"), &[])
            .await;
    }
    Ok(())
}
