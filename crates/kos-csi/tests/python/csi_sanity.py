#!/usr/bin/env python3
"""CSI sanity cases against a driver's unix socket, with a client generated from the CSI spec's own
csi.proto by grpcio-tools (nothing of kos's is used on this side).

The cases follow kubernetes-csi/csi-test's sanity suite (pkg/sanity: identity.go, controller.go,
node.go) for what a driver without a real node can show: required fields, idempotency,
NOT_FOUND / ALREADY_EXISTS / ABORTED semantics, capabilities, and a publish to the node the
driver names. Prints one line per case and "N passed, M failed"; exits 1 if any failed.

Usage: csi_sanity.py --socket PATH --proto-dir DIR --work DIR
"""

import argparse
import sys
import uuid

PASSED, FAILED = [], []


def case(name):
    """Runs the decorated function at once, as one named case; later cases run whatever it did."""

    def run(fn):
        try:
            fn()
            PASSED.append(name)
            print(f"ok   {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next case runs
            FAILED.append(name)
            print(f"FAIL {name}: {e!r}", flush=True)

    return run


def generate(proto_dir, work):
    from grpc_tools import protoc  # noqa: PLC0415
    import grpc_tools  # noqa: PLC0415
    import os  # noqa: PLC0415

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{proto_dir}",
            f"-I{include}",
            f"--python_out={work}",
            f"--grpc_python_out={work}",
            "csi.proto",
        ]
    )
    if rc != 0:
        raise SystemExit(f"protoc failed: {rc}")
    sys.path.insert(0, work)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    generate(a.proto_dir, a.work)
    import grpc  # noqa: PLC0415
    import csi_pb2 as pb  # noqa: PLC0415
    import csi_pb2_grpc as rpc  # noqa: PLC0415

    # grpc C-core (1.57 on) sends the socket path as :authority, which HTTP/2 servers built on h2
    # (tonic: kos-csi) refuse with PROTOCOL_ERROR; grpc-go, which the kubelet and the CSI sidecars
    # use, sends "localhost". Say it as they do.
    ch = grpc.insecure_channel(
        f"unix://{a.socket}", options=[("grpc.default_authority", "localhost")]
    )
    ids = rpc.IdentityStub(ch)
    ctl = rpc.ControllerStub(ch)
    node = rpc.NodeStub(ch)
    C = grpc.StatusCode
    GIB = 1 << 30
    unique = uuid.uuid4().hex[:8]
    missing_id = "00000000-0000-0000-0000-000000000000"

    def cap(mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER):
        return pb.VolumeCapability(
            mount=pb.VolumeCapability.MountVolume(fs_type="ext4"),
            access_mode=pb.VolumeCapability.AccessMode(mode=mode),
        )

    def expect(code, call, *args):
        try:
            call(*args)
        except grpc.RpcError as e:
            if e.code() != code:
                raise AssertionError(f"want {code}, got {e.code()}: {e.details()}") from None
            return
        raise AssertionError(f"want {code}, got OK")

    def create(name, size=GIB):
        return ctl.CreateVolume(
            pb.CreateVolumeRequest(
                name=name,
                capacity_range=pb.CapacityRange(required_bytes=size),
                volume_capabilities=[cap()],
            )
        ).volume

    made = []

    @case("Identity: GetPluginInfo names the driver and a version")
    def _():
        r = ids.GetPluginInfo(pb.GetPluginInfoRequest())
        assert r.name == "cinder.csi.openstack.org", r.name
        assert r.vendor_version, "no vendor_version"

    @case("Identity: GetPluginCapabilities lists the controller service")
    def _():
        r = ids.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest())
        svc = [c.service.type for c in r.capabilities if c.HasField("service")]
        assert pb.PluginCapability.Service.CONTROLLER_SERVICE in svc, svc

    @case("Identity: Probe answers")
    def _():
        ids.Probe(pb.ProbeRequest())

    @case("Controller: capabilities are known RPC types")
    def _():
        r = ctl.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest())
        types = {c.rpc.type for c in r.capabilities}
        want = {
            pb.ControllerServiceCapability.RPC.CREATE_DELETE_VOLUME,
            pb.ControllerServiceCapability.RPC.PUBLISH_UNPUBLISH_VOLUME,
            pb.ControllerServiceCapability.RPC.LIST_VOLUMES,
        }
        assert want <= types, types
        assert pb.ControllerServiceCapability.RPC.UNKNOWN not in types

    @case("CreateVolume: no name is INVALID_ARGUMENT")
    def _():
        expect(C.INVALID_ARGUMENT, ctl.CreateVolume,
               pb.CreateVolumeRequest(volume_capabilities=[cap()]))

    @case("CreateVolume: no capabilities is INVALID_ARGUMENT")
    def _():
        expect(C.INVALID_ARGUMENT, ctl.CreateVolume,
               pb.CreateVolumeRequest(name=f"sanity-nocap-{unique}"))

    @case("CreateVolume: without a capacity range")
    def _():
        v = ctl.CreateVolume(pb.CreateVolumeRequest(
            name=f"sanity-nosize-{unique}", volume_capabilities=[cap()])).volume
        made.append(v.volume_id)
        assert v.volume_id and v.capacity_bytes >= 0

    @case("CreateVolume: the same name and size twice is one volume")
    def _():
        a = create(f"sanity-idem-{unique}")
        b = create(f"sanity-idem-{unique}")
        made.append(a.volume_id)
        assert a.volume_id == b.volume_id, (a.volume_id, b.volume_id)
        assert a.capacity_bytes >= GIB

    @case("CreateVolume: the same name, another size is ALREADY_EXISTS")
    def _():
        made.append(create(f"sanity-size-{unique}").volume_id)
        expect(C.ALREADY_EXISTS, create, f"sanity-size-{unique}", 2 * GIB)

    @case("DeleteVolume: no id is INVALID_ARGUMENT")
    def _():
        expect(C.INVALID_ARGUMENT, ctl.DeleteVolume, pb.DeleteVolumeRequest())

    @case("DeleteVolume: a volume that does not exist succeeds")
    def _():
        ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=missing_id))

    @case("ValidateVolumeCapabilities: missing fields, unknown volume, a known one")
    def _():
        expect(C.INVALID_ARGUMENT, ctl.ValidateVolumeCapabilities,
               pb.ValidateVolumeCapabilitiesRequest(volume_capabilities=[cap()]))
        v = create(f"sanity-validate-{unique}")
        made.append(v.volume_id)
        expect(C.INVALID_ARGUMENT, ctl.ValidateVolumeCapabilities,
               pb.ValidateVolumeCapabilitiesRequest(volume_id=v.volume_id))
        expect(C.NOT_FOUND, ctl.ValidateVolumeCapabilities,
               pb.ValidateVolumeCapabilitiesRequest(volume_id=missing_id, volume_capabilities=[cap()]))
        r = ctl.ValidateVolumeCapabilities(pb.ValidateVolumeCapabilitiesRequest(
            volume_id=v.volume_id, volume_capabilities=[cap()]))
        assert r.HasField("confirmed"), r

    @case("ListVolumes: pages of max_entries reach every volume")
    def _():
        for i in range(3):
            made.append(create(f"sanity-list-{i}-{unique}").volume_id)
        seen, token, pages = [], "", 0
        while True:
            r = ctl.ListVolumes(pb.ListVolumesRequest(max_entries=2, starting_token=token))
            assert len(r.entries) <= 2, len(r.entries)
            seen += [e.volume.volume_id for e in r.entries]
            pages += 1
            if not r.next_token:
                break
            token = r.next_token
        assert set(made) <= set(seen), (made, seen)
        assert len(seen) == len(set(seen)), "duplicates"
        assert pages >= 2, pages

    @case("ListVolumes: an invalid starting token is ABORTED")
    def _():
        expect(C.ABORTED, ctl.ListVolumes,
               pb.ListVolumesRequest(max_entries=1, starting_token="not-a-token"))

    info = {}

    @case("Node: NodeGetInfo names the node")
    def _():
        r = node.NodeGetInfo(pb.NodeGetInfoRequest())
        assert r.node_id, r
        info["id"] = r.node_id

    @case("Node: capabilities are known RPC types")
    def _():
        r = node.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest())
        types = {c.rpc.type for c in r.capabilities}
        assert pb.NodeServiceCapability.RPC.STAGE_UNSTAGE_VOLUME in types, types

    @case("ControllerPublishVolume: missing fields, unknown volume and node")
    def _():
        v = made[0]
        nid = info.get("id", "x")
        expect(C.INVALID_ARGUMENT, ctl.ControllerPublishVolume,
               pb.ControllerPublishVolumeRequest(node_id=nid, volume_capability=cap()))
        expect(C.INVALID_ARGUMENT, ctl.ControllerPublishVolume,
               pb.ControllerPublishVolumeRequest(volume_id=v, volume_capability=cap()))
        expect(C.INVALID_ARGUMENT, ctl.ControllerPublishVolume,
               pb.ControllerPublishVolumeRequest(volume_id=v, node_id=nid))
        expect(C.NOT_FOUND, ctl.ControllerPublishVolume,
               pb.ControllerPublishVolumeRequest(volume_id=missing_id, node_id=nid, volume_capability=cap()))
        expect(C.NOT_FOUND, ctl.ControllerPublishVolume,
               pb.ControllerPublishVolumeRequest(volume_id=v, node_id=missing_id, volume_capability=cap()))

    @case("ControllerPublishVolume: publish, again, unpublish, again")
    def _():
        v = made[0]
        req = pb.ControllerPublishVolumeRequest(volume_id=v, node_id=info["id"], volume_capability=cap())
        a = ctl.ControllerPublishVolume(req)
        b = ctl.ControllerPublishVolume(req)
        assert dict(a.publish_context) == dict(b.publish_context), (a, b)
        expect(C.FAILED_PRECONDITION, ctl.DeleteVolume, pb.DeleteVolumeRequest(volume_id=v))
        un = pb.ControllerUnpublishVolumeRequest(volume_id=v, node_id=info["id"])
        ctl.ControllerUnpublishVolume(un)
        ctl.ControllerUnpublishVolume(un)

    @case("ControllerUnpublishVolume: no volume id is INVALID_ARGUMENT")
    def _():
        expect(C.INVALID_ARGUMENT, ctl.ControllerUnpublishVolume,
               pb.ControllerUnpublishVolumeRequest(node_id="x"))

    @case("Node: stage/publish/unpublish/unstage without required fields are INVALID_ARGUMENT")
    def _():
        st = "/var/lib/kubelet/plugins/kubernetes.io/csi/x/globalmount"
        tp = "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/v/mount"
        expect(C.INVALID_ARGUMENT, node.NodeStageVolume,
               pb.NodeStageVolumeRequest(staging_target_path=st, volume_capability=cap()))
        expect(C.INVALID_ARGUMENT, node.NodeStageVolume,
               pb.NodeStageVolumeRequest(volume_id="v", volume_capability=cap()))
        expect(C.INVALID_ARGUMENT, node.NodeStageVolume,
               pb.NodeStageVolumeRequest(volume_id="v", staging_target_path=st))
        expect(C.INVALID_ARGUMENT, node.NodePublishVolume,
               pb.NodePublishVolumeRequest(staging_target_path=st, target_path=tp, volume_capability=cap()))
        expect(C.INVALID_ARGUMENT, node.NodePublishVolume,
               pb.NodePublishVolumeRequest(volume_id="v", staging_target_path=st, volume_capability=cap()))
        expect(C.INVALID_ARGUMENT, node.NodePublishVolume,
               pb.NodePublishVolumeRequest(volume_id="v", staging_target_path=st, target_path=tp))
        expect(C.INVALID_ARGUMENT, node.NodeUnpublishVolume,
               pb.NodeUnpublishVolumeRequest(target_path=tp))
        expect(C.INVALID_ARGUMENT, node.NodeUnstageVolume,
               pb.NodeUnstageVolumeRequest(volume_id="v"))

    @case("NodeGetVolumeStats: a path that does not exist is NOT_FOUND")
    def _():
        expect(C.NOT_FOUND, node.NodeGetVolumeStats, pb.NodeGetVolumeStatsRequest(
            volume_id="v", volume_path="/var/lib/kubelet/pods/none/volumes/x/mount"))

    @case("DeleteVolume: every volume made, twice")
    def _():
        for v in made:
            ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=v))
            ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=v))

    print(f"{len(PASSED)} passed, {len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
