"""The kubelet's other DRA service version, ``v1beta1.DRAPlugin``, against our daemon.

Our daemon lists ``v1.DRAPlugin`` first and the 1.35 kubelet takes the first it supports, so on its
own it never calls v1beta1. Here the daemon's registration socket is in a directory the kubelet does
not watch (``--kubelet-registrar-directory-path``), and the test serves a registration socket in the
kubelet's registry that names our real DRA socket but offers only ``v1beta1.DRAPlugin`` (and forwards
the kubelet's verdict to the daemon). Everything after registration, Prepare and Unprepare included,
is the real kubelet talking v1beta1 to our daemon.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from tests.integration.daemon import DaemonProcess, accepts
from tests.kubelet.pods import (
    DRIVER,
    container_env,
    delete_our_slices,
    delete_pod,
    our_slices,
    specs,
    start_fake_claim_pod,
    wait_for,
)
from tests.kubelet_pb.pluginregistration import api_pb2 as reg_pb2
from tests.kubelet_pb.pluginregistration import api_pb2_grpc as reg_grpc

pytestmark = pytest.mark.kubelet


class V1beta1Registration(reg_grpc.RegistrationServicer):
    """GetInfo naming the daemon's DRA socket with ``v1beta1.DRAPlugin`` only; the status goes to the daemon."""

    def __init__(self, daemon: DaemonProcess, daemon_registration: str) -> None:
        self.daemon = daemon
        self.channel = grpc.insecure_channel(f"unix://{daemon_registration}")
        self.statuses: list[reg_pb2.RegistrationStatus] = []
        #: the kubelet log's size before this socket appeared.
        self.log_offset = 0

    def GetInfo(self, request, context):
        return reg_pb2.PluginInfo(type="DRAPlugin", name=DRIVER, endpoint=str(self.daemon.dra_socket),
                                  supported_versions=["v1beta1.DRAPlugin"])

    def NotifyRegistrationStatus(self, request, context):
        self.statuses.append(request)
        reg_grpc.RegistrationStub(self.channel).NotifyRegistrationStatus(request, timeout=5)
        return reg_pb2.RegistrationStatusResponse()


@pytest.fixture(scope="module")
def beta_daemon(node, kubelet_cp) -> Iterator[tuple[DaemonProcess, V1beta1Registration]]:
    delete_our_slices(kubelet_cp, node.node_name)
    hidden = node.workdir.parent / "hidden-registry"
    hidden.mkdir(exist_ok=True)
    d = DaemonProcess(node.kubelet_root, node=node.node_name, kubeconfig=kubelet_cp.kubeconfig,
                      extra_args=("--kubelet-registrar-directory-path", str(hidden), "--health-interval", "0.2"))
    d.start(wait=False)
    server = None
    proxy = node.kubelet_root / "plugins_registry" / f"{DRIVER}-v1beta1-reg.sock"
    try:
        own = hidden / f"{DRIVER}-reg.sock"
        wait_for(lambda: accepts(own), "the daemon's own registration socket", within=20)
        registration = V1beta1Registration(d, str(own))
        registration.log_offset = node.kubelet_log.stat().st_size  # the kubelet logs the choice at once
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        reg_grpc.add_RegistrationServicer_to_server(registration, server)
        server.add_insecure_port(f"unix://{proxy}")
        server.start()
        yield d, registration
    finally:
        if server is not None:
            server.stop(grace=None).wait()
            registration.channel.close()
            proxy.unlink(missing_ok=True)
        d.stop()


def test_the_kubelet_prepares_and_unprepares_through_v1beta1(node, beta_daemon, classes, namespace):
    d, registration = beta_daemon
    cp = node.cp
    wait_for(lambda: registration.statuses, "the kubelet's NotifyRegistrationStatus", within=30)
    assert [s.plugin_registered for s in registration.statuses] == [True], registration.statuses
    with open(node.kubelet_log, "rb") as f:
        f.seek(registration.log_offset)
        log = f.read().decode(errors="replace")
    assert 'chosenService="v1beta1.DRAPlugin"' in log, log[-3000:]
    wait_for(lambda: "registered with the kubelet" in d.log_text(), "the daemon told", within=10)
    wait_for(lambda: our_slices(cp, node.node_name), "slices published", within=30)
    _, claim = start_fake_claim_pod(cp, namespace, "beta")
    uid = claim["metadata"]["uid"]
    assert container_env(cp, namespace, "beta")["FAKE_NPU_AICORE_LIMIT"] == "40"
    assert [s for s in specs(node.cdi_dir) if uid in s.name]
    delete_pod(cp, namespace, "beta")
    wait_for(lambda: not [s for s in specs(node.cdi_dir) if uid in s.name], "spec removed (v1beta1 Unprepare)",
             within=30)
